package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	wire "github.com/warrenmq/warren/amqp"
)

func publishN(t *testing.T, ch *amqp.Channel, queue string, n int) {
	t.Helper()
	for i := range n {
		publishBody(t, ch, "", queue, fmt.Sprint(i))
	}
}

func TestQosPerConsumer(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	pub := openChannel(t, c)
	q := e.queue(pub, "", nil)
	ch := openChannel(t, c)
	if err := ch.Qos(3, 0, false); err != nil {
		t.Fatal(err)
	}
	a := consume(t, ch, q, "a", false, nil)
	b := consume(t, ch, q, "b", false, nil)
	publishN(t, pub, q, 10)
	// Each consumer has its own limit of 3: 6 in flight, 4 ready.
	as, bs := recvN(t, a, 3), recvN(t, b, 3)
	noRecv(t, a)
	noRecv(t, b)
	if m, _ := counts(t, pub, q); m != 4 {
		t.Fatalf("got %d ready, want 4", m)
	}
	// Acking one of a's gives a exactly one more.
	as[0].Ack(false)
	recv(t, a)
	noRecv(t, a)
	noRecv(t, b)
	// Acking b's three frees 3 for b. (Tags are per channel, so a
	// multiple ack here would settle a's deliveries too.)
	for _, d := range bs {
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	recvN(t, b, 3)
	noRecv(t, b)
	if m, _ := counts(t, pub, q); m != 0 {
		t.Fatalf("got %d ready, want 0", m)
	}
}

func TestQosGlobal(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	pub := openChannel(t, c)
	q := e.queue(pub, "", nil)
	ch := openChannel(t, c)
	// A channel-wide limit of 4 shared by both consumers.
	if err := ch.Qos(4, 0, true); err != nil {
		t.Fatal(err)
	}
	a := consume(t, ch, q, "a", false, nil)
	b := consume(t, ch, q, "b", false, nil)
	publishN(t, pub, q, 10)
	got := recvEither(t, a, b, 4)
	noRecv(t, a)
	noRecv(t, b)
	// Ack two: exactly two more.
	got[0].Ack(false)
	got[1].Ack(false)
	recvEither(t, a, b, 2)
	noRecv(t, a)
	noRecv(t, b)
	if m, _ := counts(t, pub, q); m != 4 {
		t.Fatalf("got %d ready, want 4", m)
	}
}

// TestQosGlobalAndPerConsumer sets both limits: 4 for the channel, 3 per
// consumer. (RabbitMQ 3.10 was seen to deliver a fifth message here, so
// this one runs against Warren only.)
func TestQosGlobalAndPerConsumer(t *testing.T) {
	e := newEnv(t)
	e.warren()
	c := e.dial()
	pub := openChannel(t, c)
	q := e.queue(pub, "", nil)
	ch := openChannel(t, c)
	if err := ch.Qos(4, 0, true); err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(3, 0, false); err != nil {
		t.Fatal(err)
	}
	a := consume(t, ch, q, "a", false, nil)
	publishN(t, pub, q, 10)
	as := recvN(t, a, 3)
	noRecv(t, a)
	b := consume(t, ch, q, "b", false, nil)
	recv(t, b) // the channel's fourth
	noRecv(t, b)
	as[0].Ack(false)
	recvEither(t, a, b, 1)
	noRecv(t, a)
	noRecv(t, b)
	if m, _ := counts(t, pub, q); m != 5 {
		t.Fatalf("got %d ready, want 5", m)
	}
}

// recvEither waits for n deliveries from either a or b.
func recvEither(t *testing.T, a, b <-chan amqp.Delivery, n int) []amqp.Delivery {
	t.Helper()
	var out []amqp.Delivery
	timeout := time.After(waitTimeout)
	for len(out) < n {
		select {
		case d := <-a:
			out = append(out, d)
		case d := <-b:
			out = append(out, d)
		case <-timeout:
			t.Fatalf("got %d deliveries, want %d", len(out), n)
		}
	}
	return out
}

func TestConsumeNoAck(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	ch := openChannel(t, c)
	if err := ch.Qos(1, 0, false); err != nil { // prefetch does not apply to no-ack consumers
		t.Fatal(err)
	}
	q := e.queue(ch, "", nil)
	publishN(t, ch, q, 5)
	ds := consume(t, ch, q, "", true, nil)
	got := recvN(t, ds, 5)
	if want := []string{"0", "1", "2", "3", "4"}; !slices.Equal(bodies(got), want) {
		t.Fatalf("got %v, want %v", bodies(got), want)
	}
	ch.Close()
	// Nothing comes back: no-ack deliveries are settled when sent.
	ch2 := openChannel(t, c)
	if m, _ := counts(t, ch2, q); m != 0 {
		t.Fatalf("got %d messages after closing a no-ack consumer's channel, want 0", m)
	}
}

func TestExclusiveConsumer(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	ch := openChannel(t, c)
	q := e.queue(ch, "", nil)
	if _, err := ch.Consume(q, "excl", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	_, err := openChannel(t, c).Consume(q, "other", false, false, false, false, nil)
	wantCode(t, err, amqp.AccessRefused)
	if err := ch.Cancel("excl", false); err != nil {
		t.Fatal(err)
	}
	ch2 := openChannel(t, c)
	consume(t, ch2, q, "plain", false, nil)
	_, err = openChannel(t, c).Consume(q, "excl2", false, true, false, false, nil)
	wantCode(t, err, amqp.AccessRefused)
}

func TestConsumeCancel(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	ch := openChannel(t, c)
	q := e.queue(ch, "", nil)
	ds := consume(t, ch, q, "tag1", false, nil)
	publishBody(t, ch, "", q, "one")
	d := recv(t, ds)
	if d.ConsumerTag != "tag1" {
		t.Fatalf("got consumer tag %q, want tag1", d.ConsumerTag)
	}
	if err := ch.Cancel("tag1", false); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-ds:
		if ok {
			t.Fatal("delivery after cancel")
		}
	case <-time.After(waitTimeout):
		t.Fatal("delivery channel not closed after cancel")
	}
	publishBody(t, ch, "", q, "two")
	// The unacked message of a cancelled consumer can still be acked.
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	if got := getBodies(t, ch, q); !slices.Equal(got, []string{"two"}) {
		t.Fatalf("after cancel: got %v, want [two]", got)
	}
	// Reusing a tag on the channel is a connection error; cancelling an
	// unknown tag is fine.
	if err := ch.Cancel("nope", false); err != nil {
		t.Fatalf("cancel of unknown tag: %v", err)
	}
}

// TestServerGeneratedConsumerTag uses the raw client: amqp091-go always
// picks its own tag.
func TestServerGeneratedConsumerTag(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	q := e.queue(ch, "", nil)
	rc := dialRaw(t, e.addr(), 0, 0)
	rc.openChannel(1)
	tags := map[string]bool{}
	for range 2 {
		rc.send(1, &wire.BasicConsume{Queue: q})
		ok, isOK := rc.expect(1).(*wire.BasicConsumeOk)
		if !isOK {
			t.Fatal("want basic.consume-ok")
		}
		if !strings.HasPrefix(ok.ConsumerTag, "amq.ctag-") || tags[ok.ConsumerTag] {
			t.Fatalf("got consumer tag %q, want a fresh amq.ctag-...", ok.ConsumerTag)
		}
		tags[ok.ConsumerTag] = true
	}
}

// R4.7: an unroutable mandatory message comes back as basic.return 312
// NO_ROUTE with its exchange and routing key, before its confirm.
func TestMandatoryReturn(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	x := e.exchange(ch, e.name("mand"), "direct", nil)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 10))
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 10))
	for i, exch := range []string{x, ""} {
		p := amqp.Publishing{MessageId: fmt.Sprint("m", i), Headers: amqp.Table{"h": "v"}, Body: []byte("lost")}
		if err := ch.PublishWithContext(t.Context(), exch, "nowhere", true, false, p); err != nil {
			t.Fatal(err)
		}
		select {
		case c := <-confirms:
			if !c.Ack {
				t.Fatalf("unroutable message %d: got nack, want ack", i)
			}
			// The return precedes the ack, so it is already here.
			select {
			case r := <-returns:
				if r.ReplyCode != amqp.NoRoute || r.ReplyText != "NO_ROUTE" || r.Exchange != exch || r.RoutingKey != "nowhere" ||
					string(r.Body) != "lost" || r.MessageId != p.MessageId || r.Headers["h"] != "v" {
					t.Fatalf("got return %d %q exchange %q key %q body %q id %q, want 312 NO_ROUTE for %s",
						r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey, r.Body, r.MessageId, p.MessageId)
				}
			default:
				t.Fatalf("message %d: basic.ack arrived before basic.return", i)
			}
		case <-time.After(waitTimeout):
			t.Fatal("no confirm")
		}
	}
	// Not mandatory: dropped silently.
	publishBody(t, ch, x, "nowhere", "dropped")
	select {
	case r := <-returns:
		t.Fatalf("got return for a non-mandatory message: %q", r.Body)
	default:
	}
}

func TestBasicGet(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	q := e.queue(ch, "", nil)
	if _, ok, err := ch.Get(q, false); ok || err != nil {
		t.Fatalf("get on empty queue: got ok=%v err=%v, want get-empty", ok, err)
	}
	publishN(t, ch, q, 3)
	for i := range 3 {
		d, ok, err := ch.Get(q, false)
		if !ok || err != nil {
			t.Fatalf("get %d: ok=%v err=%v", i, ok, err)
		}
		if string(d.Body) != fmt.Sprint(i) || d.MessageCount != uint32(2-i) || d.Redelivered || d.RoutingKey != q {
			t.Fatalf("get %d: got body %q count %d redelivered %v key %q, want %d, %d, false, %s", i, d.Body, d.MessageCount, d.Redelivered, d.RoutingKey, i, 2-i, q)
		}
		if i == 2 {
			d.Ack(true)
		}
	}
	if _, ok, _ := ch.Get(q, false); ok {
		t.Fatal("get after draining: got a message")
	}
	ch.Close()
	if m, _ := counts(t, e.channel(), q); m != 0 {
		t.Fatalf("acked (multiple) gets came back: %d messages, want 0", m)
	}
}

func TestAckNackRejectMultiple(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	ch := openChannel(t, c)
	q := e.queue(ch, "", nil)
	publishN(t, ch, q, 8)
	ds := consume(t, ch, q, "", false, nil)
	got := recvN(t, ds, 8)
	// 0..2 acked (multiple), 3..4 nacked without requeue (multiple),
	// 5 rejected without requeue, 6 rejected with requeue, 7 nacked with requeue.
	if err := got[2].Ack(true); err != nil {
		t.Fatal(err)
	}
	if err := got[4].Nack(true, false); err != nil {
		t.Fatal(err)
	}
	if err := got[5].Reject(false); err != nil {
		t.Fatal(err)
	}
	if err := got[6].Reject(true); err != nil {
		t.Fatal(err)
	}
	if err := got[7].Nack(false, true); err != nil {
		t.Fatal(err)
	}
	re := recvN(t, ds, 2)
	if want := []string{"6", "7"}; !slices.Equal(bodies(re), want) {
		t.Fatalf("requeued: got %v, want %v", bodies(re), want)
	}
	for _, d := range re {
		if !d.Redelivered {
			t.Errorf("message %s: got redelivered=false, want true", d.Body)
		}
	}
	if err := re[1].Ack(true); err != nil {
		t.Fatal(err)
	}
	// Everything settled: nothing comes back when the channel closes.
	ch.Close()
	if m, _ := counts(t, openChannel(t, c), q); m != 0 {
		t.Fatalf("got %d messages back, want 0", m)
	}

	// An unknown delivery tag closes the channel with 406.
	ch = openChannel(t, c)
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Ack(99, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-closed:
		wantCode(t, err, amqp.PreconditionFailed)
	case <-time.After(waitTimeout):
		t.Fatal("ack of unknown tag did not close the channel")
	}
}

func TestNackRequeueKeepsOrder(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	ch := openChannel(t, c)
	q := e.queue(ch, "", nil)
	publishN(t, ch, q, 6)
	var got []amqp.Delivery
	for range 4 {
		d, ok, err := ch.Get(q, false)
		if !ok || err != nil {
			t.Fatalf("get: ok=%v err=%v", ok, err)
		}
		got = append(got, d)
	}
	// Requeue 3, then 1: they go back to their original positions.
	got[3].Nack(false, true)
	got[1].Nack(false, true)
	want := []struct {
		body        string
		redelivered bool
	}{{"1", true}, {"3", true}, {"4", false}, {"5", false}}
	for _, w := range want {
		d, ok, err := ch.Get(q, true)
		if !ok || err != nil {
			t.Fatalf("get: ok=%v err=%v", ok, err)
		}
		if string(d.Body) != w.body || d.Redelivered != w.redelivered {
			t.Fatalf("got %q redelivered=%v, want %q redelivered=%v", d.Body, d.Redelivered, w.body, w.redelivered)
		}
	}

	// With a consumer: nack(multiple, requeue) of everything redelivers in
	// order. (On another channel: got[0] and got[2] stay unacked on ch.)
	publishN(t, ch, q, 5)
	cch := openChannel(t, c)
	ds := consume(t, cch, q, "", false, nil)
	first := recvN(t, ds, 5)
	first[4].Nack(true, true)
	again := recvN(t, ds, 5)
	if want := []string{"0", "1", "2", "3", "4"}; !slices.Equal(bodies(again), want) {
		t.Fatalf("redelivered order: got %v, want %v", bodies(again), want)
	}
	for _, d := range again {
		if !d.Redelivered {
			t.Fatalf("message %s: got redelivered=false, want true", d.Body)
		}
	}
	again[4].Ack(true)
	cch.Close()
	ch.Close()
	e.waitMessages(q, 2)
	if got := getBodies(t, openChannel(t, c), q); !slices.Equal(got, []string{"0", "2"}) {
		t.Fatalf("after channel close: got %v, want [0 2]", got)
	}
}

func TestUnackedRequeuedOnClose(t *testing.T) {
	for _, closeWhat := range []string{"channel", "connection"} {
		t.Run(closeWhat, func(t *testing.T) {
			e := newEnv(t)
			ch := e.channel()
			q := e.queue(ch, "", nil)
			publishN(t, ch, q, 4)

			cc := e.dial()
			cch := openChannel(t, cc)
			ds := consume(t, cch, q, "", false, nil)
			got := recvN(t, ds, 4)
			got[1].Ack(false)
			if closeWhat == "channel" {
				cch.Close()
			} else {
				cc.Close()
			}
			e.waitMessages(q, 3)
			for i, want := range []string{"0", "2", "3"} {
				d, ok, err := ch.Get(q, true)
				if !ok || err != nil {
					t.Fatalf("get: ok=%v err=%v", ok, err)
				}
				if string(d.Body) != want || !d.Redelivered {
					t.Fatalf("message %d: got %q redelivered=%v, want %q redelivered", i, d.Body, d.Redelivered, want)
				}
			}
		})
	}
}

func TestBasicRecover(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	q := e.queue(ch, "", nil)
	publishN(t, ch, q, 3)
	ds := consume(t, ch, q, "", false, nil)
	first := recvN(t, ds, 3)
	first[0].Ack(false)
	if err := ch.Recover(true); err != nil {
		t.Fatal(err)
	}
	again := recvN(t, ds, 2)
	if want := []string{"1", "2"}; !slices.Equal(bodies(again), want) {
		t.Fatalf("after recover: got %v, want %v", bodies(again), want)
	}
	for _, d := range again {
		if !d.Redelivered {
			t.Fatalf("message %s: got redelivered=false, want true", d.Body)
		}
	}
	// The old delivery tags are gone; the new ones work.
	if err := again[1].Ack(true); err != nil {
		t.Fatal(err)
	}
	noRecv(t, ds)
}

func TestDirectReplyTo(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	server := openChannel(t, c)
	rpcQ := e.queue(server, "", nil)
	reqs := consume(t, server, rpcQ, "", false, nil)
	go func() {
		for d := range reqs {
			server.PublishWithContext(t.Context(), "", d.ReplyTo, false, false,
				amqp.Publishing{CorrelationId: d.CorrelationId, Body: []byte(strings.ToUpper(string(d.Body)))})
			d.Ack(false)
		}
	}()

	client := openChannel(t, e.dial())
	replies := consume(t, client, "amq.rabbitmq.reply-to", "", true, nil)
	for i, body := range []string{"ping", "pong"} {
		publishNoWait(t, client, "", rpcQ, amqp.Publishing{ReplyTo: "amq.rabbitmq.reply-to", CorrelationId: fmt.Sprint(i), Body: []byte(body)})
		r := recv(t, replies)
		if string(r.Body) != strings.ToUpper(body) || r.CorrelationId != fmt.Sprint(i) {
			t.Fatalf("reply %d: got %q correlation %q, want %q %d", i, r.Body, r.CorrelationId, strings.ToUpper(body), i)
		}
	}

	// Publishing with reply-to amq.rabbitmq.reply-to without consuming it
	// first is a channel error.
	other := openChannel(t, c)
	closed := other.NotifyClose(make(chan *amqp.Error, 1))
	publishNoWait(t, other, "", rpcQ, amqp.Publishing{ReplyTo: "amq.rabbitmq.reply-to", Body: []byte("x")})
	select {
	case err := <-closed:
		wantCode(t, err, amqp.PreconditionFailed)
	case <-time.After(waitTimeout):
		t.Fatal("channel not closed")
	}
}
