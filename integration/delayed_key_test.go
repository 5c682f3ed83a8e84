package integration

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestDelayedLogNotTakenByQueue is issue 11 item 3 (names of any bytes
// through a restart): the message store keyed a delayed exchange's log
// as vhost + NUL + "exchange" NUL + name, which is also the key of a
// durable queue named "exchange\x00" + name. At a restart that queue took
// both logs and removed the delayed exchange's as its own older
// incarnation: the held message was lost. Both must keep their messages.
func TestDelayedLogNotTakenByQueue(t *testing.T) {
	tg := newMgmtWarren(t)
	c := tg.dial(t, "/", "hD-delayed")
	ch := openChannel(t, c)
	x, dst := "hD-dx", "hD-dx-dst"
	q := "exchange\x00" + x
	must(t, ch.ExchangeDeclare(x, "x-delayed-message", true, false, false, false, amqp.Table{"x-delayed-type": "direct"}))
	for _, n := range []string{dst, q} {
		if _, err := ch.QueueDeclare(n, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	must(t, ch.QueueBind(dst, "k", x, false, nil))
	must(t, ch.Confirm(false))
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 2))
	// The exchange's log is created first (the older one).
	must(t, ch.Publish(x, "k", false, false, amqp.Publishing{DeliveryMode: 2, Body: []byte("delayed"), Headers: amqp.Table{"x-delay": int32(1500)}}))
	must(t, ch.Publish("", q, false, false, amqp.Publishing{DeliveryMode: 2, Body: []byte("queued")}))
	for i := 0; i < 2; i++ {
		select {
		case cf := <-confirms:
			if !cf.Ack {
				t.Fatal("nacked")
			}
		case <-time.After(waitTimeout):
			t.Fatal("no confirm")
		}
	}
	tg.w.Restart()
	ch = openChannel(t, tg.dial(t, "/", "hD-delayed-2"))
	if m, ok, err := ch.Get(q, true); err != nil || !ok || string(m.Body) != "queued" {
		t.Errorf("queue %q after a restart: %q %v %v", q, m.Body, ok, err)
	}
	waitFor(t, "the delayed message in "+dst, func() bool {
		m, ok, err := ch.Get(dst, true)
		if err != nil {
			t.Fatal(err)
		}
		return ok && string(m.Body) == "delayed"
	})
}
