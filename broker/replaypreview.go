package broker

import (
	"errors"
	"fmt"
)

// The replay's dry run (issue 15): what ReplayDeadLetters would do with
// the dead letters of a queue now, moving nothing. It reads the messages
// as a browse does, and for each replayed one routes its republish
// without delivering it, after the permission checks the replay makes.

// Replay outcomes of one dead letter (ReplayStep.Status).
const (
	// ReplayRoutes: republished, it reaches ReplayStep.Queues.
	ReplayRoutes = "routed"
	// ReplayUnroutable: its exchange routes it to no queue; the replay
	// stops there.
	ReplayUnroutable = "unroutable"
	// ReplayNoExchange: the exchange it would go to does not exist.
	ReplayNoExchange = "no_exchange"
	// ReplayRefused: the user may not publish it there (write on the
	// exchange, topic permissions, an internal exchange).
	ReplayRefused = "access_refused"
	// ReplayBlocked: an earlier message's replay would fail and stop the
	// replay before this one; it would stay in the queue.
	ReplayBlocked = "blocked"
)

// ReplayStep is the dry run's answer for one dead letter the replay
// would take.
type ReplayStep struct {
	// Position is the message's place among the queue's ready messages.
	Position int
	Msg      *Message
	// First is the death the replay goes back to.
	First Death
	// Exchange and RoutingKeys are where it would be republished.
	Exchange    string
	RoutingKeys []string
	// Queues are the queues the republish would reach now (ReplayRoutes).
	Queues []string
	// Delayed: the exchange is an x-delayed-message exchange that would
	// hold the message for its x-delay first; Queues are where it goes
	// after the delay, if the bindings stay.
	Delayed bool
	Status  string
	// Err says why a message would not be replayed.
	Err string
}

// ReplayPreview sums a dry run.
type ReplayPreview struct {
	// Matched counts the dead letters the replay would take (those
	// visited), Skipped those it would leave (filter, no dead letter,
	// expired), Scanned the messages read.
	Matched, Skipped, Scanned int
	// Truncated: the queue holds more than the budget read.
	Truncated bool
}

// PreviewReplay answers what ReplayDeadLetters(act, v, q, o) would do
// now, moving nothing: read on q is checked first, as the replay does
// (an *AccessRefusedError); then fn is called, in order, for each dead
// letter the replay would take, among the first budget messages of q.
// Each republish is checked as the replay would check it; one refused
// shows no routing. After the first one that would fail, the others are
// ReplayBlocked. A republish refused by a full queue (overflow
// reject-publish) is not predicted.
func (b *Broker) PreviewReplay(act Actor, v *VHost, q *Queue, o ReplayOptions, budget int, fn func(ReplayStep)) (ReplayPreview, error) {
	switch o.Filter.Reason {
	case "", ReasonRejected, ReasonExpired, ReasonMaxLen, ReasonDeliveryLimit:
	default:
		return ReplayPreview{}, ErrUnknownReason
	}
	if o.Limit < 0 {
		return ReplayPreview{}, errors.New("replay limit must not be negative")
	}
	if err := b.authorize(act, v, Read, "queue", q.Name); err != nil {
		return ReplayPreview{}, err
	}
	// Read first, route after: Browse holds q's lock while it calls.
	type seen struct {
		pos int
		msg *Message
	}
	var msgs []seen
	var res ReplayPreview
	now := b.clock.Now().UnixMilli()
	pos := 0
	q.Browse(0, func(br Browsed) bool {
		if o.Limit > 0 && len(msgs) >= o.Limit {
			return false // the replay stops there too
		}
		if res.Scanned >= budget {
			res.Truncated = true
			return false
		}
		res.Scanned++
		p := pos
		pos++
		if br.ExpiresAt != 0 && br.ExpiresAt <= now {
			res.Skipped++
			return true
		}
		if !o.Filter.Match(br.Msg) {
			res.Skipped++
			return true
		}
		if _, _, ok := ReplayMessage(br.Msg, o.KeepHistory); !ok {
			res.Skipped++
			return true
		}
		msgs = append(msgs, seen{p, br.Msg})
		return true
	})
	failed := false
	r := Router{preview: true}
	for _, s := range msgs {
		res.Matched++
		exchange, out, _ := ReplayMessage(s.msg, o.KeepHistory)
		first, _ := s.msg.FirstDeath()
		st := ReplayStep{Position: s.pos, Msg: s.msg, First: first, Exchange: exchange}
		r.keys = append(r.keys[:0], out.RoutingKey)
		r.keys = appendKeys(r.keys, out.Props.Headers["CC"])
		st.RoutingKeys = append([]string(nil), r.keys...)
		if failed {
			st.Status = ReplayBlocked
			fn(st)
			continue
		}
		if err := b.authorizePublish(act, v, exchange, out); err != nil {
			st.Status, st.Err = ReplayRefused, err.Error()
		} else {
			v.mu.RLock()
			x := v.exchanges[exchange]
			switch {
			case x == nil:
				st.Status, st.Err = ReplayNoExchange, notFoundExchange(exchange, v.Name).Error()
			case x.Internal:
				st.Status = ReplayRefused
				st.Err = fmt.Sprintf("cannot publish to internal exchange '%s' in vhost '%s'", exchange, v.Name)
			default:
				if x.delayed != nil {
					_, st.Delayed = delayMillis(out.Props.Headers)
				}
				r.queues = r.queues[:0]
				v.routeLocked(&r, x, out)
				for _, t := range r.queues {
					st.Queues = append(st.Queues, t.Name)
				}
				clear(r.queues)
				st.Status = ReplayRoutes
				if len(st.Queues) == 0 {
					st.Status = ReplayUnroutable
					st.Err = fmt.Sprintf("no queue bound to exchange '%s' takes routing key '%s'", exchangeDisplay(exchange), out.RoutingKey)
				}
			}
			v.mu.RUnlock()
		}
		failed = st.Status != ReplayRoutes
		fn(st)
	}
	return res, nil
}
