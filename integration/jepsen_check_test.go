package integration

// The checker of the Jepsen-style test (issue 14, must-show 1): a pure
// function of the history the workload recorded (every publish with its
// outcome, every delivery with its redelivered flag and what the consumer
// did with it, when consumer connections failed, which faults ran when).
// jepsen_test.go records histories from a real cluster under faults;
// jepsen_check_unit_test.go feeds the checker hand-made ones.
//
// The rules, as RabbitMQ's own Jepsen test and issue 14 state them:
//   - lost: a publish the broker confirmed (basic.ack) whose message no
//     consumer ever acked, in the source queue or (dead-letter variant)
//     in the DLQ after a reject. Must be empty.
//   - unexpected: a delivery of an id nobody published. Must be empty.
//     Likewise a DLQ delivery of an id the consumers never rejected (the
//     test sets no TTL, no length limit that dead-letters, no delivery
//     limit: a reject is the only way into the DLQ).
//   - duplicates: deliveries of an id after one of its earlier deliveries
//     (in the same queue) was acked. Each must be a redelivery: of all the
//     deliveries of an id in a queue, at most one may carry
//     redelivered=false (the broker's first hand-out; every later one it
//     knows it handed out before). The publishers never send an id twice,
//     so a second unflagged delivery is a copy the broker made (a resend
//     it did not dedup). The rule counts rather than orders: a consumer's
//     node may pass on an old leader's first delivery after the new
//     leader's redelivery of the same message, and that is no copy. In
//     the DLQ, at-least-once dead-lettering (R1.14) may publish a dead
//     letter again when the source's leader changed before the removal
//     committed: such copies are counted apart and must fall within a
//     fault.
//   - a duplicate whose earlier ack was sent on a connection that failed
//     later, or close to a fault, is counted as "ack possibly lost": the
//     ack travelled to a leader that died or was cut off before it
//     committed the removal, and the new leader redelivered the message.
//     Duplicates after an ack far from any fault are listed (they point at
//     acks dropped without a fault) but are not failures.
//
// Redeliveries after a requeue or after the consumer's connection was
// lost with the message unsettled are normal and counted apart.
//
// Expiring sources (issue 22, the dead-letter variant): queues with a
// message TTL, a DLX into the DLQ and no consumer, whose leader is paused
// while their messages expire. Their messages are expected in the DLQ
// without a reject. Each dead letter must arrive once, or again flagged
// redelivered: no exemption for faults here (a deposed leader must not
// dead-letter again what its successor did). A confirmed one that never
// arrives is lost under at-least-once; under at-most-once dead-lettering
// may drop it (R1.14), and it is counted apart.

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// jOutcome is what a publisher learned about one publish.
type jOutcome uint8

const (
	jPending   jOutcome = iota // no answer yet (never left in a finished history)
	jConfirmed                 // basic.ack: the broker took responsibility
	jNacked                    // basic.nack: refused (may still have been enqueued)
	jUnknown                   // connection lost or no confirm in time: either way
	jReturned                  // basic.return (mandatory, unroutable), then acked: not enqueued
)

// jPub is one publish.
type jPub struct {
	ID         string
	Queue      string // "" for the source; else an expiring source (jHistory.Expiring)
	Node       int    // the node the publisher was connected to
	Sent, Done time.Time
	Outcome    jOutcome
}

// jAction is what a consumer did with a delivery.
type jAction uint8

func (a jAction) String() string {
	return [...]string{"no", "ack", "requeue", "reject"}[a]
}

const (
	jNone    jAction = iota // not settled: the connection went first
	jAck                    // basic.ack
	jRequeue                // basic.nack requeue=true
	jReject                 // basic.reject requeue=false: dead-lettered
)

// jDel is one delivery a consumer received.
type jDel struct {
	ID           string
	Queue        string
	Node         int
	Conn         int // the consumer connection's serial (jHistory.Broken)
	At           time.Time
	Redelivered  bool
	Action       jAction
	SettleFailed bool // the settle call failed: it was not sent
}

// jFault is one fault the schedule applied, from its start to its end
// (heal, restart or resume).
type jFault struct {
	Kind, Target string
	Start, End   time.Time
}

// jHistory is everything the checker reads.
type jHistory struct {
	Source, DLQ string // DLQ is "" without dead-lettering
	Begin       time.Time
	Pubs        []jPub
	Dels        []jDel
	Broken      map[int]time.Time // consumer connections that failed, and when
	Faults      []jFault
	// Expiring: the expiring sources and their dead-letter strategy
	// ("at-most-once" or "at-least-once").
	Expiring map[string]string
}

// jAckRiskWindow: an ack sent this long before a fault started, or this
// long after it ended, may have been lost with the leader it went to.
const jAckRiskWindow = 10 * time.Second

// jFaultReport is one fault's line of the summary.
type jFaultReport struct {
	jFault
	// FirstConfirm is the time from the fault's start to the first
	// confirm of a publish sent after it (any publisher), -1 if none
	// until the fault ended: the queue's availability during the fault.
	FirstConfirm time.Duration
	// Recovered is the time from the fault's end to the first confirm of
	// a publish sent after that end, -1 if none.
	Recovered time.Duration
}

// jReport is the checker's verdict and the summary's counts.
type jReport struct {
	Published, Confirmed, Nacked, Unknown int
	Returned                              int // unroutable (the node did not know the queue)
	Deliveries, Consumed                  int // deliveries; distinct ids acked
	Requeued, Rejected                    int
	Redeliveries                          int // after a requeue or an unsettled delivery
	Lost, Unexpected                      []string
	LostDetail                            []string // the first lost ones' histories
	DeadLetteredUnrejected                []string
	Duplicates, DupRedelivered            int
	DupAckAtRisk                          int      // earlier ack possibly lost in a fault
	DupUnexplained                        []string // earlier ack far from any fault
	NotRedelivered                        []string // delivered again with redelivered=false
	Redeadlettered                        int      // DLQ copies made again during a fault (R1.14)
	Expired                               int      // confirmed into an expiring source
	ExpiredArrived                        int      // of which dead-lettered into the DLQ and acked there
	ExpiredDropped                        int      // confirmed, at-most-once, never in the DLQ
	NackedConsumed, UnknownConsumed       int
	Faults                                []jFaultReport
}

// checkJepsen checks a finished history.
func checkJepsen(h jHistory) *jReport {
	r := &jReport{}
	pubs := make(map[string]*jPub, len(h.Pubs))
	for i := range h.Pubs {
		p := &h.Pubs[i]
		pubs[p.ID] = p
		r.Published++
		switch p.Outcome {
		case jConfirmed:
			r.Confirmed++
		case jNacked:
			r.Nacked++
		case jReturned:
			r.Returned++
		default:
			r.Unknown++
		}
	}

	type key struct{ queue, id string }
	groups := map[key][]jDel{}
	rejected := map[string]time.Time{} // id -> first reject sent at the source
	consumed := map[string]bool{}
	delivered := map[string]bool{}
	unexpected := map[string]bool{}
	for _, d := range h.Dels {
		r.Deliveries++
		delivered[d.ID] = true
		if pubs[d.ID] == nil {
			unexpected[d.ID] = true
		}
		k := key{d.Queue, d.ID}
		groups[k] = append(groups[k], d)
		if d.SettleFailed {
			continue
		}
		switch d.Action {
		case jAck:
			consumed[d.ID] = true
		case jRequeue:
			r.Requeued++
		case jReject:
			r.Rejected++
			if d.Queue == h.Source {
				if t, ok := rejected[d.ID]; !ok || d.At.Before(t) {
					rejected[d.ID] = d.At
				}
			}
		}
	}
	r.Consumed = len(consumed)
	r.Unexpected = sortedKeys(unexpected)

	duringFault := func(from, to time.Time) bool {
		for _, f := range h.Faults {
			if !f.Start.After(to) && !f.End.Add(jAckRiskWindow).Before(from) {
				return true
			}
		}
		return false
	}
	ackAtRisk := func(d jDel) bool {
		if t, ok := h.Broken[d.Conn]; ok && !t.Before(d.At) {
			return true
		}
		for _, f := range h.Faults {
			if !d.At.Before(f.Start.Add(-jAckRiskWindow)) && !d.At.After(f.End.Add(jAckRiskWindow)) {
				return true
			}
		}
		return false
	}

	unrejected := map[string]bool{}
	keys := make([]key, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].queue != keys[j].queue {
			return keys[i].queue < keys[j].queue
		}
		return keys[i].id < keys[j].id
	})
	expiring := func(id string) bool { p := pubs[id]; return p != nil && p.Queue != "" && h.Expiring[p.Queue] != "" }
	for _, k := range keys {
		ds := groups[k]
		sort.SliceStable(ds, func(i, j int) bool { return ds[i].At.Before(ds[j].At) })
		inDLQ := h.DLQ != "" && k.queue == h.DLQ
		rejAt, wasRejected := rejected[k.id]
		if inDLQ && !wasRejected && pubs[k.id] != nil && !expiring(k.id) {
			unrejected[k.id] = true
		}
		var lastAck *jDel
		fresh := false // a delivery with redelivered=false seen
		for i := range ds {
			d := ds[i]
			if !d.Redelivered {
				if fresh {
					if inDLQ && wasRejected && duringFault(rejAt, d.At) {
						r.Redeadlettered++
					} else {
						r.NotRedelivered = append(r.NotRedelivered, fmt.Sprintf("%s in %s: delivery %d of %d at %s has redelivered=false, as an earlier one",
							k.id, k.queue, i+1, len(ds), jAt(h, d.At)))
					}
				}
				fresh = true
			}
			if i > 0 {
				if lastAck != nil {
					r.Duplicates++
					if d.Redelivered {
						r.DupRedelivered++
					}
					if ackAtRisk(*lastAck) {
						r.DupAckAtRisk++
					} else {
						r.DupUnexplained = append(r.DupUnexplained, fmt.Sprintf("%s in %s: acked at %s, delivered again at %s",
							k.id, k.queue, jAt(h, lastAck.At), jAt(h, d.At)))
					}
				} else {
					r.Redeliveries++
				}
			}
			if d.Action == jAck && !d.SettleFailed {
				lastAck = &ds[i]
			}
		}
	}
	r.DeadLetteredUnrejected = sortedKeys(unrejected)

	for i := range h.Pubs {
		p := &h.Pubs[i]
		switch {
		case p.Outcome == jConfirmed && expiring(p.ID):
			r.Expired++
			switch {
			case consumed[p.ID]:
				r.ExpiredArrived++
			case h.Expiring[p.Queue] == "at-most-once":
				r.ExpiredDropped++
			default:
				r.Lost = append(r.Lost, p.ID)
			}
		case p.Outcome == jConfirmed && !consumed[p.ID]:
			r.Lost = append(r.Lost, p.ID)
		case (p.Outcome == jNacked || p.Outcome == jReturned) && delivered[p.ID]:
			r.NackedConsumed++
		case (p.Outcome == jUnknown || p.Outcome == jPending) && delivered[p.ID]:
			r.UnknownConsumed++
		}
	}
	sort.Strings(r.Lost)
	for _, id := range r.Lost[:min(len(r.Lost), 10)] {
		p := pubs[id]
		n, last := 0, ""
		for _, k := range keys {
			if k.id == id {
				for _, d := range groups[k] {
					n++
					last = fmt.Sprintf("; last delivery in %s through n%d at %s, redelivered=%v, settled %v (failed %v)",
						d.Queue, d.Node+1, jAt(h, d.At), d.Redelivered, d.Action, d.SettleFailed)
				}
			}
		}
		r.LostDetail = append(r.LostDetail, fmt.Sprintf("%s: published through n%d at %s, confirmed at %s, %d deliveries%s",
			id, p.Node+1, jAt(h, p.Sent), jAt(h, p.Done), n, last))
	}

	// Confirm times, for each fault's recovery.
	type conf struct{ sent, done time.Time }
	var confs []conf
	for _, p := range h.Pubs {
		if p.Outcome == jConfirmed {
			confs = append(confs, conf{p.Sent, p.Done})
		}
	}
	sort.Slice(confs, func(i, j int) bool { return confs[i].done.Before(confs[j].done) })
	for _, f := range h.Faults {
		fr := jFaultReport{jFault: f, FirstConfirm: -1, Recovered: -1}
		for j := sort.Search(len(confs), func(i int) bool { return confs[i].done.After(f.Start) }); j < len(confs) && !confs[j].done.After(f.End); j++ {
			if confs[j].sent.After(f.Start) {
				fr.FirstConfirm = confs[j].done.Sub(f.Start)
				break
			}
		}
		for j := sort.Search(len(confs), func(i int) bool { return confs[i].done.After(f.End) }); j < len(confs); j++ {
			if confs[j].sent.After(f.End) {
				fr.Recovered = confs[j].done.Sub(f.End)
				break
			}
		}
		r.Faults = append(r.Faults, fr)
	}
	return r
}

// jAt is t as an offset from the history's beginning.
func jAt(h jHistory, t time.Time) string {
	if h.Begin.IsZero() {
		return t.Format("15:04:05.000")
	}
	return "+" + t.Sub(h.Begin).Round(time.Millisecond).String()
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Failures lists the violated rules, empty if the history is correct.
func (r *jReport) Failures() []string {
	var out []string
	list := func(what string, ids []string) {
		if len(ids) > 0 {
			out = append(out, fmt.Sprintf("%d %s, first: %s", len(ids), what, strings.Join(ids[:min(len(ids), 10)], "; ")))
		}
	}
	list("lost (confirmed, never consumed)", r.Lost)
	list("unexpected (consumed, never published)", r.Unexpected)
	list("dead-lettered without a reject", r.DeadLetteredUnrejected)
	list("delivered again without redelivered=true", r.NotRedelivered)
	return out
}

// String is the summary.
func (r *jReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "published %d: confirmed %d, nacked %d, returned unroutable %d, unknown %d (connection lost or no confirm in time)\n",
		r.Published, r.Confirmed, r.Nacked, r.Returned, r.Unknown)
	fmt.Fprintf(&b, "deliveries %d, consumed (distinct ids acked) %d, requeued %d, rejected %d, redeliveries after a requeue or an unsettled delivery %d\n",
		r.Deliveries, r.Consumed, r.Requeued, r.Rejected, r.Redeliveries)
	fmt.Fprintf(&b, "lost %d, unexpected %d, dead-lettered without a reject %d\n", len(r.Lost), len(r.Unexpected), len(r.DeadLetteredUnrejected))
	for _, s := range r.LostDetail {
		fmt.Fprintf(&b, "  lost %s\n", s)
	}
	fmt.Fprintf(&b, "duplicates (delivered again after an ack) %d: redelivered=true %d; earlier ack possibly lost in a fault %d, far from any fault %d; delivered again with redelivered=false %d\n",
		r.Duplicates, r.DupRedelivered, r.DupAckAtRisk, len(r.DupUnexplained), len(r.NotRedelivered))
	if r.DupAckAtRisk > 0 {
		fmt.Fprintf(&b, "  (an ack possibly lost: sent on a connection that failed later, or within %v of a fault; it went to a leader that died or was cut off before the removal committed, so the message stayed live and the new leader redelivered it)\n", jAckRiskWindow)
	}
	for _, s := range r.DupUnexplained[:min(len(r.DupUnexplained), 5)] {
		fmt.Fprintf(&b, "  duplicate far from any fault: %s\n", s)
	}
	if r.Expired > 0 {
		fmt.Fprintf(&b, "expired in a source whose leader was paused: %d confirmed, %d dead-lettered and acked, %d dropped (at-most-once)\n",
			r.Expired, r.ExpiredArrived, r.ExpiredDropped)
	}
	if r.Redeadlettered > 0 {
		fmt.Fprintf(&b, "dead letters published again during a fault (at-least-once, R1.14: the source's leader changed before the removal committed) %d\n", r.Redeadlettered)
	}
	fmt.Fprintf(&b, "nacked or returned but consumed %d, unknown but consumed %d\n", r.NackedConsumed, r.UnknownConsumed)
	fmt.Fprintf(&b, "faults applied %d:\n", len(r.Faults))
	dur := func(d time.Duration) string {
		if d < 0 {
			return "none"
		}
		return d.Round(time.Millisecond).String()
	}
	for _, f := range r.Faults {
		fmt.Fprintf(&b, "  %-14s %-12s for %-8s first confirm after start %-9s after end %s\n",
			f.Kind, f.Target, f.End.Sub(f.Start).Round(100*time.Millisecond), dur(f.FirstConfirm), dur(f.Recovered))
	}
	return b.String()
}
