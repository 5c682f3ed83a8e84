package perfclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/warrenmq/warren/amqp"
)

// DefaultFlushThreshold is the size at which a channel's publish buffer
// is written to the socket.
const DefaultFlushThreshold = 64 << 10

// Channel is an AMQP channel.
type Channel struct {
	c  *Conn
	id uint16

	callMu    sync.Mutex
	rpc       chan amqp.Method
	closed    chan struct{}
	closeOnce sync.Once
	err       error // set before closed is closed

	// Publishing side: one goroutine.
	wbuf           []byte
	flushThreshold int
	pubEx, pubKey  string
	pubMandatory   bool
	pubFrame       []byte // basic.publish method frame for pubEx/pubKey/pubMandatory
	pubM           amqp.BasicPublish

	// Confirms. published is the number of messages published (the last
	// delivery tag in confirm mode), written by the publisher; confirmed
	// and nacked by the reader.
	confirming atomic.Bool
	published  atomic.Uint64
	confirmed  atomic.Uint64
	nacked     atomic.Uint64
	returned   atomic.Uint64
	tracker    confirmTracker // reader goroutine only
	waiting    atomic.Bool
	wake       chan struct{}

	// Consumers: copy-on-write map read by the reader goroutine.
	consumers atomic.Pointer[map[string]*consumer]
	consMu    sync.Mutex
	ctagSeq   int

	// OnReturn, when set before publishing with mandatory, is called on
	// the reader goroutine for each basic.return.
	OnReturn func(code uint16, text string)

	// Incoming content, reader goroutine only.
	in    incoming
	d     Delivery
	ackM  amqp.BasicAck
	nackM amqp.BasicNack
	rejM  amqp.BasicReject
}

type incoming struct {
	state       int // 0 idle, 1 want header, 2 want body
	cons        *consumer
	ret         bool // a basic.return: counted and dropped
	retCode     uint16
	retText     string
	tag         uint64
	redelivered bool
	size        uint64
	exchange    []byte
	key         []byte
	props       []byte
	body        []byte
}

type consumer struct {
	tag      string
	fn       func(*Delivery)
	onCancel func()
}

func newChannel(c *Conn, id uint16) *Channel {
	ch := &Channel{c: c, id: id, rpc: make(chan amqp.Method, 1), closed: make(chan struct{}),
		wake: make(chan struct{}, 1), flushThreshold: DefaultFlushThreshold}
	m := map[string]*consumer{}
	ch.consumers.Store(&m)
	ch.tracker.init()
	return ch
}

// ID is the channel number.
func (ch *Channel) ID() uint16 { return ch.id }

// Closed is closed when the channel has been closed, by either side.
func (ch *Channel) Closed() <-chan struct{} { return ch.closed }

// Err is why the channel was closed (nil while open). A server
// channel.close gives an *amqp.Error.
func (ch *Channel) Err() error {
	select {
	case <-ch.closed:
		return ch.err
	default:
		return nil
	}
}

func (ch *Channel) shutdown(err error) {
	ch.closeOnce.Do(func() {
		ch.err = err
		close(ch.closed)
	})
}

// call sends m (after any pending publishes) and waits for the reply.
func (ch *Channel) call(m amqp.Method) (amqp.Method, error) {
	ch.callMu.Lock()
	defer ch.callMu.Unlock()
	select {
	case <-ch.closed:
		return nil, ch.err
	default:
	}
	// Drop a stale reply (e.g. an RPC whose caller gave up).
	select {
	case <-ch.rpc:
	default:
	}
	ch.wbuf = amqp.AppendMethodFrame(ch.wbuf, ch.id, m)
	err := ch.c.write(ch.wbuf)
	ch.wbuf = ch.wbuf[:0]
	if err != nil {
		return nil, err
	}
	select {
	case r := <-ch.rpc:
		return r, nil
	case <-ch.closed:
		return nil, ch.err
	}
}

func expect[T amqp.Method](ch *Channel, m amqp.Method) (T, error) {
	r, err := ch.call(m)
	if err != nil {
		var zero T
		return zero, err
	}
	t, ok := r.(T)
	if !ok {
		var zero T
		return zero, fmt.Errorf("perfclient: %s answered with %s", m.Name(), r.Name())
	}
	return t, nil
}

// Close closes the channel (channel.close, waiting for close-ok).
func (ch *Channel) Close() error {
	if err := ch.Flush(); err != nil {
		return err
	}
	_, err := expect[*amqp.ChannelCloseOk](ch, &amqp.ChannelClose{ReplyCode: amqp.ReplySuccess, ReplyText: "bye"})
	ch.shutdown(ErrClosed)
	ch.c.forget(ch.id)
	return err
}

// ExchangeDeclare declares an exchange.
func (ch *Channel) ExchangeDeclare(name, kind string, durable, autoDelete bool, args amqp.Table) error {
	_, err := expect[*amqp.ExchangeDeclareOk](ch, &amqp.ExchangeDeclare{Exchange: name, Type: kind,
		Durable: durable, AutoDelete: autoDelete, Arguments: args})
	return err
}

// ExchangeDelete deletes an exchange.
func (ch *Channel) ExchangeDelete(name string) error {
	_, err := expect[*amqp.ExchangeDeleteOk](ch, &amqp.ExchangeDelete{Exchange: name})
	return err
}

// QueueOptions are queue.declare's flags.
type QueueOptions struct {
	Passive, Durable, Exclusive, AutoDelete bool
	Args                                    amqp.Table
}

// Queue is queue.declare-ok.
type Queue struct {
	Name      string
	Messages  uint32
	Consumers uint32
}

// QueueDeclare declares a queue ("" for a server-named one).
func (ch *Channel) QueueDeclare(name string, o QueueOptions) (Queue, error) {
	ok, err := expect[*amqp.QueueDeclareOk](ch, &amqp.QueueDeclare{Queue: name, Passive: o.Passive,
		Durable: o.Durable, Exclusive: o.Exclusive, AutoDelete: o.AutoDelete, Arguments: o.Args})
	if err != nil {
		return Queue{}, err
	}
	return Queue{Name: ok.Queue, Messages: ok.MessageCount, Consumers: ok.ConsumerCount}, nil
}

// QueueBind binds a queue to an exchange.
func (ch *Channel) QueueBind(queue, exchange, key string, args amqp.Table) error {
	_, err := expect[*amqp.QueueBindOk](ch, &amqp.QueueBind{Queue: queue, Exchange: exchange, RoutingKey: key, Arguments: args})
	return err
}

// QueuePurge purges a queue and returns the number of messages removed.
func (ch *Channel) QueuePurge(name string) (uint32, error) {
	ok, err := expect[*amqp.QueuePurgeOk](ch, &amqp.QueuePurge{Queue: name})
	if err != nil {
		return 0, err
	}
	return ok.MessageCount, nil
}

// QueueDelete deletes a queue and returns the number of messages it held.
func (ch *Channel) QueueDelete(name string) (uint32, error) {
	ok, err := expect[*amqp.QueueDeleteOk](ch, &amqp.QueueDelete{Queue: name})
	if err != nil {
		return 0, err
	}
	return ok.MessageCount, nil
}

// Qos sets the prefetch count (basic.qos).
func (ch *Channel) Qos(prefetch int, global bool) error {
	if prefetch < 0 || prefetch > 65535 {
		return fmt.Errorf("perfclient: prefetch %d out of range", prefetch)
	}
	_, err := expect[*amqp.BasicQosOk](ch, &amqp.BasicQos{PrefetchCount: uint16(prefetch), Global: global})
	return err
}

// ConfirmSelect puts the channel in confirm mode. Call it before
// publishing.
func (ch *Channel) ConfirmSelect() error {
	if _, err := expect[*amqp.ConfirmSelectOk](ch, &amqp.ConfirmSelect{}); err != nil {
		return err
	}
	ch.confirming.Store(true)
	return nil
}

// SetFlushThreshold sets the publish buffer size at which Publish writes
// to the socket; 0 writes every message at once.
func (ch *Channel) SetFlushThreshold(n int) { ch.flushThreshold = n }

// Publish appends a message to the channel's output buffer, writing the
// buffer when it reaches the flush threshold. props may be nil. The body
// is copied: the caller may reuse it at once.
func (ch *Channel) Publish(exchange, key string, mandatory bool, props *amqp.Properties, body []byte) error {
	select {
	case <-ch.closed:
		return ch.err
	default:
	}
	if ch.pubFrame == nil || exchange != ch.pubEx || key != ch.pubKey || mandatory != ch.pubMandatory {
		ch.pubEx, ch.pubKey, ch.pubMandatory = exchange, key, mandatory
		ch.pubM = amqp.BasicPublish{Exchange: exchange, RoutingKey: key, Mandatory: mandatory}
		ch.pubFrame = amqp.AppendMethodFrame(ch.pubFrame[:0], ch.id, &ch.pubM)
	}
	ch.wbuf = append(ch.wbuf, ch.pubFrame...)
	ch.wbuf = amqp.AppendHeaderFrame(ch.wbuf, ch.id, amqp.ClassBasic, uint64(len(body)), props)
	ch.wbuf = amqp.AppendBodyFrames(ch.wbuf, ch.id, body, ch.c.frameMax)
	ch.published.Add(1)
	if len(ch.wbuf) >= ch.flushThreshold {
		return ch.Flush()
	}
	return nil
}

// Flush writes the pending publishes.
func (ch *Channel) Flush() error {
	if len(ch.wbuf) == 0 {
		return nil
	}
	err := ch.c.write(ch.wbuf)
	if cap(ch.wbuf) > 4<<20 {
		ch.wbuf = nil
	} else {
		ch.wbuf = ch.wbuf[:0]
	}
	return err
}

// Pending is the number of bytes published but not yet written.
func (ch *Channel) Pending() int { return len(ch.wbuf) }

// Published is the number of messages published on the channel (in
// confirm mode, the last delivery tag).
func (ch *Channel) Published() uint64 { return ch.published.Load() }

// Confirmed is the number of publishes the server acked.
func (ch *Channel) Confirmed() uint64 { return ch.confirmed.Load() }

// Nacked is the number of publishes the server nacked.
func (ch *Channel) Nacked() uint64 { return ch.nacked.Load() }

// Returned is the number of basic.return received.
func (ch *Channel) Returned() uint64 { return ch.returned.Load() }

// Outstanding is the number of publishes neither acked nor nacked yet.
func (ch *Channel) Outstanding() uint64 {
	settled := ch.confirmed.Load() + ch.nacked.Load()
	return ch.published.Load() - settled
}

// WaitConfirms flushes, then blocks until fewer than max publishes are
// outstanding (max 1: all confirmed), the context is done, or the channel
// closes.
func (ch *Channel) WaitConfirms(ctx context.Context, max uint64) error {
	if max == 0 {
		max = 1
	}
	if ch.Outstanding() < max {
		return nil
	}
	if err := ch.Flush(); err != nil {
		return err
	}
	if !ch.confirming.Load() {
		return errors.New("perfclient: channel not in confirm mode")
	}
	for ch.Outstanding() >= max {
		ch.waiting.Store(true)
		if ch.Outstanding() < max {
			ch.waiting.Store(false)
			break
		}
		select {
		case <-ch.wake:
		case <-ch.closed:
			ch.waiting.Store(false)
			return ch.err
		case <-ctx.Done():
			ch.waiting.Store(false)
			return ctx.Err()
		}
		ch.waiting.Store(false)
	}
	return nil
}

// confirmTracker counts settled delivery tags exactly once, whether
// confirms come one by one, as multiple, or both, in any order.
type confirmTracker struct {
	low  uint64 // lowest unsettled tag
	ring []bool // ring[t&mask]: t (low <= t < low+len) settled out of order
	mask uint64
}

func (t *confirmTracker) init() {
	t.low = 1
	t.ring = make([]bool, 1024)
	t.mask = 1023
}

func (t *confirmTracker) grow(tag uint64) {
	need := tag - t.low + 1
	if need <= uint64(len(t.ring)) {
		return
	}
	n := uint64(len(t.ring))
	for n < need {
		n *= 2
	}
	r := make([]bool, n)
	for x := t.low; x < t.low+uint64(len(t.ring)); x++ {
		r[x&(n-1)] = t.ring[x&t.mask]
	}
	t.ring, t.mask = r, n-1
}

// settle records a confirm and returns how many tags it newly settled.
func (t *confirmTracker) settle(tag uint64, multiple bool) uint64 {
	if tag < t.low {
		return 0
	}
	var n uint64
	if !multiple {
		t.grow(tag)
		if t.ring[tag&t.mask] {
			return 0
		}
		t.ring[tag&t.mask] = true
		n = 1
	} else {
		size := uint64(len(t.ring))
		for x := t.low; x <= tag; x++ {
			if x-t.low < size && t.ring[x&t.mask] {
				t.ring[x&t.mask] = false
			} else {
				n++
			}
		}
		t.low = tag + 1
	}
	for t.ring[t.low&t.mask] {
		t.ring[t.low&t.mask] = false
		t.low++
	}
	return n
}

// Delivery is a message delivered to a consumer. It and its slices are
// valid only during the callback.
type Delivery struct {
	ch          *Channel
	DeliveryTag uint64
	Redelivered bool
	Exchange    []byte
	RoutingKey  []byte
	// Properties is the raw property flags and list; see Props.
	Properties []byte
	Body       []byte
}

// Props decodes the message properties (this allocates).
func (d *Delivery) Props() (amqp.Properties, error) {
	var p amqp.Properties
	err := amqp.DecodeProperties(d.Properties, &p)
	return p, err
}

// Ack acknowledges the delivery (and all before it with multiple). Only
// valid in the callback: the ack is batched and written before the
// connection next reads from the socket, or before anything else is
// written on the connection.
func (d *Delivery) Ack(multiple bool) {
	ch := d.ch
	ch.ackM = amqp.BasicAck{DeliveryTag: d.DeliveryTag, Multiple: multiple}
	ch.c.queue(ch.id, &ch.ackM)
}

// Nack rejects the delivery (and all before it with multiple); see Ack.
func (d *Delivery) Nack(multiple, requeue bool) {
	ch := d.ch
	ch.nackM = amqp.BasicNack{DeliveryTag: d.DeliveryTag, Multiple: multiple, Requeue: requeue}
	ch.c.queue(ch.id, &ch.nackM)
}

// Reject rejects the delivery; see Ack.
func (d *Delivery) Reject(requeue bool) {
	ch := d.ch
	ch.rejM = amqp.BasicReject{DeliveryTag: d.DeliveryTag, Requeue: requeue}
	ch.c.queue(ch.id, &ch.rejM)
}

// Ack acknowledges a delivery from any goroutine, written at once (not
// for use in a delivery callback: use Delivery.Ack there).
func (ch *Channel) Ack(tag uint64, multiple bool) error {
	return ch.c.writeMethod(ch.id, &amqp.BasicAck{DeliveryTag: tag, Multiple: multiple})
}

// Nack rejects deliveries from any goroutine; see Ack.
func (ch *Channel) Nack(tag uint64, multiple, requeue bool) error {
	return ch.c.writeMethod(ch.id, &amqp.BasicNack{DeliveryTag: tag, Multiple: multiple, Requeue: requeue})
}

// ConsumeOptions are basic.consume's options.
type ConsumeOptions struct {
	// Tag is the consumer tag; "" picks one.
	Tag       string
	NoAck     bool
	Exclusive bool
	Args      amqp.Table
	// OnCancel is called (on the reader goroutine) when the server
	// cancels the consumer (queue deleted...).
	OnCancel func()
}

// Consume starts a consumer. fn is called on the connection's reader
// goroutine for each delivery, and must not block for long.
func (ch *Channel) Consume(queue string, o ConsumeOptions, fn func(*Delivery)) (string, error) {
	ch.consMu.Lock()
	tag := o.Tag
	if tag == "" {
		ch.ctagSeq++
		tag = "perf-" + itoa(int(ch.id)) + "-" + itoa(ch.ctagSeq)
	}
	old := *ch.consumers.Load()
	if _, dup := old[tag]; dup {
		ch.consMu.Unlock()
		return "", fmt.Errorf("perfclient: consumer tag %q in use", tag)
	}
	ch.setConsumer(tag, &consumer{tag: tag, fn: fn, onCancel: o.OnCancel})
	ch.consMu.Unlock()
	_, err := expect[*amqp.BasicConsumeOk](ch, &amqp.BasicConsume{Queue: queue, ConsumerTag: tag,
		NoAck: o.NoAck, Exclusive: o.Exclusive, Arguments: o.Args})
	if err != nil {
		ch.consMu.Lock()
		ch.setConsumer(tag, nil)
		ch.consMu.Unlock()
		return "", err
	}
	return tag, nil
}

// setConsumer adds (or with nil removes) a consumer; consMu held.
func (ch *Channel) setConsumer(tag string, c *consumer) {
	old := *ch.consumers.Load()
	m := make(map[string]*consumer, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	if c == nil {
		delete(m, tag)
	} else {
		m[tag] = c
	}
	ch.consumers.Store(&m)
}

// Cancel cancels a consumer (basic.cancel). Deliveries already on the
// wire may still reach the callback until Cancel returns.
func (ch *Channel) Cancel(tag string) error {
	_, err := expect[*amqp.BasicCancelOk](ch, &amqp.BasicCancel{ConsumerTag: tag})
	ch.consMu.Lock()
	ch.setConsumer(tag, nil)
	ch.consMu.Unlock()
	return err
}

// frame handles a frame for this channel on the reader goroutine.
func (ch *Channel) frame(f amqp.Frame) error {
	switch f.Type {
	case amqp.FrameMethod:
		if ch.in.state != 0 {
			return fmt.Errorf("perfclient: channel %d: method frame inside content", ch.id)
		}
		return ch.method(f.Payload)
	case amqp.FrameHeader:
		if ch.in.state != 1 {
			return fmt.Errorf("perfclient: channel %d: unexpected content header", ch.id)
		}
		p := f.Payload
		if len(p) < 14 {
			return fmt.Errorf("perfclient: channel %d: short content header", ch.id)
		}
		ch.in.size = be.Uint64(p[4:12])
		ch.in.props = append(ch.in.props[:0], p[12:]...)
		if ch.in.size == 0 {
			ch.dispatch(nil)
			return nil
		}
		ch.in.state = 2
		ch.in.body = ch.in.body[:0]
		return nil
	case amqp.FrameBody:
		if ch.in.state != 2 {
			return fmt.Errorf("perfclient: channel %d: unexpected body frame", ch.id)
		}
		if len(ch.in.body) == 0 && uint64(len(f.Payload)) >= ch.in.size {
			ch.dispatch(f.Payload) // one frame: no copy
			return nil
		}
		ch.in.body = append(ch.in.body, f.Payload...)
		if uint64(len(ch.in.body)) >= ch.in.size {
			ch.dispatch(ch.in.body)
			if cap(ch.in.body) > 4<<20 {
				ch.in.body = nil
			}
		}
		return nil
	default:
		return fmt.Errorf("perfclient: channel %d: frame type %d", ch.id, f.Type)
	}
}

func (ch *Channel) dispatch(body []byte) {
	in := &ch.in
	in.state = 0
	if in.ret {
		in.ret = false
		ch.returned.Add(1)
		if ch.OnReturn != nil {
			ch.OnReturn(in.retCode, in.retText)
		}
		return
	}
	if in.cons == nil {
		return // consumer cancelled meanwhile
	}
	d := &ch.d
	d.ch = ch
	d.DeliveryTag = in.tag
	d.Redelivered = in.redelivered
	d.Exchange = in.exchange
	d.RoutingKey = in.key
	d.Properties = in.props
	d.Body = body
	in.cons.fn(d)
	in.cons = nil
}

func shortstr(b []byte) (s, rest []byte, ok bool) {
	if len(b) < 1 || len(b) < 1+int(b[0]) {
		return nil, nil, false
	}
	n := int(b[0])
	return b[1 : 1+n], b[1+n:], true
}

func (ch *Channel) method(p []byte) error {
	cid, mid, args, err := amqp.SplitMethod(p)
	if err != nil {
		return err
	}
	switch uint32(cid)<<16 | uint32(mid) {
	case 60<<16 | 60: // basic.deliver, the hot path: parsed in place
		ctag, rest, ok := shortstr(args)
		if !ok || len(rest) < 9 {
			return fmt.Errorf("perfclient: bad basic.deliver")
		}
		in := &ch.in
		in.tag = be.Uint64(rest)
		in.redelivered = rest[8]&1 != 0
		ex, rest, ok1 := shortstr(rest[9:])
		key, _, ok2 := shortstr(rest)
		if !ok1 || !ok2 {
			return fmt.Errorf("perfclient: bad basic.deliver")
		}
		in.exchange = append(in.exchange[:0], ex...)
		in.key = append(in.key[:0], key...)
		in.cons = (*ch.consumers.Load())[string(ctag)]
		in.state = 1
		return nil
	case 60<<16 | 80, 60<<16 | 120: // basic.ack, basic.nack (confirms)
		if len(args) < 9 {
			return fmt.Errorf("perfclient: bad confirm")
		}
		n := ch.tracker.settle(be.Uint64(args), args[8]&1 != 0)
		if mid == 80 {
			ch.confirmed.Add(n)
		} else {
			ch.nacked.Add(n)
		}
		if ch.waiting.Load() {
			select {
			case ch.wake <- struct{}{}:
			default:
			}
		}
		return nil
	}
	m, err := amqp.DecodeServerMethod(p)
	if err != nil {
		return err
	}
	switch m := m.(type) {
	case *amqp.BasicReturn:
		ch.in = incoming{state: 1, ret: true, retCode: m.ReplyCode, retText: m.ReplyText,
			exchange: ch.in.exchange, key: ch.in.key, props: ch.in.props, body: ch.in.body}
		return nil
	case *amqp.BasicCancel: // server-sent: queue deleted, etc.
		ch.consMu.Lock()
		c := (*ch.consumers.Load())[m.ConsumerTag]
		ch.setConsumer(m.ConsumerTag, nil)
		ch.consMu.Unlock()
		if !m.NoWait {
			ch.c.queue(ch.id, &amqp.BasicCancelOk{ConsumerTag: m.ConsumerTag})
		}
		if c != nil && c.onCancel != nil {
			c.onCancel()
		}
		return nil
	case *amqp.ChannelFlow:
		ch.c.queue(ch.id, &amqp.ChannelFlowOk{Active: m.Active})
		return nil
	case *amqp.ChannelClose:
		ch.c.write(amqp.AppendMethodFrame(nil, ch.id, &amqp.ChannelCloseOk{}))
		ch.c.forget(ch.id)
		ch.shutdown(closeError(m.ReplyCode, m.ReplyText, m.FailingClassID, m.FailingMethodID, false))
		return nil
	}
	select {
	case ch.rpc <- m:
	default: // nobody waiting: drop
	}
	return nil
}
