package broker

import (
	"encoding/binary"
	"errors"
	"slices"
	"time"
)

// Dead letters into queues homed on other nodes (issue 13): at least once.
//
// On one node a persistent dead letter of a durable queue moves atomically
// (dlmove.go). A target homed on another node keeps no log here, so the
// source keeps the dead letter until every remote target's home node has
// confirmed it (after its fsync for a persistent message in a durable
// queue, as a publisher confirm):
//
//  1. with the move's X record (if it has local targets) the source
//     appends Y {rseq, target names, the dead-lettered copy} under a new
//     sequence number of its own and syncs; the original message is then
//     acked (step 3 of the move), the Y record carrying what is owed;
//  2. the copy is sent to each remote target (an enqueue with an answer,
//     remote.go); a target that confirms is done; one whose node is down,
//     that refuses the message (reject-publish) or fails is retried later,
//     with a backoff from dlRemoteRetryMin doubling to dlRemoteRetryMax;
//     a target queue that no longer exists is forgotten;
//  3. once every remote target confirmed, the source acks rseq.
//
// A transient dead letter (or one of a non-durable queue) is owed in
// memory the same way, without the Y record. Owed dead letters count in
// the vhost's dead-letter backlog (dlflush.go) until confirmed, so a
// target node that stays down pushes back on the clients feeding the
// source queue, and in the queue's DeadLetterPending (messages_dlx).
//
// Recovery: a Y record without its A is owed again and re-sent to every
// target named in it, once the source's A of the original is on disk (if
// it is not, the move never completed: the message stays in the source,
// as after a local move interrupted before its A, and the Y goes) (the source cannot look into a remote target's log
// for the copy as completeMoves does for local ones). A crash between the
// target's fsync and the source's A therefore delivers the dead letter
// twice: remote dead-lettering is at least once, not exactly once.
//
// Local targets keep the move of dlmove.go unchanged; a remote target
// costs the local path one typ() test.

const (
	dlRemoteRetryMin = 50 * time.Millisecond
	dlRemoteRetryMax = 2 * time.Second
	// dlRemoteAnswerTimeout bounds the wait for a home's answer that a
	// lost link may never bring (the target is then retried).
	dlRemoteAnswerTimeout = 10 * time.Second
)

// errRemoteNoQueue is the home's answer for a target queue that does not
// exist there: the dead letter is not owed to it any more.
var errRemoteNoQueue = errors.New("the queue does not exist on its home node")

// remoteDL is a dead letter owed to queues on other nodes.
type remoteDL struct {
	msg     *Message
	targets []string // target queue names not yet confirmed
	rseq    uint64   // the Y record's sequence number (ondisk)
	src     uint64   // the dead-lettered message's seq in the source
	seg     uint32
	ondisk  bool
	sending int  // answers awaited
	dead    bool // confirmed everywhere, or the source queue was deleted
	join    *dlJoin
}

// dlJoin holds a quorum queue's dead-lettered message (at least once)
// until both its local targets (the pendingDL) and its remote ones (the
// remoteDL) took it; guarded by the source's mu.
type dlJoin struct {
	left int
	src  dlItem
}

// dlJoinDoneLocked is one part of j done; the last makes the source's
// message gone (a quorum queue's leader proposes its Remove).
func (q *Queue) dlJoinDoneLocked(j *dlJoin) {
	j.left--
	if j.left == 0 {
		q.goneLocked(&entry{seq: j.src.seq, seg: j.src.seg, ondisk: j.src.ondisk})
	}
}

// appendRemoteDLRecordLocked appends q's Y record for rd (under q.mu, q.disk
// open) and reports whether it did.
func (q *Queue) appendRemoteDLRecordLocked(rd *remoteDL) bool {
	d := q.disk
	rseq := q.m.Reserve()
	b := binary.LittleEndian.AppendUint64(d.buf[:0], rseq)
	b = binary.LittleEndian.AppendUint64(b, rd.src)
	b = binary.AppendUvarint(b, uint64(len(rd.targets)))
	for _, n := range rd.targets {
		b = appendStr(b, n)
	}
	b = appendMessage(b, rd.msg)
	p, err := d.append(recMovedRemote, b)
	if cap(b) <= 1<<20 {
		d.buf = b[:0]
	}
	if err != nil {
		return false
	}
	d.addLive(p.Seg)
	rd.rseq, rd.seg, rd.ondisk = rseq, p.Seg, true
	return true
}

// decodeRemoteDLRecord decodes a Y record.
func decodeRemoteDLRecord(pl []byte) (*remoteDL, error) {
	if len(pl) < 16 {
		return nil, errors.New("short Y record")
	}
	rd := &remoteDL{rseq: le64(pl), src: le64(pl[8:]), ondisk: true}
	d := newDecoder(pl[16:])
	n := d.Uvarint()
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		rd.targets = append(rd.targets, d.Str())
	}
	if d.Err() != nil {
		return nil, d.Err()
	}
	m, err := decodeMessage(d.Rest())
	if err != nil {
		return nil, err
	}
	rd.msg = m
	return rd, nil
}

// oweRemote registers dead letters owed to remote targets and sends them.
func (q *Queue) oweRemote(rds []*remoteDL) {
	if len(rds) == 0 {
		return
	}
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		return
	}
	q.rdl = append(q.rdl, rds...)
	for _, rd := range rds {
		rd.sending = len(rd.targets)
	}
	q.mu.Unlock()
	q.vhost.dlq.n.Add(int64(len(rds)))
	for _, rd := range rds {
		q.sendRemoteDL(rd)
	}
}

// sendRemoteDL sends rd to its targets; rd.sending was set to their
// number under q.mu.
func (q *Queue) sendRemoteDL(rd *remoteDL) {
	v := q.vhost
	for _, name := range slices.Clone(rd.targets) {
		v.mu.RLock()
		t := v.queues[name]
		v.mu.RUnlock()
		if t == nil {
			q.remoteDLAnswer(rd, name, errRemoteNoQueue)
		} else {
			t.typ().takeDeadLetter(q, rd, name)
		}
	}
}

// forwardDL sends rd's copy to remote queue t and calls remoteDLAnswer
// with the home's answer (or the failure).
func (q *Queue) forwardDL(t *Queue, rd *remoteDL, name string) {
	rs := &q.vhost.b.remote
	w := &rwait{left: 1}
	w.notify(func(err error) { q.remoteDLAnswer(rd, name, err) })
	rs.mu.Lock()
	p := rs.peers
	var id uint64
	if p != nil {
		id = rs.id()
		if rs.waits == nil {
			rs.waits = map[uint64]pubWait{}
		}
		rs.waits[id] = pubWait{rw: w, node: t.HomeNode()}
	}
	rs.mu.Unlock()
	if p == nil {
		w.done(errRemoteFailed)
		return
	}
	m := rd.msg
	buf := make([]byte, 0, 32+len(t.vhost.Name)+len(t.Name)+len(m.Body)+len(m.Exchange)+len(m.RoutingKey)+64)
	buf = append(buf, opEnqueue)
	buf = binary.AppendUvarint(buf, id)
	buf = appendStr(buf, t.vhost.Name)
	buf = appendStr(buf, t.Name)
	buf = appendMessage(buf, m)
	fail := func() {
		rs.mu.Lock()
		_, ok := rs.waits[id]
		delete(rs.waits, id)
		rs.mu.Unlock()
		if ok {
			w.done(errRemoteFailed)
		}
	}
	if err := p.Send(t.HomeNode(), buf); err != nil {
		fail()
		return
	}
	tm := q.vhost.b.clock.AfterFunc(dlRemoteAnswerTimeout, fail)
	w.notify(func(error) { tm.Stop() })
}

// remoteDLAnswer takes a target's answer for rd.
func (q *Queue) remoteDLAnswer(rd *remoteDL, name string, err error) {
	q.mu.Lock()
	if rd.dead {
		q.mu.Unlock()
		return
	}
	if err == nil || errors.Is(err, errRemoteNoQueue) {
		if i := slices.Index(rd.targets, name); i >= 0 {
			rd.targets = slices.Delete(rd.targets, i, i+1)
		}
		if err == nil {
			q.rdlBackoff = 0
		}
	}
	rd.sending--
	if rd.sending > 0 {
		q.mu.Unlock()
		return
	}
	if len(rd.targets) > 0 {
		q.armRemoteDLRetryLocked()
		q.mu.Unlock()
		return
	}
	// Confirmed everywhere: the Y record goes.
	rd.dead = true
	if rd.join != nil {
		q.dlJoinDoneLocked(rd.join)
	}
	if i := slices.Index(q.rdl, rd); i >= 0 {
		q.rdl = slices.Delete(q.rdl, i, i+1)
	}
	if rd.ondisk && q.disk != nil && !q.disk.closed {
		q.disk.ack1(rd.rseq, rd.seg)
	}
	q.mu.Unlock()
	q.vhost.dlq.done(1)
}

// armRemoteDLRetryLocked schedules the next round for the owed dead
// letters, with a bounded backoff.
func (q *Queue) armRemoteDLRetryLocked() {
	if q.rdlTimer != nil || q.deleted || q.vhost.b.closed.Load() {
		return
	}
	q.rdlBackoff = min(max(2*q.rdlBackoff, dlRemoteRetryMin), dlRemoteRetryMax)
	q.rdlTimer = q.vhost.b.clock.AfterFunc(q.rdlBackoff, q.retryRemoteDLs)
}

// retryRemoteDLs re-sends the owed dead letters not waiting for answers.
func (q *Queue) retryRemoteDLs() {
	q.mu.Lock()
	q.rdlTimer = nil
	if q.deleted || q.vhost.b.closed.Load() {
		q.mu.Unlock()
		return
	}
	var rds []*remoteDL
	for _, rd := range q.rdl {
		if rd.sending == 0 && len(rd.targets) > 0 {
			rd.sending = len(rd.targets)
			rds = append(rds, rd)
		}
	}
	q.mu.Unlock()
	for _, rd := range rds {
		q.sendRemoteDL(rd)
	}
}

// retryRemoteDLsNow starts the next round of every queue owing dead
// letters to other nodes at once (a node came up), the backoff reset.
func (b *Broker) retryRemoteDLsNow() {
	for _, vn := range b.VHosts() {
		v := b.VHost(vn)
		if v == nil {
			continue
		}
		for _, q := range v.Queues() {
			q.mu.Lock()
			if q.rdlTimer != nil && q.rdlTimer.Stop() {
				q.rdlTimer, q.rdlBackoff = nil, 0
				q.rdlTimer = b.clock.AfterFunc(0, q.retryRemoteDLs)
			}
			q.mu.Unlock()
		}
	}
}

// dropRemoteDLsLocked forgets the owed dead letters of a deleted queue
// (a purge keeps them: they already left the queue).
func (q *Queue) dropRemoteDLsLocked() {
	if q.rdlTimer != nil {
		q.rdlTimer.Stop()
		q.rdlTimer = nil
	}
	n := len(q.rdl)
	for _, rd := range q.rdl {
		rd.dead = true
		if rd.ondisk && q.disk != nil && !q.disk.closed {
			q.disk.ack1(rd.rseq, rd.seg)
		}
	}
	q.rdl = nil
	if n > 0 {
		q.vhost.dlq.done(int64(n))
	}
}

// recoverRemoteDLs owes again the Y records of st's queue without an A.
func (st *recState) recoverRemoteDLs() int {
	if len(st.remote) == 0 {
		return 0
	}
	var rds []*remoteDL
	for _, p := range st.remote {
		_, pl, err := st.d.log.ReadAt(p)
		if err != nil {
			continue
		}
		rd, err := decodeRemoteDLRecord(pl)
		if err != nil || st.acked.has(rd.rseq) {
			continue
		}
		if !st.gone(st.current(rd.src)) {
			// The move never completed (the source's A is missing): the
			// message stays in the source, as for a local move, and the
			// Y record goes.
			var a [8]byte
			binary.LittleEndian.PutUint64(a[:], rd.rseq)
			st.d.log.Append(recAck, a[:])
			st.d.log.Sync()
			continue
		}
		rd.seg = p.Seg
		st.d.addLive(p.Seg)
		rds = append(rds, rd)
	}
	if len(rds) == 0 {
		return 0
	}
	q := st.q
	q.mu.Lock()
	q.rdl = append(q.rdl, rds...)
	q.armRemoteDLRetryLocked() // sent once the node runs (its peers set)
	q.mu.Unlock()
	q.vhost.dlq.n.Add(int64(len(rds)))
	return len(rds)
}
