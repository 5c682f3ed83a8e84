package integration

// Bad input over raw TCP: each case sends bytes no client library would
// and checks the connection.close (code, text, failing method) against
// the expected RabbitMQ 3.10 reply, on Warren and, when reachable, on the
// RabbitMQ oracle. After each case a well-behaved amqp091-go connection,
// opened before the bad one, must still publish and consume; a panic in
// the broker would crash this test process.

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/testutil"
)

// healthy is a well-behaved client connection that must keep working.
type healthy struct {
	conn  *amqp091.Connection
	ch    *amqp091.Channel
	queue string
	msgs  <-chan amqp091.Delivery
	n     int
}

func newHealthy(t *testing.T, u string) *healthy {
	t.Helper()
	conn, err := amqp091.Dial(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	msgs, err := ch.Consume(q.Name, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &healthy{conn: conn, ch: ch, queue: q.Name, msgs: msgs}
}

// check publishes a confirmed message and consumes it.
func (h *healthy) check(t *testing.T) {
	t.Helper()
	h.n++
	body := []byte{byte(h.n), byte(h.n >> 8), 'o', 'k'}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conf, err := h.ch.PublishWithDeferredConfirmWithContext(ctx, "", h.queue, true, false, amqp091.Publishing{Body: body})
	if err != nil {
		t.Fatalf("healthy connection: publish: %v", err)
	}
	if ok, err := conf.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("healthy connection: confirm: %v %v", ok, err)
	}
	select {
	case d, ok := <-h.msgs:
		if !ok {
			t.Fatal("healthy connection: consumer closed")
		}
		if !bytes.Equal(d.Body, body) {
			t.Fatalf("healthy connection: got %q want %q", d.Body, body)
		}
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("healthy connection: no delivery")
	}
}

// frame builds a raw frame with an explicit frame-end octet.
func frame(typ uint8, ch uint16, payload []byte, end byte) []byte {
	b := []byte{typ, byte(ch >> 8), byte(ch)}
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	b = append(b, payload...)
	return append(b, end)
}

func methodPayload(m amqp.Method) []byte {
	f := amqp.AppendMethodFrame(nil, 0, m)
	return f[7 : len(f)-1]
}

func headerFrame(ch, class uint16, size uint64) []byte {
	return amqp.AppendHeaderFrame(nil, ch, class, size, &amqp.Properties{})
}

func cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

type badInputCase struct {
	name string
	// bytes is sent after the handshake (frame-max 4096) and channel.open
	// on channel 1.
	bytes func() []byte
	want  string // closeResult.String()
}

var publishQ = amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{RoutingKey: "nowhere"})

var badInputCases = []badInputCase{
	{name: "bad-frame-end", want: `connection.close 501 "FRAME_ERROR - type 1, all octets = <<0,20,0,10,0>>: {invalid_frame_end_marker,171}" (0.0)`,
		bytes: func() []byte { return frame(amqp.FrameMethod, 2, methodPayload(&amqp.ChannelOpen{}), 0xAB) }},
	{name: "oversized-frame", want: `connection.close 501 "FRAME_ERROR - type 1, all octets = <<>>: {frame_too_large,5010,4088}" (0.0)`,
		bytes: func() []byte { return frame(amqp.FrameMethod, 1, make([]byte, 5010), amqp.FrameEnd) }},
	// A payload of exactly frame-max bytes is still read (RabbitMQ allows 8
	// bytes of slack); it then fails as method 0.0.
	{name: "frame-max-payload-is-read", want: `connection.close 540 "NOT_IMPLEMENTED - {unknown_method_id,{0,0}}" (0.0)`,
		bytes: func() []byte { return frame(amqp.FrameMethod, 1, make([]byte, 4096), amqp.FrameEnd) }},
	{name: "unknown-frame-type", want: `connection.close 501 "FRAME_ERROR - type 5, all octets = <<1,2,3>>: unknown_frame" (0.0)`,
		bytes: func() []byte { return frame(5, 1, []byte{1, 2, 3}, amqp.FrameEnd) }},
	{name: "method-payload-shorter-than-ids", want: `connection.close 501 "FRAME_ERROR - type 1, all octets = <<0,60,0>>: unknown_frame" (0.0)`,
		bytes: func() []byte { return frame(amqp.FrameMethod, 1, []byte{0, 60, 0}, amqp.FrameEnd) }},
	{name: "unknown-method-id", want: `connection.close 540 "NOT_IMPLEMENTED - {unknown_method_id,{60,99}}" (60.99)`,
		bytes: func() []byte { return frame(amqp.FrameMethod, 1, []byte{0, 60, 0, 99}, amqp.FrameEnd) }},
	{name: "unknown-class-id", want: `connection.close 540 "NOT_IMPLEMENTED - {unknown_method_id,{99,10}}" (99.10)`,
		bytes: func() []byte { return frame(amqp.FrameMethod, 1, []byte{0, 99, 0, 10}, amqp.FrameEnd) }},
	{name: "truncated-method-arguments", want: `connection.close 501 "FRAME_ERROR - cannot decode <<0,0,5,97>>" (60.40)`,
		bytes: func() []byte { return frame(amqp.FrameMethod, 1, []byte{0, 60, 0, 40, 0, 0, 5, 'a'}, amqp.FrameEnd) }},
	{name: "trailing-bytes-after-method-arguments", want: `connection.close 501 "FRAME_ERROR - cannot decode <<0,0,0,0,0,0,0,0,0,9,9>>" (60.80)`,
		bytes: func() []byte {
			return frame(amqp.FrameMethod, 1, append(methodPayload(&amqp.BasicAck{}), 9, 9), amqp.FrameEnd)
		}},
	{name: "content-header-without-publish", want: `connection.close 505 "UNEXPECTED_FRAME - expected method frame, got non method frame instead" (0.0)`,
		bytes: func() []byte { return headerFrame(1, 60, 3) }},
	{name: "content-body-without-publish", want: `connection.close 505 "UNEXPECTED_FRAME - expected method frame, got non method frame instead" (0.0)`,
		bytes: func() []byte { return frame(amqp.FrameBody, 1, []byte("abc"), amqp.FrameEnd) }},
	{name: "content-header-for-other-class", want: `connection.close 505 "UNEXPECTED_FRAME - expected content header for class 60, got one for class 50 instead" (60.40)`,
		bytes: func() []byte { return cat(publishQ, headerFrame(1, 50, 3)) }},
	{name: "method-instead-of-content-header", want: `connection.close 505 "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame instead" (60.40)`,
		bytes: func() []byte { return cat(publishQ, amqp.AppendMethodFrame(nil, 1, &amqp.BasicQos{PrefetchCount: 1})) }},
	{name: "body-instead-of-content-header", want: `connection.close 505 "UNEXPECTED_FRAME - expected content header for class 60, got non content header frame instead" (60.40)`,
		bytes: func() []byte { return cat(publishQ, frame(amqp.FrameBody, 1, []byte("abc"), amqp.FrameEnd)) }},
	{name: "method-instead-of-content-body", want: `connection.close 505 "UNEXPECTED_FRAME - expected content body, got non content body frame instead" (60.40)`,
		bytes: func() []byte {
			return cat(publishQ, headerFrame(1, 60, 3), amqp.AppendMethodFrame(nil, 1, &amqp.BasicQos{PrefetchCount: 1}))
		}},
	{name: "header-instead-of-content-body", want: `connection.close 505 "UNEXPECTED_FRAME - expected content body, got non content body frame instead" (60.40)`,
		bytes: func() []byte { return cat(publishQ, headerFrame(1, 60, 3), headerFrame(1, 60, 3)) }},
	{name: "body-bigger-than-declared", want: `connection.close 501 "FRAME_ERROR - content body exceeds the declared size 3" (60.40)`,
		bytes: func() []byte {
			return cat(publishQ, headerFrame(1, 60, 3), frame(amqp.FrameBody, 1, []byte("abcde"), amqp.FrameEnd))
		}},
	{name: "method-on-unopened-channel", want: `connection.close 504 "CHANNEL_ERROR - expected 'channel.open'" (60.10)`,
		bytes: func() []byte { return amqp.AppendMethodFrame(nil, 5, &amqp.BasicQos{PrefetchCount: 1}) }},
	{name: "content-header-on-unopened-channel", want: `connection.close 505 "UNEXPECTED_FRAME - expected method frame, got non method frame instead" (0.0)`,
		bytes: func() []byte { return headerFrame(5, 60, 3) }},
	{name: "publish-on-channel-0", want: `connection.close 504 "CHANNEL_ERROR - unexpected method in connection state running" (60.40)`,
		bytes: func() []byte { return amqp.AppendMethodFrame(nil, 0, &amqp.BasicPublish{RoutingKey: "x"}) }},
	{name: "content-header-on-channel-0", want: `connection.close 505 "UNEXPECTED_FRAME - type 2, all octets = <<0,60,0,0,0,0,0,0,0,0,0,3,0,0>>" (0.0)`,
		bytes: func() []byte { return headerFrame(0, 60, 3) }},
	{name: "content-body-on-channel-0", want: `connection.close 505 "UNEXPECTED_FRAME - type 3, all octets = <<\"abc\">>" (0.0)`,
		bytes: func() []byte { return frame(amqp.FrameBody, 0, []byte("abc"), amqp.FrameEnd) }},
	{name: "long-content-body-on-channel-0", want: `connection.close 505 "UNEXPECTED_FRAME - type 3, first 16 octets = <<\"abcdefghijklmnop\">>" (0.0)`,
		bytes: func() []byte { return frame(amqp.FrameBody, 0, []byte("abcdefghijklmnopqrstuvwxyz"), amqp.FrameEnd) }},
	{name: "heartbeat-on-channel-1", want: `connection.close 505 "UNEXPECTED_FRAME - type 8, all octets = <<>>" (0.0)`,
		bytes: func() []byte { return frame(amqp.FrameHeartbeat, 1, nil, amqp.FrameEnd) }},
	{name: "connection-method-on-channel-1", want: `connection.close 503 "COMMAND_INVALID - unimplemented method" (10.40)`,
		bytes: func() []byte { return amqp.AppendMethodFrame(nil, 1, &amqp.ConnectionOpen{VirtualHost: "/"}) }},
	{name: "server-method-from-client", want: `connection.close 503 "COMMAND_INVALID - unimplemented method" (60.21)`,
		bytes: func() []byte { return amqp.AppendMethodFrame(nil, 1, &amqp.BasicConsumeOk{ConsumerTag: "c"}) }},
	{name: "channel.open-on-channel-0", want: `connection.close 504 "CHANNEL_ERROR - unexpected method in connection state running" (20.10)`,
		bytes: func() []byte { return amqp.AppendMethodFrame(nil, 0, &amqp.ChannelOpen{}) }},
	{name: "bad-field-table-in-arguments", want: `connection.close 501 "FRAME_ERROR - cannot decode <<0,0,1,113,0,0,0,0,8,1,107,90,0,0,0,1,118>>" (50.10)`,
		bytes: func() []byte {
			p := methodPayload(&amqp.QueueDeclare{Queue: "q", Arguments: amqp.Table{"k": "v"}})
			p[len(p)-6] = 'Z' // the value type octet of "k"
			return frame(amqp.FrameMethod, 1, p, amqp.FrameEnd)
		}},
}

// badInputDifferences are intended differences from RabbitMQ: its outcome
// and the reason.
var badInputDifferences = map[string]struct{ rabbit, reason string }{
	"unknown-method-id": {"dropped",
		"RabbitMQ 3.10's reader crashes on an unknown method id ({unknown_method_id,{60,99}}) and resets the socket; Warren answers with a connection.close carrying the same term"},
	"unknown-class-id": {"dropped",
		"RabbitMQ 3.10's reader crashes on an unknown class id and resets the socket; Warren answers with a connection.close"},
	"frame-max-payload-is-read": {"dropped",
		"an all-zero payload is method 0.0: RabbitMQ 3.10 crashes and resets the socket, Warren answers 540 as for any unknown method"},
	"body-bigger-than-declared": {"no reply (timeout)",
		"RabbitMQ 3.10 never completes content whose body frames overrun the declared size (its remaining size goes negative) and hangs the channel; Warren closes the connection with 501"},
	"bad-field-table-in-arguments": {"dropped",
		"RabbitMQ 3.10 crashes on an unknown field-table type and resets the socket; Warren answers 501 cannot decode"},
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	warren := newWarrenTarget(t)
	h := newHealthy(t, warren.url)
	var rabbit *target
	if u := rabbitURL(t); u != "" {
		rabbit = newRabbitTarget(t, u)
	}
	run := func(t *testing.T, tg *target, c badInputCase) string {
		rc := rawDial(t, tg.addr)
		must(t, rc.handshake(0, 4096))
		must(t, rc.openChannel(1))
		must(t, rc.write(c.bytes()))
		return rc.awaitClose().String()
	}
	for _, c := range badInputCases {
		t.Run(c.name, func(t *testing.T) {
			if got := run(t, warren, c); got != c.want {
				t.Errorf("warren:\n got %s\nwant %s", got, c.want)
			}
			h.check(t)
			if rabbit == nil {
				return
			}
			want := c.want
			diff, allowed := badInputDifferences[c.name]
			if allowed {
				want = diff.rabbit
			}
			if got := run(t, rabbit, c); got != want {
				t.Errorf("rabbitmq:\n got %s\nwant %s", got, want)
			} else if allowed {
				t.Logf("allowed difference from RabbitMQ: %s", diff.reason)
			}
		})
	}
}

// TestBadProtocolHeader: any header other than AMQP 0-9-1 is answered
// with the server's own header, then the socket closes.
func TestBadProtocolHeader(t *testing.T) {
	warren := newWarrenTarget(t)
	h := newHealthy(t, warren.url)
	targets := []*target{warren}
	if u := rabbitURL(t); u != "" {
		targets = append(targets, newRabbitTarget(t, u))
	}
	for _, hdr := range []string{"AMQP\x00\x00\x09\x02", "AMQP\x01\x01\x00\x0a", "AMQP\x00\x00\x08\x00", "GET / HTTP/1.1\r\n\r\n"} {
		for _, tg := range targets {
			c := rawDial(t, tg.addr)
			must(t, c.write([]byte(hdr)))
			got := make([]byte, 8)
			if _, err := io.ReadFull(c.nc, got); err != nil {
				t.Fatalf("%s: header %q: %v", tg.kind, hdr, err)
			}
			if !bytes.Equal(got, amqp.ProtocolHeader) {
				t.Errorf("%s: header %q: got %q, want %q", tg.kind, hdr, got, amqp.ProtocolHeader)
			}
			if err := c.awaitEOF(5 * time.Second); err != nil {
				t.Errorf("%s: header %q: socket not closed: %v", tg.kind, hdr, err)
			}
		}
		h.check(t)
	}
}

// TestRandomFrames sends a few hundred random and mutated frame sequences,
// each on its own connection after a valid handshake, and checks that a
// healthy connection keeps working.
func TestRandomFrames(t *testing.T) {
	warren := newWarrenTarget(t)
	h := newHealthy(t, warren.url)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("WARREN_RANDOM_FRAMES_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("WARREN_RANDOM_FRAMES_SEED: %v", err)
		}
		seed = n
	}
	t.Logf("seed %d (rerun with WARREN_RANDOM_FRAMES_SEED=%d)", seed, seed)
	const conns, workers = 600, 16
	templates := [][]byte{
		amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{RoutingKey: "k"}),
		headerFrame(1, 60, 5),
		frame(amqp.FrameBody, 1, []byte("hello"), amqp.FrameEnd),
		amqp.AppendMethodFrame(nil, 1, &amqp.QueueDeclare{Queue: "fz", AutoDelete: true, Arguments: amqp.Table{"x-message-ttl": int32(5)}}),
		amqp.AppendMethodFrame(nil, 1, &amqp.QueueBind{Queue: "fz", Exchange: "amq.topic", RoutingKey: "#"}),
		amqp.AppendMethodFrame(nil, 1, &amqp.BasicConsume{Queue: "fz"}),
		amqp.AppendMethodFrame(nil, 1, &amqp.BasicAck{DeliveryTag: 1, Multiple: true}),
		amqp.AppendMethodFrame(nil, 1, &amqp.BasicQos{PrefetchCount: 3}),
		amqp.AppendMethodFrame(nil, 1, &amqp.ChannelClose{ReplyCode: 200}),
		amqp.AppendMethodFrame(nil, 2, &amqp.ChannelOpen{}),
		amqp.AppendMethodFrame(nil, 1, &amqp.ExchangeDeclare{Exchange: "fzx", Type: "headers", AutoDelete: true}),
		amqp.AppendMethodFrame(nil, 1, &amqp.ConfirmSelect{}),
		amqp.AppendMethodFrame(nil, 1, &amqp.TxSelect{}),
		amqp.AppendMethodFrame(nil, 1, &amqp.BasicGet{Queue: "fz"}),
		amqp.AppendMethodFrame(nil, 0, &amqp.ConnectionClose{ReplyCode: 200}),
		amqp.AppendHeartbeat(nil),
	}
	var wg sync.WaitGroup
	jobs := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				rng := rand.New(rand.NewPCG(seed, uint64(i)))
				var buf []byte
				for n := 1 + rng.IntN(6); n > 0; n-- {
					f := append([]byte(nil), templates[rng.IntN(len(templates))]...)
					buf = append(buf, mutate(rng, f)...)
				}
				randomSession(t, warren.addr, buf)
			}
		}()
	}
	for i := 0; i < conns; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	h.check(t)
	// Every bad connection must be torn down: only the healthy one stays.
	if !testutil.Until(5*time.Second, func() bool { return warren.warren.Server().ConnectionCount() == 1 }) {
		t.Fatalf("%d connections still open after the random sessions ended, want 1", warren.warren.Server().ConnectionCount())
	}
}

// mutate changes a frame at random, or leaves it valid.
func mutate(rng *rand.Rand, f []byte) []byte {
	switch rng.IntN(8) {
	case 0: // valid
	case 1: // flip a few bytes
		for k := 1 + rng.IntN(3); k > 0; k-- {
			f[rng.IntN(len(f))] ^= byte(1 + rng.IntN(255))
		}
	case 2: // truncate the payload, keep the size field honest
		if len(f) > 8 {
			cut := 7 + rng.IntN(len(f)-8)
			f = append(f[:cut:cut], amqp.FrameEnd)
			binary.BigEndian.PutUint32(f[3:], uint32(cut-7))
		}
	case 3: // lie about the size
		binary.BigEndian.PutUint32(f[3:], rng.Uint32N(uint32(len(f))+16))
	case 4: // random channel
		binary.BigEndian.PutUint16(f[1:], uint16(rng.IntN(4)))
	case 5: // random frame type
		f[0] = byte(rng.IntN(10))
	case 6: // random payload of the same frame type
		p := make([]byte, rng.IntN(40))
		for i := range p {
			p[i] = byte(rng.UintN(256))
		}
		f = frame(f[0], binary.BigEndian.Uint16(f[1:]), p, amqp.FrameEnd)
	case 7: // garbage
		f = make([]byte, rng.IntN(30))
		for i := range f {
			f[i] = byte(rng.UintN(256))
		}
	}
	return f
}

// randomSession handshakes, opens channel 1, sends buf and reads
// whatever comes back for a short while.
func randomSession(t *testing.T, addr string, buf []byte) {
	rc := rawDial(t, addr)
	if err := rc.handshake(0, 4096); err != nil {
		t.Errorf("handshake: %v", err)
		return
	}
	if err := rc.openChannel(1); err != nil {
		t.Errorf("channel.open: %v", err)
		return
	}
	if err := rc.write(buf); err != nil {
		return
	}
	rc.nc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = io.Copy(io.Discard, rc.nc)
	rc.nc.Close()
}
