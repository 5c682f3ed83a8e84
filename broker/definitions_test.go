package broker

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/warrenmq/warren/amqp"
)

// testdata/rabbitmq-3.10.8-definitions.json is `rabbitmqctl
// export_definitions` of a RabbitMQ 3.10.8 after creating users wdef-alice
// (password s3cret, tags management and monitoring) and wdef-bob, vhost
// wdef-vh, permissions, a topic permission, a policy, an operator policy,
// three queues (one quorum), exchanges and bindings (one to an internal
// exchange, which RabbitMQ leaves out of the export), keeping only the
// wdef objects.
func importRabbitExport(t *testing.T) *Broker {
	t.Helper()
	f, err := os.Open("testdata/rabbitmq-3.10.8-definitions.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := New(Config{})
	// The binding to the internal exchange wdef.h cannot be applied; as
	// in RabbitMQ, the import stops there. Declare it first, as the
	// document's author would have to.
	b.AddVHost("wdef-vh")
	if err := b.VHost("wdef-vh").DeclareExchange(ExchangeSpec{Name: "wdef.h", Kind: KindHeaders, Durable: true, Internal: true}, false); err != nil {
		t.Fatal(err)
	}
	if err := b.ImportDefinitions(f); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestImportRabbitMQDefinitions(t *testing.T) {
	b := importRabbitExport(t)
	if _, ok := b.Authenticate("wdef-alice", "s3cret"); !ok {
		t.Error("wdef-alice cannot log in with the imported RabbitMQ hash")
	}
	if u := b.User("wdef-alice"); u == nil || !reflect.DeepEqual(u.Tags, []string{"management", "monitoring"}) {
		t.Errorf("wdef-alice: %+v", u)
	}
	if _, ok := b.Authenticate("wdef-bob", "pw2"); !ok {
		t.Error("wdef-bob cannot log in")
	}
	if p, ok := b.Permissions("wdef-vh", "wdef-alice"); !ok || p != (Permission{Configure: "^wdef", Write: ".*", Read: ""}) {
		t.Errorf("permissions: %+v %t", p, ok)
	}
	v := b.VHost("wdef-vh")
	if v == nil {
		t.Fatal("no vhost wdef-vh")
	}
	pols := v.Policies()
	if len(pols) != 1 || pols[0].Name != "wdef-dl" || pols[0].Priority != 3 || pols[0].ApplyTo != "queues" || pols[0].Pattern != `^wdef\.` {
		t.Fatalf("policies: %+v", pols)
	}
	ops := v.OperatorPolicies()
	if len(ops) != 1 || ops[0].Name != "wdef-cap" || ops[0].Definition["max-length"] != int64(1000) {
		t.Fatalf("operator policies: %+v", ops)
	}
	work := v.Queue("wdef.work")
	if work == nil || !work.Durable || work.Args["x-max-length"] != int64(10) || work.Args["x-dead-letter-routing-key"] != "failed" {
		t.Fatalf("wdef.work: %+v", work)
	}
	e := work.Effective()
	wantInt(t, "wdef.work max-length", e.MaxLength, 10)
	wantInt(t, "wdef.work message-ttl from policy", e.MessageTTL, 60000)
	wantStr(t, "wdef.work dlrk", e.DLRK, "failed")
	if qq := v.Queue("wdef.qq"); qq == nil || qq.Config.Type != QueueTypeQuorum {
		t.Errorf("wdef.qq: %+v", qq)
	}
	dlq := v.Queue("wdef.dlq")
	if dlq == nil {
		t.Fatal("no wdef.dlq")
	}
	wantInt(t, "wdef.dlq max-length from the operator policy", dlq.Effective().MaxLength, 1000)
	in := v.Exchange("wdef.in")
	if in == nil || in.Kind != KindTopic || in.Args["alternate-exchange"] != "wdef.dlx" {
		t.Fatalf("wdef.in: %+v", in)
	}
	var got []string
	for _, bi := range v.Bindings() {
		if bi.Source != "" {
			got = append(got, bi.Source+">"+bi.Destination+":"+bi.RoutingKey)
		}
	}
	want := []string{"wdef.dlx>wdef.dlq:failed", "wdef.in>wdef.h:", "wdef.in>wdef.work:work.#"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("bindings: %v, want %v", got, want)
	}
	// The messages route: wdef.in -> wdef.work (topic).
	var r Router
	if _, err := v.Publish(&r, "wdef.in", &Message{Exchange: "wdef.in", RoutingKey: "work.a", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if n, _ := work.Counts(); n != 1 {
		t.Errorf("wdef.work holds %d, want 1", n)
	}
}

// Export, parse back, compare; importing the export into a fresh broker
// and exporting again gives the same document.
func TestExportDefinitionsRoundTrip(t *testing.T) {
	b := importRabbitExport(t)
	var out bytes.Buffer
	if err := b.ExportDefinitions(&out); err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(out.Bytes(), &d); err != nil {
		t.Fatalf("export is not JSON: %v\n%s", err, out.String())
	}
	for _, k := range []string{"rabbit_version", "users", "vhosts", "permissions", "topic_permissions", "parameters",
		"global_parameters", "policies", "queues", "exchanges", "bindings"} {
		if _, ok := d[k]; !ok {
			t.Errorf("export has no %q", k)
		}
	}
	s := out.String()
	for _, want := range []string{`"hashing_algorithm": "rabbit_password_hashing_sha256"`, `"password_hash": "I+xgrdbYENlRU8WbgVPlWvlQhE60evOLif3KjAvTfZbYR3Ww"`,
		`"component": "operator_policy"`, `"destination_type": "queue"`, `"x-max-length": 10`} {
		if !strings.Contains(s, want) {
			t.Errorf("export lacks %s", want)
		}
	}
	if strings.Contains(s, `"amq.direct"`) {
		t.Error("export lists amq.* exchanges")
	}
	// Internal exchanges and their bindings are exported, as RabbitMQ does
	// (integration/mgmt_defs_test.go checks against RabbitMQ).
	if !strings.Contains(s, `"name": "wdef.h"`) || !strings.Contains(s, `"destination": "wdef.h"`) {
		t.Error("export lacks the internal exchange wdef.h or its binding")
	}

	b2 := New(Config{})
	if err := b2.ImportDefinitions(bytes.NewReader(out.Bytes())); err != nil {
		t.Fatal(err)
	}
	var out2 bytes.Buffer
	if err := b2.ExportDefinitions(&out2); err != nil {
		t.Fatal(err)
	}
	if out.String() != out2.String() {
		t.Errorf("re-export differs:\n%s\n---\n%s", out.String(), out2.String())
	}
	if _, ok := b2.Authenticate("wdef-alice", "s3cret"); !ok {
		t.Error("round-tripped user cannot log in")
	}
}

func TestImportDefinitionsVariants(t *testing.T) {
	b := New(Config{})
	doc := `{"users":[{"name":"carol","password":"pw","tags":"administrator, management"}],
	  "vhosts":[{"name":"v2"}],
	  "parameters":[{"vhost":"v2","component":"operator_policy","name":"op","value":{"pattern":".*","definition":{"message-ttl":5},"priority":1,"apply-to":"queues"}},
	                {"vhost":"v2","component":"federation-upstream","name":"up","value":{"uri":"amqp://x"}}],
	  "queues":[{"name":"q","vhost":"v2","arguments":{"x-message-ttl":100,"x-ratio":1.5}}, {"name":"amq.skip","vhost":"v2","arguments":{}}]}`
	if err := b.ImportDefinitions(strings.NewReader(doc)); err != nil {
		t.Fatal(err)
	}
	if u, ok := b.Authenticate("carol", "pw"); !ok || !reflect.DeepEqual(u.Tags, []string{"administrator", "management"}) {
		t.Errorf("carol: %+v %t", u, ok)
	}
	q := b.VHost("v2").Queue("q")
	if q == nil || !q.Durable {
		t.Fatalf("q: %+v (durable by default)", q)
	}
	if q.Args["x-ratio"] != 1.5 || q.Args["x-message-ttl"] != int64(100) {
		t.Errorf("args: %#v", q.Args)
	}
	wantInt(t, "ttl min(op 5, arg 100)", q.Effective().MessageTTL, 5)
	if b.VHost("v2").Queue("amq.skip") != nil {
		t.Error("amq.* queue imported")
	}

	for _, c := range []struct{ doc, want string }{
		{`{"policies":[{"vhost":"/","name":"p","pattern":"^a","definition":{"message-ttl":-1}}]}`, "definitions: policy 'p' in vhost '/': -1 is not a valid message TTL"},
		{`{"queues":[{"name":"q","vhost":"nope"}]}`, "definitions: queue 'q': no vhost 'nope'"},
		{`{"users":[{"name":"m","password_hash":"x","hashing_algorithm":"rabbit_password_hashing_md5"}]}`, "definitions: user 'm': hashing algorithm rabbit_password_hashing_md5 is not supported (only rabbit_password_hashing_sha256)"},
		{`{"queues":[{"name":"bad","vhost":"/","arguments":{"x-max-length":-1}}]}`, "definitions: queue 'bad' in vhost '/': "},
		{`{"bindings":[{"source":"amq.direct","vhost":"/","destination":"missing","destination_type":"queue","routing_key":"k"}]}`, "definitions: binding from 'amq.direct' to 'missing' in vhost '/': "},
	} {
		err := New(Config{}).ImportDefinitions(strings.NewReader(c.doc))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant prefix %q", c.doc, err, c.want)
		}
	}
}

func TestJSONTableConversion(t *testing.T) {
	in := amqp.Table{"s": "x", "i": int32(3), "b": true, "a": []any{"k", int8(1)}, "t": amqp.Table{"n": int64(2)}, "f": 2.5}
	got := tableToJSON(in)
	raw, _ := json.Marshal(got)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	back, err := jsonToTable(m)
	if err != nil {
		t.Fatal(err)
	}
	want := amqp.Table{"s": "x", "i": int64(3), "b": true, "a": []any{"k", int64(1)}, "t": amqp.Table{"n": int64(2)}, "f": 2.5}
	if !reflect.DeepEqual(back, want) {
		t.Errorf("got %#v\nwant %#v", back, want)
	}
}
