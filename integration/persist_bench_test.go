package integration

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/warrentest"
)

// BenchmarkPersistentPublishConfirms measures confirmed publishes of
// persistent messages (DeliveryMode 2, 16-byte bodies) into one durable
// queue with no consumer: every confirm waits for the queue's log to be
// fsynced, so this is the throughput of the message store's group commit.
// b.N messages are split across the publishers; each publisher has its own
// connection and channel in confirm mode and keeps a window of unconfirmed
// publishes in flight:
//
//   - publishers=1: window 1000;
//   - publishers=100: window 50 each (5000 in flight in all, so the group
//     commit sees many channels with a few messages each, the shape of many
//     small clients).
//
// Run it with a fixed count, e.g.
//
//	go test -run '^$' -bench PersistentPublishConfirms -benchtime 20000x ./integration
//
// Metrics: msgs/s; and for the in-process broker msgs/fsync (requests of
// the group commit per fsync: one request per message here, since each
// message goes to one durable queue) and fsyncs/s.
//
// With WARREN_BENCH_URL set (e.g. amqp://guest:guest@127.0.0.1:5672/ for a
// local RabbitMQ) the same runs against that broker, without the fsync
// metrics; the queue is deleted afterwards.
func BenchmarkPersistentPublishConfirms(b *testing.B) {
	for _, tc := range []struct {
		publishers, window int
	}{{1, 1000}, {100, 50}} {
		b.Run(fmt.Sprintf("publishers=%d", tc.publishers), func(b *testing.B) {
			benchPersistentPublish(b, tc.publishers, tc.window)
		})
	}
}

func benchPersistentPublish(b *testing.B, publishers, window int) {
	url := os.Getenv("WARREN_BENCH_URL")
	var br *warrentest.Broker
	if url == "" {
		br = warrentest.Start(b)
		url = br.URL()
	}
	queue := "bench-persist-" + randomSuffix()
	_, ch := benchDial(b, url)
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
	if br == nil { // another broker: do not leave a durable queue behind
		b.Cleanup(func() { ch.QueueDelete(queue, false, false, false) })
	}

	chans := make([]*amqp.Channel, publishers)
	for i := range chans {
		_, chans[i] = benchDial(b, url)
	}
	body := make([]byte, 16)
	msg := func(int) amqp.Publishing {
		return amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body}
	}

	start := make(chan struct{})
	errs := make(chan error, publishers)
	var wg sync.WaitGroup
	for i, pch := range chans {
		n := b.N / publishers
		if i < b.N%publishers {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := publishConfirmed(pch, queue, n, window, msg); err != nil {
				errs <- fmt.Errorf("publisher %d: %w", i, err)
			}
		}()
	}
	var before broker.SyncStats
	if br != nil {
		before = br.Server().SyncStats()
	}
	b.ResetTimer()
	close(start)
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N)/secs, "msgs/s")
	if br != nil {
		after := br.Server().SyncStats()
		d := broker.SyncStats{
			Requests: after.Requests - before.Requests,
			Fsyncs:   after.Fsyncs - before.Fsyncs,
			Rounds:   after.Rounds - before.Rounds,
		}
		b.ReportMetric(d.RequestsPerFsync(), "msgs/fsync")
		b.ReportMetric(float64(d.Fsyncs)/secs, "fsyncs/s")
	}
}

// benchDial opens a connection and a channel, closed at cleanup.
func benchDial(tb testing.TB, url string) (*amqp.Connection, *amqp.Channel) {
	tb.Helper()
	c, err := amqp.Dial(url)
	if err != nil {
		tb.Fatalf("dial %s: %v", url, err)
	}
	tb.Cleanup(func() { c.Close() })
	ch, err := c.Channel()
	if err != nil {
		tb.Fatal(err)
	}
	return c, ch
}

// publishConfirmed puts ch in confirm mode and publishes n messages
// msg(0..n-1) to queue through the default exchange, keeping at most
// window unconfirmed; it returns once all are confirmed, or at the first
// nack or channel error. amqp091-go hands one Confirmation per delivery
// tag to NotifyPublish, in tag order, even when the broker acks several
// with multiple=true, so each Confirmation received frees one slot. The
// Publishing's body is written out before Publish returns, so msg may
// reuse one buffer.
func publishConfirmed(ch *amqp.Channel, queue string, n, window int, msg func(i int) amqp.Publishing) error {
	if n == 0 {
		return nil
	}
	// Buffered to the window: the library's reader never blocks on it.
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, window))
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Confirm(false); err != nil {
		return err
	}
	outstanding, confirmed := 0, 0
	wait := func() error {
		c, ok := <-confirms
		if !ok {
			select {
			case err := <-closed:
				return fmt.Errorf("channel closed after %d of %d confirms: %v", confirmed, n, err)
			default:
				return fmt.Errorf("channel closed after %d of %d confirms", confirmed, n)
			}
		}
		if !c.Ack {
			return fmt.Errorf("publish %d nacked", c.DeliveryTag)
		}
		outstanding--
		confirmed++
		return nil
	}
	ctx := context.Background()
	for i := 0; i < n; i++ {
		for outstanding >= window {
			if err := wait(); err != nil {
				return err
			}
		}
		if err := ch.PublishWithContext(ctx, "", queue, false, false, msg(i)); err != nil {
			return fmt.Errorf("publish %d of %d: %w", i+1, n, err)
		}
		outstanding++
	}
	for outstanding > 0 {
		if err := wait(); err != nil {
			return err
		}
	}
	return nil
}
