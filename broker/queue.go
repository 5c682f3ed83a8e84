package broker

import (
	"sort"
	"sync"

	"github.com/warrenmq/warren/amqp"
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

type entry struct {
	seq         uint64
	msg         *Message
	redelivered bool
}

// readyList holds ready messages in delivery order: by priority level
// (highest first), then by sequence number.
type readyList struct {
	levels []deque[entry]
	n      int
	bytes  int64
}

func (r *readyList) level(m *Message) int {
	if len(r.levels) == 1 {
		return 0
	}
	p := int(m.Props.Priority)
	if p >= len(r.levels) {
		p = len(r.levels) - 1
	}
	return p
}

func (r *readyList) push(e entry) {
	r.levels[r.level(e.msg)].PushBack(e)
	r.n++
	r.bytes += int64(e.msg.Size())
}

// putBack returns a delivered message to its original position.
func (r *readyList) putBack(e entry) {
	d := &r.levels[r.level(e.msg)]
	i := sort.Search(d.Len(), func(i int) bool { return d.At(i).seq > e.seq })
	d.Insert(i, e)
	r.n++
	r.bytes += int64(e.msg.Size())
}

func (r *readyList) head() *deque[entry] {
	for i := len(r.levels) - 1; i >= 0; i-- {
		if r.levels[i].Len() > 0 {
			return &r.levels[i]
		}
	}
	return nil
}

func (r *readyList) pop() entry {
	e := r.head().PopFront()
	r.n--
	r.bytes -= int64(e.msg.Size())
	return e
}

func (r *readyList) clear() int {
	n := r.n
	for i := range r.levels {
		r.levels[i].Clear()
	}
	r.n, r.bytes = 0, 0
	return n
}

// QueueStats are a queue's counters.
type QueueStats struct {
	Ready, Unacked, Consumers                int
	ReadyBytes                               int64
	Published, Delivered, Acked, Redelivered uint64
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
	ready       readyList
	nextSeq     uint64
	consumers   []*Consumer
	rr          int
	unacked     int
	deleted     bool
	hadConsumer bool
	sac         bool
	stats       QueueStats
}

func newQueue(v *VHost, spec QueueSpec) *Queue {
	q := &Queue{vhost: v, Name: spec.Name, Durable: spec.Durable, Exclusive: spec.Exclusive, AutoDelete: spec.AutoDelete,
		Args: spec.Args, Config: ParseQueueArgs(spec.Args), bindings: map[*Binding]struct{}{}}
	if spec.Exclusive {
		q.Owner = spec.Owner
	}
	levels := 1
	if p, ok := IntArg(spec.Args["x-max-priority"]); ok && p > 0 {
		levels = int(min(p, 255)) + 1
	}
	q.ready.levels = make([]deque[entry], levels)
	if b, ok := spec.Args["x-single-active-consumer"].(bool); ok && b {
		q.sac = true
	}
	return q
}

// VHost returns the queue's vhost.
func (q *Queue) VHost() *VHost { return q.vhost }

// Stats returns a snapshot of the queue's counters.
func (q *Queue) Stats() QueueStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.stats
	s.Ready, s.Unacked, s.Consumers, s.ReadyBytes = q.ready.n, q.unacked, len(q.consumers), q.ready.bytes
	return s
}

// Counts returns the ready message and consumer counts, as queue.declare-ok reports them.
func (q *Queue) Counts() (messages, consumers int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ready.n, len(q.consumers)
}

// enqueue adds m and hands it to a consumer if one can take it.
func (q *Queue) enqueue(m *Message) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.deleted {
		return
	}
	q.stats.Published++
	q.nextSeq++
	q.ready.push(entry{seq: q.nextSeq, msg: m})
	q.dispatchLocked()
}

// Dispatch delivers ready messages to consumers that can take them. Sinks
// call it when they can take messages again.
func (q *Queue) Dispatch() {
	q.mu.Lock()
	q.dispatchLocked()
	q.mu.Unlock()
}

func (q *Queue) dispatchLocked() {
	for q.ready.n > 0 && len(q.consumers) > 0 {
		if !q.deliverOneLocked() {
			return
		}
	}
}

func (q *Queue) delivery(e *entry, tag string) Delivery {
	return Delivery{Queue: q, Msg: e.msg, Seq: e.seq, Redelivered: e.redelivered, ConsumerTag: tag}
}

// deliverOneLocked offers the head message to the consumers: the highest
// priority group first, round-robin within a group; with single active
// consumer only to the first consumer.
func (q *Queue) deliverOneLocked() bool {
	h := q.ready.head()
	e := h.Ptr(0)
	if q.sac {
		c := q.consumers[0]
		if !c.Sink.Deliver(c, q.delivery(e, c.Tag)) {
			return false
		}
		q.tookHeadLocked(c)
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
				q.tookHeadLocked(c)
				return true
			}
		}
		i = j
	}
	return false
}

func (q *Queue) tookHeadLocked(c *Consumer) {
	e := q.ready.pop()
	q.stats.Delivered++
	if e.redelivered {
		q.stats.Redelivered++
	}
	if !c.NoAck {
		q.unacked++
	} else {
		q.stats.Acked++
	}
}

// Get takes the head message for basic.get. ok is false when the queue is
// empty; remaining is the count left after the take.
func (q *Queue) Get(noAck bool) (d Delivery, remaining int, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ready.n == 0 || q.deleted {
		return Delivery{}, 0, false
	}
	e := q.ready.pop()
	q.stats.Delivered++
	if e.redelivered {
		q.stats.Redelivered++
	}
	if !noAck {
		q.unacked++
	} else {
		q.stats.Acked++
	}
	return q.delivery(&e, ""), q.ready.n, true
}

// Ack settles deliveries of this queue as done.
func (q *Queue) Ack(ds []Delivery) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.unacked -= len(ds)
	q.stats.Acked += uint64(len(ds))
}

// Reject settles deliveries as rejected without requeue: they are
// discarded (dead-lettering hooks in here).
func (q *Queue) Reject(ds []Delivery) {
	q.mu.Lock()
	q.unacked -= len(ds)
	q.mu.Unlock()
	if q.Config.DLX == nil {
		return
	}
	ms := make([]*Message, len(ds))
	for i, d := range ds {
		ms[i] = d.Msg
	}
	q.deadLetter(ms, ReasonRejected)
}

// Requeue returns deliveries to their original positions, marked
// redelivered, and dispatches them again.
func (q *Queue) Requeue(ds []Delivery) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.unacked -= len(ds)
	if q.deleted {
		return
	}
	for _, d := range ds {
		q.ready.putBack(entry{seq: d.Seq, msg: d.Msg, redelivered: true})
	}
	q.dispatchLocked()
}

// Purge drops all ready messages and returns how many there were.
func (q *Queue) Purge() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ready.clear()
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
	defer q.mu.Unlock()
	if q.deleted {
		return notFoundQueue(q.Name, q.vhost.Name)
	}
	if len(q.consumers) > 0 && (c.Exclusive || q.consumers[0].Exclusive) {
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
	if added != nil {
		added()
	}
	q.dispatchLocked()
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
	if !autoDelete && q.sac {
		q.dispatchLocked() // the next consumer may have become active
	}
	q.mu.Unlock()
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
// cancel notifications.
func (q *Queue) markDeleted() (messages int, cs []*Consumer) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.deleted = true
	messages = q.ready.clear()
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
