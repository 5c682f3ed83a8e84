// Package machine is a queue's semantics as a deterministic state
// machine (issue 12): commands in, new state and effects out. It does no
// I/O, reads no clock (the time travels in the commands), starts no
// goroutine and takes no lock: the shell that drives it (broker.Queue for
// classic queues, a Raft log for quorum queues later) does those and
// executes the effects it reports through Effects. The same commands
// applied to the same state give the same state and the same effects;
// Snapshot encodes the state (message references, not bodies).
//
// Messages on the shell's disk only (paged out) are counts here, plus a
// deadline for those with a TTL: the shell pages them out (PageOut) and
// back in (PageIn) as its memory window says.
//
// Commands (methods; the time, when it matters, is an argument):
//
//	publish    Duplicate (publisher id, seq), Rejects (reject-publish(-dlx)),
//	           NewEntry or Reserve + EntryAt, then Place or PageOut
//	paging     PageIn, PageOutReady, ExpiredPaged, LostPaged, ForgetPaged
//	consume    AddConsumer (priority, credit, exclusive, single active),
//	           RemoveConsumer, Dispatch, Get, TakeEntry, TakePaged
//	settle     Ack, Reject, Requeue (failed or plain) + Returned, Untake
//	time       Tick (expiry, due retries, drop-head), Touch, Unused
//	admin      SetConfig, SetDeadLettersOwed, Purge, Delete, Restore
//
// Effects (Effects, called synchronously inside a command): Deliver
// (whose answer, taken or refused, is part of the command's input),
// DeadLetter, Drop, Settled, Requeued (write the new counts), PageIn,
// ExpirePaged; IsPaged is a query. NextDeadline is when to Tick next.
package machine

import (
	"errors"
	"slices"
)

// Effects is what the shell does for the machine. The machine calls it
// synchronously, in order, from within a command.
type Effects[M, C any] interface {
	// Deliver offers e to consumer c. It returns false, without taking
	// e, when c cannot take a message now: that answer is part of the
	// command's input (a refusal by c at this point, which a log
	// records): the entry stays where it was and c is blocked, offered
	// nothing more until the next dispatch (Dispatch, or any command
	// that dispatches).
	Deliver(c *Consumer[M, C], e Entry[M]) bool
	// DeadLetter is e leaving the queue for reason r with a dead-letter
	// exchange set: the shell publishes it (at most or at least once).
	DeadLetter(e Entry[M], r Reason)
	// Drop is e leaving the queue for r without a dead-letter exchange.
	Drop(e Entry[M], r Reason)
	// Settled is e delivered without acknowledgement (no-ack) and gone.
	Settled(e Entry[M])
	// Requeued is e returned to the queue under seq (a quorum queue's
	// returns take a new one), ready at delayUntil when not 0: the shell
	// records the new counts in its log.
	Requeued(e Entry[M], seq uint64, delayUntil int64)
	// PageIn asks the shell to page messages back in (PageIn commands)
	// because memory has room, or, when force, because none is ready in
	// memory.
	PageIn(force bool)
	// ExpirePaged is the deadline t of a paged-out message coming due:
	// if the message is still paged out, the shell reads it and issues
	// ExpiredPaged.
	ExpirePaged(t Timed)
	// IsPaged reports whether the deadline t is of a message still paged
	// out (a query: it changes nothing).
	IsPaged(t Timed) bool
}

// Consumer is a subscription, and the holder of the messages it checked
// out. Ref is the shell's consumer. A consumer that is removed keeps its
// checked-out messages until they are settled or returned.
type Consumer[M, C any] struct {
	ID        uint64
	Ref       C
	Priority  int
	Exclusive bool
	NoAck     bool
	// Prefetch is the consumer's credit: the machine offers it a message
	// only while it holds fewer than Prefetch (0: the shell decides).
	Prefetch int

	blocked bool
	removed bool
	out     deque[Entry[M]] // checked out, in delivery order; Dead = settled
	outN    int
	sorted  bool   // out is ordered by seq
	base    uint64 // the checkout number of out's front
}

// CheckedOut is the number of messages c holds.
func (c *Consumer[M, C]) CheckedOut() int { return c.outN }

// Next is the checkout number the next message c takes gets: a shell
// keeps it with the delivery and gives it back to settle (Ack, Reject,
// Requeue, Untake), which then finds the message at once, in whatever
// order settlements come. A wrong number only costs a search.
func (c *Consumer[M, C]) Next() uint64 { return c.base + uint64(c.out.Len()) }

// ErrExclusive is AddConsumer refused: the queue has an exclusive
// consumer, or one wants exclusivity while there are others.
var ErrExclusive = errors.New("machine: queue in exclusive use")

// Stats are the machine's counters.
type Stats struct {
	Published, Redelivered                         uint64
	Deliver, DeliverNoAck, Get, GetNoAck, GetEmpty uint64
	Acked, Requeued, Rejected                      uint64
	DeadLettered, Dropped                          [4]uint64
}

// PubID identifies a publish: the publisher and its sequence number.
type PubID struct {
	Publisher uint64
	Seq       uint64
}

// Machine is one queue's state.
type Machine[M, C any] struct {
	cfg       Config
	ready     readyList[M]
	paged     Counts
	expiries  timedHeap
	delayed   []delayed[M]
	consumers []*Consumer[M, C] // active, by priority (not with SAC)
	holders   []*Consumer[M, C] // removed consumers still holding messages
	get       Consumer[M, C]    // holder of basic.get and Take
	rr        int
	nextSeq   uint64
	unacked   Counts
	// dlxPending counts at-least-once dead letters still owed (R1.14);
	// they count toward the length limit.
	dlxPending  int
	expiresAt   int64 // x-expires deadline while unused; 0 = none
	hadConsumer bool
	deleted     bool
	pubs        map[uint64]uint64 // Dedup: the last sequence number per publisher
	stats       Stats
	fx          Effects[M, C]
}

// New returns an empty machine with settings cfg (Levels and
// SingleActive are fixed from now on) executing its effects on fx.
func New[M, C any](cfg Config, fx Effects[M, C]) *Machine[M, C] {
	m := &Machine[M, C]{cfg: cfg, fx: fx}
	m.ready.levels = make([]deque[Entry[M]], cfg.levels())
	m.get.sorted = true
	return m
}

// SetEffects replaces the effect sink (a decoded snapshot gets one).
func (m *Machine[M, C]) SetEffects(fx Effects[M, C]) { m.fx = fx }

// Config returns the settings in force.
func (m *Machine[M, C]) Config() Config { return m.cfg }

// Level is the priority level of a message with priority p.
func (m *Machine[M, C]) Level(p uint8) uint8 {
	if len(m.ready.levels) == 1 {
		return 0
	}
	return uint8(min(int(p), len(m.ready.levels)-1))
}

// Levels is the number of priority levels.
func (m *Machine[M, C]) Levels() int { return len(m.ready.levels) }

// SetConfig installs new settings and applies them live (R1.13): a lower
// max-length trims the head at once (drop-head); a new message-ttl does
// not touch messages already enqueued; a new x-expires restarts the
// unused clock.
func (m *Machine[M, C]) SetConfig(now int64, cfg Config) {
	cfg.Levels, cfg.SingleActive = m.cfg.Levels, m.cfg.SingleActive
	m.cfg = cfg
	if cfg.Overflow == DropHead {
		m.trim()
	}
	m.Touch(now)
}

// ---- publishing ----

// Rejects applies reject-publish(-dlx) to a publish of size bytes (R4.5,
// R4.6): it reports whether the publish is refused, dead-lettering msg
// (an entry with no seq) under reject-publish-dlx.
func (m *Machine[M, C]) Rejects(msg M, size uint32, persistent bool) bool {
	if m.deleted || m.cfg.Overflow == DropHead || !m.overLimitWith(size) {
		return false
	}
	m.stats.Rejected++
	if m.cfg.Overflow == RejectPublishDLX {
		e := Entry[M]{Msg: msg, Size: size, Persistent: persistent}
		m.dead(&e, MaxLen)
	}
	return true
}

// Duplicate reports whether a publish was seen already (Dedup), and
// records it otherwise.
func (m *Machine[M, C]) Duplicate(id PubID) bool {
	if !m.cfg.Dedup || id.Publisher == 0 {
		return false
	}
	if m.pubs == nil {
		m.pubs = map[uint64]uint64{}
	}
	if last, ok := m.pubs[id.Publisher]; ok && id.Seq <= last {
		return true
	}
	m.pubs[id.Publisher] = id.Seq
	return false
}

// NewEntry takes the next sequence number for a message and returns its
// entry with its TTL deadline (msgTTL is the message's own, -1 for none;
// a TTL of 0 has a deadline of now). The shell writes it to its log and
// then issues Place or PageOut.
func (m *Machine[M, C]) NewEntry(now int64, msg M, size uint32, priority uint8, persistent bool, msgTTL int64) Entry[M] {
	m.nextSeq++
	return m.EntryAt(now, m.nextSeq, msg, size, priority, persistent, msgTTL)
}

// EntryAt is NewEntry at a sequence number reserved earlier (Reserve).
func (m *Machine[M, C]) EntryAt(now int64, seq uint64, msg M, size uint32, priority uint8, persistent bool, msgTTL int64) Entry[M] {
	return Entry[M]{Seq: seq, Msg: msg, Size: size, Level: m.Level(priority), Persistent: persistent,
		ExpiresAt: m.ExpiresAt(now, msgTTL)}
}

// ExpiresAt is the deadline of a message with its own TTL msgTTL (-1 for
// none) placed at now under the queue's TTL: 0 for none.
func (m *Machine[M, C]) ExpiresAt(now, msgTTL int64) int64 {
	if ttl := m.cfg.ttl(msgTTL); ttl >= 0 {
		return now + ttl
	}
	return 0
}

// Reserve takes the next sequence number for a message that arrives
// later (a dead letter moving in, placed where it was routed).
func (m *Machine[M, C]) Reserve() uint64 {
	m.nextSeq++
	return m.nextSeq
}

// LastSeq is the newest sequence number taken.
func (m *Machine[M, C]) LastSeq() uint64 { return m.nextSeq }

// Place makes a new entry ready (in sequence order), delivers it if a
// consumer can take it and applies TTL and drop-head. A message whose
// deadline has passed is delivered if a consumer takes it at once, else
// it expires on arrival (R2.5).
func (m *Machine[M, C]) Place(now int64, e Entry[M]) {
	if m.deleted {
		return
	}
	m.stats.Published++
	if e.ExpiresAt != 0 && e.ExpiresAt <= now {
		if m.ready.c.All.N == 0 && len(m.delayed) == 0 && len(m.consumers) > 0 {
			m.unblock()
			if m.offer(&e) {
				return
			}
		}
		m.dead(&e, Expired)
		return
	}
	if m.ready.c.All.N == 0 && m.paged.All.N == 0 && len(m.consumers) > 0 {
		// The fast path of an idle queue: e would be the head, so a
		// dispatch would offer it first; a consumer that takes it
		// leaves the queue as empty as it was.
		m.unblock()
		if m.offer(&e) {
			return
		}
		m.ready.putBack(e)
	} else {
		m.ready.putBack(e)
		m.Dispatch(now)
	}
	if e.ExpiresAt != 0 && m.ready.find(e.Level, e.Seq) != nil {
		m.expiries.add(Timed{At: e.ExpiresAt, Seq: e.Seq, Level: e.Level})
	}
	if m.cfg.Overflow == DropHead {
		m.trim()
	}
}

// PageOut counts a new entry as on the shell's disk only, at log
// position pos (not 0).
func (m *Machine[M, C]) PageOut(e Entry[M], pos uint64) {
	if m.deleted {
		return
	}
	m.stats.Published++
	m.paged.add(e.Size, e.Persistent, 1)
	if e.ExpiresAt != 0 {
		m.expiries.add(Timed{At: e.ExpiresAt, Seq: e.Seq, Pos: pos})
	}
	if m.cfg.Overflow == DropHead {
		m.trim()
	}
}

// PageIn makes a paged-out message ready in memory again, in sequence
// order.
func (m *Machine[M, C]) PageIn(e Entry[M]) {
	m.paged.add(e.Size, e.Persistent, -1)
	e.Level = 0
	m.ready.putBack(e)
}

// PageOutReady pages the ready message seq at level out (the shell keeps
// it on its disk at log position pos, not 0): a quorum queue's return
// going to the back behind messages already paged out. It reports
// whether seq was ready.
func (m *Machine[M, C]) PageOutReady(level uint8, seq, pos uint64) bool {
	e := m.ready.find(level, seq)
	if e == nil {
		return false
	}
	x := *e
	m.ready.kill(e)
	var zero M
	e.Msg = zero
	m.paged.add(x.Size, x.Persistent, 1)
	if x.ExpiresAt != 0 {
		m.expiries.add(Timed{At: x.ExpiresAt, Seq: x.Seq, Pos: pos})
	}
	return true
}

// ForgetPaged counts every paged-out message out: the shell lost them.
func (m *Machine[M, C]) ForgetPaged() { m.paged = Counts{} }

// ExpiredPaged dead-letters a paged-out message whose deadline passed.
func (m *Machine[M, C]) ExpiredPaged(e Entry[M]) {
	m.paged.add(e.Size, e.Persistent, -1)
	m.dead(&e, Expired)
}

// LostPaged drops a paged-out message the shell could not read back.
func (m *Machine[M, C]) LostPaged(e Entry[M]) {
	m.paged.add(e.Size, e.Persistent, -1)
	m.fx.Drop(e, Expired)
}

// ---- limits ----

func (m *Machine[M, C]) length() int64 {
	return int64(m.ready.c.All.N + m.paged.All.N + len(m.delayed))
}

// overLimitWith reports whether adding size bytes would exceed a length
// limit. Only ready messages count (R4.1), delayed retries and owed dead
// letters too (R5.5, R1.14).
func (m *Machine[M, C]) overLimitWith(size uint32) bool {
	if m.cfg.MaxLength >= 0 && m.length()+int64(m.dlxPending)+1 > m.cfg.MaxLength {
		return true
	}
	return m.cfg.MaxLengthBytes >= 0 && m.ready.c.All.Bytes+m.paged.All.Bytes+int64(size) > m.cfg.MaxLengthBytes
}

func (m *Machine[M, C]) overLimit() bool {
	if m.cfg.MaxLength >= 0 && m.length() > m.cfg.MaxLength {
		return true
	}
	return m.cfg.MaxLengthBytes >= 0 && m.ready.c.All.Bytes+m.paged.All.Bytes > m.cfg.MaxLengthBytes
}

// trim drops head messages while the queue is over a limit (R4.2, R4.4),
// dead-lettering them with reason maxlen.
func (m *Machine[M, C]) trim() {
	for m.overLimit() {
		if m.ready.c.All.N == 0 {
			if m.paged.All.N == 0 {
				return
			}
			m.fx.PageIn(true)
			if m.ready.c.All.N == 0 {
				return
			}
		}
		e := m.ready.pop()
		m.dead(&e, MaxLen)
	}
}

// dead counts e leaving the queue for r and hands it to the shell.
func (m *Machine[M, C]) dead(e *Entry[M], r Reason) {
	if !m.cfg.DLX {
		m.stats.Dropped[r]++
		m.fx.Drop(*e, r)
		return
	}
	m.stats.DeadLettered[r]++
	m.fx.DeadLetter(*e, r)
}

// SetDeadLettersOwed records how many at-least-once dead letters are
// still owed to their targets (R1.14): they count toward the length
// limit.
func (m *Machine[M, C]) SetDeadLettersOwed(n int) { m.dlxPending = n }

// ---- consumers and dispatch ----

// AddConsumer subscribes c (not delivering yet: the shell follows with
// Dispatch). It fails with ErrExclusive if the queue has an exclusive
// consumer or c wants exclusivity on a queue with consumers.
func (m *Machine[M, C]) AddConsumer(c *Consumer[M, C]) error {
	if len(m.consumers) > 0 && (c.Exclusive || m.consumers[0].Exclusive) {
		return ErrExclusive
	}
	c.sorted, c.removed, c.blocked = true, false, false
	if m.cfg.SingleActive {
		m.consumers = append(m.consumers, c)
	} else {
		i := len(m.consumers)
		for i > 0 && m.consumers[i-1].Priority < c.Priority {
			i--
		}
		m.consumers = append(m.consumers, nil)
		copy(m.consumers[i+1:], m.consumers[i:])
		m.consumers[i] = c
	}
	m.hadConsumer = true
	m.expiresAt = 0
	return nil
}

// RemoveConsumer unsubscribes c; it keeps the messages it checked out.
// With single active consumer the next one may become active: the shell
// follows with Dispatch.
func (m *Machine[M, C]) RemoveConsumer(now int64, c *Consumer[M, C]) {
	for i, o := range m.consumers {
		if o == c {
			m.consumers = slices.Delete(m.consumers, i, i+1)
			break
		}
	}
	if !c.removed {
		c.removed = true
		if c.outN > 0 {
			m.holders = append(m.holders, c)
		}
	}
	m.Touch(now)
}

// Consumers returns the active consumers in offer order (do not modify).
func (m *Machine[M, C]) Consumers() []*Consumer[M, C] { return m.consumers }

// HadConsumer reports whether the queue ever had a consumer.
func (m *Machine[M, C]) HadConsumer() bool { return m.hadConsumer }

func (m *Machine[M, C]) unblock() {
	for _, c := range m.consumers {
		c.blocked = false
	}
}

// Dispatch hands ready messages to consumers while they take them. An
// expired message reaching the head is dead-lettered, never delivered
// (R2.4), and dispatch goes on with the next. Every consumer is offered
// messages again (a refusal lasts for one dispatch).
func (m *Machine[M, C]) Dispatch(now int64) {
	if len(m.consumers) == 0 || m.deleted {
		return
	}
	m.unblock()
	if m.paged.All.N > 0 {
		m.fx.PageIn(false)
	}
	for m.ready.c.All.N > 0 && len(m.consumers) > 0 {
		if m.paged.All.N > 0 {
			m.fx.PageIn(false)
		}
		e := m.ready.head()
		if e.ExpiresAt != 0 && e.ExpiresAt <= now {
			x := m.ready.pop()
			m.dead(&x, Expired)
			continue
		}
		if !m.offer(e) {
			return
		}
		m.ready.popLevel(e.Level)
	}
}

// offer offers e to the consumers: the highest priority group first,
// round-robin within a group; with single active consumer only to the
// first. It reports whether one took it; the caller removes it.
func (m *Machine[M, C]) offer(e *Entry[M]) bool {
	if m.cfg.SingleActive {
		c := m.consumers[0]
		if c.blocked || !m.tryDeliver(c, e) {
			return false
		}
		return true
	}
	n := len(m.consumers)
	for i := 0; i < n; {
		j := i + 1
		for j < n && m.consumers[j].Priority == m.consumers[i].Priority {
			j++
		}
		size := j - i
		for k := 0; k < size; k++ {
			c := m.consumers[i+(m.rr+k)%size]
			if !c.blocked && m.tryDeliver(c, e) {
				m.rr += k + 1
				return true
			}
		}
		i = j
	}
	return false
}

func (m *Machine[M, C]) tryDeliver(c *Consumer[M, C], e *Entry[M]) bool {
	if c.Prefetch > 0 && c.outN >= c.Prefetch || !m.fx.Deliver(c, *e) {
		c.blocked = true
		return false
	}
	m.took(c, e, c.NoAck, false)
	return true
}

// took counts e taken by c (the get holder for basic.get).
func (m *Machine[M, C]) took(c *Consumer[M, C], e *Entry[M], noAck, get bool) {
	switch {
	case get && noAck:
		m.stats.GetNoAck++
	case get:
		m.stats.Get++
	case noAck:
		m.stats.DeliverNoAck++
	default:
		m.stats.Deliver++
	}
	if e.Redelivered || e.Acquired > 0 {
		m.stats.Redelivered++
	}
	if noAck {
		m.fx.Settled(*e)
		return
	}
	m.unacked.add(e.Size, e.Persistent, 1)
	if c.outN == 0 {
		c.sorted = true
		if c.out.Len() > 0 {
			c.base += uint64(c.out.Clear())
		}
	}
	if c.out.Len() > 0 && c.out.Ptr(c.out.Len()-1).Seq >= e.Seq {
		c.sorted = false
	}
	x := *e
	x.Dead = false
	c.out.PushBack(x)
	c.outN++
}

// Get takes the head message for basic.get into the get holder (Holder),
// or settles it when noAck. ok is false when the queue is empty;
// remaining is the count left after the take.
func (m *Machine[M, C]) Get(now int64, noAck bool) (e Entry[M], remaining int, ok bool) {
	if m.paged.All.N > 0 {
		m.fx.PageIn(false)
	}
	m.expireHeads(now)
	m.Touch(now)
	if m.ready.c.All.N == 0 && m.paged.All.N > 0 {
		m.fx.PageIn(true)
		m.expireHeads(now)
	}
	if m.ready.c.All.N == 0 || m.deleted {
		m.stats.GetEmpty++
		return Entry[M]{}, 0, false
	}
	e = m.ready.pop()
	m.took(&m.get, &e, noAck, true)
	return e, m.ready.c.All.N + m.paged.All.N, true
}

// Holder is the holder of messages taken by basic.get and TakeReady.
func (m *Machine[M, C]) Holder() *Consumer[M, C] { return &m.get }

// expireHeads dead-letters expired messages at the heads of the priority
// levels (the timer finds the others).
func (m *Machine[M, C]) expireHeads(now int64) {
	for i := range m.ready.levels {
		d := &m.ready.levels[i]
		for d.Len() > 0 {
			e := d.Ptr(0)
			if e.Dead {
				d.PopFront()
				continue
			}
			if e.ExpiresAt == 0 || e.ExpiresAt > now {
				break
			}
			m.ready.kill(e)
			x := *e
			d.PopFront()
			m.dead(&x, Expired)
		}
	}
}

// ---- settling ----

// checkin removes seq from c's checked-out messages.
func (m *Machine[M, C]) checkin(c *Consumer[M, C], seq, n uint64) (Entry[M], bool) {
	d := &c.out
	i := -1
	switch {
	case d.Len() == 0:
	case n >= c.base && n-c.base < uint64(d.Len()) && d.Ptr(int(n-c.base)).Seq == seq && !d.Ptr(int(n-c.base)).Dead:
		i = int(n - c.base)
	case d.Ptr(0).Seq == seq && !d.Ptr(0).Dead:
		i = 0
	case c.sorted:
		lo, hi := 0, d.Len()
		for lo < hi {
			h := int(uint(lo+hi) >> 1)
			if d.Ptr(h).Seq < seq {
				lo = h + 1
			} else {
				hi = h
			}
		}
		if lo < d.Len() && d.Ptr(lo).Seq == seq && !d.Ptr(lo).Dead {
			i = lo
		}
	default:
		for j := 0; j < d.Len(); j++ {
			if p := d.Ptr(j); p.Seq == seq && !p.Dead {
				i = j
				break
			}
		}
	}
	if i < 0 {
		return Entry[M]{}, false
	}
	p := d.Ptr(i)
	e := *p
	p.Dead = true
	c.outN--
	for d.Len() > 0 && d.Ptr(0).Dead {
		d.PopFront()
		c.base++
	}
	if c.outN == 0 {
		if d.Len() > 0 {
			c.base += uint64(d.Clear())
		}
		if cap := len(d.buf); cap > 4096 {
			*d = deque[Entry[M]]{}
		}
		if c.removed {
			m.dropHolder(c)
		}
	}
	m.unacked.add(e.Size, e.Persistent, -1)
	return e, true
}

func (m *Machine[M, C]) dropHolder(c *Consumer[M, C]) {
	for i, h := range m.holders {
		if h == c {
			m.holders = slices.Delete(m.holders, i, i+1)
			return
		}
	}
}

// Ack settles seq checked out by c (as its checkout number n, see
// Consumer.Next) as done; it reports whether c held it.
func (m *Machine[M, C]) Ack(c *Consumer[M, C], seq, n uint64) (Entry[M], bool) {
	e, ok := m.checkin(c, seq, n)
	if ok {
		m.stats.Acked++
	}
	return e, ok
}

// Reject settles seq checked out by c as rejected without requeue: it is
// dead-lettered with reason rejected when the queue has a dead-letter
// exchange, else dropped (R5.2).
func (m *Machine[M, C]) Reject(c *Consumer[M, C], seq, n uint64) bool {
	e, ok := m.checkin(c, seq, n)
	if ok {
		m.dead(&e, Rejected)
	}
	return ok
}

// Requeue returns seq checked out by c to the queue, marked redelivered
// (R5.1). failed says whether it is a failed delivery (basic.reject with
// requeue, channel or connection loss) rather than a plain return
// (basic.nack with requeue, basic.recover); which returns count toward
// the delivery limit depends on the queue type (R5.3). A message over the
// delivery limit is dead-lettered with reason delivery_limit; one whose
// deadline passed expires (R2.3). Classic queues put messages back at
// their position; quorum queues serve returns first while a delivery
// limit is set and put them at the back otherwise (R5.4). With a delayed
// retry type, returns wait before becoming ready (R5.5). The shell
// follows a batch of requeues with Returned, which dispatches and trims.
func (m *Machine[M, C]) Requeue(now int64, c *Consumer[M, C], seq, n uint64, failed bool) bool {
	e, ok := m.checkin(c, seq, n)
	if !ok || m.deleted {
		return ok
	}
	e.Redelivered = true
	e.Acquired++
	if m.cfg.countsReturn(failed) {
		e.DeliveryCount++
	}
	m.stats.Requeued++
	if m.cfg.DeliveryLimit >= 0 && int64(e.DeliveryCount) > m.cfg.DeliveryLimit {
		m.dead(&e, DeliveryLimit)
		return true
	}
	if e.ExpiresAt != 0 && e.ExpiresAt <= now {
		m.dead(&e, Expired)
		return true
	}
	if delay := m.cfg.retryDelay(e.DeliveryCount, failed); delay > 0 {
		m.fx.Requeued(e, e.Seq, now+delay)
		hpush(&m.delayed, delayed[M]{at: now + delay, e: e}, delayedLess[M])
		return true
	}
	if m.cfg.Quorum && m.cfg.DeliveryLimit < 0 {
		// To the back, under a new seq; the shell hears of it once it
		// is there (it may page it out: PageOutReady).
		m.nextSeq++
		old := e
		e.Seq = m.nextSeq
		m.ready.push(e)
		m.fx.Requeued(old, e.Seq, 0)
	} else {
		m.fx.Requeued(e, e.Seq, 0)
		m.ready.putBack(e)
	}
	if e.ExpiresAt != 0 {
		m.expiries.add(Timed{At: e.ExpiresAt, Seq: e.Seq, Level: e.Level})
	}
	return true
}

// Returned ends a batch of Requeue: dispatch, then drop-head (a requeue
// that pushes the queue over its limit trims the head, R4.4).
func (m *Machine[M, C]) Returned(now int64) {
	m.Dispatch(now)
	if m.cfg.Overflow == DropHead {
		m.trim()
	}
}

// Untake puts back a message taken with Get (or TakeReady) exactly as it
// was, as if never taken or, when redelivered, marked redelivered (a
// republish that was not confirmed may have gone through). The shell
// follows a batch with Dispatch. When paged, the message went back to the
// shell's disk where it sat: it is counted as paged out.
func (m *Machine[M, C]) Untake(c *Consumer[M, C], seq, n uint64, redelivered, paged bool) bool {
	e, ok := m.checkin(c, seq, n)
	if !ok || m.deleted {
		return ok
	}
	if m.stats.Get > 0 {
		m.stats.Get--
	}
	if paged {
		m.paged.add(e.Size, e.Persistent, 1)
		return true
	}
	e.Redelivered = redelivered || e.Redelivered
	m.ready.putBack(e)
	if e.ExpiresAt != 0 {
		m.expiries.add(Timed{At: e.ExpiresAt, Seq: e.Seq, Level: e.Level})
	}
	return true
}

// TakeEntry takes the ready entry e (found with Walk) into the get
// holder, as Get does.
func (m *Machine[M, C]) TakeEntry(e *Entry[M]) Entry[M] {
	x := *e
	m.ready.kill(e)
	var zero M
	e.Msg = zero // the tombstone need not keep the body
	m.took(&m.get, &x, false, true)
	return x
}

// TakePaged takes a paged-out message (read by the shell) into the get
// holder.
func (m *Machine[M, C]) TakePaged(e Entry[M]) {
	m.paged.add(e.Size, e.Persistent, -1)
	m.took(&m.get, &e, false, true)
}

// ---- time ----

// Tick runs the clock to now: delayed retries that are due become ready,
// every ready message whose deadline passed expires wherever it sits
// (Warren's answer to R2.4), consumers get what they can take, and a
// drop-head queue trims (due retries count again).
func (m *Machine[M, C]) Tick(now int64) {
	if m.deleted {
		return
	}
	m.expire(now)
	m.Dispatch(now)
	if m.cfg.Overflow == DropHead {
		m.trim()
	}
}

func (m *Machine[M, C]) expire(now int64) {
	for len(m.delayed) > 0 && m.delayed[0].at <= now {
		de := hpop(&m.delayed, delayedLess[M])
		m.ready.putBack(de.e)
		if de.e.ExpiresAt != 0 {
			m.expiries.add(Timed{At: de.e.ExpiresAt, Seq: de.e.Seq, Level: de.e.Level})
		}
	}
	for len(m.expiries) > 0 && m.expiries[0].At <= now {
		t := m.expiries.popMin()
		e := m.ready.find(t.Level, t.Seq)
		if e == nil && t.Pos != 0 {
			m.fx.ExpirePaged(t)
			continue
		}
		if e == nil || e.ExpiresAt != t.At {
			continue // delivered, removed or requeued since
		}
		m.ready.kill(e)
		x := *e
		m.dead(&x, Expired)
	}
}

// NextDeadline is when the shell must Tick next (the earliest expiry,
// delayed retry or x-expires deadline), 0 for never. It drops stale
// deadlines so that a burst of acked messages does not keep waking the
// timer.
func (m *Machine[M, C]) NextDeadline() int64 {
	if m.deleted {
		return 0
	}
	next := int64(0)
	for len(m.expiries) > 0 {
		t := m.expiries[0]
		// A paged-out message keeps its deadline once paged in (found
		// by seq at level 0).
		if e := m.ready.find(t.Level, t.Seq); e != nil && e.ExpiresAt == t.At || e == nil && t.Pos != 0 && m.fx.IsPaged(t) {
			next = t.At
			break
		}
		m.expiries.popMin()
	}
	if len(m.delayed) > 0 && (next == 0 || m.delayed[0].at < next) {
		next = m.delayed[0].at
	}
	if m.expiresAt != 0 && (next == 0 || m.expiresAt < next) {
		next = m.expiresAt
	}
	return next
}

// Touch restarts the x-expires clock: the queue was used (R2.7).
func (m *Machine[M, C]) Touch(now int64) {
	if m.cfg.Expires < 0 || len(m.consumers) > 0 {
		m.expiresAt = 0
		return
	}
	m.expiresAt = now + m.cfg.Expires
}

// Unused reports whether the queue's x-expires deadline passed with no
// consumer: the shell deletes it, without dead-lettering (R2.7).
func (m *Machine[M, C]) Unused(now int64) bool {
	return m.expiresAt != 0 && now >= m.expiresAt && len(m.consumers) == 0
}

// ---- purge and delete ----

// EachQueued calls fn for every ready (live) and delayed entry, so that a
// shell can record their removal before a Purge.
func (m *Machine[M, C]) EachQueued(fn func(*Entry[M])) {
	for i := range m.ready.levels {
		d := &m.ready.levels[i]
		for j := 0; j < d.Len(); j++ {
			if e := d.Ptr(j); !e.Dead {
				fn(e)
			}
		}
	}
	for i := range m.delayed {
		fn(&m.delayed[i].e)
	}
}

// Purge drops every ready, paged and delayed message and returns how
// many there were; nothing is dead-lettered (R3.1). Owed at-least-once
// dead letters go too (RabbitMQ 4.3).
func (m *Machine[M, C]) Purge() int {
	n := m.paged.All.N + m.ready.clear() + len(m.delayed)
	m.paged = Counts{}
	m.delayed, m.expiries = nil, nil
	m.dlxPending = 0
	return n
}

// Delete marks the machine deleted, drops its messages and returns how
// many there were and its consumers (for cancel notifications).
func (m *Machine[M, C]) Delete() (messages int, cs []*Consumer[M, C]) {
	m.deleted = true
	messages = m.Purge()
	cs = m.consumers
	m.consumers = nil
	return messages, cs
}

// Deleted reports whether Delete ran.
func (m *Machine[M, C]) Deleted() bool { return m.deleted }

// ---- queries ----

// Lengths are a machine's message counts.
type Lengths struct {
	Ready, Paged, Unacked Counts
	Delayed, DLXPending   int
}

// Lengths returns the message counts. Ready excludes Paged.
func (m *Machine[M, C]) Lengths() Lengths {
	return Lengths{Ready: m.ready.c, Paged: m.paged, Unacked: m.unacked, Delayed: len(m.delayed), DLXPending: m.dlxPending}
}

// PagedN is the number of paged-out messages.
func (m *Machine[M, C]) PagedN() int { return m.paged.All.N }

// Timed reports whether the time matters to the next command: the
// machine holds deadlines, delayed retries or a message TTL. A shell may
// pass 0 as the time otherwise.
func (m *Machine[M, C]) Timed() bool {
	return len(m.expiries) > 0 || len(m.delayed) > 0 || m.cfg.MessageTTL >= 0
}

// ReadyN is the number of ready messages in memory.
func (m *Machine[M, C]) ReadyN() int { return m.ready.c.All.N }

// ReadyBytes is the body bytes of the ready messages in memory.
func (m *Machine[M, C]) ReadyBytes() int64 { return m.ready.c.All.Bytes }

// Messages is the count queue.declare-ok reports: ready, paged and
// delayed.
func (m *Machine[M, C]) Messages() int { return int(m.length()) }

// Stats returns the counters.
func (m *Machine[M, C]) Stats() Stats { return m.stats }

// Walk calls fn for the live ready entries of level l from the first
// whose seq is above after, in order, until fn returns false. fn may
// TakeEntry the entry it is given, nothing else.
func (m *Machine[M, C]) Walk(l int, after uint64, fn func(*Entry[M]) bool) {
	d := &m.ready.levels[l]
	lo, hi := 0, d.Len()
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if d.Ptr(h).Seq <= after {
			lo = h + 1
		} else {
			hi = h
		}
	}
	for i := lo; i < d.Len(); i++ {
		if e := d.Ptr(i); !e.Dead && !fn(e) {
			return
		}
	}
}

// EachCheckedOut calls fn for every message checked out, by holder: the
// active consumers in order, removed ones, then the get holder.
func (m *Machine[M, C]) EachCheckedOut(fn func(c *Consumer[M, C], e *Entry[M])) {
	each := func(c *Consumer[M, C]) {
		for i := 0; i < c.out.Len(); i++ {
			if e := c.out.Ptr(i); !e.Dead {
				fn(c, e)
			}
		}
	}
	for _, c := range m.consumers {
		each(c)
	}
	for _, c := range m.holders {
		each(c)
	}
	each(&m.get)
}

// Restore loads recovered messages into an empty machine (the shell's
// recovery): ready entries in sequence order and delayed retries with
// their due times (their Level holding the message priority), the
// paged-out tail's counts and deadlines, and the sequence number to
// continue from.
func (m *Machine[M, C]) Restore(ready []Entry[M], delays []int64, delayedEs []Entry[M], paged Counts, pagedDeadlines []Timed, lastSeq uint64) {
	m.nextSeq = max(m.nextSeq, lastSeq)
	for _, e := range ready {
		e.Level = m.Level(e.Level)
		m.ready.push(e)
		if e.ExpiresAt != 0 {
			m.expiries = append(m.expiries, Timed{At: e.ExpiresAt, Seq: e.Seq, Level: e.Level})
		}
	}
	m.expiries = append(m.expiries, pagedDeadlines...)
	hinit(m.expiries, timedLess)
	m.paged = paged
	for i, e := range delayedEs {
		e.Level = m.Level(e.Level)
		m.delayed = append(m.delayed, delayed[M]{at: delays[i], e: e})
	}
	hinit(m.delayed, delayedLess[M])
}
