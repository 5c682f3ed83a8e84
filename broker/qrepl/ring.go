package qrepl

import "github.com/warrenmq/warren/internal/deque"

// ring is the messages' records in queue order (ascending keys), in a
// block deque: growing never copies a record (internal/deque). Dead
// records (tombstones) stay in place until they reach an end or a
// compaction; they keep their keys, so the ring stays sorted and binary
// search works. The zero value is empty.
type ring struct{ deque.Deque[rec] }

// ringOf is a ring of recs (in order).
func ringOf(recs []rec) ring { return ring{deque.Of(recs)} }

// search finds key: the logical index of the first record with a key >=
// key, and whether it is key.
func (q *ring) search(key uint64) (int, bool) {
	i := q.Search(func(r *rec) bool { return r.key >= key })
	return i, i < q.Len() && q.At(i).key == key
}

// compact drops the tombstones, keeping order, and the blocks left
// empty.
func (q *ring) compact() {
	w, n := 0, q.Len()
	for i := range n {
		if r := q.At(i); r.flags&fDead == 0 {
			if w != i {
				*q.At(w) = *r
			}
			w++
		}
	}
	q.Truncate(w)
}
