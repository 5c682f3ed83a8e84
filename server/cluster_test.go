package server_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/server"
)

// oneNodeGroup is a metadata group of one node for tests: it applies each
// proposal to its broker in order, or fails them all while down.
type oneNodeGroup struct {
	mu    sync.Mutex
	b     *broker.Broker
	index uint64
	down  bool
}

func (g *oneNodeGroup) Propose(_ context.Context, cmd []byte) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.down {
		return fmt.Errorf("%w: timed out after 5s", broker.ErrNoQuorum)
	}
	g.index++
	return g.b.ApplyCommand(g.index, cmd)
}

func (g *oneNodeGroup) setDown(d bool) { g.mu.Lock(); g.down = d; g.mu.Unlock() }

// TestClusterNoQuorumClosesWith541: issue 13: without a quorum, a
// definition change over AMQP closes the connection with 541
// INTERNAL_ERROR naming what was not applied, while publishing to and
// consuming from an existing queue goes on; exclusive queue owners carry
// the node's connection id base.
func TestClusterNoQuorumClosesWith541(t *testing.T) {
	const node = "warren@a"
	b := broker.New(broker.Config{Node: node})
	g := &oneNodeGroup{b: b}
	b.SetReplicator(g)
	s := startServer(t, server.Config{Broker: b, ConnIDBase: broker.ConnIDBase(node)})

	c := dial(t, s)
	ch := channel(t, c)
	if _, err := ch.QueueDeclare("h3-q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ex, err := ch.QueueDeclare("", false, false, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q := b.VHost("/").Queue(ex.Name); q == nil || q.Owner <= broker.ConnIDBase(node) || q.Home != node {
		t.Fatalf("exclusive queue %+v: want an owner above the node's base %d and home %s", q, broker.ConnIDBase(node), node)
	}

	g.setDown(true)
	if err := ch.Publish("", "h3-q", false, false, amqp.Publishing{Body: []byte("still")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5e9, "the message in the queue", func() bool { m, _ := b.VHost("/").Queue("h3-q").Counts(); return m == 1 })
	if _, ok, err := ch.Get("h3-q", true); err != nil || !ok {
		t.Fatalf("get without a quorum: %v %v", ok, err)
	}
	_, err = ch.QueueDeclare("h3-new", true, false, false, false, nil)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != 541 || ae.Server != true {
		t.Fatalf("declare without a quorum: %#v", err)
	}
	const text = "INTERNAL_ERROR - cluster has no quorum: declare of queue 'h3-new' in vhost '/' not applied (timed out after 5s)"
	if ae.Reason != text {
		t.Fatalf("reason %q, want %q", ae.Reason, text)
	}
	if b.VHost("/").Queue("h3-new") != nil {
		t.Fatal("the queue was declared without a quorum")
	}
	if !c.IsClosed() {
		waitFor(t, 5e9, "the connection closed", c.IsClosed)
	}
}

// twoNodeGroup applies every proposal to both brokers in one order.
type twoNodeGroup struct {
	mu    sync.Mutex
	bs    []*broker.Broker
	index uint64
}

type twoNodeMember struct {
	g    *twoNodeGroup
	self int
}

func (m twoNodeMember) Propose(_ context.Context, cmd []byte) error {
	m.g.mu.Lock()
	defer m.g.mu.Unlock()
	m.g.index++
	var res error
	for i, b := range m.g.bs {
		if err := b.ApplyCommand(m.g.index, cmd); i == m.self {
			res = err
		}
	}
	return res
}

// TestClusterExclusiveAcrossNodes: issue 13: an exclusive queue declared
// through one node is locked (405) for a connection of another node, and
// goes from every node when its owner connection closes; a queue declared
// through a node is homed there and visible from the other.
func TestClusterExclusiveAcrossNodes(t *testing.T) {
	g := &twoNodeGroup{}
	var ss []*server.Server
	for i, node := range []string{"warren@a", "warren@b"} {
		b := broker.New(broker.Config{Node: node})
		b.SetReplicator(twoNodeMember{g, i})
		g.bs = append(g.bs, b)
		ss = append(ss, startServer(t, server.Config{Broker: b, ConnIDBase: broker.ConnIDBase(node)}))
	}
	ca, cb := dial(t, ss[0]), dial(t, ss[1])
	cha := channel(t, ca)
	if _, err := cha.QueueDeclare("h3-ex", false, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	var ae *amqp.Error
	if _, err := channel(t, cb).QueueDeclare("h3-ex", false, false, true, false, nil); !errors.As(err, &ae) || ae.Code != 405 {
		t.Fatalf("exclusive declare from the other node: %v", err)
	}
	if err := channel(t, cb).QueueBind("h3-ex", "k", "amq.direct", false, nil); !errors.As(err, &ae) || ae.Code != 405 {
		t.Fatalf("bind from the other node: %v", err)
	}
	chb := channel(t, cb)
	if _, err := chb.QueueDeclare("h3-shared", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if q := g.bs[0].VHost("/").Queue("h3-shared"); q == nil || q.Home != "warren@b" {
		t.Fatalf("h3-shared on node a: %+v, want home warren@b", q)
	}
	if err := ca.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5e9, "the exclusive queue deleted on both nodes", func() bool {
		return g.bs[0].VHost("/").Queue("h3-ex") == nil && g.bs[1].VHost("/").Queue("h3-ex") == nil
	})
	if _, err := chb.QueueDelete("h3-shared", false, false, false); err != nil {
		t.Fatal(err)
	}
	if g.bs[0].VHost("/").Queue("h3-shared") != nil {
		t.Fatal("a deleted queue is still on the other node")
	}
}
