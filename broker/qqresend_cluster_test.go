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

// issue 22 (Raft ahead of data): after a leader change a node resends
// only from its first publish the new leader has not applied. The
// leader applies 300 publishes of another node and its answers are lost;
// its leadership moves; the publisher's node learns from the new leader
// that all 300 are in its log and confirms them without sending one body
// again (before: all 300 went over the link again, deduplicated there).
func TestQuorumResendFromFirstUnapplied(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster")
	}
	c := warrentest.StartCluster(t, 3)
	const name, n = "qq-resend-mark", 300
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
	o, x := (l+1)%3, (l+2)%3
	ch := dial(o)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confs := ch.NotifyPublish(make(chan amqp.Confirmation, n))

	broker.SetQQDropAnswers(true)
	defer broker.SetQQDropAnswers(false)
	for i := range n {
		if err := ch.Publish("", name, false, false, amqp.Publishing{DeliveryMode: 2, Body: fmt.Appendf(nil, "m%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	leaderQ := c.Node(l).Broker().VHost("/").Queue(name)
	testutil.Eventually(t, 20*time.Second, "the leader to apply every publish", func() bool {
		m, _ := leaderQ.Counts()
		return m == n
	})
	select {
	case cf := <-confs:
		t.Fatalf("a confirm although the leader's answers are dropped: %+v", cf)
	default:
	}
	in0, _ := broker.QQPublishFigures(c.Node(x).Broker())
	_, settled0 := broker.QQPublishFigures(c.Node(o).Broker())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := c.Node(l).Broker().TransferQuorumLeader(ctx, "/", name, c.Node(x).Name()); err != nil {
		t.Fatalf("transfer to %s: %v", c.Node(x).Name(), err)
	}
	broker.SetQQDropAnswers(false)
	for i := range n {
		select {
		case cf := <-confs:
			if !cf.Ack {
				t.Fatalf("publish %d nacked", cf.DeliveryTag)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%d of %d publishes confirmed after the leader change", i, n)
		}
	}
	in1, _ := broker.QQPublishFigures(c.Node(x).Broker())
	_, settled1 := broker.QQPublishFigures(c.Node(o).Broker())
	t.Logf("after the leader change: %d publishes sent again to the new leader, %d confirmed by its applied mark", in1-in0, settled1-settled0)
	if in1-in0 != 0 || settled1-settled0 != n {
		t.Fatalf("%d publishes sent again to the new leader, %d confirmed by its mark; want 0 and %d", in1-in0, settled1-settled0, n)
	}
	newQ := c.Node(x).Broker().VHost("/").Queue(name)
	if m, _ := newQ.Counts(); m != n {
		t.Fatalf("the new leader has %d messages, want %d", m, n)
	}
}
