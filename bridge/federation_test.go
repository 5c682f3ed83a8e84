package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/faultproxy"
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
	needPlugin(t, rabbitMgmt, "/api/federation-links", "rabbitmq_federation rabbitmq_federation_management")
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
				// Warren's links show RabbitMQ's fields (its local_channel,
				// shown "if found", aside): TestFederationFromRabbitMQ.
				delete(l, "local_channel")
				if keysOf(l) != exchangeLinkFields {
					t.Fatalf("RabbitMQ's link fields %s, the test expects %s", keysOf(l), exchangeLinkFields)
				}
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

// exchangeLinkFields are the fields of a running exchange link in
// /api/federation-links, RabbitMQ 3.10's (TestWarrenAsFederationUpstream
// reads them from its answer) and Warren's.
const exchangeLinkFields = "exchange,id,local_connection,node,status,timestamp,type,upstream,upstream_exchange,uri,vhost"

// queueLinkFields are a running queue link's
// (TestWarrenAsQueueFederationUpstream reads RabbitMQ's).
const queueLinkFields = "consumer_tag,id,local_connection,node,queue,status,timestamp,type,upstream,upstream_queue,uri,vhost"

func escapePath(s string) string {
	return strings.NewReplacer("%", "%25", "/", "%2F", " ", "%20", ">", "%3E").Replace(s)
}

// TestFederationFromRabbitMQ: issue 24 (must-show 1). Warren federates an
// exchange from RabbitMQ 3.10.8: the link runs (/api/federation-links with
// RabbitMQ's fields), declares on RabbitMQ the queue and the
// x-federation-upstream exchange and binds them with the keys of the
// exchange's bindings here, kept in step as they change; a message
// published on RabbitMQ arrives here with x-received-from naming
// RabbitMQ; with the policy gone the link stops and its objects on
// RabbitMQ go.
func TestFederationFromRabbitMQ(t *testing.T) {
	rabbitURL, rabbitMgmt := rabbit(t)
	w := warrentest.Start(t)
	wch, rch := channel(t, w.URL()), channel(t, rabbitURL)
	id := fmt.Sprint(time.Now().UnixNano() % 1e7)
	x, up := "fedr."+id, "rabbit-up-"+id
	must := func(st int, body []byte) {
		t.Helper()
		if st >= 300 {
			t.Fatalf("%d %s", st, body)
		}
	}
	t.Cleanup(func() { rch.ExchangeDelete(x, false, false) })
	if err := wch.ExchangeDeclare(x, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"fedr-a", "fedr-b"} {
		if _, err := wch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := wch.QueueBind("fedr-a", "a.#", x, false, nil); err != nil {
		t.Fatal(err)
	}
	ru, _ := url.Parse(rabbitURL)
	must(api(t, "PUT", w.MgmtURL(), "/api/parameters/federation-upstream/%2F/"+up, map[string]any{"value": map[string]any{
		"uri": "amqp://guest:guest@" + ru.Host, "expires": 600000, "reconnect-delay": 1}}))
	must(api(t, "PUT", w.MgmtURL(), "/api/policies/%2F/fedr", map[string]any{"pattern": "^fedr\\.",
		"definition": map[string]any{"federation-upstream": up}, "apply-to": "exchanges"}))

	var link map[string]any
	testutil.Eventually(t, 20*time.Second, "Warren's federation link running", func() bool {
		_, body := api(t, "GET", w.MgmtURL(), "/api/federation-links/%2F", nil)
		var ls []map[string]any
		json.Unmarshal(body, &ls)
		for _, l := range ls {
			if l["exchange"] == x && l["status"] == "running" {
				link = l
				return true
			}
		}
		return false
	})
	want := exchangeLinkFields
	if keysOf(link) != want || link["uri"] != "amqp://"+ru.Host || link["upstream"] != up || link["type"] != "exchange" {
		t.Fatalf("the link as /api/federation-links shows it: %v\n(RabbitMQ 3.10's fields: %s)", link, want)
	}

	cluster := w.Broker().ClusterName()
	qname := "federation: " + x + " -> " + cluster
	boundOnRabbit := func(key string) bool {
		_, body := api(t, "GET", rabbitMgmt, "/api/exchanges/%2F/"+escapePath(x)+"/bindings/source", nil)
		return strings.Contains(string(body), `"routing_key":"`+key+`"`)
	}
	testutil.Eventually(t, 10*time.Second, "a.# bound on RabbitMQ", func() bool { return boundOnRabbit("a.#") })
	if st, body := api(t, "GET", rabbitMgmt, "/api/queues/%2F/"+escapePath(qname), nil); st != 200 ||
		!strings.Contains(string(body), `"x-expires":600000`) {
		t.Fatalf("the link's queue on RabbitMQ: %d %s", st, body)
	}

	pub := func(key, body string) {
		t.Helper()
		if err := rch.PublishWithContext(context.Background(), x, key, false, false, amqp.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	pub("a.b", "one")
	got := drain(t, wch, "fedr-a", 1, 10*time.Second)
	if len(got) != 1 || string(got[0].Body) != "one" {
		t.Fatalf("fedr-a got %v", got)
	}
	rf, _ := got[0].Headers["x-received-from"].([]any)
	h, _ := rf[0].(amqp.Table)
	if len(rf) != 1 || h["uri"] != "amqp://"+ru.Host || h["exchange"] != x || h["vhost"] != "/" || h["redelivered"] != false ||
		h["cluster-name"] == nil || h["cluster-name"] == "" {
		t.Fatalf("x-received-from: %v", got[0].Headers)
	}

	// A new binding here goes upstream; one removed goes too.
	if err := wch.QueueBind("fedr-b", "b.#", x, false, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "b.# bound on RabbitMQ", func() bool { return boundOnRabbit("b.#") })
	pub("b.c", "two")
	if got := drain(t, wch, "fedr-b", 1, 10*time.Second); len(got) != 1 || string(got[0].Body) != "two" {
		t.Fatalf("fedr-b got %v", got)
	}
	if err := wch.QueueUnbind("fedr-b", "b.#", x, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Until(10*time.Second, func() bool { return !boundOnRabbit("b.#") })
	if boundOnRabbit("b.#") {
		_, body := api(t, "GET", w.MgmtURL(), "/api/federation-links", nil)
		_, rb := api(t, "GET", rabbitMgmt, "/api/exchanges/%2F/"+escapePath(x)+"/bindings/source", nil)
		t.Fatalf("b.# still bound on RabbitMQ: %s\n%s", body, rb)
	}

	// The policy gone: the link stops, its objects on RabbitMQ go.
	must(api(t, "DELETE", w.MgmtURL(), "/api/policies/%2F/fedr", nil))
	testutil.Eventually(t, 10*time.Second, "the link and its queue on RabbitMQ gone", func() bool {
		_, body := api(t, "GET", w.MgmtURL(), "/api/federation-links", nil)
		st, _ := api(t, "GET", rabbitMgmt, "/api/queues/%2F/"+escapePath(qname), nil)
		return strings.TrimSpace(string(body)) == "[]" && st == 404
	})
}

// TestFederationWarrenToWarren: issue 24. One Warren federates an exchange
// from another: a message published upstream arrives downstream once;
// one that came from the downstream does not go back (x-max-hops 1).
func TestFederationWarrenToWarren(t *testing.T) {
	upW, downW := warrentest.Start(t), warrentest.Start(t)
	uch, dch := channel(t, upW.URL()), channel(t, downW.URL())
	for _, ch := range []*amqp.Channel{uch, dch} {
		if err := ch.ExchangeDeclare("ww.x", "direct", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := dch.QueueDeclare("ww-q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := dch.QueueBind("ww-q", "k", "ww.x", false, nil); err != nil {
		t.Fatal(err)
	}
	if st, body := api(t, "PUT", downW.MgmtURL(), "/api/parameters/federation-upstream/%2F/up", map[string]any{"value": map[string]any{
		"uri": "amqp://guest:guest@" + upW.Addr()}}); st != 201 {
		t.Fatalf("%d %s", st, body)
	}
	if st, body := api(t, "PUT", downW.MgmtURL(), "/api/policies/%2F/ww", map[string]any{"pattern": "^ww\\.",
		"definition": map[string]any{"federation-upstream-set": "all"}, "apply-to": "exchanges"}); st >= 300 {
		t.Fatalf("%d %s", st, body)
	}
	testutil.Eventually(t, 15*time.Second, "the binding upstream", func() bool {
		_, body := api(t, "GET", upW.MgmtURL(), "/api/exchanges/%2F/ww.x/bindings/source", nil)
		return strings.Contains(string(body), `"routing_key":"k"`)
	})
	if err := uch.PublishWithContext(context.Background(), "ww.x", "k", false, false, amqp.Publishing{Body: []byte("up")}); err != nil {
		t.Fatal(err)
	}
	from := amqp.Table{"x-received-from": []any{amqp.Table{"cluster-name": "elsewhere", "vhost": "/"}}}
	if err := uch.PublishWithContext(context.Background(), "ww.x", "k", false, false, amqp.Publishing{Body: []byte("looped"), Headers: from}); err != nil {
		t.Fatal(err)
	}
	got := drain(t, dch, "ww-q", 1, 10*time.Second)
	if extra := drain(t, dch, "ww-q", 1, 500*time.Millisecond); len(extra) > 0 {
		got = append(got, extra...)
	}
	if len(got) != 1 || string(got[0].Body) != "up" {
		var bs []string
		for _, d := range got {
			bs = append(bs, string(d.Body))
		}
		t.Fatalf("downstream got %q, want only up", bs)
	}
}

// TestFederationLinkRecovers: issue 24. A federation link whose
// connection to its upstream is cut goes to error and comes back by
// itself, with its bindings: what is published upstream afterwards
// arrives (at least once: a message in flight at the cut may come twice).
func TestFederationLinkRecovers(t *testing.T) {
	upW, downW := warrentest.Start(t), warrentest.Start(t)
	proxy, err := faultproxy.New("127.0.0.1:0", upW.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	uch, dch := channel(t, upW.URL()), channel(t, downW.URL())
	for _, ch := range []*amqp.Channel{uch, dch} {
		if err := ch.ExchangeDeclare("rec.x", "direct", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := dch.QueueDeclare("rec-q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := dch.QueueBind("rec-q", "k", "rec.x", false, nil); err != nil {
		t.Fatal(err)
	}
	for path, body := range map[string]any{
		"/api/parameters/federation-upstream/%2F/up": map[string]any{"value": map[string]any{
			"uri": "amqp://guest:guest@" + proxy.Addr(), "reconnect-delay": 1}},
		"/api/policies/%2F/rec": map[string]any{"pattern": "^rec\\.", "apply-to": "exchanges",
			"definition": map[string]any{"federation-upstream": "up"}},
	} {
		if st, b := api(t, "PUT", downW.MgmtURL(), path, body); st >= 300 {
			t.Fatalf("%s: %d %s", path, st, b)
		}
	}
	status := func() string {
		_, body := api(t, "GET", downW.MgmtURL(), "/api/federation-links", nil)
		var ls []map[string]any
		json.Unmarshal(body, &ls)
		if len(ls) != 1 {
			return fmt.Sprint(len(ls), " links")
		}
		return fmt.Sprint(ls[0]["status"])
	}
	bound := func() bool {
		_, body := api(t, "GET", upW.MgmtURL(), "/api/exchanges/%2F/rec.x/bindings/source", nil)
		return strings.Contains(string(body), `"routing_key":"k"`)
	}
	testutil.Eventually(t, 15*time.Second, "the link running and bound", func() bool { return status() == "running" && bound() })
	pub := func(body string) {
		t.Helper()
		if err := uch.PublishWithContext(context.Background(), "rec.x", "k", false, false, amqp.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	pub("before")
	if got := drain(t, dch, "rec-q", 1, 10*time.Second); len(got) != 1 || string(got[0].Body) != "before" {
		t.Fatalf("before the cut: %v", got)
	}
	proxy.SetMode(faultproxy.Drop) // the link's connection goes, and no new one gets through
	proxy.SetMode(faultproxy.Reset)
	proxy.SetMode(faultproxy.Drop)
	testutil.Eventually(t, 10*time.Second, "the link down, in /state/down", func() bool {
		_, body := api(t, "GET", downW.MgmtURL(), "/api/federation-links/state/down", nil)
		return status() == "error" && strings.Contains(string(body), `"status":"error"`)
	})
	proxy.SetMode(faultproxy.Pass)
	testutil.Eventually(t, 15*time.Second, "the link back and bound", func() bool { return status() == "running" && bound() })
	pub("after")
	got := drain(t, dch, "rec-q", 1, 10*time.Second)
	if len(got) != 1 || string(got[0].Body) != "after" {
		t.Fatalf("after the cut: %v", got)
	}
	if _, body := api(t, "GET", downW.MgmtURL(), "/api/federation-links/state/down", nil); strings.TrimSpace(string(body)) != "[]" {
		t.Fatalf("/state/down with the link running: %s", body)
	}
	// Restarted by hand (RabbitMQ's restart endpoint): a new session.
	_, body := api(t, "GET", downW.MgmtURL(), "/api/federation-links", nil)
	var ls []map[string]any
	json.Unmarshal(body, &ls)
	path := fmt.Sprintf("/api/federation-links/vhost/%%2F/%s/%s/restart", ls[0]["id"], escapePath(ls[0]["node"].(string)))
	if st, b := api(t, "DELETE", downW.MgmtURL(), path, nil); st != 204 {
		t.Fatalf("restart: %d %s", st, b)
	}
	if st, _ := api(t, "DELETE", downW.MgmtURL(), "/api/federation-links/vhost/%2F/00000000/"+escapePath(ls[0]["node"].(string))+"/restart", nil); st != 404 {
		t.Fatalf("restart of no link: %d", st)
	}
	testutil.Eventually(t, 15*time.Second, "the link running again", func() bool { return status() == "running" && bound() })
	pub("restarted")
	if got := drain(t, dch, "rec-q", 1, 10*time.Second); len(got) != 1 || string(got[0].Body) != "restarted" {
		t.Fatalf("after the restart: %v", got)
	}
}

// TestFederationSurvivesRestart: issue 24. The downstream restarts: its
// upstreams and policies are kept (with their users), and the links come
// back by themselves, with their bindings.
func TestFederationSurvivesRestart(t *testing.T) {
	upW, downW := warrentest.Start(t), warrentest.Start(t)
	uch, dch := channel(t, upW.URL()), channel(t, downW.URL())
	for _, ch := range []*amqp.Channel{uch, dch} {
		if err := ch.ExchangeDeclare("rs.x", "direct", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := dch.QueueDeclare("rs-q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := dch.QueueBind("rs-q", "k", "rs.x", false, nil); err != nil {
		t.Fatal(err)
	}
	for path, body := range map[string]any{
		"/api/parameters/federation-upstream/%2F/up": map[string]any{"value": map[string]any{"uri": "amqp://guest:guest@" + upW.Addr()}},
		"/api/policies/%2F/rs": map[string]any{"pattern": "^rs\\.", "apply-to": "exchanges",
			"definition": map[string]any{"federation-upstream": "up"}},
	} {
		if st, b := api(t, "PUT", downW.MgmtURL(), path, body); st >= 300 {
			t.Fatalf("%s: %d %s", path, st, b)
		}
	}
	running := func() bool {
		_, body := api(t, "GET", downW.MgmtURL(), "/api/federation-links", nil)
		_, b := api(t, "GET", upW.MgmtURL(), "/api/exchanges/%2F/rs.x/bindings/source", nil)
		return strings.Contains(string(body), `"status":"running"`) && strings.Contains(string(b), `"routing_key":"k"`)
	}
	testutil.Eventually(t, 15*time.Second, "the link running", running)
	downW.Restart()
	testutil.Eventually(t, 15*time.Second, "the link running after the restart", running)
	dch = channel(t, downW.URL())
	if err := uch.PublishWithContext(context.Background(), "rs.x", "k", false, false, amqp.Publishing{Body: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, dch, "rs-q", 1, 10*time.Second); len(got) != 1 || string(got[0].Body) != "after" {
		t.Fatalf("after the restart: %v", got)
	}
}
