package mgmt_test

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// An exchange's message_stats count what was published to it (publish_in)
// and what it routed on (publish_out), from clients and from the API.
func TestExchangeMessageStats(t *testing.T) {
	f := newFixture(t)
	f.topology()
	var x map[string]any
	f.call("GET", "/api/exchanges/%2F/orders-x", nil, &x)
	if _, has := x["message_stats"]; has {
		t.Fatalf("message_stats before any publish: %v", x["message_stats"])
	}
	for _, key := range []string{"new", "new", "nowhere"} {
		must(t, f.ch.PublishWithContext(context.Background(), "orders-x", key, false, false, amqp.Publishing{Body: []byte("m")}))
	}
	f.waitCount("orders", 2)
	var routed map[string]any
	if st := f.call("POST", "/api/exchanges/%2F/orders-x/publish", map[string]any{"properties": map[string]any{},
		"routing_key": "new", "payload": "api", "payload_encoding": "string"}, &routed); st != 200 || routed["routed"] != true {
		t.Fatalf("API publish: %d %v", st, routed)
	}
	f.call("GET", "/api/exchanges/%2F/orders-x", nil, &x)
	ms, _ := x["message_stats"].(map[string]any)
	if ms["publish_in"] != float64(4) || ms["publish_out"] != float64(3) {
		t.Fatalf("orders-x message_stats = %v, want publish_in 4, publish_out 3", ms)
	}
	if _, ok := ms["publish_in_details"].(map[string]any)["rate"]; !ok {
		t.Fatalf("no publish_in_details.rate: %v", ms)
	}
	// The channel's counts outlive it.
	must(t, f.ch.Close())
	f.call("GET", "/api/exchanges/%2F/orders-x", nil, &x)
	if ms, _ := x["message_stats"].(map[string]any); ms["publish_in"] != float64(4) {
		t.Fatalf("after the channel closed: %v", x["message_stats"])
	}
}
