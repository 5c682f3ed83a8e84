package server_test

import (
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/server"
)

// TestOutputCap: issue 12, server package tests (output cap and pause).
// A client that publishes mandatory unroutable messages and never reads
// the basic.returns they cause is not read from either once 1 MiB of
// output waits for it: the reader pauses, the pending output stays near
// 1 MiB instead of growing with every publish, and everything is
// answered once the client reads.
func TestOutputCap(t *testing.T) {
	s := startServer(t, server.Config{})
	c := dialRaw(t, s)
	c.open(amqp.ConnectionTuneOk{})
	if tc, ok := c.nc.(*net.TCPConn); ok {
		// Small socket buffers, so that the kernel holds little of it.
		tc.SetReadBuffer(64 << 10)
		tc.SetWriteBuffer(64 << 10)
	}
	const n, size = 1024, 64 << 10 // 64 MiB of returns
	body := make([]byte, size)
	one := appendPublish(nil, 1, &amqp.BasicPublish{RoutingKey: "hB-nowhere", Mandatory: true}, amqp.Properties{}, body)
	var wg sync.WaitGroup
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.nc.SetWriteDeadline(time.Now().Add(60 * time.Second))
		for range n {
			if _, err := c.nc.Write(one); err != nil {
				werr = err
				return
			}
		}
	}()
	defer func() { c.nc.Close(); wg.Wait() }()

	waitFor(t, 20*time.Second, "the reader never paused on 1 MiB of output", func() bool {
		pending, paused := s.OutputForTest()
		// The bound: the 1 MiB high-water mark plus the one reply that
		// crossed it.
		if limit := 1<<20 + size + 4096; pending > limit {
			t.Fatalf("%d bytes of output pending for a client that does not read, over %d", pending, limit)
		}
		return paused && pending >= 1<<20
	})
	// Now read: every publish is returned, and the writer goroutine
	// finishes.
	returns := 0
	for returns < n {
		f := c.frame()
		if f.Type != amqp.FrameMethod {
			continue
		}
		m, err := amqp.DecodeServerMethod(f.Payload)
		if err != nil {
			t.Fatal(err)
		}
		r, ok := m.(*amqp.BasicReturn)
		if !ok {
			t.Fatalf("got %s, want basic.return", m.Name())
		}
		if r.ReplyCode != amqp.NoRoute {
			t.Fatalf("basic.return %+v", r)
		}
		returns++
	}
	wg.Wait()
	if werr != nil {
		t.Fatalf("publishing: %v", werr)
	}
}

// TestConnectionLimits: issue 12, server package tests (per-connection
// limits). A vhost's and a user's max-connections refuse the connection
// over the limit at connection.open with 530 and RabbitMQ's text; once a
// connection closes there is room again. A user's max-channels closes
// the connection that opens one channel too many.
func TestConnectionLimits(t *testing.T) {
	s := startServer(t, server.Config{})
	b := s.Broker()
	refused := func(t *testing.T, text string) {
		t.Helper()
		c, err := amqp091.Dial(amqpURL(s))
		if err == nil {
			c.Close()
			t.Fatal("connection over the limit accepted")
		}
		var ae *amqp091.Error
		if !errors.As(err, &ae) || ae.Code != 530 || ae.Reason != text {
			t.Fatalf("dial: %v, want 530 %q", err, text)
		}
	}
	// dialAgain dials until the server has forgotten a closed connection.
	dialAgain := func(t *testing.T) *amqp091.Connection {
		t.Helper()
		var c *amqp091.Connection
		waitFor(t, 10*time.Second, "no room after a close", func() bool {
			var err error
			c, err = amqp091.Dial(amqpURL(s))
			return err == nil
		})
		return c
	}

	// idle waits until the connections of the previous subtest are gone
	// from the server's count.
	idle := func(t *testing.T) {
		t.Helper()
		waitFor(t, 10*time.Second, "connections of an earlier subtest still open", func() bool { return s.ConnectionCount() == 0 })
	}
	t.Run("vhost-max-connections", func(t *testing.T) {
		idle(t)
		if err := b.SetVHostLimit("/", broker.LimitMaxConnections, 1); err != nil {
			t.Fatal(err)
		}
		defer b.ClearVHostLimit("/", broker.LimitMaxConnections)
		c := dial(t, s)
		refused(t, "NOT_ALLOWED - access to vhost '/' refused for user 'guest': connection limit (1) is reached")
		c.Close()
		dialAgain(t).Close()
	})
	t.Run("user-max-connections", func(t *testing.T) {
		idle(t)
		if err := b.SetUserLimit("guest", broker.LimitMaxConnections, 2); err != nil {
			t.Fatal(err)
		}
		defer b.ClearUserLimit("guest", broker.LimitMaxConnections)
		c1, c2 := dial(t, s), dial(t, s)
		refused(t, "NOT_ALLOWED - connection refused for user 'guest': user connection limit (2) is reached")
		c1.Close()
		c2.Close()
		dialAgain(t).Close()
	})
	t.Run("user-max-channels", func(t *testing.T) {
		idle(t)
		if err := b.SetUserLimit("guest", broker.LimitMaxChannels, 2); err != nil {
			t.Fatal(err)
		}
		defer b.ClearUserLimit("guest", broker.LimitMaxChannels)
		c := dial(t, s)
		closed := c.NotifyClose(make(chan *amqp091.Error, 1))
		channel(t, c)
		channel(t, c)
		if _, err := c.Channel(); err == nil {
			t.Fatal("third channel opened with max-channels 2")
		}
		e := closedWith(t, closed)
		if e == nil || e.Code != 530 || !strings.Contains(e.Reason, "maximum allowed user limit of (2)") {
			t.Fatalf("closed with %v, want 530 user channel limit", e)
		}
	})
}
