package broker

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/clock"
)

// countingClock is a fake clock that counts the timers it has armed and
// the ones still pending (armed, neither fired nor stopped).
type countingClock struct {
	*clock.Fake
	mu      sync.Mutex
	armed   int
	pending int
}

type countedTimer struct {
	c    *countingClock
	t    clock.Timer
	done bool
}

func newCountingClock() *countingClock {
	return &countingClock{Fake: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
}

func (c *countingClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	c.mu.Lock()
	c.armed++
	c.pending++
	c.mu.Unlock()
	t := &countedTimer{c: c}
	t.t = c.Fake.AfterFunc(d, func() {
		if t.finish() {
			f()
		}
	})
	return t
}

func (t *countedTimer) finish() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.done {
		return false
	}
	t.done = true
	t.c.pending--
	return true
}

func (t *countedTimer) Stop() bool {
	if !t.t.Stop() {
		return false
	}
	return t.finish()
}

func (c *countingClock) counts() (armed, pending int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.armed, c.pending
}

// delayedSetup makes a broker on a counting clock with a delayed exchange
// "d" of the given routing type and a queue "q" bound to it with key.
func delayedSetup(t *testing.T, routing, key string, bindArgs amqp.Table) (*countingClock, *VHost, *Queue) {
	t.Helper()
	c := newCountingClock()
	v := New(Config{Clock: c}).VHost("/")
	if err := v.DeclareExchange(ExchangeSpec{Name: "d", Kind: KindDelayed, Args: amqp.Table{"x-delayed-type": routing}}, false); err != nil {
		t.Fatal(err)
	}
	q, _, _, err := v.DeclareQueue(QueueSpec{Name: "q"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Bind("d", "q", false, key, bindArgs, 0); err != nil {
		t.Fatal(err)
	}
	return c, v, q
}

func pub(t *testing.T, v *VHost, exchange, key, body string, headers amqp.Table) PublishResult {
	t.Helper()
	var r Router
	res, err := v.Publish(&r, exchange, &Message{Exchange: exchange, RoutingKey: key, Body: []byte(body), Props: amqp.Properties{Headers: headers}})
	if err != nil {
		t.Fatalf("publish %q: %v", body, err)
	}
	return res
}

func drain(q *Queue) []string {
	var out []string
	for {
		d, _, ok := q.Get(true)
		if !ok {
			return out
		}
		out = append(out, string(d.Msg.Body))
	}
}

func drainMsgs(q *Queue) []*Message {
	var out []*Message
	for {
		d, _, ok := q.Get(true)
		if !ok {
			return out
		}
		out = append(out, d.Msg)
	}
}

func wantBodies(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %q, want %q", what, got, want)
	}
}

func TestDelayedDeclareValidation(t *testing.T) {
	v := New(Config{}).VHost("/")
	for _, tc := range []struct {
		name string
		args amqp.Table
		code uint16
		hard bool
		text string
	}{
		{"missing", nil, amqp.PreconditionFailed, false, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing exchange type"},
		{"not-a-string", amqp.Table{"x-delayed-type": int32(1)}, amqp.PreconditionFailed, false, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing exchange type"},
		{"itself", amqp.Table{"x-delayed-type": "x-delayed-message"}, amqp.PreconditionFailed, false, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'"},
		{"unknown", amqp.Table{"x-delayed-type": "nope"}, amqp.CommandInvalid, true, "COMMAND_INVALID - unknown exchange type 'nope'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := v.DeclareExchange(ExchangeSpec{Name: "d-" + tc.name, Kind: KindDelayed, Args: tc.args}, false)
			var ae *amqp.Error
			if !errors.As(err, &ae) {
				t.Fatalf("got %v, want an AMQP error", err)
			}
			if ae.Code != tc.code || ae.Hard != tc.hard || ae.Text != tc.text {
				t.Fatalf("got %d hard=%v %q, want %d hard=%v %q", ae.Code, ae.Hard, ae.Text, tc.code, tc.hard, tc.text)
			}
			if v.Exchange("d-"+tc.name) != nil {
				t.Fatal("exchange was created")
			}
		})
	}
	for _, kind := range []string{KindDirect, KindFanout, KindTopic, KindHeaders} {
		spec := ExchangeSpec{Name: "ok-" + kind, Kind: KindDelayed, Args: amqp.Table{"x-delayed-type": []byte(kind)}}
		if err := v.DeclareExchange(spec, false); err != nil {
			t.Fatalf("declare with x-delayed-type %s: %v", kind, err)
		}
		// Only alternate-exchange is compared on redeclare, as for the routing type.
		spec.Args = amqp.Table{"x-delayed-type": "fanout"}
		if err := v.DeclareExchange(spec, false); err != nil {
			t.Fatalf("redeclare: %v", err)
		}
		if x := v.Exchange(spec.Name); x.Kind != KindDelayed || x.DelayedType() != kind {
			t.Fatalf("got kind %q routing %q, want %q routing %q", x.Kind, x.DelayedType(), KindDelayed, kind)
		}
	}
	if got := v.Exchange("amq.direct").DelayedType(); got != "" {
		t.Fatalf("DelayedType of a direct exchange: got %q, want \"\"", got)
	}
}

func TestDelayMillisTypes(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want int64
		ok   bool
	}{
		{int8(5), 5, true}, {uint8(5), 5, true}, {int16(5), 5, true}, {uint16(5), 5, true},
		{int32(5000), 5000, true}, {uint32(5000), 5000, true}, {int64(5000), 5000, true},
		{float64(1500.9), 1500, true}, {float32(2.5), 2, true}, {"5000", 5000, true}, {[]byte("+7"), 7, true},
		{int32(0), 0, false}, {int32(-5), 0, false}, {float64(0.9), 0, false}, {"-1", 0, false},
		{int64(1<<32 - 1), 1<<32 - 1, true}, {int64(1 << 32), 0, false},
		{"5s", 0, false}, {" 5", 0, false}, {true, 0, false}, {time.Unix(5, 0), 0, false},
		{amqp.Decimal{Scale: 0, Value: 5}, 0, false}, {nil, 0, false},
	} {
		got, ok := delayMillis(amqp.Table{"x-delay": tc.v})
		if ok != tc.ok || ok && got != tc.want {
			t.Errorf("x-delay %T(%v): got %d, %v; want %d, %v", tc.v, tc.v, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := delayMillis(amqp.Table{"other": int32(5)}); ok {
		t.Error("no x-delay: got a delay")
	}
}

func TestDelayedRoutesWhenDue(t *testing.T) {
	c, v, q := delayedSetup(t, KindDirect, "k", nil)
	for _, m := range []struct {
		body  string
		delay any
	}{{"3000", int32(3000)}, {"1000", int64(1000)}, {"2000", "2000"}, {"none", nil}, {"zero", int32(0)}, {"negative", int32(-100)}} {
		var h amqp.Table
		if m.delay != nil {
			h = amqp.Table{"x-delay": m.delay, "app": "kept"}
		}
		res := pub(t, v, "d", "k", m.body, h)
		wantRouted := 1
		if m.delay != nil && m.body[0] >= '1' && m.body[0] <= '9' {
			wantRouted = 0 // held: routed to no queue at publish, as the plugin
		}
		if res.Routed != wantRouted {
			t.Fatalf("publish %s: Routed %d, want %d", m.body, res.Routed, wantRouted)
		}
	}
	// Another key is held too, and dropped at the due time (no binding).
	pub(t, v, "d", "other", "other", amqp.Table{"x-delay": int32(1000)})
	wantBodies(t, "at once", drain(q), "none", "zero", "negative")
	if n := v.Exchange("d").MessagesDelayed(); n != 4 {
		t.Fatalf("MessagesDelayed: got %d, want 4", n)
	}
	c.Advance(999 * time.Millisecond)
	wantBodies(t, "at 999ms", drain(q))
	c.Advance(time.Millisecond)
	ms := drainMsgs(q)
	if len(ms) != 1 || string(ms[0].Body) != "1000" {
		t.Fatalf("at 1s: got %d messages, want the 1000 one", len(ms))
	}
	if got := ms[0].Props.Headers["x-delay"]; got != int64(-1000) {
		t.Fatalf("x-delay on delivery: got %T(%v), want int64(-1000)", got, got)
	}
	if got := ms[0].Props.Headers["app"]; got != "kept" {
		t.Fatalf("other header: got %v, want kept", got)
	}
	if n := v.Exchange("d").MessagesDelayed(); n != 2 {
		t.Fatalf("MessagesDelayed after 1s: got %d, want 2", n)
	}
	c.Advance(5 * time.Second)
	wantBodies(t, "at 6s", drain(q), "2000", "3000")
	if _, pending := c.counts(); pending != 0 {
		t.Fatalf("pending timers with nothing held: got %d, want 0", pending)
	}
	if n := v.Exchange("d").MessagesDelayed(); n != 0 {
		t.Fatalf("MessagesDelayed at the end: got %d, want 0", n)
	}
}

func TestDelayedEqualDeadlinesKeepPublishOrder(t *testing.T) {
	c, v, q := delayedSetup(t, KindFanout, "", nil)
	var want []string
	// Published at t=0 with 2s, and at t=1s with 1s: all due at t=2s.
	for i := range 50 {
		b := fmt.Sprintf("a%02d", i)
		pub(t, v, "d", "", b, amqp.Table{"x-delay": int32(2000)})
		want = append(want, b)
	}
	c.Advance(time.Second)
	for i := range 50 {
		b := fmt.Sprintf("b%02d", i)
		pub(t, v, "d", "", b, amqp.Table{"x-delay": int32(1000)})
		want = append(want, b)
	}
	c.Advance(999 * time.Millisecond)
	wantBodies(t, "before the deadline", drain(q))
	c.Advance(time.Millisecond)
	wantBodies(t, "at the deadline", drain(q), want...)
}

func TestDelayedThousandsOneTimer(t *testing.T) {
	c, v, q := delayedSetup(t, KindDirect, "k", nil)
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 5000
	type sent struct {
		body string
		due  int64
		seq  int
	}
	var all []sent
	for i := range n {
		d := int64(1 + rng.IntN(10000))
		b := fmt.Sprint(i)
		pub(t, v, "d", "k", b, amqp.Table{"x-delay": d})
		all = append(all, sent{b, d, i})
		if _, pending := c.counts(); pending != 1 {
			t.Fatalf("after %d publishes: %d timers pending, want 1", i+1, pending)
		}
	}
	if got := v.Exchange("d").MessagesDelayed(); got != n {
		t.Fatalf("MessagesDelayed: got %d, want %d", got, n)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].due < all[j].due })
	var want []string
	for _, s := range all {
		want = append(want, s.body)
	}
	var got []string
	for range 100 {
		c.Advance(100 * time.Millisecond)
		got = append(got, drain(q)...)
		if _, pending := c.counts(); pending > 1 {
			t.Fatalf("%d timers pending, want at most 1", pending)
		}
	}
	wantBodies(t, "delivery order", got, want...)
	if _, pending := c.counts(); pending != 0 {
		t.Fatalf("pending timers at the end: got %d, want 0", pending)
	}

	// Increasing delays never re-arm: one timer for all of them.
	c2, v2, q2 := delayedSetup(t, KindDirect, "k", nil)
	for i := range n {
		pub(t, v2, "d", "k", fmt.Sprint(i), amqp.Table{"x-delay": int32(1000 + i)})
	}
	if armed, pending := c2.counts(); armed != 1 || pending != 1 {
		t.Fatalf("increasing delays: armed %d pending %d, want 1 and 1", armed, pending)
	}
	c2.Advance(time.Hour)
	if got := len(drain(q2)); got != n {
		t.Fatalf("delivered %d, want %d", got, n)
	}
}

func TestDelayedTopicAndHeadersTypes(t *testing.T) {
	c, v, q := delayedSetup(t, KindTopic, "orders.*", nil)
	pub(t, v, "d", "orders.new", "match", amqp.Table{"x-delay": int32(100)})
	pub(t, v, "d", "users.new", "nomatch", amqp.Table{"x-delay": int32(100)})
	pub(t, v, "d", "orders.now", "now", nil)
	wantBodies(t, "at once", drain(q), "now")
	c.Advance(100 * time.Millisecond)
	wantBodies(t, "at 100ms", drain(q), "match")

	c, v, q = delayedSetup(t, KindHeaders, "", amqp.Table{"x-match": "all", "kind": "a"})
	pub(t, v, "d", "", "a", amqp.Table{"x-delay": int32(100), "kind": "a"})
	pub(t, v, "d", "", "b", amqp.Table{"x-delay": int32(100), "kind": "b"})
	c.Advance(100 * time.Millisecond)
	wantBodies(t, "headers at 100ms", drain(q), "a")
	err := v.Bind("d", "q", false, "", amqp.Table{"x-match": "bogus"}, 0)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		t.Fatalf("bad x-match on a delayed headers exchange: got %v, want 406", err)
	}
}

func TestDelayedDeleteDropsHeld(t *testing.T) {
	c, v, q := delayedSetup(t, KindDirect, "k", nil)
	pub(t, v, "d", "k", "held", amqp.Table{"x-delay": int32(1000)})
	x := v.Exchange("d")
	if err := v.DeleteExchange("d", false); err != nil {
		t.Fatal(err)
	}
	if n := x.MessagesDelayed(); n != 0 {
		t.Fatalf("MessagesDelayed after delete: got %d, want 0", n)
	}
	if _, pending := c.counts(); pending != 0 {
		t.Fatalf("pending timers after delete: got %d, want 0", pending)
	}
	// A new exchange of the same name does not get the old messages.
	if err := v.DeclareExchange(ExchangeSpec{Name: "d", Kind: KindDelayed, Args: amqp.Table{"x-delayed-type": "direct"}}, false); err != nil {
		t.Fatal(err)
	}
	if err := v.Bind("d", "q", false, "k", nil, 0); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Hour)
	wantBodies(t, "after delete", drain(q))
}

func TestDelayedAlternateExchangeOnlyAtDueTime(t *testing.T) {
	c := newCountingClock()
	v := New(Config{Clock: c}).VHost("/")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(v.DeclareExchange(ExchangeSpec{Name: "ae", Kind: KindFanout}, false))
	must(v.DeclareExchange(ExchangeSpec{Name: "d", Kind: KindDelayed, Args: amqp.Table{"x-delayed-type": "direct", "alternate-exchange": "ae"}}, false))
	aq, _, _, err := v.DeclareQueue(QueueSpec{Name: "aq"}, false)
	must(err)
	q, _, _, err := v.DeclareQueue(QueueSpec{Name: "q"}, false)
	must(err)
	must(v.Bind("ae", "aq", false, "", nil, 0))
	must(v.Bind("d", "q", false, "k", nil, 0))
	pub(t, v, "d", "k", "routed", amqp.Table{"x-delay": int32(100)})
	pub(t, v, "d", "nokey", "unrouted", amqp.Table{"x-delay": int32(100)})
	wantBodies(t, "alternate at publish", drain(aq))
	c.Advance(100 * time.Millisecond)
	wantBodies(t, "queue at due time", drain(q), "routed")
	wantBodies(t, "alternate at due time", drain(aq), "unrouted")
}

func TestDelayedExchangeToExchange(t *testing.T) {
	c := newCountingClock()
	v := New(Config{Clock: c}).VHost("/")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// src (fanout) -> d1 (delayed fanout) -> d2 (delayed fanout) -> q, and src -> direct queue.
	must(v.DeclareExchange(ExchangeSpec{Name: "src", Kind: KindFanout}, false))
	must(v.DeclareExchange(ExchangeSpec{Name: "d1", Kind: KindDelayed, Args: amqp.Table{"x-delayed-type": "fanout"}}, false))
	must(v.DeclareExchange(ExchangeSpec{Name: "d2", Kind: KindDelayed, Args: amqp.Table{"x-delayed-type": "fanout"}}, false))
	q, _, _, err := v.DeclareQueue(QueueSpec{Name: "q"}, false)
	must(err)
	now, _, _, err := v.DeclareQueue(QueueSpec{Name: "now"}, false)
	must(err)
	must(v.Bind("src", "d1", true, "", nil, 0))
	must(v.Bind("d1", "d2", true, "", nil, 0))
	must(v.Bind("d2", "q", false, "", nil, 0))
	must(v.Bind("src", "now", false, "", nil, 0))
	res := pub(t, v, "src", "", "m", amqp.Table{"x-delay": int32(500)})
	if res.Routed != 1 {
		t.Fatalf("Routed: got %d, want 1 (the direct queue)", res.Routed)
	}
	got := drainMsgs(now)
	if len(got) != 1 || got[0].Props.Headers["x-delay"] != int32(500) {
		t.Fatalf("undelayed copy: got %v, want one message with the original x-delay", got)
	}
	c.Advance(499 * time.Millisecond)
	wantBodies(t, "before 500ms", drain(q))
	// d2 does not hold it again: its x-delay is now negative.
	c.Advance(time.Millisecond)
	ms := drainMsgs(q)
	if len(ms) != 1 || ms[0].Props.Headers["x-delay"] != int64(-500) {
		t.Fatalf("at 500ms: got %v, want one message with x-delay -500", ms)
	}
	if n := v.Exchange("d2").MessagesDelayed(); n != 0 {
		t.Fatalf("d2 holds %d, want 0", n)
	}
}

// TestDelayedDeleteVHost checks that deleting a vhost stops the timers of
// its delayed exchanges.
func TestDelayedDeleteVHost(t *testing.T) {
	c := newCountingClock()
	b := New(Config{Clock: c})
	v := b.AddVHost("other")
	if err := v.DeclareExchange(ExchangeSpec{Name: "d", Kind: KindDelayed, Args: amqp.Table{"x-delayed-type": "fanout"}}, false); err != nil {
		t.Fatal(err)
	}
	pub(t, v, "d", "", "m", amqp.Table{"x-delay": int32(100)})
	b.DeleteVHost("other")
	if _, pending := c.counts(); pending != 0 {
		t.Fatalf("pending timers after vhost delete: got %d, want 0", pending)
	}
}
