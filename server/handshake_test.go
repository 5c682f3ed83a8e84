package server_test

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/server"
)

// TestHandshakeWrongProtocolHeader: issue 12, server package tests (the
// handshake). A client that opens with anything but AMQP 0-9-1's header
// gets the header Warren speaks, "AMQP 0 0 9 1", and the socket closes,
// as RabbitMQ answers.
func TestHandshakeWrongProtocolHeader(t *testing.T) {
	s := startServer(t, server.Config{})
	for name, h := range map[string]string{
		"http":     "GET / HTTP/1.1\r\n\r\n",
		"amqp-1.0": "AMQP\x00\x01\x00\x00",
		"amqp-0-8": "AMQP\x01\x01\x08\x00",
	} {
		t.Run(name, func(t *testing.T) {
			c := dialRaw(t, s)
			c.write([]byte(h))
			c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, err := io.ReadAll(c.nc)
			if err != nil && !isReset(err) {
				t.Fatalf("reading the answer: %v", err)
			}
			if !bytes.Equal(got, amqp.ProtocolHeader) {
				t.Fatalf("answer %q, want %q then the close", got, amqp.ProtocolHeader)
			}
		})
	}
}

// TestHandshakeAMQP09Header: issue 12, server package tests. The 0-9
// header some old clients send is answered with connection.start, and the
// connection speaks 0-9-1, as RabbitMQ does.
func TestHandshakeAMQP09Header(t *testing.T) {
	s := startServer(t, server.Config{})
	c := dialRaw(t, s)
	c.write([]byte("AMQP\x01\x01\x00\x09"))
	st := expect[*amqp.ConnectionStart](c)
	if st.VersionMajor != 0 || st.VersionMinor != 9 || st.Mechanisms != "PLAIN AMQPLAIN" {
		t.Fatalf("connection.start %+v", st)
	}
	c.send(0, startOk())
	tune := expect[*amqp.ConnectionTune](c)
	c.send(0, &amqp.ConnectionTuneOk{ChannelMax: tune.ChannelMax, FrameMax: tune.FrameMax}, &amqp.ConnectionOpen{VirtualHost: "/"})
	expect[*amqp.ConnectionOpenOk](c)
}

// TestHandshakeTuneNegotiation: issue 12, server package tests (frame_max
// and channel_max negotiation). connection.tune proposes the configured
// limits; a tune-ok above them, or a frame_max under the 4096 minimum, is
// refused with 530 and RabbitMQ's text; a lower value is what the
// connection then enforces.
func TestHandshakeTuneNegotiation(t *testing.T) {
	s := startServer(t, server.Config{FrameMax: 8192, ChannelMax: 3, Heartbeat: 7 * time.Second})

	t.Run("proposal", func(t *testing.T) {
		c := dialRaw(t, s)
		tune := c.handshake()
		if tune.FrameMax != 8192 || tune.ChannelMax != 3 || tune.Heartbeat != 7 {
			t.Fatalf("connection.tune %+v, want frame_max 8192, channel_max 3, heartbeat 7", tune)
		}
	})
	for _, tc := range []struct {
		name string
		ok   amqp.ConnectionTuneOk
		text string
	}{
		{"frame-max-under-minimum", amqp.ConnectionTuneOk{ChannelMax: 3, FrameMax: 2048}, "NOT_ALLOWED - frame_max=2048 < 4096 min size"},
		{"frame-max-over-proposal", amqp.ConnectionTuneOk{ChannelMax: 3, FrameMax: 16384}, "NOT_ALLOWED - frame_max=16384 > 8192 max size"},
		{"channel-max-over-proposal", amqp.ConnectionTuneOk{ChannelMax: 4, FrameMax: 8192},
			"NOT_ALLOWED - negotiated channel_max = 4 is higher than the maximum allowed value (3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, s)
			c.handshake()
			c.send(0, &tc.ok)
			c.expectClose(amqp.NotAllowed, tc.text)
			c.expectEOF()
		})
	}

	t.Run("lower-frame-max-enforced", func(t *testing.T) {
		c := dialRaw(t, s)
		c.open(amqp.ConnectionTuneOk{ChannelMax: 3, FrameMax: 4096})
		// A body frame of 5000 bytes fits the server's 8192 but not the
		// negotiated 4096.
		b := amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{RoutingKey: "hB-nowhere"})
		b = amqp.AppendHeaderFrame(b, 1, 60, 5000, &amqp.Properties{})
		b = amqp.AppendBodyFrames(b, 1, make([]byte, 5000), 8192)
		c.write(b)
		cl := expect[*amqp.ConnectionClose](c)
		if cl.ReplyCode != amqp.FrameError {
			t.Fatalf("connection.close %d %q, want 501 FRAME_ERROR", cl.ReplyCode, cl.ReplyText)
		}
	})

	t.Run("negotiated-frame-max-accepted", func(t *testing.T) {
		// The 4096 limit of the handshake lifts to the negotiated 8192: a
		// 6000-byte body frame is taken.
		c := dialRaw(t, s)
		c.open(amqp.ConnectionTuneOk{ChannelMax: 3, FrameMax: 8192})
		c.send(1, &amqp.QueueDeclare{Queue: "hB-big"})
		expect[*amqp.QueueDeclareOk](c)
		b := amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{RoutingKey: "hB-big"})
		b = amqp.AppendHeaderFrame(b, 1, 60, 6000, &amqp.Properties{})
		b = amqp.AppendBodyFrames(b, 1, make([]byte, 6000), 8192)
		c.write(b)
		c.send(1, &amqp.QueueDeclare{Queue: "hB-big", Passive: true})
		if ok := expect[*amqp.QueueDeclareOk](c); ok.MessageCount != 1 {
			t.Fatalf("queue holds %d messages, want the 6000-byte one", ok.MessageCount)
		}
	})

	t.Run("lower-channel-max-enforced", func(t *testing.T) {
		c := dialRaw(t, s)
		c.open(amqp.ConnectionTuneOk{ChannelMax: 2, FrameMax: 8192})
		c.send(2, &amqp.ChannelOpen{})
		expect[*amqp.ChannelOpenOk](c)
		c.send(3, &amqp.ChannelOpen{})
		c.expectClose(amqp.NotAllowed, "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)")
	})

	t.Run("frame-max-below-minimum-config", func(t *testing.T) {
		if _, err := server.New(server.Config{AMQPAddr: "127.0.0.1:0", FrameMax: 4095}); err == nil {
			t.Fatal("server.New took frame-max 4095")
		}
	})
}

// TestHandshakeErrors: issue 12, server package tests (the handshake and
// its errors). Each wrong step gets RabbitMQ's connection.close, and the
// socket closes after close-ok.
func TestHandshakeErrors(t *testing.T) {
	s := startServer(t, server.Config{})
	t.Run("wrong-method", func(t *testing.T) {
		c := dialRaw(t, s)
		c.write(amqp.ProtocolHeader)
		expect[*amqp.ConnectionStart](c)
		c.send(0, &amqp.ConnectionOpen{VirtualHost: "/"})
		c.expectClose(amqp.CommandInvalid, "COMMAND_INVALID - expected 'connection.start_ok', got 'connection.open'")
		c.expectEOF()
	})
	t.Run("bad-password", func(t *testing.T) {
		c := dialRaw(t, s)
		c.write(amqp.ProtocolHeader)
		expect[*amqp.ConnectionStart](c)
		so := startOk()
		so.Response = "\x00guest\x00wrong"
		c.send(0, so)
		c.expectClose(amqp.AccessRefused, "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile.")
		c.expectEOF()
	})
	t.Run("bad-password-without-close-capability", func(t *testing.T) {
		// A client that cannot take connection.close before tune sees the
		// socket close, as with RabbitMQ.
		c := dialRaw(t, s)
		c.write(amqp.ProtocolHeader)
		expect[*amqp.ConnectionStart](c)
		c.send(0, &amqp.ConnectionStartOk{ClientProperties: amqp.Table{}, Mechanism: "PLAIN", Response: "\x00guest\x00wrong", Locale: "en_US"})
		f, err := c.tryFrame(10 * time.Second)
		if err == nil {
			t.Fatalf("frame %d on channel %d, want the socket closed", f.Type, f.Channel)
		}
	})
	t.Run("unknown-mechanism", func(t *testing.T) {
		c := dialRaw(t, s)
		c.write(amqp.ProtocolHeader)
		expect[*amqp.ConnectionStart](c)
		so := startOk()
		so.Mechanism = "EXTERNAL"
		c.send(0, so)
		c.expectClose(amqp.CommandInvalid, "COMMAND_INVALID - unknown authentication mechanism 'EXTERNAL'")
	})
	t.Run("unknown-vhost", func(t *testing.T) {
		c := dialRaw(t, s)
		tune := c.handshake()
		c.send(0, &amqp.ConnectionTuneOk{ChannelMax: tune.ChannelMax, FrameMax: tune.FrameMax}, &amqp.ConnectionOpen{VirtualHost: "hB-nope"})
		c.expectClose(amqp.NotAllowed, "NOT_ALLOWED - vhost hB-nope not found")
		c.expectEOF()
	})
	t.Run("tune-ok-expected", func(t *testing.T) {
		c := dialRaw(t, s)
		c.handshake()
		c.send(0, &amqp.ConnectionOpen{VirtualHost: "/"})
		c.expectClose(amqp.CommandInvalid, "COMMAND_INVALID - expected 'connection.tune_ok', got 'connection.open'")
	})
}

// TestHandshakeTimeout: issue 12, server package tests. A client that
// connects and says nothing is dropped after HandshakeTimeout.
func TestHandshakeTimeout(t *testing.T) {
	s := startServer(t, server.Config{HandshakeTimeout: 200 * time.Millisecond})
	c := dialRaw(t, s)
	c.expectEOF()
	// Half a handshake does not extend it.
	c = dialRaw(t, s)
	c.write(amqp.ProtocolHeader)
	expect[*amqp.ConnectionStart](c)
	c.expectEOF()
}

// TestHeartbeats: issue 12, server package tests (heartbeats). With a
// negotiated interval of 1 s the server sends heartbeat frames to an idle
// client, and closes the socket of a client that sends nothing for more
// than two intervals.
func TestHeartbeats(t *testing.T) {
	s := startServer(t, server.Config{Heartbeat: time.Second})
	c := dialRaw(t, s)
	tune := c.handshake()
	if tune.Heartbeat != 1 {
		t.Fatalf("proposed heartbeat %d, want 1", tune.Heartbeat)
	}
	c.send(0, &amqp.ConnectionTuneOk{ChannelMax: tune.ChannelMax, FrameMax: tune.FrameMax, Heartbeat: 1}, &amqp.ConnectionOpen{VirtualHost: "/"})
	expect[*amqp.ConnectionOpenOk](c)
	f := c.frame()
	if f.Type != amqp.FrameHeartbeat || f.Channel != 0 {
		t.Fatalf("frame type %d on channel %d, want a heartbeat on 0", f.Type, f.Channel)
	}
	start := time.Now()
	c.expectEOF()
	if d := time.Since(start); d < time.Second {
		t.Fatalf("closed %v after a heartbeat: before the client missed two", d)
	}
}
