// Command stream-events shows a stream (issue 25): events are appended
// once and read by whoever wants them, from where they want.
//
//   - a producer appends 5 events over the stream protocol, named so that
//     a resend after a crash is deduplicated;
//
//   - a named consumer reads them and stores its offset on the server;
//
//   - a second run of that consumer resumes after the stored offset;
//
//   - an AMQP 0-9-1 consumer replays the whole stream from first.
//
//     go run ./cmd/warren &
//     go run ./examples/stream-events
//
// (--stream-uri and --amqp-url name another broker: RabbitMQ with its
// rabbitmq_stream plugin runs it the same.)
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
)

func main() {
	suri := flag.String("stream-uri", "rabbitmq-stream://guest:guest@localhost:5552/%2f", "stream protocol URI")
	aurl := flag.String("amqp-url", "amqp://guest:guest@localhost:5672/", "AMQP 0-9-1 URL")
	name := flag.String("stream", "events", "stream name")
	flag.Parse()
	if err := run(*suri, *aurl, *name, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(streamURI, amqpURL, name string, out io.Writer) error {
	env, err := stream.NewEnvironment(stream.NewEnvironmentOptions().SetUri(streamURI))
	if err != nil {
		return err
	}
	defer env.Close()
	// A stream keeps its messages: a week here, then whole segments go.
	if err := env.DeclareStream(name, stream.NewStreamOptions().SetMaxAge(7*24*time.Hour)); err != nil {
		return err
	}
	defer env.DeleteStream(name)

	// 1. Append 5 events; the producer's name makes its publishing ids
	// deduplicated by the server.
	p, err := env.NewProducer(name, stream.NewProducerOptions().SetProducerName("billing"))
	if err != nil {
		return err
	}
	confirms := p.NotifyPublishConfirmation()
	for i := range 5 {
		m := amqp.NewMessage(fmt.Appendf(nil, "invoice-%d", i))
		m.SetPublishingId(int64(i + 1))
		if err := p.Send(m); err != nil {
			return err
		}
	}
	for n := 0; n < 5; {
		cs := <-confirms
		n += len(cs)
	}
	last, _ := p.GetLastPublishingId()
	fmt.Fprintf(out, "appended 5 events, last publishing id %d\n", last)
	p.Close()

	// 2. A named consumer reads 3 and stores where it is.
	read := func(n int) ([]string, error) {
		got := make(chan string, 10)
		spec := stream.OffsetSpecification{}.First()
		probe, err := env.NewConsumer(name, func(stream.ConsumerContext, *amqp.Message) {},
			stream.NewConsumerOptions().SetConsumerName("auditor").SetManualCommit().SetOffset(spec))
		if err != nil {
			return nil, err
		}
		if off, err := probe.QueryOffset(); err == nil {
			spec = stream.OffsetSpecification{}.Offset(off + 1) // after what it stored
		}
		probe.Close()
		var c *stream.Consumer
		c, err = env.NewConsumer(name, func(cc stream.ConsumerContext, m *amqp.Message) {
			got <- fmt.Sprintf("%d:%s", cc.Consumer.GetOffset(), m.GetData())
		}, stream.NewConsumerOptions().SetConsumerName("auditor").SetManualCommit().SetOffset(spec))
		if err != nil {
			return nil, err
		}
		defer c.Close()
		var out []string
		for range n {
			select {
			case s := <-got:
				out = append(out, s)
			case <-time.After(10 * time.Second):
				return out, fmt.Errorf("read %d of %d", len(out), n)
			}
		}
		var off int64
		fmt.Sscanf(out[len(out)-1], "%d:", &off)
		if err := c.StoreCustomOffset(off); err != nil {
			return nil, err
		}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if stored, err := c.QueryOffset(); err == nil && stored == off {
				break
			}
		}
		return out, nil
	}
	first, err := read(3)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "auditor read %v\n", first)
	rest, err := read(2)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "auditor resumed: %v\n", rest)

	// 3. Over AMQP 0-9-1: the whole stream again, from first.
	conn, err := amqp091.Dial(amqpURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Qos(100, 0, false); err != nil { // a stream consumer needs a prefetch
		return err
	}
	ds, err := ch.ConsumeWithContext(context.Background(), name, "", false, false, false, false, amqp091.Table{"x-stream-offset": "first"})
	if err != nil {
		return err
	}
	var replay []string
	for len(replay) < 5 {
		select {
		case d := <-ds:
			replay = append(replay, fmt.Sprintf("%v:%s", d.Headers["x-stream-offset"], d.Body))
			d.Ack(false) // returns credit; nothing leaves a stream
		case <-time.After(10 * time.Second):
			return fmt.Errorf("replay: %v", replay)
		}
	}
	fmt.Fprintf(out, "AMQP 0-9-1 replay from first: %v\n", replay)
	return nil
}
