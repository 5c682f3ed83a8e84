package qrepl

import (
	"bytes"
	"reflect"
	"runtime"
	"slices"
	"testing"

	"github.com/warrenmq/warren/broker/machine"
)

// TestCodecRoundTrip: issue 14: every command decodes to what was
// encoded, and every strict prefix of an encoding is refused (an
// Enqueue's body is its tail, so only its header prefixes are).
func TestCodecRoundTrip(t *testing.T) {
	cmds := []Command{
		Enqueue{Pub: PubID{Publisher: 1 << 40, Seq: 99}, Time: 1_700_000_000_123, ExpiresAt: 1_700_000_060_000,
			Priority: 7, Persistent: true, Size: 12345, Body: []byte("the broker's encoded message")},
		Enqueue{Time: -5, Body: []byte{}},
		EnqueueBatch{Items: []Enqueue{
			{Pub: PubID{Publisher: 1 << 40, Seq: 100}, Prev: 99, Time: 1_700_000_000_124, Size: 3, Body: []byte("one")},
			{Time: 1_700_000_000_125, ExpiresAt: 9, Priority: 2, Persistent: true, Body: nil},
			{Pub: PubID{Publisher: 2, Seq: 1}, Time: 1_700_000_000_126, Size: 5, Body: []byte("three")}}},
		Remove{IDs: []uint64{5, 3, 1 << 47, 4}},
		Remove{},
		Return{Items: []ReturnItem{{ID: 9, DeliveryCount: 2, Acquired: 3, Redelivered: true, Back: true},
			{ID: 4, DelayUntil: 1_700_000_000_000}}},
		Discard{IDs: []uint64{8}, Reason: machine.DeliveryLimit},
		Lease{UpTo: 1 << 50},
		Purge{IDs: []uint64{1, 2, 3}},
		Prune{Now: 1_700_000_000_000},
	}
	for _, c := range cmds {
		b := Encode(c)
		if Kind(b[0]) != c.Kind() {
			t.Fatalf("%T: kind byte %x", c, b[0])
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		if !reflect.DeepEqual(norm(got), norm(c)) {
			t.Fatalf("decoded %+v, want %+v", got, c)
		}
		hdr := len(b)
		if e, ok := c.(Enqueue); ok {
			hdr -= len(e.Body)
			if e2, err := DecodeEnqueue(b); err != nil || !bytes.Equal(e2.Body, e.Body) {
				t.Fatalf("DecodeEnqueue: %+v %v", e2, err)
			}
		}
		for n := 0; n < hdr; n++ {
			if _, err := Decode(b[:n]); err == nil {
				t.Fatalf("%T: prefix %d of %d decoded", c, n, len(b))
			}
		}
		if bc, ok := c.(EnqueueBatch); ok {
			for j, e := range bc.Items {
				got, err := DecodeMessage(b, BatchID(77, j))
				if err != nil || !reflect.DeepEqual(norm(got), norm(e)) {
					t.Fatalf("DecodeMessage item %d: %+v %v", j, got, err)
				}
			}
			if _, err := DecodeMessage(b, BatchID(77, len(bc.Items))); err == nil {
				t.Fatal("DecodeMessage read an item past the batch")
			}
		}
		if _, ok := c.(Enqueue); !ok {
			if _, err := Decode(append(b, 0)); err == nil {
				t.Fatalf("%T: trailing byte accepted", c)
			}
		}
	}
	if _, err := DecodeEnqueue(Encode(Lease{UpTo: 1})); err == nil {
		t.Fatal("DecodeEnqueue took a lease")
	}
	// A Return beyond MaxReturn items is refused; id lists are not bounded.
	if _, err := Decode(Encode(Return{Items: make([]ReturnItem, MaxReturn+1)})); err == nil {
		t.Fatal("oversized return decoded")
	}
	if _, err := Decode(Encode(Return{Items: make([]ReturnItem, MaxReturn)})); err != nil {
		t.Fatalf("return of MaxReturn items: %v", err)
	}
	ids := make([]uint64, 200_000)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	if c, err := Decode(Encode(Purge{IDs: ids})); err != nil || len(c.(Purge).IDs) != len(ids) {
		t.Fatalf("purge of 200k ids: %v", err)
	}
}

// norm makes empty slices nil so DeepEqual compares contents.
func norm(c Command) Command {
	switch c := c.(type) {
	case Enqueue:
		if len(c.Body) == 0 {
			c.Body = nil
		}
		return c
	case Remove:
		if len(c.IDs) == 0 {
			c.IDs = nil
		}
		return c
	case EnqueueBatch:
		items := make([]Enqueue, len(c.Items))
		for i := range items {
			items[i] = norm(c.Items[i]).(Enqueue)
		}
		return EnqueueBatch{Items: items}
	}
	return c
}

// liveIDs lists s's live ids in queue order.
func liveIDs(s *State) []uint64 {
	var ids []uint64
	s.Messages(func(m Msg) bool { ids = append(ids, m.ID); return true })
	return ids
}

// TestBatchIDs: item j of the EnqueueBatch at index i is message
// BatchID(i, j): item 0 takes the id a lone Enqueue at i would, each
// names its entry (EntryOf) and sorts in log order; acks, returns and
// snapshots find them; Live lists each entry once.
func TestBatchIDs(t *testing.T) {
	s := New()
	s.Apply(1, Encode(Enqueue{Time: 1, Size: 1}))
	s.Apply(2, Encode(EnqueueBatch{Items: []Enqueue{{Time: 2, Size: 2}, {Time: 3, Size: 3}, {Time: 4, Size: 4}}}))
	s.Apply(3, Encode(Enqueue{Time: 5, Size: 5}))
	want := []uint64{1, 2, BatchID(2, 1), BatchID(2, 2), 3}
	if got := liveIDs(s); !slices.Equal(got, want) {
		t.Fatalf("ids %x, want %x", got, want)
	}
	for _, id := range want {
		if m, ok := s.Get(id); !ok || m.Order != EntryOf(id)<<16|uint64(ItemOf(id)) {
			t.Fatalf("Get(%x) = %+v %v", id, m, ok)
		}
	}
	if got := s.Live(); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("live entries %v", got)
	}
	// Item 2 back to the end, item 1 acked: entry 2 stays live for item 2.
	s.Apply(4, Encode(Return{Items: []ReturnItem{{ID: BatchID(2, 2), Back: true}}}))
	s.Apply(5, Encode(Remove{IDs: []uint64{2, BatchID(2, 1), BatchID(2, 7), BatchID(9, 1)}}))
	if got := liveIDs(s); !slices.Equal(got, []uint64{1, 3, BatchID(2, 2)}) {
		t.Fatalf("after return and remove: %x", got)
	}
	if got := s.Live(); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("live entries %v", got)
	}
	r, err := Restore(s.Snapshot())
	if err != nil || !r.Equal(s) {
		t.Fatalf("restore: %v", err)
	}
	// A batch at an index whose ids would reach batchBit is skipped whole.
	if res, _ := s.Apply(maxBatchIndex+1, Encode(EnqueueBatch{Items: []Enqueue{{Time: 9}}})); res.Batch != nil || s.Stats().Corrupt != 1 {
		t.Fatalf("batch beyond maxBatchIndex: %+v %+v", res, s.Stats())
	}
}

// TestQueueOrder: issue 14: the order a quorum queue's machine holds
// messages in: enqueues at the back, a return without delivery limit at
// the back under a new order key (sorted above every earlier key, so the
// machine's seq order), a return with one keeps its place; removal from
// anywhere.
func TestQueueOrder(t *testing.T) {
	s := New()
	must := func(i uint64, c Command) Result {
		t.Helper()
		r, err := s.Apply(i, Encode(c))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for i := uint64(1); i <= 5; i++ {
		must(i, Enqueue{Size: uint32(i)})
	}
	must(6, Return{Items: []ReturnItem{{ID: 2, Back: true, Redelivered: true, Acquired: 1}, {ID: 1, Back: true}, {ID: 3, DeliveryCount: 1}}})
	must(8, Enqueue{Size: 8})
	if r := must(9, Remove{IDs: []uint64{4, 4, 77, 0}}); r.N != 1 {
		t.Fatalf("remove: %+v", r)
	}
	var ids, orders []uint64
	s.Messages(func(m Msg) bool { ids = append(ids, m.ID); orders = append(orders, m.Order); return true })
	if want := []uint64{3, 5, 2, 1, 8}; !slices.Equal(ids, want) {
		t.Fatalf("order %v, want %v", ids, want)
	}
	if !slices.IsSorted(orders) || orders[2] != 6<<16 || orders[3] != 6<<16|1 {
		t.Fatalf("order keys %x", orders)
	}
	n := 0
	s.Messages(func(Msg) bool { n++; return n < 2 })
	if n != 2 {
		t.Fatalf("Messages went on after false: %d", n)
	}
	if _, ok := s.Get(4); ok {
		t.Fatal("Get of a removed message")
	}
	if s.LastOrder() != 8<<16 {
		t.Fatalf("last order %x", s.LastOrder())
	}
	if live := s.Live(); !slices.Equal(live, []uint64{1, 2, 3, 5, 8}) {
		t.Fatalf("live %v", live)
	}
	if m, _ := s.Get(2); !m.Redelivered || m.Acquired != 1 {
		t.Fatalf("returned message %+v", m)
	}
	if m, _ := s.Get(3); m.DeliveryCount != 1 || m.Order != 3<<16 {
		t.Fatalf("returned in place %+v", m)
	}
	if s.Len() != 5 || s.Bytes() != 1+2+3+5+8 {
		t.Fatalf("len %d bytes %d", s.Len(), s.Bytes())
	}
	// a removed message returned or removed again is not found
	if r := must(10, Return{Items: []ReturnItem{{ID: 4, Back: true}}}); r.N != 0 {
		t.Fatalf("return of a removed message: %+v", r)
	}
	if _, err := s.Apply(10, Encode(Lease{UpTo: 3})); err != ErrStale {
		t.Fatalf("stale apply: %v", err)
	}
	if _, err := s.Apply(11, []byte{0x99}); err != ErrCorrupt || s.Applied() != 11 {
		t.Fatalf("corrupt apply: %v, applied %d", err, s.Applied())
	}
}

// TestDiscardMarks: issue 14 (R1.14): Discard marks messages with their
// reason until Remove; a Return clears the mark; the marks survive a
// snapshot.
func TestDiscardMarks(t *testing.T) {
	s := New()
	for i := uint64(1); i <= 3; i++ {
		s.Apply(i, Encode(Enqueue{}))
	}
	s.Apply(4, Encode(Discard{IDs: []uint64{1, 3, 9}, Reason: machine.Expired}))
	s.Apply(5, Encode(Return{Items: []ReturnItem{{ID: 3}}}))
	r, err := Restore(s.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	var marks []Msg
	r.Messages(func(m Msg) bool {
		if m.DLX {
			marks = append(marks, m)
		}
		return true
	})
	if len(marks) != 1 || marks[0].ID != 1 || marks[0].Reason != machine.Expired {
		t.Fatalf("marks %+v", marks)
	}
	if st := r.Stats(); st.Discarded != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestLeaseMonotonic: issue 14: the lease only goes up.
func TestLeaseMonotonic(t *testing.T) {
	s := New()
	s.Apply(1, Encode(Lease{UpTo: 1024}))
	s.Apply(2, Encode(Lease{UpTo: 10}))
	if s.Lease() != 1024 {
		t.Fatalf("lease %d", s.Lease())
	}
}

// TestRestoreRefuses: issue 14: snapshots a state cannot hold are
// refused (keys out of order, a moved id also under its own key, counts
// beyond the data, trailing bytes).
func TestRestoreRefuses(t *testing.T) {
	s := New()
	for i := uint64(1); i <= 4; i++ {
		s.Apply(i, Encode(Enqueue{Size: 3}))
	}
	s.Apply(5, Encode(Return{Items: []ReturnItem{{ID: 2, Back: true}}}))
	good := s.Snapshot()
	if _, err := Restore(good); err != nil {
		t.Fatal(err)
	}
	bad := [][]byte{nil, {2}, good[:len(good)-1], append(slices.Clone(good), 0)}
	for i := range bad {
		if _, err := Restore(bad[i]); err == nil {
			t.Fatalf("case %d restored", i)
		}
	}
	// Hand-made: a moved id whose own key is also present.
	w := New()
	w.q = ringOf([]rec{{key: 1 << 16, id: 1}, {key: 2 << 16, id: 2}, {key: 3 << 16, id: 1, flags: fMoved}})
	w.moved = map[uint64]uint64{1: 3 << 16}
	w.live, w.applied, w.stats.Enqueued = 3, 3, 3
	if _, err := Restore(w.Snapshot()); err == nil {
		t.Fatal("duplicate id restored")
	}
	w.q.At(2).id, w.moved = 3, map[uint64]uint64{3: 3 << 16}
	if _, err := Restore(w.Snapshot()); err == nil {
		t.Fatal("moved message under its own key restored")
	}
	w.q.PopBack()
	w.moved, w.live = nil, 2
	if _, err := Restore(w.Snapshot()); err == nil {
		t.Fatal("enqueued 3, live 2, none removed: restored")
	}
	w.stats.Removed = 1
	if _, err := Restore(w.Snapshot()); err != nil {
		t.Fatalf("valid hand-made snapshot: %v", err)
	}
}

// TestMemory1M: issue 14: 1,000,000 live messages cost well under 100
// bytes each (the state's heap, measured with runtime.MemStats), and the
// snapshot is compact.
func TestMemory1M(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	const n = 1_000_000
	per, s := heapPerMessage(n)
	snap := s.Snapshot()
	t.Logf("%d live messages: %.1f heap bytes each; snapshot %d bytes (%.1f each)", n, per, len(snap), float64(len(snap))/n)
	if per >= 80 {
		t.Fatalf("%.1f bytes per message", per)
	}
	// After acking most of them from the head the memory goes back.
	ids := make([]uint64, 0, 1000)
	for id := uint64(1); id <= n-1000; id++ {
		ids = append(ids, id)
		if len(ids) == cap(ids) {
			s.ApplyCommand(s.Applied()+1, Remove{IDs: ids})
			ids = ids[:0]
		}
	}
	if s.Len() != 1000 || s.q.Cap() > 1<<16 {
		t.Fatalf("len %d cap %d after removing", s.Len(), s.q.Cap())
	}
	runtime.KeepAlive(s)
}

// heapPerMessage builds a state of n live messages (some returned to the
// back, some delayed) and reports its heap bytes per message.
func heapPerMessage(n int) (float64, *State) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := New()
	body := make([]byte, 100)
	for i := 1; i <= n; i++ {
		s.ApplyCommand(uint64(i), Enqueue{Pub: PubID{Publisher: uint64(1 + i%3), Seq: uint64(i)},
			Time: 1_700_000_000_000 + int64(i/100), Size: 100, Persistent: true, Body: body})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n), s
}

// issue 14 (publishing through any node): an enqueue whose Prev is not its
// publisher's last applied seq is dropped as out of order (Gap), so that a
// later publish never overtakes an earlier one whose proposal was lost:
// the earlier one's resend would be taken for a duplicate. Prev 0 is not
// checked; a publisher the state does not know accepts only Prev 0.
func TestEnqueuePrevChain(t *testing.T) {
	s := New()
	idx := uint64(0)
	enq := func(seq, prev uint64) Result {
		t.Helper()
		idx++
		res, err := s.Apply(idx, Encode(Enqueue{Pub: PubID{Publisher: 7, Seq: seq}, Prev: prev, Time: 1, Body: []byte("b")}))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	check := func(what string, res Result, dup, gap bool) {
		t.Helper()
		if res.Duplicate != dup || res.Gap != gap || (res.N == 1) != (!dup && !gap) {
			t.Fatalf("%s: %+v, want duplicate %v gap %v", what, res, dup, gap)
		}
	}
	check("unknown publisher with a prev", enq(5, 3), false, true)
	check("first, no prev", enq(5, 0), false, false)
	check("9 after 7, 7 missing", enq(9, 7), false, true)
	check("7 after 5", enq(7, 5), false, false)
	check("9 after 7", enq(9, 7), false, false)
	check("7 again", enq(7, 5), true, false)
	check("12, no prev", enq(12, 0), false, false)
	if s.Len() != 4 {
		t.Fatalf("%d messages, want 4", s.Len())
	}
}
