package server_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/server"
	"github.com/warrenmq/warren/warrentest"
)

// syncBuffer collects the broker's log.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// closedWith waits for the connection to close and returns its error.
func closedWith(t *testing.T, notify chan *amqp.Error) *amqp.Error {
	t.Helper()
	select {
	case e := <-notify:
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("connection not closed")
		return nil
	}
}

func want541(t *testing.T, what string, e *amqp.Error) {
	t.Helper()
	if e == nil || e.Code != 541 || e.Reason != "INTERNAL_ERROR" {
		t.Fatalf("%s: connection closed with %v, want 541 INTERNAL_ERROR", what, e)
	}
}

// healthyConn publishes with confirms and consumes on its own connection.
type healthyConn struct {
	ch   *amqp.Channel
	msgs <-chan amqp.Delivery
	n    int
}

func (h *healthyConn) check(t *testing.T) {
	t.Helper()
	h.n++
	body := fmt.Sprintf("ok-%d", h.n)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conf, err := h.ch.PublishWithDeferredConfirmWithContext(ctx, "", "hB-ok", false, false, amqp.Publishing{Body: []byte(body)})
	if err != nil {
		t.Fatalf("healthy connection: publish: %v", err)
	}
	if ok, err := conf.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("healthy connection: confirm: %v %v", ok, err)
	}
	select {
	case d := <-h.msgs:
		if string(d.Body) != body {
			t.Fatalf("healthy connection: got %q, want %q", d.Body, body)
		}
	case <-ctx.Done():
		t.Fatal("healthy connection: no delivery")
	}
}

// TestPanicClosesOnlyThatConnection: issue 11, must-show 6. A panic in one
// connection's work (method dispatch, publish routing on the reader, a
// delivery made under a queue's lock on another connection's goroutine,
// the writer) closes that connection with 541 INTERNAL_ERROR and logs the
// stack; the broker lives, another connection keeps publishing and
// consuming, and the queue the panicking delivery came from keeps
// delivering to its other consumers (its lock was not left held).
func TestPanicClosesOnlyThatConnection(t *testing.T) {
	t.Cleanup(server.InstallPanicHooksForTest())
	logs := &syncBuffer{}
	b := warrentest.Start(t, warrentest.WithConfig(func(c *server.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	}))
	dial := func(name string) (*amqp.Connection, chan *amqp.Error) {
		t.Helper()
		cfg := amqp.Config{Properties: amqp.Table{"connection_name": name}}
		c, err := amqp.DialConfig(b.URL(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, c.NotifyClose(make(chan *amqp.Error, 1))
	}
	channel := func(c *amqp.Connection) *amqp.Channel {
		t.Helper()
		ch, err := c.Channel()
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}

	hc, _ := dial("hB-healthy")
	h := &healthyConn{ch: channel(hc)}
	if _, err := h.ch.QueueDeclare("hB-ok", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	must(t, h.ch.Confirm(false))
	var err error
	if h.msgs, err = h.ch.Consume("hB-ok", "", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	h.check(t)

	// Method dispatch.
	a, closed := dial("hB-method")
	if _, err := channel(a).QueueDeclare("hB-panic", false, false, false, false, nil); err == nil {
		t.Fatal("queue.declare hB-panic succeeded")
	}
	want541(t, "panic in queue.declare", closedWith(t, closed))
	h.check(t)

	// Publish routing, on the publisher's reader.
	a, closed = dial("hB-publish")
	must(t, channel(a).Publish("", "hB-panic", false, false, amqp.Publishing{Body: []byte("x")}))
	want541(t, "panic in publish routing", closedWith(t, closed))
	h.check(t)

	// A delivery under the queue's lock: the consumer's connection is
	// closed, the publisher's is not, and the queue's other consumer gets
	// every message.
	a, closed = dial("hB-deliver")
	ach := channel(a)
	if _, err := ach.QueueDeclare("hB-deliver", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ach.Consume("hB-deliver", "hB-panic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	pubc, _ := dial("hB-deliver-publisher")
	pub := channel(pubc)
	must(t, pub.Confirm(false))
	for i := range 5 {
		conf, err := pub.PublishWithDeferredConfirmWithContext(context.Background(), "", "hB-deliver", false, false, amqp.Publishing{Body: []byte{byte('0' + i)}})
		if err != nil {
			t.Fatal(err)
		}
		if ok := conf.Wait(); !ok {
			t.Fatal("publish to hB-deliver nacked")
		}
	}
	want541(t, "panic in a delivery", closedWith(t, closed))
	oc, _ := dial("hB-deliver-other")
	ds, err := channel(oc).Consume("hB-deliver", "other", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if i == 5 {
			must(t, pub.Publish("", "hB-deliver", false, false, amqp.Publishing{Body: []byte("5")}))
		}
		select {
		case d := <-ds:
			if string(d.Body) != string(rune('0'+i)) {
				t.Fatalf("other consumer: got %q, want %q", d.Body, string(rune('0'+i)))
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("other consumer: message %d not delivered (queue stuck?)", i)
		}
	}
	h.check(t)

	// The writer.
	a, closed = dial("hB-panic-writer")
	server.ArmWriterPanicForTest()
	if _, err := a.Channel(); err == nil {
		t.Fatal("channel.open on a connection whose writer panicked succeeded")
	}
	want541(t, "panic in the writer", closedWith(t, closed))
	h.check(t)

	out := logs.String()
	for _, inj := range []string{"injected: queue.declare", "injected: publish", "injected: deliver", "injected: writer"} {
		if !strings.Contains(out, inj) {
			t.Errorf("log has no line for the panic %q", inj)
		}
	}
	if !strings.Contains(out, "goroutine ") || !strings.Contains(out, "panic_test.go") && !strings.Contains(out, "export_test.go") {
		t.Errorf("log has no stack trace:\n%s", out)
	}
	if n := b.Server().ConnectionCount(); n < 3 {
		t.Errorf("%d connections open, want the healthy ones still there", n)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
