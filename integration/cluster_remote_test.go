package integration

import (
	"errors"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/warrentest"
)

const (
	nodeA = "warren@a"
	nodeB = "warren@b"
)

// confirmAll publishes n persistent messages on a new channel of conn in
// confirm mode and returns how many were acked and nacked.
func confirmAll(t *testing.T, conn *amqp.Connection, exchange, key string, n int) (acked, nacked int) {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confs := ch.NotifyPublish(make(chan amqp.Confirmation, n))
	for i := 0; i < n; i++ {
		if err := ch.Publish(exchange, key, false, false, amqp.Publishing{DeliveryMode: 2, Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		select {
		case c := <-confs:
			if c.Ack {
				acked++
			} else {
				nacked++
			}
		case <-time.After(waitTimeout):
			t.Fatalf("confirm %d of %d: timed out", i+1, n)
		}
	}
	return acked, nacked
}

func readyUnacked(c *testCluster, home, q string) (int, int) {
	s := c.homeQueue(home, q).Stats()
	return s.Ready, s.Unacked
}

// issue 13 (remote queues): a client on node A publishes with confirms
// to a durable queue homed on node B; every confirm is an ack and comes
// after B's group commit; declare-ok on A reports B's counts; a consumer
// on A with prefetch 10 gets B's messages with at most 10 unacked at the
// home, acks travel back and drain the queue.
func TestClusterRemotePublishConsume(t *testing.T) {
	c := startCluster(t, nodeA, nodeB)
	c.declareQueue("h6-q", nodeB, true, nil)
	conn := c.node(nodeA).dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	before := c.node(nodeB).b.SyncStats().Requests
	if acked, nacked := confirmAll(t, conn, "", "h6-q", 100); acked != 100 || nacked != 0 {
		t.Fatalf("confirms: %d acks, %d nacks; want 100 acks", acked, nacked)
	}
	if got := c.node(nodeB).b.SyncStats().Requests - before; got == 0 {
		t.Fatalf("no sync request on the home node before the confirms")
	}
	if r, _ := readyUnacked(c, nodeB, "h6-q"); r != 100 {
		t.Fatalf("home has %d ready, want 100", r)
	}
	if m := c.homeQueue(nodeA, "h6-q").Stats().Ready; m != 0 {
		t.Fatalf("node A holds %d messages of a queue homed on B", m)
	}
	q, err := ch.QueueDeclarePassive("h6-q", true, false, false, false, nil)
	if err != nil || q.Messages != 100 {
		t.Fatalf("passive declare on A: %+v %v; want 100 messages", q, err)
	}
	q, err = ch.QueueDeclare("h6-q", true, false, false, false, nil)
	if err != nil || q.Messages != 100 {
		t.Fatalf("declare on A: %+v %v; want 100 messages", q, err)
	}

	cch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := cch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	msgs, err := cch.Consume("h6-q", "h6-c", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "10 unacked at the home", func() bool { r, u := readyUnacked(c, nodeB, "h6-q"); return u == 10 && r == 90 })
	q, err = ch.QueueDeclarePassive("h6-q", true, false, false, false, nil)
	if err != nil || q.Consumers != 1 || q.Messages != 90 {
		t.Fatalf("passive declare on A while consuming: %+v %v; want 90 messages, 1 consumer", q, err)
	}
	seen := map[string]bool{}
	for len(seen) < 100 {
		select {
		case d := <-msgs:
			if seen[string(d.Body)] {
				t.Fatalf("duplicate %s", d.Body)
			}
			seen[string(d.Body)] = true
			if _, u := readyUnacked(c, nodeB, "h6-q"); u > 10 {
				t.Fatalf("%d unacked at the home with prefetch 10", u)
			}
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("got %d of 100 deliveries", len(seen))
		}
	}
	waitFor(t, "queue drained at home", func() bool { r, u := readyUnacked(c, nodeB, "h6-q"); return r == 0 && u == 0 })
	if err := cch.Cancel("h6-c", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "consumer gone at home", func() bool { return c.homeQueue(nodeB, "h6-q").ConsumerCount() == 0 })
}

// issue 13 (remote queues): nack, reject and requeue from node A reach
// the home on B: a requeued message comes back redelivered, a rejected
// one is gone; basic.get, purge and delete from A answer B's counts.
func TestClusterRemoteSettleGetPurgeDelete(t *testing.T) {
	c := startCluster(t, nodeA, nodeB)
	c.declareQueue("h6-s", nodeB, true, nil)
	conn := c.node(nodeA).dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	confirmAll(t, conn, "", "h6-s", 3)
	msgs, err := ch.Consume("h6-s", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	next := func() amqp.Delivery {
		t.Helper()
		select {
		case d := <-msgs:
			return d
		case <-time.After(waitTimeout):
			t.Fatal("no delivery")
		}
		return amqp.Delivery{}
	}
	d0, d1, d2 := next(), next(), next()
	if err := d0.Reject(false); err != nil {
		t.Fatal(err)
	}
	if err := d1.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	r := next()
	if string(r.Body) != string(d1.Body) || !r.Redelivered {
		t.Fatalf("requeued delivery: body %q redelivered %v; want %q redelivered", r.Body, r.Redelivered, d1.Body)
	}
	if err := d2.Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := r.Ack(false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "queue empty at home", func() bool { rd, u := readyUnacked(c, nodeB, "h6-s"); return rd == 0 && u == 0 })
	if err := ch.Cancel(r.ConsumerTag, false); err != nil {
		t.Fatal(err)
	}

	confirmAll(t, conn, "", "h6-s", 4)
	g, ok, err := ch.Get("h6-s", false)
	if err != nil || !ok || g.MessageCount != 3 || string(g.Body) != "0" {
		t.Fatalf("basic.get from A: ok=%v count=%d body=%q err=%v; want 0 with 3 left", ok, g.MessageCount, g.Body, err)
	}
	if err := g.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	g, ok, err = ch.Get("h6-s", false)
	if err != nil || !ok || string(g.Body) != "0" || !g.Redelivered {
		t.Fatalf("get after requeue: ok=%v body=%q redelivered=%v err=%v", ok, g.Body, g.Redelivered, err)
	}
	if err := g.Ack(false); err != nil {
		t.Fatal(err)
	}
	n, err := ch.QueuePurge("h6-s", false)
	if err != nil || n != 3 {
		t.Fatalf("purge from A: %d %v; want 3", n, err)
	}
	if _, ok, _ := ch.Get("h6-s", true); ok {
		t.Fatal("get after purge found a message")
	}
	confirmAll(t, conn, "", "h6-s", 2)
	n, err = ch.QueueDelete("h6-s", false, false, false)
	if err != nil || n != 2 {
		t.Fatalf("delete from A: %d %v; want 2", n, err)
	}
	if c.homeQueue(nodeB, "h6-s") != nil {
		t.Fatal("queue still on its home after delete")
	}
}

// issue 13 (remote queues): dead letters cross nodes: a queue homed on B
// dead-letters into a DLQ homed on A; a reject-publish overflow on the
// home nacks the publisher on A.
func TestClusterRemoteDeadLetterAndOverflow(t *testing.T) {
	c := startCluster(t, nodeA, nodeB)
	c.declareExchange("h6-dlx", "fanout")
	c.declareQueue("h6-dlq", nodeA, true, nil)
	c.bind("h6-dlx", "h6-dlq", "")
	c.declareQueue("h6-src", nodeB, true, amqp.Table{"x-dead-letter-exchange": "h6-dlx"})
	c.declareQueue("h6-full", nodeB, true, amqp.Table{"x-max-length": 1, "x-overflow": "reject-publish"})
	conn := c.node(nodeA).dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	confirmAll(t, conn, "", "h6-src", 1)
	g, ok, err := ch.Get("h6-src", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if err := g.Reject(false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "dead letter in the DLQ on A", func() bool { return c.homeQueue(nodeA, "h6-dlq").Stats().Ready == 1 })
	d, ok, err := ch.Get("h6-dlq", true)
	if err != nil || !ok {
		t.Fatalf("get dlq: %v %v", ok, err)
	}
	deaths, _ := d.Headers["x-death"].([]any)
	if len(deaths) != 1 || deaths[0].(amqp.Table)["queue"] != "h6-src" {
		t.Fatalf("x-death: %v", d.Headers["x-death"])
	}

	if acked, nacked := confirmAll(t, conn, "", "h6-full", 3); acked != 1 || nacked != 2 {
		t.Fatalf("reject-publish on the home: %d acks %d nacks; want 1 and 2", acked, nacked)
	}
}

// issue 13 (remote queues): when the consumer's node becomes unreachable
// the home returns its unacked messages redelivered, and the consumer on
// A is cancelled (its queue's home is gone); while B is unreachable from
// A, declare, consume, get, purge and delete on A answer RabbitMQ's 404
// for a queue whose home node is down, and a confirmed publish is
// nacked. After healing, everything works again.
func TestClusterRemoteNodeDown(t *testing.T) {
	c := startCluster(t, nodeA, nodeB)
	c.declareQueue("h6-d", nodeB, true, nil)
	conn := c.node(nodeA).dial(t)
	confirmAll(t, conn, "", "h6-d", 5)
	cch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	cancels := cch.NotifyCancel(make(chan string, 1))
	msgs, err := cch.Consume("h6-d", "h6-dc", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		select {
		case <-msgs:
		case <-time.After(waitTimeout):
			t.Fatal("no delivery")
		}
	}
	waitFor(t, "5 unacked at home", func() bool { _, u := readyUnacked(c, nodeB, "h6-d"); return u == 5 })

	c.setCut(nodeA, nodeB, true)
	select {
	case tag := <-cancels:
		if tag != "h6-dc" {
			t.Fatalf("cancelled %q", tag)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no basic.cancel for the consumer of a queue whose home went down")
	}
	if r, u := readyUnacked(c, nodeB, "h6-d"); r != 5 || u != 0 {
		t.Fatalf("home after losing the consumer's node: %d ready %d unacked; want 5, 0", r, u)
	}
	want := "NOT_FOUND - home node 'warren@b' of durable queue 'h6-d' in vhost '/' is down or inaccessible"
	expect404 := func(what string, f func(ch *amqp.Channel) error) {
		t.Helper()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		err = f(ch)
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != 404 || ae.Reason != want {
			t.Fatalf("%s with the home down: %v; want 404 %q", what, err, want)
		}
	}
	expect404("passive declare", func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclarePassive("h6-d", true, false, false, false, nil)
		return err
	})
	expect404("declare", func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare("h6-d", true, false, false, false, nil)
		return err
	})
	expect404("consume", func(ch *amqp.Channel) error {
		_, err := ch.Consume("h6-d", "", false, false, false, false, nil)
		if err == nil { // the error closes the channel after consume's return
			_, err = ch.QueueDeclarePassive("amq.rabbitmq.reply-to", false, false, false, false, nil)
		}
		return err
	})
	expect404("get", func(ch *amqp.Channel) error { _, _, err := ch.Get("h6-d", false); return err })
	expect404("purge", func(ch *amqp.Channel) error { _, err := ch.QueuePurge("h6-d", false); return err })
	expect404("delete", func(ch *amqp.Channel) error { _, err := ch.QueueDelete("h6-d", false, false, false); return err })
	pch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if acked, nacked := confirmAll(t, conn, "", "h6-d", 2); acked != 0 || nacked != 2 {
		t.Fatalf("publish to a queue whose home is down: %d acks %d nacks; want 2 nacks", acked, nacked)
	}

	c.setCut(nodeA, nodeB, false)
	g, ok, err := pch.Get("h6-d", false)
	if err != nil || !ok || !g.Redelivered || g.MessageCount != 4 {
		t.Fatalf("get after healing: ok=%v redelivered=%v count=%d err=%v; want a redelivered message, 4 left", ok, g.Redelivered, g.MessageCount, err)
	}
	if acked, nacked := confirmAll(t, conn, "", "h6-d", 1); acked != 1 || nacked != 0 {
		t.Fatalf("publish after healing: %d acks %d nacks", acked, nacked)
	}
}

// issue 13 (remote queues): a delivery the local channel cannot take yet
// (a channel-wide prefetch of 2, while the home grants the consumer
// unlimited credit) waits on the consumer's node and is delivered once
// the channel acks, none lost; closing the channel returns its unacked
// messages to the home, redelivered.
func TestClusterRemoteBufferedAndChannelClose(t *testing.T) {
	c := startCluster(t, nodeA, nodeB)
	c.declareQueue("h6-g", nodeB, false, nil)
	conn := c.node(nodeA).dial(t)
	confirmAll(t, conn, "", "h6-g", 6)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(2, 0, true); err != nil {
		t.Fatal(err)
	}
	msgs, err := ch.Consume("h6-g", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		select {
		case d := <-msgs:
			if string(d.Body) != fmt.Sprint(i) {
				t.Fatalf("delivery %d: %q", i, d.Body)
			}
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("got %d of 4 deliveries with a channel-wide prefetch", i)
		}
	}
	for i := 0; i < 2; i++ {
		select {
		case <-msgs:
		case <-time.After(waitTimeout):
			t.Fatal("no delivery")
		}
	}
	waitFor(t, "2 unacked at home", func() bool { r, u := readyUnacked(c, nodeB, "h6-g"); return r == 0 && u == 2 })
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "unacked returned to home", func() bool { r, u := readyUnacked(c, nodeB, "h6-g"); return r == 2 && u == 0 })
	if c.homeQueue(nodeB, "h6-g").ConsumerCount() != 0 {
		t.Fatal("consumer left at home after its channel closed")
	}
	ch2, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	g, ok, err := ch2.Get("h6-g", true)
	if err != nil || !ok || !g.Redelivered || string(g.Body) != "4" {
		t.Fatalf("get after close: ok=%v body=%q redelivered=%v err=%v", ok, g.Body, g.Redelivered, err)
	}
}

// issue 13 (remote queues): deliveries that cross a basic.cancel on the
// way from the home are returned to it, not lost: after a cancel in the
// middle of a stream and the channel's close, every message is ready at
// the home again.
func TestClusterRemoteCancelInFlight(t *testing.T) {
	c := startCluster(t, nodeA, nodeB)
	c.declareQueue("h6-f", nodeB, false, nil)
	conn := c.node(nodeA).dial(t)
	confirmAll(t, conn, "", "h6-f", 500)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := ch.Consume("h6-f", "h6-fc", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-msgs:
	case <-time.After(waitTimeout):
		t.Fatal("no delivery")
	}
	if err := ch.Cancel("h6-fc", false); err != nil {
		t.Fatal(err)
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "all 500 ready at home", func() bool { r, u := readyUnacked(c, nodeB, "h6-f"); return r == 500 && u == 0 })
}

// issue 13 (remote queues): three nodes: a publisher on A, the queue on
// B, a consumer on C; the consumer's acks from C settle on B, and a
// topic exchange routes on A to queues homed on B and C at once.
func TestClusterRemoteThreeNodes(t *testing.T) {
	const nodeC = "warren@c"
	c := startCluster(t, nodeA, nodeB, nodeC)
	c.declareExchange("h6-t", "topic")
	c.declareQueue("h6-tb", nodeB, true, nil)
	c.declareQueue("h6-tc", nodeC, true, nil)
	c.bind("h6-t", "h6-tb", "k.#")
	c.bind("h6-t", "h6-tc", "#")
	pub := c.node(nodeA).dial(t)
	if acked, nacked := confirmAll(t, pub, "h6-t", "k.x", 20); acked != 20 || nacked != 0 {
		t.Fatalf("confirms: %d acks %d nacks", acked, nacked)
	}
	if r, _ := readyUnacked(c, nodeB, "h6-tb"); r != 20 {
		t.Fatalf("queue on B: %d ready, want 20", r)
	}
	if r, _ := readyUnacked(c, nodeC, "h6-tc"); r != 20 {
		t.Fatalf("queue on C: %d ready, want 20", r)
	}
	sub := c.node(nodeC).dial(t)
	ch, err := sub.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(5, 0, false); err != nil {
		t.Fatal(err)
	}
	msgs, err := ch.Consume("h6-tb", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		select {
		case d := <-msgs:
			if string(d.Body) != fmt.Sprint(i) {
				t.Fatalf("delivery %d: %q (order)", i, d.Body)
			}
			if i%5 == 4 {
				if err := d.Ack(true); err != nil {
					t.Fatal(err)
				}
			}
		case <-time.After(waitTimeout):
			t.Fatalf("got %d of 20", i)
		}
	}
	waitFor(t, "drained on B", func() bool { r, u := readyUnacked(c, nodeB, "h6-tb"); return r == 0 && u == 0 })
}

// issue 13 (remote queues): the queue deleted on its home cancels the
// consumers other nodes have on it (basic.cancel), and an exclusive
// consumer on the home refuses a consumer from another node with 403.
func TestClusterRemoteDeletedAtHomeAndExclusive(t *testing.T) {
	c := startCluster(t, nodeA, nodeB)
	c.declareQueue("h6-x", nodeB, false, nil)
	conn := c.node(nodeA).dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	cancels := ch.NotifyCancel(make(chan string, 1))
	if _, err := ch.Consume("h6-x", "h6-xc", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	other := c.node(nodeB).dial(t)
	och, err := other.Channel()
	if err != nil {
		t.Fatal(err)
	}
	_, err = och.Consume("h6-x", "", false, false, false, false, nil)
	if err == nil {
		_, err = och.QueueDeclarePassive("h6-x", false, false, false, false, nil)
	}
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != 403 {
		t.Fatalf("consume on B beside an exclusive consumer from A: %v; want 403", err)
	}
	if _, err := c.node(nodeB).b.VHost("/").DeleteQueue("h6-x", 0, false, false); err != nil {
		t.Fatal(err)
	}
	select {
	case tag := <-cancels:
		if tag != "h6-xc" {
			t.Fatalf("cancelled %q", tag)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no basic.cancel after the queue was deleted on its home")
	}
}

// issue 13 (remote queues) with replicated definitions: a client on A
// declares a durable queue that placement puts on B, binds it, publishes
// with confirms, consumes, and deletes it, all over AMQP on A; the
// delete-ok counts B's messages and the queue is gone on both nodes.
func TestClusterRemoteReplicated(t *testing.T) {
	c := startReplicatedCluster(t, func(_, name string) string { return nodeB }, nodeA, nodeB)
	conn := c.node(nodeA).dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("h6-r", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if q := c.homeQueue(nodeA, "h6-r"); q == nil || q.Home != nodeB || q.ServedHere() {
		t.Fatalf("queue on A: %+v; want a remote queue homed on B", q)
	}
	if err := ch.ExchangeDeclare("h6-rx", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("h6-r", "k", "h6-rx", false, nil); err != nil {
		t.Fatal(err)
	}
	if acked, nacked := confirmAll(t, conn, "h6-rx", "k", 10); acked != 10 || nacked != 0 {
		t.Fatalf("confirms: %d acks %d nacks", acked, nacked)
	}
	q, err := ch.QueueDeclarePassive("h6-r", true, false, false, false, nil)
	if err != nil || q.Messages != 10 {
		t.Fatalf("passive declare: %+v %v; want 10 messages", q, err)
	}
	g, ok, err := ch.Get("h6-r", false)
	if err != nil || !ok || string(g.Body) != "0" {
		t.Fatalf("get: %v %q %v", ok, g.Body, err)
	}
	if err := g.Ack(false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete("h6-r", false, true, false); err == nil {
		t.Fatal("delete if-empty of a queue with 9 messages on its home succeeded")
	}
	ch, err = conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	n, err := ch.QueueDelete("h6-r", false, false, false)
	if err != nil || n != 9 {
		t.Fatalf("delete: %d %v; want 9", n, err)
	}
	for _, nd := range []string{nodeA, nodeB} {
		if c.homeQueue(nd, "h6-r") != nil {
			t.Fatalf("queue still on %s after delete", nd)
		}
	}
}

// issue 13 (remote queues): deliveries that find the link's send queue
// full are offered again: a no-ack consumer on A gets every message of a
// queue on B through a link that holds 2 messages at a time.
func TestClusterRemoteFullLink(t *testing.T) {
	c := startCluster(t, nodeA, nodeB)
	c.declareQueue("h6-l", nodeB, false, nil)
	v := c.node(nodeB).b.VHost("/")
	var r broker.Router
	for i := 0; i < 300; i++ {
		if _, err := v.Publish(&r, "", &broker.Message{RoutingKey: "h6-l", Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	c.net.SetLinkCap(2)
	conn := c.node(nodeA).dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := ch.Consume("h6-l", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 300; i++ {
		select {
		case d := <-msgs:
			if string(d.Body) != fmt.Sprint(i) {
				t.Fatalf("delivery %d: %q", i, d.Body)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("got %d of 300 through a full link", i)
		}
	}
}

// issue 13 (remote queues) over the real inter-node link (warrentest's
// cluster: transport, metadata group, glue): a client on node 1 uses a
// durable queue placed on node 2: confirms, prefetch, acks, get, purge;
// with node 2 crashed, declare answers the home-down 404 within the
// call deadline and a confirmed publish is nacked.
func TestClusterRemoteOverTransport(t *testing.T) {
	home := warrentest.NodeName(1)
	c := warrentest.StartCluster(t, 2, warrentest.PlaceQueuesOn(home))
	conn, err := amqp.Dial(c.Node(0).URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("h6-t", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if q := c.Node(0).Broker().VHost("/").Queue("h6-t"); q == nil || q.ServedHere() {
		t.Fatalf("queue on node 1: %+v; want remote", q)
	}
	if acked, nacked := confirmAll(t, conn, "", "h6-t", 200); acked != 200 || nacked != 0 {
		t.Fatalf("confirms: %d acks %d nacks", acked, nacked)
	}
	if s := c.Node(1).Broker().VHost("/").Queue("h6-t").Stats(); s.Ready != 200 || s.Persistent != 200 {
		t.Fatalf("home: %d ready, %d persistent; want 200", s.Ready, s.Persistent)
	}
	if err := ch.Qos(20, 0, false); err != nil {
		t.Fatal(err)
	}
	msgs, err := ch.Consume("h6-t", "h6-tc", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 150; i++ {
		select {
		case d := <-msgs:
			if string(d.Body) != fmt.Sprint(i) {
				t.Fatalf("delivery %d: %q", i, d.Body)
			}
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("got %d of 150", i)
		}
	}
	if err := ch.Cancel("h6-tc", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "home settles", func() bool {
		s := c.Node(1).Broker().VHost("/").Queue("h6-t").Stats()
		return s.Ready+s.Unacked == 50
	})
	// Deliveries that crossed the cancel went back; the unacked ones
	// come back with a recover-less close of this channel.
	ch.Close()
	ch, err = conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "50 ready at home", func() bool { return c.Node(1).Broker().VHost("/").Queue("h6-t").Stats().Ready == 50 })
	n, err := ch.QueuePurge("h6-t", false)
	if err != nil || n != 50 {
		t.Fatalf("purge: %d %v; want 50", n, err)
	}

	c.Node(1).Crash()
	want := "NOT_FOUND - home node '" + home + "' of durable queue 'h6-t' in vhost '/' is down or inaccessible"
	waitFor(t, "home-down 404", func() bool {
		ch, err := conn.Channel()
		if err != nil {
			return false
		}
		_, err = ch.QueueDeclarePassive("h6-t", true, false, false, false, nil)
		var ae *amqp.Error
		return errors.As(err, &ae) && ae.Code == 404 && ae.Reason == want
	})
	if acked, nacked := confirmAll(t, conn, "", "h6-t", 3); acked != 0 || nacked != 3 {
		t.Fatalf("publish with the home down: %d acks %d nacks; want 3 nacks", acked, nacked)
	}
}
