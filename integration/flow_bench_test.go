package integration

import (
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/perfclient"
	"github.com/warrenmq/warren/warrentest"
)

// BenchmarkConsumeSingleAcks is the "transient, manual ack, prefetch
// 1000" scenario as a Go benchmark, with the lean client on both ends
// (internal/perfclient) so that the broker is what is measured: one
// publisher sends b.N 16-byte messages as fast as it can, one consumer
// with prefetch 1000 acks every delivery singly (with -bench
// ConsumeSingleAcks/nack-dlq, nacks them into a DLQ instead and the clock
// stops at the last dead letter). It covers the settle path (one ack per
// delivery) and flow control (a flooding publisher must not starve the
// consumer); compare runs with benchstat.
func BenchmarkConsumeSingleAcks(b *testing.B) {
	for _, tc := range []struct {
		name string
		nack bool
	}{{"ack", false}, {"nack-dlq", true}} {
		b.Run(tc.name, func(b *testing.B) {
			br := warrentest.Start(b)
			dial := func() *perfclient.Channel {
				c, err := perfclient.Dial(br.URL(), perfclient.Config{})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.Close() })
				ch, err := c.Channel()
				if err != nil {
					b.Fatal(err)
				}
				return ch
			}
			pub, cons, dlqCons := dial(), dial(), dial()
			args := perfclient.QueueOptions{}
			if tc.nack {
				if err := cons.ExchangeDeclare("bench.dlx", "fanout", false, false, nil); err != nil {
					b.Fatal(err)
				}
				if _, err := cons.QueueDeclare("bench.dlq", perfclient.QueueOptions{}); err != nil {
					b.Fatal(err)
				}
				if err := cons.QueueBind("bench.dlq", "bench.dlx", "", nil); err != nil {
					b.Fatal(err)
				}
				args.Args = map[string]any{"x-dead-letter-exchange": "bench.dlx"}
			}
			if _, err := cons.QueueDeclare("bench.work", args); err != nil {
				b.Fatal(err)
			}
			if err := cons.Qos(1000, false); err != nil {
				b.Fatal(err)
			}
			done := make(chan struct{})
			n := 0
			count := func() {
				if n++; n == b.N {
					close(done)
				}
			}
			if _, err := cons.Consume("bench.work", perfclient.ConsumeOptions{}, func(d *perfclient.Delivery) {
				if tc.nack {
					d.Nack(false, false)
					return
				}
				d.Ack(false)
				count()
			}); err != nil {
				b.Fatal(err)
			}
			if tc.nack {
				if _, err := dlqCons.Consume("bench.dlq", perfclient.ConsumeOptions{NoAck: true}, func(*perfclient.Delivery) { count() }); err != nil {
					b.Fatal(err)
				}
			}
			body := make([]byte, 16)
			b.ReportAllocs()
			b.ResetTimer()
			go func() {
				for i := 0; i < b.N; i++ {
					if pub.Publish("", "bench.work", false, nil, body) != nil {
						return
					}
				}
				pub.Flush()
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Minute):
				b.Fatalf("%d of %d arrived", n, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
