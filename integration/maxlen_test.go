package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// R4.2 and the seed chapter: three messages into a queue of length 2 with
// drop-head dead-letter m-1, the oldest, with reason maxlen.
func TestMaxLengthDropHead(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	dlx, dlq := dlxTopology(t, e, ch, "failed")
	q := e.queue(ch, e.name("orders.bounded"), amqp.Table{"x-max-length": int32(2),
		"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "failed"})
	for _, b := range []string{"m-1", "m-2", "m-3"} {
		publishBody(t, ch, "", q, b)
	}
	e.waitMessages(dlq, 1)
	d := getOne(t, ch, dlq)
	if string(d.Body) != "m-1" {
		t.Fatalf("dead-lettered %q, want m-1", d.Body)
	}
	wantDeath(t, death(t, d, 0), map[string]any{"reason": "maxlen", "queue": q, "count": int64(1)})
	if got := getBodies(t, ch, q); len(got) != 2 || got[0] != "m-2" || got[1] != "m-3" {
		t.Fatalf("queue: got %v, want [m-2 m-3]", got)
	}
}

// R4.2 with bytes: the head goes until the body bytes fit.
func TestMaxLengthBytesDropHead(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	q := e.queue(ch, e.name("q"), amqp.Table{"x-max-length-bytes": int32(10)})
	for _, b := range []string{"aaaa", "bbbb", "cccc"} {
		publishBody(t, ch, "", q, b)
	}
	if got := getBodies(t, ch, q); len(got) != 2 || got[0] != "bbbb" {
		t.Fatalf("queue: got %v, want [bbbb cccc]", got)
	}
}

// R4.1: unacked messages do not count towards the limit.
func TestMaxLengthCountsReadyOnly(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	q := e.queue(ch, e.name("q"), amqp.Table{"x-max-length": int32(1)})
	publishBody(t, ch, "", q, "a")
	if _, ok, err := ch.Get(q, false); err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	publishBody(t, ch, "", q, "b")
	if n, _ := counts(t, ch, q); n != 1 {
		t.Fatalf("got %d ready, want 1 (the unacked one does not count)", n)
	}
}

// R4.5: reject-publish nacks the publisher's confirm when full, and acks
// again once there is room.
func TestRejectPublishNacks(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	q := e.queue(ch, e.name("q"), amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirm := func(body string) bool {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !confirm("a") {
		t.Fatal("first publish nacked")
	}
	if confirm("b") {
		t.Fatal("publish over the limit acked, want nack")
	}
	getOne(t, ch, q)
	if !confirm("c") {
		t.Fatal("publish after room was made nacked")
	}
	if got := getBodies(t, ch, q); len(got) != 1 || got[0] != "c" {
		t.Fatalf("queue: got %v, want [c]", got)
	}
}

// R4.6: reject-publish-dlx also dead-letters the refused message (maxlen).
func TestRejectPublishDLX(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	dlx, dlq := dlxTopology(t, e, ch, "k")
	q := e.queue(ch, e.name("q"), amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish-dlx",
		"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "k"})
	publishBody(t, ch, "", q, "a")
	publishNoWait(t, ch, "", q, amqp.Publishing{Body: []byte("b")})
	e.waitMessages(dlq, 1)
	d := getOne(t, ch, dlq)
	if string(d.Body) != "b" {
		t.Fatalf("dead-lettered %q, want b (the new message)", d.Body)
	}
	wantDeath(t, death(t, d, 0), map[string]any{"reason": "maxlen"})
}

// Classic queues with x-delivery-limit (Warren's extension of R5.3): a
// message rejected with requeue more than the limit is dead-lettered with
// reason delivery_limit; redeliveries carry x-delivery-count.
func TestDeliveryLimitStopsRejectLoop(t *testing.T) {
	e := newEnv(t)
	e.warren()
	ch := e.channel()
	dlx, dlq := dlxTopology(t, e, ch, "k")
	q := e.queue(ch, e.name("q"), amqp.Table{"x-delivery-limit": int32(2),
		"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "k"})
	publishBody(t, ch, "", q, "poison")
	ds := consume(t, ch, q, "", false, nil)
	for i := 0; i < 3; i++ {
		d := recv(t, ds)
		count, has := d.Headers["x-delivery-count"]
		if i == 0 && has {
			t.Errorf("first delivery carries x-delivery-count %v", count)
		}
		if i > 0 && count != int64(i) {
			t.Errorf("delivery %d: x-delivery-count got %v, want %d", i+1, count, i)
		}
		if i > 0 && !d.Redelivered {
			t.Errorf("delivery %d not marked redelivered", i+1)
		}
		if err := d.Reject(true); err != nil {
			t.Fatal(err)
		}
	}
	noRecv(t, ds)
	e.waitMessages(dlq, 1)
	dl := getOne(t, ch, dlq)
	wantDeath(t, death(t, dl, 0), map[string]any{"reason": "delivery_limit", "queue": q})
}

// R5.1: nack(requeue=true) never dead-letters: 200 deliveries, 199 of them
// redelivered, nothing dead-lettered, the message still queued (the seed's
// infinite loop). basic.nack does not count towards a delivery limit
// (R5.3, RabbitMQ 4.3).
func TestNackRequeueLoop(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	dlx, dlq := dlxTopology(t, e, ch, "k")
	q := e.queue(ch, e.name("q"), amqp.Table{"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "k"})
	publishBody(t, ch, "", q, "poison")
	ds := consume(t, ch, q, "", false, nil)
	redelivered := 0
	for i := 0; i < 200; i++ {
		d := recv(t, ds)
		if d.Redelivered {
			redelivered++
		}
		if i < 199 {
			d.Nack(false, true)
		} else {
			ch.Cancel(d.ConsumerTag, false)
			d.Nack(false, true)
		}
	}
	if redelivered != 199 {
		t.Errorf("redelivered: got %d, want 199", redelivered)
	}
	e.waitMessages(q, 1)
	if n, _ := counts(t, ch, dlq); n != 0 {
		t.Errorf("DLQ: got %d, want 0", n)
	}
}

// R5.5 on a classic queue: a failed return waits min(min × count, max)
// before it is delivered again, and still counts as a message.
func TestDelayedRetry(t *testing.T) {
	e, clk := fakeEnv(t)
	ch := e.channel()
	q := e.queue(ch, e.name("q"), amqp.Table{"x-delayed-retry-type": "failed",
		"x-delayed-retry-min": int32(1000), "x-delayed-retry-max": int32(1500), "x-delivery-limit": int32(10)})
	publishBody(t, ch, "", q, "m")
	ds := consume(t, ch, q, "", false, nil)
	d := recv(t, ds)
	d.Reject(true)
	e.waitMessages(q, 1) // delayed, but counted as a message
	noRecv(t, ds)
	clk.Advance(999 * time.Millisecond)
	noRecv(t, ds)
	clk.Advance(time.Millisecond)
	d = recv(t, ds)
	d.Reject(true)
	e.waitMessages(q, 1)                 // the reject reached the broker: the message waits again
	clk.Advance(1499 * time.Millisecond) // second failure: min(2000, 1500)
	noRecv(t, ds)
	clk.Advance(time.Millisecond)
	d = recv(t, ds)
	if d.Headers["x-delivery-count"] != int64(2) {
		t.Errorf("x-delivery-count: got %v, want 2", d.Headers["x-delivery-count"])
	}
	d.Ack(false)
}

// R4.3: a publish that a waiting consumer takes at once is never enqueued
// nor trimmed; with max-length 0, drop-head and no consumer every message
// is dead-lettered (J:QSL queueSize).
func TestMaxLengthZero(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	dlx, dlq := dlxTopology(t, e, ch, "k")
	q := e.queue(ch, e.name("q"), amqp.Table{"x-max-length": int32(0), "x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "k"})
	publishBody(t, ch, "", q, "a")
	publishBody(t, ch, "", q, "b")
	e.waitMessages(dlq, 2)
	if n, _ := counts(t, ch, q); n != 0 {
		t.Fatalf("queue: got %d, want 0", n)
	}
	ds := consume(t, e.channel(), q, "", true, nil)
	publishBody(t, ch, "", q, "c")
	if d := recv(t, ds); string(d.Body) != "c" {
		t.Fatalf("consumer got %q, want c", d.Body)
	}
	if n, _ := counts(t, ch, dlq); n != 2 {
		t.Fatalf("DLQ: got %d, want 2 (the consumed message was never trimmed)", n)
	}
}

// R4.4: on a drop-head queue a requeue that exceeds the limit trims the
// head afterwards, and the requeued (oldest) message goes first; with
// reject-publish a requeue never trims and the queue may exceed the limit.
func TestRequeueVersusLimit(t *testing.T) {
	for _, tc := range []struct {
		overflow string
		want     []string
		dead     []string
	}{
		{"drop-head", []string{"b", "c"}, []string{"a"}},
		{"reject-publish", []string{"a", "b", "c"}, nil},
	} {
		t.Run(tc.overflow, func(t *testing.T) {
			e := newEnv(t)
			ch := e.channel()
			dlx, dlq := dlxTopology(t, e, ch, "k")
			q := e.queue(ch, e.name("q"), amqp.Table{"x-max-length": int32(2), "x-overflow": tc.overflow,
				"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "k"})
			publishBody(t, ch, "", q, "a")
			d := getOne2(t, ch, q)
			publishBody(t, ch, "", q, "b")
			publishBody(t, ch, "", q, "c")
			d.Nack(false, true)
			e.waitMessages(dlq, len(tc.dead))
			waitFor(t, "requeue settled", func() bool {
				n, _ := counts(t, ch, q)
				return n == len(tc.want)
			})
			if got := getBodies(t, ch, q); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("queue: got %v, want %v", got, tc.want)
			}
			if got := getBodies(t, ch, dlq); strings.Join(got, ",") != strings.Join(tc.dead, ",") {
				t.Fatalf("dead-lettered: got %v, want %v", got, tc.dead)
			}
		})
	}
}

// R3.11: nack with multiple dead-letters in delivery-tag order.
func TestNackMultipleDeadLettersInOrder(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	dlx, dlq := dlxTopology(t, e, ch, "k")
	q := e.queue(ch, e.name("q"), amqp.Table{"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "k"})
	want := []string{"1", "2", "3", "4", "5"}
	for _, b := range want {
		publishBody(t, ch, "", q, b)
	}
	ds := consume(t, ch, q, "", false, nil)
	got := recvN(t, ds, len(want))
	got[len(got)-1].Nack(true, false)
	e.waitMessages(dlq, len(want))
	if dead := getBodies(t, ch, dlq); strings.Join(dead, ",") != strings.Join(want, ",") {
		t.Fatalf("dead-letter order: got %v, want %v", dead, want)
	}
}
