package integration

// Streams over the stream protocol (issue 25), driven by RabbitMQ's Go
// stream client, the same scenarios against Warren and, when it is
// reachable, RabbitMQ 3.10.8 with rabbitmq_stream (CI enables it). Where
// 3.10 lacks a 3.11+ feature (single active consumer, super streams over
// the protocol, filtering), the scenario runs on Warren only and says so.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
	"github.com/warrenmq/warren/warrentest"
)

// streamProtoTarget is a broker's stream endpoint and its AMQP URL.
type streamProtoTarget struct {
	kind    string
	uri     string // rabbitmq-stream://
	amqpURL string
	base    string
	warren  *warrentest.Broker
}

func streamProtoTargets(t *testing.T) []*streamProtoTarget {
	t.Helper()
	w := warrentest.Start(t)
	tgs := []*streamProtoTarget{{kind: "warren", uri: w.StreamURI(), amqpURL: w.URL(), base: "ws-" + randomSuffix(), warren: w}}
	if u := rabbitURL(t); u != "" {
		addr := os.Getenv("WARREN_RABBITMQ_STREAM_ADDR")
		if addr == "" {
			addr = "localhost:5552"
		}
		nc, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("RabbitMQ's stream port %s not reachable under CI=true (rabbitmq-plugins enable rabbitmq_stream): %v", addr, err)
			}
			t.Logf("RabbitMQ's stream port %s not reachable (%v): Warren only", addr, err)
			return tgs
		}
		nc.Close()
		tgs = append(tgs, &streamProtoTarget{kind: "rabbitmq", uri: "rabbitmq-stream://guest:guest@" + addr + "/%2f", amqpURL: u, base: "ws-" + randomSuffix()})
	}
	return tgs
}

func (tg *streamProtoTarget) env(t *testing.T) *stream.Environment {
	t.Helper()
	env, err := stream.NewEnvironment(stream.NewEnvironmentOptions().SetUri(tg.uri).SetMaxProducersPerClient(10).SetMaxConsumersPerClient(10))
	if err != nil {
		t.Fatalf("%s: %v", tg.kind, err)
	}
	t.Cleanup(func() { env.Close() })
	return env
}

// sendConfirmed publishes bodies with a producer and waits for each
// confirm; it returns how many were confirmed.
func sendConfirmed(t *testing.T, p *stream.Producer, bodies ...string) int {
	t.Helper()
	ch := p.NotifyPublishConfirmation()
	for _, b := range bodies {
		if err := p.Send(amqp.NewMessage([]byte(b))); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	timeout := time.After(10 * time.Second)
	for n < len(bodies) {
		select {
		case cs := <-ch:
			for _, c := range cs {
				if !c.IsConfirmed() {
					t.Fatalf("message %d not confirmed: %v", c.GetPublishingId(), c.GetError())
				}
				n++
			}
		case <-timeout:
			t.Fatalf("%d of %d confirmed", n, len(bodies))
		}
	}
	return n
}

// consumeN reads n messages from stream name at offset spec, returning
// "offset:body".
func consumeN(t *testing.T, env *stream.Environment, name string, spec stream.OffsetSpecification, n int, opts ...func(*stream.ConsumerOptions)) []string {
	t.Helper()
	var mu sync.Mutex
	var got []string
	o := stream.NewConsumerOptions().SetOffset(spec)
	for _, f := range opts {
		f(o)
	}
	c, err := env.NewConsumer(name, func(cc stream.ConsumerContext, m *amqp.Message) {
		mu.Lock()
		got = append(got, fmt.Sprintf("%d:%s", cc.Consumer.GetOffset(), m.GetData()))
		mu.Unlock()
	}, o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		k := len(got)
		mu.Unlock()
		if k >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // and nothing more
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(got)
}

// TestStreamProtocolBasics: create, publish with confirms, read from each
// offset specification, delete: the same on both brokers.
func TestStreamProtocolBasics(t *testing.T) {
	results := map[string][]string{}
	for _, tg := range streamProtoTargets(t) {
		env := tg.env(t)
		name := tg.base + "-basics"
		if err := env.DeclareStream(name, stream.NewStreamOptions().SetMaxLengthBytes(stream.ByteCapacity{}.GB(1))); err != nil {
			t.Fatalf("%s: declare: %v", tg.kind, err)
		}
		// declaring it again with the same arguments is fine for the
		// client (it maps "exists" to nil); with others it is refused
		err := env.DeclareStream(name, stream.NewStreamOptions().SetMaxLengthBytes(stream.ByteCapacity{}.GB(2)))
		results[tg.kind] = append(results[tg.kind], fmt.Sprintf("redeclare other: %v", err))
		p, err := env.NewProducer(name, stream.NewProducerOptions().SetBatchSize(1))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			sendConfirmed(t, p, fmt.Sprintf("m%d", i)) // one chunk each
		}
		p.Close()
		for _, spec := range []struct {
			name string
			spec stream.OffsetSpecification
			n    int
		}{
			{"first", stream.OffsetSpecification{}.First(), 5},
			{"offset 2", stream.OffsetSpecification{}.Offset(2), 3},
			{"last", stream.OffsetSpecification{}.Last(), 1},
			{"next", stream.OffsetSpecification{}.Next(), 0},
			{"timestamp an hour ago", stream.OffsetSpecification{}.Timestamp(time.Now().Add(-time.Hour).UnixMilli()), 5},
		} {
			got := consumeN(t, env, name, spec.spec, spec.n)
			results[tg.kind] = append(results[tg.kind], fmt.Sprintf("%s: %v", spec.name, got))
		}
		if tg.kind == "warren" { // StreamStats came with 3.11
			stats, err := env.StreamStats(name)
			if err != nil {
				t.Fatal(err)
			}
			first, _ := stats.FirstOffset()
			committed, _ := stats.CommittedChunkId()
			results[tg.kind] = append(results[tg.kind], fmt.Sprintf("stats: first %d committed %d", first, committed))
		}
		results[tg.kind] = append(results[tg.kind], fmt.Sprintf("exists: %v", streamExists(env, name)))
		if err := env.DeleteStream(name); err != nil {
			t.Fatal(err)
		}
		results[tg.kind] = append(results[tg.kind], fmt.Sprintf("delete missing: %v", env.DeleteStream(name)))
		results[tg.kind] = append(results[tg.kind], fmt.Sprintf("exists after delete: %v", streamExists(env, name)))
		_, err = env.NewProducer(name, nil)
		results[tg.kind] = append(results[tg.kind], fmt.Sprintf("producer on a missing stream: %v", err))
	}
	w := results["warren"]
	want := []string{
		"redeclare other: Precondition Failed",
		"first: [0:m0 1:m1 2:m2 3:m3 4:m4]",
		"offset 2: [2:m2 3:m3 4:m4]",
		"last: [4:m4]",
		"next: []",
		"timestamp an hour ago: [0:m0 1:m1 2:m2 3:m3 4:m4]",
		"stats: first 0 committed 4",
		"exists: true",
		"delete missing: Stream Does Not Exist",
		"exists after delete: false",
		"producer on a missing stream: Stream Does Not Exist",
	}
	if !slices.Equal(w, want) {
		t.Errorf("Warren:\n%v\nwant\n%v", w, want)
	}
	if r, ok := results["rabbitmq"]; ok {
		w = slices.DeleteFunc(slices.Clone(w), func(s string) bool { return strings.HasPrefix(s, "stats:") })
		if !slices.Equal(w, r) {
			t.Errorf("Warren:\n%v\nRabbitMQ:\n%v", w, r)
		}
	}
}

func streamExists(env *stream.Environment, name string) bool {
	ok, err := env.StreamExists(name)
	return ok && err == nil
}

// TestStreamProtocolDedup: a named producer's publishing ids are
// deduplicated; QueryPublisherSequence gives the last one; the same on
// both brokers.
func TestStreamProtocolDedup(t *testing.T) {
	results := map[string][]string{}
	for _, tg := range streamProtoTargets(t) {
		env := tg.env(t)
		name := tg.base + "-dedup"
		if err := env.DeclareStream(name, nil); err != nil {
			t.Fatal(err)
		}
		p, err := env.NewProducer(name, stream.NewProducerOptions().SetProducerName("p1"))
		if err != nil {
			t.Fatal(err)
		}
		send := func(id int64, body string) {
			m := amqp.NewMessage([]byte(body))
			m.SetPublishingId(id)
			if err := p.Send(m); err != nil {
				t.Fatal(err)
			}
		}
		ch := p.NotifyPublishConfirmation()
		for i, id := range []int64{1, 2, 3, 2, 3, 4, 1} {
			send(id, fmt.Sprintf("b%d-%d", i, id))
		}
		// The client keeps its unconfirmed messages by publishing id, so
		// the 7 sends are 4 ids to confirm.
		confirmed := 0
		for timeout := time.After(10 * time.Second); confirmed < 4; {
			select {
			case cs := <-ch:
				for _, c := range cs {
					if !c.IsConfirmed() {
						t.Fatalf("%s: id %d not confirmed: %v", tg.kind, c.GetPublishingId(), c.GetError())
					}
				}
				confirmed += len(cs)
			case <-timeout:
				t.Fatalf("%s: %d of 4 ids confirmed", tg.kind, confirmed)
			}
		}
		seq, err := p.GetLastPublishingId()
		if err != nil {
			t.Fatal(err)
		}
		p.Close()
		got := consumeN(t, env, name, stream.OffsetSpecification{}.First(), 4)
		results[tg.kind] = append(results[tg.kind], fmt.Sprintf("last id %d, read %v", seq, got))
		// a new producer with the same name resumes from the last id
		p2, err := env.NewProducer(name, stream.NewProducerOptions().SetProducerName("p1"))
		if err != nil {
			t.Fatal(err)
		}
		seq2, _ := p2.GetLastPublishingId()
		results[tg.kind] = append(results[tg.kind], fmt.Sprintf("resumed at %d", seq2))
		p2.Close()
		env.DeleteStream(name)
	}
	w := results["warren"]
	if !slices.Equal(w, []string{"last id 4, read [0:b0-1 1:b1-2 2:b2-3 3:b5-4]", "resumed at 4"}) {
		t.Errorf("Warren: %v", w)
	}
	if r, ok := results["rabbitmq"]; ok && !slices.Equal(w, r) {
		t.Errorf("Warren %v, RabbitMQ %v", w, r)
	}
}

// TestStreamProtocolOffsetTracking: stored offsets, QueryOffset, and the
// offset a StoreOffset takes in the stream (3.10.8 and 4.x alike).
func TestStreamProtocolOffsetTracking(t *testing.T) {
	results := map[string][]string{}
	for _, tg := range streamProtoTargets(t) {
		env := tg.env(t)
		name := tg.base + "-track"
		if err := env.DeclareStream(name, nil); err != nil {
			t.Fatal(err)
		}
		p, _ := env.NewProducer(name, stream.NewProducerOptions().SetBatchSize(1))
		for i := range 3 {
			sendConfirmed(t, p, fmt.Sprintf("m%d", i))
		}
		c, err := env.NewConsumer(name, func(stream.ConsumerContext, *amqp.Message) {},
			stream.NewConsumerOptions().SetConsumerName("c1").SetOffset(stream.OffsetSpecification{}.First()))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.QueryOffset()
		results[tg.kind] = append(results[tg.kind], fmt.Sprintf("before store: %v", err))
		if err := c.StoreCustomOffset(1); err != nil {
			t.Fatal(err)
		}
		var off int64
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if off, err = c.QueryOffset(); err == nil {
				break
			}
		}
		results[tg.kind] = append(results[tg.kind], fmt.Sprintf("stored: %d %v", off, err))
		c.Close()
		sendConfirmed(t, p, "m3")
		// the stored offset took offset 3; m3 is at 4
		got := consumeN(t, env, name, stream.OffsetSpecification{}.First(), 4)
		results[tg.kind] = append(results[tg.kind], fmt.Sprintf("read: %v", got))
		p.Close()
		env.DeleteStream(name)
	}
	w := results["warren"]
	if !slices.Equal(w, []string{"before store: Offset not found", "stored: 1 <nil>", "read: [0:m0 1:m1 2:m2 4:m3]"}) {
		t.Errorf("Warren: %v", w)
	}
	if r, ok := results["rabbitmq"]; ok && !slices.Equal(w, r) {
		t.Errorf("Warren %v, RabbitMQ %v", w, r)
	}
}

// TestStreamCrossProtocol: what one protocol publishes, the other reads,
// on both brokers.
func TestStreamCrossProtocol(t *testing.T) {
	results := map[string][]string{}
	for _, tg := range streamProtoTargets(t) {
		env := tg.env(t)
		name := tg.base + "-cross"
		if err := env.DeclareStream(name, nil); err != nil {
			t.Fatal(err)
		}
		conn, err := amqp091.Dial(tg.amqpURL)
		if err != nil {
			t.Fatal(err)
		}
		ch, _ := conn.Channel()
		ch.Confirm(false)
		dc, err := ch.PublishWithDeferredConfirm("", name, false, false, amqp091.Publishing{
			Body: []byte("from-091"), ContentType: "text/plain", MessageId: "mid", CorrelationId: "c", Priority: 4, DeliveryMode: 2,
			Headers: amqp091.Table{"k": "v", "n": int32(5)}, Type: "t", AppId: "a"})
		if err != nil {
			t.Fatal(err)
		}
		dc.Wait()
		p, _ := env.NewProducer(name, nil)
		m := amqp.NewMessage([]byte("from-stream"))
		m.Properties = &amqp.MessageProperties{MessageID: "smid", ContentType: "ct", CorrelationID: "scorr", ReplyTo: "rt"}
		m.ApplicationProperties = map[string]interface{}{"k": "v", "n": int64(3)}
		sendOne := p.NotifyPublishConfirmation()
		p.Send(m)
		<-sendOne
		p.Close()
		// stream side reads both
		var mu sync.Mutex
		var seen []string
		c, err := env.NewConsumer(name, func(cc stream.ConsumerContext, m *amqp.Message) {
			mu.Lock()
			defer mu.Unlock()
			desc := fmt.Sprintf("data=%s", m.GetData())
			if m.Properties != nil {
				desc += fmt.Sprintf(" id=%v ct=%s corr=%v", m.Properties.MessageID, m.Properties.ContentType, m.Properties.CorrelationID)
			}
			desc += fmt.Sprintf(" app=%v ann=%v", m.ApplicationProperties, m.Annotations)
			seen = append(seen, desc)
		}, stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.First()))
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			n := len(seen)
			mu.Unlock()
			if n >= 2 || time.Now().After(deadline) {
				break
			}
		}
		c.Close()
		mu.Lock()
		for _, s := range seen {
			results[tg.kind] = append(results[tg.kind], strings.ReplaceAll(s, name, "{stream}"))
		}
		mu.Unlock()
		// 0-9-1 side reads both
		ch.Qos(10, 0, false)
		ds, err := ch.Consume(name, "", false, false, false, false, amqp091.Table{"x-stream-offset": "first"})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			select {
			case d := <-ds:
				delete(d.Headers, "x-stream-offset")
				results[tg.kind] = append(results[tg.kind], fmt.Sprintf("091 body=%s id=%s ct=%s corr=%s rt=%s prio=%d mode=%d type=%s app=%s headers=%v x=%q rk-is-stream=%v",
					d.Body, d.MessageId, d.ContentType, d.CorrelationId, d.ReplyTo, d.Priority, d.DeliveryMode, d.Type, d.AppId, d.Headers, d.Exchange, d.RoutingKey == name))
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: 0-9-1 read nothing", tg.kind)
			}
		}
		conn.Close()
		env.DeleteStream(name)
	}
	w := results["warren"]
	if len(w) != 4 {
		t.Fatalf("Warren: %v", w)
	}
	if r, ok := results["rabbitmq"]; ok {
		for i := range w {
			if w[i] != r[i] {
				t.Errorf("Warren   %s\nRabbitMQ %s", w[i], r[i])
			}
		}
	}
	t.Log(w)
}

var _ = errors.New
var _ = message.StreamMessage(nil)

// The 3.11+ features, which RabbitMQ 3.10.8 lacks: single active
// consumer, super streams over the protocol and filtering run on Warren
// only (their behaviour is 4.x's, rabbitmq-server's
// rabbit_stream_sac_coordinator.erl and rabbit_stream_manager.erl).

// TestStreamSingleActiveConsumer: of two consumers with one name, one
// reads; when it goes, the other is promoted (ConsumerUpdate) and
// starts where it answers.
func TestStreamSingleActiveConsumer(t *testing.T) {
	w := warrentest.Start(t)
	tg := &streamProtoTarget{kind: "warren", uri: w.StreamURI()}
	env := tg.env(t)
	if err := env.DeclareStream("sac", nil); err != nil {
		t.Fatal(err)
	}
	p, _ := env.NewProducer("sac", stream.NewProducerOptions().SetBatchSize(1))
	for i := range 3 {
		sendConfirmed(t, p, fmt.Sprintf("m%d", i))
	}
	var mu sync.Mutex
	got := map[string][]string{}
	promoted := map[string]int{}
	consumer := func(who string) *stream.Consumer {
		c, err := env.NewConsumer("sac", func(cc stream.ConsumerContext, m *amqp.Message) {
			mu.Lock()
			got[who] = append(got[who], string(m.GetData()))
			mu.Unlock()
		}, stream.NewConsumerOptions().SetConsumerName("group").SetSingleActiveConsumer(
			stream.NewSingleActiveConsumer(func(_ string, active bool) stream.OffsetSpecification {
				mu.Lock()
				if active {
					promoted[who]++
				}
				mu.Unlock()
				if who == "b" {
					return stream.OffsetSpecification{}.Offset(2) // where a left off
				}
				return stream.OffsetSpecification{}.First()
			})))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := consumer("a")
	b := consumer("b")
	waitUntil := func(what string, f func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !f(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("%s: got %v, promoted %v", what, got, promoted)
			}
		}
	}
	waitUntil("a reads", func() bool { mu.Lock(); defer mu.Unlock(); return len(got["a"]) == 3 })
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	if len(got["b"]) != 0 || promoted["b"] != 0 || promoted["a"] != 1 {
		t.Fatalf("the inactive consumer: got %v, promoted %v", got, promoted)
	}
	mu.Unlock()
	a.Close()
	waitUntil("b promoted", func() bool { mu.Lock(); defer mu.Unlock(); return len(got["b"]) == 1 })
	sendConfirmed(t, p, "m3")
	waitUntil("b reads on", func() bool { mu.Lock(); defer mu.Unlock(); return len(got["b"]) == 2 })
	mu.Lock()
	if !slices.Equal(got["b"], []string{"m2", "m3"}) {
		t.Fatalf("b read %v, want [m2 m3] (from the offset it answered)", got["b"])
	}
	mu.Unlock()
	b.Close()
	p.Close()
}

// TestStreamSuperStream: a super stream made over the protocol is a
// direct exchange with x-super-stream and one bound stream per
// partition; Partitions and Route answer from the bindings; a super
// stream producer and consumer move messages through it.
func TestStreamSuperStream(t *testing.T) {
	w := warrentest.Start(t)
	tg := &streamProtoTarget{kind: "warren", uri: w.StreamURI()}
	env := tg.env(t)
	if err := env.DeclareSuperStream("orders", stream.NewPartitionsOptions(3)); err != nil {
		t.Fatal(err)
	}
	parts, err := env.QueryPartitions("orders")
	if err != nil || !slices.Equal(parts, []string{"orders-0", "orders-1", "orders-2"}) {
		t.Fatalf("partitions %v %v", parts, err)
	}
	route, err := env.QueryRoute("orders", "1")
	if err != nil || !slices.Equal(route, []string{"orders-1"}) {
		t.Fatalf("route of key 1: %v %v", route, err)
	}
	if _, err := env.QueryPartitions("missing"); err == nil {
		t.Fatal("partitions of a missing super stream")
	}
	// the exchange, as RabbitMQ makes it
	x := w.Broker().VHost("/").Exchange("orders")
	if x == nil || x.Kind != "direct" || x.Args["x-super-stream"] != true {
		t.Fatalf("the super stream's exchange: %+v", x)
	}
	prod, err := env.NewSuperStreamProducer("orders", stream.NewSuperStreamProducerOptions(
		stream.NewHashRoutingStrategy(func(m message.StreamMessage) string { return m.GetMessageProperties().MessageID.(string) })))
	if err != nil {
		t.Fatal(err)
	}
	confirms := prod.NotifyPublishConfirmation(100)
	const n = 30
	for i := range n {
		m := amqp.NewMessage([]byte(fmt.Sprint(i)))
		m.Properties = &amqp.MessageProperties{MessageID: fmt.Sprint("id", i)}
		if err := prod.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	perPartition := map[string]int{}
	for k := 0; k < n; {
		select {
		case c := <-confirms:
			for _, st := range c.ConfirmationStatus {
				if !st.IsConfirmed() {
					t.Fatal("not confirmed")
				}
				perPartition[c.Partition]++
				k++
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d confirmed", k, n)
		}
	}
	if len(perPartition) != 3 {
		t.Fatalf("messages by partition: %v (the hash spreads 30 over all 3)", perPartition)
	}
	prod.Close()
	var mu sync.Mutex
	seen := map[string]bool{}
	cons, err := env.NewSuperStreamConsumer("orders", func(cc stream.ConsumerContext, m *amqp.Message) {
		mu.Lock()
		seen[string(m.GetData())] = true
		mu.Unlock()
	}, stream.NewSuperStreamConsumerOptions().SetOffset(stream.OffsetSpecification{}.First()))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		k := len(seen)
		mu.Unlock()
		if k == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the super stream consumer read %d of %d", k, n)
		}
	}
	cons.Close()
	if err := env.DeleteSuperStream("orders"); err != nil {
		t.Fatal(err)
	}
	if w.Broker().VHost("/").Queue("orders-0") != nil || w.Broker().VHost("/").Exchange("orders") != nil {
		t.Fatal("the super stream's partitions or exchange outlived it")
	}
}

// TestStreamFiltering: the server skips chunks whose Bloom filter
// cannot hold a wanted value (the client's post-filter never sees their
// messages); match-unfiltered adds the chunks of messages without a
// value. Over AMQP 0-9-1, x-stream-filter skips chunks the same way and
// delivers the others whole, as RabbitMQ (the application filters the
// messages, by x-stream-filter-value for what 0-9-1 publishers sent).
func TestStreamFiltering(t *testing.T) {
	w := warrentest.Start(t)
	tg := &streamProtoTarget{kind: "warren", uri: w.StreamURI()}
	env := tg.env(t)
	if err := env.DeclareStream("filtered", nil); err != nil {
		t.Fatal(err)
	}
	p, err := env.NewProducer("filtered", stream.NewProducerOptions().SetBatchSize(10).SetFilter(
		stream.NewProducerFilter(func(m message.StreamMessage) string {
			s, _ := m.GetApplicationProperties()["state"].(string)
			return s
		})))
	if err != nil {
		t.Fatal(err)
	}
	confirms := p.NotifyPublishConfirmation()
	batch := func(state string, n int) {
		var ms []message.StreamMessage
		for i := range n {
			m := amqp.NewMessage([]byte(fmt.Sprint(state, i)))
			if state != "" {
				m.ApplicationProperties = map[string]interface{}{"state": state}
			}
			ms = append(ms, m)
		}
		if err := p.BatchSend(ms); err != nil {
			t.Fatal(err)
		}
		// confirmed before the next is sent: a chunk of its own
		for k := 0; k < n; {
			select {
			case cs := <-confirms:
				k += len(cs)
			case <-time.After(10 * time.Second):
				t.Fatalf("%d of %d confirmed", k, n)
			}
		}
	}
	batch("CA", 5)
	batch("NY", 5)
	batch("CA", 5)
	p.Close()
	// a plain (v1) producer's messages have no value
	p2, _ := env.NewProducer("filtered", nil)
	sendConfirmed(t, p2, "plain0", "plain1")
	p2.Close()
	read := func(values []string, unfiltered bool) (delivered []string, sawByPostFilter int) {
		var mu sync.Mutex
		c, err := env.NewConsumer("filtered", func(cc stream.ConsumerContext, m *amqp.Message) {
			mu.Lock()
			delivered = append(delivered, string(m.GetData()))
			mu.Unlock()
		}, stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.First()).SetFilter(
			stream.NewConsumerFilter(values, unfiltered, func(m *amqp.Message) bool {
				mu.Lock()
				sawByPostFilter++
				mu.Unlock()
				s, _ := m.ApplicationProperties["state"].(string)
				return slices.Contains(values, s) || unfiltered && s == ""
			})))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(700 * time.Millisecond)
		c.Close()
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(delivered), sawByPostFilter
	}
	got, saw := read([]string{"CA"}, false)
	if len(got) != 10 || saw != 10 {
		t.Fatalf("filter CA: delivered %v, the post-filter saw %d (want 10: the NY chunk skipped by the server)", got, saw)
	}
	got, saw = read([]string{"NY"}, true)
	if len(got) != 7 || saw != 7 {
		t.Fatalf("filter NY with unfiltered: delivered %v, post-filter saw %d", got, saw)
	}
	// AMQP 0-9-1
	conn, err := amqp091.Dial(w.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	ch.Confirm(false)
	for _, st := range []string{"NY", "CA", ""} {
		h := amqp091.Table{}
		if st != "" {
			h["x-stream-filter-value"] = st
		}
		dc, _ := ch.PublishWithDeferredConfirm("", "filtered", false, false, amqp091.Publishing{Body: []byte("091-" + st), Headers: h})
		dc.Wait()
	}
	ch.Qos(100, 0, false)
	ds, err := ch.Consume("filtered", "", false, false, false, false, amqp091.Table{"x-stream-offset": "first", "x-stream-filter": []any{"NY"}})
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for done := false; !done; {
		select {
		case d := <-ds:
			bodies = append(bodies, string(d.Body))
		case <-time.After(500 * time.Millisecond):
			done = true
		}
	}
	if want := []string{"NY0", "NY1", "NY2", "NY3", "NY4", "091-NY"}; !slices.Equal(bodies, want) { // the NY chunks
		t.Fatalf("0-9-1 x-stream-filter NY: %v, want %v", bodies, want)
	}
}

// TestStreamManagementEndpoints: /api/stream/connections, publishers and
// consumers list the same objects with the same fields on both brokers.
func TestStreamManagementEndpoints(t *testing.T) {
	results := map[string][]string{}
	for _, tg := range streamProtoTargets(t) {
		mg := rabbitMgmtURL(t)
		if tg.warren != nil {
			mg = tg.warren.MgmtURL()
		} else if mg == "" {
			continue
		}
		env := tg.env(t)
		name := tg.base + "-api"
		if err := env.DeclareStream(name, nil); err != nil {
			t.Fatal(err)
		}
		p, err := env.NewProducer(name, stream.NewProducerOptions().SetProducerName("pref"))
		if err != nil {
			t.Fatal(err)
		}
		sendConfirmed(t, p, "x")
		c, err := env.NewConsumer(name, func(stream.ConsumerContext, *amqp.Message) {},
			stream.NewConsumerOptions().SetConsumerName("cref").SetOffset(stream.OffsetSpecification{}.First()))
		if err != nil {
			t.Fatal(err)
		}
		get := func(path string) []map[string]any {
			var out []map[string]any
			req, _ := http.NewRequest("GET", mg+path, nil)
			req.SetBasicAuth("guest", "guest")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			json.NewDecoder(resp.Body).Decode(&out)
			return out
		}
		mine := func(path string) map[string]any {
			for _, o := range get(path) {
				if q, _ := o["queue"].(map[string]any); q != nil && q["name"] == name {
					return o
				}
			}
			return nil
		}
		var pub, cons map[string]any
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			pub, cons = mine("/api/stream/publishers"), mine("/api/stream/consumers")
			if pub != nil && cons != nil && pub["confirmed"] == 1.0 && cons["consumed"] == 1.0 {
				break
			}
		}
		if pub == nil || cons == nil {
			t.Fatalf("%s: publisher %v consumer %v", tg.kind, pub, cons)
		}
		conns := get("/api/stream/connections")
		if len(conns) == 0 {
			t.Fatalf("%s: no stream connections listed", tg.kind)
		}
		keys := func(m map[string]any) string {
			var ks []string
			for k := range m {
				if k != "active" { // Warren's own (single active consumer)
					ks = append(ks, k)
				}
			}
			slices.Sort(ks)
			return strings.Join(ks, ",")
		}
		var connKeys []string
		for k := range conns[0] {
			connKeys = append(connKeys, k)
		}
		results[tg.kind] = append(results[tg.kind],
			"publisher: "+keys(pub), fmt.Sprintf("publisher values: id %v ref %v published %v confirmed %v errored %v", pub["publisher_id"], pub["reference"], pub["published"], pub["confirmed"], pub["errored"]),
			"consumer: "+keys(cons), fmt.Sprintf("consumer values: sub %v offset %v props %v", cons["subscription_id"], cons["offset"], cons["properties"]))
		// Warren's connections carry RabbitMQ's main fields (RabbitMQ adds
		// Erlang ones: garbage_collection, reductions, ...)
		if tg.kind == "warren" {
			for _, k := range []string{"name", "user", "vhost", "peer_host", "peer_port", "host", "port", "protocol", "client_properties", "frame_max", "auth_mechanism", "connected_at", "recv_oct", "send_oct", "ssl", "state", "timeout", "user_provided_name", "node"} {
				if _, ok := conns[0][k]; !ok {
					t.Errorf("stream connection without %s: %v", k, conns[0])
				}
			}
		}
		c.Close()
		p.Close()
		env.DeleteStream(name)
	}
	w := results["warren"]
	if len(w) != 4 || !strings.Contains(w[1], "ref pref published 1 confirmed 1 errored 0") {
		t.Fatalf("Warren: %v", w)
	}
	if r, ok := results["rabbitmq"]; ok && !slices.Equal(w, r) {
		t.Errorf("Warren:\n%s\nRabbitMQ:\n%s", strings.Join(w, "\n"), strings.Join(r, "\n"))
	}
}

// TestStreamSubBatches: a stream-protocol publisher's sub-batches, plain
// and with each of the protocol's codecs (gzip, snappy, lz4, zstd, as the
// Go client writes them), read over AMQP 0-9-1 in order with their
// offsets. RabbitMQ 3.10.8 closes such a consumer's channel with 541
// INTERNAL_ERROR at the first sub-batch (logged when it differs); 4.3
// delivers the plain ones and skips the compressed ones
// (rabbit_stream_queue.erl); Warren delivers them all (beyond RabbitMQ).
func TestStreamSubBatches(t *testing.T) {
	for _, tg := range streamProtoTargets(t) {
		env := tg.env(t)
		name := tg.base + "-subbatch"
		if err := env.DeclareStream(name, nil); err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, comp := range []stream.Compression{stream.Compression{}.None(), stream.Compression{}.Gzip(),
			stream.Compression{}.Snappy(), stream.Compression{}.Lz4(), stream.Compression{}.Zstd()} {
			p, err := env.NewProducer(name, stream.NewProducerOptions().SetSubEntrySize(5).SetCompression(comp))
			if err != nil {
				t.Fatal(err)
			}
			var bodies []string
			for i := range 10 {
				bodies = append(bodies, fmt.Sprintf("%s-%d-%s", comp, i, strings.Repeat("x", i*40)))
			}
			if n := sendConfirmed(t, p, bodies...); n != len(bodies) {
				t.Fatalf("%s: %d of %d confirmed", comp, n, len(bodies))
			}
			p.Close()
			want = append(want, bodies...)
		}
		conn, err := amqp091.Dial(tg.amqpURL)
		if err != nil {
			t.Fatal(err)
		}
		ch, _ := conn.Channel()
		closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
		ch.Qos(100, 0, false)
		ds, err := ch.Consume(name, "", false, false, false, false, amqp091.Table{"x-stream-offset": "first"})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		var offs []int64
		var closeErr *amqp091.Error
	read:
		for len(got) < len(want) {
			select {
			case d, ok := <-ds:
				if !ok {
					closeErr = <-closed
					break read
				}
				got = append(got, string(d.Body))
				offs = append(offs, d.Headers["x-stream-offset"].(int64))
				d.Ack(false)
			case <-time.After(5 * time.Second):
				break read
			}
		}
		conn.Close()
		if tg.kind == "rabbitmq" {
			// 3.10.8's rabbit_stream_queue does not read sub-batches
			if closeErr == nil || closeErr.Code != 541 {
				t.Logf("RabbitMQ: read %d, channel closed with %v (3.10.8 closes it with 541)", len(got), closeErr)
			}
			continue
		}
		if !slices.Equal(got, want) {
			t.Fatalf("read %d of %d sub-batch messages (closed: %v): %q", len(got), len(want), closeErr, got)
		}
		for i := 1; i < len(offs); i++ {
			if offs[i] != offs[i-1]+1 {
				t.Fatalf("offsets %v", offs)
			}
		}
	}
}
