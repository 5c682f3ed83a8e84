package broker

import (
	"container/heap"
	"sort"
)

// entry is a message in a queue.
type entry struct {
	seq         uint64
	msg         *Message
	redelivered bool
	dead        bool  // tombstone: expired in place, skipped when it reaches the head
	expiresAt   int64 // unix ms; 0 = never
	// deliveryCount counts the returns that count toward the delivery
	// limit (x-delivery-count, R5.3): failed deliveries on quorum queues,
	// every return on others (Queue.countsReturn); acquired counts every
	// delivery returned to the queue (x-acquired-count).
	deliveryCount uint32
	acquired      uint32
	// seg is the log segment of the message's record when ondisk (the
	// queue's log holds it: a persistent message in a durable queue).
	seg    uint32
	ondisk bool
}

// readyList holds ready messages in delivery order: by priority level
// (highest first), then by sequence number. Each level is sorted by seq,
// which lets a message be found by binary search and tombstoned where it
// sits (per-message TTL expires anywhere, not only at the head). n,
// bytes and persist count live entries only.
type readyList struct {
	levels  []deque[entry]
	n       int
	bytes   int64
	persist persistCount
}

// persistCount counts persistent messages (delivery mode 2) and their
// body bytes: RabbitMQ's messages_persistent and message_bytes_persistent.
type persistCount struct {
	n     int
	bytes int64
}

// add counts a message of size body bytes in (d = 1) or out (d = -1).
func (c *persistCount) add(persistent bool, size, d int) {
	if persistent {
		c.n += d
		c.bytes += int64(d * size)
	}
}

func (r *readyList) level(m *Message) int {
	if len(r.levels) == 1 {
		return 0
	}
	p := int(m.Props.Priority)
	if p >= len(r.levels) {
		p = len(r.levels) - 1
	}
	return p
}

func (r *readyList) push(e entry) {
	r.levels[r.level(e.msg)].PushBack(e)
	r.n++
	r.bytes += int64(e.msg.Size())
	r.persist.add(e.msg.persistent(), e.msg.Size(), 1)
}

// putBack returns a message to its position by sequence number.
func (r *readyList) putBack(e entry) {
	d := &r.levels[r.level(e.msg)]
	if d.Len() == 0 || d.At(d.Len()-1).seq < e.seq {
		d.PushBack(e)
	} else {
		i := sort.Search(d.Len(), func(i int) bool { return d.At(i).seq > e.seq })
		d.Insert(i, e)
	}
	r.n++
	r.bytes += int64(e.msg.Size())
	r.persist.add(e.msg.persistent(), e.msg.Size(), 1)
}

// head returns the level whose front is the next live message, dropping
// tombstones on the way; nil when empty.
func (r *readyList) head() *deque[entry] {
	if r.n == 0 {
		for i := range r.levels {
			r.levels[i].Clear()
		}
		return nil
	}
	for i := len(r.levels) - 1; i >= 0; i-- {
		d := &r.levels[i]
		for d.Len() > 0 && d.Ptr(0).dead {
			d.PopFront()
		}
		if d.Len() > 0 {
			return d
		}
	}
	return nil
}

func (r *readyList) pop() entry {
	e := r.head().PopFront()
	r.n--
	r.bytes -= int64(e.msg.Size())
	r.persist.add(e.msg.persistent(), e.msg.Size(), -1)
	return e
}

// find returns the live entry with seq in level l, or nil.
func (r *readyList) find(l int, seq uint64) *entry {
	d := &r.levels[l]
	i := sort.Search(d.Len(), func(i int) bool { return d.At(i).seq >= seq })
	if i < d.Len() {
		if e := d.Ptr(i); e.seq == seq && !e.dead {
			return e
		}
	}
	return nil
}

// kill tombstones a live entry.
func (r *readyList) kill(e *entry) {
	e.dead = true
	r.n--
	r.bytes -= int64(e.msg.Size())
	r.persist.add(e.msg.persistent(), e.msg.Size(), -1)
}

func (r *readyList) clear() int {
	n := r.n
	for i := range r.levels {
		r.levels[i].Clear()
	}
	r.n, r.bytes, r.persist = 0, 0, persistCount{}
	return n
}

// timed is a deadline for the entry seq at priority level.
type timed struct {
	at    int64
	seq   uint64
	level int
	pos   uint64 // the log position of a spilled message (spill.go); 0 otherwise
}

// timedHeap is a min-heap of deadlines, earliest first, then by seq.
// Items may be stale (the entry was delivered or removed since); users
// check them against the ready list when they pop.
type timedHeap []timed

func (h timedHeap) Len() int { return len(h) }
func (h timedHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h timedHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timedHeap) Push(x any)   { *h = append(*h, x.(timed)) }
func (h *timedHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (h *timedHeap) add(t timed) { heap.Push(h, t) }
func (h *timedHeap) popMin() timed {
	return heap.Pop(h).(timed)
}

// delayedEntry is a returned message waiting out its retry delay (R5.5).
type delayedEntry struct {
	at int64
	e  entry
}

type delayedHeap []delayedEntry

func (h delayedHeap) Len() int { return len(h) }
func (h delayedHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].e.seq < h[j].e.seq
}
func (h delayedHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *delayedHeap) Push(x any)   { *h = append(*h, x.(delayedEntry)) }
func (h *delayedHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
