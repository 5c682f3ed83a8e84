package warrentest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/cluster"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/mgmt"
	"github.com/warrenmq/warren/server"
	"github.com/warrenmq/warren/streamserver"
)

// Cluster is an in-process Warren cluster for tests: n nodes in this
// process, each a broker, an AMQP server, a management API and a cluster
// node, linked over loopback TCP by the real inter-node transport and
// metadata Raft group (issue 13). Fault tests that need kill -9 and a
// network proxy run real processes instead (integration's proc cluster).
//
//	c := warrentest.StartCluster(t, 3)
//	conn, _ := amqp091.Dial(c.Node(0).URL())
type Cluster struct {
	t     testing.TB
	nodes []*Node
	cfg   clusterConfig
	logs  *logRing // every node's log, shown when the test fails
}

// Node is one node of a test cluster.
type Node struct {
	c       *Cluster
	i       int
	name    string
	dataDir string
	caddr   string       // inter-node address, kept across Restart
	cln     net.Listener // bound on caddr, for the first start only
	join    bool         // started empty, waiting to be added (AddNode)
	addr    string       // AMQP
	mgAddr  string
	saddr   string // the stream protocol's (WithStreams), kept across Restart

	mu   sync.Mutex
	b    *broker.Broker
	srv  *server.Server
	mg   *mgmt.Server
	node *cluster.Node
	ss   *streamserver.Server
}

type clusterConfig struct {
	place   func(vhost, name string) string
	server  func(*server.Config)
	tick    time.Duration
	older   map[int]bool
	streams bool
}

// WithStreams gives every node a stream-protocol listener on a port of
// its own (Node.StreamAddr), which the nodes advertise to each other.
func WithStreams() ClusterOption {
	return func(c *clusterConfig) { c.streams = true }
}

// ClusterOption adjusts a test cluster.
type ClusterOption func(*clusterConfig)

// PlaceQueuesOn homes every new queue on the named node, whichever node
// the declaring client is connected to (broker.Config.PlaceQueue), so that
// a test can use queues that live on another node than its client's.
func PlaceQueuesOn(node string) ClusterOption {
	return func(c *clusterConfig) { c.place = func(string, string) string { return node } }
}

// WithServerConfig changes every node's server settings.
func WithServerConfig(f func(*server.Config)) ClusterOption {
	return func(c *clusterConfig) { c.server = f }
}

// OlderBuild makes nodes (by index) answer their peers as a build from
// before cluster features (cluster.Config.NoFeatures): the others then
// write no replicated format such a build would not decode.
func OlderBuild(nodes ...int) ClusterOption {
	return func(c *clusterConfig) {
		c.older = map[int]bool{}
		for _, i := range nodes {
			c.older[i] = true
		}
	}
}

// SetOlderBuild changes whether the node, at its next start, answers as
// an older build (OlderBuild): its upgrade, in a rolling upgrade.
func (nd *Node) SetOlderBuild(older bool) {
	if nd.c.cfg.older == nil {
		nd.c.cfg.older = map[int]bool{}
	}
	nd.c.cfg.older[nd.i] = older
}

// NodeName is the name of node i of a test cluster: warren@n1, warren@n2...
func NodeName(i int) string { return fmt.Sprintf("warren@n%d", i+1) }

// ClusterSecret is the test clusters' shared secret.
const ClusterSecret = "warrentest-cluster-secret"

// StartCluster starts an n-node cluster, waits until it has a leader and
// every node knows the cluster id, and registers its shutdown with
// t.Cleanup.
func StartCluster(t testing.TB, n int, opts ...ClusterOption) *Cluster {
	t.Helper()
	// A short Raft tick keeps elections quick (10 to 20 ticks); under the
	// race detector, several times slower, a loaded machine's pauses
	// would otherwise pass for dead leaders all the time.
	tick := 20 * time.Millisecond
	if testutil.Race {
		tick = 60 * time.Millisecond
	}
	c := &Cluster{t: t, cfg: clusterConfig{tick: tick}, logs: newLogRing(clusterLogLines)}
	for _, o := range opts {
		o(&c.cfg)
	}
	// Bind the inter-node listeners first: every node's peer list names
	// all. Their ports are outside the kernel's ephemeral range, so a
	// restart finds its port free (testutil.ListenFree).
	for i := 0; i < n; i++ {
		ln := testutil.ListenFree(t)
		c.nodes = append(c.nodes, &Node{c: c, i: i, name: NodeName(i), dataDir: t.TempDir(),
			caddr: ln.Addr().String(), cln: ln, addr: "127.0.0.1:0", mgAddr: "127.0.0.1:0"})
	}
	t.Cleanup(c.Close)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("warrentest: the cluster's log, INFO and up, last %d lines at most:\n%s", clusterLogLines, c.logs)
		}
	})
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, nd := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = nd.start()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("warrentest: %v", err)
		}
	}
	c.WaitReady()
	return c
}

// AddNode starts one more node, empty and waiting to be added (as
// `warren --cluster-join`), and returns it; the test adds it with
// `warren cluster join` or POST /api/cluster/members on a member.
func (c *Cluster) AddNode() *Node {
	c.t.Helper()
	ln := testutil.ListenFree(c.t)
	nd := &Node{c: c, i: len(c.nodes), name: NodeName(len(c.nodes)), dataDir: c.t.TempDir(),
		caddr: ln.Addr().String(), cln: ln, addr: "127.0.0.1:0", mgAddr: "127.0.0.1:0", join: true}
	c.nodes = append(c.nodes, nd)
	if err := nd.start(); err != nil {
		c.t.Fatalf("warrentest: %v", err)
	}
	return nd
}

// ClusterAddr is the node's inter-node address.
func (nd *Node) ClusterAddr() string { return nd.caddr }

// Node returns node i.
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// Nodes returns every node.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// WaitReady waits until the running nodes agree on a leader and a cluster id.
func (c *Cluster) WaitReady() {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		leader, id, ok := "", "", true
		for _, nd := range c.nodes {
			g := nd.Cluster()
			if g == nil {
				continue
			}
			l, cid := g.Meta().Leader(), g.Meta().ClusterID()
			if l == "" || cid == "" || (leader != "" && l != leader) || (id != "" && cid != id) {
				ok = false
				break
			}
			leader, id = l, cid
		}
		if ok && leader != "" {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("warrentest: the cluster has no leader or no id after 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Close stops every node.
func (c *Cluster) Close() {
	for _, nd := range c.nodes {
		nd.Stop()
	}
}

func (c *Cluster) peers() map[string]string {
	m := map[string]string{}
	for _, nd := range c.nodes {
		m[nd.name] = nd.caddr
	}
	return m
}

func (nd *Node) start() error {
	// The log goes to the cluster's ring (shown if the test fails), or
	// with WARREN_TEST_LOG set, all of it to stderr as it happens.
	logger := slog.New(slog.NewTextHandler(nd.c.logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", nd.name)
	if os.Getenv("WARREN_TEST_LOG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", nd.name)
	}
	ln := nd.cln
	nd.cln = nil
	closeLn := func() {
		if ln != nil {
			ln.Close()
		}
	}
	cfg := server.Config{AMQPAddr: nd.addr, Heartbeat: 60 * time.Second, DataDir: nd.dataDir, Logger: logger}
	if nd.c.cfg.server != nil {
		nd.c.cfg.server(&cfg)
	}
	// The broker's own settings among the server's (QueueWindow).
	b, err := broker.Open(broker.Config{DataDir: nd.dataDir, Node: nd.name, Logger: logger, PlaceQueue: nd.c.cfg.place,
		QueueWindow: cfg.QueueWindow})
	if err != nil {
		closeLn()
		return err
	}
	cfg.Broker, cfg.ConnIDBase = b, b.RunConnIDBase()
	srv, err := server.New(cfg)
	if err != nil {
		closeLn()
		b.Close()
		return err
	}
	var ss *streamserver.Server
	if nd.c.cfg.streams {
		if nd.saddr == "" {
			sln := testutil.ListenFree(nd.c.t)
			nd.saddr = sln.Addr().String()
			sln.Close()
		}
		ss = streamserver.New(b, streamserver.Config{Addr: nd.saddr, Logger: logger})
	}
	mcfg := mgmt.Config{Server: srv, Addr: nd.mgAddr, Logger: logger, UI: mgmt.DefaultUI()}
	if ss != nil {
		mcfg.Streams = ss
	}
	mg := mgmt.New(mcfg)
	node, err := cluster.Start(cluster.Config{Node: nd.name, Listen: nd.caddr, Peers: nd.c.peers(),
		Secret: []byte(ClusterSecret), DataDir: nd.dataDir, Logger: logger, Tick: nd.c.cfg.tick, Join: nd.join,
		Listener: ln, NoFeatures: nd.c.cfg.older[nd.i], StreamEndpoint: nd.saddr}, b, mg)
	if err != nil {
		b.Close()
		return err
	}
	if ss != nil {
		if err := ss.Listen(); err != nil {
			node.Close()
			b.Close()
			return err
		}
	}
	if err := srv.Start(); err != nil {
		node.Close()
		b.Close()
		return err
	}
	if err := mg.Start(); err != nil {
		srv.Close()
		node.Close()
		b.Close()
		return err
	}
	nd.mu.Lock()
	nd.b, nd.srv, nd.mg, nd.node, nd.ss = b, srv, mg, node, ss
	nd.addr, nd.mgAddr = srv.Addr().String(), mg.Addr().String()
	nd.mu.Unlock()
	return nil
}

// StreamAddr is the node's stream-protocol address (WithStreams).
func (nd *Node) StreamAddr() string { return nd.saddr }

// DataDir is the node's data directory.
func (nd *Node) DataDir() string { return nd.dataDir }

// Name is the node's name.
func (nd *Node) Name() string { return nd.name }

// URL is the node's amqp:// URL for the guest user.
func (nd *Node) URL() string { return fmt.Sprintf("amqp://guest:guest@%s/", nd.addr) }

// Addr is the node's AMQP host:port.
func (nd *Node) Addr() string { return nd.addr }

// MgmtURL is the base URL of the node's management API.
func (nd *Node) MgmtURL() string { return "http://" + nd.mgAddr }

// Broker returns the node's broker while it runs (nil when stopped).
func (nd *Node) Broker() *broker.Broker {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.b
}

// Cluster returns the node's cluster node while it runs (nil when stopped).
func (nd *Node) Cluster() *cluster.Node {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.node
}

// Running reports whether the node runs.
func (nd *Node) Running() bool { return nd.Cluster() != nil }

// Stop shuts the node down cleanly (its data directory stays for Start).
func (nd *Node) Stop() { nd.stop(true) }

// Crash stops the node without a clean shutdown, as close to kill -9 as a
// process can do to itself: connections are dropped and the broker's
// stores are closed unclean.
func (nd *Node) Crash() { nd.stop(false) }

func (nd *Node) stop(clean bool) {
	nd.mu.Lock()
	b, srv, mg, node, ss := nd.b, nd.srv, nd.mg, nd.node, nd.ss
	nd.b, nd.srv, nd.mg, nd.node, nd.ss = nil, nil, nil, nil, nil
	nd.mu.Unlock()
	if srv == nil {
		return
	}
	mg.Close()
	if ss != nil {
		ss.Close()
	}
	var serr error
	if clean {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		serr = srv.Shutdown(ctx)
		cancel()
	} else {
		serr = srv.Close()
	}
	if err := node.Close(); err != nil {
		nd.c.t.Logf("warrentest: %s: cluster node close: %v", nd.name, err)
	}
	if clean && serr == nil {
		if err := b.Close(); err != nil {
			nd.c.t.Errorf("warrentest: %s: broker close: %v", nd.name, err)
		}
	} else {
		b.CloseUnclean()
	}
}

// LoseData empties the stopped node's data directory, as a replaced
// disk does (issue 22).
func (nd *Node) LoseData() {
	nd.c.t.Helper()
	if nd.Running() {
		nd.c.t.Fatalf("warrentest: LoseData on running node %s", nd.name)
	}
	if err := os.RemoveAll(nd.dataDir); err != nil {
		nd.c.t.Fatal(err)
	}
	if err := os.MkdirAll(nd.dataDir, 0o755); err != nil {
		nd.c.t.Fatal(err)
	}
}

// SetJoin makes the node's next start wait to be added to the cluster
// (as --cluster-join) or form it from the peer list.
func (nd *Node) SetJoin(join bool) { nd.join = join }

// TryStart starts a stopped node once and returns why it did not start.
func (nd *Node) TryStart() error { return nd.start() }

// Start starts a stopped node again on the same ports and data directory.
func (nd *Node) Start() {
	nd.c.t.Helper()
	var err error
	for i := 0; i < 50; i++ {
		if err = nd.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	nd.c.t.Fatalf("warrentest: restarting %s: %v", nd.name, err)
}

// QueueLeader is the index of the node that leads the replicated quorum
// queue name in vhost as every running node knows it, -1 while the
// running nodes know none or disagree (issue 14).
func (c *Cluster) QueueLeader(vhost, name string) int {
	leader := ""
	for _, nd := range c.nodes {
		b := nd.Broker()
		if b == nil {
			continue
		}
		v := b.VHost(vhost)
		if v == nil {
			return -1
		}
		q := v.Queue(name)
		if q == nil {
			return -1
		}
		info, ok := q.QuorumInfo(nil)
		if !ok || info.Leader == "" || leader != "" && info.Leader != leader {
			return -1
		}
		leader = info.Leader
	}
	for i, nd := range c.nodes {
		if nd.name == leader {
			return i
		}
	}
	return -1
}
