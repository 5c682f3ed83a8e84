package machine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"testing"
)

// The property tests of issue 12: seeded random command sequences run
// against the machine through a harness that plays the shell (a sink
// that may refuse, a paging disk) and checks, after every command, that
// every message is accounted for exactly once, that deliveries come in
// order, that single active consumer holds and that delivery counts are
// right; and that replaying a log, or a snapshot plus the rest of it,
// gives the same state.

type (
	tm  = Machine[uint64, int]
	tc  = Consumer[uint64, int]
	ten = Entry[uint64]
)

// cmd is one command of a log. Its arguments are resolved against the
// state when applied (the i-th checked-out message, say), so that the
// same log applied to the same state does the same.
type cmd struct {
	op         int
	a, b, c, d int64
}

const (
	opPublish = iota
	opAdd
	opRemove
	opAck
	opRequeue
	opReject
	opGet
	opUntake
	opTick
	opDispatch
	opSink
	opPurge
	opConfig
	opDLX
	opTake
	opReserve
	opPlaceReserved
	nOps
)

type fate uint8

const (
	live fate = iota
	acked
	settled // delivered with no-ack
	deadLettered
	dropped
	refused // reject-publish
	purged
)

type harness struct {
	t      testing.TB
	m      *tm
	now    int64
	window int
	paged  []ten // the "disk": paged-out entries in log order
	sink   map[int]bool
	cons   map[int]*tc // by Ref
	active []int       // refs in subscription order (single active consumer)
	nextC  int
	fates  map[uint64]fate
	nextID uint64
	// model of the counts: expected (delivery count, acquired count)
	counts map[uint64][2]uint32
	// lastFirst is the seq of the last first-time delivery per level.
	lastFirst map[uint8]uint64
	idOf      map[uint64]uint64 // seq -> message id, for publishes
	seen      map[uint64]bool   // handed out before (delivered or got)
	trims     bool              // the last command trims a drop-head queue
	reserved  []uint64          // sequence numbers reserved for messages moving in
	pubSeq    uint64
	failures  []string
}

func (h *harness) fail(f string, args ...any) {
	h.failures = append(h.failures, fmt.Sprintf(f, args...))
}

func (h *harness) Deliver(c *tc, ev ten) bool {
	e := &ev
	if h.sink[c.Ref] {
		return false
	}
	cfg := h.m.cfg
	// Single active consumer: deliveries only to the active one, the
	// first subscribed of those still subscribed.
	if cfg.SingleActive && (len(h.active) == 0 || h.active[0] != c.Ref) {
		h.fail("SAC: delivered to consumer %d, active is %v", c.Ref, h.active)
	}
	if c.Prefetch > 0 && c.outN >= c.Prefetch {
		h.fail("consumer %d over its prefetch %d", c.Ref, c.Prefetch)
	}
	// Order: the delivered message is the head: no ready message in a
	// higher level, none earlier in its own level.
	for l := range h.m.ready.levels {
		d := &h.m.ready.levels[l]
		for j := 0; j < d.Len(); j++ {
			x := d.Ptr(j)
			if x.Dead || x.Seq == e.Seq && x.Msg == e.Msg {
				continue
			}
			if uint8(l) > e.Level || uint8(l) == e.Level && x.Seq < e.Seq {
				h.fail("order: delivered seq %d level %d while seq %d level %d was ready", e.Seq, e.Level, x.Seq, l)
			}
		}
	}
	want := h.counts[e.Msg]
	if e.DeliveryCount != want[0] || e.Acquired != want[1] {
		h.fail("counts of msg %d: got dc=%d acq=%d, want %v", e.Msg, e.DeliveryCount, e.Acquired, want)
	}
	if (e.Redelivered || e.Acquired > 0) != (want[1] > 0 || e.Redelivered) {
		h.fail("redelivered flag of msg %d", e.Msg)
	}
	if !h.seen[e.Msg] && !cfg.Quorum {
		// first deliveries of a classic queue come in publish order per level
		if last := h.lastFirst[e.Level]; e.Seq <= last {
			h.fail("first deliveries out of order at level %d: %d after %d", e.Level, e.Seq, last)
		}
		h.lastFirst[e.Level] = e.Seq
	}
	h.seen[e.Msg] = true
	return true
}

func (h *harness) setFate(id uint64, f fate, what string) {
	if old := h.fates[id]; old != live {
		h.fail("msg %d %s after fate %d", id, what, old)
	}
	h.fates[id] = f
}

func (h *harness) DeadLetter(e ten, r Reason) { h.setFate(e.Msg, deadLettered, "dead-lettered") }
func (h *harness) Drop(e ten, r Reason)       { h.setFate(e.Msg, dropped, "dropped") }
func (h *harness) Settled(e ten)              { h.setFate(e.Msg, settled, "settled") }
func (h *harness) Requeued(e ten, seq uint64, at int64) {
	if at != 0 && at <= h.now {
		h.fail("retry delay in the past")
	}
}

func (h *harness) PageIn(force bool) {
	if len(h.paged) == 0 {
		return
	}
	if !force && h.m.ReadyN() >= h.window/2 {
		return
	}
	want := max(h.window-h.m.ReadyN(), 1)
	for len(h.paged) > 0 && want > 0 {
		e := h.paged[0]
		h.paged = h.paged[1:]
		h.m.PageIn(e)
		want--
	}
}

func (h *harness) pagedAt(t Timed) int {
	for i := range h.paged {
		if h.paged[i].Seq == t.Seq && t.Pos == t.Seq {
			return i
		}
	}
	return -1
}

func (h *harness) ExpirePaged(t Timed) {
	if i := h.pagedAt(t); i >= 0 {
		e := h.paged[i]
		h.paged = slices.Delete(h.paged, i, i+1)
		h.m.ExpiredPaged(e)
	}
}

func (h *harness) IsPaged(t Timed) bool { return h.pagedAt(t) >= 0 }

func newHarness(t testing.TB, rng *rand.Rand) *harness {
	cfg := DefaultConfig()
	cfg.Quorum = rng.Intn(3) == 0
	if rng.Intn(3) == 0 {
		cfg.Levels = 4
	}
	cfg.SingleActive = rng.Intn(4) == 0
	cfg.DLX = rng.Intn(3) != 0
	if rng.Intn(2) == 0 {
		cfg.MaxLength = int64(rng.Intn(12))
	}
	if rng.Intn(4) == 0 {
		cfg.MaxLengthBytes = int64(rng.Intn(200))
	}
	cfg.Overflow = Overflow(rng.Intn(3))
	if rng.Intn(3) == 0 {
		cfg.MessageTTL = int64(rng.Intn(100))
	}
	if rng.Intn(2) == 0 {
		cfg.DeliveryLimit = int64(rng.Intn(4))
	} else if cfg.Quorum {
		cfg.DeliveryLimit = 20
	}
	cfg.CountDeliveries = cfg.Quorum || cfg.DeliveryLimit >= 0
	if rng.Intn(3) == 0 {
		cfg.RetryType = RetryType(rng.Intn(4))
		cfg.RetryMin = int64(1 + rng.Intn(20))
		if rng.Intn(2) == 0 {
			cfg.RetryMax = cfg.RetryMin * 2
		}
	}
	cfg.Dedup = cfg.Quorum
	h := &harness{t: t, now: 1_000_000, sink: map[int]bool{}, cons: map[int]*tc{}, fates: map[uint64]fate{},
		counts: map[uint64][2]uint32{}, lastFirst: map[uint8]uint64{}, idOf: map[uint64]uint64{}, seen: map[uint64]bool{}}
	if cfg.levels() == 1 && rng.Intn(2) == 0 {
		h.window = 2 + rng.Intn(6)
	}
	h.m = New[uint64, int](cfg, h)
	return h
}

func genCmd(rng *rand.Rand) cmd {
	// publishes and settlements dominate
	w := []int{30, 5, 3, 12, 10, 5, 5, 3, 8, 3, 4, 1, 1, 1, 3, 2, 2}
	total := 0
	for _, x := range w {
		total += x
	}
	k := rng.Intn(total)
	op := 0
	for ; k >= w[op]; op++ {
		k -= w[op]
	}
	return cmd{op: op, a: rng.Int63n(1 << 20), b: rng.Int63n(1 << 20), c: rng.Int63n(1 << 20), d: rng.Int63n(1 << 20)}
}

// holders lists the holders with checked-out messages, deterministically.
func (h *harness) holders() []*tc {
	var hs []*tc
	for _, c := range h.m.consumers {
		if c.outN > 0 {
			hs = append(hs, c)
		}
	}
	for _, c := range h.m.holders {
		if c.outN > 0 {
			hs = append(hs, c)
		}
	}
	if h.m.get.outN > 0 {
		hs = append(hs, &h.m.get)
	}
	return hs
}

// pick returns up to n seqs checked out by a holder chosen by a, with
// their checkout numbers (sometimes wrong, as a shell that lost them).
func (h *harness) pick(a, n int64) (*tc, []uint64, []uint64) {
	hs := h.holders()
	if len(hs) == 0 {
		return nil, nil, nil
	}
	c := hs[int(a)%len(hs)]
	var seqs, ns []uint64
	for i := 0; i < c.out.Len(); i++ {
		if e := c.out.Ptr(i); !e.Dead {
			seqs = append(seqs, e.Seq)
			k := c.base + uint64(i)
			if (a+int64(i))%5 == 0 {
				k += 3
			}
			ns = append(ns, k)
		}
	}
	k := int(n)%min(len(seqs), 4) + 1
	if n%3 == 0 { // sometimes from the back: out of order
		return c, seqs[len(seqs)-k:], ns[len(ns)-k:]
	}
	return c, seqs[:k], ns[:k]
}

func (h *harness) idFor(c *tc, seq uint64) uint64 {
	for i := 0; i < c.out.Len(); i++ {
		if e := c.out.Ptr(i); !e.Dead && e.Seq == seq {
			return e.Msg
		}
	}
	h.fail("seq %d not held", seq)
	return 0
}

func (h *harness) apply(x cmd) {
	m := h.m
	h.trims = x.op == opPublish || x.op == opTick || x.op == opConfig || x.op == opRequeue || x.op == opPlaceReserved
	switch x.op {
	case opPublish:
		h.nextID++
		id := h.nextID
		size := uint32(x.a % 40)
		prio := uint8(x.b % 6)
		ttl := int64(-1)
		switch x.c % 5 {
		case 0:
			ttl = 0
		case 1:
			ttl = x.c % 60
		}
		h.pubSeq++
		pub := PubID{Publisher: uint64(x.d%3 + 1), Seq: h.pubSeq}
		if x.d%7 == 0 {
			pub.Seq = h.pubSeq / 2 // a duplicate (or an old one)
		}
		h.fates[id] = live
		if m.Duplicate(pub) {
			h.fates[id] = refused
			h.trims = false
			return
		}
		if m.Rejects(id, size, x.a%2 == 0) {
			if h.fates[id] == live {
				h.fates[id] = refused
			}
			return
		}
		e := m.NewEntry(h.now, id, size, prio, x.a%2 == 0, ttl)
		if e.ExpiresAt != 0 && e.ExpiresAt <= h.now {
			h.trims = false // expires on arrival (or is delivered at once): nothing else moves
		}
		if h.window > 0 && (len(h.paged) > 0 || m.ReadyN() >= h.window) {
			h.paged = append(h.paged, e)
			m.PageOut(e, e.Seq)
			return
		}
		m.Place(h.now, e)
	case opAdd:
		h.nextC++
		c := &tc{ID: uint64(h.nextC), Ref: h.nextC, Priority: int(x.a % 3), NoAck: x.b%4 == 0, Prefetch: int(x.c % 4), Exclusive: x.d%10 == 0}
		if err := m.AddConsumer(c); err != nil {
			return
		}
		h.cons[c.Ref] = c
		h.active = append(h.active, c.Ref)
		m.Dispatch(h.now)
	case opRemove:
		if len(h.active) == 0 {
			return
		}
		i := int(x.a) % len(h.active)
		c := h.cons[h.active[i]]
		h.active = slices.Delete(h.active, i, i+1)
		m.RemoveConsumer(h.now, c)
		m.Dispatch(h.now)
	case opAck:
		c, seqs, ns := h.pick(x.a, x.b)
		for i, s := range seqs {
			id := h.idFor(c, s)
			if _, ok := m.Ack(c, s, ns[i]); !ok {
				h.fail("ack of held seq %d refused", s)
			}
			h.setFate(id, acked, "acked")
		}
	case opRequeue:
		c, seqs, ns := h.pick(x.a, x.b)
		h.trims = c != nil
		failed := x.c%2 == 0
		for i, s := range seqs {
			id := h.idFor(c, s)
			ct := h.counts[id]
			ct[1]++
			if failed || !m.cfg.Quorum {
				ct[0]++
			}
			h.counts[id] = ct
			if !m.Requeue(h.now, c, s, ns[i], failed) {
				h.fail("requeue of held seq %d refused", s)
			}
		}
		if c != nil {
			m.Returned(h.now)
		}
	case opReject:
		c, seqs, ns := h.pick(x.a, x.b)
		for i, s := range seqs {
			if !m.Reject(c, s, ns[i]) {
				h.fail("reject of held seq %d refused", s)
			}
		}
	case opGet:
		if e, _, ok := m.Get(h.now, x.a%3 == 0); ok {
			h.seen[e.Msg] = true
		}
	case opUntake:
		if m.get.outN == 0 {
			return
		}
		_, seqs, ns := h.pick(int64(len(h.holders())-1), x.b)
		for i, s := range seqs {
			if !m.Untake(&m.get, s, ns[i], x.c%2 == 0, false) {
				h.fail("untake of held seq %d refused", s)
			}
		}
		m.Dispatch(h.now)
	case opTick:
		h.now += x.a % 40
		m.Tick(h.now)
	case opDispatch:
		m.Dispatch(h.now)
	case opSink:
		if len(h.active) > 0 {
			r := h.active[int(x.a)%len(h.active)]
			h.sink[r] = !h.sink[r]
		}
		m.Dispatch(h.now)
	case opPurge:
		m.EachQueued(func(e *ten) { h.setFate(e.Msg, purged, "purged") })
		for _, e := range h.paged {
			h.setFate(e.Msg, purged, "purged")
		}
		h.paged = nil
		m.Purge()
	case opConfig:
		cfg := m.cfg
		if x.a%2 == 0 {
			cfg.MaxLength = x.b % 10
		} else {
			cfg.MaxLength = -1
		}
		m.SetConfig(h.now, cfg)
	case opDLX:
		cfg := m.cfg
		cfg.DLX = !cfg.DLX
		m.SetConfig(h.now, cfg)
	case opTake:
		// Take (the replay's filter): the k-th ready message of a level
		// into the get holder, leaving the others where they are.
		l := int(x.a) % m.Levels()
		k := int(x.b % 5)
		m.Walk(l, 0, func(e *ten) bool {
			if k > 0 {
				k--
				return true
			}
			t := m.TakeEntry(e)
			h.seen[t.Msg] = true
			return false
		})
	case opReserve:
		h.reserved = append(h.reserved, m.Reserve())
	case opPlaceReserved:
		// a dead letter moving in takes its place among later publishes
		if len(h.reserved) == 0 {
			h.trims = false
			return
		}
		i := int(x.a) % len(h.reserved)
		seq := h.reserved[i]
		h.reserved = slices.Delete(h.reserved, i, i+1)
		h.nextID++
		id := h.nextID
		h.fates[id] = live
		if m.Rejects(id, uint32(x.b%40), false) {
			if h.fates[id] == live {
				h.fates[id] = refused
			}
			h.trims = false
			return
		}
		h.seen[id] = true // not in publish order: exempt from the first-delivery order check
		m.Place(h.now, m.EntryAt(h.now, seq, id, uint32(x.b%40), uint8(x.c%6), false, -1))
	}
}

// check verifies conservation and the counters.
func (h *harness) check() {
	m := h.m
	where := map[uint64]string{}
	put := func(id uint64, w string) {
		if o, ok := where[id]; ok {
			h.fail("msg %d both %s and %s", id, o, w)
		}
		where[id] = w
	}
	ready := 0
	for l := range m.ready.levels {
		d := &m.ready.levels[l]
		for j := 0; j < d.Len(); j++ {
			if e := d.Ptr(j); !e.Dead {
				put(e.Msg, "ready")
				ready++
				if int(e.Level) != l {
					h.fail("msg %d at level %d has level %d", e.Msg, l, e.Level)
				}
				if j > 0 && d.Ptr(j-1).Seq >= e.Seq {
					h.fail("level %d not in seq order", l)
				}
			}
		}
	}
	for _, de := range m.delayed {
		put(de.e.Msg, "delayed")
	}
	unacked := 0
	m.EachCheckedOut(func(c *tc, e *ten) { put(e.Msg, "unacked"); unacked++ })
	for _, e := range h.paged {
		put(e.Msg, "paged")
	}
	var n [7]int
	for id, f := range h.fates {
		n[f]++
		_, in := where[id]
		if f == live && !in {
			h.fail("msg %d lost: not ready, delayed, unacked or paged, and no fate", id)
		}
		if f != live && in {
			h.fail("msg %d has fate %d but is still in the queue (%s)", id, f, where[id])
		}
	}
	l := m.Lengths()
	if l.Ready.All.N != ready || l.Unacked.All.N != unacked || l.Paged.All.N != len(h.paged) || l.Delayed != len(m.delayed) {
		h.fail("lengths %+v, counted ready %d unacked %d paged %d", l, ready, unacked, len(h.paged))
	}
	s := m.Stats()
	var dl, dr uint64
	for i := range s.DeadLettered {
		dl += s.DeadLettered[i]
		dr += s.Dropped[i]
	}
	if int(s.Acked) != n[acked] || int(dl) != n[deadLettered] || int(dr) != n[dropped] {
		h.fail("stats acked %d dl %d dropped %d; fates acked %d dl %d dropped %d", s.Acked, dl, dr, n[acked], n[deadLettered], n[dropped])
	}
	if h.trims && m.cfg.Overflow == DropHead && m.overLimit() && l.Ready.All.N+l.Paged.All.N > 0 {
		h.fail("over the length limit under drop-head: %+v", l)
	}
}

func encID(b []byte, id uint64) []byte { return binary.AppendUvarint(b, id) }
func decID(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, ErrSnapshot
	}
	return v, b[n:], nil
}

func (h *harness) snapshot() []byte { return h.m.Snapshot(nil, encID) }

// restore makes a copy of h from a snapshot of its machine plus a copy of
// the shell's own state (the paging disk, the sinks).
func (h *harness) restore(t testing.TB, snap []byte) *harness {
	g := &harness{t: t, now: h.now, window: h.window, paged: slices.Clone(h.paged), sink: map[int]bool{}, cons: map[int]*tc{},
		active: slices.Clone(h.active), nextC: h.nextC, fates: map[uint64]fate{}, nextID: h.nextID, counts: map[uint64][2]uint32{},
		lastFirst: map[uint8]uint64{}, idOf: map[uint64]uint64{}, pubSeq: h.pubSeq, seen: map[uint64]bool{},
		reserved: slices.Clone(h.reserved)}
	for k, v := range h.seen {
		g.seen[k] = v
	}
	for k, v := range h.sink {
		g.sink[k] = v
	}
	for k, v := range h.fates {
		g.fates[k] = v
	}
	for k, v := range h.counts {
		g.counts[k] = v
	}
	for k, v := range h.lastFirst {
		g.lastFirst[k] = v
	}
	m, err := Decode[uint64, int](snap, g, decID, func(id uint64) int { return int(id) })
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	g.m = m
	for _, c := range m.consumers {
		g.cons[c.Ref] = c
	}
	for _, c := range m.holders {
		g.cons[c.Ref] = c
	}
	return g
}

func runLog(t testing.TB, seed int64, log []cmd, check bool) *harness {
	h := newHarness(t, rand.New(rand.NewSource(seed)))
	for i, x := range log {
		h.apply(x)
		if check {
			h.check()
		}
		if len(h.failures) > 0 {
			t.Fatalf("seed %d, command %d (%+v): %v", seed, i, x, h.failures)
		}
	}
	return h
}

func genLog(seed int64, n int) []cmd {
	rng := rand.New(rand.NewSource(seed ^ 0x5eed))
	log := make([]cmd, n)
	for i := range log {
		log[i] = genCmd(rng)
	}
	return log
}

// TestMachineProperties is issue 12's property test: for seeded random
// configurations and command logs, every message ends exactly once as
// acked, dead-lettered, dropped or expired, or is still ready, delayed,
// paged out or unacked (conservation); deliveries come in order; single
// active consumer holds; delivery counts are right; the counters agree.
func TestMachineProperties(t *testing.T) {
	seeds, steps := 400, 400
	if n, err := strconv.Atoi(os.Getenv("MACHINE_SEEDS")); err == nil {
		seeds = n
	}
	if testing.Short() {
		seeds = 100
	}
	for seed := int64(1); seed <= int64(seeds); seed++ {
		runLog(t, seed, genLog(seed, steps), true)
	}
}

// TestMachineDeterministic is issue 12's replay property: the same
// command log applied twice gives the same state (snapshot bytes), and a
// snapshot taken anywhere plus the rest of the log gives the same state
// as the whole log.
func TestMachineDeterministic(t *testing.T) {
	for seed := int64(1); seed <= 200; seed++ {
		log := genLog(seed, 300)
		a := runLog(t, seed, log, false)
		b := runLog(t, seed, log, false)
		sa, sb := a.snapshot(), b.snapshot()
		if !bytes.Equal(sa, sb) {
			t.Fatalf("seed %d: the same log gave different states", seed)
		}
		cut := int(seed*7919) % len(log)
		h := runLog(t, seed, log[:cut], false)
		snap := h.snapshot()
		g := h.restore(t, snap)
		if again := g.snapshot(); !bytes.Equal(again, snap) {
			t.Fatalf("seed %d: decode then encode changed the snapshot", seed)
		}
		for i, x := range log[cut:] {
			g.apply(x)
			if len(g.failures) > 0 {
				t.Fatalf("seed %d after restore, command %d: %v", seed, cut+i, g.failures)
			}
		}
		if sg := g.snapshot(); !bytes.Equal(sg, sa) {
			t.Fatalf("seed %d: snapshot at %d plus the rest differs from the whole log", seed, cut)
		}
	}
}

// FuzzMachine runs the property harness on command logs from the fuzzer
// (issue 12). `go test -fuzz FuzzMachine -fuzztime 20s ./broker/machine`.
func FuzzMachine(f *testing.F) {
	f.Add(int64(1), []byte{0, 1, 0, 3, 8, 4, 2})
	f.Add(int64(7), []byte{1, 0, 0, 0, 6, 7, 4, 4, 10, 11, 12, 13})
	f.Fuzz(func(t *testing.T, seed int64, ops []byte) {
		if len(ops) > 2000 {
			return
		}
		rng := rand.New(rand.NewSource(seed))
		log := make([]cmd, len(ops))
		for i, o := range ops {
			log[i] = genCmd(rng)
			log[i].op = int(o) % nOps
		}
		h := runLog(t, seed, log, true)
		g := h.restore(t, h.snapshot())
		if !bytes.Equal(g.snapshot(), h.snapshot()) {
			t.Fatal("snapshot round trip")
		}
	})
}

// FuzzDecode feeds Decode damaged and random snapshots (issue 12: a
// snapshot comes back from disk, and later over the network): it returns
// an error or a machine, never panics, and what it accepts encodes to a
// canonical snapshot that decodes to itself.
func FuzzDecode(f *testing.F) {
	for seed := int64(1); seed <= 8; seed++ {
		h := runLog(f, seed, genLog(seed, 200), false)
		f.Add(seed, h.snapshot())
	}
	f.Fuzz(func(t *testing.T, seed int64, b []byte) {
		h := newHarness(t, rand.New(rand.NewSource(seed)))
		m, err := Decode[uint64, int](b, h, decID, func(id uint64) int { return int(id) })
		if err != nil {
			return
		}
		s1 := m.Snapshot(nil, encID)
		m2, err := Decode[uint64, int](s1, h, decID, func(id uint64) int { return int(id) })
		if err != nil {
			t.Fatalf("a snapshot of a decoded machine does not decode: %v", err)
		}
		if s2 := m2.Snapshot(nil, encID); !bytes.Equal(s1, s2) {
			t.Fatal("decode then encode is not stable")
		}
	})
}
