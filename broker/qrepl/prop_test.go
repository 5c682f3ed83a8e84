package qrepl

import (
	"flag"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/warrenmq/warren/broker/machine"
)

// Property tests of issue 14, must-show 2: members applying the same log
// reach Equal states; Restore(Snapshot at k) plus the entries after k
// equals the whole log, for every k; dedup; conservation; and a naive
// model of the queue agreeing with the state at every step. Bounded to a
// few seconds; -qrepl.long (or WARREN_QREPL_LONG=1) runs them for a
// minute each.

var long = flag.Bool("qrepl.long", false, "run the qrepl property tests for long")

// budget is how long a property test runs.
func budget() time.Duration {
	if *long || os.Getenv("WARREN_QREPL_LONG") != "" {
		return time.Minute
	}
	return 1500 * time.Millisecond
}

// entry is one log entry.
type entry struct {
	index uint64
	data  []byte
}

// model is the queue the naive way: a slice in queue order.
type model struct {
	msgs      []Msg
	pubs      map[uint64]pub
	lease     uint64
	clock     int64
	nextPrune int64
	st        Stats
}

func (m *model) find(id uint64) int {
	for i := range m.msgs {
		if m.msgs[i].ID == id {
			return i
		}
	}
	return -1
}

func (m *model) prune() {
	m.nextPrune = m.clock + pruneEvery
	for id, p := range m.pubs {
		if p.lastSeen < m.clock-PubTTL {
			delete(m.pubs, id)
		}
	}
}

func (m *model) apply(index uint64, data []byte) Result {
	c, err := Decode(data)
	if err != nil {
		m.st.Corrupt++
		return Result{}
	}
	res := Result{Kind: c.Kind()}
	switch c := c.(type) {
	case Enqueue:
		if res.Duplicate = !m.enqueue(index, index<<16, c); !res.Duplicate {
			res.N = 1
		}
	case EnqueueBatch:
		if index > maxBatchIndex {
			m.st.Corrupt++
			break
		}
		res.Batch = make([]EnqResult, len(c.Items))
		for j, e := range c.Items {
			if res.Batch[j].Duplicate = !m.enqueue(BatchID(index, j), index<<16|uint64(j), e); !res.Batch[j].Duplicate {
				res.N++
			}
		}
	case Remove, Purge:
		var ids []uint64
		ctr := &m.st.Removed
		if r, ok := c.(Remove); ok {
			ids = r.IDs
		} else {
			ids, ctr = c.(Purge).IDs, &m.st.Purged
		}
		for _, id := range ids {
			if i := m.find(id); i >= 0 {
				m.msgs = slices.Delete(m.msgs, i, i+1)
				res.N++
			}
		}
		*ctr += uint64(res.N)
	case Return:
		for j, it := range c.Items {
			i := m.find(it.ID)
			if i < 0 {
				continue
			}
			res.N++
			x := &m.msgs[i]
			x.DeliveryCount, x.Acquired = it.DeliveryCount, it.Acquired
			x.DLX, x.Reason = false, 0
			x.Redelivered = x.Redelivered || it.Redelivered
			x.DelayUntil = it.DelayUntil
			if it.Back {
				y := *x
				y.Order = index<<16 | uint64(j)
				m.msgs = append(slices.Delete(m.msgs, i, i+1), y)
			}
		}
		m.st.Returned += uint64(res.N)
	case Discard:
		for _, id := range c.IDs {
			if i := m.find(id); i >= 0 {
				m.msgs[i].DLX, m.msgs[i].Reason = true, c.Reason
				res.N++
			}
		}
		m.st.Discarded += uint64(res.N)
	case Lease:
		m.lease = max(m.lease, c.UpTo)
	case Prune:
		m.clock = max(m.clock, c.Now)
		m.prune()
	}
	return res
}

// enqueue places c as message id (false: a duplicate).
func (m *model) enqueue(id, order uint64, c Enqueue) bool {
	if p, ok := m.pubs[c.Pub.Publisher]; ok && c.Pub.Publisher != 0 && c.Pub.Seq <= p.seq {
		m.st.Duplicates++
		return false
	}
	m.clock = max(m.clock, c.Time)
	if c.Pub.Publisher != 0 {
		m.pubs[c.Pub.Publisher] = pub{c.Pub.Seq, m.clock}
	}
	if m.clock >= m.nextPrune {
		m.prune()
	}
	m.msgs = append(m.msgs, Msg{ID: id, Order: order, Time: c.Time, ExpiresAt: c.ExpiresAt, Size: c.Size,
		Priority: c.Priority, Persistent: c.Persistent})
	m.st.Enqueued++
	return true
}

// gen produces a random log against a model of the state so far.
type gen struct {
	r     *rand.Rand
	m     *model
	index uint64
	now   int64
	seqs  [4]uint64 // per publisher (0 = none)
}

func newGen(seed uint64) *gen {
	return &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), m: &model{pubs: map[uint64]pub{}},
		now: 1_700_000_000_000}
}

// someIDs picks ids: live ones mostly near the head, some anywhere, some
// gone or never enqueued.
func (g *gen) someIDs(max int) []uint64 {
	n := 1 + g.r.IntN(max)
	ids := make([]uint64, 0, n)
	for range n {
		live := g.m.msgs
		switch x := g.r.IntN(10); {
		case len(live) > 0 && x < 6:
			ids = append(ids, live[g.r.IntN(min(len(live), 8))].ID)
		case len(live) > 0 && x < 9:
			ids = append(ids, live[g.r.IntN(len(live))].ID)
		case x < 9 || g.index < 2:
			ids = append(ids, g.r.Uint64N(g.index+2))
		default: // an item id, maybe never enqueued
			ids = append(ids, BatchID(1+g.r.Uint64N(g.index), g.r.IntN(4)))
		}
	}
	return ids
}

// next returns the next entry (and applies it to the model).
func (g *gen) next() entry {
	g.index += 1 + uint64(g.r.IntN(3)/2) // gaps: empty entries, conf changes
	g.now += int64(g.r.IntN(50))
	if g.r.IntN(200) == 0 {
		g.now += PubTTL / 2 // long pauses: publishers expire
	}
	if g.r.IntN(300) == 0 {
		g.now -= 5000 // a new leader's clock behind
	}
	var c Command
	switch x := g.r.IntN(100); {
	case x < 28:
		c = g.enqueue()
	case x < 40:
		items := make([]Enqueue, 1+g.r.IntN(5))
		for j := range items {
			items[j] = g.enqueue()
		}
		c = EnqueueBatch{Items: items}
	case x < 62:
		c = Remove{IDs: g.someIDs(12)}
	case x < 74:
		ids := g.someIDs(5)
		items := make([]ReturnItem, len(ids))
		for i, id := range ids {
			items[i] = ReturnItem{ID: id, DeliveryCount: uint32(g.r.IntN(4)), Acquired: uint32(g.r.IntN(5)),
				Redelivered: g.r.IntN(3) > 0, Back: g.r.IntN(2) == 0}
			if g.r.IntN(5) == 0 {
				items[i].DelayUntil = g.now + 1 + int64(g.r.IntN(1000))
			}
		}
		c = Return{Items: items}
	case x < 82:
		c = Discard{IDs: g.someIDs(4), Reason: machine.Reason(g.r.IntN(4))}
	case x < 88:
		c = Lease{UpTo: max(g.index+uint64(g.r.IntN(2000)), 500) - 500}
	case x < 92:
		c = Purge{IDs: g.someIDs(30)}
	case x < 95:
		c = Prune{Now: g.now}
	default:
		// Undecodable: garbage, or a valid entry cut short.
		b := Encode(Remove{IDs: []uint64{1, 2, 3}})
		if g.r.IntN(2) == 0 {
			b = b[:len(b)-1]
		} else {
			b = []byte{byte(g.r.IntN(256)), byte(g.r.IntN(256))}
			if b[0] == byte(KindLease) || b[0] == byte(KindPrune) {
				b[1] |= 0x80 // a varint cut short
			}
		}
		e := entry{index: g.index, data: b}
		g.m.apply(e.index, e.data)
		return e
	}
	e := entry{index: g.index, data: Encode(c)}
	g.m.apply(e.index, e.data)
	return e
}

// enqueue is a random publish.
func (g *gen) enqueue() Enqueue {
	e := Enqueue{Time: g.now, Priority: uint8(g.r.IntN(10)), Persistent: g.r.IntN(2) == 0,
		Size: uint32(g.r.IntN(5000)), Body: make([]byte, g.r.IntN(8))}
	if g.r.IntN(4) == 0 {
		e.ExpiresAt = g.now + int64(g.r.IntN(10000))
	}
	if p := g.r.IntN(len(g.seqs)); p > 0 {
		e.Pub.Publisher = uint64(p) << 40
		switch y := g.r.IntN(10); {
		case y < 7:
			g.seqs[p] += 1 + uint64(g.r.IntN(3))
		case y < 9 && g.seqs[p] > 0:
			// a resend: at or below the last
		default:
			g.seqs[p] = 0 // a restarted publisher (after expiry)
		}
		e.Pub.Seq = g.seqs[p] - min(g.seqs[p], uint64(g.r.IntN(2)))
	}
	return e
}

// check compares s with the model.
func (m *model) check(t *testing.T, s *State, at uint64) {
	t.Helper()
	var got []Msg
	s.Messages(func(x Msg) bool { got = append(got, x); return true })
	if !slices.Equal(got, m.msgs) {
		t.Fatalf("at %d: messages differ\n state %+v\n model %+v", at, got, m.msgs)
	}
	wantLast := uint64(0)
	if len(m.msgs) > 0 {
		wantLast = m.msgs[len(m.msgs)-1].Order
	}
	if s.LastOrder() != wantLast {
		t.Fatalf("at %d: last order %x", at, s.LastOrder())
	}
	bytes := int64(0)
	ids := make([]uint64, 0, len(m.msgs))
	for _, x := range m.msgs {
		bytes += int64(x.Size)
		ids = append(ids, EntryOf(x.ID))
		if g, ok := s.Get(x.ID); !ok || g != x {
			t.Fatalf("at %d: Get(%d) = %+v, %v; want %+v", at, x.ID, g, ok, x)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if live := s.Live(); !slices.Equal(live, ids) {
		t.Fatalf("at %d: Live %v, want %v", at, live, ids)
	}
	if s.Len() != len(m.msgs) || s.Bytes() != bytes || s.Lease() != m.lease || s.Clock() != m.clock || s.Stats() != m.st {
		t.Fatalf("at %d: len %d bytes %d lease %d clock %d stats %+v; model %d %d %d %d %+v", at, s.Len(), s.Bytes(),
			s.Lease(), s.Clock(), s.Stats(), len(m.msgs), bytes, m.lease, m.clock, m.st)
	}
	if len(s.pubs) != len(m.pubs) {
		t.Fatalf("at %d: %d publishers, model %d", at, len(s.pubs), len(m.pubs))
	}
	for id, p := range m.pubs {
		if q, ok := s.LastSeq(id); !ok || q != p.seq {
			t.Fatalf("at %d: publisher %x last seq %d %v, model %d", at, id, q, ok, p.seq)
		}
	}
	// Conservation: every enqueue placed is live, removed or purged.
	st := s.Stats()
	if st.Enqueued != uint64(s.Len())+st.Removed+st.Purged {
		t.Fatalf("at %d: enqueued %d != live %d + removed %d + purged %d", at, st.Enqueued, s.Len(), st.Removed, st.Purged)
	}
}

// forSeeds runs fn for seeds until the budget is spent.
func forSeeds(t *testing.T, fn func(seed uint64)) {
	deadline := time.Now().Add(budget())
	n := 0
	for seed := uint64(1); n < 3 || time.Now().Before(deadline); seed++ {
		fn(seed)
		if t.Failed() {
			t.Fatalf("seed %d", seed)
		}
		n++
	}
	t.Logf("%d logs", n)
}

// TestModel: issue 14 (must-show 2): the state agrees with a naive model
// of the queue after every entry of random logs (order, headers, Live,
// dedup, lease, counters), and conservation holds throughout.
func TestModel(t *testing.T) {
	forSeeds(t, func(seed uint64) {
		g := newGen(seed)
		s := New()
		if seed%2 == 0 {
			s.tidyMin = 1 + int(seed/2%5) // compact often
		}
		for range 400 {
			e := g.next()
			want := g.m
			if _, err := s.Apply(e.index, e.data); err != nil && err != ErrCorrupt {
				t.Fatalf("seed %d: apply %d: %v", seed, e.index, err)
			}
			want.check(t, s, e.index)
		}
	})
}

// TestMembersAgree: issue 14 (must-show 2): members applying the same log
// reach Equal states (and the same snapshot bytes), whether they apply it
// straight, in runs between snapshot/restore cycles, or replay entries
// already applied (ignored as stale).
func TestMembersAgree(t *testing.T) {
	forSeeds(t, func(seed uint64) {
		g := newGen(seed)
		log := make([]entry, 600)
		for i := range log {
			log[i] = g.next()
		}
		// Three layouts: compaction at the default, often, at random;
		// c applies decoded commands.
		a, b, c := New(), New(), New()
		r := rand.New(rand.NewPCG(seed, 7))
		b.tidyMin, c.tidyMin = 1, 1+r.IntN(16)
		for i, e := range log {
			a.Apply(e.index, e.data)
			b.Apply(e.index, e.data)
			if r.IntN(50) == 0 {
				var err error
				if b, err = Restore(b.Snapshot()); err != nil {
					t.Fatalf("seed %d: restore: %v", seed, err)
				}
				b.tidyMin = 1 + r.IntN(3)
			}
			// c applies as the leader side does: Decode, then ApplyCommand
			// (undecodable data through Apply).
			if cmd, err := Decode(e.data); err == nil {
				if _, err := c.ApplyCommand(e.index, cmd); err != nil {
					t.Fatalf("seed %d: ApplyCommand %d: %v", seed, e.index, err)
				}
			} else if _, err := c.Apply(e.index, e.data); err != ErrCorrupt {
				t.Fatalf("seed %d: Apply of undecodable %d: %v", seed, e.index, err)
			}
			if r.IntN(20) == 0 && i > 0 {
				// a replay of entries already applied changes nothing
				for _, old := range log[r.IntN(i):i] {
					if _, err := c.Apply(old.index, old.data); err != ErrStale {
						t.Fatalf("seed %d: replayed %d: %v", seed, old.index, err)
					}
				}
			}
		}
		if !a.Equal(b) || !b.Equal(a) || !a.Equal(c) {
			t.Fatalf("seed %d: members differ", seed)
		}
		if !slices.Equal(a.Snapshot(), b.Snapshot()) || !slices.Equal(a.Snapshot(), c.Snapshot()) {
			t.Fatalf("seed %d: snapshots differ", seed)
		}
		g.m.check(t, a, 0)
	})
}

// TestSnapshotSuffix: issue 14 (must-show 2): for every k,
// Restore(Snapshot at k) plus the entries after k Equals the state of
// the whole log.
func TestSnapshotSuffix(t *testing.T) {
	forSeeds(t, func(seed uint64) {
		g := newGen(seed)
		log := make([]entry, 250)
		for i := range log {
			log[i] = g.next()
		}
		whole := New()
		snaps := make([][]byte, len(log)+1)
		snaps[0] = whole.Snapshot()
		for i, e := range log {
			whole.Apply(e.index, e.data)
			snaps[i+1] = whole.Snapshot()
		}
		for k, snap := range snaps {
			s, err := Restore(snap)
			if err != nil {
				t.Fatalf("seed %d: restore at %d: %v", seed, k, err)
			}
			for _, e := range log[k:] {
				s.Apply(e.index, e.data)
			}
			if !s.Equal(whole) || !whole.Equal(s) {
				t.Fatalf("seed %d: snapshot at %d + suffix differs from the whole log", seed, k)
			}
		}
		g.m.check(t, whole, 0)
	})
}

// TestDedup: issue 14 (must-show 2): an enqueue whose seq is at or below
// its publisher's last is a Duplicate and changes nothing (but the
// applied index and the duplicate counter), at any point of random logs.
func TestDedup(t *testing.T) {
	forSeeds(t, func(seed uint64) {
		g := newGen(seed)
		s := New()
		r := rand.New(rand.NewPCG(seed, 11))
		for range 300 {
			e := g.next()
			s.Apply(e.index, e.data)
			if len(s.pubs) == 0 || r.IntN(4) != 0 {
				continue
			}
			ids := make([]uint64, 0, len(s.pubs))
			for id := range s.pubs {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			p := ids[r.IntN(len(ids))]
			last, _ := s.LastSeq(p)
			before, _ := Restore(s.Snapshot())
			g.index++
			dup := Enqueue{Pub: PubID{Publisher: p, Seq: last - min(last, uint64(r.IntN(3)))}, Time: g.now + 1e9, Size: 7}
			res, err := s.Apply(g.index, Encode(dup))
			if err != nil || !res.Duplicate || res.N != 0 {
				t.Fatalf("seed %d: duplicate %+v applied: %+v %v", seed, dup.Pub, res, err)
			}
			g.m.st.Duplicates++
			before.applied = g.index
			before.stats.Duplicates++
			if !before.Equal(s) {
				t.Fatalf("seed %d: a duplicate changed the state", seed)
			}
		}
		g.m.check(t, s, 0)
	})
}

// TestDedupNotAcrossPublishers: issue 14: seqs are per publisher; a new
// seq after a lower one of another publisher is placed, and a publisher
// forgotten after PubTTL starts over.
func TestDedupNotAcrossPublishers(t *testing.T) {
	s := New()
	apply := func(i uint64, c Command) Result {
		t.Helper()
		r, err := s.Apply(i, Encode(c))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	const t0 = 1_700_000_000_000
	if r := apply(1, Enqueue{Pub: PubID{Publisher: 1, Seq: 10}, Time: t0}); r.Duplicate {
		t.Fatal("first enqueue duplicate")
	}
	if r := apply(2, Enqueue{Pub: PubID{Publisher: 2, Seq: 5}, Time: t0}); r.Duplicate {
		t.Fatal("other publisher's lower seq is a duplicate")
	}
	if r := apply(3, Enqueue{Pub: PubID{Publisher: 1, Seq: 10}, Time: t0}); !r.Duplicate {
		t.Fatal("same seq not a duplicate")
	}
	if r := apply(4, Enqueue{Pub: PubID{Publisher: 1, Seq: 11}, Time: t0 + PubTTL}); r.Duplicate {
		t.Fatal("next seq a duplicate")
	}
	apply(5, Prune{Now: t0 + PubTTL})
	if _, ok := s.LastSeq(2); !ok {
		t.Fatal("publisher 2 pruned at exactly PubTTL")
	}
	if r := apply(6, Enqueue{Time: t0 + PubTTL + pruneEvery}); r.Duplicate {
		t.Fatal("no publisher: duplicate")
	}
	if _, ok := s.LastSeq(2); ok {
		t.Fatal("publisher 2 not pruned after PubTTL")
	}
	if _, ok := s.LastSeq(1); !ok {
		t.Fatal("publisher 1 pruned within PubTTL")
	}
	if r := apply(7, Enqueue{Pub: PubID{Publisher: 2, Seq: 1}, Time: t0 + PubTTL + pruneEvery}); r.Duplicate {
		t.Fatal("pruned publisher's restart is a duplicate")
	}
	if s.Len() != 5 || s.Stats().Duplicates != 1 {
		t.Fatalf("len %d stats %+v", s.Len(), s.Stats())
	}
}
