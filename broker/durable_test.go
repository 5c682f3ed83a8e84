package broker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/store"
)

// openDurable opens a broker on a fresh data directory with durable queues
// q1 and q2, closed at the end of the test.
func openDurable(t *testing.T) *Broker {
	t.Helper()
	b, err := Open(Config{DataDir: t.TempDir()})
	noErr(t, err)
	t.Cleanup(func() { b.Close() })
	for _, q := range []string{"q1", "q2"} {
		_, _, _, err := b.VHost("/").DeclareQueue(QueueSpec{Name: q, Durable: true}, false)
		noErr(t, err)
	}
	return b
}

func persistentTo(q string) *Message {
	return &Message{RoutingKey: q, Props: amqp.Properties{DeliveryMode: 2}, Body: []byte("x")}
}

// TestDurabilityAddCopies: issue 12, the broker-owned durability token. A
// PublishResult's Durability shares its Router's scratch; one collected
// with Add keeps its own copy, so the Router's next publish does not
// change what it waits for.
func TestDurabilityAddCopies(t *testing.T) {
	b := openDurable(t)
	v := b.VHost("/")
	var r Router
	res, err := v.Publish(&r, "", persistentTo("q1"))
	noErr(t, err)
	if !res.Durable.Pending() || len(res.Durable.logs) != 1 {
		t.Fatalf("durability %+v, want one log", res.Durable)
	}
	// A copy of the result's token made one's own by Add.
	acc := res.Durable
	acc.Add(res.Durable) // the same log once
	first := acc.logs[0]
	res2, err := v.Publish(&r, "", persistentTo("q2"))
	noErr(t, err)
	if res2.Durable.logs[0] == first {
		t.Fatal("q1 and q2 share a log")
	}
	if len(acc.logs) != 1 || acc.logs[0] != first {
		t.Fatalf("collected durability changed by the Router's next publish: %v", acc.logs)
	}
	acc.Add(res2.Durable)
	if len(acc.logs) != 2 {
		t.Fatalf("collected %d logs, want 2", len(acc.logs))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	noErr(t, b.WaitDurable(ctx, acc))
	acc.Reset()
	if acc.Pending() {
		t.Fatal("pending after Reset")
	}
	// Transient messages and a broker without a store have nothing to
	// wait for.
	res3, err := v.Publish(&r, "", &Message{RoutingKey: "q1", Body: []byte("t")})
	noErr(t, err)
	if res3.Durable.Pending() {
		t.Fatal("a transient message waits for the disk")
	}
	mem, err := Open(Config{})
	noErr(t, err)
	_, _, _, err = mem.VHost("/").DeclareQueue(QueueSpec{Name: "q", Durable: true}, false)
	noErr(t, err)
	res4, err := mem.VHost("/").Publish(&r, "", persistentTo("q"))
	noErr(t, err)
	if res4.Routed != 1 || res4.Durable.Pending() {
		t.Fatalf("in memory: %+v", res4)
	}
	noErr(t, mem.Close())
}

// TestDurabilityNotify: issue 12, the broker-owned durability token.
// Notify calls done exactly once, after every log is synced, and with
// the error when the store is closed.
func TestDurabilityNotify(t *testing.T) {
	b := openDurable(t)
	v := b.VHost("/")
	var r Router
	// One message routed to both queues: two logs.
	x := "amq.fanout"
	noErr(t, v.Bind(x, "q1", false, "", nil, 0))
	noErr(t, v.Bind(x, "q2", false, "", nil, 0))
	res, err := v.Publish(&r, x, persistentTo(""))
	noErr(t, err)
	if len(res.Durable.logs) != 2 {
		t.Fatalf("durability of a message in two durable queues: %d logs", len(res.Durable.logs))
	}
	var calls atomic.Int32
	done := make(chan error, 2)
	res.Durable.Notify(func(err error) { calls.Add(1); done <- err })
	select {
	case err := <-done:
		noErr(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Notify never called done")
	}
	before := b.SyncStats()
	if before.Requests < 2 || before.Fsyncs == 0 {
		t.Fatalf("sync stats %+v after syncing two logs", before)
	}
	// Nothing to wait for: done at once, on the caller's goroutine.
	var none Durability
	none.Notify(func(err error) { calls.Add(1); done <- err })
	noErr(t, <-done)

	res, err = v.Publish(&r, x, persistentTo(""))
	noErr(t, err)
	tok := res.Durable
	noErr(t, b.Close())
	tok.Notify(func(err error) { calls.Add(1); done <- err })
	if err := <-done; !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Notify on a closed store: %v, want store.ErrClosed", err)
	}
	if err := tok.Wait(context.Background()); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Wait on a closed store: %v, want store.ErrClosed", err)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("done called %d times for 3 Notify calls", n)
	}
}

// TestOpenRefusesCallersStores: issue 12, one owner per resource. Open
// opens its own stores: it refuses a Config carrying the caller's.
func TestOpenRefusesCallersStores(t *testing.T) {
	if _, err := Open(Config{DataDir: t.TempDir(), Store: newMemStore()}); err == nil {
		t.Fatal("Open took a definitions store of the caller's")
	}
}
