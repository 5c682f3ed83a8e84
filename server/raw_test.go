package server_test

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/server"
)

// Helpers of the server package's own tests (issue 12: tests for the
// server package). Each test starts a Server in-process on a loopback port
// and drives it over TCP: with amqp091-go where a client library shows
// what matters, with raw frames (rawConn, built on package amqp's encoder
// and FrameReader) where the exact frames are the point.

// startServer starts a Server for cfg on 127.0.0.1 and shuts it down at
// the end of the test. Resource alarms are off unless cfg sets them, so
// that a busy test machine does not block publishers.
func startServer(t *testing.T, cfg server.Config) *server.Server {
	t.Helper()
	if cfg.AMQPAddr == "" {
		cfg.AMQPAddr = "127.0.0.1:0"
	}
	if cfg.MemoryHighWatermark == 0 {
		cfg.MemoryHighWatermark = -1
	}
	if cfg.DiskFreeLimit == 0 {
		cfg.DiskFreeLimit = -1
	}
	s, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// waitFor polls cond every few milliseconds until it holds, failing the
// test with what after d. It is the one polling loop of these tests.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, d, what, cond)
}

func amqpURL(s *server.Server) string { return "amqp://guest:guest@" + s.Addr().String() + "/" }

// rawConn is an AMQP client made of frames: it sends what a test tells
// it, and reads every frame the server sends.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	r  *amqp.FrameReader
	// confirmed is the highest publish confirmed on channel 1
	// (readConfirms).
	confirmed uint64
}

func dialRaw(t *testing.T, s *server.Server) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	r := amqp.NewFrameReader(nc, 1<<20)
	r.SetMaxFrameSize(0)
	return &rawConn{t: t, nc: nc, r: r}
}

func (c *rawConn) write(b []byte) {
	c.t.Helper()
	c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// send writes methods on channel ch in one write.
func (c *rawConn) send(ch uint16, ms ...amqp.Method) {
	c.t.Helper()
	var b []byte
	for _, m := range ms {
		b = amqp.AppendMethodFrame(b, ch, m)
	}
	c.write(b)
}

// appendPublish appends a basic.publish with its content to b.
func appendPublish(b []byte, ch uint16, p *amqp.BasicPublish, props amqp.Properties, body []byte) []byte {
	b = amqp.AppendMethodFrame(b, ch, p)
	b = amqp.AppendHeaderFrame(b, ch, 60, uint64(len(body)), &props)
	return amqp.AppendBodyFrames(b, ch, body, 131072)
}

// frame reads the next frame (heartbeats included), failing the test
// after 10 s.
func (c *rawConn) frame() amqp.Frame {
	c.t.Helper()
	f, err := c.tryFrame(10 * time.Second)
	if err != nil {
		c.t.Fatalf("reading a frame: %v", err)
	}
	return f
}

func (c *rawConn) tryFrame(d time.Duration) (amqp.Frame, error) {
	c.nc.SetReadDeadline(time.Now().Add(d))
	f, err := c.r.ReadFrame()
	if err != nil {
		return f, err
	}
	f.Payload = append([]byte(nil), f.Payload...)
	return f, nil
}

// method reads frames up to the next method frame (skipping heartbeats
// and content) and decodes it.
func (c *rawConn) method() (uint16, amqp.Method) {
	c.t.Helper()
	for {
		f := c.frame()
		if f.Type != amqp.FrameMethod {
			continue
		}
		m, err := amqp.DecodeServerMethod(f.Payload)
		if err != nil {
			c.t.Fatalf("decoding a method: %v", err)
		}
		return f.Channel, m
	}
}

// expect reads the next method and requires it to be a T.
func expect[T amqp.Method](c *rawConn) T {
	c.t.Helper()
	_, m := c.method()
	tm, ok := m.(T)
	if !ok {
		c.t.Fatalf("got %s %+v, want %T", m.Name(), m, *new(T))
	}
	return tm
}

// expectEOF requires the server to close the socket (after any frames
// still in flight) within 10 s.
func (c *rawConn) expectEOF() {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f, err := c.tryFrame(time.Until(deadline))
		if err == nil {
			if f.Type == amqp.FrameMethod {
				m, _ := amqp.DecodeServerMethod(f.Payload)
				if m != nil {
					c.t.Logf("frame before the close: %s %+v", m.Name(), m)
				}
			}
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.t.Fatal("the server did not close the socket")
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.ErrUnexpectedEOF) && !isReset(err) {
			c.t.Fatalf("reading until the close: %v", err)
		}
		return
	}
}

func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// startOk is a guest login with the capabilities amqp091-go announces.
func startOk() *amqp.ConnectionStartOk {
	return &amqp.ConnectionStartOk{
		ClientProperties: amqp.Table{"capabilities": amqp.Table{
			"authentication_failure_close": true, "connection.blocked": true, "consumer_cancel_notify": true,
		}},
		Mechanism: "PLAIN", Response: "\x00guest\x00guest", Locale: "en_US",
	}
}

// handshake runs the protocol header, start/start-ok and tune, and returns
// the server's connection.tune; the caller sends tune-ok.
func (c *rawConn) handshake() *amqp.ConnectionTune {
	c.t.Helper()
	c.write(amqp.ProtocolHeader)
	expect[*amqp.ConnectionStart](c)
	c.send(0, startOk())
	return expect[*amqp.ConnectionTune](c)
}

// open runs the whole handshake with tune-ok to (zero: the server's
// values) and opens channel 1.
func (c *rawConn) open(to amqp.ConnectionTuneOk) {
	c.t.Helper()
	tune := c.handshake()
	if to == (amqp.ConnectionTuneOk{}) {
		to = amqp.ConnectionTuneOk{ChannelMax: tune.ChannelMax, FrameMax: tune.FrameMax, Heartbeat: 0}
	}
	c.send(0, &to, &amqp.ConnectionOpen{VirtualHost: "/"})
	expect[*amqp.ConnectionOpenOk](c)
	c.send(1, &amqp.ChannelOpen{})
	expect[*amqp.ChannelOpenOk](c)
}

// expectClose reads up to a connection.close, answers close-ok, and
// requires its code and text.
func (c *rawConn) expectClose(code uint16, text string) {
	c.t.Helper()
	cl := expect[*amqp.ConnectionClose](c)
	if cl.ReplyCode != code || (text != "" && cl.ReplyText != text) {
		c.t.Fatalf("connection.close %d %q, want %d %q", cl.ReplyCode, cl.ReplyText, code, text)
	}
	c.send(0, &amqp.ConnectionCloseOk{})
}
