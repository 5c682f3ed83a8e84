package server_test

import (
	"context"
	"net"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/server"
)

// TestDrainAndRevive: issue 22, warren node drain and revive (as
// rabbitmq-upgrade drain). A drained node closes its AMQP listener, closes
// each connection with 320 CONNECTION_FORCED "Node was put into
// maintenance mode" only after confirming every publish it took, stays
// drained across a restart, and listens again on the same address once
// revived.
func TestDrainAndRevive(t *testing.T) {
	dir := t.TempDir()
	s := newServer(t, server.Config{DataDir: dir})
	addr := s.Addr().String()
	c, err := amqp091.Dial(amqpURL(s))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("drain-q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 100))
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	// The client's reader waits while this channel is full: take the
	// confirms as they come.
	ackedc := make(chan int, 1)
	go func() {
		acked := 0
		for cf := range confirms {
			if !cf.Ack {
				t.Errorf("publish %d nacked", cf.DeliveryTag)
			}
			acked++
		}
		ackedc <- acked
	}()
	// Keep publishing persistent messages while the node drains.
	published := make(chan int, 1)
	go func() {
		n := 0
		for {
			err := ch.PublishWithContext(context.Background(), "", "drain-q", false, false,
				amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte("x")})
			if err != nil {
				published <- n
				return
			}
			n++
		}
	}()
	time.Sleep(200 * time.Millisecond)
	if err := s.Suspend(); err != nil {
		t.Fatal(err)
	}
	if left := s.DrainConnections(server.MaintenanceReason, 10*time.Second); left != 0 {
		t.Fatalf("%d connections left after the drain", left)
	}
	if e := closedWith(t, closed); e == nil || e.Code != 320 || e.Reason != "CONNECTION_FORCED - Node was put into maintenance mode" {
		t.Fatalf("connection closed with %v, want 320 CONNECTION_FORCED - Node was put into maintenance mode", e)
	}
	sent := <-published
	acked := <-ackedc
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("a drained node accepts connections")
	}
	if !s.Suspended() {
		t.Fatal("not suspended")
	}
	// Revive: the same address again.
	if err := s.Revive(); err != nil {
		t.Fatal(err)
	}
	if got := s.Addr().String(); got != addr {
		t.Fatalf("revived on %s, was %s", got, addr)
	}
	c2, err := amqp091.Dial("amqp://guest:guest@" + addr + "/")
	if err != nil {
		t.Fatalf("dial after revive: %v", err)
	}
	ch2, err := c2.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch2.QueueDeclarePassive("drain-q", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
	// Every publish the node took was confirmed before the close; the
	// client may have sent a few more that the node never read.
	if acked == 0 || q.Messages != acked {
		t.Fatalf("%d publishes sent, %d confirmed, %d in the queue: want every message taken confirmed", sent, acked, q.Messages)
	}
	t.Logf("%d publishes sent before the close, %d taken and confirmed", sent, acked)
	// Drained, restarted: still drained until revived.
	if err := s.Suspend(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	s2, err := server.New(server.Config{DataDir: dir, AMQPAddr: addr, MemoryHighWatermark: -1, DiskFreeLimit: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := s2.Start(); err != nil {
		t.Fatal(err)
	}
	if !s2.Suspended() || s2.Addr() != nil {
		t.Fatalf("a drained node restarted out of maintenance: suspended %v, addr %v", s2.Suspended(), s2.Addr())
	}
	if err := s2.Revive(); err != nil {
		t.Fatal(err)
	}
	if s2.Addr() == nil || s2.Addr().String() != addr {
		t.Fatalf("revived after the restart on %v, want %s", s2.Addr(), addr)
	}
}
