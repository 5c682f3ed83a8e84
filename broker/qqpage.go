package broker

import (
	"github.com/warrenmq/warren/broker/machine"
	"github.com/warrenmq/warren/broker/qrepl"
	"github.com/warrenmq/warren/internal/deque"
)

// Bounded memory for replicated quorum queues (issue 14, "message bodies
// beyond the queue window stay on disk").
//
// A quorum queue's bodies are already on disk: each is in its enqueue
// entry of the group's raft log (the id of a message is that entry's
// index), which compaction keeps while the message is live. So the
// leader keeps the same in-memory window as a classic queue (spill.go:
// Broker.window), and beyond it a newly applied enqueue is not decoded:
// the machine counts it paged out (machine.PageOut, with its deadline)
// and the leader keeps only its header in qqPaging, in queue order. When
// the window drains below half (the machine's PageIn effect) the leader
// reads the next batch of bodies back from the log (ReadEntries) and
// pages them in, in order. A new leader builds the in-memory part from
// the replicated state up to the window and pages the rest out
// (takeoverLocked), reading no body beyond it.
//
// A paged-out message is in the leader's ids map only while the machine
// holds it (paged in, or expiring): the map stays window-sized. Paged-out
// messages are not covered by the delivery lease ahead of need; the lease
// is raised for a batch when it is paged in (a new leader then does not
// mark messages that were never in memory redelivered).
//
// Priority queues (x-max-priority) do not page, as classic ones.

// qqPaged is a paged-out message's header on the leader.
type qqPaged struct {
	seq       uint64 // the machine's sequence number
	id        uint64 // the replicated id: the enqueue entry's index
	expiresAt int64
	size      uint32
	dc, acq   uint32
	flags     uint8
}

const (
	qpPersistent = 1 << iota
	qpRedelivered
	qpGone // expired (or lost) while paged out: a tombstone
)

// qqPaging is the leader's paged-out tail: headers in queue order, which
// is sequence order (a message is paged out only behind every ready one).
// Guarded by q.mu.
type qqPaging struct {
	deque.Deque[qqPaged] // tombstones among them; it grows without copying
}

// entry is p as a machine entry without its body.
func (p *qqPaged) entry() qentry {
	return qentry{Seq: p.seq, ExpiresAt: p.expiresAt, Size: p.size, Persistent: p.flags&qpPersistent != 0,
		DeliveryCount: p.dc, Acquired: p.acq, Redelivered: p.flags&qpRedelivered != 0}
}

// from is the tail's index of the first header at seq or after, Len if
// none.
func (pg *qqPaging) from(seq uint64) int {
	return pg.Search(func(p *qqPaged) bool { return p.seq >= seq })
}

// find returns the tail's index of seq, or -1.
func (pg *qqPaging) find(seq uint64) int {
	i := pg.from(seq)
	if i < pg.Len() && pg.At(i).seq == seq && pg.At(i).flags&qpGone == 0 {
		return i
	}
	return -1
}

// drop removes the first n of the tail (paged in), with the tombstones
// that follow them.
func (pg *qqPaging) drop(n int) {
	pg.DropFront(n)
	for pg.Len() > 0 && pg.At(0).flags&qpGone != 0 {
		pg.PopFront()
	}
}

// pageableLocked reports whether the queue pages at all.
func (s *qqState) pageableLocked() bool { return s.q.m.Levels() <= 1 }

// pagesLocked reports whether a newly applied enqueue goes to the paged
// tail: the window is full, or messages are paged out already (order).
func (s *qqState) pagesLocked() bool {
	q := s.q
	if !s.pageableLocked() {
		return false
	}
	wm, wb := q.vhost.b.window()
	return q.m.PagedN() > 0 || q.m.ReadyN() >= wm || q.m.ReadyBytes() >= wb
}

// pageOutNewLocked counts the applied enqueue c at id paged out: its body
// stays in the log only.
func (s *qqState) pageOutNewLocked(id uint64, c *qrepl.Enqueue) {
	q := s.q
	now := q.nowMs()
	e := q.m.NewEntry(now, nil, c.Size, c.Priority, c.Persistent, -1)
	e.ExpiresAt = c.ExpiresAt
	p := qqPaged{seq: e.Seq, id: id, expiresAt: e.ExpiresAt, size: c.Size}
	if c.Persistent {
		p.flags |= qpPersistent
	}
	s.paging.Push(p)
	q.m.PageOut(e, id)
}

// pageOutReturnLocked pages a message returned to the back under seq out
// again when older messages are paged out: it goes behind them, so its
// body leaves memory as theirs did (and it cannot be delivered before
// them while the byte window holds a page-in back). Its body is in the
// log (id).
func (s *qqState) pageOutReturnLocked(e *qentry, seq, id uint64) {
	q := s.q
	if q.m.PagedN() == 0 || !s.pageableLocked() || !q.m.PageOutReady(0, seq, id) {
		return
	}
	delete(s.ids, seq)
	p := qqPaged{seq: seq, id: id, expiresAt: e.ExpiresAt, size: e.Size, dc: e.DeliveryCount, acq: e.Acquired,
		flags: qpRedelivered}
	if e.Persistent {
		p.flags |= qpPersistent
	}
	s.paging.Push(p)
}

// isPagedLocked reports whether the deadline t is of a message still
// paged out.
func (s *qqState) isPagedLocked(t machine.Timed) bool {
	return t.Pos != 0 && s.here.Load() && s.paging.find(t.Seq) >= 0
}

// expirePagedLocked dead-letters (or drops) a paged-out message whose
// deadline passed, reading its body from the log.
func (s *qqState) expirePagedLocked(t machine.Timed) {
	i := s.paging.find(t.Seq)
	if i < 0 {
		return
	}
	p := s.paging.At(i)
	p.flags |= qpGone
	e := p.entry()
	id := p.id
	if i == 0 {
		s.paging.drop(0)
	}
	s.ids[e.Seq] = id
	m, err := s.readBody(id)
	if err != nil {
		s.q.vhost.b.log.Error("quorum queue: an expired message's body is unreadable; dropped", "queue", s.q.Name,
			"vhost", s.q.vhost.Name, "id", id, "err", err)
		s.q.m.LostPaged(e)
		return
	}
	e.Msg = m
	s.q.m.ExpiredPaged(e)
}

// readBody reads and decodes message id from its entry.
func (s *qqState) readBody(id uint64) (*Message, error) {
	data, err := s.lg.ReadEntry(qrepl.EntryOf(id))
	if err != nil {
		return nil, err
	}
	return decodeEnqueueBody(data, id)
}

// decodeEnqueueBody decodes message id from data, its entry.
func decodeEnqueueBody(data []byte, id uint64) (*Message, error) {
	enq, err := qrepl.DecodeMessage(data, id)
	if err != nil {
		return nil, err
	}
	return decodeMessage(enq.Body)
}

// readBodies reads the messages ids (any order) in one batch: bodies[i]
// is ids[i]'s, nil when unreadable (errs[i]). A batch's messages share
// one read of their entry.
func (s *qqState) readBodies(ids []uint64) (bodies []*Message, errs []error) {
	bodies, errs = make([]*Message, len(ids)), make([]error, len(ids))
	if len(ids) == 0 {
		return bodies, errs
	}
	at := make(map[uint64][]int, len(ids))
	entries := make([]uint64, 0, len(ids))
	for i, id := range ids {
		e := qrepl.EntryOf(id)
		if _, ok := at[e]; !ok {
			entries = append(entries, e)
		}
		at[e] = append(at[e], i)
	}
	err := s.lg.ReadEntries(entries, func(index uint64, data []byte) error {
		for _, i := range at[index] {
			bodies[i], errs[i] = decodeEnqueueBody(data, ids[i])
		}
		return nil
	})
	if err != nil {
		// One missing entry fails the batch: one by one, to tell which.
		for i, id := range ids {
			if bodies[i] == nil && errs[i] == nil {
				bodies[i], errs[i] = s.readBody(id)
			}
		}
	}
	return bodies, errs
}

// pageInLocked pages messages back in once the window is below half (or,
// when force, at least one because none is ready in memory), in queue
// order, reading their bodies from the log in one batch.
func (s *qqState) pageInLocked(force bool) {
	q := s.q
	if q.m.PagedN() == 0 || !s.here.Load() || s.lg == nil {
		return
	}
	wm, wb := q.vhost.b.window()
	if !force && (q.m.ReadyN() >= wm/2 || q.m.ReadyBytes() >= wb/2) {
		return
	}
	want := max(wm-q.m.ReadyN(), 1)
	room := wb - q.m.ReadyBytes()
	pg := &s.paging
	n, k := 0, 0 // headers taken, live among them
	var bytes int64
	for n < pg.Len() && k < want && (k == 0 || bytes+int64(pg.At(n).size) <= room) {
		if pg.At(n).flags&qpGone == 0 {
			k++
			bytes += int64(pg.At(n).size)
		}
		n++
	}
	ids := make([]uint64, 0, k)
	for i := range n {
		if p := pg.At(i); p.flags&qpGone == 0 {
			ids = append(ids, p.id)
		}
	}
	bodies, errs := s.readBodies(ids)
	var top uint64
	var lost []qentry
	j := 0
	for i := range n {
		p := pg.At(i)
		if p.flags&qpGone != 0 {
			continue
		}
		e := p.entry()
		s.ids[e.Seq] = p.id
		if bodies[j] == nil {
			q.vhost.b.log.Error("quorum queue: a paged-out message's body is unreadable; dropped", "queue", q.Name,
				"vhost", q.vhost.Name, "id", p.id, "err", errs[j])
			lost = append(lost, e)
			j++
			continue
		}
		e.Msg = bodies[j]
		j++
		q.m.PageIn(e)
		top = max(top, qrepl.EntryOf(p.id))
	}
	s.paging.drop(n)
	for i := range lost {
		q.m.LostPaged(lost[i])
	}
	if top != 0 && top+leaseLow > s.lease {
		s.wantLeaseLocked(top)
	}
}

// purgePagedLocked lists the paged-out messages' ids for a Purge and
// forgets them (the machine's Purge counts them out).
func (s *qqState) purgePagedLocked(ids []uint64) []uint64 {
	for i := range s.paging.Len() {
		if p := s.paging.At(i); p.flags&qpGone == 0 {
			ids = append(ids, p.id)
		}
	}
	s.paging.Reset()
	return ids
}

// QuorumMessages is the number of live messages in this node's replicated
// state of a quorum queue (what a new leader would take over); ok is
// false on a node that is not a member.
func (q *Queue) QuorumMessages() (n int, ok bool) {
	s := q.qq
	if s == nil {
		return 0, false
	}
	s.smu.Lock()
	defer s.smu.Unlock()
	if s.g == nil || s.st == nil {
		return 0, false
	}
	return s.st.Len(), true
}

// qqPageChunk is how many paged-out bodies Browse and Take read at once.
const qqPageChunk = 256

// browsePagedLocked continues Browse over the paged-out tail (*i counts
// the messages walked so far, offset the first one handed to fn): their
// bodies are read from the log, a chunk at a time, and left there.
func (s *qqState) browsePagedLocked(i *int, offset int, fn func(Browsed) bool) {
	if !s.here.Load() || s.lg == nil {
		return
	}
	pg := &s.paging
	for k := 0; k < pg.Len(); {
		var ps []*qqPaged
		var ids []uint64
		for ; k < pg.Len() && len(ids) < qqPageChunk; k++ {
			p := pg.At(k)
			if p.flags&qpGone != 0 {
				continue
			}
			if *i < offset {
				*i++
				continue
			}
			ps, ids = append(ps, p), append(ids, p.id)
		}
		bodies, _ := s.readBodies(ids)
		for j, p := range ps {
			if bodies[j] == nil {
				continue
			}
			if !fn(Browsed{Msg: bodies[j], Redelivered: p.flags&qpRedelivered != 0 || p.acq > 0, ExpiresAt: p.expiresAt}) {
				return
			}
			*i++
		}
	}
}

// takePagedLocked continues Take over the paged-out tail, after cur.seq:
// the matching messages are taken where they sit (their bodies read from
// the log, the rest left there); a taken one returned (Return) goes back
// in memory, where everything older than it is.
func (s *qqState) takePagedLocked(cur *TakeCursor, now int64, limit, budget int, examined *int, upto uint64,
	match func(*Message) bool, ds []Delivery) ([]Delivery, bool) {
	q := s.q
	full := func(more int) bool { return limit > 0 && len(ds)+more >= limit }
	if !s.here.Load() || s.lg == nil {
		return ds, true
	}
	pg := &s.paging
	k := pg.from(cur.seq + 1)
	for k < pg.Len() {
		var ks []int
		var ids []uint64
		for ; k < pg.Len() && len(ids) < qqPageChunk; k++ {
			p := pg.At(k)
			if p.flags&qpGone != 0 || p.seq > upto {
				continue
			}
			if full(len(ids)) || *examined >= budget {
				break
			}
			*examined++
			cur.seq = p.seq
			if p.expiresAt != 0 && p.expiresAt <= now {
				cur.Skipped++
				continue
			}
			ks, ids = append(ks, k), append(ids, p.id)
		}
		bodies, _ := s.readBodies(ids)
		for j, x := range ks {
			p := pg.At(x)
			if bodies[j] == nil || !match(bodies[j]) {
				cur.Skipped++
				continue
			}
			p.flags |= qpGone
			e := p.entry()
			e.Msg = bodies[j]
			s.ids[e.Seq] = p.id
			q.m.TakePaged(e)
			ds = append(ds, q.delivery(&e, "", q.m.Holder(), q.m.Holder().Next()-1))
		}
		if full(0) || *examined >= budget {
			s.paging.drop(0)
			return ds, false
		}
	}
	s.paging.drop(0)
	return ds, true
}

// untakePagedLocked puts a paged-out message that Take took back in the
// paged-out tail, where it sat, unless everything before it was paged in
// since (then it goes back in memory, where they are); it reports whether
// it did (the machine counts it paged out: Untake).
func (s *qqState) untakePagedLocked(d *Delivery, redelivered bool) bool {
	if !s.here.Load() {
		return false
	}
	pg := &s.paging
	k := pg.from(d.Seq)
	if k == 0 || k >= pg.Len() || pg.At(k).seq != d.Seq || pg.At(k).flags&qpGone == 0 {
		return false // k == 0: nothing older is paged out
	}
	p := pg.At(k)
	p.flags &^= qpGone
	if redelivered {
		p.flags |= qpRedelivered
	}
	delete(s.ids, d.Seq)
	return true
}
