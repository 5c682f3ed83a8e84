package integration

import (
	"context"
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// R3.11: dead letters arrive in the order they left their queue, also when
// a batch mixes persistent messages (moved atomically through the store,
// visible in the DLQ only after an fsync) with transient ones (routed at
// once). Runs against RabbitMQ with WARREN_DIFF_URL.
func TestDeadLetterOrderMixedPersistence(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	work, dlq := e.name("mix-work"), e.name("mix-dlq")
	for _, q := range []struct {
		name string
		args amqp.Table
	}{{dlq, nil}, {work, amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}}} {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			t.Fatal(err)
		}
		e.cleanupQueue(q.name)
	}
	bodies := []string{"p1", "t2", "p3", "t4", "t5", "p6"}
	for _, b := range bodies {
		mode := amqp.Transient
		if b[0] == 'p' {
			mode = amqp.Persistent
		}
		if err := ch.PublishWithContext(context.Background(), "", work, false, false,
			amqp.Publishing{DeliveryMode: mode, Body: []byte(b)}); err != nil {
			t.Fatal(err)
		}
	}
	var last amqp.Delivery
	for range bodies {
		d, ok, err := ch.Get(work, false)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		last = d
	}
	if err := last.Nack(true, false); err != nil {
		t.Fatal(err)
	}
	e.waitMessages(dlq, len(bodies))
	var got []string
	for range bodies {
		d, ok, err := ch.Get(dlq, true)
		if err != nil || !ok {
			t.Fatalf("get from the DLQ: %v %v", ok, err)
		}
		got = append(got, string(d.Body))
	}
	if fmt.Sprint(got) != fmt.Sprint(bodies) {
		t.Fatalf("DLQ order %v, want %v", got, bodies)
	}
}
