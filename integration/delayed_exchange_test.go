package integration

// The x-delayed-message exchange (rabbitmq-delayed-message-exchange
// compatible) over amqp091-go, with the broker on a fake clock.

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/internal/clock"
	"github.com/warrenmq/warren/warrentest"
)

// delayedEnv starts a broker on a fake clock.
func delayedEnv(t *testing.T) (*env, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	w := warrentest.Start(t, warrentest.WithClock(clk))
	return &env{t: t, url: w.URL(), w: w}, clk
}

// delayedExchange declares a delayed exchange routing as kind.
func (e *env) delayedExchange(ch *amqp.Channel, kind string) string {
	e.t.Helper()
	return e.exchange(ch, e.name("delayed"), "x-delayed-message", amqp.Table{"x-delayed-type": kind})
}

func (e *env) messagesDelayed(exchange string) int {
	e.t.Helper()
	x := e.warren().Broker().VHost("/").Exchange(exchange)
	if x == nil {
		e.t.Fatalf("no exchange %s", exchange)
	}
	return x.MessagesDelayed()
}

func TestDelayedExchangeDirect(t *testing.T) {
	e, clk := delayedEnv(t)
	ch := e.channel()
	x := e.delayedExchange(ch, "direct")
	q := e.queue(ch, "", nil)
	other := e.queue(ch, "", nil)
	bind(t, ch, q, "k", x, nil)
	bind(t, ch, other, "other", x, nil)
	ds := consume(t, ch, q, "", true, nil)

	// The confirm comes at publish: the exchange has taken the message.
	publish(t, ch, x, "k", amqp.Publishing{Body: []byte("later"), Headers: amqp.Table{"x-delay": int32(5000), "app": "kept"}})
	if n := e.messagesDelayed(x); n != 1 {
		t.Fatalf("messages delayed: got %d, want 1", n)
	}
	noRecv(t, ds)
	clk.Advance(4999 * time.Millisecond)
	noRecv(t, ds)
	clk.Advance(time.Millisecond)
	d := recv(t, ds)
	if string(d.Body) != "later" || d.Exchange != x || d.RoutingKey != "k" {
		t.Fatalf("got %q via %q/%q, want later via %q/k", d.Body, d.Exchange, d.RoutingKey, x)
	}
	if got := d.Headers["x-delay"]; got != int64(-5000) {
		t.Fatalf("x-delay on delivery: got %T(%v), want int64(-5000) as the plugin sets it", got, got)
	}
	if got := d.Headers["app"]; got != "kept" {
		t.Fatalf("app header: got %v, want kept", got)
	}
	if n, _ := counts(t, ch, other); n != 0 {
		t.Fatalf("queue bound with another key: got %d messages, want 0", n)
	}
	if n := e.messagesDelayed(x); n != 0 {
		t.Fatalf("messages delayed after delivery: got %d, want 0", n)
	}
}

func TestDelayedExchangeOrderAndImmediate(t *testing.T) {
	e, clk := delayedEnv(t)
	ch := e.channel()
	x := e.delayedExchange(ch, "fanout")
	q := e.queue(ch, "", nil)
	bind(t, ch, q, "", x, nil)
	ds := consume(t, ch, q, "", true, nil)
	for _, m := range []struct {
		body  string
		delay any
	}{{"3s", int32(3000)}, {"1s", "1000"}, {"2s", float64(2000.7)}, {"now", nil}, {"zero", int32(0)}, {"negative", int64(-10)}} {
		p := amqp.Publishing{Body: []byte(m.body)}
		if m.delay != nil {
			p.Headers = amqp.Table{"x-delay": m.delay}
		}
		publish(t, ch, x, "", p)
	}
	// Without a positive x-delay the message is routed at once, header unchanged.
	got := recvN(t, ds, 3)
	if b := bodies(got); b[0] != "now" || b[1] != "zero" || b[2] != "negative" {
		t.Fatalf("at once: got %v, want [now zero negative]", b)
	}
	if h := got[2].Headers["x-delay"]; h != int64(-10) {
		t.Fatalf("immediate message's x-delay: got %T(%v), want int64(-10)", h, h)
	}
	noRecv(t, ds)
	clk.Advance(3 * time.Second)
	if b := bodies(recvN(t, ds, 3)); b[0] != "1s" || b[1] != "2s" || b[2] != "3s" {
		t.Fatalf("after 3s: got %v, want [1s 2s 3s]", b)
	}
}

func TestDelayedExchangeTopic(t *testing.T) {
	e, clk := delayedEnv(t)
	ch := e.channel()
	x := e.delayedExchange(ch, "topic")
	q := e.queue(ch, "", nil)
	bind(t, ch, q, "orders.#", x, nil)
	ds := consume(t, ch, q, "", true, nil)
	publish(t, ch, x, "orders.eu.new", amqp.Publishing{Body: []byte("order"), Headers: amqp.Table{"x-delay": int32(1000)}})
	publish(t, ch, x, "users.new", amqp.Publishing{Body: []byte("user"), Headers: amqp.Table{"x-delay": int32(1000)}})
	publishBody(t, ch, x, "orders.now", "immediate")
	if d := recv(t, ds); string(d.Body) != "immediate" {
		t.Fatalf("at once: got %q, want immediate", d.Body)
	}
	noRecv(t, ds)
	clk.Advance(time.Second)
	d := recv(t, ds)
	if string(d.Body) != "order" || d.RoutingKey != "orders.eu.new" {
		t.Fatalf("after 1s: got %q with key %q, want order with orders.eu.new", d.Body, d.RoutingKey)
	}
	noRecv(t, ds)
}

// A mandatory delayed message is returned with NO_ROUTE at publish (it is
// routed to no queue yet) and still delivered when due, as with the plugin.
func TestDelayedExchangeMandatory(t *testing.T) {
	e, clk := delayedEnv(t)
	ch := e.channel()
	x := e.delayedExchange(ch, "direct")
	q := e.queue(ch, "", nil)
	bind(t, ch, q, "k", x, nil)
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1))
	err := ch.Publish(x, "k", true, false, amqp.Publishing{Body: []byte("m"), Headers: amqp.Table{"x-delay": int32(1000)}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-returns:
		if r.ReplyCode != amqp.NoRoute || r.ReplyText != "NO_ROUTE" {
			t.Fatalf("return: got %d %s, want 312 NO_ROUTE", r.ReplyCode, r.ReplyText)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no basic.return for a mandatory delayed message")
	}
	select {
	case c := <-confirms:
		if !c.Ack {
			t.Fatal("confirm: got nack, want ack")
		}
	case <-time.After(waitTimeout):
		t.Fatal("no confirm")
	}
	clk.Advance(time.Second)
	e.waitMessages(q, 1)
}

func TestDelayedExchangeDeclareErrors(t *testing.T) {
	e, _ := delayedEnv(t)
	for _, tc := range []struct {
		name   string
		args   amqp.Table
		code   int
		reason string
	}{
		{"missing", nil, amqp.PreconditionFailed, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing exchange type"},
		{"itself", amqp.Table{"x-delayed-type": "x-delayed-message"}, amqp.PreconditionFailed, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'"},
		{"unknown", amqp.Table{"x-delayed-type": "no-such-type"}, amqp.CommandInvalid, "COMMAND_INVALID - unknown exchange type 'no-such-type'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.dial()
			ch := openChannel(t, c)
			err := ch.ExchangeDeclare(e.name("bad"), "x-delayed-message", false, false, false, false, tc.args)
			wantCode(t, err, tc.code)
			if ae := err.(*amqp.Error); ae.Reason != tc.reason {
				t.Fatalf("reason: got %q, want %q", ae.Reason, tc.reason)
			}
		})
	}
}
