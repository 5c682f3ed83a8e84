package mgmt

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

// Warren's dead-letter endpoints (docs/management.md): list the DLQs with
// counts by reason and source queue, browse their messages with the
// history decoded, and replay them to where they were first dead-lettered
// from.

func (s *Server) deadLetterRoutes() {
	s.handle("GET /api/dead-letters", lvlManagement, (*call).deadLetterQueues)
	s.handle("GET /api/dead-letters/{vhost}", lvlManagement, (*call).deadLetterQueues)
	s.handle("GET /api/dead-letters/{vhost}/{name}/messages", lvlManagement, (*call).deadLetterMessages)
	s.handle("POST /api/dead-letters/{vhost}/{name}/replay", lvlManagement, (*call).deadLetterReplay)
}

// inspectLimit bounds how many messages a DLQ summary reads.
const inspectLimit = 10000

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

// lastDeath is the event that put m where it is: x-death[0].
func lastDeath(m *broker.Message) (broker.Death, bool) {
	if len(m.Deaths) == 0 {
		return broker.Death{}, false
	}
	return m.Deaths[0], true
}

// firstDeath is the first dead-lettering of m: the x-death entry of
// x-first-death-queue and -reason (the oldest entry when the headers are
// missing), and the exchange of x-first-death-exchange.
func firstDeath(m *broker.Message) (broker.Death, bool) {
	if len(m.Deaths) == 0 {
		return broker.Death{}, false
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

// deadFilter selects dead letters by the reason and source queue of their
// most recent death (the one that brought them to this queue).
type deadFilter struct{ reason, source string }

func (f deadFilter) match(m *broker.Message) bool {
	if f.reason == "" && f.source == "" {
		return true
	}
	d, ok := lastDeath(m)
	return ok && (f.reason == "" || d.Reason == f.reason) && (f.source == "" || d.Queue == f.source)
}

type dlqSummary struct {
	byReason, bySource map[string]int
	dead, seen         int
	sampled            bool
}

func summarize(q *broker.Queue) dlqSummary {
	s := dlqSummary{byReason: map[string]int{}, bySource: map[string]int{}}
	q.Browse(0, func(b broker.Browsed) bool {
		if s.seen >= inspectLimit {
			s.sampled = true
			return false
		}
		s.seen++
		if d, ok := lastDeath(b.Msg); ok {
			s.dead++
			s.byReason[d.Reason]++
			s.bySource[d.Queue]++
		}
		return true
	})
	return s
}

func (c *call) deadLetterQueues() error {
	vs, err := c.visibleVHosts()
	if err != nil {
		return err
	}
	list := []map[string]any{}
	for _, v := range vs {
		targets := v.DeadLetterTargets()
		for _, q := range v.Queues() {
			srcs, isTarget := targets[q.Name]
			var sum dlqSummary
			if !isTarget {
				// Not routed to by a dead-letter exchange: a DLQ only if
				// its head holds a dead letter.
				holds := false
				q.Browse(0, func(b broker.Browsed) bool {
					_, holds = lastDeath(b.Msg)
					return false
				})
				if !holds {
					continue
				}
			}
			sum = summarize(q)
			for src := range sum.bySource {
				if !slices.Contains(srcs, src) {
					srcs = append(srcs, src)
				}
			}
			if srcs == nil {
				srcs = []string{}
			}
			st := q.Stats()
			list = append(list, map[string]any{"vhost": v.Name, "name": q.Name,
				"messages": st.Ready + st.Unacked, "messages_ready": st.Ready, "messages_unacknowledged": st.Unacked,
				"consumers": st.Consumers, "sources": srcs, "by_reason": sum.byReason, "by_source": sum.bySource,
				"sampled": sum.sampled})
		}
	}
	return c.list(list)
}

func (c *call) deadLetterMessages() error {
	v, q, err := c.queue()
	if err != nil {
		return err
	}
	if err := c.checkChannel(v, broker.Read, "queue", q.Name); err != nil {
		return err
	}
	qp := c.r.URL.Query()
	offset, limit := 0, 50
	if s := qp.Get("offset"); s != "" {
		if offset, err = strconv.Atoi(s); err != nil || offset < 0 {
			return badRequest("offset must be a non-negative integer")
		}
	}
	if s := qp.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > 1000 {
			return badRequest("limit must be between 1 and 1000")
		}
	}
	f := deadFilter{reason: qp.Get("reason"), source: qp.Get("source_queue")}
	msgs := []map[string]any{}
	pos := offset
	scanned := 0
	total := q.Browse(offset, func(b broker.Browsed) bool {
		scanned++
		if scanned > inspectLimit {
			return false
		}
		if f.match(b.Msg) {
			msgs = append(msgs, browsedJSON(pos, b))
		}
		pos++
		return len(msgs) < limit
	})
	reply := map[string]any{"total": total, "offset": offset, "messages": msgs}
	if f.reason != "" || f.source != "" {
		// total counts the messages the filter matches (of the first
		// inspectLimit; truncated says when there were more).
		matched, seen := 0, 0
		q.Browse(0, func(b broker.Browsed) bool {
			if seen >= inspectLimit {
				reply["truncated"] = true
				return false
			}
			seen++
			if f.match(b.Msg) {
				matched++
			}
			return true
		})
		reply["total"] = matched
	}
	return c.ok(reply)
}

func browsedJSON(pos int, b broker.Browsed) map[string]any {
	m := b.Msg
	payload, enc := payloadJSON(m.Body, "auto", 0)
	deaths := make([]any, 0, len(m.Deaths))
	for _, d := range m.Deaths {
		deaths = append(deaths, deathJSON(d))
	}
	out := map[string]any{"position": pos, "payload": payload, "payload_encoding": enc, "payload_bytes": len(m.Body),
		"exchange": m.Exchange, "routing_key": m.RoutingKey, "redelivered": b.Redelivered,
		"properties": propsJSON(&m.Props), "x_death": deaths}
	if d, ok := firstDeath(m); ok {
		out["first_death"] = map[string]any{"reason": d.Reason, "queue": d.Queue, "exchange": d.Exchange, "routing-keys": orEmptyStrings(d.RoutingKeys)}
	}
	if b.ExpiresAt != 0 {
		out["expires_at"] = b.ExpiresAt
	}
	return out
}

func orEmptyStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

type replayBody struct {
	Count       any    `json:"count"`
	Reason      string `json:"reason"`
	SourceQueue string `json:"source_queue"`
	KeepHistory bool   `json:"keep_history"`
}

func (c *call) deadLetterReplay() error {
	v, q, err := c.queue()
	if err != nil {
		return err
	}
	var b replayBody
	if err := c.decode(&b); err != nil {
		return err
	}
	limit := int64(0)
	if b.Count != nil {
		var ok bool
		if limit, ok = jsonInt(b.Count); !ok || limit < 0 {
			return badRequest("count must be a non-negative integer")
		}
	}
	switch b.Reason {
	case "", broker.ReasonRejected, broker.ReasonExpired, broker.ReasonMaxLen, broker.ReasonDeliveryLimit:
	default:
		return badRequest(fmt.Sprintf("unknown reason '%s' (rejected, expired, maxlen or delivery_limit)", b.Reason))
	}
	if err := c.checkChannel(v, broker.Read, "queue", q.Name); err != nil {
		return err
	}
	f := deadFilter{reason: b.Reason, source: b.SourceQueue}
	res := c.s.transfer(c.r.Context(), v, q, int(limit), func(m *broker.Message) (string, *broker.Message, bool) {
		if !f.match(m) {
			return "", nil, false
		}
		return replayMessage(m, b.KeepHistory)
	}, func(exchange string, m *broker.Message) error {
		if !c.s.b.Check(c.user.Name, v.Name, broker.Write, displayExchange(exchange)) {
			return errors.New(accessRefused(v.Name, "exchange", displayExchange(exchange), c.user.Name))
		}
		return c.s.b.CheckTopicPublish(c.user.Name, v, exchange, m)
	})
	st := q.Stats()
	reply := map[string]any{"replayed": res.moved, "skipped": res.skipped, "failed": res.failed, "remaining": st.Ready + st.Unacked}
	if res.err != nil {
		reply["error"] = res.err.Error()
	}
	c.s.writeJSON(c.w, http.StatusOK, reply)
	return nil
}

// replayMessage is the message to republish for dead letter m: to the
// exchange of its first death, with the routing keys of that death (the
// first as routing key, the others as CC), and, unless keep, without its
// dead-letter history. Its per-message TTL is not restored (dead-lettering
// removed it): a replayed message that died of a short TTL would
// otherwise die again on arrival.
func replayMessage(m *broker.Message, keep bool) (string, *broker.Message, bool) {
	d, ok := firstDeath(m)
	if !ok || len(d.RoutingKeys) == 0 {
		return "", nil, false
	}
	out := &broker.Message{Exchange: d.Exchange, RoutingKey: d.RoutingKeys[0], Props: m.Props, Body: m.Body}
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

type transferResult struct {
	moved, skipped, failed int
	err                    error
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
// (broker.Queue.Take). A publish that fails (no such exchange,
// unroutable, refused by an overflow, not allowed) puts that message and
// every later one back and stops: nothing is lost half way.
func (s *Server) transfer(ctx context.Context, v *broker.VHost, src *broker.Queue, limit int,
	pick func(*broker.Message) (string, *broker.Message, bool), allowed func(exchange string, m *broker.Message) error) (res transferResult) {
	var pending []broker.Delivery
	var waits broker.Durability
	flush := func() bool {
		if len(pending) == 0 {
			return true
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := s.srv.WaitSynced(wctx, waits)
		cancel()
		if err != nil {
			// Not known to be on disk: keep the originals, marked
			// redelivered (the republish may have gone through).
			src.Return(pending, true)
			res.failed += len(pending)
			res.moved -= len(pending)
			res.err = err
			pending = nil
			waits.Reset()
			return false
		}
		src.Ack(pending)
		pending = pending[:0]
		waits.Reset()
		return true
	}
	var r broker.Router
	var cur broker.TakeCursor
	upto := src.LastSeq()
	matches := func(m *broker.Message) bool { _, _, ok := pick(m); return ok }
	defer func() { res.skipped = cur.Skipped }()
walk:
	for limit == 0 || res.moved < limit {
		if ctx.Err() != nil {
			res.err = ctx.Err()
			break
		}
		want := transferBatch
		if limit > 0 {
			want = min(want, limit-res.moved)
		}
		ds, done := src.Take(&cur, want, transferBudget, upto, matches)
		for i, d := range ds {
			exchange, m, _ := pick(d.Msg)
			if err := allowed(exchange, m); err != nil {
				res.err = err
			} else {
				pr, err := v.Publish(&r, exchange, m)
				if err == nil {
					s.srv.CountPublish(v.Name, exchange, pr.Routed > 0)
				}
				switch {
				case err != nil:
					res.err = err
				case pr.Failed:
					res.err = errors.New("the message could not be written to disk")
				case pr.Routed == 0:
					res.err = fmt.Errorf("no queue bound to exchange '%s' takes routing key '%s'", displayExchange(exchange), m.RoutingKey)
				case pr.Rejected:
					res.err = fmt.Errorf("a queue bound to exchange '%s' refused the message (overflow reject-publish)", displayExchange(exchange))
				}
				if res.err == nil {
					waits.Add(pr.Durable)
					pending = append(pending, d)
					res.moved++
					continue
				}
			}
			// This one and the rest of the batch go back, in place.
			src.Return(ds[i:], false)
			res.failed++
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
