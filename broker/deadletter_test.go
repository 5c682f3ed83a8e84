package broker

import (
	"bytes"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
)

var t0 = time.Date(2026, 8, 29, 9, 53, 17, 0, time.UTC)

func strp(s string) *string { return &s }

// R3.4, R3.5: the first dead-lettering writes one x-death entry with the
// event's queue, reason, count 1, time, exchange and routing keys (CC
// included), and the x-first-death-* and x-last-death-* headers.
func TestDeadLetterCopyFirstEvent(t *testing.T) {
	m := &Message{Exchange: "orders", RoutingKey: "orders.work", Body: []byte("b"),
		Props: amqp.Properties{Headers: amqp.Table{"CC": []any{"cc1"}, "app": "x"}, DeliveryMode: 2}}
	c := deadLetterCopy(m, "orders.work", ReasonRejected, "orders.dlx", strp("failed"), t0.Add(400*time.Millisecond))
	if c.Exchange != "orders.dlx" || c.RoutingKey != "failed" {
		t.Fatalf("got exchange %q key %q, want orders.dlx failed (R3.3)", c.Exchange, c.RoutingKey)
	}
	if &c.Body[0] != &m.Body[0] {
		t.Errorf("body was copied; want it shared")
	}
	if c.Props.DeliveryMode != 2 || c.Props.Headers["app"] != "x" {
		t.Errorf("properties not kept (R3.10): %+v", c.Props)
	}
	if _, ok := c.Props.Headers["CC"]; !ok {
		t.Errorf("CC header removed; want kept (R3.6)")
	}
	want := []any{amqp.Table{"queue": "orders.work", "reason": "rejected", "count": int64(1), "time": t0,
		"exchange": "orders", "routing-keys": []any{"orders.work", "cc1"}}}
	if got := xdeath(t, c.Props.Headers["x-death"]); !reflect.DeepEqual(got, want) {
		t.Errorf("x-death:\n got %#v\nwant %#v", got, want)
	}
	for k, v := range map[string]string{"x-first-death-queue": "orders.work", "x-first-death-reason": "rejected",
		"x-first-death-exchange": "orders", "x-last-death-queue": "orders.work", "x-last-death-reason": "rejected",
		"x-last-death-exchange": "orders"} {
		if got := c.Props.Headers[k]; got != v {
			t.Errorf("%s: got %v, want %q", k, got, v)
		}
	}
	if m.Props.Headers["x-death"] != nil {
		t.Errorf("the original message was modified")
	}
}

// R2.6: expiration is removed; original-expiration is recorded only when
// the message had one.
func TestDeadLetterCopyExpiration(t *testing.T) {
	m := &Message{RoutingKey: "k", Props: amqp.Properties{Expiration: "1000", Flags: amqp.FlagExpiration}}
	c := deadLetterCopy(m, "q", ReasonExpired, "dlx", nil, t0)
	if c.Props.Expiration != "" || c.Props.Flags&amqp.FlagExpiration != 0 {
		t.Errorf("expiration kept: %q flags %#x", c.Props.Expiration, c.Props.Flags)
	}
	e := xdeath(t, c.Props.Headers["x-death"]).([]any)[0].(amqp.Table)
	if e["original-expiration"] != "1000" {
		t.Errorf("original-expiration: got %v, want 1000", e["original-expiration"])
	}
	c2 := deadLetterCopy(&Message{RoutingKey: "k"}, "q", ReasonExpired, "dlx", nil, t0)
	if _, ok := xdeath(t, c2.Props.Headers["x-death"]).([]any)[0].(amqp.Table)["original-expiration"]; ok {
		t.Errorf("original-expiration set for a message without expiration")
	}
	if c2.RoutingKey != "k" {
		t.Errorf("routing key: got %q, want the original k (R3.3)", c2.RoutingKey)
	}
}

// R3.4: a repeated {queue, reason} raises count and moves to the front,
// keeping its first-event fields; a new one is prepended. R3.5: first
// headers never change, last headers follow the latest event.
func TestDeadLetterHistory(t *testing.T) {
	m := &Message{Exchange: "e0", RoutingKey: "k"}
	a := deadLetterCopy(m, "q1", ReasonRejected, "x", nil, t0)
	b := deadLetterCopy(a, "q2", ReasonExpired, "x", nil, t0.Add(time.Minute))
	c := deadLetterCopy(b, "q1", ReasonRejected, "x", nil, t0.Add(2*time.Minute))
	got := c.Deaths
	if len(got) != 2 || got[0].Queue != "q1" || got[0].Count != 2 || !got[0].Time.Equal(t0) || got[0].Exchange != "e0" ||
		got[1].Queue != "q2" || got[1].Count != 1 || got[1].Exchange != "x" {
		t.Fatalf("history: %+v", got)
	}
	if c.Props.Headers["x-first-death-queue"] != "q1" || c.Props.Headers["x-first-death-exchange"] != "e0" {
		t.Errorf("first-death headers changed: %v", c.Props.Headers)
	}
	if c.Props.Headers["x-last-death-queue"] != "q1" || c.Props.Headers["x-last-death-exchange"] != "x" {
		t.Errorf("last-death headers: %v", c.Props.Headers)
	}
	if b.Props.Headers["x-last-death-queue"] != "q2" || b.Props.Headers["x-last-death-reason"] != "expired" {
		t.Errorf("last-death headers after 2nd event: %v", b.Props.Headers)
	}
}

// R3.7: a client-set x-death is not trusted: the broker's history (none
// for a freshly published message) replaces it and counting restarts.
func TestDeadLetterIgnoresClientXDeath(t *testing.T) {
	forged := []any{amqp.Table{"queue": "q", "reason": "rejected", "count": int64(5)}}
	m := &Message{RoutingKey: "k", Props: amqp.Properties{Headers: amqp.Table{"x-death": forged}}}
	c := deadLetterCopy(m, "q", ReasonRejected, "x", nil, t0)
	e := xdeath(t, c.Props.Headers["x-death"]).([]any)
	if len(e) != 1 || e[0].(amqp.Table)["count"] != int64(1) {
		t.Fatalf("x-death: got %v, want one entry with count 1", e)
	}
	if c.Props.Headers["x-first-death-queue"] != "q" {
		t.Errorf("x-first-death-queue missing")
	}
}

// R3.8: cycles are detected per target queue and never through a rejection.
func TestIsCycle(t *testing.T) {
	h := func(entries ...string) []Death {
		var out []Death
		for i := 0; i < len(entries); i += 2 {
			out = append(out, Death{Queue: entries[i], Reason: entries[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		history []Death
		target  string
		want    bool
	}{
		{"self expiry", h("q", "expired"), "q", true},
		{"self maxlen", h("q", "maxlen"), "q", true},
		{"self reject", h("q", "rejected"), "q", false},
		{"other queue", h("q", "expired"), "dlq", false},
		{"reject in between", h("q3", "expired", "q2", "expired", "q1", "rejected"), "q1", false},
		{"expiry ring", h("q3", "expired", "q2", "expired", "q1", "expired"), "q1", true},
		{"reject before the match", h("q2", "expired", "q1", "expired", "q0", "rejected"), "q1", true},
	} {
		if got := isCycle(tc.history, tc.target); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// xdeath decodes an x-death header value as a client sees it: the broker
// keeps it pre-encoded (amqp.RawValue).
func xdeath(t *testing.T, v any) any {
	t.Helper()
	if v == nil {
		return nil
	}
	tab, _, err := amqp.DecodeTable(amqp.AppendTable(nil, amqp.Table{"x": v}))
	if err != nil {
		t.Fatalf("x-death does not decode: %v", err)
	}
	return tab["x"]
}

// TestDeathsTableWireForm: the pre-encoded x-death is byte for byte what
// encoding the same history as tables gives.
func TestDeathsTableWireForm(t *testing.T) {
	ref := func(history []Death) []any {
		arr := make([]any, len(history))
		for i, d := range history {
			keys := make([]any, len(d.RoutingKeys))
			for j, k := range d.RoutingKeys {
				keys[j] = k
			}
			tb := amqp.Table{"queue": d.Queue, "reason": d.Reason, "count": d.Count, "time": d.Time, "exchange": d.Exchange, "routing-keys": keys}
			if d.HasExpiration {
				tb["original-expiration"] = d.OriginalExpiration
			}
			arr[i] = tb
		}
		return arr
	}
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, h := range [][]Death{
		nil,
		{{Queue: "q", Reason: "rejected", Count: 1, Time: t0, Exchange: "", RoutingKeys: []string{"q"}}},
		{{Queue: "a", Reason: "expired", Count: 3, Time: t0, Exchange: "x", RoutingKeys: []string{"k1", "k2", ""}, OriginalExpiration: "100", HasExpiration: true},
			{Queue: "b", Reason: "maxlen", Count: 1 << 40, Time: t0.Add(time.Hour), Exchange: "y", RoutingKeys: nil}},
	} {
		got := amqp.AppendTable(nil, amqp.Table{"x-death": deathsTable(h)})
		want := amqp.AppendTable(nil, amqp.Table{"x-death": ref(h)})
		if !bytes.Equal(got, want) {
			t.Fatalf("history %+v:\n got %x\nwant %x", h, got, want)
		}
	}
}

// R3.11: dead letters leave in the order they left their queue, even when
// two goroutines dead-letter from one queue at once. Here a reject's
// publishing is held up after it took m1 from the outbox; a second reject
// of m2 meanwhile must not overtake it. (Seen under load as TTL expiries
// run by two timer goroutines reaching the DLQ in reverse order.)
func TestDeadLettersKeepOrderAcrossGoroutines(t *testing.T) {
	v := pagingVHost(t, 0)
	dlq, _, _, err := v.DeclareQueue(QueueSpec{Name: "dlq"}, false)
	noErr(t, err)
	q, _, _, err := v.DeclareQueue(QueueSpec{Name: "src", Args: amqp.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}}, false)
	noErr(t, err)
	var r Router
	for _, body := range []string{"m1", "m2"} {
		_, err := v.Publish(&r, "", &Message{RoutingKey: "src", Body: []byte(body)})
		noErr(t, err)
	}
	d1, _, ok1 := q.Get(false)
	d2, _, ok2 := q.Get(false)
	if !ok1 || !ok2 {
		t.Fatal("get: the queue does not hold m1 and m2")
	}
	entered, release := make(chan struct{}), make(chan struct{})
	first := true
	q.mu.Lock()
	q.dlHook = func() {
		if first { // only the first batch's publisher runs the hook first
			first = false
			close(entered)
			<-release
		}
	}
	q.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.Reject([]Delivery{d1})
	}()
	<-entered
	rejected := make(chan struct{})
	go func() {
		defer close(rejected)
		q.Reject([]Delivery{d2})
	}()
	select {
	case <-rejected:
	case <-time.After(5 * time.Second):
		t.Fatal("a reject waited for another goroutine's dead-lettering")
	}
	close(release)
	<-done
	q.waitDeadLetters()
	var got []string
	for {
		d, _, ok := dlq.Get(true)
		if !ok {
			break
		}
		got = append(got, string(d.Msg.Body))
	}
	if !slices.Equal(got, []string{"m1", "m2"}) {
		t.Fatalf("dead-letter queue holds %q, want [m1 m2] (R3.11)", got)
	}
}
