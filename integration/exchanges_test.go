package integration

import (
	"slices"
	"sort"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

type routeBinding struct {
	queue string // queue suffix, see TestExchangeRouting
	key   string
	args  amqp.Table
}

type routeMsg struct {
	key     string
	headers amqp.Table
	want    []string // queue suffixes that must receive it
}

func TestExchangeRouting(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name     string
		kind     string
		bindings []routeBinding
		msgs     []routeMsg
	}{
		{
			name:     "direct",
			kind:     "direct",
			bindings: []routeBinding{{"a", "red", nil}, {"b", "green", nil}, {"c", "red", nil}, {"c", "blue", nil}},
			msgs: []routeMsg{
				{key: "red", want: []string{"a", "c"}},
				{key: "green", want: []string{"b"}},
				{key: "blue", want: []string{"c"}},
				{key: "black", want: nil},
				{key: "", want: nil},
			},
		},
		{
			name:     "fanout ignores keys",
			kind:     "fanout",
			bindings: []routeBinding{{"a", "x", nil}, {"b", "", nil}},
			msgs:     []routeMsg{{key: "anything", want: []string{"a", "b"}}, {key: "", want: []string{"a", "b"}}},
		},
		{
			name: "topic",
			kind: "topic",
			bindings: []routeBinding{
				{"a", "*.orange.*", nil}, {"b", "*.*.rabbit", nil}, {"b", "lazy.#", nil},
				{"c", "#", nil}, {"d", "a.#.z", nil}, {"e", "*", nil}, {"f", "x.*.#", nil},
			},
			msgs: []routeMsg{
				{key: "quick.orange.rabbit", want: []string{"a", "b", "c"}},
				{key: "lazy.orange.elephant", want: []string{"a", "b", "c"}},
				{key: "quick.orange.fox", want: []string{"a", "c"}},
				{key: "lazy.brown.fox", want: []string{"b", "c"}},
				{key: "lazy.pink.rabbit", want: []string{"b", "c"}}, // matches two bindings of b, delivered once
				{key: "quick.brown.fox", want: []string{"c"}},
				{key: "orange", want: []string{"c", "e"}},
				{key: "quick.orange.male.rabbit", want: []string{"c"}},
				{key: "lazy", want: []string{"b", "c", "e"}},
				{key: "a.z", want: []string{"c", "d"}},
				{key: "a.b.c.z", want: []string{"c", "d"}},
				{key: "x", want: []string{"c", "e"}},
				{key: "x.y", want: []string{"c", "f"}},
				{key: "x.y.z.w", want: []string{"c", "f"}},
				{key: "", want: []string{"c"}},
			},
		},
		{
			name: "headers",
			kind: "headers",
			bindings: []routeBinding{
				{"all", "", amqp.Table{"x-match": "all", "format": "pdf", "type": "report"}},
				{"any", "", amqp.Table{"x-match": "any", "format": "pdf", "type": "report"}},
				{"default", "", amqp.Table{"format": "pdf", "type": "report"}}, // x-match defaults to all
				{"allx", "", amqp.Table{"x-match": "all-with-x", "x-tenant": "t1", "format": "pdf"}},
				{"anyx", "", amqp.Table{"x-match": "any-with-x", "x-tenant": "t1"}},
				{"allplain", "", amqp.Table{"x-match": "all", "x-tenant": "t1"}}, // x- keys ignored by all: matches everything
			},
			msgs: []routeMsg{
				{headers: amqp.Table{"format": "pdf", "type": "report"}, want: []string{"all", "any", "default", "allplain"}},
				{headers: amqp.Table{"format": "pdf"}, want: []string{"any", "allplain"}},
				{headers: amqp.Table{"type": "report", "format": "zip"}, want: []string{"any", "allplain"}},
				{headers: amqp.Table{"format": "pdf", "x-tenant": "t1"}, want: []string{"any", "allx", "anyx", "allplain"}},
				{headers: amqp.Table{"x-tenant": "t1"}, want: []string{"anyx", "allplain"}},
				{headers: amqp.Table{"format": "pdf", "type": "report", "x-tenant": "t2"}, want: []string{"all", "any", "default", "allplain"}},
				{headers: nil, want: []string{"allplain"}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ch := e.channel()
			x := e.exchange(ch, e.name("x-"+tc.kind), tc.kind, nil)
			queues := map[string]string{}
			for _, b := range tc.bindings {
				if queues[b.queue] == "" {
					queues[b.queue] = e.queue(ch, "", nil)
				}
				bind(t, ch, queues[b.queue], b.key, x, b.args)
			}
			for i, m := range tc.msgs {
				body := string(rune('A' + i))
				publish(t, ch, x, m.key, amqp.Publishing{Headers: m.headers, Body: []byte(body)})
				var got []string
				for suffix, q := range queues {
					bs := getBodies(t, ch, q)
					if len(bs) > 1 {
						t.Errorf("message %d (key %q headers %v): queue %s got %d copies, want at most 1", i, m.key, m.headers, suffix, len(bs))
					}
					if len(bs) > 0 {
						got = append(got, suffix)
					}
				}
				sort.Strings(got)
				want := slices.Clone(m.want)
				sort.Strings(want)
				if !slices.Equal(got, want) {
					t.Errorf("message %d (key %q headers %v): routed to %v, want %v", i, m.key, m.headers, got, want)
				}
			}
		})
	}
}

func TestDefaultExchange(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	q := e.queue(ch, "", nil)
	publishBody(t, ch, "", q, "hello")
	if got := getBodies(t, ch, q); !slices.Equal(got, []string{"hello"}) {
		t.Fatalf("got %v, want [hello]", got)
	}
	// Explicit bindings to the default exchange are refused.
	err := ch.QueueBind(q, "other", "", false, nil)
	wantCode(t, err, amqp.AccessRefused)
}

func TestPredeclaredExchanges(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	for _, x := range []struct{ name, kind string }{
		{"amq.direct", "direct"}, {"amq.fanout", "fanout"}, {"amq.topic", "topic"},
		{"amq.headers", "headers"}, {"amq.match", "headers"},
	} {
		t.Run(x.name, func(t *testing.T) {
			ch := openChannel(t, c)
			defer ch.Close()
			if err := ch.ExchangeDeclarePassive(x.name, x.kind, true, false, false, false, nil); err != nil {
				t.Fatalf("passive declare: %v", err)
			}
			// Redeclaring with the same properties is allowed.
			if err := ch.ExchangeDeclare(x.name, x.kind, true, false, false, false, nil); err != nil {
				t.Fatalf("redeclare: %v", err)
			}
			q := e.queue(ch, "", nil)
			args := amqp.Table(nil)
			if x.kind == "headers" {
				args = amqp.Table{"k": "v"}
			}
			bind(t, ch, q, "rk", x.name, args)
			publish(t, ch, x.name, "rk", amqp.Publishing{Headers: amqp.Table{"k": "v"}, Body: []byte("m")})
			if got := getBodies(t, ch, q); !slices.Equal(got, []string{"m"}) {
				t.Fatalf("got %v, want [m]", got)
			}
		})
	}
	t.Run("amq. prefix reserved", func(t *testing.T) {
		ch := openChannel(t, c)
		err := ch.ExchangeDeclare("amq.mine", "direct", false, false, false, false, nil)
		wantCode(t, err, amqp.AccessRefused)
	})
}

func TestExchangeDeclarePassive(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	ch := openChannel(t, c)
	x := e.exchange(ch, e.name("passive"), "topic", nil)
	if err := ch.ExchangeDeclarePassive(x, "topic", false, false, false, false, nil); err != nil {
		t.Fatalf("passive declare of existing exchange: %v", err)
	}
	if e.exchangeExists(c, e.name("missing")) {
		t.Fatal("passive declare of a missing exchange succeeded, want 404")
	}
	// Redeclaring with another type is a precondition failure.
	ch2 := openChannel(t, c)
	err := ch2.ExchangeDeclare(x, "fanout", false, false, false, false, nil)
	wantCode(t, err, amqp.PreconditionFailed)
}

func TestExchangeAutoDelete(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	ch := openChannel(t, c)
	x := e.name("autodel")
	if err := ch.ExchangeDeclare(x, "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	e.cleanupExchange(x)
	if !e.exchangeExists(c, x) {
		t.Fatal("auto-delete exchange without bindings vanished, want it kept until its last binding goes")
	}
	q1, q2 := e.queue(ch, "", nil), e.queue(ch, "", nil)
	bind(t, ch, q1, "a", x, nil)
	bind(t, ch, q2, "b", x, nil)
	if err := ch.QueueUnbind(q1, "a", x, nil); err != nil {
		t.Fatal(err)
	}
	if !e.exchangeExists(c, x) {
		t.Fatal("exchange deleted while a binding remains")
	}
	// Deleting the queue removes the last binding.
	if _, err := ch.QueueDelete(q2, false, false, false); err != nil {
		t.Fatal(err)
	}
	if e.exchangeExists(c, x) {
		t.Fatal("auto-delete exchange still exists after its last binding went")
	}

	// Exchange-to-exchange: the source is auto-deleted when its last
	// exchange binding goes.
	src, dst := e.name("autodel-src"), e.exchange(ch, e.name("autodel-dst"), "fanout", nil)
	if err := ch.ExchangeDeclare(src, "fanout", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	e.cleanupExchange(src)
	if err := ch.ExchangeBind(dst, "", src, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeUnbind(dst, "", src, false, nil); err != nil {
		t.Fatal(err)
	}
	if e.exchangeExists(c, src) {
		t.Fatal("auto-delete source exchange still exists after its last e2e binding went")
	}
}

func TestInternalExchange(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	ch := openChannel(t, c)
	internal := e.name("internal")
	if err := ch.ExchangeDeclare(internal, "fanout", false, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	e.cleanupExchange(internal)
	public := e.exchange(ch, e.name("public"), "direct", nil)
	q := e.queue(ch, "", nil)
	bind(t, ch, q, "", internal, nil)
	if err := ch.ExchangeBind(internal, "k", public, false, nil); err != nil {
		t.Fatal(err)
	}
	publishBody(t, ch, public, "k", "via-e2e")
	if got := getBodies(t, ch, q); !slices.Equal(got, []string{"via-e2e"}) {
		t.Fatalf("via e2e binding: got %v, want [via-e2e]", got)
	}

	// Publishing to the internal exchange directly closes the channel with 403.
	ch2 := openChannel(t, c)
	closed := ch2.NotifyClose(make(chan *amqp.Error, 1))
	publishNoWait(t, ch2, internal, "", amqp.Publishing{Body: []byte("direct")})
	select {
	case err := <-closed:
		wantCode(t, err, amqp.AccessRefused)
	case <-time.After(waitTimeout):
		t.Fatal("publish to internal exchange: channel not closed, want 403")
	}
	if got := getBodies(t, ch, q); len(got) != 0 {
		t.Fatalf("internal exchange took a direct publish: got %v, want none", got)
	}
}

func TestAlternateExchange(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	ae := e.exchange(ch, e.name("ae"), "fanout", nil)
	x := e.exchange(ch, e.name("with-ae"), "direct", amqp.Table{"alternate-exchange": ae})
	routed, unrouted := e.queue(ch, "", nil), e.queue(ch, "", nil)
	bind(t, ch, routed, "known", x, nil)
	bind(t, ch, unrouted, "", ae, nil)

	returns := ch.NotifyReturn(make(chan amqp.Return, 4))
	publishBody(t, ch, x, "known", "r1")
	if err := ch.PublishWithContext(t.Context(), x, "unknown", true, false, amqp.Publishing{Body: []byte("u1")}); err != nil {
		t.Fatal(err)
	}
	publishBody(t, ch, x, "unknown", "u2")
	if got := getBodies(t, ch, routed); !slices.Equal(got, []string{"r1"}) {
		t.Errorf("routed queue: got %v, want [r1]", got)
	}
	if got := getBodies(t, ch, unrouted); !slices.Equal(got, []string{"u1", "u2"}) {
		t.Errorf("alternate exchange queue: got %v, want [u1 u2]", got)
	}
	select {
	case r := <-returns:
		t.Errorf("got basic.return %d for %q, want none (the AE routed it)", r.ReplyCode, r.Body)
	default:
	}

	// An AE that routes nowhere leaves a mandatory message unroutable.
	if err := ch.QueueUnbind(unrouted, "", ae, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(t.Context(), x, "unknown", true, false, amqp.Publishing{Body: []byte("u3")}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-returns:
		if r.ReplyCode != amqp.NoRoute || string(r.Body) != "u3" {
			t.Errorf("got return %d %q, want 312 for u3", r.ReplyCode, r.Body)
		}
	case <-time.After(waitTimeout):
		t.Error("no basic.return for a message unroutable through the AE")
	}
}

func TestExchangeToExchange(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	top := e.exchange(ch, e.name("e2e-top"), "topic", nil)
	mid := e.exchange(ch, e.name("e2e-mid"), "direct", nil)
	leaf := e.exchange(ch, e.name("e2e-leaf"), "fanout", nil)
	qMid, qLeaf := e.queue(ch, "", nil), e.queue(ch, "", nil)
	if err := ch.ExchangeBind(mid, "orders.*", top, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeBind(leaf, "orders.eu", mid, false, nil); err != nil {
		t.Fatal(err)
	}
	bind(t, ch, qMid, "orders.us", mid, nil)
	bind(t, ch, qLeaf, "", leaf, nil)

	for _, tc := range []struct {
		key            string
		wantMid, wantL int
	}{{"orders.eu", 0, 1}, {"orders.us", 1, 0}, {"orders.asia", 0, 0}, {"billing.eu", 0, 0}} {
		publishBody(t, ch, top, tc.key, tc.key)
		if got := len(getBodies(t, ch, qMid)); got != tc.wantMid {
			t.Errorf("key %s: mid queue got %d, want %d", tc.key, got, tc.wantMid)
		}
		if got := len(getBodies(t, ch, qLeaf)); got != tc.wantL {
			t.Errorf("key %s: leaf queue got %d, want %d", tc.key, got, tc.wantL)
		}
	}

	t.Run("cycle", func(t *testing.T) {
		a := e.exchange(ch, e.name("cycle-a"), "fanout", nil)
		b := e.exchange(ch, e.name("cycle-b"), "fanout", nil)
		c := e.exchange(ch, e.name("cycle-c"), "fanout", nil)
		for _, p := range [][2]string{{a, b}, {b, c}, {c, a}, {b, a}} {
			if err := ch.ExchangeBind(p[1], "", p[0], false, nil); err != nil {
				t.Fatal(err)
			}
		}
		q1, q2 := e.queue(ch, "", nil), e.queue(ch, "", nil)
		bind(t, ch, q1, "", a, nil)
		bind(t, ch, q1, "", c, nil)
		bind(t, ch, q2, "", b, nil)
		for _, x := range []string{a, b, c} {
			publishBody(t, ch, x, "", "via-"+x)
			for _, q := range []string{q1, q2} {
				if got := getBodies(t, ch, q); !slices.Equal(got, []string{"via-" + x}) {
					t.Errorf("publish to %s: queue %s got %v, want exactly one copy", x, q, got)
				}
			}
		}
	})
}

func TestExchangeDeleteIfUnused(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	ch := openChannel(t, c)
	x := e.exchange(ch, e.name("ifunused"), "direct", nil)
	q := e.queue(ch, "", nil)
	bind(t, ch, q, "k", x, nil)
	err := ch.ExchangeDelete(x, true, false)
	wantCode(t, err, amqp.PreconditionFailed)
	ch = openChannel(t, c)
	if !e.exchangeExists(c, x) {
		t.Fatal("exchange deleted by a failed if-unused delete")
	}
	if err := ch.QueueUnbind(q, "k", x, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDelete(x, true, false); err != nil {
		t.Fatalf("if-unused delete of an unused exchange: %v", err)
	}
	if e.exchangeExists(c, x) {
		t.Fatal("exchange still exists after delete")
	}
	// Deleting a missing exchange succeeds.
	if err := ch.ExchangeDelete(x, false, false); err != nil {
		t.Fatalf("delete of a missing exchange: %v", err)
	}

	// A plain delete removes the exchange's bindings too: rebinding to a
	// redeclared exchange of the same name starts empty.
	x2 := e.exchange(ch, e.name("delbind"), "fanout", nil)
	bind(t, ch, q, "", x2, nil)
	if err := ch.ExchangeDelete(x2, false, false); err != nil {
		t.Fatal(err)
	}
	e.exchange(ch, x2, "fanout", nil)
	publishBody(t, ch, x2, "", "after-redeclare")
	if got := getBodies(t, ch, q); len(got) != 0 {
		t.Fatalf("binding survived exchange delete: got %v, want none", got)
	}
}

func TestUnbind(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	x := e.exchange(ch, e.name("unbind"), "headers", nil)
	q := e.queue(ch, "", nil)
	args := amqp.Table{"x-match": "any", "a": "1"}
	bind(t, ch, q, "", x, args)
	bind(t, ch, q, "", x, amqp.Table{"b": "2"})
	publish(t, ch, x, "", amqp.Publishing{Headers: amqp.Table{"a": "1"}, Body: []byte("1")})
	if got := getBodies(t, ch, q); !slices.Equal(got, []string{"1"}) {
		t.Fatalf("before unbind: got %v, want [1]", got)
	}
	// Unbind needs the same arguments; other bindings stay.
	if err := ch.QueueUnbind(q, "", x, args); err != nil {
		t.Fatal(err)
	}
	publish(t, ch, x, "", amqp.Publishing{Headers: amqp.Table{"a": "1"}, Body: []byte("2")})
	publish(t, ch, x, "", amqp.Publishing{Headers: amqp.Table{"b": "2"}, Body: []byte("3")})
	if got := getBodies(t, ch, q); !slices.Equal(got, []string{"3"}) {
		t.Fatalf("after unbind: got %v, want [3]", got)
	}
	// Unbinding a binding that does not exist succeeds.
	if err := ch.QueueUnbind(q, "nope", x, nil); err != nil {
		t.Fatalf("unbind of a missing binding: %v", err)
	}
}
