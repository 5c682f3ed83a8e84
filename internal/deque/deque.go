// Package deque is a double-ended queue kept in fixed blocks: pushes at
// the back take a new block when the last is full, pops at the front drop
// the first block when it is used up. Growing never copies an element, so
// a long queue costs one zeroed allocation per element pushed, not the
// repeated moves of a slice that grows (the quorum queues' replicated
// state and paged-out tail: millions of elements, always growing at one
// end and shrinking at the other).
package deque

const (
	shift = 8
	// Block is the elements per block.
	Block = 1 << shift
	// spares bounds the emptied blocks a deque keeps for its next pushes.
	spares = 16
)

// Deque is the queue; the zero value is empty.
type Deque[T any] struct {
	blocks [][]T // each Block elements
	head   int   // the slot of element 0 in blocks[0]
	n      int
	spares [][]T // emptied (zeroed) blocks
}

// Of is a deque of s's elements, sharing s's memory where whole blocks
// fit: s belongs to the deque after.
func Of[T any](s []T) Deque[T] {
	var d Deque[T]
	for i := 0; i < len(s); i += Block {
		if i+Block <= len(s) {
			d.blocks = append(d.blocks, s[i:i+Block:i+Block])
		} else {
			b := make([]T, Block)
			copy(b, s[i:])
			d.blocks = append(d.blocks, b)
		}
	}
	d.n = len(s)
	return d
}

// Len is the number of elements.
func (d *Deque[T]) Len() int { return d.n }

// Cap is the number of elements the blocks hold.
func (d *Deque[T]) Cap() int { return len(d.blocks) * Block }

// Full reports whether the next push takes a new block.
func (d *Deque[T]) Full() bool { return d.head+d.n == d.Cap() }

// At is element i (0 <= i < Len).
func (d *Deque[T]) At(i int) *T {
	p := uint(d.head + i)
	return &d.blocks[p>>shift][p&(Block-1)]
}

// Push appends v at the back.
func (d *Deque[T]) Push(v T) {
	if d.Full() {
		var b []T
		if k := len(d.spares); k > 0 {
			b, d.spares[k-1] = d.spares[k-1], nil
			d.spares = d.spares[:k-1]
		} else {
			b = make([]T, Block)
		}
		d.blocks = append(d.blocks, b)
	}
	*d.At(d.n) = v
	d.n++
}

// PopFront removes the first element.
func (d *Deque[T]) PopFront() { d.DropFront(1) }

// DropFront removes the first k elements.
func (d *Deque[T]) DropFront(k int) {
	var zero T
	for i := range k {
		*d.At(i) = zero
	}
	d.head += k
	d.n -= k
	for d.head >= Block { // the first block is used up (and zeroed)
		d.keep(d.blocks[0])
		d.blocks[0] = nil
		d.blocks = d.blocks[1:]
		d.head -= Block
	}
	if d.n == 0 {
		d.trim()
	}
}

// PopBack removes the last element.
func (d *Deque[T]) PopBack() { d.Truncate(d.n - 1) }

// Truncate keeps the first k elements.
func (d *Deque[T]) Truncate(k int) {
	var zero T
	for i := k; i < d.n; i++ {
		*d.At(i) = zero
	}
	d.n = k
	d.trim()
}

// Reset empties the deque, keeping some blocks for its next pushes.
func (d *Deque[T]) Reset() { d.Truncate(0) }

// Search is the first index i in [0, Len) for which f(At(i)) is true, f
// being false and then true along the deque (sort.Search's contract);
// Len if there is none.
func (d *Deque[T]) Search(f func(*T) bool) int {
	// Not sort.Search: its closure around f costs a third more on the
	// state's removes (BenchmarkApplyRemoveHead).
	lo, hi := 0, d.n
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if !f(d.At(h)) {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return lo
}

// keep makes the zeroed block b a spare, if there is room.
func (d *Deque[T]) keep(b []T) {
	if len(d.spares) < spares {
		d.spares = append(d.spares, b)
	}
}

// trim drops the blocks past the last element (they are zeroed).
func (d *Deque[T]) trim() {
	if d.n == 0 {
		d.head = 0
	}
	used := (d.head + d.n + Block - 1) / Block
	for i := used; i < len(d.blocks); i++ {
		d.keep(d.blocks[i])
		d.blocks[i] = nil
	}
	d.blocks = d.blocks[:used]
}
