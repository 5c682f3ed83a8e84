package integration

// Streams over AMQP 0-9-1 (issue 25), the same scenarios against Warren
// and, when it is reachable, RabbitMQ (3.10.8 in CI, with its
// rabbitmq_stream plugin): reply codes and texts, offsets, deliveries and
// the headers they carry are compared. Where RabbitMQ 3.10 differs from
// the 4.x behaviour Warren implements, the case says so.

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/warrentest"
)

// streamTargets is Warren and, if reachable, RabbitMQ.
func streamTargets(t *testing.T) []*target {
	tgs := []*target{newWarrenTarget(t)}
	if u := rabbitURL(t); u != "" {
		tgs = append(tgs, newRabbitTarget(t, u))
	}
	return tgs
}

func streamDial(t *testing.T, url string) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	return conn, ch
}

// streamErr is an error as "code text" ("ok" for none), the queue's name
// written {q}.
func streamErr(err error, q string) string {
	if err == nil {
		return "ok"
	}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return fmt.Sprintf("%d %s", ae.Code, strings.ReplaceAll(ae.Reason, q, "{q}"))
	}
	return err.Error()
}

var streamArgs = amqp.Table{"x-queue-type": "stream"}

func streamWith(kv ...any) amqp.Table {
	t := amqp.Table{"x-queue-type": "stream"}
	for i := 0; i < len(kv); i += 2 {
		t[kv[i].(string)] = kv[i+1]
	}
	return t
}

// TestStreamDeclareAndRefusals: every refusal a stream gives over AMQP
// 0-9-1, code and text, on both brokers.
func TestStreamDeclareAndRefusals(t *testing.T) {
	type step struct {
		name string
		do   func(ch *amqp.Channel, q string) error
		// rabbit310 is RabbitMQ 3.10's answer where 4.x (Warren) differs.
		rabbit310 string
	}
	declare := func(durable, autoDelete, exclusive bool, args amqp.Table) func(*amqp.Channel, string) error {
		return func(ch *amqp.Channel, q string) error {
			_, err := ch.QueueDeclare(q, durable, autoDelete, exclusive, false, args)
			return err
		}
	}
	made := func(ch *amqp.Channel, q string) error {
		_, err := ch.QueueDeclare(q, true, false, false, false, streamWith("x-max-age", "7D"))
		return err
	}
	consume := func(prefetch int, global, noAck, exclusive bool, args amqp.Table) func(*amqp.Channel, string) error {
		return func(ch *amqp.Channel, q string) error {
			if err := made(ch, q); err != nil {
				return err
			}
			if prefetch > 0 {
				if err := ch.Qos(prefetch, 0, global); err != nil {
					return err
				}
			}
			if _, err := ch.Consume(q, "", noAck, exclusive, false, false, args); err != nil {
				return err
			}
			return ch.Close()
		}
	}
	offset := func(v any) func(*amqp.Channel, string) error {
		return consume(10, false, false, false, amqp.Table{"x-stream-offset": v})
	}
	steps := []step{
		{name: "non-durable", do: declare(false, false, false, streamArgs)},
		{name: "exclusive", do: declare(true, false, true, streamArgs)},
		{name: "auto-delete", do: declare(true, true, false, streamArgs)},
		{name: "x-max-length", do: declare(true, false, false, streamWith("x-max-length", int32(5)))},
		{name: "x-overflow", do: declare(true, false, false, streamWith("x-overflow", "drop-head"))},
		{name: "x-message-ttl", do: declare(true, false, false, streamWith("x-message-ttl", int32(5)))},
		{name: "x-expires", do: declare(true, false, false, streamWith("x-expires", int32(5000)))},
		{name: "x-max-priority", do: declare(true, false, false, streamWith("x-max-priority", int32(5)))},
		{name: "x-single-active-consumer", do: declare(true, false, false, streamWith("x-single-active-consumer", true))},
		{name: "x-dead-letter-exchange", do: declare(true, false, false, streamWith("x-dead-letter-exchange", "dlx"))},
		{name: "x-delivery-limit", do: declare(true, false, false, streamWith("x-delivery-limit", int32(5)))},
		{name: "x-quorum-initial-group-size", do: declare(true, false, false, streamWith("x-quorum-initial-group-size", int32(3)))},
		{name: "unknown argument", do: declare(true, false, false, streamWith("x-unknown-arg", int32(5)))},
		{name: "max-age unit", do: declare(true, false, false, streamWith("x-max-age", "7X"))},
		{name: "max-age type", do: declare(true, false, false, streamWith("x-max-age", int32(7)))},
		{name: "max-length-bytes type", do: declare(true, false, false, streamWith("x-max-length-bytes", "7"))},
		{name: "max-length-bytes negative", do: declare(true, false, false, streamWith("x-max-length-bytes", int32(-1)))},
		{name: "segment size type", do: declare(true, false, false, streamWith("x-stream-max-segment-size-bytes", "x"))},
		{name: "initial cluster size 0", do: declare(true, false, false, streamWith("x-initial-cluster-size", int32(0)))},
		{name: "filter size", do: declare(true, false, false, streamWith("x-stream-filter-size-bytes", int32(32)))},
		{name: "declare", do: made},
		{name: "redeclare other max-age", do: func(ch *amqp.Channel, q string) error {
			if err := made(ch, q); err != nil {
				return err
			}
			_, err := ch.QueueDeclare(q, true, false, false, false, streamWith("x-max-age", "8D"))
			return err
		}},
		// 4.x names the type received; 3.10 says "none" (qargs.go).
		{name: "redeclare classic", rabbit310: "406 PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue '{q}' in vhost '/': received none but current is the value 'stream' of type 'longstr'", do: func(ch *amqp.Channel, q string) error {
			if err := made(ch, q); err != nil {
				return err
			}
			_, err := ch.QueueDeclare(q, true, false, false, false, nil)
			return err
		}},
		{name: "basic.get", do: func(ch *amqp.Channel, q string) error {
			if err := made(ch, q); err != nil {
				return err
			}
			_, _, err := ch.Get(q, false)
			return err
		}},
		{name: "queue.purge", do: func(ch *amqp.Channel, q string) error {
			if err := made(ch, q); err != nil {
				return err
			}
			_, err := ch.QueuePurge(q, false)
			return err
		}},
		{name: "consume without prefetch", do: consume(0, false, false, false, nil)},
		{name: "consume with a global prefetch only", do: consume(10, true, false, false, nil)},
		{name: "consume no-ack", do: consume(10, false, true, false, nil)},
		{name: "consume exclusive", do: consume(10, false, false, true, nil)},
		{name: "offset first", do: offset("first")},
		{name: "offset last", do: offset("last")},
		{name: "offset next", do: offset("next")},
		{name: "offset number", do: offset(int64(3))},
		{name: "offset negative", do: offset(int32(-1))},
		{name: "offset interval 1h", do: offset("1h")},
		{name: "offset interval 30m", do: offset("30m")},
		{name: "offset interval 2D", do: offset("2D")},
		{name: "offset interval 1Y", do: offset("1Y")},
		{name: "offset timestamp", do: offset(time.Now().Add(-time.Hour))},
		// RabbitMQ 4.x refuses a bad offset with 406; 3.10 fails with 541.
		{name: "offset bogus string", do: offset("bogus"), rabbit310: "541 INTERNAL_ERROR"},
		{name: "offset float", do: offset(1.5), rabbit310: "541 INTERNAL_ERROR"},
		{name: "offset bool", do: offset(true), rabbit310: "541 INTERNAL_ERROR"},
	}
	results := map[string][]string{}
	var kinds []string
	for _, tg := range streamTargets(t) {
		kinds = append(kinds, tg.kind)
		for i, st := range steps {
			q := fmt.Sprintf("%s-s%d", tg.base, i)
			conn, ch := streamDial(t, tg.url)
			got := streamErr(st.do(ch, q), q)
			conn.Close()
			conn, ch = streamDial(t, tg.url)
			ch.QueueDelete(q, false, false, false)
			conn.Close()
			results[tg.kind] = append(results[tg.kind], got)
		}
	}
	want := map[string]string{
		"non-durable":                 "406 PRECONDITION_FAILED - invalid property 'non-durable' for queue '{q}' in vhost '/'",
		"exclusive":                   "406 PRECONDITION_FAILED - invalid property 'exclusive-owner' for queue '{q}' in vhost '/'",
		"auto-delete":                 "406 PRECONDITION_FAILED - invalid property 'auto-delete' for queue '{q}' in vhost '/'",
		"x-max-length":                "406 PRECONDITION_FAILED - invalid arg 'x-max-length' for queue '{q}' in vhost '/' of queue type rabbit_stream_queue",
		"max-age unit":                "406 PRECONDITION_FAILED - invalid arg 'x-max-age' for queue '{q}' in vhost '/': invalid_max_age",
		"basic.get":                   "540 NOT_IMPLEMENTED - basic.get not supported by stream queues queue '{q}' in vhost '/'",
		"queue.purge":                 "540 NOT_IMPLEMENTED - queue.purge not supported by stream queues queue '{q}' in vhost '/'",
		"consume without prefetch":    "406 PRECONDITION_FAILED - consumer prefetch count is not set for 'queue '{q}' in vhost '/''",
		"consume no-ack":              "540 NOT_IMPLEMENTED - automatic acknowledgement not supported by stream queues queue '{q}' in vhost '/'",
		"declare":                     "ok",
		"offset first":                "ok",
		"offset bogus string":         "406 PRECONDITION_FAILED - invalid stream offset argument 'x-stream-offset' for queue '{q}' in vhost '/'",
		"redeclare classic":           "406 PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue '{q}' in vhost '/': received 'classic' but current is 'stream'",
		"x-dead-letter-exchange":      "406 PRECONDITION_FAILED - invalid arg 'x-dead-letter-exchange' for queue '{q}' in vhost '/' of queue type rabbit_stream_queue",
		"unknown argument":            "ok",
		"consume exclusive":           "ok",
		"x-quorum-initial-group-size": "406 PRECONDITION_FAILED - invalid arg 'x-quorum-initial-group-size' for queue '{q}' in vhost '/' of queue type rabbit_stream_queue",
	}
	for i, st := range steps {
		w := results["warren"][i]
		if exp, ok := want[st.name]; ok && w != exp {
			t.Errorf("%s: Warren answered %q, want %q", st.name, w, exp)
		}
		if r, ok := results["rabbitmq"]; ok {
			exp := w
			if st.rabbit310 != "" {
				exp = st.rabbit310
			}
			if r[i] != exp {
				t.Errorf("%s: Warren %q, RabbitMQ %q", st.name, w, r[i])
			}
		}
	}
	t.Logf("compared on %v, %d steps", kinds, len(steps))
}

// streamPublish publishes bodies one at a time, each confirmed before the
// next (so that each is a chunk of its own on both brokers).
func streamPublish(t *testing.T, ch *amqp.Channel, q string, bodies ...string) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, b := range bodies {
		dc, err := ch.PublishWithDeferredConfirm("", q, false, false, amqp.Publishing{Body: []byte(b), DeliveryMode: 2})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(t.Context()); !ok || err != nil {
			t.Fatalf("publish %s: confirmed %v, %v", b, ok, err)
		}
	}
}

// streamRead consumes n messages from q with args, returning "offset:body"
// of each, acking as it goes.
func streamRead(t *testing.T, url, q string, args amqp.Table, n int) []string {
	t.Helper()
	conn, ch := streamDial(t, url)
	defer conn.Close()
	if err := ch.Qos(5, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(q, "", false, false, false, false, args)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	timeout := time.After(10 * time.Second)
	for len(got) < n {
		select {
		case d := <-ds:
			got = append(got, fmt.Sprintf("%v:%s", d.Headers["x-stream-offset"], d.Body))
			if d.Redelivered {
				t.Errorf("a stream delivery marked redelivered")
			}
			d.Ack(false)
		case <-timeout:
			t.Fatalf("read %d of %d from %s: %v", len(got), n, q, got)
		}
	}
	// and nothing more
	select {
	case d := <-ds:
		got = append(got, fmt.Sprintf("extra %v:%s", d.Headers["x-stream-offset"], d.Body))
	case <-time.After(200 * time.Millisecond):
	}
	return got
}

// TestStreamOffsets: each x-stream-offset, the same deliveries from both.
func TestStreamOffsets(t *testing.T) {
	type read struct {
		name string
		args amqp.Table
		n    int
	}
	reads := []read{
		{"first", amqp.Table{"x-stream-offset": "first"}, 10},
		{"offset 4", amqp.Table{"x-stream-offset": int64(4)}, 6},
		{"offset 4 as int32", amqp.Table{"x-stream-offset": int32(4)}, 6},
		{"last", amqp.Table{"x-stream-offset": "last"}, 1},
		{"past the end", amqp.Table{"x-stream-offset": int64(1000)}, 0},
		{"an hour ago", amqp.Table{"x-stream-offset": "1h"}, 10},
		{"a timestamp in the future", amqp.Table{"x-stream-offset": time.Now().Add(time.Hour)}, 0},
	}
	results := map[string][][]string{}
	for _, tg := range streamTargets(t) {
		q := tg.base + "-offsets"
		conn, ch := streamDial(t, tg.url)
		if _, err := ch.QueueDeclare(q, true, false, false, false, streamArgs); err != nil {
			t.Fatal(err)
		}
		var bodies []string
		for i := range 10 {
			bodies = append(bodies, fmt.Sprintf("m%d", i))
		}
		streamPublish(t, ch, q, bodies...)
		for _, r := range reads {
			results[tg.kind] = append(results[tg.kind], streamRead(t, tg.url, q, r.args, r.n))
		}
		// next: only what is published after the consumer starts
		c2, ch2 := streamDial(t, tg.url)
		ch2.Qos(5, 0, false)
		ds, err := ch2.Consume(q, "", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		streamPublish(t, ch, q, "after")
		select {
		case d := <-ds:
			results[tg.kind] = append(results[tg.kind], []string{fmt.Sprintf("%v:%s", d.Headers["x-stream-offset"], d.Body)})
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: nothing delivered after next", tg.kind)
		}
		c2.Close()
		ch.QueueDelete(q, false, false, false)
		conn.Close()
	}
	w := results["warren"]
	if !slices.Equal(w[0], []string{"0:m0", "1:m1", "2:m2", "3:m3", "4:m4", "5:m5", "6:m6", "7:m7", "8:m8", "9:m9"}) {
		t.Errorf("first: %v", w[0])
	}
	if !slices.Equal(w[3], []string{"9:m9"}) || !slices.Equal(w[7], []string{"10:after"}) {
		t.Errorf("last %v, next %v", w[3], w[7])
	}
	if r, ok := results["rabbitmq"]; ok {
		for i := range w {
			if !slices.Equal(w[i], r[i]) {
				name := "next"
				if i < len(reads) {
					name = reads[i].name
				}
				t.Errorf("%s: Warren %v, RabbitMQ %v", name, w[i], r[i])
			}
		}
	}
}

// TestStreamCredit: a consumer gets its prefetch and no more until it
// acks; an ack (or a nack, which requeues nothing) returns credit.
func TestStreamCredit(t *testing.T) {
	for _, tg := range streamTargets(t) {
		t.Run(tg.kind, func(t *testing.T) {
			q := tg.base + "-credit"
			conn, ch := streamDial(t, tg.url)
			defer conn.Close()
			if _, err := ch.QueueDeclare(q, true, false, false, false, streamArgs); err != nil {
				t.Fatal(err)
			}
			defer ch.QueueDelete(q, false, false, false)
			streamPublish(t, ch, q, "a", "b", "c", "d", "e")
			c2, ch2 := streamDial(t, tg.url)
			defer c2.Close()
			ch2.Qos(2, 0, false)
			ds, err := ch2.Consume(q, "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
			if err != nil {
				t.Fatal(err)
			}
			var got []amqp.Delivery
			for len(got) < 2 {
				got = append(got, <-ds)
			}
			select {
			case d := <-ds:
				t.Fatalf("a third delivery before any ack: %s", d.Body)
			case <-time.After(300 * time.Millisecond):
			}
			closed := c2.NotifyClose(make(chan *amqp.Error, 1))
			got[0].Nack(false, true) // requeue: nothing comes back, credit does
			if tg.kind == "rabbitmq" {
				// RabbitMQ 3.10 closes the connection (540 "basic.nack and
				// basic.reject not supported by stream queues"); 4.x takes
				// any settle as credit, as Warren does.
				for {
					select {
					case e := <-closed:
						if e == nil || e.Code != 540 || !strings.Contains(e.Reason, "basic.nack and basic.reject not supported by stream queues") {
							t.Fatalf("RabbitMQ after a nack: %v", e)
						}
						t.Logf("RabbitMQ 3.10 closed the connection after a nack: %v", e)
						return
					case <-ds:
					case <-time.After(2 * time.Second):
						t.Log("RabbitMQ took a nack as credit (4.x)")
						return
					}
				}
			}
			d := <-ds
			if string(d.Body) != "c" {
				t.Fatalf("after a nack: %q", d.Body)
			}
			got[1].Ack(false)
			if d := <-ds; string(d.Body) != "d" {
				t.Fatalf("after an ack: %s", d.Body)
			}
		})
	}
}

// TestStreamHeadersRoundTrip: a message published over 0-9-1 comes back
// with its properties and headers; RabbitMQ 3.10 drops table and array
// headers, Warren keeps them.
func TestStreamHeadersRoundTrip(t *testing.T) {
	pub := amqp.Publishing{
		ContentType: "text/plain", ContentEncoding: "gzip", DeliveryMode: 2, Priority: 3,
		CorrelationId: "corr", ReplyTo: "rt", Expiration: "60000", MessageId: "mid", Timestamp: time.Unix(1700000000, 0),
		Type: "typ", UserId: "guest", AppId: "app",
		Headers: amqp.Table{"h-str": "v", "h-int": int32(5), "h-long": int64(7), "h-bool": true, "x-custom": "xc",
			"h-bytes": []byte("raw"), "h-float": 1.5, "h-ts": time.Unix(1700000001, 0),
			"h-table": amqp.Table{"a": "b"}, "h-arr": []any{"x", int32(1)}},
		Body: []byte("hello"),
	}
	got := map[string]amqp.Delivery{}
	for _, tg := range streamTargets(t) {
		q := tg.base + "-headers"
		conn, ch := streamDial(t, tg.url)
		if _, err := ch.QueueDeclare(q, true, false, false, false, streamArgs); err != nil {
			t.Fatal(err)
		}
		ch.Confirm(false)
		dc, err := ch.PublishWithDeferredConfirm("", q, false, false, pub)
		if err != nil {
			t.Fatal(err)
		}
		dc.Wait()
		ch.Qos(1, 0, false)
		ds, err := ch.Consume(q, "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
		if err != nil {
			t.Fatal(err)
		}
		got[tg.kind] = <-ds
		ch.QueueDelete(q, false, false, false)
		conn.Close()
	}
	w := got["warren"]
	if w.ContentType != pub.ContentType || w.ContentEncoding != pub.ContentEncoding || w.DeliveryMode != 2 || w.Priority != 3 ||
		w.CorrelationId != "corr" || w.ReplyTo != "rt" || w.Expiration != "60000" || w.MessageId != "mid" ||
		!w.Timestamp.Equal(pub.Timestamp) || w.Type != "typ" || w.UserId != "guest" || w.AppId != "app" ||
		string(w.Body) != "hello" || w.Exchange != "" || w.RoutingKey != tgQueueSuffix(w.RoutingKey, "-headers") {
		t.Errorf("Warren's delivery: %+v", w)
	}
	for k, v := range pub.Headers {
		if fmt.Sprint(w.Headers[k]) != fmt.Sprint(v) {
			t.Errorf("header %s: %v (%T), want %v", k, w.Headers[k], w.Headers[k], v)
		}
	}
	if w.Headers["x-stream-offset"] != int64(0) {
		t.Errorf("x-stream-offset %v (%T)", w.Headers["x-stream-offset"], w.Headers["x-stream-offset"])
	}
	if r, ok := got["rabbitmq"]; ok {
		for k := range pub.Headers {
			if k == "h-table" || k == "h-arr" {
				if _, has := r.Headers[k]; has {
					t.Errorf("RabbitMQ 3.10 kept header %s (Warren's keeping it is the difference)", k)
				}
				continue
			}
			if fmt.Sprint(w.Headers[k]) != fmt.Sprint(r.Headers[k]) {
				t.Errorf("header %s: Warren %v (%T), RabbitMQ %v (%T)", k, w.Headers[k], w.Headers[k], r.Headers[k], r.Headers[k])
			}
		}
		w.Headers, r.Headers = nil, nil
		w.Acknowledger, r.Acknowledger = nil, nil
		w.ConsumerTag, r.ConsumerTag = "", ""
		w.RoutingKey, r.RoutingKey = "", ""
		if fmt.Sprintf("%+v", w) != fmt.Sprintf("%+v", r) {
			t.Errorf("deliveries differ:\nWarren   %+v\nRabbitMQ %+v", w, r)
		}
	}
}

func tgQueueSuffix(rk, suffix string) string {
	if strings.HasSuffix(rk, suffix) {
		return rk
	}
	return "(a name ending in " + suffix + ")"
}

// TestStreamSurvivesRestart: a stream's confirmed messages and its offsets
// come back after a restart of Warren.
func TestStreamSurvivesRestart(t *testing.T) {
	b := warrentest.Start(t)
	conn, ch := streamDial(t, b.URL())
	if _, err := ch.QueueDeclare("s-restart", true, false, false, false, streamArgs); err != nil {
		t.Fatal(err)
	}
	streamPublish(t, ch, "s-restart", "a", "b", "c")
	conn.Close()
	b.Restart()
	conn, ch = streamDial(t, b.URL())
	defer conn.Close()
	streamPublish(t, ch, "s-restart", "d")
	got := streamRead(t, b.URL(), "s-restart", amqp.Table{"x-stream-offset": "first"}, 4)
	if !slices.Equal(got, []string{"0:a", "1:b", "2:c", "3:d"}) {
		t.Fatalf("after a restart: %v", got)
	}
	// deleted, then declared again: empty
	if _, err := ch.QueueDelete("s-restart", false, false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("s-restart", true, false, false, false, streamArgs); err != nil {
		t.Fatal(err)
	}
	streamPublish(t, ch, "s-restart", "new")
	if got := streamRead(t, b.URL(), "s-restart", amqp.Table{"x-stream-offset": "first"}, 1); !slices.Equal(got, []string{"0:new"}) {
		t.Fatalf("declared again: %v", got)
	}
}

// TestStreamAsDeadLetterTarget: a stream can be a dead-letter target
// (RabbitMQ allows it); the dead letters keep their x-death history, and
// reading them does not consume them: they can be read again from first.
func TestStreamAsDeadLetterTarget(t *testing.T) {
	b := warrentest.Start(t)
	conn, ch := streamDial(t, b.URL())
	defer conn.Close()
	if _, err := ch.QueueDeclare("dl-stream", true, false, false, false, streamArgs); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("work", true, false, false, false, amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dl-stream"}); err != nil {
		t.Fatal(err)
	}
	streamPublish(t, ch, "work", "a", "b")
	ch.Qos(10, 0, false)
	ds, err := ch.Consume("work", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		d := <-ds
		d.Reject(false)
	}
	for range 2 { // read twice: a stream keeps its record
		c2, ch2 := streamDial(t, b.URL())
		ch2.Qos(10, 0, false)
		rs, err := ch2.Consume("dl-stream", "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"a", "b"} {
			select {
			case d := <-rs:
				deaths, _ := d.Headers["x-death"].([]any)
				if string(d.Body) != want || len(deaths) != 1 {
					t.Fatalf("dead letter %q with x-death %v", d.Body, d.Headers["x-death"])
				}
				death, _ := deaths[0].(amqp.Table)
				if death["queue"] != "work" || death["reason"] != "rejected" || death["count"] != int64(1) || d.Headers["x-first-death-queue"] != "work" {
					t.Fatalf("x-death %v, headers %v", death, d.Headers)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no dead letter in the stream")
			}
		}
		c2.Close()
	}
}

// TestStreamRefusedInCluster: while a node of the cluster is a build
// that does not replicate streams (a rolling upgrade), the cluster
// refuses to declare one (each node would otherwise keep a stream of its
// own), with 540 and a text that says why.
func TestStreamRefusedInCluster(t *testing.T) {
	c := warrentest.StartCluster(t, 3, warrentest.OlderBuild(2))
	conn, err := amqp.Dial(c.Node(1).URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	_, err = ch.QueueDeclare("clustered-stream", true, false, false, false, streamArgs)
	if got := streamErr(err, "clustered-stream"); got != "540 NOT_IMPLEMENTED - stream queue '{q}' in vhost '/' cannot be declared: a node of the cluster does not replicate streams" {
		t.Fatalf("declare in a cluster: %s", got)
	}
	for i := range 3 {
		if c.Node(i).Broker().VHost("/").Queue("clustered-stream") != nil {
			t.Fatalf("node %d has the stream", i)
		}
	}
}

// TestStreamInManagementAPI: a stream in /api/queues, on both brokers:
// type stream, its messages (all ready), members, online and readers;
// Warren adds its log (offsets, timestamps) and each consumer's lag.
func TestStreamInManagementAPI(t *testing.T) {
	eachMgmtTarget(t, func(t *testing.T, tg *mgmtTarget) {
		vh := tg.freshVhost(t)
		conn, err := amqp.Dial(strings.TrimSuffix(tg.amqpURL, "/") + "/" + esc(vh))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ch, _ := conn.Channel()
		if _, err := ch.QueueDeclare("s", true, false, false, false, streamArgs); err != nil {
			t.Fatal(err)
		}
		streamPublish(t, ch, "s", "a", "b", "c")
		ch.Qos(1, 0, false)
		if _, err := ch.Consume("s", "c1", false, false, false, false, amqp.Table{"x-stream-offset": "first"}); err != nil {
			t.Fatal(err)
		}
		var q map[string]any
		if !eventually(func() bool {
			q, _ = tg.getJSON("/api/queues/" + esc(vh) + "/s").(map[string]any)
			return q != nil && q["messages"] == 3.0 && q["consumers"] == 1.0
		}) {
			t.Fatalf("%s: %v", tg.kind, q)
		}
		node, _ := q["node"].(string)
		if q["type"] != "stream" || q["messages_ready"] != 3.0 || q["messages_unacknowledged"] != 0.0 ||
			fmt.Sprint(q["members"]) != fmt.Sprint([]any{node}) || fmt.Sprint(q["online"]) != fmt.Sprint([]any{node}) {
			t.Errorf("%s: %v", tg.kind, q)
		}
		readers, _ := q["readers"].(map[string]any)
		if _, ok := readers[node]; !ok {
			t.Errorf("%s: readers %v", tg.kind, q["readers"])
		}
		if tg.isRabbit() {
			return
		}
		// prefetch 1: one delivered, unacked; it reads offset 1 next (once
		// its reader delivered the first, which the consumer count does
		// not wait for)
		var st, c0 map[string]any
		eventually(func() bool {
			q, _ = tg.getJSON("/api/queues/" + esc(vh) + "/s").(map[string]any)
			st, _ = q["stream"].(map[string]any)
			cons, _ := st["consumers"].([]any)
			if len(cons) != 1 {
				return false
			}
			c0, _ = cons[0].(map[string]any)
			return c0["offset"] == 1.0
		})
		cons, _ := st["consumers"].([]any)
		if st == nil || st["first_offset"] != 0.0 || st["next_offset"] != 3.0 || st["committed_offset"] != 3.0 || len(cons) != 1 {
			t.Fatalf("stream: %v", st)
		}
		if c0["consumer_tag"] != "c1" || c0["offset"] != 1.0 || c0["lag"] != 2.0 {
			t.Errorf("consumer position: %v", c0)
		}
	})
}

// TestStreamDLQInspect: the dead-letter tools read a stream DLQ without
// consuming it (issue 25, beyond RabbitMQ): the dead-letter page's
// messages, with their x-death history, twice.
func TestStreamDLQInspect(t *testing.T) {
	tg := newMgmtWarren(t)
	conn, err := amqp.Dial(tg.amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	if _, err := ch.QueueDeclare("dlq-s", true, false, false, false, streamArgs); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("orders", true, false, false, false, amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq-s"}); err != nil {
		t.Fatal(err)
	}
	streamPublish(t, ch, "orders", "o1", "o2", "o3")
	ch.Qos(10, 0, false)
	ds, _ := ch.Consume("orders", "", false, false, false, false, nil)
	for range 3 {
		(<-ds).Reject(false)
	}
	for range 2 {
		var page map[string]any
		if !eventually(func() bool {
			page, _ = tg.getJSON("/api/dead-letters/%2F/dlq-s/messages?offset=1").(map[string]any)
			msgs, _ := page["messages"].([]any)
			return len(msgs) == 2
		}) {
			t.Fatalf("dead-letter page of the stream: %v", page)
		}
		msgs := page["messages"].([]any)
		m0, _ := msgs[0].(map[string]any)
		if page["total"] != 3.0 || m0["payload"] != "o2" {
			t.Fatalf("page: %v", page)
		}
		deaths, _ := m0["x_death"].([]any)
		if len(deaths) != 1 {
			t.Fatalf("deaths: %v", m0)
		}
		d0, _ := deaths[0].(map[string]any)
		if d0["queue"] != "orders" || d0["reason"] != "rejected" {
			t.Fatalf("deaths: %v", m0)
		}
	}
}

// TestStreamDefinitions: a stream is exported with its arguments and
// imported as a stream (definitions export/import).
func TestStreamDefinitions(t *testing.T) {
	a := newMgmtWarren(t)
	conn, err := amqp.Dial(a.amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	if _, err := ch.QueueDeclare("exported", true, false, false, false, streamWith("x-max-age", "2D", "x-max-length-bytes", int64(1<<30))); err != nil {
		t.Fatal(err)
	}
	defs := a.getJSON("/api/definitions")
	b := newMgmtWarren(t)
	if r := b.do("POST", "/api/definitions", defs); r.status != 204 && r.status != 200 && r.status != 201 {
		t.Fatalf("import: %d %s", r.status, r.body)
	}
	q := b.w.Broker().VHost("/").Stream("exported")
	if q == nil {
		t.Fatal("the imported queue is not a stream")
	}
	if e := q.Effective(); e.MaxAge != "2D" || e.MaxLengthBytes == nil || *e.MaxLengthBytes != 1<<30 {
		t.Fatalf("imported arguments: %+v", e)
	}
	c2, ch2 := streamDial(t, b.amqpURL)
	defer c2.Close()
	streamPublish(t, ch2, "exported", "m")
	if got := streamRead(t, b.amqpURL, "exported", amqp.Table{"x-stream-offset": "first"}, 1); !slices.Equal(got, []string{"0:m"}) {
		t.Fatalf("the imported stream: %v", got)
	}
}

// TestStreamDLQReplay: a stream DLQ is replayed from an offset or a time
// (an interval back from now) and keeps every record: the dead letters
// go back to their queue, and can be replayed again.
func TestStreamDLQReplay(t *testing.T) {
	tg := newMgmtWarren(t)
	conn, err := amqp.Dial(tg.amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	if _, err := ch.QueueDeclare("dl-audit", true, false, false, false, streamArgs); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("billing", true, false, false, false, amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dl-audit"}); err != nil {
		t.Fatal(err)
	}
	streamPublish(t, ch, "billing", "b0", "b1", "b2")
	ch.Qos(10, 0, false)
	ds, _ := ch.Consume("billing", "bc", false, false, false, false, nil)
	for range 3 {
		(<-ds).Reject(false)
	}
	ch.Cancel("bc", false)
	replay := func(body map[string]any) map[string]any {
		t.Helper()
		r := tg.must("POST", "/api/dead-letters/%2F/dl-audit/replay", body, 200)
		var out map[string]any
		if err := json.Unmarshal(r.body, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	depth := func(q string) int {
		n, _ := tg.w.Broker().VHost("/").Queue(q).Counts()
		return n
	}
	if !eventually(func() bool { return depth("dl-audit") == 3 }) {
		t.Fatalf("dead letters in the stream: %d", depth("dl-audit"))
	}
	got := replay(map[string]any{"offset": 1})
	if got["replayed"] != 2.0 || got["next_offset"] != 3.0 || got["error"] != nil {
		t.Fatalf("replay from offset 1: %v", got)
	}
	if depth("billing") != 2 || depth("dl-audit") != 3 {
		t.Fatalf("after the replay: billing %d, the stream %d", depth("billing"), depth("dl-audit"))
	}
	got = replay(map[string]any{"since": "1h", "count": 1})
	if got["replayed"] != 1.0 || got["next_offset"] != 1.0 {
		t.Fatalf("replay since 1h, count 1: %v", got)
	}
	got = replay(map[string]any{"since": "1h"})
	if got["replayed"] != 3.0 || depth("billing") != 6 || depth("dl-audit") != 3 {
		t.Fatalf("replay since 1h: %v; billing %d", got, depth("billing"))
	}
	// the replayed messages have no history (keep_history false)
	d, ok, err := ch.Get("billing", true)
	if err != nil || !ok || d.Headers["x-death"] != nil || string(d.Body) != "b1" {
		t.Fatalf("a replayed message: %v %v %s %v", ok, err, d.Body, d.Headers)
	}
	if r := tg.do("POST", "/api/dead-letters/%2F/billing/replay", map[string]any{"offset": 0}); r.status != 400 {
		t.Fatalf("offset on a classic queue: %d %s", r.status, r.body)
	}
	if r := tg.do("POST", "/api/dead-letters/%2F/dl-audit/replay", map[string]any{"since": "yesterday"}); r.status != 400 {
		t.Fatalf("a bad since: %d %s", r.status, r.body)
	}
}
