package meta

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/internal/raftlog"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"
)

var (
	// ErrNoQuorum is wrapped by every error of a change that could not be
	// committed: no leader, or not committed within Config.ProposeTimeout.
	ErrNoQuorum = errors.New("cluster has no quorum")
	// ErrOutcomeUnknown is wrapped (with ErrNoQuorum) when a change was
	// handed to Raft but not seen applied in time: it may still commit
	// and apply later. Without it, an ErrNoQuorum change was not applied
	// and never will be.
	ErrOutcomeUnknown = errors.New("the change may still be applied later")
	// ErrClosed is returned once the group is closed.
	ErrClosed = errors.New("meta: group closed")
	// ErrRemoved is returned once this node was removed from the group.
	ErrRemoved = errors.New("meta: this node was removed from the cluster")
	// ErrClusterIDMismatch is returned by Open and SetClusterID when the
	// stored cluster id differs from the one given.
	ErrClusterIDMismatch = errors.New("meta: cluster id differs from this node's")
)

// StateMachine is the replicated state (the broker's definitions).
type StateMachine interface {
	// Apply applies one committed command, in log order, on the group's
	// goroutine. The error is the result handed to the proposer when it
	// is this node (the very value, so its type survives); other nodes
	// ignore it, so Apply must be deterministic: an error is an outcome,
	// not a failure of the node. After a crash Apply may be called again
	// for the entries of the last applied batch (the group persists its
	// applied index after each batch): it must ignore an index it already
	// applied, or apply it again to the same effect.
	Apply(index uint64, cmd []byte) error
	// Snapshot returns the whole state as of the last applied index.
	Snapshot() ([]byte, error)
	// Restore replaces the whole state with a snapshot taken at index.
	Restore(index uint64, data []byte) error
}

// Config configures a Group.
type Config struct {
	Self string // this node's name
	Dir  string // directory of meta-raft.db
	// Peers are the initial members (name -> cluster address, Self
	// included) a new cluster bootstraps from; every node must be given
	// the same list. Ignored once the node has state; with Join they only
	// tell names for ids.
	Peers map[string]string
	// Join starts a node with empty storage as a non-member that waits
	// to be added (AddMember on a member) and then receives the state.
	Join bool
	SM   StateMachine
	// Send hands a marshalled raftpb.Message to the transport. It must not
	// block; an error marks the peer unreachable for Raft.
	Send   func(to string, data []byte) error
	Logger *slog.Logger
	// SnapshotEvery is the number of applied entries between snapshots
	// (default 1000); KeepEntries the entries kept in the log behind a
	// snapshot for slow followers (default 100).
	SnapshotEvery, KeepEntries uint64
	// ProposeTimeout bounds Propose, AddMember and RemoveMember
	// (default 5s).
	ProposeTimeout time.Duration
	// Tick is Raft's tick (default 100ms): heartbeats every tick,
	// elections after 10 to 20 ticks.
	Tick time.Duration
	// ClusterID is an id the node already knows (e.g. from an older data
	// directory); Open fails if the stored one differs. The first leader
	// proposes it (or a random one) when the log has none.
	ClusterID string
	// Incarnation identifies this node's data directory. A node that
	// joins (Join, empty storage) replays the cluster's log from its
	// start, where an earlier node of the same name may have been added
	// and removed: only a removal after the addition that names this
	// incarnation (AddMemberInc) removes it. 0: any addition counts.
	Incarnation uint64
	// RestoreOnOpen says the state machine starts empty at each Open (it
	// keeps no state of its own): the group restores it from the stored
	// snapshot and replays the log after it. Without it the state machine
	// is durable and the group replays only the entries after the applied
	// index it persisted.
	RestoreOnOpen bool
}

// Member is one member of the group as this node sees it.
type Member struct {
	Name   string `json:"name"`
	Addr   string `json:"addr"`
	ID     uint64 `json:"id"`
	Self   bool   `json:"self"`
	Leader bool   `json:"leader"`
	Voter  bool   `json:"voter"`
	// Progress says Match, Next and Reachable are known: only the leader
	// tracks its followers (Reachable: heard from within an election
	// timeout).
	Progress  bool   `json:"progress"`
	Match     uint64 `json:"match"`
	Next      uint64 `json:"next"`
	Reachable bool   `json:"reachable"`
}

// Status is this node's view of the group.
type Status struct {
	ID        uint64 `json:"id"`
	Term      uint64 `json:"term"`
	Commit    uint64 `json:"commit"`
	Applied   uint64 `json:"applied"`
	Role      string `json:"role"` // follower, candidate, pre-candidate, leader, removed, closed
	Leader    string `json:"leader"`
	LeaderID  uint64 `json:"leader_id"`
	ClusterID string `json:"cluster_id"`
}

type proposal struct {
	key      proposalKey
	data     []byte         // a normal entry (envelope)
	cc       *pb.ConfChange // or a conf change
	what     string         // for error texts ("" for a command)
	deadline time.Time      // give up (definitely) when no leader took it by then
	notAfter int64          // a command's envelope deadline (unix ms); 0 for a conf change
}

// flight is a command of this node handed to raft and not applied yet:
// re-proposed (the same envelope) when the leader or term differs from
// the one it was last handed under, since a leader that dies or steps
// down loses a forwarded proposal it had not replicated yet.
type flight struct {
	data       []byte
	notAfter   int64
	lead, term uint64 // handed while this leader was known in this term
}

// waiter is a Propose waiting for its entry to apply. handed is set
// (under Group.mu) before the proposal is given to raft and cleared when
// raft dropped it, so a proposer that gives up knows whether its change
// can still be in some log.
type waiter struct {
	ch     chan error
	handed bool
}

// Group is this node's member of the metadata Raft group.
type Group struct {
	cfg  Config
	id   uint64
	inc  uint64
	seq  atomic.Uint64
	log  *slog.Logger
	disk *disk
	mem  *memStorage

	recvc chan *pb.Message
	propc chan proposal
	xferc chan uint64 // TransferLeader: the node to hand the leadership to
	stopc chan struct{}
	donec chan struct{}
	close sync.Once

	mu        sync.Mutex
	waiters   map[proposalKey]*waiter
	members   map[uint64]memberInfo
	names     map[uint64]string // id -> name, from Peers and received messages
	voters    map[uint64]bool
	clusterID string
	status    Status
	progress  map[uint64]tracker.Progress
	onMembers func([]Member)
	endErr    error // why the loop ended (nil while running)

	// Owned by the loop goroutine.
	rn             *raft.RawNode
	confState      *pb.ConfState
	applied        uint64
	snapIndex      uint64
	idProposedTerm uint64
	removed        bool
	selfAdded      bool       // removals of this node apply to it (see Config.Incarnation)
	parked         []proposal // dropped for want of a leader: retried until their deadline
	inflight       map[proposalKey]*flight
	obsLead        uint64 // the leader and term last checked for re-proposals
	obsTerm        uint64
	seen           *seenSet // keys applied recently: duplicates apply as no-ops
	snapNow        bool     // a member was added: the next snapshot must include it
}

// Open opens (or creates) the group's storage in cfg.Dir and starts it.
func Open(cfg Config) (*Group, error) {
	if cfg.Self == "" || cfg.Dir == "" || cfg.SM == nil || cfg.Send == nil {
		return nil, errors.New("meta: Config needs Self, Dir, SM and Send")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SnapshotEvery == 0 {
		cfg.SnapshotEvery = 1000
	}
	if cfg.KeepEntries == 0 {
		cfg.KeepEntries = 100
	}
	if cfg.ProposeTimeout <= 0 {
		cfg.ProposeTimeout = 5 * time.Second
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("meta: %w", err)
	}
	d, l, err := openDisk(cfg.Dir)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Group, error) {
		d.close()
		return nil, err
	}
	if cfg.ClusterID != "" && l.clusterID != "" && cfg.ClusterID != l.clusterID {
		return fail(fmt.Errorf("%w: stored %s, configured %s", ErrClusterIDMismatch, l.clusterID, cfg.ClusterID))
	}
	g := &Group{
		cfg:     cfg,
		id:      NodeID(cfg.Self),
		inc:     randomU64(),
		log:     cfg.Logger.With("component", "meta"),
		disk:    d,
		recvc:   make(chan *pb.Message, 4096),
		propc:   make(chan proposal),
		xferc:   make(chan uint64),
		stopc:   make(chan struct{}),
		donec:   make(chan struct{}),
		waiters: map[proposalKey]*waiter{},
		names:   map[uint64]string{},
		voters:  map[uint64]bool{},
	}
	g.names[g.id] = cfg.Self
	for name := range cfg.Peers {
		g.names[NodeID(name)] = name
	}

	mem := raft.NewMemoryStorage()
	g.mem = &memStorage{MemoryStorage: mem}
	snapIndex := l.snap.GetMetadata().GetIndex()
	if snapIndex > 0 {
		if err := mem.ApplySnapshot(l.snap); err != nil {
			return fail(fmt.Errorf("meta: snapshot: %w", err))
		}
	}
	if err := mem.Append(l.entries); err != nil {
		return fail(fmt.Errorf("meta: entries: %w", err))
	}
	if l.hs != nil {
		mem.SetHardState(l.hs)
	}
	applied, members, clusterID, cs := l.applied, l.members, l.clusterID, l.confState
	if snapIndex > 0 && (applied < snapIndex || cfg.RestoreOnOpen) {
		var sd snapshotData
		if err := json.Unmarshal(l.snap.GetData(), &sd); err != nil {
			return fail(fmt.Errorf("meta: snapshot data: %w", err))
		}
		if err := cfg.SM.Restore(snapIndex, sd.SM); err != nil {
			return fail(fmt.Errorf("meta: restore snapshot at %d: %w", snapIndex, err))
		}
		applied, members, cs = snapIndex, sd.Members, l.snap.GetMetadata().GetConfState()
		if sd.ClusterID != "" {
			clusterID = sd.ClusterID
		}
	} else if cfg.RestoreOnOpen {
		applied, members, cs = 0, map[uint64]memberInfo{}, nil
	}
	if members == nil {
		members = map[uint64]memberInfo{}
	}
	if clusterID == "" && cfg.ClusterID != "" {
		clusterID = cfg.ClusterID
		if err := d.saveClusterID(clusterID); err != nil {
			return fail(fmt.Errorf("meta: %w", err))
		}
	}
	g.mem.cs = cs
	g.applied, g.snapIndex, g.members, g.clusterID = applied, snapIndex, members, clusterID
	if cs != nil {
		g.confState = cs
	} else {
		g.confState = pb.EnsureConfState(l.snap.GetMetadata().GetConfState())
	}
	for id, m := range members {
		g.names[id] = m.Name
	}
	g.setVoters(g.confState)

	// The dedup window as of the applied index: the snapshot's, then the
	// stored entries up to the applied index (a function of the log).
	g.seen = newSeenSet(dedupWindow)
	g.inflight = map[proposalKey]*flight{}
	if snapIndex > 0 {
		var sd snapshotData
		if err := json.Unmarshal(l.snap.GetData(), &sd); err != nil {
			return fail(fmt.Errorf("meta: snapshot data: %w", err))
		}
		if g.seen, err = unmarshalSeenSet(dedupWindow, sd.Seen); err != nil {
			return fail(err)
		}
	}
	for _, e := range l.entries {
		if e.GetIndex() > applied {
			break
		}
		if e.GetIndex() > snapIndex && e.GetType() == pb.EntryNormal && len(e.GetData()) > 0 {
			if env, err := unmarshalEnvelope(e.GetData()); err == nil {
				g.seen.observe(env.key, e.GetIndex())
			}
		}
	}

	rn, err := raft.NewRawNode(&raft.Config{
		ID:              g.id,
		ElectionTick:    10,
		HeartbeatTick:   1,
		Storage:         g.mem,
		Applied:         applied,
		MaxSizePerMsg:   1 << 20,
		MaxInflightMsgs: 256,
		// A leader without a quorum does not grow its log without end
		// (issue 22): a proposal beyond is dropped, parked and retried
		// until its deadline (handleProposal).
		MaxUncommittedEntriesSize: 64 << 20,
		CheckQuorum:               true,
		PreVote:                   true,
		StepDownOnRemoval:         true,
		Logger:                    raftlog.Logger{L: g.log},
	})
	if err != nil {
		return fail(fmt.Errorf("meta: %w", err))
	}
	g.rn = rn
	fresh := l.hs == nil && len(l.entries) == 0 && snapIndex == 0
	g.selfAdded = !fresh || !cfg.Join
	if fresh && !cfg.Join {
		if _, ok := cfg.Peers[cfg.Self]; !ok {
			return fail(fmt.Errorf("meta: cannot bootstrap: Peers must include this node (%s), or set Join", cfg.Self))
		}
		names := make([]string, 0, len(cfg.Peers))
		for name := range cfg.Peers {
			names = append(names, name)
		}
		sort.Strings(names)
		peers := make([]raft.Peer, len(names))
		for i, name := range names {
			peers[i] = raft.Peer{ID: NodeID(name), Context: memberInfo{Name: name, Addr: cfg.Peers[name]}.context()}
		}
		if err := rn.Bootstrap(peers); err != nil {
			return fail(fmt.Errorf("meta: bootstrap: %w", err))
		}
	}
	g.updateStatus()
	go g.run()
	return g, nil
}

func randomU64() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:])
}

func newClusterID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Step hands the group a message another node sent (the transport's
// handler for the meta service). It never blocks: when the group is
// overloaded or closed the message is dropped (Raft retransmits).
func (g *Group) Step(from string, data []byte) {
	m := &pb.Message{}
	if err := proto.Unmarshal(data, m); err != nil {
		g.log.Warn("meta: dropping malformed message", "from", from, "err", err)
		return
	}
	if m.GetFrom() != NodeID(from) || m.GetTo() != g.id {
		g.log.Warn("meta: dropping message with wrong ids", "from", from, "msg_from", m.GetFrom(), "msg_to", m.GetTo())
		return
	}
	g.mu.Lock()
	if _, ok := g.names[m.GetFrom()]; !ok {
		g.names[m.GetFrom()] = from
	}
	g.mu.Unlock()
	select {
	case g.recvc <- m:
	case <-g.donec:
	default:
	}
}

func (g *Group) nextKey() proposalKey {
	return proposalKey{Node: g.id, Inc: g.inc, Seq: g.seq.Add(1)}
}

// Propose replicates cmd and returns once it is committed and applied on
// this node, with the error the local StateMachine.Apply returned (the
// same value). It fails with an error wrapping ErrNoQuorum when there is
// no leader (then the change was not applied and never will be) or when
// the change is not applied within ProposeTimeout (then the error also
// wraps ErrOutcomeUnknown: the change may still commit later). Once ctx
// is done it returns ctx's error, also wrapping ErrOutcomeUnknown if the
// change was already handed to Raft.
func (g *Group) Propose(ctx context.Context, cmd []byte) error {
	key := g.nextKey()
	env := envelope{kind: kindCommand, key: key, notAfter: time.Now().Add(g.cfg.ProposeTimeout).UnixMilli(), payload: cmd}
	return g.propose(ctx, proposal{key: key, data: env.marshal(), notAfter: env.notAfter})
}

// AddMember adds (or updates the address of) a member; the new node must
// have been opened with Join (or be restarting with its storage). It
// returns once the change is applied on this node; errors as Propose.
func (g *Group) AddMember(ctx context.Context, name, addr string) error {
	return g.addMember(ctx, name, addr, 0)
}

func (g *Group) addMember(ctx context.Context, name, addr string, inc uint64) error {
	id := NodeID(name)
	typ := pb.ConfChangeAddNode
	g.mu.Lock()
	cur, ok := g.members[id]
	voter := g.voters[id]
	g.mu.Unlock()
	if ok && voter {
		if cur.Addr == addr {
			return nil
		}
		typ = pb.ConfChangeUpdateNode
	}
	key := g.nextKey()
	cc := &pb.ConfChange{Type: typ.Enum(), NodeId: new(id), Context: memberInfo{Name: name, Addr: addr, Key: &key, Inc: inc}.context()}
	return g.propose(ctx, proposal{key: key, cc: cc, what: "adding " + name})
}

// AddMemberInc is AddMember for a node whose incarnation is known: the
// node recognises its own addition by it (Config.Incarnation).
func (g *Group) AddMemberInc(ctx context.Context, name, addr string, inc uint64) error {
	return g.addMember(ctx, name, addr, inc)
}

// RemoveMember removes a member; the removed node stops its group.
func (g *Group) RemoveMember(ctx context.Context, name string) error {
	id := NodeID(name)
	g.mu.Lock()
	voter := g.voters[id]
	g.mu.Unlock()
	if !voter {
		return fmt.Errorf("meta: %s is not a member", name)
	}
	key := g.nextKey()
	cc := &pb.ConfChange{Type: pb.ConfChangeRemoveNode.Enum(), NodeId: new(id), Context: memberInfo{Name: name, Key: &key}.context()}
	return g.propose(ctx, proposal{key: key, cc: cc, what: "removing " + name})
}

func (g *Group) noQuorum(what string, unknown bool) error {
	reason := fmt.Sprintf("no leader within %s", g.cfg.ProposeTimeout)
	if unknown {
		reason = fmt.Sprintf("timed out after %s (the change may still be applied)", g.cfg.ProposeTimeout)
	}
	if what != "" {
		reason = what + " not applied: " + reason
	}
	return &noQuorumError{text: ErrNoQuorum.Error() + ": " + reason, unknown: unknown}
}

// noQuorumError is Propose's failure: errors.Is matches ErrNoQuorum, and
// ErrOutcomeUnknown when the change may still apply. Its text is
// "cluster has no quorum: no leader within 5s" or "cluster has no
// quorum: timed out after 5s (the change may still be applied)".
type noQuorumError struct {
	text    string
	unknown bool
}

func (e *noQuorumError) Error() string { return e.text }

func (e *noQuorumError) Is(target error) bool {
	return target == ErrNoQuorum || (e.unknown && target == ErrOutcomeUnknown)
}

func (g *Group) propose(ctx context.Context, p proposal) error {
	w := &waiter{ch: make(chan error, 1)}
	g.mu.Lock()
	if g.endErr != nil {
		err := g.endErr
		g.mu.Unlock()
		return err
	}
	g.waiters[p.key] = w
	g.mu.Unlock()
	p.deadline = time.Now().Add(g.cfg.ProposeTimeout)
	timer := time.NewTimer(g.cfg.ProposeTimeout)
	defer timer.Stop()
	select {
	case g.propc <- p:
	case <-ctx.Done():
		g.dropWaiter(p.key)
		return ctx.Err()
	case <-timer.C:
		g.dropWaiter(p.key)
		return g.noQuorum(p.what, false)
	case <-g.donec:
		g.dropWaiter(p.key)
		return g.ended()
	}
	// giveUp answers for a change not seen applied: definitely failed if
	// raft never held it, else an unknown outcome.
	giveUp := func(definite, unknown error) error {
		handed := g.dropWaiter(p.key)
		select {
		case r := <-w.ch: // raced with the apply (or the loop's answer)
			return r
		default:
		}
		if !handed && definite != nil {
			return definite
		}
		return unknown
	}
	select {
	case err := <-w.ch:
		return err
	case <-timer.C:
		return giveUp(g.noQuorum(p.what, false), g.noQuorum(p.what, true))
	case <-ctx.Done():
		return giveUp(ctx.Err(), fmt.Errorf("%w (%w)", ctx.Err(), ErrOutcomeUnknown))
	case <-g.donec:
		return giveUp(nil, fmt.Errorf("%w (%w)", g.ended(), ErrOutcomeUnknown))
	}
}

// dropWaiter forgets a waiter and tells whether raft may hold its change.
func (g *Group) dropWaiter(k proposalKey) (handed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if w := g.waiters[k]; w != nil {
		delete(g.waiters, k)
		return w.handed
	}
	return true // already answered or swept at close: be conservative
}

func (g *Group) deliver(k *proposalKey, err error) {
	if k == nil || k.Node != g.id || k.Inc != g.inc {
		return
	}
	g.mu.Lock()
	w := g.waiters[*k]
	delete(g.waiters, *k)
	g.mu.Unlock()
	if w != nil {
		w.ch <- err
	}
}

func (g *Group) ended() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.endErr != nil {
		return g.endErr
	}
	return ErrClosed
}

// ClusterID returns the cluster's id, "" until this node knows it.
func (g *Group) ClusterID() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.clusterID
}

// SetClusterID records an id learned from a peer (the transport's
// handshake) while this node has none; it fails if a different id is
// known.
func (g *Group) SetClusterID(id string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.clusterID == id {
		return nil
	}
	if g.clusterID != "" {
		return fmt.Errorf("%w: ours %s, offered %s", ErrClusterIDMismatch, g.clusterID, id)
	}
	if err := g.disk.saveClusterID(id); err != nil {
		return err
	}
	g.clusterID = id
	return nil
}

// TransferLeader hands this node's leadership of the group to another
// running member (a node being drained or stopped: definition changes
// then wait for no election) and waits until another node leads, or ctx
// ends. It does nothing when this node does not lead.
func (g *Group) TransferLeader(ctx context.Context) error {
	// A target: the running member furthest along. Right after an
	// election, or on a loaded machine, the leader may not have heard
	// from its followers within the last election timeout (RecentActive):
	// it looks again until ctx ends.
	var to uint64
	for {
		g.mu.Lock()
		lead := g.status.LeaderID
		for id := range g.voters {
			if id == g.id || !g.voters[id] {
				continue
			}
			if pr, ok := g.progress[id]; ok && pr.RecentActive && (to == 0 || pr.Match > g.progress[to].Match) {
				to = id
			}
		}
		g.mu.Unlock()
		if lead != g.id {
			return nil
		}
		if to != 0 {
			break
		}
		select {
		case <-ctx.Done():
			return errors.New("meta: no other member is running")
		case <-g.donec:
			return g.ended()
		case <-time.After(50 * time.Millisecond):
		}
	}
	select {
	case g.xferc <- to:
	case <-ctx.Done():
		return ctx.Err()
	case <-g.donec:
		return g.ended()
	}
	for {
		if l := g.Status().LeaderID; l != 0 && l != g.id {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-g.donec:
			return g.ended()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Leader returns the leader's name, "" when none is known.
func (g *Group) Leader() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.status.Leader
}

// Status returns this node's view of the group.
func (g *Group) Status() Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.status
	s.ClusterID = g.clusterID
	return s
}

// Members returns the members, sorted by name.
func (g *Group) Members() []Member {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.membersLocked()
}

func (g *Group) membersLocked() []Member {
	out := make([]Member, 0, len(g.members))
	for id, m := range g.members {
		mb := Member{Name: m.Name, Addr: m.Addr, ID: id, Self: id == g.id, Leader: id == g.status.LeaderID, Voter: g.voters[id]}
		if pr, ok := g.progress[id]; ok {
			mb.Progress, mb.Match, mb.Next = true, pr.Match, pr.Next
			mb.Reachable = pr.RecentActive || id == g.id
		}
		out = append(out, mb)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// OnMembers registers fn, called with the members whenever they change
// (and once now). It runs on the group's goroutine: it must not block
// and must not call Propose, AddMember or RemoveMember.
func (g *Group) OnMembers(fn func([]Member)) {
	g.mu.Lock()
	g.onMembers = fn
	ms := g.membersLocked()
	g.mu.Unlock()
	if fn != nil {
		fn(ms)
	}
}

// Close stops the group and closes its storage. Waiting proposals fail.
func (g *Group) Close() error {
	var err error
	g.close.Do(func() {
		close(g.stopc)
		<-g.donec
		err = g.disk.close()
	})
	return err
}

// Done is closed when the group stopped (closed, removed or failed).
func (g *Group) Done() <-chan struct{} { return g.donec }

// ---- the loop ----

func (g *Group) run() {
	ticker := time.NewTicker(g.cfg.Tick)
	defer ticker.Stop()
	endErr := ErrClosed
	defer func() {
		g.mu.Lock()
		g.endErr = endErr
		g.status.Role = "closed"
		if endErr == ErrRemoved {
			g.status.Role = "removed"
		}
		waiters := g.waiters
		g.waiters = map[proposalKey]*waiter{}
		g.mu.Unlock()
		for _, w := range waiters {
			if w.handed {
				w.ch <- fmt.Errorf("%w (%w)", endErr, ErrOutcomeUnknown)
			} else {
				w.ch <- endErr
			}
		}
		close(g.donec)
	}()
	for {
		select {
		case <-g.stopc:
			return
		case <-ticker.C:
			g.rn.Tick()
			g.updateStatus()
			g.sweepInflight()
		case m := <-g.recvc:
			g.step(m)
		case p := <-g.propc:
			g.handleProposal(p)
		case to := <-g.xferc:
			if g.rn.BasicStatus().RaftState == raft.StateLeader {
				g.rn.TransferLeader(to)
			}
		}
		g.drain()
		g.retryParked()
		g.maybeProposeClusterID()
		for {
			g.reproposeOnLeaderChange()
			if !g.rn.HasReady() {
				break
			}
			if err := g.handleReady(); err != nil {
				endErr = err
				if err != ErrRemoved {
					g.log.Error("meta: group stopped", "err", err)
				}
				return
			}
		}
	}
}

// drain takes what else is already waiting (bounded), so that a burst of
// proposals or messages becomes one Ready: one fsync.
func (g *Group) drain() {
	for i := 0; i < 256; i++ {
		select {
		case m := <-g.recvc:
			g.step(m)
		case p := <-g.propc:
			g.handleProposal(p)
		default:
			return
		}
	}
}

func (g *Group) step(m *pb.Message) {
	if m.GetType() == pb.MsgProp {
		// A leader refuses forwarded proposals whose proposer has already
		// given up (it answered ErrNoQuorum): they were late in transit.
		now := time.Now().UnixMilli()
		kept := m.Entries[:0:0]
		for _, e := range m.GetEntries() {
			if e.GetType() == pb.EntryNormal {
				if env, err := unmarshalEnvelope(e.GetData()); err == nil && env.notAfter < now {
					continue
				}
			}
			kept = append(kept, e)
		}
		if len(kept) == 0 {
			return
		}
		m.Entries = kept
	}
	if err := g.rn.Step(m); err != nil && err != raft.ErrProposalDropped {
		g.log.Debug("meta: step", "err", err)
	}
}

// handleProposal gives a proposal to raft. Raft drops it when this node
// knows no leader (an election is under way, or this node is cut off):
// such a proposal is in no log, so it is parked and retried until a
// leader takes it or its deadline passes (then it definitely failed).
func (g *Group) handleProposal(p proposal) {
	if !g.tryPropose(p) {
		g.parked = append(g.parked, p)
	}
}

// tryPropose reports whether p is settled (given to raft, answered, or
// abandoned by its proposer).
func (g *Group) tryPropose(p proposal) bool {
	g.mu.Lock()
	w := g.waiters[p.key]
	if w == nil {
		g.mu.Unlock()
		return true // the proposer gave up
	}
	if p.notAfter != 0 && time.Now().UnixMilli() > p.notAfter {
		// Past its envelope deadline: no leader may append it any more
		// (the same rule as for forwarded proposals, see step), so it is
		// in no log.
		g.mu.Unlock()
		k := p.key
		g.deliver(&k, g.noQuorum(p.what, false))
		return true
	}
	w.handed = true
	g.mu.Unlock()
	var err error
	if p.cc != nil {
		err = g.rn.ProposeConfChange(p.cc)
	} else {
		st := g.rn.BasicStatus()
		err = g.rn.Propose(p.data)
		if err == nil && p.notAfter != 0 {
			g.inflight[p.key] = &flight{data: p.data, notAfter: p.notAfter, lead: st.Lead, term: st.GetTerm()}
		}
	}
	if err == nil {
		return true
	}
	g.mu.Lock()
	w.handed = false
	g.mu.Unlock()
	if !time.Now().Before(p.deadline) || !errors.Is(err, raft.ErrProposalDropped) {
		k := p.key
		g.deliver(&k, g.noQuorum(p.what, false))
		return true
	}
	return false
}

func (g *Group) retryParked() {
	if len(g.parked) == 0 {
		return
	}
	now := time.Now()
	lead := g.rn.BasicStatus().Lead != raft.None
	kept := g.parked[:0]
	for _, p := range g.parked {
		switch {
		case !now.Before(p.deadline):
			k := p.key
			g.deliver(&k, g.noQuorum(p.what, false))
		case lead:
			if !g.tryPropose(p) {
				kept = append(kept, p)
			}
		default:
			kept = append(kept, p)
		}
	}
	clear(g.parked[len(kept):])
	g.parked = kept
}

// reproposeOnLeaderChange hands raft again, once a leader is known, every
// command of this node not applied yet that was last handed under another
// leader or term: a follower's proposal forwarded to a leader that died or
// was cut off before appending or replicating it is lost, as is one a
// leader appended to its own log only and then lost leadership. The copy
// carries the same envelope (key and notAfter); when the original also
// commits, the apply drops the later one everywhere (seenSet). It stops at
// the envelope's deadline (the proposer answered by then), as the leader's
// filter of forwarded proposals does, which bounds how late a duplicate
// can reach a log (see the package doc).
func (g *Group) reproposeOnLeaderChange() {
	if len(g.inflight) == 0 {
		return
	}
	st := g.rn.BasicStatus()
	if st.Lead == raft.None || (st.Lead == g.obsLead && st.GetTerm() == g.obsTerm) {
		return
	}
	g.obsLead, g.obsTerm = st.Lead, st.GetTerm()
	now := time.Now().UnixMilli()
	for k, f := range g.inflight {
		if f.lead == st.Lead && f.term == st.GetTerm() {
			continue
		}
		if now > f.notAfter || !g.waiting(k) {
			delete(g.inflight, k)
			continue
		}
		if err := g.rn.Propose(f.data); err == nil {
			f.lead, f.term = st.Lead, st.GetTerm()
			g.log.Debug("meta: re-proposed after a leader change", "seq", k.Seq, "leader", g.nameOf(st.Lead), "term", st.GetTerm())
		}
	}
}

// sweepInflight forgets commands whose proposer gave up or whose deadline
// passed (without a leader change they would stay).
func (g *Group) sweepInflight() {
	if len(g.inflight) == 0 {
		return
	}
	now := time.Now().UnixMilli()
	for k, f := range g.inflight {
		if now > f.notAfter || !g.waiting(k) {
			delete(g.inflight, k)
		}
	}
}

func (g *Group) waiting(k proposalKey) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiters[k] != nil
}

func (g *Group) nameOf(id uint64) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.names[id]
}

func (g *Group) maybeProposeClusterID() {
	st := g.rn.BasicStatus()
	if st.RaftState != raft.StateLeader || g.idProposedTerm == st.GetTerm() || g.ClusterID() != "" {
		return
	}
	g.idProposedTerm = st.GetTerm()
	id := g.cfg.ClusterID
	if id == "" {
		id = newClusterID()
	}
	env := envelope{kind: kindCluster, key: g.nextKey(), notAfter: 1<<62 - 1, payload: []byte(id)}
	_ = g.rn.Propose(env.marshal())
}

func (g *Group) handleReady() error {
	rd := g.rn.Ready()
	if err := g.disk.saveReady(rd.HardState, rd.Entries, rd.Snapshot); err != nil {
		return fmt.Errorf("meta: persist: %w", err)
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := g.mem.ApplySnapshot(rd.Snapshot); err != nil && err != raft.ErrSnapOutOfDate {
			return fmt.Errorf("meta: snapshot: %w", err)
		}
	}
	if err := g.mem.Append(rd.Entries); err != nil {
		return fmt.Errorf("meta: append: %w", err)
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		g.mem.SetHardState(rd.HardState)
	}
	g.send(rd.Messages)
	membersChanged := false
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := g.restoreSnapshot(rd.Snapshot); err != nil {
			return err
		}
		membersChanged = true
	}
	changed, err := g.apply(rd.CommittedEntries)
	if err != nil {
		return err
	}
	membersChanged = membersChanged || changed
	g.rn.Advance(rd)
	if rd.SoftState != nil || membersChanged {
		g.updateStatus()
	}
	if membersChanged {
		g.mu.Lock()
		fn := g.onMembers
		ms := g.membersLocked()
		g.mu.Unlock()
		if fn != nil {
			fn(ms)
		}
	}
	if g.removed {
		return ErrRemoved
	}
	return g.maybeSnapshot()
}

func (g *Group) send(msgs []*pb.Message) {
	for _, m := range msgs {
		to := m.GetTo()
		g.mu.Lock()
		name := g.names[to]
		g.mu.Unlock()
		err := errors.New("unknown node id")
		var data []byte
		if name != "" {
			data, err = proto.Marshal(m)
			if err == nil {
				err = g.cfg.Send(name, data)
			}
		}
		if err != nil {
			g.log.Debug("meta: send failed", "to", name, "id", to, "type", m.GetType().String(), "err", err)
			g.rn.ReportUnreachable(to)
		}
		if m.GetType() == pb.MsgSnap {
			st := raft.SnapshotFinish
			if err != nil {
				st = raft.SnapshotFailure
			}
			g.rn.ReportSnapshot(to, st)
		}
	}
}

func (g *Group) restoreSnapshot(snap *pb.Snapshot) error {
	var sd snapshotData
	if err := json.Unmarshal(snap.GetData(), &sd); err != nil {
		return fmt.Errorf("meta: snapshot data: %w", err)
	}
	idx := snap.GetMetadata().GetIndex()
	if err := g.cfg.SM.Restore(idx, sd.SM); err != nil {
		return fmt.Errorf("meta: restore snapshot at %d: %w", idx, err)
	}
	if sd.Members == nil {
		sd.Members = map[uint64]memberInfo{}
	}
	seen, err := unmarshalSeenSet(dedupWindow, sd.Seen)
	if err != nil {
		return err
	}
	g.seen = seen
	g.confState = snap.GetMetadata().GetConfState()
	g.applied, g.snapIndex = idx, idx
	// A snapshot sent to this node names it (etcd raft refuses one that
	// does not): it was taken after this node's addition.
	if slices.Contains(g.confState.GetVoters(), g.id) || slices.Contains(g.confState.GetLearners(), g.id) {
		g.selfAdded = true
	}
	g.mu.Lock()
	g.members = sd.Members
	for id, m := range sd.Members {
		g.names[id] = m.Name
	}
	if g.clusterID == "" && sd.ClusterID != "" {
		g.clusterID = sd.ClusterID
	}
	g.setVoters(g.confState)
	members, cid := g.copyMembersLocked(), g.clusterID
	g.mu.Unlock()
	if err := g.disk.saveApplied(idx, g.confState, members, cid); err != nil {
		return fmt.Errorf("meta: persist applied: %w", err)
	}
	return nil
}

func (g *Group) setVoters(cs *pb.ConfState) {
	g.voters = map[uint64]bool{}
	for _, id := range cs.GetVoters() {
		g.voters[id] = true
	}
	for _, id := range cs.GetVotersOutgoing() {
		g.voters[id] = true
	}
}

func (g *Group) copyMembersLocked() map[uint64]memberInfo {
	out := make(map[uint64]memberInfo, len(g.members))
	for k, v := range g.members {
		out[k] = v
	}
	return out
}

// apply applies committed entries in order and persists the applied
// index once the batch is done.
func (g *Group) apply(ents []*pb.Entry) (membersChanged bool, err error) {
	if len(ents) == 0 {
		return false, nil
	}
	for _, e := range ents {
		if e.GetIndex() <= g.applied {
			continue
		}
		switch e.GetType() {
		case pb.EntryNormal:
			if len(e.GetData()) == 0 {
				break // a new leader's empty entry
			}
			env, err := unmarshalEnvelope(e.GetData())
			if err != nil {
				g.log.Error("meta: skipping malformed entry", "index", e.GetIndex(), "err", err)
				break
			}
			if env.key.Node == g.id && env.key.Inc == g.inc {
				delete(g.inflight, env.key)
			}
			if g.seen.observe(env.key, e.GetIndex()) {
				// A re-proposal whose original also committed (or the
				// other way round): the first one applied is the change,
				// and its result was the proposer's answer.
				g.log.Debug("meta: dropping a duplicate entry", "index", e.GetIndex(), "seq", env.key.Seq)
				break
			}
			switch env.kind {
			case kindCommand:
				res := g.cfg.SM.Apply(e.GetIndex(), env.payload)
				g.deliver(&env.key, res)
			case kindCluster:
				id := string(env.payload)
				g.mu.Lock()
				cur := g.clusterID
				if cur == "" {
					g.clusterID = id
				}
				g.mu.Unlock()
				if cur != "" && cur != id {
					g.log.Warn("meta: ignoring a later cluster id entry", "index", e.GetIndex(), "id", id, "kept", cur)
				}
				g.deliver(&env.key, nil)
			}
		case pb.EntryConfChange:
			cc := &pb.ConfChange{}
			if err := proto.Unmarshal(e.GetData(), cc); err != nil {
				return membersChanged, fmt.Errorf("meta: conf change at %d: %w", e.GetIndex(), err)
			}
			g.applyConfChange(cc)
			membersChanged = true
		case pb.EntryConfChangeV2:
			cc := &pb.ConfChangeV2{}
			if err := proto.Unmarshal(e.GetData(), cc); err != nil {
				return membersChanged, fmt.Errorf("meta: conf change at %d: %w", e.GetIndex(), err)
			}
			g.confState = g.rn.ApplyConfChange(cc)
			g.mu.Lock()
			g.setVoters(g.confState)
			g.mu.Unlock()
			membersChanged = true
		}
		g.applied = e.GetIndex()
	}
	g.mu.Lock()
	members, cid := g.copyMembersLocked(), g.clusterID
	g.mu.Unlock()
	if err := g.disk.saveApplied(g.applied, g.confState, members, cid); err != nil {
		return membersChanged, fmt.Errorf("meta: persist applied: %w", err)
	}
	return membersChanged, nil
}

func (g *Group) applyConfChange(cc *pb.ConfChange) {
	var info memberInfo
	if len(cc.GetContext()) > 0 {
		if err := json.Unmarshal(cc.GetContext(), &info); err != nil {
			g.log.Warn("meta: conf change with malformed context", "err", err)
		}
	}
	g.confState = g.rn.ApplyConfChange(cc)
	id := cc.GetNodeId()
	g.mu.Lock()
	switch cc.GetType() {
	case pb.ConfChangeAddNode, pb.ConfChangeAddLearnerNode, pb.ConfChangeUpdateNode:
		if id != 0 && info.Name != "" {
			g.members[id] = memberInfo{Name: info.Name, Addr: info.Addr}
			g.names[id] = info.Name
		}
		// etcd raft refuses a snapshot whose ConfState lacks the node
		// restoring it: a new member that needs a snapshot must get one
		// taken after its addition.
		g.snapNow = cc.GetType() != pb.ConfChangeUpdateNode
		if id == g.id && cc.GetType() != pb.ConfChangeUpdateNode && (g.cfg.Incarnation == 0 || info.Inc == g.cfg.Incarnation) {
			g.selfAdded = true
		}
	case pb.ConfChangeRemoveNode:
		delete(g.members, id)
		if id == g.id && g.selfAdded {
			g.removed = true
		} else if id == g.id {
			g.log.Info("meta: replaying the removal of an earlier node of this name", "index", g.applied)
		}
	}
	g.setVoters(g.confState)
	g.mu.Unlock()
	g.deliver(info.Key, nil)
}

func (g *Group) maybeSnapshot() error {
	if g.applied < g.snapIndex+g.cfg.SnapshotEvery && !(g.snapNow && g.applied > g.snapIndex) {
		return nil
	}
	g.snapNow = false
	smData, err := g.cfg.SM.Snapshot()
	if err != nil {
		g.log.Error("meta: state machine snapshot failed", "err", err)
		return nil // retried after the next batch
	}
	g.mu.Lock()
	g.seen.prune(g.applied)
	sd := snapshotData{ClusterID: g.clusterID, Members: g.copyMembersLocked(), SM: smData, Seen: g.seen.marshal()}
	g.mu.Unlock()
	data, err := json.Marshal(sd)
	if err != nil {
		return fmt.Errorf("meta: snapshot: %w", err)
	}
	snap, err := g.mem.CreateSnapshot(g.applied, g.confState, data)
	if err != nil {
		if err == raft.ErrSnapOutOfDate {
			return nil
		}
		return fmt.Errorf("meta: snapshot: %w", err)
	}
	var compactTo uint64
	if g.applied > g.cfg.KeepEntries {
		compactTo = g.applied - g.cfg.KeepEntries
	}
	if err := g.disk.saveSnapshot(snap, compactTo); err != nil {
		return fmt.Errorf("meta: persist snapshot: %w", err)
	}
	if first, _ := g.mem.FirstIndex(); compactTo >= first {
		if err := g.mem.Compact(compactTo); err != nil && err != raft.ErrCompacted {
			return fmt.Errorf("meta: compact: %w", err)
		}
	}
	g.snapIndex = g.applied
	return nil
}

func (g *Group) updateStatus() {
	st := g.rn.Status()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.status = Status{
		ID:       g.id,
		Term:     st.GetTerm(),
		Commit:   st.GetCommit(),
		Applied:  st.Applied,
		Role:     roleName(st.RaftState),
		LeaderID: st.Lead,
		Leader:   g.names[st.Lead],
	}
	if st.RaftState == raft.StateLeader {
		g.progress = st.Progress
	} else {
		g.progress = nil
	}
}

func roleName(s raft.StateType) string {
	switch s {
	case raft.StateLeader:
		return "leader"
	case raft.StateCandidate:
		return "candidate"
	case raft.StatePreCandidate:
		return "pre-candidate"
	default:
		return "follower"
	}
}
