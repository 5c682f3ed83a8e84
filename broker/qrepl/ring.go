package qrepl

// ring is the messages' records in queue order (ascending keys), kept in
// blocks of ringBlock records: the back pushes into the last block (a new
// one when it is full), the head pops from the first (which is dropped,
// or kept as the spare, when it is used up). Growing never copies a
// record, so a long queue costs one zeroed allocation per record pushed,
// not the repeated moves of a buffer that grows. Dead records
// (tombstones) stay in place until they reach an end or a compaction;
// they keep their keys, so the ring stays sorted and binary search
// works. The zero value is empty.
type ring struct {
	blocks [][]rec // each ringBlock records
	head   int     // the slot of logical index 0 in blocks[0]
	n      int     // records in use, tombstones included
	spares [][]rec // emptied (zeroed) blocks kept for the next pushes
}

// ringSpares bounds the spare blocks a ring keeps (4096 records, 192
// KiB): enough for a queue that fills and drains in batches to reuse its
// blocks.
const ringSpares = 16

// ringBlock is the records per block (12 KiB at 48 bytes a record).
const (
	ringShift = 8
	ringBlock = 1 << ringShift
)

// ringOf is a ring of recs (in order), sharing their memory where whole
// blocks fit.
func ringOf(recs []rec) ring {
	var q ring
	for i := 0; i < len(recs); i += ringBlock {
		if i+ringBlock <= len(recs) {
			q.blocks = append(q.blocks, recs[i:i+ringBlock:i+ringBlock])
		} else {
			b := make([]rec, ringBlock)
			copy(b, recs[i:])
			q.blocks = append(q.blocks, b)
		}
	}
	q.n = len(recs)
	return q
}

// at is the record at logical index i (0 <= i < n).
func (q *ring) at(i int) *rec {
	p := uint(q.head + i)
	return &q.blocks[p>>ringShift][p&(ringBlock-1)]
}

// capacity is the records the blocks hold.
func (q *ring) capacity() int { return len(q.blocks) * ringBlock }

// full reports whether the next push takes a new block.
func (q *ring) full() bool { return q.head+q.n == q.capacity() }

// push appends r at the back.
func (q *ring) push(r rec) {
	if q.full() {
		var b []rec
		if n := len(q.spares); n > 0 {
			b, q.spares[n-1] = q.spares[n-1], nil
			q.spares = q.spares[:n-1]
		} else {
			b = make([]rec, ringBlock)
		}
		q.blocks = append(q.blocks, b)
	}
	*q.at(q.n) = r
	q.n++
}

func (q *ring) popFront() {
	*q.at(0) = rec{}
	q.head++
	q.n--
	if q.head == ringBlock { // the first block is used up (and zeroed)
		q.keep(q.blocks[0])
		q.blocks[0] = nil
		q.blocks = q.blocks[1:]
		q.head = 0
	}
}

func (q *ring) popBack() {
	*q.at(q.n - 1) = rec{}
	q.n--
	if last := len(q.blocks) - 1; q.head+q.n <= last*ringBlock && (last > 0 || q.n == 0) {
		q.trim() // the last block is empty
	}
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

// compact drops the tombstones, keeping order, and the blocks left
// empty.
func (q *ring) compact(int) {
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
	q.trim()
}

// keep makes the zeroed block b a spare, if there is room.
func (q *ring) keep(b []rec) {
	if len(q.spares) < ringSpares {
		q.spares = append(q.spares, b)
	}
}

// trim drops the blocks past the last record (they are zeroed: every
// record past n is), keeping some as spares.
func (q *ring) trim() {
	used := (q.head + q.n + ringBlock - 1) / ringBlock
	if q.n == 0 {
		used, q.head = 0, 0
	}
	for i := used; i < len(q.blocks); i++ {
		q.keep(q.blocks[i])
		q.blocks[i] = nil
	}
	q.blocks = q.blocks[:used]
}

// reset empties the ring, keeping some blocks as spares.
func (q *ring) reset() {
	for i := 0; i < q.n; i++ {
		*q.at(i) = rec{}
	}
	q.n = 0
	q.trim()
}
