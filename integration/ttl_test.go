package integration

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// R2.2, R3.1, R3.4: a queue TTL expires messages into the DLX with reason
// expired (the seed's orders.ttl case). No original-expiration: queue TTL is
// not recorded (R2.6).
func TestQueueTTLDeadLetters(t *testing.T) {
	e, clk := fakeEnv(t)
	ch := e.channel()
	dlx, dlq := dlxTopology(t, e, ch, "failed")
	q := e.queue(ch, e.name("orders.ttl"), amqp.Table{"x-message-ttl": int32(5000),
		"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "failed"})
	publishBody(t, ch, "", q, "m-1")
	clk.Advance(4999 * time.Millisecond)
	if n, _ := counts(t, ch, dlq); n != 0 {
		t.Fatalf("dead-lettered before the TTL: %d in DLQ", n)
	}
	clk.Advance(time.Millisecond)
	e.waitMessages(dlq, 1)
	d := getOne(t, ch, dlq)
	wantDeath(t, death(t, d, 0), map[string]any{"reason": "expired", "count": int64(1), "queue": q,
		"exchange": "", "routing-keys": []any{q}})
	if _, ok := death(t, d, 0)["original-expiration"]; ok {
		t.Errorf("original-expiration set for a queue TTL (R2.6)")
	}
	if n, _ := counts(t, ch, q); n != 0 {
		t.Errorf("source queue: got %d messages, want 0", n)
	}
}

// Warren beyond R2.4: a per-message TTL expires on time wherever the
// message sits, and the order of the others is unchanged.
func TestPerMessageTTLExpiresAnywhere(t *testing.T) {
	e, clk := fakeEnv(t)
	ch := e.channel()
	dlx, dlq := dlxTopology(t, e, ch, "k")
	q := e.queue(ch, e.name("q"), amqp.Table{"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "k"})
	publishBody(t, ch, "", q, "a")
	publish(t, ch, "", q, amqp.Publishing{Body: []byte("b"), Expiration: "1000"})
	publishBody(t, ch, "", q, "c")
	publish(t, ch, "", q, amqp.Publishing{Body: []byte("d"), Expiration: "3000"})
	clk.Advance(1000 * time.Millisecond)
	e.waitMessages(q, 3)
	e.waitMessages(dlq, 1) // dead-lettered by the queue's flusher, after b left (issue 12)
	d := getOne(t, ch, dlq)
	if string(d.Body) != "b" || d.Expiration != "" {
		t.Fatalf("DLQ: got %q (expiration %q), want b without expiration", d.Body, d.Expiration)
	}
	wantDeath(t, death(t, d, 0), map[string]any{"reason": "expired", "original-expiration": "1000"})
	if got := getBodies(t, ch, q); len(got) != 3 || got[0] != "a" || got[1] != "c" || got[2] != "d" {
		t.Fatalf("left in queue: got %v, want [a c d]", got)
	}
}

// R2.2: the smaller of the queue and message TTLs wins.
func TestSmallerTTLWins(t *testing.T) {
	e, clk := fakeEnv(t)
	ch := e.channel()
	q := e.queue(ch, e.name("q"), amqp.Table{"x-message-ttl": int32(1000)})
	publish(t, ch, "", q, amqp.Publishing{Body: []byte("long"), Expiration: "5000"})
	publish(t, ch, "", q, amqp.Publishing{Body: []byte("short"), Expiration: "500"})
	clk.Advance(500 * time.Millisecond)
	e.waitMessages(q, 1)
	clk.Advance(500 * time.Millisecond)
	e.waitMessages(q, 0)
}

// R2.5: TTL 0 is delivered when a consumer can take it at once, else it
// expires on arrival (dead-lettered, never returned).
func TestZeroTTL(t *testing.T) {
	e, _ := fakeEnv(t)
	ch := e.channel()
	dlx, dlq := dlxTopology(t, e, ch, "k")
	q := e.queue(ch, e.name("q"), amqp.Table{"x-message-ttl": int32(0), "x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "k"})
	publishBody(t, ch, "", q, "nobody")
	e.waitMessages(dlq, 1)
	if n, _ := counts(t, ch, q); n != 0 {
		t.Fatalf("queue: got %d, want 0", n)
	}
	ds := consume(t, e.channel(), q, "", true, nil)
	publishBody(t, ch, "", q, "taken")
	if d := recv(t, ds); string(d.Body) != "taken" {
		t.Fatalf("got %q, want taken", d.Body)
	}
	if n, _ := counts(t, ch, dlq); n != 1 {
		t.Fatalf("DLQ: got %d, want 1 (the delivered one must not be dead-lettered)", n)
	}
	// Taken at once but requeued: it has expired (R2.5).
	q2 := e.queue(ch, e.name("q2"), amqp.Table{"x-message-ttl": int32(0), "x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "k"})
	md := consume(t, e.channel(), q2, "", false, nil)
	publishBody(t, ch, "", q2, "requeued")
	d := recv(t, md)
	d.Nack(false, true)
	e.waitMessages(dlq, 2)
	noRecv(t, md)
}

// R2.3: requeue keeps the original deadline; a message requeued after it
// expires at once.
func TestRequeueKeepsDeadline(t *testing.T) {
	e, clk := fakeEnv(t)
	ch := e.channel()
	dlx, dlq := dlxTopology(t, e, ch, "k")
	q := e.queue(ch, e.name("q"), amqp.Table{"x-message-ttl": int32(1000), "x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "k"})
	publishBody(t, ch, "", q, "m")
	d, ok, err := ch.Get(q, false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	clk.Advance(1500 * time.Millisecond)
	if err := d.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	e.waitMessages(dlq, 1)
	if n, _ := counts(t, ch, q); n != 0 {
		t.Fatalf("queue: got %d, want 0", n)
	}
}

// R2.1: an invalid expiration closes the channel with RabbitMQ's 406 texts
// (checked against RabbitMQ 3.10.8).
func TestInvalidExpiration(t *testing.T) {
	for _, tc := range []struct{ exp, text string }{
		{"abc", "PRECONDITION_FAILED - invalid expiration 'abc': no_integer"},
		{"12abc", `PRECONDITION_FAILED - invalid expiration '12abc': {leftover_string,"abc"}`},
		{"-5", "PRECONDITION_FAILED - invalid expiration '-5': {value_negative,-5}"},
		{"315360000001", "PRECONDITION_FAILED - invalid expiration '315360000001': {value_too_large,315360000001}"},
		{" 5", "PRECONDITION_FAILED - invalid expiration ' 5': no_integer"},
	} {
		t.Run(tc.exp, func(t *testing.T) {
			e := newEnv(t)
			ch := e.channel()
			q := e.queue(ch, "", nil)
			closed := ch.NotifyClose(make(chan *amqp.Error, 1))
			publishNoWait(t, ch, "", q, amqp.Publishing{Body: []byte("x"), Expiration: tc.exp})
			select {
			case ae := <-closed:
				if ae == nil || ae.Code != 406 || ae.Reason != tc.text {
					t.Fatalf("got %v, want 406 %q", ae, tc.text)
				}
			case <-time.After(waitTimeout):
				t.Fatal("channel not closed")
			}
		})
	}
	e := newEnv(t)
	ch := e.channel()
	q := e.queue(ch, "", nil)
	publish(t, ch, "", q, amqp.Publishing{Body: []byte("x"), Expiration: "+5"})
}

// R2.7: x-expires deletes a queue unused that long; its messages are not
// dead-lettered. A consumer keeps it; so does a declare, passive or not
// (as in RabbitMQ), which is why existence is read from the broker here.
func TestQueueExpires(t *testing.T) {
	e, clk := fakeEnv(t)
	ch := e.channel()
	vh := e.w.Broker().VHost("/")
	dlx, dlq := dlxTopology(t, e, ch, "k")
	q := e.queue(ch, e.name("q"), amqp.Table{"x-expires": int32(2000), "x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "k"})
	publishBody(t, ch, "", q, "m")
	clk.Advance(1999 * time.Millisecond)
	if vh.Queue(q) == nil {
		t.Fatal("queue deleted before x-expires")
	}
	clk.Advance(time.Millisecond)
	waitFor(t, "queue deleted", func() bool { return vh.Queue(q) == nil })
	if n, _ := counts(t, ch, dlq); n != 0 {
		t.Fatalf("DLQ: got %d, want 0 (queue expiry never dead-letters)", n)
	}

	q2 := e.queue(ch, e.name("q2"), amqp.Table{"x-expires": int32(2000)})
	consume(t, e.channel(), q2, "", true, nil)
	clk.Advance(10 * time.Second)
	if vh.Queue(q2) == nil {
		t.Fatal("queue with a consumer expired")
	}

	q3 := e.queue(ch, e.name("q3"), amqp.Table{"x-expires": int32(2000)})
	clk.Advance(1500 * time.Millisecond)
	if _, err := ch.QueueDeclarePassive(q3, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	clk.Advance(1500 * time.Millisecond)
	if vh.Queue(q3) == nil {
		t.Fatal("queue expired although a passive declare renewed it")
	}
	clk.Advance(500 * time.Millisecond)
	waitFor(t, "q3 deleted", func() bool { return vh.Queue(q3) == nil })
}

// R3.8: a queue that dead-letters to itself on expiry is a cycle (the
// history already holds the current event): the message is dropped at
// the first expiry, not looped (J:DLX deadLetterSelf).
func TestSelfExpiryCycleDropped(t *testing.T) {
	e, clk := fakeEnv(t)
	ch := e.channel()
	q := e.name("self")
	e.queue(ch, q, amqp.Table{"x-message-ttl": int32(100), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": q})
	publishBody(t, ch, "", q, "m")
	clk.Advance(100 * time.Millisecond)
	e.waitMessages(q, 0)
	clk.Advance(time.Second)
	if n, _ := counts(t, ch, q); n != 0 {
		t.Fatalf("queue: got %d, want 0", n)
	}
}
