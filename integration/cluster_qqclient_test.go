package integration

import (
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/warrentest"
)

// The client side of replicated quorum queues (issue 14, qqclient.go):
// what clients connected to the nodes that do not lead a quorum queue see
// while its leader moves or is missing.

// issue 14 (failover, consumers keep their subscriptions): consumers
// connected to the two nodes that survive the crash of the leader's node
// are never cancelled; one of their nodes becomes the leader (its
// consumer moves from a remote leg to the local machine), the other
// follows it to the new leader; publishes with confirms go on through a
// surviving node; every confirmed message is consumed by the same
// subscriptions, and a message delivered twice is redelivered the second
// time.
func TestQuorumClientConsumersFollowFailover(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	const q = "h5-qq-follow"
	qqDeclare(t, c, 0, q, nil)
	l := qqLeader(t, c, q, "")
	var others []int
	for i := range c.Nodes() {
		if i != l {
			others = append(others, i)
		}
	}
	var cons []*qqConsumer
	var cancels []chan string
	for _, i := range others {
		k := qqConsume(t, c, i, q, 20, false)
		defer k.close()
		cons = append(cons, k)
		cancels = append(cancels, k.ch.NotifyCancel(make(chan string, 1)))
	}
	consumed := func(bodies []string) func() bool {
		return func() bool {
			for _, b := range bodies {
				n := 0
				for _, k := range cons {
					k.mu.Lock()
					n += k.got[b]
					k.mu.Unlock()
				}
				if n == 0 {
					return false
				}
			}
			return true
		}
	}
	before := qqPublish(t, c, others[0], q, "before", 200)
	if len(before) != 200 {
		t.Fatalf("%d of 200 confirmed before the crash", len(before))
	}
	waitFor(t, "the messages published before the crash consumed", consumed(before))

	leaderName := c.Node(l).Name()
	c.Node(l).Crash()
	nl := qqLeader(t, c, q, leaderName)
	// Both subscriptions re-attach to the new leader by themselves: one
	// on its own node's machine, the other as a remote proxy.
	waitFor(t, "both consumers attached at the new leader", func() bool {
		lq := c.Node(nl).Broker().VHost("/").Queue(q)
		return lq != nil && lq.ConsumerCount() == 2
	})
	after := qqPublish(t, c, others[1], q, "after", 200)
	if len(after) != 200 {
		t.Fatalf("%d of 200 confirmed after the crash (node %d leads)", len(after), nl+1)
	}
	waitFor(t, "the messages published after the crash consumed by the same subscriptions", consumed(after))
	// Both subscriptions work after the failover: the one on the new
	// leader's node (now a consumer of its own machine) and the other
	// (following the leader to another node).
	for i, k := range cons {
		k.mu.Lock()
		n := 0
		for _, b := range after {
			n += k.got[b]
		}
		k.mu.Unlock()
		if n == 0 {
			t.Errorf("consumer on node %d (leader now node %d) got none of the messages published after the crash", others[i]+1, nl+1)
		}
	}

	// The crashed node comes back as a follower; a publish through it
	// reaches the leader and the same consumers.
	c.Node(l).Start()
	back := qqPublish(t, c, l, q, "back", 50)
	if len(back) != 50 {
		t.Fatalf("%d of 50 confirmed through the restarted node", len(back))
	}
	waitFor(t, "the messages published through the restarted node consumed", consumed(back))

	for i, ch := range cancels {
		select {
		case tag := <-ch:
			t.Fatalf("consumer on node %d cancelled (%s): the subscription must survive the failover", others[i]+1, tag)
		default:
		}
	}
	for i, k := range cons {
		k.mu.Lock()
		for b, n := range k.got {
			if n > 1 && !k.redel[b] {
				t.Errorf("node %d: %s delivered %d times, never redelivered=true", others[i]+1, b, n)
			}
		}
		k.mu.Unlock()
	}
}

// issue 14 (no leader): with two of three members down, the quorum queue
// has no leader: a publish through the survivor waits (no confirm, no
// nack) and is confirmed once a second member is back; basic.consume
// fails after a few seconds with 541 INTERNAL_ERROR (RabbitMQ 3.10's
// answer when its Ra command times out: the connection closes, even with
// a heartbeat shorter than the wait), and a
// passive queue.declare answers declare-ok with 0 messages and 0
// consumers (rabbit_quorum_queue:stat's answer without a leader).
func TestQuorumClientNoQuorum(t *testing.T) {
	t.Parallel() // waits on timeouts and processes, not the CPU
	c := warrentest.StartCluster(t, 3)
	const q = "h5-qq-noquorum"
	qqDeclare(t, c, 0, q, nil)
	l := qqLeader(t, c, q, "")
	survivor := (l + 1) % 3
	other := (l + 2) % 3
	c.Node(l).Crash()
	c.Node(other).Crash()

	conn, err := amqp.Dial(c.Node(survivor).URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := pch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confs := pch.NotifyPublish(make(chan amqp.Confirmation, 1))
	if err := pch.Publish("", q, false, false, amqp.Publishing{DeliveryMode: 2, Body: []byte("waits")}); err != nil {
		t.Fatal(err)
	}

	dch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	dq, err := dch.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil || dq.Messages != 0 || dq.Consumers != 0 {
		t.Fatalf("passive declare without a leader: %+v %v; want 0 messages, 0 consumers", dq, err)
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("declare answered after %v: it waits for a leader first", d)
	}

	// A 1s heartbeat: the consume waits longer than two intervals for a
	// leader, which must not read as missed heartbeats (the reader is
	// busy, not idle).
	cconn, err := amqp.DialConfig(c.Node(survivor).URL(), amqp.Config{Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cconn.Close()
	cch, err := cconn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	_, err = cch.Consume(q, "", false, false, false, false, nil)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.InternalError || ae.Reason != "INTERNAL_ERROR" {
		t.Fatalf("consume without a leader: %v; want 541 INTERNAL_ERROR", err)
	}
	waitFor(t, "the consuming connection closed", cconn.IsClosed)

	select {
	case cf := <-confs:
		t.Fatalf("publish answered without a leader: ack=%v", cf.Ack)
	default:
	}
	c.Node(other).Start()
	select {
	case cf := <-confs:
		if !cf.Ack {
			t.Fatal("publish nacked once the quorum is back")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("publish not confirmed 30 s after the quorum came back")
	}
	k := qqConsume(t, c, survivor, q, 10, false)
	defer k.close()
	waitFor(t, "the waiting message consumed", func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.got["waits"] == 1
	})
}
