package bridge

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// settler settles a link's source deliveries (a shovel's source, a
// federation link's upstream) as their copies are taken: in delivery
// order, the acks not sent yet go as one multiple ack (flush); with
// on-confirm a delivery waits for its copy's confirm, and a nack
// requeues it alone. Confirms come in publish order and deliveries were
// published in tag order, so a multiple ack settles exactly the earlier
// ones too (a nacked one was settled already).
type settler struct {
	ch        *amqp.Channel // the source's
	side      string        // prefixes its errors ("source"), or ""
	onAck     func()        // counts a settled delivery (nil: none)
	ackTo     uint64        // the tag acked up to, not yet sent
	unflushed int
	seq       uint64            // the destination's publish sequence
	pending   map[uint64]uint64 // on-confirm: publish seq -> source tag
}

func (s *settler) wrap(err error) error {
	if err == nil || s.side == "" {
		return err
	}
	return fmt.Errorf("%s: %w", s.side, err)
}

// ack settles tag (sent with the next flush).
func (s *settler) ack(tag uint64) {
	s.ackTo = tag
	s.unflushed++
	if s.onAck != nil {
		s.onAck()
	}
}

// awaitConfirm makes tag wait for the confirm of the copy just published.
func (s *settler) awaitConfirm(tag uint64) {
	if s.pending == nil {
		s.pending = map[uint64]uint64{}
	}
	s.seq++
	s.pending[s.seq] = tag
}

// sent settles tag once its copy is published, as mode says: at once
// (on-publish), at its confirm (on-confirm), or not (no-ack: settled
// when it arrived).
func (s *settler) sent(mode string, tag uint64) {
	switch mode {
	case OnConfirm:
		s.awaitConfirm(tag)
	case OnPublish:
		s.ack(tag)
	}
}

// flush sends the acks not sent yet.
func (s *settler) flush() error {
	if s.unflushed == 0 {
		return nil
	}
	if err := s.ch.Ack(s.ackTo, true); err != nil {
		return s.wrap(err)
	}
	s.unflushed = 0
	return nil
}

// confirmed settles the delivery of a destination confirm: acked, or,
// refused by the destination, requeued at the source (it may come back).
func (s *settler) confirmed(c amqp.Confirmation) error {
	tag, ok := s.pending[c.DeliveryTag]
	if !ok {
		return nil
	}
	delete(s.pending, c.DeliveryTag)
	if c.Ack {
		s.ack(tag)
		return nil
	}
	if err := s.flush(); err != nil {
		return err
	}
	return s.wrap(s.ch.Nack(tag, false, true))
}

// publishingOf is d as a publish: its properties and body (its headers
// shared: a caller that changes them copies them first).
func publishingOf(d *amqp.Delivery) amqp.Publishing {
	return amqp.Publishing{Headers: d.Headers, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: d.DeliveryMode, Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo,
		Expiration: d.Expiration, MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type, UserId: d.UserId,
		AppId: d.AppId, Body: d.Body}
}

// linkPublishing is d as a federation link republishes it: user_id kept
// only when the upstream is trusted with it, the headers copied (the
// link adds its own).
func linkPublishing(d *amqp.Delivery, trustUserID bool) amqp.Publishing {
	p := publishingOf(d)
	if !trustUserID {
		p.UserId = ""
	}
	p.Headers = make(amqp.Table, len(d.Headers)+1)
	for k, v := range d.Headers {
		p.Headers[k] = v
	}
	return p
}
