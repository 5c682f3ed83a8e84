package perfclient

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

// brokers returns the URLs to test against: an in-process Warren, and the
// RabbitMQ at WARREN_RABBITMQ_URL (default amqp://guest:guest@127.0.0.1:5672/)
// when it is reachable, as integration/ does.
func brokers(t *testing.T) map[string]string {
	b := warrentest.Start(t)
	m := map[string]string{"warren": b.URL()}
	u := os.Getenv("WARREN_RABBITMQ_URL")
	if u == "" {
		u = "amqp://guest:guest@127.0.0.1:5672/"
	}
	pu, err := url.Parse(u)
	if err == nil {
		if c, err := net.DialTimeout("tcp", pu.Host, time.Second); err == nil {
			c.Close()
			m["rabbitmq"] = u
		}
	}
	return m
}

func forEachBroker(t *testing.T, f func(t *testing.T, url string)) {
	for name, u := range brokers(t) {
		t.Run(name, func(t *testing.T) { f(t, u) })
	}
}

func dial(t *testing.T, u string) *Conn {
	t.Helper()
	c, err := Dial(u, Config{ConnectionName: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func channel(t *testing.T, c *Conn) *Channel {
	t.Helper()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func qname(t *testing.T, s string) string {
	return fmt.Sprintf("perfclient-test-%s-%d", s, rand.Uint32())
}

// declare declares a queue, deleted at the end of the test through a
// fresh connection (the test's may be gone).
func declare(t *testing.T, u string, ch *Channel, name string, args amqp.Table) {
	t.Helper()
	if _, err := ch.QueueDeclare(name, QueueOptions{Args: args}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := Dial(u, Config{})
		if err != nil {
			return
		}
		defer c.Close()
		if ch, err := c.Channel(); err == nil {
			ch.QueueDelete(name)
		}
	})
}

func body(i int, size int) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint64(b, uint64(i))
	for j := 8; j < size; j++ {
		b[j] = byte(i + j)
	}
	return b
}

func TestPublishConfirmConsumeAck(t *testing.T) {
	forEachBroker(t, func(t *testing.T, u string) {
		c := dial(t, u)
		if c.ServerProperties["product"] == nil {
			t.Errorf("no product in server properties: %v", c.ServerProperties)
		}
		ch := channel(t, c)
		q := qname(t, "ack")
		declare(t, u, ch, q, nil)
		if err := ch.ConfirmSelect(); err != nil {
			t.Fatal(err)
		}
		const n = 2000
		props := &amqp.Properties{DeliveryMode: 2, ContentType: "application/octet-stream"}
		for i := 0; i < n; i++ {
			if err := ch.Publish("", q, false, props, body(i, 100)); err != nil {
				t.Fatal(err)
			}
			if i%100 == 99 {
				if err := ch.WaitConfirms(context.Background(), 500); err != nil {
					t.Fatal(err)
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ch.WaitConfirms(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if ch.Confirmed() != n || ch.Nacked() != 0 || ch.Outstanding() != 0 {
			t.Fatalf("confirmed %d nacked %d outstanding %d", ch.Confirmed(), ch.Nacked(), ch.Outstanding())
		}

		cc := dial(t, u)
		cch := channel(t, cc)
		if err := cch.Qos(300, false); err != nil {
			t.Fatal(err)
		}
		got := 0
		var bad atomic.Value
		done := make(chan struct{})
		_, err := cch.Consume(q, ConsumeOptions{}, func(d *Delivery) {
			if !bytes.Equal(d.Body, body(got, 100)) && bad.Load() == nil {
				bad.Store(fmt.Sprintf("message %d: body %x", got, d.Body))
			}
			p, err := d.Props()
			if (err != nil || p.DeliveryMode != 2 || p.ContentType != "application/octet-stream") && bad.Load() == nil {
				bad.Store(fmt.Sprintf("props %+v %v", p, err))
			}
			if string(d.RoutingKey) != q || d.DeliveryTag != uint64(got+1) {
				bad.Store(fmt.Sprintf("key %q tag %d", d.RoutingKey, d.DeliveryTag))
			}
			got++
			if got%100 == 0 {
				d.Ack(true)
			}
			if got == n {
				close(done)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("consumed %d of %d", got, n)
		}
		if v := bad.Load(); v != nil {
			t.Fatal(v)
		}
		// All acked: nothing comes back after closing the channel.
		if err := cch.Close(); err != nil {
			t.Fatal(err)
		}
		info, err := channel(t, cc).QueueDeclare(q, QueueOptions{Passive: true})
		if err != nil {
			t.Fatal(err)
		}
		if info.Messages != 0 {
			t.Fatalf("%d messages left after acking all", info.Messages)
		}
	})
}

func TestAutoAckLargeMessages(t *testing.T) {
	forEachBroker(t, func(t *testing.T, u string) {
		c := dial(t, u)
		ch := channel(t, c)
		q := qname(t, "large")
		declare(t, u, ch, q, nil)
		sizes := []int{0, 1, int(c.FrameMax()) - 8, int(c.FrameMax()) - 7, 3*int(c.FrameMax()) + 5}
		for i, s := range sizes {
			if err := ch.Publish("", q, false, nil, body(i, max(s, 8))[:s]); err != nil {
				t.Fatal(err)
			}
		}
		if err := ch.Flush(); err != nil {
			t.Fatal(err)
		}
		got := make(chan []byte, len(sizes))
		if _, err := ch.Consume(q, ConsumeOptions{NoAck: true}, func(d *Delivery) {
			got <- append([]byte(nil), d.Body...)
		}); err != nil {
			t.Fatal(err)
		}
		for i, s := range sizes {
			select {
			case b := <-got:
				if !bytes.Equal(b, body(i, max(s, 8))[:s]) {
					t.Fatalf("message %d: %d bytes, want %d", i, len(b), s)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("message %d not delivered", i)
			}
		}
	})
}

// TestConfirmNacks: a full queue with x-overflow reject-publish nacks
// publishes; acks and nacks are counted apart.
func TestConfirmNacks(t *testing.T) {
	forEachBroker(t, func(t *testing.T, u string) {
		c := dial(t, u)
		ch := channel(t, c)
		q := qname(t, "full")
		declare(t, u, ch, q, amqp.Table{"x-max-length": int64(10), "x-overflow": "reject-publish"})
		if err := ch.ConfirmSelect(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 25; i++ {
			ch.Publish("", q, false, nil, body(i, 16))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := ch.WaitConfirms(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if ch.Confirmed() != 10 || ch.Nacked() != 15 || ch.Outstanding() != 0 {
			t.Fatalf("confirmed %d, nacked %d, outstanding %d", ch.Confirmed(), ch.Nacked(), ch.Outstanding())
		}
		n, err := ch.QueuePurge(q)
		if err != nil || n != 10 {
			t.Fatalf("purge: %d, %v", n, err)
		}
		n, err = ch.QueueDelete(q)
		if err != nil || n != 0 {
			t.Fatalf("delete: %d, %v", n, err)
		}
	})
}

func TestNackIntoDLQ(t *testing.T) {
	forEachBroker(t, func(t *testing.T, u string) {
		c := dial(t, u)
		ch := channel(t, c)
		dlx := qname(t, "dlx")
		if err := ch.ExchangeDeclare(dlx, "fanout", false, false, nil); err != nil {
			t.Fatal(err)
		}
		defer ch.ExchangeDelete(dlx)
		dlq := qname(t, "dlq")
		declare(t, u, ch, dlq, nil)
		if err := ch.QueueBind(dlq, dlx, "", nil); err != nil {
			t.Fatal(err)
		}
		q := qname(t, "main")
		declare(t, u, ch, q, amqp.Table{"x-dead-letter-exchange": dlx})
		const n = 500
		for i := 0; i < n; i++ {
			ch.Publish("", q, false, nil, body(i, 16))
		}
		ch.Flush()
		var dead atomic.Int64
		dch := channel(t, c)
		if _, err := dch.Consume(dlq, ConsumeOptions{NoAck: true}, func(d *Delivery) { dead.Add(1) }); err != nil {
			t.Fatal(err)
		}
		nch := channel(t, c)
		nch.Qos(50, false)
		var seen int
		if _, err := nch.Consume(q, ConsumeOptions{}, func(d *Delivery) {
			seen++
			if seen%2 == 0 {
				d.Nack(true, false)
			} else if seen == n {
				d.Reject(false)
			}
		}); err != nil {
			t.Fatal(err)
		}
		testutil.Until(10*time.Second, func() bool { return dead.Load() >= n })
		if dead.Load() != n {
			t.Fatalf("dead-lettered %d of %d", dead.Load(), n)
		}
	})
}

func TestChannelErrors(t *testing.T) {
	forEachBroker(t, func(t *testing.T, u string) {
		c := dial(t, u)
		ch := channel(t, c)
		_, err := ch.QueueDeclare(qname(t, "missing"), QueueOptions{Passive: true})
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.NotFound || ae.Hard {
			t.Fatalf("passive declare of a missing queue: %v", err)
		}
		if ch.Err() == nil {
			t.Fatal("channel still open after a channel error")
		}
		if err := ch.Publish("", "x", false, nil, nil); err == nil {
			t.Fatal("publish on a closed channel succeeded")
		}
		// The connection survives.
		ch2 := channel(t, c)
		ex := qname(t, "ex")
		if err := ch2.ExchangeDeclare(ex, "direct", false, true, nil); err != nil {
			t.Fatal(err)
		}
		defer ch2.ExchangeDelete(ex)
		err = ch2.ExchangeDeclare(ex, "fanout", false, true, nil)
		if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
			t.Fatalf("redeclare with another type: %v", err)
		}
		ch3 := channel(t, c)
		if err := ch3.ExchangeDelete(ex); err != nil {
			t.Fatal(err)
		}
		// Mandatory publish to nowhere comes back.
		ch3.ConfirmSelect()
		if err := ch3.Publish("", qname(t, "nowhere"), true, nil, []byte("x")); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := ch3.WaitConfirms(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if ch3.Returned() != 1 || ch3.Confirmed() != 1 {
			t.Fatalf("returned %d confirmed %d", ch3.Returned(), ch3.Confirmed())
		}
		if err := ch3.Close(); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(c.Err(), ErrClosed) {
			t.Fatalf("Err after Close: %v", c.Err())
		}
		if _, err := c.Channel(); err == nil {
			t.Fatal("channel on a closed connection")
		}
	})
}

func TestConnectionErrors(t *testing.T) {
	forEachBroker(t, func(t *testing.T, u string) {
		pu, _ := ParseURI(u)
		_, err := Dial("amqp://guest:wrong@"+pu.Addr+"/", Config{})
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.AccessRefused {
			t.Fatalf("bad password: %v", err)
		}
		_, err = Dial("amqp://guest:guest@"+pu.Addr+"/no-such-vhost", Config{})
		if !errors.As(err, &ae) || ae.Code != amqp.NotAllowed {
			t.Fatalf("missing vhost: %v", err)
		}
		// A hard error closes the connection: ack of an unknown tag is a
		// channel error (406) in RabbitMQ; frame errors are hard. Use a
		// consume on a missing queue (soft) then check the conn is fine.
		c := dial(t, u)
		ch := channel(t, c)
		if _, err := ch.Consume(qname(t, "nope"), ConsumeOptions{}, func(*Delivery) {}); err == nil {
			t.Fatal("consume from a missing queue succeeded")
		}
		if c.Err() != nil {
			t.Fatal(c.Err())
		}
	})
}

func TestHeartbeats(t *testing.T) {
	b := warrentest.Start(t)
	c, err := Dial(b.URL(), Config{Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(2500 * time.Millisecond)
	if _, err := c.Channel(); err != nil {
		t.Fatal(err)
	}
}

func TestConfirmTracker(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		r := rand.New(rand.NewPCG(seed, 1))
		var tr confirmTracker
		tr.init()
		n := uint64(1 + r.IntN(5000))
		settled := make([]bool, n+1)
		var total uint64
		var hi uint64 // highest tag published so far
		for total < n {
			if hi < n {
				hi = min(n, hi+uint64(1+r.IntN(3000)))
			}
			lo := tr.low
			tag := lo + uint64(r.IntN(int(hi-lo+1)))
			multiple := r.IntN(3) == 0
			want := uint64(0)
			for x := uint64(1); x <= tag; x++ {
				if (x == tag || multiple) && !settled[x] {
					settled[x] = true
					want++
				}
			}
			got := tr.settle(tag, multiple)
			if got != want {
				t.Fatalf("seed %d: settle(%d, %v) = %d, want %d", seed, tag, multiple, got, want)
			}
			total += got
			// duplicates count nothing
			if tr.settle(tag, false) != 0 {
				t.Fatalf("seed %d: duplicate counted", seed)
			}
		}
	}
}

func TestParseURI(t *testing.T) {
	for in, want := range map[string]URI{
		"amqp://":                     {Addr: "localhost:5672", Username: "guest", Password: "guest", VHost: "/"},
		"amqp://u:p@h:1/":             {Addr: "h:1", Username: "u", Password: "p", VHost: "/"},
		"amqp://u:p@h:1/%2f":          {Addr: "h:1", Username: "u", Password: "p", VHost: "/"},
		"amqp://u:p@127.0.0.1/vh":     {Addr: "127.0.0.1:5672", Username: "u", Password: "p", VHost: "vh"},
		"amqp://u:p@[::1]:5673/a%2fb": {Addr: "[::1]:5673", Username: "u", Password: "p", VHost: "a/b"},
	} {
		got, err := ParseURI(in)
		if err != nil || got != want {
			t.Errorf("ParseURI(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	if _, err := ParseURI("amqps://h/"); err == nil {
		t.Error("amqps accepted")
	}
}

func BenchmarkPublish(b *testing.B) {
	br := warrentest.Start(b)
	c, err := Dial(br.URL(), Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ch, _ := c.Channel()
	ch.QueueDeclare("bench", QueueOptions{Args: amqp.Table{"x-max-length": int64(1000)}})
	body := make([]byte, 16)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ch.Publish("", "bench", false, nil, body)
	}
	ch.Flush()
}
