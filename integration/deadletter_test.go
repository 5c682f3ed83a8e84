package integration

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

// R5.2, R3.1, R3.3, R3.4: nack without requeue dead-letters the message
// with reason rejected to the DLX under the dead-letter routing key; the
// DLQ consumer sees exchange = DLX and routing key = DLRK, and x-death as
// RabbitMQ writes it. This is the seed chapter's orders.work topology.
func TestRejectToDeadLetterQueue(t *testing.T) {
	b := warrentest.Start(t)
	conn, err := amqp.Dial(b.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ch.ExchangeDeclare("orders.dlx", "direct", true, false, false, false, nil))
	_, err = ch.QueueDeclare("orders.dlq", true, false, false, false, nil)
	must(err)
	must(ch.QueueBind("orders.dlq", "failed", "orders.dlx", false, nil))
	_, err = ch.QueueDeclare("orders.work", true, false, false, false, amqp.Table{
		"x-dead-letter-exchange": "orders.dlx", "x-dead-letter-routing-key": "failed"})
	must(err)
	must(ch.PublishWithContext(context.Background(), "", "orders.work", false, false, amqp.Publishing{
		Body: []byte(`{"orderId":"m-1"}`), Expiration: "60000", Headers: amqp.Table{"app": "shop"}}))
	d, ok, err := ch.Get("orders.work", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	must(d.Nack(false, false))
	var dl amqp.Delivery
	if !testutil.Until(5*time.Second, func() bool {
		dl, ok, err = ch.Get("orders.dlq", true)
		must(err)
		return ok
	}) {
		t.Fatal("no dead letter in orders.dlq")
	}
	if dl.Exchange != "orders.dlx" || dl.RoutingKey != "failed" || dl.Redelivered {
		t.Errorf("got exchange %q key %q redelivered %v, want orders.dlx failed false (R3.3, R3.10)", dl.Exchange, dl.RoutingKey, dl.Redelivered)
	}
	if dl.Expiration != "" {
		t.Errorf("expiration %q kept, want removed (R2.6)", dl.Expiration)
	}
	deaths, ok := dl.Headers["x-death"].([]any)
	if !ok || len(deaths) != 1 {
		t.Fatalf("x-death: got %#v", dl.Headers["x-death"])
	}
	e := deaths[0].(amqp.Table)
	want := map[string]any{"reason": "rejected", "count": int64(1), "queue": "orders.work", "exchange": "", "original-expiration": "60000"}
	for k, v := range want {
		if e[k] != v {
			t.Errorf("x-death[0].%s: got %#v, want %#v", k, e[k], v)
		}
	}
	if keys, _ := e["routing-keys"].([]any); len(keys) != 1 || keys[0] != "orders.work" {
		t.Errorf("x-death[0].routing-keys: got %#v, want [orders.work]", e["routing-keys"])
	}
	if _, ok := e["time"].(time.Time); !ok {
		t.Errorf("x-death[0].time: got %T, want a timestamp", e["time"])
	}
	if dl.Headers["app"] != "shop" || dl.Headers["x-first-death-reason"] != "rejected" || dl.Headers["x-last-death-queue"] != "orders.work" {
		t.Errorf("headers: %v", dl.Headers)
	}
}

// R3.2: a dead-letter exchange that does not exist drops the message silently.
func TestRejectToMissingDeadLetterExchange(t *testing.T) {
	b := warrentest.Start(t)
	conn, err := amqp.Dial(b.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	if _, err := ch.QueueDeclare("src", false, false, false, false, amqp.Table{"x-dead-letter-exchange": "nowhere"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(context.Background(), "", "src", false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	d, ok, err := ch.Get("src", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if err := d.Reject(false); err != nil {
		t.Fatal(err)
	}
	// The channel stays usable and the queue is empty.
	q, err := ch.QueueDeclarePassive("src", false, false, false, false, nil)
	if err != nil || q.Messages != 0 {
		t.Fatalf("got %d messages, err %v; want 0, nil", q.Messages, err)
	}
}

// R3.12: dead-letter targets may be classic or quorum queues, and every
// queue counts what it dead-lettered and dropped, by reason (the metrics
// issue exports these as RabbitMQ's messages_dead_lettered_*_total).
func TestDeadLetterCountersAndQuorumTarget(t *testing.T) {
	e, clk := fakeEnv(t)
	ch := e.channel()
	dlx := e.exchange(ch, e.name("dlx"), "fanout", nil)
	classic := e.queue(ch, e.name("dlq-classic"), nil)
	quorum := declareDurable(t, e, ch, e.name("dlq-quorum"), quorumArgs(nil))
	bind(t, ch, classic, "", dlx, nil)
	bind(t, ch, quorum, "", dlx, nil)
	q := e.queue(ch, e.name("src"), amqp.Table{"x-dead-letter-exchange": dlx, "x-max-length": int32(1), "x-message-ttl": int32(1000)})
	noDLX := e.queue(ch, e.name("nodlx"), amqp.Table{"x-max-length": int32(1)})
	publishBody(t, ch, "", q, "maxlen-victim")
	publishBody(t, ch, "", q, "rejected")
	d := getOne2(t, ch, q)
	d.Reject(false)
	e.waitMessages(classic, 2)
	publishBody(t, ch, "", q, "expires")
	clk.Advance(time.Second)
	e.waitMessages(classic, 3)
	e.waitMessages(quorum, 3)
	publishBody(t, ch, "", noDLX, "x")
	publishBody(t, ch, "", noDLX, "y")
	st := e.w.Broker().VHost("/").Queue(q).Stats()
	for _, r := range []string{"maxlen", "rejected", "expired"} {
		if st.DeadLettered[r] != 1 {
			t.Errorf("dead-lettered %s: got %d, want 1", r, st.DeadLettered[r])
		}
	}
	if got := e.w.Broker().VHost("/").Queue(noDLX).Stats().Dropped["maxlen"]; got != 1 {
		t.Errorf("dropped maxlen without DLX: got %d, want 1", got)
	}
}

// getOne2 takes one message with basic.get and manual ack.
func getOne2(t *testing.T, ch *amqp.Channel, queue string) amqp.Delivery {
	t.Helper()
	d, ok, err := ch.Get(queue, false)
	if err != nil || !ok {
		t.Fatalf("basic.get %s: got ok=%v err=%v, want a message", queue, ok, err)
	}
	return d
}
