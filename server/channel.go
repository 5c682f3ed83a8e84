package server

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

// channel is one AMQP channel. Protocol state (content assembly, confirms,
// transactions) belongs to the connection's reader goroutine. Delivery
// state (tags, unacked, credit, consumers) is guarded by mu, because
// queues deliver from other goroutines.
type channel struct {
	c  *conn
	id uint16

	// Reader goroutine only.
	closing    bool // channel.close sent, waiting for close-ok
	pub        amqp.BasicPublish
	pubScratch amqp.BasicPublish // decoded in place (conn.handleFrame)
	msg        *broker.Message
	bodySize   int
	inContent  int // 0 none, 1 want header, 2 want body
	router     broker.Router
	lastQueue  string
	dlQueues   []*broker.Queue // rejected into since the last deadLetterBarrier
	confirm    bool
	tx         bool
	txOps      []txOp
	txPending  atomic.Uint64     // publishes<<32 | acks in txOps, for the management API
	txWait     broker.Durability // what a tx.commit waits for

	// Publisher confirms (confirms.go), guarded by confMu.
	// Counters for the management API (info.go).
	stats chanStats
	mode  atomic.Uint32 // modeConfirm or modeTx once selected
	xcur  *xStat        // the exchange last published to (reader goroutine)
	xmu   sync.Mutex
	xs    map[string]*xStat // publishes by exchange, guarded by xmu

	confMu      sync.Mutex
	publishSeq  uint64
	ackedUpTo   uint64 // highest seq confirmed to the client
	pendingAck  uint64 // highest seq ready to be confirmed
	waits       []confirmWait
	whead       int
	confClosed  bool
	flushQueued bool   // guarded by c.outMu
	writeOK     string // last exchange write permission succeeded for
	writeOKSet  bool   // writeOK is valid ("" is the default exchange)
	replyTo     string // direct reply-to address, when consuming it
	replyCons   *consumer

	mu            sync.Mutex
	nextTag       uint64
	unacked       []unackedMsg // in tag order
	unackedCount  int
	prefetch      int // per new consumer (basic.qos global=false)
	globalLimit   int // channel-wide (basic.qos global=true)
	flowActive    bool
	consumers     map[string]*consumer
	consumedQueue []*broker.Queue // queues with consumers here, for re-dispatch
}

type unackedMsg struct {
	tag  uint64
	d    broker.Delivery
	cons *consumer // nil for basic.get
	done bool
}

type txOp struct {
	pub  *broker.Message
	exch string
	mand bool
	ack  *amqp.BasicNack // ack/nack/reject normalised to nack fields
	kind int             // txPublish or a settle kind
}

// What a tx op or settle call does.
const (
	txPublish = iota
	settleAck
	settleNack
	settleReject
)

func newChannel(c *conn, id uint16) *channel {
	return &channel{c: c, id: id, flowActive: true, consumers: map[string]*consumer{}}
}

func (ch *channel) vhost() *broker.VHost { return ch.c.vhost }

// handleMethod runs a method on the channel. A soft *amqp.Error closes the
// channel; a hard one is returned to close the connection.
func (ch *channel) handleMethod(m amqp.Method) error {
	if ch.closing {
		switch m.(type) {
		case *amqp.ChannelCloseOk:
			ch.c.dropChannel(ch)
		case *amqp.ChannelClose:
			ch.c.sendMethod(ch.id, &amqp.ChannelCloseOk{})
		}
		return nil
	}
	if ch.inContent != 0 {
		return ch.contentExpected()
	}
	err := ch.dispatch(m)
	if err == nil {
		return nil
	}
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return err
	}
	if ae.ClassID == 0 && ae.MethodID == 0 {
		ae = ae.WithMethod(m.ClassID(), m.MethodID())
	}
	if ae.Hard {
		return ae
	}
	ch.closeWith(ae)
	return nil
}

// closeWith closes the channel with a soft error: state is released now,
// and frames other than close/close-ok are ignored until close-ok.
func (ch *channel) closeWith(e *amqp.Error) {
	ch.shutdown()
	ch.closing = true
	ch.c.sendMethod(ch.id, &amqp.ChannelClose{ReplyCode: e.Code, ReplyText: truncate(e.Text), FailingClassID: e.ClassID, FailingMethodID: e.MethodID})
}

// takeAll removes the channel's consumers and unacked deliveries, and
// stops deliveries to it.
func (ch *channel) takeAll() ([]*consumer, []unackedMsg) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	cons := make([]*consumer, 0, len(ch.consumers))
	for _, cs := range ch.consumers {
		cons = append(cons, cs)
	}
	ch.consumers = map[string]*consumer{}
	pending := ch.takeUnackedLocked(func(*unackedMsg) bool { return true })
	ch.flowActive = false
	return cons, pending
}

// shutdown releases the channel's consumers and requeues its unacked
// messages. It is idempotent.
func (ch *channel) shutdown() {
	ch.flushConfirms()
	ch.closeConfirms()
	cons, pending := ch.takeAll()
	for _, cs := range cons {
		if cs.bc.Queue != nil { // nil for the direct reply-to consumer
			cs.bc.Queue.RemoveConsumer(cs.bc)
		}
	}
	if ch.replyTo != "" {
		ch.vhost().UnregisterReplyTo(ch.replyTo)
		ch.replyTo = ""
	}
	// A lost channel counts as a failed delivery (R5.3).
	settle(pending, func(q *broker.Queue, ds []broker.Delivery) { q.Requeue(ds, true) })
	ch.txOps = nil
	ch.txPending.Store(0)
	ch.msg = nil
	ch.inContent = 0
	ch.flushStats()
	ch.c.s.foldStats(ch)
}

func (ch *channel) dispatch(m amqp.Method) error {
	if testHookMethod != nil {
		testHookMethod(m)
	}
	switch m := m.(type) {
	case *amqp.BasicPublish:
		return ch.startPublish(m)
	case *amqp.BasicAck:
		return ch.settle(m.DeliveryTag, m.Multiple, settleAck, false)
	case *amqp.BasicNack:
		return ch.settle(m.DeliveryTag, m.Multiple, settleNack, m.Requeue)
	case *amqp.BasicReject:
		return ch.settle(m.DeliveryTag, false, settleReject, m.Requeue)
	case *amqp.ChannelClose:
		ch.shutdown()
		ch.c.sendMethod(ch.id, &amqp.ChannelCloseOk{})
		ch.c.dropChannel(ch)
		return nil
	case *amqp.ChannelCloseOk:
		return nil
	case *amqp.ChannelOpen:
		return amqp.ConnErrorf(amqp.ChannelError, "second 'channel.open' seen")
	case *amqp.ChannelFlow:
		// RabbitMQ refuses to stop deliveries this way (clients use
		// basic.qos), and clients such as amqp091-go's test suite rely on it.
		if !m.Active {
			return amqp.ConnErrorf(amqp.NotImplemented, "active=false")
		}
		ch.c.sendMethod(ch.id, &amqp.ChannelFlowOk{Active: true})
		return nil
	case *amqp.ChannelFlowOk:
		return nil
	case *amqp.ExchangeDeclare, *amqp.ExchangeDelete, *amqp.ExchangeBind, *amqp.ExchangeUnbind,
		*amqp.QueueDeclare, *amqp.QueueBind, *amqp.QueueUnbind, *amqp.QueuePurge, *amqp.QueueDelete:
		// routing changes: what this channel rejected before is
		// dead-lettered first (deadLetterBarrier); then the second switch
		ch.deadLetterBarrier()
	}
	switch m := m.(type) {
	case *amqp.ExchangeDeclare:
		return ch.exchangeDeclare(m)
	case *amqp.ExchangeDelete:
		return ch.exchangeDelete(m)
	case *amqp.ExchangeBind:
		return ch.bind(m.Source, m.Destination, true, m.RoutingKey, m.Arguments, false, m.NoWait, &amqp.ExchangeBindOk{})
	case *amqp.ExchangeUnbind:
		return ch.bind(m.Source, m.Destination, true, m.RoutingKey, m.Arguments, true, m.NoWait, &amqp.ExchangeUnbindOk{})
	case *amqp.QueueDeclare:
		return ch.queueDeclare(m)
	case *amqp.QueueBind:
		return ch.bind(m.Exchange, ch.queueName(m.Queue), false, m.RoutingKey, m.Arguments, false, m.NoWait, &amqp.QueueBindOk{})
	case *amqp.QueueUnbind:
		return ch.bind(m.Exchange, ch.queueName(m.Queue), false, m.RoutingKey, m.Arguments, true, false, &amqp.QueueUnbindOk{})
	case *amqp.QueuePurge:
		return ch.queuePurge(m)
	case *amqp.QueueDelete:
		return ch.queueDelete(m)
	case *amqp.BasicQos:
		return ch.qos(m)
	case *amqp.BasicConsume:
		return ch.consume(m)
	case *amqp.BasicCancel:
		return ch.cancel(m)
	case *amqp.BasicGet:
		return ch.get(m)
	case *amqp.BasicRecover:
		return ch.recover(m.Requeue, true)
	case *amqp.BasicRecoverAsync:
		return ch.recover(m.Requeue, false)
	case *amqp.ConfirmSelect:
		if ch.tx {
			return amqp.Errorf(amqp.PreconditionFailed, "cannot switch from tx to confirm mode")
		}
		ch.confirm = true
		ch.mode.Store(modeConfirm)
		if !m.NoWait {
			ch.c.sendMethod(ch.id, &amqp.ConfirmSelectOk{})
		}
		return nil
	case *amqp.TxSelect:
		if ch.confirm {
			return amqp.Errorf(amqp.PreconditionFailed, "cannot switch from confirm to tx mode")
		}
		ch.tx = true
		ch.mode.Store(modeTx)
		ch.c.sendMethod(ch.id, &amqp.TxSelectOk{})
		return nil
	case *amqp.TxCommit:
		return ch.txCommit()
	case *amqp.TxRollback:
		if !ch.tx {
			return amqp.Errorf(amqp.PreconditionFailed, "channel is not transactional")
		}
		ch.txOps = nil
		ch.txPending.Store(0)
		ch.c.sendMethod(ch.id, &amqp.TxRollbackOk{})
		return nil
	}
	return amqp.ConnErrorf(amqp.CommandInvalid, "unimplemented method")
}

// queueName resolves "" to the last queue declared on the channel, as
// the protocol allows.
func (ch *channel) queueName(name string) string {
	if name == "" {
		return ch.lastQueue
	}
	return name
}

func (ch *channel) check(a broker.Access, kind, name string) error {
	if kind == "exchange" && name == "" {
		// RabbitMQ checks, and names, the default exchange as "amq.default".
		name = "amq.default"
	}
	if ch.c.s.broker.Check(ch.c.user.Name, ch.vhost().Name, a, name) {
		return nil
	}
	return amqp.Errorf(amqp.AccessRefused, "access to %s '%s' in vhost '%s' refused for user '%s'", kind, name, ch.vhost().Name, ch.c.user.Name)
}

// denied is RabbitMQ's 403 for a refused permission.
func (ch *channel) denied(d *broker.Denied) error {
	if d == nil {
		return nil
	}
	return ch.check(d.Access, d.Kind, d.Name)
}

func (ch *channel) exchangeDeclare(m *amqp.ExchangeDeclare) error {
	// The default exchange is refused (by the broker) before any
	// permission is checked, as RabbitMQ's check_not_default_exchange.
	if !m.Passive && m.Exchange != "" {
		if err := ch.check(broker.Configure, "exchange", m.Exchange); err != nil {
			return err
		}
		// A new exchange with an alternate exchange: read on it and write
		// on the alternate (CheckCreateArgs); a reserved name is refused
		// first.
		if !strings.HasPrefix(m.Exchange, "amq.") && ch.vhost().Exchange(m.Exchange) == nil {
			if err := ch.denied(ch.c.s.broker.CheckCreateArgs(ch.c.user.Name, ch.vhost().Name, "exchange", m.Exchange, m.Arguments)); err != nil {
				return err
			}
		}
	}
	err := ch.vhost().DeclareExchange(broker.ExchangeSpec{Name: m.Exchange, Kind: m.Type, Durable: m.Durable,
		AutoDelete: m.AutoDelete, Internal: m.Internal, Args: m.Arguments}, m.Passive)
	if err != nil {
		return err
	}
	if !m.NoWait {
		ch.c.sendMethod(ch.id, &amqp.ExchangeDeclareOk{})
	}
	return nil
}

func (ch *channel) exchangeDelete(m *amqp.ExchangeDelete) error {
	// The default exchange is refused by the broker before any check.
	if m.Exchange != "" {
		if err := ch.check(broker.Configure, "exchange", m.Exchange); err != nil {
			return err
		}
	}
	if err := ch.vhost().DeleteExchange(m.Exchange, m.IfUnused); err != nil {
		return err
	}
	if !m.NoWait {
		ch.c.sendMethod(ch.id, &amqp.ExchangeDeleteOk{})
	}
	return nil
}

func (ch *channel) bind(source, dst string, toExchange bool, key string, args amqp.Table, unbind, noWait bool, ok amqp.Method) error {
	kind := "queue"
	if toExchange {
		kind = "exchange"
	}
	if err := ch.check(broker.Write, kind, dst); err != nil {
		return err
	}
	// RabbitMQ refuses the default exchange at either end after the write
	// check and before the read check (the broker's error).
	if source != "" && (!toExchange || dst != "") {
		if err := ch.check(broker.Read, "exchange", source); err != nil {
			return err
		}
	}
	if err := ch.c.s.broker.CheckTopicBind(ch.c.user.Name, ch.vhost(), source, key); err != nil {
		return err
	}
	var err error
	if unbind {
		err = ch.vhost().Unbind(source, dst, toExchange, key, args, ch.c.id)
	} else {
		err = ch.vhost().Bind(source, dst, toExchange, key, args, ch.c.id)
	}
	if err != nil {
		return err
	}
	if !noWait {
		ch.c.sendMethod(ch.id, ok)
	}
	return nil
}

func (ch *channel) queueDeclare(m *amqp.QueueDeclare) error {
	if m.Queue == broker.DirectReplyTo {
		// As RabbitMQ: whatever the flags, a passive declare of a queue
		// that always exists with one consumer; no permission is checked.
		ch.lastQueue = m.Queue
		if !m.NoWait {
			ch.c.sendMethod(ch.id, &amqp.QueueDeclareOk{Queue: m.Queue, ConsumerCount: 1})
		}
		return nil
	}
	name, generated := m.Queue, false
	if name == "" && !m.Passive {
		name, generated = broker.NewQueueName(), true
	} else if name == "" {
		name = ch.lastQueue
	}
	if !m.Passive {
		// RabbitMQ refuses a reserved name (check_name) before it checks
		// any permission, an existing server-named queue's too.
		if !generated && strings.HasPrefix(name, "amq.") {
			return amqp.Errorf(amqp.AccessRefused, "queue name '%s' contains reserved prefix 'amq.*'", name)
		}
		if err := ch.check(broker.Configure, "queue", name); err != nil {
			return err
		}
		// A new queue with a dead-letter exchange: read on it and write
		// on that exchange (CheckCreateArgs).
		if ch.vhost().Queue(name) == nil {
			if err := ch.denied(ch.c.s.broker.CheckCreateArgs(ch.c.user.Name, ch.vhost().Name, "queue", name, m.Arguments)); err != nil {
				return err
			}
		}
	}
	q, msgs, cons, err := ch.vhost().DeclareQueue(broker.QueueSpec{Name: name, Durable: m.Durable, Exclusive: m.Exclusive,
		AutoDelete: m.AutoDelete, Args: m.Arguments, Owner: ch.c.id, ServerNamed: generated}, m.Passive)
	if err != nil {
		return err
	}
	ch.lastQueue = q.Name
	if !m.NoWait {
		ch.c.sendMethod(ch.id, &amqp.QueueDeclareOk{Queue: q.Name, MessageCount: uint32(msgs), ConsumerCount: uint32(cons)})
	}
	return nil
}

// readableQueue finds a queue the user may read (basic.get, basic.consume,
// queue.purge): 403 without read permission, 404 if missing, 405 if
// exclusive to another connection.
func (ch *channel) readableQueue(name string) (*broker.Queue, error) {
	if err := ch.check(broker.Read, "queue", name); err != nil {
		return nil, err
	}
	return ch.vhost().LookupQueue(name, ch.c.id)
}

func (ch *channel) queuePurge(m *amqp.QueuePurge) error {
	name := ch.queueName(m.Queue)
	q, err := ch.readableQueue(name)
	if err != nil {
		return err
	}
	if err := q.Unsupported("queue.purge"); err != nil {
		return err
	}
	n := q.Purge()
	if !m.NoWait {
		ch.c.sendMethod(ch.id, &amqp.QueuePurgeOk{MessageCount: uint32(n)})
	}
	return nil
}

func (ch *channel) queueDelete(m *amqp.QueueDelete) error {
	name := ch.queueName(m.Queue)
	if err := ch.check(broker.Configure, "queue", name); err != nil {
		return err
	}
	n, err := ch.vhost().DeleteQueue(name, ch.c.id, m.IfUnused, m.IfEmpty)
	if err != nil {
		return err
	}
	if !m.NoWait {
		ch.c.sendMethod(ch.id, &amqp.QueueDeleteOk{MessageCount: uint32(n)})
	}
	return nil
}

func (ch *channel) qos(m *amqp.BasicQos) error {
	if m.PrefetchSize != 0 {
		return amqp.ConnErrorf(amqp.NotImplemented, "prefetch_size!=0 (%d)", m.PrefetchSize)
	}
	ch.mu.Lock()
	if m.Global {
		ch.globalLimit = int(m.PrefetchCount)
	} else {
		ch.prefetch = int(m.PrefetchCount)
	}
	ch.mu.Unlock()
	ch.c.sendMethod(ch.id, &amqp.BasicQosOk{})
	ch.redispatch()
	return nil
}

// redispatch asks every queue this channel consumes from to deliver
// again, after credit was released. Called without ch.mu held.
func (ch *channel) redispatch() {
	ch.mu.Lock()
	qs := append([]*broker.Queue(nil), ch.consumedQueue...)
	ch.mu.Unlock()
	for _, q := range qs {
		q.Dispatch()
	}
}

// --- publishing ---

func (ch *channel) startPublish(m *amqp.BasicPublish) error {
	if m.Exchange != ch.writeOK || !ch.writeOKSet {
		if err := ch.check(broker.Write, "exchange", m.Exchange); err != nil {
			return err
		}
		ch.writeOK, ch.writeOKSet = m.Exchange, true
	}
	if m.Immediate {
		return amqp.ConnErrorf(amqp.NotImplemented, "immediate=true")
	}
	ch.pub = *m
	ch.inContent = 1
	return nil
}

func (ch *channel) handleContent(f amqp.Frame) error {
	if ch.closing {
		return nil
	}
	switch {
	case f.Type == amqp.FrameHeader && ch.inContent == 1:
		classID, size, props, err := amqp.DecodeHeader(f.Payload)
		if err != nil {
			return err
		}
		if classID != 60 {
			return amqp.ConnErrorf(amqp.UnexpectedFrame, "expected content header for class 60, got one for class %d instead", classID).WithMethod(60, 40)
		}
		if size > uint64(ch.c.s.cfg.MaxMessageSize) {
			ch.inContent = 0
			return ch.softFail(amqp.Errorf(amqp.PreconditionFailed, "message size %d is larger than configured max size %d", size, ch.c.s.cfg.MaxMessageSize))
		}
		ch.msg = &broker.Message{Exchange: ch.pub.Exchange, RoutingKey: ch.pub.RoutingKey, Props: props}
		ch.bodySize = int(size)
		if size == 0 {
			return ch.finishPublish()
		}
		// The body is allocated as its frames arrive, not at the size the
		// header announces: a header costs a client a few bytes, and 100
		// connections announcing 128 MiB used to take 12.8 GiB and raise
		// the memory alarm for every publisher (issue 11 item 5).
		ch.inContent = 2
		ch.contentThrottle()
		return nil
	case f.Type == amqp.FrameBody && ch.inContent == 2:
		n := len(ch.msg.Body) + len(f.Payload)
		if n > ch.bodySize {
			return amqp.ConnErrorf(amqp.FrameError, "content body exceeds the declared size %d", ch.bodySize).WithMethod(60, 40)
		}
		if n > cap(ch.msg.Body) {
			ch.msg.Body = growBody(ch.msg.Body, n, ch.bodySize)
		}
		ch.msg.Body = append(ch.msg.Body, f.Payload...)
		if n == ch.bodySize {
			return ch.finishPublish()
		}
		ch.contentThrottle()
		return nil
	case ch.inContent != 0:
		return ch.contentExpected()
	}
	return amqp.ConnErrorf(amqp.UnexpectedFrame, "expected method frame, got non method frame instead")
}

// growBody returns b with room for at least need bytes: the whole body
// when one frame completes it (one allocation of the exact size, as for
// every single-frame message), else double the capacity, never more than
// the announced size. A body in progress thus takes at most about twice
// the bytes received.
func growBody(b []byte, need, size int) []byte {
	c := need
	if need < size {
		c = min(max(2*cap(b), need, 4096), size)
	}
	nb := make([]byte, len(b), c)
	copy(nb, b)
	return nb
}

// contentThrottle blocks a connection in the middle of a message's content
// while a resource alarm is raised, as RabbitMQ blocks a connection that
// publishes: a publisher sending a large body is not exempt from the
// memory alarm its body may have raised.
func (ch *channel) contentThrottle() {
	if ch.c.s.alarmed.Load() {
		ch.c.waitAlarm()
	}
}

// contentExpected is RabbitMQ's error for a frame that interrupts a
// publish's content.
func (ch *channel) contentExpected() error {
	if ch.inContent == 1 {
		return amqp.ConnErrorf(amqp.UnexpectedFrame, "expected content header for class 60, got non content header frame instead").WithMethod(60, 40)
	}
	return amqp.ConnErrorf(amqp.UnexpectedFrame, "expected content body, got non content body frame instead").WithMethod(60, 40)
}

// softFail closes the channel for an error found while reading content.
func (ch *channel) softFail(e *amqp.Error) error {
	ch.closeWith(e.WithMethod(60, 40))
	return nil
}

func (ch *channel) finishPublish() error {
	m := ch.msg
	ch.msg = nil
	ch.inContent = 0
	if err := ch.c.s.broker.CheckTopicPublish(ch.c.user.Name, ch.vhost(), ch.pub.Exchange, m); err != nil {
		return ch.softFail(err.(*amqp.Error))
	}
	if m.Props.UserID != "" && m.Props.UserID != ch.c.user.Name {
		return ch.softFail(amqp.Errorf(amqp.PreconditionFailed, "user_id property set to '%s' but authenticated user was '%s'", m.Props.UserID, ch.c.user.Name))
	}
	if m.Props.Flags&amqp.FlagExpiration != 0 || m.Props.Expiration != "" {
		ttl, err := broker.ParseExpiration(m.Props.Expiration)
		if err != nil {
			return ch.softFail(err.(*amqp.Error))
		}
		m.TTL, m.HasTTL = ttl, true
	}
	if m.Props.ReplyTo == broker.DirectReplyTo {
		if ch.replyTo == "" {
			return ch.softFail(amqp.Errorf(amqp.PreconditionFailed, "fast reply consumer does not exist"))
		}
		m.Props.ReplyTo = ch.replyTo
	}
	if ch.tx {
		ch.txOps = append(ch.txOps, txOp{kind: txPublish, pub: m, exch: ch.pub.Exchange, mand: ch.pub.Mandatory})
		ch.txPending.Add(1 << 32)
		return nil
	}
	if err := ch.publish(ch.pub.Exchange, m, ch.pub.Mandatory); err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && !ae.Hard {
			return ch.softFail(ae)
		}
		return err
	}
	// While a resource alarm is raised, a publishing connection is not read
	// from, from its next publish on (an atomic load on the hot path).
	if ch.c.s.alarmed.Load() || ch.c.blocked {
		ch.flushConfirms()
		ch.c.waitAlarm()
	}
	return nil
}

func (ch *channel) publish(exchange string, m *broker.Message, mandatory bool) error {
	if testHookPublish != nil {
		testHookPublish(exchange, m)
	}
	ch.router.NoWait = !ch.confirm && !ch.tx
	res, err := ch.vhost().Publish(&ch.router, exchange, m)
	if err != nil {
		return err
	}
	ch.stats.local.publish++
	ch.countExchange(exchange, res.Routed > 0)
	if res.Routed == 0 && !mandatory {
		ch.stats.local.dropped++
	}
	if res.Routed == 0 && mandatory {
		ch.stats.local.returned++
		ch.flushConfirms()
		ch.c.send(func(b []byte) []byte {
			b = amqp.AppendMethodFrame(b, ch.id, &amqp.BasicReturn{ReplyCode: amqp.NoRoute, ReplyText: "NO_ROUTE", Exchange: exchange, RoutingKey: m.RoutingKey})
			b = amqp.AppendHeaderFrame(b, ch.id, 60, uint64(len(m.Body)), &m.Props)
			return amqp.AppendBodyFrames(b, ch.id, m.Body, ch.c.frameMax)
		})
	}
	// Flow control, in the spirit of RabbitMQ's credit flow: a publish
	// that found a queue busy with its consumers (its lock held) pauses
	// this publisher briefly (150 µs), so that a publisher flooding a consumed
	// queue cannot take the CPU its consumers need (warren-perf, nack into
	// a DLQ with an unthrottled publisher: 72k -> 121k dead-letters/s). A
	// queue without busy consumers never slows its publishers.
	if res.Busy {
		time.Sleep(150 * time.Microsecond)
	}
	if ch.confirm {
		ch.stats.local.confirm++
		ch.confirmPublish(res)
	} else if ch.tx {
		ch.txWait.Add(res.Durable)
	}
	return nil
}

// maxUnflushedConfirms bounds how many confirms wait for the reader to
// run out of input, so that a publisher that never pauses still hears back.
const maxUnflushedConfirms = 256

func (ch *channel) txCommit() error {
	if !ch.tx {
		return amqp.Errorf(amqp.PreconditionFailed, "channel is not transactional")
	}
	ops := ch.txOps
	ch.txOps = nil
	ch.txPending.Store(0)
	for _, op := range ops {
		switch op.kind {
		case txPublish:
			if err := ch.publish(op.exch, op.pub, op.mand); err != nil {
				return err
			}
		default:
			if err := ch.applySettle(op.ack.DeliveryTag, op.ack.Multiple, op.kind, op.ack.Requeue); err != nil {
				return err
			}
		}
	}
	// tx.commit-ok only once the transaction's messages are on disk.
	err := ch.txWait.Wait(context.Background())
	ch.txWait.Reset()
	if err != nil {
		return amqp.ConnErrorf(amqp.InternalError, "message store: %v", err)
	}
	ch.c.sendMethod(ch.id, &amqp.TxCommitOk{})
	return nil
}

// --- consuming ---

func (ch *channel) consume(m *amqp.BasicConsume) error {
	name := ch.queueName(m.Queue)
	if name == broker.DirectReplyTo {
		return ch.consumeReplyTo(m)
	}
	q, err := ch.readableQueue(name)
	if err != nil {
		return err
	}
	tag := m.ConsumerTag
	ch.mu.Lock()
	if tag == "" {
		tag = "amq.ctag-" + strings.TrimPrefix(broker.NewQueueName(), "amq.gen-")
	}
	if _, dup := ch.consumers[tag]; dup {
		ch.mu.Unlock()
		return amqp.ConnErrorf(amqp.NotAllowed, "attempt to reuse consumer tag '%s'", tag)
	}
	prio := 0
	if p, ok := m.Arguments["x-priority"]; ok {
		if n, ok := broker.IntArg(p); ok {
			prio = int(n)
		}
	}
	cs := &consumer{ch: ch, prefetch: ch.prefetch}
	cs.bc = &broker.Consumer{Tag: tag, NoAck: m.NoAck, Exclusive: m.Exclusive, Priority: prio, Args: m.Arguments, Sink: cs, Owner: ch.c.id, Prefetch: ch.prefetch}
	ch.consumers[tag] = cs
	ch.mu.Unlock()
	// consume-ok is sent only once the queue accepted the consumer (not
	// for a 403 exclusive refusal), and before its first delivery.
	added := func() {
		if !m.NoWait {
			ch.c.sendMethod(ch.id, &amqp.BasicConsumeOk{ConsumerTag: tag})
		}
	}
	if err := q.AddConsumerThen(cs.bc, added); err != nil {
		ch.mu.Lock()
		delete(ch.consumers, tag)
		ch.mu.Unlock()
		return err
	}
	ch.mu.Lock()
	ch.addConsumedLocked(q)
	ch.mu.Unlock()
	return nil
}

func (ch *channel) addConsumedLocked(q *broker.Queue) {
	for _, o := range ch.consumedQueue {
		if o == q {
			return
		}
	}
	ch.consumedQueue = append(ch.consumedQueue, q)
}

// removeConsumerLocked forgets a consumer, and its queue too when no other
// consumer of the channel reads from it, so consumedQueue stays small on
// channels that consume from many short-lived queues.
func (ch *channel) removeConsumerLocked(cs *consumer) {
	delete(ch.consumers, cs.bc.Tag)
	q := cs.bc.Queue
	for _, o := range ch.consumers {
		if o.bc.Queue == q {
			return
		}
	}
	for i, o := range ch.consumedQueue {
		if o == q {
			ch.consumedQueue = append(ch.consumedQueue[:i], ch.consumedQueue[i+1:]...)
			return
		}
	}
}

func (ch *channel) cancel(m *amqp.BasicCancel) error {
	ch.mu.Lock()
	cs := ch.consumers[m.ConsumerTag]
	if cs != nil {
		ch.removeConsumerLocked(cs)
	}
	ch.mu.Unlock()
	if cs != nil {
		if cs == ch.replyCons {
			ch.vhost().UnregisterReplyTo(ch.replyTo)
			ch.replyTo, ch.replyCons = "", nil
		} else {
			cs.bc.Queue.RemoveConsumer(cs.bc)
		}
	}
	if !m.NoWait {
		ch.c.sendMethod(ch.id, &amqp.BasicCancelOk{ConsumerTag: m.ConsumerTag})
	}
	return nil
}

func (ch *channel) consumeReplyTo(m *amqp.BasicConsume) error {
	if !m.NoAck {
		return amqp.Errorf(amqp.PreconditionFailed, "reply consumer cannot acknowledge")
	}
	if ch.replyTo != "" {
		return amqp.Errorf(amqp.PreconditionFailed, "reply consumer already set")
	}
	tag := m.ConsumerTag
	if tag == "" {
		tag = "amq.ctag-" + strings.TrimPrefix(broker.NewQueueName(), "amq.gen-")
	}
	cs := &consumer{ch: ch}
	cs.bc = &broker.Consumer{Tag: tag, NoAck: true, Sink: cs, Owner: ch.c.id}
	ch.mu.Lock()
	ch.consumers[tag] = cs
	ch.mu.Unlock()
	ch.replyCons = cs
	ch.replyTo = broker.DirectReplyTo + "." + strings.TrimPrefix(broker.NewQueueName(), "amq.gen-")
	if !m.NoWait {
		ch.c.sendMethod(ch.id, &amqp.BasicConsumeOk{ConsumerTag: tag})
	}
	ch.vhost().RegisterReplyTo(ch.replyTo, cs)
	return nil
}

func (ch *channel) get(m *amqp.BasicGet) error {
	name := ch.queueName(m.Queue)
	q, err := ch.readableQueue(name)
	if err != nil {
		return err
	}
	if err := q.Unsupported("basic.get"); err != nil {
		return err
	}
	d, remaining, ok := q.Get(m.NoAck)
	if !ok {
		ch.stats.local.getEmpty++
		ch.stats.local.dirty = true
		ch.c.sendMethod(ch.id, &amqp.BasicGetEmpty{})
		return nil
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.stats.countGet(m.NoAck, d.Redelivered)
	ch.nextTag++
	tag := ch.nextTag
	if !m.NoAck {
		ch.unacked = append(ch.unacked, unackedMsg{tag: tag, d: d})
		ch.unackedCount++
	}
	ch.c.send(func(b []byte) []byte {
		b = amqp.AppendMethodFrame(b, ch.id, &amqp.BasicGetOk{DeliveryTag: tag, Redelivered: d.Redelivered,
			Exchange: d.Msg.Exchange, RoutingKey: d.Msg.RoutingKey, MessageCount: uint32(remaining)})
		b = amqp.AppendHeaderFrame(b, ch.id, 60, uint64(len(d.Msg.Body)), &d.Msg.Props)
		return amqp.AppendBodyFrames(b, ch.id, d.Msg.Body, ch.c.frameMax)
	})
	return nil
}

// settle handles basic.ack (kind 1) and basic.nack/reject (kind 2).
func (ch *channel) settle(tag uint64, multiple bool, kind int, requeue bool) error {
	if ch.tx {
		// Validate now, apply at commit.
		ch.mu.Lock()
		ok := ch.hasTagLocked(tag, multiple)
		ch.mu.Unlock()
		if !ok {
			return amqp.Errorf(amqp.PreconditionFailed, "unknown delivery tag %d", tag)
		}
		ch.txOps = append(ch.txOps, txOp{kind: kind, ack: &amqp.BasicNack{DeliveryTag: tag, Multiple: multiple, Requeue: requeue}})
		ch.txPending.Add(1)
		return nil
	}
	return ch.applySettle(tag, multiple, kind, requeue)
}

func (ch *channel) hasTagLocked(tag uint64, multiple bool) bool {
	if multiple && tag == 0 {
		return true
	}
	i := ch.findTagLocked(tag)
	return i >= 0 && !ch.unacked[i].done
}

func (ch *channel) findTagLocked(tag uint64) int {
	lo, hi := 0, len(ch.unacked)
	for lo < hi {
		mid := (lo + hi) / 2
		if ch.unacked[mid].tag < tag {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo < len(ch.unacked) && ch.unacked[lo].tag == tag {
		return lo
	}
	return -1
}

// takeSettled removes the deliveries a settle names (ch.mu released by a
// defer).
func (ch *channel) takeSettled(tag uint64, multiple bool, kind int, requeue bool) ([]unackedMsg, error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var taken []unackedMsg
	if multiple {
		// tag 0 with multiple means every outstanding delivery.
		taken = ch.takeUpToLocked(tag)
		if len(taken) == 0 && tag != 0 {
			return nil, amqp.Errorf(amqp.PreconditionFailed, "unknown delivery tag %d", tag)
		}
	} else {
		i := ch.findTagLocked(tag)
		if i < 0 || ch.unacked[i].done {
			return nil, amqp.Errorf(amqp.PreconditionFailed, "unknown delivery tag %d", tag)
		}
		taken = []unackedMsg{ch.unacked[i]}
		ch.markDoneLocked(i)
	}
	ch.stats.countSettle(kind, requeue, len(taken))
	return taken, nil
}

func (ch *channel) applySettle(tag uint64, multiple bool, kind int, requeue bool) error {
	taken, err := ch.takeSettled(tag, multiple, kind, requeue)
	if err != nil {
		return err
	}
	switch {
	case kind == settleAck:
		settle(taken, func(q *broker.Queue, ds []broker.Delivery) { q.Ack(ds) })
	case requeue:
		// basic.reject(requeue) counts as a failed delivery, basic.nack does
		// not (R5.3, RabbitMQ 4.3); past a delivery limit it dead-letters.
		failed := kind == settleReject
		settle(taken, func(q *broker.Queue, ds []broker.Delivery) { ch.settledDL(q); q.Requeue(ds, failed) })
	default:
		settle(taken, func(q *broker.Queue, ds []broker.Delivery) { ch.settledDL(q); q.Reject(ds) })
	}
	ch.redispatch()
	return nil
}

// settledDL notes that the channel rejected or requeued deliveries of q,
// which may dead-letter them (deadLetterBarrier).
// The list is bounded: past 32 queues the channel waits for them at once.
func (ch *channel) settledDL(q *broker.Queue) {
	if slices.Contains(ch.dlQueues, q) {
		return
	}
	if len(ch.dlQueues) >= 32 {
		ch.deadLetterBarrier()
	}
	ch.dlQueues = append(ch.dlQueues, q)
}

// deadLetterBarrier waits until the dead letters of the queues this
// channel rejected into are routed: the queues' flushers publish them off
// the reader's goroutine (broker/dlflush.go), and a method that changes
// routing must not overtake them. A channel's methods are handled in
// order, so a rejected message is dead-lettered by the exchanges and
// bindings of the moment it was rejected, as in RabbitMQ (R3.2: a reject
// before the dead-letter exchange exists drops the message).
func (ch *channel) deadLetterBarrier() {
	for _, q := range ch.dlQueues {
		q.DeadLetterBarrier()
	}
	clear(ch.dlQueues)
	ch.dlQueues = ch.dlQueues[:0]
}

// markDoneLocked settles unacked[i] and trims settled entries off the front.
func (ch *channel) markDoneLocked(i int) {
	u := &ch.unacked[i]
	u.done = true
	ch.unackedCount--
	if u.cons != nil {
		u.cons.unacked--
	}
	n := 0
	for n < len(ch.unacked) && ch.unacked[n].done {
		n++
	}
	if n > 0 {
		// Drop the settled prefix by moving the slice's start: O(n), not
		// O(outstanding) as copying the rest down was (a single ack with
		// prefetch 1000 moved 1000 entries).
		clear(ch.unacked[:n])
		ch.unacked = ch.unacked[n:]
	}
}

// takeUpToLocked removes and returns, in tag order, the outstanding
// deliveries with tags up to tag (all of them for tag 0). Tags are sorted,
// so this is a prefix: O(taken), not O(outstanding).
func (ch *channel) takeUpToLocked(tag uint64) []unackedMsg {
	n := len(ch.unacked)
	if tag != 0 {
		n = sort.Search(len(ch.unacked), func(i int) bool { return ch.unacked[i].tag > tag })
	}
	out := make([]unackedMsg, 0, n)
	for i := 0; i < n; i++ {
		u := ch.unacked[i]
		if u.done {
			continue
		}
		out = append(out, u)
		ch.unackedCount--
		if u.cons != nil {
			u.cons.unacked--
		}
	}
	clear(ch.unacked[:n])
	ch.unacked = ch.unacked[n:]
	return out
}

// takeUnackedLocked removes and returns, in tag order, the outstanding
// deliveries that keep reports true for.
func (ch *channel) takeUnackedLocked(keep func(*unackedMsg) bool) []unackedMsg {
	var out []unackedMsg
	rest := ch.unacked[:0]
	for i := range ch.unacked {
		u := ch.unacked[i]
		if u.done {
			continue
		}
		if keep(&u) {
			out = append(out, u)
			ch.unackedCount--
			if u.cons != nil {
				u.cons.unacked--
			}
		} else {
			rest = append(rest, u)
		}
	}
	clear(ch.unacked[len(rest):])
	ch.unacked = rest
	return out
}

// settle groups deliveries by queue, keeping their order, and applies fn.
func settle(us []unackedMsg, fn func(*broker.Queue, []broker.Delivery)) {
	for len(us) > 0 {
		q := us[0].d.Queue
		ds := make([]broker.Delivery, 0, len(us))
		rest := us[:0]
		for _, u := range us {
			if u.d.Queue == q {
				ds = append(ds, u.d)
			} else {
				rest = append(rest, u)
			}
		}
		fn(q, ds)
		us = rest
	}
}

func (ch *channel) recover(requeue, sync bool) error {
	if !requeue {
		return amqp.ConnErrorf(amqp.NotImplemented, "requeue=false")
	}
	ch.mu.Lock()
	taken := ch.takeUnackedLocked(func(*unackedMsg) bool { return true })
	ch.mu.Unlock()
	settle(taken, func(q *broker.Queue, ds []broker.Delivery) { q.Requeue(ds, false) })
	if sync {
		ch.c.sendMethod(ch.id, &amqp.BasicRecoverOk{})
	}
	ch.redispatch()
	return nil
}
