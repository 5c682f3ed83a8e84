package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/server"
)

// Channel state over amqp091-go (issue 12: tests for the server package):
// basic.qos prefetch accounting, channel.flow, settlement errors.

func dial(t *testing.T, s *server.Server) *amqp.Connection {
	t.Helper()
	return testutil.Dial(t, amqpURL(s))
}

func channel(t *testing.T, c *amqp.Connection) *amqp.Channel {
	t.Helper()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// fill declares queue q and publishes n messages to it; the passive
// declare after them answers once they are enqueued.
func fill(t *testing.T, ch *amqp.Channel, q string, n int) {
	t.Helper()
	if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := ch.PublishWithContext(context.Background(), "", q, false, false, amqp.Publishing{Body: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := ready(t, ch, q); got != n {
		t.Fatalf("queue %s holds %d messages, want %d", q, got, n)
	}
}

// ready is the queue's ready-message count (queue.declare-ok's
// message_count).
func ready(t *testing.T, ch *amqp.Channel, q string) int {
	t.Helper()
	qi, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return qi.Messages
}

// next receives one delivery within 10 s.
func next(t *testing.T, d <-chan amqp.Delivery) amqp.Delivery {
	t.Helper()
	select {
	case m, ok := <-d:
		if !ok {
			t.Fatal("consumer closed")
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	return amqp.Delivery{}
}

// TestQosPrefetch: issue 12, server package tests (basic.qos prefetch
// accounting). A consumer with prefetch 2 holds two unacked messages and
// no more: the rest stay ready in the queue; each message acked lets one
// more through.
func TestQosPrefetch(t *testing.T) {
	s := startServer(t, server.Config{})
	c := dial(t, s)
	pub := channel(t, c)
	fill(t, pub, "hB-qos", 5)

	ch := channel(t, c)
	if err := ch.Qos(2, 0, false); err != nil {
		t.Fatal(err)
	}
	d, err := ch.Consume("hB-qos", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := next(t, d)
	next(t, d)
	// The consume's dispatch delivered everything the prefetch allows.
	if got := ready(t, pub, "hB-qos"); got != 3 {
		t.Fatalf("%d ready with two delivered under prefetch 2, want 3", got)
	}
	if err := first.Ack(false); err != nil {
		t.Fatal(err)
	}
	third := next(t, d)
	waitReady(t, pub, "hB-qos", 2)
	// A multiple ack of two frees two places.
	if err := third.Ack(true); err != nil {
		t.Fatal(err)
	}
	next(t, d)
	next(t, d)
	waitReady(t, pub, "hB-qos", 0)
}

// waitReady polls until the queue's ready count is n.
func waitReady(t *testing.T, ch *amqp.Channel, q string, n int) {
	t.Helper()
	var got int
	waitFor(t, 10*time.Second, "queue "+q+" never had the ready count wanted", func() bool {
		got = ready(t, ch, q)
		return got == n
	})
}

// TestQosGlobal: issue 12, server package tests (basic.qos prefetch
// accounting). A global prefetch is shared by the channel's consumers (as
// RabbitMQ's global=true): with a per-consumer prefetch of 2 and a
// channel-wide 3, two consumers together hold 3 messages.
func TestQosGlobal(t *testing.T) {
	s := startServer(t, server.Config{})
	c := dial(t, s)
	pub := channel(t, c)
	fill(t, pub, "hB-g1", 5)
	fill(t, pub, "hB-g2", 5)

	ch := channel(t, c)
	if err := ch.Qos(3, 0, true); err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(2, 0, false); err != nil {
		t.Fatal(err)
	}
	d1, err := ch.Consume("hB-g1", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	next(t, d1)
	next(t, d1)
	d2, err := ch.Consume("hB-g2", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := next(t, d2)
	if r1, r2 := ready(t, pub, "hB-g1"), ready(t, pub, "hB-g2"); r1 != 3 || r2 != 4 {
		t.Fatalf("ready %d and %d, want 3 and 4: the channel's prefetch of 3 not shared", r1, r2)
	}
	// Acking on the second queue frees the channel's credit for it.
	if err := m.Ack(false); err != nil {
		t.Fatal(err)
	}
	next(t, d2)
	waitReady(t, pub, "hB-g2", 3)
}

// TestQosRefusals: issue 12, server package tests (channel state). Warren
// answers what it does not implement as RabbitMQ does, by closing the
// connection with 540: basic.qos with a prefetch_size, and channel.flow
// with active=false (channel.flow active=true is answered with flow-ok).
func TestQosRefusals(t *testing.T) {
	s := startServer(t, server.Config{})
	t.Run("flow-active", func(t *testing.T) {
		ch := channel(t, dial(t, s))
		if err := ch.Flow(true); err != nil {
			t.Fatal(err)
		}
	})
	for name, f := range map[string]func(*amqp.Channel) error{
		"prefetch-size": func(ch *amqp.Channel) error { return ch.Qos(1, 4096, false) },
		"flow-inactive": func(ch *amqp.Channel) error { return ch.Flow(false) },
	} {
		t.Run(name, func(t *testing.T) {
			c := dial(t, s)
			closed := c.NotifyClose(make(chan *amqp.Error, 1))
			ch := channel(t, c)
			f(ch)
			if e := closedWith(t, closed); e == nil || e.Code != 540 {
				t.Fatalf("closed with %v, want 540 NOT_IMPLEMENTED", e)
			}
		})
	}
}

// TestSettle: issue 12, server package tests (channel state). Acks, nacks
// and rejects by delivery tag: multiple covers every earlier tag, a nack
// with requeue returns messages redelivered, basic.recover requeues the
// unacked, and an unknown or settled tag closes the channel with 406.
func TestSettle(t *testing.T) {
	s := startServer(t, server.Config{})
	c := dial(t, s)
	pub := channel(t, c)
	fill(t, pub, "hB-settle", 6)
	ch := channel(t, c)
	d, err := ch.Consume("hB-settle", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ms []amqp.Delivery
	for range 6 {
		ms = append(ms, next(t, d))
	}
	// ack 1..3 with multiple, reject 4 without requeue, nack 5..6 with requeue.
	if err := ms[2].Ack(true); err != nil {
		t.Fatal(err)
	}
	if err := ms[3].Reject(false); err != nil {
		t.Fatal(err)
	}
	if err := ms[5].Nack(true, true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []byte{4, 5} {
		m := next(t, d)
		if !m.Redelivered || m.Body[0] != want {
			t.Fatalf("got body %v redelivered %v, want %d redelivered", m.Body, m.Redelivered, want)
		}
		ms = append(ms, m)
	}
	// basic.recover(requeue) puts the unacked back, redelivered.
	if err := ch.Recover(true); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if m := next(t, d); !m.Redelivered {
			t.Fatalf("recovered message %v not redelivered", m.Body)
		}
	}

	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Ack(999, false); err != nil {
		t.Fatal(err)
	}
	if e := closedWith(t, closed); e == nil || e.Code != 406 || e.Reason != "PRECONDITION_FAILED - unknown delivery tag 999" {
		t.Fatalf("channel closed with %v, want 406 unknown delivery tag 999", e)
	}
	// The connection lives on.
	if _, err := channel(t, c).QueueDeclarePassive("hB-settle", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
}

// TestBasicGet: issue 12, server package tests (channel state). basic.get
// hands out one message with the count of those left, get-empty on an
// empty queue, and its delivery tags share the channel's sequence with
// consumers'.
func TestBasicGet(t *testing.T) {
	s := startServer(t, server.Config{})
	c := dial(t, s)
	ch := channel(t, c)
	fill(t, ch, "hB-get", 2)
	m, ok, err := ch.Get("hB-get", false)
	if err != nil || !ok || m.MessageCount != 1 || m.DeliveryTag != 1 {
		t.Fatalf("get: %+v %v %v, want tag 1 with 1 left", m, ok, err)
	}
	m2, ok, err := ch.Get("hB-get", true)
	if err != nil || !ok || m2.MessageCount != 0 || m2.DeliveryTag != 2 {
		t.Fatalf("get: tag %d left %d %v %v, want tag 2 with 0 left", m2.DeliveryTag, m2.MessageCount, ok, err)
	}
	if _, ok, err := ch.Get("hB-get", false); ok || err != nil {
		t.Fatalf("get on an empty queue: %v %v, want get-empty", ok, err)
	}
	// Acking the auto-acked tag 2 is an unknown tag.
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := m.Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := ch.Ack(2, false); err != nil {
		t.Fatal(err)
	}
	e := closedWith(t, closed)
	var ae *amqp.Error
	if e == nil || !errors.As(e, &ae) || ae.Code != 406 {
		t.Fatalf("ack of an auto-acked tag: %v, want 406", e)
	}
}
