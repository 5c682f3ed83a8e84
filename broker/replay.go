package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/warrenmq/warren/amqp"
)

// Moving messages out of a queue and republishing them, as Go APIs (issue
// 12): the dead-letter replay, moves between queues, and the shovels of
// shovel.go. The management API's handlers only parse, call these and
// render; a program embedding Warren calls them directly.
//
// Each is an indirect path into other queues, so it checks what a client
// doing the same would need (issue 11: every indirect path checks the same
// permissions as the direct one): read on the source queue, and for each
// republish write on its exchange and, on a topic exchange, the topic
// permissions of its routing keys.

// Actor is who a replay, move or shovel acts for: a user, whose
// permissions are checked, or Trusted code (the program embedding Warren
// itself), which is not checked.
type Actor struct {
	user    string
	trusted bool
}

// AsUser is the Actor for the broker user name.
func AsUser(name string) Actor { return Actor{user: name} }

// Trusted is the Actor of the embedding program itself: no permission is
// checked.
var Trusted = Actor{trusted: true}

// User returns the user's name; "" for Trusted.
func (a Actor) User() string { return a.user }

// IsTrusted reports whether a is Trusted.
func (a Actor) IsTrusted() bool { return a.trusted }

// AccessRefusedError is a permission an Actor lacks, worded as RabbitMQ's
// 403 ACCESS_REFUSED.
type AccessRefusedError struct {
	VHost, Kind, Name, User string
}

func (e *AccessRefusedError) Error() string {
	return fmt.Sprintf("ACCESS_REFUSED - access to %s '%s' in vhost '%s' refused for user '%s'", e.Kind, e.Name, e.VHost, e.User)
}

// exchangeDisplay is the name RabbitMQ's errors give an exchange: the
// default exchange is "amq.default".
func exchangeDisplay(n string) string {
	if n == "" {
		return "amq.default"
	}
	return n
}

// authorize checks access a to the resource kind ("queue" or "exchange")
// name of v for act.
func (b *Broker) authorize(act Actor, v *VHost, a Access, kind, name string) error {
	if act.trusted || b.Check(act.user, v.Name, a, name) {
		return nil
	}
	return &AccessRefusedError{VHost: v.Name, Kind: kind, Name: name, User: act.user}
}

// authorizePublish checks a republish of m to exchange as act: write on
// the exchange, then the topic permissions of m's routing keys.
func (b *Broker) authorizePublish(act Actor, v *VHost, exchange string, m *Message) error {
	if act.trusted {
		return nil
	}
	if err := b.authorize(act, v, Write, "exchange", exchangeDisplay(exchange)); err != nil {
		return err
	}
	return b.CheckTopicPublish(act.user, v, exchange, m)
}

// OnRepublish sets the function told of each publish a replay, move or
// shovel makes (the exchange's publish counters of the stats): vhost,
// exchange ("" for the default one), and whether a queue took it. Set it
// once, before any such publish; nil stops the reports.
func (b *Broker) OnRepublish(fn func(vhost, exchange string, routed bool)) {
	if fn == nil {
		b.moves.onPublish.Store(nil)
		return
	}
	b.moves.onPublish.Store(&fn)
}

func (b *Broker) countRepublish(vhost, exchange string, routed bool) {
	if fn := b.moves.onPublish.Load(); fn != nil {
		(*fn)(vhost, exchange, routed)
	}
}

// MoveResult is what a replay or move did.
type MoveResult struct {
	// Moved counts the messages republished and removed from the source.
	Moved int
	// Skipped counts the messages examined and left in place (not
	// matching the filter, or expired).
	Skipped int
	// Failed counts the messages whose republish failed: they, and every
	// later one, are still in the source.
	Failed int
	// Err says why the move stopped early (nil when it did not): a
	// republish refused, unroutable or not known to be on disk, a
	// permission missing, or the context's end.
	Err error
	// Next is, for a stream, the offset after the last record read:
	// where a next replay goes on.
	Next uint64
}

// transferBatch is how many messages are republished before waiting for
// them to be on disk and acking them from the source; transferBudget is
// how many a Take examines while it holds the source queue.
const (
	transferBatch  = 256
	transferBudget = 4096
)

// transfer takes up to limit messages (0: all) from src, of those it held
// when it started, and republishes each that pick accepts; pick returns
// the exchange and the message to publish. Each message is acked from src
// only after its republish is on disk (for a persistent message in
// durable queues; routed in memory otherwise). Messages pick skips stay
// where they are, untouched, and are never read into memory for long
// (Queue.Take). A publish that fails (no such exchange, unroutable,
// refused by an overflow, not allowed to act) puts that message and every
// later one back and stops: nothing is lost half way.
func (b *Broker) transfer(ctx context.Context, act Actor, v *VHost, src *Queue, limit int,
	pick func(*Message) (string, *Message, bool)) (res MoveResult) {
	var pending []Delivery
	var waits Durability // what the republishes of pending wait for
	flush := func() bool {
		if len(pending) == 0 {
			return true
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := b.WaitDurable(wctx, waits)
		cancel()
		if err != nil {
			// Not known to be on disk: keep the originals, marked
			// redelivered (the republish may have gone through).
			src.Return(pending, true)
			res.Failed += len(pending)
			res.Moved -= len(pending)
			res.Err = err
			pending = nil
			waits.Reset()
			return false
		}
		src.Ack(pending)
		pending = pending[:0]
		waits.Reset()
		return true
	}
	var r Router
	var cur TakeCursor
	upto := src.LastSeq()
	matches := func(m *Message) bool { _, _, ok := pick(m); return ok }
	defer func() { res.Skipped = cur.Skipped }()
walk:
	for limit == 0 || res.Moved < limit {
		if ctx.Err() != nil {
			res.Err = ctx.Err()
			break
		}
		want := transferBatch
		if limit > 0 {
			want = min(want, limit-res.Moved)
		}
		ds, done := src.Take(&cur, want, transferBudget, upto, matches)
		for i, d := range ds {
			exchange, m, _ := pick(d.Msg)
			dur, err := b.republish(act, v, &r, exchange, m)
			if err == nil {
				waits.Add(dur)
				pending = append(pending, d)
				res.Moved++
				continue
			}
			res.Err = err
			// This one and the rest of the batch go back, in place.
			src.Return(ds[i:], false)
			res.Failed++
			break walk
		}
		if len(pending) >= transferBatch && !flush() {
			return res
		}
		if done {
			break
		}
	}
	flush()
	return res
}

// --- dead-letter replay ---

// hdrString reads a string header (longstr, or a raw value holding one).
func hdrString(h amqp.Table, key string) (string, bool) {
	switch v := h[key].(type) {
	case string:
		return v, true
	case []byte:
		return string(v), true
	case amqp.RawValue:
		if d, ok := v.Decode(); ok {
			switch x := d.(type) {
			case string:
				return x, true
			case []byte:
				return string(x), true
			}
		}
	}
	return "", false
}

// LastDeath is the event that put m where it is: x-death[0].
func (m *Message) LastDeath() (Death, bool) {
	if len(m.Deaths) == 0 {
		return Death{}, false
	}
	return m.Deaths[0], true
}

// FirstDeath is the first dead-lettering of m: the x-death entry of
// x-first-death-queue and -reason (the oldest entry when the headers are
// missing), and the exchange of x-first-death-exchange.
func (m *Message) FirstDeath() (Death, bool) {
	if len(m.Deaths) == 0 {
		return Death{}, false
	}
	d := m.Deaths[len(m.Deaths)-1]
	q, okq := hdrString(m.Props.Headers, "x-first-death-queue")
	r, okr := hdrString(m.Props.Headers, "x-first-death-reason")
	if okq && okr {
		for _, e := range m.Deaths {
			if e.Queue == q && e.Reason == r {
				d = e
				break
			}
		}
	}
	if x, ok := hdrString(m.Props.Headers, "x-first-death-exchange"); ok {
		d.Exchange = x
	}
	return d, true
}

// DeadFilter selects dead letters by the reason and source queue of their
// most recent death (the one that brought them to this queue); an empty
// field matches any.
type DeadFilter struct {
	Reason, SourceQueue string
}

// Match reports whether m passes f.
func (f DeadFilter) Match(m *Message) bool {
	if f.Reason == "" && f.SourceQueue == "" {
		return true
	}
	d, ok := m.LastDeath()
	return ok && (f.Reason == "" || d.Reason == f.Reason) && (f.SourceQueue == "" || d.Queue == f.SourceQueue)
}

// ReplayOptions selects what ReplayDeadLetters replays.
type ReplayOptions struct {
	// Limit is how many to replay at most; 0 replays every match.
	Limit int
	// Filter selects by the last death's reason and source queue.
	Filter DeadFilter
	// KeepHistory keeps the x-death history (and x-first-death-*,
	// x-last-death-* headers) on the replayed messages.
	KeepHistory bool
	// From and Since choose where the replay of a stream starts (a
	// stream keeps its dead letters: they are read, not removed): the
	// record offset From, or the first chunk written at or after Since;
	// its first record when neither is set.
	From  *uint64
	Since time.Time
}

// ErrUnknownReason is ReplayDeadLetters' answer to a filter on a reason
// that is none of the dead-letter reasons.
var ErrUnknownReason = errors.New("unknown dead-letter reason (rejected, expired, maxlen or delivery_limit)")

// ReplayDeadLetters republishes the dead letters of q, in order, each to
// where it was first dead-lettered from (ReplayMessage), as act: read on
// q is checked first (an *AccessRefusedError, nothing moved), then each
// republish as a client's publish would be. Each is removed from q only
// once its republish is on disk where that matters; the first republish
// that fails stops the replay and leaves it and every later message in
// place, with the reason in MoveResult.Err. Messages the filter skips, or
// that are no dead letters, stay where they are.
func (b *Broker) ReplayDeadLetters(ctx context.Context, act Actor, v *VHost, q *Queue, o ReplayOptions) (MoveResult, error) {
	switch o.Filter.Reason {
	case "", ReasonRejected, ReasonExpired, ReasonMaxLen, ReasonDeliveryLimit:
	default:
		return MoveResult{}, ErrUnknownReason
	}
	if o.Limit < 0 {
		return MoveResult{}, errors.New("replay limit must not be negative")
	}
	if err := b.authorize(act, v, Read, "queue", q.Name); err != nil {
		return MoveResult{}, err
	}
	if q.IsStream() {
		return b.replayStream(ctx, act, v, q, o), nil
	}
	return b.transfer(ctx, act, v, q, o.Limit, func(m *Message) (string, *Message, bool) {
		if !o.Filter.Match(m) {
			return "", nil, false
		}
		return ReplayMessage(m, o.KeepHistory)
	}), nil
}

// republish publishes m to exchange as act, checked as a client's
// publish, for a replay or a move: what its confirm waits for, or why it
// did not take (refused, failed, unroutable, rejected by overflow).
func (b *Broker) republish(act Actor, v *VHost, r *Router, exchange string, m *Message) (Durability, error) {
	if err := b.authorizePublish(act, v, exchange, m); err != nil {
		return Durability{}, err
	}
	pr, err := v.Publish(r, exchange, m)
	if err != nil {
		return Durability{}, err
	}
	b.countRepublish(v.Name, exchange, pr.Routed > 0)
	switch {
	case pr.Failed:
		return Durability{}, errors.New("the message could not be written to disk")
	case pr.Routed == 0:
		return Durability{}, fmt.Errorf("no queue bound to exchange '%s' takes routing key '%s'", exchangeDisplay(exchange), m.RoutingKey)
	case pr.Rejected:
		return Durability{}, fmt.Errorf("a queue bound to exchange '%s' refused the message (overflow reject-publish)", exchangeDisplay(exchange))
	}
	return pr.Durable, nil
}

// ReplayMessage is the message to republish for dead letter m: to the
// exchange of its first death, with the routing keys of that death (the
// first as routing key, the others as CC), and, unless keep, without its
// dead-letter history. Its per-message TTL is not restored (dead-lettering
// removed it): a replayed message that died of a short TTL would
// otherwise die again on arrival. ok is false for a message that is no
// dead letter.
func ReplayMessage(m *Message, keep bool) (exchange string, out *Message, ok bool) {
	d, ok := m.FirstDeath()
	if !ok || len(d.RoutingKeys) == 0 {
		return "", nil, false
	}
	out = &Message{Exchange: d.Exchange, RoutingKey: d.RoutingKeys[0], Props: m.Props, Body: m.Body}
	h := make(amqp.Table, len(m.Props.Headers))
	for k, val := range m.Props.Headers {
		if !keep && (k == "x-death" || strings.HasPrefix(k, "x-first-death-") || strings.HasPrefix(k, "x-last-death-")) {
			continue
		}
		h[k] = val
	}
	if keep {
		out.Deaths = m.Deaths
	}
	if len(d.RoutingKeys) > 1 {
		cc := make([]any, 0, len(d.RoutingKeys)-1)
		for _, k := range d.RoutingKeys[1:] {
			cc = append(cc, k)
		}
		h["CC"] = cc
	}
	out.Props.Headers = h
	return d.Exchange, out, true
}

// --- moves ---

// MoveTarget is where a move republishes: to a queue (through the default
// exchange, with the queue's name as routing key), or to an exchange.
type MoveTarget struct {
	// Queue, when not "", is the destination queue; Exchange and
	// RoutingKey are then ignored.
	Queue string
	// Exchange is the destination exchange ("" is the default one).
	Exchange string
	// RoutingKey, when not nil, replaces each message's routing key.
	RoutingKey *string
}

// exchange is the exchange the move publishes to.
func (t MoveTarget) exchange() string {
	if t.Queue != "" {
		return ""
	}
	return t.Exchange
}

// message is m as the move republishes it.
func (t MoveTarget) message(m *Message) *Message {
	out := *m
	out.Exchange = t.exchange()
	switch {
	case t.Queue != "":
		out.RoutingKey = t.Queue
	case t.RoutingKey != nil:
		out.RoutingKey = *t.RoutingKey
	}
	return &out
}

// authorizeMove checks a move from src to t as act: read on the source
// queue, write on the destination exchange.
func (b *Broker) authorizeMove(act Actor, v *VHost, src string, t MoveTarget) error {
	if err := b.authorize(act, v, Read, "queue", src); err != nil {
		return err
	}
	return b.authorize(act, v, Write, "exchange", exchangeDisplay(t.exchange()))
}

// MoveMessages moves up to limit messages (0: all it holds now) from src
// to t, in order, as act: read on src and write on the destination
// exchange are checked first (an *AccessRefusedError, nothing moved), and
// each republish as a client's publish would be. The guarantees are
// ReplayDeadLetters': a message leaves src only once the destination has
// it (on disk where that matters), and the first failure stops the move
// with every later message still in src.
func (b *Broker) MoveMessages(ctx context.Context, act Actor, v *VHost, src *Queue, t MoveTarget, limit int) (MoveResult, error) {
	if limit < 0 {
		return MoveResult{}, errors.New("move limit must not be negative")
	}
	if err := b.authorizeMove(act, v, src.Name, t); err != nil {
		return MoveResult{}, err
	}
	return b.transfer(ctx, act, v, src, limit, func(m *Message) (string, *Message, bool) {
		return t.exchange(), t.message(m), true
	}), nil
}
