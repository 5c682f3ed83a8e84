package bridge_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

// consumeN consumes n messages of q on ch (auto-ack), in order.
func consumeN(t *testing.T, ch *amqp.Channel, q string, n int, d time.Duration) []amqp.Delivery {
	t.Helper()
	ds, err := ch.Consume(q, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []amqp.Delivery
	timeout := time.After(d)
	for len(out) < n {
		select {
		case m := <-ds:
			out = append(out, m)
		case <-timeout:
			return out
		}
	}
	return out
}

// TestFederatedQueueFromRabbitMQ: issue 24 (must-show 1). A queue of
// Warren federated from RabbitMQ 3.10.8's queue of the same name takes
// nothing while it has no consumer here, then, once one waits, the
// upstream's messages, with x-received-from and their original exchange
// and routing key; /api/federation-links shows the link with RabbitMQ's
// queue-link fields.
func TestFederatedQueueFromRabbitMQ(t *testing.T) {
	rabbitURL, _ := rabbit(t)
	w := warrentest.Start(t)
	wch, rch := channel(t, w.URL()), channel(t, rabbitURL)
	id := fmt.Sprint(time.Now().UnixNano() % 1e7)
	q, up := "fq-"+id, "fq-up-"+id
	t.Cleanup(func() { rch.QueueDelete(q, false, false, false) })
	publish(t, rch, q, "m", 20)
	if _, err := wch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ru, _ := url.Parse(rabbitURL)
	for _, r := range []struct {
		path string
		body any
	}{
		{"/api/parameters/federation-upstream/%2F/" + up, map[string]any{"value": map[string]any{"uri": "amqp://guest:guest@" + ru.Host, "prefetch-count": 5}}},
		{"/api/policies/%2F/fq-" + id, map[string]any{"pattern": "^fq-" + id + "$", "definition": map[string]any{"federation-upstream": up}, "apply-to": "queues"}},
	} {
		if st, body := api(t, "PUT", w.MgmtURL(), r.path, r.body); st >= 300 {
			t.Fatalf("%s: %d %s", r.path, st, body)
		}
	}
	var link map[string]any
	testutil.Eventually(t, 15*time.Second, "the queue link running", func() bool {
		_, body := api(t, "GET", w.MgmtURL(), "/api/federation-links/%2F", nil)
		var ls []map[string]any
		json.Unmarshal(body, &ls)
		for _, l := range ls {
			if l["queue"] == q && l["status"] == "running" {
				link = l
				return true
			}
		}
		return false
	})
	want := queueLinkFields
	if keysOf(link) != want || link["type"] != "queue" || link["upstream_queue"] != q || link["consumer_tag"] != "federation-link-"+up {
		t.Fatalf("the link: %v\n(RabbitMQ 3.10's fields: %s)", link, want)
	}
	time.Sleep(time.Second) // no consumer here: nothing moves
	if rq, err := rch.QueueDeclarePassive(q, true, false, false, false, nil); err != nil || rq.Messages != 20 {
		t.Fatalf("RabbitMQ's queue with no consumer on Warren's: %+v %v, want 20 still there", rq, err)
	}
	got := consumeN(t, wch, q, 20, 15*time.Second)
	if len(got) != 20 {
		t.Fatalf("%d of 20 arrived", len(got))
	}
	for i, d := range got {
		if string(d.Body) != fmt.Sprintf("m-%d", i) {
			t.Fatalf("message %d: %q", i, d.Body)
		}
	}
	// The headers as RabbitMQ's queue links write them (its own, read
	// in TestWarrenAsQueueFederationUpstream: uri, queue, redelivered,
	// visit-count).
	h := got[0].Headers
	rf, _ := h["x-received-from"].([]any)
	if len(rf) != 1 || keysOf(rf[0].(amqp.Table)) != "queue,redelivered,uri,visit-count" || rf[0].(amqp.Table)["queue"] != q ||
		rf[0].(amqp.Table)["uri"] != "amqp://"+ru.Host || h["x-original-routing-key"] != q || h["x-original-exchange"] != "" {
		t.Fatalf("headers: %v", h)
	}
}

// TestWarrenAsQueueFederationUpstream: issue 24 (must-show 1). RabbitMQ
// 3.10.8 federates a queue from Warren: its link consumes Warren's queue
// (with x-priority -1, which Warren honours) once RabbitMQ's queue has a
// consumer, and the messages arrive there.
func TestWarrenAsQueueFederationUpstream(t *testing.T) {
	rabbitURL, rabbitMgmt := rabbit(t)
	needPlugin(t, rabbitMgmt, "/api/federation-links", "rabbitmq_federation rabbitmq_federation_management")
	w := warrentest.Start(t)
	wch, rch := channel(t, w.URL()), channel(t, rabbitURL)
	id := fmt.Sprint(time.Now().UnixNano() % 1e7)
	q, up, pol := "fqr-"+id, "fqr-up-"+id, "fqr-"+id
	t.Cleanup(func() {
		api(t, "DELETE", rabbitMgmt, "/api/policies/%2F/"+pol, nil)
		api(t, "DELETE", rabbitMgmt, "/api/parameters/federation-upstream/%2F/"+up, nil)
		rch.QueueDelete(q, false, false, false)
	})
	publish(t, wch, q, "w", 10)
	if _, err := rch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		path string
		body any
	}{
		{"/api/parameters/federation-upstream/%2F/" + up, map[string]any{"value": map[string]any{"uri": "amqp://guest:guest@" + w.Addr()}}},
		{"/api/policies/%2F/" + pol, map[string]any{"pattern": "^" + q + "$", "definition": map[string]any{"federation-upstream": up}, "apply-to": "queues"}},
	} {
		if st, body := api(t, "PUT", rabbitMgmt, r.path, r.body); st >= 300 {
			t.Fatalf("%s: %d %s", r.path, st, body)
		}
	}
	got := consumeN(t, rch, q, 10, 20*time.Second)
	if len(got) != 10 {
		_, body := api(t, "GET", rabbitMgmt, "/api/federation-links/%2F", nil)
		t.Fatalf("%d of 10 arrived at RabbitMQ; links: %s", len(got), body)
	}
	for i, d := range got {
		if string(d.Body) != fmt.Sprintf("w-%d", i) {
			t.Fatalf("message %d: %q", i, d.Body)
		}
	}
	// RabbitMQ's queue link, field by field against Warren's.
	_, body := api(t, "GET", rabbitMgmt, "/api/federation-links/%2F", nil)
	var ls []map[string]any
	json.Unmarshal(body, &ls)
	found := false
	for _, l := range ls {
		if l["queue"] == q && l["status"] == "running" {
			delete(l, "local_channel")
			if keysOf(l) != queueLinkFields {
				t.Fatalf("RabbitMQ's queue link fields %s, the test expects %s", keysOf(l), queueLinkFields)
			}
			found = true
		}
	}
	if !found {
		t.Fatalf("no running queue link on RabbitMQ: %s", body)
	}
	rf, _ := got[0].Headers["x-received-from"].([]any)
	if len(rf) != 1 || keysOf(rf[0].(amqp.Table)) != "queue,redelivered,uri,visit-count" || rf[0].(amqp.Table)["uri"] != "amqp://"+w.Addr() || rf[0].(amqp.Table)["queue"] != q {
		t.Fatalf("x-received-from: %v", got[0].Headers)
	}
}
