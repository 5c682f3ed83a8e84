// Package cluster makes Warren nodes a cluster (issue 13): the inter-node
// transport (cluster/transport), the metadata Raft group holding the
// definitions (cluster/meta), and the glue in this file that connects them
// to a node's broker (definitions through Raft, remote queues) and its
// management API (cluster-wide lists, /api/nodes).
//
// One node, one transport: every other node is reached over one
// authenticated TCP connection that multiplexes three services:
//
//	svcMeta  one-way   Raft messages of the metadata group
//	svcData  call/one-way  the data plane of remote queues (broker.Peers)
//	svcMgmt  call      the management API's local view of a node (mgmt.Cluster)
//	svcSync  call      wait until a node has applied the metadata log to an index
//	svcQRaft one-way   Raft messages of the quorum queues' groups (cluster/qraft)
//	svcQQ    one-way   quorum queue leaders' announcements (broker.HandleQuorumMessage)
//	svcQSnap one-way   quorum queue snapshot streams (cluster/qraft), on the bulk lane
//	svcFeat  call      the formats this node's build decodes (features.go)
//	svcSRaft one-way   Raft messages of the streams' groups (streamraft)
package cluster

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/warrenmq/warren/bridge"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/cluster/meta"
	"github.com/warrenmq/warren/cluster/qraft"
	"github.com/warrenmq/warren/cluster/transport"
	"github.com/warrenmq/warren/mgmt"
)

// The services multiplexed on an inter-node link.
const (
	svcMeta byte = 1
	svcData byte = 2
	svcMgmt byte = 3
	svcSync byte = 4
	// issue 14: replicated quorum queues.
	svcQRaft byte = 5
	svcQQ    byte = 6
	// issue 22: snapshots of deep queues, streamed behind Raft.
	svcQSnap byte = 7
	// Formats a node decodes, asked of every peer (features.go).
	svcFeat byte = 8
	// issue 25: replicated streams.
	svcSRaft byte = 9
)

// Config configures a node.
type Config struct {
	// Node is this node's name, "warren@host".
	Node string
	// Listen is the inter-node listen address ("host:port"); Advertise
	// the address other nodes dial (default: Listen, or the listener's
	// address when Listen's port is 0).
	Listen, Advertise string
	// Listener, if set, is the inter-node listener, already bound (tests
	// bind it first, so that no other program can take the port between
	// choosing it and starting the node); Listen is then not used. The
	// node owns it: Start closes it when it fails, Close when it is done.
	Listener net.Listener
	// Peers are the nodes of a static peer list: name -> address. This
	// node may be in it.
	Peers map[string]string
	// Secret is the shared cluster secret (RabbitMQ's Erlang cookie).
	Secret []byte
	// TLS, if set, encrypts inter-node links (both ends use it).
	TLS *tls.Config
	// Join starts the node empty, waiting to be added to a running
	// cluster (warren cluster join), instead of forming one from Peers.
	Join bool
	// Links is the node's shovels and federation links (nil: the
	// management server's): the cluster tells it which links run here.
	Links *bridge.Manager
	// NoFeatures (tests) makes the node answer its peers as a build from
	// before features.go did: no svcFeat service, so that they use no
	// format an older node would not decode.
	NoFeatures bool
	// DataDir keeps the node's Raft state (meta-raft.db).
	DataDir string
	Logger  *slog.Logger
	// Tick is the Raft tick (default 100 ms; tests use less).
	Tick time.Duration
	// ProposeTimeout bounds a definition change without a quorum
	// (default 5 s).
	ProposeTimeout time.Duration
	// ForceNewCluster recovers from a lost majority (warren node
	// force-boot): the node starts as the only member of its cluster and
	// of each of its quorum queues' groups, keeping every entry it has.
	// See force.go.
	ForceNewCluster bool
	// StreamEndpoint is the stream-protocol endpoint ("host:port") this
	// node's peers give stream clients for it ("" when it has none).
	StreamEndpoint string
}

// leaderWait bounds how long Start waits for the metadata group to have
// a leader.
const leaderWait = 3 * time.Second

// Node is a running cluster node.
type Node struct {
	cfg  Config
	log  *slog.Logger
	b    *broker.Broker
	m    *mgmt.Server
	tr   *transport.Transport
	ln   net.Listener
	meta *meta.Group
	qh   *qraft.Host // the quorum queues' raft host
	inc  *incarnations
	addr string
	up   time.Time

	mu    sync.Mutex
	peers map[string]string // name -> address, as the transport has them
	wg    sync.WaitGroup
	once  sync.Once
	stop  chan struct{} // closed by Close
	feat  features      // what each peer's build decodes (features.go)
	// workers feed each node's data-plane messages to the broker in
	// order (dataMessage); closed once the transport is.
	workers map[string]chan []byte
	closing bool
}

// Start joins b (opened with broker.Config.Node = cfg.Node) and its
// management server m (nil if disabled) to the cluster. Call it before
// serving clients: it returns once the node has replayed its own Raft log
// into b.
func Start(cfg Config, b *broker.Broker, m *mgmt.Server) (*Node, error) {
	var bad error
	switch {
	case cfg.Node == "" || b.Node() != cfg.Node:
		bad = fmt.Errorf("cluster: the broker's node name %q must be the node's %q", b.Node(), cfg.Node)
	case len(cfg.Secret) == 0:
		bad = errors.New("cluster: a cluster secret is required")
	}
	if bad != nil {
		if cfg.Listener != nil {
			cfg.Listener.Close()
		}
		return nil, bad
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.Node), b: b, m: m, peers: map[string]string{}, up: time.Now(),
		workers: map[string]chan []byte{}}
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return nil, fmt.Errorf("cluster: listening on %s: %w", cfg.Listen, err)
		}
	}
	n.ln = ln
	n.addr = cfg.Advertise
	if n.addr == "" {
		n.addr = ln.Addr().String()
	}
	// A data directory without the metadata group's state is new: the
	// node forms a cluster from its peers, or waits to join one.
	_, statErr := os.Stat(filepath.Join(cfg.DataDir, meta.FileName))
	newDir := errors.Is(statErr, os.ErrNotExist)
	inc, err := openIncarnations(cfg.DataDir)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	n.inc = inc
	n.tr = transport.New(transport.Config{
		Self:      cfg.Node,
		Secret:    cfg.Secret,
		ClusterID: n.clusterID,
		LearnID: func(id string) {
			if g := n.group(); g != nil {
				if err := g.SetClusterID(id); err != nil {
					n.log.Error("cluster: learning the cluster id", "id", id, "err", err)
				}
			}
		},
		TLS:         cfg.TLS,
		Logger:      n.log,
		Priority:    []byte{svcMeta, svcQRaft}, // Raft ahead of data (issue 22)
		Incarnation: inc.self,
		CheckPeer:   func(name string, v uint64) error { return inc.verdict(name, v, true) },
		ProbeInfo:   n.probeInfo,
	})
	initial := map[string]string{cfg.Node: n.addr}
	for name, addr := range cfg.Peers {
		if name != cfg.Node {
			initial[name] = addr
		}
	}
	// The port is served from now on, for probes only (HoldLinks): peers
	// starting at the same time probe this node as it probes them.
	n.tr.HoldLinks(true)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		_ = n.tr.Serve(ln)
	}()
	if newDir && !cfg.Join && len(initial) > 1 {
		if err := n.checkLostData(initial); err != nil {
			n.tr.Close()
			ln.Close()
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	n.tr.OnMessage(svcMeta, func(from string, msg []byte) {
		if g := n.group(); g != nil {
			g.Step(from, msg)
		}
	})

	if cfg.ForceNewCluster {
		if err := n.forceMeta(); err != nil {
			n.tr.Close()
			ln.Close()
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	// The quorum queues' raft host before the metadata group: replaying
	// the definitions starts the groups of the quorum queues declared.
	qh, err := qraft.Open(qraft.Config{
		Self: cfg.Node,
		Dir:  filepath.Join(cfg.DataDir, "qraft"),
		Send: func(to string, data []byte) error { return n.tr.Send(to, svcQRaft, data) },
		SendBulk: func(ctx context.Context, to string, data []byte) error {
			return n.tr.SendWait(ctx, to, svcQSnap, data)
		},
		Logger:       n.log,
		TickInterval: cfg.Tick,
		ForceAlone:   cfg.ForceNewCluster,
	})
	if err != nil {
		n.tr.Close()
		ln.Close()
		return nil, fmt.Errorf("cluster: quorum queues: %w", err)
	}
	n.qh = qh
	n.tr.OnMessage(svcQRaft, qh.Step)
	n.tr.OnMessage(svcQSnap, qh.Step)
	n.tr.OnMessage(svcQQ, b.HandleQuorumMessage)
	b.SetQuorumHost(quorumHost{h: qh, n: n})
	n.tr.OnMessage(svcSRaft, b.HandleStreamRaft)
	b.SetStreamNet(streamNet{n})

	// The group first (it reads the cluster id this node keeps), then
	// the links: a handshake always compares the id the node has.
	g, err := meta.Open(meta.Config{
		Self:           cfg.Node,
		Dir:            cfg.DataDir,
		Peers:          initial,
		Join:           cfg.Join,
		SM:             stateMachine{b},
		Send:           func(to string, data []byte) error { return n.tr.Send(to, svcMeta, data) },
		Logger:         n.log,
		Tick:           cfg.Tick,
		ProposeTimeout: cfg.ProposeTimeout,
		Incarnation:    inc.self,
	})
	if err != nil {
		qh.Close()
		n.tr.Close()
		ln.Close()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	n.mu.Lock()
	n.meta = g
	n.mu.Unlock()
	for name, addr := range initial {
		if name != cfg.Node {
			n.setPeer(name, addr)
		}
	}
	n.tr.HoldLinks(false)
	g.OnMembers(n.membersChanged)
	n.membersChanged(g.Members())

	b.SetReplicator(replicator{g: g, n: n})
	n.tr.Handle(svcSync, n.serveSync)
	b.SetNodes(n.nodeNames)
	b.SetPeers(peers{n})
	n.tr.Handle(svcData, b.HandlePeerCall)
	n.tr.OnMessage(svcData, n.dataMessage)
	if !cfg.NoFeatures {
		n.tr.Handle(svcFeat, n.serveFeatures)
	}
	links := cfg.Links
	if m != nil {
		m.SetCluster(mgmtCluster{n})
		n.tr.Handle(svcMgmt, n.serveMgmt)
		if links == nil {
			links = m.Links()
		}
	}
	if links != nil {
		links.SetOwns(n.ownsLink)
	}
	n.tr.OnPeerState(func(name string, up bool) {
		if up {
			go n.askFeatures(name)
		}
		qh.PeerState(name, up)
		b.PeerState(name, up)
		b.QuorumPeerState(name, up)
		if links != nil {
			links.Kick() // links move with the nodes that run
		}
	})
	// Serve clients once the group has a leader, so that their first
	// definition changes do not meet an election; without a quorum the
	// node serves anyway after a while (publishing and consuming work).
	for end := time.Now().Add(leaderWait); g.Leader() == "" && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	// The exclusive queues of this node's previous run died with its
	// connections: delete them once a quorum lets us (this run's are
	// kept: broker.RunConnIDBase).
	n.stop = make(chan struct{})
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.dropStaleExclusive()
	}()
	if cfg.ForceNewCluster {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.forceRecords()
		}()
	}
	return n, nil
}

func (n *Node) dropStaleExclusive() {
	n.retry("deleting the exclusive queues of this node's previous run", n.b.DropStaleExclusive)
}

// errNotYet is a retry's "nothing to log, try again later".
var errNotYet = errors.New("not yet")

// retry runs fn until it returns nil or the node closes, waiting from
// 100 ms, doubling up to 5 s, between tries; a failure other than
// errNotYet is logged with what.
func (n *Node) retry(what string, fn func() error) {
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		err := fn()
		if err == nil {
			return
		}
		if !errors.Is(err, errNotYet) {
			n.log.Warn("cluster: "+what+"; will retry", "err", err)
		}
		select {
		case <-n.stop:
			return
		case <-time.After(delay):
		}
	}
}

func (n *Node) group() *meta.Group {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.meta
}

func (n *Node) clusterID() string {
	if g := n.group(); g != nil {
		return g.ClusterID()
	}
	return ""
}

func (n *Node) setPeer(name, addr string) {
	n.mu.Lock()
	old, ok := n.peers[name]
	n.peers[name] = addr
	n.mu.Unlock()
	if !ok || old != addr {
		n.tr.SetPeer(name, addr)
	}
}

// membersChanged brings the transport's peers in line with the metadata
// group's members.
func (n *Node) membersChanged(ms []meta.Member) {
	keep := map[string]bool{}
	for _, m := range ms {
		if m.Name == n.cfg.Node || m.Addr == "" {
			continue
		}
		keep[m.Name] = true
		addr := m.Addr
		if a, ok := n.cfg.Peers[m.Name]; ok {
			// The configured address wins: it is how this node is told
			// to reach that peer (a proxy, a NAT, a test's fault proxy).
			addr = a
		}
		n.setPeer(m.Name, addr)
	}
	n.mu.Lock()
	var gone []string
	for name := range n.peers {
		if !keep[name] {
			if _, static := n.cfg.Peers[name]; static && len(ms) == 0 {
				continue
			}
			gone = append(gone, name)
		}
	}
	for _, name := range gone {
		delete(n.peers, name)
	}
	n.mu.Unlock()
	n.featuresChanged(ms)
	if len(ms) == 0 {
		return
	}
	for _, name := range gone {
		n.inc.forget(name)
		n.tr.RemovePeer(name)
		if n.qh != nil {
			n.qh.PeerState(name, false)
		}
		n.b.PeerState(name, false)
		n.b.QuorumPeerState(name, false)
	}
}

// nodeNames lists the cluster's members, this node included, sorted.
func (n *Node) nodeNames() []string {
	names := []string{n.cfg.Node}
	if g := n.group(); g != nil {
		for _, m := range g.Members() {
			if m.Name != n.cfg.Node {
				names = append(names, m.Name)
			}
		}
	}
	sort.Strings(names)
	return names
}

// Name is the node's name; Addr its inter-node address.
func (n *Node) Name() string { return n.cfg.Node }
func (n *Node) Addr() string { return n.addr }

// Meta is the node's metadata group, for status and tests.
func (n *Node) Meta() *meta.Group { return n.group() }

// Close leaves the cluster's links and stops the node's Raft group. The
// broker and management server stay the caller's to close (after).
func (n *Node) Close() error {
	var err error
	n.once.Do(func() {
		if n.stop != nil {
			close(n.stop)
		}
		if g := n.group(); g != nil {
			err = g.Close()
		}
		if n.qh != nil {
			if e := n.qh.Close(); err == nil {
				err = e
			}
		}
		if e := n.tr.Close(); err == nil {
			err = e
		}
		// No reader hands messages any more: end the workers.
		n.mu.Lock()
		n.closing = true
		for _, w := range n.workers {
			close(w)
		}
		n.workers = map[string]chan []byte{}
		n.mu.Unlock()
		n.wg.Wait()
	})
	return err
}

// stateMachine applies the metadata group's log to the broker.
type stateMachine struct{ b *broker.Broker }

func (s stateMachine) Apply(index uint64, cmd []byte) error { return s.b.ApplyCommand(index, cmd) }
func (s stateMachine) Snapshot() ([]byte, error)            { return s.b.SnapshotDefinitions() }
func (s stateMachine) Restore(index uint64, data []byte) error {
	return s.b.RestoreDefinitions(index, data)
}

// replicator proposes definition changes to the metadata group.
type replicator struct {
	g *meta.Group
	n *Node
}

func (r replicator) Propose(ctx context.Context, cmd []byte) error {
	return quorum(r.g.Propose(ctx, cmd))
}

// peers is the broker's data plane over the transport.
type peers struct{ n *Node }

func (p peers) Call(ctx context.Context, node string, req []byte) ([]byte, error) {
	return p.n.tr.Call(ctx, node, svcData, req)
}
func (p peers) Send(node string, msg []byte) error {
	err := p.n.tr.Send(node, svcData, msg)
	if err != nil && errors.Is(err, transport.ErrQueueFull) {
		return fmt.Errorf("%w: %w", broker.ErrLinkFull, err)
	}
	return err
}
func (p peers) SendWait(ctx context.Context, node string, msg []byte) error {
	return p.n.tr.SendWait(ctx, node, svcData, msg)
}
func (p peers) Up(node string) bool { return p.n.tr.Up(node) }

// dataQueue bounds the data-plane messages from one node waiting for
// the broker; beyond it the link's reader waits (push-back on the peer).
const dataQueue = 4096

// dataMessage hands a data-plane message to the sender's worker, which
// gives them to the broker in order. The broker may block on one (a
// publish into a vhost with a dead-letter backlog waits for it); the
// link's reader must not, since it also carries the Raft messages that
// keep the metadata group alive.
func (n *Node) dataMessage(from string, msg []byte) {
	n.mu.Lock()
	w := n.workers[from]
	if w == nil {
		if n.closing {
			n.mu.Unlock()
			return
		}
		w = make(chan []byte, dataQueue)
		n.workers[from] = w
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			for m := range w {
				n.b.HandlePeerMessage(from, m)
			}
		}()
	}
	n.mu.Unlock()
	w <- msg
}

// mgmtRequest is a management call run on another node.
type mgmtRequest struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	Body   []byte `json:"body,omitempty"`
}

type mgmtResponse struct {
	Status int    `json:"status"`
	Body   []byte `json:"body"`
}

func (n *Node) serveMgmt(from string, req []byte) ([]byte, error) {
	var r mgmtRequest
	if err := json.Unmarshal(req, &r); err != nil {
		return nil, fmt.Errorf("bad management request: %w", err)
	}
	st, body := n.m.ServeLocal(r.Method, r.Path, r.Body)
	return json.Marshal(mgmtResponse{Status: st, Body: body})
}

// Links lists the node's inter-node links.
func (n *Node) Links() []transport.PeerStatus { return n.tr.Peers() }

// AwaitAllApplied waits until every other running member has applied
// the metadata log up to index (broker.ClusterSyncer), asking them all at
// once.
func (r replicator) AwaitAllApplied(ctx context.Context, index uint64) error {
	req := binary.AppendUvarint(nil, index)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for _, m := range r.g.Members() {
		if m.Name == r.n.cfg.Node || !r.n.tr.Up(m.Name) {
			continue
		}
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			if _, err := r.n.tr.Call(ctx, name, svcSync, req); err != nil {
				select {
				case errs <- fmt.Errorf("%s: %w", name, err):
				default:
				}
			}
		}(m.Name)
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// serveSync answers an AwaitApplied: once this node's broker has applied
// the index asked for, or after 5s.
func (n *Node) serveSync(from string, req []byte) ([]byte, error) {
	index, k := binary.Uvarint(req)
	if k <= 0 {
		return nil, errors.New("bad sync request")
	}
	deadline := time.Now().Add(5 * time.Second)
	for n.b.AppliedIndex() < index {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s has applied %d of %d after 5s", n.cfg.Node, n.b.AppliedIndex(), index)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil, nil
}

// mgmtCluster is the management API's view of the cluster.
type mgmtCluster struct{ n *Node }

func (c mgmtCluster) Self() string { return c.n.cfg.Node }

func (c mgmtCluster) Nodes() []mgmt.NodeInfo {
	g := c.n.group()
	if g == nil {
		return []mgmt.NodeInfo{{Name: c.n.cfg.Node, Address: c.n.addr, Running: true}}
	}
	leader := g.Leader()
	up := map[string]bool{}
	for _, p := range c.n.tr.Peers() {
		up[p.Name] = p.Up
	}
	var out []mgmt.NodeInfo
	seen := false
	for _, m := range g.Members() {
		if m.Name == c.n.cfg.Node {
			seen = true
		}
		out = append(out, mgmt.NodeInfo{Name: m.Name, Address: m.Addr, Running: m.Name == c.n.cfg.Node || up[m.Name],
			Leader: m.Name == leader})
	}
	if !seen {
		out = append(out, mgmt.NodeInfo{Name: c.n.cfg.Node, Address: c.n.addr, Running: true, Leader: leader == c.n.cfg.Node})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// QuorumStats are the quorum queues' raft host's counters (mgmt.QuorumStatser).
func (c mgmtCluster) QuorumStats() map[string]any {
	if c.n.qh == nil {
		return nil
	}
	st := c.n.qh.Stats()
	return map[string]any{"groups": st.Groups, "quiesced": st.Quiesced, "fsyncs": st.Syncs, "appends": st.Appends,
		"log_bytes": st.LogBytes, "live_bytes": st.LiveBytes, "segments": st.Segments, "compactions": st.Compactions,
		"proposals": st.Proposals, "snapshots": st.Snapshots, "snapshots_sent": st.SnapsSent,
		"snapshots_installed": st.SnapsIn, "batches_sent": st.Batches, "raft_messages_sent": st.RaftMsgs,
		"proposals_refused_busy": st.Busy}
}

// QuorumHost is the node's raft host of quorum queues (tests, status).
func (n *Node) QuorumHost() *qraft.Host { return n.qh }

func (c mgmtCluster) Status() mgmt.ClusterStatus {
	g := c.n.group()
	if g == nil {
		return mgmt.ClusterStatus{}
	}
	return mgmt.ClusterStatus{ID: g.ClusterID(), Leader: g.Leader()}
}

func (c mgmtCluster) Fetch(ctx context.Context, node, method, path string, body []byte) (int, []byte, error) {
	req, err := json.Marshal(mgmtRequest{Method: method, Path: path, Body: body})
	if err != nil {
		return 0, nil, err
	}
	resp, err := c.n.tr.Call(ctx, node, svcMgmt, req)
	if err != nil {
		return 0, nil, err
	}
	var r mgmtResponse
	if err := json.Unmarshal(resp, &r); err != nil {
		return 0, nil, fmt.Errorf("bad management response from %s: %w", node, err)
	}
	return r.Status, r.Body, nil
}

// HandOverMetaLeadership hands the metadata group's leadership to another
// running member when this node leads it (warren node drain).
func (c mgmtCluster) HandOverMetaLeadership(ctx context.Context) error {
	return c.n.group().TransferLeader(ctx)
}

func (c mgmtCluster) AddMember(ctx context.Context, name, addr string) error {
	return c.n.addMember(ctx, name, addr)
}

func (c mgmtCluster) RemoveMember(ctx context.Context, name string, offline bool) error {
	return c.n.removeMember(ctx, name, offline)
}

// quorum makes a metadata group's no-quorum error one the broker and the
// management API recognise (errors.Is broker.ErrNoQuorum), keeping its
// text (which already says "cluster has no quorum") and its chain
// (meta.ErrOutcomeUnknown).
func quorum(err error) error {
	if err == nil || !errors.Is(err, meta.ErrNoQuorum) || errors.Is(err, broker.ErrNoQuorum) {
		return err
	}
	return noQuorumError{err}
}

type noQuorumError struct{ err error }

func (e noQuorumError) Error() string { return e.err.Error() }
func (e noQuorumError) Unwrap() []error {
	if errors.Is(e.err, meta.ErrOutcomeUnknown) {
		return []error{broker.ErrNoQuorum, broker.ErrOutcomeUnknown, e.err}
	}
	return []error{broker.ErrNoQuorum, e.err}
}

// streamNet is the broker's link for the streams' Raft groups.
type streamNet struct{ n *Node }

func (s streamNet) Send(node string, msg []byte) { _ = s.n.tr.Send(node, svcSRaft, msg) }

func (s streamNet) Endpoint(node string) (string, int, bool) {
	ep := s.n.cfg.StreamEndpoint
	if node != s.n.cfg.Node {
		ep = s.n.peerStreamEndpoint(node)
	}
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return "", 0, false
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p > 65535 {
		return "", 0, false
	}
	return host, p, true
}

// quorumHost adapts the raft host to the broker's QuorumHost.
type quorumHost struct {
	h *qraft.Host
	n *Node
}

func (a quorumHost) StartGroup(id uint64, members []string, sm broker.QuorumSM, join bool) (broker.QuorumGroup, error) {
	g, err := a.h.StartGroup(id, members, quorumSM{sm}, join)
	if err != nil {
		return nil, err
	}
	return quorumGroup{g}, nil
}

func (a quorumHost) StopGroup(id uint64)   { a.h.StopGroup(id) }
func (a quorumHost) DeleteGroup(id uint64) { a.h.DeleteGroup(id) }
func (a quorumHost) Announce(node string, msg []byte) error {
	return a.n.tr.Send(node, svcQQ, msg)
}

// quorumSM adapts a broker quorum queue's state machine to the host's.
type quorumSM struct{ sm broker.QuorumSM }

func (s quorumSM) Apply(ents []qraft.Entry) {
	out := make([]broker.QuorumEntry, len(ents))
	for i, e := range ents {
		out[i] = broker.QuorumEntry{Index: e.Index, Term: e.Term, Data: e.Data}
	}
	s.sm.Apply(out)
}
func (s quorumSM) Snapshot() ([]byte, []uint64)      { return s.sm.Snapshot() }
func (s quorumSM) Restore(index uint64, data []byte) { s.sm.Restore(index, data) }
func (s quorumSM) LeaderChanged(leader string, term uint64, isSelf bool) {
	s.sm.LeaderChanged(leader, term, isSelf)
}

// quorumGroup adapts a host's group to the broker's QuorumGroup.
type quorumGroup struct{ g *qraft.Group }

func (g quorumGroup) Propose(data []byte, done func(uint64, error)) { g.g.Propose(data, done) }
func (g quorumGroup) ReadEntry(index uint64) ([]byte, error)        { return g.g.ReadEntry(index) }
func (g quorumGroup) Leader() (string, uint64)                      { return g.g.Leader() }
func (g quorumGroup) AddMember(ctx context.Context, node string) error {
	return g.g.AddMember(ctx, node)
}
func (g quorumGroup) RemoveMember(ctx context.Context, node string) error {
	return g.g.RemoveMember(ctx, node)
}
func (g quorumGroup) TransferLeader(ctx context.Context, node string) error {
	return g.g.TransferLeader(ctx, node)
}
func (g quorumGroup) Campaign() error { return g.g.Campaign() }
func (g quorumGroup) ReadEntries(indices []uint64, fn func(uint64, []byte) error) error {
	return g.g.ReadEntries(indices, fn)
}
func (g quorumGroup) Status() broker.QuorumStatus {
	st := g.g.Status()
	return broker.QuorumStatus{ID: st.ID, Term: st.Term, Commit: st.Commit, Applied: st.Applied, LastIndex: st.LastIndex,
		Leader: st.Leader, Role: st.Role, Members: st.Members, Online: st.Online, LogBytes: st.LogBytes, LogEntries: st.LogEntries,
		SnapshotIndex: st.SnapshotIndex, Quiesced: st.Quiesced}
}
