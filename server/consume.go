package server

import (
	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

// consumer is the server side of a broker.Consumer: it holds the
// per-consumer credit and writes deliveries to the connection.
type consumer struct {
	ch       *channel
	bc       *broker.Consumer
	prefetch int // guarded by ch.mu
	unacked  int // guarded by ch.mu
}

// Deliver implements broker.Sink. It runs with the queue's lock held; it
// takes the channel lock, then the connection's output lock, so that
// delivery tags reach the socket in order.
func (cs *consumer) Deliver(bc *broker.Consumer, d broker.Delivery) (ok bool) {
	ch := cs.ch
	ch.mu.Lock()
	defer func() {
		ch.mu.Unlock()
		// A panic here must not reach the queue, which holds its lock
		// (panics.go): the message stays in the queue.
		if r := recover(); r != nil {
			ok = false
			ch.c.sinkPanic("delivering", r)
		}
	}()
	if testHookDeliver != nil {
		testHookDeliver(bc.Tag)
	}
	if !ch.flowActive || ch.consumers[bc.Tag] != cs {
		return false
	}
	if !bc.NoAck {
		if cs.prefetch > 0 && cs.unacked >= cs.prefetch {
			return false
		}
		if ch.globalLimit > 0 && ch.unackedCount >= ch.globalLimit {
			return false
		}
	}
	c := ch.c
	tag, ok := ch.appendDeliveryOut(bc, d)
	if !ok {
		return false
	}
	ch.stats.countDeliver(bc.NoAck, d.Redelivered) // under ch.mu
	c.wake()
	if !bc.NoAck {
		ch.unacked = append(ch.unacked, unackedMsg{tag: tag, d: d, cons: cs})
		ch.unackedCount++
		cs.unacked++
	}
	return true
}

// appendDeliveryOut numbers a delivery and appends it to the output
// unless the output is backlogged (ch.mu held; outMu released by a defer).
func (ch *channel) appendDeliveryOut(bc *broker.Consumer, d broker.Delivery) (uint64, bool) {
	c := ch.c
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if c.backloggedLocked(d.Queue) {
		return 0, false
	}
	ch.nextTag++
	c.out = appendDelivery(c.out, ch.id, bc.Tag, ch.nextTag, d.Redelivered, d.Msg, c.frameMax)
	return ch.nextTag, true
}

func appendDelivery(b []byte, chID uint16, ctag string, tag uint64, redelivered bool, m *broker.Message, frameMax uint32) []byte {
	b = amqp.AppendDeliverFrame(b, chID, ctag, tag, redelivered, m.Exchange, m.RoutingKey)
	b = amqp.AppendHeaderFrame(b, chID, 60, uint64(len(m.Body)), &m.Props)
	return amqp.AppendBodyFrames(b, chID, m.Body, frameMax)
}

// Cancelled implements broker.Sink: the queue was deleted. The client is
// told with basic.cancel if it declared consumer_cancel_notify.
func (cs *consumer) Cancelled(bc *broker.Consumer) {
	ch := cs.ch
	defer func() {
		if r := recover(); r != nil {
			ch.c.sinkPanic("cancelling a consumer", r)
		}
	}()
	removed := func() bool {
		ch.mu.Lock()
		defer ch.mu.Unlock()
		if ch.consumers[bc.Tag] != cs {
			return false
		}
		ch.removeConsumerLocked(cs)
		return true
	}()
	if removed && ch.c.clientCap("consumer_cancel_notify") {
		ch.c.sendMethod(ch.id, &amqp.BasicCancel{ConsumerTag: bc.Tag, NoWait: true})
	}
}

// DeliverReply implements broker.ReplyTarget for direct reply-to.
func (cs *consumer) DeliverReply(m *broker.Message) (ok bool) {
	ch := cs.ch
	ch.mu.Lock()
	defer func() {
		ch.mu.Unlock()
		if r := recover(); r != nil {
			ok = false
			ch.c.sinkPanic("delivering a direct reply", r)
		}
	}()
	if ch.consumers[cs.bc.Tag] != cs {
		return false
	}
	// Replies come from other connections, so the reader's flow control
	// cannot bound them: a reply for a client with replyHighWater of
	// output pending is refused, as for a reply consumer that is gone
	// (unroutable: returned to a mandatory publisher).
	if !ch.c.appendBounded(replyHighWater, func(b []byte) []byte {
		ch.nextTag++
		return appendDelivery(b, ch.id, cs.bc.Tag, ch.nextTag, false, m, ch.c.frameMax)
	}) {
		return false
	}
	ch.c.wake()
	return true
}

// replyHighWater bounds the output pending for a direct reply-to consumer
// (issue 11 item 9): a client that does not read its replies cannot make
// the broker hold them without limit.
const replyHighWater = 16 * outHighWater
