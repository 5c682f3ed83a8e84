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
	// TTL is the per-message TTL in ms from the expiration property, valid
	// when HasTTL (ParseExpiration checks it at publish, R2.1).
	TTL    int64
	HasTTL bool
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
	// ExpiresAt (unix ms, 0 = never) and the counts travel with the
	// delivery so that a requeue keeps them (R2.3, R5.3).
	ExpiresAt                    int64
	DeliveryCount, AcquiredCount uint32
	// Original is the queued message when Msg is a copy carrying
	// x-delivery-count headers; nil otherwise.
	Original *Message
	// seg and ondisk locate the message's record in the queue's log.
	seg    uint32
	ondisk bool
	// holder is the queue machine's record of who holds the message,
	// ck its checkout number there (machine.Consumer.Next).
	holder *mconsumer
	ck     uint64
	// term is, for a replicated quorum queue, the epoch of this node's
	// view of its leader the delivery came from (qqclient.go): a settle
	// of an older one is dropped.
	term uint64
}

// queued returns the message as the queue holds it.
func (d *Delivery) queued() *Message {
	if d.Original != nil {
		return d.Original
	}
	return d.Msg
}

// maxExpiry is RabbitMQ's upper bound for TTLs: ten years in ms.
const maxExpiry = 315360000000

// ParseExpiration checks the expiration property as RabbitMQ does at
// publish (R2.1): a decimal string of milliseconds in [0, 10 years]. The
// error is the 406 RabbitMQ closes the channel with.
func ParseExpiration(s string) (int64, error) {
	i := 0
	neg := false
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		neg = s[i] == '-'
		i++
	}
	start := i
	var n int64
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		if n < 1<<58 {
			n = n*10 + int64(s[i]-'0')
		}
		i++
	}
	if i == start {
		return 0, amqp.Errorf(amqp.PreconditionFailed, "invalid expiration '%s': no_integer", s)
	}
	if i < len(s) {
		return 0, amqp.Errorf(amqp.PreconditionFailed, "invalid expiration '%s': {leftover_string,\"%s\"}", s, s[i:])
	}
	if neg && n != 0 {
		return 0, amqp.Errorf(amqp.PreconditionFailed, "invalid expiration '%s': {value_negative,-%d}", s, n)
	}
	if n > maxExpiry {
		return 0, amqp.Errorf(amqp.PreconditionFailed, "invalid expiration '%s': {value_too_large,%d}", s, n)
	}
	return n, nil
}
