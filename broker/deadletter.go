package broker

import (
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

// deathsTable encodes the history as RabbitMQ's x-death header (R3.4).
func deathsTable(history []Death) []any {
	arr := make([]any, len(history))
	for i, d := range history {
		keys := make([]any, len(d.RoutingKeys))
		for j, k := range d.RoutingKeys {
			keys[j] = k
		}
		t := amqp.Table{
			"queue":        d.Queue,
			"reason":       d.Reason,
			"count":        d.Count,
			"time":         d.Time,
			"exchange":     d.Exchange,
			"routing-keys": keys,
		}
		if d.HasExpiration {
			t["original-expiration"] = d.OriginalExpiration
		}
		arr[i] = t
	}
	return arr
}

// deadLetterCopy returns the message to publish to the dead-letter
// exchange when m leaves queue for reason (R2.6, R3.3 to R3.7, R3.10):
// body and properties are kept except expiration; the broker's own death
// history replaces any client-set x-death; x-first-death-* are set at the
// first event and x-last-death-* at every event; the routing key becomes
// the dead-letter routing key when one is set. The copy shares m's body.
func deadLetterCopy(m *Message, queue, reason, dlx string, dlrk *string, now time.Time) *Message {
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
	if len(m.Deaths) == 0 {
		h["x-first-death-queue"] = queue
		h["x-first-death-reason"] = reason
		h["x-first-death-exchange"] = m.Exchange
	}
	h["x-last-death-queue"] = queue
	h["x-last-death-reason"] = reason
	h["x-last-death-exchange"] = m.Exchange
	c.Props.Headers = h
	c.Props.Flags |= amqp.FlagHeaders
	return c
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

// deadLetterAs publishes dead-lettered copies of ms, in order, to the
// dead-letter exchange dlx with routing key dlrk (nil: the messages' own
// keys) (R3.1 to R3.8, R3.11). It must be called without q.mu held: the
// targets may include q itself. A missing dead-letter exchange, or one
// that routes nowhere, drops the messages silently (R3.2).
func (q *Queue) deadLetterAs(ms []*Message, reason string, dlx, dlrk *string) {
	if dlx == nil || len(ms) == 0 {
		return
	}
	v := q.vhost
	now := v.b.clock.Now()
	var r Router
	for _, m := range ms {
		c := deadLetterCopy(m, q.Name, reason, *dlx, dlrk, now)
		if dlrk != nil {
			r.keys = append(r.keys[:0], *dlrk)
		} else {
			r.keys = m.routingKeys(r.keys[:0])
		}
		v.mu.RLock()
		x := v.exchanges[*dlx]
		if x == nil {
			v.mu.RUnlock()
			continue
		}
		r.queues = r.queues[:0]
		v.routeLocked(&r, x, c)
		v.mu.RUnlock()
		for _, t := range r.queues {
			if reason != ReasonRejected && isCycle(c.Deaths, t.Name) {
				v.b.log.Warn("dead-letter cycle: message dropped", "queue", q.Name, "target", t.Name, "vhost", v.Name)
				continue
			}
			t.enqueue(c)
		}
	}
}
