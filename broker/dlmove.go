package broker

import (
	"encoding/binary"
	"slices"
	"sync/atomic"

	"github.com/warrenmq/warren/store"
)

// dlMove is the atomic move of a persistent dead letter from a durable
// queue's log to the logs of its durable targets (see MsgStore):
//
//  1. the source appends X {seq, target ids} and syncs it;
//  2. each target appends D {source id, seq, the copy} under a new seq of
//     its own, without making it visible, and syncs;
//  3. the source appends A {seq}, then the targets make the copy visible.
//
// While a move is in flight the message is in neither queue's memory; a
// crash at any point leaves it in the source or in all targets (recovery
// completes a move whose D reached any target).
type dlMove struct {
	seq     uint64
	seg     uint32
	msg     *Message // the dead-lettered copy
	targets []*Queue
	// tseqs are the positions reserved in targets when the move was
	// planned, so that a dead letter moved through the store keeps its
	// place among those delivered at once (R3.11) though it becomes
	// visible only after the source's sync.
	tseqs []uint64
	held  []heldDL
	// remote is the part owed to queues on other nodes (dlremote.go).
	remote *remoteDL
}

type heldDL struct {
	t   *Queue
	e   qentry
	pos store.Pos
}

// planMove routes the dead letter p, delivers it at once to targets that
// keep no log (best effort, as RabbitMQ) and returns the move to the
// durable ones, or nil when there are none.
func (q *Queue) planMove(r *Router, p *pendingDL) *dlMove {
	v := q.vhost
	r.queues = r.queues[:0]
	v.mu.RLock()
	if x := v.exchanges[p.dlx]; x != nil {
		r.keys = p.routeKeys(r.keys[:0])
		v.routeLocked(r, x, p.msg)
	}
	v.mu.RUnlock()
	q.tallyDL(p, r.queues)
	var mv *dlMove
	for _, t := range r.queues {
		if p.reason != ReasonRejected && isCycle(p.msg.Deaths, t.Name) {
			v.b.log.Warn("dead-letter cycle: message dropped", "queue", q.Name, "target", t.Name, "vhost", v.Name)
			continue
		}
		if t.typ().answersLater() { // owed until its home (a quorum queue's leader) confirms
			if mv == nil {
				mv = &dlMove{seq: p.src.seq, seg: p.src.seg, msg: p.msg}
			}
			if mv.remote == nil {
				mv.remote = &remoteDL{msg: p.msg, src: p.src.seq}
			}
			mv.remote.targets = append(mv.remote.targets, t.Name)
			continue
		}
		if t.disk == nil || t.disk.paging {
			t.enqueue(p.msg, nil)
			continue
		}
		if mv == nil {
			mv = &dlMove{seq: p.src.seq, seg: p.src.seg, msg: p.msg}
		}
		t.mu.Lock()
		mv.tseqs = append(mv.tseqs, t.m.Reserve())
		t.mu.Unlock()
		mv.targets = append(mv.targets, t)
	}
	clear(r.queues)
	return mv
}

// startMoves runs step 1 for moves out of q.
func (q *Queue) startMoves(moves []*dlMove) {
	q.mu.Lock()
	d := q.disk
	var err error
	if d == nil || q.deleted {
		err = store.ErrClosed
	}
	for _, mv := range moves {
		if err != nil {
			break
		}
		if mv.remote != nil && !q.appendRemoteDLRecordLocked(mv.remote) {
			err = store.ErrClosed
			break
		}
		if len(mv.targets) == 0 {
			continue
		}
		b := binary.LittleEndian.AppendUint64(d.buf[:0], mv.seq)
		for _, t := range mv.targets {
			b = binary.LittleEndian.AppendUint64(b, t.disk.id)
		}
		_, err = d.append(recMovedOut, b)
		d.buf = b[:0]
	}
	q.mu.Unlock()
	if err != nil || d.ms.syncer.Request(d.log, func(error) { q.moveToTargets(moves) }) != nil {
		// No log to make the move durable in: deliver in memory.
		q.moveToTargets(moves)
	}
}

// moveToTargets runs step 2.
func (q *Queue) moveToTargets(moves []*dlMove) {
	var logs []*store.Log
	for _, mv := range moves {
		for i, t := range mv.targets {
			e, pos, ok := t.holdMovedIn(mv.msg, q.disk.id, mv.seq, mv.tseqs[i])
			if !ok {
				continue
			}
			mv.held = append(mv.held, heldDL{t, e, pos})
			if e.OnDisk {
				if l := t.disk.log; !slices.Contains(logs, l) {
					logs = append(logs, l)
				}
			}
		}
	}
	if len(logs) == 0 {
		q.finishMoves(moves)
		return
	}
	var left atomic.Int32
	left.Store(int32(len(logs)))
	done := func(error) {
		if left.Add(-1) == 0 {
			q.finishMoves(moves)
		}
	}
	for _, l := range logs {
		if q.disk.ms.syncer.Request(l, done) != nil {
			done(store.ErrClosed)
		}
	}
}

// finishMoves runs step 3.
func (q *Queue) finishMoves(moves []*dlMove) {
	q.mu.Lock()
	if q.disk != nil && !q.disk.closed {
		seqs, segs := q.ackSeqs[:0], q.ackSegs[:0]
		for _, mv := range moves {
			seqs, segs = append(seqs, mv.seq), append(segs, mv.seg)
		}
		q.disk.ack(seqs, segs)
		q.ackSeqs, q.ackSegs = seqs[:0], segs[:0]
	}
	q.mu.Unlock()
	var rds []*remoteDL
	for _, mv := range moves {
		for _, h := range mv.held {
			h.t.releaseHeld(h.e, h.pos)
		}
		if mv.remote != nil {
			rds = append(rds, mv.remote)
		}
	}
	q.oweRemote(rds)
}

// holdMovedIn takes a dead letter into t at the reserved position seq
// without making it visible: it is appended to t's log as D (step 2). ok is
// false if t refused it (deleted, or full under reject-publish).
func (t *Queue) holdMovedIn(m *Message, srcID, srcSeq, seq uint64) (e qentry, p store.Pos, ok bool) {
	t.mu.Lock()
	defer t.unlock()
	if t.deleted || t.rejectsLocked(m) {
		return qentry{}, p, false
	}
	e = t.newEntryLocked(t.clockMs(m), seq, m)
	if t.disk != nil {
		var pre [16]byte
		binary.LittleEndian.PutUint64(pre[:], srcID)
		binary.LittleEndian.PutUint64(pre[8:], srcSeq)
		var err error
		if p, err = t.disk.appendMsg(recMovedIn, pre[:], msgHeader{seq: e.Seq, expiresAt: e.ExpiresAt}, m); err == nil {
			e.OnDisk, e.Seg = true, p.Seg
			if t.held == nil {
				t.held = map[uint64]bool{}
			}
			t.held[e.Seq] = true
		}
	}
	return e, p, true
}

// releaseHeld makes a held dead letter visible (step 3): in memory, or
// spilled if the queue is spilling and has not read past it, or if its
// window is full and no message in memory has a later record (then the
// spill starts at it, as a publish's would: a DLQ that only dead-lettering
// fills is paged out like any other).
func (t *Queue) releaseHeld(e qentry, p store.Pos) {
	t.mu.Lock()
	defer t.unlock()
	delete(t.held, e.Seq)
	if t.deleted {
		return
	}
	starts := e.OnDisk && !t.spill.active && t.memTop < p.Uint64() && t.spillsLocked()
	if starts || e.OnDisk && t.spill.active && !p.Less(t.spill.cursor) {
		t.spillLocked(e, p)
		return
	}
	if e.OnDisk {
		t.memTop = max(t.memTop, p.Uint64())
	}
	now := t.clockMs(e.Msg)
	if e.ExpiresAt != 0 {
		now = t.nowMs()
	}
	t.m.Place(now, e)
	t.armLocked()
}
