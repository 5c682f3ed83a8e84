package broker

import (
	"encoding/binary"
	"time"

	"github.com/warrenmq/warren/amqp"
)

// Dead-letter reasons (R3.1).
const (
	ReasonRejected      = "rejected"
	ReasonExpired       = "expired"
	ReasonMaxLen        = "maxlen"
	ReasonDeliveryLimit = "delivery_limit"
)

// Death is one entry of a message's dead-letter history: every time it
// was dead-lettered from Queue for Reason (R3.4). Time, Exchange,
// RoutingKeys and OriginalExpiration describe the first such event.
type Death struct {
	Queue              string
	Reason             string
	Count              int64
	Time               time.Time
	Exchange           string
	RoutingKeys        []string
	OriginalExpiration string
	HasExpiration      bool
}

// recordDeath returns the history after one more dead-lettering of m from
// queue for reason: an existing {queue, reason} entry has its count
// raised and moves to the front, otherwise a new entry is prepended. The
// input history is not modified.
func recordDeath(history []Death, m *Message, queue, reason string, now time.Time) []Death {
	out := make([]Death, 0, len(history)+1)
	for i, d := range history {
		if d.Queue == queue && d.Reason == reason {
			d.Count++
			d.RoutingKeys = append([]string(nil), d.RoutingKeys...)
			out = append(out, d)
			out = append(out, history[:i]...)
			return append(out, history[i+1:]...)
		}
	}
	keys := []string{m.RoutingKey}
	if m.Props.Headers != nil {
		keys = appendKeys(keys, m.Props.Headers["CC"])
	}
	d := Death{Queue: queue, Reason: reason, Count: 1, Time: now.Truncate(time.Second), Exchange: m.Exchange, RoutingKeys: keys}
	if m.Props.Flags&amqp.FlagExpiration != 0 || m.Props.Expiration != "" {
		d.OriginalExpiration, d.HasExpiration = m.Props.Expiration, true
	}
	out = append(out, d)
	return append(out, history...)
}

// deathsTable encodes the history as RabbitMQ's x-death header (R3.4): an
// array of tables, written straight to the wire form (one allocation; keys
// in the sorted order amqp.AppendTable uses, so the bytes are the same).
func deathsTable(history []Death) amqp.RawValue {
	n := 16
	for _, d := range history {
		n += 160 + len(d.Queue) + len(d.Exchange) + len(d.OriginalExpiration)
		for _, k := range d.RoutingKeys {
			n += 5 + len(k)
		}
	}
	b := make([]byte, 0, n)
	b = append(b, 'A', 0, 0, 0, 0)
	for _, d := range history {
		b = append(b, 'F', 0, 0, 0, 0)
		t := len(b)
		b = amqp.AppendShortstrKey(b, "count")
		b = binary.BigEndian.AppendUint64(append(b, 'l'), uint64(d.Count))
		b = amqp.AppendStringValue(amqp.AppendShortstrKey(b, "exchange"), d.Exchange)
		if d.HasExpiration {
			b = amqp.AppendStringValue(amqp.AppendShortstrKey(b, "original-expiration"), d.OriginalExpiration)
		}
		b = amqp.AppendStringValue(amqp.AppendShortstrKey(b, "queue"), d.Queue)
		b = amqp.AppendStringValue(amqp.AppendShortstrKey(b, "reason"), d.Reason)
		b = append(amqp.AppendShortstrKey(b, "routing-keys"), 'A', 0, 0, 0, 0)
		a := len(b)
		for _, k := range d.RoutingKeys {
			b = amqp.AppendStringValue(b, k)
		}
		binary.BigEndian.PutUint32(b[a-4:], uint32(len(b)-a))
		b = amqp.AppendShortstrKey(b, "time")
		b = binary.BigEndian.AppendUint64(append(b, 'T'), uint64(d.Time.Unix()))
		binary.BigEndian.PutUint32(b[t-4:], uint32(len(b)-t))
	}
	binary.BigEndian.PutUint32(b[1:], uint32(len(b)-5))
	return amqp.RawValue(b)
}

// deadLetterCopy returns the message to publish to the dead-letter
// exchange when m leaves queue for reason (R2.6, R3.3 to R3.7, R3.10):
// body and properties are kept except expiration; the broker's own death
// history replaces any client-set x-death; x-first-death-* are set at the
// first event and x-last-death-* at every event; the routing key becomes
// the dead-letter routing key when one is set. The copy shares m's body.
func deadLetterCopy(m *Message, queue, reason, dlx string, dlrk *string, now time.Time) *Message {
	return deadLetterCopyBoxed(m, queue, any(queue), reason, dlx, dlrk, now)
}

// deadLetterCopyBoxed is deadLetterCopy with the queue name boxed once by
// the caller, for a batch.
func deadLetterCopyBoxed(m *Message, queue string, qv any, reason, dlx string, dlrk *string, now time.Time) *Message {
	history := recordDeath(m.Deaths, m, queue, reason, now)
	c := &Message{Exchange: dlx, RoutingKey: m.RoutingKey, Props: m.Props, Body: m.Body, Deaths: history, BCC: m.BCC}
	if dlrk != nil {
		c.RoutingKey = *dlrk
	}
	c.Props.Expiration = ""
	c.Props.Flags &^= amqp.FlagExpiration
	h := make(amqp.Table, len(m.Props.Headers)+7)
	for k, v := range m.Props.Headers {
		h[k] = v
	}
	h["x-death"] = deathsTable(history)
	// Each value is boxed once and shared by the first and last headers.
	rv, xv := reasonValue(reason), any(m.Exchange)
	if len(m.Deaths) == 0 {
		h["x-first-death-queue"] = qv
		h["x-first-death-reason"] = rv
		h["x-first-death-exchange"] = xv
	}
	h["x-last-death-queue"] = qv
	h["x-last-death-reason"] = rv
	h["x-last-death-exchange"] = xv
	c.Props.Headers = h
	c.Props.Flags |= amqp.FlagHeaders
	return c
}

// reasonValues are the reasons boxed once, for headers.
var reasonValues = [4]any{ReasonRejected, ReasonExpired, ReasonMaxLen, ReasonDeliveryLimit}

func reasonValue(r string) any {
	if i := reasonIndex(r); reasons[i] == r {
		return reasonValues[i]
	}
	return r
}

// routingKeys are the keys a dead-lettered message is routed with when
// the queue sets no dead-letter routing key: the publish key, CC and BCC (R3.3).
func (m *Message) routingKeys(dst []string) []string {
	dst = append(dst, m.RoutingKey)
	if m.Props.Headers != nil {
		dst = appendKeys(dst, m.Props.Headers["CC"])
	}
	return append(dst, m.BCC...)
}

// isCycle reports whether delivering a dead-lettered message with history
// (which already includes the current event) to queue target would be a
// dead-letter cycle that RabbitMQ drops (R3.8): target appears in the
// history and no event from the most recent one through that appearance
// was a rejection. Rejections never make a cycle.
func isCycle(history []Death, target string) bool {
	for _, d := range history {
		if d.Reason == ReasonRejected {
			return false
		}
		if d.Queue == target {
			return true
		}
	}
	return false
}

// deadLetterAs publishes dead-lettered copies of items, in order, to the
// dead-letter exchange dlx with routing key dlrk (nil: the messages' own
// keys) (R3.1 to R3.8, R3.11). Only q's flusher calls it (dlflush.go),
// without q.mu held: the targets may include q itself. At most once (the
// default, R3.9): a missing dead-letter exchange, one that routes nowhere,
// or a target that refuses the message drops it silently (R3.2). At least once (quorum
// queues with x-dead-letter-strategy at-least-once and reject-publish,
// R1.14): the message stays with the source queue and is retried until
// every target took it. A persistent message leaving a durable queue for
// durable targets moves atomically through the store (dlMove).
func (q *Queue) deadLetterAs(items []dlItem, reason string, dlx, dlrk *string) {
	if len(items) == 0 {
		return
	}
	if dlx == nil {
		q.mu.Lock()
		q.dlInFlight -= len(items)
		for i := range items {
			q.goneLocked(&entry{seq: items[i].seq, seg: items[i].seg, ondisk: items[i].ondisk})
		}
		q.mu.Unlock()
		return
	}
	q.mu.Lock()
	alo := q.atLeastOnce()
	q.mu.Unlock()
	now := q.vhost.b.clock.Now()
	var r Router
	var owed []pendingDL
	var moves []*dlMove
	var gone []dlItem
	var joins []*dlJoin
	qv := any(q.Name)
	minute := dlStampMinute(now)
	for _, it := range items {
		p := pendingDL{msg: deadLetterCopyBoxed(it.msg, q.Name, qv, reason, *dlx, dlrk, now), reason: reason, dlx: *dlx, byDLRK: dlrk != nil, src: it, minute: minute}
		if it.ondisk && !alo && p.msg.persistent() {
			if mv := q.planMove(&r, &p); mv != nil {
				moves = append(moves, mv)
				continue
			}
			gone = append(gone, it)
			continue
		}
		if !q.sendDeadLetter(&r, &p) && alo {
			owed = append(owed, p)
			continue
		}
		if p.join != nil { // a quorum queue's: gone once its remote targets took it too (dlremote.go)
			joins = append(joins, p.join)
			continue
		}
		gone = append(gone, it)
	}
	q.mu.Lock()
	q.dlInFlight -= len(items) // counted in dlxPending if owed (Stats)
	for i := range gone {
		q.goneLocked(&entry{seq: gone[i].seq, seg: gone[i].seg, ondisk: gone[i].ondisk})
	}
	for _, j := range joins {
		q.dlJoinDoneLocked(j)
	}
	if len(owed) > 0 {
		q.dlxPending = append(q.dlxPending, owed...)
		q.armDLXRetryLocked()
	}
	q.mu.Unlock()
	if len(moves) > 0 {
		q.startMoves(moves)
	}
}

// pendingDL is a dead letter on its way: at least once, it is kept until
// every target queue took it.
type pendingDL struct {
	msg    *Message
	reason string
	dlx    string
	// byDLRK: the message is routed by the dead-letter routing key, which
	// is its routing key now; otherwise by its own keys (routeKeys).
	byDLRK bool
	// targets are the queues still owed the message; nil means route again.
	targets []string
	// src is the message in the source queue (its log record).
	src dlItem
	// join: a quorum queue's message leaves once this and its remote
	// targets are done (dlremote.go).
	join *dlJoin
	// minute is when the dead letter counts in the timeline (dltimeline.go);
	// 0 once counted, so that a retry does not count it again.
	minute int64
}

// routeKeys appends the keys p.msg is routed with (R3.3): the
// dead-letter routing key, or the message's publish key, CC and BCC,
// which the copy keeps.
func (p *pendingDL) routeKeys(dst []string) []string {
	if p.byDLRK {
		return append(dst, p.msg.RoutingKey)
	}
	return p.msg.routingKeys(dst)
}

// sendDeadLetter routes p.msg and enqueues it into its targets (or the
// targets still owed). It reports whether every target took it; p.targets
// is left holding those that did not (nil when nothing routed).
func (q *Queue) sendDeadLetter(r *Router, p *pendingDL) bool {
	v := q.vhost
	r.queues = r.queues[:0]
	v.mu.RLock()
	if p.targets != nil {
		for _, name := range p.targets {
			if t := v.queues[name]; t != nil {
				r.queues = append(r.queues, t)
			}
		}
	} else if x := v.exchanges[p.dlx]; x != nil {
		r.keys = p.routeKeys(r.keys[:0])
		v.routeLocked(r, x, p.msg)
	}
	v.mu.RUnlock()
	q.tallyDL(p, r.queues)
	if len(r.queues) == 0 {
		p.targets = nil
		return false
	}
	var failed []string
	var remote *remoteDL
	for _, t := range r.queues {
		if p.reason != ReasonRejected && isCycle(p.msg.Deaths, t.Name) {
			v.b.log.Warn("dead-letter cycle: message dropped", "queue", q.Name, "target", t.Name, "vhost", v.Name)
			continue
		}
		if t.typ().answersLater() { // owed until its home (a quorum queue's leader) confirms (dlremote.go)
			if remote == nil {
				remote = &remoteDL{msg: p.msg}
			}
			remote.targets = append(remote.targets, t.Name)
			continue
		}
		if t.enqueue(p.msg, nil) == rejectedOverflow {
			failed = append(failed, t.Name)
		}
	}
	if remote != nil {
		if q.replicated() && q.atLeastOnce() && p.join == nil {
			// A quorum queue's leader removes the message (a replicated
			// Remove) only once its remote targets have it too: a new
			// leader dead-letters it again otherwise.
			p.join = &dlJoin{left: 2, src: p.src}
			remote.join = p.join
		}
		q.oweRemote([]*remoteDL{remote})
	}
	p.targets = failed
	return len(failed) == 0
}

// dlxRetryInterval is how often owed at-least-once dead letters are retried.
const dlxRetryInterval = time.Second

func (q *Queue) armDLXRetryLocked() {
	if q.dlxTimer != nil || q.deleted || len(q.dlxPending) == 0 {
		return
	}
	q.dlxTimer = q.vhost.b.clock.AfterFunc(dlxRetryInterval, q.retryDeadLetters)
}

func (q *Queue) retryDeadLetters() {
	q.mu.Lock()
	q.dlxTimer = nil
	ps := q.dlxPending
	q.dlxPending = nil
	q.mu.Unlock()
	var r Router
	var owed []pendingDL
	var gone []dlItem
	var joins []*dlJoin
	for i := range ps {
		switch {
		case !q.sendDeadLetter(&r, &ps[i]):
			owed = append(owed, ps[i])
		case ps[i].join != nil:
			joins = append(joins, ps[i].join)
		default:
			gone = append(gone, ps[i].src)
		}
	}
	q.mu.Lock()
	for i := range gone {
		q.goneLocked(&entry{seq: gone[i].seq, seg: gone[i].seg, ondisk: gone[i].ondisk})
	}
	for _, j := range joins {
		q.dlJoinDoneLocked(j)
	}
	q.dlxPending = append(owed, q.dlxPending...)
	q.armDLXRetryLocked()
	q.mu.Unlock()
}

// atLeastOnce reports whether dead-lettering keeps messages until their
// targets took them (R1.14): quorum, strategy at-least-once, a DLX and
// overflow reject-publish; otherwise at most once.
// DeadLettersAtLeastOnce reports whether q dead-letters at least once now
// (R1.14: a quorum queue with dead-letter-strategy at-least-once, a
// dead-letter exchange and overflow reject-publish).
func (q *Queue) DeadLettersAtLeastOnce() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.atLeastOnce()
}

func (q *Queue) atLeastOnce() bool {
	return q.eff.Type == "quorum" && q.eff.DeadLetterStrategy == "at-least-once" && q.eff.DLX != nil && q.overflow() == "reject-publish"
}
