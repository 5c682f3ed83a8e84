package broker

import (
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// Dead-letter publishing off the caller's goroutine (issue 12).
//
// A message leaving a queue to be dead-lettered (rejected, expired, over a
// length limit or the delivery limit) goes to the queue's outbox under its
// lock (deadLocked). The queue's flusher, a goroutine started on demand by
// unlock and ending when the outbox is empty, copies, routes and enqueues
// the dead letters (deadLetterAs, dlmove.go): a consumer's basic.nack
// costs its connection's reader only the append, and the dead-lettering
// runs on another core.
//
// Order (R3.11): one flusher per queue at a time, taking the outbox whole,
// so dead letters leave in the order they left the queue, whichever
// goroutines (readers, the expiry timer) put them there. Nobody but a
// settling client waits for a flusher, and a flusher waits for nobody
// (dead-lettering into a queue starts that queue's flusher, it does not
// wait for it), so dead-lettering back into the same queue or round a
// cycle of queues cannot deadlock.
//
// Bound: the dead letters not yet published are counted per vhost
// (dead-lettering never leaves its vhost). A client call that feeds a
// queue with dead-lettering under way (a publish, Reject, Requeue) and
// finds dlBacklogLimit of them waits, no lock held, until the flushers
// bring the count under the limit: slow dead-lettering pushes back on the
// publishing or nacking connection's reader, as when that reader did the
// work itself. Flushers never wait (dead-lettering from one queue into
// another, which may trim that one into a third, feeds the count without
// waiting), so waiting cannot deadlock, and the count is bounded by the
// limit plus what single calls move at once (an expiry, a trim, a batch
// being published), which the inline publishing held too.
//
// Durability is the same as when the reader published: a dead letter of a
// durable queue stays in that queue's log until its move completes
// (dlmove.go), so a crash before the flusher ran leaves it in the source,
// as a crash just before the nack would. A clean shutdown drains: the
// message store's Close waits for every flusher (dlFlushers) before it
// closes the logs. A deleted queue's flusher publishes what its outbox
// held, as the reader did.

// dlBacklogLimit is how many dead letters may wait for the flushers of a
// vhost before the clients feeding them wait.
const dlBacklogLimit = 4096

// unlock releases q.mu, first starting the queue's flusher if dead letters
// are waiting and none runs. Every method that may dead-letter releases the
// lock with unlock (or unlockPaced).
func (q *Queue) unlock() {
	q.kickFlusherLocked()
	q.mu.Unlock()
}

// unlockPaced is unlock for client calls (publish, Reject, Requeue): if
// the queue is dead-lettering and its vhost's backlog is full, it waits,
// the lock released, for the flushers to work the backlog down. Never
// called on a flusher.
func (q *Queue) unlockPaced() {
	q.kickFlusherLocked()
	busy := q.dlFlusher.runningLocked() || len(q.rdl) > 0
	q.mu.Unlock()
	if busy && q.vhost.dlq.n.Load() >= dlBacklogLimit {
		q.vhost.dlq.wait()
	}
}

func (q *Queue) dlCondLocked() *sync.Cond {
	if q.dlCond == nil {
		q.dlCond = sync.NewCond(&q.mu)
	}
	return q.dlCond
}

// kickFlusherLocked starts the queue's flusher if dead letters wait and
// none runs: one flusher per queue at a time (R3.11).
func (q *Queue) kickFlusherLocked() {
	if len(q.outbox) > 0 && q.dlFlusher.startingLocked() {
		if ms := q.vhost.b.msgs; ms != nil {
			ms.dlFlushers.add()
		}
		go q.flush()
	}
}

// flush is the queue's flusher: it publishes the outbox, batch after
// batch, until it finds it empty.
func (q *Queue) flush() {
	if ms := q.vhost.b.msgs; ms != nil {
		defer ms.dlFlushers.done()
	}
	q.mu.Lock()
	for len(q.outbox) > 0 {
		out, n := q.outbox, q.outboxN
		q.outbox, q.outboxN, q.dlInFlight = nil, 0, n
		hook := q.dlHook
		q.mu.Unlock()
		if hook != nil {
			hook()
		}
		out = q.qqMarked(out)
		q.publishOutbox(out)
		q.vhost.dlq.done(int64(n))
		q.mu.Lock()
		q.dlInFlight = 0
		q.dlDone += uint64(n)
		if q.dlCond != nil {
			q.dlCond.Broadcast() // DeadLetterBarrier
		}
	}
	q.dlFlusher.stopLocked()
	if q.dlCond != nil {
		q.dlCond.Broadcast() // idle (waitDeadLetters)
	}
	q.mu.Unlock()
}

// publishOutbox dead-letters batches taken from the outbox. A panic is
// logged and ends the batch, never the broker: it is what the connection
// whose reader published used to survive with a 541. Messages of a
// durable queue it leaves unpublished stay in the queue's log.
func (q *Queue) publishOutbox(out []dlBatch) {
	defer func() {
		if r := recover(); r != nil {
			q.vhost.b.log.Error("panic dead-lettering; the batch is dropped", "queue", q.Name, "vhost", q.vhost.Name,
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	for _, b := range out {
		q.deadLetterAs(b.items, b.reason, b.dlx, b.dlrk)
	}
}

// waitDeadLetters waits until q's flusher has published every dead letter
// q held when called and gone idle (tests, and callers that must see the
// dead letters in their targets). Moves through the store (dlmove.go) may
// still be waiting for their syncs.
func (q *Queue) waitDeadLetters() {
	q.mu.Lock()
	for q.dlFlusher.runningLocked() || len(q.outbox) > 0 {
		q.kickFlusherLocked()
		q.dlCondLocked().Wait()
	}
	q.mu.Unlock()
}

// DeadLetterBarrier returns once the flusher has published (routed to
// their targets) the dead letters the queue held when called; later ones
// are not waited for, so a busy queue cannot hold the caller. A channel
// calls it before a method that changes routing (exchange and queue
// declare, bind, delete, purge), so that a message it rejected before
// is dead-lettered by the routing of that moment, as RabbitMQ's queue
// process does it: a reject, then the dead-letter exchange's declare on
// the same channel, drops the message (R3.2).
func (q *Queue) DeadLetterBarrier() {
	q.mu.Lock()
	target := q.dlQueued
	for q.dlDone < target {
		q.kickFlusherLocked()
		q.dlCondLocked().Wait()
	}
	q.mu.Unlock()
}

// dlBacklog counts a vhost's dead letters not yet published (in outboxes
// or being published) and holds the clients waiting for it to go down.
type dlBacklog struct {
	n       atomic.Int64
	mu      sync.Mutex
	waiting int  // guarded by mu
	closed  bool // guarded by mu: the broker is closing (release)
	low     *sync.Cond
}

// wait returns once the backlog is under dlBacklogLimit (or the broker
// closes: dead letters owed to another node may wait for it for ever).
func (b *dlBacklog) wait() {
	b.mu.Lock()
	for b.n.Load() >= dlBacklogLimit && !b.closed {
		if b.low == nil {
			b.low = sync.NewCond(&b.mu)
		}
		b.waiting++
		b.low.Wait()
		b.waiting--
	}
	b.mu.Unlock()
}

// release lets every waiter go, for good (Broker.close).
func (b *dlBacklog) release() {
	b.mu.Lock()
	b.closed = true
	if b.low != nil {
		b.low.Broadcast()
	}
	b.mu.Unlock()
}

// done takes n published dead letters off the backlog.
func (b *dlBacklog) done(n int64) {
	if b.n.Add(-n) >= dlBacklogLimit {
		return
	}
	b.mu.Lock()
	if b.waiting > 0 {
		b.low.Broadcast()
	}
	b.mu.Unlock()
}

// dlFlushers counts the running flushers of a broker with a message
// store, so that the store's Close can wait for them.
type dlFlushers struct {
	mu      sync.Mutex
	n       int
	waiting int // goroutines in wait (tests)
	idle    *sync.Cond
}

func (f *dlFlushers) add() {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
}

func (f *dlFlushers) done() {
	f.mu.Lock()
	f.n--
	if f.n == 0 && f.idle != nil {
		f.idle.Broadcast()
	}
	f.mu.Unlock()
}

// wait returns once no flusher runs.
func (f *dlFlushers) wait() {
	f.mu.Lock()
	for f.n > 0 {
		if f.idle == nil {
			f.idle = sync.NewCond(&f.mu)
		}
		f.waiting++
		f.idle.Wait()
		f.waiting--
	}
	f.mu.Unlock()
}

// SetDeadLetterHookForTest makes fn run on q's flusher before each batch
// of dead letters is published (nil: none); tests hold the flusher with
// it.
func (q *Queue) SetDeadLetterHookForTest(fn func()) {
	q.mu.Lock()
	q.dlHook = fn
	q.mu.Unlock()
}
