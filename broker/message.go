package broker

import "github.com/warrenmq/warren/amqp"

// Message is a published message. It is immutable once published and shared
// by every queue it was routed to: bodies are never copied between queues.
// Dead-lettering publishes a new Message with new headers and the same body.
type Message struct {
	Exchange   string
	RoutingKey string
	Props      amqp.Properties
	Body       []byte
	// BCC holds the keys of the BCC header, which is removed at publish
	// but still routes a dead-lettered copy (R3.3, R3.6).
	BCC []string
	// Deaths is the broker's own dead-letter history, most recent first.
	// A client-set x-death header is not trusted (R3.7): only this is.
	Deaths []Death
}

// Size is what counts towards x-max-length-bytes: the body only.
func (m *Message) Size() int { return len(m.Body) }

// Delivery is one message handed to a consumer or basic.get. The channel
// that receives it holds it until it is acked, rejected or requeued.
type Delivery struct {
	Queue       *Queue
	Msg         *Message
	Seq         uint64 // position in the queue, used to requeue in place
	Redelivered bool
	// ConsumerTag is "" for basic.get.
	ConsumerTag string
}
