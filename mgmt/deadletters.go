package mgmt

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

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
		if d, ok := b.Msg.LastDeath(); ok {
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
					_, holds = b.Msg.LastDeath()
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
	f := broker.DeadFilter{Reason: qp.Get("reason"), SourceQueue: qp.Get("source_queue")}
	msgs := []map[string]any{}
	pos := offset
	scanned := 0
	total := q.Browse(offset, func(b broker.Browsed) bool {
		scanned++
		if scanned > inspectLimit {
			return false
		}
		if f.Match(b.Msg) {
			msgs = append(msgs, browsedJSON(pos, b))
		}
		pos++
		return len(msgs) < limit
	})
	reply := map[string]any{"total": total, "offset": offset, "messages": msgs}
	if f.Reason != "" || f.SourceQueue != "" {
		// total counts the messages the filter matches (of the first
		// inspectLimit; truncated says when there were more).
		matched, seen := 0, 0
		q.Browse(0, func(b broker.Browsed) bool {
			if seen >= inspectLimit {
				reply["truncated"] = true
				return false
			}
			seen++
			if f.Match(b.Msg) {
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
	if d, ok := m.FirstDeath(); ok {
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
	res, err := c.s.b.ReplayDeadLetters(c.r.Context(), broker.AsUser(c.user.Name), v, q, broker.ReplayOptions{
		Limit: int(limit), Filter: broker.DeadFilter{Reason: b.Reason, SourceQueue: b.SourceQueue}, KeepHistory: b.KeepHistory})
	if err != nil {
		return moveError(err)
	}
	st := q.Stats()
	reply := map[string]any{"replayed": res.Moved, "skipped": res.Skipped, "failed": res.Failed, "remaining": st.Ready + st.Unacked}
	if res.Err != nil {
		reply["error"] = res.Err.Error()
	}
	c.s.writeJSON(c.w, http.StatusOK, reply)
	return nil
}

// moveError renders an error of a replay or move that moved nothing: a
// refused permission as checkChannel's 401, anything else as a 400.
func moveError(err error) error {
	var ae *broker.AccessRefusedError
	if errors.As(err, &ae) {
		return notAuthorised(ae.Error())
	}
	var ve *broker.ShovelValueError
	if errors.As(err, &ve) {
		return badRequest("Validation failed\n\n" + ve.Msg + "\n")
	}
	if errors.Is(err, broker.ErrShovelsHalting) {
		return &apiError{Status: 503, Err: "service_unavailable", Reason: "shutting down"}
	}
	return amqpError(err)
}
