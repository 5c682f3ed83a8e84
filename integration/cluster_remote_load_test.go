package integration

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// issue 13 (remote queues, consuming through another node under load): a
// publisher on node A floods a queue homed on node B (so the small link
// from A to B is full of publishes) while a consumer on node A with
// prefetch 100 acks each delivery. Its acks travel on that full link: none
// may be lost (a lost ack keeps its message unacked at the home and eats
// the consumer's credit, so consumption stalls). Once the consumer's
// connection closes, every message it held unacked or buffered goes back
// to the queue at home: no unacked left, no consumer, and the messages
// acked plus those ready are exactly those published. The same with a
// basic.cancel mid-flow (the deliveries buffered on node A go back; those
// the client still gets are acked after the cancel and count), then the
// channel's close.
func TestClusterRemoteConsumeUnderLoad(t *testing.T) {
	t.Run("connection close", func(t *testing.T) { consumeUnderLoad(t, false) })
	t.Run("cancel then channel close", func(t *testing.T) { consumeUnderLoad(t, true) })
}

func consumeUnderLoad(t *testing.T, cancelFirst bool) {
	const (
		total   = 100000
		stopAt  = 10000 // the consumer's connection closes after this many acks
		qname   = "h6c-load"
		payload = "0123456789abcdef"
	)
	c := startCluster(t, nodeA, nodeB)
	c.net.SetLinkCap(64) // small: the publisher keeps the link from A to B full
	c.declareQueue(qname, nodeB, false, nil)
	hq := c.homeQueue(nodeB, qname)
	pconn := c.node(nodeA).dial(t)
	pch, err := pconn.Channel()
	if err != nil {
		t.Fatal(err)
	}

	cconn := c.node(nodeA).dial(t)
	cch, err := cconn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := cch.Qos(100, 0, false); err != nil {
		t.Fatal(err)
	}
	msgs, err := cch.Consume(qname, "h6c-c", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}

	// The publisher stops when the test ends, before its connections close.
	var wg sync.WaitGroup
	var published atomic.Int64
	var stop atomic.Bool
	pubErr := make(chan error, 1)
	defer func() { stop.Store(true); wg.Wait() }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < total && !stop.Load(); i++ {
			if err := pch.Publish("", qname, false, false, amqp.Publishing{Body: []byte(payload)}); err != nil {
				pubErr <- err
				return
			}
			published.Add(1)
		}
	}()

	acked := 0
	requeuedBefore := hq.Stats().Requeued
	deadline := time.After(2 * waitTimeout)
	for acked < stopAt {
		select {
		case d, ok := <-msgs:
			if !ok {
				t.Fatalf("consumer closed after %d acks", acked)
			}
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
			acked++
		case <-deadline:
			s := hq.Stats()
			t.Fatalf("consumption stalled: %d of %d acked (home: %d ready, %d unacked)", acked, stopAt, s.Ready, s.Unacked)
		}
	}
	// Close mid-flow: the channel holds unacked deliveries and more are on
	// their way or buffered on node A.
	if cancelFirst {
		if err := cch.Cancel("h6c-c", false); err != nil {
			t.Fatal(err)
		}
		for d := range msgs { // what reached the client before the cancel
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
			acked++
		}
		waitFor(t, "no consumer at home after basic.cancel", func() bool { return hq.Stats().Consumers == 0 })
		if err := cch.Close(); err != nil {
			t.Fatal(err)
		}
	} else {
		cconn.Close()
	}
	wg.Wait()
	select {
	case err := <-pubErr:
		t.Fatalf("publish: %v", err)
	default:
	}
	if published.Load() != total {
		t.Fatalf("published %d of %d", published.Load(), total)
	}
	waitFor(t, "every message acked or back in the queue", func() bool {
		s := hq.Stats()
		return s.Unacked == 0 && s.Consumers == 0 && s.Ready+acked == total
	})
	s := hq.Stats()
	if s.Unacked != 0 || s.Ready+acked != total {
		t.Fatalf("home: %d ready, %d unacked, %d consumers; %d acked of %d", s.Ready, s.Unacked, s.Consumers, acked, total)
	}
	// The returned messages were delivered: they come back redelivered,
	// at the head of the queue. When nothing was in flight at the close
	// (a consumer as fast as the publisher, as under -race), nothing came
	// back, and the head was never delivered.
	if s.Requeued == requeuedBefore {
		t.Logf("nothing was in flight at the close (%d acked): no redelivery to check", acked)
		return
	}
	gch, err := pconn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	d, ok, err := gch.Get(qname, true)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if !d.Redelivered {
		t.Fatal("the head of the queue after the consumer's close is not redelivered")
	}
	if _, err := gch.QueueDelete(qname, false, false, false); err != nil {
		t.Fatal(err)
	}
}
