package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

// issue 23: a publish to a quorum queue from a node that does not lead it
// is encoded once, on that node, and decoded once, when the leader
// applies it: the leader proposes the bytes it received. Before, the
// leader decoded each publish from the link and encoded it again for its
// proposal (two decodes per message). The messages arrive as sent.
func TestQuorumPublishEncodedOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster")
	}
	c := warrentest.StartCluster(t, 3)
	const name, n = "qq-encode-once", 200
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
	l := -1
	testutil.Eventually(t, 15*time.Second, "a leader", func() bool { l = c.QueueLeader("/", name); return l >= 0 })
	o := (l + 1) % 3
	ch := dial(o)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confs := ch.NotifyPublish(make(chan amqp.Confirmation, n))
	in0, _ := broker.QQPublishFigures(c.Node(l).Broker())
	dec0 := broker.MessageDecodes()
	for i := range n {
		p := amqp.Publishing{Body: fmt.Appendf(nil, "m%d", i), Headers: amqp.Table{"i": int32(i)}, Priority: 3,
			DeliveryMode: amqp.Persistent, Expiration: "600000"}
		if err := ch.PublishWithContext(context.Background(), "", name, false, false, p); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		select {
		case cf := <-confs:
			if !cf.Ack {
				t.Fatalf("publish %d nacked", cf.DeliveryTag)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("confirms did not all arrive")
		}
	}
	in1, _ := broker.QQPublishFigures(c.Node(l).Broker())
	// The leader decodes each message once, to place it; nothing else in
	// the process decodes while nobody consumes.
	testutil.Eventually(t, 10*time.Second, "every message placed", func() bool {
		return broker.MessageDecodes()-dec0 >= n
	})
	time.Sleep(200 * time.Millisecond) // a second decode of the last ones would show by now
	if in := in1 - in0; in < n {
		t.Fatalf("the leader received %d publishes from node %d, want %d", in, o, n)
	}
	if got := broker.MessageDecodes() - dec0; got != n {
		t.Fatalf("%d messages published from a follower were decoded %d times, want %d (once, at apply)", n, got, n)
	}
	// As sent: body, header, priority, persistence, expiration.
	get := dial(l)
	for i := range n {
		d, ok, err := get.Get(name, true)
		if err != nil || !ok {
			t.Fatalf("get %d: ok=%v err=%v", i, ok, err)
		}
		if string(d.Body) != fmt.Sprintf("m%d", i) || d.Headers["i"] != int32(i) || d.Priority != 3 ||
			d.DeliveryMode != amqp.Persistent || d.Expiration != "600000" {
			t.Fatalf("message %d arrived as %q %v prio %d mode %d exp %q", i, d.Body, d.Headers, d.Priority, d.DeliveryMode, d.Expiration)
		}
	}
}
