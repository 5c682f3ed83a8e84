package server_test

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/server"
)

// Shutdown and the ownership of the broker's stores (issue 12: one owner
// per resource; tests for the server package).

// newServer starts a server for cfg without registering its shutdown:
// the test shuts it down itself.
func newServer(t *testing.T, cfg server.Config) *server.Server {
	t.Helper()
	cfg.AMQPAddr, cfg.MemoryHighWatermark, cfg.DiskFreeLimit = "127.0.0.1:0", -1, -1
	s, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		s.Close()
		t.Fatal(err)
	}
	return s
}

// durableSetup declares the durable queue hB-dur-sd on s and publishes
// two persistent messages with confirms: "seen", delivered to a consumer
// that never acks it (returned to the queue at shutdown), then "fresh",
// never delivered. It returns the consumer's connection.
func durableSetup(t *testing.T, s *server.Server) *amqp091.Connection {
	t.Helper()
	c, err := amqp091.Dial(amqpURL(s))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("hB-dur-sd", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"seen", "fresh"} {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", "hB-dur-sd", false, false,
			amqp091.Publishing{DeliveryMode: 2, Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		if !dc.Wait() {
			t.Fatalf("publish %s nacked", body)
		}
	}
	cch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := cch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	d, err := cch.Consume("hB-dur-sd", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := next(t, d); string(m.Body) != "seen" {
		t.Fatalf("delivered %q, want seen", m.Body)
	}
	return c
}

// redelivered starts a server on dir and gets the queue's messages,
// reporting each one's redelivered flag by body.
func redelivered(t *testing.T, dir string) map[string]bool {
	t.Helper()
	s := newServer(t, server.Config{DataDir: dir})
	defer s.Close()
	c, err := amqp091.Dial(amqpURL(s))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for {
		m, ok, err := ch.Get("hB-dur-sd", true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return got
		}
		got[string(m.Body)] = m.Redelivered
	}
}

// TestShutdownClean: issue 12, server package tests and "broker opens and
// closes the stores". Shutdown closes every connection with 320
// CONNECTION_FORCED and, once they are all gone, closes the broker the
// server opened, marked clean: after a restart a message never delivered
// is not flagged redelivered, one delivered and unacked is.
func TestShutdownClean(t *testing.T) {
	dir := t.TempDir()
	s := newServer(t, server.Config{DataDir: dir})
	c := durableSetup(t, s)
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if e := closedWith(t, closed); e == nil || e.Code != 320 || e.Reason != "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'" {
		t.Fatalf("connection closed with %v, want 320 CONNECTION_FORCED", e)
	}
	if _, err := amqp091.Dial(amqpURL(s)); err == nil {
		t.Fatal("dial after shutdown succeeded")
	}
	got := redelivered(t, dir)
	if len(got) != 2 || got["fresh"] || !got["seen"] {
		t.Fatalf("after a clean shutdown: redelivered flags %v, want fresh false, seen true", got)
	}
}

// TestShutdownTimeoutUnclean: issue 12, server package tests. A client
// that never answers the shutdown's connection.close holds Shutdown past
// its context: Shutdown returns the context's error and closes the stores
// without the clean mark, so that after a restart every message is
// flagged redelivered (it may have been delivered).
func TestShutdownTimeoutUnclean(t *testing.T) {
	dir := t.TempDir()
	s := newServer(t, server.Config{DataDir: dir})
	durableSetup(t, s).Close()
	// A raw client that reads nothing and never sends close-ok.
	c := dialRaw(t, s)
	c.open(amqp.ConnectionTuneOk{})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("shutdown: %v, want the context's deadline", err)
	}
	s.Close() // waits for the connection goroutines
	got := redelivered(t, dir)
	if len(got) != 2 || !got["fresh"] || !got["seen"] {
		t.Fatalf("after an unclean shutdown: redelivered flags %v, want both true", got)
	}
}

// TestShutdownLeavesCallersBroker: issue 12, one owner per resource. A
// broker given to server.New is the caller's: the server's Shutdown leaves
// its stores open (a persistent publish through the broker's Go API is
// still written and synced), and the caller's Close closes them, clean.
func TestShutdownLeavesCallersBroker(t *testing.T) {
	dir := t.TempDir()
	b, err := broker.Open(broker.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, server.Config{Broker: b, DataDir: dir})
	if s.Broker() != b {
		t.Fatal("server serves another broker")
	}
	durableSetup(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var r broker.Router
	res, err := b.VHost("/").Publish(&r, "", &broker.Message{RoutingKey: "hB-dur-sd", Props: amqp.Properties{DeliveryMode: 2}, Body: []byte("after")})
	if err != nil || res.Routed != 1 || res.Failed || !res.Durable.Pending() {
		t.Fatalf("publish after the server's shutdown: %+v %v, want routed to the durable queue and written", res, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.WaitDurable(ctx, res.Durable); err != nil {
		t.Fatalf("sync after the server's shutdown: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	got := redelivered(t, dir)
	if len(got) != 3 || got["fresh"] || got["after"] || !got["seen"] {
		t.Fatalf("redelivered flags %v, want seen true, fresh and after false", got)
	}
}

// TestOpenWithoutDataDir: issue 12, one owner per resource. Without a
// data directory the broker lives in memory: the default vhost and user
// exist, a persistent publish has nothing to wait for, and Close is a
// no-op.
func TestOpenWithoutDataDir(t *testing.T) {
	b, err := broker.Open(broker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, server.Config{Broker: b})
	defer s.Close()
	c := dial(t, s)
	ch := channel(t, c)
	if _, err := ch.QueueDeclare("hB-dur-mem", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	var r broker.Router
	res, err := b.VHost("/").Publish(&r, "", &broker.Message{RoutingKey: "hB-dur-mem", Props: amqp.Properties{DeliveryMode: 2}, Body: []byte("x")})
	if err != nil || res.Routed != 1 || res.Durable.Pending() {
		t.Fatalf("publish in memory: %+v %v, want routed with nothing to wait for", res, err)
	}
	if err := s.WaitSynced(context.Background(), res.Durable); err != nil {
		t.Fatal(err)
	}
	if st := s.SyncStats(); st != (broker.SyncStats{}) {
		t.Fatalf("sync stats %+v without a store", st)
	}
	if _, err := broker.Open(broker.Config{Store: nil, Messages: &broker.MsgStore{}}); err == nil {
		t.Fatal("Open took a message store of the caller's")
	}
}
