// Package streamraft replicates a stream (issue 25): one etcd Raft group
// per stream, whose log is the stream's own log on disk (a streamlog Raft
// log), so the stream's data is written once, in its segments.
//
// The leader packs what its publishers send into a chunk and proposes it;
// raft ships the entry to the members, each appends it to its segments
// (the chunk's id is the log's next offset and its epoch the entry's
// term, so every replica holds the same bytes) and syncs before it
// answers; once a majority has it, the entry is committed, every member
// makes it visible to its readers (CommitTo), and the leader confirms.
// A confirmed message is on the disks of a majority of the members.
//
// The retention is the compaction: a member deletes its oldest segments
// when they are committed. A member that lags behind what the leader
// kept gets a snapshot: the leader's first kept offset and the tracking
// snapshot that opens its first segment (streamlog.Log.Lead); it starts
// its log again there (Reset) and raft sends the entries after it.
//
// The consensus is etcd's raft; this package only drives a RawNode: one
// goroutine per stream handles its Ready (persist, send, apply) in raft's
// order. Messages travel through Config.Send (the cluster's transport)
// and arrive through Step.
package streamraft

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/warrenmq/warren/internal/raftlog"
	"github.com/warrenmq/warren/internal/raftpeer"
	"github.com/warrenmq/warren/store"
	"github.com/warrenmq/warren/streamlog"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// NodeID is the raft id of a node name (raftpeer.NodeID, as cluster/meta
// and qraft make them).
func NodeID(name string) uint64 { return raftpeer.NodeID(name) }

var (
	// ErrNotLeader: a proposal on a member that does not lead.
	ErrNotLeader = errors.New("streamraft: not the leader")
	// ErrDropped: the leadership changed before the proposal was seen
	// committed (it may still be: the caller resends, deduplicating).
	ErrDropped = errors.New("streamraft: proposal dropped")
	// ErrStopped: the node stopped.
	ErrStopped = errors.New("streamraft: stopped")
	// ErrBusy: the leader holds too much that is not committed.
	ErrBusy = errors.New("streamraft: too much uncommitted")
)

// Config configures a stream's member.
type Config struct {
	Self string
	// Members are the group's first members (a new group); Join starts
	// an empty member that waits for the leader (a replica added later).
	Members []string
	Join    bool
	// Log is the stream's log, opened with Options.Raft.
	Log *streamlog.Log
	// FS and Dir hold the member's raft state file (hard state,
	// configuration, the members' names).
	FS  store.FS
	Dir string
	// Send sends a raft message to a member; it must not block.
	Send func(to string, msg []byte)
	// OnLeader reports the leader ("" none known) and term; isSelf once
	// this member leads and every entry before its term is committed.
	OnLeader func(leader string, term uint64, isSelf bool)
	// OnCommit reports that entries up to index are committed and
	// visible to readers.
	OnCommit func(index uint64)
	Log2     *slog.Logger
	// Tick is raft's tick (100 ms when 0, as the quorum queues'); a
	// leader heartbeats every tick, an election takes 10 to 20.
	Tick time.Duration
	// QuiesceTicks is how many ticks a leader's group stays idle before
	// it quiesces (quiesce.go): 10 when 0, never when negative.
	QuiesceTicks int
	// Online reports whether the link to a member's node is up (nil:
	// every one is); PeerState reports its changes.
	Online func(node string) bool
	// Group is the stream's group id, the same on every member: it
	// spreads the campaigns after a leader's node went down.
	Group uint64
}

type inMsg struct {
	from string
	m    *pb.Message
}

type flight struct {
	raw   []byte
	cc    *pb.ConfChange
	done  func(err error)
	index uint64
	term  uint64
}

// Node is this node's member of a stream's raft group.
type Node struct {
	cfg  Config
	log  *streamlog.Log
	self uint64
	lg   *slog.Logger

	mu      sync.Mutex
	props   []*flight
	ops     []func()
	peerEv  []peerEvent
	inbox   []inMsg
	wake    chan struct{}
	stopped bool
	status  Status

	// loop only
	rn       *raft.RawNode
	st       state
	inflight map[uint64]*flight
	fresh    []*flight // proposed this pass, not yet given an index
	lead     uint64
	term     uint64
	ready    bool // OnLeader(self, term, true) was said for term
	// membersDirty: the configuration changed (Status's members)
	membersDirty bool
	// quiesced: the group is idle and this member does not tick
	// (quiesce.go); idleTicks and idleCommit are the leader's count.
	quiesced   bool
	idleTicks  int
	idleCommit uint64
	stopc      chan struct{}
	donec      chan struct{}
}

// Status is a member's view of its group.
type Status struct {
	Role                    string
	Term, Commit, LastIndex uint64
	FirstIndex              uint64
	Leader                  string
	Members                 []string
	// Quiesced: the group is idle and this member does not tick.
	Quiesced bool
}

// Start starts the member.
func Start(cfg Config) (*Node, error) {
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.QuiesceTicks == 0 {
		cfg.QuiesceTicks = 10
	}
	lg := cfg.Log2
	if lg == nil {
		lg = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	n := &Node{cfg: cfg, log: cfg.Log, self: NodeID(cfg.Self), lg: lg, wake: make(chan struct{}, 1),
		inflight: map[uint64]*flight{}, stopc: make(chan struct{}), donec: make(chan struct{})}
	if err := n.st.load(cfg.FS, cfg.Dir); err != nil {
		return nil, err
	}
	n.st.names[n.self] = cfg.Self
	for _, m := range cfg.Members {
		n.st.names[NodeID(m)] = m
	}
	stor := &storage{n: n}
	base, _ := n.log.Base()
	last := n.log.LastIndex()
	// the hard state's commit within what the log holds
	if c := n.st.hs.GetCommit(); c < base || c > last {
		n.st.hs.Commit = new(min(max(c, base), last))
	}
	applied := min(max(n.st.applied, base), n.st.hs.GetCommit())
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                        n.self,
		ElectionTick:              10,
		HeartbeatTick:             1,
		Storage:                   stor,
		Applied:                   applied,
		MaxSizePerMsg:             1 << 20,
		MaxCommittedSizePerReady:  8 << 20,
		MaxUncommittedEntriesSize: 64 << 20,
		MaxInflightMsgs:           64,
		CheckQuorum:               true,
		PreVote:                   true,
		DisableProposalForwarding: true,
		StepDownOnRemoval:         true,
		Logger:                    raftlog.Logger{L: lg},
	})
	if err != nil {
		return nil, err
	}
	n.rn = rn
	if cfg.Join && !n.st.hasHS {
		// a member added later never bootstraps, not even after a crash
		// before it heard from the leader
		n.st.hasHS = true
		if err := n.st.save(cfg.FS, cfg.Dir, true); err != nil {
			return nil, err
		}
	}
	if last == 0 && base == 0 && !n.st.hasHS && !cfg.Join {
		var peers []raft.Peer
		names := slices.Clone(cfg.Members)
		slices.Sort(names)
		names = slices.Compact(names)
		for _, m := range names {
			peers = append(peers, raft.Peer{ID: NodeID(m), Context: []byte(m)})
		}
		if err := rn.Bootstrap(peers); err != nil {
			return nil, err
		}
	}
	if err := n.log.CommitTo(n.st.hs.GetCommit()); err != nil {
		return nil, err
	}
	go n.run()
	return n, nil
}

// Propose proposes a chunk (streamlog.EncodeChunk); done runs once, on
// the member's goroutine, when it is committed and visible here, or with
// an error.
func (n *Node) Propose(raw []byte, done func(err error)) {
	if _, err := streamlog.ParseRaw(raw); err != nil {
		done(err)
		return
	}
	n.push(&flight{raw: raw, done: done})
}

func (n *Node) push(f *flight) {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		f.done(ErrStopped)
		return
	}
	n.props = append(n.props, f)
	n.mu.Unlock()
	n.poke()
}

func (n *Node) poke() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// Step hands the member a raft message from node from.
func (n *Node) Step(from string, msg []byte) error {
	m := &pb.Message{}
	if err := proto.Unmarshal(msg, m); err != nil {
		return err
	}
	if m.GetFrom() != NodeID(from) || m.GetTo() != n.self {
		return fmt.Errorf("streamraft: a message from %q says it is from %x to %x", from, m.GetFrom(), m.GetTo())
	}
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return ErrStopped
	}
	if len(n.inbox) >= 4096 {
		n.mu.Unlock()
		return errors.New("streamraft: inbox full")
	}
	n.inbox = append(n.inbox, inMsg{from, m})
	n.mu.Unlock()
	n.poke()
	return nil
}

// AddMember adds node to the group (a replica); the new member starts
// with Join. RemoveMember removes one.
func (n *Node) AddMember(ctx context.Context, node string) error {
	return n.confChange(ctx, &pb.ConfChange{Type: pb.ConfChangeAddNode.Enum(), NodeId: new(NodeID(node)), Context: []byte(node)})
}

// RemoveMember removes node from the group.
func (n *Node) RemoveMember(ctx context.Context, node string) error {
	return n.confChange(ctx, &pb.ConfChange{Type: pb.ConfChangeRemoveNode.Enum(), NodeId: new(NodeID(node)), Context: []byte(node)})
}

func (n *Node) confChange(ctx context.Context, cc *pb.ConfChange) error {
	ch := make(chan error, 1)
	n.push(&flight{cc: cc, done: func(err error) { ch <- err }})
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Campaign makes the member start an election.
func (n *Node) Campaign() {
	n.op(func() { _ = n.rn.Campaign() })
}

// TransferLeader asks the leader to hand the leadership to node.
func (n *Node) TransferLeader(node string) {
	n.op(func() { n.rn.TransferLeader(NodeID(node)) })
}

func (n *Node) op(fn func()) {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return
	}
	n.ops = append(n.ops, fn)
	n.mu.Unlock()
	n.poke()
}

// Leader returns the leader ("" when none is known) and the term.
func (n *Node) Leader() (string, uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.status.Leader, n.status.Term
}

// Status returns the member's view of the group.
func (n *Node) Status() Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.status
	s.Members = slices.Clone(s.Members)
	return s
}

// Stop stops the member (its log stays open: the caller's).
func (n *Node) Stop() {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		<-n.donec
		return
	}
	n.stopped = true
	n.mu.Unlock()
	close(n.stopc)
	<-n.donec
}

func (n *Node) name(id uint64) string { return n.st.names[id] }

// run is the member's loop.
func (n *Node) run() {
	defer close(n.donec)
	tick := time.NewTicker(n.cfg.Tick)
	defer tick.Stop()
	defer n.failAll(ErrStopped)
	ticking := true
	for {
		select {
		case <-n.stopc:
			return
		case <-tick.C:
			n.tick()
		case <-n.wake:
		}
		n.mu.Lock()
		props, inbox, ops, peerEv := n.props, n.inbox, n.ops, n.peerEv
		n.props, n.inbox, n.ops, n.peerEv = nil, nil, nil, nil
		n.mu.Unlock()
		for _, in := range inbox {
			if n.st.names[in.m.GetFrom()] == "" {
				n.st.names[in.m.GetFrom()] = in.from // a member added later learns its peers
			}
			if isQuiesce(in.m) {
				n.followQuiesce(in.m)
				continue
			}
			if in.m.GetType() != pb.MsgHeartbeatResp {
				n.unquiesce()
			}
			_ = n.rn.Step(in.m)
		}
		if len(ops) > 0 || len(props) > 0 {
			n.unquiesce()
		}
		for _, fn := range ops {
			fn()
		}
		for _, ev := range peerEv {
			n.peerEvent(ev)
		}
		n.propose(props)
		for n.rn.HasReady() {
			if err := n.handle(n.rn.Ready()); err != nil {
				n.lg.Error("stream replica stopped: its log failed", "err", err)
				n.mu.Lock()
				n.stopped = true
				n.mu.Unlock()
				return
			}
		}
		// a quiesced member does not even wake for its ticker
		if n.quiesced == ticking {
			if ticking {
				tick.Stop()
			} else {
				tick.Reset(n.cfg.Tick)
			}
			ticking = !ticking
			n.updateStatus()
		}
	}
}

func (n *Node) propose(props []*flight) {
	for _, f := range props {
		if n.rn.BasicStatus().RaftState != raft.StateLeader {
			f.done(ErrNotLeader)
			continue
		}
		var err error
		if f.cc != nil {
			err = n.rn.ProposeConfChange(f.cc)
		} else {
			err = n.rn.Propose(f.raw)
		}
		switch {
		case err == nil:
			n.fresh = append(n.fresh, f)
		case errors.Is(err, raft.ErrProposalDropped) && n.rn.BasicStatus().RaftState == raft.StateLeader:
			f.done(ErrBusy)
		default:
			f.done(ErrNotLeader)
		}
	}
}

func (n *Node) failAll(err error) {
	for i, f := range n.inflight {
		f.done(err)
		delete(n.inflight, i)
	}
	for _, f := range n.fresh {
		f.done(err)
	}
	n.fresh = nil
	n.mu.Lock()
	props := n.props
	n.props = nil
	n.mu.Unlock()
	for _, f := range props {
		f.done(err)
	}
}

// handle handles one Ready: persist, send, apply, advance.
func (n *Node) handle(rd raft.Ready) error {
	// this pass's proposals are the tail of its entries
	if k := len(n.fresh); k > 0 {
		if len(rd.Entries) < k {
			for _, f := range n.fresh {
				f.done(ErrDropped)
			}
		} else {
			tail := rd.Entries[len(rd.Entries)-k:]
			for i, f := range n.fresh {
				f.index, f.term = tail[i].GetIndex(), tail[i].GetTerm()
				if old := n.inflight[f.index]; old != nil {
					old.done(ErrDropped)
				}
				n.inflight[f.index] = f
			}
		}
		n.fresh = nil
	}
	if rd.Snapshot != nil && !raft.IsEmptySnap(rd.Snapshot) {
		if err := n.install(rd.Snapshot); err != nil {
			return err
		}
	}
	if len(rd.Entries) > 0 {
		if err := n.persist(rd.Entries); err != nil {
			return err
		}
	}
	if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
		sync := rd.HardState.GetTerm() != n.st.hs.GetTerm() || rd.HardState.GetVote() != n.st.hs.GetVote()
		n.st.hs = proto.Clone(rd.HardState).(*pb.HardState)
		n.st.hasHS = true
		if err := n.st.save(n.cfg.FS, n.cfg.Dir, sync); err != nil {
			return err
		}
	}
	for i := range rd.Messages {
		m := rd.Messages[i]
		to := n.name(m.GetTo())
		if to == "" {
			continue
		}
		b, err := proto.Marshal(m)
		if err == nil {
			n.cfg.Send(to, b)
		}
		if m.GetType() == pb.MsgSnap {
			n.rn.ReportSnapshot(m.GetTo(), raft.SnapshotFinish)
		}
	}
	if err := n.apply(rd.CommittedEntries); err != nil {
		return err
	}
	if rd.SoftState != nil {
		n.softState(rd.SoftState)
	}
	n.rn.Advance(rd)
	n.leaderReady()
	n.updateStatus()
	return nil
}

// persist appends entries to the log (after cutting the entries they
// replace) and syncs it.
func (n *Node) persist(ents []*pb.Entry) error {
	if first := ents[0].GetIndex(); first <= n.log.LastIndex() {
		if err := n.log.TruncateFrom(first); err != nil {
			return err
		}
		// the proposals whose entries were cut will not commit
		for i, f := range n.inflight {
			if i >= first {
				f.done(ErrDropped)
				delete(n.inflight, i)
			}
		}
	}
	for i := range ents {
		e := ents[i]
		raw := e.GetData()
		if e.GetType() != pb.EntryNormal || len(raw) == 0 {
			raw = streamlog.RaftChunk(byte(e.GetType()), raw, n.log.Info().LastTimestamp)
		}
		if _, err := n.log.AppendRaw(raw, e.GetTerm()); err != nil {
			return fmt.Errorf("entry %d: %w", e.GetIndex(), err)
		}
	}
	return n.log.Sync()
}

// install starts the log again at a snapshot from the leader.
func (n *Node) install(s *pb.Snapshot) error {
	sd, err := decodeSnapData(s.GetData())
	if err != nil {
		return err
	}
	md := s.GetMetadata()
	if err := n.log.Reset(sd.firstID, md.GetIndex()+1, md.GetTerm(), sd.lead); err != nil {
		return err
	}
	for id, name := range sd.names {
		n.st.names[id] = name
	}
	n.st.cs = proto.Clone(md.GetConfState()).(*pb.ConfState)
	n.st.applied = md.GetIndex()
	n.membersDirty = true
	return n.st.save(n.cfg.FS, n.cfg.Dir, true)
}

// apply applies committed entries: configuration changes, then the
// visibility of the rest and the proposals' answers.
func (n *Node) apply(ents []*pb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	conf := false
	for i := range ents {
		e := ents[i]
		var cc *pb.ConfChange
		switch e.GetType() {
		case pb.EntryConfChange:
			cc = &pb.ConfChange{}
			if err := proto.Unmarshal(e.GetData(), cc); err != nil {
				return err
			}
			if ctx := cc.GetContext(); len(ctx) > 0 {
				n.st.names[cc.GetNodeId()] = string(ctx)
			}
			n.st.cs = n.rn.ApplyConfChange(cc)
			conf, n.membersDirty = true, true
		case pb.EntryConfChangeV2:
			cc2 := &pb.ConfChangeV2{}
			if err := proto.Unmarshal(e.GetData(), cc2); err != nil {
				return err
			}
			n.st.cs = n.rn.ApplyConfChange(cc2)
			conf, n.membersDirty = true, true
		}
		n.st.applied = e.GetIndex()
		if conf {
			if err := n.st.save(n.cfg.FS, n.cfg.Dir, true); err != nil {
				return err
			}
			conf = false
		}
		if cc != nil && cc.GetType() == pb.ConfChangeRemoveNode && cc.GetNodeId() == n.self {
			n.lg.Info("stream replica removed from its group")
		}
	}
	last := ents[len(ents)-1].GetIndex()
	if err := n.log.CommitTo(last); err != nil {
		return err
	}
	if n.membersDirty {
		n.updateStatus() // before a membership change's caller hears it is done
	}
	for i := range ents {
		e := ents[i]
		f := n.inflight[e.GetIndex()]
		if f == nil {
			continue
		}
		delete(n.inflight, e.GetIndex())
		switch {
		case f.term != e.GetTerm():
			f.done(ErrDropped)
		case f.cc != nil && e.GetType() != pb.EntryConfChange:
			// raft refused it (another change is in progress)
			f.done(errors.New("streamraft: a membership change is in progress"))
		default:
			f.done(nil)
		}
	}
	if n.cfg.OnCommit != nil {
		n.cfg.OnCommit(last)
	}
	return nil
}

func (n *Node) softState(ss *raft.SoftState) {
	st := n.rn.BasicStatus()
	if ss.Lead == n.lead && st.GetTerm() == n.term {
		return
	}
	if n.lead == n.self && ss.Lead != n.self {
		// leadership lost: what was proposed may or may not commit
		for i, f := range n.inflight {
			f.done(ErrDropped)
			delete(n.inflight, i)
		}
	}
	n.lead, n.term, n.ready = ss.Lead, st.GetTerm(), false
	if n.cfg.OnLeader != nil && ss.Lead != n.self {
		n.cfg.OnLeader(n.name(ss.Lead), st.GetTerm(), false)
	}
}

// leaderReady says OnLeader(self, term, true) once the leader's first
// entry of its term is committed.
func (n *Node) leaderReady() {
	if n.ready || n.lead != n.self {
		return
	}
	st := n.rn.BasicStatus()
	if st.RaftState != raft.StateLeader {
		return
	}
	t, err := n.log.Term(st.GetCommit())
	if err != nil || t != st.GetTerm() {
		return
	}
	n.ready = true
	if n.cfg.OnLeader != nil {
		n.cfg.OnLeader(n.cfg.Self, st.GetTerm(), true)
	}
}

// updateStatus refreshes what Status returns (without raft's progress
// map: a Ready of an idle group is a heartbeat, and this runs for each).
func (n *Node) updateStatus() {
	st := n.rn.BasicStatus()
	n.mu.Lock()
	defer n.mu.Unlock()
	s := &n.status
	s.Role, s.Term, s.Commit, s.Leader = st.RaftState.String(), st.GetTerm(), st.GetCommit(), n.name(st.Lead)
	s.LastIndex, s.FirstIndex = n.log.LastIndex(), n.log.FirstIndex()
	s.Quiesced = n.quiesced
	if len(s.Members) != len(n.st.cs.GetVoters()) || n.membersDirty || slices.Contains(s.Members, "") {
		s.Members = s.Members[:0:0]
		for _, id := range n.st.cs.GetVoters() {
			s.Members = append(s.Members, n.name(id))
		}
		slices.Sort(s.Members)
		n.membersDirty = false
	}
}

// --- storage ---

// storage is raft's view of the member's log.
type storage struct{ n *Node }

func (s *storage) InitialState() (*pb.HardState, *pb.ConfState, error) {
	return proto.Clone(s.n.st.hs).(*pb.HardState), proto.Clone(s.n.st.cs).(*pb.ConfState), nil
}

func (s *storage) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	var out []*pb.Entry
	err := s.n.log.Entries(lo, hi, maxSize, func(ord uint64, raw []byte, term uint64) error {
		h, err := streamlog.ParseHeader(raw)
		if err != nil {
			return err
		}
		e := &pb.Entry{Index: new(ord), Term: new(term), Type: pb.EntryNormal.Enum()}
		if h.Type == streamlog.ChunkRaft {
			d := raw[streamlog.HeaderSize+int(h.BloomSize):][:h.DataSize]
			e.Type = pb.EntryType(d[0]).Enum()
			if len(d) > 1 {
				e.Data = slices.Clone(d[1:])
			}
		} else {
			e.Data = slices.Clone(raw)
		}
		out = append(out, e)
		return nil
	})
	if errors.Is(err, streamlog.ErrCompacted) {
		return nil, raft.ErrCompacted
	}
	if errors.Is(err, streamlog.ErrUnavailable) {
		return nil, raft.ErrUnavailable
	}
	return out, err
}

func (s *storage) Term(i uint64) (uint64, error) {
	t, err := s.n.log.Term(i)
	switch {
	case errors.Is(err, streamlog.ErrCompacted):
		return 0, raft.ErrCompacted
	case errors.Is(err, streamlog.ErrUnavailable):
		return 0, raft.ErrUnavailable
	}
	return t, err
}

func (s *storage) LastIndex() (uint64, error) { return s.n.log.LastIndex(), nil }

func (s *storage) FirstIndex() (uint64, error) { return s.n.log.FirstIndex(), nil }

func (s *storage) Snapshot() (*pb.Snapshot, error) {
	index, term := s.n.log.Base()
	if index == 0 {
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
	firstID, lead, err := s.n.log.Lead()
	if err != nil {
		return nil, err
	}
	cs := &pb.ConfState{}
	if s.n.st.cs != nil {
		cs = proto.Clone(s.n.st.cs).(*pb.ConfState)
	}
	data := encodeSnapData(snapData{firstID: firstID, lead: lead, names: s.n.st.names})
	return &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{Index: new(index), Term: new(term), ConfState: cs}}, nil
}

// --- snapshot data ---

type snapData struct {
	firstID uint64
	lead    []byte
	names   map[uint64]string
}

func encodeSnapData(d snapData) []byte {
	b := binary.BigEndian.AppendUint64(nil, d.firstID)
	b = binary.BigEndian.AppendUint32(b, uint32(len(d.lead)))
	b = append(b, d.lead...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(d.names)))
	for _, id := range slices.Sorted(maps.Keys(d.names)) {
		b = binary.BigEndian.AppendUint64(b, id)
		b = append(b, byte(len(d.names[id])))
		b = append(b, d.names[id]...)
	}
	return b
}

var errBadSnap = errors.New("streamraft: malformed snapshot")

func decodeSnapData(b []byte) (snapData, error) {
	d := snapData{names: map[uint64]string{}}
	if len(b) < 12 {
		return d, errBadSnap
	}
	d.firstID = binary.BigEndian.Uint64(b)
	n := int(binary.BigEndian.Uint32(b[8:]))
	b = b[12:]
	if n > len(b) {
		return d, errBadSnap
	}
	if n > 0 {
		d.lead = slices.Clone(b[:n])
	}
	b = b[n:]
	if len(b) < 2 {
		return d, errBadSnap
	}
	k := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	for range k {
		if len(b) < 9 || len(b) < 9+int(b[8]) {
			return d, errBadSnap
		}
		d.names[binary.BigEndian.Uint64(b)] = string(b[9 : 9+int(b[8])])
		b = b[9+int(b[8]):]
	}
	return d, nil
}

// --- the state file ---

// state is what a member keeps beside its log: the hard state, the
// configuration, the last applied index and the members' names; a file
// of two slots written in turn (a torn write leaves the other).
type state struct {
	hs      *pb.HardState
	hasHS   bool
	cs      *pb.ConfState
	applied uint64
	names   map[uint64]string
	seq     uint64
}

const (
	stateFile = "raft.state"
	stateSlot = 8 << 10
)

func (s *state) encode() ([]byte, error) {
	hs, err := proto.Marshal(s.hs)
	if err != nil {
		return nil, err
	}
	cs, err := proto.Marshal(s.cs)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 8, stateSlot)
	b = binary.BigEndian.AppendUint64(b, s.seq)
	b = binary.BigEndian.AppendUint64(b, s.applied)
	b = binary.BigEndian.AppendUint16(b, uint16(len(hs)))
	b = append(b, hs...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(cs)))
	b = append(b, cs...)
	b = append(b, encodeSnapData(snapData{names: s.names})...)
	if len(b)+4 > stateSlot {
		return nil, errors.New("streamraft: state too large")
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-8))
	binary.BigEndian.PutUint32(b[4:], crc32.ChecksumIEEE(b[8:]))
	return b, nil
}

func (s *state) save(fs store.FS, dir string, sync bool) error {
	s.seq++
	b, err := s.encode()
	if err != nil {
		return err
	}
	f, err := fs.OpenFile(filepath.Join(dir, stateFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(b, int64(s.seq%2)*stateSlot); err != nil {
		return err
	}
	if sync {
		return f.Sync()
	}
	return nil
}

func (s *state) load(fs store.FS, dir string) error {
	s.hs, s.cs, s.names = &pb.HardState{}, &pb.ConfState{}, map[uint64]string{}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := fs.OpenFile(filepath.Join(dir, stateFile), os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	found := false
	for slot := range 2 {
		b := make([]byte, stateSlot)
		n, _ := f.ReadAt(b, int64(slot)*stateSlot)
		b = b[:n]
		if len(b) < 8 {
			continue
		}
		l := int(binary.BigEndian.Uint32(b))
		if l+8 > len(b) || crc32.ChecksumIEEE(b[8:8+l]) != binary.BigEndian.Uint32(b[4:]) {
			continue
		}
		var t state
		if t.decode(b[8:8+l]) != nil || found && t.seq <= s.seq {
			continue
		}
		*s, found = t, true
	}
	if !found {
		if sz, _ := f.Size(); sz > 0 {
			return errors.New("streamraft: damaged state file")
		}
	}
	return nil
}

func (s *state) decode(b []byte) error {
	if len(b) < 18 {
		return errBadSnap
	}
	s.seq, s.applied = binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])
	b = b[16:]
	part := func() ([]byte, bool) {
		if len(b) < 2 || len(b) < 2+int(binary.BigEndian.Uint16(b)) {
			return nil, false
		}
		n := int(binary.BigEndian.Uint16(b))
		p := b[2 : 2+n]
		b = b[2+n:]
		return p, true
	}
	hs, ok1 := part()
	cs, ok2 := part()
	if !ok1 || !ok2 {
		return errBadSnap
	}
	s.hs, s.cs = &pb.HardState{}, &pb.ConfState{}
	if proto.Unmarshal(hs, s.hs) != nil || proto.Unmarshal(cs, s.cs) != nil {
		return errBadSnap
	}
	d, err := decodeSnapData(b)
	if err != nil {
		return err
	}
	s.names = d.names
	s.hasHS = true
	return nil
}
