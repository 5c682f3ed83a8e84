package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/warrenmq/warren/mgmt/api"
)

// listPath is /api/{kind} or /api/{kind}/{vhost}.
func (c *cliCtx) listPath(kind string) string {
	if c.vhost == "" {
		return apiPath(kind)
	}
	return apiPath(kind, c.vhost)
}

// listTable runs a list command: it GETs the API's list of kind and prints
// it as a table of header and cells, with a VHOST column first when no
// --vhost narrows the list (or the API's JSON with --json).
func listTable[T any](c *cliCtx, kind, usage string, args []string, header []string, vhost func(T) string, cells func(T) []string) error {
	if err := wantArgs(args, 0, 0, usage); err != nil {
		return err
	}
	var rows []T
	raw, err := c.api.getJSON(c.listPath(kind), &rows)
	if err != nil {
		return err
	}
	if c.json {
		return printJSON(c.stdout, raw)
	}
	if c.vhost == "" {
		header = append([]string{"VHOST"}, header...)
	}
	t := newTable(c.stdout, header...)
	for _, r := range rows {
		cs := cells(r)
		if c.vhost == "" {
			cs = append([]string{vhost(r)}, cs...)
		}
		t.row(cs...)
	}
	return t.flush()
}

func cmdQueues(c *cliCtx, args []string) error {
	return listTable(c, "queues", "queues [--vhost V]", args,
		[]string{"NAME", "TYPE", "MESSAGES", "READY", "UNACKED", "CONSUMERS", "STATE"},
		func(q api.Queue) string { return q.VHost },
		func(q api.Queue) []string {
			counts := []string{"", "", "", ""} // a queue whose node is down has none
			if l := q.QueueLive; l != nil {
				counts = []string{fmt.Sprint(l.Messages), fmt.Sprint(l.MessagesReady), fmt.Sprint(l.MessagesUnacknowledged), fmt.Sprint(l.Consumers)}
			}
			return append(append([]string{q.Name, q.Type}, counts...), q.State)
		})
}

func cmdExchanges(c *cliCtx, args []string) error {
	return listTable(c, "exchanges", "exchanges [--vhost V]", args,
		[]string{"NAME", "TYPE", "DURABLE", "AUTO_DELETE", "INTERNAL", "ARGUMENTS"},
		func(x api.Exchange) string { return x.VHost },
		func(x api.Exchange) []string {
			return []string{exchangeName(x.Name), x.Type, fmt.Sprint(x.Durable), fmt.Sprint(x.AutoDelete),
				fmt.Sprint(x.Internal), compactJSON(x.Arguments)}
		})
}

// cmdShovels lists /api/shovels: each shovel's node and state, its ends
// (without credentials) while it runs, its reason once terminated.
func cmdShovels(c *cliCtx, args []string) error {
	return listTable(c, "shovels", "shovels [--vhost V]", args,
		[]string{"NAME", "NODE", "STATE", "SOURCE", "DESTINATION", "FORWARDED", "REASON"},
		func(s api.Shovel) string { return s.VHost },
		func(s api.Shovel) []string {
			src, dest := "", ""
			if s.State == "running" {
				src = s.SrcURI + " " + s.SrcQueue
				if s.SrcExchange != "" {
					src = s.SrcURI + " exchange " + exchangeName(s.SrcExchange)
				}
				dest = s.DestURI + " " + s.DestQueue
				if s.DestExchange != "" {
					dest = s.DestURI + " exchange " + exchangeName(s.DestExchange)
				}
			}
			return []string{s.Name, s.Node, s.State, src, dest, fmt.Sprint(s.Forwarded), s.Reason}
		})
}

// cmdFederation lists /api/federation-links: each link's exchange (or
// queue), upstream, node and status, the upstream's URI without
// credentials, the error of a failed one.
func cmdFederation(c *cliCtx, args []string) error {
	return listTable(c, "federation-links", "federation [--vhost V]", args,
		[]string{"TYPE", "EXCHANGE/QUEUE", "UPSTREAM", "NODE", "STATUS", "URI", "ERROR"},
		func(l api.FederationLink) string { return l.VHost },
		func(l api.FederationLink) []string {
			name := l.Exchange
			if l.Type == "queue" {
				name = l.Queue
			}
			return []string{l.Type, name, l.Upstream, l.Node, l.Status, l.URI, l.Error}
		})
}

func cmdBindings(c *cliCtx, args []string) error {
	return listTable(c, "bindings", "bindings [--vhost V]", args,
		[]string{"SOURCE", "DESTINATION", "DESTINATION_TYPE", "ROUTING_KEY", "ARGUMENTS"},
		func(b api.Binding) string { return b.VHost },
		func(b api.Binding) []string {
			return []string{exchangeName(b.Source), b.Destination, b.DestinationType, b.RoutingKey, compactJSON(b.Arguments)}
		})
}

// msgHeaders returns the message's headers table, or nil.
func msgHeaders(m *api.Browsed) map[string]any {
	h, _ := m.Properties["headers"].(map[string]any)
	return h
}

// msgDeaths returns the decoded x-death history, most recent first: the
// API's x_death field when present, else the x-death header.
func msgDeaths(m *api.Browsed) []api.Death {
	if len(m.XDeath) > 0 {
		return m.XDeath
	}
	return decodeXDeath(msgHeaders(m)["x-death"])
}

// deathWhen decodes an x-death entry's time: seconds since the epoch
// (RabbitMQ's API renders AMQP timestamps as numbers) or a date string.
func deathWhen(d api.Death) (time.Time, bool) {
	switch v := d.Time.(type) {
	case float64:
		return time.Unix(int64(v), 0).UTC(), true
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return time.Unix(n, 0).UTC(), true
		}
	case string:
		for _, layout := range []string{time.RFC3339, "2006-01-02 15:04:05"} {
			if t, err := time.Parse(layout, v); err == nil {
				return t.UTC(), true
			}
		}
	}
	return time.Time{}, false
}

// decodeXDeath turns the x-death header as JSON (a list of tables) into entries.
func decodeXDeath(v any) []api.Death {
	list, ok := v.([]any)
	if !ok {
		return nil
	}
	var out []api.Death
	for _, e := range list {
		t, ok := e.(map[string]any)
		if !ok {
			continue
		}
		d := api.Death{Reason: str(t["reason"]), Queue: str(t["queue"]), Exchange: str(t["exchange"]), Time: t["time"]}
		if exp, ok := t["original-expiration"].(string); ok {
			d.OriginalExpiration = &exp
		}
		if n, ok := t["count"].(float64); ok {
			d.Count = int64(n)
		}
		if keys, ok := t["routing-keys"].([]any); ok {
			for _, k := range keys {
				d.RoutingKeys = append(d.RoutingKeys, str(k))
			}
		}
		out = append(out, d)
	}
	return out
}

// deathString is an x-death entry in a line.
func deathString(d api.Death) string {
	s := fmt.Sprintf("%s from queue %q", d.Reason, d.Queue)
	if d.Count > 1 {
		s += fmt.Sprintf(" %d times", d.Count)
	}
	s += fmt.Sprintf(", exchange %q", exchangeName(d.Exchange))
	if len(d.RoutingKeys) > 0 {
		s += ", routing keys " + strings.Join(d.RoutingKeys, ",")
	}
	if t, ok := deathWhen(d); ok {
		s += ", at " + t.Format(time.RFC3339)
	}
	if d.OriginalExpiration != nil && *d.OriginalExpiration != "" {
		s += ", original expiration " + *d.OriginalExpiration + " ms"
	}
	return s
}

var ackmodes = []string{"ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false"}

func cmdGet(c *cliCtx, args []string) error {
	if err := wantArgs(args, 1, 1, "get QUEUE [--count N] [--ackmode MODE] [--encoding auto|base64]"); err != nil {
		return err
	}
	valid := false
	for _, m := range ackmodes {
		valid = valid || c.ackmode == m
	}
	if !valid {
		return fmt.Errorf("get: --ackmode %q: want one of %s", c.ackmode, strings.Join(ackmodes, ", "))
	}
	if c.encoding != "auto" && c.encoding != "base64" {
		return fmt.Errorf("get: --encoding %q: want auto or base64", c.encoding)
	}
	if c.count < 1 {
		return fmt.Errorf("get: --count must be at least 1")
	}
	body := map[string]any{"count": c.count, "ackmode": c.ackmode, "encoding": c.encoding}
	if c.truncate > 0 {
		body["truncate"] = c.truncate
	}
	raw, err := c.api.do(http.MethodPost, apiPath("queues", c.oneVhost(), args[0], "get"), body)
	if err != nil {
		return err
	}
	if c.json {
		return printJSON(c.stdout, raw)
	}
	var msgs []api.Browsed
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return fmt.Errorf("get: bad JSON reply: %w", err)
	}
	if len(msgs) == 0 {
		fmt.Fprintf(c.stdout, "Queue %q is empty.\n", args[0])
		return nil
	}
	for i, m := range msgs {
		if i > 0 {
			fmt.Fprintln(c.stdout)
		}
		fmt.Fprintf(c.stdout, "Message %d\n", i+1)
		printMessage(c, &m)
	}
	return nil
}

// printMessage writes one message as indented "Field: value" lines.
func printMessage(c *cliCtx, m *api.Browsed) {
	w := newTable(c.stdout)
	field := func(k, v string) { w.row("  "+k+":", v) }
	field("Exchange", exchangeName(m.Exchange))
	field("Routing key", m.RoutingKey)
	field("Redelivered", fmt.Sprint(m.Redelivered))
	if m.MessageCount != nil {
		field("Left in queue", fmt.Sprint(*m.MessageCount))
	}
	var props []string
	for _, k := range sortedKeys(m.Properties) {
		if k != "headers" {
			props = append(props, k+"="+propString(m.Properties[k]))
		}
	}
	if len(props) > 0 {
		field("Properties", strings.Join(props, " "))
	}
	h := msgHeaders(m)
	for _, k := range sortedKeys(h) {
		if k == "x-death" {
			continue
		}
		field("Header "+k, propString(h[k]))
	}
	deaths := msgDeaths(m)
	for i, d := range deaths {
		label := "Death"
		if len(deaths) > 1 {
			label = fmt.Sprintf("Death %d", i+1)
		}
		field(label, deathString(d))
	}
	field("Payload", fmt.Sprintf("%d bytes, %s", m.PayloadBytes, m.PayloadEncoding))
	w.flush()
	payload := m.Payload
	if m.PayloadEncoding == "base64" {
		// Show it decoded when it is text after all (--encoding base64).
		if b, err := base64.StdEncoding.DecodeString(payload); err == nil && utf8.Valid(b) && c.encoding != "base64" {
			payload = string(b)
		}
	}
	for _, line := range strings.Split(payload, "\n") {
		fmt.Fprintln(c.stdout, "    "+line)
	}
}

func propString(v any) string {
	switch v.(type) {
	case map[string]any, []any:
		return compactJSON(v)
	case float64:
		return num(v)
	case string:
		if v == "" {
			return `""`
		}
	}
	return str(v)
}

func cmdPurge(c *cliCtx, args []string) error {
	if err := wantArgs(args, 1, 1, "purge QUEUE"); err != nil {
		return err
	}
	raw, err := c.api.do(http.MethodDelete, apiPath("queues", c.oneVhost(), args[0], "contents"), nil)
	if err != nil {
		return err
	}
	if c.json {
		if len(strings.TrimSpace(string(raw))) == 0 {
			raw = []byte(`{}`)
		}
		return printJSON(c.stdout, raw)
	}
	// RabbitMQ replies 204 with no body; a body with a count is shown.
	var reply struct {
		Count *int `json:"message_count"`
	}
	if json.Unmarshal(raw, &reply) == nil && reply.Count != nil {
		fmt.Fprintf(c.stdout, "Purged %d messages from queue %q in vhost %q.\n", *reply.Count, args[0], c.oneVhost())
		return nil
	}
	fmt.Fprintf(c.stdout, "Purged queue %q in vhost %q.\n", args[0], c.oneVhost())
	return nil
}

// queueInfo is what move needs of GET /api/queues/{vhost}/{name}.
type queueInfo struct {
	Name          string `json:"name"`
	Messages      int    `json:"messages"`
	MessagesReady int    `json:"messages_ready"`
}

func (c *cliCtx) queue(vhost, name string) (*queueInfo, error) {
	var q queueInfo
	if _, err := c.api.getJSON(apiPath("queues", vhost, name), &q); err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("no queue %q in vhost %q: %w", name, vhost, err)
		}
		return nil, err
	}
	return &q, nil
}

// cmdMove moves every message from SRC to DEST as RabbitMQ's UI does: a
// dynamic shovel with src-delete-after queue-length, which removes its own
// parameter when done. Progress is the source queue's depth.
func cmdMove(c *cliCtx, args []string) error {
	if err := wantArgs(args, 2, 2, "move SRC DEST"); err != nil {
		return err
	}
	vhost, src, dest := c.oneVhost(), args[0], args[1]
	if src == dest {
		return fmt.Errorf("move: source and destination are the same queue")
	}
	sq, err := c.queue(vhost, src)
	if err != nil {
		return err
	}
	if _, err := c.queue(vhost, dest); err != nil {
		return err
	}
	total := sq.Messages
	name := fmt.Sprintf("warren-move-%s-%d", src, time.Now().UnixNano())
	vhostURI := "amqp:///" + url.PathEscape(vhost)
	value := map[string]any{"value": map[string]any{
		"src-uri": vhostURI, "src-queue": src,
		"dest-uri": vhostURI, "dest-queue": dest,
		"src-delete-after": "queue-length",
	}}
	paramPath := apiPath("parameters", "shovel", vhost, name)
	if _, err := c.api.do(http.MethodPut, paramPath, value); err != nil {
		return fmt.Errorf("move: starting the shovel: %w", err)
	}
	prog := newProgress(c.stderr, "moving", total)
	defer prog.done()
	for {
		time.Sleep(c.pollPeriod)
		_, err := c.api.do(http.MethodGet, paramPath, nil)
		finished := isNotFound(err)
		if err != nil && !finished {
			return fmt.Errorf("move: %w", err)
		}
		if q, qerr := c.queue(vhost, src); qerr == nil && !finished {
			prog.set(max(0, total-q.Messages))
		}
		if finished {
			prog.set(total)
			break
		}
		if state, reason := c.shovelState(vhost, name); state == "terminated" {
			return fmt.Errorf("move: the shovel stopped: %s (parameter %s left in place)", reason, name)
		}
	}
	prog.done()
	left := 0
	if q, err := c.queue(vhost, src); err == nil {
		left = q.Messages
	}
	if c.json {
		return printValueJSON(c.stdout, map[string]any{"vhost": vhost, "source": src, "destination": dest,
			"moved": max(0, total-left), "left": left})
	}
	fmt.Fprintf(c.stdout, "Moved %d messages from %q to %q in vhost %q.\n", max(0, total-left), src, dest, vhost)
	return nil
}

// shovelState looks the shovel up in /api/shovels/{vhost}.
func (c *cliCtx) shovelState(vhost, name string) (state, reason string) {
	var rows []api.Shovel
	if _, err := c.api.getJSON(apiPath("shovels", vhost), &rows); err != nil {
		return "", ""
	}
	for _, r := range rows {
		if r.Name == name {
			return r.State, r.Reason
		}
	}
	return "", ""
}
