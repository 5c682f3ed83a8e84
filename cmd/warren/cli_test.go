package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/mgmt/api"
	"github.com/warrenmq/warren/warrentest"
)

// The CLI tests run runCLI in-process against a Warren started by
// warrentest, with its management API on a random port. With
// WARREN_CLI_TEST_RABBITMQ="http://127.0.0.1:15672,amqp://guest:guest@127.0.0.1:5672"
// they run against that RabbitMQ instead, each test in a vhost of its own
// that is deleted afterwards; the tests of Warren's extensions
// (/api/dead-letters, in-process move) are skipped there.

// cliEnv is one broker (or one RabbitMQ vhost) the CLI talks to.
type cliEnv struct {
	t       *testing.T
	mgmt    string // management base URL
	amqpURL string
	vhost   string
	rabbit  bool
}

func newCLIEnv(t *testing.T) *cliEnv {
	t.Helper()
	if spec := os.Getenv("WARREN_CLI_TEST_RABBITMQ"); spec != "" {
		mgmt, amqpBase, ok := strings.Cut(spec, ",")
		if !ok {
			t.Fatalf("WARREN_CLI_TEST_RABBITMQ=%q: want MGMT_URL,AMQP_URL", spec)
		}
		vhost := fmt.Sprintf("warren-cli-test/%s-%d", t.Name(), time.Now().UnixNano())
		api, err := newAPIClient(mgmt, "guest", "guest")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := api.do(http.MethodPut, apiPath("vhosts", vhost), map[string]any{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { api.do(http.MethodDelete, apiPath("vhosts", vhost), nil) })
		perm := map[string]any{"configure": ".*", "write": ".*", "read": ".*"}
		if _, err := api.do(http.MethodPut, apiPath("permissions", vhost, "guest"), perm); err != nil {
			t.Fatal(err)
		}
		return &cliEnv{t: t, mgmt: mgmt, amqpURL: strings.TrimRight(amqpBase, "/") + "/" + url.PathEscape(vhost), vhost: vhost, rabbit: true}
	}
	b := warrentest.Start(t)
	return &cliEnv{t: t, mgmt: b.MgmtURL(), amqpURL: b.URL(), vhost: "/"}
}

// warrenOnly skips tests of Warren's own API extensions under RabbitMQ.
func (e *cliEnv) warrenOnly() {
	if e.rabbit {
		e.t.Skip("Warren extension of the management API")
	}
}

// listHeader is the first column of lists: VHOST when they cover all vhosts.
func (e *cliEnv) listHeader() string {
	if e.rabbit {
		return "NAME"
	}
	return "VHOST"
}

// cli runs the CLI with --url (and, against RabbitMQ, the test's --vhost
// unless the arguments have one) and returns its stdout.
func (e *cliEnv) cli(args ...string) (string, error) {
	out, _, err := e.cliErr(args...)
	return out, err
}

func (e *cliEnv) cliErr(args ...string) (stdout, stderr string, err error) {
	args = append(slices.Clone(args), "--url", e.mgmt)
	if e.rabbit && !slices.Contains(args, "--vhost") {
		args = append(args, "--vhost", e.vhost)
	}
	var o, s bytes.Buffer
	err = runCLI(args, &o, &s)
	return o.String(), s.String(), err
}

// mustCLI runs the CLI and fails the test on an error.
func (e *cliEnv) mustCLI(args ...string) string {
	e.t.Helper()
	out, stderr, err := e.cliErr(args...)
	if err != nil {
		e.t.Fatalf("warren %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, stderr)
	}
	return out
}

// cliJSON runs the CLI with --json and decodes its output into v.
func (e *cliEnv) cliJSON(v any, args ...string) {
	e.t.Helper()
	out := e.mustCLI(append(args, "--json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		e.t.Fatalf("warren %s --json: output does not parse: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (e *cliEnv) channel() *amqp.Channel {
	e.t.Helper()
	conn, err := amqp.Dial(e.amqpURL)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		e.t.Fatal(err)
	}
	return ch
}

func declare(t *testing.T, ch *amqp.Channel, name string, args amqp.Table) {
	t.Helper()
	if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		t.Fatalf("declare %s: %v", name, err)
	}
}

// publish sends confirmed messages to the default exchange.
func publish(t *testing.T, ch *amqp.Channel, queue string, msgs ...amqp.Publishing) {
	t.Helper()
	for _, m := range msgs {
		if m.DeliveryMode == 0 {
			m.DeliveryMode = amqp.Persistent
		}
		dc, err := ch.PublishWithDeferredConfirm("", queue, false, false, m)
		if err != nil {
			t.Fatal(err)
		}
		if !dc.Wait() {
			t.Fatalf("publish to %s nacked", queue)
		}
	}
}

func body(s string) amqp.Publishing { return amqp.Publishing{Body: []byte(s)} }

// depth is the queue's ready count, from a passive declare.
func depth(t *testing.T, ch *amqp.Channel, queue string) int {
	t.Helper()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("passive declare %s: %v", queue, err)
	}
	return q.Messages
}

// drain gets every ready message of a queue over AMQP, acking them.
func drain(t *testing.T, ch *amqp.Channel, queue string) []amqp.Delivery {
	t.Helper()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		d.Ack(false)
		out = append(out, d)
	}
}

// eventually retries f until it succeeds or 15 seconds pass (RabbitMQ's
// management stats lag the broker by seconds; Warren's should not).
func eventually(t *testing.T, f func() error) {
	t.Helper()
	if err := testutil.UntilNil(15*time.Second, f); err != nil {
		t.Fatal(err)
	}
}

// parseTable reads the table whose header line starts with first: a row
// per line until a blank line, cells keyed by header, sliced at the header
// columns (tabwriter aligns cells with the headers).
func parseTable(t *testing.T, out, first string) []map[string]string {
	t.Helper()
	lines := strings.Split(out, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, first+" ") })
	if start < 0 {
		t.Fatalf("no table with header %q in:\n%s", first, out)
	}
	header := lines[start]
	locs := regexp.MustCompile(`\S+( \S+)*`).FindAllStringIndex(header, -1)
	var rows []map[string]string
	for _, l := range lines[start+1:] {
		if strings.TrimSpace(l) == "" {
			break
		}
		row := map[string]string{}
		for i, loc := range locs {
			end := len(l)
			if i+1 < len(locs) {
				end = min(len(l), locs[i+1][0])
			}
			cell := ""
			if loc[0] < len(l) {
				cell = strings.TrimSpace(l[loc[0]:end])
			}
			row[header[loc[0]:loc[1]]] = cell
		}
		rows = append(rows, row)
	}
	return rows
}

// findRow returns the row whose column col is val.
func findRow(rows []map[string]string, col, val string) map[string]string {
	for _, r := range rows {
		if r[col] == val {
			return r
		}
	}
	return nil
}

func wantErr(t *testing.T, err error, substrings ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one mentioning %q", substrings)
	}
	for _, s := range substrings {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %q does not mention %q", err, s)
		}
	}
}

func TestCLIQueues(t *testing.T) {
	e := newCLIEnv(t)
	ch := e.channel()
	declare(t, ch, "cli.q1", nil)
	declare(t, ch, "cli.q2", amqp.Table{"x-max-length": int32(10)})
	publish(t, ch, "cli.q1", body("a"), body("b"), body("c"))
	// One unacked delivery on cli.q1, from a consumer of its own.
	cons := e.channel()
	if err := cons.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := cons.Consume("cli.q1", "c1", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}

	eventually(t, func() error {
		out := e.mustCLI("queues")
		rows := parseTable(t, out, e.listHeader())
		q1 := findRow(rows, "NAME", "cli.q1")
		want := map[string]string{"TYPE": "classic", "MESSAGES": "3", "READY": "2", "UNACKED": "1", "CONSUMERS": "1"}
		if q1 == nil {
			return fmt.Errorf("no cli.q1 in\n%s", out)
		}
		for k, v := range want {
			if q1[k] != v {
				return fmt.Errorf("cli.q1 %s = %q, want %q in\n%s", k, q1[k], v, out)
			}
		}
		if !e.rabbit && q1["VHOST"] != "/" {
			return fmt.Errorf("cli.q1 VHOST = %q, want /", q1["VHOST"])
		}
		if q2 := findRow(rows, "NAME", "cli.q2"); q2 == nil || q2["MESSAGES"] != "0" {
			return fmt.Errorf("cli.q2 missing or not empty in\n%s", out)
		}
		return nil
	})

	// --vhost: no VHOST column; --json: the API's list.
	out := e.mustCLI("queues", "--vhost", e.vhost)
	if rows := parseTable(t, out, "NAME"); findRow(rows, "NAME", "cli.q1") == nil {
		t.Fatalf("queues --vhost %s lacks cli.q1:\n%s", e.vhost, out)
	}
	var qs []map[string]any
	e.cliJSON(&qs, "queues", "--vhost", e.vhost)
	i := slices.IndexFunc(qs, func(q map[string]any) bool { return q["name"] == "cli.q2" })
	if i < 0 || qs[i]["vhost"] != e.vhost || qs[i]["arguments"].(map[string]any)["x-max-length"] != float64(10) {
		t.Fatalf("queues --json: cli.q2 missing or wrong: %v", qs)
	}

	// The connection flags before the command, rabbitmqadmin's order.
	var o, s bytes.Buffer
	if err := runCLI(globalFirst([]string{"--url", e.mgmt, "--vhost", e.vhost, "--json", "queues"}), &o, &s); err != nil {
		t.Fatalf("warren --url ... --json queues: %v %s", err, s.String())
	}
	qs = nil
	if err := json.Unmarshal(o.Bytes(), &qs); err != nil || !slices.ContainsFunc(qs, func(q map[string]any) bool { return q["name"] == "cli.q1" }) {
		t.Fatalf("warren --url ... --json queues: %v %s", err, o.String())
	}

	// A vhost that does not exist is the API's 404.
	_, err := e.cli("queues", "--vhost", "no-such-vhost")
	wantErr(t, err, "404")
}

func TestCLIExchangesAndBindings(t *testing.T) {
	e := newCLIEnv(t)
	ch := e.channel()
	if err := ch.ExchangeDeclare("cli.x", "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	declare(t, ch, "cli.bq", nil)
	if err := ch.QueueBind("cli.bq", "orders.#", "cli.x", false, nil); err != nil {
		t.Fatal(err)
	}

	out := e.mustCLI("exchanges", "--vhost", e.vhost)
	rows := parseTable(t, out, "NAME")
	x := findRow(rows, "NAME", "cli.x")
	if x == nil || x["TYPE"] != "topic" || x["DURABLE"] != "true" || x["AUTO_DELETE"] != "false" {
		t.Fatalf("exchanges: cli.x missing or wrong %v in\n%s", x, out)
	}
	if d := findRow(rows, "NAME", "(AMQP default)"); d == nil || d["TYPE"] != "direct" {
		t.Fatalf("exchanges: the default exchange missing in\n%s", out)
	}
	if findRow(rows, "NAME", "amq.topic") == nil {
		t.Fatalf("exchanges: amq.topic missing in\n%s", out)
	}
	var xs []map[string]any
	e.cliJSON(&xs, "exchanges")
	if !slices.ContainsFunc(xs, func(x map[string]any) bool { return x["name"] == "cli.x" && x["type"] == "topic" }) {
		t.Fatalf("exchanges --json lacks cli.x: %v", xs)
	}

	out = e.mustCLI("bindings", "--vhost", e.vhost)
	rows = parseTable(t, out, "SOURCE")
	b := findRow(rows, "SOURCE", "cli.x")
	if b == nil || b["DESTINATION"] != "cli.bq" || b["DESTINATION_TYPE"] != "queue" || b["ROUTING_KEY"] != "orders.#" {
		t.Fatalf("bindings: cli.x -> cli.bq missing or wrong %v in\n%s", b, out)
	}
	if d := findRow(rows, "DESTINATION", "cli.bq"); d == nil {
		t.Fatalf("bindings: no binding to cli.bq in\n%s", out)
	}
	var bs []map[string]any
	e.cliJSON(&bs, "bindings")
	if !slices.ContainsFunc(bs, func(b map[string]any) bool {
		return b["source"] == "cli.x" && b["destination"] == "cli.bq" && b["routing_key"] == "orders.#"
	}) {
		t.Fatalf("bindings --json lacks cli.x -> cli.bq: %v", bs)
	}
}

func TestCLIGet(t *testing.T) {
	e := newCLIEnv(t)
	ch := e.channel()
	declare(t, ch, "cli.dlq", nil)
	declare(t, ch, "cli.work", amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "cli.dlq"})
	publish(t, ch, "cli.work", amqp.Publishing{Body: []byte("hello\nworld"), ContentType: "text/plain",
		Headers: amqp.Table{"tenant": "acme", "attempt": int32(2)}})
	publish(t, ch, "cli.work", body("second"))

	// The default ackmode requeues: the messages stay.
	out := e.mustCLI("get", "cli.work", "--count", "5")
	for _, want := range []string{"Message 1", "Message 2", "Routing key:", "cli.work", "hello", "world",
		"Header tenant:", "acme", "Header attempt:", "content_type=text/plain", "second"} {
		if !strings.Contains(out, want) {
			t.Fatalf("get output lacks %q:\n%s", want, out)
		}
	}
	if n := depth(t, ch, "cli.work"); n != 2 {
		t.Fatalf("after get with ack_requeue_true the queue has %d messages, want 2", n)
	}

	// base64.
	out = e.mustCLI("get", "cli.work", "--encoding", "base64")
	if !strings.Contains(out, "aGVsbG8Kd29ybGQ=") || !strings.Contains(out, "base64") {
		t.Fatalf("get --encoding base64 does not show the base64 payload:\n%s", out)
	}

	// --json is the API's reply.
	var msgs []api.Browsed
	e.cliJSON(&msgs, "get", "cli.work")
	if len(msgs) != 1 || msgs[0].Payload != "hello\nworld" || msgs[0].RoutingKey != "cli.work" || msgHeaders(&msgs[0])["tenant"] != "acme" {
		t.Fatalf("get --json: %+v", msgs)
	}

	// reject_requeue_false dead-letters the first message; the DLQ's copy
	// shows its decoded x-death.
	e.mustCLI("get", "cli.work", "--ackmode", "reject_requeue_false")
	if n := depth(t, ch, "cli.work"); n != 1 {
		t.Fatalf("after reject_requeue_false the queue has %d messages, want 1", n)
	}
	eventually(t, func() error {
		if n := depth(t, ch, "cli.dlq"); n != 1 {
			return fmt.Errorf("the DLQ has %d messages, want 1", n)
		}
		return nil
	})
	out = e.mustCLI("get", "cli.dlq")
	if !regexp.MustCompile(`Death:\s+rejected from queue "cli.work", exchange "\(AMQP default\)", routing keys cli.work, at \d{4}-`).MatchString(out) {
		t.Fatalf("get on the DLQ does not show the decoded x-death:\n%s", out)
	}
	if strings.Contains(out, "Header x-death") {
		t.Fatalf("x-death is shown raw as well as decoded:\n%s", out)
	}

	// ack_requeue_false removes.
	e.mustCLI("get", "cli.work", "--ackmode", "ack_requeue_false")
	if n := depth(t, ch, "cli.work"); n != 0 {
		t.Fatalf("after ack_requeue_false the queue has %d messages, want 0", n)
	}
	out = e.mustCLI("get", "cli.work")
	if !strings.Contains(out, "empty") {
		t.Fatalf("get on an empty queue: %q", out)
	}

	_, err := e.cli("get", "cli.work", "--ackmode", "bogus")
	wantErr(t, err, "ackmode")
	_, err = e.cli("get", "no.such.queue")
	wantErr(t, err, "404")
}

func TestCLIPurge(t *testing.T) {
	e := newCLIEnv(t)
	ch := e.channel()
	declare(t, ch, "cli.purge", nil)
	declare(t, ch, "cli.other", nil)
	publish(t, ch, "cli.purge", body("1"), body("2"), body("3"), body("4"))
	publish(t, ch, "cli.other", body("x"))
	out := e.mustCLI("purge", "cli.purge")
	if !strings.Contains(out, "cli.purge") {
		t.Fatalf("purge output: %q", out)
	}
	if n := depth(t, ch, "cli.purge"); n != 0 {
		t.Fatalf("after purge the queue has %d messages, want 0", n)
	}
	if n := depth(t, ch, "cli.other"); n != 1 {
		t.Fatalf("purge touched another queue: it has %d messages, want 1", n)
	}
	_, err := e.cli("purge", "no.such.queue")
	wantErr(t, err, "404")
	_, err = e.cli("purge")
	wantErr(t, err, "usage")
}

// dlqTopology dead-letters, into cli.dlq: 3 messages rejected from
// orders, 2 expired from orders, 1 rejected from payments.
func dlqTopology(t *testing.T, e *cliEnv) *amqp.Channel {
	t.Helper()
	ch := e.channel()
	dlx := amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "cli.dlq"}
	declare(t, ch, "cli.dlq", nil)
	declare(t, ch, "orders", dlx)
	declare(t, ch, "payments", dlx)
	publish(t, ch, "orders", body("r1"), body("r2"), body("r3"))
	publish(t, ch, "payments", body("p1"))
	reject := func(queue string, n int) {
		for range n {
			d, ok, err := ch.Get(queue, false)
			if err != nil || !ok {
				t.Fatalf("get %s: %v %v", queue, ok, err)
			}
			if err := d.Reject(false); err != nil {
				t.Fatal(err)
			}
		}
	}
	reject("orders", 3)
	reject("payments", 1)
	publish(t, ch, "orders", amqp.Publishing{Body: []byte("e1"), Expiration: "50"},
		amqp.Publishing{Body: []byte("e2"), Expiration: "50"})
	eventually(t, func() error {
		if n := depth(t, ch, "cli.dlq"); n != 6 {
			return fmt.Errorf("cli.dlq has %d messages, want 6", n)
		}
		return nil
	})
	return ch
}

func TestCLIDLQListAndInspect(t *testing.T) {
	e := newCLIEnv(t)
	e.warrenOnly()
	dlqTopology(t, e)

	// list
	out := e.mustCLI("dlq", "list")
	rows := parseTable(t, out, "VHOST")
	r := findRow(rows, "NAME", "cli.dlq")
	if r == nil || r["MESSAGES"] != "6" || r["BY REASON"] != "expired=2 rejected=4" || r["BY SOURCE"] != "orders=5 payments=1" {
		t.Fatalf("dlq list: cli.dlq missing or wrong %v in\n%s", r, out)
	}
	if !strings.Contains(r["SOURCES"], "orders") || !strings.Contains(r["SOURCES"], "payments") {
		t.Fatalf("dlq list: SOURCES %q, want orders and payments", r["SOURCES"])
	}
	var list []map[string]any
	e.cliJSON(&list, "dlq", "list", "--vhost", "/")
	if len(list) != 1 || list[0]["name"] != "cli.dlq" {
		t.Fatalf("dlq list --json: %v", list)
	}

	// inspect: grouped by reason and source queue.
	out = e.mustCLI("dlq", "inspect", "cli.dlq")
	if !strings.Contains(out, `Queue "cli.dlq" in vhost "/": 6 messages.`) {
		t.Fatalf("dlq inspect summary:\n%s", out)
	}
	rows = parseTable(t, out, "REASON")
	if len(rows) != 3 {
		t.Fatalf("dlq inspect: %d groups, want 3:\n%s", len(rows), out)
	}
	for _, want := range []struct{ reason, source, n, keys string }{
		{"rejected", "orders", "3", "orders"}, {"expired", "orders", "2", "orders"}, {"rejected", "payments", "1", "payments"},
	} {
		var g map[string]string
		for _, r := range rows {
			if r["REASON"] == want.reason && r["SOURCE QUEUE"] == want.source {
				g = r
			}
		}
		if g == nil || g["MESSAGES"] != want.n || g["ROUTING KEYS"] != want.keys || g["EXCHANGES"] != "(AMQP default)" {
			t.Fatalf("dlq inspect: group %s/%s = %v, want %s messages, routing keys %s:\n%s", want.reason, want.source, g, want.n, want.keys, out)
		}
		if _, err := time.Parse(time.RFC3339, g["FIRST DEATH"]); err != nil {
			t.Fatalf("dlq inspect: FIRST DEATH %q: %v", g["FIRST DEATH"], err)
		}
	}

	var res dlInspection
	e.cliJSON(&res, "dlq", "inspect", "cli.dlq")
	if res.Total != 6 || res.Inspected != 6 || len(res.Groups) != 3 || res.Groups[0].Reason != "rejected" ||
		res.Groups[0].SourceQueue != "orders" || res.Groups[0].Messages != 3 {
		t.Fatalf("dlq inspect --json: %+v", res)
	}
	if time.Since(res.Groups[0].LastDeath) > time.Minute || res.Groups[0].LastDeath.Before(res.Groups[0].FirstDeath) {
		t.Fatalf("dlq inspect: death times %v .. %v", res.Groups[0].FirstDeath, res.Groups[0].LastDeath)
	}

	// --limit inspects only the first messages; filters go to the API.
	e.cliJSON(&res, "dlq", "inspect", "cli.dlq", "--limit", "2")
	if res.Total != 6 || res.Inspected != 2 {
		t.Fatalf("dlq inspect --limit 2: total %d inspected %d, want 6 and 2", res.Total, res.Inspected)
	}
	e.cliJSON(&res, "dlq", "inspect", "cli.dlq", "--reason", "expired")
	if res.Matched != 2 || len(res.Groups) != 1 || res.Groups[0].Reason != "expired" || res.Groups[0].Messages != 2 {
		t.Fatalf("dlq inspect --reason expired: %+v", res.Groups)
	}
	out = e.mustCLI("dlq", "inspect", "cli.dlq", "--reason", "rejected", "--source-queue", "payments")
	if !strings.Contains(out, "6 messages, 1 matching the filter.") {
		t.Fatalf("dlq inspect with a filter:\n%s", out)
	}
	if rows := parseTable(t, out, "REASON"); len(rows) != 1 || rows[0]["SOURCE QUEUE"] != "payments" {
		t.Fatalf("dlq inspect with a filter: groups %v", rows)
	}

	// inspect does not consume.
	ch := e.channel()
	if n := depth(t, ch, "cli.dlq"); n != 6 {
		t.Fatalf("after inspect the DLQ has %d messages, want 6", n)
	}

	_, err := e.cli("dlq", "inspect", "no.such.queue")
	wantErr(t, err, "404")
}

func TestCLIDLQReplay(t *testing.T) {
	e := newCLIEnv(t)
	e.warrenOnly()
	ch := dlqTopology(t, e)

	// Only the messages rejected from orders, two per request.
	out := e.mustCLI("dlq", "replay", "cli.dlq", "--reason", "rejected", "--source-queue", "orders", "--batch", "2")
	if !strings.Contains(out, "Replayed 3, skipped 3, failed 0; 3 left") {
		t.Fatalf("dlq replay output:\n%s", out)
	}
	got := drain(t, ch, "orders")
	var bodies []string
	for _, d := range got {
		bodies = append(bodies, string(d.Body))
		if _, ok := d.Headers["x-death"]; ok {
			t.Fatalf("a replayed message kept its x-death: %v", d.Headers)
		}
		if _, ok := d.Headers["x-first-death-queue"]; ok {
			t.Fatalf("a replayed message kept x-first-death-queue: %v", d.Headers)
		}
	}
	slices.Sort(bodies)
	if !slices.Equal(bodies, []string{"r1", "r2", "r3"}) {
		t.Fatalf("orders got %q after the replay, want r1 r2 r3", bodies)
	}
	if n := depth(t, ch, "payments"); n != 0 {
		t.Fatalf("payments got %d messages from a replay filtered on orders", n)
	}
	var res dlInspection
	e.cliJSON(&res, "dlq", "inspect", "cli.dlq")
	if res.Total != 3 || len(res.Groups) != 2 {
		t.Fatalf("after the replay the DLQ holds %+v, want the 2 expired and the payments one", res)
	}

	// --count 1 --keep-history, JSON: the payments message, history kept.
	var r api.ReplayResult
	e.cliJSON(&r, "dlq", "replay", "cli.dlq", "--count", "1", "--source-queue", "payments", "--keep-history")
	if r.Replayed != 1 || r.Failed != 0 || r.Remaining != 2 {
		t.Fatalf("dlq replay --count 1: %+v", r)
	}
	got = drain(t, ch, "payments")
	if len(got) != 1 || string(got[0].Body) != "p1" {
		t.Fatalf("payments got %d messages after replaying its dead letter, want p1", len(got))
	}
	if _, ok := got[0].Headers["x-death"]; !ok {
		t.Fatalf("--keep-history dropped x-death: %v", got[0].Headers)
	}

	// Nothing matches: a no-op, not an error.
	out = e.mustCLI("dlq", "replay", "cli.dlq", "--reason", "rejected")
	if !strings.Contains(out, "Replayed 0, skipped 2, failed 0; 2 left") {
		t.Fatalf("dlq replay with nothing matching:\n%s", out)
	}

	// A dead letter whose source queue is gone cannot be replayed: it
	// stays, and the command fails.
	declare(t, ch, "gone", amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "cli.dlq"})
	publish(t, ch, "gone", body("g1"))
	d, ok, err := ch.Get("gone", false)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	d.Reject(false)
	if _, err := ch.QueueDelete("gone", false, false, false); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		if n := depth(t, ch, "cli.dlq"); n != 3 {
			return fmt.Errorf("cli.dlq has %d messages, want 3", n)
		}
		return nil
	})
	out, _, err = e.cliErr("dlq", "replay", "cli.dlq", "--source-queue", "gone")
	wantErr(t, err, "1 messages failed")
	if !strings.Contains(out, "Replayed 0, skipped 2, failed 1; 3 left") {
		t.Fatalf("dlq replay of an unroutable dead letter:\n%s", out)
	}

	// The expired ones. The replay is capped at the DLQ's depth when it
	// starts: were they to expire again into the DLQ, they would not be
	// replayed in a loop.
	out = e.mustCLI("dlq", "replay", "cli.dlq", "--reason", "expired")
	if !strings.Contains(out, "Replayed 2, skipped 1, failed 0") {
		t.Fatalf("dlq replay of the expired messages:\n%s", out)
	}
	eventually(t, func() error {
		var bodies []string
		for _, q := range []string{"orders", "cli.dlq"} {
			for _, d := range drain(t, ch, q) {
				bodies = append(bodies, string(d.Body))
			}
		}
		slices.Sort(bodies)
		if !slices.Equal(bodies, []string{"e1", "e2", "g1"}) {
			return fmt.Errorf("orders and cli.dlq hold %q, want e1 e2 (replayed) and g1", bodies)
		}
		return nil
	})

	_, err = e.cli("dlq", "replay", "no.such.queue")
	wantErr(t, err, "404")
}

func TestCLIMove(t *testing.T) {
	e := newCLIEnv(t)
	e.warrenOnly()
	ch := e.channel()
	declare(t, ch, "cli.src", nil)
	declare(t, ch, "cli.dest", nil)
	publish(t, ch, "cli.dest", body("already"))
	for i := range 50 {
		publish(t, ch, "cli.src", body(fmt.Sprint(i)))
	}
	out := e.mustCLI("move", "cli.src", "cli.dest", "--poll", "50ms")
	if !strings.Contains(out, "Moved 50 messages") {
		t.Fatalf("move output: %q", out)
	}
	if n := depth(t, ch, "cli.src"); n != 0 {
		t.Fatalf("after move the source has %d messages, want 0", n)
	}
	got := drain(t, ch, "cli.dest")
	if len(got) != 51 || string(got[0].Body) != "already" || string(got[1].Body) != "0" || string(got[50].Body) != "49" {
		t.Fatalf("after move the destination has %d messages", len(got))
	}
	api, err := newAPIClient(e.mgmt, "guest", "guest")
	if err != nil {
		t.Fatal(err)
	}
	var params []any
	if raw, err := api.getJSON(apiPath("parameters", "shovel"), &params); err != nil || len(params) != 0 {
		t.Fatalf("the move's shovel parameter is left behind: %s %v", raw, err)
	}
	_, err = e.cli("move", "cli.src", "no.such.queue")
	wantErr(t, err, "404", "no.such.queue")
}

func TestCLIDefinitionsRoundTrip(t *testing.T) {
	src := newCLIEnv(t)
	ch := src.channel()
	if err := ch.ExchangeDeclare("cli.defs.x", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	declare(t, ch, "cli.defs.q", amqp.Table{"x-message-ttl": int32(60000)})
	if err := ch.QueueBind("cli.defs.q", "", "cli.defs.x", false, nil); err != nil {
		t.Fatal(err)
	}
	src.mustCLI("policies", "set", "cli-defs-policy", `^cli\.defs\.`, `{"max-length":100}`, "--apply-to", "queues")

	// To stdout: JSON with our objects.
	var defs struct {
		Queues    []map[string]any `json:"queues"`
		Exchanges []map[string]any `json:"exchanges"`
		Bindings  []map[string]any `json:"bindings"`
		Policies  []map[string]any `json:"policies"`
	}
	out := src.mustCLI("definitions", "export")
	if err := json.Unmarshal([]byte(out), &defs); err != nil {
		t.Fatalf("definitions export: %v\n%s", err, out)
	}
	if !slices.ContainsFunc(defs.Queues, func(q map[string]any) bool { return q["name"] == "cli.defs.q" }) ||
		!slices.ContainsFunc(defs.Exchanges, func(x map[string]any) bool { return x["name"] == "cli.defs.x" }) ||
		!slices.ContainsFunc(defs.Bindings, func(b map[string]any) bool { return b["source"] == "cli.defs.x" }) ||
		!slices.ContainsFunc(defs.Policies, func(p map[string]any) bool { return p["name"] == "cli-defs-policy" }) {
		t.Fatalf("definitions export lacks the queue, exchange, binding or policy:\n%s", out)
	}

	// To a file, then into a second broker.
	file := filepath.Join(t.TempDir(), "defs.json")
	src.mustCLI("definitions", "export", file)
	data, err := os.ReadFile(file)
	if err != nil || !json.Valid(data) {
		t.Fatalf("definitions file: %v %q", err, data)
	}
	dst := newCLIEnv(t)
	dst.mustCLI("definitions", "import", file)

	dch := dst.channel()
	if _, err := dch.QueueDeclarePassive("cli.defs.q", true, false, false, false, amqp.Table{"x-message-ttl": int32(60000)}); err != nil {
		t.Fatalf("the imported queue: %v", err)
	}
	dch = dst.channel()
	if err := dch.ExchangeDeclarePassive("cli.defs.x", "fanout", true, false, false, false, nil); err != nil {
		t.Fatalf("the imported exchange: %v", err)
	}
	// The binding routes.
	if err := dch.Publish("cli.defs.x", "any", false, false, body("via the binding")); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() error {
		if n := depth(t, dch, "cli.defs.q"); n != 1 {
			return fmt.Errorf("the imported binding routed %d messages, want 1", n)
		}
		return nil
	})
	out = dst.mustCLI("policies", "list", "--vhost", dst.vhost)
	if p := findRow(parseTable(t, out, "NAME"), "NAME", "cli-defs-policy"); p == nil || p["DEFINITION"] != `{"max-length":100}` {
		t.Fatalf("the imported policy: %v in\n%s", p, out)
	}

	// Importing something that is not JSON fails before any request.
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte("{not json"), 0o644)
	_, err = dst.cli("definitions", "import", bad)
	wantErr(t, err, "not valid JSON")
	_, err = dst.cli("definitions", "import", filepath.Join(t.TempDir(), "missing.json"))
	wantErr(t, err, "no such file")
}

func TestCLIPolicies(t *testing.T) {
	e := newCLIEnv(t)
	e.mustCLI("policies", "set", "cli-limit", `^cli\.limited$`, `{"max-length":2}`, "--apply-to", "queues", "--priority", "7")

	out := e.mustCLI("policies", "list")
	rows := parseTable(t, out, e.listHeader())
	p := findRow(rows, "NAME", "cli-limit")
	if p == nil || p["PATTERN"] != `^cli\.limited$` || p["APPLY-TO"] != "queues" || p["PRIORITY"] != "7" || p["DEFINITION"] != `{"max-length":2}` {
		t.Fatalf("policies list: cli-limit missing or wrong %v in\n%s", p, out)
	}
	var ps []map[string]any
	e.cliJSON(&ps, "policies", "list", "--vhost", e.vhost)
	if len(ps) != 1 || ps[0]["name"] != "cli-limit" || ps[0]["priority"] != float64(7) {
		t.Fatalf("policies list --json: %v", ps)
	}

	// The policy applies: the queue keeps the last 2 messages.
	ch := e.channel()
	declare(t, ch, "cli.limited", nil)
	eventually(t, func() error {
		publish(t, ch, "cli.limited", body("1"), body("2"), body("3"), body("4"))
		if n := depth(t, ch, "cli.limited"); n != 2 {
			drain(t, ch, "cli.limited")
			return fmt.Errorf("with max-length 2 the queue has %d messages", n)
		}
		return nil
	})

	e.mustCLI("policies", "delete", "cli-limit")
	e.cliJSON(&ps, "policies", "list", "--vhost", e.vhost)
	if len(ps) != 0 {
		t.Fatalf("policies list after delete: %v", ps)
	}
	eventually(t, func() error {
		publish(t, ch, "cli.limited", body("5"), body("6"), body("7"))
		if n := depth(t, ch, "cli.limited"); n < 5 {
			return fmt.Errorf("after the policy's delete the queue still caps at %d messages", n)
		}
		return nil
	})

	_, err := e.cli("policies", "delete", "cli-limit")
	wantErr(t, err, "404")
	_, err = e.cli("policies", "set", "p", "x", "not-json")
	wantErr(t, err, "JSON object")
	_, err = e.cli("policies", "set", "p", "x", "{}", "--apply-to", "everything")
	wantErr(t, err, "apply-to")
	_, err = e.cli("policies", "bogus")
	wantErr(t, err, "unknown subcommand")
}

func TestCLIErrors(t *testing.T) {
	e := newCLIEnv(t)

	_, err := e.cli("get", "no.such.queue")
	wantErr(t, err, "404")
	var ae *apiError
	if !errors.As(err, &ae) || ae.Status != 404 {
		t.Fatalf("unknown queue: %#v, want an *apiError with status 404", err)
	}

	_, err = e.cli("queues", "--password", "wrong")
	wantErr(t, err, "401", "Login failed")

	err = runCLI([]string{"queues", "--url", "http://127.0.0.1:1"}, new(bytes.Buffer), new(bytes.Buffer))
	wantErr(t, err, "connection refused")
	err = runCLI([]string{"queues", "--url", "localhost:15672"}, new(bytes.Buffer), new(bytes.Buffer))
	wantErr(t, err, "--url")
	_, err = e.cli("queues", "--bogus-flag")
	wantErr(t, err, "bogus-flag")
	_, err = e.cli("get")
	wantErr(t, err, "usage: warren get QUEUE")
	_, err = e.cli("dlq")
	wantErr(t, err, "missing subcommand")
}

func TestCLIHelp(t *testing.T) {
	var out, stderr bytes.Buffer
	if err := runCLI([]string{"help"}, &out, &stderr); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"queues", "dlq inspect QUEUE", "dlq replay QUEUE", "definitions export", "policies set", "move SRC DEST", "--url"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("help lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := runCLI([]string{"help", "dlq", "replay"}, &out, &stderr); err != nil || !strings.Contains(out.String(), "-keep-history") {
		t.Fatalf("help dlq replay: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := runCLI([]string{"get", "-h"}, &out, &stderr); err != nil || !strings.Contains(stderr.String(), "-ackmode") {
		t.Fatalf("get -h: %v\n%s", err, stderr.String())
	}

	// warren -h through run: the broker's flags and the commands, exit 0.
	var runOut bytes.Buffer
	if err := run([]string{"-h"}, &runOut); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run -h: %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"Usage: warren", "-amqp-addr", "dlq replay"} {
		if !strings.Contains(runOut.String(), want) {
			t.Fatalf("warren -h lacks %q:\n%s", want, runOut.String())
		}
	}
	if isCLICommand("--amqp-addr") || isCLICommand("-data-dir") || !isCLICommand("dlq") || !isCLICommand("help") {
		t.Fatal("isCLICommand: flags must start the broker, subcommands the CLI")
	}
	// A word that is no command is an error, not a broker start.
	if err := run([]string{"quues"}, &runOut); err == nil || !strings.Contains(err.Error(), `unknown command "quues"`) {
		t.Fatalf("warren quues: %v", err)
	}
}

func TestCLIFlagsAnywhere(t *testing.T) {
	// Connection flags before the command, as rabbitmqadmin takes them.
	for _, c := range []struct{ in, want string }{
		{"--url U queues", "queues --url U"},
		{"--json --vhost=v -user u dlq replay q --count 5", "dlq replay --json --vhost=v -user u q --count 5"},
		{"--url U dlq", "dlq --url U"},
		{"--url U definitions export f.json", "definitions export --url U f.json"},
		{"--amqp-addr :5673", "--amqp-addr :5673"},       // the broker's flags stay
		{"--url U --data-dir d", "--url U --data-dir d"}, // not all connection flags
		{"--url", "--url"},
		{"queues --url U", "queues --url U"},
	} {
		if got := strings.Join(globalFirst(strings.Fields(c.in)), " "); got != c.want {
			t.Errorf("globalFirst(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	n := fs.Int("count", 1, "")
	v := fs.String("vhost", "", "")
	pos, err := parseInterspersed(fs, []string{"--vhost", "a/b", "q1", "--count", "5", "q2", "--", "--not-a-flag"})
	if err != nil || *n != 5 || *v != "a/b" || !slices.Equal(pos, []string{"q1", "q2", "--not-a-flag"}) {
		t.Fatalf("got %v %d %q %v", pos, *n, *v, err)
	}
	if p := apiPath("queues", "/", "a b/c"); p != "/api/queues/%2F/a%20b%2Fc" {
		t.Fatalf("apiPath: %s", p)
	}
}

func TestCLIProgressBar(t *testing.T) {
	var buf bytes.Buffer
	p := newProgress(&buf, "replaying", 1000)
	p.tty = true
	p.set(450)
	p.set(1000)
	p.done()
	p.done()
	want := "\rreplaying [#############-----------------] 450/1000" +
		"\rreplaying [##############################] 1000/1000\n"
	if buf.String() != want {
		t.Fatalf("tty progress:\n%q\nwant\n%q", buf.String(), want)
	}

	// Not a terminal: a plain line now and then, nothing else.
	buf.Reset()
	p = newProgress(&buf, "moving", 10)
	p.set(3)
	if buf.Len() != 0 {
		t.Fatalf("plain progress printed at once: %q", buf.String())
	}
	p.plainStep = 0
	p.set(4)
	p.done()
	if buf.String() != "moving: 4/10\n" {
		t.Fatalf("plain progress: %q", buf.String())
	}
}

// issue 24: warren shovels lists the shovels with their node and state,
// and a running one's ends without credentials.
func TestCLIShovels(t *testing.T) {
	e := newCLIEnv(t)
	e.warrenOnly()
	ch := e.channel()
	declare(t, ch, "cli.sh.src", nil)
	api, err := newAPIClient(e.mgmt, "guest", "guest")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.do("PUT", apiPath("parameters", "shovel", "/", "cli-sh"), map[string]any{"value": map[string]any{
		"src-uri": "amqp://", "src-queue": "cli.sh.src", "dest-uri": "amqp:///%2F", "dest-queue": "cli.sh.dest"}}); err != nil {
		t.Fatal(err)
	}
	var out string
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		out = e.mustCLI("shovels", "--vhost", "/")
		if strings.Contains(out, "running") {
			break
		}
	}
	for _, want := range []string{"NAME", "STATE", "cli-sh", "running", "amqp:// cli.sh.src", "amqp:///%2F cli.sh.dest"} {
		if !strings.Contains(out, want) {
			t.Fatalf("warren shovels: no %q in\n%s", want, out)
		}
	}
}

// issue 24: warren federation lists the federation links: one Warren
// federating an exchange from another.
func TestCLIFederation(t *testing.T) {
	up := newCLIEnv(t)
	up.warrenOnly()
	down := newCLIEnv(t)
	down.warrenOnly()
	for _, e := range []*cliEnv{up, down} {
		if err := e.channel().ExchangeDeclare("cli.fed", "fanout", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	api, err := newAPIClient(down.mgmt, "guest", "guest")
	if err != nil {
		t.Fatal(err)
	}
	upAMQP := strings.TrimSuffix(up.amqpURL, "/") // (no path: the downstream's vhost)
	if _, err := api.do("PUT", apiPath("parameters", "federation-upstream", "/", "cli-up"), map[string]any{"value": map[string]any{"uri": upAMQP}}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.do("PUT", apiPath("policies", "/", "cli-fed"), map[string]any{"pattern": "^cli\\.fed$",
		"definition": map[string]any{"federation-upstream": "cli-up"}, "apply-to": "exchanges"}); err != nil {
		t.Fatal(err)
	}
	var out string
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		out = down.mustCLI("federation", "--vhost", "/")
		if strings.Contains(out, "running") {
			break
		}
	}
	for _, want := range []string{"TYPE", "STATUS", "exchange", "cli.fed", "cli-up", "running"} {
		if !strings.Contains(out, want) {
			t.Fatalf("warren federation: no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "guest:guest") {
		t.Fatalf("warren federation shows credentials:\n%s", out)
	}
}

// TestCLIDLQReplayStream: warren dlq replay on a stream DLQ reads it from
// --offset or --since in batches that go on where the last one stopped,
// and the stream keeps its records (issue 25).
func TestCLIDLQReplayStream(t *testing.T) {
	e := newCLIEnv(t)
	e.warrenOnly()
	ch := e.channel()
	if _, err := ch.QueueDeclare("cli.sdlq", true, false, false, false, amqp.Table{"x-queue-type": "stream"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("cli.work", true, false, false, false, amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "cli.sdlq"}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := ch.Publish("", "cli.work", false, false, amqp.Publishing{Body: []byte(fmt.Sprint("w", i))}); err != nil {
			t.Fatal(err)
		}
	}
	for n := 0; n < 5; {
		d, ok, err := ch.Get("cli.work", false)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			d.Reject(false)
			n++
		}
	}
	for deadline := time.Now().Add(10 * time.Second); depth(t, e.channel(), "cli.sdlq") < 5; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the dead letters did not reach the stream")
		}
	}
	out := e.mustCLI("dlq", "replay", "cli.sdlq", "--offset", "1", "--batch", "2")
	if !strings.Contains(out, "Replayed 4, skipped 0, failed 0; 5 left") {
		t.Fatalf("replay --offset 1 --batch 2:\n%s", out)
	}
	out = e.mustCLI("dlq", "replay", "cli.sdlq", "--since", "1h", "--batch", "2")
	if !strings.Contains(out, "Replayed 5, skipped 0, failed 0; 5 left") {
		t.Fatalf("replay --since 1h --batch 2:\n%s", out)
	}
	// w1..w4 from the first replay, then w0..w4 from the second, each once
	var got []string
	for {
		d, ok, err := ch.Get("cli.work", true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, string(d.Body))
	}
	if strings.Join(got, " ") != "w1 w2 w3 w4 w0 w1 w2 w3 w4" {
		t.Fatalf("replayed into cli.work: %v", got)
	}
}
