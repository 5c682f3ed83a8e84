package integration

import (
	"context"
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
