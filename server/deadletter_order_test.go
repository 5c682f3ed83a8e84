package server_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/server"
)

// TestRejectThenDeclareDLX (R3.2): a channel's methods take effect in
// order. A message rejected while its queue's dead-letter exchange does
// not exist is dropped, even when the same channel declares that exchange
// and a queue bound to it right after the reject and the queue's flusher
// (which routes dead letters off the reader, broker/dlflush.go) has not
// run yet: the declare waits for it. RabbitMQ's queue process routes the
// dead letter before the channel's next method, so its DLQ stays empty
// too (TestDLXDifferential/dead_letter_missing_exchange). The message
// rejected after the declare does reach the DLQ.
func TestRejectThenDeclareDLX(t *testing.T) {
	s := startServer(t, server.Config{})
	c := dial(t, s)
	ch := channel(t, c)
	if _, err := ch.QueueDeclare("src", false, false, false, false, amqp.Table{
		"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "k"}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := ch.PublishWithContext(context.Background(), "", "src", false, false, amqp.Publishing{Body: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	q := s.Broker().VHost("/").Queue("src")
	held, release := make(chan struct{}), make(chan struct{})
	first := true
	q.SetDeadLetterHookForTest(func() {
		if first {
			first = false
			close(held)
			<-release
		}
	})
	defer q.SetDeadLetterHookForTest(nil)

	d1, ok, err := ch.Get("src", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if err := d1.Reject(false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held: // the flusher took the dead letter and waits
	case <-time.After(10 * time.Second):
		t.Fatal("the reject was not dead-lettered")
	}
	declared := make(chan error, 1)
	go func() {
		if err := ch.ExchangeDeclare("dlx", "direct", false, false, false, false, nil); err != nil {
			declared <- err
			return
		}
		if _, err := ch.QueueDeclare("dlq", false, false, false, false, nil); err != nil {
			declared <- err
			return
		}
		declared <- ch.QueueBind("dlq", "k", "dlx", false, nil)
	}()
	select {
	case err := <-declared:
		t.Fatalf("exchange.declare answered (%v) before the earlier reject was dead-lettered", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-declared; err != nil {
		t.Fatal(err)
	}
	d2, ok, err := ch.Get("src", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if err := d2.Reject(false); err != nil {
		t.Fatal(err)
	}
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		d, ok, err := ch.Get("dlq", true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got = append(got, string(d.Body))
			continue
		}
		if len(got) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(got) != 1 || got[0] != string([]byte{1}) {
		t.Fatalf("dlq holds %q, want only the second message (the first was rejected before the DLX existed)", got)
	}
}
