package mgmt_test

import (
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	samqp "github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

// TestMetricsStreams: issue 25's Prometheus samples. The stream
// protocol's listener counts as rabbitmq_stream does (protocol="stream":
// publishers, consumers, received, confirmed, delivered), and each stream
// has Warren's per-stream families (its log and its consumers' lag); the
// page still parses strictly.
func TestMetricsStreams(t *testing.T) {
	b := warrentest.Start(t)
	env, err := stream.NewEnvironment(stream.NewEnvironmentOptions().SetUri(b.StreamURI()))
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if err := env.DeclareStream("m-events", nil); err != nil {
		t.Fatal(err)
	}
	p, err := env.NewProducer("m-events", nil)
	if err != nil {
		t.Fatal(err)
	}
	confirms := p.NotifyPublishConfirmation()
	for i := range 20 {
		if err := p.Send(samqp.NewMessage(fmt.Appendf(nil, "e%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for n := 0; n < 20; {
		select {
		case cs := <-confirms:
			n += len(cs)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 20 confirmed", n)
		}
	}
	got := make(chan struct{}, 100)
	c, err := env.NewConsumer("m-events", func(stream.ConsumerContext, *samqp.Message) { got <- struct{}{} },
		stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.First()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 20 {
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("not consumed")
		}
	}
	// an AMQP 0-9-1 consumer that acks nothing: its lag stays
	conn, err := amqp.Dial(b.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	ch.Qos(5, 0, false)
	if _, err := ch.Consume("m-events", "lagging", false, false, false, false, amqp.Table{"x-stream-offset": "first"}); err != nil {
		t.Fatal(err)
	}
	var sc *scrape
	testutil.EventuallyNil(t, 10*time.Second, "the stream samples", func() error {
		sc = getMetrics(t, b.MgmtURL())
		if v, _ := sc.get("rabbitmq_global_messages_delivered_total", "protocol", "stream", "queue_type", "rabbit_stream_queue"); v < 20 {
			return fmt.Errorf("delivered %v", v)
		}
		if v, _ := sc.get("warren_stream_consumer_lag", "vhost", "/", "queue", "m-events", "consumer_tag", "lagging"); v == 0 {
			return fmt.Errorf("lag %v", v)
		}
		return nil
	})
	sc.want(t, 20, "rabbitmq_global_messages_received_total", "protocol", "stream")
	sc.want(t, 20, "rabbitmq_global_messages_confirmed_total", "protocol", "stream")
	sc.want(t, 1, "rabbitmq_global_publishers", "protocol", "stream")
	sc.want(t, 1, "rabbitmq_global_consumers", "protocol", "stream")
	sc.want(t, 0, "warren_global_stream_publish_errors_total", "protocol", "stream")
	sc.want(t, 1, "warren_stream_segments", "vhost", "/", "queue", "m-events")
	sc.want(t, 0, "warren_stream_first_offset", "vhost", "/", "queue", "m-events")
	sc.want(t, 20, "warren_stream_committed_offset", "vhost", "/", "queue", "m-events")
	sc.want(t, 20, "rabbitmq_queue_messages_ready", "vhost", "/", "queue", "m-events")
	if v, _ := sc.get("warren_stream_bytes", "vhost", "/", "queue", "m-events"); v <= 0 {
		t.Errorf("warren_stream_bytes %v", v)
	}
	if v, _ := sc.get("warren_stream_consumer_lag", "vhost", "/", "queue", "m-events", "consumer_tag", "lagging"); v < 15 {
		t.Errorf("the lagging consumer's lag %v (prefetch 5, nothing acked)", v)
	}
	if sc.types["warren_stream_damaged_chunks_total"] != "counter" {
		t.Errorf("warren_stream_damaged_chunks_total type %q", sc.types["warren_stream_damaged_chunks_total"])
	}
}
