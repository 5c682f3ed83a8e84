package qrepl

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/warrenmq/warren/internal/deque"
)

// TestRing: issue 14: the state's ring buffer against a slice: pushes,
// pops at both ends, tombstones, compaction and growth while wrapped.
func TestRing(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var q ring
	var model []rec
	key := uint64(0)
	for step := 0; step < 200_000; step++ {
		switch x := r.IntN(100); {
		case x < 45:
			key += 1 + uint64(r.IntN(3))
			q.Push(rec{key: key, id: key})
			model = append(model, rec{key: key, id: key})
		case x < 75 && len(model) > 0:
			q.PopFront()
			model = model[1:]
		case x < 80 && len(model) > 0:
			q.PopBack()
			model = model[:len(model)-1]
		case x < 95 && len(model) > 0:
			i := r.IntN(len(model))
			q.At(i).flags |= fDead
			model[i].flags |= fDead
		case x < 97:
			q.compact()
			model = slices.DeleteFunc(model, func(m rec) bool { return m.flags&fDead != 0 })
		default:
			if len(model) > 0 {
				want := model[r.IntN(len(model))].key
				if i, ok := q.search(want); !ok || q.At(i).key != want {
					t.Fatalf("step %d: search %d: %d %v", step, want, i, ok)
				}
				if i, ok := q.search(want + 1<<40); ok || i != q.Len() {
					t.Fatalf("step %d: search beyond: %d %v", step, i, ok)
				}
			}
		}
		if q.Len() != len(model) || q.Len() > q.Cap() || q.Cap() > q.Len()+2*deque.Block {
			t.Fatalf("step %d: n %d, model %d, cap %d", step, q.Len(), len(model), q.Cap())
		}
		if step%97 == 0 {
			for i := range model {
				if *q.At(i) != model[i] {
					t.Fatalf("step %d: at(%d) = %+v, want %+v", step, i, *q.At(i), model[i])
				}
			}
		}
	}
}
