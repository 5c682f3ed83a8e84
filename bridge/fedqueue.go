package bridge

import (
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
)

// Federated queues (issue 24), Warren as the downstream, as RabbitMQ's
// federation plugin links them (rabbit_federation_queue_link): for a
// queue Q of this broker whose policy names upstreams, a link per upstream
// that consumes the upstream's queue (as it is, or declared like Q) only
// while Q here has consumers and no message ready for them, with
// x-priority -1 so that the upstream's own consumers go first, and
// publishes what it takes to Q here; the first hop keeps the message's
// exchange and routing key as x-original-exchange and
// x-original-routing-key. So messages move to where the consumers are.

// fedQueuePoll is how often a queue link looks at its queue's consumers.
const fedQueuePoll = 100 * time.Millisecond

func (l *fedLink) queueSession() error {
	m, up, k := l.m, l.up, l.key
	v := m.cfg.Broker.VHost(k.vhost)
	if v == nil {
		return errors.New("no such vhost")
	}
	lq := v.Queue(k.name)
	if lq == nil {
		return fmt.Errorf("no queue '%s' here", k.name)
	}
	connName := fmt.Sprintf("Federation link (upstream: %s, queue: %s)", up.Name, k.name)
	uconn, uu, err := m.dialAny(l.ctx, up.URIs, l.user, k.vhost, connName)
	if err != nil {
		return err
	}
	defer uconn.Close()
	local, err := m.dial(l.ctx, &URI{Local: true, Heartbeat: -1}, l.user, k.vhost, connName)
	if err != nil {
		return fmt.Errorf("local: %w", err)
	}
	defer local.Close()
	uch, err := uconn.Channel()
	if err != nil {
		return err
	}
	lch, err := local.Channel()
	if err != nil {
		return fmt.Errorf("local: %w", err)
	}
	st := l.status()
	upQ := st.UpstreamQueue
	qargs := amqp.Table{}
	for kk, vv := range lq.Args {
		qargs[kk] = clientValue(vv)
	}
	if err := ensureQueue(uconn, uch, upQ, qargs); err != nil {
		return err
	}
	var confirms chan amqp.Confirmation
	if up.AckMode == OnConfirm {
		if err := lch.Confirm(false); err != nil {
			return fmt.Errorf("local: %w", err)
		}
		confirms = lch.NotifyPublish(make(chan amqp.Confirmation, max(up.Prefetch, 1)+64))
	}
	if err := uch.Qos(up.Prefetch, 0, false); err != nil {
		return err
	}
	uClosed := uconn.NotifyClose(make(chan *amqp.Error, 1))
	lClosed := local.NotifyClose(make(chan *amqp.Error, 1))
	ucClosed := uch.NotifyClose(make(chan *amqp.Error, 1))
	lcClosed := lch.NotifyClose(make(chan *amqp.Error, 1))
	l.set("running", "", Redact(uu.Raw))
	l.mu.Lock()
	l.st.LocalConnection = connName
	l.mu.Unlock()

	var deliveries <-chan amqp.Delivery
	consuming := false
	poll := time.NewTicker(fedQueuePoll)
	defer poll.Stop()
	settle := settler{ch: uch}
	for {
		select {
		case <-poll.C:
			// Consume upstream only while consumers here wait.
			want := waiting(lq)
			switch {
			case want && !consuming:
				ds, err := uch.ConsumeWithContext(l.ctx, upQ, up.ConsumerTag, false, false, false, false, amqp.Table{"x-priority": int32(-1)})
				if err != nil {
					return err
				}
				deliveries, consuming = ds, true
			case !want && consuming:
				if err := uch.Cancel(up.ConsumerTag, false); err != nil {
					return err
				}
				consuming = false // (what is in flight still arrives, then the channel closes)
			}
		case d, ok := <-deliveries:
			if !ok {
				deliveries = nil
				continue
			}
			if up.AckMode == NoAck {
				settle.ack(d.DeliveryTag)
			}
			p := linkPublishing(&d, up.TrustUserID)
			prev, first := p.Headers["x-received-from"].([]any)
			if !first {
				p.Headers["x-original-exchange"], p.Headers["x-original-routing-key"] = d.Exchange, d.RoutingKey
				if cc, ok := p.Headers["CC"]; ok {
					p.Headers["x-original-cc"] = cc
					delete(p.Headers, "CC")
				}
			}
			// RabbitMQ's queue links write uri, queue, redelivered and how
			// many times the message came this way.
			visits := int64(1)
			for _, e := range prev {
				if t, ok := e.(amqp.Table); ok && t["uri"] == Redact(uu.Raw) && t["queue"] == upQ {
					visits++
				}
			}
			p.Headers["x-received-from"] = append([]any{amqp.Table{"uri": Redact(uu.Raw), "queue": upQ,
				"redelivered": d.Redelivered, "visit-count": visits}}, prev...)
			if err := lch.PublishWithContext(l.ctx, "", k.name, false, false, p); err != nil {
				return fmt.Errorf("local: %w", err)
			}
			settle.sent(up.AckMode, d.DeliveryTag)
			if len(deliveries) == 0 {
				if err := settle.flush(); err != nil {
					return err
				}
			}
		case c := <-confirms:
			if err := settle.confirmed(c); err != nil {
				return err
			}
			if len(confirms) == 0 {
				if err := settle.flush(); err != nil {
					return err
				}
			}
		case e := <-uClosed:
			return closeErr("upstream", e)
		case e := <-ucClosed:
			return closeErr("upstream", e)
		case e := <-lClosed:
			return closeErr("local", e)
		case e := <-lcClosed:
			return closeErr("local", e)
		case <-l.ctx.Done():
			return l.ctx.Err()
		}
	}
}

// waiting reports whether q's consumers wait: it has some and nothing
// ready for them. A queue homed on another node of the cluster is asked
// there (its count then includes the messages out to consumers).
func waiting(q *broker.Queue) bool {
	if q.ServedHere() {
		s := q.Stats()
		return s.Consumers > 0 && s.Ready == 0
	}
	n, consumers := q.Counts()
	return consumers > 0 && n == 0
}
