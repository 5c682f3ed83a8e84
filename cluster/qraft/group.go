package qraft

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/internal/raftlog"
	"github.com/warrenmq/warren/internal/raftpeer"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// StateMachine is a group's replicated state. Every method is called on
// the host's loop goroutine (one for all groups), except the Restore of a
// recovered snapshot, which StartGroup calls before it returns: it must not
// block long, and must not wait for the host (Propose is fine: it never
// blocks; the ctx-taking Group methods would wait for the loop and must not
// be called from here). After StopGroup or DeleteGroup returns, a callback
// already running on the loop may finish; none starts once the loop has
// handled the stop (at its next pass).
type StateMachine interface {
	// Apply gets committed entries in log order. Empty entries and
	// configuration changes are applied by the host and not passed (their
	// indices still advance Applied). Data must not be modified; it may be
	// kept.
	Apply(ents []Entry)
	// Snapshot encodes the state as of the last applied entry, and the
	// indices of the entries (at or below it) whose data it still needs:
	// the host compacts the log up to that index and keeps exactly those
	// entries readable through ReadEntry.
	Snapshot() (data []byte, live []uint64)
	// Restore replaces the state with a snapshot taken at index (installed
	// from the leader, or recovered at StartGroup).
	Restore(index uint64, data []byte)
	// LeaderChanged reports the group's leader ("" when none is known) in
	// term. isSelf is true when this node leads AND every entry of earlier
	// terms is applied here (the state is complete); it is signalled once
	// per term, after the Apply of the leader's first entry of its term.
	LeaderChanged(leader string, term uint64, isSelf bool)
}

// Entry is a committed entry handed to StateMachine.Apply.
type Entry struct {
	Index, Term uint64
	Data        []byte
}

// GroupStatus is a snapshot of a group's raft state on this node.
type GroupStatus struct {
	ID            uint64
	Role          string // leader, follower, candidate, precandidate, stopped
	Term          uint64
	Commit        uint64
	Applied       uint64
	LastIndex     uint64
	Leader        string // "" when unknown
	Members       []string
	Online        []string // members this node can reach (itself included)
	LogEntries    uint64   // entries above the snapshot plus live entries kept below it
	LogBytes      int64    // their data bytes (approximate)
	SnapshotIndex uint64
	Quiesced      bool
}

type flight struct {
	data  []byte
	cc    *pb.ConfChange
	done  func(index uint64, err error)
	term  uint64
	index uint64
}

type inItem struct {
	from string
	wireItem
}

// Group is one raft group driven by the host.
type Group struct {
	h  *Host
	id uint64
	sm StateMachine

	// loop-only
	rn               *raft.RawNode
	ls               *logStorage
	recLo, recHi     int // this pass's records in the store batch
	snapIndex        uint64
	applied          uint64
	sinceSnapEntries uint64
	sinceSnapBytes   int64
	confState        *pb.ConfState
	inflight         map[uint64]*flight
	newProps         []*flight
	lead, term       uint64
	selfReady        bool
	quiesced         bool
	idleTicks        int
	idleCommit       uint64
	stoppedLoop      bool
	installed        *snapData // a snapshot from the leader, persisted, to restore
	installedMeta    *pb.Snapshot
	installedPre     []liveRef // its live entries persisted already (streamed)
	installedDrop    []recPos  // streamed entries it does not list
	snapEndID        uint64    // the stream whose MsgSnap comes (or came) last
	snapStepID       uint64    // the stream of the MsgSnap stepped last
	snapEndFrom      string    // the sender of stream snapEndID
	frag             []byte    // a large live entry of a stream being received
	fragID, fragIdx  uint64
	streams          map[uint64]*snapStream // leader: snapshot streams by member
	snapNow          bool                   // a configuration change was applied
	nextSnapWeight   int64                  // the log weight due before the next snapshot (snapshotDue)

	quiescedFlag atomic.Bool

	mu       sync.Mutex
	props    []*flight
	ops      []func()
	inbox    []inItem
	stopped  bool
	deleted  bool
	stoppedc chan struct{}
	status   GroupStatus

	dirty bool // under h.mu
}

func newGroup(h *Host, id uint64, members []string, sm StateMachine, join bool, r *recovered) (*Group, error) {
	g := &Group{
		h: h, id: id, sm: sm,
		inflight: map[uint64]*flight{},
		stoppedc: make(chan struct{}),
	}
	if r != nil {
		g.ls = r.ls
	} else {
		g.ls = newLogStorage(h.store, id)
	}
	ls := g.ls
	fresh := !ls.hasHS && !ls.hasSnap && len(ls.ents) == 1
	if !fresh {
		if ls.hasSnap {
			sd, err := decodeSnapData(ls.snap.GetData())
			if err != nil {
				return nil, err
			}
			g.snapIndex = ls.snap.GetMetadata().GetIndex()
			g.confState = ls.snap.GetMetadata().GetConfState()
			sm.Restore(g.snapIndex, sd.sm)
		}
		ls.mu.Lock()
		for i := range ls.ents[1:] {
			m := &ls.ents[1+i]
			if ls.first+1+uint64(i) > g.snapIndex {
				g.sinceSnapEntries++
				g.sinceSnapBytes += int64(m.size)
			}
		}
		ls.mu.Unlock()
	}
	g.applied = g.snapIndex
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                        h.self,
		ElectionTick:              electionTicks,
		HeartbeatTick:             heartbeatTicks,
		Storage:                   g.ls,
		Applied:                   g.applied,
		MaxSizePerMsg:             1 << 20,
		MaxCommittedSizePerReady:  8 << 20,
		MaxUncommittedEntriesSize: MaxUncommitted,
		MaxInflightMsgs:           256,
		CheckQuorum:               true,
		PreVote:                   true,
		DisableProposalForwarding: true,
		StepDownOnRemoval:         true,
		Logger:                    raftlog.Logger{L: h.log.With("group", id)},
	})
	if err != nil {
		return nil, fmt.Errorf("qraft: group %d: %w", id, err)
	}
	g.rn = rn
	if fresh && !join {
		found := false
		names := append([]string(nil), members...)
		sort.Strings(names)
		peers := make([]raft.Peer, 0, len(names))
		for i, n := range names {
			if i > 0 && names[i-1] == n {
				continue
			}
			if n == h.cfg.Self {
				found = true
			}
			peers = append(peers, raft.Peer{ID: NodeID(n), Context: []byte(n)})
		}
		if !found {
			return nil, fmt.Errorf("qraft: group %d: members %v must include this node (%s), or join", id, members, h.cfg.Self)
		}
		if err := rn.Bootstrap(peers); err != nil {
			return nil, fmt.Errorf("qraft: group %d: bootstrap: %w", id, err)
		}
	}
	st := rn.BasicStatus()
	g.term = st.GetTerm()
	g.status = GroupStatus{ID: id, Role: "follower", Term: st.GetTerm(), SnapshotIndex: g.snapIndex, Applied: g.applied}
	return g, nil
}

// ID is the group's id.
func (g *Group) ID() uint64 { return g.id }

// Propose hands data to the group, asynchronously (it never blocks on the
// network or the loop). done (optional) runs on the loop after the entry
// is committed and applied here (after the StateMachine's Apply for it
// returned), or with ErrNotLeader (in no log), ErrDropped (the leadership
// changed first: outcome unknown, the caller resends) or ErrClosed.
// Every proposal queued since the loop's last pass goes into one Ready.
func (g *Group) Propose(data []byte, done func(index uint64, err error)) {
	g.enqueue(&flight{data: data, done: done})
}

func (g *Group) enqueue(f *flight) {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		if f.done != nil {
			f.done(0, ErrClosed)
		}
		return
	}
	g.props = append(g.props, f)
	g.mu.Unlock()
	g.h.markDirty(g)
}

// do runs fn on the loop.
func (g *Group) do(fn func()) error {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return ErrClosed
	}
	g.ops = append(g.ops, fn)
	g.mu.Unlock()
	g.h.markDirty(g)
	return nil
}

// Campaign makes this member start an election now (a preferred leader
// after its group was created).
func (g *Group) Campaign() error {
	return g.do(func() { _ = g.rn.Campaign() })
}

// ReadEntry returns the data of a committed entry: one above the last
// snapshot, or one its StateMachine listed as live.
func (g *Group) ReadEntry(index uint64) ([]byte, error) {
	data, found, err := g.ls.readEntry(index)
	if err != nil {
		return nil, fmt.Errorf("qraft: group %d entry %d: %w", g.id, index, err)
	}
	if !found {
		return nil, fmt.Errorf("%w: group %d entry %d", ErrNotFound, g.id, index)
	}
	return data, nil
}

// ReadEntries reads the data of many entries (each one as ReadEntry
// would) with few preads: fn gets them in index order. A new leader
// rebuilding its queue reads its live messages' bodies this way.
func (g *Group) ReadEntries(indices []uint64, fn func(index uint64, data []byte) error) error {
	return g.ls.readEntries(indices, fn)
}

// Leader returns the leader ("" when unknown) and the term, as of the
// loop's last pass over the group.
func (g *Group) Leader() (node string, term uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.status.Leader, g.status.Term
}

// Status returns the group's state on this node.
func (g *Group) Status() GroupStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.status
	s.Members = append([]string(nil), s.Members...)
	s.Online = append([]string(nil), s.Online...)
	return s
}

// AddMember adds node as a voter (leader only). The node's member must be
// started with join=true; the leader catches it up. It returns once the
// change is applied here, or with ctx's error (the change may still
// apply), ErrNotLeader, or ErrDropped.
func (g *Group) AddMember(ctx context.Context, node string) error {
	g.h.mu.Lock()
	g.h.names[NodeID(node)] = node
	g.h.mu.Unlock()
	return g.confChange(ctx, &pb.ConfChange{Type: pb.ConfChangeAddNode.Enum(), NodeId: new(NodeID(node)), Context: []byte(node)})
}

// RemoveMember removes node from the group (leader only); see AddMember.
func (g *Group) RemoveMember(ctx context.Context, node string) error {
	return g.confChange(ctx, &pb.ConfChange{Type: pb.ConfChangeRemoveNode.Enum(), NodeId: new(NodeID(node)), Context: []byte(node)})
}

func (g *Group) confChange(ctx context.Context, cc *pb.ConfChange) error {
	ch := make(chan error, 1)
	g.enqueue(&flight{cc: cc, done: func(_ uint64, err error) { ch <- err }})
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TransferLeader asks the leader (this node) to hand leadership to node
// and waits until node leads, or ctx ends.
func (g *Group) TransferLeader(ctx context.Context, node string) error {
	ch := make(chan error, 1)
	err := g.do(func() {
		st := g.rn.BasicStatus()
		if st.RaftState != raft.StateLeader {
			ch <- ErrNotLeader
			return
		}
		g.wake()
		g.rn.TransferLeader(NodeID(node))
		ch <- nil
	})
	if err != nil {
		return err
	}
	select {
	case err := <-ch:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if l, _ := g.Leader(); l == node {
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ---- loop side ----

func (g *Group) wake() {
	if g.quiesced {
		g.quiesced = false
		g.quiescedFlag.Store(false)
	}
	g.idleTicks = 0
}

// handleInput steps what arrived; false when the group is stopped.
func (g *Group) handleInput(extra *[]rec) bool {
	if g.stoppedLoop {
		return false
	}
	g.mu.Lock()
	inbox, props, ops := g.inbox, g.props, g.ops
	g.inbox, g.props, g.ops = nil, nil, nil
	stopped, deleted := g.stopped, g.deleted
	g.mu.Unlock()
	if stopped {
		g.stoppedLoop = true
		g.cancelSnapStreams()
		for _, f := range props {
			if f.done != nil {
				f.done(0, ErrClosed)
			}
		}
		g.failPending(ErrClosed)
		r := g.recoveredState()
		g.h.mu.Lock()
		g.mu.Lock()
		deleted = g.deleted // DeleteGroup may have come after StopGroup
		g.status.Role = "stopped"
		g.mu.Unlock()
		if !deleted {
			g.h.rec[g.id] = r
		}
		if g.h.stopping[g.id] == g {
			delete(g.h.stopping, g.id)
		}
		g.h.mu.Unlock()
		if deleted {
			*extra = append(*extra, rec{Group: g.id, Kind: recDelete})
			g.h.afterSync = append(g.h.afterSync, g.ls.allRecords()...)
		}
		close(g.stoppedc)
		return false
	}
	for i := range inbox {
		g.stepItem(&inbox[i])
	}
	for _, op := range ops {
		op()
	}
	if len(props) > 0 {
		g.wake()
		g.propose(props)
	}
	return true
}

// recoveredState is what a later StartGroup of a stopped group starts from.
func (g *Group) recoveredState() *recovered {
	return &recovered{ls: g.ls, names: g.memberNames()}
}

func (g *Group) stepItem(it *inItem) {
	switch it.kind {
	case itemRaft:
		m := it.msg
		t := m.GetType()
		if t == pb.MsgProp {
			return // proposals are never forwarded
		}
		if g.quiesced && t != pb.MsgHeartbeatResp {
			// Woken without touching the election clock: a quiesced
			// follower still holds its leader lease (CheckQuorum), so a
			// vote request from a member that merely restarted does not
			// depose a live leader; the request wakes the leader, whose
			// heartbeats settle the requester.
			g.wake()
		}
		if t == pb.MsgSnap {
			if !g.snapAllowed(it.from, m) {
				g.h.log.Warn("qraft: a snapshot without its stream's entries refused", "group", g.id, "from", it.from)
				return
			}
			// The stream whose entries an install of this one keeps (0:
			// none); the next MsgSnap needs a stream end of its own.
			g.snapStepID, g.snapEndID = g.snapEndID, 0
		}
		if err := g.rn.Step(m); err != nil {
			g.h.log.Debug("qraft: step", "group", g.id, "type", t.String(), "err", err)
		}
	case itemSnapPart:
		g.receiveSnapPart(it)
	case itemSnapFrag:
		g.receiveSnapFrag(it)
	case itemSnapEnd:
		g.receiveSnapEnd(it) // its MsgSnap comes next
	case itemQuiesce:
		st := g.rn.BasicStatus()
		last, _ := g.ls.LastIndex()
		if st.RaftState == raft.StateFollower && st.GetTerm() == it.term && st.Lead == NodeID(it.from) &&
			st.GetCommit() == it.commit && last == it.commit {
			g.quiesced = true
			g.quiescedFlag.Store(true)
		}
	}
}

func (g *Group) propose(props []*flight) {
	st := g.rn.BasicStatus()
	fail := func(fs []*flight, err error) {
		for _, f := range fs {
			if f.done != nil {
				f.done(0, err)
			}
		}
	}
	if st.RaftState != raft.StateLeader || st.LeadTransferee != raft.None {
		fail(props, ErrNotLeader)
		return
	}
	g.h.st.proposals.Add(uint64(len(props)))
	var run []*flight
	flush := func() {
		if len(run) == 0 {
			return
		}
		ents := make([]*pb.Entry, len(run))
		for i, f := range run {
			ents[i] = &pb.Entry{Data: f.data}
		}
		err := g.rn.Step(&pb.Message{Type: pb.MsgProp.Enum(), From: new(g.h.self), Entries: ents})
		switch {
		case err == nil:
			g.newProps = append(g.newProps, run...)
		case errors.Is(err, raft.ErrProposalDropped) && g.rn.BasicStatus().RaftState == raft.StateLeader:
			// Over MaxUncommitted as a batch: as many as fit, one by one.
			for i, f := range run {
				if g.rn.Step(&pb.Message{Type: pb.MsgProp.Enum(), From: new(g.h.self), Entries: ents[i : i+1]}) == nil {
					g.newProps = append(g.newProps, f)
					continue
				}
				g.h.st.busy.Add(1)
				fail([]*flight{f}, ErrBusy)
			}
		default:
			fail(run, ErrNotLeader)
		}
		run = nil
	}
	for _, f := range props {
		if f.cc == nil {
			run = append(run, f)
			continue
		}
		flush()
		if err := g.rn.ProposeConfChange(f.cc); err != nil {
			fail([]*flight{f}, ErrNotLeader)
		} else {
			g.newProps = append(g.newProps, f)
		}
	}
	flush()
}

// matchProposals gives this pass's accepted proposals their indices: raft
// appended them, in order, at the tail of the Ready's entries.
func (g *Group) matchProposals(rd *raft.Ready) {
	n := len(g.newProps)
	if n == 0 {
		return
	}
	props := g.newProps
	g.newProps = nil
	if len(rd.Entries) < n {
		for _, f := range props {
			if f.done != nil {
				f.done(0, ErrDropped)
			}
		}
		return
	}
	tail := rd.Entries[len(rd.Entries)-n:]
	for i, f := range props {
		f.index, f.term = tail[i].GetIndex(), tail[i].GetTerm()
		if old := g.inflight[f.index]; old != nil && old.done != nil {
			old.done(0, ErrDropped)
		}
		g.inflight[f.index] = f
	}
}

// persistRecords adds the Ready's records to recs.
func (g *Group) persistRecords(recs []rec, rd *raft.Ready) ([]rec, error) {
	g.recLo = len(recs)
	defer func() { g.recHi = len(recs) }()
	if !raft.IsEmptySnap(rd.Snapshot) {
		sd, err := decodeSnapData(rd.Snapshot.GetData())
		if err != nil {
			return nil, fmt.Errorf("qraft: group %d: snapshot from leader: %w", g.id, err)
		}
		sort.Slice(sd.live, func(i, j int) bool { return sd.live[i].index < sd.live[j].index })
		// A streamed snapshot's entries are in the WAL already (the
		// parts, written as they came): only the ones it lists are kept.
		streamed := g.ls.takeIncoming(g.snapStepID)
		g.snapStepID = 0
		g.installedPre, g.installedDrop = nil, nil
		k := 0
		for _, l := range sd.live {
			for k < len(streamed) && streamed[k].index < l.index {
				g.installedDrop = append(g.installedDrop, streamed[k].pos)
				k++
			}
			switch {
			case l.hasData:
				recs = append(recs, rec{Group: g.id, Index: l.index, Term: l.term, Kind: recLive, Data: l.data})
			case k < len(streamed) && streamed[k].index == l.index && streamed[k].term == l.term:
				g.installedPre = append(g.installedPre, streamed[k])
				k++
			}
		}
		for ; k < len(streamed); k++ {
			g.installedDrop = append(g.installedDrop, streamed[k].pos)
		}
		small := proto.Clone(rd.Snapshot).(*pb.Snapshot)
		small.Data = sd.encode(false)
		data, err := proto.Marshal(small)
		if err != nil {
			return nil, err
		}
		recs = append(recs, rec{Group: g.id, Index: small.GetMetadata().GetIndex(), Term: small.GetMetadata().GetTerm(), Kind: recSnapInstall, Data: data})
		g.installed, g.installedMeta = sd, small
	}
	for _, e := range rd.Entries {
		recs = append(recs, recOfEntry(g.id, e))
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		data, err := proto.Marshal(rd.HardState)
		if err != nil {
			return nil, err
		}
		recs = append(recs, rec{Group: g.id, Kind: recHardState, Data: data})
	}
	return recs, nil
}

func recOfEntry(group uint64, e *pb.Entry) rec {
	k := byte(recEntry)
	switch e.GetType() {
	case pb.EntryConfChange:
		k = recConf
	case pb.EntryConfChangeV2:
		k = recConfV2
	}
	return rec{Group: group, Index: e.GetIndex(), Term: e.GetTerm(), Kind: k, Data: e.GetData()}
}

func entryOfRec(x rec) *pb.Entry {
	e := &pb.Entry{Index: new(x.Index), Term: new(x.Term), Data: x.Data}
	switch x.Kind {
	case recConf:
		e.Type = pb.EntryConfChange.Enum()
	case recConfV2:
		e.Type = pb.EntryConfChangeV2.Enum()
	}
	return e
}

// storeReady records the persisted Ready (at poss, in persistRecords'
// order) in the group's storage, and releases what it superseded.
func (g *Group) storeReady(rd *raft.Ready, poss []recPos, synced bool) error {
	poss = poss[g.recLo:g.recHi]
	i := 0
	var old []recPos
	if g.installedMeta != nil {
		var live []liveRef
		for _, l := range g.installed.live {
			if l.hasData {
				live = append(live, liveRef{index: l.index, term: l.term, pos: poss[i], size: uint32(len(l.data))})
				i++
			}
		}
		if len(g.installedPre) > 0 {
			live = append(live, g.installedPre...)
			sort.Slice(live, func(i, j int) bool { return live[i].index < live[j].index })
		}
		old = append(old, g.installedDrop...)
		g.installedPre, g.installedDrop = nil, nil
		old = append(old, g.ls.applySnapshot(g.installedMeta, poss[i], live)...)
		i++
	}
	old = append(old, g.ls.append(rd.Entries, poss[i:i+len(rd.Entries)])...)
	i += len(rd.Entries)
	if !raft.IsEmptyHardState(rd.HardState) {
		old = append(old, g.ls.setHardState(rd.HardState, poss[i])...)
	}
	g.h.releaseSuperseded(old, synced)
	return nil
}

// queueMessages puts the Ready's messages in the per-peer batches.
func (g *Group) queueMessages(msgs []*pb.Message) {
	for _, m := range msgs {
		to := m.GetTo()
		name := g.h.loopName(to)
		if name == "" {
			g.rn.ReportUnreachable(to)
			continue
		}
		if m.GetType() == pb.MsgSnap {
			if g.h.cfg.SendBulk != nil {
				g.streamSnapshot(to, name, m)
				continue
			}
			m = g.expandSnap(m)
			g.h.st.snapsSent.Add(1)
			g.rn.ReportSnapshot(to, raft.SnapshotFinish)
		}
		b := g.h.batcherFor(name)
		if err := b.addRaft(g.id, m); err != nil {
			g.h.log.Error("qraft: marshal", "group", g.id, "err", err)
			continue
		}
		if n := len(b.groups); n == 0 || b.groups[n-1] != g.id {
			b.groups = append(b.groups, g.id)
		}
		g.h.st.raftMsgs.Add(1)
	}
}

// expandSnap returns a copy of a MsgSnap whose snapshot carries the live
// entries' bodies.
func (g *Group) expandSnap(m *pb.Message) *pb.Message {
	sd, err := decodeSnapData(m.GetSnapshot().GetData())
	if err != nil {
		g.h.log.Error("qraft: own snapshot", "group", g.id, "err", err)
		return m
	}
	idx := make([]uint64, len(sd.live))
	for i := range sd.live {
		idx[i] = sd.live[i].index
	}
	sort.Slice(sd.live, func(i, j int) bool { return sd.live[i].index < sd.live[j].index })
	i := 0
	err = g.ReadEntries(idx, func(index uint64, data []byte) error {
		for i < len(sd.live) && sd.live[i].index < index {
			i++
		}
		if i < len(sd.live) && sd.live[i].index == index {
			sd.live[i].data, sd.live[i].hasData = data, true
		}
		return nil
	})
	if err != nil {
		g.h.log.Error("qraft: live entries for a snapshot", "group", g.id, "err", err)
	}
	m2 := proto.Clone(m).(*pb.Message)
	m2.Snapshot.Data = sd.encode(true)
	return m2
}

// canApplyEarly: the Ready's committed entries may be applied before the
// Ready is persisted: it installs no snapshot and every committed entry
// is in the stored log already (an earlier Ready's, synced). They are
// committed, so on a majority's disks; applying them does not depend on
// this Ready's entries or hard state.
func (g *Group) canApplyEarly(rd *raft.Ready) bool {
	if g.installed != nil || !raft.IsEmptySnap(rd.Snapshot) {
		return false
	}
	n := len(rd.CommittedEntries)
	if n == 0 {
		return true
	}
	hi := rd.CommittedEntries[n-1].GetIndex()
	if len(rd.Entries) > 0 && rd.Entries[0].GetIndex() <= hi {
		return false // this Ready rewrites the stored log under them
	}
	last, _ := g.ls.LastIndex()
	return hi <= last
}

// applyReady restores an installed snapshot and applies committed entries.
func (g *Group) applyReady(rd *raft.Ready) error {
	if g.installed != nil {
		sd, meta := g.installed, g.installedMeta
		g.installed, g.installedMeta = nil, nil
		idx := meta.GetMetadata().GetIndex()
		if idx > g.applied {
			g.h.mu.Lock()
			for id, n := range sd.names {
				g.h.names[id] = n
			}
			g.h.mu.Unlock()
			g.snapIndex, g.applied = idx, idx
			g.confState = meta.GetMetadata().GetConfState()
			g.sinceSnapEntries, g.sinceSnapBytes = 0, 0
			g.sm.Restore(idx, sd.sm)
			g.h.st.snapsIn.Add(1)
		}
	}
	g.checkLeader()
	batch := make([]Entry, 0, len(rd.CommittedEntries))
	var dones []*flight
	flush := func() {
		if len(batch) > 0 {
			g.sm.Apply(batch)
			batch = batch[len(batch):] // the SM may keep what it got
		}
		for _, f := range dones {
			if f.done != nil {
				f.done(f.index, nil)
			}
		}
		dones = nil
	}
	for _, e := range rd.CommittedEntries {
		idx := e.GetIndex()
		if idx <= g.applied {
			continue
		}
		f := g.inflight[idx]
		if f != nil {
			delete(g.inflight, idx)
		}
		ok := f != nil && f.term == e.GetTerm()
		switch e.GetType() {
		case pb.EntryNormal:
			if len(e.GetData()) > 0 {
				batch = append(batch, Entry{Index: idx, Term: e.GetTerm(), Data: e.GetData()})
			}
			ok = ok && f.cc == nil
		case pb.EntryConfChange, pb.EntryConfChangeV2:
			flush()
			g.applyConfChange(e)
			ok = ok && f.cc != nil
		}
		g.applied = idx
		g.sinceSnapEntries++
		g.sinceSnapBytes += int64(len(e.GetData()))
		if f != nil {
			if ok {
				dones = append(dones, f)
			} else if f.done != nil {
				flush()
				f.done(0, ErrDropped)
			}
		}
		if g.lead == g.h.self && !g.selfReady && e.GetTerm() == g.term {
			flush()
			g.selfReady = true
			g.sm.LeaderChanged(g.h.cfg.Self, g.term, true)
		}
	}
	flush()
	return nil
}

func (g *Group) applyConfChange(e *pb.Entry) {
	var cc pb.ConfChangeI
	var ctxName string
	if e.GetType() == pb.EntryConfChange {
		c := &pb.ConfChange{}
		if err := proto.Unmarshal(e.GetData(), c); err != nil {
			g.h.log.Error("qraft: bad conf change", "group", g.id, "index", e.GetIndex(), "err", err)
			return
		}
		cc = c
		if len(c.GetContext()) > 0 {
			ctxName = string(c.GetContext())
			g.h.mu.Lock()
			g.h.names[c.GetNodeId()] = ctxName
			g.h.mu.Unlock()
		}
	} else {
		c := &pb.ConfChangeV2{}
		if err := proto.Unmarshal(e.GetData(), c); err != nil {
			g.h.log.Error("qraft: bad conf change", "group", g.id, "index", e.GetIndex(), "err", err)
			return
		}
		cc = c
	}
	g.confState = g.rn.ApplyConfChange(cc)
	// A snapshot sent to a new member must list it (raft refuses one
	// that does not): snapshot now, with the new configuration.
	g.snapNow = true
}

// checkLeader notices a change of leader or term: it fails proposals that
// can no longer be known to commit, and signals the state machine.
func (g *Group) checkLeader() {
	st := g.rn.BasicStatus()
	if st.Lead == g.lead && st.GetTerm() == g.term {
		return
	}
	g.lead, g.term = st.Lead, st.GetTerm()
	g.selfReady = false
	if st.Lead != g.h.self {
		g.cancelSnapStreams()
	}
	for idx, f := range g.inflight {
		if idx > st.GetCommit() {
			delete(g.inflight, idx)
			if f.done != nil {
				f.done(0, ErrDropped)
			}
		}
	}
	if st.Lead == g.h.self {
		return // signalled once an entry of this term is applied
	}
	name := ""
	if st.Lead != raft.None {
		name = g.h.nameOf(st.Lead)
	}
	g.sm.LeaderChanged(name, st.GetTerm(), false)
}

func (g *Group) afterAdvance() {
	g.checkLeader()
	if g.snapNow || g.snapshotDue() {
		g.snapNow = false
		g.snapshot()
	}
}

// snapshotDue: SnapshotEntries or SnapshotBytes applied since the last
// snapshot, and (so that a big state, a long queue, is not rewritten for
// every few thousand small entries) at least as much log as the last
// snapshot weighed, counting each entry's bookkeeping as 64 bytes: the
// snapshots then write at most about as much as the log itself. When the
// last snapshot found three quarters or more of the entries it covered
// still live (it freed little: a growing queue), the log must weigh
// snapWeighFactor times as much: such a snapshot costs in proportion to
// the queue's length and gains little (at 1x, a queue growing by a third
// got one, and a publish-only load spent a third of the nodes' CPU
// there).
func (g *Group) snapshotDue() bool {
	if g.sinceSnapEntries < g.h.cfg.SnapshotEntries && g.sinceSnapBytes < g.h.cfg.SnapshotBytes {
		return false
	}
	return g.sinceSnapBytes+64*int64(g.sinceSnapEntries) >= g.nextSnapWeight
}

// snapWeighFactor: see snapshotDue.
const snapWeighFactor = 4

// snapshot takes a local snapshot at the applied index and compacts the
// log: entries at or below it (less KeepEntries) are dropped except the
// live ones, whose records stay.
func (g *Group) snapshot() {
	idx := g.applied
	if idx <= g.snapIndex {
		return
	}
	term, err := g.ls.Term(idx)
	if err != nil {
		g.h.log.Error("qraft: snapshot term", "group", g.id, "index", idx, "err", err)
		return
	}
	data, liveIdx := g.sm.Snapshot()
	slices.Sort(liveIdx) // usually sorted already (a queue's order): linear then
	liveIdx = slices.Compact(liveIdx)
	if n, _ := slices.BinarySearch(liveIdx, idx+1); n < len(liveIdx) {
		liveIdx = liveIdx[:n] // above the snapshot: still in the log
	}
	live, missing := g.ls.liveRefsOf(liveIdx)
	held := g.ls.heldUpTo(idx)
	for _, li := range missing {
		g.h.log.Error("qraft: state machine lists an entry the log lacks", "group", g.id, "index", li)
	}
	snap := &pb.Snapshot{Data: encodeLocal(data, live, g.memberNames()), Metadata: &pb.SnapshotMetadata{
		Index: new(idx), Term: new(term), ConfState: proto.Clone(pb.EnsureConfState(g.confState)).(*pb.ConfState)}}
	meta, err := proto.Marshal(snap)
	if err != nil {
		return
	}
	poss, err := g.h.store.Append([]rec{{Group: g.id, Index: idx, Term: term, Kind: recSnapshot, Data: meta}})
	if err != nil {
		g.h.log.Error("qraft: persist snapshot", "group", g.id, "err", err)
		return
	}
	var compactTo uint64
	if keep := uint64(g.h.cfg.KeepEntries); idx > keep {
		compactTo = idx - keep
	}
	g.h.afterSync = append(g.h.afterSync, g.ls.createSnapshot(snap, poss[0], live, compactTo)...)
	g.snapIndex = idx
	g.sinceSnapEntries, g.sinceSnapBytes = 0, 0
	g.nextSnapWeight = int64(len(data)) + 16*int64(len(live))
	if 4*len(live) >= 3*held {
		g.nextSnapWeight *= snapWeighFactor // it freed less than a quarter
	}
	g.h.st.snaps.Add(1)
}

func (g *Group) memberNames() map[uint64]string {
	out := map[uint64]string{}
	g.h.mu.Lock()
	defer g.h.mu.Unlock()
	for _, id := range g.confState.GetVoters() {
		out[id] = g.h.names[id]
	}
	for _, id := range g.confState.GetLearners() {
		out[id] = g.h.names[id]
	}
	return out
}

// tick advances an active group's clock; a leader's idle group quiesces
// instead. It reports whether the group may have a Ready.
func (g *Group) tick() bool {
	if g.stoppedLoop || g.quiesced {
		return false
	}
	g.checkSnapStreams()
	if g.maybeQuiesce() {
		return true
	}
	g.rn.Tick()
	return true
}

func (g *Group) maybeQuiesce() bool {
	if g.h.cfg.QuiesceTicks < 0 {
		return false
	}
	st := g.rn.BasicStatus()
	reset := func() bool { g.idleTicks = 0; return false }
	if st.RaftState != raft.StateLeader || st.LeadTransferee != raft.None || len(g.inflight) > 0 || g.rn.HasReady() {
		return reset()
	}
	last, _ := g.ls.LastIndex()
	if st.GetCommit() != last || g.applied != last {
		return reset()
	}
	followers, ok := raftpeer.Followers(g.rn, g.h.self, last, g.confState.GetVoters(), func(id uint64) bool {
		n := g.h.loopName(id)
		return n != "" && g.h.isOnline(n)
	})
	if !ok {
		return reset()
	}
	if st.GetCommit() != g.idleCommit {
		g.idleCommit = st.GetCommit()
		g.idleTicks = 0
	}
	g.idleTicks++
	if g.idleTicks < g.h.cfg.QuiesceTicks {
		return false
	}
	g.quiesced = true
	g.quiescedFlag.Store(true)
	for _, f := range followers {
		g.h.batcherFor(g.h.loopName(f)).addQuiesce(g.id, st.GetTerm(), st.GetCommit())
	}
	return true
}

// peerEvent wakes the group when node's state matters to it.
func (g *Group) peerEvent(node uint64, up bool) bool {
	if g.stoppedLoop {
		return false
	}
	st := g.rn.BasicStatus()
	if !up && st.Lead == node && st.RaftState == raft.StateFollower {
		g.leaderDown(st.GetTerm(), node)
		return true
	}
	if !g.quiesced {
		return false
	}
	if st.RaftState == raft.StateLeader && g.isMember(node) {
		// Up: catch the member up. Down: tick again, so that CheckQuorum
		// makes a leader cut off from its quorum step down (and say so).
		g.wake()
		return true
	}
	return false
}

// leaderDown: the transport reports the node of this follower's leader
// down (in term). The follower forgets its leader at once and campaigns
// after a short delay spread by node, instead of waiting out the election
// timeout (1-2 s; a quiesced group does not even tick).
//
// Safety: the report comes from this node's link alone, so a cut link
// (this follower partitioned away) must not disrupt a healthy leader.
// PreVote and CheckQuorum stay on: the campaign is a pre-vote, which a
// member still hearing from the leader refuses (it has not forgotten it:
// its lease holds), so the term moves only where a majority lost the
// leader too. Forgetting is what lets the followers that did lose it
// grant each other's pre-votes now rather than an election timeout later
// (raft's ForgetLeader, made for an external failure detector); a
// follower that hears from the leader again simply follows it again.
func (g *Group) leaderDown(term, leader uint64) {
	g.wake()
	_ = g.rn.ForgetLeader()
	d := raftpeer.CampaignDelay(g.id, g.h.self, leader, g.confState.GetVoters())
	time.AfterFunc(d, func() {
		_ = g.do(func() {
			st := g.rn.BasicStatus()
			if st.RaftState != raft.StateFollower || st.Lead != raft.None || st.GetTerm() != term {
				return // a leader (or an election) came first
			}
			g.wake()
			_ = g.rn.Campaign()
		})
	})
}

func (g *Group) isMember(id uint64) bool {
	for _, v := range g.confState.GetVoters() {
		if v == id {
			return true
		}
	}
	for _, v := range g.confState.GetLearners() {
		if v == id {
			return true
		}
	}
	return false
}

// failPending fails every proposal not known to be applied.
func (g *Group) failPending(err error) {
	for idx, f := range g.inflight {
		delete(g.inflight, idx)
		if f.done != nil {
			f.done(0, err)
		}
	}
	for _, f := range g.newProps {
		if f.done != nil {
			f.done(0, err)
		}
	}
	g.newProps = nil
	g.mu.Lock()
	props := g.props
	g.props = nil
	g.mu.Unlock()
	for _, f := range props {
		if f.done != nil {
			f.done(0, err)
		}
	}
}

func roleName(s raft.StateType) string {
	switch s {
	case raft.StateLeader:
		return "leader"
	case raft.StateCandidate:
		return "candidate"
	case raft.StatePreCandidate:
		return "precandidate"
	default:
		return "follower"
	}
}

// updateStatus publishes the group's state for Status and Leader.
func (g *Group) updateStatus() {
	if g.stoppedLoop {
		return
	}
	st := g.rn.BasicStatus()
	last, _ := g.ls.LastIndex()
	first, _ := g.ls.FirstIndex()
	s := GroupStatus{
		ID: g.id, Role: roleName(st.RaftState), Term: st.GetTerm(), Commit: st.GetCommit(), Applied: g.applied,
		LastIndex: last, SnapshotIndex: g.snapIndex, Quiesced: g.quiesced,
	}
	g.h.mu.Lock()
	if st.Lead != raft.None {
		s.Leader = g.h.names[st.Lead]
	}
	for _, id := range g.confState.GetVoters() {
		n := g.h.names[id]
		s.Members = append(s.Members, n)
		if n == g.h.cfg.Self || !g.h.offline[n] {
			s.Online = append(s.Online, n)
		}
	}
	g.h.mu.Unlock()
	sort.Strings(s.Members)
	sort.Strings(s.Online)
	if last >= first {
		s.LogEntries = last - first + 1
	}
	ln, lb := g.ls.liveBelow()
	s.LogEntries += ln
	s.LogBytes += lb
	s.LogBytes += g.sinceSnapBytes
	g.mu.Lock()
	g.status = s
	g.mu.Unlock()
}
