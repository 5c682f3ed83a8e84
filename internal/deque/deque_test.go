package deque

import (
	"math/rand/v2"
	"testing"
)

// TestDeque against a slice: pushes, pops and drops at the front, pops
// and truncation at the back, resets, across many blocks; the blocks
// held never exceed what the elements need by more than two.
func TestDeque(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var d Deque[int]
	var model []int
	next := 0
	for step := range 300_000 {
		switch x := r.IntN(100); {
		case x < 50:
			d.Push(next)
			model = append(model, next)
			next++
		case x < 75 && len(model) > 0:
			d.PopFront()
			model = model[1:]
		case x < 80 && len(model) > 0:
			k := r.IntN(min(len(model), 3*Block) + 1)
			d.DropFront(k)
			model = model[k:]
		case x < 95 && len(model) > 0:
			d.PopBack()
			model = model[:len(model)-1]
		case x < 99 && len(model) > 0:
			k := r.IntN(len(model) + 1)
			d.Truncate(k)
			model = model[:k]
		case x == 99:
			d.Reset()
			model = model[:0]
		}
		if d.Len() != len(model) || d.Cap() > d.Len()+2*Block || len(d.spares) > spares {
			t.Fatalf("step %d: len %d, model %d, cap %d, spares %d", step, d.Len(), len(model), d.Cap(), len(d.spares))
		}
		if step%101 == 0 {
			for i, v := range model {
				if *d.At(i) != v {
					t.Fatalf("step %d: At(%d) = %d, want %d", step, i, *d.At(i), v)
				}
			}
			if len(model) > 0 {
				want := model[r.IntN(len(model))]
				if i := d.Search(func(v *int) bool { return *v >= want }); i >= len(model) || model[i] != want {
					t.Fatalf("step %d: Search(%d) = %d", step, want, i)
				}
			}
		}
	}
}

// Of shares whole blocks and copies the tail; spares are zeroed (a
// reused block shows no old element).
func TestOfAndSpares(t *testing.T) {
	s := make([]int, 2*Block+5)
	for i := range s {
		s[i] = i + 1
	}
	d := Of(s)
	if d.Len() != len(s) || *d.At(Block) != Block+1 || *d.At(2*Block + 4) != 2*Block+5 {
		t.Fatalf("Of: len %d", d.Len())
	}
	s[0] = -1
	if *d.At(0) != -1 {
		t.Fatal("Of copied a whole block")
	}
	d.Reset()
	for range Block {
		d.Push(0)
	}
	for i := range Block {
		if *d.At(i) != 0 {
			t.Fatalf("a reused block holds %d at %d", *d.At(i), i)
		}
	}
}
