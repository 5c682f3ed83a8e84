package integration

import (
	"context"
	"errors"
	"fmt"
	"github.com/warrenmq/warren/internal/testutil"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
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

// testCluster is a set of in-process nodes.
type testCluster struct {
	t     *testing.T
	mu    sync.Mutex
	nodes map[string]*testNode
	cut   map[[2]string]bool // unreachable links, both orders
	links map[[2]string]*loopLink
	wg    sync.WaitGroup
	// linkCap bounds the one-way messages a link queues (Send fails
	// beyond it, as the transport's does); 0: 65536. Links take the
	// value in force when they are first used.
	linkCap int
	// closed: close has begun; Send makes no new link (its goroutine
	// would never end) and fails as an unreachable node does.
	closed bool
}

// testNode is one node of a testCluster.
type testNode struct {
	name string
	b    *broker.Broker
	srv  *server.Server
	c    *testCluster
}

// loopLink carries one-way messages from one node to another, in order.
type loopLink struct {
	ch chan []byte
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
	c := &testCluster{t: t, nodes: map[string]*testNode{}, cut: map[[2]string]bool{}, links: map[[2]string]*loopLink{}}
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
		b.SetPeers(&loopPeers{self: n, c: c})
		if repl != nil {
			repl.nodes = append(repl.nodes, b)
			b.SetReplicator(loopMember{repl, len(repl.nodes) - 1})
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
	c.mu.Lock()
	c.closed = true
	for k, l := range c.links {
		close(l.ch)
		delete(c.links, k)
	}
	c.mu.Unlock()
	c.wg.Wait()
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
	c.mu.Lock()
	c.cut[[2]string{a, b}], c.cut[[2]string{b, a}] = cut, cut
	c.mu.Unlock()
	c.nodes[a].b.PeerState(b, !cut)
	c.nodes[b].b.PeerState(a, !cut)
}

func (c *testCluster) reachable(from, to string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[to] != nil && !c.cut[[2]string{from, to}]
}

var errLoopUnreachable = errors.New("loopback: node unreachable")

// loopPeers is broker.Peers over direct calls.
type loopPeers struct {
	self string
	c    *testCluster
}

func (p *loopPeers) Up(node string) bool { return p.c.reachable(p.self, node) }

func (p *loopPeers) Call(ctx context.Context, node string, req []byte) ([]byte, error) {
	if !p.c.reachable(p.self, node) {
		return nil, fmt.Errorf("%s: %w", node, errLoopUnreachable)
	}
	type answer struct {
		b   []byte
		err error
	}
	done := make(chan answer, 1)
	req = append([]byte(nil), req...)
	go func() {
		b, err := p.c.nodes[node].b.HandlePeerCall(p.self, req)
		done <- answer{b, err}
	}()
	select {
	case a := <-done:
		return a.b, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *loopPeers) Send(node string, msg []byte) error {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.nodes[node] == nil || c.cut[[2]string{p.self, node}] {
		return fmt.Errorf("%s: %w", node, errLoopUnreachable)
	}
	k := [2]string{p.self, node}
	l := c.links[k]
	if l == nil {
		n := c.linkCap
		if n == 0 {
			n = 1 << 16
		}
		l = &loopLink{ch: make(chan []byte, n)}
		c.links[k] = l
		to, from := c.nodes[node].b, p.self
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for m := range l.ch {
				if c.reachable(from, node) {
					to.HandlePeerMessage(from, m)
				}
			}
		}()
	}
	select {
	case l.ch <- msg:
		return nil
	default:
		return fmt.Errorf("%s: %w", node, broker.ErrLinkFull)
	}
}

// SendWait is Send that waits while the link is full (broker.PacedPeers,
// as the cluster glue's), polling it.
func (p *loopPeers) SendWait(ctx context.Context, node string, msg []byte) error {
	for {
		err := p.Send(node, msg)
		if err == nil || !errors.Is(err, broker.ErrLinkFull) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Microsecond):
		}
	}
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

// loopRepl is a loopback metadata group: it sequences proposals and
// applies each command on every node in the same order, answering the
// proposer with its own apply's result.
type loopRepl struct {
	mu    sync.Mutex
	index uint64
	nodes []*broker.Broker
	place func(vhost, name string) string
}

type loopMember struct {
	l    *loopRepl
	self int
}

func (m loopMember) Propose(_ context.Context, cmd []byte) error {
	l := m.l
	l.mu.Lock()
	defer l.mu.Unlock()
	l.index++
	var res error
	for i, b := range l.nodes {
		if err := b.ApplyCommand(l.index, cmd); i == m.self {
			res = err
		}
	}
	return res
}
