package broker

import (
	"container/heap"
	"sort"
	"sync"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/clock"
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

// Queue is a FIFO of messages (per priority level) with consumers.
// Declaration fields are immutable; the rest is guarded by mu.
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

	// bindings is guarded by the vhost's lock.
	bindings map[*Binding]struct{}

	mu          sync.Mutex
	eff         QueueArgs // Config combined with policies (R1.12)
	ready       readyList
	expiries    timedHeap   // per-message deadlines of ready messages
	delayed     delayedHeap // returned messages waiting out a retry delay
	timer       clock.Timer // one timer for the earliest expiry or delay
	timerAt     int64
	expiresAt   int64 // x-expires deadline while unused; 0 = none
	nextSeq     uint64
	consumers   []*Consumer
	rr          int
	unacked     int
	unackedB    int64        // body bytes of the unacked messages
	unackedP    persistCount // the persistent ones among them
	deleted     bool
	hadConsumer bool
	sac         bool
	stats       QueueStats
	outbox      []dlBatch         // dead letters for the flusher to publish, in order (dlflush.go)
	outboxN     int               // the dead letters in outbox
	dlInFlight  int               // the dead letters the flusher took and is publishing
	dlFlushing  bool              // the queue's flusher goroutine runs (dlflush.go)
	dlCond      *sync.Cond        // on mu: waiting for the flusher to go idle (waitDeadLetters)
	dlHook      func()            // tests: runs before each outbox batch is published
	disk        *qdisk            // the message log of a durable queue (msgstore.go), or a paging log
	spill       spillState        // messages on disk only (spill.go)
	held        map[uint64]bool   // dead letters moving in, not yet visible (dlmove.go)
	taken       map[uint64]uint64 // spilled messages taken in place by Take: seq -> log position (browse.go)
	// memTop is the log position (store.Pos.Uint64) of the newest record
	// whose message this run placed in memory: a spill may start at a
	// later record only (releaseHeld).
	memTop     uint64
	ackSeqs    []uint64 // scratch for Ack
	ackSegs    []uint32
	dlxPending []pendingDL // at-least-once dead letters not yet taken (R1.14)
	dlxTimer   clock.Timer
	deadStats  [4]uint64 // by reason index
	dropStats  [4]uint64
}

func newQueue(v *VHost, spec QueueSpec) *Queue {
	q := &Queue{vhost: v, Name: spec.Name, Durable: spec.Durable, Exclusive: spec.Exclusive, AutoDelete: spec.AutoDelete,
		Args: spec.Args, Config: ParseQueueArgs(spec.Args), bindings: map[*Binding]struct{}{}}
	q.eff = q.Config
	if spec.Exclusive {
		q.Owner = spec.Owner
	}
	levels := 1
	if q.Config.MaxPriority > 0 {
		levels = q.Config.MaxPriority + 1
	}
	q.ready.levels = make([]deque[entry], levels)
	q.sac = q.Config.SingleActive
	q.mu.Lock()
	q.touchLocked()
	q.mu.Unlock()
	return q
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
	if q.overflow() == "drop-head" {
		q.trimLocked()
	}
	q.touchLocked()
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

// countsReturn reports whether a return bumps the delivery count, the
// counter x-delivery-limit is checked against and x-delivery-count shows.
// Quorum queues keep RabbitMQ 4.3's rule: only failed deliveries count
// (basic.reject with requeue, channel or connection loss), basic.nack
// with requeue and basic.recover do not (R5.3). Classic queues have no
// delivery limit in RabbitMQ, so Warren's own limit there counts every
// return, whatever the kind: basic.nack and basic.reject with requeue,
// basic.recover, and the messages a channel or connection still held
// when it closed (also after basic.cancel, which leaves them unacked).
// Otherwise the seed's poison handler, basicNack(tag, false, true), would
// spin forever on a queue whose limit was set to stop it (issue 11 item
// 15).
func (q *Queue) countsReturn(failed bool) bool {
	return failed || q.eff.Type != "quorum"
}

// Stats returns a snapshot of the queue's counters.
func (q *Queue) Stats() QueueStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.stats
	s.Ready, s.Unacked, s.Consumers, s.ReadyBytes, s.Delayed = q.ready.n+q.spill.n, q.unacked, len(q.consumers), q.ready.bytes+q.spill.bytes, len(q.delayed)
	s.UnackedBytes = q.unackedB
	s.DeadLetterPending = len(q.dlxPending)
	if q.atLeastOnce() { // and those the flusher has yet to hand over
		s.DeadLetterPending += q.outboxN + q.dlInFlight
	}
	s.PagedOut, s.PagedOutBytes = q.spill.n, q.spill.bytes
	switch {
	case q.eff.Type == "quorum": // keeps all: the counts by delivery mode do not apply
		s.Persistent, s.PersistentBytes = s.Ready+s.Unacked, s.ReadyBytes+s.UnackedBytes
	case q.Durable:
		s.Persistent = q.ready.persist.n + q.spill.persist.n + q.unackedP.n
		s.PersistentBytes = q.ready.persist.bytes + q.spill.persist.bytes + q.unackedP.bytes
	}
	s.DeadLettered, s.Dropped = map[string]uint64{}, map[string]uint64{}
	for i, r := range reasons {
		s.DeadLettered[r] = q.deadStats[i]
		s.Dropped[r] = q.dropStats[i]
	}
	return s
}

// Counts returns the message and consumer counts, as queue.declare-ok
// reports them. Delayed retries count as messages (R5.5).
func (q *Queue) Counts() (messages, consumers int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ready.n + q.spill.n + len(q.delayed), len(q.consumers)
}

func (q *Queue) nowMs() int64 { return q.vhost.b.clock.Now().UnixMilli() }

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
func (q *Queue) enqueue(m *Message, r *Router) enqueueResult {
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
	q.nextSeq++
	e := q.newEntryLocked(q.nextSeq, m)
	spill := q.spillsLocked()
	if spill {
		q.pagingDiskLocked()
	}
	durable := q.disk != nil && !q.disk.paging && q.keeps(m)
	if durable || spill {
		p, err := q.disk.appendMsg(recMessage, nil, msgHeader{seq: e.seq, expiresAt: e.expiresAt}, m)
		if err == nil {
			e.ondisk, e.seg = true, p.Seg
			if durable && r != nil {
				r.addLog(q.disk.log)
			}
			if spill {
				q.stats.Published++
				q.spillLocked(e, p)
				if q.overflow() == "drop-head" {
					q.trimLocked()
				}
				return enqueued
			}
			q.memTop = max(q.memTop, p.Uint64())
		} else if durable && r != nil {
			r.failed = true
		}
	}
	q.placeLocked(e)
	return enqueued
}

// rejectsLocked applies reject-publish(-dlx) (R4.5, R4.6): it reports
// whether m is refused, dead-lettering it under reject-publish-dlx.
func (q *Queue) rejectsLocked(m *Message) bool {
	ov := q.overflow()
	if ov == "drop-head" || !q.overLimitWith(m) {
		return false
	}
	q.stats.Rejected++
	if ov == "reject-publish-dlx" {
		q.deadLocked(&entry{msg: m}, ReasonMaxLen)
	}
	return true
}

// newEntryLocked is m as a queue entry with sequence number seq and its
// TTL deadline; a TTL of 0 has a deadline of now.
func (q *Queue) newEntryLocked(seq uint64, m *Message) entry {
	e := entry{seq: seq, msg: m}
	if ttl := q.ttlFor(m); ttl >= 0 {
		e.expiresAt = q.nowMs() + ttl
	}
	return e
}

// placeLocked makes a new entry ready (in sequence order), delivers it if
// a consumer can take it and applies TTL and drop-head.
func (q *Queue) placeLocked(e entry) {
	q.stats.Published++
	if e.expiresAt != 0 && e.expiresAt <= q.nowMs() {
		// R2.5: delivered if a consumer takes it now, else it expires on
		// arrival; its deadline has passed if it is ever requeued.
		if q.ready.n == 0 && len(q.delayed) == 0 && q.offerLocked(&e) {
			return
		}
		q.deadLocked(&e, ReasonExpired)
		return
	}
	q.ready.putBack(e)
	if e.expiresAt != 0 {
		q.expiries.add(timed{at: e.expiresAt, seq: e.seq, level: q.ready.level(e.msg)})
	}
	q.dispatchLocked()
	if q.overflow() == "drop-head" {
		q.trimLocked()
	}
	q.armLocked()
}

// ttlFor is the effective TTL of m in ms: min(queue TTL, message TTL), -1
// for none (R2.2).
func (q *Queue) ttlFor(m *Message) int64 {
	ttl := int64(-1)
	if m.HasTTL {
		ttl = m.TTL
	}
	if q.eff.MessageTTL != nil && (ttl < 0 || *q.eff.MessageTTL < ttl) {
		ttl = *q.eff.MessageTTL
	}
	return ttl
}

// overLimitWith reports whether adding m would exceed a length limit.
// Only ready messages count (R4.1), delayed retries too (R5.5).
func (q *Queue) overLimitWith(m *Message) bool {
	n := int64(q.ready.n + q.spill.n + len(q.delayed) + len(q.dlxPending))
	if q.eff.MaxLength != nil && n+1 > *q.eff.MaxLength {
		return true
	}
	return q.eff.MaxLengthBytes != nil && q.ready.bytes+q.spill.bytes+int64(m.Size()) > *q.eff.MaxLengthBytes
}

func (q *Queue) overLimit() bool {
	if q.eff.MaxLength != nil && int64(q.ready.n+q.spill.n+len(q.delayed)) > *q.eff.MaxLength {
		return true
	}
	return q.eff.MaxLengthBytes != nil && q.ready.bytes+q.spill.bytes > *q.eff.MaxLengthBytes
}

// trimLocked drops head messages while the queue is over a limit (R4.2),
// dead-lettering them with reason maxlen.
func (q *Queue) trimLocked() {
	for q.overLimit() {
		if q.ready.n == 0 {
			q.refillLocked(true)
			if q.ready.n == 0 {
				return
			}
		}
		e := q.ready.pop()
		q.deadLocked(&e, ReasonMaxLen)
	}
}

// deadLocked counts e leaving the queue for reason and, when the queue has
// a dead-letter exchange, queues it in the outbox for the queue's flusher
// to dead-letter (dlflush.go); without one it is dropped.
func (q *Queue) deadLocked(e *entry, reason string) {
	if q.eff.DLX == nil {
		q.dropStats[reasonIndex(reason)]++
		q.goneLocked(e)
		return
	}
	q.deadStats[reasonIndex(reason)]++
	it := dlItem{msg: e.msg, seq: e.seq, seg: e.seg, ondisk: e.ondisk}
	q.outboxN++
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
}

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
}

// Dispatch delivers ready messages to consumers that can take them. Sinks
// call it when they can take messages again.
func (q *Queue) Dispatch() {
	q.mu.Lock()
	q.dispatchLocked()
	q.unlock()
}

// dispatchLocked hands ready messages to consumers while they take them.
// An expired message reaching the head is dead-lettered, never delivered
// (R2.4), and dispatch goes on with the next.
func (q *Queue) dispatchLocked() {
	if len(q.consumers) == 0 {
		return
	}
	q.refillLocked(false)
	now := int64(-1)
	for q.ready.n > 0 && len(q.consumers) > 0 {
		if q.spill.active {
			q.refillLocked(false)
		}
		e := q.ready.head().Ptr(0)
		if e.expiresAt != 0 {
			if now < 0 {
				now = q.nowMs()
			}
			if e.expiresAt <= now {
				x := q.ready.pop()
				q.deadLocked(&x, ReasonExpired)
				continue
			}
		}
		if !q.offerLocked(e) {
			return
		}
		q.ready.pop()
	}
}

func (q *Queue) delivery(e *entry, tag string) Delivery {
	d := Delivery{Queue: q, Msg: e.msg, Seq: e.seq, Redelivered: e.redelivered || e.acquired > 0, ConsumerTag: tag,
		ExpiresAt: e.expiresAt, DeliveryCount: e.deliveryCount, AcquiredCount: e.acquired, seg: e.seg, ondisk: e.ondisk}
	if e.acquired > 0 && q.countsDeliveries() {
		d.Msg, d.Original = withCounts(e.msg, e.deliveryCount, e.acquired), e.msg
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

// offerLocked offers e to the consumers: the highest priority group first,
// round-robin within a group; with single active consumer only to the
// first consumer. It reports whether one took it; the caller removes it.
func (q *Queue) offerLocked(e *entry) bool {
	if len(q.consumers) == 0 {
		return false
	}
	if q.sac {
		c := q.consumers[0]
		if !c.Sink.Deliver(c, q.delivery(e, c.Tag)) {
			return false
		}
		q.tookLocked(e, c.NoAck, false)
		return true
	}
	n := len(q.consumers)
	for i := 0; i < n; {
		j := i + 1
		for j < n && q.consumers[j].Priority == q.consumers[i].Priority {
			j++
		}
		size := j - i
		for k := 0; k < size; k++ {
			c := q.consumers[i+(q.rr+k)%size]
			if c.Sink.Deliver(c, q.delivery(e, c.Tag)) {
				q.rr += k + 1
				q.tookLocked(e, c.NoAck, false)
				return true
			}
		}
		i = j
	}
	return false
}

// tookLocked counts e taken by a consumer or, when get, by basic.get.
func (q *Queue) tookLocked(e *entry, noAck, get bool) {
	switch {
	case get && noAck:
		q.stats.GetNoAck++
	case get:
		q.stats.Get++
	case noAck:
		q.stats.DeliverNoAck++
	default:
		q.stats.Deliver++
	}
	if e.redelivered || e.acquired > 0 {
		q.stats.Redelivered++
	}
	if !noAck {
		q.unacked++
		q.unackedB += int64(e.msg.Size())
		q.unackedP.add(e.msg.persistent(), e.msg.Size(), 1)
	} else {
		q.goneLocked(e)
	}
}

// Delivered counts the messages handed out by consumers and basic.get
// (RabbitMQ's deliver_get).
func (s *QueueStats) Delivered() uint64 {
	return s.Deliver + s.DeliverNoAck + s.Get + s.GetNoAck
}

// Get takes the head message for basic.get. ok is false when the queue is
// empty; remaining is the count left after the take.
func (q *Queue) Get(noAck bool) (d Delivery, remaining int, ok bool) {
	q.mu.Lock()
	defer q.unlock()
	q.refillLocked(false)
	q.expireHeadsLocked(q.nowMs())
	q.touchLocked()
	if q.ready.n == 0 {
		q.refillLocked(true)
		q.expireHeadsLocked(q.nowMs())
	}
	if q.ready.n == 0 || q.deleted {
		q.stats.GetEmpty++
		return Delivery{}, 0, false
	}
	e := q.ready.pop()
	q.tookLocked(&e, noAck, true)
	return q.delivery(&e, ""), q.ready.n + q.spill.n, true
}

// expireHeadsLocked dead-letters expired messages at the heads of the
// priority levels (the timer finds the others).
func (q *Queue) expireHeadsLocked(now int64) {
	for i := range q.ready.levels {
		d := &q.ready.levels[i]
		for d.Len() > 0 {
			e := d.Ptr(0)
			if e.dead {
				d.PopFront()
				continue
			}
			if e.expiresAt == 0 || e.expiresAt > now {
				break
			}
			q.ready.kill(e)
			x := *e
			d.PopFront()
			q.deadLocked(&x, ReasonExpired)
		}
	}
}

// expireLocked dead-letters every ready message whose deadline has
// passed, wherever it sits (Warren's answer to R2.4), keeping the order of
// the others, and moves delayed retries that are due to ready.
func (q *Queue) expireLocked(now int64) {
	for len(q.delayed) > 0 && q.delayed[0].at <= now {
		de := heap.Pop(&q.delayed).(delayedEntry)
		q.ready.putBack(de.e)
		if de.e.expiresAt != 0 {
			q.expiries.add(timed{at: de.e.expiresAt, seq: de.e.seq, level: q.ready.level(de.e.msg)})
		}
	}
	for len(q.expiries) > 0 && q.expiries[0].at <= now {
		t := q.expiries.popMin()
		e := q.ready.find(t.level, t.seq)
		if e == nil && q.isSpilledLocked(t) {
			q.expireSpilledLocked(t)
			continue
		}
		if e == nil || e.expiresAt != t.at {
			continue // delivered, removed or requeued since
		}
		q.ready.kill(e)
		q.deadLocked(e, ReasonExpired)
	}
}

// armLocked keeps one timer for the earliest expiry or delayed retry.
func (q *Queue) armLocked() {
	next := int64(0)
	// Drop stale heap tops so a burst of acked messages does not keep
	// waking the timer.
	for len(q.expiries) > 0 {
		t := q.expiries[0]
		if e := q.ready.find(t.level, t.seq); e != nil && e.expiresAt == t.at || e == nil && q.isSpilledLocked(t) {
			next = t.at
			break
		}
		q.expiries.popMin()
	}
	if len(q.delayed) > 0 && (next == 0 || q.delayed[0].at < next) {
		next = q.delayed[0].at
	}
	if q.expiresAt != 0 && (next == 0 || q.expiresAt < next) {
		next = q.expiresAt
	}
	if next == 0 || q.deleted {
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
	if q.expiresAt != 0 && now >= q.expiresAt && len(q.consumers) == 0 {
		// x-expires: unused for its whole lifetime; deleted without
		// dead-lettering (R2.7).
		q.mu.Unlock()
		q.vhost.deleteQueue(q, false, false)
		return
	}
	q.expireLocked(now)
	q.dispatchLocked()
	if q.overflow() == "drop-head" {
		q.trimLocked() // due delayed retries count again
	}
	q.armLocked()
	q.unlock()
}

// touchLocked restarts the x-expires clock: the queue was used.
func (q *Queue) touchLocked() {
	if q.eff.Expires == nil || len(q.consumers) > 0 {
		q.expiresAt = 0
		return
	}
	q.expiresAt = q.nowMs() + *q.eff.Expires
	q.armLocked()
}

// Touch marks the queue used (redeclared), restarting x-expires (R2.7).
func (q *Queue) Touch() {
	q.mu.Lock()
	q.touchLocked()
	q.mu.Unlock()
}

// settledLocked takes deliveries out of the unacked counts.
func (q *Queue) settledLocked(ds []Delivery) {
	q.unacked -= len(ds)
	if len(q.taken) > 0 {
		for i := range ds {
			delete(q.taken, ds[i].Seq)
		}
	}
	for i := range ds {
		m := ds[i].Msg
		q.unackedB -= int64(m.Size())
		q.unackedP.add(m.persistent(), m.Size(), -1)
	}
}

// Ack settles deliveries of this queue as done.
func (q *Queue) Ack(ds []Delivery) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.settledLocked(ds)
	q.stats.Acked += uint64(len(ds))
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

// Reject settles deliveries as rejected without requeue: they are
// dead-lettered with reason rejected when the queue has a DLX, else
// discarded (R5.2).
func (q *Queue) Reject(ds []Delivery) {
	q.mu.Lock()
	q.settledLocked(ds)
	for i := range ds {
		e := ds[i].entry()
		q.deadLocked(&e, ReasonRejected)
	}
	q.unlockPaced()
}

// Requeue returns deliveries to the queue, marked redelivered (R5.1).
// failed says whether the return is a failed delivery (basic.reject with
// requeue, channel or connection loss) rather than a plain return
// (basic.nack with requeue, basic.recover). Which returns count toward
// the delivery limit and x-delivery-count depends on the queue type (see
// countsReturn): on quorum queues only failed ones (R5.3, RabbitMQ 4.3),
// on other queues every return. A message over the delivery limit is
// dead-lettered with reason delivery_limit, or dropped without a DLX. Classic queues put messages back at their
// original position; quorum queues serve returns first while a delivery
// limit is set and put them at the back otherwise (R5.4). With a delayed
// retry type, returns wait before becoming ready (R5.5). A requeue that
// pushes a drop-head queue over its limit trims the head (R4.4); the
// deadline of a message does not change (R2.3).
func (q *Queue) Requeue(ds []Delivery, failed bool) {
	q.mu.Lock()
	defer q.unlockPaced()
	q.settledLocked(ds)
	if q.deleted {
		return
	}
	now := q.nowMs()
	limit := q.deliveryLimit()
	for _, d := range ds {
		e := d.entry()
		e.redelivered = true
		e.acquired++
		if q.countsReturn(failed) {
			e.deliveryCount++
		}
		q.stats.Requeued++
		if limit >= 0 && int64(e.deliveryCount) > limit {
			q.deadLocked(&e, ReasonDeliveryLimit)
			continue
		}
		if e.expiresAt != 0 && e.expiresAt <= now {
			q.deadLocked(&e, ReasonExpired)
			continue
		}
		if delay := q.retryDelay(e, failed); delay > 0 {
			if e.ondisk && q.disk != nil {
				q.disk.requeue(e.seq, e.seq, e.deliveryCount, e.acquired, now+delay)
			}
			heap.Push(&q.delayed, delayedEntry{at: now + delay, e: e})
			continue
		}
		if q.eff.Type == "quorum" && limit < 0 {
			q.nextSeq++
			if e.ondisk && q.disk != nil {
				q.disk.requeue(e.seq, q.nextSeq, e.deliveryCount, e.acquired, 0)
			}
			e.seq = q.nextSeq
			q.ready.push(e)
		} else {
			if e.ondisk && q.disk != nil {
				q.disk.requeue(e.seq, e.seq, e.deliveryCount, e.acquired, 0)
			}
			q.ready.putBack(e)
		}
		if e.expiresAt != 0 {
			q.expiries.add(timed{at: e.expiresAt, seq: e.seq, level: q.ready.level(e.msg)})
		}
	}
	q.dispatchLocked()
	if q.overflow() == "drop-head" {
		q.trimLocked()
	}
	q.armLocked()
}

// retryDelay is the delay before a returned message is ready again under
// x-delayed-retry-type (R5.5): min(min × delivery count, max) ms.
func (q *Queue) retryDelay(e entry, failed bool) int64 {
	switch q.eff.DelayedRetryType {
	case "all":
	case "failed":
		if !failed {
			return 0
		}
	case "returned":
		if failed {
			return 0
		}
	default:
		return 0
	}
	if q.eff.DelayedRetryMin == nil {
		return 0
	}
	n := int64(max(e.deliveryCount, 1))
	d := *q.eff.DelayedRetryMin * n
	if q.eff.DelayedRetryMax != nil && d > *q.eff.DelayedRetryMax {
		d = *q.eff.DelayedRetryMax
	}
	return d
}

// Purge drops all ready and delayed messages and returns how many there
// were. Purged messages are never dead-lettered (R3.1).
func (q *Queue) Purge() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.purgeDiskLocked()
	n := q.purgeSpillLocked() + q.ready.clear() + len(q.delayed)
	q.delayed = nil
	q.expiries = nil
	// RabbitMQ 4.3 purge also drops pending at-least-once dead letters.
	q.dlxPending = nil
	return n
}

// AddConsumer subscribes c. It fails with 403 if the queue has an exclusive
// consumer or c wants exclusivity on a queue with consumers.
func (q *Queue) AddConsumer(c *Consumer) error { return q.AddConsumerThen(c, nil) }

// AddConsumerThen is AddConsumer with a hook: once c is accepted, added
// (if not nil) runs with the queue's lock held, before anything is
// delivered to c, so that basic.consume-ok is sent only on success and
// ahead of the first delivery. added follows the rules of Sink.Deliver.
func (q *Queue) AddConsumerThen(c *Consumer, added func()) error {
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		return notFoundQueue(q.Name, q.vhost.Name)
	}
	if len(q.consumers) > 0 && (c.Exclusive || q.consumers[0].Exclusive) {
		q.mu.Unlock()
		return amqp.Errorf(amqp.AccessRefused, "queue '%s' in vhost '%s' in exclusive use", q.Name, q.vhost.Name)
	}
	c.Queue = q
	if q.sac {
		q.consumers = append(q.consumers, c)
	} else {
		i := sort.Search(len(q.consumers), func(i int) bool { return q.consumers[i].Priority < c.Priority })
		q.consumers = append(q.consumers, nil)
		copy(q.consumers[i+1:], q.consumers[i:])
		q.consumers[i] = c
	}
	q.hadConsumer = true
	q.expiresAt = 0
	if added != nil {
		added()
	}
	q.dispatchLocked()
	q.unlock()
	return nil
}

// RemoveConsumer unsubscribes c. If the queue is auto-delete and c was its
// last consumer, the queue is deleted.
func (q *Queue) RemoveConsumer(c *Consumer) {
	q.mu.Lock()
	for i, o := range q.consumers {
		if o == c {
			q.consumers = append(q.consumers[:i], q.consumers[i+1:]...)
			break
		}
	}
	autoDelete := q.AutoDelete && q.hadConsumer && len(q.consumers) == 0 && !q.deleted
	if !autoDelete {
		if q.sac {
			q.dispatchLocked() // the next consumer may have become active
		}
		q.touchLocked()
	}
	q.unlock()
	if autoDelete {
		q.vhost.deleteQueue(q, false, false)
	}
}

// ConsumerCount returns the number of consumers.
func (q *Queue) ConsumerCount() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.consumers)
}

// Consumers returns a snapshot of the consumers.
func (q *Queue) Consumers() []*Consumer {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]*Consumer(nil), q.consumers...)
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
	if q.disk != nil {
		q.disk.close(true)
	}
	messages = q.ready.clear() + len(q.delayed) + q.spill.n
	q.spill = spillState{}
	q.delayed, q.expiries, q.dlxPending = nil, nil, nil
	if q.dlxTimer != nil {
		q.dlxTimer.Stop()
		q.dlxTimer = nil
	}
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
	cs = q.consumers
	q.consumers = nil
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
