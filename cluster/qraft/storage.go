package qraft

import (
	"fmt"
	"sort"
	"sync"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// entMeta is one entry of a group's raft log: where its record is, and
// its body while it may still be needed soon (not yet applied, or in the
// recent tail); older bodies are read back from the store on demand.
type entMeta struct {
	term uint64
	pos  recPos
	size uint32
	typ  byte // a rec kind: recEntry, recConf, recConfV2
	ent  *pb.Entry
}

// liveRef is a live entry kept below the raft log (its body in the store).
type liveRef struct {
	index, term uint64
	pos         recPos
	size        uint32
}

// logStorage is a group's raft.Storage over the node-wide store: the
// entries' metadata in memory, the bodies in the store. ents[0] is a
// dummy at the compaction point (as in raft.MemoryStorage).
type logStorage struct {
	store logStore
	group uint64

	mu       sync.Mutex
	hs       *pb.HardState
	hsPos    recPos
	hasHS    bool
	snap     *pb.Snapshot // the latest snapshot (local form, no bodies)
	snapPos  recPos
	hasSnap  bool
	ents     []entMeta
	first    uint64 // index of ents[0] (the dummy)
	cacheLo  uint64 // bodies at or below are dropped from the cache
	live     []liveRef
	liveSize int64
	// incoming: the live entries of snapshot stream inID received so far
	// (persisted, index order), until its MsgSnap installs them.
	inID     uint64
	incoming []liveRef
}

func newLogStorage(store logStore, group uint64) *logStorage {
	return &logStorage{store: store, group: group, hs: &pb.HardState{}, snap: pb.EnsureSnapshot(nil), ents: []entMeta{{}}}
}

// InitialState implements raft.Storage.
func (s *logStorage) InitialState() (*pb.HardState, *pb.ConfState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hs, pb.EnsureConfState(s.snap.GetMetadata().GetConfState()), nil
}

func (s *logStorage) lastLocked() uint64 { return s.first + uint64(len(s.ents)) - 1 }

// LastIndex implements raft.Storage.
func (s *logStorage) LastIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastLocked(), nil
}

// FirstIndex implements raft.Storage.
func (s *logStorage) FirstIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first + 1, nil
}

// Term implements raft.Storage.
func (s *logStorage) Term(i uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i < s.first {
		return 0, raft.ErrCompacted
	}
	if i-s.first >= uint64(len(s.ents)) {
		return 0, raft.ErrUnavailable
	}
	return s.ents[i-s.first].term, nil
}

// Entries implements raft.Storage.
func (s *logStorage) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	s.mu.Lock()
	if lo <= s.first {
		s.mu.Unlock()
		return nil, raft.ErrCompacted
	}
	if hi > s.lastLocked()+1 {
		s.mu.Unlock()
		return nil, raft.ErrUnavailable
	}
	if len(s.ents) == 1 {
		s.mu.Unlock()
		return nil, raft.ErrUnavailable
	}
	metas := s.ents[lo-s.first : hi-s.first]
	var size uint64
	n := 0
	for i := range metas {
		size += uint64(metas[i].size) + 16
		if n > 0 && size > maxSize {
			break
		}
		n++
	}
	metas = append([]entMeta(nil), metas[:n]...)
	s.mu.Unlock()
	out := make([]*pb.Entry, n)
	for i := range metas {
		if metas[i].ent != nil {
			out[i] = metas[i].ent
			continue
		}
		r, err := s.store.Read(metas[i].pos)
		if err != nil {
			return nil, err
		}
		out[i] = entryOfRec(r)
	}
	return out, nil
}

// Snapshot implements raft.Storage.
func (s *logStorage) Snapshot() (*pb.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap, nil
}

// entry returns entry index from the raft log (not the live set).
func (s *logStorage) entry(index uint64) (*pb.Entry, error) {
	s.mu.Lock()
	if index <= s.first || index > s.lastLocked() {
		s.mu.Unlock()
		return nil, raft.ErrCompacted
	}
	m := s.ents[index-s.first]
	s.mu.Unlock()
	if m.ent != nil {
		return m.ent, nil
	}
	r, err := s.store.Read(m.pos)
	if err != nil {
		return nil, err
	}
	return entryOfRec(r), nil
}

// readEntry returns an entry's data from the raft log or the live set.
// A read racing with the WAL's compaction (the record moved twice since
// its position was taken) is retried with the updated position.
func (s *logStorage) readEntry(index uint64) (data []byte, found bool, err error) {
	for try := 0; try < 3; try++ {
		var p recPos
		s.mu.Lock()
		switch {
		case index > s.first && index <= s.lastLocked():
			m := s.ents[index-s.first]
			if m.ent != nil {
				s.mu.Unlock()
				return m.ent.GetData(), true, nil
			}
			p = m.pos
		default:
			i := sort.Search(len(s.live), func(i int) bool { return s.live[i].index >= index })
			if i >= len(s.live) || s.live[i].index != index {
				s.mu.Unlock()
				return nil, false, nil
			}
			p = s.live[i].pos
		}
		s.mu.Unlock()
		var r rec
		if r, err = s.store.Read(p); err == nil {
			return r.Data, true, nil
		}
	}
	return nil, true, err
}

// readEntries reads many entries' data (see Group.ReadEntries).
func (s *logStorage) readEntries(indices []uint64, fn func(index uint64, data []byte) error) error {
	const chunk = 4096
	idx := append([]uint64(nil), indices...)
	sort.Slice(idx, func(i, j int) bool { return idx[i] < idx[j] })
	datas := make([][]byte, 0, chunk)
	var ps []recPos
	var at []int
	for len(idx) > 0 {
		n := min(chunk, len(idx))
		part := idx[:n]
		idx = idx[n:]
		datas = datas[:0]
		ps, at = ps[:0], at[:0]
		s.mu.Lock()
		for i, index := range part {
			datas = append(datas, nil)
			if index > s.first && index <= s.lastLocked() {
				m := s.ents[index-s.first]
				if m.ent != nil {
					datas[i] = m.ent.GetData()
				} else {
					ps, at = append(ps, m.pos), append(at, i)
				}
				continue
			}
			j := sort.Search(len(s.live), func(j int) bool { return s.live[j].index >= index })
			if j >= len(s.live) || s.live[j].index != index {
				s.mu.Unlock()
				return fmt.Errorf("%w: entry %d", ErrNotFound, index)
			}
			ps, at = append(ps, s.live[j].pos), append(at, i)
		}
		s.mu.Unlock()
		if len(ps) > 0 {
			err := s.store.ReadMany(ps, func(k int, r rec) error {
				datas[at[k]] = r.Data
				return nil
			})
			if err != nil {
				// A compaction moved a record meanwhile: one by one.
				for _, i := range at {
					if datas[i] != nil {
						continue
					}
					d, _, err := s.readEntry(part[i])
					if err != nil {
						return err
					}
					datas[i] = d
				}
			}
		}
		for i, index := range part {
			if err := fn(index, datas[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// setHardState records a persisted hard state; it returns the superseded
// record to release.
func (s *logStorage) setHardState(hs *pb.HardState, p recPos) (old []recPos) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hasHS {
		old = append(old, s.hsPos)
	}
	s.hs, s.hsPos, s.hasHS = hs, p, true
	return old
}

// append records persisted entries (with their positions), truncating a
// conflicting tail; it returns the records to release.
func (s *logStorage) append(ents []*pb.Entry, poss []recPos) (old []recPos) {
	if len(ents) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	firstNew := ents[0].GetIndex()
	if firstNew <= s.first {
		k := s.first + 1 - firstNew
		if k >= uint64(len(ents)) {
			for _, p := range poss {
				old = append(old, p)
			}
			return old
		}
		for _, p := range poss[:k] {
			old = append(old, p)
		}
		ents, poss = ents[k:], poss[k:]
		firstNew = ents[0].GetIndex()
	}
	off := firstNew - s.first
	if off > uint64(len(s.ents)) {
		panic("qraft: missing log entries before an append")
	}
	for _, m := range s.ents[off:] {
		old = append(old, m.pos)
	}
	// Entries copies the metadata it hands out, so the slice may be
	// appended to (and a conflicting tail overwritten) in place.
	s.ents = s.ents[:off]
	if need := len(s.ents) + len(ents); need > cap(s.ents) {
		// Double: append's growth by a quarter for long slices copied
		// each entry's metadata about four times as a log grew.
		grown := make([]entMeta, len(s.ents), max(2*cap(s.ents), need))
		copy(grown, s.ents)
		s.ents = grown
	}
	for i, e := range ents {
		s.ents = append(s.ents, entMeta{term: e.GetTerm(), pos: poss[i], size: uint32(len(e.GetData())), typ: recOfEntry(0, e).Kind, ent: e})
	}
	return old
}

// uncache drops the bodies of entries at or below index from memory.
func (s *logStorage) uncache(index uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cacheLo < s.first {
		s.cacheLo = s.first
	}
	last := s.lastLocked()
	if index > last {
		index = last
	}
	for i := s.cacheLo + 1; i <= index; i++ {
		s.ents[i-s.first].ent = nil
	}
	if index > s.cacheLo {
		s.cacheLo = index
	}
}

// createSnapshot makes snap (local form, persisted at p) the latest
// snapshot with live (sorted by index) as its live entries, and compacts
// the raft log up to compactTo. Each record has one owner: an entry in the
// raft log, or a live entry below it. It returns the records to release
// once p is synced.
func (s *logStorage) createSnapshot(snap *pb.Snapshot, p recPos, live []liveRef, compactTo uint64) (old []recPos) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// live and s.live are sorted by index: kept(l) walks live once.
	j := 0
	kept := func(idx uint64, pos recPos) bool {
		for j < len(live) && live[j].index < idx {
			j++
		}
		return j < len(live) && live[j].index == idx && live[j].pos == pos
	}
	if s.hasSnap {
		old = append(old, s.snapPos)
	}
	s.snap, s.snapPos, s.hasSnap = snap, p, true
	for _, l := range s.live {
		if !kept(l.index, l.pos) {
			old = append(old, l.pos)
		}
	}
	newFirst := s.first
	if compactTo > s.first && compactTo <= s.lastLocked() {
		newFirst = compactTo
	}
	if newFirst > s.first {
		j = 0
		k := newFirst - s.first
		for i, m := range s.ents[1 : k+1] {
			if !kept(s.first+1+uint64(i), m.pos) {
				old = append(old, m.pos)
			}
		}
		ents := make([]entMeta, 1, uint64(len(s.ents))-k)
		ents[0] = entMeta{term: s.ents[k].term}
		s.ents = append(ents, s.ents[k+1:]...)
		s.first = newFirst
		if s.cacheLo < newFirst {
			s.cacheLo = newFirst
		}
	}
	n := sort.Search(len(live), func(i int) bool { return live[i].index > newFirst })
	s.setLiveLocked(live[:n:n]) // live is the caller's no more
	return old
}

// appendReplay adds an entry read back from the store (no body kept).
// Entries before a gap (their successors were released before the crash,
// so a later snapshot record covers them) become orphans: a later
// snapshot may still list one as live.
func (s *logStorage) appendReplay(index, term uint64, kind byte, size uint32, p recPos, orphans map[uint64]liveRef) (old []recPos) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch last := s.lastLocked(); {
	case index <= s.first:
		return []recPos{p} // compacted meanwhile
	case index > last+1:
		for i, m := range s.ents[1:] {
			idx := s.first + 1 + uint64(i)
			orphans[idx] = liveRef{index: idx, term: m.term, pos: m.pos, size: m.size}
		}
		s.first = index - 1
		s.ents = []entMeta{{}, {term: term, pos: p, size: size, typ: kind}}
		s.cacheLo = index
	default:
		off := index - s.first
		for _, m := range s.ents[off:] {
			old = append(old, m.pos)
		}
		s.ents = append(s.ents[:off], entMeta{term: term, pos: p, size: size, typ: kind})
		s.cacheLo = index
	}
	return old
}

// applySnapshot replaces the log with a snapshot from the leader (local
// form, persisted at p) and its live entries (persisted). It returns every
// record it supersedes.
func (s *logStorage) applySnapshot(snap *pb.Snapshot, p recPos, live []liveRef) (old []recPos) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applySnapshotLocked(snap, p, live)
}

func (s *logStorage) applySnapshotLocked(snap *pb.Snapshot, p recPos, live []liveRef) (old []recPos) {
	keep := make(map[recPos]bool, len(live))
	for _, l := range live {
		keep[l.pos] = true
	}
	if s.hasSnap {
		old = append(old, s.snapPos)
	}
	for _, l := range s.live {
		if !keep[l.pos] {
			old = append(old, l.pos)
		}
	}
	for _, m := range s.ents[1:] {
		if !keep[m.pos] {
			old = append(old, m.pos)
		}
	}
	s.snap, s.snapPos, s.hasSnap = snap, p, true
	idx := snap.GetMetadata().GetIndex()
	s.first = idx
	s.cacheLo = idx
	s.ents = []entMeta{{term: snap.GetMetadata().GetTerm()}}
	s.setLiveLocked(live)
	return old
}

// replaySnapshot applies a snapshot record at recovery: an installed one
// replaces the log; a local one compacts it, or replaces it when the
// entries it covers are no longer there (released before the crash).
func (s *logStorage) replaySnapshot(snap *pb.Snapshot, p recPos, live []liveRef, installed bool) []recPos {
	idx := snap.GetMetadata().GetIndex()
	s.mu.Lock()
	inLog := idx >= s.first && idx <= s.lastLocked()
	if installed || !inLog {
		defer s.mu.Unlock()
		return s.applySnapshotLocked(snap, p, live)
	}
	s.mu.Unlock()
	return s.createSnapshot(snap, p, live, idx)
}

func (s *logStorage) setLiveLocked(live []liveRef) {
	s.live = live
	s.liveSize = 0
	for _, l := range live {
		s.liveSize += int64(l.size)
	}
}

// liveBelow counts the live entries below the raft log and their bytes
// (s.live is sorted by index: a binary search, not a walk, as it runs at
// every pass over a busy group).
func (s *logStorage) liveBelow() (n uint64, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := sort.Search(len(s.live), func(i int) bool { return s.live[i].index > s.first })
	return uint64(k), s.liveSize
}

// liveRefOf finds index among the live set or the raft log, for a new
// snapshot's live set.
func (s *logStorage) liveRefOf(index uint64) (liveRef, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if index > s.first && index <= s.lastLocked() {
		m := s.ents[index-s.first]
		return liveRef{index: index, term: m.term, pos: m.pos, size: m.size}, true
	}
	i := sort.Search(len(s.live), func(i int) bool { return s.live[i].index >= index })
	if i < len(s.live) && s.live[i].index == index {
		return s.live[i], true
	}
	return liveRef{}, false
}

// liveRefsOf is liveRefOf for many indices, sorted and unique, under one
// lock (a snapshot's live entries): the ones not found are skipped and
// returned apart.
func (s *logStorage) liveRefsOf(idx []uint64) (refs []liveRef, missing []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	refs = make([]liveRef, 0, len(idx))
	last := s.lastLocked()
	j := 0
	for _, index := range idx {
		if index > s.first && index <= last {
			m := &s.ents[index-s.first]
			refs = append(refs, liveRef{index: index, term: m.term, pos: m.pos, size: m.size})
			continue
		}
		for j < len(s.live) && s.live[j].index < index {
			j++
		}
		if j < len(s.live) && s.live[j].index == index {
			refs = append(refs, s.live[j])
			continue
		}
		missing = append(missing, index)
	}
	return refs, missing
}

// heldUpTo is how many entries at or below index the storage holds (the
// live ones below the log and the log's).
func (s *logStorage) heldUpTo(index uint64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, l := range s.live {
		if l.index <= s.first {
			n++
		}
	}
	if index > s.first {
		n += int(min(index, s.lastLocked()) - s.first)
	}
	return n
}

// allRecords lists every record the group holds (to release on delete).
func (s *logStorage) allRecords() []recPos {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []recPos
	if s.hasHS {
		out = append(out, s.hsPos)
	}
	if s.hasSnap {
		out = append(out, s.snapPos)
	}
	for _, l := range s.live {
		out = append(out, l.pos)
	}
	for _, l := range s.incoming {
		out = append(out, l.pos)
	}
	for _, m := range s.ents[1:] {
		out = append(out, m.pos)
	}
	return out
}

// addIncoming records live entries of snapshot stream id, persisted at
// their refs' positions. It returns the records to release: those of an
// earlier stream (it was given up) and any not above the stream's last.
func (s *logStorage) addIncoming(id uint64, refs []liveRef) (old []recPos) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id != s.inID {
		for _, r := range s.incoming {
			old = append(old, r.pos)
		}
		s.inID, s.incoming = id, nil
	}
	for _, r := range refs {
		if n := len(s.incoming); n > 0 && r.index <= s.incoming[n-1].index {
			old = append(old, r.pos)
			continue
		}
		s.incoming = append(s.incoming, r)
	}
	return old
}

// incomingCount is how many entries of stream id are held.
func (s *logStorage) incomingCount(id uint64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id != s.inID {
		return 0
	}
	return uint64(len(s.incoming))
}

// takeIncoming hands over the entries of stream id (nil when another
// stream, or none, is held; that one stays).
func (s *logStorage) takeIncoming(id uint64) []liveRef {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == 0 || id != s.inID {
		return nil
	}
	refs := s.incoming
	s.inID, s.incoming = 0, nil
	return refs
}

// moved updates a record's position after the store compacted it.
func (s *logStorage) moved(old, nw recPos, r rec) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Kind {
	case recHardState:
		if s.hasHS && s.hsPos == old {
			s.hsPos = nw
			return true
		}
	case recSnapshot:
		if s.hasSnap && s.snapPos == old {
			s.snapPos = nw
			return true
		}
	}
	if r.Index > s.first && r.Index <= s.lastLocked() {
		if m := &s.ents[r.Index-s.first]; m.pos == old {
			m.pos = nw
			return true
		}
	}
	i := sort.Search(len(s.live), func(i int) bool { return s.live[i].index >= r.Index })
	if i < len(s.live) && s.live[i].index == r.Index && s.live[i].pos == old {
		s.live[i].pos = nw
		return true
	}
	i = sort.Search(len(s.incoming), func(i int) bool { return s.incoming[i].index >= r.Index })
	if i < len(s.incoming) && s.incoming[i].index == r.Index && s.incoming[i].pos == old {
		s.incoming[i].pos = nw
		return true
	}
	return false
}

// cloneHS is the hard state (a copy).
func (s *logStorage) cloneHS() *pb.HardState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return proto.Clone(s.hs).(*pb.HardState)
}
