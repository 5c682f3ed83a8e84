package integration

// Restart tests for messages (issue 4): persistent messages in durable
// queues survive a restart on the same data directory in every state a
// message can be in (ready, unacked, delayed, expiring, dead-lettered),
// with their properties, headers, x-death and delivery counts; transient
// messages and non-durable queues do not.

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/clock"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

// rmPublish is publish (confirmed) with persistent as the default mode.
func rmPublish(t *testing.T, ch *amqp.Channel, exchange, key string, p amqp.Publishing) {
	t.Helper()
	if p.DeliveryMode == 0 {
		p.DeliveryMode = amqp.Persistent
	}
	publish(t, ch, exchange, key, p)
}

// durableDLQ declares a durable fanout dead-letter exchange and a durable
// queue bound to it.
func durableDLQ(t *testing.T, ch *amqp.Channel, dlx, dlq string) {
	t.Helper()
	rsCheck(t, "dlx", ch.ExchangeDeclare(dlx, "fanout", true, false, false, false, nil))
	rsCheck(t, "dlq", declareQ(ch, dlq, true, nil))
	rsCheck(t, "bind", ch.QueueBind(dlq, "", dlx, false, nil))
}

func rmGet(t *testing.T, ch *amqp.Channel, q string) (amqp.Delivery, bool) {
	t.Helper()
	d, ok, err := ch.Get(q, false)
	rsCheck(t, "get", err)
	return d, ok
}

func TestRestartKeepsReadyMessagesInOrder(t *testing.T) {
	b := warrentest.Start(t)
	_, ch := rsDial(t, b.URL())
	rsCheck(t, "confirm", ch.Confirm(false))
	rsCheck(t, "declare", declareQ(ch, "rm.ready", true, nil))
	rsCheck(t, "declare", declareQ(ch, "rm.transient-queue", false, nil))
	ts := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for i := range 100 {
		rmPublish(t, ch, "", "rm.ready", amqp.Publishing{Body: fmt.Appendf(nil, "m%03d", i), ContentType: "text/plain",
			Headers: amqp.Table{"i": int32(i), "s": "x", "nested": amqp.Table{"a": []any{"b", int64(2)}}}, MessageId: fmt.Sprint(i),
			Priority: 3, CorrelationId: "c", ReplyTo: "r", Timestamp: ts, Type: "t", AppId: "app", UserId: "guest"})
	}
	rmPublish(t, ch, "", "rm.ready", amqp.Publishing{Body: []byte("transient"), DeliveryMode: amqp.Transient})
	rmPublish(t, ch, "", "rm.transient-queue", amqp.Publishing{Body: []byte("p")})
	b.Restart()

	_, ch = rsDial(t, b.URL())
	if _, err := ch.QueueDeclarePassive("rm.transient-queue", false, false, false, false, nil); err == nil {
		t.Fatal("a non-durable queue survived the restart")
	}
	_, ch = rsDial(t, b.URL())
	for i := range 100 {
		d, ok := rmGet(t, ch, "rm.ready")
		if !ok {
			t.Fatalf("message %d lost", i)
		}
		if string(d.Body) != fmt.Sprintf("m%03d", i) {
			t.Fatalf("message %d: body %q (order or content lost)", i, d.Body)
		}
		if d.Redelivered {
			t.Errorf("message %d redelivered after a clean restart though never delivered", i)
		}
		if d.Headers["i"] != int32(i) || d.Headers["s"] != "x" || d.ContentType != "text/plain" || d.MessageId != fmt.Sprint(i) ||
			d.Priority != 3 || d.CorrelationId != "c" || d.ReplyTo != "r" || !d.Timestamp.Equal(ts) || d.Type != "t" ||
			d.AppId != "app" || d.UserId != "guest" || d.DeliveryMode != amqp.Persistent {
			t.Fatalf("message %d: properties not kept: %+v", i, d)
		}
		if n, ok := d.Headers["nested"].(amqp.Table); !ok || fmt.Sprint(n["a"]) != "[b 2]" {
			t.Fatalf("nested header lost: %#v", d.Headers["nested"])
		}
		rsCheck(t, "ack", d.Ack(false))
	}
	if d, ok := rmGet(t, ch, "rm.ready"); ok {
		t.Fatalf("a transient message survived the restart: %q", d.Body)
	}
}

func declareQ(ch *amqp.Channel, name string, durable bool, args amqp.Table) error {
	_, err := ch.QueueDeclare(name, durable, false, false, false, args)
	return err
}

// TestRestartReturnsUnackedAsRedelivered: a message delivered but not
// acked when the broker stops comes back with redelivered=true, in its
// original place; acked ones do not come back.
func TestRestartReturnsUnackedAsRedelivered(t *testing.T) {
	b := warrentest.Start(t)
	_, ch := rsDial(t, b.URL())
	rsCheck(t, "confirm", ch.Confirm(false))
	rsCheck(t, "declare", declareQ(ch, "rm.unacked", true, nil))
	for i := range 5 {
		rmPublish(t, ch, "", "rm.unacked", amqp.Publishing{Body: fmt.Appendf(nil, "%d", i)})
	}
	d0, _ := rmGet(t, ch, "rm.unacked")
	rsCheck(t, "ack", d0.Ack(false))
	rmGet(t, ch, "rm.unacked") // "1" stays unacked
	b.Restart()
	_, ch = rsDial(t, b.URL())
	var got []string
	for {
		d, ok := rmGet(t, ch, "rm.unacked")
		if !ok {
			break
		}
		got = append(got, fmt.Sprintf("%s:%v", d.Body, d.Redelivered))
		d.Ack(false)
	}
	if fmt.Sprint(got) != "[1:true 2:false 3:false 4:false]" {
		t.Fatalf("after restart got %v, want [1:true 2:false 3:false 4:false]", got)
	}
}

// TestRestartKeepsQuorumTransientMessages: a quorum queue stores every
// message, whatever its delivery mode, as RabbitMQ's quorum queues do: a
// transient message published to one, or dead-lettered into one, is there
// after a restart, still transient. A durable classic queue's transient
// message is not.
func TestRestartKeepsQuorumTransientMessages(t *testing.T) {
	b := warrentest.Start(t)
	_, ch := rsDial(t, b.URL())
	rsCheck(t, "confirm", ch.Confirm(false))
	qq := amqp.Table{"x-queue-type": "quorum"}
	rsCheck(t, "declare", declareQ(ch, "rm.qq.dlq", true, qq))
	rsCheck(t, "declare", declareQ(ch, "rm.qq", true, amqp.Table{"x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "rm.qq.dlq"}))
	rsCheck(t, "declare", declareQ(ch, "rm.classic", true, nil))
	for _, body := range []string{"acked", "rejected", "ready"} {
		publish(t, ch, "", "rm.qq", amqp.Publishing{Body: []byte(body), DeliveryMode: amqp.Transient})
	}
	publish(t, ch, "", "rm.classic", amqp.Publishing{Body: []byte("classic"), DeliveryMode: amqp.Transient})
	d, _ := rmGet(t, ch, "rm.qq")
	rsCheck(t, "ack", d.Ack(false))
	d, _ = rmGet(t, ch, "rm.qq")
	rsCheck(t, "reject", d.Reject(false))
	waitCount(t, ch, "rm.qq.dlq", 1)
	b.Restart()

	_, ch = rsDial(t, b.URL())
	for _, c := range []struct{ q, body string }{{"rm.qq", "ready"}, {"rm.qq.dlq", "rejected"}} {
		d, ok := rmGet(t, ch, c.q)
		if !ok {
			t.Fatalf("%s: the transient message %q was lost in the restart", c.q, c.body)
		}
		if string(d.Body) != c.body || d.DeliveryMode != amqp.Transient {
			t.Fatalf("%s: got %q with delivery mode %d, want %q, transient", c.q, d.Body, d.DeliveryMode, c.body)
		}
		if c.q == "rm.qq.dlq" {
			if xd, _ := d.Headers["x-death"].([]any); len(xd) != 1 {
				t.Fatalf("dead letter after restart: x-death %v", d.Headers["x-death"])
			}
		}
		if _, more := rmGet(t, ch, c.q); more {
			t.Fatalf("%s: more than one message after the restart", c.q)
		}
	}
	if d, ok := rmGet(t, ch, "rm.classic"); ok {
		t.Fatalf("a durable classic queue kept a transient message over a restart: %q", d.Body)
	}
}

// TestRestartKeepsDeadLettersAndXDeath: messages dead-lettered into a
// durable DLQ (rejected, expired, maxlen) keep their x-death history across
// a restart (issue 4, R3.4).
func TestRestartKeepsDeadLettersAndXDeath(t *testing.T) {
	b := warrentest.Start(t)
	_, ch := rsDial(t, b.URL())
	rsCheck(t, "confirm", ch.Confirm(false))
	durableDLQ(t, ch, "rm.dlx", "rm.dlq")
	rsCheck(t, "src", declareQ(ch, "rm.src", true, amqp.Table{"x-dead-letter-exchange": "rm.dlx", "x-max-length": int32(2)}))
	rmPublish(t, ch, "", "rm.src", amqp.Publishing{Body: []byte("rejected")})
	d, _ := rmGet(t, ch, "rm.src")
	rsCheck(t, "nack", d.Nack(false, false))
	rmPublish(t, ch, "", "rm.src", amqp.Publishing{Body: []byte("expired"), Expiration: "1"})
	waitCount(t, ch, "rm.dlq", 2) // "expired" is dead-lettered before "maxlen" is published
	rmPublish(t, ch, "", "rm.src", amqp.Publishing{Body: []byte("maxlen")})
	rmPublish(t, ch, "", "rm.src", amqp.Publishing{Body: []byte("k1")})
	rmPublish(t, ch, "", "rm.src", amqp.Publishing{Body: []byte("k2")})
	// The expired message left at once (expiry anywhere); "maxlen" was
	// dropped from the head by k2. Wait until the three are in the DLQ.
	waitCount(t, ch, "rm.dlq", 3)
	b.Restart()
	_, ch = rsDial(t, b.URL())
	want := []string{"rejected", "expired", "maxlen"}
	for _, w := range want {
		d, ok := rmGet(t, ch, "rm.dlq")
		if !ok {
			t.Fatalf("dead letter %q lost in the restart", w)
		}
		deaths, _ := d.Headers["x-death"].([]any)
		if string(d.Body) != w || len(deaths) != 1 {
			t.Fatalf("got %q with x-death %v, want %q with one entry", d.Body, d.Headers["x-death"], w)
		}
		x := deaths[0].(amqp.Table)
		if x["queue"] != "rm.src" || x["reason"] != w && !(w == "maxlen" && x["reason"] == "maxlen") || x["count"] != int64(1) {
			t.Fatalf("x-death of %q: %v", w, x)
		}
		if d.Headers["x-first-death-reason"] != w || d.Headers["x-first-death-queue"] != "rm.src" {
			t.Fatalf("x-first-death-* of %q: %v", w, d.Headers)
		}
		d.Ack(false)
	}
	if got := getBodies(t, ch, "rm.src"); fmt.Sprint(got) != "[k1 k2]" {
		t.Fatalf("source queue after restart: %v, want [k1 k2]", got)
	}
}

func waitCount(t *testing.T, ch *amqp.Channel, q string, n int) {
	t.Helper()
	var qi amqp.Queue
	if !testutil.Until(5*time.Second, func() bool {
		var err error
		qi, err = ch.QueueDeclarePassive(q, true, false, false, false, nil)
		rsCheck(t, "passive declare", err)
		return qi.Messages >= n
	}) {
		t.Fatalf("queue %s has %d messages, want %d", q, qi.Messages, n)
	}
}

// TestRestartKeepsTTLDeadlines: a per-message deadline is absolute: a
// message that expires while the broker is down is dead-lettered when it
// comes back, and one that has time left keeps only what was left (R2.7).
func TestRestartKeepsTTLDeadlines(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
	b := warrentest.Start(t, warrentest.WithClock(fake))
	_, ch := rsDial(t, b.URL())
	rsCheck(t, "confirm", ch.Confirm(false))
	durableDLQ(t, ch, "rm.ttl.dlx", "rm.ttl.dlq")
	rsCheck(t, "src", declareQ(ch, "rm.ttl", true, amqp.Table{"x-dead-letter-exchange": "rm.ttl.dlx"}))
	rmPublish(t, ch, "", "rm.ttl", amqp.Publishing{Body: []byte("short"), Expiration: "10000"})
	rmPublish(t, ch, "", "rm.ttl", amqp.Publishing{Body: []byte("long"), Expiration: "60000"})
	b.Restart()
	fake.Advance(30 * time.Second) // "short" expired while the broker was down
	_, ch = rsDial(t, b.URL())
	waitCount(t, ch, "rm.ttl.dlq", 1)
	if got := getBodies(t, ch, "rm.ttl.dlq"); fmt.Sprint(got) != "[short]" {
		t.Fatalf("DLQ after restart: %v, want [short]", got)
	}
	fake.Advance(29 * time.Second) // "long" has 1 s left; due timers ran inside Advance
	if qi, _ := ch.QueueDeclarePassive("rm.ttl", true, false, false, false, nil); qi.Messages != 1 {
		t.Fatalf("rm.ttl has %d messages 59 s in, want 1", qi.Messages)
	}
	fake.Advance(2 * time.Second)
	waitCount(t, ch, "rm.ttl.dlq", 1)
	if got := getBodies(t, ch, "rm.ttl.dlq"); fmt.Sprint(got) != "[long]" {
		t.Fatalf("DLQ at 61 s: %v, want [long]", got)
	}
}

// TestRestartKeepsDeliveryCountsAndDelayedRetries: x-delivery-count
// survives a restart (R5.3), and a message waiting out a delayed retry
// (R5.5) is still delayed after it.
func TestRestartKeepsDeliveryCountsAndDelayedRetries(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
	b := warrentest.Start(t, warrentest.WithClock(fake))
	_, ch := rsDial(t, b.URL())
	rsCheck(t, "confirm", ch.Confirm(false))
	rsCheck(t, "q", declareQ(ch, "rm.counts", true, amqp.Table{"x-queue-type": "quorum"}))
	rsCheck(t, "q", declareQ(ch, "rm.delayed", true, amqp.Table{"x-delivery-limit": int32(10),
		"x-delayed-retry-type": "all", "x-delayed-retry-min": int32(5000), "x-delayed-retry-max": int32(5000)}))
	rmPublish(t, ch, "", "rm.counts", amqp.Publishing{Body: []byte("c")})
	rmPublish(t, ch, "", "rm.delayed", amqp.Publishing{Body: []byte("d")})
	for range 2 {
		d, ok := rmGet(t, ch, "rm.counts")
		if !ok {
			t.Fatal("rm.counts empty")
		}
		rsCheck(t, "reject", d.Reject(true))
	}
	d, ok := rmGet(t, ch, "rm.delayed")
	if !ok {
		t.Fatal("rm.delayed empty")
	}
	rsCheck(t, "reject", d.Reject(true))
	b.Restart()
	_, ch = rsDial(t, b.URL())
	d, ok = rmGet(t, ch, "rm.counts")
	if !ok {
		t.Fatal("rm.counts lost its message")
	}
	if d.Headers["x-delivery-count"] != int64(2) || !d.Redelivered {
		t.Fatalf("x-delivery-count after restart: %v (redelivered %v), want 2", d.Headers["x-delivery-count"], d.Redelivered)
	}
	if _, ok := rmGet(t, ch, "rm.delayed"); ok {
		t.Fatal("a delayed retry was ready at once after the restart")
	}
	fake.Advance(6 * time.Second) // the retry's timer ran inside Advance
	d, ok = rmGet(t, ch, "rm.delayed")
	if !ok || d.Headers["x-delivery-count"] != int64(1) {
		t.Fatalf("delayed retry after its delay: ok=%v headers=%v", ok, d.Headers)
	}
}

// TestRestartPurgeAndDeleteAreDurable: purged messages and deleted
// queues do not come back.
func TestRestartPurgeAndDeleteAreDurable(t *testing.T) {
	b := warrentest.Start(t)
	_, ch := rsDial(t, b.URL())
	rsCheck(t, "confirm", ch.Confirm(false))
	rsCheck(t, "q", declareQ(ch, "rm.purged", true, nil))
	rsCheck(t, "q", declareQ(ch, "rm.deleted", true, nil))
	for i := range 10 {
		rmPublish(t, ch, "", "rm.purged", amqp.Publishing{Body: fmt.Appendf(nil, "%d", i)})
		rmPublish(t, ch, "", "rm.deleted", amqp.Publishing{Body: fmt.Appendf(nil, "%d", i)})
	}
	if _, err := ch.QueuePurge("rm.purged", false); err != nil {
		t.Fatal(err)
	}
	rmPublish(t, ch, "", "rm.purged", amqp.Publishing{Body: []byte("after")})
	if _, err := ch.QueueDelete("rm.deleted", false, false, false); err != nil {
		t.Fatal(err)
	}
	rsCheck(t, "q", declareQ(ch, "rm.deleted", true, nil))
	b.Restart()
	_, ch = rsDial(t, b.URL())
	if got := getBodies(t, ch, "rm.purged"); fmt.Sprint(got) != "[after]" {
		t.Fatalf("purged queue after restart: %v, want [after]", got)
	}
	if got := getBodies(t, ch, "rm.deleted"); len(got) != 0 {
		t.Fatalf("a deleted queue's messages came back in its new incarnation: %v", got)
	}
}

// dirSize sums the sizes of the files under dir.
func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// TestAckedMessagesAreReclaimed: once the messages of a log's segments are
// acked, the segments are deleted (issue 4: acked messages are reclaimed).
func TestAckedMessagesAreReclaimed(t *testing.T) {
	b := warrentest.Start(t)
	_, ch := rsDial(t, b.URL())
	rsCheck(t, "confirm", ch.Confirm(false))
	rsCheck(t, "declare", declareQ(ch, "rm.reclaim", true, nil))
	body := make([]byte, 8<<10)
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 5000))
	for range 5000 { // 40 MiB: five segments
		rsCheck(t, "publish", ch.Publish("", "rm.reclaim", false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body}))
	}
	for range 5000 {
		<-confirms
	}
	msgs := filepath.Join(b.DataDir(), "msgs")
	full := dirSize(t, msgs)
	if full < 5000*8<<10 {
		t.Fatalf("msgs/ holds %d bytes after 40 MiB of persistent messages", full)
	}
	rsCheck(t, "qos", ch.Qos(1000, 0, false))
	ds, err := ch.Consume("rm.reclaim", "", false, false, false, false, nil)
	rsCheck(t, "consume", err)
	for range 5000 {
		d := <-ds
		d.Ack(false)
	}
	var n int64
	if !testutil.Until(10*time.Second, func() bool {
		n = dirSize(t, msgs)
		return n < 1<<20 // the acked tail rolled away too
	}) {
		t.Fatalf("msgs/ still holds %d bytes after every message was acked (was %d)", n, full)
	}
	t.Logf("msgs/ shrank from %d MiB to %d KiB", full>>20, n>>10)
}

// TestRestartKeepsDelayedExchangeMessages: a durable x-delayed-message
// exchange keeps its held persistent messages across a restart, as the
// plugin's Mnesia table does, and routes them when they are due; a
// transient held message does not survive.
func TestRestartKeepsDelayedExchangeMessages(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
	b := warrentest.Start(t, warrentest.WithClock(fake))
	_, ch := rsDial(t, b.URL())
	rsCheck(t, "confirm", ch.Confirm(false))
	rsCheck(t, "x", ch.ExchangeDeclare("rm.delay", "x-delayed-message", true, false, false, false, amqp.Table{"x-delayed-type": "direct"}))
	rsCheck(t, "q", declareQ(ch, "rm.delayed-out", true, nil))
	rsCheck(t, "bind", ch.QueueBind("rm.delayed-out", "k", "rm.delay", false, nil))
	rmPublish(t, ch, "rm.delay", "k", amqp.Publishing{Body: []byte("later"), Headers: amqp.Table{"x-delay": int32(10000)}})
	rmPublish(t, ch, "rm.delay", "k", amqp.Publishing{Body: []byte("sooner"), Headers: amqp.Table{"x-delay": int32(5000)}})
	rmPublish(t, ch, "rm.delay", "k", amqp.Publishing{Body: []byte("transient"), DeliveryMode: amqp.Transient, Headers: amqp.Table{"x-delay": int32(5000)}})
	b.Restart()
	if n := b.Broker().VHost("/").Exchange("rm.delay").MessagesDelayed(); n != 2 {
		t.Fatalf("%d messages held after the restart, want 2", n)
	}
	_, ch = rsDial(t, b.URL())
	fake.Advance(6 * time.Second)
	waitCount(t, ch, "rm.delayed-out", 1)
	fake.Advance(5 * time.Second)
	waitCount(t, ch, "rm.delayed-out", 2)
	got := getBodies(t, ch, "rm.delayed-out")
	if fmt.Sprint(got) != "[sooner later]" {
		t.Fatalf("routed after restart: %v, want [sooner later]", got)
	}
	// Once routed they are gone from the exchange's log too.
	b.Restart()
	if n := b.Broker().VHost("/").Exchange("rm.delay").MessagesDelayed(); n != 0 {
		t.Fatalf("%d messages held after a second restart, want 0", n)
	}
}

// TestRestartKeepsXExpires: a durable queue with x-expires still expires
// after a restart if nobody uses it (R2.7); its clock starts again at the
// restart, and its messages are not dead-lettered.
func TestRestartKeepsXExpires(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
	b := warrentest.Start(t, warrentest.WithClock(fake))
	_, ch := rsDial(t, b.URL())
	rsCheck(t, "confirm", ch.Confirm(false))
	rsCheck(t, "q", declareQ(ch, "rm.expires", true, amqp.Table{"x-expires": int32(60000)}))
	rmPublish(t, ch, "", "rm.expires", amqp.Publishing{Body: []byte("m")})
	b.Restart()
	if b.Broker().VHost("/").Queue("rm.expires") == nil {
		t.Fatal("queue with x-expires gone at the restart")
	}
	fake.Advance(61 * time.Second)
	if !testutil.Until(5*time.Second, func() bool { return b.Broker().VHost("/").Queue("rm.expires") == nil }) {
		t.Fatal("durable queue with x-expires did not expire after the restart")
	}
}
