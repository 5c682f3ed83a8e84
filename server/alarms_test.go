package server_test

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/server"
)

// TestAlarmBlocksPublishers: issue 12, server package tests (alarms).
// While a resource alarm is raised, a connection that publishes gets
// connection.blocked naming the alarms and is not read from (its publish
// waits in the middle of its content), while consumers keep receiving;
// when every alarm clears it gets connection.unblocked and its publish
// goes through.
func TestAlarmBlocksPublishers(t *testing.T) {
	s := startServer(t, server.Config{})
	pc := dial(t, s)
	blocked := pc.NotifyBlocked(make(chan amqp.Blocking, 4))
	pub := channel(t, pc)
	fill(t, pub, "hB-alarm", 2)
	fill(t, pub, "hB-held", 0)

	s.SetAlarm("memory", true)
	s.SetAlarm("disk", true)
	if got := s.Alarms(); !slices.Equal(got, []string{"disk", "memory"}) {
		t.Fatalf("alarms %v, want [disk memory]", got)
	}
	if err := pub.PublishWithContext(context.Background(), "", "hB-held", false, false, amqp.Publishing{Body: []byte("held")}); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-blocked:
		if !b.Active || b.Reason != "low on disk, memory" {
			t.Fatalf("connection.blocked %+v, want active, reason 'low on disk, memory'", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no connection.blocked")
	}
	// Consumers drain meanwhile; the held publish is not in its queue.
	cc := dial(t, s)
	cch := channel(t, cc)
	d, err := cch.Consume("hB-alarm", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []byte{0, 1} {
		if m := next(t, d); len(m.Body) != 1 || m.Body[0] != want {
			t.Fatalf("got %q during the alarm, want the message %d published before it", m.Body, want)
		}
	}
	if n := ready(t, cch, "hB-held"); n != 0 {
		t.Fatalf("the publish that met the alarm was enqueued (%d ready) while the connection was blocked", n)
	}
	s.SetAlarm("memory", false)
	if s.AlarmRaised("memory") || !s.AlarmRaised("disk") {
		t.Fatalf("alarms %v after clearing memory", s.Alarms())
	}
	s.SetAlarm("disk", false)
	select {
	case b := <-blocked:
		if b.Active {
			t.Fatalf("got %+v, want connection.unblocked", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no connection.unblocked")
	}
	waitReady(t, cch, "hB-held", 1)
}

// TestAlarmMonitor: issue 12, server package tests (alarms). The resource
// monitor raises the memory alarm over MemoryHighWatermark and the disk
// alarm under DiskFreeLimit of DataDir's file system.
func TestAlarmMonitor(t *testing.T) {
	s := startServer(t, server.Config{DataDir: t.TempDir(), MemoryHighWatermark: 1, DiskFreeLimit: math.MaxInt64,
		ResourceCheckInterval: 10 * time.Millisecond})
	waitFor(t, 10*time.Second, "the monitor raised no disk and memory alarms", func() bool {
		return s.AlarmRaised("memory") && s.AlarmRaised("disk")
	})
}
