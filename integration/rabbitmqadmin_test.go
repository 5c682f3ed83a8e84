package integration

// RabbitMQ's own command-line client, rabbitmqadmin (Debian's
// /usr/bin/rabbitmqadmin, run with /usr/bin/python3), against Warren and
// against the reference RabbitMQ: the same subcommands with the same
// names on both, exit codes and outputs compared once what legitimately
// differs is normalised (node names, connection names with their ports,
// password hashes, versions and totals of the shared reference node).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testutil"
)

// rabbitmqadmin returns the paths of rabbitmqadmin and python3, skipping
// the test when either is missing (failing under CI=true).
func rabbitmqadmin(t *testing.T) (admin, python string) {
	t.Helper()
	admin, python = "/usr/bin/rabbitmqadmin", "/usr/bin/python3"
	for _, p := range []string{admin, python} {
		if _, err := os.Stat(p); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is missing under CI=true (apt-get install rabbitmq-server python3): %v", p, err)
			}
			t.Skipf("%s is missing (%v): skipping the rabbitmqadmin differential test; Debian's rabbitmq-server package installs it", p, err)
		}
	}
	return admin, python
}

// adminStep is one rabbitmqadmin run. In args, {vh}, {vh2}, {user},
// {sfx} and {conn} are replaced.
type adminStep struct {
	args []string
	// global: the list spans the whole broker (users, vhosts, ...), so
	// only its rows that name this run ({sfx}) are compared.
	global bool
	// mask: columns whose (non-empty) cells differ legitimately.
	mask []string
	// wait: a regexp the normalised output must match; the command is
	// re-run until it does (RabbitMQ refreshes statistics every 5 s).
	wait string
	// absent: a regexp the normalised output must come not to match
	// (re-run as wait).
	absent string
	// allVHosts runs it without -V (export and import the whole broker).
	allVHosts bool
	// before runs first (in Go), e.g. to open a connection.
	before func(t *testing.T, tg *mgmtTarget, st *adminState)
}

// adminState is what a run keeps between steps.
type adminState struct {
	conn   *amqp.Connection
	closed chan *amqp.Error
	name   string // the connection's name in the API
}

// issue 11 item 16 and must-show 5: every rabbitmqadmin subcommand (list,
// show, declare, delete, publish, get, purge, close, export, import)
// gives the same result against Warren as against RabbitMQ. Before,
// rabbitmqadmin could not declare anything on Warren ("auto_delete:
// expected bool, got string").
func TestRabbitmqadminDiff(t *testing.T) {
	t.Parallel()
	admin, python := rabbitmqadmin(t)
	sfx := randomSuffix()
	vh, vh2, user := "hC-ra-"+sfx, "hC-ra-v2-"+sfx, "hC-ra-u-"+sfx
	repl := strings.NewReplacer("{vh}", vh, "{vh2}", vh2, "{user}", user, "{sfx}", sfx)
	importFile := (`{"queues":[{"name":"imp-q","durable":true,"auto_delete":false,"arguments":{"x-max-length":7}}],` +
		`"exchanges":[{"name":"imp-x","type":"fanout","durable":true,"auto_delete":false,"internal":false,"arguments":{}}],` +
		`"bindings":[{"source":"imp-x","destination":"imp-q","destination_type":"queue","routing_key":"","arguments":{}}]}`)
	importAll := fmt.Sprintf(`{"users":[{"name":"hC-ra-imp-%s","password_hash":"","hashing_algorithm":"rabbit_password_hashing_sha256","tags":["monitoring"]}],`+
		`"permissions":[{"user":"hC-ra-imp-%s","vhost":"%s","configure":"^imp","write":".*","read":".*"}]}`, sfx, sfx, vh)

	s := func(args ...string) adminStep { return adminStep{args: args} }
	g := func(args ...string) adminStep { return adminStep{args: args, global: true} }
	steps := []adminStep{
		// declare, every kind
		s("declare", "queue", "name=q1", "durable=true"),
		s("declare", "queue", "name=q2", "durable=false", "auto_delete=true"),
		s("declare", "queue", "name=q3", `arguments={"x-max-length":10,"x-dead-letter-exchange":"x1"}`),
		s("declare", "queue", "name=q4", "queue_type=quorum"),
		s("delete", "queue", "name=q4"),                   // (RabbitMQ's quorum queue statistics come late)
		s("declare", "queue", "name=q1", "durable=false"), // inequivalent
		s("declare", "queue", "name=amq.q"),
		s("declare", "exchange", "name=x1", "type=direct"),
		s("declare", "exchange", "name=x2", "type=topic", "durable=false", "internal=true"),
		s("declare", "exchange", "name=x3", "type=nosuchtype"),
		s("declare", "exchange", "name=amq.mine", "type=direct"),
		s("declare", "binding", "source=x1", "destination=q1", "routing_key=k1"),
		s("declare", "binding", "source=x1", "destination=x2", "destination_type=exchange", "routing_key=k2"),
		s("declare", "binding", "source=x1", "destination=q3", `arguments={"a":1}`),
		s("declare", "binding", "source=nosuch", "destination=q1"),
		s("declare", "vhost", "name={vh2}"),
		s("declare", "user", "name={user}", "password=pw", "tags=management"),
		s("declare", "user", "name=hC-ra-u2-{sfx}", "password_hash=", "tags=monitoring,policymaker"),
		s("declare", "permission", "vhost={vh}", "user={user}", "configure=.*", "write=.*", "read=.*"),
		s("declare", "permission", "vhost={vh2}", "user={user}", "configure=^x", "write=", "read=.*"),
		s("declare", "permission", "vhost=nosuch-{sfx}", "user={user}", "configure=.*", "write=.*", "read=.*"),
		s("declare", "policy", "name=p1", "pattern=^q3$", `definition={"max-length":5}`, "apply-to=queues", "priority=1"),
		s("declare", "policy", "name=p2", "pattern=^x", `definition={"alternate-exchange":"x1"}`, "apply-to=exchanges"),
		s("declare", "policy", "name=p3", "pattern=.*", `definition={"nosuchkey":1}`),
		s("declare", "operator_policy", "name=op1", "pattern=^q3$", `definition={"max-length":50}`, "apply-to=queues"),
		s("declare", "vhost_limit", "vhost={vh}", "name=max-queues", "value=100"),
		s("declare", "vhost_limit", "vhost={vh}", "name=max-nothing", "value=1"),
		s("declare", "queue"), // usage error, client-side
		// list and show
		// Every queue's count shown (RabbitMQ's stats for each queue come on their own).
		{args: []string{"list", "queues"}, wait: `(?s)q1 \| 0 \|.*q2 \| 0 \|.*q3 \| 0 \|`},
		s("list", "queues", "name", "durable", "auto_delete", "arguments", "type"),
		s("list", "queues", "name", "arguments.x-max-length", "arguments.x-dead-letter-exchange"),
		s("list", "exchanges"),
		s("list", "exchanges", "name", "type", "durable", "auto_delete", "internal", "arguments"),
		s("list", "bindings"),
		s("list", "bindings", "source", "destination", "destination_type", "routing_key", "arguments", "properties_key"),
		{args: []string{"list", "users"}, global: true, mask: []string{"password_hash"}},
		{args: []string{"list", "vhosts"}, global: true, wait: `{vh} \| 0 \|`},
		g("list", "vhosts", "name", "tracing"),
		g("list", "permissions"),
		g("list", "policies"),
		g("list", "parameters"),
		g("list", "operator_policies"),
		g("list", "vhost_limits"),
		{args: []string{"list", "nodes"}, mask: []string{"mem_used"}},
		{args: []string{"show", "overview"}, mask: []string{"rabbitmq_version", "cluster_name", "queue_totals.messages", "object_totals.queues"}},
		// publish and get
		s("publish", "routing_key=q1", "payload=m1"),
		s("publish", "exchange=x1", "routing_key=k1", "payload=m2", `properties={"content_type":"text/plain","headers":{"h":"v"},"delivery_mode":2}`),
		s("publish", "exchange=x1", "routing_key=nowhere", "payload=m3"),
		s("publish", "exchange=nosuch", "routing_key=k", "payload=m4"),
		{args: []string{"list", "queues"}, wait: `(?s)q1 \| 2 \|.*q2 \| 0 \|.*q3 \| 0 \|`},
		s("get", "queue=q1", "ackmode=ack_requeue_true", "count=2"),
		s("-f", "pretty_json", "get", "queue=q1", "ackmode=ack_requeue_true", "count=2"),
		s("get", "queue=q1", "ackmode=reject_requeue_true"),
		s("get", "queue=q1", "ackmode=ack_requeue_false"),
		s("get", "queue=q1", "ackmode=reject_requeue_false", "count=5"),
		s("get", "queue=q1"),
		s("get", "queue=nosuch"),
		s("publish", "routing_key=q3", "payload=p1"),
		s("publish", "routing_key=q3", "payload=p2"),
		{args: []string{"list", "queues", "name", "messages"}, wait: `(?s)q1 \| 0 \|.*q2 \| 0 \|.*q3 \| 2 \|`},
		s("purge", "queue", "name=q3"),
		{args: []string{"list", "queues", "name", "messages"}, wait: `(?s)q1 \| 0 \|.*q2 \| 0 \|.*q3 \| 0 \|`},
		s("purge", "queue", "name=nosuch"),
		// connections, channels, consumers; close
		{args: []string{"list", "connections"}, global: true, wait: `{user} \| 1 \|`, before: func(t *testing.T, tg *mgmtTarget, st *adminState) {
			st.conn = tg.dialAs(t, user, "pw", vh, "hC-ra-conn-"+sfx)
			st.closed = st.conn.NotifyClose(make(chan *amqp.Error, 1))
			ch, err := st.conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ch.Consume("q1", "hC-ra-ctag", false, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if err := ch.Qos(3, 0, false); err != nil {
				t.Fatal(err)
			}
		}},
		{args: []string{"list", "connections", "name", "user", "vhost", "channels", "client_properties.connection_name", "state", "protocol"}, global: true, wait: `\| 1 \| hC-ra-conn`},
		{args: []string{"list", "channels"}, global: true, wait: `{user}`},
		{args: []string{"list", "channels", "name", "user", "vhost", "number", "consumer_count", "prefetch_count"}, global: true, wait: `{user} \| {vh} \| 1 \| 1 \|`},
		{args: []string{"list", "consumers"}, wait: `hC-ra-ctag`},
		{args: []string{"list", "consumers", "consumer_tag", "queue.name", "channel_details.user", "ack_required", "exclusive", "prefetch_count"}, wait: `hC-ra-ctag`},
		{args: []string{"close", "connection", "name={conn}"}, before: func(t *testing.T, tg *mgmtTarget, st *adminState) {
			if !testutil.Until(mgmtWait, func() bool {
				for _, c := range findBy(tg.getJSON("/api/connections"), "user", user) {
					st.name, _ = c["name"].(string)
				}
				return st.name != ""
			}) {
				t.Fatalf("[%s] connection of %s not listed", tg.kind, user)
			}
		}},
		{args: []string{"list", "connections"}, global: true, absent: `{user}`, before: func(t *testing.T, tg *mgmtTarget, st *adminState) {
			select {
			case err := <-st.closed:
				if err == nil || err.Code != amqp.ConnectionForced {
					t.Errorf("[%s] closed connection: %v, want 320 CONNECTION_FORCED", tg.kind, err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("[%s] the closed connection was not closed", tg.kind)
			}
		}},
		s("close", "connection", "name=nosuch"),
		// export and import
		s("export", "vh.json"),
		{args: []string{"export", "all.json"}, allVHosts: true},
		s("import", "imp.json"),
		s("list", "queues", "name", "durable", "arguments"),
		s("list", "bindings", "source", "destination", "routing_key"),
		{args: []string{"import", "impall.json"}, allVHosts: true},
		g("list", "permissions"),
		s("import", "nosuch.json"),
		// delete, every kind
		s("delete", "binding", "source=x1", "destination_type=queue", "destination=q1", "properties_key=k1"),
		s("delete", "binding", "source=x1", "destination_type=exchange", "destination=x2", "properties_key=k2"),
		s("delete", "binding", "source=x1", "destination_type=queue", "destination=q1", "properties_key=k1"),
		s("list", "bindings"),
		s("delete", "exchange", "name=x2"),
		s("delete", "exchange", "name=nosuch"),
		s("delete", "queue", "name=q2"),
		s("delete", "queue", "name=nosuch"),
		s("delete", "policy", "name=p1"),
		s("delete", "policy", "name=nosuch"),
		s("delete", "operator_policy", "name=op1"),
		s("delete", "vhost_limit", "vhost={vh}", "name=max-queues"),
		// (Not listed after: RabbitMQ 3.10 keeps an empty vhost-limits
		// parameter, listed with an empty value, once the last limit is
		// deleted.)
		s("delete", "permission", "vhost={vh2}", "user={user}"),
		s("delete", "user", "name=hC-ra-u2-{sfx}"),
		s("delete", "user", "name=hC-ra-imp-{sfx}"),
		s("delete", "user", "name=nosuch-{sfx}"),
		s("delete", "vhost", "name={vh2}"),
		s("delete", "vhost", "name=nosuch-{sfx}"),
		s("list", "queues", "name"),
		s("list", "exchanges", "name", "type"),
		g("list", "policies", "vhost", "name"),
		g("list", "users", "name", "tags"),
		g("list", "vhosts", "name"),
	}

	var results [2][]string
	var exports [2]map[string]any
	t.Run("run", func(t *testing.T) {
		for i, kind := range []string{"warren", "rabbitmq"} {
			t.Run(kind, func(t *testing.T) {
				t.Parallel()
				tg := newMgmtTargetKind(t, kind)
				tg.ownVhost(t, vh)
				t.Cleanup(func() {
					for _, p := range []string{"/api/vhosts/" + esc(vh2), "/api/users/" + esc(user), "/api/users/hC-ra-u2-" + sfx, "/api/users/hC-ra-imp-" + sfx} {
						tg.do("DELETE", p, nil)
					}
				})
				u, err := url.Parse(tg.url)
				if err != nil {
					t.Fatal(err)
				}
				dir := t.TempDir()
				for name, body := range map[string]string{"imp.json": importFile, "impall.json": importAll} {
					if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				drv := startAdminDriver(t, python, admin, dir)
				st := &adminState{}
				for _, step := range steps {
					if step.before != nil {
						step.before(t, tg, st)
					}
					args := []string{"-H", u.Hostname(), "-P", u.Port(), "-u", tg.user, "-p", tg.pass}
					if !step.allVHosts {
						args = append(args, "-V", vh)
					}
					for _, a := range step.args {
						args = append(args, strings.ReplaceAll(repl.Replace(a), "{conn}", st.name))
					}
					var out string
					if !testutil.Until(mgmtWait, func() bool {
						code, raw := drv.run(args)
						out = fmt.Sprintf("exit %d\n%s", code, normalizeAdmin(raw, step, sfx))
						waiting := step.wait != "" && !regexp.MustCompile("(?m)"+repl.Replace(step.wait)).MatchString(out) ||
							step.absent != "" && regexp.MustCompile("(?m)"+repl.Replace(step.absent)).MatchString(out)
						return !waiting
					}) {
						t.Errorf("[%s] rabbitmqadmin %s: output never matched %q (nor stopped matching %q):\n%s", kind, strings.Join(step.args, " "), step.wait, step.absent, out)
					}
					results[i] = append(results[i], out)
				}
				exports[i] = readExports(t, dir, vh, sfx)
			})
		}
	})
	w, r := results[0], results[1]
	if len(w) != len(steps) || len(r) != len(steps) {
		t.Logf("comparison skipped: warren ran %d steps, rabbitmq %d", len(w), len(r))
		return
	}
	for i, step := range steps {
		if testing.Verbose() {
			t.Logf("rabbitmqadmin %s\n%s", repl.Replace(strings.Join(step.args, " ")), w[i])
		}
		if w[i] != r[i] {
			t.Errorf("rabbitmqadmin %s\n--- RabbitMQ:\n%s\n--- Warren:\n%s", repl.Replace(strings.Join(step.args, " ")), r[i], w[i])
		}
	}
	if a, b := jsonString(exports[1]), jsonString(exports[0]); a != b {
		t.Errorf("exported definitions differ:\n--- RabbitMQ:\n%s\n--- Warren:\n%s", a, b)
	}
}

// adminDriverPy runs rabbitmqadmin's main() once per JSON line of
// arguments read from stdin and answers a JSON line {"code","out"} with
// its exit code and output (stdout and stderr): the same code paths as
// the command line, without a Python start-up per command.
const adminDriverPy = `
import contextlib, importlib.machinery, importlib.util, io, json, sys, traceback
loader = importlib.machinery.SourceFileLoader("rabbitmqadmin", sys.argv[1])
spec = importlib.util.spec_from_loader("rabbitmqadmin", loader)
ra = importlib.util.module_from_spec(spec)
loader.exec_module(ra)
real = sys.stdout
for line in sys.stdin:
    ra.parser = ra.OptionParser(usage=ra.short_usage(), formatter=ra.MyFormatter(), epilog=ra.more_help())
    sys.argv = ["rabbitmqadmin"] + json.loads(line)
    out = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            ra.main()
        except SystemExit as e:
            if isinstance(e.code, int):
                code = e.code
            elif e.code is not None:
                print(e.code, file=sys.stderr)
                code = 1
        except Exception:
            traceback.print_exc(limit=0)
            code = 1
    real.write(json.dumps({"code": code, "out": out.getvalue()}) + "\n")
    real.flush()
`

// adminDriver is a running adminDriverPy.
type adminDriver struct {
	t   *testing.T
	in  io.WriteCloser
	out *bufio.Reader
}

func startAdminDriver(t *testing.T, python, admin, dir string) *adminDriver {
	t.Helper()
	cmd := exec.Command(python, "-c", adminDriverPy, admin)
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		_ = cmd.Wait()
	})
	return &adminDriver{t: t, in: in, out: bufio.NewReader(out)}
}

// run runs rabbitmqadmin with args: its exit code and output.
func (d *adminDriver) run(args []string) (int, string) {
	d.t.Helper()
	line, _ := json.Marshal(args)
	if _, err := d.in.Write(append(line, '\n')); err != nil {
		d.t.Fatalf("rabbitmqadmin driver: %v", err)
	}
	reply, err := d.out.ReadBytes('\n')
	if err != nil {
		d.t.Fatalf("rabbitmqadmin driver: %v", err)
	}
	var r struct {
		Code int    `json:"code"`
		Out  string `json:"out"`
	}
	if err := json.Unmarshal(reply, &r); err != nil {
		d.t.Fatalf("rabbitmqadmin driver: %v: %q", err, reply)
	}
	return r.Code, r.Out
}

var (
	adminConnName = regexp.MustCompile(`\d+\.\d+\.\d+\.\d+:\d+ -> \d+\.\d+\.\d+\.\d+:\d+`)
	adminNode     = regexp.MustCompile(`(rabbit|warren)@[A-Za-z0-9_.-]+`)
	adminHTTPPort = regexp.MustCompile(`(127\.0\.0\.1|localhost):\d+`)
)

// normalizeAdmin makes rabbitmqadmin's output comparable: tables are
// reduced to their cells (widths depend on the values), JSON cells are
// re-encoded with sorted keys, a global list keeps the header and the
// rows naming sfx, masked columns show <masked>, and node and connection
// names are replaced. The rows of a list are sorted: neither broker
// promises an order (RabbitMQ's is its tables' hash order).
func normalizeAdmin(out string, step adminStep, sfx string) string {
	out = adminConnName.ReplaceAllString(out, "<conn>")
	out = adminNode.ReplaceAllString(out, "<node>")
	out = adminHTTPPort.ReplaceAllString(out, "<host:port>")
	var b strings.Builder
	var header []string
	var rows []string
	pendingHeader := ""
	flush := func() {
		if step.args[0] == "list" {
			sort.Strings(rows)
		}
		for _, r := range rows {
			b.WriteString(r)
		}
		rows = nil
	}
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if strings.HasPrefix(line, "+-") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			flush()
			b.WriteString(line + "\n")
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if header == nil {
			header = cells
			if step.global {
				// Written with the first row that names this run: other
				// tests' rows are dropped below, and a list with none of
				// ours left reads as rabbitmqadmin's empty list.
				pendingHeader = "| " + strings.Join(cells, " | ") + " |\n"
			} else {
				b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
			}
			continue
		} else {
			if step.global && !strings.Contains(line, sfx) {
				continue
			}
			if slices.Contains(cells, "Direct 0-9-1") {
				// RabbitMQ's own direct connection (the management API's
				// publish and get open one in the vhost and close it a
				// moment later): not a client's.
				continue
			}
			b.WriteString(pendingHeader)
			pendingHeader = ""
			for i, c := range cells {
				if i < len(header) && c != "" && contains(step.mask, header[i]) {
					cells[i] = "<masked>"
				} else if strings.HasPrefix(c, "{") || strings.HasPrefix(c, "[") {
					var v any
					if json.Unmarshal([]byte(c), &v) == nil {
						cells[i] = jsonString(v)
					}
				}
			}
		}
		rows = append(rows, "| "+strings.Join(cells, " | ")+" |\n")
	}
	flush()
	if pendingHeader != "" {
		b.WriteString("No items\n")
	}
	return b.String()
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// readExports reads the files rabbitmqadmin export wrote: the vhost's
// definitions whole, and of the broker's, the objects of this run.
func readExports(t *testing.T, dir, vh, sfx string) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, name := range []string{"vh.json", "all.json"} {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			out[name] = "missing: " + err.Error()
			continue
		}
		var d map[string]any
		if err := json.Unmarshal(raw, &d); err != nil {
			out[name] = "not JSON: " + err.Error()
			continue
		}
		// Warren exports as RabbitMQ 4.x does: with rabbitmq_version,
		// product_name and product_version (3.10 has rabbit_version
		// only), and each queue's type (3.10 has it in the arguments of
		// quorum queues only).
		for _, k := range []string{"rabbitmq_version", "product_name", "product_version"} {
			delete(d, k)
		}
		d["rabbit_version"] = "<version>"
		// ...and vhosts with their metadata and limits (RabbitMQ 3.11+).
		if vs, ok := d["vhosts"].([]any); ok {
			for _, v := range vs {
				delete(v.(map[string]any), "metadata")
				delete(v.(map[string]any), "limits")
			}
		}
		if qs, ok := d["queues"].([]any); ok {
			for _, q := range qs {
				delete(q.(map[string]any), "type")
			}
		}
		if name == "all.json" {
			for k, v := range d {
				list, ok := v.([]any)
				if !ok {
					continue
				}
				kept := []any{}
				for _, e := range list {
					m, _ := e.(map[string]any)
					if strings.Contains(jsonString(m), sfx) {
						if _, ok := m["password_hash"]; ok {
							m["password_hash"] = "<masked>"
						}
						kept = append(kept, m)
					}
				}
				d[k] = kept
			}
		}
		for _, v := range d {
			if list, ok := v.([]any); ok {
				sort.Slice(list, func(i, j int) bool { return jsonString(list[i]) < jsonString(list[j]) })
			}
		}
		out[name] = d
	}
	return out
}
