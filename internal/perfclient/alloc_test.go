package perfclient

import (
	"net"
	"testing"

	"github.com/warrenmq/warren/amqp"
)

// discardConn is a net.Conn whose writes vanish.
type discardConn struct{ net.Conn }

func (discardConn) Write(b []byte) (int, error) { return len(b), nil }

// TestPublishDoesNotAllocate checks the publish path (method, header and
// body frames into the channel buffer, flushes included) allocates
// nothing per message.
func TestPublishDoesNotAllocate(t *testing.T) {
	c := &Conn{nc: discardConn{}, frameMax: 131072, done: make(chan struct{})}
	ch := newChannel(c, 1)
	props := &amqp.Properties{DeliveryMode: 2}
	body := make([]byte, 64)
	for i := 0; i < 2000; i++ { // warm the buffer up
		ch.Publish("", "q", false, props, body)
	}
	if n := testing.AllocsPerRun(10000, func() {
		ch.Publish("", "q", false, props, body)
	}); n != 0 {
		t.Fatalf("%v allocations per publish", n)
	}
}

// TestDeliveryDoesNotAllocate feeds deliver/header/body frames and an
// ack through the reader path.
func TestDeliveryDoesNotAllocate(t *testing.T) {
	c := &Conn{nc: discardConn{}, frameMax: 131072, done: make(chan struct{})}
	ch := newChannel(c, 1)
	cs := []*Channel{nil, ch}
	c.chans.Store(&cs)
	ch.setConsumer("ctag", &consumer{tag: "ctag", fn: func(d *Delivery) { d.Ack(false) }})
	var frames []byte
	frames = amqp.AppendMethodFrame(frames, 1, &amqp.BasicDeliver{ConsumerTag: "ctag", DeliveryTag: 7, RoutingKey: "q"})
	frames = amqp.AppendHeaderFrame(frames, 1, 60, 64, &amqp.Properties{DeliveryMode: 2})
	frames = amqp.AppendBodyFrames(frames, 1, make([]byte, 64), 0)
	parse := func() {
		b := frames
		for len(b) > 0 {
			size := int(be.Uint32(b[3:]))
			f := amqp.Frame{Type: b[0], Channel: be.Uint16(b[1:]), Payload: b[7 : 7+size]}
			if err := ch.frame(f); err != nil {
				t.Fatal(err)
			}
			b = b[8+size:]
		}
	}
	for i := 0; i < 100; i++ {
		parse()
	}
	if n := testing.AllocsPerRun(10000, parse); n != 0 {
		t.Fatalf("%v allocations per delivery", n)
	}
}
