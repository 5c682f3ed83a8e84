package broker

import (
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
)

// countingSink takes every delivery, as a consumer with unlimited credit.
type countingSink struct{ n int }

func (s *countingSink) Deliver(c *Consumer, d Delivery) bool { s.n++; return true }
func (s *countingSink) Cancelled(c *Consumer)                {}

// BenchmarkPublishDeliver measures the broker's publish -> route ->
// enqueue -> deliver path without sockets or framing.
func BenchmarkPublishDeliver(b *testing.B) {
	for _, kind := range []string{KindDirect, KindFanout, KindTopic} {
		b.Run(kind, func(b *testing.B) {
			br := New(Config{})
			v := br.VHost("/")
			if err := v.DeclareExchange(ExchangeSpec{Name: "x", Kind: kind}, false); err != nil {
				b.Fatal(err)
			}
			q, _, _, err := v.DeclareQueue(QueueSpec{Name: "q"}, false)
			if err != nil {
				b.Fatal(err)
			}
			key := "a.b.c"
			if err := v.Bind("x", "q", false, key, nil, 0); err != nil {
				b.Fatal(err)
			}
			sink := &countingSink{}
			if err := q.AddConsumer(&Consumer{Tag: "c", NoAck: true, Sink: sink}); err != nil {
				b.Fatal(err)
			}
			var r Router
			body := make([]byte, 16)
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				m := &Message{Exchange: "x", RoutingKey: key, Body: body}
				if _, err := v.Publish(&r, "x", m); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if sink.n != b.N {
				b.Fatalf("delivered %d, want %d", sink.n, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkEnqueueGet measures a queue as a buffer: publish then basic.get.
func BenchmarkEnqueueGet(b *testing.B) {
	br := New(Config{})
	v := br.VHost("/")
	q, _, _, _ := v.DeclareQueue(QueueSpec{Name: "q"}, false)
	var r Router
	m := &Message{RoutingKey: "q", Body: make([]byte, 16), Props: amqp.Properties{DeliveryMode: 1}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := v.Publish(&r, "", m); err != nil {
			b.Fatal(err)
		}
		if _, _, ok := q.Get(true); !ok {
			b.Fatal("empty")
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// TestPublishReportsBusyQueue: a publish that finds a queue's lock held
// (consumers settling) says so, so that the publisher backs off (flow
// control); an uncontended publish does not.
func TestPublishReportsBusyQueue(t *testing.T) {
	b := New(Config{})
	v := b.VHost("/")
	q, _, _, err := v.DeclareQueue(QueueSpec{Name: "busy"}, false)
	if err != nil {
		t.Fatal(err)
	}
	var r Router
	res, err := v.Publish(&r, "", &Message{RoutingKey: "busy", Body: []byte("a")})
	if err != nil || res.Busy {
		t.Fatalf("uncontended publish: busy=%v err=%v", res.Busy, err)
	}
	q.mu.Lock()
	done := make(chan PublishResult)
	go func() {
		var r Router
		res, _ := v.Publish(&r, "", &Message{RoutingKey: "busy", Body: []byte("b")})
		done <- res
	}()
	time.Sleep(10 * time.Millisecond) // the publisher finds the lock held
	q.mu.Unlock()
	if res := <-done; !res.Busy {
		t.Fatal("publish into a queue whose lock was held did not report Busy")
	}
}
