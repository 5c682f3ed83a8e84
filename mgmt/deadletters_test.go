package mgmt_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	wamqp "github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/internal/clock"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/server"
	"github.com/warrenmq/warren/warrentest"
)

// The replay's safety net: a dead letter leaves its DLQ only once its
// republish is routed (and on disk for a persistent message in a durable
// queue); when the republish fails, it and everything after it stay.

type fixture struct {
	t   *testing.T
	w   *warrentest.Broker
	ch  *amqp.Channel
	api string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	w := warrentest.Start(t)
	conn, err := amqp.Dial(w.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, w: w, ch: ch, api: w.MgmtURL()}
}

// call makes an API request as guest and decodes a JSON reply into out.
func (f *fixture) call(method, path string, body, out any) int {
	f.t.Helper()
	return f.callAs("guest", "guest", method, path, body, out)
}

// callAs is call as another user.
func (f *fixture) callAs(user, pass, method, path string, body, out any) int {
	f.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, f.api+path, rd)
	req.SetBasicAuth(user, pass)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			f.t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
	return resp.StatusCode
}

// topology: exchange orders-x routes "new" to queue orders, which
// dead-letters to orders.dlq through the default exchange.
func (f *fixture) topology() {
	f.t.Helper()
	must(f.t, f.ch.ExchangeDeclare("orders-x", "direct", true, false, false, false, nil))
	_, err := f.ch.QueueDeclare("orders", true, false, false, false, amqp.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "orders.dlq"})
	must(f.t, err)
	_, err = f.ch.QueueDeclare("orders.dlq", true, false, false, false, nil)
	must(f.t, err)
	must(f.t, f.ch.QueueBind("orders", "new", "orders-x", false, nil))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// deadLetter publishes bodies to orders-x and rejects them from orders.
func (f *fixture) deadLetter(bodies ...string) {
	f.t.Helper()
	ctx := context.Background()
	for _, b := range bodies {
		must(f.t, f.ch.PublishWithContext(ctx, "orders-x", "new", false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(b)}))
	}
	for range bodies {
		d := f.get("orders")
		must(f.t, d.Reject(false))
	}
	f.waitCount("orders.dlq", len(bodies))
}

func (f *fixture) get(q string) amqp.Delivery {
	f.t.Helper()
	var d amqp.Delivery
	if !testutil.Until(5*time.Second, func() bool {
		var ok bool
		var err error
		d, ok, err = f.ch.Get(q, false)
		must(f.t, err)
		return ok
	}) {
		f.t.Fatalf("no message in %s", q)
	}
	return d
}

func (f *fixture) count(q string) int {
	f.t.Helper()
	qi, err := f.ch.QueueDeclarePassive(q, true, false, false, false, nil)
	must(f.t, err)
	return qi.Messages
}

func (f *fixture) waitCount(q string, n int) {
	f.t.Helper()
	if !testutil.Until(5*time.Second, func() bool { return f.count(q) == n }) {
		f.t.Fatalf("%s has %d messages, want %d", q, f.count(q), n)
	}
}

type replayReply struct {
	Replayed, Skipped, Failed, Remaining int
	Error                                string
}

type browseReply struct {
	Total    int
	Messages []struct {
		Payload     string
		Redelivered bool
		XDeath      []map[string]any `json:"x_death"`
	}
}

func (f *fixture) browse(q string) browseReply {
	f.t.Helper()
	var b browseReply
	if st := f.call("GET", "/api/dead-letters/%2F/"+q+"/messages", nil, &b); st != 200 {
		f.t.Fatalf("browse %s: status %d", q, st)
	}
	return b
}

func payloads(b browseReply) []string {
	var out []string
	for _, m := range b.Messages {
		out = append(out, m.Payload)
	}
	return out
}

func TestReplayFailsWithoutLosingMessages(t *testing.T) {
	f := newFixture(t)
	f.topology()
	f.deadLetter("a", "b", "c")

	// The exchange the messages first died from is gone: nothing can be
	// replayed, and the DLQ keeps all three, in order, untouched.
	must(t, f.ch.ExchangeDelete("orders-x", false, false))
	var r replayReply
	if st := f.call("POST", "/api/dead-letters/%2F/orders.dlq/replay", map[string]any{}, &r); st != 200 {
		t.Fatalf("replay status %d", st)
	}
	if r.Replayed != 0 || r.Failed != 1 || r.Error == "" {
		t.Fatalf("replay without the exchange = %+v, want 0 replayed, 1 failed and an error", r)
	}
	b := f.browse("orders.dlq")
	if fmt.Sprint(payloads(b)) != "[a b c]" || b.Messages[0].Redelivered {
		t.Fatalf("DLQ after the failed replay: %v (redelivered %v), want [a b c] not redelivered", payloads(b), b.Messages[0].Redelivered)
	}

	// The exchange is back but no longer routes "new": unroutable, kept.
	must(t, f.ch.ExchangeDeclare("orders-x", "direct", true, false, false, false, nil))
	r = replayReply{}
	f.call("POST", "/api/dead-letters/%2F/orders.dlq/replay", map[string]any{}, &r)
	if r.Replayed != 0 || r.Failed != 1 {
		t.Fatalf("unroutable replay = %+v, want 0 replayed, 1 failed", r)
	}
	if n := f.count("orders.dlq"); n != 3 {
		t.Fatalf("DLQ has %d after an unroutable replay, want 3", n)
	}

	// Routable again: a count of 2 replays the first two, in order.
	must(t, f.ch.QueueBind("orders", "new", "orders-x", false, nil))
	r = replayReply{}
	f.call("POST", "/api/dead-letters/%2F/orders.dlq/replay", map[string]any{"count": 2}, &r)
	if r.Replayed != 2 || r.Failed != 0 || r.Remaining != 1 {
		t.Fatalf("replay count 2 = %+v, want 2 replayed, 1 remaining", r)
	}
	for _, want := range []string{"a", "b"} {
		d := f.get("orders")
		if string(d.Body) != want {
			t.Fatalf("orders gave %q, want %q", d.Body, want)
		}
		if _, has := d.Headers["x-death"]; has {
			t.Fatalf("replayed message kept x-death without keep_history: %v", d.Headers)
		}
		must(t, d.Ack(false))
	}
	if b := f.browse("orders.dlq"); fmt.Sprint(payloads(b)) != "[c]" {
		t.Fatalf("DLQ after replaying 2: %v, want [c]", payloads(b))
	}
}

func TestReplayFilterLeavesOthersInPlace(t *testing.T) {
	f := newFixture(t)
	f.topology()
	f.deadLetter("r1")
	// An expired one between two rejected ones: a per-message TTL of 1 ms
	// in a queue without consumers.
	_, err := f.ch.QueueDeclare("orders.ttl", true, false, false, false, amqp.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "orders.dlq"})
	must(t, err)
	must(t, f.ch.PublishWithContext(context.Background(), "", "orders.ttl", false, false, amqp.Publishing{Body: []byte("e1"), Expiration: "1"}))
	f.waitCount("orders.dlq", 2)
	f.deadLetter2("r2")

	var r replayReply
	f.call("POST", "/api/dead-letters/%2F/orders.dlq/replay", map[string]any{"reason": "expired", "keep_history": true}, &r)
	if r.Replayed != 1 || r.Skipped != 2 || r.Failed != 0 {
		t.Fatalf("replay reason=expired = %+v, want 1 replayed, 2 skipped", r)
	}
	// e1 went back to orders.ttl (its first death), with its history and
	// without its 1 ms TTL (it would die again at once).
	d := f.get("orders.ttl")
	if string(d.Body) != "e1" || d.Expiration != "" {
		t.Fatalf("orders.ttl gave %q with expiration %q", d.Body, d.Expiration)
	}
	deaths, _ := d.Headers["x-death"].([]any)
	if len(deaths) != 1 {
		t.Fatalf("keep_history: x-death = %v", d.Headers["x-death"])
	}
	// The skipped ones stay where they were, not marked redelivered.
	b := f.browse("orders.dlq")
	if fmt.Sprint(payloads(b)) != "[r1 r2]" {
		t.Fatalf("DLQ after the filtered replay: %v, want [r1 r2]", payloads(b))
	}
	for _, m := range b.Messages {
		if m.Redelivered {
			t.Fatalf("a skipped message came back redelivered: %+v", m)
		}
	}
	// Bad filter: 400, nothing moves.
	var e map[string]string
	if st := f.call("POST", "/api/dead-letters/%2F/orders.dlq/replay", map[string]any{"reason": "bogus"}, &e); st != 400 || e["error"] != "bad_request" {
		t.Fatalf("bad reason: %d %v", st, e)
	}
	if n := f.count("orders.dlq"); n != 2 {
		t.Fatalf("DLQ has %d after a refused replay, want 2", n)
	}
}

// deadLetter2 is deadLetter after other dead letters are in the DLQ.
func (f *fixture) deadLetter2(body string) {
	f.t.Helper()
	before := f.count("orders.dlq")
	must(f.t, f.ch.PublishWithContext(context.Background(), "orders-x", "new", false, false, amqp.Publishing{Body: []byte(body)}))
	must(f.t, f.get("orders").Reject(false))
	f.waitCount("orders.dlq", before+1)
}

// A replay publishes as the user who asks for it: its topic permissions
// apply, and a refused message stays in the DLQ with those after it.
func TestReplayHonoursTopicPermissions(t *testing.T) {
	f := newFixture(t)
	must(t, f.ch.ExchangeDeclare("events-x", "topic", true, false, false, false, nil))
	_, err := f.ch.QueueDeclare("events", true, false, false, false, amqp.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "events.dlq"})
	must(t, err)
	_, err = f.ch.QueueDeclare("events.dlq", true, false, false, false, nil)
	must(t, err)
	must(t, f.ch.QueueBind("events", "ev.#", "events-x", false, nil))
	for _, key := range []string{"ev.ok", "ev.no", "ev.ok"} {
		must(t, f.ch.PublishWithContext(context.Background(), "events-x", key, false, false, amqp.Publishing{Body: []byte(key)}))
	}
	for range 3 {
		must(t, f.get("events").Reject(false))
	}
	f.waitCount("events.dlq", 3)
	if st := f.call("PUT", "/api/topic-permissions/%2F/guest", map[string]any{"exchange": "events-x", "write": `^ev\.ok$`, "read": ".*"}, nil); st != 201 {
		t.Fatalf("PUT topic permission: %d", st)
	}
	var r replayReply
	f.call("POST", "/api/dead-letters/%2F/events.dlq/replay", map[string]any{}, &r)
	if r.Replayed != 1 || r.Failed != 1 || !strings.Contains(r.Error, "access to topic 'ev.no' in exchange 'events-x'") {
		t.Fatalf("replay = %+v, want 1 replayed, then ev.no refused by the topic permission", r)
	}
	if b := f.browse("events.dlq"); fmt.Sprint(payloads(b)) != "[ev.no ev.ok]" {
		t.Fatalf("DLQ after the refused replay: %v, want [ev.no ev.ok]", payloads(b))
	}
}

// A filtered replay of a DLQ deeper than the queue window: the matching
// messages go back, the others stay on disk where they were (not read into
// memory, not marked), in order. A replay that fails half way leaves the
// failed message and those after it in place too, on disk.
func TestReplayDeepDLQ(t *testing.T) {
	w := warrentest.Start(t, warrentest.WithConfig(func(c *server.Config) { c.QueueWindow = 8 }))
	conn, err := amqp.Dial(w.URL())
	must(t, err)
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	must(t, err)
	f := &fixture{t: t, w: w, ch: ch, api: w.MgmtURL()}
	_, err = ch.QueueDeclare("dlq", true, false, false, false, nil)
	must(t, err)
	// a and b dead-letter into dlq; a's messages go back to a bounded
	// queue that refuses them once full.
	for _, q := range []string{"a", "b"} {
		_, err = ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"})
		must(t, err)
	}
	must(t, ch.Confirm(false))
	const n = 120
	var published []string
	for i := range n {
		q := []string{"a", "b"}[i%2]
		body := fmt.Sprintf("%s%03d", q, i)
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(body)})
		must(t, err)
		if !dc.Wait() {
			t.Fatal("nacked")
		}
		must(t, f.get(q).Reject(false))
		published = append(published, body)
	}
	f.waitCount("dlq", n)
	list := func(when string) []string {
		t.Helper()
		var all []string
		for off := 0; off < n; off += 50 {
			var b browseReply
			f.call("GET", fmt.Sprintf("/api/dead-letters/%%2F/dlq/messages?offset=%d&limit=50", off), nil, &b)
			for _, m := range b.Messages {
				if m.Redelivered {
					t.Fatalf("%s: %s came back redelivered", when, m.Payload)
				}
				all = append(all, m.Payload)
			}
		}
		return all
	}
	// The DLQ's order: each queue's dead letters in the order they left
	// it (R3.11); a's and b's flushers may interleave them otherwise.
	order := list("before the replay")
	for _, src := range []byte{'a', 'b'} {
		of := func(l []string) []string {
			return slices.DeleteFunc(slices.Clone(l), func(b string) bool { return b[0] != src })
		}
		if !slices.Equal(of(order), of(published)) {
			t.Fatalf("the DLQ holds %c's dead letters as %v, rejected as %v", src, of(order), of(published))
		}
	}
	var q map[string]any
	f.call("GET", "/api/queues/%2F/dlq", nil, &q)
	pagedBefore := q["messages_paged_out"].(float64)
	if pagedBefore < n/2 {
		t.Fatalf("only %v of %d paged out: the test needs a deep queue", pagedBefore, n)
	}

	// Replay a's messages, but a takes only 25 of the 60 more: the 26th is
	// refused (reject-publish) and stays, with everything after it.
	_, err = ch.QueueDelete("a", false, false, false)
	must(t, err)
	_, err = ch.QueueDeclare("a", true, false, false, false, amqp.Table{"x-max-length": int32(25), "x-overflow": "reject-publish"})
	must(t, err)
	var r replayReply
	f.call("POST", "/api/dead-letters/%2F/dlq/replay", map[string]any{"source_queue": "a"}, &r)
	if r.Replayed != 25 || r.Failed != 1 || !strings.Contains(r.Error, "reject-publish") {
		t.Fatalf("replay = %+v, want 25 replayed, then one refused", r)
	}
	var want []string
	replayed := 0
	for _, b := range order {
		if b[0] == 'a' && replayed < 25 {
			replayed++
			continue
		}
		want = append(want, b)
	}
	check := func(when string) {
		t.Helper()
		if all := list(when); !slices.Equal(all, want) {
			t.Fatalf("%s: DLQ holds\n%v\nwant\n%v", when, all, want)
		}
	}
	check("after the replay that failed half way")
	// The messages left behind are still on disk, not in memory: the
	// skipped b messages and the returned a messages alike.
	f.call("GET", "/api/queues/%2F/dlq", nil, &q)
	if paged := q["messages_paged_out"].(float64); paged < pagedBefore-25 {
		t.Fatalf("paged out %v after the replay, %v before: the replay read the messages it left into memory", paged, pagedBefore)
	}
	// Room for the rest: a second replay finishes the job.
	_, err = ch.QueueDelete("a", false, false, false)
	must(t, err)
	_, err = ch.QueueDeclare("a", true, false, false, false, nil)
	must(t, err)
	r = replayReply{}
	f.call("POST", "/api/dead-letters/%2F/dlq/replay", map[string]any{"source_queue": "a"}, &r)
	if r.Replayed != n/2-25 || r.Failed != 0 || r.Skipped != n/2 {
		t.Fatalf("second replay = %+v, want %d replayed, %d skipped", r, n/2-25, n/2)
	}
	want = slices.DeleteFunc(want, func(b string) bool { return b[0] == 'a' })
	check("after the second replay")
	if got := f.count("a"); got != n/2-25 {
		t.Fatalf("a holds %d, want %d", got, n/2-25)
	}
}

// timelineReply is GET /api/dead-letters/timeline's answer.
type timelineReply struct {
	Total      uint64            `json:"total"`
	ByReason   map[string]uint64 `json:"by_reason"`
	BySource   []queueCount      `json:"by_source"`
	ByTarget   []queueCount      `json:"by_target"`
	Unroutable uint64            `json:"unroutable"`
	Minutes    int               `json:"minutes"`
	Buckets    []struct {
		Timestamp  int64             `json:"timestamp"`
		Total      uint64            `json:"total"`
		ByReason   map[string]uint64 `json:"by_reason"`
		BySource   []queueCount      `json:"by_source"`
		ByTarget   []queueCount      `json:"by_target"`
		Unroutable uint64            `json:"unroutable"`
	} `json:"buckets"`
}

type queueCount struct {
	VHost string `json:"vhost"`
	Name  string `json:"name"`
	Count uint64 `json:"count"`
}

func countsOf(l []queueCount) map[string]uint64 {
	m := map[string]uint64{}
	for _, c := range l {
		m[c.Name] = c.Count
	}
	return m
}

func (f *fixture) timeline(path string) timelineReply {
	f.t.Helper()
	var r timelineReply
	if st := f.call("GET", path, nil, &r); st != 200 {
		f.t.Fatalf("GET %s: status %d", path, st)
	}
	return r
}

// waitTimeline polls the timeline until it counts total dead letters.
func (f *fixture) waitTimeline(path string, total uint64) timelineReply {
	f.t.Helper()
	var r timelineReply
	if !testutil.Until(5*time.Second, func() bool { r = f.timeline(path); return r.Total == total }) {
		f.t.Fatalf("%s counts %d dead letters, want %d: %+v", path, r.Total, total, r)
	}
	return r
}

// issue 15: the dead-letter timeline counts every dead letter once, in
// the minute it was dead-lettered (the broker's clock), by reason, source
// queue and destination queue; those that reach no queue count as
// unroutable; only the vhosts the user may see count.
func TestDeadLetterTimeline(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 2, 10, 0, 30, 0, time.UTC))
	w := warrentest.Start(t, warrentest.WithClock(clk))
	conn, err := amqp.Dial(w.URL())
	must(t, err)
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	must(t, err)
	f := &fixture{t: t, w: w, ch: ch, api: w.MgmtURL()}
	ctx := context.Background()
	dl := amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "tl.dlq"}
	with := func(extra amqp.Table) amqp.Table {
		a := amqp.Table{}
		for k, v := range dl {
			a[k] = v
		}
		for k, v := range extra {
			a[k] = v
		}
		return a
	}
	for name, args := range map[string]amqp.Table{
		"tl.dlq": nil, "tl.rej": dl, "tl.ttl": with(amqp.Table{"x-message-ttl": int32(1000)}),
		"tl.max":  with(amqp.Table{"x-max-length": int32(1)}),
		"tl.lost": {"x-dead-letter-exchange": "tl.nowhere"}, // no such exchange: unroutable
		"tl.qq":   with(amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int32(1)}),
	} {
		_, err := ch.QueueDeclare(name, true, false, false, false, args)
		must(t, err)
	}
	pub := func(q, body string) {
		must(t, ch.PublishWithContext(ctx, "", q, false, false, amqp.Publishing{Body: []byte(body)}))
	}
	minute0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC).UnixMilli()

	// Minute 10:00: two rejected from tl.rej, two pushed out of tl.max.
	pub("tl.rej", "r1")
	// r2 is persistent: it moves through the store (dlmove.go).
	must(t, ch.PublishWithContext(ctx, "", "tl.rej", false, false, amqp.Publishing{Body: []byte("r2"), DeliveryMode: amqp.Persistent}))
	must(t, f.get("tl.rej").Reject(false))
	must(t, f.get("tl.rej").Reject(false))
	for _, b := range []string{"m1", "m2", "m3"} {
		pub("tl.max", b)
	}
	r := f.waitTimeline("/api/dead-letters/timeline/%2F?minutes=2", 4)
	if len(r.Buckets) != 2 || r.Minutes != 2 {
		t.Fatalf("minutes=2 gave %d buckets: %+v", len(r.Buckets), r)
	}
	if b := r.Buckets[1]; b.Timestamp != minute0 || b.Total != 4 || b.ByReason["rejected"] != 2 || b.ByReason["maxlen"] != 2 ||
		b.ByReason["expired"] != 0 || fmt.Sprint(countsOf(b.BySource)) != "map[tl.max:2 tl.rej:2]" ||
		fmt.Sprint(countsOf(b.ByTarget)) != "map[tl.dlq:4]" || b.Unroutable != 0 {
		t.Fatalf("minute 10:00: %+v", b)
	}
	if r.Buckets[0].Total != 0 || r.Buckets[0].Timestamp != minute0-60000 {
		t.Fatalf("minute 9:59: %+v", r.Buckets[0])
	}

	// Minute 10:01: one expires out of tl.ttl, one rejected from tl.lost
	// reaches no queue, one goes over the quorum queue's delivery limit.
	clk.Advance(time.Minute)
	pub("tl.ttl", "e1")
	f.waitCount("tl.ttl", 1)
	clk.Advance(2 * time.Second)
	pub("tl.lost", "l1")
	must(t, f.get("tl.lost").Reject(false))
	pub("tl.qq", "q1")
	must(t, f.get("tl.qq").Reject(true))
	must(t, f.get("tl.qq").Reject(true))
	r = f.waitTimeline("/api/dead-letters/timeline?minutes=3", 7)
	b0, b1 := r.Buckets[1], r.Buckets[2]
	if b0.Timestamp != minute0 || b0.Total != 4 {
		t.Fatalf("minute 10:00 after a minute: %+v", b0)
	}
	if b1.Timestamp != minute0+60000 || b1.Total != 3 || b1.ByReason["expired"] != 1 || b1.ByReason["rejected"] != 1 ||
		b1.ByReason["delivery_limit"] != 1 ||
		fmt.Sprint(countsOf(b1.BySource)) != "map[tl.lost:1 tl.qq:1 tl.ttl:1]" || fmt.Sprint(countsOf(b1.ByTarget)) != "map[tl.dlq:2]" ||
		b1.Unroutable != 1 {
		t.Fatalf("minute 10:01: %+v", b1)
	}
	if r.ByReason["rejected"] != 3 || r.Unroutable != 1 || countsOf(r.BySource)["tl.rej"] != 2 || r.BySource[0].VHost != "/" {
		t.Fatalf("window totals: %+v", r)
	}
	// The dead letters are where the timeline says.
	f.waitCount("tl.dlq", 6)

	// A user of another vhost sees none of it.
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"PUT", "/api/vhosts/tl-other", nil},
		{"PUT", "/api/users/tl-user", map[string]any{"password": "pw", "tags": "management"}},
		{"PUT", "/api/permissions/tl-other/tl-user", map[string]any{"configure": ".*", "write": ".*", "read": ".*"}},
	} {
		if st := f.call(c.method, c.path, c.body, nil); st != 201 && st != 204 {
			t.Fatalf("%s %s: %d", c.method, c.path, st)
		}
	}
	var other timelineReply
	if st := f.callAs("tl-user", "pw", "GET", "/api/dead-letters/timeline", nil, &other); st != 200 || other.Total != 0 || len(other.BySource) != 0 || len(other.Buckets) != 60 {
		t.Fatalf("another vhost's user: %d %+v", st, other)
	}
	// Asking for / is refused, as GET /api/dead-letters/%2F is.
	other = timelineReply{}
	if st := f.callAs("tl-user", "pw", "GET", "/api/dead-letters/timeline/%2F", nil, &other); st != 401 || other.Total != 0 || other.Buckets != nil {
		t.Fatalf("another vhost's user asking for /: %d %+v", st, other)
	}
	if st := f.callAs("tl-user", "pw", "GET", "/api/dead-letters/%2F", nil, nil); st != 401 {
		t.Fatalf("another vhost's user asking for /'s DLQs: %d, the timeline should answer the same", st)
	}

	// Bad windows are refused.
	for _, q := range []string{"0", "61", "x"} {
		if st := f.call("GET", "/api/dead-letters/timeline?minutes="+q, nil, nil); st != 400 {
			t.Fatalf("minutes=%s: status %d, want 400", q, st)
		}
	}

	// A deleted queue's counts go with it; the hour slides past the rest.
	_, err = ch.QueueDelete("tl.rej", false, false, false)
	must(t, err)
	r = f.timeline("/api/dead-letters/timeline/%2F")
	if r.Total != 5 || countsOf(r.BySource)["tl.rej"] != 0 {
		t.Fatalf("after deleting tl.rej: %+v", r)
	}
	clk.Advance(59 * time.Minute)
	if r = f.timeline("/api/dead-letters/timeline/%2F"); r.Total != 3 || r.Buckets[0].Total != 3 {
		t.Fatalf("59 minutes later, 10:01 is the oldest minute: %+v", r)
	}
	clk.Advance(time.Minute)
	if r = f.timeline("/api/dead-letters/timeline/%2F"); r.Total != 0 {
		t.Fatalf("an hour later: %+v", r)
	}
}

type previewReply struct {
	DryRun      bool `json:"dry_run"`
	WouldReplay int  `json:"would_replay"`
	WouldStay   int  `json:"would_stay"`
	Matched     int  `json:"matched"`
	Skipped     int  `json:"skipped"`
	Listed      int  `json:"listed"`
	Messages    []struct {
		Position    int
		Status      string
		Exchange    string
		RoutingKeys []string `json:"routing_keys"`
		Queues      []string
		Error       string
		FirstDeath  struct{ Reason, Queue string } `json:"first_death"`
	}
	Destinations []struct {
		Status   string
		Exchange *string
		Queues   []string
		Count    int
		Error    string
	}
	Error string
}

// summary renders a preview's messages and destinations compactly.
func (p previewReply) summary() string {
	var b strings.Builder
	for _, m := range p.Messages {
		fmt.Fprintf(&b, "%d:%s:%s/%s:%q%v%v ", m.Position, m.Status, m.FirstDeath.Queue, m.FirstDeath.Reason, m.Exchange, m.RoutingKeys, m.Queues)
	}
	b.WriteString("| ")
	for _, d := range p.Destinations {
		x := "-"
		if d.Exchange != nil {
			x = fmt.Sprintf("%q", *d.Exchange)
		}
		fmt.Fprintf(&b, "%s:%s%v=%d ", d.Status, x, d.Queues, d.Count)
	}
	return b.String()
}

// issue 15: a replay's dry run says which dead letters would go where,
// moves nothing, reveals no more than the replay would (read on the DLQ
// first, a refused republish shows no routing), and the replay then does
// what it said.
func TestReplayPreview(t *testing.T) {
	f := newFixture(t)
	f.topology()
	f.deadLetter("a", "b")
	// g dies from a queue that is then deleted: its replay (to the default
	// exchange, key "gone") is unroutable, and stops the replay before c.
	_, err := f.ch.QueueDeclare("gone", false, false, false, false, amqp.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "orders.dlq"})
	must(t, err)
	must(t, f.ch.PublishWithContext(context.Background(), "", "gone", false, false, amqp.Publishing{Body: []byte("g")}))
	must(t, f.get("gone").Reject(false))
	f.waitCount("orders.dlq", 3)
	_, err = f.ch.QueueDelete("gone", false, false, false)
	must(t, err)
	f.deadLetter2("c")

	preview := func(user, pass string, body map[string]any) (int, previewReply) {
		t.Helper()
		body["dry_run"] = true
		var p previewReply
		st := f.callAs(user, pass, "POST", "/api/dead-letters/%2F/orders.dlq/replay", body, &p)
		return st, p
	}
	st, p := preview("guest", "guest", map[string]any{})
	want := `0:routed:orders/rejected:"orders-x"[new][orders] 1:routed:orders/rejected:"orders-x"[new][orders] ` +
		`2:unroutable:gone/rejected:""[gone][] 3:blocked:orders/rejected:"orders-x"[new][] ` +
		`| routed:"orders-x"[orders]=2 unroutable:""[]=1 blocked:-[]=1 `
	if st != 200 || !p.DryRun || p.summary() != want || p.WouldReplay != 2 || p.WouldStay != 2 || p.Matched != 4 {
		t.Fatalf("preview: %d %+v\n got %s\nwant %s", st, p, p.summary(), want)
	}
	if !strings.Contains(p.Messages[2].Error, "no queue bound to exchange 'amq.default' takes routing key 'gone'") {
		t.Fatalf("unroutable message's error: %q", p.Messages[2].Error)
	}
	// Listing is bounded; the destinations still count every message.
	if _, p = preview("guest", "guest", map[string]any{"list": 1}); p.Listed != 1 || len(p.Messages) != 1 || len(p.Destinations) != 3 || p.Destinations[0].Count != 2 {
		t.Fatalf("list=1: %+v", p)
	}
	// The replay's filters apply.
	if _, p = preview("guest", "guest", map[string]any{"source_queue": "orders", "count": 2}); p.summary() !=
		`0:routed:orders/rejected:"orders-x"[new][orders] 1:routed:orders/rejected:"orders-x"[new][orders] | routed:"orders-x"[orders]=2 ` {
		t.Fatalf("source_queue=orders, count=2: %s", p.summary())
	}
	if st, _ := preview("guest", "guest", map[string]any{"reason": "bogus"}); st != 400 {
		t.Fatalf("bad reason: %d", st)
	}

	// Nothing moved: same messages, same order, none redelivered, and
	// none in orders.
	check := func(when string, wantDLQ string) {
		t.Helper()
		b := f.browse("orders.dlq")
		if fmt.Sprint(payloads(b)) != wantDLQ {
			t.Fatalf("%s: DLQ holds %v, want %s", when, payloads(b), wantDLQ)
		}
		for _, m := range b.Messages {
			if m.Redelivered {
				t.Fatalf("%s: %s is marked redelivered", when, m.Payload)
			}
		}
	}
	check("after the previews", "[a b g c]")
	if n := f.count("orders"); n != 0 {
		t.Fatalf("orders holds %d after the previews", n)
	}

	// Permissions: the replay's. No write on orders-x: those are refused
	// and show no routing; no read on the DLQ: refused outright, as the
	// replay is.
	for _, c := range []struct {
		path string
		body any
	}{
		{"/api/users/pv-w", map[string]any{"password": "pw", "tags": "management"}},
		{"/api/permissions/%2F/pv-w", map[string]any{"configure": "", "write": "^amq\\.default$", "read": ".*"}},
		{"/api/users/pv-r", map[string]any{"password": "pw", "tags": "management"}},
		{"/api/permissions/%2F/pv-r", map[string]any{"configure": "", "write": ".*", "read": "^orders$"}},
	} {
		if st := f.call("PUT", c.path, c.body, nil); st != 201 && st != 204 {
			t.Fatalf("PUT %s: %d", c.path, st)
		}
	}
	st, p = preview("pv-w", "pw", map[string]any{})
	if st != 200 || p.Messages[0].Status != "access_refused" || len(p.Messages[0].Queues) != 0 ||
		!strings.Contains(p.Messages[0].Error, "access to exchange 'orders-x' in vhost '/' refused for user 'pv-w'") ||
		p.Messages[1].Status != "blocked" || len(p.Destinations) != 2 || len(p.Destinations[0].Queues) != 0 || p.WouldReplay != 0 {
		t.Fatalf("preview without write on orders-x: %d %s %+v", st, p.summary(), p)
	}
	var r replayReply
	if f.callAs("pv-w", "pw", "POST", "/api/dead-letters/%2F/orders.dlq/replay", map[string]any{}, &r); r.Replayed != 0 || !strings.Contains(r.Error, "access to exchange 'orders-x'") {
		t.Fatalf("the replay the preview described: %+v", r)
	}
	stPreview, p := preview("pv-r", "pw", map[string]any{})
	stReplay := f.callAs("pv-r", "pw", "POST", "/api/dead-letters/%2F/orders.dlq/replay", map[string]any{}, nil)
	if stPreview != 401 || stReplay != 401 || len(p.Messages) != 0 || p.Error != "not_authorised" {
		t.Fatalf("no read on the DLQ: preview %d %+v, replay %d", stPreview, p, stReplay)
	}
	check("after the refused previews and replay", "[a b g c]")

	// The replay does what the preview said: a and b to orders, then
	// stops at g, which stays with c.
	r = replayReply{}
	f.call("POST", "/api/dead-letters/%2F/orders.dlq/replay", map[string]any{}, &r)
	if r.Replayed != 2 || r.Failed != 1 || r.Remaining != 2 {
		t.Fatalf("replay after the preview: %+v", r)
	}
	for _, want := range []string{"a", "b"} {
		if d := f.get("orders"); string(d.Body) != want {
			t.Fatalf("orders gave %q, want %q", d.Body, want)
		}
	}
	b := f.browse("orders.dlq")
	if fmt.Sprint(payloads(b)) != "[g c]" {
		t.Fatalf("DLQ after the replay: %v, want [g c]", payloads(b))
	}
}

// issue 15: in a cluster each node counts the dead letters of the queues
// it dead-letters for; any node's timeline sums them all (the vhosts the
// user may see).
func TestDeadLetterTimelineCluster(t *testing.T) {
	_, nodes, _ := setupCluster(t)
	dl := wamqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "h5-dlq"}
	declare := func(vhost, name, home string, args wamqp.Table) {
		everywhere(nodes, func(b *broker.Broker) {
			_, _, _, err := b.VHost(vhost).DeclareQueue(broker.QueueSpec{Name: name, Durable: true, Home: home, Args: args}, false)
			must(t, err)
		})
	}
	// h5v's DLQ is on a, fed from a and from c (a remote target); /'s is on c.
	declare("h5v", "h5-dlq", nodeA, nil)
	declare("/", "h5-dlq", nodeC, nil)
	declare("h5v", "h5-src-a", nodeA, dl)
	declare("h5v", "h5-src-c", nodeC, dl)
	declare("/", "h5-src-c", nodeC, dl)
	reject := func(cn *clusterNode, vhost, q string, n int) {
		t.Helper()
		conn := dial(t, cn, "guest", vhost)
		publish(t, conn, q, n)
		ch, err := conn.Channel()
		must(t, err)
		for range n {
			var d amqp.Delivery
			if !testutil.Until(5*time.Second, func() bool {
				var ok bool
				d, ok, err = ch.Get(q, false)
				must(t, err)
				return ok
			}) {
				t.Fatalf("nothing in %s", q)
			}
			must(t, d.Reject(false))
		}
	}
	reject(nodes[nodeA], "h5v", "h5-src-a", 2)
	reject(nodes[nodeC], "h5v", "h5-src-c", 3)
	reject(nodes[nodeC], "/", "h5-src-c", 1)

	f := nodes[nodeB].f // dead-letters nothing itself
	f.t = t
	r := f.waitTimeline("/api/dead-letters/timeline/h5v?minutes=1", 5)
	if fmt.Sprint(countsOf(r.BySource)) != "map[h5-src-a:2 h5-src-c:3]" || fmt.Sprint(countsOf(r.ByTarget)) != "map[h5-dlq:5]" ||
		r.ByReason["rejected"] != 5 || r.Buckets[0].Total != 5 {
		t.Fatalf("h5v's timeline from b: %+v", r)
	}
	if r = f.waitTimeline("/api/dead-letters/timeline", 6); len(r.BySource) != 3 {
		t.Fatalf("guest's timeline of every vhost from b: %+v", r)
	}
	var bob timelineReply
	if st := f.callAs("h5-bob", "h5-bob", "GET", "/api/dead-letters/timeline", nil, &bob); st != 200 || bob.Total != 5 {
		t.Fatalf("h5-bob's timeline (h5v only): %d %+v", st, bob)
	}
}
