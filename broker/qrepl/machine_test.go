package qrepl

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/warrenmq/warren/broker/machine"
)

// fx is a quorum queue machine's effects, recording the requeues a
// leader turns into Return items. Messages are their replicated ids.
type fx struct {
	requeued []ReturnItem
}

func (f *fx) Deliver(*machine.Consumer[uint64, int], machine.Entry[uint64]) bool { return false }
func (f *fx) DeadLetter(machine.Entry[uint64], machine.Reason)                   {}
func (f *fx) Drop(machine.Entry[uint64], machine.Reason)                         {}
func (f *fx) Settled(machine.Entry[uint64])                                      {}
func (f *fx) PageIn(bool)                                                        {}
func (f *fx) ExpirePaged(machine.Timed)                                          {}
func (f *fx) IsPaged(machine.Timed) bool                                         { return false }
func (f *fx) Requeued(e machine.Entry[uint64], seq uint64, delayUntil int64) {
	f.requeued = append(f.requeued, ReturnItem{ID: e.Msg, DeliveryCount: e.DeliveryCount, Acquired: e.Acquired,
		Redelivered: e.Redelivered, Back: seq != e.Seq, DelayUntil: delayUntil})
}

// TestMachineOrder: issue 14: the replicated queue order is the order a
// quorum queue's machine holds its ready messages in, when the leader
// gives the machine enqueues and returns in apply order, with and
// without a delivery limit (returns to the back, or in place); and a
// machine rebuilt from Messages (Order as the sequence number) holds
// them in the same order.
func TestMachineOrder(t *testing.T) {
	for _, limit := range []int64{-1, 1 << 30} {
		for seed := uint64(1); seed <= 40; seed++ {
			machineOrder(t, seed, limit)
		}
	}
}

func machineOrder(t *testing.T, seed uint64, limit int64) {
	r := rand.New(rand.NewPCG(seed, uint64(limit)))
	cfg := machine.DefaultConfig()
	cfg.Quorum, cfg.DeliveryLimit = true, limit
	f := &fx{}
	m := machine.New[uint64, int](cfg, f)
	h := m.Holder()
	s := New()
	type out struct{ seq, n uint64 }
	taken := map[uint64]out{} // id -> checkout
	index := uint64(0)
	commit := func(c Command) {
		index++
		if _, err := s.Apply(index, Encode(c)); err != nil {
			t.Fatal(err)
		}
	}
	for step := 0; step < 300; step++ {
		switch x := r.IntN(10); {
		case x < 4:
			commit(Enqueue{Size: 1})
			m.Place(0, m.NewEntry(0, index, 1, 0, true, -1))
		case x < 7:
			n := h.Next()
			e, _, ok := m.Get(0, false)
			if ok {
				taken[e.Msg] = out{e.Seq, n}
			}
		default:
			if len(taken) == 0 {
				continue
			}
			ids := make([]uint64, 0, len(taken))
			for id := range taken {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			id := ids[r.IntN(len(ids))]
			o := taken[id]
			delete(taken, id)
			if r.IntN(2) == 0 {
				m.Ack(h, o.seq, o.n)
				commit(Remove{IDs: []uint64{id}})
			} else {
				f.requeued = f.requeued[:0]
				m.Requeue(0, h, o.seq, o.n, r.IntN(2) == 0)
				m.Returned(0)
				commit(Return{Items: slices.Clone(f.requeued)})
			}
		}
		// The machine's ready messages, in order, against the state's
		// messages not checked out.
		var want, got []uint64
		m.Walk(0, 0, func(e *machine.Entry[uint64]) bool { want = append(want, e.Msg); return true })
		s.Messages(func(x Msg) bool {
			if _, out := taken[x.ID]; !out {
				got = append(got, x.ID)
			}
			return true
		})
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d limit %d step %d: state order %v, machine %v", seed, limit, step, got, want)
		}
	}
	// A new leader's machine from the state.
	var ready []machine.Entry[uint64]
	s.Messages(func(x Msg) bool {
		ready = append(ready, machine.Entry[uint64]{Seq: x.Order, Msg: x.ID, Size: x.Size, Redelivered: x.Redelivered})
		return true
	})
	n := machine.New[uint64, int](cfg, &fx{})
	n.Restore(ready, nil, nil, machine.Counts{}, nil, s.LastOrder())
	var got []uint64
	n.Walk(0, 0, func(e *machine.Entry[uint64]) bool { got = append(got, e.Msg); return true })
	want := make([]uint64, 0, len(ready))
	for _, e := range ready {
		want = append(want, e.Msg)
	}
	if !slices.Equal(got, want) || n.ReadyN() != s.Len() {
		t.Fatalf("seed %d: rebuilt machine order %v, state %v", seed, got, want)
	}
}
