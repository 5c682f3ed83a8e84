package broker_test

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

// issue 14 (failover, redelivered flags): basic.get on a replicated
// quorum queue hands a message out only once the replicated delivery
// lease covers it, so that a new leader knows it may have been delivered.
// Every Lease proposal is held back 3s here (a slow commit), the new
// leader's first one too: the message published right after it took over
// is beyond the lease. The get (through another node) waits for it; the
// leader's node crashes right after; the next leader hands the message
// out again flagged redelivered. Handed out at once, it came back
// unflagged.
func TestQuorumGetWaitsForLease(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster")
	}
	restore := broker.SetQQLeaseDelay(3 * time.Second)
	defer restore()
	c := warrentest.StartCluster(t, 3)
	const name = "qq-get-lease"
	channel := func(i int) *amqp.Channel {
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
	if _, err := channel(0).QueueDeclare(name, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	l := -1
	testutil.Eventually(t, 15*time.Second, "a leader", func() bool { l = c.QueueLeader("/", name); return l >= 0 })
	// Through a node that stays up: a channel closing on the leader's
	// node would requeue the message, flagged, by itself.
	o := (l + 1) % 3
	ch := channel(o)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confs := ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	if err := ch.Publish("", name, false, false, amqp.Publishing{DeliveryMode: 2, Body: []byte("m")}); err != nil {
		t.Fatal(err)
	}
	if cf := <-confs; !cf.Ack {
		t.Fatal("publish nacked")
	}
	start := time.Now()
	d, ok, err := ch.Get(name, false)
	if err != nil || !ok || string(d.Body) != "m" || d.Redelivered {
		t.Fatalf("get: ok %v body %q redelivered %v err %v", ok, d.Body, d.Redelivered, err)
	}
	t.Logf("the get answered after %v", time.Since(start))
	c.Node(l).Crash()
	testutil.Eventually(t, 15*time.Second, "a new leader", func() bool {
		n := c.QueueLeader("/", name)
		return n >= 0 && n != l
	})
	och := channel(o)
	var got amqp.Delivery
	testutil.Eventually(t, 20*time.Second, "the message from the new leader", func() bool {
		d, ok, err := och.Get(name, false)
		if err != nil {
			t.Fatal(err)
		}
		got = d
		return ok
	})
	if string(got.Body) != "m" || !got.Redelivered {
		t.Fatalf("after the failover: body %q redelivered %v, want m, redelivered", got.Body, got.Redelivered)
	}
}
