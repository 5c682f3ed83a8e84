package integration

// Differential tests of the management API: the same calls against Warren
// and the reference RabbitMQ, with the same state set up on both (the
// same unique names: the two brokers are separate, so one name serves
// both), then every reply compared:
//
//   - status codes must be equal;
//   - the SET OF KEYS RabbitMQ returns must be in Warren's reply,
//     recursively (shapeDiff: "missing in Warren: items[].arguments");
//   - listed values must be equal (arguments, durable, messages after
//     publishing N, binding properties_key, x-death entries, error bodies).
//
// Keys that do not matter are left out per endpoint with a comment:
// Erlang VM internals that have no meaning outside Erlang (mgmtErlangOnly),
// and, for the huge node and overview objects, everything but the fields
// the web UI and monitoring tools read (only(...)). mgmtGaps lists keys
// that matter but Warren does not implement (each one is a gap).
//
// When WARREN_MGMT_MISMATCHES names a file, every mismatch is also written
// there (the file is truncated at the first mismatch of a run).
//
// The RabbitMQ half runs alone (nothing to compare) while Warren has no
// management API in warrentest.

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
	amqp "github.com/rabbitmq/amqp091-go"
)

// mgmtErlangOnly are RabbitMQ keys that describe the Erlang VM or
// RabbitMQ's storage internals; a Go broker has nothing to put there.
var mgmtErlangOnly = []string{
	"*.garbage_collection",            // Erlang process GC settings
	"*.reductions",                    // Erlang scheduler reductions
	"*.reductions_details",            // rate of the above
	"*.backing_queue_status",          // classic queue storage internals (q1..q4, delta)
	"*.erlang_version",                // overview
	"*.erlang_full_version",           // overview
	"*.statistics_db_event_queue",     // management DB backlog
	"*.recoverable_slaves",            // mirrored classic queues (gone in 4.x)
	"*.slave_nodes",                   // same
	"*.synchronised_slave_nodes",      // same
	"*.exclusive_consumer_tag",        // null unless exclusive consumer
	"*.user_who_performed_action",     // audit field RabbitMQ adds to some replies
	"*.metrics_gc_queue_length",       // management agent internals
	"*.sample_retention_policies",     // management DB internals
	"*.churn_rates",                   // management DB churn sampling
	"*.release_series_support_status", // RabbitMQ release metadata
	"*.pid",                           // Erlang pid strings
	"*.owner_pid_details",             // Erlang pid of an exclusive owner
	"*.reductions_details.rate",       // covered above
	"*.head_message_timestamp",        // optional, null unless timestamps
	"*.cluster_links",                 // Erlang distribution links between nodes
	"*.open_files",                    // open files by node name (rabbit@host / warren@host)
}

// mgmtGaps are keys RabbitMQ returns that matter but Warren does not
// implement. Each entry is a known gap (keep this short).
var mgmtGaps = []string{}

// diffObs is one reply observed on one broker.
type diffObs struct {
	key    string // what was asked, with names as given (same on both)
	status int
	body   any
	raw    string
	values []string // paths whose values must be equal
	only   []string // when set: the top-level keys (of the object, or of each element) to compare
	ignore []string // more paths not compared (see ignorePaths)
	exact  bool     // the whole body must be equal
	// projected: before comparing values (and exact bodies), Warren's
	// objects are cut down to the keys RabbitMQ's have (extra keys are
	// not compared; missing ones are reported by the shape check).
	projected bool
}

type obsOpt func(*diffObs)

func values(paths ...string) obsOpt {
	return func(o *diffObs) { o.values = append(o.values, paths...) }
}
func only(keys ...string) obsOpt  { return func(o *diffObs) { o.only = keys } }
func ignoring(p ...string) obsOpt { return func(o *diffObs) { o.ignore = append(o.ignore, p...) } }
func exactly() obsOpt             { return func(o *diffObs) { o.exact = true } }
func projected() obsOpt           { return func(o *diffObs) { o.projected = true } }

// diffScene is what one side of a scenario records.
type diffScene struct {
	t   *testing.T
	tg  *mgmtTarget
	vh  string
	obs []*diffObs
}

// observe records the reply to a request. Error replies (>= 400) always
// compare "error" and "reason".
func (s *diffScene) observe(key string, r mgmtResp, opts ...obsOpt) any {
	s.t.Helper()
	o := &diffObs{key: key, status: r.status, raw: strings.TrimSpace(string(r.body))}
	if len(r.body) > 0 {
		o.body = r.json(s.t)
	}
	for _, f := range opts {
		f(o)
	}
	if r.status >= 400 {
		o.values = append(o.values, "error", "reason")
	}
	s.obs = append(s.obs, o)
	return o.body
}

// get observes GET path. RabbitMQ 3.10 sometimes crashes on a list it
// walks while the parallel tests delete what it lists (a 500 with no
// body, e.g. /api/users/without-permissions while users go): such a
// reply is asked again, up to three times, as it is no behaviour of the
// API.
func (s *diffScene) get(path string, opts ...obsOpt) any {
	s.t.Helper()
	r := s.tg.do("GET", path, nil)
	for i := 0; i < 3 && s.tg.isRabbit() && r.status == 500 && len(bytes.TrimSpace(r.body)) == 0; i++ {
		time.Sleep(100 * time.Millisecond)
		r = s.tg.do("GET", path, nil)
	}
	return s.observe("GET "+path, r, opts...)
}

// getSorted observes GET path with the array reply sorted by fields, so
// that order does not count; compared exactly.
func (s *diffScene) getSorted(path string, fields ...string) {
	s.t.Helper()
	r := s.tg.do("GET", path, nil)
	o := &diffObs{key: "GET " + path + " (sorted)", status: r.status, raw: strings.TrimSpace(string(r.body)), exact: true}
	o.body = r.json(s.t)
	if _, ok := o.body.([]any); ok {
		o.body = sortedBy(o.body, fields...)
	}
	s.obs = append(s.obs, o)
}

// value records a value computed from replies (e.g. one element of a
// list, selected by name), compared exactly.
func (s *diffScene) value(key string, v any, opts ...obsOpt) {
	o := &diffObs{key: key, status: 200, body: jsonNorm(v), exact: true, raw: jsonString(v)}
	for _, f := range opts {
		f(o)
	}
	s.obs = append(s.obs, o)
}

// shape records a value computed from replies, compared by keys and the
// given value paths.
func (s *diffScene) shape(key string, v any, opts ...obsOpt) {
	o := &diffObs{key: key, status: 200, body: jsonNorm(v), raw: jsonString(v)}
	for _, f := range opts {
		f(o)
	}
	s.obs = append(s.obs, o)
}

// mgmtDiff runs scenario on Warren and on RabbitMQ in parallel, with the
// same vhost name (created, with admin permissions, before the scenario),
// then compares what each recorded.
func mgmtDiff(t *testing.T, scenario func(s *diffScene)) {
	t.Helper()
	vh := mgmtName("dvh")
	var scenes [2]*diffScene
	t.Run("run", func(t *testing.T) {
		for i, kind := range []string{"warren", "rabbitmq"} {
			t.Run(kind, func(t *testing.T) {
				t.Parallel()
				tg := newMgmtTargetKind(t, kind)
				tg.ownVhost(t, vh)
				s := &diffScene{t: t, tg: tg, vh: vh}
				scenario(s)
				if !t.Failed() {
					scenes[i] = s
				}
			})
		}
	})
	w, r := scenes[0], scenes[1]
	if w == nil || r == nil {
		t.Logf("comparison skipped: warren side ran=%v, rabbitmq side ran=%v", w != nil, r != nil)
		return
	}
	if len(w.obs) != len(r.obs) {
		t.Fatalf("sides recorded %d (warren) and %d (rabbitmq) replies", len(w.obs), len(r.obs))
	}
	for i := range r.obs {
		for _, m := range compareObs(r.obs[i], w.obs[i]) {
			reportMismatch(t, r.obs[i], w.obs[i], m)
		}
	}
}

// compareObs returns the differences of got (Warren) from want (RabbitMQ).
func compareObs(want, got *diffObs) []string {
	var out []string
	if want.key != got.key {
		return []string{fmt.Sprintf("scenario diverged: RabbitMQ asked %q, Warren %q", want.key, got.key)}
	}
	if want.status != got.status {
		out = append(out, fmt.Sprintf("status: RabbitMQ %d, Warren %d", want.status, got.status))
	}
	gotBody := got.body
	if want.projected {
		gotBody = project(want.body, got.body)
	}
	if want.exact {
		if !jsonEqualLoose(want.body, gotBody) {
			out = append(out, "body differs")
		}
		return out
	}
	wb, gb := want.body, got.body
	if len(want.only) > 0 {
		wb, gb = onlyKeys(wb, want.only), onlyKeys(gb, want.only)
	}
	ign := ignorePaths(append(append(append([]string{}, mgmtErlangOnly...), mgmtGaps...), want.ignore...)...)
	if want.status < 400 || got.status < 400 {
		out = append(out, shapeDiff("", wb, gb, ign)...)
	}
	for _, p := range want.values {
		wv, wok := pathGet(want.body, p)
		if !wok {
			continue // RabbitMQ has no such value here: nothing to agree on
		}
		gv, gok := pathGet(gotBody, p)
		if !gok || !jsonEqualLoose(wv, gv) {
			out = append(out, fmt.Sprintf("value of %s: RabbitMQ %s, Warren %s", p, showPath(wv, wok), showPath(gv, gok)))
		}
	}
	return out
}

func showPath(v any, ok bool) string {
	if !ok {
		return "(absent)"
	}
	return jsonString(v)
}

// project cuts got down to the shape of want: objects keep only want's
// keys (recursively, matching array elements by position).
func project(want, got any) any {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return got
		}
		out := map[string]any{}
		for k, wv := range w {
			if gv, ok := g[k]; ok {
				out[k] = project(wv, gv)
			}
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok {
			return got
		}
		out := make([]any, len(g))
		for i := range g {
			if i < len(w) {
				out[i] = project(w[i], g[i])
			} else {
				out[i] = g[i]
			}
		}
		return out
	}
	return got
}

// onlyKeys keeps the given top-level keys of an object, or of each object
// element of an array.
func onlyKeys(v any, keys []string) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for _, k := range keys {
			if e, ok := x[k]; ok {
				out[k] = e
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = onlyKeys(e, keys)
		}
		return out
	}
	return v
}

// pathGet follows a dotted path; numeric segments index arrays, and a
// segment "len" of an array is its length.
func pathGet(v any, path string) (any, bool) {
	if path == "" {
		return v, true
	}
	for _, seg := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			e, ok := x[seg]
			if !ok {
				return nil, false
			}
			v = e
		case []any:
			if seg == "len" {
				v = float64(len(x))
				continue
			}
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

var (
	mismatchMu    sync.Mutex
	mismatchFresh = true
)

// reportMismatch fails the test with one difference and records it in
// $WARREN_MGMT_MISMATCHES.
func reportMismatch(t *testing.T, want, got *diffObs, msg string) {
	t.Helper()
	trim := func(s string) string {
		if len(s) > 600 {
			return s[:600] + "..."
		}
		return s
	}
	t.Errorf("%s: %s\n    RabbitMQ: %d %s\n    Warren:   %d %s", want.key, msg, want.status, trim(want.raw), got.status, trim(got.raw))
	f := os.Getenv("WARREN_MGMT_MISMATCHES")
	if f == "" {
		return
	}
	mismatchMu.Lock()
	defer mismatchMu.Unlock()
	flag := os.O_APPEND | os.O_CREATE | os.O_WRONLY
	if mismatchFresh {
		flag = os.O_TRUNC | os.O_CREATE | os.O_WRONLY
		mismatchFresh = false
	}
	fh, err := os.OpenFile(f, flag, 0o644)
	if err != nil {
		t.Logf("WARREN_MGMT_MISMATCHES: %v", err)
		return
	}
	defer fh.Close()
	fmt.Fprintf(fh, "- **%s** `%s`: %s\n  - RabbitMQ: `%d %s`\n  - Warren: `%d %s`\n", t.Name(), want.key, msg, want.status, trim(want.raw), got.status, trim(got.raw))
}

// sortedBy returns the object elements of a JSON array sorted by the
// concatenation of fields.
func sortedBy(list any, fields ...string) []any {
	arr, _ := list.([]any)
	out := append([]any(nil), arr...)
	k := func(e any) string {
		var parts []string
		for _, f := range fields {
			parts = append(parts, fmt.Sprint(dig(e, f)))
		}
		return strings.Join(parts, "\x00")
	}
	sort.SliceStable(out, func(i, j int) bool { return k(out[i]) < k(out[j]) })
	return out
}

// --- scenarios ---

func TestMgmtDiffOverview(t *testing.T) {
	t.Parallel()
	mgmtDiff(t, func(s *diffScene) {
		tg, vh := s.tg, s.vh
		tg.declareQueue(vh, "ov-q", nil)
		tg.publishAPI(vh, "", "ov-q", "x", nil)
		tg.waitQueueField(vh, "ov-q", "messages", 1)
		// The fields the web UI's overview page and monitoring tools read.
		s.get("/api/overview", only("management_version", "rabbitmq_version", "product_name", "product_version", "cluster_name",
			"node", "listeners", "contexts", "exchange_types", "message_stats", "queue_totals", "object_totals", "rates_mode", "disable_stats", "enable_queue_totals"),
			ignoring("listeners[].socket_opts", "contexts[].cowboy_opts", "contexts[].ssl_opts"))
		s.get("/api/whoami", exactly())
		s.get("/api/nodes", only(nodeKeys...))
		s.get("/api/cluster-name")
		s.get("/api/extensions")
		s.get("/api/health/checks/alarms", exactly())
		s.get("/api/health/checks/local-alarms", exactly())
		s.get("/api/aliveness-test/"+esc(vh), exactly())
		s.get("/api/aliveness-test/"+esc(vh+"-nope"), exactly())
		s.get("/api/parameters")
		s.get("/api/global-parameters", ignoring("[].value"))
	})
}

// TestMgmtDiffHealthChecks: RabbitMQ's health checks, as load balancers
// and Kubernetes probes call them, and the aliveness test with each
// permission missing in turn.
func TestMgmtDiffHealthChecks(t *testing.T) {
	t.Parallel()
	mgmtDiff(t, func(s *diffScene) {
		tg, vh := s.tg, s.vh
		u, mon := "hc-"+vh, "hc-mon-"+vh
		s.t.Cleanup(func() { tg.do("DELETE", "/api/users/"+esc(u), nil); tg.do("DELETE", "/api/users/"+esc(mon), nil) })
		tg.must("PUT", "/api/users/"+esc(u), map[string]any{"password": "pw", "tags": "management"}, 201, 204)
		tg.must("PUT", "/api/users/"+esc(mon), map[string]any{"password": "pw", "tags": "monitoring"}, 201, 204)
		asUser := func(key, path string) {
			r := tg.doAs(u, "pw", "GET", path, nil)
			// The virtual-hosts check covers every vhost of the broker,
			// and the parallel diff tests create and delete theirs: a
			// broker may report one of those down while it starts or
			// stops. Ask again until no vhost is in transit (a broker
			// that stays down still fails the comparison).
			for deadline := time.Now().Add(15 * time.Second); strings.HasSuffix(path, "/virtual-hosts") &&
				r.status == 503 && time.Now().Before(deadline); {
				time.Sleep(200 * time.Millisecond)
				r = tg.doAs(u, "pw", "GET", path, nil)
			}
			s.observe(key, r, exactly())
		}
		for _, p := range []string{"virtual-hosts", "alarms", "local-alarms", "node-is-quorum-critical", "node-is-mirror-sync-critical",
			"certificate-expiration/1/months", "certificate-expiration/3/WEEKS"} {
			asUser("GET /api/health/checks/"+p+" (management user)", "/api/health/checks/"+p)
		}
		for _, p := range []string{"certificate-expiration/1/lightyears", "certificate-expiration/abc/days", "certificate-expiration/abc/lightyears",
			"port-listener/abc"} {
			s.get("/api/health/checks/"+p, exactly())
		}
		amqp, _ := url.Parse(tg.amqpURL)
		s.observe("GET port-listener/{amqp port}", tg.doAs(u, "pw", "GET", "/api/health/checks/port-listener/"+amqp.Port(), nil), values("status"))
		// The ports a node listens on differ; the missing one is named.
		s.get("/api/health/checks/port-listener/1", values("status", "reason", "missing"))
		for _, p := range []string{"amqp", "AMQP", "amqp0-9-1", "amqp091", "amqp1.0", "http", "management", "ui", "http1.1", "http%2Fprometheus"} {
			s.get("/api/health/checks/protocol-listener/"+p, exactly())
		}
		for _, p := range []string{"amqps", "https", "stomp", "mqtt3.1.1", "web-stomp", "webmqtt%2Ftls", "nonsense"} {
			s.get("/api/health/checks/protocol-listener/"+p, values("status", "reason", "missing"))
		}
		s.observe("health check without credentials", tg.doAs("", "", "GET", "/api/health/checks/virtual-hosts", nil), exactly())

		// Aliveness: vhost access, then configure on the queue, write on
		// the default exchange, read on the queue.
		alive := "/api/aliveness-test/" + esc(vh)
		s.observe("aliveness, monitoring user without access", tg.doAs(mon, "pw", "GET", alive, nil), exactly())
		s.observe("aliveness, management user without access", tg.doAs(u, "pw", "GET", alive, nil), exactly())
		for _, p := range []map[string]any{
			{"configure": "", "write": ".*", "read": ".*"},
			{"configure": ".*", "write": "", "read": ".*"},
			{"configure": ".*", "write": ".*", "read": ""},
			{"configure": ".*", "write": ".*", "read": ".*"},
		} {
			tg.must("PUT", "/api/permissions/"+esc(vh)+"/"+esc(mon), p, 201, 204)
			s.observe(fmt.Sprintf("aliveness with permissions %v", p), tg.doAs(mon, "pw", "GET", alive, nil), exactly())
		}
		tg.must("DELETE", "/api/permissions/"+esc(vh)+"/"+esc(tg.user), nil, 204)
		s.observe("aliveness, administrator without access", tg.do("GET", alive, nil), exactly())
	})
}

// nodeKeys are the node fields the web UI's overview table and the usual
// monitoring checks read.
var nodeKeys = []string{"name", "type", "running", "os_pid", "uptime", "processors", "rates_mode",
	"mem_used", "mem_limit", "mem_alarm", "disk_free", "disk_free_limit", "disk_free_alarm",
	"fd_used", "fd_total", "sockets_used", "sockets_total", "proc_used", "proc_total", "run_queue",
	"partitions", "exchange_types", "auth_mechanisms", "applications", "cluster_links", "being_drained",
	"mem_used_details", "fd_used_details", "sockets_used_details", "disk_free_details", "proc_used_details"}

func TestMgmtDiffNode(t *testing.T) {
	t.Parallel()
	mgmtDiff(t, func(s *diffScene) {
		node, _ := dig(s.tg.getJSON("/api/overview"), "node").(string)
		// The node's name differs (rabbit@host vs Warren's): compare shapes.
		r := s.tg.do("GET", "/api/nodes/"+esc(node), nil)
		s.observe("GET /api/nodes/{node}", r, only(nodeKeys...))
		r = s.tg.do("GET", "/api/nodes/"+esc(node)+"?memory=true", nil)
		s.observe("GET /api/nodes/{node}?memory=true", r, only("name", "memory"), ignoring("memory"))
	})
}

func TestMgmtDiffConnections(t *testing.T) {
	t.Parallel()
	mgmtDiff(t, func(s *diffScene) {
		tg, vh := s.tg, s.vh
		tg.declareQueue(vh, "cq", nil)
		cn := "conn-" + vh
		conn := tg.dial(s.t, vh, cn)
		ch, err := conn.Channel()
		if err != nil {
			s.t.Fatal(err)
		}
		if err := ch.Qos(3, 0, false); err != nil {
			s.t.Fatal(err)
		}
		if _, err := ch.Consume("cq", "ctag", false, false, false, false, amqp.Table{"x-priority": 5}); err != nil {
			s.t.Fatal(err)
		}
		c := tg.findConn(tg.user, tg.pass, cn)
		if c == nil {
			s.t.Fatalf("connection %q not listed", cn)
		}
		name := c["name"].(string)
		// Wait for RabbitMQ's statistics to show the channel and consumer.
		// The consumer is listed at once (an event), the channel's own
		// consumer_count and prefetch_count (and the queue's consumers) only
		// with the next statistics (every 5 s).
		if !eventually(func() bool {
			cs, _ := tg.getJSON("/api/consumers/" + esc(vh)).([]any)
			chs, _ := tg.getJSON("/api/connections/" + esc(name) + "/channels").([]any)
			return len(cs) == 1 && len(chs) == 1 && dig(chs[0], "consumer_count") == 1.0 && dig(chs[0], "prefetch_count") == 3.0 &&
				dig(tg.getJSON("/api/connections/"+esc(name)), "channels") == 1.0 &&
				dig(tg.getJSON("/api/queues/"+esc(vh)+"/cq"), "consumers") == 1.0
		}) {
			s.t.Fatalf("consumer/channel of %q never listed", cn)
		}
		connVals := values("vhost", "user", "protocol", "auth_mechanism", "channels", "state", "type", "ssl", "client_properties.connection_name", "host", "peer_host")
		// The list entry was read before RabbitMQ's statistics caught up:
		// its channel count is not compared.
		s.shape("GET /api/connections [ours]", c, values("vhost", "user", "protocol", "auth_mechanism", "type", "ssl", "client_properties.connection_name"), ignoring("client_properties.capabilities", "client_properties.product", "client_properties.version", "client_properties.platform", "client_properties.information"))
		s.observe("GET /api/connections/{name}", tg.do("GET", "/api/connections/"+esc(name), nil), connVals)
		s.observe("GET /api/vhosts/{vh}/connections", tg.do("GET", "/api/vhosts/"+esc(vh)+"/connections", nil), values("len", "0.vhost", "0.user"))
		chs := s.observe("GET /api/connections/{name}/channels", tg.do("GET", "/api/connections/"+esc(name)+"/channels", nil),
			values("len", "0.number", "0.vhost", "0.user", "0.prefetch_count", "0.consumer_count", "0.confirm", "0.transactional", "0.state", "0.messages_unacknowledged"))
		var chName string
		if arr, ok := chs.([]any); ok && len(arr) > 0 {
			chName, _ = dig(arr[0], "name").(string)
		}
		s.observe("GET /api/channels/{name}", tg.do("GET", "/api/channels/"+esc(chName), nil),
			values("number", "vhost", "user", "prefetch_count", "consumer_count", "consumer_details.len", "consumer_details.0.consumer_tag", "consumer_details.0.arguments"))
		s.observe("GET /api/consumers/{vh}", tg.do("GET", "/api/consumers/"+esc(vh), nil),
			values("len", "0.consumer_tag", "0.queue", "0.ack_required", "0.exclusive", "0.prefetch_count", "0.arguments", "0.active", "0.activity_status", "0.channel_details.number", "0.channel_details.user"))
		s.get("/api/queues/"+esc(vh)+"/cq", values("consumers", "consumer_details.len", "consumer_details.0.consumer_tag", "consumer_details.0.arguments", "consumer_details.0.prefetch_count"))
		s.observe("GET /api/connections/{unknown}", tg.do("GET", "/api/connections/nope", nil))
		s.observe("GET /api/channels/{unknown}", tg.do("GET", "/api/channels/nope", nil))
		s.observe("DELETE /api/connections/{name}", tg.do("DELETE", "/api/connections/"+esc(name), nil), exactly())
	})
}

// TestMgmtDiffConnectionsByUser: a user's connections listed and closed
// together, as operators do when they revoke a user.
func TestMgmtDiffConnectionsByUser(t *testing.T) {
	t.Parallel()
	mgmtDiff(t, func(s *diffScene) {
		tg, vh := s.tg, s.vh
		u := "cu-" + vh
		s.t.Cleanup(func() { tg.do("DELETE", "/api/users/"+esc(u), nil) })
		tg.must("PUT", "/api/users/"+esc(u), map[string]any{"password": "pw", "tags": ""}, 201, 204)
		tg.permit(vh, u)
		var closed []chan *amqp.Error
		for range 2 {
			c := tg.dialAs(s.t, u, "pw", vh, "")
			closed = append(closed, c.NotifyClose(make(chan *amqp.Error, 1)))
		}
		path := "/api/connections/username/" + esc(u)
		if !eventually(func() bool { l, _ := tg.getJSON(path).([]any); return len(l) == 2 }) {
			s.t.Fatalf("[%s] %s never listed 2 connections", tg.kind, path)
		}
		// Connection names hold the client's ports: compare the rest.
		s.get(path, values("len", "0.vhost", "0.user", "1.vhost", "1.user"), ignoring("[].name", "[].node"))
		s.observe("DELETE "+path, tg.do("DELETE", path, nil), exactly())
		for i, ch := range closed {
			select {
			case err := <-ch:
				s.value(fmt.Sprintf("connection %d closed with", i), fmt.Sprint(err))
			case <-time.After(5 * time.Second):
				s.t.Fatalf("[%s] connection %d still open after DELETE %s", tg.kind, i, path)
			}
		}
		if !eventually(func() bool { l, _ := tg.getJSON(path).([]any); return len(l) == 0 }) {
			s.t.Fatalf("[%s] %s still lists connections", tg.kind, path)
		}
		s.get(path, exactly())
		s.observe("DELETE connections of a user without any", tg.do("DELETE", "/api/connections/username/nobody-"+esc(vh), nil), exactly())
	})
}

func TestMgmtDiffExchanges(t *testing.T) {
	t.Parallel()
	mgmtDiff(t, func(s *diffScene) {
		tg, vh := s.tg, s.vh
		for _, x := range []struct {
			name string
			body map[string]any
		}{
			{"x-direct", map[string]any{"type": "direct", "durable": true}},
			{"x-fanout", map[string]any{"type": "fanout", "auto_delete": true}},
			{"x-topic", map[string]any{"type": "topic", "durable": true, "arguments": map[string]any{"alternate-exchange": "x-fanout"}}},
			{"x-headers", map[string]any{"type": "headers", "internal": true}},
		} {
			s.observe("PUT /api/exchanges/{vh}/"+x.name, tg.do("PUT", "/api/exchanges/"+esc(vh)+"/"+x.name, x.body), exactly())
		}
		tg.declareQueue(vh, "xq", nil)
		tg.must("POST", "/api/bindings/"+esc(vh)+"/e/x-direct/q/xq", map[string]any{"routing_key": "k"}, 201)
		s.observe("POST publish routed", tg.do("POST", "/api/exchanges/"+esc(vh)+"/x-direct/publish", map[string]any{"properties": map[string]any{}, "routing_key": "k", "payload": "x", "payload_encoding": "string"}), exactly())
		s.observe("POST publish unrouted", tg.do("POST", "/api/exchanges/"+esc(vh)+"/x-direct/publish", map[string]any{"properties": map[string]any{}, "routing_key": "nope", "payload": "x", "payload_encoding": "string"}), exactly())
		s.observe("POST publish base64", tg.do("POST", "/api/exchanges/"+esc(vh)+"/x-direct/publish", map[string]any{"properties": map[string]any{"delivery_mode": 2, "priority": 3, "headers": map[string]any{"a": 1}}, "routing_key": "k", "payload": "AAEC", "payload_encoding": "base64"}), exactly())
		tg.waitQueueField(vh, "xq", "messages", 2)
		list := s.get("/api/exchanges/"+esc(vh), ignoring("[].message_stats"))
		s.value("exchange names of vhost", names(list))
		for _, n := range []string{"", "amq.direct", "amq.fanout", "amq.headers", "amq.match", "amq.rabbitmq.trace", "amq.topic", "x-direct", "x-fanout", "x-headers", "x-topic"} {
			var x any = "(not listed)"
			if l := findBy(list, "name", n); len(l) == 1 {
				x = l[0]
			}
			s.shape("exchange "+strconv.Quote(n)+" in list", x, values("name", "vhost", "type", "durable", "auto_delete", "internal", "arguments"))
		}
		for _, n := range []string{"x-direct", "x-topic", "x-headers", "amq.direct", "amq.default"} {
			s.get("/api/exchanges/"+esc(vh)+"/"+n, values("name", "vhost", "type", "durable", "auto_delete", "internal", "arguments", "incoming.len", "outgoing.len"))
		}
		s.get("/api/exchanges/" + esc(vh) + "/nope")
		s.observe("DELETE /api/exchanges/{vh}/x-fanout", tg.do("DELETE", "/api/exchanges/"+esc(vh)+"/x-fanout", nil), exactly())
		s.observe("DELETE /api/exchanges/{vh}/x-fanout again", tg.do("DELETE", "/api/exchanges/"+esc(vh)+"/x-fanout", nil), exactly())
		ms := tg.apiGet(vh, "xq", map[string]any{"count": 2, "ackmode": "ack_requeue_false", "encoding": "auto"})
		s.shape("published messages via /get", ms, values("len", "0.payload", "0.payload_encoding", "0.properties", "1.payload", "1.payload_encoding", "1.properties", "1.payload_bytes"))
	})
}

func TestMgmtDiffQueues(t *testing.T) {
	t.Parallel()
	mgmtDiff(t, func(s *diffScene) {
		tg, vh := s.tg, s.vh
		decls := []struct {
			name string
			body map[string]any
		}{
			{"q-plain", map[string]any{"durable": false}},
			{"q-default", map[string]any{}},
			{"q-args", map[string]any{"durable": true, "arguments": map[string]any{"x-max-length": 10, "x-message-ttl": 60000, "x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dead", "x-overflow": "reject-publish"}}},
			{"q-lazy", map[string]any{"durable": true, "auto_delete": true, "arguments": map[string]any{"x-queue-mode": "lazy", "x-max-priority": 5}}},
			{"q-quorum", map[string]any{"durable": true, "arguments": map[string]any{"x-queue-type": "quorum", "x-delivery-limit": 3}}},
			{"q-unacked", map[string]any{"durable": true}},
		}
		for _, d := range decls {
			s.observe("PUT /api/queues/{vh}/"+d.name, tg.do("PUT", "/api/queues/"+esc(vh)+"/"+d.name, d.body), exactly())
		}
		s.observe("PUT /api/queues/{vh}/q-plain again", tg.do("PUT", "/api/queues/"+esc(vh)+"/q-plain", map[string]any{"durable": false}), exactly())
		for i := 0; i < 3; i++ {
			tg.publishAPI(vh, "", "q-args", "m"+strconv.Itoa(i), map[string]any{"delivery_mode": 2})
			tg.publishAPI(vh, "", "q-quorum", "m"+strconv.Itoa(i), nil)
		}
		// q-unacked: two persistent messages taken and not acked, one
		// transient ready; the byte counts split them by state and by
		// persistence.
		tg.publishAPI(vh, "", "q-unacked", "aa", map[string]any{"delivery_mode": 2})
		tg.publishAPI(vh, "", "q-unacked", "bbb", map[string]any{"delivery_mode": 2})
		tg.publishAPI(vh, "", "q-unacked", "cccc", nil)
		getter := tg.channel(s.t, vh)
		for range 2 {
			if _, ok, err := getter.Get("q-unacked", false); !ok || err != nil {
				s.t.Fatalf("[%s] get q-unacked: %v %v", tg.kind, ok, err)
			}
		}
		tg.waitQueueField(vh, "q-args", "messages", 3)
		tg.waitQueueField(vh, "q-quorum", "messages", 3)
		tg.waitQueueField(vh, "q-unacked", "messages_unacknowledged", 2)
		// RabbitMQ can report the byte counts a stats round after the
		// message counts (seen on a loaded CI machine): wait for them too.
		tg.waitQueueField(vh, "q-args", "message_bytes_persistent", 6)
		tg.waitQueueField(vh, "q-unacked", "message_bytes_unacknowledged", 5)
		tg.waitQueueField(vh, "q-unacked", "message_bytes_persistent", 5)
		qv := values("name", "vhost", "durable", "auto_delete", "exclusive", "arguments", "type", "messages", "messages_ready", "messages_unacknowledged", "consumers", "policy", "effective_policy_definition", "operator_policy", "state",
			"message_bytes", "message_bytes_ready", "message_bytes_unacknowledged", "messages_persistent", "message_bytes_persistent")
		for _, d := range decls {
			// Quorum queues report leader/members (Raft) fields; classic
			// ones the memory/paging fields.
			s.get("/api/queues/"+esc(vh)+"/"+d.name, qv)
		}
		list := s.get("/api/queues/"+esc(vh), ignoring("[].message_stats"))
		s.value("queue names of vhost", names(list))
		for _, q := range sortedBy(list, "name") {
			s.shape("queue "+fmt.Sprint(dig(q, "name"))+" in list", q, qv)
		}
		s.get("/api/queues/"+esc(vh)+"?page=1&page_size=2", values("page", "page_count", "page_size", "item_count", "total_count", "filtered_count", "items.len", "items.0.name", "items.1.name"), ignoring("items[].message_stats"))
		s.get("/api/queues/"+esc(vh)+"?page=2&page_size=2&name=q-&sort=name&sort_reverse=true", values("page", "page_count", "item_count", "filtered_count", "items.0.name", "items.1.name"), ignoring("items[].message_stats"))
		s.get("/api/queues/"+esc(vh)+"?page=1&page_size=10&name=^q-(a|l)&use_regex=true", values("filtered_count", "item_count", "items.0.name", "items.1.name"), ignoring("items[].message_stats"))
		s.get("/api/queues/"+esc(vh)+"?columns=name,messages,arguments.x-max-length", exactly())
		s.get("/api/queues/"+esc(vh)+"?page=1&page_size=2&columns=name,durable", exactly())
		s.get("/api/queues/"+esc(vh)+"?page=9&page_size=2", values("page"))
		s.get("/api/queues/" + esc(vh) + "/nope")
		s.observe("DELETE if-empty non-empty", tg.do("DELETE", "/api/queues/"+esc(vh)+"/q-args?if-empty=true", nil), exactly())
		s.observe("DELETE contents (purge)", tg.do("DELETE", "/api/queues/"+esc(vh)+"/q-args/contents", nil), exactly())
		s.observe("DELETE if-empty now empty", tg.do("DELETE", "/api/queues/"+esc(vh)+"/q-args?if-empty=true", nil), exactly())
		s.observe("DELETE q-args again", tg.do("DELETE", "/api/queues/"+esc(vh)+"/q-args", nil), exactly())
		ch := tg.channel(s.t, vh)
		if _, err := ch.Consume("q-plain", "", true, false, false, false, nil); err != nil {
			s.t.Fatal(err)
		}
		s.observe("DELETE if-unused with a consumer", tg.do("DELETE", "/api/queues/"+esc(vh)+"/q-plain?if-unused=true", nil), exactly())
		s.observe("POST actions sync (classic)", tg.do("POST", "/api/queues/"+esc(vh)+"/q-lazy/actions", map[string]any{"action": "sync"}))
	})
}

func TestMgmtDiffQueueGetXDeath(t *testing.T) {
	t.Parallel()
	mgmtDiff(t, func(s *diffScene) {
		tg, vh := s.tg, s.vh
		tg.declareQueue(vh, "src", map[string]any{"durable": true, "arguments": map[string]any{"x-dead-letter-exchange": "dlx", "x-message-ttl": 60000}})
		tg.declareQueue(vh, "dlq", map[string]any{"durable": true})
		tg.must("PUT", "/api/exchanges/"+esc(vh)+"/dlx", map[string]any{"type": "fanout", "durable": true}, 201, 204)
		tg.must("PUT", "/api/exchanges/"+esc(vh)+"/in", map[string]any{"type": "direct", "durable": true}, 201, 204)
		tg.must("POST", "/api/bindings/"+esc(vh)+"/e/dlx/q/dlq", map[string]any{"routing_key": ""}, 201)
		tg.must("POST", "/api/bindings/"+esc(vh)+"/e/in/q/src", map[string]any{"routing_key": "k"}, 201)
		ch := tg.channel(s.t, vh)
		publish(s.t, ch, "in", "k", amqp.Publishing{Body: []byte("hello"), DeliveryMode: 2, ContentType: "text/plain", MessageId: "m-1",
			Headers: amqp.Table{"s": "str", "i": int32(7), "b": true, "l": []any{"a", int32(1)}, "t": amqp.Table{"x": "y"}}, CorrelationId: "c-1", Expiration: "50000", Priority: 1, Type: "ty", AppId: "app", UserId: "guest"})
		publish(s.t, ch, "in", "k", amqp.Publishing{Body: []byte{0xff, 0xfe}})
		// Reject both: they are dead-lettered to dlq, in order.
		s.observe("POST /get src count 2 reject_requeue_false", tg.do("POST", "/api/queues/"+esc(vh)+"/src/get", map[string]any{"count": 2, "ackmode": "reject_requeue_false", "encoding": "auto"}),
			values("len", "0.payload", "0.payload_encoding", "0.payload_bytes", "0.redelivered", "0.exchange", "0.routing_key", "0.message_count", "0.properties", "1.payload", "1.payload_encoding", "1.properties", "1.message_count"))
		if !eventually(func() bool { return tg.amqpCount(s.t, vh, "dlq") == 2 }) {
			s.t.Fatalf("dlq never got 2 messages")
		}
		r := tg.do("POST", "/api/queues/"+esc(vh)+"/dlq/get", map[string]any{"count": 2, "ackmode": "ack_requeue_true", "encoding": "auto"})
		var ms []any
		if arr, ok := r.json(s.t).([]any); ok {
			ms = arr
		}
		var order []any
		for _, m := range ms {
			order = append(order, dig(m, "payload"))
		}
		// Dead-lettering keeps the order the messages were rejected in.
		s.value("dlq payload order after rejecting [hello, ff fe] with one /get", order)
		// Each message's rendering, matched by payload size (5: hello,
		// 2: the binary one). x-last-death-* are left out: they were added
		// in RabbitMQ 3.13 (Warren follows 4.x; 3.10.8 has none).
		bySize := sortedBy(ms, "payload_bytes")
		s.shape("dlq message hello via /get", elem(bySize, 1), values("payload", "payload_encoding", "payload_bytes", "redelivered", "exchange", "routing_key",
			"properties.headers.x-death.len", "properties.headers.x-death.0.count", "properties.headers.x-death.0.reason", "properties.headers.x-death.0.queue",
			"properties.headers.x-death.0.exchange", "properties.headers.x-death.0.routing-keys", "properties.headers.x-death.0.original-expiration",
			"properties.headers.x-first-death-reason", "properties.headers.x-first-death-queue", "properties.headers.x-first-death-exchange",
			"properties.expiration", "properties.delivery_mode", "properties.content_type", "properties.message_id", "properties.priority", "properties.correlation_id",
			"properties.type", "properties.app_id", "properties.user_id",
			"properties.headers.s", "properties.headers.i", "properties.headers.b", "properties.headers.l", "properties.headers.t"))
		s.shape("dlq message ff fe via /get", elem(bySize, 0), values("payload", "payload_encoding", "payload_bytes",
			"properties.headers.x-death.len", "properties.headers.x-death.0.count", "properties.headers.x-death.0.reason", "properties.headers.x-death.0.queue",
			"properties.headers.x-death.0.exchange", "properties.headers.x-death.0.routing-keys"))
		s.observe("POST /get dlq ack_requeue_false count 5", tg.do("POST", "/api/queues/"+esc(vh)+"/dlq/get", map[string]any{"count": 5, "ackmode": "ack_requeue_false", "encoding": "auto"}),
			values("len", "0.message_count", "1.message_count"))
		s.observe("POST /get empty dlq", tg.do("POST", "/api/queues/"+esc(vh)+"/dlq/get", map[string]any{"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}), exactly())
		// Truncation, with each encoding, on a queue holding one message.
		tg.declareQueue(vh, "tq", nil)
		tg.publishAPI(vh, "", "tq", "hello world", map[string]any{"content_type": "text/plain"})
		for _, enc := range []string{"auto", "base64"} {
			s.observe("POST /get truncate 2 encoding "+enc, tg.do("POST", "/api/queues/"+esc(vh)+"/tq/get", map[string]any{"count": 1, "ackmode": "ack_requeue_true", "encoding": enc, "truncate": 2}),
				values("0.payload", "0.payload_bytes", "0.payload_encoding", "0.redelivered", "0.properties"))
		}
		// Unknown encoding. (An unknown ackmode makes RabbitMQ 3.10.8 crash
		// with a 500: see the bad-input tests.)
		s.observe("POST /get encoding nonsense", tg.do("POST", "/api/queues/"+esc(vh)+"/tq/get", map[string]any{"count": 1, "ackmode": "ack_requeue_true", "encoding": "nonsense"}))
		if n := tg.amqpCount(s.t, vh, "tq"); n != 1 {
			s.t.Errorf("tq after refused /get requests: %d messages, want 1", n)
		}
	})
}

// elem returns the i-th element of a list, or "(missing)".
func elem(list []any, i int) any {
	if i < len(list) {
		return list[i]
	}
	return "(missing)"
}

func TestMgmtDiffBindings(t *testing.T) {
	t.Parallel()
	mgmtDiff(t, func(s *diffScene) {
		tg, vh := s.tg, s.vh
		tg.declareQueue(vh, "bq", nil)
		for _, x := range []string{"direct:bx", "headers:hx", "topic:tx"} {
			typ, n, _ := strings.Cut(x, ":")
			tg.must("PUT", "/api/exchanges/"+esc(vh)+"/"+n, map[string]any{"type": typ}, 201, 204)
		}
		bindings := []struct{ path, key string }{
			{"/e/bx/q/bq", "k1"},
			{"/e/hx/q/bq", "k2"},
			{"/e/bx/e/tx", "k3"},
			{"/e/tx/q/bq", "a.#"},
		}
		args := []map[string]any{nil, {"x-match": "any", "a": "1", "n": 2}, {"x-arg": "v"}, nil}
		for i, b := range bindings {
			body := map[string]any{"routing_key": b.key}
			if args[i] != nil {
				body["arguments"] = args[i]
			}
			r := tg.do("POST", "/api/bindings/"+esc(vh)+b.path, body)
			s.observe("POST /api/bindings/{vh}"+b.path, r, exactly())
			// RabbitMQ answers with a Location relative to the request
			// ("bq/k1"); compare where it points.
			s.value("Location of POST /api/bindings/{vh}"+b.path+" (resolved)", resolveLocation(tg.url+"/api/bindings/"+esc(vh)+b.path, r.header.Get("Location")))
		}
		bv := []string{"source", "vhost", "destination", "destination_type", "routing_key", "arguments", "properties_key"}
		for _, p := range []string{
			"/api/bindings/" + esc(vh),
			"/api/queues/" + esc(vh) + "/bq/bindings",
			"/api/exchanges/" + esc(vh) + "/bx/bindings/source",
			"/api/exchanges/" + esc(vh) + "/tx/bindings/destination",
			"/api/exchanges/" + esc(vh) + "/tx/bindings/source",
			"/api/bindings/" + esc(vh) + "/e/bx/q/bq",
			"/api/bindings/" + esc(vh) + "/e/bx/e/tx",
		} {
			s.getSorted(p, "source", "destination_type", "destination", "properties_key")
		}
		all := tg.getJSON("/api/bindings")
		s.value("our bindings in /api/bindings", sortedBy(findBy(all, "vhost", vh), "source", "destination", "routing_key"))
		hx := findBy(tg.getJSON("/api/bindings/"+esc(vh)+"/e/hx/q/bq"), "routing_key", "k2")
		props := ""
		if len(hx) == 1 {
			props, _ = hx[0]["properties_key"].(string)
		}
		s.value("headers binding properties_key", props)
		s.observe("GET /api/bindings/{vh}/e/hx/q/bq/{properties_key}", tg.do("GET", "/api/bindings/"+esc(vh)+"/e/hx/q/bq/"+esc(props), nil), values(bv...))
		s.get("/api/bindings/"+esc(vh)+"/e/bx/e/tx/k3~nope", exactly())
		s.observe("DELETE headers binding by properties_key", tg.do("DELETE", "/api/bindings/"+esc(vh)+"/e/hx/q/bq/"+esc(props), nil), exactly())
		s.observe("DELETE e2e binding by properties_key", tg.do("DELETE", "/api/bindings/"+esc(vh)+"/e/bx/e/tx/"+esc(props3(tg, vh)), nil), exactly())
		s.observe("DELETE unknown binding", tg.do("DELETE", "/api/bindings/"+esc(vh)+"/e/bx/q/bq/nope", nil), exactly())
		s.getSorted("/api/bindings/"+esc(vh), "source", "destination_type", "destination", "properties_key")
	})
}

// resolveLocation resolves a Location header against the request URL and
// returns its path (as sent, escapes kept), relative to the API root.
func resolveLocation(reqURL, loc string) string {
	if loc == "" {
		return "(no Location)"
	}
	base, err := url.Parse(reqURL)
	if err != nil {
		return "bad request URL"
	}
	// The request path names the destination ("/e/x/q/bq"): a relative
	// Location resolves against it as a directory's parent would.
	u, err := base.Parse(loc)
	if err != nil {
		return "unparsable Location " + loc
	}
	return u.EscapedPath()
}

func props3(tg *mgmtTarget, vh string) string {
	l := findBy(tg.getJSON("/api/bindings/"+esc(vh)+"/e/bx/e/tx"), "routing_key", "k3")
	if len(l) != 1 {
		return "missing"
	}
	p, _ := l[0]["properties_key"].(string)
	return p
}

func TestMgmtDiffVhostsUsersPermissions(t *testing.T) {
	t.Parallel()
	// One hash for both brokers, so that GET user compares exactly.
	hash := rabbithole.Base64EncodedSaltedPasswordHashSHA256("test12")
	mgmtDiff(t, func(s *diffScene) {
		tg, vh := s.tg, s.vh
		vh2 := vh + "-2"
		s.observe("PUT vhost with description and tags", tg.do("PUT", "/api/vhosts/"+esc(vh2), map[string]any{"description": "d", "tags": "t1,t2", "tracing": false}), exactly())
		s.t.Cleanup(func() { tg.do("DELETE", "/api/vhosts/"+esc(vh2), nil) })
		s.observe("PUT same vhost again", tg.do("PUT", "/api/vhosts/"+esc(vh2), map[string]any{"description": "d2"}), exactly())
		// cluster_state is keyed by node name, which differs.
		vv := []obsOpt{values("name", "description", "tags", "tracing", "default_queue_type", "metadata"), ignoring("cluster_state.*")}
		s.get("/api/vhosts/"+esc(vh2), vv...)
		for _, v := range findBy(tg.getJSON("/api/vhosts"), "name", vh2) {
			s.shape("vhost in list", v, vv...)
		}
		// RabbitMQ gives the user who creates a vhost full permissions on it.
		s.getSorted("/api/vhosts/"+esc(vh2)+"/permissions", "user")
		u := "user-" + vh
		s.t.Cleanup(func() { tg.do("DELETE", "/api/users/"+esc(u), nil) })
		s.observe("PUT user", tg.do("PUT", "/api/users/"+esc(u), map[string]any{"password": "pw", "tags": "management,monitoring"}), exactly())
		s.observe("PUT user again (update)", tg.do("PUT", "/api/users/"+esc(u), map[string]any{"password": "pw", "tags": "monitoring,management"}), exactly())
		uv := values("name", "tags", "hashing_algorithm", "limits")
		s.get("/api/users/"+esc(u), uv)
		for _, e := range findBy(tg.getJSON("/api/users"), "name", u) {
			s.shape("user in list", e, uv)
		}
		s.get("/api/users/without-permissions")
		u2 := "hash-" + vh
		s.t.Cleanup(func() { tg.do("DELETE", "/api/users/"+esc(u2), nil) })
		s.observe("PUT user with password_hash", tg.do("PUT", "/api/users/"+esc(u2), map[string]any{"password_hash": hash, "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ""}), exactly())
		s.get("/api/users/"+esc(u2), exactly())
		s.observe("PUT permissions", tg.do("PUT", "/api/permissions/"+esc(vh2)+"/"+esc(u), map[string]any{"configure": "^c", "write": "^w", "read": "^r"}), exactly())
		s.observe("PUT permissions again", tg.do("PUT", "/api/permissions/"+esc(vh2)+"/"+esc(u), map[string]any{"configure": "^c", "write": "^w", "read": "^r"}), exactly())
		s.get("/api/permissions/"+esc(vh2)+"/"+esc(u), exactly())
		s.get("/api/vhosts/"+esc(vh2)+"/permissions", exactly())
		s.get("/api/users/"+esc(u)+"/permissions", exactly())
		s.value("permissions of the user in /api/permissions", findBy(tg.getJSON("/api/permissions"), "user", u))
		s.get("/api/users/"+esc(u)+"/topic-permissions", exactly())
		s.observe("whoami as the user", tg.doAs(u, "pw", "GET", "/api/whoami", nil), exactly())
		s.observe("whoami as the hash user (no tags)", tg.doAs(u2, "test12", "GET", "/api/whoami", nil), exactly())
		s.observe("DELETE permissions", tg.do("DELETE", "/api/permissions/"+esc(vh2)+"/"+esc(u), nil), exactly())
		s.get("/api/permissions/"+esc(vh2)+"/"+esc(u), exactly())
		s.observe("DELETE user", tg.do("DELETE", "/api/users/"+esc(u), nil), exactly())
		s.observe("DELETE user again", tg.do("DELETE", "/api/users/"+esc(u), nil), exactly())
		s.observe("DELETE vhost", tg.do("DELETE", "/api/vhosts/"+esc(vh2), nil), exactly())
		s.get("/api/vhosts/"+esc(vh2), exactly())
	})
}

// TestMgmtDiffTopicPermissions: topic permissions through the API, and
// what they allow over AMQP and the API: publishing to a topic exchange
// (write, matched against the routing key), binding to and unbinding
// from one (read, against the binding key), with {username} expanded;
// other exchange types are not restricted.
func TestMgmtDiffTopicPermissions(t *testing.T) {
	t.Parallel()
	mgmtDiff(t, func(s *diffScene) {
		tg, vh := s.tg, s.vh
		u := "tp-" + vh
		s.t.Cleanup(func() { tg.do("DELETE", "/api/users/"+esc(u), nil) })
		tg.must("PUT", "/api/users/"+esc(u), map[string]any{"password": "pw", "tags": "management"}, 201, 204)
		tg.permit(vh, u)
		tp := "/api/topic-permissions/" + esc(vh) + "/" + esc(u)
		s.get(tp, exactly())
		s.observe("PUT topic permission", tg.do("PUT", tp, map[string]any{"exchange": "amq.topic", "write": `^a\.`, "read": `^r\.`}), exactly())
		s.observe("PUT topic permission again", tg.do("PUT", tp, map[string]any{"exchange": "amq.topic", "write": `^a\.`, "read": `^r\.`}), exactly())
		s.observe("PUT topic permission, other exchange", tg.do("PUT", tp, map[string]any{"exchange": "tx", "write": "^{username}-", "read": ""}), exactly())
		s.getSorted(tp, "exchange")
		s.value("our topic permissions in /api/topic-permissions", sortedBy(findBy(tg.getJSON("/api/topic-permissions"), "user", u), "exchange"))
		s.getSorted("/api/users/"+esc(u)+"/topic-permissions", "exchange")
		s.getSorted("/api/vhosts/"+esc(vh)+"/topic-permissions", "exchange")
		for _, bad := range []struct {
			name string
			body map[string]any
		}{
			{"no exchange", map[string]any{"write": "a", "read": "b"}},
			{"no write", map[string]any{"exchange": "x", "read": "b"}},
			{"no read", map[string]any{"exchange": "x", "write": "a"}},
		} {
			s.observe("PUT topic permission with "+bad.name, tg.do("PUT", tp, bad.body), exactly())
		}
		s.observe("PUT topic permission of an unknown user", tg.do("PUT", "/api/topic-permissions/"+esc(vh)+"/nobody", map[string]any{"exchange": "x", "write": "a", "read": "b"}), exactly())
		s.observe("PUT topic permission in an unknown vhost", tg.do("PUT", "/api/topic-permissions/nope-"+esc(vh)+"/"+esc(u), map[string]any{"exchange": "x", "write": "a", "read": "b"}), exactly())
		s.get("/api/topic-permissions/"+esc(vh)+"/nobody", exactly())
		s.get("/api/users/nobody-"+esc(vh)+"/topic-permissions", exactly())
		s.get("/api/vhosts/nope-"+esc(vh)+"/topic-permissions", exactly())
		s.observe("GET topic permissions as a management user", tg.doAs(u, "pw", "GET", "/api/topic-permissions", nil), exactly())

		// AMQP, as the user: each attempt on a channel of its own.
		ch := tg.channel(s.t, vh)
		if err := ch.ExchangeDeclare("tx", "topic", false, false, false, false, nil); err != nil {
			s.t.Fatal(err)
		}
		if err := ch.ExchangeDeclare("dx", "direct", false, false, false, false, nil); err != nil {
			s.t.Fatal(err)
		}
		if _, err := ch.QueueDeclare("tq", false, false, false, false, nil); err != nil {
			s.t.Fatal(err)
		}
		conn := tg.dialAs(s.t, u, "pw", vh, "")
		try := func(what string, f func(*amqp.Channel) error) {
			c, err := conn.Channel()
			if err != nil {
				s.t.Fatalf("[%s] channel: %v", tg.kind, err)
			}
			closed := c.NotifyClose(make(chan *amqp.Error, 1))
			err = f(c)
			if err == nil {
				// A refused publish closes the channel asynchronously: a
				// round trip brings the close back.
				err = c.Qos(1, 0, false)
			}
			if err == nil {
				select {
				case e := <-closed:
					err = e
				default:
				}
			} else if errors.Is(err, amqp.ErrClosed) {
				// The close came before the Qos was sent: amqp091-go
				// answers the Qos with its own 504; the broker's reply
				// is the one NotifyClose carries.
				select {
				case e := <-closed:
					err = e
				case <-time.After(waitTimeout):
				}
			}
			s.value("AMQP "+what, fmt.Sprint(err))
			c.Close()
		}
		pub := func(x, key string) func(*amqp.Channel) error {
			return func(c *amqp.Channel) error {
				return c.Publish(x, key, false, false, amqp.Publishing{Body: []byte("m")})
			}
		}
		try("publish a.b to amq.topic", pub("amq.topic", "a.b"))
		try("publish z.b to amq.topic", pub("amq.topic", "z.b"))
		try("publish {username}-1 to tx", pub("tx", u+"-1"))
		try("publish other to tx", pub("tx", "other"))
		try("publish anything to a direct exchange", pub("dx", "z"))
		bind := func(x, key string) func(*amqp.Channel) error {
			return func(c *amqp.Channel) error { return c.QueueBind("tq", key, x, false, nil) }
		}
		try("bind r.x to amq.topic", bind("amq.topic", "r.x"))
		try("bind z.x to amq.topic", bind("amq.topic", "z.x"))
		try("bind the empty key to tx (read \"\")", bind("tx", ""))
		try("bind k to tx", bind("tx", "k"))
		try("unbind r.x from amq.topic", func(c *amqp.Channel) error { return c.QueueUnbind("tq", "r.x", "amq.topic", nil) })
		if err := ch.QueueBind("tq", "z.y", "amq.topic", false, nil); err != nil {
			s.t.Fatal(err)
		}
		try("unbind z.y from amq.topic", func(c *amqp.Channel) error { return c.QueueUnbind("tq", "z.y", "amq.topic", nil) })
		try("bind dx to tx with k", func(c *amqp.Channel) error { return c.ExchangeBind("dx", "k", "tx", false, nil) })
		try("bind tx to dx with k", func(c *amqp.Channel) error { return c.ExchangeBind("tx", "k", "dx", false, nil) })

		// The API, as the user.
		apiPub := func(key string) mgmtResp {
			return tg.doAs(u, "pw", "POST", "/api/exchanges/"+esc(vh)+"/amq.topic/publish",
				map[string]any{"properties": map[string]any{}, "routing_key": key, "payload": "x", "payload_encoding": "string"})
		}
		s.observe("API publish a.b", apiPub("a.b"), exactly())
		s.observe("API publish z.b", apiPub("z.b"), exactly())
		s.observe("API bind z.w", tg.doAs(u, "pw", "POST", "/api/bindings/"+esc(vh)+"/e/amq.topic/q/tq", map[string]any{"routing_key": "z.w"}), exactly())
		s.observe("API unbind z.y", tg.doAs(u, "pw", "DELETE", "/api/bindings/"+esc(vh)+"/e/amq.topic/q/tq/z.y", nil), exactly())

		s.observe("DELETE topic permissions", tg.do("DELETE", tp, nil), exactly())
		s.get(tp, exactly())
		s.observe("DELETE topic permissions again", tg.do("DELETE", tp, nil), exactly())
		try("publish z.b to amq.topic once the permission is gone", pub("amq.topic", "z.b"))
	})
}

// TestMgmtDiffLimits: vhost limits (max-connections, max-queues) and user
// limits (max-connections, max-channels) through the API, what they
// refuse over AMQP and the API, and how definitions carry them.
func TestMgmtDiffLimits(t *testing.T) {
	t.Parallel()
	mgmtDiff(t, func(s *diffScene) {
		tg, vh := s.tg, s.vh
		u := "lim-" + vh
		s.t.Cleanup(func() { tg.do("DELETE", "/api/users/"+esc(u), nil) })
		tg.must("PUT", "/api/users/"+esc(u), map[string]any{"password": "pw", "tags": ""}, 201, 204)
		tg.permit(vh, u)
		vl, ul := "/api/vhost-limits/"+esc(vh), "/api/user-limits/"+esc(u)
		s.get(vl, exactly())
		s.get(ul, exactly())
		put := func(what, path string, body any) { s.observe(what, tg.do("PUT", path, body), exactly()) }
		put("PUT max-queues", vl+"/max-queues", map[string]any{"value": 2})
		put("PUT max-connections", vl+"/max-connections", map[string]any{"value": 1})
		put("PUT max-connections again", vl+"/max-connections", map[string]any{"value": 1})
		put("PUT an unknown vhost limit", vl+"/max-nonsense", map[string]any{"value": 2})
		put("PUT a vhost limit that is a string", vl+"/max-queues", map[string]any{"value": "5"})
		put("PUT a vhost limit that is a fraction", vl+"/max-queues", map[string]any{"value": 1.5})
		put("PUT a vhost limit without value", vl+"/max-queues", map[string]any{})
		put("PUT a limit of an unknown vhost", "/api/vhost-limits/nope-"+esc(vh)+"/max-queues", map[string]any{"value": 2})
		put("PUT max-channels", ul+"/max-channels", map[string]any{"value": 1})
		put("PUT user max-connections", ul+"/max-connections", map[string]any{"value": 5})
		put("PUT an unknown user limit", ul+"/max-queues", map[string]any{"value": 3})
		put("PUT a user limit that is a string", ul+"/max-channels", map[string]any{"value": "x"})
		put("PUT a limit of an unknown user", "/api/user-limits/nobody-"+esc(vh)+"/max-channels", map[string]any{"value": 3})
		s.get(vl, exactly())
		s.value("our entry of /api/vhost-limits", findBy(tg.getJSON("/api/vhost-limits"), "vhost", vh))
		s.get(ul, exactly())
		s.value("our entry of /api/user-limits", findBy(tg.getJSON("/api/user-limits"), "user", u))
		s.get("/api/users/"+esc(u), values("limits"))
		s.get("/api/vhost-limits/nope-"+esc(vh), exactly())
		s.get("/api/user-limits/nobody-"+esc(vh), exactly())
		s.observe("PUT a limit as a management user", tg.doAs(u, "pw", "PUT", vl+"/max-queues", map[string]any{"value": 3}), exactly())

		// Definitions carry them: vhost limits as a parameter, user limits
		// on the user.
		full, _ := tg.getJSON("/api/definitions").(map[string]any)
		ps := findBy(full["parameters"], "vhost", vh)
		if len(ps) == 0 {
			s.t.Fatalf("[%s] no vhost-limits parameter for %s in the export", tg.kind, vh)
		}
		s.value("vhost limits in the export", ps, projected())
		us := findBy(full["users"], "name", u)
		if len(us) != 1 {
			s.t.Fatalf("[%s] user %s not in the export", tg.kind, u)
		}
		s.value("user limits in the export", us[0]["limits"])

		// AMQP, as the user.
		amqpErr := func(err error) string {
			var e *amqp.Error
			if errors.As(err, &e) {
				return fmt.Sprintf("%d %s", e.Code, e.Reason)
			}
			return fmt.Sprint(err)
		}
		c1 := tg.dialAs(s.t, u, "pw", vh, "")
		// RabbitMQ counts connections from its tracking table, which an
		// event fills: wait until it lists c1.
		if !eventually(func() bool { l, _ := tg.getJSON("/api/connections/username/" + esc(u)).([]any); return len(l) == 1 }) {
			s.t.Fatalf("[%s] the user's connection is never tracked", tg.kind)
		}
		_, err := amqp.Dial(tg.amqpURLFor(u, "pw", vh))
		s.value("second connection (vhost max-connections 1)", amqpErr(err))
		closed := c1.NotifyClose(make(chan *amqp.Error, 1))
		ch, err := c1.Channel()
		if err != nil {
			s.t.Fatalf("[%s] first channel: %v", tg.kind, err)
		}
		for _, q := range []string{"q1", "q2"} {
			if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
				s.t.Fatalf("[%s] declare %s: %v", tg.kind, q, err)
			}
		}
		_, err = ch.QueueDeclare("q3", false, false, false, false, nil)
		s.value("third queue (max-queues 2)", amqpErr(err))
		s.observe("API declare over max-queues", tg.do("PUT", "/api/queues/"+esc(vh)+"/q4", map[string]any{"durable": false}), exactly())
		// The refused declare closed ch; a second channel is over
		// max-channels only once it is open. RabbitMQ untracks a closed
		// channel when an event reaches its tracker, so for a moment it
		// may still count ch: the new channel is then over the limit and
		// the connection is closed (530). Only RabbitMQ's side retries,
		// on a new connection (untracked the same way); Warren's count
		// is exact and must not refuse here.
		ch, err = c1.Channel()
		for tries := 0; err != nil && tg.w == nil && tries < 30; tries++ {
			s.t.Logf("[%s] channel after the refused declare: %v; retrying on a new connection", tg.kind, err)
			time.Sleep(100 * time.Millisecond)
			var c *amqp.Connection
			if c, err = amqp.Dial(tg.amqpURLFor(u, "pw", vh)); err == nil {
				s.t.Cleanup(func() { c.Close() })
				c1, closed = c, c.NotifyClose(make(chan *amqp.Error, 1))
				ch, err = c1.Channel()
			}
		}
		if err != nil {
			s.t.Fatalf("[%s] channel after the refused declare: %v", tg.kind, err)
		}
		if _, err := ch.QueueDeclare("q1", false, false, false, false, nil); err != nil {
			s.value("redeclaring q1 at the limit", amqpErr(err))
		}
		_, err = c1.Channel()
		select {
		case e := <-closed:
			s.value("second channel (max-channels 1) closes the connection with", amqpErr(e))
		case <-time.After(5 * time.Second):
			s.t.Fatalf("[%s] second channel over max-channels: %v, connection still open", tg.kind, err)
		}

		put("PUT max-connections -1 (none)", vl+"/max-connections", map[string]any{"value": -1})
		put("PUT user max-connections 0", ul+"/max-connections", map[string]any{"value": 0})
		_, err = amqp.Dial(tg.amqpURLFor(u, "pw", vh))
		s.value("connection over the user's max-connections 0", amqpErr(err))
		for _, p := range []string{vl + "/max-connections", vl + "/max-queues", ul + "/max-connections", ul + "/max-channels"} {
			s.observe("DELETE "+strings.TrimPrefix(p, "/api/"), tg.do("DELETE", p, nil), exactly())
		}
		s.get(vl, exactly())
		s.get(ul, exactly())
		if _, err := amqp.Dial(tg.amqpURLFor(u, "pw", vh)); err != nil {
			s.t.Fatalf("[%s] connection once the limits are gone: %v", tg.kind, err)
		}
	})
}

func TestMgmtDiffPolicies(t *testing.T) {
	t.Parallel()
	mgmtDiff(t, func(s *diffScene) {
		tg, vh := s.tg, s.vh
		def := map[string]any{"dead-letter-exchange": "pdlx", "max-length": 5, "message-ttl": 30000}
		s.observe("PUT policy", tg.do("PUT", "/api/policies/"+esc(vh)+"/p1", map[string]any{"pattern": "^pq", "definition": def, "apply-to": "queues", "priority": 2}), exactly())
		s.observe("PUT exchange policy", tg.do("PUT", "/api/policies/"+esc(vh)+"/p2", map[string]any{"pattern": "^px", "definition": map[string]any{"alternate-exchange": "ae"}, "apply-to": "exchanges"}), exactly())
		s.observe("PUT operator policy", tg.do("PUT", "/api/operator-policies/"+esc(vh)+"/op1", map[string]any{"pattern": "^pq", "definition": map[string]any{"max-length": 3}, "apply-to": "queues"}), exactly())
		tg.declareQueue(vh, "pq1", map[string]any{"durable": false, "arguments": map[string]any{"x-max-length": 100}})
		tg.must("PUT", "/api/exchanges/"+esc(vh)+"/px1", map[string]any{"type": "direct"}, 201, 204)
		tg.waitQueueField(vh, "pq1", "policy", "p1")
		s.get("/api/policies/"+esc(vh)+"/p1", exactly())
		s.getSorted("/api/policies/"+esc(vh), "name")
		s.value("our policies in /api/policies", sortedBy(findBy(tg.getJSON("/api/policies"), "vhost", vh), "name"))
		s.get("/api/operator-policies/"+esc(vh), exactly())
		s.get("/api/queues/"+esc(vh)+"/pq1", values("policy", "operator_policy", "effective_policy_definition", "arguments"))
		s.get("/api/exchanges/"+esc(vh)+"/px1", values("policy"))
		s.observe("DELETE policy", tg.do("DELETE", "/api/policies/"+esc(vh)+"/p1", nil), exactly())
		s.observe("DELETE policy again", tg.do("DELETE", "/api/policies/"+esc(vh)+"/p1", nil), exactly())
		s.get("/api/policies/"+esc(vh)+"/p1", exactly())
		s.observe("DELETE operator policy", tg.do("DELETE", "/api/operator-policies/"+esc(vh)+"/op1", nil), exactly())
		tg.waitQueueField(vh, "pq1", "policy", nil)
		s.get("/api/queues/"+esc(vh)+"/pq1", values("policy", "operator_policy", "effective_policy_definition"))
	})
}

func TestMgmtDiffDefinitionsExport(t *testing.T) {
	t.Parallel()
	hash := rabbithole.Base64EncodedSaltedPasswordHashSHA256("pw")
	mgmtDiff(t, func(s *diffScene) {
		tg, vh := s.tg, s.vh
		tg.declareQueue(vh, "eq", map[string]any{"durable": true, "arguments": map[string]any{"x-max-length": 7, "x-dead-letter-exchange": "ex"}})
		tg.declareQueue(vh, "eqq", map[string]any{"durable": true, "arguments": map[string]any{"x-queue-type": "quorum"}})
		tg.must("PUT", "/api/exchanges/"+esc(vh)+"/ex", map[string]any{"type": "topic", "durable": true, "arguments": map[string]any{"alternate-exchange": "amq.fanout"}}, 201, 204)
		tg.must("POST", "/api/bindings/"+esc(vh)+"/e/ex/q/eq", map[string]any{"routing_key": "a.*", "arguments": map[string]any{"x": 1}}, 201)
		tg.must("POST", "/api/bindings/"+esc(vh)+"/e/ex/e/amq.direct", map[string]any{"routing_key": "e2e"}, 201)
		tg.must("PUT", "/api/policies/"+esc(vh)+"/ep", map[string]any{"pattern": "^e", "definition": map[string]any{"message-ttl": 1000}, "apply-to": "queues"}, 201, 204)
		u := "defs-" + vh
		s.t.Cleanup(func() { tg.do("DELETE", "/api/users/"+esc(u), nil) })
		tg.must("PUT", "/api/users/"+esc(u), map[string]any{"password_hash": hash, "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": "management"}, 201, 204)
		tg.permit(vh, u)
		// Values are compared on RabbitMQ's keys (projected): a vhost
		// export that also says "vhost":"" or a queue's "type" is fine.
		d, _ := s.get("/api/definitions/"+esc(vh), ignoring("rabbit_version", "rabbitmq_version")).(map[string]any)
		s.value("vhost export: queues", sortedBy(dig(d, "queues"), "name"), projected())
		s.value("vhost export: exchanges", sortedBy(dig(d, "exchanges"), "name"), projected())
		s.value("vhost export: bindings", sortedBy(dig(d, "bindings"), "source", "destination", "routing_key"), projected())
		s.value("vhost export: policies", sortedBy(dig(d, "policies"), "name"), projected())
		full, _ := tg.getJSON("/api/definitions").(map[string]any)
		// The full export holds whatever else the broker has, including
		// what tests running in parallel are creating: compare the shape
		// of our own objects (the arrays filtered to them), and our
		// vhost's part exactly.
		own := map[string]any{}
		for k, v := range full {
			own[k] = v
		}
		for k, by := range map[string][2]string{"users": {"name", u}, "vhosts": {"name", vh}, "permissions": {"vhost", vh},
			"topic_permissions": {"vhost", vh}, "parameters": {"vhost", vh}, "policies": {"vhost", vh}, "queues": {"vhost", vh},
			"exchanges": {"vhost", vh}, "bindings": {"vhost", vh}} {
			var mine []any
			for _, m := range findBy(full[k], by[0], by[1]) {
				mine = append(mine, m)
			}
			own[k] = mine
		}
		s.shape("full export top-level", own, only("rabbit_version", "rabbitmq_version", "product_name", "product_version", "users", "vhosts", "permissions", "topic_permissions", "parameters", "global_parameters", "policies", "queues", "exchanges", "bindings"), ignoring("global_parameters"))
		s.value("full export: our vhost", findBy(full["vhosts"], "name", vh), projected())
		s.value("full export: our user", findBy(full["users"], "name", u), projected())
		s.value("full export: our permissions", sortedBy(findBy(full["permissions"], "vhost", vh), "user"), projected())
		s.value("full export: our queues", sortedBy(findBy(full["queues"], "vhost", vh), "name"), projected())
		s.value("full export: our exchanges", sortedBy(findBy(full["exchanges"], "vhost", vh), "name"), projected())
		s.value("full export: our bindings", sortedBy(findBy(full["bindings"], "vhost", vh), "source", "destination", "routing_key"), projected())
		s.value("full export: our policies", findBy(full["policies"], "vhost", vh), projected())
	})
}
