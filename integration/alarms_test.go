package integration

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/server"
	"github.com/warrenmq/warren/warrentest"
)

// TestMemoryAlarmBlocksPublishers sets a memory high watermark a little
// above what the broker uses, fills the broker until the memory alarm
// blocks the publisher (connection.blocked), drains the queue from another
// connection (consumers keep working while publishers are blocked), sees
// connection.unblocked, and checks that every confirmed message arrived
// exactly once.
func TestMemoryAlarmBlocksPublishers(t *testing.T) {
	if testing.Short() {
		t.Skip("fills the broker with ~40 MB")
	}
	var base int64
	b := warrentest.Start(t, warrentest.WithConfig(func(c *server.Config) {
		base = server.MemoryUsed()
		c.MemoryHighWatermark = base + 32<<20
		c.ResourceCheckInterval = 20 * time.Millisecond
	}))
	pc, err := amqp.Dial(b.URL())
	if err != nil {
		t.Fatal(err)
	}
	// No defer pc.Close(): a blocked connection is not read from, so a
	// close would wait for the alarm; the broker's shutdown closes it.
	blocked := pc.NotifyBlocked(make(chan amqp.Blocking, 8))
	pch, _ := pc.Channel()
	// A priority queue keeps its messages in memory (others page out
	// beyond a window, spill.go), so that publishing fills the broker.
	q, err := pch.QueueDeclare("", false, false, false, false, amqp.Table{"x-max-priority": int32(2)})
	if err != nil {
		t.Fatal(err)
	}
	if err := pch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := pch.NotifyPublish(make(chan amqp.Confirmation, 1<<16))

	// Publish 8 KiB messages until the alarm blocks us, then a few more
	// (they wait in the socket until the alarm clears).
	body := make([]byte, 8<<10)
	var published atomic.Int64
	stop := make(chan struct{})
	pubDone := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				pubDone <- nil
				return
			default:
			}
			n := published.Load()
			body[0], body[1], body[2] = byte(n), byte(n>>8), byte(n>>16)
			if err := pch.PublishWithContext(context.Background(), "", q.Name, false, false, amqp.Publishing{Body: body}); err != nil {
				pubDone <- err
				return
			}
			if published.Add(1) > 20000 {
				pubDone <- nil
				return
			}
		}
	}()
	select {
	case bl := <-blocked:
		if !bl.Active || bl.Reason != "low on memory" {
			t.Fatalf("got %+v, want active blocked 'low on memory'", bl)
		}
	case err := <-pubDone:
		t.Fatalf("publisher finished (%v, %d messages) without being blocked", err, published.Load())
	case <-time.After(30 * time.Second):
		t.Fatal("not blocked within 30s")
	}

	// Drain from another connection while the publisher is blocked.
	cc, err := amqp.Dial(b.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cch, _ := cc.Channel()
	cch.Qos(500, 0, false)
	ds, err := cch.Consume(q.Name, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	unblocked := false
	deadline := time.After(20 * time.Second)
	for !unblocked {
		select {
		case d := <-ds:
			seen[int(d.Body[0])|int(d.Body[1])<<8|int(d.Body[2])<<16]++
			d.Ack(false)
		case bl := <-blocked:
			if bl.Active {
				t.Fatalf("blocked twice without unblocked: %+v", bl)
			}
			unblocked = true
		case <-deadline:
			t.Fatalf("not unblocked within 20s after draining %d", len(seen))
		}
	}
	close(stop)
	// Every publish is confirmed and arrives exactly once. Keep draining
	// while waiting: the last publishes may raise the alarm again, and the
	// publisher then waits in a blocked write until the drain clears it.
	acked, pubFinished := 0, false
	final := time.After(60 * time.Second)
	for !pubFinished || int64(acked) < published.Load() || int64(len(seen)) < published.Load() {
		select {
		case err := <-pubDone:
			if err != nil {
				t.Fatal(err)
			}
			pubFinished = true
		case c := <-confirms:
			if !c.Ack {
				t.Fatalf("publish %d nacked", c.DeliveryTag)
			}
			acked++
		case d := <-ds:
			seen[int(d.Body[0])|int(d.Body[1])<<8|int(d.Body[2])<<16]++
			d.Ack(false)
		case <-blocked:
		case <-final:
			t.Fatalf("publisher done %v, confirmed %d and received %d distinct of %d published", pubFinished, acked, len(seen), published.Load())
		}
	}
	total := int(published.Load())
	for id, n := range seen {
		if n != 1 || id >= total {
			t.Fatalf("message %d received %d times (published %d)", id, n, total)
		}
	}
	t.Logf("watermark base+32MiB: %d messages of 8 KiB published, all confirmed and delivered once", total)
	pc.Close()
}

// TestDiskAlarmBlocksPublishers: a free-disk limit above the free space
// of the data directory raises the disk alarm; a publisher is blocked
// with reason "low on disk" and its message is not enqueued: as in
// RabbitMQ, the connection stops being read at the basic.publish that
// found the alarm, before its content (checked against RabbitMQ 3.10.8
// with set_disk_free_limit: the queue stays at 0 until the alarm clears).
func TestDiskAlarmBlocksPublishers(t *testing.T) {
	dir := t.TempDir()
	b := warrentest.Start(t, warrentest.WithConfig(func(c *server.Config) {
		c.DataDir = dir
		c.DiskFreeLimit = 1 << 62
		c.ResourceCheckInterval = 20 * time.Millisecond
	}))
	c, err := amqp.Dial(b.URL())
	if err != nil {
		t.Fatal(err)
	}
	blocked := c.NotifyBlocked(make(chan amqp.Blocking, 2))
	ch, _ := c.Channel()
	q, err := ch.QueueDeclare("", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "disk alarm", func() bool { return b.Server().AlarmRaised("disk") })
	if err := ch.PublishWithContext(context.Background(), "", q.Name, false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	select {
	case bl := <-blocked:
		if !bl.Active || bl.Reason != "low on disk" {
			t.Fatalf("got %+v, want blocked 'low on disk'", bl)
		}
	case <-time.After(waitTimeout):
		t.Fatal("not blocked")
	}
	// The connection is no longer read: a further publish is not enqueued.
	if err := ch.PublishWithContext(context.Background(), "", q.Name, false, false, amqp.Publishing{Body: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(quietPeriod)
	if st := b.Broker().VHost("/").Queue(q.Name).Stats(); st.Ready != 0 {
		t.Fatalf("ready: got %d, want 0 (blocked at the publish that found the alarm)", st.Ready)
	}
}
