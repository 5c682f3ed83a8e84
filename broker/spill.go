package broker

import (
	"errors"

	"github.com/warrenmq/warren/broker/machine"
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

// spillState is where the paged-out messages of a queue sit: at or after
// cursor in the queue's log, in order. The machine counts them
// (machine.Machine.PageOut); the shell knows where they are.
type spillState struct {
	active bool
	cursor store.Pos // the first record not yet read back
	segs   segCounts // spilled messages by segment (for a purge)
	skip   seqSet    // spilled messages removed in place (expired)
	counts map[uint64]reqInfo
}

var errStopScan = errors.New("broker: stop scan")

// spillsLocked reports whether a new message must go to disk only.
func (q *Queue) spillsLocked() bool {
	if q.m.Levels() != 1 || q.vhost.b.msgs == nil {
		return false
	}
	wm, wb := q.vhost.b.window()
	return q.spill.active || q.m.ReadyN() >= wm || q.m.ReadyBytes() >= wb
}

// pagingDiskLocked gives a queue without a message log a paging log.
func (q *Queue) pagingDiskLocked() {
	if q.disk == nil {
		q.disk = q.vhost.b.msgs.newDisk(q, 0, "")
		q.disk.paging = true
	}
}

// spillLocked pages e, appended at p, out: on disk only.
func (q *Queue) spillLocked(e qentry, p store.Pos) {
	s := &q.spill
	if !s.active {
		s.active, s.cursor = true, p
	}
	s.segs.add(p.Seg, 1)
	q.m.PageOut(e, p.Uint64())
	if e.ExpiresAt != 0 {
		q.armLocked()
	}
}

// unspilledLocked notes that a paged-out message of segment seg left the
// disk-only tail (the machine has counted it out).
func (q *Queue) unspilledLocked(seg uint32) {
	q.spill.segs.sub(seg, 1)
	if q.m.PagedN() <= 0 {
		q.spill = spillState{}
	}
}

// isSpilledLocked reports whether the deadline t is that of a message
// still on disk only.
func (q *Queue) isSpilledLocked(t machine.Timed) bool {
	return t.Pos != 0 && q.spill.active && !store.PosFromUint64(t.Pos).Less(q.spill.cursor) && !q.spill.skip.has(t.Seq)
}

// expireSpilledLocked dead-letters a spilled message whose deadline passed,
// reading it from the log where it sits.
func (q *Queue) expireSpilledLocked(t machine.Timed) {
	p := store.PosFromUint64(t.Pos)
	q.spill.skip.add(t.Seq)
	e := qentry{Seq: t.Seq, Seg: p.Seg, OnDisk: true, ExpiresAt: t.At}
	typ, pl, err := q.disk.log.ReadAt(p)
	var h msgHeader
	var rest []byte
	if err == nil {
		var ok bool
		if h, rest, ok = msgRecord(typ, pl); !ok || h.seq != t.Seq {
			err = errBadRecord
		}
	}
	if err == nil {
		e.Msg, err = decodeMessage(rest)
	}
	if err != nil {
		q.vhost.b.log.Error("message store: an expired message could not be read; dropped", "queue", q.Name, "pos", p.String(), "err", err)
		e.Size, e.Persistent, e.Msg = h.bodyLen, h.persistent, nil
		q.m.LostPaged(e)
		q.unspilledLocked(p.Seg)
		return
	}
	e.Size, e.Persistent = uint32(e.Msg.Size()), e.Msg.persistent()
	q.m.ExpiredPaged(e)
	q.unspilledLocked(p.Seg)
}

// refillLocked reads spilled messages back into memory once the window is
// below half (or when force).
func (q *Queue) refillLocked(force bool) {
	s := &q.spill
	if !s.active || q.disk == nil || q.disk.log == nil {
		return
	}
	wm, wb := q.vhost.b.window()
	if !force && (q.m.ReadyN() >= wm/2 || q.m.ReadyBytes() >= wb/2) {
		return
	}
	want := max(wm-q.m.ReadyN(), 1)
	loaded := 0
	err := q.disk.log.ScanFrom(s.cursor, func(p store.Pos, typ byte, pl []byte) error {
		if typ != recMessage && typ != recMovedIn {
			return nil
		}
		if !s.active {
			return errStopScan
		}
		if loaded >= want || q.m.ReadyBytes() >= wb && loaded > 0 {
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
			q.m.LostPaged(qentry{Seq: h.seq, Seg: p.Seg, OnDisk: true, Size: h.bodyLen, Persistent: h.persistent})
			q.unspilledLocked(p.Seg)
			return nil
		}
		e := qentry{Seq: h.seq, Msg: m, ExpiresAt: h.expiresAt, DeliveryCount: h.deliveryCount, Acquired: h.acquired,
			Redelivered: h.redelivered || !q.disk.dirtyUpTo.Less(p), OnDisk: true, Seg: p.Seg,
			Size: uint32(m.Size()), Persistent: m.persistent()}
		if c, ok := s.counts[h.seq]; ok {
			e.DeliveryCount, e.Acquired, e.Redelivered = c.dc, c.acq, true
			delete(s.counts, h.seq)
		}
		q.m.PageIn(e)
		q.unspilledLocked(p.Seg)
		q.memTop = max(q.memTop, p.Uint64())
		loaded++
		return nil
	})
	q.disk.ms.reads.Add(uint64(loaded))
	if err == nil && s.active {
		q.vhost.b.log.Error("message store: spilled messages missing from the queue log", "queue", q.Name, "missing", q.m.PagedN())
		q.m.ForgetPaged()
		q.spill = spillState{}
	} else if err != nil && !errors.Is(err, errStopScan) {
		q.vhost.b.log.Error("message store: reading spilled messages", "queue", q.Name, "err", err)
	}
}

// purgeSpillLocked drops every spilled message from the log (Purge; the
// machine counts them): a P record covers the log from the cursor to
// itself, except moves still held.
func (q *Queue) purgeSpillLocked() {
	s := &q.spill
	if !s.active {
		return
	}
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
}
