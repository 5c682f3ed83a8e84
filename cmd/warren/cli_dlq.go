package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/warrenmq/warren/mgmt/api"
)

// Warren's dead-letter extensions of the management API:
// /api/dead-letters (docs/management.md).

func cmdDLQList(c *cliCtx, args []string) error {
	if err := wantArgs(args, 0, 0, "dlq list [--vhost V]"); err != nil {
		return err
	}
	var rows []api.DeadLetterQueue
	raw, err := c.api.getJSON(c.listPath("dead-letters"), &rows)
	if err != nil {
		if isNotFound(err) && c.vhost == "" {
			return fmt.Errorf("%w; is this a Warren broker? /api/dead-letters is Warren's extension of RabbitMQ's API", err)
		}
		return err
	}
	if c.json {
		return printJSON(c.stdout, raw)
	}
	header := []string{"NAME", "MESSAGES", "READY", "UNACKED", "CONSUMERS", "SOURCES", "BY REASON", "BY SOURCE"}
	if c.vhost == "" {
		header = append([]string{"VHOST"}, header...)
	}
	t := newTable(c.stdout, header...)
	sampled := false
	for _, r := range rows {
		mark := ""
		if r.Sampled {
			mark, sampled = " *", true
		}
		cells := []string{r.Name, strconv.Itoa(r.Messages), strconv.Itoa(r.MessagesReady), strconv.Itoa(r.MessagesUnacknowledged),
			strconv.Itoa(r.Consumers), strings.Join(r.Sources, ","), countsString(r.ByReason) + mark, countsString(r.BySource) + mark}
		if c.vhost == "" {
			cells = append([]string{r.VHost}, cells...)
		}
		t.row(cells...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if sampled {
		fmt.Fprintln(c.stdout, "* counted over the first messages only (warren dlq inspect QUEUE --limit N counts more)")
	}
	return nil
}

// countsString renders {"rejected":10,"expired":2} as "expired=2 rejected=10".
func countsString(m map[string]int) string {
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// dlPage is a reply of GET /api/dead-letters/{vhost}/{queue}/messages.
type dlPage = api.DeadLetterPage

// dlMessages browses a page of the DLQ. Filters are applied here rather
// than by the API: the API's offset is a position in the queue, so pages
// of a filtered browse cannot be told apart from the end of the queue.
func (c *cliCtx) dlMessages(vhost, queue string, offset, limit int) (*dlPage, error) {
	q := url.Values{}
	q.Set("offset", strconv.Itoa(offset))
	q.Set("limit", strconv.Itoa(limit))
	var p dlPage
	if _, err := c.api.getJSON(apiPath("dead-letters", vhost, queue, "messages")+"?"+q.Encode(), &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// matches applies --reason and --source-queue to the most recent death,
// as the API's replay does.
func (c *cliCtx) matches(m *api.Browsed) bool {
	if c.reason == "" && c.sourceQ == "" {
		return true
	}
	ds := msgDeaths(m)
	return len(ds) > 0 && (c.reason == "" || ds[0].Reason == c.reason) && (c.sourceQ == "" || ds[0].Queue == c.sourceQ)
}

// dlGroup is the messages of a DLQ that died for one reason from one queue
// (by their most recent death, x-death[0]).
type dlGroup struct {
	Reason      string    `json:"reason"`
	SourceQueue string    `json:"source_queue"`
	Messages    int       `json:"messages"`
	Deaths      int       `json:"deaths"`
	FirstDeath  time.Time `json:"first_death,omitzero"`
	LastDeath   time.Time `json:"last_death,omitzero"`
	Exchanges   []string  `json:"exchanges"`
	RoutingKeys []string  `json:"routing_keys"`
}

type dlInspection struct {
	Vhost     string     `json:"vhost"`
	Queue     string     `json:"queue"`
	Total     int        `json:"total"`
	Inspected int        `json:"inspected"`
	Matched   int        `json:"matched"`
	Groups    []*dlGroup `json:"groups"`
}

// inspectPage is how many messages inspect asks for per request.
const inspectPage = 500

func cmdDLQInspect(c *cliCtx, args []string) error {
	if err := wantArgs(args, 1, 1, "dlq inspect QUEUE [--limit N]"); err != nil {
		return err
	}
	if c.limit < 1 {
		return fmt.Errorf("dlq inspect: --limit must be at least 1")
	}
	vhost, queue := c.oneVhost(), args[0]
	res := &dlInspection{Vhost: vhost, Queue: queue, Groups: []*dlGroup{}}
	groups := map[[2]string]*dlGroup{}
	for res.Inspected < c.limit {
		p, err := c.dlMessages(vhost, queue, res.Inspected, min(inspectPage, c.limit-res.Inspected))
		if err != nil {
			return err
		}
		res.Total = p.Total
		for i := range p.Messages {
			m := &p.Messages[i]
			if !c.matches(m) {
				continue
			}
			res.Matched++
			reason, source := "(none)", ""
			var d api.Death
			if ds := msgDeaths(m); len(ds) > 0 {
				d = ds[0]
				reason, source = d.Reason, d.Queue
			}
			g := groups[[2]string{reason, source}]
			if g == nil {
				g = &dlGroup{Reason: reason, SourceQueue: source, Exchanges: []string{}, RoutingKeys: []string{}}
				groups[[2]string{reason, source}] = g
				res.Groups = append(res.Groups, g)
			}
			g.Messages++
			g.Deaths += int(max(d.Count, 1))
			if t, ok := deathWhen(d); ok {
				if g.FirstDeath.IsZero() || t.Before(g.FirstDeath) {
					g.FirstDeath = t
				}
				if t.After(g.LastDeath) {
					g.LastDeath = t
				}
			}
			if reason != "(none)" && !slices.Contains(g.Exchanges, d.Exchange) {
				g.Exchanges = append(g.Exchanges, d.Exchange)
			}
			for _, k := range d.RoutingKeys {
				if !slices.Contains(g.RoutingKeys, k) {
					g.RoutingKeys = append(g.RoutingKeys, k)
				}
			}
		}
		res.Inspected += len(p.Messages)
		if len(p.Messages) == 0 || res.Inspected >= p.Total {
			break
		}
	}
	sort.SliceStable(res.Groups, func(i, j int) bool {
		a, b := res.Groups[i], res.Groups[j]
		if a.Messages != b.Messages {
			return a.Messages > b.Messages
		}
		if a.Reason != b.Reason {
			return a.Reason < b.Reason
		}
		return a.SourceQueue < b.SourceQueue
	})
	for _, g := range res.Groups {
		sort.Strings(g.Exchanges)
		sort.Strings(g.RoutingKeys)
	}
	if c.json {
		return printValueJSON(c.stdout, res)
	}
	fmt.Fprintf(c.stdout, "Queue %q in vhost %q: %d messages", queue, vhost, res.Total)
	if res.Inspected < res.Total {
		fmt.Fprintf(c.stdout, ", the first %d inspected (--limit)", res.Inspected)
	}
	if c.reason != "" || c.sourceQ != "" {
		fmt.Fprintf(c.stdout, ", %d matching the filter", res.Matched)
	}
	fmt.Fprintln(c.stdout, ".")
	if len(res.Groups) == 0 {
		return nil
	}
	fmt.Fprintln(c.stdout)
	t := newTable(c.stdout, "REASON", "SOURCE QUEUE", "MESSAGES", "DEATHS", "FIRST DEATH", "LAST DEATH", "EXCHANGES", "ROUTING KEYS")
	for _, g := range res.Groups {
		exchanges := make([]string, len(g.Exchanges))
		for i, x := range g.Exchanges {
			exchanges[i] = exchangeName(x)
		}
		t.row(g.Reason, g.SourceQueue, strconv.Itoa(g.Messages), strconv.Itoa(g.Deaths), timeString(g.FirstDeath),
			timeString(g.LastDeath), strings.Join(exchanges, ","), strings.Join(g.RoutingKeys, ","))
	}
	return t.flush()
}

func timeString(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format(time.RFC3339)
}

// cmdDLQReplay replays in batches (--batch per request) so that a long
// replay shows progress, until --count messages are replayed, a batch
// replays fewer than it asked for, or a message fails.
func cmdDLQReplay(c *cliCtx, args []string) error {
	if err := wantArgs(args, 1, 1, "dlq replay QUEUE [--count N] [--reason R] [--source-queue Q] [--keep-history]"); err != nil {
		return err
	}
	if c.count < 0 {
		return fmt.Errorf("dlq replay: --count must not be negative")
	}
	if c.batch < 1 {
		return fmt.Errorf("dlq replay: --batch must be at least 1")
	}
	vhost, queue := c.oneVhost(), args[0]
	// The queue's depth now caps the replay, so that messages that die
	// again into this DLQ while we replay are not replayed in a loop.
	p, err := c.dlMessages(vhost, queue, 0, 1)
	if err != nil {
		return err
	}
	limit := p.Total
	if c.count > 0 {
		limit = min(limit, c.count)
	}
	prog := newProgress(c.stderr, "replaying", min(limit, c.matching(vhost, queue, p.Total)))
	defer prog.done()
	var total api.ReplayResult
	total.Remaining = p.Total
	path := apiPath("dead-letters", vhost, queue, "replay")
	// A stream DLQ keeps its records: each batch goes on from the offset
	// the last one reached (next_offset), from --offset or --since first.
	var next *uint64
	if c.offset >= 0 {
		o := uint64(c.offset)
		next = &o
	}
	for total.Replayed < limit {
		n := min(c.batch, limit-total.Replayed)
		body := map[string]any{"count": n, "keep_history": c.keepHist}
		switch {
		case next != nil:
			body["offset"] = *next
		case c.since != "":
			body["since"] = c.since
		}
		if c.reason != "" {
			body["reason"] = c.reason
		}
		if c.sourceQ != "" {
			body["source_queue"] = c.sourceQ
		}
		raw, err := c.api.do(http.MethodPost, path, body)
		if err != nil {
			prog.done()
			if total.Replayed > 0 {
				fmt.Fprintf(c.stderr, "warren: %d messages were replayed before the error\n", total.Replayed)
			}
			return err
		}
		var r api.ReplayResult
		if err := json.Unmarshal(raw, &r); err != nil {
			return fmt.Errorf("dlq replay: bad JSON reply: %w", err)
		}
		total.Replayed += r.Replayed
		total.Failed += r.Failed
		if r.NextOffset != nil {
			next = r.NextOffset
		}
		// Each request scans again the messages that do not match (they
		// stay at the head), so its skipped count includes the previous
		// ones: the last, largest, is what one request would have said.
		total.Skipped = max(total.Skipped, r.Skipped)
		total.Remaining = r.Remaining
		if r.Error != "" {
			total.Error = r.Error
		}
		prog.set(total.Replayed)
		if r.Failed > 0 || r.Error != "" || r.Replayed < n {
			if r.Failed == 0 && r.Error == "" {
				prog.total = total.Replayed // nothing more matched: a full bar
				prog.set(total.Replayed)
			}
			break
		}
	}
	prog.done()
	if c.json {
		if err := printValueJSON(c.stdout, total); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(c.stdout, "Replayed %d, skipped %d, failed %d; %d left in %q (vhost %q).\n",
			total.Replayed, total.Skipped, total.Failed, total.Remaining, queue, vhost)
	}
	if total.Failed > 0 || total.Error != "" {
		msg := fmt.Sprintf("dlq replay: %d messages failed to replay and stay in %q", total.Failed, queue)
		if total.Error != "" {
			msg += ": " + total.Error
		}
		return errors.New(msg)
	}
	return nil
}

// matching estimates how many dead letters match --reason and
// --source-queue, from the DLQ's counts in /api/dead-letters/{vhost}
// (for the progress bar only).
func (c *cliCtx) matching(vhost, queue string, all int) int {
	if c.reason == "" && c.sourceQ == "" {
		return all
	}
	var rows []api.DeadLetterQueue
	if _, err := c.api.getJSON(apiPath("dead-letters", vhost), &rows); err != nil {
		return all
	}
	for _, r := range rows {
		if r.Name != queue {
			continue
		}
		n := all
		if c.reason != "" {
			n = min(n, r.ByReason[c.reason])
		}
		if c.sourceQ != "" {
			n = min(n, r.BySource[c.sourceQ])
		}
		return n
	}
	return all
}

// progress draws "[#####-----] 450/1000" redrawn with \r when w is a
// terminal, and a plain line every few seconds otherwise.
type progress struct {
	w         io.Writer
	tty       bool
	label     string
	total, n  int
	last      time.Time
	drawn     bool
	finished  bool
	plainStep time.Duration
}

func newProgress(w io.Writer, label string, total int) *progress {
	return &progress{w: w, tty: isTerminal(w), label: label, total: total, last: time.Now(), plainStep: 5 * time.Second}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (p *progress) set(n int) {
	if p.finished {
		return
	}
	p.n = n
	if n > p.total {
		p.total = n
	}
	if p.tty {
		p.draw()
		return
	}
	if time.Since(p.last) >= p.plainStep {
		p.last = time.Now()
		fmt.Fprintf(p.w, "%s: %d/%d\n", p.label, p.n, p.total)
	}
}

func (p *progress) draw() {
	const width = 30
	filled := width
	if p.total > 0 {
		filled = p.n * width / p.total
	}
	fmt.Fprintf(p.w, "\r%s [%s%s] %d/%d", p.label, strings.Repeat("#", filled), strings.Repeat("-", width-filled), p.n, p.total)
	p.drawn = true
}

// done ends the bar's line; it may be called more than once.
func (p *progress) done() {
	if p.finished {
		return
	}
	p.finished = true
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
	}
}
