package server

import (
	"fmt"
	"runtime/debug"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

// A panic in one connection's work closes that connection, never the
// broker (issue 11, must-show 6): the reader (handshake and every frame,
// which includes the publish routing it runs), the writer, and the sink
// callbacks that queues call on other goroutines (Deliver, DeliverReply,
// Cancelled) recover, log the panic with its stack, and close the
// connection with 541 INTERNAL_ERROR, as RabbitMQ does when a channel
// process crashes. The locks the server takes around code that can fail
// are released by defers, so a panic leaves none of them held; the sink
// callbacks recover before the panic reaches the queue that called them
// with its lock held.

// errInternal is the connection.close a panic ends in.
var errInternal = &amqp.Error{Code: amqp.InternalError, Text: "INTERNAL_ERROR", Hard: true}

// Test-only hooks (nil in production; set by export_test.go), called
// where a panic is to be injected.
var (
	testHookMethod  func(m amqp.Method)                      // before a channel method is dispatched
	testHookPublish func(exchange string, m *broker.Message) // before a publish is routed
	testHookDeliver func(consumerTag string)                 // in Deliver, with the queue's and channel's locks held
	testHookWrite   func(clientName string)                  // in the writer, before a write
)

// recovered logs a recovered panic with its stack and returns the error
// that closes the connection.
func (c *conn) recovered(where string, r any) *amqp.Error {
	c.panicked.Store(true)
	c.s.log.Error("panic in a connection's work; closing the connection with 541 INTERNAL_ERROR",
		"conn", c.id, "where", where, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	return errInternal
}

// handleFrameSafe is handleFrame with a panic turned into 541.
func (c *conn) handleFrameSafe(f amqp.Frame) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = c.recovered("handling a frame", r)
		}
	}()
	return c.handleFrame(f)
}

// handshakeSafe is handshake with a panic turned into 541.
func (c *conn) handshakeSafe() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = c.handshakeErr(c.recovered("handshake", r))
		}
	}()
	return c.handshake()
}

// readLoopSafe runs the read loop. Frames are handled under their own
// recover (handleFrameSafe); a panic elsewhere in the loop (flushing
// confirms) closes the connection with 541 and reads on for the
// close-ok; a second one ends the connection.
func (c *conn) readLoopSafe() error {
	for panics := 0; ; panics++ {
		panicked, err := c.readLoopRecover()
		if !panicked {
			return err
		}
		if panics > 0 {
			return err
		}
		c.closeConn(err.(*amqp.Error))
	}
}

func (c *conn) readLoopRecover() (panicked bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			panicked, err = true, c.recovered("reading", r)
		}
	}()
	return false, c.readLoop()
}

// sinkPanic closes the connection after a panic in a sink callback, which
// runs on a queue's goroutine: the connection's own reader then waits for
// the close-ok and tears it down.
func (c *conn) sinkPanic(where string, r any) {
	c.closeConn(c.recovered(where, r))
}

// releaseSafe is release, bounded after a panic: state a panic left
// inconsistent must not keep the socket open forever, so the release is
// given a few seconds and then abandoned (logged) if it blocks. A panic
// during the release is logged and ends it.
func (c *conn) releaseSafe() {
	if c.releasing {
		return
	}
	c.releasing = true
	run := func() {
		defer func() {
			if r := recover(); r != nil {
				c.recovered("releasing the connection", r)
			}
		}()
		c.release()
	}
	if !c.panicked.Load() {
		run()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		run()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		c.s.log.Error("releasing a connection after a panic did not finish; abandoning it", "conn", c.id)
	}
}
