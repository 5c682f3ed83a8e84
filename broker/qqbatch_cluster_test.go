package broker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

// TestQuorumPublishesBatched: issue 23. Publishes that reach a quorum
// queue's leader together share a log entry (qrepl.EnqueueBatch), but
// only once every node of the cluster says it decodes such entries: with
// a node of an older build (no features service) each publish is an
// entry of its own, as that node would skip a batch. Once that node is
// upgraded and restarted, the leader batches. Either way every message
// arrives once, each publisher's in the order sent.
func TestQuorumPublishesBatched(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster")
	}
	c := warrentest.StartCluster(t, 3, warrentest.OlderBuild(2))
	const name, per = "qq-batched", 400
	dial := func(i int) *amqp.Channel {
		t.Helper()
		conn, err := amqp.Dial(c.Node(i).URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	if _, err := dial(0).QueueDeclare(name, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	// run publishes per messages from a publisher on every node at once,
	// all in flight, and returns the log entries they took at the leader.
	run := func(round int) (entries uint64) {
		t.Helper()
		l := -1
		testutil.Eventually(t, 15*time.Second, "a leader", func() bool { l = c.QueueLeader("/", name); return l >= 0 })
		before, err := c.Node(l).Broker().QuorumLocalStatus("/", name)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 3)
		for p := range 3 {
			ch := dial(p)
			if err := ch.Confirm(false); err != nil {
				t.Fatal(err)
			}
			confs := ch.NotifyPublish(make(chan amqp.Confirmation, per))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range per {
					body := fmt.Appendf(nil, "r%d-p%d-%d", round, p, i)
					if err := ch.PublishWithContext(context.Background(), "", name, false, false,
						amqp.Publishing{Body: body, DeliveryMode: amqp.Persistent}); err != nil {
						errs <- err
						return
					}
				}
				for range per {
					select {
					case cf := <-confs:
						if !cf.Ack {
							errs <- fmt.Errorf("publisher %d: %d nacked", p, cf.DeliveryTag)
							return
						}
					case <-time.After(30 * time.Second):
						errs <- fmt.Errorf("publisher %d: confirms missing", p)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		after, err := c.Node(l).Broker().QuorumLocalStatus("/", name)
		if err != nil {
			t.Fatal(err)
		}
		// Every message once, each publisher's in order.
		get := dial(l)
		next := [3]int{}
		for range 3 * per {
			d, ok, err := get.Get(name, true)
			if err != nil || !ok {
				t.Fatalf("round %d: get: ok=%v err=%v", round, ok, err)
			}
			var r, p, i int
			if _, err := fmt.Sscanf(string(d.Body), "r%d-p%d-%d", &r, &p, &i); err != nil || r != round || p < 0 || p > 2 || i != next[p] {
				t.Fatalf("round %d: got %q, want publisher %d's message %d next", round, d.Body, p, next[p])
			}
			next[p]++
		}
		if _, ok, _ := get.Get(name, true); ok {
			t.Fatalf("round %d: a message more than published", round)
		}
		return after.LastLogIndex - before.LastLogIndex
	}

	for i := range 3 {
		if broker.QuorumBatching(c.Node(i).Broker()) {
			t.Fatalf("node %d batches with an older build in the cluster", i)
		}
	}
	if n := run(1); n < 3*per {
		t.Fatalf("with an older node, %d publishes took %d entries: batched", 3*per, n)
	}

	c.Node(2).Stop()
	c.Node(2).SetOlderBuild(false)
	c.Node(2).Start()
	testutil.Eventually(t, 20*time.Second, "every node batching once all are of this build", func() bool {
		for i := range 3 {
			if !broker.QuorumBatching(c.Node(i).Broker()) {
				return false
			}
		}
		return true
	})
	n := run(2)
	if n >= 3*per {
		t.Fatalf("%d publishes took %d entries: not batched", 3*per, n)
	}
	t.Logf("%d publishes in flight together took %d entries (acks, leases and all)", 3*per, n)
}
