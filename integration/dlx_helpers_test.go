package integration

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/internal/clock"
	"github.com/warrenmq/warren/warrentest"
)

// fakeEnv starts Warren on a fake clock, so TTLs and delays are driven by
// clk.Advance instead of sleeping.
func fakeEnv(t *testing.T) (*env, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 8, 29, 9, 53, 17, 0, time.UTC))
	w := warrentest.Start(t, warrentest.WithClock(clk))
	return &env{t: t, url: w.URL(), w: w}, clk
}

// dlxTopology declares a direct DLX with one DLQ bound by key and returns
// the DLX name and the DLQ name.
func dlxTopology(t *testing.T, e *env, ch *amqp.Channel, key string) (dlx, dlq string) {
	t.Helper()
	dlx = e.exchange(ch, e.name("dlx"), "direct", nil)
	dlq = e.queue(ch, e.name("dlq"), nil)
	bind(t, ch, dlq, key, dlx, nil)
	return dlx, dlq
}

// getOne takes one message with basic.get (auto-ack), failing if there is none.
func getOne(t *testing.T, ch *amqp.Channel, queue string) amqp.Delivery {
	t.Helper()
	d, ok, err := ch.Get(queue, true)
	if err != nil || !ok {
		t.Fatalf("basic.get %s: got ok=%v err=%v, want a message", queue, ok, err)
	}
	return d
}

// death returns x-death[i] of a delivery.
func death(t *testing.T, d amqp.Delivery, i int) amqp.Table {
	t.Helper()
	arr, ok := d.Headers["x-death"].([]any)
	if !ok || len(arr) <= i {
		t.Fatalf("x-death: got %#v, want at least %d entries", d.Headers["x-death"], i+1)
	}
	return arr[i].(amqp.Table)
}

func wantDeath(t *testing.T, got amqp.Table, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if g := got[k]; !equalAny(g, v) {
			t.Errorf("x-death.%s: got %#v, want %#v", k, g, v)
		}
	}
}

func equalAny(a, b any) bool {
	as, aok := a.([]any)
	bs, bok := b.([]any)
	if aok || bok {
		if len(as) != len(bs) {
			return false
		}
		for i := range as {
			if as[i] != bs[i] {
				return false
			}
		}
		return aok && bok
	}
	return a == b
}
