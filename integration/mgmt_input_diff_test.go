package integration

// Request bodies and names that RabbitMQ's management API takes or
// refuses in its own way, sent to Warren and to RabbitMQ with the same
// names, statuses and bodies compared (issue 11 items 11 and 16).

import (
	"fmt"
	"strings"
	"testing"
)

// inputCase is one request of a differential input test; {vh} in path
// and body is the scenario's vhost (path-escaped in the path).
type inputCase struct {
	name         string
	method, path string
	body         string
	// after, when set, is a GET whose status (and for a 200, the listed
	// fields) must match too: what the request left behind.
	after  string
	fields []string
}

// runInputDiff runs cases against Warren and RabbitMQ, each in a vhost of
// its own with the same name, and compares every reply. cleanup paths
// ({vh} replaced) are deleted at the end on both.
func runInputDiff(t *testing.T, prefix string, cases []inputCase, cleanup []string) {
	vh := mgmtName(prefix)
	type result struct{ status, body, after string }
	var results [2][]result
	t.Run("run", func(t *testing.T) {
		for i, kind := range []string{"warren", "rabbitmq"} {
			t.Run(kind, func(t *testing.T) {
				t.Parallel()
				tg := newMgmtTargetKind(t, kind)
				tg.ownVhost(t, vh)
				t.Cleanup(func() {
					for _, p := range cleanup {
						tg.do("DELETE", strings.ReplaceAll(p, "{vh}", esc(vh)), nil)
					}
				})
				for _, c := range cases {
					r := tg.do(c.method, strings.ReplaceAll(c.path, "{vh}", esc(vh)), strings.ReplaceAll(c.body, "{vh}", vh))
					res := result{status: fmt.Sprint(r.status), body: strings.TrimSpace(string(r.body))}
					if c.after != "" {
						a := tg.do("GET", strings.ReplaceAll(c.after, "{vh}", esc(vh)), nil)
						res.after = fmt.Sprint(a.status)
						if a.status == 200 {
							m, _ := a.json(t).(map[string]any)
							for _, f := range c.fields {
								res.after += fmt.Sprintf(" %s=%v", f, m[f])
							}
						}
					}
					results[i] = append(results[i], res)
				}
			})
		}
	})
	w, r := results[0], results[1]
	if len(w) != len(cases) || len(r) != len(cases) {
		t.Logf("comparison skipped: warren ran %d cases, rabbitmq %d", len(w), len(r))
		return
	}
	for i, c := range cases {
		if w[i] != r[i] {
			t.Errorf("%s: %s %s\n  RabbitMQ: %s %s (after: %s)\n  Warren:   %s %s (after: %s)", c.name, c.method, c.path,
				r[i].status, r[i].body, r[i].after, w[i].status, w[i].body, w[i].after)
		}
	}
}

// issue 11 item 11: names over 255 bytes. RabbitMQ 3.10.8 refuses a
// queue name over 255 bytes (counted in bytes, before it looks at the
// vhost or the body: 400 "queue should be less than 255 bytes, actually
// was N\n"), which AMQP could never name; it takes exchange, vhost, user
// and policy names of any length, and so does Warren.
func TestMgmtLongNamesDiff(t *testing.T) {
	t.Parallel()
	sfx := randomSuffix()
	pad := func(prefix string, n int) string { return prefix + strings.Repeat("n", n-len(prefix)) }
	q255, q256 := pad("hC-q255-"+sfx, 255), pad("hC-q256-"+sfx, 256)
	q2b := "hC-q2b-" + sfx + strings.Repeat("é", 125) // 127 characters, 265 bytes
	x300, u256, v256, p256 := pad("hC-x-"+sfx, 300), pad("hC-u-"+sfx, 256), pad("hC-v-"+sfx, 256), pad("hC-p-"+sfx, 256)
	cases := []inputCase{
		{name: "queue name of 255 bytes", method: "PUT", path: "/api/queues/{vh}/" + esc(q255), body: `{"durable":true}`, after: "/api/queues/{vh}/" + esc(q255), fields: []string{"durable"}},
		{name: "queue name of 256 bytes", method: "PUT", path: "/api/queues/{vh}/" + esc(q256), body: `{"durable":true}`, after: "/api/queues/{vh}/" + esc(q256)},
		{name: "queue name of 127 characters, 265 bytes", method: "PUT", path: "/api/queues/{vh}/" + esc(q2b), body: `{}`, after: "/api/queues/{vh}/" + esc(q2b)},
		{name: "long queue name with a bad body", method: "PUT", path: "/api/queues/{vh}/" + esc(q256), body: `{"durable":`},
		{name: "long queue name in an unknown vhost", method: "PUT", path: "/api/queues/" + esc("hC-novh-"+sfx) + "/" + esc(q256), body: `{}`},
		{name: "delete a long queue name", method: "DELETE", path: "/api/queues/{vh}/" + esc(q256)},
		{name: "exchange name of 300 bytes", method: "PUT", path: "/api/exchanges/{vh}/" + esc(x300), body: `{"type":"direct"}`, after: "/api/exchanges/{vh}/" + esc(x300), fields: []string{"type"}},
		{name: "user name of 256 bytes", method: "PUT", path: "/api/users/" + esc(u256), body: `{"password":"x","tags":""}`, after: "/api/users/" + esc(u256), fields: []string{"name"}},
		{name: "vhost name of 256 bytes", method: "PUT", path: "/api/vhosts/" + esc(v256), body: `{}`, after: "/api/vhosts/" + esc(v256), fields: []string{"name"}},
		{name: "policy name of 256 bytes", method: "PUT", path: "/api/policies/{vh}/" + esc(p256), body: `{"pattern":"^nothing$","definition":{"max-length":1}}`, after: "/api/policies/{vh}/" + esc(p256), fields: []string{"name"}},
	}
	runInputDiff(t, "names", cases, []string{"/api/users/" + esc(u256), "/api/vhosts/" + esc(v256)})
}

// issue 11 item 16: rabbitmqadmin sends booleans as strings
// ({"durable":"true","auto_delete":"false"}), which RabbitMQ's
// parse_bool takes; Warren refused them with "expected bool, got string",
// so rabbitmqadmin could not declare anything. RabbitMQ takes true,
// false, "true" and "false"; any other value (other strings, numbers,
// null) is 400 {"reason":["not_boolean",Value]}.
func TestMgmtBooleanStringsDiff(t *testing.T) {
	t.Parallel()
	q := func(name, body string) inputCase {
		return inputCase{name: "queue " + body, method: "PUT", path: "/api/queues/{vh}/" + name, body: body,
			after: "/api/queues/{vh}/" + name, fields: []string{"durable", "auto_delete"}}
	}
	x := func(name, body string) inputCase {
		return inputCase{name: "exchange " + body, method: "PUT", path: "/api/exchanges/{vh}/" + name, body: body,
			after: "/api/exchanges/{vh}/" + name, fields: []string{"durable", "auto_delete", "internal"}}
	}
	cases := []inputCase{
		q("q1", `{"durable":"true","auto_delete":"false"}`),
		q("q2", `{"durable":"false","auto_delete":"true"}`),
		q("q3", `{"durable":true,"auto_delete":false,"arguments":{}}`),
		q("q4", `{"durable":"yes"}`),
		q("q5", `{"durable":"True"}`),
		q("q6", `{"auto_delete":1}`),
		q("q7", `{"durable":null}`),
		q("q8", `{"durable":""}`),
		x("x1", `{"type":"direct","durable":"true","auto_delete":"false","internal":"false","arguments":{}}`),
		x("x2", `{"type":"topic","durable":"false","internal":"true"}`),
		x("x3", `{"type":"direct","internal":"maybe"}`),
		x("x4", `{"type":"direct","durable":0}`),
		x("x5", `{"type":"direct","auto_delete":["true"]}`),
		{name: "vhost tracing \"yes\"", method: "PUT", path: "/api/vhosts/hC-tr-{vh}", body: `{"tracing":"yes"}`, after: "/api/vhosts/hC-tr-{vh}"},
		{name: "vhost tracing 1", method: "PUT", path: "/api/vhosts/hC-tr-{vh}", body: `{"tracing":1}`, after: "/api/vhosts/hC-tr-{vh}"},
		{name: "vhost tracing \"false\"", method: "PUT", path: "/api/vhosts/hC-tr-{vh}", body: `{"tracing":"false"}`, after: "/api/vhosts/hC-tr-{vh}", fields: []string{"name", "tracing"}},
		// (Not compared: "requeue" instead of "ackmode", which RabbitMQ
		// 3.7+ refuses with [{key_missing,ackmode}] and Warren still
		// takes as RabbitMQ before 3.7 did.)
		{name: "get with count \"1\"", method: "POST", path: "/api/queues/{vh}/q1/get", body: `{"count":"1","ackmode":"ack_requeue_true","encoding":"auto"}`},
	}
	runInputDiff(t, "bools", cases, []string{"/api/vhosts/hC-tr-{vh}"})
}
