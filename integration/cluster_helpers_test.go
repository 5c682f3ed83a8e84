package integration

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/internal/loopnet"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/server"
)

// In-process cluster for the data-plane tests of issue 13: every node is
// a broker (broker.Open with Config.Node) and an AMQP server on
// 127.0.0.1:0; the nodes reach each other through loopPeers, which calls
// the other broker's HandlePeerCall directly and delivers one-way
// messages in order through one goroutine per link. Definitions are
// declared on every node with the same Home (declareQueue), as the
// replicated definitions would make them. cut and heal simulate a node
// becoming unreachable (PeerState on both sides).

// testCluster is a set of in-process nodes on a loopnet network.
type testCluster struct {
	t     *testing.T
	nodes map[string]*testNode
	net   *loopnet.Net
}

// testNode is one node of a testCluster.
type testNode struct {
	name string
	b    *broker.Broker
	srv  *server.Server
	c    *testCluster
}

// startCluster starts one node per name ("warren@a", ...); definitions
// are declared on each node by the test (declareQueue, ...).
func startCluster(t *testing.T, names ...string) *testCluster {
	t.Helper()
	return startClusterWith(t, nil, names...)
}

// startReplicatedCluster starts nodes whose definition changes go through
// a loopback replicator (every command applied on every node in one
// order, as the metadata group would), place choosing each new queue's
// home: clients declare, bind and delete over AMQP on any node.
func startReplicatedCluster(t *testing.T, place func(vhost, name string) string, names ...string) *testCluster {
	t.Helper()
	return startClusterWith(t, &loopRepl{place: place}, names...)
}

func startClusterWith(t *testing.T, repl *loopRepl, names ...string) *testCluster {
	t.Helper()
	c := &testCluster{t: t, nodes: map[string]*testNode{}, net: loopnet.New(broker.ErrLinkFull)}
	for _, n := range names {
		cfg := broker.Config{DataDir: t.TempDir(), Node: n}
		if repl != nil {
			cfg.PlaceQueue = repl.place
		}
		b, err := broker.Open(cfg)
		if err != nil {
			t.Fatalf("node %s: %v", n, err)
		}
		nd := &testNode{name: n, b: b, c: c}
		c.net.Add(n, b)
		b.SetPeers(c.net.Peers(n))
		if repl != nil {
			b.SetReplicator(repl.Join(b))
			b.SetNodes(func() []string { return names })
		}
		srv, err := server.New(server.Config{AMQPAddr: "127.0.0.1:0", Broker: b})
		if err != nil {
			t.Fatalf("node %s: %v", n, err)
		}
		if err := srv.Start(); err != nil {
			t.Fatalf("node %s: %v", n, err)
		}
		nd.srv = srv
		c.nodes[n] = nd
	}
	t.Cleanup(c.close)
	return c
}

func (c *testCluster) close() {
	for _, nd := range c.nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = nd.srv.Shutdown(ctx)
		cancel()
	}
	c.net.Close()
	for _, nd := range c.nodes {
		nd.b.Close()
	}
}

// node returns the named node.
func (c *testCluster) node(name string) *testNode { return c.nodes[name] }

// url is the AMQP URL of the node.
func (n *testNode) url() string { return "amqp://guest:guest@" + n.srv.Addr().String() + "/" }

// dial connects to the node.
func (n *testNode) dial(t *testing.T) *amqp.Connection {
	t.Helper()
	return testutil.Dial(t, n.url())
}

// declareQueue declares queue name homed on home on every node, as the
// replicated definitions would.
func (c *testCluster) declareQueue(name, home string, durable bool, args amqp.Table) {
	c.t.Helper()
	for _, nd := range c.nodes {
		if _, _, _, err := nd.b.VHost("/").DeclareQueue(broker.QueueSpec{Name: name, Durable: durable, Args: toWireTable(args), Home: home}, false); err != nil {
			c.t.Fatalf("declare %s on %s: %v", name, nd.name, err)
		}
	}
}

// declareExchange declares an exchange on every node.
func (c *testCluster) declareExchange(name, kind string) {
	c.t.Helper()
	for _, nd := range c.nodes {
		if err := nd.b.VHost("/").DeclareExchange(broker.ExchangeSpec{Name: name, Kind: kind, Durable: true}, false); err != nil {
			c.t.Fatalf("declare exchange %s on %s: %v", name, nd.name, err)
		}
	}
}

// bind binds a queue to an exchange on every node.
func (c *testCluster) bind(exchange, queue, key string) {
	c.t.Helper()
	for _, nd := range c.nodes {
		if err := nd.b.VHost("/").Bind(exchange, queue, false, key, nil, 0); err != nil {
			c.t.Fatalf("bind %s->%s on %s: %v", exchange, queue, nd.name, err)
		}
	}
}

// homeQueue is the queue on its home node.
func (c *testCluster) homeQueue(home, name string) *broker.Queue {
	return c.nodes[home].b.VHost("/").Queue(name)
}

// setCut makes the link between a and b unreachable (or reachable again)
// and tells both nodes.
func (c *testCluster) setCut(a, b string, cut bool) {
	c.net.SetCut(a, b, cut)
	c.nodes[a].b.PeerState(b, !cut)
	c.nodes[b].b.PeerState(a, !cut)
}

// toWireTable converts an amqp091 table to Warren's.
func toWireTable(t amqp.Table) map[string]any {
	if t == nil {
		return nil
	}
	out := map[string]any{}
	for k, v := range t {
		switch x := v.(type) {
		case int:
			out[k] = int64(x)
		case amqp.Table:
			out[k] = toWireTable(x)
		default:
			out[k] = v
		}
	}
	return out
}

// loopRepl is a loopback metadata group (loopnet.Repl) and where it
// places new queues.
type loopRepl struct {
	loopnet.Repl
	place func(vhost, name string) string
}
