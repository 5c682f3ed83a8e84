package broker

// The x-delayed-message exchange type, compatible with the community plugin
// rabbitmq-delayed-message-exchange (v4.x; behaviours and their sources are
// listed below).
//
// Declaration: the argument x-delayed-type (a string) names the type that
// routes for the exchange: direct, fanout, topic or headers. A missing or
// non-string x-delayed-type is refused with 406 "Invalid argument,
// 'x-delayed-type' must be an existing exchange type", x-delayed-message
// itself with 406 "Invalid argument, 'x-delayed-message' can't be used for
// 'x-delayed-type'", and an unknown type with the error Warren gives for an
// unknown exchange.declare type (the plugin calls the same check_type).
// Bindings are validated, and redeclarations compared, as for the routing
// type (only alternate-exchange is compared).
//
// Publishing: a message whose x-delay header is a number of milliseconds D
// with 0 < D <= 2^32-1 is held by the exchange and routed when D has
// elapsed; any other message (no x-delay, D <= 0, D beyond the plugin's
// Erlang timer limit of 2^32-1 ms, or an x-delay of another type) is routed
// at once with the routing type's semantics. Integers of every width count,
// floats are truncated towards zero, and strings holding a decimal integer
// are parsed. A held message is routed with its x-delay header replaced by
// the 64-bit integer -D, so that a consumer can tell it was delayed and a
// further delayed exchange does not hold it again.
//
// Routing at the due time goes through the exchange like a publish does:
// its bindings as they are then, exchange-to-exchange bindings, and the
// alternate exchange when nothing matches. Messages due at the same instant
// are routed in the order they reached the exchange. A held message counts
// as routed to no queue at publish time: the publisher confirm is sent at
// once, and a mandatory publish is returned with 312 NO_ROUTE even though
// the message is delivered later, exactly as with the plugin (issues 7 and
// 136 of rabbitmq-delayed-message-exchange).
//
// Timing costs one min-heap of (due time, arrival order) and one timer of
// the broker's clock per delayed exchange, re-armed for the earliest due
// time, whatever the number of held messages.
//
// Differences from the plugin, on purpose:
//   - The alternate exchange receives a held message only if nothing
//     matches at the due time; the plugin sends every delayed message to
//     the alternate exchange at once (its issue 36, acknowledged as a bug).
//   - Deleting the exchange (or its vhost) drops its held messages; the
//     plugin keeps them and delivers them if an exchange of the same name
//     exists again at the due time.
//   - A string x-delay that is not a decimal integer routes at once; the
//     plugin's conversion crashes the channel. A signed-byte (int8) x-delay
//     is honoured, as the plugin did before 3.13.
//
// A durable delayed exchange keeps its persistent held messages in a log of
// the message store (delayedstore.go), like the plugin's node-local Mnesia
// table: they survive a restart and a crash, and the publisher's confirm
// waits for the disk.

import (
	"container/heap"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/clock"
)

// KindDelayed is the exchange type of the delayed message exchange.
const KindDelayed = "x-delayed-message"

// maxDelayMillis is the longest delay the plugin honours (?ERL_MAX_T, the
// longest Erlang timer); a longer x-delay routes at once.
const maxDelayMillis = 1<<32 - 1

// delayedTypeArg names the routing type of a delayed exchange.
const delayedTypeArg = "x-delayed-type"

// validateDelayedArgs checks the arguments of a new delayed exchange as the
// plugin's validate/1 does.
func validateDelayedArgs(args amqp.Table) error {
	t, ok := delayedType(args)
	switch {
	case t == KindDelayed:
		return amqp.Errorf(amqp.PreconditionFailed, "Invalid argument, '%s' can't be used for '%s'", KindDelayed, delayedTypeArg)
	case !ok:
		return amqp.Errorf(amqp.PreconditionFailed, "Invalid argument, '%s' must be an existing exchange type", delayedTypeArg)
	case !validKind(t):
		return amqp.ConnErrorf(amqp.CommandInvalid, "unknown exchange type '%s'", t)
	}
	return nil
}

// delayedType returns the x-delayed-type argument if it is a string (a
// longstr or a byte array, both Erlang binaries).
func delayedType(args amqp.Table) (string, bool) {
	switch t := args[delayedTypeArg].(type) {
	case string:
		return t, true
	case []byte:
		return string(t), true
	}
	return "", false
}

// delayMillis returns the delay a message asks for, and whether the plugin
// would hold it: its x-delay header, as an integer, is in 1..2^32-1.
func delayMillis(h amqp.Table) (int64, bool) {
	v, ok := h["x-delay"]
	if !ok {
		return 0, false
	}
	var d int64
	switch n := v.(type) {
	case int8, uint8, int16, uint16, int32, uint32, int64:
		d, _ = IntArg(n)
	case float32:
		d, ok = truncMillis(float64(n))
	case float64:
		d, ok = truncMillis(n)
	case string:
		d, ok = parseMillis(n)
	case []byte:
		d, ok = parseMillis(string(n))
	default:
		return 0, false
	}
	return d, ok && d > 0 && d <= maxDelayMillis
}

func truncMillis(f float64) (int64, bool) {
	t := math.Trunc(f)
	if math.IsNaN(t) || t < math.MinInt64 || t >= math.MaxInt64 {
		return 0, false
	}
	return int64(t), true
}

func parseMillis(s string) (int64, bool) {
	d, err := strconv.ParseInt(s, 10, 64)
	return d, err == nil
}

// delayedState holds the messages a delayed exchange is delaying.
type delayedState struct {
	x     *Exchange
	clock clock.Clock

	// fire serialises the timer callbacks so that the messages of one
	// firing are routed before those of the next.
	fire sync.Mutex

	// mu guards the fields below. It is taken under the vhost's lock (at
	// publish) or alone (in the timer callback), never the other way round.
	mu      sync.Mutex
	pending heldHeap
	seq     uint64
	timer   clock.Timer // nil when none is armed
	timerAt time.Time
	gen     uint64 // identifies the armed timer
	dropped bool
	disk    *qdisk // held persistent messages of a durable exchange; nil otherwise
}

type heldEntry struct {
	due    time.Time
	seq    uint64
	msg    *Message
	seg    uint32 // the log segment of its record, when ondisk
	ondisk bool
}

// heldHeap is a min-heap of entries by due time, then arrival order.
type heldHeap []heldEntry

func (h heldHeap) Len() int { return len(h) }
func (h heldHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].seq < h[j].seq
}
func (h heldHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *heldHeap) Push(x any)   { *h = append(*h, x.(heldEntry)) }
func (h *heldHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = heldEntry{}
	*h = old[:len(old)-1]
	return e
}

func newDelayedState(x *Exchange) *delayedState {
	return &delayedState{x: x, clock: x.vhost.b.clock}
}

// MessagesDelayed is the number of messages a delayed exchange holds (the
// plugin's messages_delayed); 0 for other exchanges.
func (x *Exchange) MessagesDelayed() int {
	d := x.delayed
	if d == nil {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.pending)
}

// DelayedType is the routing type (x-delayed-type) of a delayed exchange,
// or "" for other exchanges.
func (x *Exchange) DelayedType() string {
	if x.delayed == nil {
		return ""
	}
	return x.route
}

// hold keeps m until its x-delay has elapsed, if it asks for a delay. It
// reports whether it did. The caller holds the vhost's lock (read or write).
func (d *delayedState) hold(m *Message, r *Router) bool {
	if m.Props.Headers == nil {
		return false
	}
	ms, ok := delayMillis(m.Props.Headers)
	if !ok {
		return false
	}
	// The message routed later is a copy with x-delay set to -D; the body,
	// history and BCC keys are shared (they are never modified).
	c := *m
	h := make(amqp.Table, len(m.Props.Headers))
	for k, v := range m.Props.Headers {
		h[k] = v
	}
	h["x-delay"] = -ms
	c.Props.Headers = h

	now := d.clock.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dropped {
		return true
	}
	d.seq++
	e := heldEntry{due: now.Add(time.Duration(ms) * time.Millisecond), seq: d.seq, msg: &c}
	d.persistLocked(&e, r)
	heap.Push(&d.pending, e)
	d.armLocked(now)
	return true
}

// armLocked makes sure that one timer is armed for the earliest due time,
// or none if nothing is held.
func (d *delayedState) armLocked(now time.Time) {
	if len(d.pending) == 0 || d.dropped {
		d.stopLocked()
		return
	}
	at := d.pending[0].due
	if d.timer != nil && !at.Before(d.timerAt) {
		return
	}
	d.stopLocked()
	d.gen++
	gen := d.gen
	d.timerAt = at
	d.timer = d.clock.AfterFunc(max(at.Sub(now), 0), func() { d.fired(gen) })
}

func (d *delayedState) stopLocked() {
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
}

// fired routes the messages that are due, in due order, and re-arms the
// timer. A callback of a timer that was replaced finds nothing due or
// routes what is due early, which is harmless.
func (d *delayedState) fired(gen uint64) {
	d.fire.Lock()
	defer d.fire.Unlock()
	d.mu.Lock()
	if gen == d.gen {
		d.timer = nil
	}
	now := d.clock.Now()
	var due []*Message
	var done []heldEntry
	for len(d.pending) > 0 && !d.pending[0].due.After(now) {
		e := heap.Pop(&d.pending).(heldEntry)
		due = append(due, e.msg)
		if e.ondisk {
			done = append(done, e)
		}
	}
	d.armLocked(now)
	d.mu.Unlock()
	if len(due) > 0 {
		d.released(done, d.x.vhost.routeDelayed(d.x, due))
	}
}

// drop forgets the held messages and stops the timer, for good: the
// exchange is being deleted. The caller holds the vhost's write lock.
func (d *delayedState) drop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dropped = true
	d.stopLocked()
	clear(d.pending)
	d.pending = nil
	if d.disk != nil {
		d.disk.close(true)
	}
}

// routeDelayed routes messages whose delay has elapsed through x, as a
// publish to x would, unless x has been deleted meanwhile. It takes the
// vhost's lock per message and enqueues without it.
// It returns what the messages' durability waits for.
func (v *VHost) routeDelayed(x *Exchange, ms []*Message) Durability {
	var r Router
	for _, m := range ms {
		r.keys = m.routingKeys(r.keys[:0])
		r.queues = r.queues[:0]
		v.mu.RLock()
		if x.deleted {
			v.mu.RUnlock()
			return v.b.durability(r.logs)
		}
		v.routeLocked(&r, x, m)
		v.mu.RUnlock()
		for _, q := range r.queues {
			q.enqueue(m, &r)
		}
	}
	return v.b.durability(r.logs)
}
