package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestQueueServerNamed(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	seen := map[string]bool{}
	for range 3 {
		q, err := ch.QueueDeclare("", false, true, true, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(q.Name, "amq.gen-") || len(q.Name) <= len("amq.gen-") {
			t.Fatalf("got server-named queue %q, want amq.gen-...", q.Name)
		}
		if seen[q.Name] {
			t.Fatalf("server-named queue %q generated twice", q.Name)
		}
		seen[q.Name] = true
	}
	// Clients may not pick names in the amq. namespace.
	_, err := ch.QueueDeclare("amq.mine", false, false, false, false, nil)
	wantCode(t, err, amqp.AccessRefused)
}

func TestQueueDeclarePassiveCounts(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	ch := openChannel(t, c)
	q := e.queue(ch, e.name("counts"), nil)
	for i := range 3 {
		publishBody(t, ch, "", q, fmt.Sprint(i))
	}
	m, n := counts(t, ch, q)
	if m != 3 || n != 0 {
		t.Fatalf("got %d messages %d consumers, want 3 and 0", m, n)
	}
	// Redeclaring reports the same counts.
	got, err := ch.QueueDeclare(q, false, false, false, false, nil)
	if err != nil || got.Messages != 3 {
		t.Fatalf("redeclare: got %+v, %v, want 3 messages", got, err)
	}
	cch := openChannel(t, c)
	if err := cch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	consume(t, cch, q, "c1", false, nil)
	consume(t, cch, q, "c2", false, nil)
	// Two messages are in flight; the passive declare counts ready ones.
	waitFor(t, "2 messages delivered", func() bool { m, _ := counts(t, ch, q); return m == 1 })
	m, n = counts(t, ch, q)
	if m != 1 || n != 2 {
		t.Fatalf("with consumers: got %d messages %d consumers, want 1 and 2", m, n)
	}
	// Declaring a missing queue passively fails with 404.
	if e.queueExists(c, e.name("missing")) {
		t.Fatal("passive declare of a missing queue succeeded")
	}
	// Declaring with other properties fails with 406.
	_, err = openChannel(t, c).QueueDeclare(q, true, false, false, false, nil)
	wantCode(t, err, amqp.PreconditionFailed)
}

func TestQueueExclusive(t *testing.T) {
	e := newEnv(t)
	owner := e.dial()
	och := openChannel(t, owner)
	q, err := och.QueueDeclare(e.name("excl"), false, false, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	publishBody(t, och, "", q.Name, "mine")

	other := e.dial()
	for name, op := range map[string]func(*amqp.Channel) error{
		"declare": func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(q.Name, false, false, true, false, nil)
			return err
		},
		"passive declare": func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(q.Name, false, false, true, false, nil)
			return err
		},
		"consume": func(ch *amqp.Channel) error {
			_, err := ch.Consume(q.Name, "", false, false, false, false, nil)
			return err
		},
		"get": func(ch *amqp.Channel) error {
			_, _, err := ch.Get(q.Name, false)
			return err
		},
		"purge": func(ch *amqp.Channel) error {
			_, err := ch.QueuePurge(q.Name, false)
			return err
		},
		"delete": func(ch *amqp.Channel) error {
			_, err := ch.QueueDelete(q.Name, false, false, false)
			return err
		},
		"bind": func(ch *amqp.Channel) error { return ch.QueueBind(q.Name, "k", "amq.direct", false, nil) },
	} {
		t.Run(name, func(t *testing.T) {
			wantCode(t, op(openChannel(t, other)), amqp.ResourceLocked)
		})
	}
	if m, _ := counts(t, och, q.Name); m != 1 {
		t.Fatalf("owner sees %d messages, want 1", m)
	}
	owner.Close()
	waitFor(t, "exclusive queue deleted with its connection", func() bool { return !e.queueExists(other, q.Name) })
}

func TestQueueAutoDelete(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	ch := openChannel(t, c)
	q, err := ch.QueueDeclare(e.name("autodel"), false, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.cleanupQueue(q.Name)
	if !e.queueExists(c, q.Name) {
		t.Fatal("auto-delete queue that never had a consumer was deleted")
	}
	consume(t, ch, q.Name, "a", false, nil)
	consume(t, ch, q.Name, "b", false, nil)
	if err := ch.Cancel("a", false); err != nil {
		t.Fatal(err)
	}
	if !e.queueExists(c, q.Name) {
		t.Fatal("auto-delete queue deleted while a consumer remains")
	}
	if err := ch.Cancel("b", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "auto-delete queue deleted after its last consumer", func() bool { return !e.queueExists(c, q.Name) })

	// Closing the consumer's channel counts as cancelling.
	q2, err := ch.QueueDeclare(e.name("autodel2"), false, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.cleanupQueue(q2.Name)
	cch := openChannel(t, c)
	consume(t, cch, q2.Name, "", false, nil)
	cch.Close()
	waitFor(t, "auto-delete queue deleted when its consumer's channel closed", func() bool { return !e.queueExists(c, q2.Name) })
}

func TestQueuePurgeAndDelete(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	ch := openChannel(t, c)
	q := e.queue(ch, e.name("purge"), nil)
	for i := range 5 {
		publishBody(t, ch, "", q, fmt.Sprint(i))
	}
	// One message unacked: purge only drops ready messages.
	if _, ok, err := ch.Get(q, false); !ok || err != nil {
		t.Fatalf("get: ok=%v err=%v", ok, err)
	}
	n, err := ch.QueuePurge(q, false)
	if err != nil || n != 4 {
		t.Fatalf("purge: got %d, %v, want 4", n, err)
	}
	ch.Close() // requeues the unacked message
	ch = openChannel(t, c)
	e.waitMessages(q, 1)

	t.Run("if-empty", func(t *testing.T) {
		_, err := openChannel(t, c).QueueDelete(q, false, true, false)
		wantCode(t, err, amqp.PreconditionFailed)
	})
	t.Run("if-unused", func(t *testing.T) {
		cch := openChannel(t, c)
		consume(t, cch, q, "holder", false, nil)
		_, err := openChannel(t, c).QueueDelete(q, true, false, false)
		wantCode(t, err, amqp.PreconditionFailed)
		cch.Close()
	})
	e.waitMessages(q, 1)
	for i := range 2 {
		publishBody(t, ch, "", q, fmt.Sprint("more", i))
	}
	n, err = ch.QueueDelete(q, true, false, false)
	if err != nil || n != 3 {
		t.Fatalf("delete: got %d, %v, want 3", n, err)
	}
	if e.queueExists(c, q) {
		t.Fatal("queue exists after delete")
	}
	// Deleting a missing queue succeeds with 0.
	if n, err := ch.QueueDelete(q, false, false, false); err != nil || n != 0 {
		t.Fatalf("delete missing: got %d, %v, want 0, nil", n, err)
	}
}

func TestQueuePriority(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	q := e.queue(ch, "", amqp.Table{"x-max-priority": int32(5)})
	for _, m := range []struct {
		body string
		prio uint8
	}{{"p0-a", 0}, {"p3-a", 3}, {"p5-a", 5}, {"p9", 9}, {"p0-b", 0}, {"p3-b", 3}, {"p5-b", 5}, {"p200", 200}, {"p1", 1}} {
		publish(t, ch, "", q, amqp.Publishing{Priority: m.prio, Body: []byte(m.body)})
	}
	// Priorities above the maximum count as the maximum, in FIFO order
	// with the other messages at that level.
	want := []string{"p5-a", "p9", "p5-b", "p200", "p3-a", "p3-b", "p1", "p0-a", "p0-b"}
	if got := getBodies(t, ch, q); !slices.Equal(got, want) {
		t.Fatalf("basic.get order: got %v, want %v", got, want)
	}

	// Consumers see the same order, and a requeued message keeps its place
	// among its priority level.
	for i, p := range []uint8{1, 4, 2} {
		publish(t, ch, "", q, amqp.Publishing{Priority: p, Body: []byte(fmt.Sprint("c", i, "-p", p))})
	}
	if err := ch.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	ds := consume(t, ch, q, "", false, nil)
	var got []string
	for range 3 {
		d := recv(t, ds)
		got = append(got, string(d.Body))
		d.Ack(false)
	}
	if want := []string{"c1-p4", "c2-p2", "c0-p1"}; !slices.Equal(got, want) {
		t.Fatalf("consume order: got %v, want %v", got, want)
	}
}

func TestSingleActiveConsumer(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	pub := openChannel(t, c)
	q := e.queue(pub, "", amqp.Table{"x-single-active-consumer": true})
	ch1, ch2 := openChannel(t, c), openChannel(t, c)
	first := consume(t, ch1, q, "first", false, nil)
	second := consume(t, ch2, q, "second", false, nil)
	for i := range 4 {
		publishBody(t, pub, "", q, fmt.Sprint(i))
	}
	got := recvN(t, first, 4)
	if want := []string{"0", "1", "2", "3"}; !slices.Equal(bodies(got), want) {
		t.Fatalf("active consumer got %v, want %v", bodies(got), want)
	}
	noRecv(t, second)
	// Ack two, leave two unacked, then cancel: the second consumer takes
	// over, starting with the requeued ones once the first's channel closes.
	got[0].Ack(false)
	got[1].Ack(false)
	if err := ch1.Cancel("first", false); err != nil {
		t.Fatal(err)
	}
	publishBody(t, pub, "", q, "4")
	d := recv(t, second)
	if string(d.Body) != "4" {
		t.Fatalf("after cancel, second consumer got %q, want 4", d.Body)
	}
	ch1.Close()
	rest := recvN(t, second, 2)
	if want := []string{"2", "3"}; !slices.Equal(bodies(rest), want) {
		t.Fatalf("after the first channel closed, second got %v, want %v", bodies(rest), want)
	}
	for _, d := range rest {
		if !d.Redelivered {
			t.Errorf("message %s: got redelivered=false, want true", d.Body)
		}
	}
}

func TestConsumerPriorities(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	pub := openChannel(t, c)
	q := e.queue(pub, "", nil)
	lowCh, highCh := openChannel(t, c), openChannel(t, c)
	for _, ch := range []*amqp.Channel{lowCh, highCh} {
		if err := ch.Qos(2, 0, false); err != nil {
			t.Fatal(err)
		}
	}
	low := consume(t, lowCh, q, "low", false, amqp.Table{"x-priority": int32(-1)})
	high := consume(t, highCh, q, "high", false, amqp.Table{"x-priority": int32(10)})
	publishBody(t, pub, "", q, "1")
	publishBody(t, pub, "", q, "2")
	hs := recvN(t, high, 2)
	noRecv(t, low)
	// The high priority consumer is out of credit: the low one gets the next.
	publishBody(t, pub, "", q, "3")
	if d := recv(t, low); string(d.Body) != "3" {
		t.Fatalf("low priority consumer got %q, want 3", d.Body)
	}
	// Credit back on the high priority consumer: it is preferred again.
	hs[0].Ack(false)
	hs[1].Ack(false)
	waitFor(t, "acks settled", func() bool { m, _ := counts(t, pub, q); return m == 0 })
	publishBody(t, pub, "", q, "4")
	if d := recv(t, high); string(d.Body) != "4" {
		t.Fatalf("high priority consumer got %q, want 4", d.Body)
	}
	noRecv(t, low)
}

// TestQueueDeleteCancelsConsumers checks the server-sent basic.cancel.
func TestQueueDeleteCancelsConsumers(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	ch := openChannel(t, c)
	q := e.queue(ch, "", nil)
	cancels := ch.NotifyCancel(make(chan string, 2))
	ds := consume(t, ch, q, "doomed", false, nil)
	if _, err := openChannel(t, c).QueueDelete(q, false, false, false); err != nil {
		t.Fatal(err)
	}
	select {
	case tag := <-cancels:
		if tag != "doomed" {
			t.Fatalf("got basic.cancel for %q, want doomed", tag)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no basic.cancel after the queue was deleted")
	}
	select {
	case _, ok := <-ds:
		if ok {
			t.Fatal("got a delivery, want the delivery channel closed")
		}
	case <-time.After(waitTimeout):
		t.Fatal("delivery channel not closed after basic.cancel")
	}
	// The channel stays usable.
	if _, err := ch.QueueDeclare("", false, true, true, false, nil); err != nil {
		t.Fatalf("channel after server cancel: %v", err)
	}
}
