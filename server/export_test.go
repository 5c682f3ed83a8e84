package server

import (
	"sync/atomic"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

// Hooks for the external tests of package server (package server_test),
// which drive a real broker through warrentest and amqp091-go.

// KillListenerForTest closes the AMQP listener under the accept loop, as
// if it had failed for good, without stopping the server.
func (s *Server) KillListenerForTest() {
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	ln.Close()
}

// writerPanicArmed makes the writer of the next connection named
// "hB-panic-writer" panic once.
var writerPanicArmed atomic.Bool

// InstallPanicHooksForTest makes the server panic where a test asks it
// to: on queue.declare of a queue named "hB-panic" (method dispatch), on a
// publish with routing key "hB-panic" (publish routing, on the reader),
// on a delivery to a consumer tagged "hB-panic" (Deliver, under the
// queue's lock, on the publisher's goroutine), and, once armed by
// ArmWriterPanicForTest, in the writer of a connection named
// "hB-panic-writer". Call it before any server starts; the returned
// function removes the hooks.
func InstallPanicHooksForTest() (remove func()) {
	testHookMethod = func(m amqp.Method) {
		if qd, ok := m.(*amqp.QueueDeclare); ok && qd.Queue == "hB-panic" {
			panic("injected: queue.declare hB-panic")
		}
	}
	testHookPublish = func(_ string, m *broker.Message) {
		if m.RoutingKey == "hB-panic" {
			panic("injected: publish hB-panic")
		}
	}
	testHookDeliver = func(tag string) {
		if tag == "hB-panic" {
			panic("injected: deliver to hB-panic")
		}
	}
	testHookWrite = func(name string) {
		if name == "hB-panic-writer" && writerPanicArmed.CompareAndSwap(true, false) {
			panic("injected: writer of hB-panic-writer")
		}
	}
	return func() {
		testHookMethod, testHookPublish, testHookDeliver, testHookWrite = nil, nil, nil, nil
	}
}

// ArmWriterPanicForTest arms the writer hook (InstallPanicHooksForTest).
func ArmWriterPanicForTest() { writerPanicArmed.Store(true) }

// OutputForTest reports, over the open connections, the most output
// bytes waiting for a writer, and whether some connection's reader is
// paused (waiting for its output to drain, or for an alarm to clear).
func (s *Server) OutputForTest() (maxPending int, paused bool) {
	for _, c := range s.connList() {
		c.outMu.Lock()
		maxPending = max(maxPending, len(c.out))
		c.outMu.Unlock()
		paused = paused || c.readPaused.Load()
	}
	return maxPending, paused
}
