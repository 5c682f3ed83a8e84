package qrepl

// ring is the messages' records in queue order (ascending keys), a ring
// buffer: the head pops and the back pushes of a busy queue reuse the
// same slots, copying nothing. Dead records (tombstones) stay in place
// until they reach an end or a compaction; they keep their keys, so the
// ring stays sorted and binary search works. The zero value is empty.
type ring struct {
	buf  []rec // len(buf) is the capacity
	head int   // the slot of logical index 0
	n    int   // records in use, tombstones included
}

// at is the record at logical index i (0 <= i < n).
func (q *ring) at(i int) *rec {
	j := q.head + i
	if j >= len(q.buf) {
		j -= len(q.buf)
	}
	return &q.buf[j]
}

// push appends r at the back, growing the buffer by a quarter when full.
func (q *ring) push(r rec) {
	if q.n == len(q.buf) {
		q.resize(q.n + q.n/4 + 16)
	}
	*q.at(q.n) = r
	q.n++
}

// resize moves the records to a new buffer of capacity c (>= n), head
// first.
func (q *ring) resize(c int) {
	nb := make([]rec, c)
	if q.n > 0 {
		k := copy(nb, q.buf[q.head:min(q.head+q.n, len(q.buf))])
		copy(nb[k:], q.buf[:q.n-k])
	}
	q.buf, q.head = nb, 0
}

func (q *ring) popFront() {
	*q.at(0) = rec{}
	q.head++
	if q.head == len(q.buf) {
		q.head = 0
	}
	q.n--
}

func (q *ring) popBack() {
	*q.at(q.n - 1) = rec{}
	q.n--
}

// search finds key: the logical index of the first record with a key >=
// key, and whether it is key.
func (q *ring) search(key uint64) (int, bool) {
	lo, hi := 0, q.n
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if q.at(h).key < key {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return lo, lo < q.n && q.at(lo).key == key
}

// compact drops the tombstones, keeping order, and gives memory back
// when the ring is mostly room.
func (q *ring) compact(live int) {
	w := 0
	for i := 0; i < q.n; i++ {
		if r := q.at(i); r.flags&fDead == 0 {
			if w != i {
				*q.at(w) = *r
			}
			w++
		}
	}
	for i := w; i < q.n; i++ {
		*q.at(i) = rec{}
	}
	q.n = w
	if len(q.buf) > 2*live+1024 {
		q.resize(live + live/4 + 16)
	}
}

// reset empties the ring, keeping a buffer up to 64k records (3 MiB).
func (q *ring) reset() {
	if len(q.buf) > 1<<16 {
		q.buf = nil
	} else {
		for i := 0; i < q.n; i++ {
			*q.at(i) = rec{}
		}
	}
	q.head, q.n = 0, 0
}
