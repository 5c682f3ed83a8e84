package qrepl

import (
	"errors"
	"slices"

	"github.com/warrenmq/warren/broker/machine"
)

// PubTTL is how long a publisher's dedup entry outlives its last enqueue,
// in the leader's clock (ms).
const PubTTL = 3600_000

// pruneEvery is how often (ms of the state's clock) enqueues prune
// publishers.
const pruneEvery = 60_000

// maxIndex bounds log indices: order keys are index<<16.
const maxIndex = 1<<48 - 1

// ErrStale is an entry at or below the last applied index: ignored.
var ErrStale = errors.New("qrepl: entry already applied")

// ErrIndex is an entry index beyond what the state supports (2^48-1):
// skipped like undecodable data.
var ErrIndex = errors.New("qrepl: entry index out of range")

// rec is a message header; 48 bytes.
type rec struct {
	key       uint64 // order key: keyOf(id) unless moved
	id        uint64 // the message's id (EntryOf: its entry's index)
	expiresAt int64
	time      int64
	size      uint32
	dc        uint32 // delivery count
	acq       uint32 // acquired count
	prio      uint8
	flags     uint8
}

const (
	fDead = 1 << iota
	fRedelivered
	fPersistent
	fDLX
	fMoved           // key != keyOf(id): in State.moved
	fDelayed         // in State.delays
	fReasonShift = 6 // two bits: the Discard reason
)

func (r *rec) reason() machine.Reason { return machine.Reason(r.flags >> fReasonShift) }

// Msg is a live message's header.
type Msg struct {
	ID            uint64 // its id; EntryOf(ID) is the index of the entry with its body
	Order         uint64 // sort key of the queue order
	Time          int64  // the leader's clock at enqueue
	ExpiresAt     int64  // 0 = never
	DelayUntil    int64  // a delayed retry's due time, 0 = ready
	Size          uint32
	DeliveryCount uint32
	Acquired      uint32
	Priority      uint8
	Persistent    bool
	Redelivered   bool
	DLX           bool           // marked by Discard: being dead-lettered
	Reason        machine.Reason // the Discard reason when DLX
}

func (r *rec) msg(delay int64) Msg {
	return Msg{ID: r.id, Order: r.key, Time: r.time, ExpiresAt: r.expiresAt, DelayUntil: delay, Size: r.size,
		DeliveryCount: r.dc, Acquired: r.acq, Priority: r.prio, Persistent: r.flags&fPersistent != 0,
		Redelivered: r.flags&fRedelivered != 0, DLX: r.flags&fDLX != 0, Reason: r.reason()}
}

// Stats count what the state saw.
type Stats struct {
	Enqueued   uint64 // enqueues placed (duplicates excluded)
	Duplicates uint64 // enqueues dropped as duplicates or out of order (Result.Gap)
	Removed    uint64 // messages removed by Remove
	Purged     uint64 // messages removed by Purge
	Returned   uint64 // return items applied
	Discarded  uint64 // discard marks set
	Corrupt    uint64 // entries skipped as undecodable
}

type pub struct {
	seq      uint64
	lastSeen int64
}

// State is a quorum queue's replicated state. Not safe for concurrent
// use.
type State struct {
	q     ring // the records by key, tombstones among them
	dead  int  // tombstones in q
	live  int
	bytes int64
	// moved maps the id of a message returned to the back to its key;
	// delays maps the id of a message in a delayed retry to its due time.
	moved  map[uint64]uint64
	delays map[uint64]int64
	pubs   map[uint64]pub

	applied   uint64
	lease     uint64
	clock     int64 // the largest leader time seen
	nextPrune int64
	stats     Stats

	// tidyMin is the fewest tombstones (or unused slots at the front)
	// worth a compaction; 0 means 1024. Tests vary it: the layout must
	// not change the state.
	tidyMin int
}

func (s *State) tidyAt() int {
	if s.tidyMin > 0 {
		return s.tidyMin
	}
	return 1024
}

// New returns an empty state (nothing applied).
func New() *State { return &State{} }

// Result is what applying an entry did.
type Result struct {
	Kind Kind
	// Duplicate: an Enqueue dropped because its publisher's seq is not
	// above the last one applied.
	Duplicate bool
	// Gap: an Enqueue dropped because its Prev is not the last seq
	// applied for its publisher (an earlier publish is missing): the
	// publisher must send it again, after the missing one.
	Gap bool
	// N is the number of messages placed, removed, returned or marked
	// (ids not live are not counted).
	N int
	// Batch is an EnqueueBatch's outcome, item by item (nil for an
	// EnqueueBatch skipped whole: its index beyond maxBatchIndex).
	Batch []EnqResult
}

// EnqResult is the outcome of one item of an EnqueueBatch: Duplicate
// and Gap as in Result.
type EnqResult struct{ Duplicate, Gap bool }

// Apply applies the committed entry at index. Indices must increase
// (gaps are fine: empty entries and conf changes are not passed); an
// entry at or below the last applied index is ignored with ErrStale.
// Undecodable data is skipped with ErrCorrupt (the index still counts as
// applied): every member skips it alike.
func (s *State) Apply(index uint64, data []byte) (Result, error) {
	if index <= s.applied {
		return Result{}, ErrStale
	}
	s.applied = index
	if index > maxIndex {
		s.stats.Corrupt++
		return Result{}, ErrIndex
	}
	if len(data) > 0 && Kind(data[0]) == KindEnqueue {
		// The hot command, decoded without boxing it.
		e, err := decodeEnqueue(newDec(data[1:]))
		if err != nil {
			s.stats.Corrupt++
			return Result{}, err
		}
		res := Result{Kind: KindEnqueue}
		if res.Duplicate, res.Gap = s.enqueue(index, index<<16, &e); !res.Duplicate && !res.Gap {
			res.N = 1
		}
		return res, nil
	}
	c, err := Decode(data)
	if err != nil {
		s.stats.Corrupt++
		return Result{}, err
	}
	return s.apply(index, c), nil
}

// ApplyCommand applies a decoded command at index, as Apply does.
func (s *State) ApplyCommand(index uint64, c Command) (Result, error) {
	if index <= s.applied {
		return Result{}, ErrStale
	}
	s.applied = index
	if index > maxIndex {
		s.stats.Corrupt++
		return Result{}, ErrIndex
	}
	return s.apply(index, c), nil
}

func (s *State) apply(index uint64, c Command) Result {
	res := Result{Kind: c.Kind()}
	switch c := c.(type) {
	case Enqueue:
		if res.Duplicate, res.Gap = s.enqueue(index, index<<16, &c); !res.Duplicate && !res.Gap {
			res.N = 1
		}
	case EnqueueBatch:
		if index > maxBatchIndex || len(c.Items) == 0 || len(c.Items) > MaxBatchItems {
			s.stats.Corrupt++ // (alike on every member)
			break
		}
		res.Batch = make([]EnqResult, len(c.Items))
		for j := range c.Items {
			r := &res.Batch[j]
			if r.Duplicate, r.Gap = s.enqueue(BatchID(index, j), index<<16|uint64(j), &c.Items[j]); !r.Duplicate && !r.Gap {
				res.N++
			}
		}
	case Remove:
		res.N = s.removeIDs(c.IDs, &s.stats.Removed)
	case Purge:
		res.N = s.removeIDs(c.IDs, &s.stats.Purged)
	case Return:
		if len(c.Items) <= MaxReturn { // (ApplyCommand of a Return too big: ignored)
			res.N = s.ret(index, c.Items)
		}
	case Discard:
		for _, id := range c.IDs {
			if i := s.find(id); i >= 0 {
				r := s.q.At(i)
				r.flags = r.flags&^(3<<fReasonShift) | fDLX | uint8(c.Reason&3)<<fReasonShift
				res.N++
			}
		}
		s.stats.Discarded += uint64(res.N)
	case Lease:
		s.lease = max(s.lease, c.UpTo)
	case Prune:
		s.tick(c.Now)
		s.prune()
	}
	return res
}

// enqueue places e as message id under order key key unless it is a
// duplicate (its seq is not above its publisher's last) or out of order
// (its Prev is set and is not its publisher's last).
func (s *State) enqueue(id, key uint64, e *Enqueue) (dup, gap bool) {
	if e.Pub.Publisher != 0 {
		p, ok := s.pubs[e.Pub.Publisher]
		if ok && e.Pub.Seq <= p.seq {
			s.stats.Duplicates++
			return true, false
		}
		if e.Prev != 0 && (!ok || p.seq != e.Prev) {
			s.stats.Duplicates++
			return false, true
		}
	}
	s.tick(e.Time)
	if e.Pub.Publisher != 0 {
		if s.pubs == nil {
			s.pubs = map[uint64]pub{}
		}
		// Seen at the state's clock, not e.Time: a new leader's clock
		// behind the old one's does not age a publisher just seen.
		s.pubs[e.Pub.Publisher] = pub{seq: e.Pub.Seq, lastSeen: s.clock}
	}
	if s.clock >= s.nextPrune {
		s.prune()
	}
	r := rec{key: key, id: id, expiresAt: e.ExpiresAt, time: e.Time, size: e.Size, prio: e.Priority}
	if e.Persistent {
		r.flags |= fPersistent
	}
	s.push(r)
	s.stats.Enqueued++
	return false, false
}

// tick advances the state's clock to t (it never goes back).
func (s *State) tick(t int64) { s.clock = max(s.clock, t) }

// prune forgets publishers not seen within PubTTL of the clock.
func (s *State) prune() {
	s.nextPrune = s.clock + pruneEvery
	for id, p := range s.pubs {
		if p.lastSeen < s.clock-PubTTL {
			delete(s.pubs, id)
		}
	}
}

func (s *State) push(r rec) {
	if s.q.Full() && s.dead > s.q.Len()/8 {
		s.compact() // tombstones enough: reuse their room rather than grow
	}
	s.q.Push(r)
	s.live++
	s.bytes += int64(r.size)
}

// find returns the logical index in q of the live message id, or -1.
func (s *State) find(id uint64) int {
	if !validID(id) {
		return -1
	}
	key := keyOf(id)
	if len(s.moved) > 0 {
		if k, ok := s.moved[id]; ok {
			key = k
		}
	}
	// Acks come mostly near the head: try the front first.
	// (A key also names the id: a Return's keys index<<16|i are not
	// the keys of the ids they hold, and the id index may be asked for.)
	i := 0
	if s.q.Len() == 0 || s.q.At(0).key != key {
		var ok bool
		if i, ok = s.q.search(key); !ok {
			return -1
		}
	}
	if r := s.q.At(i); r.flags&fDead != 0 || r.id != id {
		return -1
	}
	return i
}

// kill tombstones the live message at i (leaving maps to the caller).
func (s *State) kill(i int) {
	r := s.q.At(i)
	r.flags |= fDead
	s.live--
	s.dead++
	s.bytes -= int64(r.size)
}

// forget drops the side entries of the message at i.
func (s *State) forget(r *rec) {
	if r.flags&fMoved != 0 {
		delete(s.moved, r.id)
	}
	if r.flags&fDelayed != 0 {
		delete(s.delays, r.id)
	}
}

func (s *State) removeIDs(ids []uint64, counter *uint64) int {
	n := 0
	for _, id := range ids {
		if i := s.find(id); i >= 0 {
			s.forget(s.q.At(i))
			s.kill(i)
			n++
		}
	}
	*counter += uint64(n)
	s.tidy()
	return n
}

func (s *State) ret(index uint64, items []ReturnItem) int {
	n := 0
	for j, it := range items {
		i := s.find(it.ID)
		if i < 0 {
			continue
		}
		n++
		r := s.q.At(i)
		r.dc, r.acq = it.DeliveryCount, it.Acquired
		r.flags &^= fDLX | 3<<fReasonShift
		if it.Redelivered {
			r.flags |= fRedelivered
		}
		if it.DelayUntil != 0 {
			if s.delays == nil {
				s.delays = map[uint64]int64{}
			}
			s.delays[r.id] = it.DelayUntil
			r.flags |= fDelayed
		} else if r.flags&fDelayed != 0 {
			delete(s.delays, r.id)
			r.flags &^= fDelayed
		}
		if !it.Back {
			continue
		}
		nr := *r
		s.kill(i)
		// index > id: the new key is never the id's own.
		nr.key = index<<16 | uint64(j)
		if s.moved == nil {
			s.moved = map[uint64]uint64{}
		}
		s.moved[nr.id] = nr.key
		nr.flags |= fMoved
		s.push(nr)
	}
	s.stats.Returned += uint64(n)
	s.tidy()
	return n
}

// tidy drops tombstones at both ends and compacts when they are many.
func (s *State) tidy() {
	for s.q.Len() > 0 && s.q.At(0).flags&fDead != 0 {
		s.q.PopFront()
		s.dead--
	}
	for s.q.Len() > 0 && s.q.At(s.q.Len()-1).flags&fDead != 0 {
		s.q.PopBack()
		s.dead--
	}
	switch {
	case s.live == 0:
		s.q.Reset()
		s.dead = 0
	case s.dead > s.tidyAt() && s.dead > s.live/4:
		s.compact()
	case s.q.Cap() > 4*s.live+1024:
		s.compact() // mostly room: shrink
	}
}

// compact drops every tombstone.
func (s *State) compact() {
	s.q.compact()
	s.dead = 0
}

// ---- queries ----

// Applied is the index of the last entry applied.
func (s *State) Applied() uint64 { return s.applied }

// Len is the number of live messages.
func (s *State) Len() int { return s.live }

// Bytes is the body bytes of the live messages.
func (s *State) Bytes() int64 { return s.bytes }

// Lease is the delivery lease: messages with id <= Lease may have been
// delivered.
func (s *State) Lease() uint64 { return s.lease }

// Clock is the largest leader time seen (unix ms).
func (s *State) Clock() int64 { return s.clock }

// Stats returns the counters.
func (s *State) Stats() Stats { return s.stats }

// LastSeq is the last seq applied for publisher p.
func (s *State) LastSeq(p uint64) (uint64, bool) {
	x, ok := s.pubs[p]
	return x.seq, ok
}

// EachPublisher calls fn with every publisher remembered for dedup and
// the last seq applied for it.
func (s *State) EachPublisher(fn func(publisher, seq uint64)) {
	for id, p := range s.pubs {
		fn(id, p.seq)
	}
}

// Publishers is the number of publishers remembered for dedup.
func (s *State) Publishers() int { return len(s.pubs) }

// LastOrder is the order key of the last live message (0 when empty): a
// leader rebuilding its machine from Messages continues its sequence
// numbers above it.
func (s *State) LastOrder() uint64 {
	for i := s.q.Len() - 1; i >= 0; i-- {
		if r := s.q.At(i); r.flags&fDead == 0 {
			return r.key
		}
	}
	return 0
}

// Get returns the live message id.
func (s *State) Get(id uint64) (Msg, bool) {
	i := s.find(id)
	if i < 0 {
		return Msg{}, false
	}
	r := s.q.At(i)
	return r.msg(s.delayOf(r)), true
}

func (s *State) delayOf(r *rec) int64 {
	if r.flags&fDelayed == 0 {
		return 0
	}
	return s.delays[r.id]
}

// Messages calls fn for every live message in queue order until fn
// returns false. fn must not change the state.
func (s *State) Messages(fn func(Msg) bool) {
	for i := 0; i < s.q.Len(); i++ {
		r := s.q.At(i)
		if r.flags&fDead == 0 && !fn(r.msg(s.delayOf(r))) {
			return
		}
	}
}

// Live returns the indices of the log entries that hold live messages'
// bodies (the entries a snapshot must keep), ascending, each once.
func (s *State) Live() []uint64 { return s.AppendLive(make([]uint64, 0, s.live)) }

// AppendLive appends Live's entries to dst.
func (s *State) AppendLive(dst []uint64) []uint64 {
	// Messages never moved are in entry order already; merge the moved
	// ones (few) in.
	var moved []uint64
	if len(s.moved) > 0 {
		moved = make([]uint64, 0, len(s.moved))
		for id := range s.moved {
			moved = append(moved, EntryOf(id))
		}
		slices.Sort(moved)
	}
	start, last := len(dst), uint64(0)
	add := func(e uint64) {
		if len(dst) == start || e != last {
			dst = append(dst, e)
			last = e
		}
	}
	j := 0
	for i := 0; i < s.q.Len(); i++ {
		r := s.q.At(i)
		if r.flags&(fDead|fMoved) != 0 {
			continue
		}
		e := EntryOf(r.id)
		for j < len(moved) && moved[j] < e {
			add(moved[j])
			j++
		}
		add(e)
	}
	for ; j < len(moved); j++ {
		add(moved[j])
	}
	return dst
}

// Equal reports whether s and o are the same state: same messages in the
// same order with the same headers, same dedup, lease, clock, counters
// and applied index (the layout, tombstones and spare capacity aside).
func (s *State) Equal(o *State) bool {
	if s.applied != o.applied || s.lease != o.lease || s.clock != o.clock || s.nextPrune != o.nextPrune ||
		s.stats != o.stats || s.live != o.live || s.bytes != o.bytes || len(s.pubs) != len(o.pubs) ||
		len(s.moved) != len(o.moved) || len(s.delays) != len(o.delays) {
		return false
	}
	for id, p := range s.pubs {
		if q, ok := o.pubs[id]; !ok || p != q {
			return false
		}
	}
	i, j := 0, 0
	for {
		for i < s.q.Len() && s.q.At(i).flags&fDead != 0 {
			i++
		}
		for j < o.q.Len() && o.q.At(j).flags&fDead != 0 {
			j++
		}
		if i == s.q.Len() || j == o.q.Len() {
			return i == s.q.Len() && j == o.q.Len()
		}
		a, b := s.q.At(i), o.q.At(j)
		if *a != *b || s.delayOf(a) != o.delayOf(b) {
			return false
		}
		if a.flags&fMoved != 0 && (s.moved[a.id] != a.key || o.moved[b.id] != b.key) {
			return false
		}
		i++
		j++
	}
}
