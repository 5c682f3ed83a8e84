package qrepl

import "github.com/warrenmq/warren/internal/deque"

// ring is the messages' records in queue order (ascending keys), in a
// block deque: growing never copies a record (internal/deque). Dead
// records (tombstones) stay in place until they reach an end or a
// compaction; they keep their keys, so the ring stays sorted and binary
// search works. The zero value is empty.
type ring struct{ d deque.Deque[rec] }

// ringOf is a ring of recs (in order).
func ringOf(recs []rec) ring { return ring{deque.Of(recs)} }

func (q *ring) len() int      { return q.d.Len() }
func (q *ring) at(i int) *rec { return q.d.At(i) }
func (q *ring) capacity() int { return q.d.Cap() }
func (q *ring) full() bool    { return q.d.Full() }
func (q *ring) push(r rec)    { q.d.Push(r) }
func (q *ring) popFront()     { q.d.PopFront() }
func (q *ring) popBack()      { q.d.PopBack() }
func (q *ring) reset()        { q.d.Reset() }

// search finds key: the logical index of the first record with a key >=
// key, and whether it is key.
func (q *ring) search(key uint64) (int, bool) {
	i := q.d.Search(func(r *rec) bool { return r.key >= key })
	return i, i < q.d.Len() && q.d.At(i).key == key
}

// compact drops the tombstones, keeping order, and the blocks left
// empty.
func (q *ring) compact() {
	w, n := 0, q.d.Len()
	for i := range n {
		if r := q.d.At(i); r.flags&fDead == 0 {
			if w != i {
				*q.d.At(w) = *r
			}
			w++
		}
	}
	q.d.Truncate(w)
}
