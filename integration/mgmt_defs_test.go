package integration

// Definitions move between Warren and RabbitMQ (GET /api/definitions on
// one, POST /api/definitions on the other):
//
//   - TestMgmtDefsRabbitToWarren: a representative topology is declared on
//     RabbitMQ under a fresh vhost (exchanges of every type, one internal
//     and one with an alternate exchange, queues with dead-letter
//     arguments, a quorum queue, bindings queue and exchange-to-exchange,
//     with and without arguments, a policy, a user with a password and
//     narrow permissions); checked there; exported; imported into Warren;
//     checked on Warren through the API and through AMQP behaviour
//     (routing through every binding, the alternate exchange, dead
//     lettering, the policy's max-length, the user's password hash and
//     permissions).
//   - TestMgmtDefsWarrenToRabbit: the same topology declared on Warren,
//     exported, imported into RabbitMQ, checked there, and removed
//     (vhost and user) from RabbitMQ.
//
// The full export of the shared RabbitMQ holds other tests' vhosts and
// the guest user: only the test's vhost and user are moved (the file
// format is unchanged; other entries are filtered out), so that an import
// never touches guest or anyone else's state.

import (
	"errors"
	"slices"
	"sort"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// defsTopology is what buildTopology declares.
type defsTopology struct {
	vh, user, pass string
}

func newDefsTopology() defsTopology {
	return defsTopology{vh: mgmtName("defs"), user: mgmtName("defsuser"), pass: "pw-" + randomSuffix()}
}

var defsExchanges = []struct {
	name string
	body map[string]any
}{
	{"d-x", map[string]any{"type": "direct", "durable": true}},
	{"f-x", map[string]any{"type": "fanout", "durable": true}},
	{"t-x", map[string]any{"type": "topic", "durable": true, "arguments": map[string]any{"alternate-exchange": "ae"}}},
	{"h-x", map[string]any{"type": "headers", "durable": true}},
	{"int-x", map[string]any{"type": "topic", "durable": true, "internal": true}},
	{"ae", map[string]any{"type": "fanout", "durable": true}},
	{"dlx", map[string]any{"type": "direct", "durable": true}},
}

var defsQueues = []struct {
	name string
	body map[string]any
}{
	{"work", map[string]any{"durable": true, "arguments": map[string]any{"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dead", "x-message-ttl": 60000, "x-max-length": 100}}},
	{"dead", map[string]any{"durable": true}},
	{"qq", map[string]any{"durable": true, "arguments": map[string]any{"x-queue-type": "quorum", "x-delivery-limit": 5}}},
	{"lazy-q", map[string]any{"durable": true, "arguments": map[string]any{"x-queue-mode": "lazy"}}},
	{"ae-q", map[string]any{"durable": true}},
	{"int-q", map[string]any{"durable": true}},
}

type defsBinding struct {
	src, dtype, dst, key string
	args                 map[string]any
}

var defsBindings = []defsBinding{
	{"d-x", "q", "work", "work", nil},
	{"t-x", "q", "work", "a.*.c", nil},
	{"h-x", "q", "work", "", map[string]any{"x-match": "all", "kind": "k1"}},
	{"f-x", "q", "qq", "", nil},
	{"dlx", "q", "dead", "dead", nil},
	{"ae", "q", "ae-q", "", nil},
	{"d-x", "e", "t-x", "to-topic", nil},
	{"d-x", "e", "int-x", "to-int", map[string]any{"x-note": "e2e with arguments"}},
	{"int-x", "q", "int-q", "#", nil},
}

// buildTopology declares the topology through tg's API.
func buildTopology(t *testing.T, tg *mgmtTarget, top defsTopology) {
	t.Helper()
	tg.ownVhost(t, top.vh)
	tg.must("PUT", "/api/users/"+esc(top.user), map[string]any{"password": top.pass, "tags": "management"}, 201, 204)
	t.Cleanup(func() { tg.do("DELETE", "/api/users/"+esc(top.user), nil) })
	tg.must("PUT", "/api/permissions/"+esc(top.vh)+"/"+esc(top.user), map[string]string{"configure": "^u-", "write": ".*", "read": ".*"}, 201, 204)
	tg.must("PUT", "/api/topic-permissions/"+esc(top.vh)+"/"+esc(top.user), map[string]string{"exchange": "t-x", "write": `^a\.`, "read": ".*"}, 201, 204)
	for _, x := range defsExchanges {
		tg.must("PUT", "/api/exchanges/"+esc(top.vh)+"/"+esc(x.name), x.body, 201, 204)
	}
	for _, q := range defsQueues {
		tg.must("PUT", "/api/queues/"+esc(top.vh)+"/"+esc(q.name), q.body, 201, 204)
	}
	for _, b := range defsBindings {
		body := map[string]any{"routing_key": b.key}
		if b.args != nil {
			body["arguments"] = b.args
		}
		tg.must("POST", "/api/bindings/"+esc(top.vh)+"/e/"+esc(b.src)+"/"+b.dtype+"/"+esc(b.dst), body, 201)
	}
	tg.must("PUT", "/api/policies/"+esc(top.vh)+"/pol", map[string]any{"pattern": "^lazy-", "definition": map[string]any{"max-length": 5}, "apply-to": "queues", "priority": 1}, 201, 204)
}

// exportFor fetches tg's full definitions and keeps only what belongs to
// top's vhost and user.
func exportFor(t *testing.T, tg *mgmtTarget, top defsTopology) map[string]any {
	t.Helper()
	full, ok := tg.getJSON("/api/definitions").(map[string]any)
	if !ok {
		t.Fatalf("[%s] GET /api/definitions: not an object", tg.kind)
	}
	out := map[string]any{}
	for k, v := range full {
		switch k {
		case "vhosts":
			out[k] = toList(findBy(v, "name", top.vh))
		case "users":
			out[k] = toList(findBy(v, "name", top.user))
		case "permissions", "topic_permissions":
			var keep []any
			for _, p := range findBy(v, "vhost", top.vh) {
				if p["user"] == top.user {
					keep = append(keep, p)
				}
			}
			out[k] = orEmpty(keep)
		case "queues", "exchanges", "bindings", "policies", "parameters":
			out[k] = toList(findBy(v, "vhost", top.vh))
		case "global_parameters":
			// cluster-wide (e.g. RabbitMQ's internal_cluster_id): not moved.
		default:
			out[k] = v
		}
	}
	return out
}

func toList(ms []map[string]any) []any {
	out := []any{}
	for _, m := range ms {
		out = append(out, m)
	}
	return out
}

func orEmpty(l []any) []any {
	if l == nil {
		return []any{}
	}
	return l
}

// checkExport checks that an export holds the whole topology.
func checkExport(t *testing.T, kind string, doc map[string]any, top defsTopology) {
	t.Helper()
	count := func(k string) int { l, _ := doc[k].([]any); return len(l) }
	if count("vhosts") != 1 || count("users") != 1 || count("permissions") != 1 || count("topic_permissions") != 1 {
		t.Errorf("[%s] export: %d vhosts, %d users, %d permissions, %d topic permissions for the test's vhost/user; want 1 each",
			kind, count("vhosts"), count("users"), count("permissions"), count("topic_permissions"))
	}
	if u := findBy(doc["users"], "name", top.user); len(u) == 1 && (u[0]["password_hash"] == "" || u[0]["password_hash"] == nil || u[0]["hashing_algorithm"] == nil) {
		t.Errorf("[%s] export: user %s = %s; want password_hash and hashing_algorithm", kind, top.user, jsonString(u[0]))
	}
	if got := names(doc["exchanges"]); len(got) != len(defsExchanges) {
		t.Errorf("[%s] export: exchanges %q, want the %d declared", kind, got, len(defsExchanges))
	}
	if got := names(doc["queues"]); len(got) != len(defsQueues) {
		t.Errorf("[%s] export: queues %q, want the %d declared", kind, got, len(defsQueues))
	}
	// The default-exchange bindings are implicit: not exported.
	if l, _ := doc["bindings"].([]any); len(l) != len(defsBindings) {
		t.Errorf("[%s] export: %d bindings, want %d: %s", kind, len(l), len(defsBindings), jsonString(l))
	}
	if p := findBy(doc["policies"], "name", "pol"); len(p) != 1 {
		t.Errorf("[%s] export: policy pol missing: %s", kind, jsonString(doc["policies"]))
	}
	for _, q := range defsQueues {
		e := findBy(doc["queues"], "name", q.name)
		if len(e) != 1 {
			continue
		}
		wantArgs := q.body["arguments"]
		if wantArgs == nil {
			wantArgs = map[string]any{}
		}
		if e[0]["durable"] != true || !jsonEqual(e[0]["arguments"], wantArgs) {
			t.Errorf("[%s] export: queue %s = %s; want durable with arguments %s", kind, q.name, jsonString(e[0]), jsonString(wantArgs))
		}
	}
}

// checkTopology checks, through tg's API and AMQP, that the topology is
// there and behaves.
func checkTopology(t *testing.T, tg *mgmtTarget, top defsTopology) {
	t.Helper()
	vh := top.vh
	for _, x := range defsExchanges {
		r := tg.do("GET", "/api/exchanges/"+esc(vh)+"/"+esc(x.name), nil)
		if r.status != 200 {
			t.Errorf("[%s] exchange %s: %s", tg.kind, x.name, r)
			continue
		}
		got := r.json(t)
		wantArgs := x.body["arguments"]
		if wantArgs == nil {
			wantArgs = map[string]any{}
		}
		if dig(got, "type") != x.body["type"] || dig(got, "durable") != true || dig(got, "internal") != (x.body["internal"] == true) || !jsonEqual(dig(got, "arguments"), wantArgs) {
			t.Errorf("[%s] exchange %s = %s; want %s", tg.kind, x.name, jsonString(got), jsonString(x.body))
		}
	}
	for _, q := range defsQueues {
		r := tg.do("GET", "/api/queues/"+esc(vh)+"/"+esc(q.name), nil)
		if r.status != 200 {
			t.Errorf("[%s] queue %s: %s", tg.kind, q.name, r)
			continue
		}
		got := r.json(t)
		wantArgs := q.body["arguments"]
		if wantArgs == nil {
			wantArgs = map[string]any{}
		}
		wantType := "classic"
		if q.name == "qq" {
			wantType = "quorum"
		}
		if dig(got, "durable") != true || !jsonEqual(dig(got, "arguments"), wantArgs) || dig(got, "type") != wantType {
			t.Errorf("[%s] queue %s: durable %v type %v arguments %s; want durable %s %s", tg.kind, q.name, dig(got, "durable"), dig(got, "type"), jsonString(dig(got, "arguments")), wantType, jsonString(wantArgs))
		}
	}
	// Bindings, as a set (the default exchange's left out).
	var got []string
	list, _ := tg.getJSON("/api/bindings/" + esc(vh)).([]any)
	for _, b := range list {
		if dig(b, "source") == "" {
			continue
		}
		got = append(got, jsonString([]any{dig(b, "source"), dig(b, "destination_type"), dig(b, "destination"), dig(b, "routing_key"), dig(b, "arguments")}))
	}
	var want []string
	for _, b := range defsBindings {
		dt := map[string]string{"q": "queue", "e": "exchange"}[b.dtype]
		args := b.args
		if args == nil {
			args = map[string]any{}
		}
		want = append(want, jsonString([]any{b.src, dt, b.dst, b.key, args}))
	}
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("[%s] bindings of %s:\n  got  %q\n  want %q", tg.kind, vh, got, want)
	}
	if p := tg.do("GET", "/api/policies/"+esc(vh)+"/pol", nil); p.status != 200 || !jsonEqual(dig(p.json(t), "definition"), map[string]any{"max-length": 5}) || dig(p.json(t), "pattern") != "^lazy-" {
		t.Errorf("[%s] policy pol: %s", tg.kind, p)
	}
	if u := tg.do("GET", "/api/users/"+esc(top.user), nil); u.status != 200 || !jsonEqual(dig(u.json(t), "tags"), []any{"management"}) {
		t.Errorf("[%s] user %s: %s; want tags [management]", tg.kind, top.user, u)
	}
	if p := tg.do("GET", "/api/permissions/"+esc(vh)+"/"+esc(top.user), nil); p.status != 200 || dig(p.json(t), "configure") != "^u-" {
		t.Errorf("[%s] permissions of %s: %s", tg.kind, top.user, p)
	}
	if p := tg.do("GET", "/api/topic-permissions/"+esc(vh)+"/"+esc(top.user), nil); p.status != 200 ||
		!jsonEqual(p.json(t), []any{map[string]any{"user": top.user, "vhost": vh, "exchange": "t-x", "write": `^a\.`, "read": ".*"}}) {
		t.Errorf("[%s] topic permissions of %s: %s", tg.kind, top.user, p)
	}

	// Behaviour, as the imported user (its password hash moved with it).
	conn, err := amqp.Dial(tg.amqpURLFor(top.user, top.pass, vh))
	if err != nil {
		t.Fatalf("[%s] AMQP login as %s (imported password hash): %v", tg.kind, top.user, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	pub := func(ex, key string, headers amqp.Table, body string) {
		t.Helper()
		publish(t, ch, ex, key, amqp.Publishing{Body: []byte(body), Headers: headers})
	}
	pub("d-x", "work", nil, "direct")
	pub("t-x", "a.b.c", nil, "topic")
	pub("h-x", "", amqp.Table{"kind": "k1"}, "headers")
	pub("h-x", "", amqp.Table{"kind": "k2"}, "headers-nomatch")
	pub("f-x", "any", nil, "fanout")
	pub("d-x", "to-topic", nil, "e2e-to-ae") // d-x -> t-x: no match there -> ae -> ae-q
	pub("d-x", "to-int", nil, "e2e-internal")
	for i := 0; i < 7; i++ {
		pub("", "lazy-q", nil, "lazy")
	}
	checkBodies := func(q string, want ...string) {
		t.Helper()
		var got []string
		for {
			d, ok, err := ch.Get(q, true)
			if err != nil {
				t.Fatalf("[%s] basic.get %s: %v", tg.kind, q, err)
			}
			if !ok {
				break
			}
			got = append(got, string(d.Body))
		}
		if !slices.Equal(got, want) {
			t.Errorf("[%s] queue %s holds %q, want %q", tg.kind, q, got, want)
		}
	}
	checkBodies("ae-q", "e2e-to-ae")
	checkBodies("int-q", "e2e-internal")
	checkBodies("qq", "fanout")
	checkBodies("lazy-q", "lazy", "lazy", "lazy", "lazy", "lazy") // policy max-length 5
	// work holds direct, topic, headers: reject them all -> dead.
	tg.apiGet(vh, "work", map[string]any{"count": 10, "ackmode": "reject_requeue_false", "encoding": "auto"})
	if !eventually(func() bool { return tg.amqpCount(t, vh, "dead") == 3 }) {
		t.Errorf("[%s] dead-lettering work -> dlx -> dead: dead holds %d, want 3", tg.kind, tg.amqpCount(t, vh, "dead"))
	}
	checkBodies("dead", "direct", "topic", "headers")
	// The user's configure permission is ^u-.
	if _, err := ch.QueueDeclare("u-mine", false, true, true, false, nil); err != nil {
		t.Errorf("[%s] imported user declaring u-mine (configure ^u-): %v", tg.kind, err)
	}
	_, err = ch.QueueDeclare("not-mine", false, true, false, false, nil)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.AccessRefused {
		t.Errorf("[%s] imported user declaring not-mine: %v, want 403 ACCESS_REFUSED", tg.kind, err)
	}
	// Its topic permission on t-x: write ^a\. ("a.b.c" went through above).
	ch, err = conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Publish("t-x", "z.b", false, false, amqp.Publishing{Body: []byte("refused")}); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.AccessRefused {
			t.Errorf("[%s] publishing z.b to t-x (topic write ^a\\.): %v, want 403 ACCESS_REFUSED", tg.kind, e)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("[%s] publishing z.b to t-x (topic write ^a\\.) was not refused", tg.kind)
	}
}

// importInto posts doc to tg's /api/definitions, after registering the
// removal of the topology's vhost and user.
func importInto(t *testing.T, tg *mgmtTarget, doc map[string]any, top defsTopology) {
	t.Helper()
	t.Cleanup(func() {
		tg.do("DELETE", "/api/vhosts/"+esc(top.vh), nil)
		tg.do("DELETE", "/api/users/"+esc(top.user), nil)
	})
	r := tg.do("POST", "/api/definitions", doc)
	if r.status != 200 && r.status != 201 && r.status != 204 {
		t.Fatalf("[%s] import: %s", tg.kind, r)
	}
	// The importing admin needs permissions to drive the API and AMQP in
	// the new vhost (RabbitMQ grants them to the importer; do not rely on it).
	tg.permit(top.vh, tg.user)
}

func TestMgmtDefsRabbitToWarren(t *testing.T) {
	t.Parallel()
	rb := newMgmtRabbit(t)
	top := newDefsTopology()
	buildTopology(t, rb, top)
	checkTopology(t, rb, top) // the source itself passes the checks
	doc := exportFor(t, rb, top)
	checkExport(t, "rabbitmq", doc, top)
	wt := newMgmtWarren(t)
	importInto(t, wt, doc, top)
	checkTopology(t, wt, top)
}

func TestMgmtDefsWarrenToRabbit(t *testing.T) {
	t.Parallel()
	wt := newMgmtWarren(t)
	top := newDefsTopology()
	buildTopology(t, wt, top)
	checkTopology(t, wt, top)
	doc := exportFor(t, wt, top)
	checkExport(t, "warren", doc, top)
	rb := newMgmtRabbit(t)
	importInto(t, rb, doc, top)
	checkTopology(t, rb, top)
}
