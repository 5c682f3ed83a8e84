package broker

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/warrenmq/warren/amqp"
)

// TestPersistNeverPanics is issue 11 item 1: a definition whose record
// cannot be encoded as JSON made the broker panic (json: unsupported
// value) and exit. Non-finite floats in arguments (only the Go API can
// pass them now) are stored and come back bit for bit; a record that
// still cannot be encoded is an error reply, not a panic.
func TestPersistNeverPanics(t *testing.T) {
	s := newMemStore()
	b := bootT(t, s)
	v := b.VHost("/")
	args := amqp.Table{"x-nan": math.NaN(), "x-inf": math.Inf(1), "x-ninf": float32(math.Inf(-1)),
		"x-deep": amqp.Table{"a": []any{math.NaN()}}}
	if _, _, _, err := v.DeclareQueue(QueueSpec{Name: "q", Durable: true, Args: args}, false); err != nil {
		t.Fatal(err)
	}
	if err := v.DeclareExchange(ExchangeSpec{Name: "x", Kind: KindHeaders, Durable: true, Args: args}, false); err != nil {
		t.Fatal(err)
	}
	if err := v.Bind("x", "q", false, "", amqp.Table{"x-match": "any", "h": math.NaN()}, 0); err != nil {
		t.Fatal(err)
	}
	b2 := bootT(t, s)
	q := b2.VHost("/").Queue("q")
	if q == nil {
		t.Fatal("queue q lost")
	}
	want := string(amqp.AppendTable(nil, args))
	if got := string(amqp.AppendTable(nil, q.Args)); got != want {
		t.Errorf("queue arguments after a restart: %x, want %x", got, want)
	}
	if x := b2.VHost("/").Exchange("x"); x == nil || string(amqp.AppendTable(nil, x.Args)) != want {
		t.Errorf("exchange after a restart: %+v", x)
	}
	if n := len(b2.VHost("/").Exchange("x").bindings); n != 1 {
		t.Errorf("%d bindings from x after a restart, want 1", n)
	}
}

// TestPersistExactNames is issue 11 item 3: names that are not valid
// UTF-8 (accepted over HTTP, and over AMQP where RabbitMQ's looser check
// lets surrogates through) and names holding NUL bytes persist byte for
// byte, under keys that cannot collide.
func TestPersistExactNames(t *testing.T) {
	s := newMemStore()
	b := bootT(t, s)
	names := []string{"bad\xff", "bad\xfe", "bad\ufffd", "sur\xed\xa0\x80", "nul\x00x", "one\x01", "a\x00q\x00b"}
	for _, vh := range []string{"v\xff", "v\x00w", "v"} {
		v := b.AddVHost(vh)
		b.PutUser("u"+vh, "pw", nil)
		if err := b.SetPermissions(vh, "u"+vh, Permission{Configure: ".*", Write: ".*", Read: ".*"}); err != nil {
			t.Fatal(err)
		}
		if err := v.SetPolicy(Policy{Name: "p" + vh, Pattern: "^nomatch$", ApplyTo: "queues", Definition: map[string]any{"max-length": 5}}); err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if _, _, _, err := v.DeclareQueue(QueueSpec{Name: n, Durable: true, Args: amqp.Table{"k\xff": "v\xfe" + n}}, false); err != nil {
				t.Fatal(err)
			}
			if err := v.DeclareExchange(ExchangeSpec{Name: "x" + n, Kind: KindTopic, Durable: true}, false); err != nil {
				t.Fatal(err)
			}
			if err := v.Bind("x"+n, n, false, n, nil, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Two bindings whose parts joined with NUL would be the same key:
	// source "ya\x00q\x00b" to queue "c" and source "ya" to queue "b\x00q\x00c".
	v := b.VHost("v")
	for _, n := range []string{"c", "b\x00q\x00c"} {
		if _, _, _, err := v.DeclareQueue(QueueSpec{Name: n, Durable: true}, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range []string{"ya", "ya\x00q\x00b"} {
		if err := v.DeclareExchange(ExchangeSpec{Name: x, Kind: KindDirect, Durable: true}, false); err != nil {
			t.Fatal(err)
		}
	}
	must(t, v.Bind("ya\x00q\x00b", "c", false, "k", nil, 0))
	must(t, v.Bind("ya", "b\x00q\x00c", false, "k", nil, 0))
	must(t, v.Unbind("ya\x00q\x00b", "c", false, "k", nil, 0))
	// Deleting vhost "v" must not touch the records of "v\x00w".
	snapshot := func(b *Broker) map[string]any {
		out := map[string]any{}
		for _, vh := range b.VHosts() {
			v := b.VHost(vh)
			for _, q := range v.Queues() {
				out["q "+vh+"/"+q.Name] = string(amqp.AppendTable(nil, q.Args))
			}
			for _, x := range v.Exchanges() {
				out["x "+vh+"/"+x.Name] = x.Kind
			}
			for _, bi := range v.Bindings() {
				out["b "+vh+"/"+bi.Source+"/"+bi.Destination+"/"+bi.RoutingKey] = true
			}
			for _, p := range v.Policies() {
				out["p "+vh+"/"+p.Name] = p.Pattern
			}
		}
		for _, u := range b.Users() {
			out["u "+u] = true
			for _, vh := range b.VHosts() {
				if p, ok := b.Permissions(vh, u); ok {
					out["perm "+vh+"/"+u] = p
				}
			}
		}
		return out
	}
	before := snapshot(b)
	if before["b v/ya/b\x00q\x00c/k"] != true || before["b v/ya\x00q\x00b/c/k"] != nil {
		t.Fatalf("bindings before the restart: %v", before)
	}
	after := snapshot(bootT(t, s))
	if !reflect.DeepEqual(before, after) {
		for k, w := range before {
			if g, ok := after[k]; !ok || !reflect.DeepEqual(g, w) {
				t.Errorf("after a restart %q = %#v, want %#v", k, g, w)
			}
		}
		for k, g := range after {
			if _, ok := before[k]; !ok {
				t.Errorf("after a restart %q = %#v appeared", k, g)
			}
		}
	}
	b3 := bootT(t, s)
	b3.DeleteVHost("v")
	after = snapshot(bootT(t, s))
	for k := range before {
		_, ok := after[k]
		if strings.HasPrefix(strings.SplitN(k, " ", 2)[1], "v/") || strings.HasPrefix(k, "perm v/") {
			if ok {
				t.Errorf("%q still there after vhost v was deleted", k)
			}
		} else if !ok && !strings.HasPrefix(k, "p v/") {
			t.Errorf("%q lost when vhost v was deleted", k)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestPersistOldKeysMoved: a record written under a key of the form used
// before names were escaped (a name with NUL) is moved to its new key at
// recovery, so that deleting the entity deletes its record (issue 11
// item 3).
func TestPersistOldKeysMoved(t *testing.T) {
	s := newMemStore()
	b := bootT(t, s)
	must(t, b.VHost("/").DeclareExchange(ExchangeSpec{Name: "x", Kind: KindDirect, Durable: true}, false))
	if _, _, _, err := b.VHost("/").DeclareQueue(QueueSpec{Name: "nul\x00q", Durable: true}, false); err != nil {
		t.Fatal(err)
	}
	must(t, b.VHost("/").Bind("x", "nul\x00q", false, "k\x00", nil, 0))
	// Rewrite the records under the old keys (parts joined, not escaped).
	old := map[string]string{
		DefKindQueues:   "/\x00nul\x00q",
		DefKindBindings: strings.Join([]string{"/", "x", "q", "nul\x00q", "k\x00", ""}, "\x00"),
	}
	for kind, ok := range old {
		var keys []string
		for k := range s.data[kind] {
			keys = append(keys, k)
		}
		if len(keys) != 1 || keys[0] == ok {
			t.Fatalf("%s: keys %q", kind, keys)
		}
		v := s.data[kind][keys[0]]
		delete(s.data[kind], keys[0])
		s.data[kind][ok] = v
	}
	b2 := bootT(t, s)
	if b2.VHost("/").Queue("nul\x00q") == nil || len(b2.VHost("/").Exchange("x").bindings) != 1 {
		t.Fatal("records under old keys not recovered")
	}
	for kind, ok := range old {
		if _, still := s.data[kind][ok]; still {
			t.Errorf("%s: record still under its old key", kind)
		}
	}
	if _, err := b2.VHost("/").DeleteQueue("nul\x00q", 0, false, false); err != nil {
		t.Fatal(err)
	}
	b3 := bootT(t, s)
	if b3.VHost("/").Queue("nul\x00q") != nil || len(b3.VHost("/").Exchange("x").bindings) != 0 {
		t.Error("a deleted queue or its binding came back from a record under an old key")
	}
}
