package integration

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// dlxRetryTestInterval is broker.dlxRetryInterval, the at-least-once retry period.
const dlxRetryTestInterval = time.Second

func quorumArgs(extra amqp.Table) amqp.Table {
	t := amqp.Table{"x-queue-type": "quorum"}
	for k, v := range extra {
		t[k] = v
	}
	return t
}

// declareDurable declares a durable queue (quorum queues must be durable, R1.9).
func declareDurable(t *testing.T, e *env, ch *amqp.Channel, name string, args amqp.Table) string {
	t.Helper()
	if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		t.Fatalf("declare %s: %v", name, err)
	}
	e.cleanupQueue(name)
	return name
}

// R5.3: a quorum queue's delivery limit defaults to 20: the 21st failed
// delivery dead-letters the message (delivery_limit); redeliveries carry
// x-delivery-count and x-acquired-count.
func TestQuorumDefaultDeliveryLimit(t *testing.T) {
	e := newEnv(t)
	e.warren()
	ch := e.channel()
	dlx, dlq := dlxTopology(t, e, ch, "k")
	q := declareDurable(t, e, ch, e.name("qq"), quorumArgs(amqp.Table{"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "k"}))
	publishBody(t, ch, "", q, "poison")
	ds := consume(t, ch, q, "", false, nil)
	for i := 0; i < 21; i++ {
		d := recv(t, ds)
		if i > 0 {
			if d.Headers["x-delivery-count"] != int64(i) || d.Headers["x-acquired-count"] != int64(i) {
				t.Fatalf("delivery %d: x-delivery-count %v x-acquired-count %v, want %d", i+1, d.Headers["x-delivery-count"], d.Headers["x-acquired-count"], i)
			}
		}
		d.Reject(true)
	}
	noRecv(t, ds)
	e.waitMessages(dlq, 1)
	wantDeath(t, death(t, getOne(t, ch, dlq), 0), map[string]any{"reason": "delivery_limit", "queue": q})
}

// R5.3 (4.3): basic.nack(requeue) does not count as a failed delivery;
// only x-acquired-count grows.
func TestQuorumNackDoesNotCount(t *testing.T) {
	e := newEnv(t)
	e.warren()
	ch := e.channel()
	q := declareDurable(t, e, ch, e.name("qq"), quorumArgs(amqp.Table{"x-delivery-limit": int32(1)}))
	publishBody(t, ch, "", q, "m")
	ds := consume(t, ch, q, "", false, nil)
	for i := 0; i < 5; i++ {
		d := recv(t, ds)
		if _, has := d.Headers["x-delivery-count"]; has {
			t.Fatalf("delivery %d carries x-delivery-count after nacks only", i+1)
		}
		if i > 0 && d.Headers["x-acquired-count"] != int64(i) {
			t.Fatalf("delivery %d: x-acquired-count %v, want %d", i+1, d.Headers["x-acquired-count"], i)
		}
		d.Nack(false, true)
	}
	recv(t, ds).Ack(false)
}

// R5.3: without a DLX a message over the limit is dropped.
func TestQuorumDeliveryLimitWithoutDLXDrops(t *testing.T) {
	e := newEnv(t)
	e.warren()
	ch := e.channel()
	q := declareDurable(t, e, ch, e.name("qq"), quorumArgs(amqp.Table{"x-delivery-limit": int32(0)}))
	publishBody(t, ch, "", q, "m")
	ds := consume(t, ch, q, "", false, nil)
	recv(t, ds).Reject(true)
	noRecv(t, ds)
	e.waitMessages(q, 0)
	if st := e.w.Broker().VHost("/").Queue(q).Stats(); st.Dropped["delivery_limit"] != 1 {
		t.Fatalf("dropped delivery_limit: got %d, want 1", st.Dropped["delivery_limit"])
	}
}

// R5.4: with a delivery limit, returns are served before other ready
// messages; with the limit disabled (negative) they go to the back.
func TestQuorumRequeuePosition(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit int32
		want  []string
	}{
		{"limited", 5, []string{"a", "b", "c"}},
		{"unlimited", -1, []string{"b", "c", "a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.warren()
			ch := e.channel()
			q := declareDurable(t, e, ch, e.name("qq"), quorumArgs(amqp.Table{"x-delivery-limit": tc.limit}))
			for _, b := range []string{"a", "b", "c"} {
				publishBody(t, ch, "", q, b)
			}
			d, ok, err := ch.Get(q, false)
			if err != nil || !ok || string(d.Body) != "a" {
				t.Fatalf("get: %v %v %q", ok, err, d.Body)
			}
			d.Nack(false, true)
			e.waitMessages(q, 3)
			if got := getBodies(t, ch, q); len(got) != 3 || got[0] != tc.want[0] || got[1] != tc.want[1] || got[2] != tc.want[2] {
				t.Fatalf("order: got %v, want %v", got, tc.want)
			}
		})
	}
}

// R1.3: quorum queues accept reject-publish-dlx but behave as drop-head.
func TestQuorumRejectPublishDLXIsDropHead(t *testing.T) {
	e := newEnv(t)
	e.warren()
	ch := e.channel()
	q := declareDurable(t, e, ch, e.name("qq"), quorumArgs(amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish-dlx"}))
	publishBody(t, ch, "", q, "a")
	publishBody(t, ch, "", q, "b") // confirmed (acked), not nacked
	if got := getBodies(t, ch, q); len(got) != 1 || got[0] != "b" {
		t.Fatalf("queue: got %v, want [b]", got)
	}
}

// R1.14, R3.2, R3.9 (T:fdlx dlx_missing / target_queue_not_bound /
// reject_publish_target_classic_queue): at-least-once dead-lettering keeps
// the message with the source until a target takes it, retrying.
func TestQuorumAtLeastOnceRetains(t *testing.T) {
	e, clk := fakeEnv(t)
	ch := e.channel()
	dlx := e.exchange(ch, e.name("dlx"), "direct", nil)
	q := declareDurable(t, e, ch, e.name("qq"), quorumArgs(amqp.Table{"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "k",
		"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}))
	publishBody(t, ch, "", q, "m")
	d, ok, err := ch.Get(q, false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	d.Nack(false, false)
	src := e.w.Broker().VHost("/").Queue(q)
	waitFor(t, "dead letter retained", func() bool { return src.Stats().DeadLetterPending == 1 })
	clk.Advance(dlxRetryTestInterval) // still nowhere to go
	if st := src.Stats(); st.DeadLetterPending != 1 {
		t.Fatalf("pending after a retry with no target: got %d, want 1", st.DeadLetterPending)
	}
	// A full reject-publish target refuses it: still retained.
	dlq := declareDurable(t, e, ch, e.name("dlq"), amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	publishBody(t, ch, "", dlq, "filler")
	bind(t, ch, dlq, "k", dlx, nil)
	clk.Advance(dlxRetryTestInterval)
	if st := src.Stats(); st.DeadLetterPending != 1 {
		t.Fatalf("pending with a full target: got %d, want 1", st.DeadLetterPending)
	}
	if got := getBodies(t, ch, dlq); len(got) != 1 || got[0] != "filler" {
		t.Fatalf("dlq: got %v, want [filler]", got)
	}
	clk.Advance(dlxRetryTestInterval)
	waitFor(t, "dead letter delivered", func() bool { return src.Stats().DeadLetterPending == 0 })
	dl := getOne(t, ch, dlq)
	wantDeath(t, death(t, dl, 0), map[string]any{"reason": "rejected", "queue": q, "count": int64(1)})
}

// R1.14: with drop-head (the default overflow) at-least-once falls back to
// at most once: a dead letter with nowhere to go is dropped.
func TestQuorumAtLeastOnceNeedsRejectPublish(t *testing.T) {
	e := newEnv(t)
	e.warren()
	ch := e.channel()
	dlx := e.exchange(ch, e.name("dlx"), "direct", nil)
	q := declareDurable(t, e, ch, e.name("qq"), quorumArgs(amqp.Table{"x-dead-letter-exchange": dlx,
		"x-dead-letter-strategy": "at-least-once"}))
	publishBody(t, ch, "", q, "m")
	d, _, _ := ch.Get(q, false)
	d.Nack(false, false)
	e.waitMessages(q, 0)
	if st := e.w.Broker().VHost("/").Queue(q).Stats(); st.DeadLetterPending != 0 {
		t.Fatalf("pending: got %d, want 0 (at most once)", st.DeadLetterPending)
	}
}
