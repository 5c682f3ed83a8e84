package main

// The warren CLI: subcommands that talk to a running broker (Warren or
// RabbitMQ) over the management HTTP API (docs/management.md).
//
//	warren queues --vhost /
//	warren dlq inspect orders.dlq
//	warren dlq replay orders.dlq --reason rejected
//	warren cluster status

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// cliCommand is one subcommand. run gets the positional arguments left
// after flag parsing.
type cliCommand struct {
	name    string
	args    string // synopsis of the positional arguments and own flags
	summary string
	// flags registers the subcommand's own flags; it may be nil.
	flags func(fs *flag.FlagSet, c *cliCtx)
	run   func(c *cliCtx, args []string) error
	// subs, when set, makes this a command group (dlq, definitions, policies).
	// A group with run runs it when the first argument is not one of subs
	// (warren queues lists, warren queues grow ... grows).
	subs []*cliCommand
}

// cliCtx holds what every subcommand shares: the global flags, the API
// client and the output streams.
type cliCtx struct {
	stdout, stderr  io.Writer
	url, user, pass string
	vhost           string // "" when --vhost was not given
	json            bool
	api             *apiClient

	// Per-command flags, filled by the command's flags function.
	count      int
	limit      int
	ackmode    string
	encoding   string
	reason     string
	sourceQ    string
	keepHist   bool
	since      string // dlq replay of a stream: where it starts
	offset     int64
	applyTo    string
	priority   int
	batch      int
	truncate   int
	pollPeriod time.Duration
	// warren queues grow and rebalance (cli_qq.go).
	vhostPattern, queuePattern string
	offline                    bool         // warren cluster forget --offline
	super                      *superStream // warren streams add_super_stream
	dataDir                    string       // warren node force-boot
}

// deadFilterFlags are dlq inspect's and dlq replay's filters, by the most
// recent death.
func deadFilterFlags(fs *flag.FlagSet, c *cliCtx) {
	fs.StringVar(&c.reason, "reason", "", "only messages dead-lettered for this reason (rejected, expired, maxlen, delivery_limit)")
	fs.StringVar(&c.sourceQ, "source-queue", "", "only messages dead-lettered from this queue")
}

// oneVhost is the vhost for commands that act on one object: --vhost, or "/".
func (c *cliCtx) oneVhost() string {
	if c.vhost == "" {
		return "/"
	}
	return c.vhost
}

var cliCommands = []*cliCommand{
	{name: "queues", args: "[--vhost V]", summary: "list queues (all vhosts unless --vhost)", run: cmdQueues, subs: quorumSubcommands},
	{name: "exchanges", args: "[--vhost V]", summary: "list exchanges", run: cmdExchanges},
	{name: "bindings", args: "[--vhost V]", summary: "list bindings", run: cmdBindings},
	{name: "get", args: "QUEUE [--count N] [--ackmode MODE] [--encoding auto|base64] [--truncate BYTES]",
		summary: "fetch messages from a queue (default ackmode ack_requeue_true: they stay in the queue)",
		flags: func(fs *flag.FlagSet, c *cliCtx) {
			fs.IntVar(&c.count, "count", 1, "messages to get")
			fs.StringVar(&c.ackmode, "ackmode", "ack_requeue_true", "ack_requeue_true, ack_requeue_false, reject_requeue_true or reject_requeue_false")
			fs.StringVar(&c.encoding, "encoding", "auto", "payload encoding: auto (string when valid UTF-8) or base64")
			fs.IntVar(&c.truncate, "truncate", 0, "truncate payloads to this many bytes (0: whole payload)")
		},
		run: cmdGet},
	{name: "purge", args: "QUEUE", summary: "delete every ready message of a queue", run: cmdPurge},
	{name: "shovels", args: "[--vhost V]", summary: "list the shovels and their state (rabbitmqctl shovel_status)", run: cmdShovels},
	{name: "federation", args: "[--vhost V]", summary: "list the federation links and their state (rabbitmqctl federation_status)", run: cmdFederation},
	{name: "move", args: "SRC DEST", summary: "move all messages from queue SRC to queue DEST (a shovel that deletes itself)",
		flags: func(fs *flag.FlagSet, c *cliCtx) {
			fs.DurationVar(&c.pollPeriod, "poll", 500*time.Millisecond, "how often to check the move's progress")
		},
		run: cmdMove},
	{name: "dlq", summary: "dead-letter queues: list, inspect, replay", subs: []*cliCommand{
		{name: "list", args: "[--vhost V]", summary: "list dead-letter queues with counts by reason and source", run: cmdDLQList},
		{name: "inspect", args: "QUEUE [--limit N] [--reason R] [--source-queue Q]",
			summary: "group a DLQ's messages by death reason and source queue (does not consume)",
			flags: func(fs *flag.FlagSet, c *cliCtx) {
				fs.IntVar(&c.limit, "limit", 10000, "inspect at most this many messages")
				deadFilterFlags(fs, c)
			},
			run: cmdDLQInspect},
		{name: "replay", args: "QUEUE [--count N] [--reason R] [--source-queue Q] [--keep-history] [--since 1h | --offset N]",
			summary: "republish dead letters to where they were first dead-lettered from",
			flags: func(fs *flag.FlagSet, c *cliCtx) {
				fs.IntVar(&c.count, "count", 0, "replay at most this many messages (0: all)")
				deadFilterFlags(fs, c)
				fs.BoolVar(&c.keepHist, "keep-history", false, "keep the x-death history (by default replayed messages start afresh)")
				fs.StringVar(&c.since, "since", "", "a stream DLQ: replay what was dead-lettered since (30m, 1h, 7D or an RFC 3339 time); the stream keeps its records")
				fs.Int64Var(&c.offset, "offset", -1, "a stream DLQ: replay from this offset on; the stream keeps its records")
				fs.IntVar(&c.batch, "batch", 100, "messages per replay request")
			},
			run: cmdDLQReplay},
	}},
	{name: "definitions", summary: "export or import definitions (rabbitmqctl export_definitions format)", subs: []*cliCommand{
		{name: "export", args: "[FILE] [--vhost V]", summary: "write the definitions to FILE (stdout when none)", run: cmdDefsExport},
		{name: "import", args: "FILE [--vhost V]", summary: "import definitions from FILE ('-': stdin)", run: cmdDefsImport},
	}},
	{name: "policies", summary: "list, set and delete policies", subs: []*cliCommand{
		{name: "list", args: "[--vhost V]", summary: "list policies", run: cmdPoliciesList},
		{name: "set", args: "NAME PATTERN DEFINITION_JSON [--apply-to queues|exchanges|all] [--priority N]",
			summary: "create or update a policy",
			flags: func(fs *flag.FlagSet, c *cliCtx) {
				fs.StringVar(&c.applyTo, "apply-to", "all", "queues, exchanges or all")
				fs.IntVar(&c.priority, "priority", 0, "priority among policies matching the same object")
			},
			run: cmdPoliciesSet},
		{name: "delete", args: "NAME", summary: "delete a policy", run: cmdPoliciesDelete},
	}},
	{name: "parameters", summary: "list, set and delete runtime parameters: shovels, federation upstreams (rabbitmqctl set_parameter)", subs: []*cliCommand{
		{name: "list", args: "[COMPONENT] [--vhost V]", summary: "list parameters (of one component: shovel, federation-upstream, ...)", run: cmdParamsList},
		{name: "set", args: "COMPONENT NAME VALUE_JSON [--vhost V]", summary: "create or update a parameter", run: cmdParamsSet},
		{name: "delete", args: "COMPONENT NAME [--vhost V]", summary: "delete a parameter", run: cmdParamsDelete},
	}},
	clusterCommand,
	nodeCommand,
	streamsCommand,
	{name: "help", args: "[COMMAND]", summary: "show this help, or a command's"},
}

// isCLICommand reports whether the first argument of warren is for the
// CLI rather than the broker: a subcommand, a request for help, or any
// other word (the broker takes only flags, so "warren quues" is an
// unknown command rather than a broker start).
func isCLICommand(name string) bool {
	switch name {
	case "-h", "-help", "--help":
		return true
	}
	return name != "" && !strings.HasPrefix(name, "-")
}

// globalFirst moves the connection flags (--url, --user, --password,
// --vhost, --json) written before a command, as rabbitmqadmin takes them
// ("warren --url U queues"), to just after the command and its
// subcommand. Anything else is returned unchanged.
func globalFirst(args []string) []string {
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		switch name {
		case "json":
			i++
		case "url", "user", "password", "vhost":
			i++
			if !hasValue {
				i++
			}
		default:
			return args
		}
	}
	if i == 0 || i >= len(args) {
		return args
	}
	at := i + 1
	if cmd := findCommand(cliCommands, args[i]); cmd != nil && len(cmd.subs) > 0 && at < len(args) && !strings.HasPrefix(args[at], "-") {
		at++
	}
	out := append(slices.Clone(args[i:at]), args[:i]...)
	return append(out, args[at:]...)
}

func findCommand(cmds []*cliCommand, name string) *cliCommand {
	for _, c := range cmds {
		if c.name == name {
			return c
		}
	}
	return nil
}

// runCLI runs one CLI subcommand; args[0] is its name. Output goes to
// stdout, progress and warnings to stderr. The returned error is printed
// by main as "warren: ..." with exit status 1.
func runCLI(args []string, stdout, stderr io.Writer) error {
	switch args[0] {
	case "-h", "-help", "--help":
		// warren -h: the broker's flags, then the subcommands. Returns
		// flag.ErrHelp like the broker's own flag parsing (exit 0).
		var o options
		fs, _ := newFlagSet(&o, stderr)
		fs.Usage()
		fmt.Fprintln(stderr)
		printCommands(stderr)
		return flag.ErrHelp
	case "help":
		if len(args) > 1 {
			if cmd := findCommand(cliCommands, args[1]); cmd != nil && cmd.name != "help" {
				path := []string{cmd.name}
				if len(cmd.subs) > 0 && len(args) > 2 {
					if sub := findCommand(cmd.subs, args[2]); sub != nil {
						cmd, path = sub, append(path, sub.name)
					}
				}
				printCommandUsage(stdout, path, cmd)
				return nil
			}
			return fmt.Errorf("unknown command %q (see warren help)", args[1])
		}
		fmt.Fprintln(stdout, "Usage: warren [flags]            run the broker (warren --help lists the flags)")
		fmt.Fprintln(stdout, "       warren COMMAND [args]     talk to a running broker over its management HTTP API")
		fmt.Fprintln(stdout)
		printCommands(stdout)
		return nil
	}
	cmd := findCommand(cliCommands, args[0])
	if cmd == nil {
		return fmt.Errorf("unknown command %q (warren help lists the commands; the broker takes only flags)", args[0])
	}
	path := []string{cmd.name}
	rest := args[1:]
	if len(cmd.subs) > 0 && !(cmd.run != nil && (len(rest) == 0 || findCommand(cmd.subs, rest[0]) == nil)) {
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			if len(rest) > 0 && (rest[0] == "-h" || rest[0] == "-help" || rest[0] == "--help") {
				printCommandUsage(stdout, path, cmd)
				return nil
			}
			printCommandUsage(stderr, path, cmd)
			return fmt.Errorf("%s: missing subcommand", cmd.name)
		}
		sub := findCommand(cmd.subs, rest[0])
		if sub == nil {
			printCommandUsage(stderr, path, cmd)
			return fmt.Errorf("%s: unknown subcommand %q", cmd.name, rest[0])
		}
		cmd, path, rest = sub, append(path, sub.name), rest[1:]
	}

	c := &cliCtx{stdout: stdout, stderr: stderr}
	fs := cliFlagSet(c, path, cmd, stderr)
	pos, err := parseInterspersed(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%s: %w", strings.Join(path, " "), err)
	}
	c.url = orDefault(c.url, envOr("WARREN_URL", "http://localhost:15672"))
	c.user = orDefault(c.user, envOr("WARREN_USER", "guest"))
	c.pass = orDefault(c.pass, envOr("WARREN_PASSWORD", "guest"))
	api, err := newAPIClient(c.url, c.user, c.pass)
	if err != nil {
		return err
	}
	c.api = api
	return cmd.run(c, pos)
}

func printCommands(w io.Writer) {
	fmt.Fprintln(w, "Commands (talk to a running broker over its management HTTP API):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, cmd := range cliCommands {
		if len(cmd.subs) > 0 && cmd.run != nil {
			fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(cmd.name+" "+positional(cmd.args)), cmd.summary)
		}
		if len(cmd.subs) == 0 {
			fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(cmd.name+" "+positional(cmd.args)), cmd.summary)
			continue
		}
		for _, sub := range cmd.subs {
			fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(cmd.name+" "+sub.name+" "+positional(sub.args)), sub.summary)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "\nFlags of every command:")
	fmt.Fprintln(w, "  --url URL          management API (default http://localhost:15672, env WARREN_URL)")
	fmt.Fprintln(w, "  --user, --password credentials (default guest/guest, env WARREN_USER, WARREN_PASSWORD)")
	fmt.Fprintln(w, `  --vhost V          virtual host (default "/" for commands on one object, all vhosts for lists)`)
	fmt.Fprintln(w, "  --json             print the API's JSON instead of a table")
	fmt.Fprintln(w, "\nwarren help COMMAND, or warren COMMAND -h, shows a command's flags.")
}

// positional is the synopsis without its flags: "QUEUE [--count N]" -> "QUEUE".
func positional(synopsis string) string {
	if i := strings.Index(synopsis, "[-"); i >= 0 {
		synopsis = synopsis[:i]
	}
	return strings.TrimSpace(synopsis)
}

func printCommandUsage(w io.Writer, path []string, cmd *cliCommand) {
	if len(cmd.subs) > 0 {
		if cmd.run != nil {
			fmt.Fprintf(w, "Usage: warren %s %s\n       ", strings.Join(path, " "), cmd.args)
		} else {
			fmt.Fprint(w, "Usage: ")
		}
		fmt.Fprintf(w, "warren %s SUBCOMMAND\n\n%s\n\nSubcommands:\n", strings.Join(path, " "), cmd.summary)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, sub := range cmd.subs {
			fmt.Fprintf(tw, "  %s %s\t%s\n", sub.name, sub.args, sub.summary)
		}
		tw.Flush()
		return
	}
	cliFlagSet(&cliCtx{}, path, cmd, w).Usage()
}

// cliFlagSet makes the flag set of a command: the global flags, then its own.
func cliFlagSet(c *cliCtx, path []string, cmd *cliCommand, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("warren "+strings.Join(path, " "), flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.url, "url", "", "management API base URL (default http://localhost:15672, env WARREN_URL)")
	fs.StringVar(&c.user, "user", "", "user name (default guest, env WARREN_USER)")
	fs.StringVar(&c.pass, "password", "", "password (default guest, env WARREN_PASSWORD)")
	fs.StringVar(&c.vhost, "vhost", "", `virtual host (default "/" for commands on one object, all vhosts for lists)`)
	fs.BoolVar(&c.json, "json", false, "print JSON instead of a table")
	if cmd.flags != nil {
		cmd.flags(fs, c)
	}
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: warren %s %s\n\n%s\n\nFlags:\n", strings.Join(path, " "), cmd.args, cmd.summary)
		fs.PrintDefaults()
	}
	return fs
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// parseInterspersed parses flags that may come before, between or after
// the positional arguments (warren get QUEUE --count 5), which the flag
// package alone does not do. Everything after "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// wantArgs checks the number of positional arguments.
func wantArgs(args []string, min, max int, synopsis string) error {
	if len(args) < min || (max >= 0 && len(args) > max) {
		return fmt.Errorf("usage: warren %s", synopsis)
	}
	return nil
}

// apiClient is a minimal client of the management HTTP API.
type apiClient struct {
	base       string // scheme://host[:port][/prefix], no trailing slash
	user, pass string
	http       *http.Client
}

func newAPIClient(base, user, pass string) (*apiClient, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--url %q: want http://host:port", base)
	}
	return &apiClient{base: strings.TrimRight(base, "/"), user: user, pass: pass,
		http: &http.Client{Timeout: 2 * time.Minute}}, nil
}

// apiPath builds "/api/a/b/c" with each segment escaped (a vhost "/"
// becomes "%2F").
func apiPath(segments ...string) string {
	var b strings.Builder
	b.WriteString("/api")
	for _, s := range segments {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}

// apiError is an error reply of the API: {"error":"...","reason":"..."}.
type apiError struct {
	Status int
	Err    string
	Reason string
	Method string
	Path   string
}

func (e *apiError) Error() string {
	var msg string
	switch {
	case e.Err != "" && e.Reason != "" && e.Reason != e.Err:
		msg = fmt.Sprintf("%d %s: %s", e.Status, e.Err, e.Reason)
	case e.Err != "":
		msg = fmt.Sprintf("%d %s", e.Status, e.Err)
	case e.Reason != "":
		msg = fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Reason)
	default:
		msg = fmt.Sprintf("%d %s", e.Status, http.StatusText(e.Status))
	}
	return msg + " (" + e.Method + " " + e.Path + ")"
}

// oneLine joins the non-blank lines of a reason ("Validation failed\n\n...").
func oneLine(s string) string {
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, ": ")
}

func isNotFound(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

// do sends a request and returns the reply body. body, when not nil, is
// sent as JSON (a []byte is sent as is). A status >= 400 is an *apiError.
func (a *apiClient) do(method, path string, body any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, ok := body.([]byte)
		if !ok {
			var err error
			if b, err = json.Marshal(body); err != nil {
				return nil, err
			}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth(a.user, a.pass)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		ae := &apiError{Status: resp.StatusCode, Method: method, Path: path}
		var eb struct {
			Error  string `json:"error"`
			Reason string `json:"reason"`
		}
		if json.Unmarshal(data, &eb) == nil && (eb.Error != "" || eb.Reason != "") {
			ae.Err, ae.Reason = eb.Error, oneLine(eb.Reason)
		} else if s := strings.TrimSpace(string(data)); s != "" && len(s) < 200 && !strings.HasPrefix(s, "<") {
			ae.Reason = s
		}
		return nil, ae
	}
	return data, nil
}

// getJSON GETs path and decodes the reply into out; it returns the raw body too.
func (a *apiClient) getJSON(path string, out any) ([]byte, error) {
	data, err := a.do(http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return nil, fmt.Errorf("GET %s: bad JSON reply: %w", path, err)
		}
	}
	return data, nil
}

// printJSON writes raw JSON indented.
func printJSON(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		_, err = w.Write(raw)
		return err
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// printValueJSON marshals v indented.
func printValueJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		// Tabs and newlines in names would break the columns.
		cells[i] = strings.NewReplacer("\t", `\t`, "\n", `\n`).Replace(c)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// compactJSON renders a value (arguments, definitions) on one line.
func compactJSON(v any) string {
	if v == nil {
		return ""
	}
	if m, ok := v.(map[string]any); ok && len(m) == 0 {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// num renders a JSON number (float64 after decoding into any) or "".
func num(v any) string {
	switch n := v.(type) {
	case float64:
		return strconv.FormatFloat(n, 'f', -1, 64)
	case json.Number:
		return n.String()
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

func str(v any) string {
	if v == nil {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

// exchangeName shows the default exchange as RabbitMQ's UI does.
func exchangeName(name string) string {
	if name == "" {
		return "(AMQP default)"
	}
	return name
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
