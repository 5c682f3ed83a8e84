package integration

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// R3.11: dead letters arrive in the order they left their queue, also when
// a batch mixes persistent messages (moved atomically through the store,
// visible in the DLQ only after an fsync) with transient ones (routed at
// once). Runs against RabbitMQ with WARREN_DIFF_URL.
func TestDeadLetterOrderMixedPersistence(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	work, dlq := e.name("mix-work"), e.name("mix-dlq")
	for _, q := range []struct {
		name string
		args amqp.Table
	}{{dlq, nil}, {work, amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}}} {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			t.Fatal(err)
		}
		e.cleanupQueue(q.name)
	}
	bodies := []string{"p1", "t2", "p3", "t4", "t5", "p6"}
	for _, b := range bodies {
		mode := amqp.Transient
		if b[0] == 'p' {
			mode = amqp.Persistent
		}
		if err := ch.PublishWithContext(context.Background(), "", work, false, false,
			amqp.Publishing{DeliveryMode: mode, Body: []byte(b)}); err != nil {
			t.Fatal(err)
		}
	}
	var last amqp.Delivery
	for range bodies {
		d, ok, err := ch.Get(work, false)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		last = d
	}
	if err := last.Nack(true, false); err != nil {
		t.Fatal(err)
	}
	e.waitMessages(dlq, len(bodies))
	var got []string
	for range bodies {
		d, ok, err := ch.Get(dlq, true)
		if err != nil || !ok {
			t.Fatalf("get from the DLQ: %v %v", ok, err)
		}
		got = append(got, string(d.Body))
	}
	if fmt.Sprint(got) != fmt.Sprint(bodies) {
		t.Fatalf("DLQ order %v, want %v", got, bodies)
	}
}

// issue 12 (dead-letter effects off the consumer's reader), R3.11: with
// the dead-lettering on the source queue's flusher, dead letters still
// reach the DLQ in the order they left their queue when two consumers on
// two connections nack (one by one, and four at a time with multiple)
// while per-message TTLs expire messages of the same queue: each
// consumer's rejections arrive in its delivery order, the expiries in
// publish order, every message exactly once. Runs against RabbitMQ with
// WARREN_DIFF_URL.
func TestDeadLetterOrderNacksRacingExpiry(t *testing.T) {
	const n = 3000
	e := newEnv(t)
	ch := e.channel()
	dlq := e.queue(ch, e.name("race-dlq"), nil)
	src := e.queue(ch, e.name("race-src"), amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
	delivered := make([][]int, 2) // by consumer, in delivery order
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range delivered {
		cch := e.channel()
		if err := cch.Qos(20, 0, false); err != nil {
			t.Fatal(err)
		}
		ds := consume(t, cch, src, fmt.Sprint("c", i), false, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last *amqp.Delivery // c1: delivered, not yet nacked
			nack := func(d *amqp.Delivery, multiple bool) bool {
				if err := d.Nack(multiple, false); err != nil {
					t.Error(err)
					return false
				}
				return true
			}
			for {
				select {
				case d := <-ds:
					seq, err := strconv.Atoi(string(d.Body))
					if err != nil {
						t.Error(err)
						return
					}
					delivered[i] = append(delivered[i], seq)
					if i == 0 {
						if !nack(&d, false) {
							return
						}
					} else if last = &d; len(delivered[i])%4 == 0 {
						if !nack(last, true) {
							return
						}
						last = nil
					}
				case <-time.After(10 * time.Millisecond): // c1: settle a short batch
					if last != nil && !nack(last, true) {
						return
					}
					last = nil
				case <-stop:
					return
				}
			}
		}()
	}
	for i := range n {
		p := amqp.Publishing{Body: []byte(strconv.Itoa(i))}
		if i%3 == 0 {
			p.Expiration = "1"
		}
		publishNoWait(t, ch, "", src, p)
	}
	e.waitMessages(dlq, n)
	close(stop)
	wg.Wait()
	var rejected [2][]int
	var expired []int
	seen := make([]bool, n)
	owner := map[int]int{}
	for c, seqs := range delivered {
		for _, s := range seqs {
			owner[s] = c
		}
	}
	for i, d := range recvN(t, consume(t, ch, dlq, "dlq", true, nil), n) {
		seq, err := strconv.Atoi(string(d.Body))
		if err != nil || seq < 0 || seq >= n || seen[seq] {
			t.Fatalf("DLQ message %d: %q (error %v, seen before %v)", i, d.Body, err, err == nil && seq >= 0 && seq < n && seen[seq])
		}
		seen[seq] = true
		switch reason := d.Headers["x-first-death-reason"]; reason {
		case "expired":
			expired = append(expired, seq)
		case "rejected":
			c, ok := owner[seq]
			if !ok {
				t.Fatalf("message %d rejected but delivered to no consumer", seq)
			}
			rejected[c] = append(rejected[c], seq)
		default:
			t.Fatalf("message %d dead-lettered for %v", seq, reason)
		}
	}
	for c := range delivered {
		if !slices.Equal(rejected[c], delivered[c]) {
			t.Fatalf("consumer c%d: %d rejections reached the DLQ in an order other than delivery (%d delivered)", c, len(rejected[c]), len(delivered[c]))
		}
	}
	if !slices.IsSorted(expired) {
		t.Fatalf("expiries reached the DLQ out of publish order: %v", expired)
	}
	t.Logf("%d rejected (c0 %d, c1 %d), %d expired", len(rejected[0])+len(rejected[1]), len(rejected[0]), len(rejected[1]), len(expired))
}
