package broker

import (
	"sync"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker/machine"
	"github.com/warrenmq/warren/internal/clock"
	"github.com/warrenmq/warren/store"
)

// Sink receives deliveries for consumers. The server's channels implement it.
type Sink interface {
	// Deliver offers d to consumer c. It is called with the queue's lock
	// held and must not call into any Queue. It returns false, without
	// taking d, when c cannot take a message now (prefetch reached, flow
	// stopped, connection output backlogged); the sink must then call
	// Queue.Dispatch once it can take messages again.
	Deliver(c *Consumer, d Delivery) bool
	// Cancelled tells the sink that the broker removed c (its queue was
	// deleted). It is called without queue locks held.
	Cancelled(c *Consumer)
}

// Consumer is a subscription to a queue.
type Consumer struct {
	Tag       string
	Queue     *Queue
	NoAck     bool
	Exclusive bool
	Priority  int
	Args      amqp.Table
	Sink      Sink
	// Owner identifies the connection that created the consumer.
	Owner uint64
	// Prefetch is the channel's prefetch count when the consumer was
	// created (0: none): the credit a remote queue's home grants it.
	Prefetch int
	// m is the consumer in its queue's machine.
	m *mconsumer
}

// QueueStats are a queue's counters. The dead-letter, expiry and drop
// counters make a queue that spins on requeue or sheds messages visible.
type QueueStats struct {
	Ready, Unacked, Consumers, Delayed int
	ReadyBytes, UnackedBytes           int64
	Published, Redelivered             uint64
	// Deliver, DeliverNoAck, Get and GetNoAck count messages handed out
	// by consumers and basic.get, with and without manual acks; GetEmpty
	// counts basic.get on an empty queue; Acked counts basic.ack'ed
	// messages (not no-ack deliveries), as RabbitMQ's message_stats.
	Deliver, DeliverNoAck, Get, GetNoAck, GetEmpty, Acked uint64
	// Requeued counts messages returned to the queue by consumers.
	Requeued uint64
	// DeadLettered counts messages dead-lettered, by reason.
	DeadLettered map[string]uint64
	// Dropped counts messages discarded without dead-lettering (no DLX), by reason.
	Dropped map[string]uint64
	// Rejected counts publishes refused by reject-publish(-dlx) overflow.
	Rejected uint64
	// DeadLetterPending counts at-least-once dead letters still owed to
	// their targets (RabbitMQ's messages_dlx); they count towards the
	// source queue's length limit.
	DeadLetterPending int
	// Persistent and PersistentBytes count the persistent messages (ready
	// or unacked) of a durable queue, every message of a quorum queue
	// (all are kept on disk there), and nothing for other queues, as
	// RabbitMQ.
	// PagedOut and PagedOutBytes are the ready messages kept on disk only
	// (spill.go); Ready and ReadyBytes include them.
	Persistent      int
	PersistentBytes int64
	PagedOut        int
	PagedOutBytes   int64
}

// Queue is a FIFO of messages (per priority level) with consumers: the
// shell of a queue machine (package machine, issue 12). The machine holds
// the queue's state and semantics; the shell holds the lock, the disk
// (the queue's log, spill.go), the sinks, the timer and the dead-letter
// outbox, feeds commands into the machine and executes its effects
// (qeffects). Declaration fields are immutable; the rest is guarded by mu.
type Queue struct {
	vhost      *VHost
	Name       string
	Durable    bool
	Exclusive  bool
	AutoDelete bool
	Args       amqp.Table
	// Config is Args parsed (validated at declare, qargs.go).
	Config QueueArgs
	// Owner is the connection that declared an exclusive queue.
	Owner uint64
	// Home is the node the queue lives on in a cluster ("" on a single
	// node): its messages, consumers and machine are there; other nodes
	// reach it through Peers (cluster.go).
	Home string

	// bindings is guarded by the vhost's lock.
	bindings map[*Binding]struct{}

	mu         sync.Mutex
	eff        QueueArgs // Config combined with policies (R1.12)
	m          *qmachine
	timer      clock.Timer // one timer for the machine's next deadline
	timerAt    int64
	nextCID    uint64
	outbox     []dlBatch         // dead letters for the flusher to publish, in order (dlflush.go)
	outboxN    int               // the dead letters in outbox
	dlInFlight int               // the dead letters the flusher took and is publishing
	dlQueued   uint64            // dead letters ever put in the outbox (DeadLetterBarrier)
	dlDone     uint64            // of those, the ones the flusher has published
	dlFlusher  lazyWorker        // the queue's flusher (dlflush.go)
	rdl        []*remoteDL       // dead letters owed to queues on other nodes (dlremote.go)
	rdlTimer   clock.Timer       // retries rdl
	rdlBackoff time.Duration     // rdlTimer's next delay
	dlCond     *sync.Cond        // on mu: waiting for the flusher to go idle (waitDeadLetters)
	dlHook     func()            // tests: runs before each outbox batch is published
	dlTimeline dlRingPtr         // dead letters per minute (dltimeline.go)
	disk       *qdisk            // the message log of a durable queue (msgstore.go), or a paging log
	spill      spillState        // where the paged-out messages sit in the log (spill.go)
	held       map[uint64]bool   // dead letters moving in, not yet visible (dlmove.go)
	taken      map[uint64]uint64 // spilled messages taken in place by Take: seq -> log position (browse.go)
	// memTop is the log position (store.Pos.Uint64) of the newest record
	// whose message this run placed in memory: a spill may start at a
	// later record only (releaseHeld).
	memTop     uint64
	ackSeqs    []uint64 // scratch for Ack
	ackSegs    []uint32
	dlxPending []pendingDL // at-least-once dead letters not yet taken (R1.14)
	dlxTimer   clock.Timer
	deleted    bool
	rq         *remoteQ // a remote queue's consumers on this node (remote.go)
	// qq is a replicated quorum queue's state on this node (issue 14,
	// qqleader.go): nil for every other queue, set at creation.
	qq *qqState
	// sq is a stream's log, writer and readers (stream.go); nil for the
	// other kinds.
	sq *streamState
	// qc is this node's client side of a replicated quorum queue
	// (qqclient.go): publishes pending at the leader, consumers.
	qc qqClient
}

// The queue machine as the broker instantiates it: messages are
// *Message, consumers *Consumer.
type (
	qmachine  = machine.Machine[*Message, *Consumer]
	mconsumer = machine.Consumer[*Message, *Consumer]
	qentry    = machine.Entry[*Message]
)

// entry locates a message's record in the queue's log.
type entry struct {
	seq    uint64
	seg    uint32
	ondisk bool
}

func newQueue(v *VHost, spec QueueSpec) *Queue {
	q := &Queue{vhost: v, Name: spec.Name, Durable: spec.Durable, Exclusive: spec.Exclusive, AutoDelete: spec.AutoDelete,
		Args: spec.Args, Config: ParseQueueArgs(spec.Args), bindings: map[*Binding]struct{}{}, Home: spec.Home}
	q.eff = q.Config
	if spec.Exclusive {
		q.Owner = spec.Owner
	}
	q.m = machine.New(q.machineConfig(), (*qeffects)(q))
	q.mu.Lock()
	q.touchLocked()
	q.mu.Unlock()
	return q
}

// machineConfig is the machine's form of the effective settings.
func (q *Queue) machineConfig() machine.Config {
	e := &q.eff
	opt := func(p *int64) int64 {
		if p == nil {
			return -1
		}
		return *p
	}
	c := machine.Config{Quorum: e.Type == "quorum", Levels: q.Config.MaxPriority + 1, SingleActive: q.Config.SingleActive,
		DLX: e.DLX != nil, MessageTTL: opt(e.MessageTTL), Expires: opt(e.Expires), MaxLength: opt(e.MaxLength),
		MaxLengthBytes: opt(e.MaxLengthBytes), DeliveryLimit: q.deliveryLimit(), CountDeliveries: q.countsDeliveries(),
		RetryMin: opt(e.DelayedRetryMin), RetryMax: opt(e.DelayedRetryMax)}
	switch q.overflow() {
	case "reject-publish":
		c.Overflow = machine.RejectPublish
	case "reject-publish-dlx":
		c.Overflow = machine.RejectPublishDLX
	}
	switch e.DelayedRetryType {
	case "all":
		c.RetryType = machine.RetryAll
	case "failed":
		c.RetryType = machine.RetryFailed
	case "returned":
		c.RetryType = machine.RetryReturned
	}
	return c
}

var reasons = [4]string{ReasonRejected, ReasonExpired, ReasonMaxLen, ReasonDeliveryLimit}

func reasonIndex(r string) int {
	for i, s := range reasons {
		if s == r {
			return i
		}
	}
	return 0
}

// VHost returns the queue's vhost.
func (q *Queue) VHost() *VHost { return q.vhost }

// Effective returns the settings in force: arguments combined with
// policies (R1.12).
func (q *Queue) Effective() QueueArgs {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.eff
}

// SetEffective installs new effective settings and applies them live
// (R1.13): a lower max-length trims the head at once (drop-head); a new
// message-ttl does not touch messages already enqueued; a new x-expires
// restarts the unused timer.
func (q *Queue) SetEffective(e QueueArgs) {
	q.mu.Lock()
	q.eff = e
	q.m.SetConfig(q.nowMs(), q.machineConfig())
	q.armLocked()
	q.unlock()
}

// overflow is the effective overflow mode. Quorum queues accept
// reject-publish-dlx but behave as drop-head (R1.3), as RabbitMQ does.
func (q *Queue) overflow() string {
	if q.eff.Overflow == "" || q.eff.Overflow == "reject-publish-dlx" && q.eff.Type == "quorum" {
		return "drop-head"
	}
	return q.eff.Overflow
}

// deliveryLimit is the effective delivery limit, -1 for none (R5.3):
// quorum queues default to 20; Warren's classic queues have none unless set.
func (q *Queue) deliveryLimit() int64 {
	if q.eff.DeliveryLimit != nil {
		if *q.eff.DeliveryLimit < 0 {
			return -1
		}
		return *q.eff.DeliveryLimit
	}
	if q.eff.Type == "quorum" {
		return 20
	}
	return -1
}

// keeps reports whether m goes to the log of a durable queue: persistent
// messages, and every message of a quorum queue (RabbitMQ's quorum queues
// store all messages, whatever their delivery mode).
func (q *Queue) keeps(m *Message) bool { return m.persistent() || q.eff.Type == "quorum" }

// countsDeliveries reports whether redeliveries carry x-delivery-count and
// x-acquired-count: always on quorum queues (R5.3), and on other queues
// when they set a delivery limit (Warren's extension).
func (q *Queue) countsDeliveries() bool {
	return q.eff.Type == "quorum" || q.eff.DeliveryLimit != nil
}

// Which returns count toward the delivery limit is the machine's
// (machine.Config.countsReturn): on quorum queues only failed deliveries
// (basic.reject with requeue, channel or connection loss; RabbitMQ 4.3,
// R5.3); on classic queues, which have no delivery limit in RabbitMQ,
// Warren's own limit counts every return, whatever the kind: basic.nack
// and basic.reject with requeue, basic.recover, and the messages a channel
// or connection still held when it closed (also after basic.cancel, which
// leaves them unacked). Otherwise the seed's poison handler,
// basicNack(tag, false, true), would spin forever on a queue whose limit
// was set to stop it (issue 11 item 15).

// Stats returns a snapshot of the queue's counters.
func (q *Queue) Stats() QueueStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.m.Lengths()
	ms := q.m.Stats()
	s := QueueStats{Published: ms.Published, Redelivered: ms.Redelivered, Deliver: ms.Deliver, DeliverNoAck: ms.DeliverNoAck,
		Get: ms.Get, GetNoAck: ms.GetNoAck, GetEmpty: ms.GetEmpty, Acked: ms.Acked, Requeued: ms.Requeued, Rejected: ms.Rejected}
	s.Ready, s.ReadyBytes = l.Ready.All.N+l.Paged.All.N, l.Ready.All.Bytes+l.Paged.All.Bytes
	s.Unacked, s.UnackedBytes = l.Unacked.All.N, l.Unacked.All.Bytes
	s.Consumers, s.Delayed = len(q.m.Consumers()), l.Delayed
	s.DeadLetterPending = len(q.dlxPending) + len(q.rdl)
	if q.atLeastOnce() { // and those the flusher has yet to hand over
		s.DeadLetterPending += q.outboxN + q.dlInFlight
	}
	s.PagedOut, s.PagedOutBytes = l.Paged.All.N, l.Paged.All.Bytes
	switch {
	case q.eff.Type == "quorum": // keeps all: the counts by delivery mode do not apply
		s.Persistent, s.PersistentBytes = s.Ready+s.Unacked, s.ReadyBytes+s.UnackedBytes
	case q.Durable:
		s.Persistent = l.Ready.Persistent.N + l.Paged.Persistent.N + l.Unacked.Persistent.N
		s.PersistentBytes = l.Ready.Persistent.Bytes + l.Paged.Persistent.Bytes + l.Unacked.Persistent.Bytes
	}
	s.DeadLettered, s.Dropped = map[string]uint64{}, map[string]uint64{}
	for i, r := range reasons {
		s.DeadLettered[r] = ms.DeadLettered[i]
		s.Dropped[r] = ms.Dropped[i]
	}
	q.typ().statsLocked(&s)
	return s
}

// Counts returns the message and consumer counts, as queue.declare-ok
// reports them. Delayed retries count as messages (R5.5).
func (q *Queue) Counts() (messages, consumers int) { return q.typ().counts() }

// countsHere is Counts where the queue's machine runs.
func (q *Queue) countsHere() (messages, consumers int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.m.Messages(), len(q.m.Consumers())
}

// restored is what message-store recovery found for a queue
// (recState.pass2): ready messages in sequence order, delayed retries
// with their due times, and the paged-out tail (counts, deadlines, and
// where it sits in the log).
type restored struct {
	ready, delayed []qentry
	delays         []int64
	paged          machine.Counts
	pagedDeadlines []machine.Timed
	spill          spillState
	lastSeq        uint64
	dirtyUpTo      store.Pos // records up to here come back redelivered; zero after a clean stop
}

// restore hands recovered messages to the queue's machine.
func (q *Queue) restore(r *restored) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if r.dirtyUpTo != (store.Pos{}) {
		q.disk.dirtyUpTo = r.dirtyUpTo
	}
	q.m.Restore(r.ready, r.delays, r.delayed, r.paged, r.pagedDeadlines, r.lastSeq)
	q.spill = r.spill
	q.armLocked()
}

// readyLocked is the number of ready messages, in memory or paged out.
func (q *Queue) readyLocked() int {
	l := q.m.Lengths()
	return l.Ready.All.N + l.Paged.All.N
}

func (q *Queue) nowMs() int64 { return q.vhost.b.clock.Now().UnixMilli() }

// clockMs is the time for a command that needs it only when the machine
// holds deadlines or the message has a TTL: 0 otherwise, which saves the
// clock read on the hot path (no deadline compares with 0).
func (q *Queue) clockMs(m *Message) int64 {
	if m != nil && m.HasTTL || q.m.Timed() {
		return q.nowMs()
	}
	return 0
}

// enqueueResult is what a queue did with a published message.
type enqueueResult uint8

const (
	enqueued enqueueResult = iota
	// rejectedOverflow: refused by reject-publish(-dlx); the publisher is nacked (R4.5, R4.6).
	rejectedOverflow
)

// enqueue adds m, hands it to a consumer if one can take it, and applies
// TTL and length limits. Dead letters it causes are published after the
// queue's lock is released. A persistent message in a durable queue is
// appended to the queue's log first; r (nil when nobody waits for it)
// collects the logs that a publisher confirm must wait for.
func (q *Queue) enqueue(m *Message, r *Router) enqueueResult { return q.typ().enqueue(m, r) }

// enqueueHere is enqueue on a classic queue homed here.
func (q *Queue) enqueueHere(m *Message, r *Router) enqueueResult {
	if !q.mu.TryLock() {
		// The queue is busy (its consumers are settling or being
		// delivered to): the publisher backs off a little
		// (PublishResult.Busy, server/channel.go).
		if r != nil {
			r.busy = true
		}
		q.mu.Lock()
	}
	if r != nil { // a publisher: paced by the dead letters waiting (dlflush.go)
		defer q.unlockPaced()
	} else {
		defer q.unlock()
	}
	if q.deleted {
		return enqueued
	}
	// R4.5, R4.6: reject-publish checks the limits before anything else.
	if q.rejectsLocked(m) {
		return rejectedOverflow
	}
	now := q.clockMs(m)
	e := q.newEntryLocked(now, 0, m)
	spill := q.spillsLocked()
	if spill {
		q.pagingDiskLocked()
	}
	durable := q.disk != nil && !q.disk.paging && q.keeps(m)
	if durable || spill {
		p, err := q.disk.appendMsg(recMessage, nil, msgHeader{seq: e.Seq, expiresAt: e.ExpiresAt}, m)
		if err == nil {
			e.OnDisk, e.Seg = true, p.Seg
			if durable && r != nil {
				r.addLog(q.disk.log)
			}
			if spill {
				q.spillLocked(e, p)
				return enqueued
			}
			q.memTop = max(q.memTop, p.Uint64())
		} else if durable && r != nil {
			r.failed = true
		}
	}
	q.m.Place(now, e)
	q.armLocked()
	return enqueued
}

// rejectsLocked applies reject-publish(-dlx) (R4.5, R4.6): it reports
// whether m is refused, dead-lettering it under reject-publish-dlx.
func (q *Queue) rejectsLocked(m *Message) bool {
	return q.rejectsSizedLocked(m, uint32(m.Size()), m.persistent())
}

// rejectsSizedLocked is rejectsLocked for a message of size bytes; m is
// read only for reject-publish-dlx's dead letter.
func (q *Queue) rejectsSizedLocked(m *Message, size uint32, persistent bool) bool {
	q.m.SetDeadLettersOwed(len(q.dlxPending))
	return q.m.Rejects(m, size, persistent)
}

// newEntryLocked is m as a queue entry with sequence number seq (0: the
// next) and its TTL deadline; a TTL of 0 has a deadline of now.
func (q *Queue) newEntryLocked(now int64, seq uint64, m *Message) qentry {
	if seq == 0 {
		return q.m.NewEntry(now, m, uint32(m.Size()), m.Props.Priority, m.persistent(), m.ownTTL())
	}
	return q.m.EntryAt(now, seq, m, uint32(m.Size()), m.Props.Priority, m.persistent(), m.ownTTL())
}

// deadLocked queues e, which the machine dead-letters (the queue has a
// dead-letter exchange), in the outbox for the queue's flusher to
// publish (dlflush.go).
func (q *Queue) deadLocked(e *qentry, reason string) {
	it := dlItem{msg: e.Msg, seq: e.Seq, seg: e.Seg, ondisk: e.OnDisk}
	// A quorum queue's: marked in the log first, published once that
	// committed (qqmarks.go).
	it.qqEpoch, it.qqSeq = q.backing().deadLettered(e.Seq, reason, q.atLeastOnce())
	q.outboxN++
	q.dlQueued++
	q.vhost.dlq.n.Add(1)
	dlx, dlrk := q.eff.DLX, q.eff.DLRK
	if n := len(q.outbox); n > 0 && q.outbox[n-1].reason == reason && q.outbox[n-1].dlx == dlx && q.outbox[n-1].dlrk == dlrk {
		q.outbox[n-1].items = append(q.outbox[n-1].items, it)
		return
	}
	q.outbox = append(q.outbox, dlBatch{reason: reason, dlx: dlx, dlrk: dlrk, items: []dlItem{it}})
}

// goneLocked records on disk that e left the queue.
func (q *Queue) goneLocked(e *entry) {
	if e.ondisk && q.disk != nil {
		q.disk.ack1(e.seq, e.seg)
	}
	q.backing().removed(e.seq)
}

// gone is goneLocked for a machine entry.
func (q *Queue) gone(e *qentry) {
	if e.OnDisk && q.disk != nil {
		q.disk.ack1(e.Seq, e.Seg)
	}
	q.backing().removed(e.Seq)
}

// qeffects is a Queue as the executor of its machine's effects
// (machine.Effects). Its methods run with q.mu held, from within a
// machine command.
type qeffects Queue

// Deliver offers e to consumer c through its sink (Sink.Deliver).
func (f *qeffects) Deliver(c *mconsumer, e qentry) bool {
	q := (*Queue)(f)
	if !q.backing().leased(e.Seq) {
		return false // until a quorum leader's lease covers it (qqleader.go)
	}
	k := c.Ref
	return k.Sink.Deliver(k, q.delivery(&e, k.Tag, c, c.Next()))
}

// DeadLetter queues e for the outbox (published once the lock is released).
func (f *qeffects) DeadLetter(e qentry, r machine.Reason) { (*Queue)(f).deadLocked(&e, reasons[r]) }

// Drop records that e left the queue without a dead-letter exchange.
func (f *qeffects) Drop(e qentry, r machine.Reason) { (*Queue)(f).gone(&e) }

// Settled records that e, delivered without acknowledgement, is gone.
func (f *qeffects) Settled(e qentry) { (*Queue)(f).gone(&e) }

// Requeued records a return's new counts (and seq, retry time) in the log.
func (f *qeffects) Requeued(e qentry, seq uint64, delayUntil int64) {
	q := (*Queue)(f)
	if e.OnDisk && q.disk != nil {
		q.disk.requeue(e.Seq, seq, e.DeliveryCount, e.Acquired, delayUntil)
	}
	q.backing().returned(&e, seq, delayUntil)
}

// PageIn reads paged-out messages back (spill.go; a quorum queue's
// leader from its raft log, qqpage.go).
func (f *qeffects) PageIn(force bool) { (*Queue)(f).backing().pageIn(force) }

// ExpirePaged dead-letters a paged-out message whose deadline passed, if
// it is still paged out.
func (f *qeffects) ExpirePaged(t machine.Timed) { (*Queue)(f).backing().expirePaged(t) }

// IsPaged reports whether the deadline t is of a message still paged out.
func (f *qeffects) IsPaged(t machine.Timed) bool { return (*Queue)(f).backing().isPaged(t) }

// dlBatch is dead letters of one reason, in the order they left the
// queue, with the dead-letter exchange and routing key in force then.
type dlBatch struct {
	reason string
	dlx    *string
	dlrk   *string
	items  []dlItem
}

// dlItem is a message leaving its queue to be dead-lettered; seq, seg and
// ondisk locate it in the queue's log until the move is done.
type dlItem struct {
	msg    *Message
	seq    uint64
	seg    uint32
	ondisk bool
	// A quorum queue's: the mark of the proposal that took it out of
	// the queue, which must commit before it is published (qqmarks.go).
	qqEpoch, qqSeq uint64
}

// Dispatch delivers ready messages to consumers that can take them. Sinks
// call it when they can take messages again.
func (q *Queue) Dispatch() { q.typ().dispatch() }

// dispatchHere is Dispatch where the queue's machine runs.
func (q *Queue) dispatchHere() {
	q.mu.Lock()
	q.m.Dispatch(q.clockMs(nil))
	q.armLocked()
	q.unlock()
}

func (q *Queue) delivery(e *qentry, tag string, h *mconsumer, ck uint64) Delivery {
	d := Delivery{Queue: q, Msg: e.Msg, Seq: e.Seq, Redelivered: e.Redelivered || e.Acquired > 0, ConsumerTag: tag,
		ExpiresAt: e.ExpiresAt, DeliveryCount: e.DeliveryCount, AcquiredCount: e.Acquired, seg: e.Seg, ondisk: e.OnDisk, holder: h, ck: ck}
	if e.Acquired > 0 && q.countsDeliveries() {
		d.Msg, d.Original = withCounts(e.Msg, e.DeliveryCount, e.Acquired), e.Msg
	}
	return d
}

// withCounts returns a copy of m carrying x-delivery-count (absent until
// the first failure) and x-acquired-count headers (R5.3). Only
// redeliveries of counting queues pay for the copy.
func withCounts(m *Message, failures, acquired uint32) *Message {
	c := *m
	h := make(amqp.Table, len(m.Props.Headers)+2)
	for k, v := range m.Props.Headers {
		h[k] = v
	}
	if failures > 0 {
		h["x-delivery-count"] = int64(failures)
	}
	h["x-acquired-count"] = int64(acquired)
	c.Props.Headers = h
	c.Props.Flags |= amqp.FlagHeaders
	return &c
}

// Delivered counts the messages handed out by consumers and basic.get
// (RabbitMQ's deliver_get).
func (s *QueueStats) Delivered() uint64 {
	return s.Deliver + s.DeliverNoAck + s.Get + s.GetNoAck
}

// Get takes the head message for basic.get. ok is false when the queue is
// empty; remaining is the count left after the take.
func (q *Queue) Get(noAck bool) (d Delivery, remaining int, ok bool) { return q.typ().get(noAck) }

// getHere is Get where the queue's machine runs.
func (q *Queue) getHere(noAck bool) (d Delivery, remaining int, ok bool) {
	q.mu.Lock()
	defer q.unlock()
	e, remaining, ok := q.m.Get(q.nowMs(), noAck)
	if q.eff.Expires != nil {
		q.armLocked() // Get restarted the unused clock
	}
	if !ok {
		return Delivery{}, 0, false
	}
	h := q.m.Holder()
	d = q.delivery(&e, "", h, h.Next()-1)
	if b := q.backing(); !b.leased(e.Seq) {
		// Beyond the lease (rare: it runs ahead): handed out once the
		// lease covers it, so that a new leader knows it may have been
		// delivered (redelivered=true). If the leadership ends first,
		// the get finds nothing (the message is live at the next
		// leader); a wait that times out in the same leadership hands a
		// no-ack get's message out (its removal is on its way) and
		// returns the others.
		q.mu.Unlock()
		covered, gone := b.leaseWait(e.Seq)
		if !covered && (gone || !noAck) {
			if !noAck {
				q.Requeue([]Delivery{d}, false)
			}
			q.mu.Lock()
			return Delivery{}, 0, false
		}
		q.mu.Lock()
	}
	return d, remaining, true
}

// armLocked keeps one timer for the machine's next deadline: the earliest
// expiry, delayed retry or x-expires.
func (q *Queue) armLocked() {
	next := q.m.NextDeadline()
	if k := q.typ(); next == 0 || q.deleted || k.home() != "" && !k.here() {
		return
	}
	if q.timer != nil && q.timerAt <= next && q.timerAt != 0 {
		return
	}
	if q.timer != nil {
		q.timer.Stop()
	}
	q.timerAt = next
	d := time.Duration(next-q.nowMs()) * time.Millisecond
	q.timer = q.vhost.b.clock.AfterFunc(max(d, 0), q.onTimer)
}

func (q *Queue) onTimer() {
	q.mu.Lock()
	q.timer, q.timerAt = nil, 0
	if q.deleted {
		q.mu.Unlock()
		return
	}
	now := q.nowMs()
	if q.m.Unused(now) {
		// x-expires: unused for its whole lifetime; deleted without
		// dead-lettering (R2.7).
		q.mu.Unlock()
		q.vhost.dropQueue(q, "expiry")
		return
	}
	q.m.Tick(now)
	q.armLocked()
	q.unlock()
}

// touchLocked restarts the x-expires clock: the queue was used.
func (q *Queue) touchLocked() {
	q.m.Touch(q.nowMs())
	q.armLocked()
}

// Touch marks the queue used (redeclared), restarting x-expires (R2.7).
func (q *Queue) Touch() {
	q.mu.Lock()
	q.touchLocked()
	q.mu.Unlock()
}

// settledLocked forgets the Take records of settled deliveries.
func (q *Queue) settledLocked(ds []Delivery) {
	if len(q.taken) > 0 {
		for i := range ds {
			delete(q.taken, ds[i].Seq)
		}
	}
}

// Ack settles deliveries of this queue as done.
func (q *Queue) Ack(ds []Delivery) { q.typ().settle(ds, settleAck) }

// Reject settles deliveries as rejected without requeue: they are
// dead-lettered with reason rejected when the queue has a DLX, else
// discarded (R5.2).
func (q *Queue) Reject(ds []Delivery) { q.typ().settle(ds, settleReject) }

// Requeue returns deliveries to the queue, marked redelivered (R5.1).
// failed says whether the return is a failed delivery (basic.reject with
// requeue, channel or connection loss) rather than a plain return
// (basic.nack with requeue, basic.recover). The machine applies the
// delivery limit and x-delivery-count (R5.3), the position (R5.4), the
// delayed retry (R5.5), the deadline (R2.3) and drop-head (R4.4): see
// machine.Machine.Requeue.
func (q *Queue) Requeue(ds []Delivery, failed bool) {
	kind := settleRequeue
	if failed {
		kind = settleRequeueFailed
	}
	q.typ().settle(ds, kind)
}

// settleHere settles deliveries where the queue's machine runs.
func (q *Queue) settleHere(ds []Delivery, kind byte) {
	switch kind {
	case settleAck:
		q.ackHere(ds)
	case settleReject:
		q.rejectHere(ds)
	default:
		q.requeueHere(ds, kind == settleRequeueFailed)
	}
}

func (q *Queue) ackHere(ds []Delivery) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.settledLocked(ds)
	ds = q.qqOwnLocked(ds)
	b := q.backing()
	for i := range ds {
		if h := ds[i].holder; h != nil {
			if e, ok := q.m.Ack(h, ds[i].Seq, ds[i].ck); ok {
				b.removed(e.Seq)
			}
		}
	}
	if q.disk == nil {
		return
	}
	seqs, segs := q.ackSeqs[:0], q.ackSegs[:0]
	for i := range ds {
		if ds[i].ondisk {
			seqs, segs = append(seqs, ds[i].Seq), append(segs, ds[i].seg)
		}
	}
	q.disk.ack(seqs, segs)
	q.ackSeqs, q.ackSegs = seqs[:0], segs[:0]
}

func (q *Queue) rejectHere(ds []Delivery) {
	q.mu.Lock()
	q.settledLocked(ds)
	ds = q.qqOwnLocked(ds)
	for i := range ds {
		if h := ds[i].holder; h != nil {
			q.m.Reject(h, ds[i].Seq, ds[i].ck)
		}
	}
	q.unlockPaced()
}

func (q *Queue) requeueHere(ds []Delivery, failed bool) {
	q.mu.Lock()
	defer q.unlockPaced()
	q.settledLocked(ds)
	ds = q.qqOwnLocked(ds)
	now := q.nowMs()
	for i := range ds {
		if h := ds[i].holder; h != nil {
			q.m.Requeue(now, h, ds[i].Seq, ds[i].ck, failed)
		}
	}
	q.m.Returned(now)
	q.armLocked()
}

// Purge drops all ready and delayed messages and returns how many there
// were. Purged messages are never dead-lettered (R3.1).
func (q *Queue) Purge() int { return q.typ().purge() }

// purgeHere is Purge where the queue's machine runs.
func (q *Queue) purgeHere() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.backing().purged()
	q.purgeDiskLocked()
	q.purgeSpillLocked()
	// RabbitMQ 4.3 purge also drops pending at-least-once dead letters.
	q.dlxPending = nil
	return q.m.Purge()
}

// AddConsumer subscribes c. It fails with 403 if the queue has an exclusive
// consumer or c wants exclusivity on a queue with consumers.
func (q *Queue) AddConsumer(c *Consumer) error { return q.AddConsumerThen(c, nil) }

// AddConsumerThen is AddConsumer with a hook: once c is accepted, added
// (if not nil) runs with the queue's lock held, before anything is
// delivered to c, so that basic.consume-ok is sent only on success and
// ahead of the first delivery. added follows the rules of Sink.Deliver.
func (q *Queue) AddConsumerThen(c *Consumer, added func()) error {
	return q.typ().addConsumer(c, added)
}

// addConsumerHere is AddConsumerThen where the queue's machine runs.
func (q *Queue) addConsumerHere(c *Consumer, added func()) error {
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		return notFoundQueue(q.Name, q.vhost.Name)
	}
	q.nextCID++
	mc := &mconsumer{ID: q.nextCID, Ref: c, Priority: c.Priority, Exclusive: c.Exclusive, NoAck: c.NoAck}
	if err := q.m.AddConsumer(mc); err != nil {
		q.mu.Unlock()
		return amqp.Errorf(amqp.AccessRefused, "queue '%s' in vhost '%s' in exclusive use", q.Name, q.vhost.Name)
	}
	c.Queue, c.m = q, mc
	if added != nil {
		added()
	}
	q.m.Dispatch(q.clockMs(nil))
	q.armLocked()
	q.unlock()
	return nil
}

// RemoveConsumer unsubscribes c. If the queue is auto-delete and c was its
// last consumer, the queue is deleted.
func (q *Queue) RemoveConsumer(c *Consumer) { q.typ().removeConsumer(c) }

// removeConsumerHere is RemoveConsumer where the queue's machine runs.
func (q *Queue) removeConsumerHere(c *Consumer) {
	q.mu.Lock()
	if c.m != nil && c.Queue == q {
		q.m.RemoveConsumer(q.nowMs(), c.m)
	} else {
		q.m.Touch(q.nowMs())
	}
	autoDelete := q.AutoDelete && q.m.HadConsumer() && len(q.m.Consumers()) == 0 && !q.deleted
	if !autoDelete {
		if q.m.Config().SingleActive {
			q.m.Dispatch(q.clockMs(nil)) // the next consumer may have become active
		}
		q.armLocked()
	}
	q.unlock()
	if autoDelete {
		q.vhost.dropQueue(q, "auto-delete")
	}
}

// ConsumerCount returns the number of consumers.
func (q *Queue) ConsumerCount() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.m.Consumers())
}

// Consumers returns a snapshot of the consumers.
func (q *Queue) Consumers() []*Consumer {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.consumersLocked()
}

func (q *Queue) consumersLocked() []*Consumer {
	mcs := q.m.Consumers()
	cs := make([]*Consumer, len(mcs))
	for i, c := range mcs {
		cs[i] = c.Ref
	}
	return cs
}

// Deleted reports whether the queue has been deleted.
func (q *Queue) Deleted() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.deleted
}

// markDeleted drops the queue's messages and returns its consumers for
// cancel notifications. Nothing is dead-lettered (R3.1).
func (q *Queue) markDeleted() (messages int, cs []*Consumer) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.deleted = true
	if q.rq != nil { // a remote queue: its local consumers
		for id, rc := range q.rq.cons {
			delete(q.rq.cons, id)
			rc.gone, rc.buf = true, nil
			q.vhost.b.remote.forget(rc)
			cs = append(cs, rc.c)
		}
	}
	if q.disk != nil {
		q.disk.close(true)
	}
	cs = append(cs, q.consumersLocked()...)
	messages, _ = q.m.Delete()
	q.spill = spillState{}
	q.backing().deleted()
	q.dlxPending = nil
	q.dropRemoteDLsLocked()
	if q.dlxTimer != nil {
		q.dlxTimer.Stop()
		q.dlxTimer = nil
	}
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
	return messages, cs
}

// IntArg returns the value of an integer-typed table value (any width,
// signed or not) and whether v is one.
func IntArg(v any) (int64, bool) {
	switch n := v.(type) {
	case int8:
		return int64(n), true
	case uint8:
		return int64(n), true
	case int16:
		return int64(n), true
	case uint16:
		return int64(n), true
	case int32:
		return int64(n), true
	case uint32:
		return int64(n), true
	case int64:
		return n, true
	case int:
		return int64(n), true
	}
	return 0, false
}

// diskLock is a Queue as the lock its disk takes for store maintenance
// (MsgStore.Close, reclaim): the queue locks itself, the disk holds no
// pointer into it.
type diskLock Queue

func (l *diskLock) Lock()   { (*Queue)(l).mu.Lock() }
func (l *diskLock) Unlock() { (*Queue)(l).mu.Unlock() }
