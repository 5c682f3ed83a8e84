package integration

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/warrentest"
)

// A return kind: how a consumer gives a message back to its queue. take
// starts one delivery of the queue's message; give returns it.
type returnKind struct {
	name string
	// quorumCounts says whether RabbitMQ 4.3's quorum rule counts this
	// kind toward the delivery limit (R5.3): only failed deliveries do.
	quorumCounts bool
	// round delivers the queue's message once, checks it with check, and
	// gives it back the way this kind does.
	round func(t *testing.T, e *env, q string, check func(amqp.Delivery))
}

// returnKinds are every way a message goes back to its queue with
// requeue (R5.1): basic.nack and basic.reject with requeue, basic.recover
// with requeue, a channel or connection closing with the message unacked,
// and basic.cancel (which leaves the message unacked on its channel, as in
// RabbitMQ, until the channel closes).
func returnKinds() []returnKind {
	// consumerRound returns a round on one long-lived consumer: the
	// consumer is started at the first round and kept.
	consumerRound := func(give func(t *testing.T, ch *amqp.Channel, d amqp.Delivery)) func(*testing.T, *env, string, func(amqp.Delivery)) {
		var ch *amqp.Channel
		var ds <-chan amqp.Delivery
		return func(t *testing.T, e *env, q string, check func(amqp.Delivery)) {
			t.Helper()
			if ch == nil {
				ch = e.channel()
				ds = consume(t, ch, q, "", false, nil)
			}
			d := recv(t, ds)
			check(d)
			give(t, ch, d)
		}
	}
	return []returnKind{
		{name: "nack-requeue", round: consumerRound(func(t *testing.T, _ *amqp.Channel, d amqp.Delivery) {
			if err := d.Nack(false, true); err != nil { // the seed's basicNack(tag, false, true)
				t.Fatal(err)
			}
		})},
		{name: "reject-requeue", quorumCounts: true, round: consumerRound(func(t *testing.T, _ *amqp.Channel, d amqp.Delivery) {
			if err := d.Reject(true); err != nil {
				t.Fatal(err)
			}
		})},
		{name: "recover-requeue", round: consumerRound(func(t *testing.T, ch *amqp.Channel, _ amqp.Delivery) {
			if err := ch.Recover(true); err != nil {
				t.Fatal(err)
			}
		})},
		{name: "channel-close", quorumCounts: true, round: func(t *testing.T, e *env, q string, check func(amqp.Delivery)) {
			t.Helper()
			c := e.dial()
			ch := openChannel(t, c)
			check(recv(t, consume(t, ch, q, "", false, nil)))
			if err := ch.Close(); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "connection-close", quorumCounts: true, round: func(t *testing.T, e *env, q string, check func(amqp.Delivery)) {
			t.Helper()
			c := e.dial()
			check(recv(t, consume(t, openChannel(t, c), q, "", false, nil)))
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "cancel", quorumCounts: true, round: func(t *testing.T, e *env, q string, check func(amqp.Delivery)) {
			t.Helper()
			c := e.dial()
			ch := openChannel(t, c)
			check(recv(t, consume(t, ch, q, "hF-ctag", false, nil)))
			if err := ch.Cancel("hF-ctag", false); err != nil {
				t.Fatal(err)
			}
			// basic.cancel leaves the delivery unacked on the channel
			// (RabbitMQ does the same): nothing is ready yet.
			if n, _ := counts(t, e.channel(), q); n != 0 {
				t.Fatalf("after basic.cancel %d ready, want 0 (the delivery stays unacked)", n)
			}
			if err := ch.Close(); err != nil { // now it is returned, counted once
				t.Fatal(err)
			}
		}},
	}
}

// checkCounts returns a check for the i-th delivery (0-based) of a message
// that has been returned i times, counted times of which counted toward the
// delivery limit: x-delivery-count is absent until the first counted
// return and then equals the counted returns; x-acquired-count counts every
// return (R5.3).
func checkCounts(t *testing.T, i int, counted int) func(amqp.Delivery) {
	return func(d amqp.Delivery) {
		t.Helper()
		if string(d.Body) != "poison" {
			t.Fatalf("delivery %d: body %q, want poison", i+1, d.Body)
		}
		dc, has := d.Headers["x-delivery-count"]
		switch {
		case counted == 0 && has:
			t.Errorf("delivery %d: x-delivery-count %v before any counted return", i+1, dc)
		case counted > 0 && dc != int64(counted):
			t.Errorf("delivery %d: x-delivery-count %#v, want %d", i+1, dc, counted)
		}
		if i > 0 {
			if !d.Redelivered {
				t.Errorf("delivery %d: redelivered=false", i+1)
			}
			if ac := d.Headers["x-acquired-count"]; ac != int64(i) {
				t.Errorf("delivery %d: x-acquired-count %#v, want %d", i+1, ac, i)
			}
		}
	}
}

// wantDeliveryLimitDeath checks the dead-lettered message in dlq: x-death
// as R3.4 writes it for reason delivery_limit (R3.1), the first/last death
// headers (R3.5), no count headers carried over, redelivered=false (R3.10).
func wantDeliveryLimitDeath(t *testing.T, ch *amqp.Channel, q, dlx, dlq string) {
	t.Helper()
	d := getOne(t, ch, dlq)
	if string(d.Body) != "poison" || d.Redelivered {
		t.Errorf("dead letter: body %q redelivered %v, want poison, false", d.Body, d.Redelivered)
	}
	if d.Exchange != dlx || d.RoutingKey != "k" {
		t.Errorf("dead letter arrived via %q/%q, want %q/k (R3.3)", d.Exchange, d.RoutingKey, dlx)
	}
	if deaths, _ := d.Headers["x-death"].([]any); len(deaths) != 1 {
		t.Fatalf("x-death: %#v, want one entry", d.Headers["x-death"])
	}
	x := death(t, d, 0)
	wantDeath(t, x, map[string]any{"queue": q, "reason": "delivery_limit", "count": int64(1),
		"exchange": "", "routing-keys": []any{q}})
	if _, ok := x["time"].(time.Time); !ok {
		t.Errorf("x-death.time: %#v, want a timestamp", x["time"])
	}
	for k, v := range map[string]any{"x-first-death-queue": q, "x-first-death-reason": "delivery_limit",
		"x-first-death-exchange": "", "x-last-death-queue": q, "x-last-death-reason": "delivery_limit",
		"x-last-death-exchange": ""} {
		if d.Headers[k] != v {
			t.Errorf("%s: %#v, want %#v", k, d.Headers[k], v)
		}
	}
	for _, k := range []string{"x-delivery-count", "x-acquired-count"} {
		if v, has := d.Headers[k]; has {
			t.Errorf("dead letter carries %s %v", k, v)
		}
	}
}

// TestClassicDeliveryLimitCountsEveryReturn: issue 11 item 15. On a
// classic queue with x-delivery-limit N (Warren's extension of R5.3, R1.8),
// every return counts, whatever its kind: the loop ends after N+1
// deliveries with the message dead-lettered, reason delivery_limit (R3.1),
// x-death as R3.4/R3.5 say, and each redelivery's x-delivery-count is the
// number of returns so far. The seed's poison handler,
// basicNack(tag, false, true), is the first case: under the quorum rule it
// spun forever.
func TestClassicDeliveryLimitCountsEveryReturn(t *testing.T) {
	const limit = 3
	for _, k := range returnKinds() {
		t.Run(k.name, func(t *testing.T) {
			e := newEnv(t)
			e.warren()
			ch := e.channel()
			dlx, dlq := dlxTopology(t, e, ch, "k")
			q := e.queue(ch, e.name("hF-classic"), amqp.Table{"x-delivery-limit": int32(limit),
				"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "k"})
			publishBody(t, ch, "", q, "poison")
			for i := 0; i <= limit; i++ {
				k.round(t, e, q, checkCounts(t, i, i))
			}
			e.waitMessages(dlq, 1)
			e.waitMessages(q, 0)
			wantDeliveryLimitDeath(t, ch, q, dlx, dlq)
			st := e.w.Broker().VHost("/").Queue(q).Stats()
			if st.Unacked != 0 || st.Ready != 0 {
				t.Errorf("source queue still holds ready %d unacked %d", st.Ready, st.Unacked)
			}
		})
	}
}

// TestQuorumDeliveryLimitKeepsFailedOnlyRule: issue 11 item 15 leaves
// quorum queues on RabbitMQ 4.3's rule (R5.3): basic.reject with requeue
// and a lost channel or connection count toward the limit (and so end the
// loop after N+1 deliveries); basic.nack with requeue and basic.recover
// do not, and never add x-delivery-count.
func TestQuorumDeliveryLimitKeepsFailedOnlyRule(t *testing.T) {
	const limit = 2
	for _, k := range returnKinds() {
		t.Run(k.name, func(t *testing.T) {
			e := newEnv(t)
			e.warren()
			ch := e.channel()
			dlx, dlq := dlxTopology(t, e, ch, "k")
			q := declareDurable(t, e, ch, e.name("hF-qq"), quorumArgs(amqp.Table{"x-delivery-limit": int32(limit),
				"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "k"}))
			publishBody(t, ch, "", q, "poison")
			if k.quorumCounts {
				for i := 0; i <= limit; i++ {
					k.round(t, e, q, checkCounts(t, i, i))
				}
				e.waitMessages(dlq, 1)
				e.waitMessages(q, 0)
				wantDeliveryLimitDeath(t, ch, q, dlx, dlq)
				return
			}
			for i := 0; i < limit+3; i++ {
				k.round(t, e, q, checkCounts(t, i, 0))
			}
			// Still there (redelivered to the consumer or ready), nothing
			// dead-lettered.
			st := e.w.Broker().VHost("/").Queue(q).Stats()
			if st.Ready+st.Unacked != 1 {
				t.Errorf("quorum queue holds ready %d unacked %d, want the message", st.Ready, st.Unacked)
			}
			if n, _ := counts(t, ch, dlq); n != 0 {
				t.Errorf("%s dead-lettered on a quorum queue: DLQ holds %d", k.name, n)
			}
		})
	}
}

// TestClassicDeliveryCountSurvivesRestart: issue 11 item 15, R5.3. The
// counted returns of a persistent message in a durable classic queue are
// on disk: after a restart its x-delivery-count goes on from where it was,
// including the return of a message a consumer still held when the broker
// stopped (its connection was lost), and the nack loop still ends at the
// limit.
func TestClassicDeliveryCountSurvivesRestart(t *testing.T) {
	const limit = 4
	b := warrentest.Start(t)
	_, ch := rsDial(t, b.URL())
	rsCheck(t, "confirm", ch.Confirm(false))
	durableDLQ(t, ch, "hF-rs.dlx", "hF-rs.dlq")
	rsCheck(t, "declare", declareQ(ch, "hF-rs.q", true, amqp.Table{"x-delivery-limit": int32(limit),
		"x-dead-letter-exchange": "hF-rs.dlx"}))
	rmPublish(t, ch, "", "hF-rs.q", amqp.Publishing{Body: []byte("poison")})
	delivery := 0
	nack := func(ch *amqp.Channel) {
		t.Helper()
		d, ok := rmGet(t, ch, "hF-rs.q")
		if !ok {
			t.Fatalf("delivery %d: queue empty", delivery+1)
		}
		checkCounts(t, delivery, delivery)(d)
		delivery++
		rsCheck(t, "nack", d.Nack(false, true))
	}
	nack(ch)
	nack(ch)
	// The third delivery is still unacked when the broker stops.
	d, ok := rmGet(t, ch, "hF-rs.q")
	if !ok {
		t.Fatal("delivery 3: queue empty")
	}
	checkCounts(t, delivery, delivery)(d)
	delivery++
	b.Restart()
	_, ch = rsDial(t, b.URL())
	for delivery <= limit {
		nack(ch)
	}
	waitCount(t, ch, "hF-rs.dlq", 1)
	if n, _ := counts(t, ch, "hF-rs.q"); n != 0 {
		t.Errorf("source queue holds %d messages after the limit", n)
	}
	d, ok = rmGet(t, ch, "hF-rs.dlq")
	if !ok {
		t.Fatal("DLQ empty")
	}
	wantDeath(t, death(t, d, 0), map[string]any{"queue": "hF-rs.q", "reason": "delivery_limit", "count": int64(1)})
	if delivery != limit+1 {
		t.Errorf("%d deliveries, want %d", delivery, limit+1)
	}
}

// TestClassicDeliveryLimitCountsManagementGet: issue 11 item 15. The
// management API's get with a requeue ackmode is a delivery and a return
// like any other, so on a classic queue with x-delivery-limit each one
// counts (R5.3, Warren's extension): the limit+1-th get dead-letters the
// message (R3.1), and the gets in between show x-delivery-count.
func TestClassicDeliveryLimitCountsManagementGet(t *testing.T) {
	const limit = 2
	for _, mode := range []string{"ack_requeue_true", "reject_requeue_true"} {
		t.Run(mode, func(t *testing.T) {
			tg := newMgmtWarren(t)
			e := &env{t: t, url: tg.amqpURL, w: tg.w}
			ch := e.channel()
			dlx, dlq := dlxTopology(t, e, ch, "k")
			q := e.queue(ch, e.name("hF-mget"), amqp.Table{"x-delivery-limit": int32(limit),
				"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "k"})
			publishBody(t, ch, "", q, "poison")
			for i := 0; i <= limit; i++ {
				r := tg.must("POST", "/api/queues/%2F/"+esc(q)+"/get",
					map[string]any{"count": 1, "ackmode": mode, "encoding": "auto"}, 200)
				msgs, _ := r.json(t).([]any)
				if len(msgs) != 1 {
					t.Fatalf("get %d: %s, want one message", i+1, r)
				}
				props, _ := msgs[0].(map[string]any)["properties"].(map[string]any)
				headers, _ := props["headers"].(map[string]any)
				dc, has := headers["x-delivery-count"]
				if i == 0 && has || i > 0 && dc != float64(i) {
					t.Errorf("get %d: x-delivery-count %v, want %d (absent at first)", i+1, dc, i)
				}
			}
			e.waitMessages(dlq, 1)
			e.waitMessages(q, 0)
			wantDeath(t, death(t, getOne(t, ch, dlq), 0), map[string]any{"queue": q, "reason": "delivery_limit"})
		})
	}
}
