package broker

import (
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/broker/machine"
	"github.com/warrenmq/warren/broker/qrepl"
)

// Replicated quorum queues, the leader's side (issue 14).
//
// In a cluster every quorum queue is a Raft group (QuorumHost) whose
// members apply its log to a qrepl.State: the live messages' headers,
// publisher deduplication, the delivery lease. Only the leader acts: its
// node runs the queue as any local Queue (the machine, consumers, timers,
// dead-lettering), in leader mode:
//
//   - a publish is an Enqueue proposal (qqEnqueueAtLeader); the message
//     enters the machine, and is confirmed, once committed and applied;
//   - acks, drops, expiries and completed dead letters are batched Remove
//     proposals, requeues Return proposals, purges Purge proposals
//     (qqState.propose: in order, after the queue's lock is released);
//   - a delivery waits for the replicated lease to cover the message
//     (Lease proposals ahead of need), so that a new leader knows which
//     messages may have been delivered: it marks them redelivered.
//
// On becoming leader (every entry of earlier terms applied) a node builds
// its machine from the replicated state, reading the bodies from the log
// (takeover); on losing leadership it drops them (they stay in the state)
// and detaches its consumers, which the client side (qqclient.go)
// re-attaches to the new leader. Every node learns the leader: members
// from their group, the others from the leader's announcements
// (qqgroup.go); each change reaches qqLeaderChanged, in term order.
//
// The machine's sequence numbers are the leader's own, unique across
// leaderships (they start at term<<40), so that a settle of an earlier
// leadership's delivery never names a message of this one; ids maps them
// to the replicated ids (the indices of the enqueue entries).

// Lease steps: a delivery beyond the lease waits for a Lease raising it
// to leaseAhead past the message; the leader raises it before that, when
// an applied enqueue comes within leaseLow of it.
const (
	leaseAhead = 1024
	leaseLow   = 512
)

// qqSeqTermShift places a leadership's machine sequence numbers at
// term<<qqSeqTermShift (takeoverLocked).
const qqSeqTermShift = 40

// qqLeader is a leader as this node knows it.
type qqLeader struct {
	node string
	term uint64
}

// qqState is a replicated quorum queue's state on this node: nil on a
// single node and for every other queue type.
type qqState struct {
	q       *Queue
	id      uint64   // the group id
	members []string // the initial members

	leader atomic.Pointer[qqLeader]
	here   atomic.Bool // this node leads and took over

	// smu serializes the group's callbacks (Apply, Restore,
	// LeaderChanged) with start and delete. Lock order: smu, q.mu, pmu.
	smu      sync.Mutex
	g        QuorumGroup // this node's member; nil on other nodes
	st       *qrepl.State
	gone     bool   // deleted or stopped: callbacks do nothing
	pending  bool   // a takeover waits for StartGroup to return
	pterm    uint64 // its term
	starting bool   // StartGroup runs

	// Leader side, guarded by q.mu.
	ids      map[uint64]uint64 // machine seq -> replicated id
	lease    uint64            // the applied lease
	leaseC   chan struct{}     // closed when the applied lease rises
	leaseReq uint64            // the lease proposed, not yet applied
	maxID    uint64            // the newest entry placed (EntryOf)
	term     uint64            // the term this node leads in
	lg       QuorumGroup       // the group, while leading (bodies: qqpage.go)
	paging   qqPaging          // the paged-out tail (qqpage.go)

	// gate keeps a publisher's later publishes out of the log after this
	// node refused or failed an earlier one (qqGate).
	gate qqGate
	// gaps: this leader's enqueues applied out of order (qrepl
	// Result.Gap), by index, until their proposals are answered (smu).
	gaps map[uint64]struct{}
	// applied is, on the leader, the last seq applied per publisher (the
	// state's dedup, readable without smu): a resend of a publish already
	// applied is answered at once, not appended to the log again.
	pubMu   sync.Mutex
	pubLast map[uint64]uint64

	// Publishes waiting for the enqueue proposer, in order (emu), when
	// the cluster takes batches (Broker.qqBatching). Bounded by what
	// every node lets a queue's publishes have pending (qqMaxPending,
	// qqMaxPendingBytes): a publish waits here for its confirm.
	emu      sync.Mutex
	enqs     []qqPendEnq
	enqueuer lazyWorker // runs proposeEnqueues while enqs has publishes

	// Proposals waiting for the flusher, in order (pmu), and how far
	// they committed (qqmarks.go).
	pmu      sync.Mutex
	pend     []pendCmd
	proposer lazyWorker // runs flush while pend has commands
	marks    qqMarks

	// This node's answers to the publishes made here, handed off the raft
	// loop (where they are known, at apply) to qqAnswer, in order, so that
	// the publishers' waiters and the server's confirms never run on the
	// raft loop (qqclient.go).
	answers inOrder[qqAns]
	// Leader changes on their way to qqLeaderChanged, in order: it may
	// call other nodes.
	notes inOrder[qqLeader]
}

func newQQState(q *Queue, id uint64, members []string) *qqState {
	s := &qqState{q: q, id: id, members: slices.Clone(members)}
	s.leader.Store(&qqLeader{})
	s.answers.handle = func(a qqAns) { q.qqAnswer(a.seq, a.st) }
	s.notes.handle = func(n qqLeader) { q.qqLeaderChanged(n.node, n.term) }
	return s
}

// leaderHere reports whether this node is the queue's leader and has
// taken over (its Queue holds the messages and serves consumers).
func (s *qqState) leaderHere() bool { return s.here.Load() }

// leaderNode is the queue's leader as this node knows it, "" when none
// is known.
func (s *qqState) leaderNode() string { return s.leader.Load().node }

// leaderTerm is the term of the leader this node knows.
func (s *qqState) leaderTerm() uint64 { return s.leader.Load().term }

// qqEnqueueAtLeader enqueues m under the publish id id on this node, the
// leader: done runs once with enqOK after the enqueue is committed on a
// majority and applied here, enqRejected for a reject-publish refusal,
// enqNotLeader when this node is not (or stopped being) the leader, or
// enqFailed. id.Publisher 0 means no deduplication.
func (q *Queue) qqEnqueueAtLeader(id machine.PubID, prev uint64, m *Message, done func(status byte)) {
	q.qqProposeEnqueue(id, prev, qqEnqOf(m), done)
}

// qqEnq is a publish as a quorum queue's leader proposes it: what its
// checks read, and the message, encoded once (appendMessage) by the node
// it was published on. The leader copies body into its Enqueue proposal
// and decodes nothing; the message is decoded once more, at apply.
type qqEnq struct {
	ttl        int64 // the message's own TTL in ms, -1 for none
	priority   uint8
	persistent bool
	size       uint32 // body bytes, as Message.Size
	// m is the message when it was published on this node: appended
	// into the proposal, never encoded apart. Else body holds it.
	m    *Message
	body []byte
}

// qqEnqOf is m as a qqEnq.
func qqEnqOf(m *Message) qqEnq {
	return qqEnq{ttl: m.ownTTL(), priority: m.Props.Priority, persistent: m.persistent(), size: uint32(m.Size()), m: m}
}

// appendQQEnq writes e's head for opQQEnqueue, then the message.
func appendQQEnq(b []byte, m *Message) []byte {
	e := qqEnqOf(m)
	b = binary.AppendVarint(b, e.ttl)
	b = appendBool(append(b, e.priority), e.persistent)
	b = binary.AppendUvarint(b, uint64(e.size))
	return appendMessage(b, m)
}

// readQQEnq reads what appendQQEnq wrote; body is the rest of d.
func readQQEnq(d *msgDecoder) qqEnq {
	e := qqEnq{ttl: d.Varint(), priority: d.Byte(), persistent: d.Bool(), size: uint32(d.Uvarint())}
	e.body = d.Rest()
	return e
}

// message is e's message, decoded from body if need be.
func (e *qqEnq) message() (*Message, error) {
	if e.m == nil {
		m, err := decodeMessage(e.body)
		if err != nil {
			return nil, err
		}
		e.m = m
	}
	return e.m, nil
}

// qqRejectsLocked is rejectsLocked (R4.5, R4.6) for a publish in qqEnq
// form: the message is decoded only for reject-publish-dlx's dead letter.
func (q *Queue) qqRejectsLocked(pub *qqEnq) bool {
	var m *Message
	if q.m.Config().Overflow == machine.RejectPublishDLX {
		var err error
		if m, err = pub.message(); err != nil {
			return true // undecodable: refused rather than placed
		}
	}
	return q.rejectsSizedLocked(m, pub.size, pub.persistent)
}

// qqProposeEnqueue is qqEnqueueAtLeader for a publish in qqEnq form.
func (q *Queue) qqProposeEnqueue(id machine.PubID, prev uint64, pub qqEnq, done func(status byte)) {
	s := q.qq
	if s == nil {
		done(enqNotLeader)
		return
	}
	q.mu.Lock()
	switch {
	case q.deleted:
		q.mu.Unlock()
		done(enqNoQueue)
		return
	case !s.here.Load():
		q.mu.Unlock()
		s.gate.refused(id)
		done(enqNotLeader)
		return
	case !s.gate.admit(id):
		q.mu.Unlock()
		done(enqNotLeader)
		return
	case s.appliedSeq(id):
		q.mu.Unlock()
		done(enqOK) // a resend of one already in the queue (its answer was lost)
		return
	case q.qqRejectsLocked(&pub):
		q.mu.Unlock()
		if s.appliedSeq(id) {
			// A resend of a publish already in the log (its answer was
			// lost): confirmed, not refused, or its publisher's next
			// publish, chained after it, would never be placed.
			done(enqOK)
			return
		}
		done(enqRejected)
		return
	}
	now := q.nowMs()
	expiresAt := q.m.ExpiresAt(now, pub.ttl)
	g := s.g
	q.mu.Unlock()
	if g == nil {
		done(enqNotLeader)
		return
	}
	p := qqPendEnq{head: qrepl.Enqueue{Pub: id, Prev: prev, Time: now, ExpiresAt: expiresAt, Priority: pub.priority,
		Persistent: pub.persistent, Size: pub.size}, pub: pub, done: done}
	if q.vhost.b.qqBatching.Load() {
		s.emu.Lock()
		s.enqs = append(s.enqs, p)
		start := s.enqueuer.startingLocked()
		s.emu.Unlock()
		if start {
			go s.proposeEnqueues()
		}
		return
	}
	g.Propose(p.appendTo(make([]byte, 0, p.sizeHint())), func(index uint64, err error) { s.answer(&p, index, err) })
}

// qqPendEnq is a publish on its way into the log.
type qqPendEnq struct {
	head qrepl.Enqueue // Body unset: pub has the message
	pub  qqEnq
	done func(status byte)
}

// sizeHint is about the bytes of p's entry: the peer path's frame, or
// the message encoded here (headers beyond 64 bytes grow it once).
func (p *qqPendEnq) sizeHint() int {
	if p.pub.body != nil {
		return 48 + len(p.pub.body)
	}
	m := p.pub.m
	return 112 + len(m.Exchange) + len(m.RoutingKey) + len(m.Body)
}

// appendTo appends p as a lone Enqueue.
func (p *qqPendEnq) appendTo(b []byte) []byte {
	b = p.head.AppendTo(b)
	if p.pub.body != nil {
		return append(b, p.pub.body...)
	}
	return appendMessage(b, p.pub.m)
}

// appendItem appends p as an item of an EnqueueBatch.
func (p *qqPendEnq) appendItem(b []byte) []byte {
	b, at := qrepl.AppendItemHead(b, &p.head)
	if p.pub.body != nil {
		b = append(b, p.pub.body...)
	} else {
		b = appendMessage(b, p.pub.m)
	}
	return qrepl.EndItem(b, at)
}

// answer answers the publish p, message id (its entry's outcome err).
func (s *qqState) answer(p *qqPendEnq, id uint64, err error) {
	if err != nil || s.tookGap(id) {
		// Not placed: not proposed, its outcome unknown, or applied
		// out of order (an earlier publish of its publisher is
		// missing): the publisher sends it again, after that one.
		s.gate.refused(p.head.Pub)
		p.done(enqNotLeader)
		return
	}
	p.done(enqOK)
}

// Bounds of one EnqueueBatch: its items and (but for a lone large
// message) its bytes, well inside the group's 1 MiB messages.
const (
	qqBatchItems = 1024
	qqBatchBytes = 256 << 10
)

// proposeEnqueues proposes the waiting publishes, in order, as few
// entries as their bounds allow: the publishes that arrive while an
// entry is being proposed share the next one.
func (s *qqState) proposeEnqueues() {
	for {
		s.emu.Lock()
		ps := s.enqs
		s.enqs = nil
		if len(ps) == 0 {
			s.enqueuer.stopLocked()
			s.emu.Unlock()
			return
		}
		s.emu.Unlock()
		s.smu.Lock()
		g := s.g
		s.smu.Unlock()
		if g == nil || !s.here.Load() {
			for i := range ps {
				s.answer(&ps[i], 0, errQQRetry)
			}
			continue
		}
		for len(ps) > 0 {
			n, size := 1, ps[0].sizeHint()
			for n < len(ps) && n < qqBatchItems && size+ps[n].sizeHint() <= qqBatchBytes {
				size += ps[n].sizeHint()
				n++
			}
			items := ps[:n:n]
			ps = ps[n:]
			var data []byte
			if n == 1 {
				data = items[0].appendTo(make([]byte, 0, size))
			} else {
				data = qrepl.AppendBatchHead(make([]byte, 0, size+8*n), n)
				for i := range items {
					data = items[i].appendItem(data)
				}
			}
			g.Propose(data, func(index uint64, err error) {
				for j := range items {
					s.answer(&items[j], qrepl.BatchID(index, j), err)
				}
			})
		}
	}
}

// appliedSeq reports whether this leader applied publish id (or a later
// one of its publisher): the cache of the state's dedup.
func (s *qqState) appliedSeq(id machine.PubID) bool {
	if id.Publisher == 0 {
		return false
	}
	s.pubMu.Lock()
	last, ok := s.pubLast[id.Publisher]
	s.pubMu.Unlock()
	return ok && id.Seq <= last
}

// noteApplied records seq as applied for publisher (the leader's cache,
// appliedSeq).
func (s *qqState) noteApplied(publisher, seq uint64) {
	s.pubMu.Lock()
	if s.pubLast == nil {
		s.pubLast = map[uint64]uint64{}
	}
	s.pubLast[publisher] = max(s.pubLast[publisher], seq)
	s.pubMu.Unlock()
}

// resetApplied empties the cache, then seeds it from st (nil: empty).
func (s *qqState) resetApplied(st *qrepl.State) {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	s.pubLast = nil
	if st != nil {
		s.pubLast = map[uint64]uint64{}
		st.EachPublisher(func(p, seq uint64) { s.pubLast[p] = seq })
	}
}

// tookGap reports (once) whether the enqueue applied at index was
// dropped as out of order. A proposal's answer runs after its entry was
// applied.
func (s *qqState) tookGap(index uint64) bool {
	s.smu.Lock()
	defer s.smu.Unlock()
	if _, ok := s.gaps[index]; ok {
		delete(s.gaps, index)
		return true
	}
	return false
}

// qqGate keeps a publisher's later publishes out of a quorum queue's log
// after this node answered an earlier one enqNotLeader (not leading yet,
// or its proposal failed), until the earlier one comes back: the state
// drops an enqueue whose seq is not above its publisher's last, so a
// later seq overtaking a refused one would make the refused one's resend
// a duplicate, confirmed and lost. A client resends in id order; the mark
// goes after qqGateTTL without news (the client resent elsewhere).
type qqGate struct {
	mu    sync.Mutex
	marks map[uint64]qqMark
}

type qqMark struct {
	seq uint64
	at  time.Time
}

// qqGateTTL is how long a refusal holds a publisher's later publishes.
const qqGateTTL = 5 * time.Second

// refused records that publish id was answered enqNotLeader here.
func (g *qqGate) refused(id machine.PubID) {
	if id.Publisher == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.marks == nil {
		g.marks = map[uint64]qqMark{}
	}
	m, ok := g.marks[id.Publisher]
	if !ok || id.Seq < m.seq || time.Since(m.at) > qqGateTTL {
		m.seq = id.Seq
	}
	m.at = time.Now()
	g.marks[id.Publisher] = m
}

// admit reports whether publish id may be proposed: not when an earlier
// publish of its publisher was refused and not yet resent.
func (g *qqGate) admit(id machine.PubID) bool {
	if id.Publisher == 0 {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	m, ok := g.marks[id.Publisher]
	switch {
	case !ok:
		return true
	case time.Since(m.at) > qqGateTTL || id.Seq == m.seq:
		delete(g.marks, id.Publisher) // expired, or the resend
		return true
	case id.Seq < m.seq:
		return true
	}
	return false
}

// --- the group's state machine (QuorumSM) ---

// qqSM is a qqState as its group's state machine.
type qqSM qqState

func (f *qqSM) Apply(ents []QuorumEntry) { (*qqState)(f).apply(ents) }

func (f *qqSM) Snapshot() ([]byte, []uint64) {
	s := (*qqState)(f)
	s.smu.Lock()
	defer s.smu.Unlock()
	if s.st == nil {
		s.st = qrepl.New()
	}
	return s.st.Snapshot(), s.st.Live()
}

func (f *qqSM) Restore(index uint64, data []byte) {
	s := (*qqState)(f)
	s.smu.Lock()
	defer s.smu.Unlock()
	st, err := qrepl.Restore(data)
	if err != nil {
		s.q.vhost.b.log.Error("quorum queue: undecodable snapshot", "queue", s.q.Name, "vhost", s.q.vhost.Name,
			"group", s.id, "index", index, "err", err)
		return
	}
	s.st = st
}

func (f *qqSM) LeaderChanged(leader string, term uint64, isSelf bool) {
	(*qqState)(f).leaderChanged(leader, term, isSelf)
}

// apply applies committed entries to the replicated state and, on the
// leader, places the new messages in the machine.
func (s *qqState) apply(ents []QuorumEntry) {
	s.smu.Lock()
	defer s.smu.Unlock()
	if s.gone {
		return
	}
	if s.st == nil {
		s.st = qrepl.New()
	}
	q := s.q
	leading := s.here.Load()
	if leading {
		q.mu.Lock()
	}
	dispatch := false
	for i := range ents {
		e := &ents[i]
		c, err := qrepl.Decode(e.Data)
		if err != nil {
			_, _ = s.st.Apply(e.Index, e.Data) // counted as skipped, alike on every member
			q.vhost.b.log.Error("quorum queue: undecodable entry", "queue", q.Name, "vhost", q.vhost.Name, "index", e.Index, "err", err)
			continue
		}
		res, err := s.st.ApplyCommand(e.Index, c)
		if err != nil || !leading || q.deleted {
			continue
		}
		if res.Gap {
			if s.gaps == nil {
				s.gaps = map[uint64]struct{}{}
			}
			s.gaps[e.Index] = struct{}{} // for its proposal's answer (tookGap)
		}
		switch c := c.(type) {
		case qrepl.Enqueue:
			if !res.Duplicate && !res.Gap {
				s.placeLocked(e.Index, &c)
				if c.Pub.Publisher != 0 {
					s.noteApplied(c.Pub.Publisher, c.Pub.Seq)
				}
			}
		case qrepl.EnqueueBatch:
			for j := range c.Items {
				id, item := qrepl.BatchID(e.Index, j), &c.Items[j]
				switch {
				case res.Batch == nil || res.Batch[j].Gap:
					// Out of order, or the batch skipped whole: not
					// placed, its publisher sends it again.
					if s.gaps == nil {
						s.gaps = map[uint64]struct{}{}
					}
					s.gaps[id] = struct{}{}
				case !res.Batch[j].Duplicate:
					s.placeLocked(id, item)
					if item.Pub.Publisher != 0 {
						s.noteApplied(item.Pub.Publisher, item.Pub.Seq)
					}
				}
			}
		case qrepl.Lease:
			if c.UpTo > s.lease {
				s.lease = c.UpTo
				dispatch = true
				if s.leaseC != nil { // a basic.get waits for it (leaseWait)
					close(s.leaseC)
					s.leaseC = nil
				}
			}
		}
	}
	if leading {
		if dispatch && !q.deleted {
			q.m.Dispatch(q.clockMs(nil))
		}
		q.armLocked()
		q.unlock()
	}
}

// placeLocked makes the message of the enqueue at id ready on the leader,
// or, beyond the window, counts it paged out (its body stays in the log).
func (s *qqState) placeLocked(id uint64, c *qrepl.Enqueue) {
	q := s.q
	s.maxID = max(s.maxID, qrepl.EntryOf(id))
	if s.pagesLocked() {
		s.pageOutNewLocked(id, c)
		return
	}
	m, err := decodeMessage(c.Body)
	if err != nil {
		q.vhost.b.log.Error("quorum queue: undecodable message; dropped", "queue", q.Name, "vhost", q.vhost.Name, "id", id, "err", err)
		s.proposeLocked(qrepl.Remove{IDs: []uint64{id}})
		return
	}
	now := q.nowMs()
	e := q.m.NewEntry(now, m, c.Size, c.Priority, c.Persistent, -1)
	e.ExpiresAt = c.ExpiresAt
	s.ids[e.Seq] = id
	if at := qrepl.EntryOf(id); at+leaseLow > s.lease {
		s.wantLeaseLocked(at)
	}
	q.m.Place(now, e)
}

// leasedLocked reports whether the message under seq may be delivered
// (the lease covers it); if not, it asks for a higher lease, whose apply
// dispatches again.
func (s *qqState) leasedLocked(seq uint64) bool {
	id, ok := s.ids[seq]
	if !ok || qrepl.EntryOf(id) <= s.lease {
		return true
	}
	s.wantLeaseLocked(qrepl.EntryOf(id))
	return false
}

// qqGetWait bounds how long basic.get waits for the lease to cover the
// message it took (RabbitMQ's Ra commands time out after 5s as well).
const qqGetWait = 5 * time.Second

// leaseWait waits, after a basic.get took the message under seq beyond
// the lease (q.mu not held), until the lease covers it: covered then.
// gone: the leadership that took it ended (its machine is gone, the
// message is live at the next leader: it must not be handed out). Neither:
// the wait timed out in the same leadership.
func (s *qqState) leaseWait(seq uint64) (covered, gone bool) {
	q := s.q
	deadline := time.Now().Add(qqGetWait)
	for {
		q.mu.Lock()
		if !s.here.Load() || seq>>qqSeqTermShift != s.term {
			q.mu.Unlock()
			return false, true
		}
		id, ok := s.ids[seq]
		if !ok || qrepl.EntryOf(id) <= s.lease {
			q.mu.Unlock()
			return true, false
		}
		s.wantLeaseLocked(qrepl.EntryOf(id))
		if s.leaseC == nil {
			s.leaseC = make(chan struct{})
		}
		ch := s.leaseC
		q.mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 {
			return false, false
		}
		waitChange(ch, left)
	}
}

// qqLeaseDelay (tests: a slow commit) holds Lease proposals back.
var qqLeaseDelay atomic.Int64

// wantLeaseLocked proposes a lease leaseAhead past the entry at index
// unless one that covers it with room is on its way. (The lease counts
// entries: a batch's messages are leased together.)
func (s *qqState) wantLeaseLocked(index uint64) {
	if s.leaseReq >= index+leaseLow {
		return
	}
	s.leaseReq = index + leaseAhead
	s.proposeLocked(qrepl.Lease{UpTo: s.leaseReq})
}

// removeLocked is the message under seq leaving the queue for good
// (acked, dropped, expired, dead-lettered): a Remove.
func (s *qqState) removeLocked(seq uint64) {
	id, ok := s.ids[seq]
	if !ok {
		return
	}
	delete(s.ids, seq)
	s.proposeLocked(qrepl.Remove{IDs: []uint64{id}})
}

// returnedLocked is e returned to the queue under seq (a new one when it
// goes to the back), ready at delayUntil when not 0: a Return.
func (s *qqState) returnedLocked(e *qentry, seq uint64, delayUntil int64) {
	id, ok := s.ids[e.Seq]
	if !ok {
		return
	}
	if seq != e.Seq {
		delete(s.ids, e.Seq)
		s.ids[seq] = id
	}
	s.proposeLocked(qrepl.Return{Items: []qrepl.ReturnItem{{ID: id, DeliveryCount: e.DeliveryCount, Acquired: e.Acquired,
		Redelivered: true, Back: seq != e.Seq, DelayUntil: delayUntil}}})
	if seq != e.Seq && delayUntil == 0 {
		s.pageOutReturnLocked(e, seq, id) // behind paged-out messages: paged out too
	}
}

// discardLocked marks the message under seq as being dead-lettered
// (at-least-once, R1.14): a Discard; its Remove follows once every target
// took it (goneLocked).
func (s *qqState) discardLocked(seq uint64, reason string) {
	if id, ok := s.ids[seq]; ok {
		s.proposeLocked(qrepl.Discard{IDs: []uint64{id}, Reason: machine.Reason(reasonIndex(reason))})
	}
}

// purgeLocked proposes the purge of every queued message (before the
// machine's Purge drops them).
func (s *qqState) purgeLocked() {
	var ids []uint64
	s.q.m.EachQueued(func(e *qentry) {
		if id, ok := s.ids[e.Seq]; ok {
			ids = append(ids, id)
			delete(s.ids, e.Seq)
		}
	})
	ids = s.purgePagedLocked(ids)
	for len(ids) > 0 {
		n := min(len(ids), qrepl.MaxBatch)
		s.proposeLocked(qrepl.Purge{IDs: ids[:n]})
		ids = ids[n:]
	}
}

// proposeLocked queues a command for the group, after the ones queued
// before it; the flusher proposes them without the queue's lock. Only
// the leader proposes; the commands of a leadership that ends are
// dropped (the new leader starts from the replicated state).
func (s *qqState) proposeLocked(c qrepl.Command) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	s.marks.seq++
	seq := s.marks.seq
	n := len(s.pend)
	// Coalesce with the last command of the same kind.
	if n > 0 {
		last := &s.pend[n-1]
		switch c := c.(type) {
		case qrepl.Remove:
			if l, ok := last.c.(qrepl.Remove); ok && len(l.IDs) < qrepl.MaxBatch {
				last.c, last.seq = qrepl.Remove{IDs: append(l.IDs, c.IDs...)}, seq
				return
			}
		case qrepl.Return:
			if l, ok := last.c.(qrepl.Return); ok && len(l.Items) < qrepl.MaxBatch {
				last.c, last.seq = qrepl.Return{Items: append(l.Items, c.Items...)}, seq
				return
			}
		case qrepl.Discard:
			if l, ok := last.c.(qrepl.Discard); ok && l.Reason == c.Reason && len(l.IDs) < qrepl.MaxBatch {
				last.c, last.seq = qrepl.Discard{IDs: append(l.IDs, c.IDs...), Reason: c.Reason}, seq
				return
			}
		}
	}
	s.pend = append(s.pend, pendCmd{c: c, seq: seq})
	if s.proposer.startingLocked() {
		go s.flush()
	}
}

// flush proposes the queued commands, in order.
func (s *qqState) flush() {
	for {
		s.pmu.Lock()
		cs, epoch := s.pend, s.marks.epoch
		s.pend = nil
		if len(cs) == 0 {
			s.proposer.stopLocked()
			s.pmu.Unlock()
			return
		}
		s.pmu.Unlock()
		s.smu.Lock()
		g := s.g
		s.smu.Unlock()
		if g == nil || !s.here.Load() {
			continue
		}
		for _, pc := range cs {
			lease, isLease := pc.c.(qrepl.Lease)
			if d := qqLeaseDelay.Load(); d > 0 && isLease {
				time.Sleep(time.Duration(d))
			}
			seq := pc.seq
			g.Propose(qrepl.Encode(pc.c), func(_ uint64, err error) {
				s.committed(epoch, seq, err)
				if err != nil && isLease {
					s.q.mu.Lock()
					if s.leaseReq == lease.UpTo {
						s.leaseReq = s.lease // ask again at the next delivery
					}
					s.q.mu.Unlock()
				}
			})
		}
	}
}

// --- leadership ---

// leaderChanged is the group's report of its leader.
func (s *qqState) leaderChanged(leader string, term uint64, isSelf bool) {
	b := s.q.vhost.b
	s.smu.Lock()
	if s.gone {
		s.smu.Unlock()
		return
	}
	if leader == b.node && !isSelf {
		// Elected, entries of earlier terms not yet applied: the
		// takeover comes with isSelf.
		s.smu.Unlock()
		return
	}
	if isSelf {
		if s.g == nil {
			s.pending, s.pterm = true, term // StartGroup has not returned yet
			s.smu.Unlock()
			return
		}
		s.takeoverLocked(term)
	} else if s.here.Load() {
		s.stepDownLocked()
	}
	changed := s.setLeader(leader, term)
	s.smu.Unlock()
	if isSelf {
		s.announceAll()
	}
	if changed {
		s.notify(leader, term)
	}
}

// setLeader records leader in term unless this node knows a later term;
// it reports whether anything changed.
func (s *qqState) setLeader(leader string, term uint64) bool {
	for {
		cur := s.leader.Load()
		if term < cur.term || term == cur.term && leader == cur.node {
			return false
		}
		if s.leader.CompareAndSwap(cur, &qqLeader{node: leader, term: term}) {
			return true
		}
	}
}

// takeoverLocked builds the machine from the replicated state (smu held).
func (s *qqState) takeoverLocked(term uint64) {
	if s.here.Load() {
		return
	}
	s.newEpoch() // marks count from this leadership (qqmarks.go)
	q := s.q
	b := q.vhost.b
	if s.st == nil {
		s.st = qrepl.New()
	}
	lease := s.st.Lease()
	q.mu.Lock()
	defer q.unlock()
	if q.deleted {
		return
	}
	// This leadership's sequence numbers start at term<<40: above every
	// earlier one of any node, so that a settle of an earlier leader's
	// delivery, sent here because its node learned of the change late,
	// names no message of this leadership.
	seq := max(q.m.LastSeq(), term<<qqSeqTermShift)
	// The ready messages up to the window are read into memory, the
	// rest paged out (their headers only, qqpage.go); delayed retries and
	// messages being dead-lettered are read wherever they sit.
	cfg := q.machineConfig()
	pageable := cfg.Levels <= 1
	wm, wb := b.window()
	var readyN int
	var readyBytes int64
	var pg qqPaging
	var paged machine.Counts
	var pagedDeadlines []machine.Timed
	const (
		kReady = iota
		kDelayed
		kDead
	)
	type want struct {
		e     qentry
		id    uint64
		kind  int
		delay int64
		why   machine.Reason
	}
	var wants []want
	var maxID, maxMem uint64
	s.st.Messages(func(msg qrepl.Msg) bool {
		at := qrepl.EntryOf(msg.ID)
		maxID = max(maxID, at)
		seq++
		e := qentry{Seq: seq, ExpiresAt: msg.ExpiresAt, DeliveryCount: msg.DeliveryCount, Acquired: msg.Acquired,
			Size: msg.Size, Level: msg.Priority, Persistent: msg.Persistent,
			// The lease covers every message an earlier leader may have
			// delivered (not counted as a delivery attempt).
			Redelivered: msg.Redelivered || at <= lease}
		switch {
		case msg.DLX:
			// Being dead-lettered when the last leader stopped: again
			// (at least once).
			wants = append(wants, want{e: e, id: msg.ID, kind: kDead, why: msg.Reason})
		case msg.DelayUntil != 0:
			wants = append(wants, want{e: e, id: msg.ID, kind: kDelayed, delay: msg.DelayUntil})
		case pageable && (pg.Len() > 0 || readyN >= wm || readyBytes >= wb):
			p := qqPaged{seq: seq, id: msg.ID, expiresAt: msg.ExpiresAt, size: msg.Size, dc: msg.DeliveryCount, acq: msg.Acquired}
			if msg.Persistent {
				p.flags |= qpPersistent
				paged.Persistent.N++
				paged.Persistent.Bytes += int64(msg.Size)
			}
			if e.Redelivered {
				p.flags |= qpRedelivered
			}
			pg.Push(p)
			paged.All.N++
			paged.All.Bytes += int64(msg.Size)
			if msg.ExpiresAt != 0 {
				pagedDeadlines = append(pagedDeadlines, machine.Timed{At: msg.ExpiresAt, Seq: seq, Pos: msg.ID})
			}
		default:
			readyN++
			readyBytes += int64(msg.Size)
			maxMem = max(maxMem, at)
			wants = append(wants, want{e: e, id: msg.ID, kind: kReady})
		}
		return true
	})
	s.lg = s.g
	wantIDs := make([]uint64, len(wants))
	for i := range wants {
		wantIDs[i] = wants[i].id
	}
	bodies, errs := s.readBodies(wantIDs)
	ids := make(map[uint64]uint64, len(wants))
	var ready, delayed, dead []qentry
	var delays []int64
	var deadWhy []machine.Reason
	var bad []uint64
	for i := range wants {
		w := &wants[i]
		if bodies[i] == nil {
			b.log.Error("quorum queue: a live message's body is unreadable; dropped", "queue", q.Name, "vhost", q.vhost.Name,
				"id", w.id, "err", errs[i])
			bad = append(bad, w.id)
			continue
		}
		w.e.Msg = bodies[i]
		ids[w.e.Seq] = w.id
		switch w.kind {
		case kDead:
			dead, deadWhy = append(dead, w.e), append(deadWhy, w.why)
		case kDelayed:
			delayed, delays = append(delayed, w.e), append(delays, w.delay)
		default:
			ready = append(ready, w.e)
		}
	}
	q.m = machine.New(q.machineConfig(), (*qeffects)(q))
	q.m.Restore(ready, delays, delayed, paged, pagedDeadlines, seq)
	s.ids, s.lease, s.leaseReq, s.maxID, s.term = ids, lease, lease, maxID, term
	s.paging = pg
	s.resetApplied(s.st)
	s.here.Store(true)
	for i := range dead {
		q.deadLocked(&dead[i], reasons[deadWhy[i]&3])
	}
	b.log.Info("quorum queue: leading", "queue", q.Name, "vhost", q.vhost.Name, "term", term, "messages", len(ready)+len(delayed),
		"paged_out", paged.All.N)
	if len(bad) > 0 {
		s.proposeLocked(qrepl.Remove{IDs: bad})
	}
	if maxMem+leaseLow > lease { // the paged-out ones when paged in
		s.wantLeaseLocked(maxMem)
	}
	q.touchLocked()
	q.m.Dispatch(q.clockMs(nil))
	q.armLocked()
}

// stepDownLocked drops the leader's machine (smu held): its messages stay
// in the replicated state; its consumers go with it, their sinks not told:
// the client side (qqclient.go) re-attaches this node's to the new leader
// and drops the proxies of other nodes, which re-attach theirs.
func (s *qqState) stepDownLocked() {
	q := s.q
	q.mu.Lock()
	s.here.Store(false)
	old := q.m
	q.m = machine.New(q.machineConfig(), (*qeffects)(q))
	q.m.Restore(nil, nil, nil, machine.Counts{}, nil, old.LastSeq())
	s.ids, s.lease, s.leaseReq, s.maxID = nil, 0, 0, 0
	s.lg = nil
	s.paging.Reset()
	if q.timer != nil {
		q.timer.Stop()
		q.timer, q.timerAt = nil, 0
	}
	q.dlxPending = nil
	q.mu.Unlock()
	s.gaps = nil
	s.resetApplied(nil)
	s.pmu.Lock()
	s.pend = nil
	s.marks.newEpochLocked() // its dead letters are the new leader's (qqmarks.go)
	s.pmu.Unlock()
	q.vhost.b.log.Info("quorum queue: no longer leading", "queue", q.Name, "vhost", q.vhost.Name)
}

// notify hands a leader change to the client side (qqLeaderChanged), in
// order, on a goroutine of its own: it may call other nodes.
func (s *qqState) notify(leader string, term uint64) { s.notes.add(qqLeader{node: leader, term: term}) }

// A quorum queue leader's backing (kinds.go): the raft log.

func (s *qqState) removed(seq uint64) { s.removeLocked(seq) }

func (s *qqState) deadLettered(seq uint64, reason string, atLeastOnce bool) (epoch, mark uint64) {
	if atLeastOnce {
		s.discardLocked(seq, reason) // a new leader dead-letters it again
	} else {
		s.removeLocked(seq)
	}
	return s.markLocked()
}

func (s *qqState) returned(e *qentry, seq uint64, delayUntil int64) {
	s.returnedLocked(e, seq, delayUntil)
}
func (s *qqState) leased(seq uint64) bool { return s.leasedLocked(seq) }
func (s *qqState) purged()                { s.purgeLocked() }
func (s *qqState) deleted()               { s.paging.Reset() }

func (s *qqState) pageIn(force bool)            { s.pageInLocked(force) }
func (s *qqState) expirePaged(t machine.Timed)  { s.expirePagedLocked(t) }
func (s *qqState) isPaged(t machine.Timed) bool { return s.isPagedLocked(t) }
func (s *qqState) browsePaged(i *int, offset int, fn func(Browsed) bool) {
	s.browsePagedLocked(i, offset, fn)
}
func (s *qqState) takePaged(cur *TakeCursor, now int64, limit, budget int, examined *int, upto uint64,
	match func(*Message) bool, ds []Delivery) ([]Delivery, bool) {
	return s.takePagedLocked(cur, now, limit, budget, examined, upto, match, ds)
}
func (s *qqState) untakePaged(d *Delivery, redelivered bool) bool {
	return s.untakePagedLocked(d, redelivered)
}
