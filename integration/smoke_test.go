package integration

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/warrentest"
)

func TestPublishConsumeAck(t *testing.T) {
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
	q, err := ch.QueueDeclare("", false, false, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 10))
	for i := 0; i < 3; i++ {
		if err := ch.PublishWithContext(context.Background(), "", q.Name, false, false, amqp.Publishing{Body: []byte{byte('a' + i)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 3; i++ {
		c := <-confirms
		if !c.Ack || c.DeliveryTag != uint64(i) {
			t.Fatalf("confirm %d: got %+v", i, c)
		}
	}
	msgs, err := ch.Consume(q.Name, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		select {
		case d := <-msgs:
			if string(d.Body) != string(rune('a'+i)) {
				t.Fatalf("got body %q, want %q", d.Body, string(rune('a'+i)))
			}
			d.Ack(false)
		case <-time.After(5 * time.Second):
			t.Fatal("timeout")
		}
	}
}
