package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/server"
)

// TestIntrospection: issue 12, server package tests. What the management
// API reads from the server describes the live connection as negotiated:
// the connection with its name, user, vhost, tuned limits and client
// properties; its channels with their confirm mode, prefetch and unacked
// count; its consumers; and CloseConnection closes it with 320 and the
// reason given.
func TestIntrospection(t *testing.T) {
	s := startServer(t, server.Config{FrameMax: 65536, ChannelMax: 100, Heartbeat: 30 * time.Second})
	cfg := amqp.Config{Properties: amqp.Table{"connection_name": "hB-intro"}, Heartbeat: 20 * time.Second}
	c, err := amqp.DialConfig(amqpURL(s), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch := channel(t, c)
	fill(t, ch, "hB-info", 3)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(7, 0, false); err != nil {
		t.Fatal(err)
	}
	d, err := ch.Consume("hB-info", "hB-tag", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		next(t, d)
	}

	conns := s.Connections()
	if len(conns) != 1 {
		t.Fatalf("%d connections, want 1", len(conns))
	}
	ci := conns[0]
	local := c.LocalAddr().String()
	if want := fmt.Sprintf("%s -> %s", local, s.Addr()); ci.Name != want {
		t.Errorf("connection name %q, want %q", ci.Name, want)
	}
	if ci.User != "guest" || ci.VHost != "/" || ci.FrameMax != 65536 || ci.ChannelMax != 100 || ci.Heartbeat != 20*time.Second ||
		ci.AuthMechanism != "PLAIN" || ci.Channels != 1 || ci.Starting {
		t.Errorf("connection info %+v", ci)
	}
	if ci.ClientProperties["connection_name"] != "hB-intro" {
		t.Errorf("client properties %v", ci.ClientProperties)
	}

	chs := s.Channels()
	if len(chs) != 1 {
		t.Fatalf("%d channels, want 1", len(chs))
	}
	if chi := chs[0]; chi.Number != 1 || !chi.Confirm || chi.Tx || chi.Prefetch != 7 || chi.Consumers != 1 || chi.Connection != ci.Name {
		t.Errorf("channel info %+v", chi)
	}
	// The unacked count follows the deliveries (the writer's side).
	waitFor(t, 10*time.Second, "channel unacked never 3", func() bool { return s.Channels()[0].Unacked == 3 })
	cons := s.Consumers()
	if len(cons) != 1 || cons[0].Tag != "hB-tag" || cons[0].Queue != "hB-info" || !cons[0].AckRequired || cons[0].Prefetch != 7 ||
		cons[0].ChannelNumber != 1 || cons[0].Connection != ci.Name {
		t.Errorf("consumers %+v", cons)
	}

	if s.CloseConnection("no such connection", "x") {
		t.Error("CloseConnection found a connection that does not exist")
	}
	closed := c.NotifyClose(make(chan *amqp.Error, 1))
	if !s.CloseConnection(ci.Name, "Closed via management plugin") {
		t.Fatal("CloseConnection did not find the connection")
	}
	if e := closedWith(t, closed); e == nil || e.Code != 320 || e.Reason != "CONNECTION_FORCED - Closed via management plugin" {
		t.Fatalf("closed with %v, want 320 with the reason", e)
	}
	// Its unacked messages went back to the queue.
	c2 := dial(t, s)
	waitReady(t, channel(t, c2), "hB-info", 3)
}

// TestDirectReplyTo: issue 12, server package tests (channel state). A
// channel consuming from amq.rabbitmq.reply-to gets a reply published to
// the address its requests carry, without any queue.
func TestDirectReplyTo(t *testing.T) {
	s := startServer(t, server.Config{})
	c := dial(t, s)
	client := channel(t, c)
	replies, err := client.Consume("amq.rabbitmq.reply-to", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, client, "hB-rpc", 0)
	if err := client.PublishWithContext(context.Background(), "", "hB-rpc", false, false,
		amqp.Publishing{ReplyTo: "amq.rabbitmq.reply-to", Body: []byte("ping")}); err != nil {
		t.Fatal(err)
	}
	srv := channel(t, dial(t, s))
	reqs, err := srv.Consume("hB-rpc", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := next(t, reqs)
	if req.ReplyTo == "amq.rabbitmq.reply-to" || len(req.ReplyTo) <= len("amq.rabbitmq.reply-to.") {
		t.Fatalf("request reply-to %q, want the client's own address", req.ReplyTo)
	}
	if err := srv.PublishWithContext(context.Background(), "", req.ReplyTo, false, false, amqp.Publishing{Body: []byte("pong")}); err != nil {
		t.Fatal(err)
	}
	if m := next(t, replies); string(m.Body) != "pong" {
		t.Fatalf("reply %q, want pong", m.Body)
	}
	// Without the reply-to consumer a request naming it is refused.
	other := channel(t, c)
	closed := other.NotifyClose(make(chan *amqp.Error, 1))
	other.PublishWithContext(context.Background(), "", "hB-rpc", false, false, amqp.Publishing{ReplyTo: "amq.rabbitmq.reply-to"})
	if e := closedWith(t, closed); e == nil || e.Code != 406 {
		t.Fatalf("publish with reply-to and no reply consumer: %v, want 406", e)
	}
}
