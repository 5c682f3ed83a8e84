package mgmt_test

import (
	"math"
	"testing"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

// issue 11 item 2: a NaN or infinite double in a queue's arguments or a
// message's headers (values RabbitMQ cannot hold; since the AMQP decoder
// refuses them they are put into the broker directly here) made
// /api/queues and /api/definitions answer 200 with an empty body, and a
// get with ackmode ack_requeue_false acked messages whose reply was then
// lost. Every list must keep every entry, the odd values rendered as the
// strings "NaN", "Infinity" and "-Infinity".
func TestNonFiniteFloatsRendered(t *testing.T) {
	f := newFixture(t)
	v := f.w.Broker().VHost("/")
	bad := amqp.Table{"x-nan": math.NaN(), "x-inf": math.Inf(1), "x-ninf": float32(math.Inf(-1)),
		"x-nested": amqp.Table{"deep": []any{math.NaN(), 1.5}}}
	if _, _, _, err := v.DeclareQueue(broker.QueueSpec{Name: "hC-nan", Args: bad}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ch.QueueDeclare("hC-ok", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	res, err := v.Publish(&broker.Router{}, "", &broker.Message{RoutingKey: "hC-nan",
		Props: amqp.Properties{Flags: amqp.FlagHeaders, Headers: amqp.Table{"h": math.NaN(), "ok": "yes"}}, Body: []byte("m")})
	if err != nil || res.Routed != 1 {
		t.Fatalf("publish: %v %+v", err, res)
	}

	wantArgs := func(where string, args any) {
		t.Helper()
		a, _ := args.(map[string]any)
		nested, _ := a["x-nested"].(map[string]any)
		if a["x-nan"] != "NaN" || a["x-inf"] != "Infinity" || a["x-ninf"] != "-Infinity" ||
			len(nested) != 1 || nested["deep"].([]any)[0] != "NaN" || nested["deep"].([]any)[1] != 1.5 {
			t.Fatalf("%s: arguments = %v", where, args)
		}
	}
	var qs []map[string]any
	if st := f.call("GET", "/api/queues", nil, &qs); st != 200 || len(qs) != 2 {
		t.Fatalf("GET /api/queues: %d, %d queues: %v", st, len(qs), qs)
	}
	for _, q := range qs {
		if q["name"] == "hC-nan" {
			wantArgs("/api/queues", q["arguments"])
		}
	}
	var q map[string]any
	if st := f.call("GET", "/api/queues/%2F/hC-nan", nil, &q); st != 200 {
		t.Fatalf("GET /api/queues/%%2F/hC-nan: %d", st)
	}
	wantArgs("/api/queues/%2F/hC-nan", q["arguments"])
	for _, path := range []string{"/api/definitions", "/api/definitions/%2F"} {
		var d map[string]any
		if st := f.call("GET", path, nil, &d); st != 200 {
			t.Fatalf("GET %s: %d", path, st)
		}
		qd, _ := d["queues"].([]any)
		if len(qd) != 2 {
			t.Fatalf("GET %s: queues %v", path, d["queues"])
		}
		for _, e := range qd {
			if e.(map[string]any)["name"] == "hC-nan" {
				wantArgs(path, e.(map[string]any)["arguments"])
			}
		}
	}
	// The get renders the header, and only then acks the message.
	var got []map[string]any
	if st := f.call("POST", "/api/queues/%2F/hC-nan/get", map[string]any{"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto"}, &got); st != 200 || len(got) != 1 {
		t.Fatalf("get: %d %v", st, got)
	}
	h, _ := got[0]["properties"].(map[string]any)["headers"].(map[string]any)
	if h["h"] != "NaN" || h["ok"] != "yes" || got[0]["payload"] != "m" {
		t.Fatalf("get: %v", got[0])
	}
}
