package integration

import (
	"fmt"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	wire "github.com/warrenmq/warren/amqp"
)

func TestConfirmsBurst(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	q := e.queue(ch, "", nil)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	const n = 500
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, n))
	for i := range n {
		publishNoWait(t, ch, "", q, amqp.Publishing{Body: []byte(fmt.Sprint(i))})
	}
	for i := 1; i <= n; i++ {
		select {
		case c := <-confirms:
			if !c.Ack || c.DeliveryTag != uint64(i) {
				t.Fatalf("confirm %d: got tag %d ack=%v, want tag %d ack", i, c.DeliveryTag, c.Ack, i)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("got %d confirms, want %d", i-1, n)
		}
	}
	select {
	case c := <-confirms:
		t.Fatalf("extra confirm %+v", c)
	case <-time.After(quietPeriod):
	}
	e.waitMessages(q, n)
}

// TestConfirmsMultiple checks on the wire that a burst gets multiple acks
// and that every publish is confirmed exactly once.
func TestConfirmsMultiple(t *testing.T) {
	e := newEnv(t)
	q := e.queue(e.channel(), "", nil)
	rc := dialRaw(t, e.addr(), 0, 0)
	rc.openChannel(1)
	rc.send(1, &wire.ConfirmSelect{})
	if _, ok := rc.expect(1).(*wire.ConfirmSelectOk); !ok {
		t.Fatal("want confirm.select-ok")
	}
	const n = 200
	var b []byte
	for i := range n {
		b = rc.appendPublish(b, 1, "", q, []byte(fmt.Sprint(i)))
	}
	rc.write(b)
	var upTo uint64
	multiples := 0
	for upTo < n {
		ack, ok := rc.expect(1).(*wire.BasicAck)
		if !ok {
			t.Fatal("want basic.ack")
		}
		if ack.DeliveryTag <= upTo || ack.DeliveryTag > n {
			t.Fatalf("got ack for tag %d (multiple=%v) after acks up to %d, want a tag in (%d, %d]", ack.DeliveryTag, ack.Multiple, upTo, upTo, n)
		}
		if !ack.Multiple && ack.DeliveryTag != upTo+1 {
			t.Fatalf("got single ack for tag %d, want %d: tags %d..%d would go unconfirmed", ack.DeliveryTag, upTo+1, upTo+1, ack.DeliveryTag-1)
		}
		if ack.Multiple {
			multiples++
		}
		upTo = ack.DeliveryTag
	}
	if multiples == 0 {
		t.Errorf("a burst of %d publishes got no multiple acks", n)
	}
	e.waitMessages(q, n)
}

func TestConfirmAndTxExclusive(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	ch := openChannel(t, c)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	wantCode(t, ch.Tx(), amqp.PreconditionFailed)
	ch = openChannel(t, c)
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	wantCode(t, ch.Confirm(false), amqp.PreconditionFailed)
	ch = openChannel(t, c)
	wantCode(t, ch.TxCommit(), amqp.PreconditionFailed)
	ch = openChannel(t, c)
	wantCode(t, ch.TxRollback(), amqp.PreconditionFailed)
}

func TestTxPublish(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	ch := openChannel(t, c)
	q := e.queue(ch, "", nil)
	tx := openChannel(t, c)
	if err := tx.Tx(); err != nil {
		t.Fatal(err)
	}
	publishNoWait(t, tx, "", q, amqp.Publishing{Body: []byte("rolled-back")})
	if err := tx.TxRollback(); err != nil {
		t.Fatal(err)
	}
	if m, _ := counts(t, ch, q); m != 0 {
		t.Fatalf("after rollback: got %d messages, want 0", m)
	}
	publishNoWait(t, tx, "", q, amqp.Publishing{Body: []byte("a")})
	publishNoWait(t, tx, "", q, amqp.Publishing{Body: []byte("b")})
	if m, _ := counts(t, ch, q); m != 0 {
		t.Fatalf("before commit: got %d messages, want 0", m)
	}
	if err := tx.TxCommit(); err != nil {
		t.Fatal(err)
	}
	if got := getBodies(t, ch, q); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("after commit: got %v, want [a b]", got)
	}
	// The channel stays transactional: a later commit covers only what
	// came after the previous one.
	publishNoWait(t, tx, "", q, amqp.Publishing{Body: []byte("c")})
	if err := tx.TxCommit(); err != nil {
		t.Fatal(err)
	}
	if got := getBodies(t, ch, q); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("second commit: got %v, want [c]", got)
	}
	// Uncommitted publishes are discarded when the channel closes.
	publishNoWait(t, tx, "", q, amqp.Publishing{Body: []byte("never")})
	tx.Close()
	if m, _ := counts(t, ch, q); m != 0 {
		t.Fatalf("uncommitted publish on a closed channel: got %d messages, want 0", m)
	}
}

func TestTxAcks(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	ch := openChannel(t, c)
	q := e.queue(ch, "", nil)
	publishN(t, ch, q, 3)

	tx := openChannel(t, c)
	if err := tx.Tx(); err != nil {
		t.Fatal(err)
	}
	var ds []amqp.Delivery
	for range 3 {
		d, ok, err := tx.Get(q, false)
		if !ok || err != nil {
			t.Fatalf("get: ok=%v err=%v", ok, err)
		}
		ds = append(ds, d)
	}
	// Rolled-back acks and nacks have no effect.
	ds[0].Ack(false)
	ds[1].Nack(false, true)
	if err := tx.TxRollback(); err != nil {
		t.Fatal(err)
	}
	if m, _ := counts(t, ch, q); m != 0 {
		t.Fatalf("after rollback: got %d ready, want 0 (all still unacked)", m)
	}
	// The same tags can be settled again and committed.
	ds[0].Ack(false)
	ds[1].Nack(false, true)
	if m, _ := counts(t, ch, q); m != 0 {
		t.Fatalf("before commit: got %d ready, want 0", m)
	}
	if err := tx.TxCommit(); err != nil {
		t.Fatal(err)
	}
	e.waitMessages(q, 1) // message 1 requeued by the committed nack
	// Closing the channel requeues the one never settled (2).
	tx.Close()
	e.waitMessages(q, 2)
	if got := getBodies(t, ch, q); !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("got %v, want [1 2]", got)
	}
}
