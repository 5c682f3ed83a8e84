package machine

import "sort"

// Entry is a message in a queue: ready, delayed, or checked out by a
// consumer. Msg is the shell's reference to the message (a pointer, an
// id); the machine never looks into it. Seg and OnDisk locate the
// message's record in the shell's log; the machine only carries them.
type Entry[M any] struct {
	Seq       uint64
	Msg       M
	ExpiresAt int64 // unix ms; 0 = never
	// DeliveryCount counts the returns that count toward the delivery
	// limit (x-delivery-count, R5.3); Acquired counts every delivery
	// returned to the queue (x-acquired-count).
	DeliveryCount uint32
	Acquired      uint32
	Seg           uint32
	Size          uint32 // body bytes: what x-max-length-bytes counts
	Level         uint8  // priority level
	Persistent    bool
	Redelivered   bool
	OnDisk        bool
	Dead          bool // tombstone: removed in place, skipped at the head
}

// Count counts messages and their body bytes.
type Count struct {
	N     int
	Bytes int64
}

func (c *Count) add(size uint32, d int) {
	c.N += d
	c.Bytes += int64(d) * int64(size)
}

// Counts are a set of messages: all of them, and the persistent ones.
type Counts struct {
	All, Persistent Count
}

// add counts a message of size bytes in (d = 1) or out (d = -1).
func (c *Counts) add(size uint32, persistent bool, d int) {
	c.All.add(size, d)
	if persistent {
		c.Persistent.add(size, d)
	}
}

// readyList holds ready messages in delivery order: by priority level
// (highest first), then by sequence number. Each level is sorted by seq,
// which lets a message be found by binary search and tombstoned where it
// sits (per-message TTL expires anywhere, not only at the head). The
// counts are of live entries only.
type readyList[M any] struct {
	levels []deque[Entry[M]]
	c      Counts
}

func (r *readyList[M]) push(e Entry[M]) {
	r.levels[e.Level].PushBack(e)
	r.c.add(e.Size, e.Persistent, 1)
}

// putBack returns a message to its position by sequence number.
func (r *readyList[M]) putBack(e Entry[M]) {
	d := &r.levels[e.Level]
	if d.Len() == 0 || d.Ptr(d.Len()-1).Seq < e.Seq {
		d.PushBack(e)
	} else {
		i := sort.Search(d.Len(), func(i int) bool { return d.Ptr(i).Seq >= e.Seq })
		if i < d.Len() && d.Ptr(i).Seq == e.Seq && d.Ptr(i).Dead {
			// Its own tombstone (taken in place, now returned): a
			// second entry with the seq would hide it from find.
			*d.Ptr(i) = e
		} else {
			d.Insert(i, e)
		}
	}
	r.c.add(e.Size, e.Persistent, 1)
}

// head returns the front of the highest non-empty level, dropping
// tombstones on the way; nil when empty.
func (r *readyList[M]) head() *Entry[M] {
	if r.c.All.N == 0 {
		for i := range r.levels {
			if r.levels[i].Len() > 0 {
				r.levels[i].Clear()
			}
		}
		return nil
	}
	for i := len(r.levels) - 1; i >= 0; i-- {
		d := &r.levels[i]
		for d.Len() > 0 && d.Ptr(0).Dead {
			d.PopFront()
		}
		if d.Len() > 0 {
			return d.Ptr(0)
		}
	}
	return nil
}

// pop removes the head; the list must not be empty.
func (r *readyList[M]) pop() Entry[M] {
	h := r.head()
	e := r.levels[h.Level].PopFront()
	r.c.add(e.Size, e.Persistent, -1)
	return e
}

// popLevel removes the front of level l, the head found by head.
func (r *readyList[M]) popLevel(l uint8) {
	e := r.levels[l].PopFront()
	r.c.add(e.Size, e.Persistent, -1)
}

// find returns the live entry seq of level l, or nil.
func (r *readyList[M]) find(l uint8, seq uint64) *Entry[M] {
	if int(l) >= len(r.levels) {
		return nil
	}
	d := &r.levels[l]
	i := sort.Search(d.Len(), func(i int) bool { return d.Ptr(i).Seq >= seq })
	if i < d.Len() {
		if e := d.Ptr(i); e.Seq == seq && !e.Dead {
			return e
		}
	}
	return nil
}

// kill tombstones a live entry.
func (r *readyList[M]) kill(e *Entry[M]) {
	e.Dead = true
	r.c.add(e.Size, e.Persistent, -1)
}

func (r *readyList[M]) clear() int {
	n := r.c.All.N
	for i := range r.levels {
		r.levels[i].Clear()
	}
	r.c = Counts{}
	return n
}

// Timed is a deadline of the ready entry Seq at Level or, when Pos is not
// 0, of a paged-out message at log position Pos.
type Timed struct {
	At    int64
	Seq   uint64
	Pos   uint64
	Level uint8
}

// timedHeap is a min-heap of deadlines, earliest first, then by seq.
// Items may be stale (the entry was delivered or removed since); users
// check them when they pop.
type timedHeap []Timed

func timedLess(a, b *Timed) bool {
	if a.At != b.At {
		return a.At < b.At
	}
	if a.Seq != b.Seq {
		return a.Seq < b.Seq
	}
	if a.Pos != b.Pos {
		return a.Pos < b.Pos
	}
	return a.Level < b.Level
}

func (h *timedHeap) add(t Timed) { hpush((*[]Timed)(h), t, timedLess) }
func (h *timedHeap) popMin() Timed {
	return hpop((*[]Timed)(h), timedLess)
}

// delayed is a returned message waiting out its retry delay (R5.5).
type delayed[M any] struct {
	at int64
	e  Entry[M]
}

func delayedLess[M any](a, b *delayed[M]) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.e.Seq < b.e.Seq
}

// hpush and hpop are container/heap without boxing each item in an
// interface (which would allocate per message).
func hpush[T any](h *[]T, x T, less func(a, b *T) bool) {
	*h = append(*h, x)
	s := *h
	for j := len(s) - 1; j > 0; {
		i := (j - 1) / 2
		if !less(&s[j], &s[i]) {
			break
		}
		s[i], s[j] = s[j], s[i]
		j = i
	}
}

func hpop[T any](h *[]T, less func(a, b *T) bool) T {
	s := *h
	n := len(s) - 1
	s[0], s[n] = s[n], s[0]
	x := s[n]
	var zero T
	s[n] = zero
	s = s[:n]
	siftDown(s, 0, less)
	*h = s
	return x
}

// hinit orders s as a heap.
func hinit[T any](s []T, less func(a, b *T) bool) {
	for k := len(s)/2 - 1; k >= 0; k-- {
		siftDown(s, k, less)
	}
}

// siftDown moves s[i] down until neither child is less than it.
func siftDown[T any](s []T, i int, less func(a, b *T) bool) {
	n := len(s)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && less(&s[r], &s[l]) {
			j = r
		}
		if !less(&s[j], &s[i]) {
			return
		}
		s[i], s[j] = s[j], s[i]
		i = j
	}
}
