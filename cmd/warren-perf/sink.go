package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/amqp"
)

// The sink is a fake AMQP 0-9-1 server that does the least a broker can:
//
//   - the handshake (any user and password, any vhost, heartbeats off,
//     frame-max 131072);
//   - declares, binds, purges, deletes and basic.qos succeed at once and
//     do nothing;
//   - published messages are parsed frame by frame and dropped; in
//     confirm mode they are acked with one multiple basic.ack per read
//     from the socket;
//   - each basic.consume starts a goroutine writing deliveries of --size
//     bytes (the send time in the first 8, as warren-perf's publishers
//     do) as fast as the socket takes them. For a manual-ack consumer
//     with a prefetch it keeps at most prefetch deliveries unacked on the
//     channel (an ack or nack of tag T, single or multiple, settles
//     everything up to T: right for warren-perf, which acks in order);
//     no-ack consumers and prefetch 0 are not limited.
//
// It measures warren-perf's own ceiling: a broker cannot be measured
// faster than the tool can publish into or consume from the sink.
type sink struct {
	size      int
	frameMax  uint32
	published atomic.Uint64
	delivered atomic.Uint64
	conns     atomic.Int64
}

func runSink(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("warren-perf sink", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:5673", "listen `address`")
	size := fs.Int("size", 16, "body `bytes` of the messages delivered to consumers (>= 8)")
	progress := fs.Duration("progress", time.Second, "print rates to stderr at this interval when there is traffic (0: never)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *size < 8 {
		return errors.New("--size must be at least 8")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "warren-perf sink: listening on %s\n", ln.Addr())
	s := &sink{size: *size, frameMax: 131072}
	return s.serve(ctx, ln, stderr, *progress)
}

func (s *sink) serve(ctx context.Context, ln net.Listener, stderr io.Writer, progress time.Duration) error {
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	go func() {
		<-ctx.Done()
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	if progress > 0 {
		go func() {
			t := time.NewTicker(progress)
			defer t.Stop()
			var lp, ld uint64
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				p, d := s.published.Load(), s.delivered.Load()
				if p != lp || d != ld {
					sec := progress.Seconds()
					fmt.Fprintf(stderr, "warren-perf sink: in %8.0f msg/s  out %8.0f msg/s  %d connections\n",
						float64(p-lp)/sec, float64(d-ld)/sec, s.conns.Load())
				}
				lp, ld = p, d
			}
		}()
	}
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		mu.Lock()
		conns[nc] = true
		mu.Unlock()
		go func() {
			s.conns.Add(1)
			s.handle(nc)
			s.conns.Add(-1)
			mu.Lock()
			delete(conns, nc)
			mu.Unlock()
		}()
	}
}

type sinkConn struct {
	s     *sink
	nc    net.Conn
	fr    *amqp.FrameReader
	wmu   sync.Mutex
	out   []byte // reader goroutine's output, written before each read
	chans map[uint16]*sinkChan
	dirty []*sinkChan // channels with publishes to confirm
	done  chan struct{}
	nGen  int
	// frameMax is the negotiated frame-max.
	frameMax uint32
}

type sinkChan struct {
	id        uint16
	confirm   bool
	pubTag    uint64 // last publish received (confirm mode)
	ackedPub  uint64 // last publish confirmed
	state     int    // 0 method, 1 header, 2 body
	remaining uint64
	prefetch  atomic.Uint32
	nextTag   atomic.Uint64 // last delivery tag sent
	acked     atomic.Uint64 // deliveries settled up to this tag
	ackSignal chan struct{}
	closed    chan struct{}
	consumers map[string]chan struct{}
}

type sinkReader struct{ c *sinkConn }

func (r sinkReader) Read(p []byte) (int, error) {
	c := r.c
	for _, ch := range c.dirty {
		if ch.pubTag > ch.ackedPub {
			c.out = amqp.AppendMethodFrame(c.out, ch.id, &amqp.BasicAck{DeliveryTag: ch.pubTag, Multiple: true})
			ch.ackedPub = ch.pubTag
		}
	}
	c.dirty = c.dirty[:0]
	if len(c.out) > 0 {
		c.write(c.out)
		c.out = c.out[:0]
	}
	return c.nc.Read(p)
}

func (c *sinkConn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.nc.Write(b)
	return err
}

func (c *sinkConn) reply(ch uint16, m amqp.Method) {
	c.out = amqp.AppendMethodFrame(c.out, ch, m)
}

func (s *sink) handle(nc net.Conn) {
	c := &sinkConn{s: s, nc: nc, chans: map[uint16]*sinkChan{}, done: make(chan struct{})}
	c.fr = amqp.NewFrameReader(sinkReader{c}, 256<<10)
	defer func() {
		close(c.done)
		nc.Close()
	}()
	if err := c.handshake(); err != nil {
		return
	}
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return
		}
		if f.Type == amqp.FrameHeartbeat {
			continue
		}
		if f.Channel == 0 {
			m, err := amqp.DecodeMethod(f.Payload)
			if err != nil {
				return
			}
			switch m.(type) {
			case *amqp.ConnectionClose:
				c.write(amqp.AppendMethodFrame(nil, 0, &amqp.ConnectionCloseOk{}))
				return
			case *amqp.ConnectionCloseOk:
				return
			}
			continue
		}
		if !c.frame(f) {
			return
		}
	}
}

func (c *sinkConn) handshake() error {
	c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.nc.SetDeadline(time.Time{})
	if _, err := c.fr.ReadProtocolHeader(); err != nil {
		c.nc.Write(amqp.ProtocolHeader)
		return err
	}
	caps := amqp.Table{"publisher_confirms": true, "basic.nack": true, "consumer_cancel_notify": true,
		"per_consumer_qos": true, "connection.blocked": true, "authentication_failure_close": true}
	c.reply(0, &amqp.ConnectionStart{VersionMajor: 0, VersionMinor: 9, Mechanisms: "PLAIN AMQPLAIN", Locales: "en_US",
		ServerProperties: amqp.Table{"product": "warren-perf sink", "version": "1", "capabilities": caps}})
	c.write(c.out)
	c.out = c.out[:0]
	expect := func(want string) error {
		for {
			f, err := c.fr.ReadFrame()
			if err != nil {
				return err
			}
			if f.Type == amqp.FrameHeartbeat {
				continue
			}
			m, err := amqp.DecodeMethod(f.Payload)
			if err != nil {
				return err
			}
			if m.Name() != want {
				return fmt.Errorf("expected %s, got %s", want, m.Name())
			}
			if to, ok := m.(*amqp.ConnectionTuneOk); ok && to.FrameMax != 0 {
				c.frameMax = min(c.frameMax, to.FrameMax)
				c.fr.SetMaxFrameSize(to.FrameMax)
			}
			return nil
		}
	}
	if err := expect("connection.start-ok"); err != nil {
		return err
	}
	c.frameMax = c.s.frameMax
	c.reply(0, &amqp.ConnectionTune{ChannelMax: 2047, FrameMax: c.frameMax, Heartbeat: 0})
	c.write(c.out)
	c.out = c.out[:0]
	c.fr.SetMaxFrameSize(c.frameMax)
	if err := expect("connection.tune-ok"); err != nil {
		return err
	}
	if err := expect("connection.open"); err != nil {
		return err
	}
	c.reply(0, &amqp.ConnectionOpenOk{})
	return nil
}

// frame handles a frame on a channel; false ends the connection.
func (c *sinkConn) frame(f amqp.Frame) bool {
	ch := c.chans[f.Channel]
	switch f.Type {
	case amqp.FrameHeader:
		if ch == nil || ch.state != 1 || len(f.Payload) < 12 {
			return false
		}
		ch.remaining = binary.BigEndian.Uint64(f.Payload[4:])
		ch.state = 2
		if ch.remaining == 0 {
			c.published(ch)
		}
		return true
	case amqp.FrameBody:
		if ch == nil || ch.state != 2 {
			return false
		}
		n := uint64(len(f.Payload))
		if n >= ch.remaining {
			c.published(ch)
		} else {
			ch.remaining -= n
		}
		return true
	case amqp.FrameMethod:
	default:
		return false
	}
	cid, mid, args, err := amqp.SplitMethod(f.Payload)
	if err != nil {
		return false
	}
	if ch == nil {
		if cid == 20 && mid == 10 { // channel.open
			c.chans[f.Channel] = &sinkChan{id: f.Channel, ackSignal: make(chan struct{}, 1), closed: make(chan struct{}),
				consumers: map[string]chan struct{}{}}
			c.reply(f.Channel, &amqp.ChannelOpenOk{})
		}
		return true
	}
	switch uint32(cid)<<16 | uint32(mid) {
	case 60<<16 | 40: // basic.publish: the hot path
		ch.state = 1
		return true
	case 60<<16 | 80, 60<<16 | 120, 60<<16 | 90: // ack, nack, reject from a consumer
		if len(args) >= 8 {
			tag := binary.BigEndian.Uint64(args)
			if tag > ch.acked.Load() {
				ch.acked.Store(tag)
			}
			select {
			case ch.ackSignal <- struct{}{}:
			default:
			}
		}
		return true
	}
	m, err := amqp.DecodeMethod(f.Payload)
	if err != nil {
		return false
	}
	id := f.Channel
	switch m := m.(type) {
	case *amqp.ChannelClose:
		c.closeChan(ch)
		c.reply(id, &amqp.ChannelCloseOk{})
	case *amqp.ChannelCloseOk:
		c.closeChan(ch)
	case *amqp.ChannelFlow:
		c.reply(id, &amqp.ChannelFlowOk{Active: m.Active})
	case *amqp.ExchangeDeclare:
		if !m.NoWait {
			c.reply(id, &amqp.ExchangeDeclareOk{})
		}
	case *amqp.ExchangeDelete:
		if !m.NoWait {
			c.reply(id, &amqp.ExchangeDeleteOk{})
		}
	case *amqp.ExchangeBind:
		if !m.NoWait {
			c.reply(id, &amqp.ExchangeBindOk{})
		}
	case *amqp.ExchangeUnbind:
		if !m.NoWait {
			c.reply(id, &amqp.ExchangeUnbindOk{})
		}
	case *amqp.QueueDeclare:
		name := m.Queue
		if name == "" {
			c.nGen++
			name = "amq.gen-sink-" + strconv.Itoa(c.nGen)
		}
		if !m.NoWait {
			c.reply(id, &amqp.QueueDeclareOk{Queue: name})
		}
	case *amqp.QueueBind:
		if !m.NoWait {
			c.reply(id, &amqp.QueueBindOk{})
		}
	case *amqp.QueueUnbind:
		c.reply(id, &amqp.QueueUnbindOk{})
	case *amqp.QueuePurge:
		if !m.NoWait {
			c.reply(id, &amqp.QueuePurgeOk{})
		}
	case *amqp.QueueDelete:
		if !m.NoWait {
			c.reply(id, &amqp.QueueDeleteOk{})
		}
	case *amqp.BasicQos:
		ch.prefetch.Store(uint32(m.PrefetchCount))
		c.reply(id, &amqp.BasicQosOk{})
	case *amqp.ConfirmSelect:
		ch.confirm = true
		if !m.NoWait {
			c.reply(id, &amqp.ConfirmSelectOk{})
		}
	case *amqp.BasicConsume:
		tag := m.ConsumerTag
		if tag == "" {
			c.nGen++
			tag = "amq.ctag-sink-" + strconv.Itoa(c.nGen)
		}
		stop := make(chan struct{})
		ch.consumers[tag] = stop
		if !m.NoWait {
			c.reply(id, &amqp.BasicConsumeOk{ConsumerTag: tag})
		}
		// The consume-ok goes out before any delivery.
		c.write(c.out)
		c.out = c.out[:0]
		go c.push(ch, tag, m.NoAck, stop)
	case *amqp.BasicCancel:
		if stop, ok := ch.consumers[m.ConsumerTag]; ok {
			close(stop)
			delete(ch.consumers, m.ConsumerTag)
		}
		if !m.NoWait {
			c.reply(id, &amqp.BasicCancelOk{ConsumerTag: m.ConsumerTag})
		}
	case *amqp.BasicRecover:
		c.reply(id, &amqp.BasicRecoverOk{})
	case *amqp.TxSelect:
		c.reply(id, &amqp.TxSelectOk{})
	case *amqp.TxCommit:
		c.reply(id, &amqp.TxCommitOk{})
	case *amqp.TxRollback:
		c.reply(id, &amqp.TxRollbackOk{})
	}
	return true
}

func (c *sinkConn) published(ch *sinkChan) {
	ch.state = 0
	c.s.published.Add(1)
	if ch.confirm {
		if ch.pubTag == ch.ackedPub {
			c.dirty = append(c.dirty, ch)
		}
		ch.pubTag++
	}
}

func (c *sinkConn) closeChan(ch *sinkChan) {
	for tag, stop := range ch.consumers {
		close(stop)
		delete(ch.consumers, tag)
	}
	close(ch.closed)
	delete(c.chans, ch.id)
}

// push writes deliveries to one consumer until it is cancelled, its
// channel or connection closes, or a write fails. Each delivery is a copy
// of a pre-encoded template with its delivery tag and send time patched.
func (c *sinkConn) push(ch *sinkChan, ctag string, noAck bool, stop chan struct{}) {
	body := make([]byte, c.s.size)
	var tmpl []byte
	tmpl = amqp.AppendMethodFrame(tmpl, ch.id, &amqp.BasicDeliver{ConsumerTag: ctag, RoutingKey: "sink"})
	tagOff := 7 + 4 + 1 + len(ctag)
	tmpl = amqp.AppendHeaderFrame(tmpl, ch.id, amqp.ClassBasic, uint64(len(body)), nil)
	bodyOff := len(tmpl) + 7
	tmpl = amqp.AppendBodyFrames(tmpl, ch.id, body, c.frameMax)
	const batchBytes = 64 << 10
	perBatch := max(1, batchBytes/len(tmpl))
	buf := make([]byte, 0, perBatch*len(tmpl))
	for {
		select {
		case <-stop:
			return
		case <-ch.closed:
			return
		case <-c.done:
			return
		default:
		}
		n := perBatch
		if pf := uint64(ch.prefetch.Load()); !noAck && pf > 0 {
			inFlight := ch.nextTag.Load() - ch.acked.Load()
			if inFlight >= pf {
				select {
				case <-ch.ackSignal:
				case <-stop:
					return
				case <-ch.closed:
					return
				case <-c.done:
					return
				}
				continue
			}
			n = min(n, int(pf-inFlight))
		}
		now := uint64(time.Now().UnixNano())
		first := ch.nextTag.Add(uint64(n)) - uint64(n) + 1
		buf = buf[:0]
		for i := 0; i < n; i++ {
			start := len(buf)
			buf = append(buf, tmpl...)
			binary.BigEndian.PutUint64(buf[start+tagOff:], first+uint64(i))
			binary.BigEndian.PutUint64(buf[start+bodyOff:], now)
		}
		if err := c.write(buf); err != nil {
			return
		}
		c.s.delivered.Add(uint64(n))
	}
}
