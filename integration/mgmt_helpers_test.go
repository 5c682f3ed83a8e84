package integration

// Helpers for the management HTTP API tests (docs/management.md):
//
//   - mgmtTarget: one API server to drive, Warren's (warrentest's MgmtURL)
//     or a real RabbitMQ's (WARREN_RABBITMQ_MGMT_URL, default
//     http://127.0.0.1:15672, with its AMQP listener at
//     WARREN_RABBITMQ_AMQP_URL, default amqp://guest:guest@127.0.0.1:5672/).
//     eachMgmtTarget runs a scenario against both, in parallel subtests
//     named "warren" and "rabbitmq". The RabbitMQ half skips with a message
//     when the API is not reachable, except under CI=true where that is a
//     failure. The Warren half skips while warrentest has no MgmtURL.
//   - every scenario works in a fresh vhost of its own (tg.freshVhost), so
//     that lists are deterministic on a RabbitMQ shared with other tests,
//     and deletes it (and any user it created) at cleanup;
//   - raw HTTP (tg.do) for what rabbit-hole lacks or hides (rabbit-hole
//     turns a 404 on DELETE into success and drops error bodies on 401);
//   - shapeDiff: "missing in Warren: a.b.c" key-set comparison.
//
// What RabbitMQ 3.10.8 does, as learnt against the reference node:
//
//   - statistics (queue messages, policy/effective_policy_definition,
//     consumer counts) are refreshed every 5 s (collect_statistics_interval),
//     so checks on RabbitMQ poll with eventually (mgmtWait);
//   - wrong credentials: 401 {"error":"not_authorized","reason":"Login failed"}
//     (note the z: docs/management.md says not_authorised here, RabbitMQ
//     spells it not_authorized) with WWW-Authenticate: Basic realm="RabbitMQ Management";
//   - a user without tags: 401 {"error":"not_authorised","reason":"Not management user"};
//   - management user on a vhost it has no permissions on: 401
//     {"error":"not_authorised","reason":"User not authorised to access virtual host"};
//   - management user on an admin endpoint: 401 {"error":"not_authorised","reason":"Not administrator user"};
//   - unknown object/vhost: 404 {"error":"Object Not Found","reason":"Not Found"};
//   - bad JSON: 400 {"error":"bad_request","reason":"not_json"};
//   - messages with no properties come back from /get with "properties":[]
//     (an empty Erlang proplist), not {}.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	rabbithole "github.com/michaelklishin/rabbit-hole/v2"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

// mgmtWait bounds polling of the API: RabbitMQ refreshes its statistics
// every 5 s.
const mgmtWait = 12 * time.Second

// mgmtTarget is one management API under test.
type mgmtTarget struct {
	t       testing.TB
	kind    string // "warren" or "rabbitmq"
	url     string // http://host:port, no trailing slash
	amqpURL string // guest on vhost "/"
	user    string
	pass    string
	rh      *rabbithole.Client // as user/pass (an administrator)
	w       *warrentest.Broker // nil for RabbitMQ
}

func (tg *mgmtTarget) isRabbit() bool { return tg.kind == "rabbitmq" }

// rabbitMgmtURL returns the reference RabbitMQ's API URL, skipping the test
// when it is not reachable (failing under CI=true).
func rabbitMgmtURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("WARREN_RABBITMQ_MGMT_URL")
	if u == "" {
		u = "http://127.0.0.1:15672"
	}
	u = strings.TrimRight(u, "/")
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatalf("WARREN_RABBITMQ_MGMT_URL: %v", err)
	}
	nc, err := net.DialTimeout("tcp", pu.Host, 2*time.Second)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("RabbitMQ management API %s not reachable under CI=true: %v", pu.Host, err)
		}
		t.Skipf("RabbitMQ management API %s not reachable (%v): skipping the RabbitMQ reference run; set WARREN_RABBITMQ_MGMT_URL to enable it", pu.Host, err)
	}
	nc.Close()
	return u
}

func rabbitAMQPURL() string {
	if u := os.Getenv("WARREN_RABBITMQ_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

func newMgmtRabbit(t testing.TB) *mgmtTarget {
	t.Helper()
	u := rabbitMgmtURL(t)
	tg := &mgmtTarget{t: t, kind: "rabbitmq", url: u, amqpURL: rabbitAMQPURL(), user: "guest", pass: "guest"}
	tg.rh = tg.client(tg.user, tg.pass)
	return tg
}

// mgmtURLer is what warrentest.Broker offers once the mgmt package is
// wired in; asserted dynamically so that this file compiles before.
type mgmtURLer interface{ MgmtURL() string }

func newMgmtWarren(t testing.TB) *mgmtTarget {
	t.Helper()
	b := warrentest.Start(t)
	m, ok := any(b).(mgmtURLer)
	if !ok {
		t.Skip("warrentest.Broker has no MgmtURL yet: Warren's management API (package mgmt) is not wired in")
	}
	tg := &mgmtTarget{t: t, kind: "warren", url: strings.TrimRight(m.MgmtURL(), "/"), amqpURL: b.URL(), user: "guest", pass: "guest", w: b}
	tg.rh = tg.client(tg.user, tg.pass)
	return tg
}

// eachMgmtTarget runs fn against Warren and RabbitMQ in parallel subtests.
func eachMgmtTarget(t *testing.T, fn func(t *testing.T, tg *mgmtTarget)) {
	t.Helper()
	for _, kind := range []string{"warren", "rabbitmq"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			fn(t, newMgmtTargetKind(t, kind))
		})
	}
}

func newMgmtTargetKind(t testing.TB, kind string) *mgmtTarget {
	if kind == "warren" {
		return newMgmtWarren(t)
	}
	return newMgmtRabbit(t)
}

// client returns a rabbit-hole client for another user.
func (tg *mgmtTarget) client(user, pass string) *rabbithole.Client {
	c, err := rabbithole.NewClient(tg.url, user, pass)
	if err != nil {
		tg.t.Fatalf("rabbithole.NewClient: %v", err)
	}
	c.SetTimeout(10 * time.Second)
	return c
}

// name returns a name unique to this run.
func mgmtName(prefix string) string { return "wmgmt-" + prefix + "-" + randomSuffix() }

// --- raw HTTP ---

type mgmtResp struct {
	method, path string
	status       int
	body         []byte
	header       http.Header
}

func (r mgmtResp) String() string {
	return fmt.Sprintf("%s %s -> %d %s", r.method, r.path, r.status, strings.TrimSpace(string(r.body)))
}

// json decodes the body (nil when empty).
func (r mgmtResp) json(t testing.TB) any {
	t.Helper()
	if len(bytes.TrimSpace(r.body)) == 0 {
		return nil
	}
	var v any
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("%s %s: body is not JSON (%v): %q", r.method, r.path, err, r.body)
	}
	return v
}

// errorBody decodes {"error":..,"reason":..}, or returns the raw text.
func (r mgmtResp) errorBody() string {
	var e struct {
		Error  *string `json:"error"`
		Reason *string `json:"reason"`
	}
	if json.Unmarshal(r.body, &e) != nil || e.Error == nil {
		return "raw:" + strings.TrimSpace(string(r.body))
	}
	reason := "<none>"
	if e.Reason != nil {
		reason = *e.Reason
	}
	return *e.Error + ": " + reason
}

// do sends a request as the target's admin user. body is nil, a string or
// []byte (sent as is) or any other value (JSON-encoded). path is the part
// after the host, e.g. "/api/queues/%2F/q".
func (tg *mgmtTarget) do(method, path string, body any) mgmtResp {
	tg.t.Helper()
	return tg.doAs(tg.user, tg.pass, method, path, body)
}

func (tg *mgmtTarget) doAs(user, pass, method, path string, body any) mgmtResp {
	tg.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		js, err := json.Marshal(b)
		if err != nil {
			tg.t.Fatalf("marshal %T: %v", body, err)
		}
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequest(method, tg.url+path, rd)
	if err != nil {
		tg.t.Fatalf("%s %s: %v", method, path, err)
	}
	if user != "" || pass != "" {
		req.SetBasicAuth(user, pass)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := &http.Client{Timeout: 15 * time.Second}
	res, err := hc.Do(req)
	if err != nil {
		tg.t.Fatalf("[%s] %s %s: %v", tg.kind, method, path, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		tg.t.Fatalf("[%s] %s %s: reading body: %v", tg.kind, method, path, err)
	}
	return mgmtResp{method: method, path: path, status: res.StatusCode, body: data, header: res.Header}
}

// must sends a request and fails unless the status is one of want.
func (tg *mgmtTarget) must(method, path string, body any, want ...int) mgmtResp {
	tg.t.Helper()
	r := tg.do(method, path, body)
	for _, w := range want {
		if r.status == w {
			return r
		}
	}
	tg.t.Fatalf("[%s] %s: want status %v", tg.kind, r, want)
	return r
}

// getJSON GETs path and decodes it, failing on a non-200.
func (tg *mgmtTarget) getJSON(path string) any {
	tg.t.Helper()
	return tg.must("GET", path, nil, 200).json(tg.t)
}

func esc(s string) string { return url.PathEscape(s) }

// --- state set-up ---

// freshVhost creates a vhost unique to this run, gives the admin user full
// permissions on it, and deletes it at cleanup.
func (tg *mgmtTarget) freshVhost(t testing.TB) string {
	t.Helper()
	vh := mgmtName("vh")
	tg.ownVhost(t, vh)
	return vh
}

// ownVhost creates vh, gives the admin user full permissions on it, and
// deletes it at cleanup.
func (tg *mgmtTarget) ownVhost(t testing.TB, vh string) {
	t.Helper()
	tg.must("PUT", "/api/vhosts/"+esc(vh), nil, 201, 204)
	t.Cleanup(func() { tg.do("DELETE", "/api/vhosts/"+esc(vh), nil) })
	tg.permit(vh, tg.user)
}

// newUser creates a user (password = name) with tags and deletes it at cleanup.
func (tg *mgmtTarget) newUser(t testing.TB, prefix, tags string) string {
	t.Helper()
	u := mgmtName(prefix)
	tg.must("PUT", "/api/users/"+esc(u), map[string]string{"password": u, "tags": tags}, 201, 204)
	t.Cleanup(func() { tg.do("DELETE", "/api/users/"+esc(u), nil) })
	return u
}

func (tg *mgmtTarget) permit(vhost, user string) {
	tg.t.Helper()
	tg.must("PUT", "/api/permissions/"+esc(vhost)+"/"+esc(user), map[string]string{"configure": ".*", "write": ".*", "read": ".*"}, 201, 204)
}

// amqpURLFor is the AMQP URL of the target for a user and vhost.
func (tg *mgmtTarget) amqpURLFor(user, pass, vhost string) string {
	u, err := amqp.ParseURI(tg.amqpURL)
	if err != nil {
		tg.t.Fatalf("parse %s: %v", tg.amqpURL, err)
	}
	return fmt.Sprintf("amqp://%s:%s@%s/%s", url.PathEscape(user), url.PathEscape(pass), net.JoinHostPort(u.Host, fmt.Sprint(u.Port)), url.PathEscape(vhost))
}

// dial opens an AMQP connection as guest to vhost, named connName (the
// connection_name client property, shown by the API as
// client_properties.connection_name), closed at cleanup.
func (tg *mgmtTarget) dial(t testing.TB, vhost, connName string) *amqp.Connection {
	t.Helper()
	return tg.dialAs(t, tg.user, tg.pass, vhost, connName)
}

func (tg *mgmtTarget) dialAs(t testing.TB, user, pass, vhost, connName string) *amqp.Connection {
	t.Helper()
	cfg := amqp.Config{Properties: amqp.Table{}}
	if connName != "" {
		cfg.Properties["connection_name"] = connName
	}
	return testutil.Dial(t, tg.amqpURLFor(user, pass, vhost), cfg)
}

func (tg *mgmtTarget) channel(t testing.TB, vhost string) *amqp.Channel {
	t.Helper()
	ch, err := tg.dial(t, vhost, "").Channel()
	if err != nil {
		t.Fatalf("[%s] channel: %v", tg.kind, err)
	}
	return ch
}

// declareQueue declares a queue over the API.
func (tg *mgmtTarget) declareQueue(vhost, name string, body map[string]any) {
	tg.t.Helper()
	if body == nil {
		body = map[string]any{"durable": false}
	}
	tg.must("PUT", "/api/queues/"+esc(vhost)+"/"+esc(name), body, 201, 204)
}

// publishAPI publishes over the API and checks it was routed.
func (tg *mgmtTarget) publishAPI(vhost, exchange, key, payload string, props map[string]any) {
	tg.t.Helper()
	if props == nil {
		props = map[string]any{}
	}
	x := exchange
	if x == "" {
		x = "amq.default"
	}
	r := tg.must("POST", "/api/exchanges/"+esc(vhost)+"/"+esc(x)+"/publish",
		map[string]any{"properties": props, "routing_key": key, "payload": payload, "payload_encoding": "string"}, 200)
	if m, _ := r.json(tg.t).(map[string]any); m["routed"] != true {
		tg.t.Fatalf("[%s] %s: want routed true", tg.kind, r)
	}
}

// queueInfo returns GET /api/queues/{vhost}/{name} as JSON.
func (tg *mgmtTarget) queueInfo(vhost, name string) map[string]any {
	tg.t.Helper()
	m, _ := tg.getJSON("/api/queues/" + esc(vhost) + "/" + esc(name)).(map[string]any)
	return m
}

// waitQueueField polls GET queue until field equals want (as JSON).
func (tg *mgmtTarget) waitQueueField(vhost, name, field string, want any) map[string]any {
	tg.t.Helper()
	var last map[string]any
	ok := eventually(func() bool {
		last = tg.queueInfo(vhost, name)
		return jsonEqual(last[field], want)
	})
	if !ok {
		tg.t.Fatalf("[%s] queue %s/%s: %s = %s after %v, want %s", tg.kind, vhost, name, field, jsonString(last[field]), mgmtWait, jsonString(want))
	}
	return last
}

// eventually polls cond until it holds or mgmtWait passes.
func eventually(cond func() bool) bool { return testutil.Until(mgmtWait, cond) }

// jsonEqual compares two values after a JSON round trip, so that numbers
// and strings compare as the API shows them.
func jsonEqual(a, b any) bool { return reflect.DeepEqual(jsonNorm(a), jsonNorm(b)) }

// jsonEqualLoose is jsonEqual, except that an empty array equals an empty
// object (RabbitMQ encodes an empty proplist as []).
func jsonEqualLoose(a, b any) bool {
	a, b = jsonNorm(a), jsonNorm(b)
	if isEmptyContainer(a) && isEmptyContainer(b) {
		return true
	}
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !jsonEqualLoose(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqualLoose(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

func jsonNorm(v any) any {
	js, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("unmarshalable %T", v)
	}
	var out any
	_ = json.Unmarshal(js, &out)
	return out
}

func jsonString(v any) string {
	js, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(js)
}

// findBy returns the elements of a JSON array whose field equals value.
func findBy(list any, field string, value any) []map[string]any {
	arr, _ := list.([]any)
	var out []map[string]any
	for _, e := range arr {
		m, ok := e.(map[string]any)
		if ok && jsonEqual(m[field], value) {
			out = append(out, m)
		}
	}
	return out
}

// names returns the "name" fields of a JSON array, sorted.
func names(list any) []string {
	arr, _ := list.([]any)
	var out []string
	for _, e := range arr {
		if m, ok := e.(map[string]any); ok {
			if s, ok := m["name"].(string); ok {
				out = append(out, s)
			}
		}
	}
	sort.Strings(out)
	return out
}

// --- shape comparison ---

// shapeDiff compares the key sets of want (RabbitMQ's reply) and got
// (Warren's) recursively: every key of a want object must be in the got
// object; arrays are compared element-wise against the keys common to all
// of want's elements (so optional keys of some elements do not count).
// ignore(path) skips a path and everything under it. Paths are dotted,
// with [] for array elements: "items[].arguments.x-max-length".
//
// Kinds must agree where both are non-null, except that an empty array and
// an empty object are taken as the same (RabbitMQ encodes an empty
// proplist, e.g. message properties, as []).
func shapeDiff(path string, want, got any, ignore func(string) bool) []string {
	var out []string
	shapeDiffInto(&out, path, want, got, ignore)
	return out
}

func shapeDiffInto(out *[]string, path string, want, got any, ignore func(string) bool) {
	if ignore != nil && path != "" && ignore(path) {
		return
	}
	if want == nil || got == nil {
		return
	}
	if isEmptyContainer(want) && isEmptyContainer(got) {
		return
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			*out = append(*out, fmt.Sprintf("kind differs at %s: RabbitMQ object, Warren %s", orRoot(path), kindOf(got)))
			return
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := joinPath(path, k)
			if ignore != nil && ignore(p) {
				continue
			}
			gv, ok := g[k]
			if !ok {
				*out = append(*out, "missing in Warren: "+p)
				continue
			}
			shapeDiffInto(out, p, w[k], gv, ignore)
		}
	case []any:
		g, ok := got.([]any)
		if !ok {
			*out = append(*out, fmt.Sprintf("kind differs at %s: RabbitMQ array, Warren %s", orRoot(path), kindOf(got)))
			return
		}
		if len(w) == 0 || len(g) == 0 {
			return
		}
		common := commonShape(w)
		if common == nil {
			return // scalars of mixed kinds: values, not shapes
		}
		seen := map[string]bool{}
		for _, ge := range g {
			var sub []string
			shapeDiffInto(&sub, path+"[]", common, ge, ignore)
			for _, s := range sub {
				if !seen[s] {
					seen[s] = true
					*out = append(*out, s)
				}
			}
		}
	default:
		if kindOf(want) != kindOf(got) {
			*out = append(*out, fmt.Sprintf("kind differs at %s: RabbitMQ %s (%s), Warren %s (%s)", orRoot(path), kindOf(want), jsonString(want), kindOf(got), jsonString(got)))
		}
	}
}

// commonShape returns a value with the keys common to all elements (for
// objects, recursively; an empty array counts as an empty object); for
// scalars of one kind, the first; nil for a mix.
func commonShape(elems []any) any {
	var objs []map[string]any
	for _, e := range elems {
		if m, ok := e.(map[string]any); ok {
			objs = append(objs, m)
		} else if isEmptyContainer(e) {
			objs = append(objs, map[string]any{})
		}
	}
	if len(objs) == 0 || len(objs) != len(elems) {
		for _, e := range elems[1:] {
			if kindOf(e) != kindOf(elems[0]) {
				return nil
			}
		}
		return elems[0]
	}
	out := map[string]any{}
	for k, v := range objs[0] {
		all := true
		vals := []any{v}
		for _, o := range objs[1:] {
			ov, ok := o[k]
			if !ok {
				all = false
				break
			}
			vals = append(vals, ov)
		}
		if !all {
			continue
		}
		// Pick a non-null representative; merge nested objects.
		var rep any
		var sub []any
		allObj := true
		for _, x := range vals {
			if x == nil {
				continue
			}
			if isEmptyContainer(x) {
				x = map[string]any{}
			}
			if rep == nil {
				rep = x
			}
			if _, ok := x.(map[string]any); !ok {
				allObj = false
			}
			sub = append(sub, x)
		}
		if allObj && len(sub) > 1 {
			rep = commonShape(sub)
		} else if len(sub) > 1 {
			// Arrays (e.g. each message's x-death): one element shape
			// common to the elements of all of them.
			var elems []any
			allArr := true
			for _, x := range sub {
				a, ok := x.([]any)
				if !ok {
					allArr = false
					break
				}
				elems = append(elems, a...)
			}
			if allArr && len(elems) > 0 {
				if c := commonShape(elems); c != nil {
					rep = []any{c}
				}
			}
		}
		out[k] = rep
	}
	return out
}

func isEmptyContainer(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case float64, json.Number:
		return "number"
	case bool:
		return "bool"
	}
	return fmt.Sprintf("%T", v)
}

func joinPath(p, k string) string {
	if p == "" {
		return k
	}
	return p + "." + k
}

func orRoot(p string) string {
	if p == "" {
		return "(top level)"
	}
	return p
}

// ignorePaths builds an ignore function from path patterns: an exact path
// (which covers everything below it), "*.name" for a last segment
// anywhere, or "a.b.*" for the children of a.b (but not a.b itself).
func ignorePaths(patterns ...string) func(string) bool {
	return func(p string) bool {
		for _, pat := range patterns {
			if strings.HasSuffix(pat, ".*") {
				if strings.HasPrefix(p, strings.TrimSuffix(pat, "*")) || strings.HasPrefix(p, "[]."+strings.TrimSuffix(pat, "*")) {
					return true
				}
				continue
			}
			if strings.HasPrefix(pat, "*.") {
				seg := p
				if i := strings.LastIndexAny(p, ".]"); i >= 0 {
					seg = p[i+1:]
				}
				if seg == pat[2:] {
					return true
				}
				continue
			}
			if p == pat {
				return true
			}
		}
		return false
	}
}

// dig returns v.k1.k2... for nested JSON objects, nil when absent.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// findConn polls GET /api/connections (as user/pass) until a connection
// with client_properties.connection_name == cn shows, and returns it (nil
// when it does not show within mgmtWait).
func (tg *mgmtTarget) findConn(user, pass, cn string) map[string]any {
	tg.t.Helper()
	var found map[string]any
	eventually(func() bool {
		r := tg.doAs(user, pass, "GET", "/api/connections", nil)
		if r.status != 200 {
			tg.t.Fatalf("[%s] %s", tg.kind, r)
		}
		arr, _ := r.json(tg.t).([]any)
		for _, e := range arr {
			if dig(e, "client_properties", "connection_name") == cn {
				found, _ = e.(map[string]any)
				return true
			}
		}
		return false
	})
	return found
}

// sampleEvery returns a function that takes a history sample round on w's
// management server (SampleNow) if the last one it took is at least every
// old. For polling loops: each round is a tick of the history's ring,
// which holds retention/interval ticks (121 by default), so rounds every
// few milliseconds would push the traffic a test looks for out of the
// ring within seconds, leaving every grid point at the same value.
func sampleEvery(w *warrentest.Broker, every time.Duration) func() {
	var last time.Time
	return func() {
		if time.Since(last) >= every {
			w.Mgmt().SampleNow()
			last = time.Now()
		}
	}
}
