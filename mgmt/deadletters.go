package mgmt

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/mgmt/api"
)

// Warren's dead-letter endpoints (docs/management.md): list the DLQs with
// counts by reason and source queue, browse their messages with the
// history decoded, and replay them to where they were first dead-lettered
// from.

func (s *Server) deadLetterRoutes() {
	s.handle("GET /api/dead-letters/timeline", lvlManagement, (*call).deadLetterTimeline)
	s.handle("GET /api/dead-letters/timeline/{vhost}", lvlManagement, (*call).deadLetterTimeline)
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
	list := []api.DeadLetterQueue{}
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
			list = append(list, api.DeadLetterQueue{VHost: v.Name, Name: q.Name,
				Messages: st.Ready + st.Unacked, MessagesReady: st.Ready, MessagesUnacknowledged: st.Unacked,
				Consumers: st.Consumers, Sources: srcs, ByReason: sum.byReason, BySource: sum.bySource,
				Sampled: sum.sampled})
		}
	}
	return listOf(c, list)
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
	msgs := []api.Browsed{}
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
	reply := api.DeadLetterPage{Total: total, Offset: offset, Messages: msgs}
	if f.Reason != "" || f.SourceQueue != "" {
		// total counts the messages the filter matches (of the first
		// inspectLimit; truncated says when there were more).
		matched, seen := 0, 0
		q.Browse(0, func(b broker.Browsed) bool {
			if seen >= inspectLimit {
				reply.Truncated = true
				return false
			}
			seen++
			if f.Match(b.Msg) {
				matched++
			}
			return true
		})
		reply.Total = matched
	}
	return c.ok(reply)
}

func browsedJSON(pos int, b broker.Browsed) api.Browsed {
	m := b.Msg
	payload, enc := payloadJSON(m.Body, "auto", 0)
	deaths := make([]api.Death, 0, len(m.Deaths))
	for _, d := range m.Deaths {
		deaths = append(deaths, deathJSON(d))
	}
	out := api.Browsed{Message: api.Message{Payload: payload, PayloadEncoding: enc, PayloadBytes: len(m.Body),
		Exchange: m.Exchange, RoutingKey: m.RoutingKey, Redelivered: b.Redelivered,
		Properties: propsJSON(&m.Props)}, Position: pos, XDeath: deaths, ExpiresAt: b.ExpiresAt}
	if d, ok := m.FirstDeath(); ok {
		out.FirstDeath = &api.FirstDeath{Reason: d.Reason, Queue: d.Queue, Exchange: d.Exchange, RoutingKeys: orEmptyStrings(d.RoutingKeys)}
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
	DryRun      bool   `json:"dry_run"`
	// List bounds the messages a dry run lists (the rest are counted).
	List any `json:"list"`
	// Offset and Since choose where the replay of a stream DLQ starts: a
	// record offset, or an interval back from now ("1h") or an RFC 3339
	// time; the stream keeps its records.
	Offset any    `json:"offset"`
	Since  string `json:"since"`
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
	opts := broker.ReplayOptions{Limit: int(limit), Filter: broker.DeadFilter{Reason: b.Reason, SourceQueue: b.SourceQueue}, KeepHistory: b.KeepHistory}
	if b.Offset != nil {
		n, ok := jsonInt(b.Offset)
		if !ok || n < 0 {
			return badRequest("offset must be a non-negative integer")
		}
		from := uint64(n)
		opts.From = &from
	}
	if b.Since != "" {
		if d := broker.ParseInterval(b.Since); d > 0 {
			opts.Since = time.Now().Add(-d)
		} else if t, err := time.Parse(time.RFC3339, b.Since); err == nil {
			opts.Since = t
		} else {
			return badRequest("since must be an interval (30m, 1h, 7D) or an RFC 3339 time")
		}
	}
	if (opts.From != nil || !opts.Since.IsZero()) && !q.IsStream() {
		return badRequest("offset and since apply to a stream's dead letters only")
	}
	if b.DryRun {
		return c.replayPreview(v, q, opts, b.List)
	}
	res, err := c.s.b.ReplayDeadLetters(c.r.Context(), broker.AsUser(c.user.Name), v, q, opts)
	if err != nil {
		return moveError(err)
	}
	st := q.Stats()
	reply := api.ReplayResult{Replayed: res.Moved, Skipped: res.Skipped, Failed: res.Failed, Remaining: st.Ready + st.Unacked}
	if q.IsStream() {
		next := res.Next
		reply.NextOffset = &next // a stream keeps its records: where to go on
	}
	if res.Err != nil {
		reply.Error = res.Err.Error()
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
	return amqpError(err)
}

// --- replay preview (issue 15) ---

// previewList is how many messages a dry run lists by default (at most
// previewListMax); the others are only counted in the destinations.
const (
	previewList    = 100
	previewListMax = 1000
)

// replayPreview answers a replay's dry run: which dead letters would go
// where, moving nothing, with the replay's own permission checks.
func (c *call) replayPreview(v *broker.VHost, q *broker.Queue, o broker.ReplayOptions, listArg any) error {
	list := int64(previewList)
	if listArg != nil {
		var ok bool
		if list, ok = jsonInt(listArg); !ok || list < 0 || list > previewListMax {
			return badRequest(fmt.Sprintf("list must be between 0 and %d", previewListMax))
		}
	}
	type dest struct {
		key                      string
		status, exchange, errStr string
		queues                   []string
		n                        int
	}
	var dests []*dest
	byKey := map[string]*dest{}
	msgs := []map[string]any{}
	replayable := 0
	res, err := c.s.b.PreviewReplay(broker.AsUser(c.user.Name), v, q, o, inspectLimit, func(st broker.ReplayStep) {
		if st.Status == broker.ReplayRoutes {
			replayable++
		}
		queues := orEmptyStrings(st.Queues)
		if len(msgs) < int(list) {
			m := map[string]any{"position": st.Position, "status": st.Status,
				"first_death": map[string]any{"reason": st.First.Reason, "queue": st.First.Queue},
				"exchange":    st.Exchange, "routing_keys": st.RoutingKeys, "queues": queues,
				"payload_bytes": len(st.Msg.Body)}
			if d, ok := st.Msg.LastDeath(); ok {
				m["last_death"] = map[string]any{"reason": d.Reason, "queue": d.Queue}
			}
			if st.Delayed {
				m["delayed"] = true
			}
			if st.Err != "" {
				m["error"] = st.Err
			}
			msgs = append(msgs, m)
		}
		// Grouped by outcome, exchange and destination queues (blocked
		// ones by outcome alone: the replay never gets to route them).
		key := st.Status
		if st.Status != broker.ReplayBlocked {
			key += "\x00" + st.Exchange + "\x00" + strings.Join(queues, "\x00")
		}
		d := byKey[key]
		if d == nil {
			d = &dest{key: key, status: st.Status}
			if st.Status != broker.ReplayBlocked {
				d.exchange, d.queues, d.errStr = st.Exchange, queues, st.Err
			}
			byKey[key] = d
			dests = append(dests, d)
		}
		d.n++
	})
	if err != nil {
		if errors.Is(err, broker.ErrUnknownReason) {
			return badRequest(err.Error())
		}
		return moveError(err)
	}
	destinations := make([]map[string]any, 0, len(dests))
	for _, d := range dests {
		m := map[string]any{"status": d.status, "count": d.n}
		if d.status != broker.ReplayBlocked {
			m["exchange"], m["queues"] = d.exchange, d.queues
		}
		if d.errStr != "" && d.status != broker.ReplayRoutes {
			m["error"] = d.errStr
		}
		destinations = append(destinations, m)
	}
	st := q.Stats()
	return c.ok(map[string]any{"dry_run": true, "would_replay": replayable, "would_stay": st.Ready + st.Unacked - replayable,
		"matched": res.Matched, "skipped": res.Skipped, "scanned": res.Scanned, "truncated": res.Truncated,
		"listed": len(msgs), "messages": msgs, "destinations": destinations})
}

// --- timeline (issue 15) ---

// dlRawMinute is one minute of one queue's dead-lettering, as a node
// answers another's fan-out.
type dlRawMinute struct {
	M int64             `json:"m"`
	R [4]uint64         `json:"r"`
	T map[string]uint64 `json:"t,omitempty"`
	O uint64            `json:"o,omitempty"`
	U uint64            `json:"u,omitempty"`
}

type dlRawSeries struct {
	VHost   string        `json:"vhost"`
	Name    string        `json:"name"`
	Minutes []dlRawMinute `json:"minutes"`
}

// localTimeline is the timelines the queue objects of this node hold for
// vhosts vs: the queues whose dead-lettering runs here (the home of a
// classic queue, the leader of a quorum queue, or a former leader).
func (c *call) localTimeline(vs []*broker.VHost) []dlRawSeries {
	now := c.s.b.Clock().Now()
	var out []dlRawSeries
	for _, v := range vs {
		for _, q := range v.Queues() {
			ms := q.DeadLetterTimeline(now)
			if len(ms) == 0 {
				continue
			}
			s := dlRawSeries{VHost: v.Name, Name: q.Name, Minutes: make([]dlRawMinute, len(ms))}
			for i, m := range ms {
				r := dlRawMinute{M: m.Minute, R: m.ByReason, O: m.OtherTargets, U: m.Unroutable}
				if len(m.Targets) > 0 {
					r.T = make(map[string]uint64, len(m.Targets))
					for _, t := range m.Targets {
						r.T[t.Queue] += t.N
					}
				}
				s.Minutes[i] = r
			}
			out = append(out, s)
		}
	}
	return out
}

// deadLetterTimeline answers GET /api/dead-letters/timeline[/{vhost}]:
// dead letters per minute over the last ?minutes=N (1 to 60, default 60),
// by reason, source queue and destination queue, for the vhosts the user
// may see. In a cluster each node counts the queues it dead-letters for;
// the node asked sums their answers.
func (c *call) deadLetterTimeline() error {
	minutes := broker.DLTimelineMinutes
	if s := c.r.URL.Query().Get("minutes"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > broker.DLTimelineMinutes {
			return badRequest(fmt.Sprintf("minutes must be between 1 and %d", broker.DLTimelineMinutes))
		}
		minutes = n
	}
	vs, err := c.visibleVHosts()
	if err != nil {
		return err
	}
	series := c.localTimeline(vs)
	if c.local {
		return c.ok(map[string]any{"queues": orEmpty(series)})
	}
	if c.clustered() {
		visible := map[string]bool{}
		for _, v := range vs {
			visible[v.Name] = true
		}
		for _, r := range c.fanOut(http.MethodGet, c.escapedPath(), nil) {
			if !r.ok200() {
				continue
			}
			var reply struct{ Queues []dlRawSeries }
			if json.Unmarshal(r.body, &reply) != nil {
				continue
			}
			for _, s := range reply.Queues {
				if visible[s.VHost] {
					series = append(series, s)
				}
			}
		}
	}
	return c.ok(timelineJSON(series, c.s.b.Clock().Now(), minutes, c.pv("vhost")))
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// dlCounts sums dead letters by reason, source and target queue.
type dlCounts struct {
	total, unroutable, other uint64
	byReason                 [4]uint64
	bySource, byTarget       map[[2]string]uint64
}

func (d *dlCounts) add(vhost, source string, m dlRawMinute) {
	if d.bySource == nil {
		d.bySource, d.byTarget = map[[2]string]uint64{}, map[[2]string]uint64{}
	}
	n := uint64(0)
	for i, c := range m.R {
		d.byReason[i] += c
		n += c
	}
	d.total += n
	d.bySource[[2]string{vhost, source}] += n
	for t, c := range m.T {
		d.byTarget[[2]string{vhost, t}] += c
	}
	d.unroutable += m.U
	d.other += m.O
}

// json renders the counts; byVHost names each queue's vhost too (the
// timeline of every vhost).
func (d *dlCounts) json(byVHost bool) map[string]any {
	reasons := map[string]any{}
	for i, r := range broker.DLReasons {
		reasons[r] = d.byReason[i]
	}
	queues := func(m map[[2]string]uint64) []map[string]any {
		out := make([]map[string]any, 0, len(m))
		for k, n := range m {
			e := map[string]any{"name": k[1], "count": n}
			if byVHost {
				e["vhost"] = k[0]
			}
			out = append(out, e)
		}
		slices.SortFunc(out, func(a, b map[string]any) int {
			if x, y := a["count"].(uint64), b["count"].(uint64); x != y {
				return cmpDesc(x, y)
			}
			if c := strings.Compare(str(a["vhost"]), str(b["vhost"])); c != 0 {
				return c
			}
			return strings.Compare(a["name"].(string), b["name"].(string))
		})
		return out
	}
	return map[string]any{"total": d.total, "by_reason": reasons, "by_source": queues(d.bySource),
		"by_target": queues(d.byTarget), "unroutable": d.unroutable, "other_targets": d.other}
}

func cmpDesc(x, y uint64) int {
	if x > y {
		return -1
	}
	return 1
}

// timelineJSON is the timeline of the last minutes up to now: every
// minute, oldest first, with its counts, and the counts of the window.
func timelineJSON(series []dlRawSeries, now time.Time, minutes int, vhost string) map[string]any {
	cur := now.Unix() / 60
	first := cur - int64(minutes) + 1
	buckets := make([]dlCounts, minutes)
	var all dlCounts
	for _, s := range series {
		for _, m := range s.Minutes {
			if m.M < first || m.M > cur {
				continue
			}
			buckets[m.M-first].add(s.VHost, s.Name, m)
			all.add(s.VHost, s.Name, m)
		}
	}
	out := make([]map[string]any, minutes)
	for i := range buckets {
		b := buckets[i].json(vhost == "")
		b["timestamp"] = (first + int64(i)) * 60000
		out[i] = b
	}
	reply := all.json(vhost == "")
	reply["minutes"] = minutes
	reply["interval"] = 60000
	reply["timestamp"] = now.UnixMilli()
	reply["buckets"] = out
	if vhost != "" {
		reply["vhost"] = vhost
	}
	return reply
}
