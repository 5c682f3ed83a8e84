package broker

import (
	"errors"

	"github.com/warrenmq/warren/store"
)

// Bounded memory. A queue keeps at most a window of ready messages in
// memory (windowMsgs messages or windowBytes of bodies); once the window is
// full, every new message is appended to the queue's log and only counted
// (spilled) until the window drains below half and the queue reads the
// next messages back in log order (refillLocked). A durable queue spills
// into its message log; a transient queue (or any queue without one) gets a
// paging log that is deleted at start-up. Messages with a TTL deadline keep
// a heap entry with their log position, so that they still expire on time
// while on disk (expireSpilledLocked). Priority queues do not spill.
//
// The window is Config.QueueWindow messages (default 2048) and windowBytes
// of bodies; while memory is tight (SetMemoryPressure, from half the memory
// high watermark, as RabbitMQ's paging ratio) it shrinks to a sixteenth, so
// that new messages go to disk sooner.
const (
	DefaultQueueWindow = 2048
	windowBytes        = 4 << 20
)

// window returns the message and byte limits of the in-memory window now.
func (b *Broker) window() (msgs int, bytes int64) {
	msgs, bytes = b.queueWindow, windowBytes
	if b.memoryPressure.Load() {
		msgs, bytes = max(msgs/16, 16), bytes/16
	}
	return msgs, bytes
}

// SetMemoryPressure tells queues that memory is tight (or no longer is):
// their in-memory windows shrink while it lasts.
func (b *Broker) SetMemoryPressure(on bool) {
	if b.memoryPressure.Swap(on) != on {
		b.log.Info("memory pressure: queue windows "+map[bool]string{true: "shrink", false: "restored"}[on], "window", b.queueWindow)
	}
}

// spillState is the part of a queue that lives only on disk: messages at
// or after cursor in the queue's log, in order.
type spillState struct {
	active  bool
	n       int
	bytes   int64
	persist persistCount
	cursor  store.Pos // the first record not yet read back
	segs    segCounts // spilled messages by segment (for a purge)
	skip    seqSet    // spilled messages removed in place (expired)
	counts  map[uint64]reqInfo
}

var errStopScan = errors.New("broker: stop scan")

// spillsLocked reports whether a new message must go to disk only.
func (q *Queue) spillsLocked() bool {
	if len(q.ready.levels) != 1 || q.vhost.b.msgs == nil {
		return false
	}
	wm, wb := q.vhost.b.window()
	return q.spill.active || q.ready.n >= wm || q.ready.bytes >= wb
}

// pagingDiskLocked gives a queue without a message log a paging log.
func (q *Queue) pagingDiskLocked() {
	if q.disk == nil {
		q.disk = q.vhost.b.msgs.newDisk(q, 0, "")
		q.disk.paging = true
	}
}

// spillLocked counts e, appended at p, as on disk only.
func (q *Queue) spillLocked(e entry, p store.Pos) {
	s := &q.spill
	if !s.active {
		s.active, s.cursor = true, p
	}
	s.n++
	s.bytes += int64(e.msg.Size())
	s.persist.add(e.msg.persistent(), e.msg.Size(), 1)
	s.segs.add(p.Seg, 1)
	if e.expiresAt != 0 {
		q.expiries.add(timed{at: e.expiresAt, seq: e.seq, pos: p.Uint64()})
		q.armLocked()
	}
}

// unspillLocked counts a spilled message of segment seg and body size
// bytes back out of the spill.
func (q *Queue) unspillLocked(seg uint32, bytes int, persistent bool) {
	s := &q.spill
	s.n--
	s.bytes -= int64(bytes)
	s.persist.add(persistent, bytes, -1)
	s.segs.sub(seg, 1)
	if s.n <= 0 {
		q.spill = spillState{}
	}
}

// isSpilledLocked reports whether the deadline t is that of a message
// still on disk only.
func (q *Queue) isSpilledLocked(t timed) bool {
	return t.pos != 0 && q.spill.active && !store.PosFromUint64(t.pos).Less(q.spill.cursor) && !q.spill.skip.has(t.seq)
}

// expireSpilledLocked dead-letters a spilled message whose deadline passed,
// reading it from the log where it sits.
func (q *Queue) expireSpilledLocked(t timed) {
	p := store.PosFromUint64(t.pos)
	q.spill.skip.add(t.seq)
	e := entry{seq: t.seq, seg: p.Seg, ondisk: true}
	typ, pl, err := q.disk.log.ReadAt(p)
	var h msgHeader
	var rest []byte
	if err == nil {
		var ok bool
		if h, rest, ok = msgRecord(typ, pl); !ok || h.seq != t.seq {
			err = errBadRecord
		}
	}
	if err == nil {
		e.msg, err = decodeMessage(rest)
	}
	if err != nil {
		q.vhost.b.log.Error("message store: an expired message could not be read; dropped", "queue", q.Name, "pos", p.String(), "err", err)
		q.unspillLocked(p.Seg, int(h.bodyLen), h.persistent)
		q.goneLocked(&e)
		return
	}
	q.unspillLocked(p.Seg, e.msg.Size(), e.msg.persistent())
	q.deadLocked(&e, ReasonExpired)
}

// refillLocked reads spilled messages back into memory once the window is
// below half (or when force).
func (q *Queue) refillLocked(force bool) {
	s := &q.spill
	if !s.active || q.disk == nil || q.disk.log == nil {
		return
	}
	wm, wb := q.vhost.b.window()
	if !force && (q.ready.n >= wm/2 || q.ready.bytes >= wb/2) {
		return
	}
	want := max(wm-q.ready.n, 1)
	loaded := 0
	err := q.disk.log.ScanFrom(s.cursor, func(p store.Pos, typ byte, pl []byte) error {
		if typ != recMessage && typ != recMovedIn {
			return nil
		}
		if !s.active {
			return errStopScan
		}
		if loaded >= want || q.ready.bytes >= wb && loaded > 0 {
			s.cursor = p
			return errStopScan
		}
		h, rest, ok := msgRecord(typ, pl)
		if !ok || q.held[h.seq] {
			return nil
		}
		if s.skip.has(h.seq) {
			s.skip.remove(h.seq)
			return nil
		}
		m, err := decodeMessage(rest)
		if err != nil {
			q.vhost.b.log.Error("message store: undecodable spilled message dropped", "queue", q.Name, "pos", p.String(), "err", err)
			q.unspillLocked(p.Seg, int(h.bodyLen), h.persistent)
			q.goneLocked(&entry{seq: h.seq, seg: p.Seg, ondisk: true})
			return nil
		}
		e := entry{seq: h.seq, msg: m, expiresAt: h.expiresAt, deliveryCount: h.deliveryCount, acquired: h.acquired,
			redelivered: h.redelivered || !q.disk.dirtyUpTo.Less(p), ondisk: true, seg: p.Seg}
		if c, ok := s.counts[h.seq]; ok {
			e.deliveryCount, e.acquired, e.redelivered = c.dc, c.acq, true
			delete(s.counts, h.seq)
		}
		q.unspillLocked(p.Seg, m.Size(), m.persistent())
		q.ready.putBack(e)
		q.memTop = max(q.memTop, p.Uint64())
		loaded++
		return nil
	})
	q.disk.ms.reads.Add(uint64(loaded))
	if err == nil && s.active {
		q.vhost.b.log.Error("message store: spilled messages missing from the queue log", "queue", q.Name, "missing", s.n)
		q.spill = spillState{}
	} else if err != nil && !errors.Is(err, errStopScan) {
		q.vhost.b.log.Error("message store: reading spilled messages", "queue", q.Name, "err", err)
	}
}

// purgeSpillLocked drops every spilled message (Purge): a P record covers
// the log from the cursor to itself, except moves still held.
func (q *Queue) purgeSpillLocked() int {
	s := &q.spill
	if !s.active {
		return 0
	}
	n := s.n
	var except []uint64
	for seq := range q.held {
		except = append(except, seq)
	}
	for seq := range q.taken { // unacked: not the purge's
		except = append(except, seq)
	}
	q.disk.purge(s.cursor.Uint64(), except)
	for _, c := range s.segs {
		q.disk.dropLive(c.seg, c.n)
	}
	q.spill = spillState{}
	return n
}
