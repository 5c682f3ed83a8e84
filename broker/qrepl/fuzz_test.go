package qrepl

import (
	"testing"

	"github.com/warrenmq/warren/broker/machine"
)

// seedState is a small state with every kind of message: moved, delayed,
// marked.
func seedState() *State {
	s := New()
	for i := uint64(1); i <= 6; i++ {
		s.Apply(i, Encode(Enqueue{Pub: PubID{Publisher: 3, Seq: i}, Time: int64(i), Size: 10, ExpiresAt: int64(i % 2 * 99)}))
	}
	s.Apply(7, Encode(Return{Items: []ReturnItem{{ID: 2, Back: true, Redelivered: true}, {ID: 4, DelayUntil: 50}}}))
	s.Apply(8, Encode(Discard{IDs: []uint64{5}, Reason: machine.MaxLen}))
	return s
}

// FuzzApply: issue 14: Apply of any bytes never panics; undecodable data
// is skipped (nothing but the applied index and the corrupt counter
// changes), and the state stays consistent (its snapshot restores to an
// Equal state).
func FuzzApply(f *testing.F) {
	for _, c := range []Command{Enqueue{Pub: PubID{Publisher: 3, Seq: 9}, Body: []byte("x")}, Remove{IDs: []uint64{1, 2, 7}},
		Return{Items: []ReturnItem{{ID: 3, Back: true}, {ID: 2, DelayUntil: 9}}}, Discard{IDs: []uint64{6}},
		Lease{UpTo: 5}, Purge{IDs: []uint64{1, 4}}, Prune{Now: 1 << 40},
		EnqueueBatch{Items: []Enqueue{{Pub: PubID{Publisher: 3, Seq: 10}, Body: []byte("y")}, {Size: 2, Body: []byte("zz")}}}} {
		f.Add(Encode(c))
	}
	f.Add([]byte{})
	f.Add([]byte{0x13, 0xff, 0xff, 0x03})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := seedState()
		before := s.Snapshot()
		_, err := s.Apply(9, data)
		if err != nil {
			b, _ := Restore(before)
			b.applied = 9
			b.stats.Corrupt++
			if !b.Equal(s) {
				t.Fatalf("undecodable %x changed the state", data)
			}
		}
		r, rerr := Restore(s.Snapshot())
		if rerr != nil || !r.Equal(s) {
			t.Fatalf("snapshot after %x: %v", data, rerr)
		}
		// a second entry still applies
		s.Apply(10, data)
		s.Live()
	})
}

// FuzzRestore: issue 14: Restore of any bytes never panics, and what it
// accepts snapshots to the same bytes.
func FuzzRestore(f *testing.F) {
	f.Add(seedState().Snapshot())
	batched := seedState()
	batched.Apply(9, Encode(EnqueueBatch{Items: []Enqueue{{Time: 9, Size: 1}, {Time: 9, Size: 2}}}))
	batched.Apply(10, Encode(Return{Items: []ReturnItem{{ID: BatchID(9, 1), Back: true}}}))
	f.Add(batched.Snapshot())
	f.Add(New().Snapshot())
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Restore(data)
		if err != nil {
			return
		}
		again, err := Restore(s.Snapshot())
		if err != nil || !again.Equal(s) {
			t.Fatalf("restored %x does not round-trip: %v", data, err)
		}
		s.Apply(s.Applied()+1, Encode(Remove{IDs: liveIDs(s)}))
		if s.Len() != 0 {
			t.Fatalf("len %d after removing every live id", s.Len())
		}
	})
}
