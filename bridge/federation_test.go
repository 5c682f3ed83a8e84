package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

// TestWarrenAsFederationUpstream: issue 24 (must-show 1). RabbitMQ 3.10.8's
// federation plugin federates an exchange from Warren: its link runs, it
// declares on Warren the x-federation-upstream exchange and the queue it
// consumes, binds Warren's exchange to it with its own bindings' keys,
// and a message published on Warren reaches RabbitMQ's queue with
// x-received-from naming Warren. A message that already went through
// RabbitMQ's exchange, or through max-hops brokers, does not come back
// (RabbitMQ checks that on receipt too; TestFederationUpstreamExchange
// shows Warren's exchange stopping them before they leave).
func TestWarrenAsFederationUpstream(t *testing.T) {
	rabbitURL, rabbitMgmt := rabbit(t)
	if st, body := api(t, "GET", rabbitMgmt, "/api/federation-links", nil); st != 200 {
		t.Skipf("RabbitMQ's federation plugin is not enabled (%d %s): rabbitmq-plugins enable rabbitmq_federation rabbitmq_federation_management", st, body)
	}
	w := warrentest.Start(t)
	wch, rch := channel(t, w.URL()), channel(t, rabbitURL)
	id := fmt.Sprint(time.Now().UnixNano() % 1e7)
	x, q, up, pol := "fedw."+id, "fedw-q-"+id, "warren-up-"+id, "fedw-"+id
	must := func(st int, body []byte) {
		t.Helper()
		if st >= 300 {
			t.Fatalf("%d %s", st, body)
		}
	}
	t.Cleanup(func() {
		api(t, "DELETE", rabbitMgmt, "/api/policies/%2F/"+pol, nil)
		api(t, "DELETE", rabbitMgmt, "/api/parameters/federation-upstream/%2F/"+up, nil)
		rch.QueueDelete(q, false, false, false)
		rch.ExchangeDelete(x, false, false)
	})
	if err := wch.ExchangeDeclare(x, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := rch.ExchangeDeclare(x, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := rch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := rch.QueueBind(q, "a.#", x, false, nil); err != nil {
		t.Fatal(err)
	}
	must(api(t, "PUT", rabbitMgmt, "/api/parameters/federation-upstream/%2F/"+up, map[string]any{"value": map[string]any{
		"uri": "amqp://guest:guest@" + w.Addr(), "max-hops": 2, "expires": 600000}})) // (no path: the downstream's vhost)
	must(api(t, "PUT", rabbitMgmt, "/api/policies/%2F/"+pol, map[string]any{"pattern": "^" + strings.ReplaceAll(x, ".", `\.`) + "$",
		"definition": map[string]any{"federation-upstream": up}, "apply-to": "exchanges"}))

	// The link runs, and its objects are on Warren.
	testutil.Eventually(t, 20*time.Second, "RabbitMQ's federation link running", func() bool {
		_, body := api(t, "GET", rabbitMgmt, "/api/federation-links/%2F", nil)
		var ls []map[string]any
		json.Unmarshal(body, &ls)
		for _, l := range ls {
			if l["upstream"] == up && l["exchange"] == x && l["status"] == "running" {
				return true
			}
		}
		return false
	})
	var internal map[string]any
	testutil.Eventually(t, 20*time.Second, "the x-federation-upstream exchange, bound from the federated one", func() bool {
		_, body := api(t, "GET", w.MgmtURL(), "/api/exchanges/%2F", nil)
		var xs []map[string]any
		json.Unmarshal(body, &xs)
		for _, e := range xs {
			if e["type"] == "x-federation-upstream" && strings.HasPrefix(e["name"].(string), "federation: "+x+" -> ") {
				internal = e
			}
		}
		if internal == nil {
			return false
		}
		_, body = api(t, "GET", w.MgmtURL(), "/api/bindings/%2F/e/"+x+"/e/"+escapePath(internal["name"].(string)), nil)
		return strings.Contains(string(body), `"routing_key":"a.#"`)
	})
	args, _ := internal["arguments"].(map[string]any)
	if internal["internal"] != true || internal["auto_delete"] != true || args["x-max-hops"] != float64(2) || args["x-downstream-vhost"] != "/" {
		t.Fatalf("the upstream exchange as declared on Warren: %v", internal)
	}
	rabbitName, _ := args["x-downstream-name"].(string)

	pub := func(key, body string, from []any) {
		t.Helper()
		p := amqp.Publishing{Body: []byte(body)}
		if from != nil {
			p.Headers = amqp.Table{"x-received-from": from}
		}
		if err := wch.PublishWithContext(context.Background(), x, key, false, false, p); err != nil {
			t.Fatal(err)
		}
	}
	hop := func(cluster string) amqp.Table {
		return amqp.Table{"uri": "amqp://elsewhere", "exchange": x, "redelivered": false, "cluster-name": cluster, "vhost": "/"}
	}
	pub("a.b", "one", nil)
	pub("b.c", "unbound", nil)
	pub("a.c", "from rabbitmq", []any{hop(rabbitName)})                   // it went through RabbitMQ: no loop
	pub("a.d", "two hops", []any{hop("elsewhere-1"), hop("elsewhere-2")}) // max-hops 2 reached
	pub("a.e", "one hop elsewhere", []any{hop("elsewhere-1")})            // goes on
	got := drain(t, rch, q, 2, 15*time.Second)
	if extra := drain(t, rch, q, 1, 500*time.Millisecond); len(extra) > 0 {
		got = append(got, extra...)
	}
	var bodies []string
	for _, d := range got {
		bodies = append(bodies, string(d.Body))
	}
	if strings.Join(bodies, "|") != "one|one hop elsewhere" {
		t.Fatalf("RabbitMQ's queue got %q, want one and the one hop elsewhere", bodies)
	}
	rf, _ := got[0].Headers["x-received-from"].([]any)
	if len(rf) != 1 {
		t.Fatalf("x-received-from: %v", got[0].Headers)
	}
	h := rf[0].(amqp.Table)
	if h["cluster-name"] != w.Broker().ClusterName() || h["exchange"] != x || h["uri"] != "amqp://"+w.Addr() {
		t.Fatalf("x-received-from names %v; want Warren's cluster %s, exchange %s, its URI without credentials", h, w.Broker().ClusterName(), x)
	}
}

func escapePath(s string) string {
	return strings.NewReplacer("%", "%25", "/", "%2F", " ", "%20", ">", "%3E").Replace(s)
}
