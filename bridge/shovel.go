package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
)

// ShovelStatus is a running shovel as /api/shovels shows it.
type ShovelStatus struct {
	Node, VHost, Name string
	Type              string // dynamic, or static (the configuration's)
	// State: starting (connecting), running, terminated (failed: Reason;
	// restarted after its reconnect-delay unless that is 0).
	State     string
	Reason    string
	Since     time.Time // the state's start
	Def       *ShovelDef
	SrcURI    string // the URI in use, without credentials
	DestURI   string
	Forwarded uint64 // messages published to the destination
	Acked     uint64 // messages settled at the source
}

type shovelWorker struct {
	m     *Manager
	param broker.DefParameter
	def   *ShovelDef // nil when its value does not parse
	err   error      // ParseShovel's
	ctx   context.Context
	stop  context.CancelFunc
	done  chan struct{}

	mu      sync.Mutex
	st      ShovelStatus
	endRun  context.CancelFunc // ends the session running now
	refusal error              // why the manager ended it
}

// refuse ends the running session: its user lost a permission it needs
// here (the manager checks them again every reconcile, so a revocation
// stops a running shovel as a new one is refused).
func (w *shovelWorker) refuse(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.endRun != nil && w.refusal == nil {
		w.refusal = err
		w.endRun()
	}
}

func (m *Manager) newShovel(p broker.DefParameter) *shovelWorker {
	value, _ := p.Value.(map[string]any)
	def, err := ParseShovel(p.VHost, p.Name, value)
	ctx, cancel := context.WithCancel(m.ctx)
	w := &shovelWorker{m: m, param: p, def: def, err: err, ctx: ctx, stop: cancel, done: make(chan struct{}),
		st: ShovelStatus{Node: m.cfg.Node, VHost: p.VHost, Name: p.Name, Type: "dynamic", State: "starting", Since: time.Now(), Def: def}}
	if p.Component == staticComponent {
		w.st.Type = "static"
	}
	return w
}

// halt stops the shovel and waits for it.
func (w *shovelWorker) halt() {
	w.stop()
	<-w.done
}

func (w *shovelWorker) status() ShovelStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.st
}

func (w *shovelWorker) setState(state, reason string) {
	w.mu.Lock()
	if w.st.State != state || w.st.Reason != reason {
		w.st.State, w.st.Reason, w.st.Since = state, reason, time.Now()
	}
	if state != "running" {
		w.st.SrcURI, w.st.DestURI = "", ""
	}
	w.mu.Unlock()
}

// errFinished ends a session whose shovel moved what src-delete-after
// asked for.
var errFinished = errors.New("finished")

// run runs sessions until the shovel is stopped, finished, or failed with
// no reconnect-delay.
func (w *shovelWorker) run() {
	defer close(w.done)
	log := w.m.log.With("vhost", w.param.VHost, "shovel", w.param.Name)
	if w.err != nil {
		w.setState("terminated", w.err.Error())
		log.Error("shovel not started: invalid definition", "err", w.err)
		return
	}
	for {
		w.setState("starting", "")
		err := w.session()
		if w.ctx.Err() != nil {
			return
		}
		if errors.Is(err, errFinished) {
			log.Info("shovel finished (src-delete-after)")
			w.m.finished(w)
			return
		}
		w.setState("terminated", err.Error())
		if w.def.ReconnectDelay <= 0 {
			log.Warn("shovel terminated; not restarted (reconnect-delay 0)", "err", err)
			return
		}
		log.Warn("shovel terminated; restarting", "err", err, "after", w.def.ReconnectDelay)
		t := time.NewTimer(w.def.ReconnectDelay)
		select {
		case <-w.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// session connects both sides and moves messages until one fails, the
// shovel stops, or it is done.
func (w *shovelWorker) session() error {
	d, m := w.def, w.m
	if err := m.authorizeShovel(w.param.User, d); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	w.mu.Lock()
	w.endRun, w.refusal = cancel, nil
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.endRun = nil
		w.mu.Unlock()
	}()
	err := w.move(ctx)
	w.mu.Lock()
	if w.refusal != nil {
		err = w.refusal
	}
	w.mu.Unlock()
	return err
}

// move is session's work once its user may do it.
func (w *shovelWorker) move(ctx context.Context) error {
	d, m := w.def, w.m
	user := w.param.User
	connName := "Shovel " + d.Name
	// A URI without a vhost names "/", whatever the shovel's own vhost
	// (RabbitMQ's amqp_uri; federation links take their own instead).
	src, su, err := m.dialAny(ctx, d.SrcURIs, user, "/", connName)
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	defer src.Close()
	dest, du, err := m.dialAny(ctx, d.DestURIs, user, "/", connName)
	if err != nil {
		return fmt.Errorf("destination: %w", err)
	}
	defer dest.Close()
	sch, err := src.Channel()
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	dch, err := dest.Channel()
	if err != nil {
		return fmt.Errorf("destination: %w", err)
	}
	queue := d.SrcQueue
	switch {
	case d.SrcExchange != "":
		q, err := sch.QueueDeclare("", false, true, true, false, nil)
		if err != nil {
			return fmt.Errorf("source: %w", err)
		}
		if err := sch.QueueBind(q.Name, d.SrcExchangeKey, d.SrcExchange, false, nil); err != nil {
			return fmt.Errorf("source: %w", err)
		}
		queue = q.Name
	case !d.SrcPredeclared:
		if err := ensureQueue(src, sch, queue, d.SrcQueueArgs); err != nil {
			return fmt.Errorf("source: %w", err)
		}
	}
	remaining := d.SrcDeleteAfter.N // < 0: never
	if d.SrcDeleteAfter.QueueLength {
		q, err := sch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("source: %w", err)
		}
		remaining = int64(q.Messages)
	}
	if remaining == 0 {
		return errFinished
	}
	if d.DestQueue != "" && !d.DestPredeclared {
		if err := ensureQueue(dest, dch, d.DestQueue, d.DestQueueArgs); err != nil {
			return fmt.Errorf("destination: %w", err)
		}
	}
	var confirms chan amqp.Confirmation
	if d.AckMode == OnConfirm {
		if err := dch.Confirm(false); err != nil {
			return fmt.Errorf("destination: %w", err)
		}
		// Room for every publish in flight: at most the prefetch (each
		// holds a delivery unacked), so the client never blocks on it.
		confirms = dch.NotifyPublish(make(chan amqp.Confirmation, max(d.SrcPrefetch, 1)+64))
	}
	if err := sch.Qos(d.SrcPrefetch, 0, false); err != nil {
		return fmt.Errorf("source: %w", err)
	}
	// Every ack mode consumes with acks: no-ack and on-publish ack at
	// once, so that the prefetch bounds what this link buffers.
	deliveries, err := sch.ConsumeWithContext(ctx, queue, "", false, false, false, false, d.SrcConsumerArgs)
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	srcClosed := src.NotifyClose(make(chan *amqp.Error, 1))
	destClosed := dest.NotifyClose(make(chan *amqp.Error, 1))
	schClosed := sch.NotifyClose(make(chan *amqp.Error, 1))
	dchClosed := dch.NotifyClose(make(chan *amqp.Error, 1))
	cancels := sch.NotifyCancel(make(chan string, 1))

	w.mu.Lock()
	w.st.SrcURI, w.st.DestURI = Redact(su.Raw), Redact(du.Raw)
	w.mu.Unlock()
	w.setState("running", "")
	s := &shovelSession{w: w, dch: dch, srcURI: Redact(su.Raw), destURI: Redact(du.Raw), remaining: remaining}
	s.settle = settler{ch: sch, side: "source", onAck: func() {
		s.acked++
		w.mu.Lock()
		w.st.Acked++
		w.mu.Unlock()
	}}
	for {
		if s.done() {
			return s.finish()
		}
		select {
		case dl, ok := <-deliveries:
			if !ok {
				return errors.New("source: consumer closed")
			}
			if err := s.forward(ctx, &dl); err != nil {
				return err
			}
			if len(deliveries) == 0 {
				if err := s.settle.flush(); err != nil {
					return err
				}
			}
		case c := <-confirms:
			if err := s.settle.confirmed(c); err != nil {
				return err
			}
			if len(confirms) == 0 {
				if err := s.settle.flush(); err != nil {
					return err
				}
			}
		case e := <-srcClosed:
			return closeErr("source", e)
		case e := <-destClosed:
			return closeErr("destination", e)
		case e := <-schClosed:
			return closeErr("source", e)
		case e := <-dchClosed:
			return closeErr("destination", e)
		case <-cancels:
			return errors.New("source: the consumer was cancelled (basic.cancel)")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ensureQueue declares queue (durable, args) unless it exists: RabbitMQ's
// shovel declares it as an internal user; here the shovel acts as its
// user, who then needs configure on the queue only to create it.
func ensureQueue(c *amqp.Connection, ch *amqp.Channel, queue string, args amqp.Table) error {
	probe, err := c.Channel()
	if err != nil {
		return err
	}
	_, err = probe.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err == nil {
		probe.Close()
		return nil
	}
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.NotFound {
		return err
	}
	_, err = ch.QueueDeclare(queue, true, false, false, false, args)
	return err
}

func closeErr(side string, e *amqp.Error) error {
	if e == nil {
		return fmt.Errorf("%s: connection closed", side)
	}
	return fmt.Errorf("%s: %d %s", side, e.Code, e.Reason)
}

// shovelSession is one connected run of a shovel.
type shovelSession struct {
	w                *shovelWorker
	dch              *amqp.Channel
	settle           settler // the source's deliveries
	srcURI, destURI  string
	published, acked int64
	remaining        int64 // < 0: never done
}

// done reports whether the shovel moved and settled all it should.
func (s *shovelSession) done() bool {
	return s.remaining >= 0 && s.acked >= s.remaining
}

// forward publishes one delivery to the destination.
func (s *shovelSession) forward(ctx context.Context, dl *amqp.Delivery) error {
	if s.remaining >= 0 && s.published >= s.remaining {
		// Beyond src-delete-after: left unacked, back to the queue
		// when the shovel closes its channel.
		return nil
	}
	d := s.w.def
	if d.AckMode == NoAck {
		// No-ack: the message leaves the source before it is forwarded
		// (lost if the shovel dies now), as RabbitMQ's.
		s.settle.ack(dl.DeliveryTag)
	}
	ex, key := dl.Exchange, dl.RoutingKey
	switch {
	case d.DestQueue != "":
		ex, key = "", d.DestQueue
	default:
		if d.DestExchange != nil {
			ex = *d.DestExchange
		}
		if d.DestExchangeKey != nil {
			key = *d.DestExchangeKey
		}
	}
	pub := s.publishing(dl)
	if err := s.dch.PublishWithContext(ctx, ex, key, false, false, pub); err != nil {
		return fmt.Errorf("destination: %w", err)
	}
	s.published++
	s.w.mu.Lock()
	s.w.st.Forwarded++
	s.w.mu.Unlock()
	s.settle.sent(d.AckMode, dl.DeliveryTag)
	return nil
}

// finish ends a shovel that forwarded all it should: its acks are sent,
// then the session ends with errFinished.
func (s *shovelSession) finish() error {
	if err := s.settle.flush(); err != nil {
		return err
	}
	return errFinished
}

// publishing is the message to publish for dl: its properties, with
// dest-publish-properties over them and the forward headers.
func (s *shovelSession) publishing(dl *amqp.Delivery) amqp.Publishing {
	p := publishingOf(dl)
	d := s.w.def
	if d.PublishProps != nil {
		setProps(&p, d.PublishProps)
	}
	if d.ForwardHeaders || d.TimestampHeader {
		h := amqp.Table{}
		for k, v := range p.Headers {
			h[k] = v
		}
		if d.ForwardHeaders {
			h["x-shovelled"] = append([]any{s.forwardTable()}, tableList(h["x-shovelled"])...)
		}
		if d.TimestampHeader {
			h["x-shovelled-timestamp"] = time.Now().Unix()
		}
		p.Headers = h
	}
	return p
}

// forwardTable is this shovel's entry of x-shovelled.
func (s *shovelSession) forwardTable() amqp.Table {
	d := s.w.def
	t := amqp.Table{"shovelled-by": s.w.m.clusterName(), "shovel-type": s.w.status().Type, "shovel-name": d.Name,
		"shovel-vhost": d.VHost, "src-uri": s.srcURI, "dest-uri": s.destURI}
	if d.SrcExchange != "" {
		t["src-exchange"], t["src-exchange-key"] = d.SrcExchange, d.SrcExchangeKey
	} else {
		t["src-queue"] = d.SrcQueue
	}
	switch {
	case d.DestQueue != "":
		t["dest-queue"] = d.DestQueue
	default:
		if d.DestExchange != nil {
			t["dest-exchange"] = *d.DestExchange
		}
		if d.DestExchangeKey != nil {
			t["dest-exchange-key"] = *d.DestExchangeKey
		}
	}
	return t
}

func tableList(v any) []any {
	if l, ok := v.([]any); ok {
		return l
	}
	return nil
}

// setProps applies dest-publish-properties.
func setProps(p *amqp.Publishing, props map[string]any) {
	str := func(v any) string { s, _ := v.(string); return s }
	for k, v := range props {
		switch k {
		case "content_type":
			p.ContentType = str(v)
		case "content_encoding":
			p.ContentEncoding = str(v)
		case "headers":
			if m, ok := v.(map[string]any); ok {
				p.Headers = jsonTable(m)
			}
		case "delivery_mode":
			if n, ok := broker.JSONInt(v); ok {
				p.DeliveryMode = uint8(n)
			}
		case "priority":
			if n, ok := broker.JSONInt(v); ok {
				p.Priority = uint8(n)
			}
		case "correlation_id":
			p.CorrelationId = str(v)
		case "reply_to":
			p.ReplyTo = str(v)
		case "expiration":
			p.Expiration = str(v)
		case "message_id":
			p.MessageId = str(v)
		case "timestamp":
			if n, ok := broker.JSONInt(v); ok {
				p.Timestamp = time.Unix(n, 0)
			}
		case "type":
			p.Type = str(v)
		case "user_id":
			p.UserId = str(v)
		case "app_id":
			p.AppId = str(v)
		}
	}
}
