package integration

// Bounded memory (issue 4): beyond a window of ready messages per queue
// (2048 messages or 4 MiB), messages live on disk only and are read back in
// order. These tests use more messages than the window and check order,
// counts, TTL expiry of messages on disk, purge, restart and paging of
// transient queues.

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/internal/clock"
	"github.com/warrenmq/warren/warrentest"
)

const spillN = 10000 // several windows

// spillPublish publishes n messages "prefix-i" with confirms, in batches.
func spillPublish(t *testing.T, ch *amqp.Channel, q, prefix string, n int, p amqp.Publishing) {
	t.Helper()
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, n))
	for i := range n {
		p := p
		p.Body = fmt.Appendf(nil, "%s-%d", prefix, i)
		if err := ch.Publish("", q, false, false, p); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		select {
		case c := <-confirms:
			if !c.Ack {
				t.Fatalf("publish %d nacked", c.DeliveryTag)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("confirms did not arrive")
		}
	}
}

// spillConsume consumes n messages and checks they are "prefix-i" in order.
func spillConsume(t *testing.T, ch *amqp.Channel, q, prefix string, from, n int) {
	t.Helper()
	rsCheck(t, "qos", ch.Qos(500, 0, false))
	ds, err := ch.Consume(q, "spill-c", false, false, false, false, nil)
	rsCheck(t, "consume", err)
	for i := from; i < from+n; i++ {
		select {
		case d := <-ds:
			if want := fmt.Sprintf("%s-%d", prefix, i); string(d.Body) != want {
				t.Fatalf("got %q, want %q (order lost across the window)", d.Body, want)
			}
			d.Ack(false)
		case <-time.After(10 * time.Second):
			t.Fatalf("message %s-%d did not arrive", prefix, i)
		}
	}
	rsCheck(t, "cancel", ch.Cancel("spill-c", false))
}

func TestSpillDeepDurableQueueKeepsOrderAcrossRestart(t *testing.T) {
	b := warrentest.Start(t)
	_, ch := rsDial(t, b.URL())
	rsCheck(t, "confirm", ch.Confirm(false))
	rsCheck(t, "declare", declareQ(ch, "spill.deep", true, nil))
	spillPublish(t, ch, "spill.deep", "m", spillN, amqp.Publishing{DeliveryMode: amqp.Persistent})
	if s := b.Broker().VHost("/").Queue("spill.deep").Stats(); s.Ready != spillN {
		t.Fatalf("ready %d, want %d", s.Ready, spillN)
	}
	spillConsume(t, ch, "spill.deep", "m", 0, 3000)
	b.Restart()
	_, ch = rsDial(t, b.URL())
	qi, err := ch.QueueDeclarePassive("spill.deep", true, false, false, false, nil)
	rsCheck(t, "passive", err)
	if qi.Messages != spillN-3000 {
		t.Fatalf("after restart %d messages, want %d", qi.Messages, spillN-3000)
	}
	spillConsume(t, ch, "spill.deep", "m", 3000, spillN-3000)
	if d, ok := rmGet(t, ch, "spill.deep"); ok {
		t.Fatalf("extra message %q", d.Body)
	}
}

// TestSpillBoundsMemory: 40,000 messages of 4 KiB (160 MiB of bodies) in
// one queue do not take 160 MiB of heap.
func TestSpillBoundsMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 160 MiB")
	}
	b := warrentest.Start(t)
	_, ch := rsDial(t, b.URL())
	rsCheck(t, "confirm", ch.Confirm(false))
	rsCheck(t, "declare", declareQ(ch, "spill.mem", false, nil))
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	body := make([]byte, 4096)
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 40000))
	for i := range 40000 {
		body[0] = byte(i)
		if err := ch.Publish("", "spill.mem", false, false, amqp.Publishing{Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	for range 40000 {
		<-confirms
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap grew by %d MiB for 160 MiB of queued bodies", grew>>20)
	if grew > 64<<20 {
		t.Fatalf("heap grew by %d MiB for 160 MiB of queued transient bodies: messages are not paged out", grew>>20)
	}
	n, err := ch.QueuePurge("spill.mem", false)
	rsCheck(t, "purge", err)
	if n != 40000 {
		t.Fatalf("purged %d, want 40000", n)
	}
}

// TestSpillTransientQueuePagesInOrder: a non-durable queue pages too, and
// its paged messages come back in order; they do not survive a restart.
func TestSpillTransientQueuePagesInOrder(t *testing.T) {
	b := warrentest.Start(t)
	_, ch := rsDial(t, b.URL())
	rsCheck(t, "confirm", ch.Confirm(false))
	rsCheck(t, "declare", declareQ(ch, "spill.transient", false, nil))
	rsCheck(t, "declare", declareQ(ch, "spill.mixed", true, nil))
	spillPublish(t, ch, "spill.transient", "t", spillN, amqp.Publishing{})
	// A durable queue with transient messages among persistent ones.
	for i := range spillN {
		mode := amqp.Persistent
		if i%2 == 1 {
			mode = amqp.Transient
		}
		rsCheck(t, "publish", ch.Publish("", "spill.mixed", false, false, amqp.Publishing{DeliveryMode: mode, Body: fmt.Appendf(nil, "x-%d", i)}))
	}
	waitCount(t, ch, "spill.mixed", spillN)
	spillConsume(t, ch, "spill.transient", "t", 0, spillN)
	b.Restart()
	_, ch = rsDial(t, b.URL())
	var got []string
	for {
		d, ok := rmGet(t, ch, "spill.mixed")
		if !ok {
			break
		}
		got = append(got, string(d.Body))
		d.Ack(false)
	}
	if len(got) != spillN/2 || got[0] != "x-0" || got[len(got)-1] != fmt.Sprintf("x-%d", spillN-2) {
		t.Fatalf("after restart the mixed queue has %d messages (first %v, last %v), want the %d persistent ones", len(got), got[:min(3, len(got))], got[max(0, len(got)-3):], spillN/2)
	}
}

// TestSpillExpiresMessagesOnDisk: a message with a short per-message TTL
// behind thousands of others expires on time though it is on disk, and
// a purge removes spilled messages for good (also across a restart).
func TestSpillExpiresMessagesOnDisk(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
	b := warrentest.Start(t, warrentest.WithClock(fake))
	_, ch := rsDial(t, b.URL())
	rsCheck(t, "confirm", ch.Confirm(false))
	durableDLQ(t, ch, "spill.dlx", "spill.dlq")
	rsCheck(t, "src", declareQ(ch, "spill.ttl", true, amqp.Table{"x-dead-letter-exchange": "spill.dlx"}))
	spillPublish(t, ch, "spill.ttl", "m", spillN, amqp.Publishing{DeliveryMode: amqp.Persistent})
	rmPublish(t, ch, "", "spill.ttl", amqp.Publishing{Body: []byte("short"), Expiration: "1000"})
	fake.Advance(2 * time.Second)
	waitCount(t, ch, "spill.dlq", 1)
	if got := getBodies(t, ch, "spill.dlq"); fmt.Sprint(got) != "[short]" {
		t.Fatalf("DLQ: %v, want [short]", got)
	}
	n, err := ch.QueuePurge("spill.ttl", false)
	rsCheck(t, "purge", err)
	if n != spillN {
		t.Fatalf("purged %d, want %d", n, spillN)
	}
	rmPublish(t, ch, "", "spill.ttl", amqp.Publishing{Body: []byte("after")})
	b.Restart()
	_, ch = rsDial(t, b.URL())
	if got := getBodies(t, ch, "spill.ttl"); fmt.Sprint(got) != "[after]" {
		t.Fatalf("after purge and restart: %d messages (%v...), want [after]", len(got), got[:min(3, len(got))])
	}
}

// TestSpillMaxLengthDropsHeadFromDisk: drop-head reaches into the spilled
// part when the window is empty.
func TestSpillMaxLengthDropsHeadFromDisk(t *testing.T) {
	b := warrentest.Start(t)
	_, ch := rsDial(t, b.URL())
	rsCheck(t, "confirm", ch.Confirm(false))
	rsCheck(t, "declare", declareQ(ch, "spill.max", true, nil))
	spillPublish(t, ch, "spill.max", "m", spillN, amqp.Publishing{DeliveryMode: amqp.Persistent})
	// A policy lowers the limit live (R1.13): the head goes, from disk.
	rsCheck(t, "policy", b.Broker().VHost("/").SetPolicy(broker.Policy{Name: "spill-max", Pattern: "^spill\\.max$",
		ApplyTo: "queues", Definition: map[string]any{"max-length": int64(100)}}))
	waitCount(t, ch, "spill.max", 100)
	qi, _ := ch.QueueDeclarePassive("spill.max", true, false, false, false, nil)
	if qi.Messages != 100 {
		t.Fatalf("%d messages after max-length 100", qi.Messages)
	}
	spillConsume(t, ch, "spill.max", "m", spillN-100, 100)
}
