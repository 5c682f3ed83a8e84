package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/warrentest"
)

// TestStreamLoad: warren-perf stream publishes a count with confirms and
// reads it back from first, over the stream protocol, and says so in
// its JSON; a missing stream is an error.
func TestStreamLoad(t *testing.T) {
	b := warrentest.Start(t)
	conn, err := amqp.Dial(b.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	if _, err := ch.QueueDeclare("perf-s", true, false, false, false, amqp.Table{"x-queue-type": "stream"}); err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimSuffix(strings.TrimPrefix(b.StreamURI(), "rabbitmq-stream://guest:guest@"), "/%2f")
	load := func(args ...string) (streamResult, error) {
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		err := run(ctx, append([]string{"stream", "--addr", addr}, args...), &out, &errb)
		var r streamResult
		if err == nil {
			err = json.Unmarshal(out.Bytes(), &r)
		}
		return r, err
	}
	r, err := load("--stream", "perf-s", "--mode", "publish", "--count", "50000", "--batch", "500", "--inflight", "5000")
	if err != nil {
		t.Fatal(err)
	}
	if r.Confirmed != 50000 || r.ConfirmRate <= 0 || r.ClientCPUPercent <= 0 {
		t.Fatalf("publish: %+v", r)
	}
	r, err = load("--stream", "perf-s", "--mode", "consume", "--count", "50000")
	if err != nil {
		t.Fatal(err)
	}
	if r.Consumed != 50000 || r.ConsumeRate <= 0 {
		t.Fatalf("consume: %+v", r)
	}
	// what it published is what a 0-9-1 consumer reads: 16 zero bytes
	ch.Qos(10, 0, false)
	ds, err := ch.Consume("perf-s", "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-ds:
		if len(d.Body) != 16 || d.Body[0] != 0 {
			t.Fatalf("the first message's body: %q", d.Body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing read over AMQP 0-9-1")
	}
	if _, err := load("--stream", "nope", "--mode", "publish", "--count", "10"); err == nil {
		t.Fatal("publishing to a missing stream succeeded")
	}
}
