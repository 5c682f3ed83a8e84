package integration

// Helpers for the core feature tests (exchanges, queues, consume,
// confirms/tx, connection). They drive a broker over TCP with amqp091-go,
// or with a small raw client (rawClient) where amqp091-go hides protocol
// details. Set WARREN_DIFF_URL=amqp://guest:guest@127.0.0.1:5672/ to run
// the tests that do not need Warren internals against another broker
// (a real RabbitMQ) and compare behaviour.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/warrentest"

	wire "github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/testutil"
)

// waitTimeout bounds every wait in these tests.
const waitTimeout = 5 * time.Second

// quietPeriod is how long a test watches for something that must not happen.
const quietPeriod = 150 * time.Millisecond

// env is the broker under test.
type env struct {
	t   *testing.T
	url string
	w   *warrentest.Broker // nil when running against WARREN_DIFF_URL
}

func newEnv(t *testing.T, opts ...warrentest.Option) *env {
	t.Helper()
	if u := os.Getenv("WARREN_DIFF_URL"); u != "" {
		return &env{t: t, url: u}
	}
	w := warrentest.Start(t, opts...)
	return &env{t: t, url: w.URL(), w: w}
}

// warren returns the in-process broker, skipping the test when running
// against another broker.
func (e *env) warren() *warrentest.Broker {
	e.t.Helper()
	if e.w == nil {
		e.t.Skip("needs the in-process Warren broker")
	}
	return e.w
}

func (e *env) addr() string {
	u, err := amqpURIHost(e.url)
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}

func amqpURIHost(url string) (string, error) {
	u, err := amqp.ParseURI(url)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(u.Host, strconv.Itoa(u.Port)), nil
}

// dial opens a connection closed at cleanup.
func (e *env) dial() *amqp.Connection {
	e.t.Helper()
	return e.dialConfig(amqp.Config{})
}

func (e *env) dialConfig(cfg amqp.Config) *amqp.Connection {
	e.t.Helper()
	return testutil.Dial(e.t, e.url, cfg)
}

// channel opens a channel on a new connection.
func (e *env) channel() *amqp.Channel {
	e.t.Helper()
	return openChannel(e.t, e.dial())
}

func openChannel(t *testing.T, c *amqp.Connection) *amqp.Channel {
	t.Helper()
	ch, err := c.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	return ch
}

// name returns a name unique to this run, so that tests can share a broker.
func (e *env) name(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// queue declares a queue (server-named when name is "") and deletes it at
// cleanup.
func (e *env) queue(ch *amqp.Channel, name string, args amqp.Table) string {
	e.t.Helper()
	q, err := ch.QueueDeclare(name, false, false, false, false, args)
	if err != nil {
		e.t.Fatalf("queue.declare %q: %v", name, err)
	}
	e.cleanupQueue(q.Name)
	return q.Name
}

// exchange declares an exchange and deletes it at cleanup.
func (e *env) exchange(ch *amqp.Channel, name, kind string, args amqp.Table) string {
	e.t.Helper()
	if err := ch.ExchangeDeclare(name, kind, false, false, false, false, args); err != nil {
		e.t.Fatalf("exchange.declare %q: %v", name, err)
	}
	e.cleanupExchange(name)
	return name
}

func (e *env) cleanup(fn func(*amqp.Channel)) {
	e.t.Cleanup(func() {
		c, err := amqp.Dial(e.url)
		if err != nil {
			return
		}
		defer c.Close()
		if ch, err := c.Channel(); err == nil {
			fn(ch)
		}
	})
}

func (e *env) cleanupQueue(name string) {
	e.cleanup(func(ch *amqp.Channel) { ch.QueueDelete(name, false, false, false) })
}

func (e *env) cleanupExchange(name string) {
	e.cleanup(func(ch *amqp.Channel) { ch.ExchangeDelete(name, false, false) })
}

func bind(t *testing.T, ch *amqp.Channel, queue, key, exchange string, args amqp.Table) {
	t.Helper()
	if err := ch.QueueBind(queue, key, exchange, false, args); err != nil {
		t.Fatalf("queue.bind %s -> %s (%q): %v", exchange, queue, key, err)
	}
}

// publish publishes a message and returns once the broker confirmed it:
// the channel is put in confirm mode on first use.
func publish(t *testing.T, ch *amqp.Channel, exchange, key string, p amqp.Publishing) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatalf("confirm.select: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, p)
	if err != nil {
		t.Fatalf("publish to %q/%q: %v", exchange, key, err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil || !ok {
		t.Fatalf("publish to %q/%q: confirm got ack=%v err=%v, want ack", exchange, key, ok, err)
	}
}

func publishBody(t *testing.T, ch *amqp.Channel, exchange, key, body string) {
	t.Helper()
	publish(t, ch, exchange, key, amqp.Publishing{Body: []byte(body)})
}

// publishNoWait publishes without waiting for anything.
func publishNoWait(t *testing.T, ch *amqp.Channel, exchange, key string, p amqp.Publishing) {
	t.Helper()
	if err := ch.PublishWithContext(context.Background(), exchange, key, false, false, p); err != nil {
		t.Fatalf("publish to %q/%q: %v", exchange, key, err)
	}
}

// getBodies drains a queue with basic.get (auto-ack) and returns the bodies.
func getBodies(t *testing.T, ch *amqp.Channel, queue string) []string {
	t.Helper()
	var out []string
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("basic.get %s: %v", queue, err)
		}
		if !ok {
			return out
		}
		out = append(out, string(d.Body))
	}
}

// recv waits for one delivery.
func recv(t *testing.T, ds <-chan amqp.Delivery) amqp.Delivery {
	t.Helper()
	select {
	case d, ok := <-ds:
		if !ok {
			t.Fatal("delivery channel closed, want a delivery")
		}
		return d
	case <-time.After(waitTimeout):
		t.Fatal("no delivery within timeout")
	}
	panic("unreachable")
}

// recvN waits for n deliveries.
func recvN(t *testing.T, ds <-chan amqp.Delivery, n int) []amqp.Delivery {
	t.Helper()
	out := make([]amqp.Delivery, 0, n)
	for range n {
		out = append(out, recv(t, ds))
	}
	return out
}

// noRecv checks that nothing is delivered for a short while.
func noRecv(t *testing.T, ds <-chan amqp.Delivery) {
	t.Helper()
	select {
	case d, ok := <-ds:
		if ok {
			t.Fatalf("got delivery %q (tag %d), want none", d.Body, d.DeliveryTag)
		}
	case <-time.After(quietPeriod):
	}
}

func bodies(ds []amqp.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Body)
	}
	return out
}

// consume starts a consumer.
func consume(t *testing.T, ch *amqp.Channel, queue, tag string, noAck bool, args amqp.Table) <-chan amqp.Delivery {
	t.Helper()
	ds, err := ch.Consume(queue, tag, noAck, false, false, false, args)
	if err != nil {
		t.Fatalf("basic.consume %s: %v", queue, err)
	}
	return ds
}

// counts returns a queue's message and consumer counts by passive declare.
func counts(t *testing.T, ch *amqp.Channel, queue string) (messages, consumers int) {
	t.Helper()
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		t.Fatalf("passive queue.declare %s: %v", queue, err)
	}
	return q.Messages, q.Consumers
}

// waitFor polls cond until it holds or the wait times out.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, waitTimeout, what, cond)
}

// waitMessages polls until queue holds want ready messages.
func (e *env) waitMessages(queue string, want int) {
	e.t.Helper()
	ch := e.channel()
	var got int
	if !testutil.Until(waitTimeout, func() bool {
		got, _ = counts(e.t, ch, queue)
		return got == want
	}) {
		e.t.Fatalf("queue %s: got %d ready messages, want %d", queue, got, want)
	}
}

// queueExists reports whether a queue exists, using a throwaway channel.
func (e *env) queueExists(c *amqp.Connection, queue string) bool {
	e.t.Helper()
	ch := openChannel(e.t, c)
	defer ch.Close()
	_, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err == nil {
		return true
	}
	wantCode(e.t, err, amqp.NotFound)
	return false
}

func (e *env) exchangeExists(c *amqp.Connection, name string) bool {
	e.t.Helper()
	ch := openChannel(e.t, c)
	defer ch.Close()
	err := ch.ExchangeDeclarePassive(name, "direct", false, false, false, false, nil)
	if err == nil {
		return true
	}
	wantCode(e.t, err, amqp.NotFound)
	return false
}

// wantCode checks that err is an AMQP error with the reply code.
func wantCode(t *testing.T, err error, code int) {
	t.Helper()
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		t.Fatalf("got error %v, want AMQP error %d", err, code)
	}
	if ae.Code != code {
		t.Fatalf("got AMQP error %d %q, want code %d", ae.Code, ae.Reason, code)
	}
}

// --- raw client ---

// rawClient speaks AMQP frames directly, for what amqp091-go hides
// (server-generated consumer tags, multiple acks, frame sizes, silence).
type rawClient struct {
	t        *testing.T
	nc       net.Conn
	r        *wire.FrameReader
	frameMax uint32
}

// dialRaw connects and completes the handshake as guest with the given
// heartbeat and frame-max (0 takes the server's).
func dialRaw(t *testing.T, addr string, heartbeat uint16, frameMax uint32) *rawClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c := &rawClient{t: t, nc: nc, r: wire.NewFrameReader(nc, 64<<10)}
	c.r.SetMaxFrameSize(0)
	if _, err := nc.Write(wire.ProtocolHeader); err != nil {
		t.Fatal(err)
	}
	start := c.expect(0)
	if _, ok := start.(*wire.ConnectionStart); !ok {
		t.Fatalf("got %s, want connection.start", start.Name())
	}
	c.send(0, &wire.ConnectionStartOk{
		ClientProperties: wire.Table{"product": "rawClient", "capabilities": wire.Table{"consumer_cancel_notify": true, "connection.blocked": true}},
		Mechanism:        "PLAIN", Response: "\x00guest\x00guest", Locale: "en_US"})
	tune, ok := c.expect(0).(*wire.ConnectionTune)
	if !ok {
		t.Fatal("want connection.tune")
	}
	if frameMax == 0 {
		frameMax = tune.FrameMax
	}
	c.frameMax = frameMax
	c.send(0, &wire.ConnectionTuneOk{ChannelMax: tune.ChannelMax, FrameMax: frameMax, Heartbeat: heartbeat})
	c.send(0, &wire.ConnectionOpen{VirtualHost: "/"})
	if _, ok := c.expect(0).(*wire.ConnectionOpenOk); !ok {
		t.Fatal("want connection.open-ok")
	}
	return c
}

func (c *rawClient) send(ch uint16, m wire.Method) {
	c.t.Helper()
	c.write(wire.AppendMethodFrame(nil, ch, m))
}

func (c *rawClient) write(b []byte) {
	c.t.Helper()
	c.nc.SetWriteDeadline(time.Now().Add(waitTimeout))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("raw write: %v", err)
	}
}

// publish appends a basic.publish with its content to b.
func (c *rawClient) appendPublish(b []byte, ch uint16, exchange, key string, body []byte) []byte {
	b = wire.AppendMethodFrame(b, ch, &wire.BasicPublish{Exchange: exchange, RoutingKey: key})
	b = wire.AppendHeaderFrame(b, ch, 60, uint64(len(body)), &wire.Properties{})
	return wire.AppendBodyFrames(b, ch, body, c.frameMax)
}

// frame reads the next non-heartbeat frame, copying its payload.
func (c *rawClient) frame() wire.Frame {
	c.t.Helper()
	for {
		c.nc.SetReadDeadline(time.Now().Add(waitTimeout))
		f, err := c.r.ReadFrame()
		if err != nil {
			c.t.Fatalf("raw read: %v", err)
		}
		if f.Type == wire.FrameHeartbeat {
			continue
		}
		f.Payload = append([]byte(nil), f.Payload...)
		return f
	}
}

// expect reads the next frame and decodes it as a method on channel ch.
func (c *rawClient) expect(ch uint16) wire.Method {
	c.t.Helper()
	f := c.frame()
	if f.Type != wire.FrameMethod || f.Channel != ch {
		c.t.Fatalf("got frame type %d on channel %d, want a method on channel %d", f.Type, f.Channel, ch)
	}
	m, err := wire.DecodeServerMethod(f.Payload)
	if err != nil {
		c.t.Fatalf("decode: %v", err)
	}
	return m
}

func (c *rawClient) openChannel(ch uint16) {
	c.t.Helper()
	c.send(ch, &wire.ChannelOpen{})
	if _, ok := c.expect(ch).(*wire.ChannelOpenOk); !ok {
		c.t.Fatal("want channel.open-ok")
	}
}
