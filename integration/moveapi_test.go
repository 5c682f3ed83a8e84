package integration

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/server"
)

// embedded starts Warren as a Go program embedding it would: a server on
// a loopback port and a data directory, no management HTTP server. It
// returns the broker and a guest channel to it.
func embedded(t *testing.T) (*broker.Broker, *amqp.Channel) {
	t.Helper()
	srv, err := server.New(server.Config{AMQPAddr: "127.0.0.1:0", DataDir: t.TempDir(), Heartbeat: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	b := srv.Broker()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	conn, err := amqp.Dial("amqp://guest:guest@" + srv.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return b, openChannel(t, conn)
}

// wantRefused checks that err is the broker's ACCESS_REFUSED for the
// resource kind name.
func wantRefused(t *testing.T, what string, err error, kind, name string) {
	t.Helper()
	var ae *broker.AccessRefusedError
	if !errors.As(err, &ae) || ae.Kind != kind || ae.Name != name {
		t.Fatalf("%s: err %v, want ACCESS_REFUSED on %s '%s'", what, err, kind, name)
	}
}

// issue 12: a Go program embedding Warren (broker and server, no HTTP)
// replays a DLQ (filtered, limited, then all) and moves messages with
// the broker's API, with the same permission checks as the management
// API: read on the source first, then every republish as a publish. The
// messages travel over TCP with amqp091-go.
func TestReplayGoAPI(t *testing.T) {
	b, ch := embedded(t)
	v := b.VHost("/")
	_, err := ch.QueueDeclare("orders", true, false, false, false, amqp.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "orders.dlq"})
	must(t, err)
	_, err = ch.QueueDeclare("orders.dlq", true, false, false, false, nil)
	must(t, err)
	for _, body := range []string{"m0", "m1", "m2", "m3"} {
		publish(t, ch, "", "orders", amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(body)})
		d, ok, err := ch.Get("orders", false)
		if err != nil || !ok {
			t.Fatalf("get %s: ok=%v err=%v", body, ok, err)
		}
		must(t, d.Reject(false))
	}
	// One dead letter of another reason, between the rejected ones' and
	// those to come.
	publish(t, ch, "", "orders", amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("old"), Expiration: "1"})
	waitFor(t, "5 dead letters", func() bool { n, _ := counts(t, ch, "orders.dlq"); return n == 5 })
	dlq := v.Queue("orders.dlq")

	// Refused: no read on the DLQ; nothing moves.
	b.PutUser("c-noread", "x", nil)
	must(t, b.SetPermissions("/", "c-noread", broker.Permission{Configure: "", Write: ".*", Read: "^orders$"}))
	_, err = b.ReplayDeadLetters(context.Background(), broker.AsUser("c-noread"), v, dlq, broker.ReplayOptions{})
	wantRefused(t, "replay without read on the DLQ", err, "queue", "orders.dlq")
	// Refused at the republish: read on the DLQ, no write on the default
	// exchange; the dead letter stays where it was.
	b.PutUser("c-nowrite", "x", nil)
	must(t, b.SetPermissions("/", "c-nowrite", broker.Permission{Read: ".*", Write: "^orders-x$"}))
	res, err := b.ReplayDeadLetters(context.Background(), broker.AsUser("c-nowrite"), v, dlq, broker.ReplayOptions{})
	must(t, err)
	wantRefused(t, "replay without write on amq.default", res.Err, "exchange", "amq.default")
	if res.Moved != 0 || res.Failed != 1 {
		t.Fatalf("refused replay: %+v, want nothing moved and one failed", res)
	}
	if n, _ := counts(t, ch, "orders.dlq"); n != 5 {
		t.Fatalf("after the refused replays the DLQ holds %d, want 5", n)
	}
	// An unknown reason is refused before anything is read.
	if _, err := b.ReplayDeadLetters(context.Background(), broker.Trusted, v, dlq,
		broker.ReplayOptions{Filter: broker.DeadFilter{Reason: "nope"}}); !errors.Is(err, broker.ErrUnknownReason) {
		t.Fatalf("replay with reason nope: %v, want ErrUnknownReason", err)
	}

	// Filtered and limited: two of the rejected ones, in order.
	res, err = b.ReplayDeadLetters(context.Background(), broker.AsUser("guest"), v, dlq,
		broker.ReplayOptions{Limit: 2, Filter: broker.DeadFilter{Reason: broker.ReasonRejected, SourceQueue: "orders"}})
	must(t, err)
	if res.Moved != 2 || res.Err != nil {
		t.Fatalf("filtered replay: %+v, want 2 moved", res)
	}
	if got := getBodies(t, ch, "orders"); !slices.Equal(got, []string{"m0", "m1"}) {
		t.Fatalf("orders after the filtered replay: %q, want m0 m1", got)
	}
	// Expired only: the one left of that reason; the rejected ones stay.
	res, err = b.ReplayDeadLetters(context.Background(), broker.Trusted, v, dlq,
		broker.ReplayOptions{Filter: broker.DeadFilter{Reason: broker.ReasonExpired}, KeepHistory: true})
	must(t, err)
	if res.Moved != 1 || res.Skipped != 2 {
		t.Fatalf("replay of the expired: %+v, want 1 moved and 2 skipped", res)
	}
	d, ok, err := ch.Get("orders", true)
	if err != nil || !ok || string(d.Body) != "old" || d.Headers["x-death"] == nil {
		t.Fatalf("replayed expired message: ok=%v err=%v body=%q x-death=%v, want old with its history", ok, err, d.Body, d.Headers["x-death"])
	}
	// All: the rest, without their history.
	res, err = b.ReplayDeadLetters(context.Background(), broker.AsUser("guest"), v, dlq, broker.ReplayOptions{})
	must(t, err)
	if res.Moved != 2 || res.Err != nil {
		t.Fatalf("replay of the rest: %+v, want 2 moved", res)
	}
	for _, want := range []string{"m2", "m3"} {
		d, ok, err := ch.Get("orders", true)
		if err != nil || !ok || string(d.Body) != want || d.Headers["x-death"] != nil {
			t.Fatalf("replayed: ok=%v err=%v body=%q x-death=%v, want %s without history", ok, err, d.Body, d.Headers["x-death"], want)
		}
	}
	if n, _ := counts(t, ch, "orders.dlq"); n != 0 {
		t.Fatalf("DLQ after the replays: %d, want 0", n)
	}

	// A move to an exchange with a routing key, as a user who may read
	// the source and write the exchange but lacks the topic permission
	// on the key: the first republish is refused, everything stays.
	must(t, ch.ExchangeDeclare("c-topic", "topic", false, true, false, false, nil))
	_, err = ch.QueueDeclare("c-dest", false, false, true, false, nil)
	must(t, err)
	must(t, ch.QueueBind("c-dest", "ok.#", "c-topic", false, nil))
	for _, body := range []string{"a", "b"} {
		publish(t, ch, "", "orders", amqp.Publishing{Body: []byte(body)})
	}
	b.PutUser("c-mover", "x", nil)
	must(t, b.SetPermissions("/", "c-mover", broker.Permission{Read: "^orders$", Write: "^c-topic$"}))
	must(t, b.SetTopicPermission("/", "c-mover", broker.TopicPermission{Exchange: "c-topic", Write: "^ok\\."}))
	bad, good := "no.x", "ok.x"
	res, err = b.MoveMessages(context.Background(), broker.AsUser("c-mover"), v, v.Queue("orders"),
		broker.MoveTarget{Exchange: "c-topic", RoutingKey: &bad}, 0)
	must(t, err)
	if res.Moved != 0 || res.Err == nil || !strings.Contains(res.Err.Error(), "ACCESS_REFUSED - access to topic 'no.x'") {
		t.Fatalf("move with a refused topic key: %+v", res)
	}
	if _, err = b.MoveMessages(context.Background(), broker.AsUser("c-mover"), v, v.Queue("orders"),
		broker.MoveTarget{Queue: "c-dest"}, 0); err == nil {
		t.Fatal("move to a queue through amq.default without write on it: allowed")
	} else {
		wantRefused(t, "move through amq.default", err, "exchange", "amq.default")
	}
	res, err = b.MoveMessages(context.Background(), broker.AsUser("c-mover"), v, v.Queue("orders"),
		broker.MoveTarget{Exchange: "c-topic", RoutingKey: &good}, 1)
	must(t, err)
	if res.Moved != 1 || res.Err != nil {
		t.Fatalf("move of one: %+v", res)
	}
	if got := getBodies(t, ch, "c-dest"); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("c-dest after the move: %q, want a", got)
	}
	if got := getBodies(t, ch, "orders"); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("orders after the move: %q, want b", got)
	}
}
