package integration

// Bad input to the management API: the same refused requests sent to
// Warren and to RabbitMQ (same names on both), status codes and error
// bodies ({"error":..,"reason":..}) compared, and Warren's state (queues,
// exchanges, bindings, policies, users, vhosts, permissions, message
// counts) snapshotted around every request: a refused request must change
// nothing.
//
// What RabbitMQ 3.10.8 answers (learnt against the reference node) is in
// the comments of each case; where RabbitMQ crashes (500) the case says
// what Warren must do instead.

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

type badCase struct {
	name   string
	method string
	path   string // {vh}, {novh}, {mgr}, {notag} are replaced
	body   any    // string: sent as is; other: JSON
	auth   string // "" admin; "wrongpw", "nouser", "noauth", "notag", "mgr"
	// rabbit500: RabbitMQ 3.10.8 crashes on this (500, empty body);
	// Warren must refuse it with warrenStatus instead.
	rabbit500    bool
	warrenStatus int
	statusOnly   bool // compare the status, not the body
}

func badCases() []badCase {
	q := func(vhPath string) string { return "/api/queues/{vh}/" + vhPath }
	return []badCase{
		// Malformed JSON: 400 {"error":"bad_request","reason":"not_json"}.
		{name: "malformed JSON declaring a queue", method: "PUT", path: q("q-bad"), body: `{"durable":false,`},
		{name: "malformed JSON declaring an exchange", method: "PUT", path: "/api/exchanges/{vh}/x-bad", body: `{"type":`},
		// RabbitMQ 3.10.8 crashes (500, empty body) on a malformed binding body.
		{name: "malformed JSON in a binding", method: "POST", path: "/api/bindings/{vh}/e/x1/q/q1", body: `{"routing_key":`, rabbit500: true, warrenStatus: 400},
		{name: "malformed JSON in a policy", method: "PUT", path: "/api/policies/{vh}/p-bad", body: `{"pattern":`},
		{name: "malformed JSON in a user", method: "PUT", path: "/api/users/u-bad-{vh}", body: `{"password":`},
		{name: "malformed JSON in permissions", method: "PUT", path: "/api/permissions/{vh}/{mgr}", body: `{"configure":`},
		{name: "malformed JSON in /get", method: "POST", path: q("q1/get"), body: `{"count":1,`},
		{name: "malformed JSON in publish", method: "POST", path: "/api/exchanges/{vh}/x1/publish", body: `{"payload":`},
		{name: "malformed JSON in definitions", method: "POST", path: "/api/definitions", body: `{"queues":[`},
		{name: "JSON array as a queue body", method: "PUT", path: q("q-bad"), body: `[1,2]`},

		// Unknown vhost.
		{name: "list queues of an unknown vhost", method: "GET", path: "/api/queues/{novh}"},
		{name: "declare a queue in an unknown vhost", method: "PUT", path: "/api/queues/{novh}/q", body: map[string]any{"durable": false}},
		{name: "declare an exchange in an unknown vhost", method: "PUT", path: "/api/exchanges/{novh}/x", body: map[string]any{"type": "direct"}},
		{name: "policies of an unknown vhost", method: "GET", path: "/api/policies/{novh}"},
		{name: "put a policy in an unknown vhost", method: "PUT", path: "/api/policies/{novh}/p", body: map[string]any{"pattern": ".*", "definition": map[string]any{"max-length": 1}}},
		{name: "permissions on an unknown vhost", method: "PUT", path: "/api/permissions/{novh}/{mgr}", body: map[string]any{"configure": ".*", "write": ".*", "read": ".*"}},
		{name: "delete an unknown vhost", method: "DELETE", path: "/api/vhosts/{novh}"},
		{name: "aliveness test of an unknown vhost", method: "GET", path: "/api/aliveness-test/{novh}"},

		// Credentials and tags.
		{name: "wrong password", method: "GET", path: "/api/overview", auth: "wrongpw"},
		{name: "unknown user", method: "GET", path: "/api/overview", auth: "nouser"},
		// RabbitMQ sends 401 with an empty body here: status only.
		{name: "no credentials", method: "GET", path: "/api/overview", auth: "noauth", statusOnly: true},
		{name: "wrong password on a write", method: "DELETE", path: q("q1"), auth: "wrongpw"},
		{name: "user without tags", method: "GET", path: "/api/overview", auth: "notag"},
		{name: "user without tags declaring", method: "PUT", path: q("q-notag"), body: map[string]any{"durable": false}, auth: "notag"},

		// Missing permissions (management user with none on {vh}).
		{name: "management user lists queues without permissions", method: "GET", path: "/api/queues/{vh}", auth: "mgr"},
		{name: "management user declares a queue without permissions", method: "PUT", path: q("q-mgr"), body: map[string]any{"durable": false}, auth: "mgr"},
		{name: "management user deletes a queue without permissions", method: "DELETE", path: q("q1"), auth: "mgr"},
		{name: "management user purges without permissions", method: "DELETE", path: q("q1/contents"), auth: "mgr"},
		{name: "management user gets messages without permissions", method: "POST", path: q("q1/get"), body: map[string]any{"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}, auth: "mgr"},
		{name: "management user publishes without permissions", method: "POST", path: "/api/exchanges/{vh}/x1/publish", body: map[string]any{"properties": map[string]any{}, "routing_key": "k", "payload": "x", "payload_encoding": "string"}, auth: "mgr"},
		{name: "management user creates a user", method: "PUT", path: "/api/users/u-bad-{vh}", body: map[string]any{"password": "x", "tags": ""}, auth: "mgr"},
		{name: "management user creates a vhost", method: "PUT", path: "/api/vhosts/{novh}", auth: "mgr"},
		{name: "management user sets a policy", method: "PUT", path: "/api/policies/{vh}/p-mgr", body: map[string]any{"pattern": ".*", "definition": map[string]any{"max-length": 1}}, auth: "mgr"},
		{name: "management user exports definitions", method: "GET", path: "/api/definitions", auth: "mgr"},
		{name: "management user lists users", method: "GET", path: "/api/users", auth: "mgr"},

		// Unknown objects.
		{name: "unknown queue", method: "GET", path: q("nope")},
		{name: "unknown exchange", method: "GET", path: "/api/exchanges/{vh}/nope"},
		{name: "delete unknown queue", method: "DELETE", path: q("nope")},
		{name: "delete unknown exchange", method: "DELETE", path: "/api/exchanges/{vh}/nope"},
		{name: "purge unknown queue", method: "DELETE", path: q("nope/contents")},
		{name: "get from unknown queue", method: "POST", path: q("nope/get"), body: map[string]any{"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}},
		// (GET /api/queues/{vh}/nope/bindings is not here: RabbitMQ 3.10.8
		// answers 200 with a made-up default binding.)
		{name: "publish to unknown exchange", method: "POST", path: "/api/exchanges/{vh}/nope/publish", body: map[string]any{"properties": map[string]any{}, "routing_key": "k", "payload": "x", "payload_encoding": "string"}},
		{name: "bind from unknown exchange", method: "POST", path: "/api/bindings/{vh}/e/nope/q/q1", body: map[string]any{"routing_key": "k"}},
		{name: "bind to unknown queue", method: "POST", path: "/api/bindings/{vh}/e/x1/q/nope", body: map[string]any{"routing_key": "k"}},
		{name: "bind to unknown exchange", method: "POST", path: "/api/bindings/{vh}/e/x1/e/nope", body: map[string]any{"routing_key": "k"}},
		{name: "delete unknown binding", method: "DELETE", path: "/api/bindings/{vh}/e/x1/q/q1/nope"},
		{name: "unknown user", method: "GET", path: "/api/users/nope-{vh}"},
		{name: "delete unknown user", method: "DELETE", path: "/api/users/nope-{vh}"},
		{name: "unknown policy", method: "GET", path: "/api/policies/{vh}/nope"},
		{name: "delete unknown policy", method: "DELETE", path: "/api/policies/{vh}/nope"},
		{name: "permissions of unknown user", method: "PUT", path: "/api/permissions/{vh}/nope-{vh}", body: map[string]any{"configure": ".*", "write": ".*", "read": ".*"}},
		{name: "unknown connection", method: "GET", path: "/api/connections/nope"},
		{name: "close unknown connection", method: "DELETE", path: "/api/connections/nope"},
		{name: "unknown API path", method: "GET", path: "/api/nope"},

		// Invalid queue arguments.
		{name: "x-max-length not a number", method: "PUT", path: q("q-bad"), body: map[string]any{"durable": false, "arguments": map[string]any{"x-max-length": "abc"}}},
		{name: "x-max-length negative", method: "PUT", path: q("q-bad"), body: map[string]any{"durable": false, "arguments": map[string]any{"x-max-length": -1}}},
		{name: "x-message-ttl a string", method: "PUT", path: q("q-bad"), body: map[string]any{"durable": false, "arguments": map[string]any{"x-message-ttl": "1000"}}},
		{name: "x-overflow unknown", method: "PUT", path: q("q-bad"), body: map[string]any{"durable": false, "arguments": map[string]any{"x-overflow": "nonsense"}}},
		{name: "x-queue-type unknown", method: "PUT", path: q("q-bad"), body: map[string]any{"durable": true, "arguments": map[string]any{"x-queue-type": "nonsense"}}},
		{name: "x-dead-letter-routing-key without exchange", method: "PUT", path: q("q-bad"), body: map[string]any{"durable": false, "arguments": map[string]any{"x-dead-letter-routing-key": "k"}}},
		{name: "quorum queue not durable", method: "PUT", path: q("q-bad"), body: map[string]any{"durable": false, "arguments": map[string]any{"x-queue-type": "quorum"}}},
		{name: "queue name amq.*", method: "PUT", path: q("amq.q"), body: map[string]any{"durable": false}},

		// Redeclaring with different settings.
		{name: "redeclare with other durable", method: "PUT", path: q("q1"), body: map[string]any{"durable": true, "arguments": map[string]any{"x-max-length": 10}}},
		{name: "redeclare with other x-max-length", method: "PUT", path: q("q1"), body: map[string]any{"durable": false, "arguments": map[string]any{"x-max-length": 11}}},
		{name: "redeclare without x-max-length", method: "PUT", path: q("q1"), body: map[string]any{"durable": false}},
		{name: "redeclare exchange with other type", method: "PUT", path: "/api/exchanges/{vh}/x1", body: map[string]any{"type": "fanout"}},
		{name: "redeclare exchange with other durable", method: "PUT", path: "/api/exchanges/{vh}/x1", body: map[string]any{"type": "direct", "durable": true}},

		// Exchanges.
		// The type name is new to the run: RabbitMQ answers "unknown
		// exchange type" for a name that is not yet an Erlang atom in its
		// node and "invalid exchange type" for one that is, so a fixed
		// name's answer depends on what the node has seen before.
		{name: "unknown exchange type", method: "PUT", path: "/api/exchanges/{vh}/x-bad", body: map[string]any{"type": "nonsense-{vh}"}},
		{name: "delete amq.direct", method: "DELETE", path: "/api/exchanges/{vh}/amq.direct"},
		{name: "delete amq.topic", method: "DELETE", path: "/api/exchanges/{vh}/amq.topic"},
		{name: "delete the default exchange", method: "DELETE", path: "/api/exchanges/{vh}/amq.default"},
		{name: "declare amq.custom", method: "PUT", path: "/api/exchanges/{vh}/amq.custom", body: map[string]any{"type": "direct"}},
		{name: "bind to the default exchange", method: "POST", path: "/api/bindings/{vh}/e/amq.default/q/q1", body: map[string]any{"routing_key": "k"}},

		// Queues: delete conditions, get, actions.
		{name: "delete non-empty queue if-empty", method: "DELETE", path: q("q1?if-empty=true")},
		{name: "delete queue with a consumer if-unused", method: "DELETE", path: q("qc?if-unused=true")},
		{name: "get with an unknown encoding", method: "POST", path: q("q1/get"), body: map[string]any{"count": 1, "ackmode": "ack_requeue_false", "encoding": "nonsense"}},
		// RabbitMQ 3.10.8: 500 and an empty body (its handler crashes on
		// the unknown ackmode); Warren must answer 400.
		{name: "get with an unknown ackmode", method: "POST", path: q("q1/get"), body: map[string]any{"count": 1, "ackmode": "nonsense", "encoding": "auto"}, rabbit500: true, warrenStatus: 400},
		{name: "publish with an unknown payload_encoding", method: "POST", path: "/api/exchanges/{vh}/x1/publish", body: map[string]any{"properties": map[string]any{}, "routing_key": "k", "payload": "x", "payload_encoding": "nonsense"}},
		{name: "publish invalid base64", method: "POST", path: "/api/exchanges/{vh}/x1/publish", body: map[string]any{"properties": map[string]any{}, "routing_key": "k", "payload": "!!!", "payload_encoding": "base64"}},
		{name: "unknown queue action", method: "POST", path: q("q1/actions"), body: map[string]any{"action": "nonsense"}},
		{name: "page 0", method: "GET", path: "/api/queues/{vh}?page=0&page_size=10"},
		{name: "page not a number", method: "GET", path: "/api/queues/{vh}?page=abc"},
		{name: "page_size over 500", method: "GET", path: "/api/queues/{vh}?page=1&page_size=501"},
		{name: "page out of range", method: "GET", path: "/api/queues/{vh}?page=5&page_size=10"},

		// Policies, permissions, users.
		{name: "policy with an invalid pattern", method: "PUT", path: "/api/policies/{vh}/p-bad", body: map[string]any{"pattern": "(", "definition": map[string]any{"max-length": 1}}},
		{name: "policy with an invalid value", method: "PUT", path: "/api/policies/{vh}/p-bad", body: map[string]any{"pattern": ".*", "definition": map[string]any{"max-length": "abc"}}},
		{name: "policy with an unknown key", method: "PUT", path: "/api/policies/{vh}/p-bad", body: map[string]any{"pattern": ".*", "definition": map[string]any{"nonsense-key": 1}}},
		{name: "policy without a definition", method: "PUT", path: "/api/policies/{vh}/p-bad", body: map[string]any{"pattern": ".*"}},
		// Warren lists the apply-to values of RabbitMQ 4.x (classic_queues,
		// quorum_queues, streams too), so only the status is compared.
		{name: "policy with an unknown apply-to", method: "PUT", path: "/api/policies/{vh}/p-bad", body: map[string]any{"pattern": ".*", "definition": map[string]any{"max-length": 1}, "apply-to": "nonsense"}, statusOnly: true},
		{name: "user with an unknown hashing algorithm", method: "PUT", path: "/api/users/u-bad-{vh}", body: map[string]any{"password_hash": "abc", "hashing_algorithm": "nonsense", "tags": ""}},
		{name: "user with a password_hash that is not base64", method: "PUT", path: "/api/users/u-bad-{vh}", body: map[string]any{"password_hash": "!!!", "tags": ""}},
		{name: "definitions referring to an unknown vhost", method: "POST", path: "/api/definitions", body: map[string]any{"queues": []any{map[string]any{"name": "qx", "vhost": "{novh}", "durable": true, "auto_delete": false, "arguments": map[string]any{}}}}},
	}
}

func TestMgmtBadInput(t *testing.T) {
	t.Parallel()
	vh, novh := mgmtName("bad"), mgmtName("novh")
	mgr, notag := mgmtName("mgr"), mgmtName("notag")
	cases := badCases()
	var results [2][]mgmtResp
	t.Run("run", func(t *testing.T) {
		for i, kind := range []string{"warren", "rabbitmq"} {
			t.Run(kind, func(t *testing.T) {
				t.Parallel()
				tg := newMgmtTargetKind(t, kind)
				tg.ownVhost(t, vh)
				for _, u := range []struct{ name, tags string }{{mgr, "management"}, {notag, ""}} {
					tg.must("PUT", "/api/users/"+esc(u.name), map[string]any{"password": u.name, "tags": u.tags}, 201, 204)
					t.Cleanup(func() { tg.do("DELETE", "/api/users/"+esc(u.name), nil) })
				}
				t.Cleanup(func() {
					tg.do("DELETE", "/api/vhosts/"+esc(novh), nil)
					tg.do("DELETE", "/api/users/"+esc("u-bad-"+vh), nil)
				})
				tg.declareQueue(vh, "q1", map[string]any{"durable": false, "arguments": map[string]any{"x-max-length": 10}})
				tg.declareQueue(vh, "qc", nil)
				tg.must("PUT", "/api/exchanges/"+esc(vh)+"/x1", map[string]any{"type": "direct"}, 201, 204)
				tg.must("POST", "/api/bindings/"+esc(vh)+"/e/x1/q/q1", map[string]any{"routing_key": "k"}, 201)
				tg.must("PUT", "/api/policies/"+esc(vh)+"/p1", map[string]any{"pattern": "^nothing$", "definition": map[string]any{"max-length": 3}}, 201, 204)
				tg.publishAPI(vh, "x1", "k", "m1", nil)
				tg.publishAPI(vh, "x1", "k", "m2", nil)
				ch := tg.channel(t, vh)
				if _, err := ch.Consume("qc", "", true, false, false, false, nil); err != nil {
					t.Fatal(err)
				}
				before := ""
				if tg.w != nil {
					before = warrenSnapshot(t, tg, vh)
				}
				repl := strings.NewReplacer("{vh}", esc(vh), "{novh}", esc(novh), "{mgr}", esc(mgr), "{notag}", esc(notag))
				for _, c := range cases {
					user, pass := tg.user, tg.pass
					switch c.auth {
					case "wrongpw":
						pass = "wrong"
					case "nouser":
						user = "nobody-" + vh
					case "noauth":
						user, pass = "", ""
					case "notag":
						user, pass = notag, notag
					case "mgr":
						user, pass = mgr, mgr
					}
					body := c.body
					if m, ok := body.(map[string]any); ok {
						js := jsonString(m)
						body = strings.NewReplacer("{novh}", novh, "{vh}", vh).Replace(js)
					}
					r := tg.doAs(user, pass, c.method, repl.Replace(c.path), body)
					results[i] = append(results[i], r)
					if r.status < 400 {
						t.Errorf("[%s] %s: %s accepted, want it refused", tg.kind, c.name, r)
					}
					if tg.w != nil {
						if after := warrenSnapshot(t, tg, vh); after != before {
							t.Errorf("[warren] %s: %s changed the state:\n  before %s\n  after  %s", c.name, r, before, after)
							before = after
						}
					}
				}
			})
		}
	})
	w, r := results[0], results[1]
	if len(w) == 0 || len(r) == 0 {
		t.Logf("comparison skipped: warren ran %d cases, rabbitmq %d", len(w), len(r))
		return
	}
	for i, c := range cases {
		want, got := r[i], w[i]
		if c.rabbit500 {
			if want.status != 500 {
				t.Errorf("%s: RabbitMQ answered %s; this case expects its 500 (update the case)", c.name, want)
			}
			if got.status != c.warrenStatus {
				reportBad(t, c, want, got, fmt.Sprintf("status: Warren %d, want %d (RabbitMQ crashes with 500)", got.status, c.warrenStatus))
			}
			continue
		}
		if want.status != got.status {
			reportBad(t, c, want, got, fmt.Sprintf("status: RabbitMQ %d, Warren %d", want.status, got.status))
		}
		if we, ge := want.errorBody(), got.errorBody(); we != ge && !c.statusOnly {
			reportBad(t, c, want, got, fmt.Sprintf("error body: RabbitMQ %q, Warren %q", we, ge))
		}
	}
}

func reportBad(t *testing.T, c badCase, want, got mgmtResp, msg string) {
	t.Helper()
	reportMismatch(t, &diffObs{key: c.name + ": " + c.method + " " + want.path, status: want.status, raw: strings.TrimSpace(string(want.body))},
		&diffObs{status: got.status, raw: strings.TrimSpace(string(got.body))}, msg)
}

// warrenSnapshot renders what a refused request must not change.
func warrenSnapshot(t *testing.T, tg *mgmtTarget, vh string) string {
	t.Helper()
	var b strings.Builder
	pick := func(path string, fields ...string) {
		list, _ := tg.getJSON(path).([]any)
		var rows []string
		for _, e := range list {
			var parts []string
			for _, f := range fields {
				parts = append(parts, f+"="+jsonString(dig(e, f)))
			}
			rows = append(rows, strings.Join(parts, " "))
		}
		fmt.Fprintf(&b, "%s: %s\n", path, strings.Join(slices.Sorted(slices.Values(rows)), "; "))
	}
	pick("/api/vhosts", "name")
	pick("/api/users", "name", "tags", "password_hash")
	pick("/api/permissions", "user", "vhost", "configure", "write", "read")
	pick("/api/queues/"+esc(vh), "name", "durable", "auto_delete", "arguments", "messages", "consumers", "policy")
	pick("/api/exchanges/"+esc(vh), "name", "type", "durable", "auto_delete", "internal", "arguments")
	pick("/api/bindings/"+esc(vh), "source", "destination_type", "destination", "routing_key", "arguments")
	pick("/api/policies/"+esc(vh), "name", "pattern", "definition", "apply-to", "priority")
	fmt.Fprintf(&b, "q1 ready (AMQP): %d\n", tg.amqpCount(t, vh, "q1"))
	return b.String()
}
