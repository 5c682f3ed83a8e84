package integration

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestE2EBindingDeletedWithDestination is issue 11 item 7: two sources
// bound to one exchange with the same key (amq.topic -> d and amq.direct
// -> d), d deleted and declared again. Both bindings must be gone, as in
// RabbitMQ: not listed, not routing, and not back after a restart. Warren
// kept the destination's inbound bindings by (destination, key,
// arguments), so the second binding replaced the first there and deleting
// d left amq.topic -> d behind, listed and, after a restart, routing.
func TestE2EBindingDeletedWithDestination(t *testing.T) {
	eachMgmtTarget(t, func(t *testing.T, tg *mgmtTarget) {
		vh := tg.freshVhost(t)
		c := tg.dial(t, vh, "hD-e2e")
		ch := openChannel(t, c)
		d, q := "hD-e2e-d", "hD-e2e-q"
		declare := func(ch *amqp.Channel) {
			t.Helper()
			if err := ch.ExchangeDeclare(d, "fanout", true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
			if err := ch.QueueBind(q, "", d, false, nil); err != nil {
				t.Fatal(err)
			}
		}
		declare(ch)
		for _, src := range []string{"amq.topic", "amq.direct"} {
			if err := ch.ExchangeBind(d, "k", src, false, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := ch.ExchangeDelete(d, false, false); err != nil {
			t.Fatal(err)
		}
		declare(ch)

		// checks runs on a channel of a live connection: nothing is bound
		// to d, and a message published to either source with key k does
		// not reach q.
		checks := func(ch *amqp.Channel, when string) {
			t.Helper()
			if bs, ok := tg.getJSON("/api/exchanges/" + esc(vh) + "/" + esc(d) + "/bindings/destination").([]any); !ok || len(bs) != 0 {
				t.Errorf("[%s] %s: bindings with destination %s: %v, want none", tg.kind, when, d, bs)
			}
			for _, src := range []string{"amq.topic", "amq.direct"} {
				if err := ch.Publish(src, "k", false, false, amqp.Publishing{Body: []byte(src)}); err != nil {
					t.Fatal(err)
				}
			}
			// A marker through d itself shows the path to q works and
			// that anything routed before it has arrived.
			if err := ch.Publish(d, "", false, false, amqp.Publishing{Body: []byte("marker")}); err != nil {
				t.Fatal(err)
			}
			var got []string
			waitFor(t, "the marker in "+q, func() bool {
				m, ok, err := ch.Get(q, true)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					got = append(got, string(m.Body))
				}
				return ok && string(m.Body) == "marker"
			})
			if len(got) != 1 {
				t.Errorf("[%s] %s: %s received %q, want only the marker", tg.kind, when, q, got)
			}
		}
		checks(ch, "after re-declaring d")

		if tg.w == nil {
			return
		}
		tg.w.Restart()
		c2 := tg.dial(t, vh, "hD-e2e-2")
		checks(openChannel(t, c2), "after a restart")
	})
}
