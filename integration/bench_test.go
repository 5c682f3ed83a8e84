package integration

import (
	"context"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/warrentest"
)

// BenchmarkPublishDeliver measures publish -> deliver through an
// in-process broker over loopback TCP with amqp091-go on both ends
// (transient, 16-byte bodies). amqp091-go itself is a large part of the
// cost; cmd/warren-perf measures the broker with a leaner client.
func BenchmarkPublishDeliver(b *testing.B) {
	for _, tc := range []struct {
		name  string
		noAck bool
	}{{"autoack", true}, {"manualack", false}} {
		b.Run(tc.name, func(b *testing.B) {
			br := warrentest.Start(b)
			pc, err := amqp.Dial(br.URL())
			if err != nil {
				b.Fatal(err)
			}
			defer pc.Close()
			cc, err := amqp.Dial(br.URL())
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			pch, _ := pc.Channel()
			cch, _ := cc.Channel()
			q, err := cch.QueueDeclare("", false, false, true, false, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := cch.Qos(1000, 0, false); err != nil {
				b.Fatal(err)
			}
			msgs, err := cch.Consume(q.Name, "", tc.noAck, false, false, false, nil)
			if err != nil {
				b.Fatal(err)
			}
			body := make([]byte, 16)
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			go func() {
				for i := 0; i < b.N; i++ {
					if err := pch.PublishWithContext(context.Background(), "", q.Name, false, false, amqp.Publishing{Body: body}); err != nil {
						return
					}
				}
			}()
			timeout := time.After(5 * time.Minute)
			for i := 0; i < b.N; i++ {
				select {
				case d := <-msgs:
					if !tc.noAck && (i%100 == 99 || i == b.N-1) {
						d.Ack(true)
					}
				case <-timeout:
					b.Fatalf("received %d of %d", i, b.N)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkNackToDLQ measures dead-letters per second end to end: a
// consumer nacks (requeue=false, multiple every 100) messages of a work
// queue whose DLX routes them to a DLQ read by a second consumer; the
// clock runs from the first nack to the last DLQ delivery.
//
// With WARREN_BENCH_URL set (e.g. a RabbitMQ on 127.0.0.1:5672) the same
// benchmark runs against that broker instead, for a side-by-side ratio.
func BenchmarkNackToDLQ(b *testing.B) {
	url := os.Getenv("WARREN_BENCH_URL")
	if url == "" {
		url = warrentest.Start(b).URL()
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	sfx := randomSuffix()
	dlx, dlq, work := "bench-dlx-"+sfx, "bench-dlq-"+sfx, "bench-work-"+sfx
	ch.ExchangeDeclare(dlx, "direct", false, true, false, false, nil)
	ch.QueueDeclare(dlq, false, false, false, false, nil)
	ch.QueueBind(dlq, "failed", dlx, false, nil)
	ch.QueueDeclare(work, false, false, false, false, amqp.Table{"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "failed"})
	defer func() {
		ch.QueueDelete(work, false, false, false)
		ch.QueueDelete(dlq, false, false, false)
	}()
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 16)
	for i := 0; i < b.N; i++ {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", work, false, false, amqp.Publishing{Body: body})
		if err != nil {
			b.Fatal(err)
		}
		if i == b.N-1 {
			dc.Wait()
		}
	}
	cc, err := amqp.Dial(url)
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	dch, _ := cc.Channel()
	dead, err := dch.Consume(dlq, "", true, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	wch, _ := conn.Channel()
	wch.Qos(1000, 0, false)
	b.ReportAllocs()
	b.ResetTimer()
	deliveries, err := wch.Consume(work, "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for i := 0; i < b.N; i++ {
			d, ok := <-deliveries
			if !ok {
				return
			}
			if i%100 == 99 || i == b.N-1 {
				d.Nack(true, false)
			}
		}
	}()
	timeout := time.After(5 * time.Minute)
	for i := 0; i < b.N; i++ {
		select {
		case <-dead:
		case <-timeout:
			b.Fatalf("dead-lettered %d of %d", i, b.N)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deadletters/s")
}
