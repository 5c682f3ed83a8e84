package broker

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker/machine"
	"github.com/warrenmq/warren/broker/qrepl"
)

// Replicated quorum queues, the side of every node that publishes to and
// consumes from them (issue 14; /work/i14-design.md). A quorum queue in a
// cluster (q.qq != nil) lives where its Raft group's leader is, and the
// leader moves; every node reaches it through this file:
//
//   - Publish: every publish gets a publish id {Publisher: this node's run
//     id, Seq: a per-node monotonic number} and waits in the queue's
//     pending list until the leader answers: enqOK (committed on a
//     majority and applied) or enqRejected (reject-publish overflow) end
//     it (the confirm, or the nack); enqNotLeader, enqFailed, a timeout
//     (qqResendAfter), the leader's node going down or a leader change
//     make this node resend everything pending to the leader it knows, in
//     id order, so that the replicated state, which drops an enqueue whose
//     seq is not above the last it applied for that publisher, sees every
//     publisher's ids in increasing order. Sending is serialized per queue
//     (qqClient.sendMu): a send that fails stops the sends after it until
//     a resend (never a later id ahead of an earlier one). The pending list
//     is bounded (qqMaxPending, qqMaxPendingBytes): a publisher waits for
//     room up to forwardWait, then its publish is nacked (not sent, so no
//     id is skipped for good).
//   - Consume: the client's Consumer never enters a queue machine itself.
//     This node attaches a leg for it to the current leader: a consumer
//     in this node's machine (a qqLegSink in front of the client's Sink)
//     when this node leads, a remote proxy (rconsumer, remote.go)
//     elsewhere. qqLeaderChanged moves every leg of the queue's consumers
//     on this node to the new leader (asynchronously, qqReattachLoop);
//     the client sees nothing (no basic.cancel), as in RabbitMQ.
//   - Epochs: this node's view of the leader has an epoch, bumped at every
//     leader or term change and when the leader's node goes down (it then
//     drops what this node held). Every delivery carries the epoch it came
//     from (Delivery.term); a settle of an older epoch is dropped: the
//     message is still live in the replicated state and the new leader
//     redelivers it, redelivered=true.
//   - No leader known: publishes wait in the pending list (bounded);
//     basic.consume, basic.get and queue.purge wait up to qqLeaderWait for
//     one, then fail as RabbitMQ 3.10 does when its Ra command times out
//     (a channel crash: connection.close 541 INTERNAL_ERROR); queue.declare
//     waits as long, then answers declare-ok with 0 messages and 0
//     consumers (rabbit_quorum_queue:stat swallows the timeout); other
//     counts (management, shovels, a delete's checks) wait 250 ms as
//     stat does.
//   - Dead letters into a quorum queue go through the same publish path,
//     owed by their source until the target's leader answers
//     (dlremote.go); a quorum source's message leaves (its replicated
//     Remove) only once every target has it (dlJoin).
//
// Contract with the leader side (qqleader.go):
//   - qqLeaderChanged(leader, term) is called on every node for every
//     leader it learns of (the first one too), in increasing term order,
//     without queue locks held; on the leader itself only once it has
//     taken over (leaderHere() true). On losing leadership the leader side
//     stops leading (leaderHere() false) and discards its machine's
//     contents and consumers without calling their sinks, then calls
//     qqLeaderChanged with what it knows ("", term) or (newLeader, term).
//   - qqEnqueueAtLeader answers every call exactly once; a duplicate (an id
//     already applied) is answered enqOK. It must not let a later id of a
//     publisher into the log after dropping an earlier one (a dropped
//     proposal: answer the later ones enqNotLeader too until the earlier
//     one comes back), or the dedup would drop the resent earlier one.

// Timings and bounds (variables: tests shorten them).
var (
	// qqLeaderWait is how long basic.consume, basic.get, queue.purge and
	// queue.declare wait for a leader.
	qqLeaderWait = 5 * time.Second
	// qqResendAfter: publishes unanswered for this long are resent.
	qqResendAfter = 5 * time.Second
)

const (
	qqRetryMin = 20 * time.Millisecond
	qqRetryMax = time.Second
	// qqPoll bounds a wait for a leader between two looks (a leader's
	// takeover is seen through typ().here(), which notifies nothing).
	qqPoll = 50 * time.Millisecond
	// qqMaxPending and qqMaxPendingBytes bound a queue's pending
	// publishes on this node.
	qqMaxPending      = 8192
	qqMaxPendingBytes = 64 << 20
)

// The data plane's quorum-queue messages and calls (remote.go dispatches
// them).
const (
	opQQEnqueue   byte = 'Q' // client node -> leader: publisher, seq, vhost, queue, message
	opQQEnqueued  byte = 'q' // leader -> client node: vhost, queue, seq, status
	callQQConsume byte = 'k' // callConsume preceded by the leader term the client knows
	callQQGet     byte = 'h' // callGet preceded by the leader term the client knows
	// callQQApplied asks the leader for the last publish of a publisher
	// it applied (vhost, queue, publisher -> seq, known): a resend
	// after a leader change starts after it (issue 22).
	callQQApplied byte = 'w'
)

// qqNotLeaderMark is in the text of the error a node answers for a
// quorum queue it does not lead (lookupRef): the caller waits for the
// leader and tries again.
const qqNotLeaderMark = "is not led by node"

// errQQRetry: the call reached no leader (the node was not the leader, or
// unreachable); try again once the leader is known.
var errQQRetry = errors.New("quorum queue: no leader reached")

// qqNoLeader is RabbitMQ 3.10's answer when a quorum queue's Ra command
// times out in basic.consume or queue.purge: the channel crashes on a
// badmatch and the connection closes with 541 INTERNAL_ERROR.
func qqNoLeader() *amqp.Error {
	return &amqp.Error{Code: amqp.InternalError, Text: "INTERNAL_ERROR", Hard: true}
}

// qqClient is a replicated quorum queue's client side on this node.
type qqClient struct {
	mu     sync.Mutex
	leader string
	term   uint64
	set    bool // qqLeaderChanged was called: leader/term are known
	down   bool // the leader's node is down (PeerState)
	epoch  uint64
	epochA atomic.Uint64 // epoch, for readers under Queue.mu
	// origins: the node whose machine made an epoch's deliveries (where
	// that epoch's legs and gets went), for qqSettle.
	origins map[uint64]string
	changed chan struct{} // closed at the next change of leader, epoch or down
	tracked bool          // in remoteState.qqs

	// publishes waiting for the leader's answer, in seq order; answered
	// ones are marked done and dropped from the head.
	pend      []qqPub
	pendLive  int
	pendBytes int64
	roomC     chan struct{} // closed when room frees up
	kickT     *time.Timer   // the next resend
	tickOn    bool          // the timeout check runs
	backoff   time.Duration

	cons      map[*Consumer]*qqCons
	attaching bool // qqReattachLoop runs

	// sendMu orders the sends to the leader (ids in increasing order).
	sendMu sync.Mutex
	// sentTo and sentEpoch: every pending publish was sent, in order, to
	// sentTo in sentEpoch; only then may a new one go straight after
	// them (else it waits for a resend of all: a later id ahead of an
	// earlier one would make the dedup drop the earlier).
	sentTo    string
	sentEpoch uint64

	// chain is the seq of the newest publish answered enqOK that left the
	// pending list (it is in the queue's log), 0 when none is known; a
	// publish's Prev is the seq before it in the log (qqPrevLocked).
	// chainAt is when the pending list last emptied: after
	// qqChainIdle the state may have forgotten this node (qrepl.PubTTL)
	// and the chain starts again from 0.
	chain   uint64
	chainAt time.Time
}

// qqChainIdle: a queue this node has not published to for this long
// starts its publish chain again (half of qrepl.PubTTL).
const qqChainIdle = qrepl.PubTTL / 2 * time.Millisecond

type qqPub struct {
	seq      uint64
	m        *Message
	w        *rwait
	size     int64
	at       time.Time // last sent
	done     bool
	rejected bool // answered enqRejected: not in the log
}

// qqCons is a client's consumer of the queue on this node and its leg.
type qqCons struct {
	c     *Consumer
	epoch uint64
	leg   qqLeg
}

// qqLeg is where a client's consumer is attached: a consumer in this
// node's machine, or a proxy at the leader node.
type qqLeg struct {
	local *Consumer
	rc    *rconsumer
	node  string
}

func (l qqLeg) empty() bool { return l.local == nil && l.rc == nil }

// qqLegSink is the sink of a leg in this node's machine: it stamps the
// epoch and hands the delivery to the client's consumer.
type qqLegSink struct {
	q     *Queue
	c     *Consumer
	epoch uint64
}

func (s *qqLegSink) Deliver(_ *Consumer, d Delivery) bool {
	if s.q.qc.epochA.Load() != s.epoch {
		return false // a leg of an earlier epoch (being detached)
	}
	d.term = s.epoch
	return s.c.Sink.Deliver(s.c, d)
}

func (s *qqLegSink) Cancelled(leg *Consumer) {
	s.q.qqLegLost(func(l qqLeg) bool { return l.local == leg })
}

// --- ids ---

// qqPubID is this node run's publisher id (random, never 0).
func (rs *remoteState) qqPubID() uint64 {
	if p := rs.qqPub.Load(); p != 0 {
		return p
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	p := binary.LittleEndian.Uint64(b[:]) | 1
	if rs.qqPub.CompareAndSwap(0, p) {
		return p
	}
	return rs.qqPub.Load()
}

// qqNextSeq is the next publish seq: from the clock's nanoseconds at the
// first, so that a restarted node (a new publisher id, which a collision
// could make equal to the last run's) keeps increasing.
func (rs *remoteState) qqNextSeq() uint64 {
	if rs.qqSeq.Load() == 0 {
		rs.qqSeq.CompareAndSwap(0, uint64(time.Now().UnixNano()))
	}
	return rs.qqSeq.Add(1)
}

// --- the leader as this node knows it ---

// targetLocked is the leader to use now and whether it is usable: known,
// its node up, and, when it is this node, taken over.
func (q *Queue) qqTargetLocked() (string, bool) {
	qc := &q.qc
	leader := qc.leader
	if !qc.set {
		leader = q.HomeNode()
	}
	if leader == "" || qc.down {
		return "", false
	}
	if leader == q.vhost.b.node {
		return leader, q.ServedHere()
	}
	return leader, q.vhost.b.getPeers() != nil
}

func (qc *qqClient) changedLocked() chan struct{} {
	if qc.changed == nil {
		qc.changed = make(chan struct{})
	}
	return qc.changed
}

func (qc *qqClient) notifyLocked() {
	if qc.changed != nil {
		close(qc.changed)
		qc.changed = nil
	}
}

func (qc *qqClient) bumpLocked() {
	qc.epoch++
	qc.epochA.Store(qc.epoch)
	qc.notifyLocked()
}

// epochLocked is the current epoch, starting at 1 (0 marks a delivery
// that carries none).
func (qc *qqClient) epochLocked() uint64 {
	if qc.epoch == 0 {
		qc.bumpLocked()
	}
	return qc.epoch
}

// trackLocked registers q with the broker (PeerState looks there).
func (q *Queue) qqTrackLocked() {
	if q.qc.tracked {
		return
	}
	q.qc.tracked = true
	rs := &q.vhost.b.remote
	rs.mu.Lock()
	if rs.qqs == nil {
		rs.qqs = map[*Queue]struct{}{}
	}
	rs.qqs[q] = struct{}{}
	rs.mu.Unlock()
}

// qqAwait waits until deadline for a usable leader; it returns it and the
// epoch of this view of it.
func (q *Queue) qqAwait(deadline time.Time) (string, uint64, bool) {
	qc := &q.qc
	for {
		qc.mu.Lock()
		node, ok := q.qqTargetLocked()
		ep := qc.epochLocked()
		ch := qc.changedLocked()
		qc.mu.Unlock()
		if ok {
			return node, ep, true
		}
		left := time.Until(deadline)
		if left <= 0 || q.Deleted() {
			return "", 0, false
		}
		waitChange(ch, min(left, qqPoll))
	}
}

func waitChange(ch chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	select {
	case <-ch:
	case <-t.C:
	}
	t.Stop()
}

// qqLeaderChanged tells this node that queue q's leader is now leader in
// term term ("" when the node that led it is down and no new leader is
// known yet). It runs on every node, for every change this node learns
// of, in increasing term order, without queue locks held: the client side
// moves this node's consumers of q to the new leader and resends the
// publishes still waiting for it.
func (q *Queue) qqLeaderChanged(leader string, term uint64) {
	qc := &q.qc
	qc.mu.Lock()
	if qc.set && (term < qc.term || term == qc.term && leader == qc.leader && !qc.down) {
		qc.mu.Unlock()
		return
	}
	qc.set = true
	qc.leader, qc.term, qc.down = leader, term, false
	qc.bumpLocked()
	qc.backoff = 0
	qc.mu.Unlock()
	// As a leader (or no longer one): the proxies and gets this node
	// serves for other nodes from an earlier term are gone with the
	// machine of that term.
	q.vhost.b.remote.dropQQProxies(q)
	q.qqKick(0)
	q.qqReattach()
}

// qqPeerState is PeerState for the quorum queues this node uses.
func (b *Broker) qqPeerState(node string, up bool) {
	rs := &b.remote
	rs.mu.Lock()
	qs := make([]*Queue, 0, len(rs.qqs))
	for q := range rs.qqs {
		qs = append(qs, q)
	}
	rs.mu.Unlock()
	for _, q := range qs {
		if q.Deleted() {
			rs.mu.Lock()
			delete(rs.qqs, q)
			rs.mu.Unlock()
			q.qqReattach() // cancels its consumers
			q.qqKick(0)    // fails its pending publishes
			continue
		}
		qc := &q.qc
		qc.mu.Lock()
		leader := qc.leader
		if !qc.set {
			leader = q.HomeNode()
		}
		if leader != node || qc.down == !up {
			qc.mu.Unlock()
			continue
		}
		qc.down = !up
		if up {
			qc.notifyLocked()
		} else {
			qc.bumpLocked() // the leader's node dropped what this node held
		}
		qc.mu.Unlock()
		q.qqKick(0)
		q.qqReattach()
	}
}

// --- publish ---

// qqPublish is enqueue for a replicated quorum queue: the message goes to
// the leader under a publish id; r's wait (the confirm) ends with the
// leader's answer.
func (q *Queue) qqPublish(m *Message, r *Router) enqueueResult {
	var w *rwait
	if r != nil && !r.NoWait {
		if r.rw == nil {
			r.rw = &rwait{}
		}
		w = r.rw
		w.add(1)
	}
	if !q.qqSend(m, w) && w != nil {
		w.add(-1)
		r.failed = true
	}
	return enqueued
}

// qqSend makes m pending and sends it to the leader if one is usable; w
// (may be nil) gets the answer. false: no room (m was not taken).
func (q *Queue) qqSend(m *Message, w *rwait) bool {
	size := int64(m.Size())
	if !q.qqRoom() {
		return false
	}
	qc := &q.qc
	rs := &q.vhost.b.remote
	qc.sendMu.Lock()
	defer qc.sendMu.Unlock()
	seq := rs.qqNextSeq()
	qc.mu.Lock()
	q.qqTrackLocked()
	node, ok := q.qqTargetLocked()
	ep := qc.epochLocked()
	if ok && qc.pendLive == 0 {
		qc.sentTo, qc.sentEpoch = node, ep
	}
	if len(qc.pend) == 0 && time.Since(qc.chainAt) > qqChainIdle {
		qc.chain = 0
	}
	direct := ok && qc.sentTo == node && qc.sentEpoch == ep
	qc.pend = append(qc.pend, qqPub{seq: seq, m: m, w: w, size: size, at: time.Now()})
	prev := qc.qqPrevLocked(len(qc.pend) - 1)
	qc.pendLive++
	qc.pendBytes += size
	q.qqTickLocked()
	qc.mu.Unlock()
	if direct && !q.qqSendOne(node, seq, prev, m) {
		qc.mu.Lock()
		qc.sentEpoch = 0
		qc.mu.Unlock()
		q.qqKick(qqRetryMin)
	}
	return true
}

// qqRoom waits (up to forwardWait) until the pending list has room.
func (q *Queue) qqRoom() bool {
	qc := &q.qc
	deadline := time.Now().Add(forwardWait)
	for {
		qc.mu.Lock()
		if qc.pendLive < qqMaxPending && qc.pendBytes < qqMaxPendingBytes {
			qc.mu.Unlock()
			return true
		}
		if qc.roomC == nil {
			qc.roomC = make(chan struct{})
		}
		ch := qc.roomC
		qc.mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 || q.Deleted() {
			return false
		}
		waitChange(ch, left)
	}
}

// qqSendOne sends publish seq to node, with sendMu held.
func (q *Queue) qqSendOne(node string, seq, prev uint64, m *Message) bool {
	b := q.vhost.b
	if node == b.node {
		s := q.qq
		q.qqEnqueueAtLeader(machine.PubID{Publisher: b.remote.qqPubID(), Seq: seq}, prev, m, func(st byte) { s.answers.add(qqAns{seq, st}) })
		return true
	}
	p := b.getPeers()
	if p == nil {
		return false
	}
	buf := make([]byte, 0, 40+len(q.vhost.Name)+len(q.Name)+len(m.Body)+len(m.Exchange)+len(m.RoutingKey)+64)
	buf = append(buf, opQQEnqueue)
	buf = binary.AppendUvarint(buf, b.remote.qqPubID())
	buf = binary.AppendUvarint(buf, seq)
	buf = binary.AppendUvarint(buf, prev)
	buf = appendStr(buf, q.vhost.Name)
	buf = appendStr(buf, q.Name)
	buf = appendQQEnq(buf, m) // the leader proposes it as it comes (qqEnq)
	return sendPaced(p, node, buf) == nil
}

// qqAns is a local leader's answer on its way to qqAnswer
// (qqState.answers), off the raft loop.
type qqAns struct {
	seq uint64
	st  byte
}

// qqAnswer takes the leader's answer for publish seq.
func (q *Queue) qqAnswer(seq uint64, st byte) {
	qc := &q.qc
	qc.mu.Lock()
	i := sort.Search(len(qc.pend), func(i int) bool { return qc.pend[i].seq >= seq })
	if i == len(qc.pend) || qc.pend[i].seq != seq || qc.pend[i].done {
		qc.mu.Unlock()
		return
	}
	if st != enqOK && st != enqRejected {
		// Not taken (not the leader, or it failed): everything pending
		// goes again, in order, after a backoff; nothing goes directly
		// before that resend.
		qc.sentEpoch = 0
		qc.backoff = min(max(2*qc.backoff, qqRetryMin), qqRetryMax)
		d := qc.backoff
		qc.mu.Unlock()
		q.qqKick(d)
		return
	}
	w := qc.pend[i].w
	qc.pend[i].rejected = st == enqRejected
	qc.finishLocked(i)
	qc.backoff = 0
	qc.mu.Unlock()
	if w != nil {
		if st == enqOK {
			w.done(nil)
		} else {
			w.done(ErrRemoteRejected)
		}
	}
}

// finishLocked ends pending publish i.
// qqPrevLocked is the Prev of pending publish i: the seq of the publish
// before it that is (or will be) in the log, the last pending or
// confirmed one before it, not one refused (enqRejected).
func (qc *qqClient) qqPrevLocked(i int) uint64 {
	for j := i - 1; j >= 0; j-- {
		if p := &qc.pend[j]; !p.rejected {
			return p.seq
		}
	}
	return qc.chain
}

func (qc *qqClient) finishLocked(i int) {
	p := &qc.pend[i]
	p.done, p.m, p.w = true, nil, nil
	qc.pendLive--
	qc.pendBytes -= p.size
	n := 0
	for n < len(qc.pend) && qc.pend[n].done {
		if !qc.pend[n].rejected {
			qc.chain = qc.pend[n].seq // in the log
		}
		n++
	}
	if n == len(qc.pend) {
		qc.chainAt = time.Now()
	}
	if n > 0 {
		clear(qc.pend[:n])
		qc.pend = qc.pend[n:]
		if len(qc.pend) == 0 {
			qc.pend = nil
		}
	}
	if qc.roomC != nil && qc.pendLive < qqMaxPending && qc.pendBytes < qqMaxPendingBytes {
		close(qc.roomC)
		qc.roomC = nil
	}
}

// qqKick schedules a resend of the pending publishes after d (0: now).
func (q *Queue) qqKick(d time.Duration) {
	qc := &q.qc
	qc.mu.Lock()
	defer qc.mu.Unlock()
	if qc.pendLive == 0 {
		return
	}
	if qc.kickT != nil {
		if d > 0 || !qc.kickT.Stop() {
			return // one is due (or running)
		}
	}
	qc.kickT = time.AfterFunc(d, func() {
		qc.mu.Lock()
		qc.kickT = nil
		qc.mu.Unlock()
		q.qqResend()
	})
}

// qqTickLocked keeps the timeout check running while publishes are pending.
func (q *Queue) qqTickLocked() {
	qc := &q.qc
	if qc.tickOn {
		return
	}
	qc.tickOn = true
	time.AfterFunc(qqResendAfter/2, q.qqTick)
}

func (q *Queue) qqTick() {
	qc := &q.qc
	qc.mu.Lock()
	if qc.pendLive == 0 {
		qc.tickOn = false
		qc.mu.Unlock()
		return
	}
	late := false
	for i := range qc.pend {
		if !qc.pend[i].done {
			late = time.Since(qc.pend[i].at) >= qqResendAfter
			break
		}
	}
	time.AfterFunc(qqResendAfter/2, q.qqTick)
	qc.mu.Unlock()
	if late || q.Deleted() {
		q.qqKick(0)
	}
}

// qqResend sends every pending publish to the leader again, in id order,
// from the first one it has not applied: those up to its applied mark
// (qqSettleApplied) are in its log already, their answers lost with the
// old leader, and are confirmed without being sent again.
func (q *Queue) qqResend() {
	qc := &q.qc
	// Settling sends nothing: it runs before sendMu, which new publishes
	// take, so that a slow answer holds none of them up.
	qc.mu.Lock()
	node, ok := q.qqTargetLocked()
	live := qc.pendLive
	qc.mu.Unlock()
	if ok && live > 0 && node != q.vhost.b.node && !q.Deleted() && !q.qqSettleApplied(node) {
		// The node is not leading yet (its members know it won the
		// election before it took over): it would refuse the resend too.
		qc.mu.Lock()
		qc.backoff = min(max(2*qc.backoff, qqRetryMin), qqRetryMax)
		d := qc.backoff
		qc.mu.Unlock()
		q.qqKick(d)
		return
	}
	qc.sendMu.Lock()
	defer qc.sendMu.Unlock()
	if q.Deleted() {
		q.qqFailPending(errRemoteNoQueue)
		return
	}
	qc.mu.Lock()
	node, ok = q.qqTargetLocked()
	if !ok || qc.pendLive == 0 {
		qc.mu.Unlock()
		return // a leader change or the node coming up kicks again
	}
	type item struct {
		seq, prev uint64
		m         *Message
	}
	items := make([]item, 0, qc.pendLive)
	now := time.Now()
	for i := range qc.pend {
		if p := &qc.pend[i]; !p.done {
			p.at = now
			items = append(items, item{p.seq, qc.qqPrevLocked(i), p.m})
		}
	}
	backoff := min(max(2*qc.backoff, qqRetryMin), qqRetryMax)
	qc.sentTo, qc.sentEpoch = node, qc.epochLocked()
	qc.mu.Unlock()
	for _, it := range items {
		if !q.qqSendOne(node, it.seq, it.prev, it.m) {
			qc.mu.Lock()
			qc.sentEpoch = 0
			qc.mu.Unlock()
			q.qqKick(backoff)
			return
		}
	}
}

// qqSettleApplied asks node, the leader, for the last publish of this
// node it applied, and confirms the pending publishes up to it. Without
// an answer (an older node, a leader change meanwhile) nothing changes:
// everything pending is resent, and the leader's dedup answers those it
// has. false: node does not lead the queue (yet), or is unreachable.
func (q *Queue) qqSettleApplied(node string) bool {
	b := q.vhost.b
	req := binary.AppendUvarint(q.appendRef(nil, callQQApplied), b.remote.qqPubID())
	d, err := q.callNode(node, req)
	if err != nil {
		// errQQRetry: not leading (yet; callNode maps that answer to
		// it), or unreachable.
		return !errors.Is(err, errQQRetry)
	}
	last, known := d.Uvarint(), d.Bool()
	if d.Err() != nil || !known {
		return true
	}
	qc := &q.qc
	var ws []*rwait
	qc.mu.Lock()
	for i := 0; i < len(qc.pend); {
		p := &qc.pend[i]
		if p.done {
			i++
			continue
		}
		if p.seq > last {
			break
		}
		if p.w != nil {
			ws = append(ws, p.w)
		}
		n := len(qc.pend)
		qc.finishLocked(i)
		i = max(i+1-(n-len(qc.pend)), 0) // finishLocked trims done ones off the head
	}
	if len(ws) > 0 {
		qc.backoff = 0
	}
	qc.mu.Unlock()
	b.remote.qqSettledByMark.Add(uint64(len(ws)))
	for _, w := range ws {
		w.done(nil)
	}
	return true
}

// qqDropAnswers (tests): leaders drop their answers to other nodes'
// publishes, as answers lost with a leader that dies.
var qqDropAnswers atomic.Bool

// qqAppliedMark is the leader's side of callQQApplied: the last publish
// of publisher it applied.
func (s *qqState) qqAppliedMark(publisher uint64) (uint64, bool) {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	last, ok := s.pubLast[publisher]
	return last, ok
}

// qqFailPending ends every pending publish with err (the queue is gone).
func (q *Queue) qqFailPending(err error) {
	qc := &q.qc
	qc.mu.Lock()
	var ws []*rwait
	for i := range qc.pend {
		if p := &qc.pend[i]; !p.done && p.w != nil {
			ws = append(ws, p.w)
		}
	}
	qc.pend, qc.pendLive, qc.pendBytes = nil, 0, 0
	if qc.roomC != nil {
		close(qc.roomC)
		qc.roomC = nil
	}
	qc.mu.Unlock()
	rs := &q.vhost.b.remote
	rs.mu.Lock()
	delete(rs.qqs, q) // the queue is gone
	rs.mu.Unlock()
	for _, w := range ws {
		w.done(err)
	}
}

// qqEnqueueFromPeer is the leader's side of opQQEnqueue.
func (b *Broker) qqEnqueueFromPeer(from string, d *msgDecoder) {
	b.remote.qqEnqIn.Add(1)
	pub, seq, prev := d.Uvarint(), d.Uvarint(), d.Uvarint()
	vn, qn := d.Str(), d.Str()
	if d.Err() != nil {
		return
	}
	p := b.getPeers()
	answer := func(st byte) {
		if p == nil || qqDropAnswers.Load() {
			return
		}
		out := appendStr(appendStr(make([]byte, 0, 16+len(vn)+len(qn)), vn), qn)
		out = append([]byte{opQQEnqueued}, out...)
		out = binary.AppendUvarint(out, seq)
		answerPeer(p, from, append(out, st))
	}
	enq := readQQEnq(d)
	var q *Queue
	if v := b.VHost(vn); v != nil && d.Err() == nil {
		q = v.Queue(qn)
	}
	switch {
	case q == nil:
		answer(enqNoQueue)
	case q.qq != nil: // not leading: refused there, and remembered (qqGate)
		q.qqProposeEnqueue(machine.PubID{Publisher: pub, Seq: seq}, prev, enq, answer)
	case q.ServedHere():
		// Homed here but not replicated (the definitions are not yet the
		// same everywhere, or a test's stand-in leader): a plain enqueue.
		m, err := enq.message()
		if err != nil {
			answer(enqNoQueue)
			return
		}
		b.enqueueAnswered(q, m, answer)
	default:
		answer(enqNotLeader)
	}
}

// qqEnqueuedFromPeer is a leader's answer for a publish of this node.
func (b *Broker) qqEnqueuedFromPeer(d *msgDecoder) {
	vn, qn := d.Str(), d.Str()
	seq, st := d.Uvarint(), d.Byte()
	if d.Err() != nil {
		return
	}
	v := b.VHost(vn)
	if v == nil {
		return
	}
	if q := v.Queue(qn); q != nil && q.qq != nil {
		q.qqAnswer(seq, st)
	}
}

// --- consume ---

// qqAddConsumer subscribes c: it waits (qqLeaderWait) for a leader and
// attaches c's leg there; added runs at that first attachment.
func (q *Queue) qqAddConsumer(c *Consumer, added func()) error {
	qc := &q.qc
	deadline := time.Now().Add(qqLeaderWait)
	backoff := qqRetryMin
	for {
		node, ep, ok := q.qqAwait(deadline)
		if !ok {
			if q.Deleted() {
				return notFoundQueue(q.Name, q.vhost.Name)
			}
			return qqNoLeader()
		}
		leg, err := q.qqAttach(c, node, ep, added)
		if err == nil {
			k := &qqCons{c: c}
			qc.mu.Lock()
			if qc.cons == nil {
				qc.cons = map[*Consumer]*qqCons{}
			}
			qc.cons[c] = k
			q.qqTrackLocked()
			current := qc.epoch == ep
			if current {
				k.leg, k.epoch = leg, ep
			}
			qc.mu.Unlock()
			if !current { // the leader moved meanwhile: the subscription stays
				q.qqDetach(leg)
				q.qqReattach()
			}
			return nil
		}
		if !errors.Is(err, errQQRetry) {
			return err
		}
		qc.mu.Lock()
		ch := qc.changedLocked()
		qc.mu.Unlock()
		if time.Until(deadline) <= 0 {
			return qqNoLeader()
		}
		waitChange(ch, min(backoff, time.Until(deadline)))
		backoff = min(2*backoff, qqRetryMax)
	}
}

// setConsumerQueue sets c.Queue on the first attach. A reattach after a
// failover finds it set to q already and writes nothing: the consumer's
// channel reads c.Queue without the queue's lock (closing, it removes the
// consumer from c.Queue), and a write of the same value raced with it
// (seen by the race detector in CI, TestQuorumClusterLeaderCrash).
func setConsumerQueue(c *Consumer, q *Queue) {
	if c.Queue != q {
		c.Queue = q
	}
}

// qqAttach attaches a leg for c at node, the leader in epoch ep; added
// (may be nil) runs under the queue's lock before the first delivery.
func (q *Queue) qqAttach(c *Consumer, node string, ep uint64, added func()) (qqLeg, error) {
	b := q.vhost.b
	q.qc.mu.Lock()
	q.qc.qqOriginLocked(ep, node)
	q.qc.mu.Unlock()
	if node == b.node {
		leg := &Consumer{Tag: c.Tag, NoAck: c.NoAck, Exclusive: c.Exclusive, Priority: c.Priority,
			Args: c.Args, Owner: c.Owner, Prefetch: c.Prefetch}
		leg.Sink = &qqLegSink{q: q, c: c, epoch: ep}
		err := q.addConsumerHere(leg, func() {
			setConsumerQueue(c, q)
			if added != nil {
				added()
			}
		})
		if err != nil {
			return qqLeg{}, err
		}
		return qqLeg{local: leg, node: node}, nil
	}
	rs := &b.remote
	rc := &rconsumer{c: c, q: q, epoch: ep, node: node}
	q.qc.mu.Lock()
	term := q.qc.term
	q.qc.mu.Unlock()
	rs.mu.Lock()
	rc.id = rs.id()
	if rs.cons == nil {
		rs.cons = map[uint64]*rconsumer{}
	}
	rs.cons[rc.id] = rc
	rs.mu.Unlock()
	req := appendStr(appendStr(binary.AppendUvarint([]byte{callQQConsume}, term), q.vhost.Name), q.Name)
	req = binary.AppendUvarint(req, rc.id)
	req = appendStr(req, c.Tag)
	req = appendBool(req, c.NoAck)
	req = appendBool(req, c.Exclusive)
	req = binary.AppendVarint(req, int64(c.Priority))
	req = binary.AppendUvarint(req, c.Owner)
	req = binary.AppendUvarint(req, uint64(max(c.Prefetch, 0)))
	req = amqp.AppendTable(req, c.Args)
	if _, err := q.callNode(node, req); err != nil {
		rs.forget(rc)
		// The call may have reached the leader all the same (it timed
		// out here): the leader drops the proxy and returns what it sent
		// (opStale), as it does when a delivery reaches no consumer here.
		b.sendOrdered(node, binary.AppendUvarint([]byte{opStale}, rc.id))
		q.mu.Lock()
		rc.gone = true
		buf := rc.buf
		rc.buf = nil
		q.mu.Unlock()
		if len(buf) > 0 {
			q.Requeue(buf, false)
		}
		return qqLeg{}, err
	}
	q.mu.Lock()
	setConsumerQueue(c, q)
	if added != nil {
		added()
	}
	rc.active = true
	if !rc.gone {
		rc.flushLocked()
	}
	q.mu.Unlock()
	return qqLeg{rc: rc, node: node}, nil
}

// qqDetach takes a leg away from the machine it is attached to. The
// deliveries a remote leg buffered (no client saw them) go back to the
// machine that made them (qqSettle: a no-op if it is gone, the new
// leader has them).
func (q *Queue) qqDetach(l qqLeg) {
	if l.local != nil {
		q.qqRemoveFromMachine(l.local)
		return
	}
	rc := l.rc
	if rc == nil {
		return
	}
	b := q.vhost.b
	q.mu.Lock()
	rc.gone = true
	buf := rc.buf
	rc.buf = nil
	q.mu.Unlock()
	// rc stays known until the leader's answer ends its stream; a
	// delivery crossing the cancel goes back to its machine too.
	if p := b.getPeers(); p != nil && p.Up(l.node) {
		b.sendOrdered(l.node, binary.AppendUvarint([]byte{opCancel}, rc.id))
	} else {
		q.forgetConsumer(rc)
	}
	if len(buf) > 0 {
		q.Requeue(buf, false)
	}
}

// qqRemoveFromMachine removes c from this node's machine if it is there
// (a machine of an earlier term no longer has it).
func (q *Queue) qqRemoveFromMachine(c *Consumer) {
	q.mu.Lock()
	if c.m != nil && c.Queue == q && slices.Contains(q.m.Consumers(), c.m) {
		q.m.RemoveConsumer(q.nowMs(), c.m)
		if q.m.Config().SingleActive {
			q.m.Dispatch(q.clockMs(nil)) // the next consumer may have become active
		}
		q.armLocked()
	}
	q.unlock()
}

// qqRemoveConsumer unsubscribes c: a client's consumer (its leg goes), or
// a consumer of this node's machine (a proxy for another node).
func (q *Queue) qqRemoveConsumer(c *Consumer) {
	qc := &q.qc
	qc.mu.Lock()
	k := qc.cons[c]
	var leg qqLeg
	if k != nil {
		delete(qc.cons, c)
		leg, k.leg = k.leg, qqLeg{}
	}
	qc.mu.Unlock()
	if k == nil {
		q.qqRemoveFromMachine(c)
		return
	}
	q.qqDetach(leg)
}

// qqLegLost: the machine or the leader dropped a leg (the queue deleted,
// or the consumer removed there): the client's consumer is cancelled if
// the queue is gone, else attached again.
func (q *Queue) qqLegLost(match func(qqLeg) bool) {
	qc := &q.qc
	qc.mu.Lock()
	found := false
	for _, k := range qc.cons {
		if !k.leg.empty() && match(k.leg) {
			k.leg, found = qqLeg{}, true
		}
	}
	qc.mu.Unlock()
	if found {
		q.qqReattach()
	}
}

// qqReattach starts the re-attachment of the consumers whose legs are of
// an earlier epoch or missing, unless it runs.
func (q *Queue) qqReattach() {
	qc := &q.qc
	qc.mu.Lock()
	if qc.attaching || len(qc.cons) == 0 {
		qc.mu.Unlock()
		return
	}
	qc.attaching = true
	qc.mu.Unlock()
	go q.qqReattachLoop()
}

func (q *Queue) qqReattachLoop() {
	qc := &q.qc
	backoff := qqRetryMin
	for {
		if q.Deleted() {
			qc.mu.Lock()
			cons := qc.cons
			qc.cons, qc.attaching = nil, false
			qc.mu.Unlock()
			for _, k := range cons {
				q.qqDetach(k.leg)
				k.c.Sink.Cancelled(k.c)
			}
			return
		}
		qc.mu.Lock()
		ep := qc.epochLocked()
		node, ok := q.qqTargetLocked()
		var stale []qqLeg
		var todo []*qqCons
		for _, k := range qc.cons {
			if !k.leg.empty() && k.epoch != ep {
				stale = append(stale, k.leg)
				k.leg = qqLeg{}
			}
			if k.leg.empty() {
				todo = append(todo, k)
			}
		}
		if len(todo) == 0 {
			qc.attaching = false
			qc.mu.Unlock()
			for _, l := range stale {
				q.qqDetach(l)
			}
			return
		}
		ch := qc.changedLocked()
		qc.mu.Unlock()
		for _, l := range stale {
			q.qqDetach(l)
		}
		if !ok {
			waitChange(ch, qqPoll)
			continue
		}
		failed := false
		for _, k := range todo {
			leg, err := q.qqAttach(k.c, node, ep, nil)
			if err != nil {
				var ae *amqp.Error
				if errors.As(err, &ae) && ae.Code == amqp.AccessRefused {
					// exclusive use taken meanwhile: the subscription ends
					qc.mu.Lock()
					gone := qc.cons[k.c] == k
					delete(qc.cons, k.c)
					qc.mu.Unlock()
					if gone {
						k.c.Sink.Cancelled(k.c)
					}
					continue
				}
				failed = true
				break
			}
			qc.mu.Lock()
			if qc.epoch != ep || qc.cons[k.c] != k {
				qc.mu.Unlock()
				q.qqDetach(leg)
				continue
			}
			k.leg, k.epoch = leg, ep
			qc.mu.Unlock()
		}
		if failed {
			waitChange(ch, backoff)
			backoff = min(2*backoff, qqRetryMax)
		} else {
			backoff = qqRetryMin
		}
	}
}

// qqDispatch offers a remote leg's buffered deliveries to its client.
func (q *Queue) qqDispatch() {
	qc := &q.qc
	qc.mu.Lock()
	var rcs []*rconsumer
	for _, k := range qc.cons {
		if k.leg.rc != nil {
			rcs = append(rcs, k.leg.rc)
		}
	}
	qc.mu.Unlock()
	if len(rcs) == 0 {
		return
	}
	q.mu.Lock()
	for _, rc := range rcs {
		if rc.active && !rc.gone && len(rc.buf) > 0 {
			rc.flushLocked()
		}
	}
	q.mu.Unlock()
}

// --- settle and get ---

// qqSettle sends each settle to the node whose machine made the
// delivery (the leader of the delivery's epoch, qqClient.origins) and
// returns those this node's machine settles. The deliveries of an
// earlier epoch go there too: if that machine still runs (the leader did
// not change, this node's view of it did), it settles them; if it is
// gone, they name no message of the machine that runs there now (its
// sequence numbers are its term's, qqOwnLocked), and the message, still
// live in the replicated state, is redelivered by the new leader.
// Dropping them here instead would strand them, unacked, in a machine
// that still runs.
func (q *Queue) qqSettle(ds []Delivery, kind byte) []Delivery {
	qc := &q.qc
	self := q.vhost.b.node
	qc.mu.Lock()
	ep := qc.epochLocked()
	node, ok := q.qqTargetLocked()
	local := ok && node == self
	// The common cases without allocating: all of this node's machine,
	// or all for the remote leader of this epoch.
	all := true
	for i := range ds {
		if t := ds[i].term; !(local && (t == 0 || t == ep)) {
			all = false
			break
		}
	}
	if all {
		qc.mu.Unlock()
		return ds
	}
	var mine []Delivery
	var out map[string][]uint64
	for i := range ds {
		t := ds[i].term
		if t == 0 { // made by this node's machine, for a peer
			if local {
				mine = append(mine, ds[i])
			}
			continue
		}
		switch origin := qc.origins[t]; origin {
		case "":
			// unknown (an epoch too old, or none attached): the machine
			// that made it is long gone
		case self:
			if q.ServedHere() {
				mine = append(mine, ds[i])
			}
		default:
			if out == nil {
				out = map[string][]uint64{}
			}
			out[origin] = append(out[origin], ds[i].Seq)
		}
	}
	for n, seqs := range out {
		q.vhost.b.sendOut(n, outMsg{q: q, kind: kind, seqs: seqs})
	}
	qc.mu.Unlock()
	return mine
}

// qqOwnLocked keeps the deliveries made by the machine this node runs
// as the leader now: a settle of an earlier machine's delivery (its term
// is in the sequence number, takeoverLocked) must not touch this one,
// whose holders are other records. Not replicated queues keep all.
func (q *Queue) qqOwnLocked(ds []Delivery) []Delivery {
	s := q.qq
	if s == nil {
		return ds
	}
	here := s.here.Load()
	own := func(d *Delivery) bool { return here && d.Seq>>qqSeqTermShift == s.term }
	for i := range ds {
		if !own(&ds[i]) {
			kept := slices.Clone(ds[:i])
			for j := i + 1; j < len(ds); j++ {
				if own(&ds[j]) {
					kept = append(kept, ds[j])
				}
			}
			return kept
		}
	}
	return ds
}

// qqOrigin records that the deliveries of epoch ep come from node's
// machine (qqSettle sends their settles there); the oldest records go.
func (qc *qqClient) qqOriginLocked(ep uint64, node string) {
	if qc.origins == nil {
		qc.origins = map[uint64]string{}
	}
	qc.origins[ep] = node
	if len(qc.origins) > 2*qqOriginsKept {
		for e := range qc.origins {
			if e+qqOriginsKept < ep {
				delete(qc.origins, e)
			}
		}
	}
}

// qqOriginsKept is how many epochs' origins a node remembers: a delivery
// of an older epoch is settled nowhere (its machine is gone by then).
const qqOriginsKept = 256

// qqGet is basic.get from the leader (waiting for one, qqLeaderWait).
func (q *Queue) qqGet(noAck bool) (Delivery, int, bool) {
	deadline := time.Now().Add(qqLeaderWait)
	for {
		node, ep, ok := q.qqAwait(deadline)
		if !ok {
			return Delivery{}, 0, false
		}
		q.qc.mu.Lock()
		q.qc.qqOriginLocked(ep, node)
		q.qc.mu.Unlock()
		if node == q.vhost.b.node {
			d, n, ok := q.getHere(noAck)
			d.term = ep
			return d, n, ok
		}
		q.qc.mu.Lock()
		term := q.qc.term
		q.qc.mu.Unlock()
		req := appendStr(appendStr(binary.AppendUvarint([]byte{callQQGet}, term), q.vhost.Name), q.Name)
		req = appendBool(req, noAck)
		d, err := q.callNode(node, req)
		if errors.Is(err, errQQRetry) && time.Until(deadline) > 0 {
			waitChange(q.qqChanged(), qqRetryMin)
			continue
		}
		if err != nil || !d.Bool() {
			return Delivery{}, 0, false
		}
		remaining := int(d.Uvarint())
		dv, err := q.decodeDelivery(d, "")
		if err != nil {
			return Delivery{}, 0, false
		}
		dv.term = ep
		return dv, remaining, true
	}
}

func (q *Queue) qqChanged() chan struct{} {
	q.qc.mu.Lock()
	defer q.qc.mu.Unlock()
	return q.qc.changedLocked()
}

// qqStatWait bounds the wait for a leader of a count that is not a
// declare's (management, shovels, a delete's checks): RabbitMQ's stat
// waits 250 ms, then answers 0 and 0.
const qqStatWait = 250 * time.Millisecond

// qqCall runs a call at the leader, waiting for one (up to wait).
func (q *Queue) qqCall(req []byte, wait time.Duration) (*msgDecoder, error) {
	deadline := time.Now().Add(wait)
	for {
		node, _, ok := q.qqAwait(deadline)
		if !ok {
			return nil, qqNoLeader()
		}
		var d *msgDecoder
		var err error
		if node == q.vhost.b.node { // became the leader meanwhile: no barrier
			var resp []byte
			resp, err = q.vhost.b.HandlePeerCall(node, append([]byte{req[0], 0}, req[1:]...))
			if err == nil {
				d, err = decodeResult(resp)
			}
		} else {
			d, err = q.callNode(node, req)
		}
		if !errors.Is(err, errQQRetry) && !isQQNotLeader(err) {
			return d, err
		}
		if time.Until(deadline) <= 0 {
			return nil, qqNoLeader()
		}
		waitChange(q.qqChanged(), qqRetryMin)
	}
}

func isQQNotLeader(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && strings.Contains(ae.Text, qqNotLeaderMark)
}

// qqDeclareCounts is queue.declare-ok's counts for a quorum queue: from
// its leader, waited for (qqLeaderWait); 0 and 0 without one, as
// rabbit_quorum_queue:stat answers when the leader does not.
func (q *Queue) qqDeclareCounts() (*Queue, int, int, error) {
	node, _, ok := q.qqAwait(time.Now().Add(qqLeaderWait))
	if !ok {
		return q, 0, 0, nil
	}
	if node == q.vhost.b.node {
		q.Touch()
		m, c := q.Counts()
		return q, m, c, nil
	}
	m, c, err := q.remoteCounts(true)
	if err != nil {
		return q, 0, 0, nil
	}
	return q, m, c, nil
}

// dropQQProxies drops the proxy consumers and gets this node serves for
// other nodes on q whose machine is gone: all of them when this node
// does not lead q, those of an earlier leadership's machine when it does.
// It looks at the machine itself, not at the change being reported: the
// reports reach the client side late, after a new machine may have taken
// proxies on.
func (rs *remoteState) dropQQProxies(q *Queue) {
	q.mu.Lock()
	here, term := q.qq.here.Load(), q.qq.term
	stale := func(gen uint64) bool { return !here || gen != term }
	rs.mu.Lock()
	var ps []*proxy
	for k, p := range rs.proxies {
		if p.q == q && stale(p.gen) {
			delete(rs.proxies, k)
			ps = append(ps, p)
		}
	}
	for _, h := range rs.held {
		for k, hd := range h {
			if k.q == q && stale(k.seq>>qqSeqTermShift) {
				if hd.p != nil {
					hd.p.out--
				}
				delete(h, k)
			}
		}
	}
	rs.mu.Unlock()
	q.mu.Unlock()
	for _, p := range ps {
		q.qqRemoveFromMachine(p.c)
	}
}

// qqCheckTerm is the leader's check of a client's term in a call: a
// client that knows a later term than this node's leadership is refused.
func (q *Queue) qqCheckTerm(term uint64) error {
	if q.qq == nil {
		return nil
	}
	qc := &q.qc
	qc.mu.Lock()
	defer qc.mu.Unlock()
	if qc.set && term != 0 && term < qc.term { // 0: the client knows no term
		return q.qqNotLeaderErr()
	}
	return nil
}

func (q *Queue) qqNotLeaderErr() *amqp.Error {
	return amqp.Errorf(amqp.NotFound, "quorum queue '%s' in vhost '%s' %s '%s'", q.Name, q.vhost.Name, qqNotLeaderMark, q.vhost.b.node)
}

// qqForwardDL sends a dead letter to quorum queue t (at least once: the
// answer says whether t's leader took it).
func (q *Queue) qqForwardDL(t *Queue, rd *remoteDL, name string) {
	w := &rwait{left: 1}
	w.notify(func(err error) { q.remoteDLAnswer(rd, name, err) })
	if !t.qqSend(rd.msg, w) {
		w.done(errRemoteFailed)
	}
}

// quorumType is a replicated quorum queue (kinds.go): publishes,
// consumers and gets go through its leader, wherever it moves; the rest
// runs on the machine here when this node leads, else on the leader's.
type quorumType struct{ q *Queue }

func (k quorumType) enqueue(m *Message, r *Router) enqueueResult { return k.q.qqPublish(m, r) }
func (k quorumType) get(noAck bool) (Delivery, int, bool)        { return k.q.qqGet(noAck) }
func (k quorumType) addConsumer(c *Consumer, added func()) error {
	return k.q.qqAddConsumer(c, added)
}
func (k quorumType) removeConsumer(c *Consumer) { k.q.qqRemoveConsumer(c) }

func (k quorumType) dispatch() {
	if k.here() {
		k.q.dispatchHere()
	} else {
		k.q.qqDispatch()
	}
}

// available: waits (qqLeaderWait) for a leader.
func (k quorumType) available() error {
	if _, _, ok := k.q.qqAwait(time.Now().Add(qqLeaderWait)); !ok {
		if k.q.Deleted() {
			return notFoundQueue(k.q.Name, k.q.vhost.Name)
		}
		return qqNoLeader()
	}
	return nil
}

func (k quorumType) declareCounts() (*Queue, int, int, error) { return k.q.qqDeclareCounts() }

// callHome: on its leader, waiting (qqLeaderWait) for one; an unreachable
// node or one that no longer leads is errQQRetry: asked again at the
// next leader.
func (k quorumType) callHome(req []byte) (*msgDecoder, error) { return k.q.qqCall(req, qqLeaderWait) }
func (quorumType) homeLost() error                            { return errQQRetry }
func (quorumType) homeAnswer(err error) error {
	if isQQNotLeader(err) {
		return errQQRetry
	}
	return err
}
func (k quorumType) notHere() error { return k.q.qqNotLeaderErr() }

// at is where the queue's machine runs now: here when this node leads,
// else at the leader, reached as a remote queue's home is (its calls
// go to the leader: callHome).
func (k quorumType) at() queueType {
	if k.here() {
		return classicType(k)
	}
	return remoteType(k)
}

// settle drops stale deliveries and sends those of other nodes' legs to
// their leader (qqSettle); the rest are settled where the machine runs.
func (k quorumType) settle(ds []Delivery, kind byte) {
	if ds = k.q.qqSettle(ds, kind); len(ds) > 0 {
		k.at().settle(ds, kind)
	}
}

func (k quorumType) purge() int                                   { return k.at().purge() }
func (k quorumType) counts() (messages, consumers int)            { return k.at().counts() }
func (k quorumType) browse(offset int, fn func(Browsed) bool) int { return k.at().browse(offset, fn) }

func (k quorumType) here() bool   { return k.q.qq.leaderHere() }
func (k quorumType) home() string { return k.q.qq.leaderNode() }

// takeDeadLetter: through its leader.
func (k quorumType) takeDeadLetter(src *Queue, rd *remoteDL, name string) {
	src.qqForwardDL(k.q, rd, name)
}
func (quorumType) answersLater() bool { return true }
func (k quorumType) replicas() (members []string, group uint64) {
	return slices.Clone(k.q.qq.members), k.q.qq.id
}
func (k quorumType) started(fresh bool) { k.q.qq.start(fresh) } // this node's member, if it is one

// deletable: a quorum queue without a leader can be deleted (RabbitMQ
// forces it).
func (quorumType) deletable() error        { return nil }
func (k quorumType) deleted()              { k.q.qq.delete() }
func (quorumType) ownLog() bool            { return false }
func (quorumType) statsLocked(*QueueStats) {}
func (k quorumType) closing()              { k.q.qq.newEpoch() } // flushers waiting for marks give up (qqmarks.go)

// A quorum queue's leg outlives its leader: attached again to the next
// one (or cancelled if the queue is gone); what it held goes back to the
// machine that made it, by epoch, not as failed deliveries.
func (k quorumType) legCanceled(rc *rconsumer) bool {
	q := k.q
	q.mu.Lock()
	rc.gone = true
	buf := rc.buf
	rc.buf = nil
	q.mu.Unlock()
	q.qqLegLost(func(l qqLeg) bool { return l.rc == rc })
	if len(buf) > 0 { // back to the machine that made them (if it runs)
		q.Requeue(buf, false)
	}
	return true
}
func (quorumType) legHomeDown(rc *rconsumer, node string) (bool, bool) { return rc.node == node, false }
func (k quorumType) returnUnseen(ds []Delivery)                        { k.q.Requeue(ds, false) }
func (k quorumType) proxyGen() (uint64, bool) {
	if k.q.qq.here.Load() {
		return k.q.qq.term, true
	}
	return 0, false
}
func (quorumType) heldFailed() bool { return false }

// countsCall waits for a leader to report counts, except for a declare's
// (qqDeclareCounts waited already).
func (k quorumType) countsCall(req []byte, touch bool) (*msgDecoder, error) {
	if touch {
		return k.q.call(req)
	}
	return k.q.qqCall(req, qqStatWait)
}

// serveQQApplied answers callQQApplied: how far this leader applied a
// publisher's publishes.
func (b *Broker) serveQQApplied(d *msgDecoder) []byte {
	q, err := b.lookupRef(d)
	if err == nil && q.qq == nil {
		err = amqp.Errorf(amqp.NotFound, "queue '%s' in vhost '%s' is not a replicated quorum queue", q.Name, q.vhost.Name)
	}
	if err != nil {
		return appendResult(nil, err)
	}
	last, known := q.qq.qqAppliedMark(d.Uvarint())
	return appendBool(binary.AppendUvarint(appendResult(nil, nil), last), known)
}
