package integration

import (
	"math"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/amqp"
)

// nonFiniteValues are the field values RabbitMQ 3.10 cannot parse: float
// ('f') and double ('d') NaN and infinities, at top level and nested.
var nonFiniteValues = []struct {
	name string
	v    any
}{
	{"dNaN", math.NaN()}, {"dInf", math.Inf(1)}, {"dNegInf", math.Inf(-1)},
	{"fNaN", float32(math.NaN())}, {"fInf", float32(math.Inf(1))}, {"fNegInf", float32(math.Inf(-1))},
	{"nestedTable", amqp.Table{"a": amqp.Table{"b": math.NaN()}}}, {"nestedArray", []any{int32(1), []any{float32(math.Inf(1))}}},
}

// TestNonFiniteFloats is issue 11 item 1: one queue.declare (durable) with
// a NaN argument panicked Warren while persisting the definition, and the
// process exited. Sent as raw frames to Warren and RabbitMQ 3.10 in
// method arguments (queue.declare durable, exchange.declare,
// queue.bind, basic.consume, connection.start-ok client properties) and in
// the headers of publishes (to a queue, through a headers exchange, and
// to a queue that would dead-letter the message at once).
//
// RabbitMQ: in method arguments its reader crashes and resets the
// socket (start-ok: closed after 3 s); Warren answers 501 "cannot
// decode" naming the method (allowed difference, as for an unknown
// field type). In headers both close the connection with a bare 541
// INTERNAL_ERROR and route nothing. Either way only that connection ends:
// a healthy connection keeps working, and on Warren nothing was stored
// (after a restart the queues do not exist).
func TestNonFiniteFloats(t *testing.T) {
	t.Parallel()
	warren := newWarrenTarget(t)
	targets := []*target{warren}
	if u := rabbitURL(t); u != "" {
		targets = append(targets, newRabbitTarget(t, u))
	}
	for _, tg := range targets {
		t.Run(tg.kind, func(t *testing.T) {
			tg.prefix = "hD-nf-" + randomSuffix()
			h := newHealthy(t, tg.url)
			// Fixtures: a headers exchange bound to a queue, and a queue that
			// dead-letters everything to it at once.
			hx, hq, dq := tg.name("hx"), tg.name("hq"), tg.name("dq")
			must(t, h.ch.ExchangeDeclare(hx, "headers", false, true, false, false, nil))
			_, err := h.ch.QueueDeclare(hq, false, false, false, false, nil)
			must(t, err)
			t.Cleanup(func() {
				if c, err := amqp091.Dial(tg.url); err == nil {
					if ch, err := c.Channel(); err == nil {
						_, _ = ch.QueueDelete(hq, false, false, false)
					}
					c.Close()
				}
			})
			must(t, h.ch.QueueBind(hq, "", hx, false, amqp091.Table{"x-match": "any", "h": "v"}))
			_, err = h.ch.QueueDeclare(dq, false, false, true, false, amqp091.Table{"x-message-ttl": int32(0), "x-dead-letter-exchange": hx})
			must(t, err)

			for _, nf := range nonFiniteValues {
				args := amqp.Table{"x-hd": nf.v}
				methods := []amqp.Method{
					&amqp.QueueDeclare{Queue: tg.name("q-" + nf.name), Durable: true, Arguments: args},
					&amqp.ExchangeDeclare{Exchange: tg.name("x-" + nf.name), Type: "direct", Durable: true, Arguments: args},
					&amqp.QueueBind{Queue: hq, Exchange: "amq.direct", RoutingKey: "k", Arguments: args},
					&amqp.BasicConsume{Queue: hq, Arguments: args},
				}
				for _, m := range methods {
					c := rawDial(t, tg.addr)
					must(t, c.handshake(0, 0))
					must(t, c.openChannel(1))
					must(t, c.sendMethod(1, m))
					got := c.awaitClose()
					checkNonFiniteClose(t, tg, nf.name+" "+m.Name(), got, m.ClassID(), m.MethodID())
				}
				for _, dst := range []struct{ exchange, key string }{{"", hq}, {hx, ""}, {"", dq}} {
					c := rawDial(t, tg.addr)
					must(t, c.handshake(0, 0))
					must(t, c.openChannel(1))
					b := amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{Exchange: dst.exchange, RoutingKey: dst.key})
					b = amqp.AppendHeaderFrame(b, 1, 60, 2, &amqp.Properties{Flags: amqp.FlagHeaders, Headers: amqp.Table{"h": "v", "x-hd": nf.v}})
					b = amqp.AppendBodyFrames(b, 1, []byte("nf"), 4096)
					must(t, c.write(b))
					if got, want := c.awaitClose().String(), `connection.close 541 "INTERNAL_ERROR" (0.0)`; got != want {
						t.Errorf("[%s] %s publish to %q/%q: got %s, want %s", tg.kind, nf.name, dst.exchange, dst.key, got, want)
					}
				}
				h.check(t)
			}
			// connection.start-ok (once: RabbitMQ takes 3 s to drop it).
			c := rawDial(t, tg.addr)
			must(t, c.write(amqp.ProtocolHeader))
			if _, _, err := c.readMethod(); err != nil {
				t.Fatal(err)
			}
			must(t, c.sendMethod(0, &amqp.ConnectionStartOk{ClientProperties: amqp.Table{"product": "hD", "x-hd": math.NaN()},
				Mechanism: "PLAIN", Response: "\x00guest\x00guest", Locale: "en_US"}))
			c.nc.SetReadDeadline(time.Now().Add(8 * time.Second))
			res := closeResult{Level: "dropped"}
			if _, m, err := c.readMethod(); err == nil {
				if cc, ok := m.(*amqp.ConnectionClose); ok {
					res = closeResult{Level: "connection", Code: cc.ReplyCode, Text: cc.ReplyText, Class: cc.FailingClassID, Method: cc.FailingMethodID}
				} else {
					res.Level = "unexpected " + m.Name()
				}
			} else {
				res.Err = err
			}
			checkNonFiniteClose(t, tg, "connection.start-ok", res, 10, 11)

			if n, _ := counts(t, h.ch, hq); n != 0 {
				t.Errorf("[%s] %d messages routed to %s, want none", tg.kind, n, hq)
			}
			h.check(t)
			if tg.warren == nil {
				return
			}
			tg.warren.Restart()
			h = newHealthy(t, tg.url)
			h.check(t)
			for _, nf := range nonFiniteValues {
				for _, n := range []string{"q-", "x-"} {
					if tg.warren.Broker().VHost("/").Queue(tg.name(n+nf.name)) != nil || tg.warren.Broker().VHost("/").Exchange(tg.name(n+nf.name)) != nil {
						t.Errorf("%s exists after a restart", tg.name(n+nf.name))
					}
				}
			}
		})
	}
}

// checkNonFiniteClose checks how a broker ended a connection that sent a
// non-finite float in method arguments.
func checkNonFiniteClose(t *testing.T, tg *target, what string, got closeResult, class, method uint16) {
	t.Helper()
	if tg.kind == "rabbitmq" {
		if got.String() != "dropped" {
			t.Errorf("[rabbitmq] %s: got %s, want the socket dropped", what, got)
		}
		return
	}
	if got.Level != "connection" || got.Code != amqp.FrameError || !strings.HasPrefix(got.Text, "FRAME_ERROR - cannot decode <<") ||
		got.Class != class || got.Method != method {
		t.Errorf("[warren] %s: got %s, want connection.close 501 cannot decode (%d.%d)", what, got, class, method)
	}
}
