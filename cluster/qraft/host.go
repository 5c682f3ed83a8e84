package qraft

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/cluster/meta"
	"github.com/warrenmq/warren/cluster/qraft/wal"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"
)

var (
	// ErrNotLeader: this node does not lead the group (or a leadership
	// transfer is under way); the proposal is in no log.
	ErrNotLeader = errors.New("qraft: not the group's leader")
	// ErrDropped: the leadership changed before the entry was seen
	// committed: it may or may not commit later (outcome unknown).
	ErrDropped = errors.New("qraft: proposal dropped (leader changed; outcome unknown)")
	// ErrBusy: the leader's uncommitted log is full (MaxUncommitted):
	// the proposal is in no log; try again once entries commit.
	ErrBusy = errors.New("qraft: the leader's uncommitted log is full")
	// ErrClosed: the host or the group stopped.
	ErrClosed = errors.New("qraft: closed")
	// ErrNotFound: no such entry (compacted and not live, or never
	// written), or no such group.
	ErrNotFound = errors.New("qraft: not found")
)

// Config configures a Host.
type Config struct {
	Self string                            // this node's name
	Dir  string                            // the log directory (<data>/qraft)
	Send func(to string, msg []byte) error // must not block (transport.Send on the qraft service)
	// SendBulk sends a part of a snapshot stream: it waits while the
	// link's queue is full (until ctx is done) and fails when the node
	// cannot be reached (transport.SendWait on a lane of its own, after
	// the data plane's). nil: snapshots go whole, on Send.
	SendBulk func(ctx context.Context, to string, msg []byte) error
	Logger   *slog.Logger
	// TickInterval is the raft tick (default 100ms); elections after
	// ElectionTicks (10) ticks without a leader, heartbeats every tick.
	TickInterval time.Duration
	// SnapshotEntries and SnapshotBytes trigger a snapshot of a group
	// (default 4096 entries, 16 MiB applied since the last one).
	SnapshotEntries uint64
	SnapshotBytes   int64
	// KeepEntries applied entries stay in the raft log below a snapshot,
	// for followers lagging a little (default 256; negative: none).
	KeepEntries int
	// QuiesceTicks is how many ticks a leader's group must be idle (every
	// online member caught up, nothing pending) before it quiesces
	// (default 3; negative: never quiesce).
	QuiesceTicks int
	// SegmentSize is the WAL's segment size (default 64 MiB).
	SegmentSize int64
	NoSync      bool // tests and benchmarks only
	// ForceAlone makes this node the only member of every group it has
	// (recovery from a lost majority: see force.go). Once only.
	ForceAlone bool

	// manualTicks (tests): no ticker; the loop ticks when tickNow is
	// called.
	manualTicks bool
	// wrapStore (tests) wraps the log store.
	wrapStore func(logStore) logStore
}

const (
	electionTicks  = 10
	heartbeatTicks = 1
	// MaxUncommitted bounds the bytes of entries a group's leader has
	// appended but not seen committed (issue 22: a leader that cannot
	// reach a quorum, or whose followers lag, does not grow its log
	// without end); proposals beyond it fail with ErrBusy. One entry
	// larger than the bound is taken when nothing else is uncommitted.
	MaxUncommitted = 16 << 20
)

// NodeID is a node's raft id in every group: the metadata group's id for
// it (meta.NodeID), so a node is the same id in every group.
func NodeID(name string) uint64 { return meta.NodeID(name) }

// HostStats are the host's counters.
type HostStats struct {
	Groups      int
	Quiesced    int
	Syncs       uint64 // fdatasyncs of the WAL
	Appends     uint64 // records appended
	LogBytes    int64  // bytes in the WAL's files
	LiveBytes   int64  // of which still needed
	Segments    int
	Compactions uint64 // WAL compactions run
	Moved       uint64 // records the WAL's compactions copied
	Cycles      uint64 // loop cycles that handled at least one Ready
	Batches     uint64 // transport messages sent (one per peer per cycle, or more when large)
	RaftMsgs    uint64 // raft messages sent inside them
	Proposals   uint64
	Snapshots   uint64 // local snapshots taken
	SnapsSent   uint64
	SnapsIn     uint64 // snapshots installed from a leader
	SendErrors  uint64
	DroppedMsgs uint64 // received for an unknown group
	Busy        uint64 // proposals refused with ErrBusy (MaxUncommitted)
}

// Host drives every raft group of this node from one loop.
type Host struct {
	cfg   Config
	log   *slog.Logger
	self  uint64
	store logStore

	mu             sync.Mutex
	groups         map[uint64]*Group
	rec            map[uint64]*recovered // recovered from the store, not started yet
	dirty          []*Group
	peerEv         []peerEvent
	names          map[uint64]string
	offline        map[string]bool // peers the transport reported down
	closed         bool
	pendingDeletes []pendingDelete
	forced         map[uint64][]string // ForceAlone: group -> the members removed
	crashing       bool                // close(crash): the loop ends without a last cycle
	stopping       map[uint64]*Group   // stopped, not yet let go by the loop
	tombs          map[uint64]recPos   // deleted groups' tombstones still referenced
	chunks         map[chunkKey]*chunkBuf
	afterSync      []recPos // records to release once the next sync is done
	// lazy: how many of afterSync wait for a sync that is not urgent
	// (records superseded by a commit-only hard state that was appended
	// without a sync); unsynced: records were appended since the last
	// sync (the next tick syncs them).
	lazy     int
	unsynced bool

	// snapshot streams (snapstream.go): cancelled and waited for at close
	streamCtx    context.Context
	streamCancel context.CancelFunc
	streamWG     sync.WaitGroup

	notify chan struct{}
	tickc  chan struct{} // manualTicks only
	stopc  chan struct{}
	donec  chan struct{}
	once   sync.Once

	// loop-only
	tickN     uint64
	batches   map[string]*batcher
	chunkSize int
	loopNames map[uint64]string

	st struct {
		cycles, batches, raftMsgs, proposals, snaps, snapsSent, snapsIn, sendErrs, dropped, compactions, busy atomic.Uint64
	}
}

type peerEvent struct {
	node string
	up   bool
}

// recovered is one group's state read back from the store (or kept by
// StopGroup for a later StartGroup).
type recovered struct {
	ls          *logStorage
	names       map[uint64]string
	pendingLive []liveRef          // replay: live entries of a snapshot being installed
	orphans     map[uint64]liveRef // replay: entries cut off by a gap (see appendReplay)
}

// Open opens the log store in cfg.Dir and reads every group's state
// back; groups start driving when StartGroup is called for them.
func Open(cfg Config) (*Host, error) {
	if cfg.Self == "" || cfg.Dir == "" || cfg.Send == nil {
		return nil, errors.New("qraft: Config needs Self, Dir and Send")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.TickInterval <= 0 {
		cfg.TickInterval = 100 * time.Millisecond
	}
	if cfg.SnapshotEntries == 0 {
		cfg.SnapshotEntries = 4096
	}
	if cfg.SnapshotBytes == 0 {
		cfg.SnapshotBytes = 16 << 20
	}
	if cfg.KeepEntries == 0 {
		cfg.KeepEntries = 256
	} else if cfg.KeepEntries < 0 {
		cfg.KeepEntries = 0
	}
	if cfg.QuiesceTicks == 0 {
		cfg.QuiesceTicks = 3
	}
	st, err := wal.Open(wal.Options{Dir: cfg.Dir, SegmentSize: cfg.SegmentSize, NoSync: cfg.NoSync, Logger: cfg.Logger,
		CompactMaxBytes: 8 << 20})
	if err != nil {
		return nil, fmt.Errorf("qraft: open the WAL: %w", err)
	}
	var ls logStore = st
	if cfg.wrapStore != nil {
		ls = cfg.wrapStore(st)
	}
	h := &Host{
		cfg:       cfg,
		log:       cfg.Logger.With("component", "qraft"),
		self:      NodeID(cfg.Self),
		store:     ls,
		groups:    map[uint64]*Group{},
		rec:       map[uint64]*recovered{},
		names:     map[uint64]string{},
		offline:   map[string]bool{},
		stopping:  map[uint64]*Group{},
		tombs:     map[uint64]recPos{},
		chunks:    map[chunkKey]*chunkBuf{},
		notify:    make(chan struct{}, 1),
		stopc:     make(chan struct{}),
		donec:     make(chan struct{}),
		batches:   map[string]*batcher{},
		loopNames: map[uint64]string{},
		chunkSize: defaultChunkSize,
	}
	if cfg.manualTicks {
		h.tickc = make(chan struct{})
	}
	h.streamCtx, h.streamCancel = context.WithCancel(context.Background())
	h.names[h.self] = cfg.Self
	if err := h.recover(); err != nil {
		st.Close()
		return nil, err
	}
	h.forced = map[uint64][]string{}
	if cfg.ForceAlone {
		if err := h.forceAlone(); err != nil {
			st.Close()
			return nil, err
		}
	}
	go h.run()
	return h, nil
}

// recover replays the store into each group's storage. Every replayed
// record starts referenced once; the ones no group needs any more are
// released once the replay is done.
func (h *Host) recover() error {
	var release []recPos
	get := func(g uint64) *recovered {
		r := h.rec[g]
		if r == nil {
			r = &recovered{ls: newLogStorage(h.store, g), names: map[uint64]string{}, orphans: map[uint64]liveRef{}}
			h.rec[g] = r
		}
		return r
	}
	err := h.store.Replay(func(p recPos, x rec) error {
		switch x.Kind {
		case recEntry, recConf, recConfV2:
			r := get(x.Group)
			release = append(release, r.ls.appendReplay(x.Index, x.Term, x.Kind, uint32(len(x.Data)), p, r.orphans)...)
		case recLive:
			r := get(x.Group)
			r.pendingLive = append(r.pendingLive, liveRef{index: x.Index, term: x.Term, pos: p, size: uint32(len(x.Data))})
		case recHardState:
			hs := &pb.HardState{}
			if err := proto.Unmarshal(x.Data, hs); err != nil {
				return fmt.Errorf("qraft: group %d hard state: %w", x.Group, err)
			}
			release = append(release, get(x.Group).ls.setHardState(hs, p)...)
		case recSnapshot, recSnapInstall:
			s := &pb.Snapshot{}
			if err := proto.Unmarshal(x.Data, s); err != nil {
				return fmt.Errorf("qraft: group %d snapshot: %w", x.Group, err)
			}
			sd, err := decodeSnapData(s.GetData())
			if err != nil {
				return fmt.Errorf("qraft: group %d snapshot: %w", x.Group, err)
			}
			r := get(x.Group)
			pending := map[uint64]liveRef{}
			for _, l := range r.pendingLive {
				pending[l.index] = l
			}
			r.pendingLive = nil
			var live []liveRef
			for _, l := range sd.live {
				if ref, ok := pending[l.index]; ok {
					live = append(live, ref)
					delete(pending, l.index)
				} else if ref, ok := r.ls.liveRefOf(l.index); ok {
					live = append(live, ref)
				} else if ref, ok := r.orphans[l.index]; ok {
					live = append(live, ref)
					delete(r.orphans, l.index)
				}
			}
			for _, ref := range pending {
				release = append(release, ref.pos)
			}
			for i, ref := range r.orphans {
				if i <= s.GetMetadata().GetIndex() {
					release = append(release, ref.pos)
					delete(r.orphans, i)
				}
			}
			release = append(release, r.ls.replaySnapshot(s, p, live, x.Kind == recSnapInstall)...)
			for id, n := range sd.names {
				r.names[id] = n
			}
		case recDelete:
			// Records after a tombstone belong to the group again (a member
			// removed, then added back on this node): a fresh state.
			if r := h.rec[x.Group]; r != nil {
				release = append(release, r.ls.allRecords()...)
				for _, l := range r.pendingLive {
					release = append(release, l.pos)
				}
				for _, l := range r.orphans {
					release = append(release, l.pos)
				}
				delete(h.rec, x.Group)
				if old, ok := h.tombs[x.Group]; ok {
					release = append(release, old) // this one covers more
				}
				h.tombs[x.Group] = p
			} else if old, ok := h.tombs[x.Group]; ok {
				release = append(release, old)
				h.tombs[x.Group] = p
			} else {
				// Nothing of the group is left before its tombstone: the
				// tombstone itself is no longer needed.
				release = append(release, p)
			}
		default:
			release = append(release, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, r := range h.rec {
		for _, l := range r.pendingLive {
			release = append(release, l.pos)
		}
		for _, l := range r.orphans {
			release = append(release, l.pos)
		}
		r.pendingLive, r.orphans = nil, nil
	}
	for _, p := range release {
		h.store.Release(p)
	}
	return nil
}

// Step hands the host a batch another node sent. It never blocks on the
// loop: the items are queued on their groups.
func (h *Host) Step(from string, msg []byte) {
	items, err := decodeBatch(msg)
	if err != nil {
		h.log.Warn("qraft: malformed batch", "from", from, "err", err)
	}
	fromID := NodeID(from)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	if _, ok := h.names[fromID]; !ok {
		h.names[fromID] = from
	}
	for i := range items {
		it := &items[i]
		if it.kind == itemChunk {
			m, err := reassemble(h.chunks, from, it)
			if err != nil {
				h.log.Warn("qraft: malformed chunked message", "from", from, "err", err)
			}
			if m == nil {
				continue
			}
			it.kind, it.msg, it.part = itemRaft, m, nil
		}
		if it.kind == itemRaft && (it.msg.GetFrom() != fromID || it.msg.GetTo() != h.self) {
			continue
		}
		g := h.groups[it.group]
		if g == nil {
			h.st.dropped.Add(1)
			continue
		}
		g.mu.Lock()
		g.inbox = append(g.inbox, inItem{from: from, wireItem: *it})
		g.mu.Unlock()
		h.markDirtyLocked(g)
	}
	h.signal()
}

// PeerState tells the host that the transport saw a node go down or come
// up. Followers whose leader is on a node that went down wake, forget
// it and campaign after a short delay (Group.leaderDown); leaders wake
// the groups a node that came up belongs to, to catch it up.
func (h *Host) PeerState(node string, up bool) {
	h.mu.Lock()
	if up {
		delete(h.offline, node)
	} else {
		h.offline[node] = true
	}
	h.peerEv = append(h.peerEv, peerEvent{node, up})
	h.mu.Unlock()
	h.signal()
}

func (h *Host) signal() {
	select {
	case h.notify <- struct{}{}:
	default:
	}
}

func (h *Host) markDirtyLocked(g *Group) {
	if !g.dirty {
		g.dirty = true
		h.dirty = append(h.dirty, g)
	}
}

func (h *Host) markDirty(g *Group) {
	h.mu.Lock()
	h.markDirtyLocked(g)
	h.mu.Unlock()
	h.signal()
}

func (h *Host) nameOf(id uint64) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.names[id]
}

// loopName is nameOf for the loop, through a cache (a node id's name
// never changes).
func (h *Host) loopName(id uint64) string {
	if n, ok := h.loopNames[id]; ok {
		return n
	}
	n := h.nameOf(id)
	if n != "" {
		h.loopNames[id] = n
	}
	return n
}

func (h *Host) isOnline(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.offline[name]
}

// Groups lists the groups being driven.
func (h *Host) Groups() []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]uint64, 0, len(h.groups))
	for id := range h.groups {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Group returns a started group, or nil.
func (h *Host) Group(id uint64) *Group {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.groups[id]
}

// Stats returns the host's counters.
func (h *Host) Stats() HostStats {
	ss := h.store.Stats()
	out := HostStats{
		Syncs: ss.Syncs, Appends: ss.Appends, LogBytes: ss.Bytes, LiveBytes: ss.LiveBytes, Segments: ss.Segments,
		Compactions: h.st.compactions.Load(), Moved: ss.Moved,
		Cycles: h.st.cycles.Load(), Batches: h.st.batches.Load(), RaftMsgs: h.st.raftMsgs.Load(),
		Proposals: h.st.proposals.Load(), Snapshots: h.st.snaps.Load(), SnapsSent: h.st.snapsSent.Load(),
		SnapsIn: h.st.snapsIn.Load(), SendErrors: h.st.sendErrs.Load(), DroppedMsgs: h.st.dropped.Load(), Busy: h.st.busy.Load(),
	}
	h.mu.Lock()
	gs := make([]*Group, 0, len(h.groups))
	for _, g := range h.groups {
		gs = append(gs, g)
	}
	h.mu.Unlock()
	out.Groups = len(gs)
	for _, g := range gs {
		if g.quiescedFlag.Load() {
			out.Quiesced++
		}
	}
	return out
}

// StartGroup starts driving group id with sm. When the store holds the
// group's log, it is recovered (members is then ignored) and the
// committed entries above its snapshot are applied again; otherwise the
// group is bootstrapped with members (this node must be one), or with
// join it starts empty and waits for its leader (a member added later).
func (h *Host) StartGroup(id uint64, members []string, sm StateMachine, join bool) (*Group, error) {
	if sm == nil {
		return nil, errors.New("qraft: StartGroup needs a StateMachine")
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	if h.groups[id] != nil {
		h.mu.Unlock()
		return nil, fmt.Errorf("qraft: group %d already started", id)
	}
	for h.stopping[id] != nil {
		old := h.stopping[id]
		h.mu.Unlock()
		select {
		case <-old.stoppedc:
		case <-h.donec:
			return nil, ErrClosed
		}
		h.mu.Lock()
	}
	r := h.rec[id]
	delete(h.rec, id)
	for _, m := range members {
		h.names[NodeID(m)] = m
	}
	if r != nil {
		for nid, n := range r.names {
			h.names[nid] = n
		}
	}
	h.mu.Unlock()
	g, err := newGroup(h, id, members, sm, join, r)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	h.groups[id] = g
	h.markDirtyLocked(g)
	h.mu.Unlock()
	h.signal()
	return g, nil
}

// StopGroup stops driving the group (this node is shutting the queue
// down); its log stays. Waiting proposals fail with ErrClosed.
func (h *Host) StopGroup(id uint64) { h.stopGroup(id, false) }

// DeleteGroup stops the group and drops its log (the queue was deleted,
// or this node was removed from the group).
func (h *Host) DeleteGroup(id uint64) { h.stopGroup(id, true) }

func (h *Host) stopGroup(id uint64, del bool) {
	h.mu.Lock()
	g := h.groups[id]
	if g != nil {
		delete(h.groups, id)
		h.stopping[id] = g
	} else {
		g = h.stopping[id] // a stop the loop has not handled yet
	}
	if g != nil {
		g.mu.Lock()
		g.stopped = true
		if del {
			g.deleted = true
		}
		g.mu.Unlock()
	} else if del {
		// Not started here (recovered only, or unknown): its records go
		// once its tombstone is synced.
		h.pendingDeletes = append(h.pendingDeletes, pendingDelete{id: id, r: h.rec[id]})
		delete(h.rec, id)
	}
	h.mu.Unlock()
	if g != nil {
		h.markDirty(g)
	} else {
		h.signal()
	}
}

type pendingDelete struct {
	id uint64
	r  *recovered
}

// Close stops the loop and closes the store (synced). Waiting proposals
// fail with ErrClosed.
func (h *Host) Close() error { return h.close(false) }

// crash stops the loop and closes the store without flushing what was
// not synced (tests).
func (h *Host) crash() error { return h.close(true) }

func (h *Host) close(crash bool) error {
	var err error
	h.once.Do(func() {
		h.mu.Lock()
		h.closed = true
		h.crashing = crash
		h.mu.Unlock()
		close(h.stopc)
		h.streamCancel()
		h.streamWG.Wait()
		<-h.donec
		if crash {
			err = h.store.CrashForTest()
		} else {
			err = h.store.Close()
		}
	})
	return err
}

// ---- the loop ----

func (h *Host) run() {
	ticker := time.NewTicker(h.cfg.TickInterval)
	defer ticker.Stop()
	tickerC := ticker.C
	if h.tickc != nil {
		tickerC = nil
	}
	defer close(h.donec)
	defer h.failAll()
	for {
		tick := false
		select {
		case <-h.stopc:
			// A clean close does what is pending first: stops and deletes
			// asked for just before (their tombstones), appends, syncs.
			h.mu.Lock()
			crash := h.crashing
			h.mu.Unlock()
			if !crash {
				if err := h.cycle(false); err == nil && h.unsynced {
					_ = h.sync()
				}
			}
			return
		case <-h.notify:
		case <-tickerC:
			tick = true
		case <-h.tickc:
			tick = true
		}
		if err := h.cycle(tick); err != nil {
			h.log.Error("qraft: host loop stopped", "err", err)
			return
		}
		if tick && h.unsynced {
			// Commit-only hard states appended without a sync: make them
			// (and the release of what they superseded) durable now.
			if err := h.sync(); err != nil {
				h.log.Error("qraft: host loop stopped", "err", err)
				return
			}
		}
		if tick && h.tickN%compactEveryTicks == 0 {
			h.compact()
		}
	}
}

// tickNow makes the loop of a manualTicks host tick once (tests).
func (h *Host) tickNow() {
	select {
	case h.tickc <- struct{}{}:
	case <-h.donec:
	}
}

// compactEveryTicks: how often the loop checks whether the WAL has
// segments worth compacting.
const compactEveryTicks = 10

// compact runs one bounded WAL compaction on the loop (nothing else moves
// positions meanwhile: every position the host holds is in a group's
// storage or a tombstone, and each move updates it).
func (h *Host) compact() {
	if h.store.Stats().Compactable == 0 {
		return
	}
	h.mu.Lock()
	owners := make(map[uint64]*logStorage, len(h.groups)+len(h.rec)+len(h.stopping))
	for id, r := range h.rec {
		owners[id] = r.ls
	}
	for id, g := range h.stopping {
		owners[id] = g.ls
	}
	for id, g := range h.groups {
		owners[id] = g.ls
	}
	h.mu.Unlock()
	cs, err := h.store.Compact(func(old, nw recPos, r rec) {
		if r.Kind == recDelete {
			h.mu.Lock()
			if h.tombs[r.Group] == old {
				h.tombs[r.Group] = nw
			}
			h.mu.Unlock()
			return
		}
		if ls := owners[r.Group]; ls != nil {
			ls.moved(old, nw, r)
		}
	})
	if err != nil {
		h.log.Error("qraft: WAL compaction", "err", err)
		return
	}
	h.st.compactions.Add(1)
	h.log.Debug("qraft: WAL compacted", "segments", cs.Segments, "moved", cs.Moved, "freed", cs.FreedBytes)
}

func (h *Host) failAll() {
	h.mu.Lock()
	gs := make([]*Group, 0, len(h.groups))
	for _, g := range h.groups {
		gs = append(gs, g)
	}
	h.mu.Unlock()
	for _, g := range gs {
		g.failPending(ErrClosed)
	}
}

// cycle runs one pass: input, ticks, then Ready batches until quiet.
func (h *Host) cycle(tick bool) error {
	h.mu.Lock()
	dirty := h.dirty
	h.dirty = nil
	for _, g := range dirty {
		g.dirty = false
	}
	evs := h.peerEv
	h.peerEv = nil
	dels := h.pendingDeletes
	h.pendingDeletes = nil
	var all []*Group
	if tick || len(evs) > 0 {
		all = make([]*Group, 0, len(h.groups))
		for _, g := range h.groups {
			all = append(all, g)
		}
	}
	h.mu.Unlock()

	var extra []rec
	for _, d := range dels {
		extra = append(extra, rec{Group: d.id, Kind: recDelete})
		if d.r != nil {
			h.afterSync = append(h.afterSync, d.r.ls.allRecords()...)
		}
	}

	touched := make(map[*Group]bool, len(dirty))
	for _, g := range dirty {
		if g.handleInput(&extra) {
			touched[g] = true
		}
	}
	for _, ev := range evs {
		nid := NodeID(ev.node)
		for _, g := range all {
			if g.peerEvent(nid, ev.up) {
				touched[g] = true
			}
		}
	}
	if tick {
		h.tickN++
		for _, g := range all {
			if g.tick() {
				touched[g] = true
			}
		}
	}
	if len(touched) == 0 && len(extra) == 0 {
		return nil
	}
	gs := make([]*Group, 0, len(touched))
	for g := range touched {
		gs = append(gs, g)
	}
	for round := 0; ; round++ {
		var ready []*Group
		for _, g := range gs {
			if g.rn.HasReady() {
				ready = append(ready, g)
			}
		}
		if len(ready) == 0 && len(extra) == 0 {
			break
		}
		if err := h.handleReadies(ready, extra); err != nil {
			return err
		}
		extra = nil
		if round > 64 {
			h.signal() // more next time round
			break
		}
	}
	for _, g := range gs {
		g.updateStatus()
	}
	if len(h.afterSync) > h.lazy {
		if err := h.sync(); err != nil {
			return err
		}
	}
	// Any batches left (quiesce items without a Ready) go out now.
	h.flushSends()
	return nil
}

// handleReadies persists every group's Ready in one store batch with one
// sync, sends the messages batched per peer, applies, and advances.
//
// Three things keep the sync off the critical path where raft allows it:
//   - Messages that do not vouch for this node's persisted state (a
//     leader's appends and heartbeats, vote requests: everything but
//     MsgAppResp, MsgVoteResp and MsgPreVoteResp) go out before the
//     append and its sync, so that a leader writes its entries in
//     parallel with its followers (Raft thesis 10.2.1; raft counts the
//     leader's own copy only after Advance, i.e. after the sync). The
//     responses go out after the sync.
//   - Committed entries already in this node's log are applied before
//     the sync (canApplyEarly).
//   - A batch whose Readies need no sync (raft's MustSync: no entries, no
//     term or vote change, no snapshot: a commit index moving) is
//     appended without one: the commit index is not needed for safety
//     (it is learnt again from the leader), and the records it
//     supersedes are released only after a later sync (the next batch
//     that needs one, or the next tick).
func (h *Host) handleReadies(gs []*Group, extra []rec) error {
	h.st.cycles.Add(1)
	rds := make([]raft.Ready, len(gs))
	n := len(extra)
	for i, g := range gs {
		rds[i] = g.rn.Ready()
		n += len(rds[i].Entries) + 2
	}
	recs := append(make([]rec, 0, n), extra...)
	mustSync := len(extra) > 0
	for i, g := range gs {
		g.matchProposals(&rds[i])
		var err error
		recs, err = g.persistRecords(recs, &rds[i])
		if err != nil {
			return err
		}
		if rds[i].MustSync || !raft.IsEmptySnap(rds[i].Snapshot) {
			mustSync = true
		}
	}
	late := make([][]*pb.Message, len(gs))
	sendEarly := false
	for i, g := range gs {
		var now []*pb.Message
		now, late[i] = splitAfterPersist(rds[i].Messages)
		if len(now) > 0 {
			g.queueMessages(now)
			sendEarly = true
		}
	}
	if sendEarly {
		h.flushSends()
	}
	// Entries committed and already in this node's log (a leader's,
	// always: it counts its own copy only once synced) are applied before
	// this batch's sync, so that their proposers hear of them without
	// waiting for the sync of the entries proposed since.
	early := make([]bool, len(gs))
	for i, g := range gs {
		if g.canApplyEarly(&rds[i]) {
			if err := g.applyReady(&rds[i]); err != nil {
				return err
			}
			early[i] = true
		}
	}
	var poss []recPos
	synced := false
	if len(recs) > 0 {
		var err error
		if poss, err = h.store.Append(recs); err != nil {
			return fmt.Errorf("qraft: append: %w", err)
		}
		if mustSync {
			if err := h.sync(); err != nil {
				return err
			}
			synced = true
		} else {
			h.unsynced = true
		}
	}
	for i, g := range gs {
		if err := g.storeReady(&rds[i], poss, synced || len(recs) == 0); err != nil {
			return err
		}
	}
	for i, g := range gs {
		g.queueMessages(late[i])
	}
	h.flushSends()
	for i, g := range gs {
		if !early[i] {
			if err := g.applyReady(&rds[i]); err != nil {
				return err
			}
		}
		g.ls.uncache(g.applied)
		g.rn.Advance(rds[i])
		g.afterAdvance()
	}
	return nil
}

// splitAfterPersist splits a Ready's messages into those that may go
// before its state is persisted and the responses that must wait for it
// (raft's msgsAfterAppend: they vouch for a persisted append or vote).
func splitAfterPersist(msgs []*pb.Message) (now, after []*pb.Message) {
	for i, m := range msgs {
		switch m.GetType() {
		case pb.MsgAppResp, pb.MsgVoteResp, pb.MsgPreVoteResp:
			if now == nil {
				now = msgs[:i:i]
			}
			after = append(after, m)
		default:
			if after != nil {
				now = append(now, m)
			}
		}
	}
	if after == nil {
		return msgs, nil
	}
	return now, after
}

// sync syncs the store and then releases the records that waited for it.
func (h *Host) sync() error {
	if err := h.store.Sync(); err != nil {
		return fmt.Errorf("qraft: sync: %w", err)
	}
	for _, p := range h.afterSync {
		h.store.Release(p)
	}
	h.afterSync = h.afterSync[:0]
	h.lazy = 0
	h.unsynced = false
	return nil
}

// releaseSuperseded releases records a Ready superseded: at once when
// the Ready was synced (or wrote nothing), else after the next sync (a
// superseded hard state must not go before its successor is durable).
func (h *Host) releaseSuperseded(old []recPos, synced bool) {
	if synced {
		for _, p := range old {
			h.store.Release(p)
		}
		return
	}
	h.afterSync = append(h.afterSync, old...)
	h.lazy += len(old)
}

func (h *Host) batcherFor(peer string) *batcher {
	b := h.batches[peer]
	if b == nil {
		b = &batcher{chunk: h.chunkSize}
		h.batches[peer] = b
	}
	return b
}

func (h *Host) flushSends() {
	for peer, b := range h.batches {
		groups := b.groups
		bufs := b.finish()
		delete(h.batches, peer)
		for _, buf := range bufs {
			h.st.batches.Add(1)
			if err := h.cfg.Send(peer, buf); err != nil {
				h.st.sendErrs.Add(1)
				h.log.Debug("qraft: send failed", "to", peer, "err", err)
				h.reportUnreachable(peer, groups)
				break
			}
		}
	}
}

func (h *Host) reportUnreachable(peer string, groups []uint64) {
	id := NodeID(peer)
	h.mu.Lock()
	gs := make([]*Group, 0, len(groups))
	for _, gid := range groups {
		if g := h.groups[gid]; g != nil {
			gs = append(gs, g)
		}
	}
	h.mu.Unlock()
	for _, g := range gs {
		if g.rn != nil {
			g.rn.ReportUnreachable(id)
		}
	}
}

var _ = tracker.Progress{}
