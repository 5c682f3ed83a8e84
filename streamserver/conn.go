package streamserver

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/streamlog"
	sp "github.com/warrenmq/warren/streamproto"
)

// conn is one stream-protocol connection.
type conn struct {
	s       *Server
	nc      net.Conn
	id      uint64
	started time.Time

	// set during the handshake, by the reader
	peer      map[string]string
	user      string
	vhost     *broker.VHost
	frameMax  uint32
	heartbeat time.Duration
	authed    bool
	opened    bool
	mech      string
	deliverV2 bool

	mu          sync.Mutex
	out         []byte     // frames being added (send)
	outq        []outPiece // complete output before out, in order
	outBytes    int        // bytes in outq
	room        *sync.Cond // subscriptions wait here while out is full
	confirmed   *sync.Cond // the reader waits here beyond maxUnconfirmed
	unconfirmed int
	closed      bool
	pubs        map[uint8]*publisher
	subs        map[uint8]*subscription
	watched     map[*broker.Queue]bool // streams watch watches
	wake        chan struct{}
	done        chan struct{}

	// counters for the management API
	recvBytes, sentBytes atomic.Uint64
	published, confirms  atomic.Uint64
}

type publisher struct {
	id     uint8
	ref    string
	stream string
	q      *broker.Queue
	// counters
	published, confirmed, errored atomic.Uint64
}

// errClose ends a connection with a Close frame of code and reason.
type errClose struct {
	code   uint16
	reason string
}

func (e *errClose) Error() string {
	return fmt.Sprintf("stream connection closed: %d %s", e.code, e.reason)
}

func (c *conn) serve() {
	defer c.s.dropConn(c)
	defer func() {
		// A bug must cost this connection only, never the broker.
		if r := recover(); r != nil {
			c.s.log.Error("stream connection failed: internal error", "conn", c.id, "panic", r, "stack", string(debug.Stack()))
			c.shutdown()
		}
	}()
	go c.writeLoop()
	err := c.readLoop()
	var ec *errClose
	if errors.As(err, &ec) {
		c.send(func(e *sp.Enc) {
			e.Start(sp.KeyClose, 1)
			e.U32(0)
			e.U16(ec.code)
			e.Str(ec.reason)
			e.Finish()
		})
		c.flushAndWait(2 * time.Second)
	}
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		c.s.log.Debug("stream connection ended", "conn", c.id, "remote", c.nc.RemoteAddr().String(), "err", err)
	}
	c.shutdown()
}

// shutdown stops the subscriptions and the writer and closes the socket.
func (c *conn) shutdown() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	subs := make([]*subscription, 0, len(c.subs))
	for _, sub := range c.subs {
		subs = append(subs, sub)
	}
	c.subs = map[uint8]*subscription{}
	c.room.Broadcast()
	c.confirmed.Broadcast()
	c.mu.Unlock()
	for _, sub := range subs {
		sub.stop()
	}
	close(c.done)
	c.nc.Close()
}

// send appends a frame to the output.
func (c *conn) send(f func(e *sp.Enc)) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	e := sp.Enc{B: c.out}
	f(&e)
	c.out = e.B
	c.mu.Unlock()
	c.poke()
}

func (c *conn) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// outPiece is a part of the output: a frame's bytes, or a chunk's data
// in the buffer it was read into from the files (pooled: the writer
// returns it once sent), so a delivered chunk is not copied again before
// the socket.
type outPiece struct {
	b      []byte
	pooled *[]byte
}

// chunkBufs are the buffers subscriptions read chunks into.
var chunkBufs = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// pending is the output queued (outq and out), for the high-water mark.
func (c *conn) pending() int { return c.outBytes + len(c.out) }

// writeLoop writes the output to the socket, the pieces queued together
// in one vectored write.
func (c *conn) writeLoop() {
	var buf []byte
	var q []outPiece
	var bufs net.Buffers
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		for {
			c.mu.Lock()
			q = append(q[:0], c.outq...)
			clear(c.outq)
			c.outq, c.outBytes = c.outq[:0], 0
			small := len(c.out) > 0
			if small {
				q = append(q, outPiece{b: c.out})
				c.out = buf[:0]
			}
			c.room.Broadcast()
			c.mu.Unlock()
			if len(q) == 0 {
				break
			}
			bufs = bufs[:0]
			for _, p := range q {
				bufs = append(bufs, p.b)
			}
			c.nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			n, err := bufs.WriteTo(c.nc)
			c.sentBytes.Add(uint64(n))
			for _, p := range q {
				if p.pooled != nil && cap(*p.pooled) <= 4<<20 {
					*p.pooled = (*p.pooled)[:0]
					chunkBufs.Put(p.pooled)
				}
			}
			if small {
				buf = q[len(q)-1].b[:0] // out's buffer, written: reused
				if cap(buf) > outHighWater {
					buf = nil
				}
			}
			clear(q)
			clear(bufs)
			if err != nil {
				c.nc.Close()
				return
			}
		}
	}
}

// flushAndWait gives the writer up to d to send what is queued.
func (c *conn) flushAndWait(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		n := c.pending()
		c.mu.Unlock()
		if n == 0 {
			time.Sleep(5 * time.Millisecond) // the last write
			return
		}
		c.poke()
		time.Sleep(2 * time.Millisecond)
	}
}

func (c *conn) readLoop() error {
	r := sp.NewReader(c.nc, preOpenFrameMax)
	for {
		if c.heartbeat > 0 {
			c.nc.SetReadDeadline(time.Now().Add(2*c.heartbeat + 5*time.Second))
		} else if !c.opened {
			c.nc.SetReadDeadline(time.Now().Add(30 * time.Second)) // the handshake
		} else {
			c.nc.SetReadDeadline(time.Time{})
		}
		f, err := r.Next()
		if errors.Is(err, sp.ErrFrameTooLarge) {
			return &errClose{sp.FrameTooLarge, "frame too large"}
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return &errClose{sp.UnknownFrame, "heartbeat timeout"}
			}
			return err
		}
		c.recvBytes.Add(uint64(len(f.Body) + 8))
		if err := c.handle(f); err != nil {
			return err
		}
		if c.opened {
			r.Max = c.frameMax
		}
	}
}

// handle runs one command.
func (c *conn) handle(f sp.Frame) error {
	d := sp.NewDec(f.Body)
	if !c.opened {
		switch f.Key {
		case sp.KeyPeerProperties, sp.KeySaslHandshake, sp.KeySaslAuthenticate, sp.KeyTuneResponse, sp.KeyOpen,
			sp.KeyClose, sp.KeyHeartbeat, sp.KeyCloseResponse:
		default:
			// Commands before the connection is open are refused, as
			// RabbitMQ refuses them.
			return &errClose{sp.UnknownFrame, "command " + sp.KeyName(f.Key) + " before the connection is open"}
		}
		if (f.Key == sp.KeyOpen || f.Key == sp.KeyTuneResponse) && !c.authed {
			return &errClose{sp.UnknownFrame, "command " + sp.KeyName(f.Key) + " before authentication"}
		}
	}
	switch f.Key {
	case sp.KeyHeartbeat:
		return nil
	case sp.KeyCloseResponse:
		return io.EOF
	case sp.KeyTuneResponse:
		fm, hb := d.U32(), d.U32()
		if d.Err() != nil {
			return &errClose{sp.UnknownFrame, "malformed tune"}
		}
		if fm == 0 || fm > c.s.cfg.FrameMax {
			fm = c.s.cfg.FrameMax
		}
		c.frameMax = max(fm, preOpenFrameMax)
		c.heartbeat = time.Duration(hb) * time.Second
		if c.heartbeat > 0 {
			go c.heartbeats()
		}
		return nil
	case sp.KeyPublish:
		return c.publish(f.Version, d)
	case sp.KeyCredit:
		return c.credit(d)
	case sp.KeyStoreOffset:
		return c.storeOffset(d)
	case sp.KeyConsumerUpdateResponse:
		return c.consumerUpdateResponse(d)
	}
	if f.Key&sp.ResponseBit != 0 {
		return nil // an answer nobody waits for
	}
	corr := d.U32()
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed " + sp.KeyName(f.Key)}
	}
	switch f.Key {
	case sp.KeyPeerProperties:
		return c.peerProperties(corr, d)
	case sp.KeySaslHandshake:
		c.send(func(e *sp.Enc) {
			e.Response(f.Key, corr, sp.OK)
			e.Strs([]string{"PLAIN", "AMQPLAIN"})
			e.Finish()
		})
		return nil
	case sp.KeySaslAuthenticate:
		return c.authenticate(corr, d)
	case sp.KeyOpen:
		return c.open(corr, d)
	case sp.KeyClose:
		c.respond(f.Key, corr, sp.OK)
		c.flushAndWait(time.Second)
		return io.EOF
	case sp.KeyDeclarePublisher:
		return c.declarePublisher(corr, d)
	case sp.KeyDeletePublisher:
		return c.deletePublisher(corr, d)
	case sp.KeyQueryPublisherSequence:
		return c.queryPublisherSequence(corr, d)
	case sp.KeySubscribe:
		return c.subscribe(corr, d)
	case sp.KeyUnsubscribe:
		return c.unsubscribe(corr, d)
	case sp.KeyQueryOffset:
		return c.queryOffset(corr, d)
	case sp.KeyCreate:
		return c.create(corr, d)
	case sp.KeyDelete:
		return c.deleteStream(corr, d)
	case sp.KeyMetadata:
		return c.metadata(corr, d)
	case sp.KeyStreamStats:
		return c.streamStats(corr, d)
	case sp.KeyRoute:
		return c.route(corr, d)
	case sp.KeyPartitions:
		return c.partitions(corr, d)
	case sp.KeyCreateSuperStream:
		return c.createSuperStream(corr, d)
	case sp.KeyDeleteSuperStream:
		return c.deleteSuperStream(corr, d)
	case sp.KeyExchangeCommandVersions:
		return c.exchangeCommandVersions(corr, d)
	case sp.KeyResolveOffsetSpec:
		return c.resolveOffsetSpec(corr, d)
	}
	return &errClose{sp.UnknownFrame, "unknown command " + sp.KeyName(f.Key)}
}

func (c *conn) respond(key uint16, corr uint32, code uint16) {
	c.send(func(e *sp.Enc) {
		e.Response(key, corr, code)
		e.Finish()
	})
}

func (c *conn) heartbeats() {
	t := time.NewTicker(c.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			c.send(func(e *sp.Enc) {
				e.Start(sp.KeyHeartbeat, 1)
				e.Finish()
			})
		}
	}
}

// --- handshake ---

func (c *conn) peerProperties(corr uint32, d *sp.Dec) error {
	c.peer = d.Map()
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed peer properties"}
	}
	props := map[string]string{"product": "Warren", "version": c.s.cfg.Version, "platform": "Go",
		"copyright": "Warren authors", "information": "Licensed under the MPL 2.0", "cluster_name": c.s.b.ClusterName()}
	keys := []string{"product", "version", "platform", "copyright", "information", "cluster_name"}
	c.send(func(e *sp.Enc) {
		e.Response(sp.KeyPeerProperties, corr, sp.OK)
		e.Map(keys, props)
		e.Finish()
	})
	return nil
}

func (c *conn) authenticate(corr uint32, d *sp.Dec) error {
	mech := d.S()
	resp := d.Bytes()
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed sasl_authenticate"}
	}
	var user, pass string
	switch mech {
	case "PLAIN":
		parts := bytes.SplitN(resp, []byte{0}, 3)
		if len(parts) != 3 {
			c.respond(sp.KeySaslAuthenticate, corr, sp.SASLError)
			return &errClose{sp.SASLError, "malformed PLAIN response"}
		}
		user, pass = string(parts[1]), string(parts[2])
	case "AMQPLAIN":
		t, _, err := amqp.DecodeTable(append(binary.BigEndian.AppendUint32(nil, uint32(len(resp))), resp...))
		if err != nil {
			c.respond(sp.KeySaslAuthenticate, corr, sp.SASLError)
			return &errClose{sp.SASLError, "malformed AMQPLAIN response"}
		}
		user, _ = t["LOGIN"].(string)
		pass, _ = t["PASSWORD"].(string)
	default:
		c.respond(sp.KeySaslAuthenticate, corr, sp.SASLMechanismUnsupported)
		return nil
	}
	if _, ok := c.s.b.Authenticate(user, pass); !ok {
		c.respond(sp.KeySaslAuthenticate, corr, sp.AuthenticationFailure)
		c.flushAndWait(time.Second)
		return io.EOF
	}
	if slices.Contains(c.s.cfg.LoopbackUsers, user) && !isLoopback(c.nc.RemoteAddr()) {
		c.respond(sp.KeySaslAuthenticate, corr, sp.AuthenticationLoopback)
		c.flushAndWait(time.Second)
		return io.EOF
	}
	c.user, c.authed, c.mech = user, true, mech
	c.respond(sp.KeySaslAuthenticate, corr, sp.OK)
	// the server's tune follows a successful authentication
	hb := uint32(c.s.cfg.Heartbeat / time.Second)
	c.send(func(e *sp.Enc) {
		e.Start(sp.KeyTune, 1)
		e.U32(c.s.cfg.FrameMax)
		e.U32(hb)
		e.Finish()
	})
	return nil
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

func (c *conn) open(corr uint32, d *sp.Dec) error {
	name := d.S()
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed open"}
	}
	v := c.s.b.VHost(name)
	if v == nil || !c.s.b.CanAccessVHost(c.user, name) {
		c.respond(sp.KeyOpen, corr, sp.VirtualHostAccessFailure)
		c.flushAndWait(time.Second)
		return io.EOF
	}
	c.mu.Lock()
	c.vhost, c.opened = v, true
	c.mu.Unlock()
	if c.frameMax == 0 {
		c.frameMax = c.s.cfg.FrameMax
	}
	host, port := c.s.advertised(c.nc)
	c.send(func(e *sp.Enc) {
		e.Response(sp.KeyOpen, corr, sp.OK)
		e.Map([]string{"advertised_host", "advertised_port"}, map[string]string{"advertised_host": host, "advertised_port": port})
		e.Finish()
	})
	return nil
}

func (c *conn) exchangeCommandVersions(corr uint32, d *sp.Dec) error {
	n := d.Count(6)
	for range n {
		key, _, maxV := d.U16(), d.U16(), d.U16()
		if key == sp.KeyDeliver && maxV >= 2 {
			c.deliverV2 = true
		}
	}
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed exchange_command_versions"}
	}
	c.send(func(e *sp.Enc) {
		e.Response(sp.KeyExchangeCommandVersions, corr, sp.OK)
		keys := []uint16{sp.KeyDeclarePublisher, sp.KeyPublish, sp.KeyQueryPublisherSequence, sp.KeyDeletePublisher,
			sp.KeySubscribe, sp.KeyDeliver, sp.KeyCredit, sp.KeyStoreOffset, sp.KeyQueryOffset, sp.KeyUnsubscribe,
			sp.KeyCreate, sp.KeyDelete, sp.KeyMetadata, sp.KeyMetadataUpdate, sp.KeyPeerProperties, sp.KeySaslHandshake,
			sp.KeySaslAuthenticate, sp.KeyTune, sp.KeyOpen, sp.KeyClose, sp.KeyHeartbeat, sp.KeyRoute, sp.KeyPartitions,
			sp.KeyConsumerUpdate, sp.KeyExchangeCommandVersions, sp.KeyStreamStats, sp.KeyCreateSuperStream,
			sp.KeyDeleteSuperStream, sp.KeyResolveOffsetSpec}
		e.U32(uint32(len(keys)))
		for _, k := range keys {
			e.U16(k)
			e.U16(1)
			if k == sp.KeyPublish || k == sp.KeyDeliver {
				e.U16(2)
			} else {
				e.U16(1)
			}
		}
		e.Finish()
	})
	return nil
}

// --- streams ---

// stream finds a stream the user may access with a; code is the
// protocol's answer when not.
func (c *conn) stream(name string, a broker.Access) (*broker.Queue, uint16) {
	q := c.vhost.Stream(name)
	if q == nil {
		return nil, sp.StreamDoesNotExist
	}
	if !c.s.b.Check(c.user, c.vhost.Name, a, name) {
		return nil, sp.AccessRefused
	}
	return q, sp.OK
}

// streamArgs are the Create arguments RabbitMQ's stream plugin accepts,
// as queue arguments.
var streamArgs = map[string]bool{"max-length-bytes": true, "max-age": true, "stream-max-segment-size-bytes": true,
	"initial-cluster-size": true, "queue-leader-locator": true, "stream-filter-size-bytes": true}

func (c *conn) create(corr uint32, d *sp.Dec) error {
	name := d.S()
	args := d.Map()
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed create"}
	}
	code := c.createStream(name, args)
	c.respond(sp.KeyCreate, corr, code)
	return nil
}

func (c *conn) createStream(name string, args map[string]string) uint16 {
	if name == "" || len(name) > 255 || strings.HasPrefix(name, "amq.") {
		return sp.PreconditionFailed
	}
	if !c.s.b.Check(c.user, c.vhost.Name, broker.Configure, name) {
		return sp.AccessRefused
	}
	qargs := amqp.Table{"x-queue-type": "stream"}
	for k, v := range args {
		if !streamArgs[k] {
			return sp.PreconditionFailed
		}
		switch k {
		case "max-age", "queue-leader-locator":
			qargs["x-"+k] = v
		default:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return sp.PreconditionFailed
			}
			qargs["x-"+k] = n
		}
	}
	if q := c.vhost.Queue(name); q != nil {
		if !q.IsStream() {
			return sp.PreconditionFailed
		}
	}
	existed := c.vhost.Queue(name) != nil
	_, _, _, err := c.vhost.DeclareQueue(broker.QueueSpec{Name: name, Durable: true, Args: qargs}, false)
	switch {
	case err != nil:
		return sp.PreconditionFailed
	case existed:
		return sp.StreamAlreadyExists
	}
	return sp.OK
}

func (c *conn) deleteStream(corr uint32, d *sp.Dec) error {
	name := d.S()
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed delete"}
	}
	if c.vhost.Stream(name) == nil {
		c.respond(sp.KeyDelete, corr, sp.StreamDoesNotExist)
		return nil
	}
	if !c.s.b.Check(c.user, c.vhost.Name, broker.Configure, name) {
		c.respond(sp.KeyDelete, corr, sp.AccessRefused)
		return nil
	}
	if _, err := c.vhost.DeleteQueue(name, 0, false, false); err != nil {
		c.respond(sp.KeyDelete, corr, sp.InternalError)
		return nil
	}
	c.respond(sp.KeyDelete, corr, sp.OK)
	return nil
}

func (c *conn) metadata(corr uint32, d *sp.Dec) error {
	names := d.Strs()
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed metadata"}
	}
	host, portS := c.s.advertised(c.nc)
	port, _ := strconv.Atoi(portS)
	// The endpoints: this node's as Open gave it (the Go client insists
	// on the same pair), the other members' as they advertise them.
	type endpoint struct {
		host string
		port int
	}
	self := c.s.b.Node() // "" on a single node
	eps := []endpoint{{host, port}}
	refs := map[string]uint16{self: 0}
	ref := func(node string) (uint16, bool) {
		if r, ok := refs[node]; ok {
			return r, true
		}
		h, p, ok := c.s.b.StreamEndpoint(node)
		if !ok || len(eps) >= 0xfffe {
			return 0, false
		}
		refs[node] = uint16(len(eps))
		eps = append(eps, endpoint{h, p})
		return refs[node], true
	}
	type answer struct {
		code     uint16
		leader   uint16
		replicas []uint16
	}
	answers := make([]answer, len(names))
	for i, n := range names {
		q := c.vhost.Stream(n)
		if q == nil {
			answers[i] = answer{code: sp.StreamDoesNotExist, leader: 0xffff}
			continue
		}
		a := answer{code: sp.OK, leader: 0xffff}
		leader, replicas := q.StreamMembers()
		if r, ok := ref(leader); ok && (leader != "" || self == "") {
			a.leader = r
		}
		for _, m := range replicas {
			if r, ok := ref(m); ok {
				a.replicas = append(a.replicas, r)
			}
		}
		if a.leader == 0xffff {
			a.code = sp.StreamNotAvailable
		}
		answers[i] = a
	}
	c.send(func(e *sp.Enc) {
		e.Start(sp.KeyMetadata|sp.ResponseBit, 1)
		e.U32(corr)
		e.U32(uint32(len(eps)))
		for i, ep := range eps {
			e.U16(uint16(i))
			e.Str(ep.host)
			e.U32(uint32(ep.port))
		}
		e.U32(uint32(len(names)))
		for i, n := range names {
			a := answers[i]
			e.Str(n)
			e.U16(a.code)
			e.U16(a.leader)
			e.U32(uint32(len(a.replicas)))
			for _, r := range a.replicas {
				e.U16(r)
			}
		}
		e.Finish()
	})
	return nil
}

// resolveOffsetSpec is 4.3's ResolveOffsetSpec: where a subscription with
// that offset specification (and filter properties) would start, as an
// offset (rabbit_stream_reader over osiris:resolve_offset_spec): first,
// the first chunk's id; last, the last chunk's; next, the offset after
// the last committed record; an offset, itself within the stream; a
// timestamp, the first chunk written at or after it. With filter.N a
// position moves on to the first chunk that may match; past the end it
// is next. An empty stream resolves everything to its next offset.
func (c *conn) resolveOffsetSpec(corr uint32, d *sp.Dec) error {
	name := d.S()
	kind := d.U16()
	var value int64
	if kind == broker.OffsetAbsolute || kind == broker.OffsetTimestamp {
		value = int64(d.U64())
	}
	props := d.Map()
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed resolve_offset_spec"}
	}
	answer := func(code uint16, off uint64) {
		c.send(func(e *sp.Enc) {
			e.Response(sp.KeyResolveOffsetSpec, corr, code)
			e.U16(broker.OffsetAbsolute) // the resolved value is an offset
			e.U64(off)
			e.Finish()
		})
	}
	q, code := c.stream(name, broker.Read)
	if q == nil {
		answer(code, 0)
		return nil
	}
	if !q.StreamHere() {
		answer(sp.StreamNotAvailable, 0)
		return nil
	}
	if kind < broker.OffsetFirst || kind > broker.OffsetTimestamp {
		answer(sp.NoOffset, 0)
		return nil
	}
	off, err := resolveOffset(q, kind, value, props)
	if err != nil {
		answer(sp.NoOffset, 0)
		return nil
	}
	answer(sp.OK, off)
	return nil
}

// resolveOffset is the offset a reader of q starting at (kind, value)
// reads first (resolveOffsetSpec).
func resolveOffset(q *broker.Queue, kind uint16, value int64, props map[string]string) (uint64, error) {
	l := q.StreamLog()
	in := l.Info()
	next := in.Committed
	if kind == broker.OffsetNext || in.Chunks == 0 {
		return next, nil
	}
	filters, unfiltered := filtersOf(props)
	if kind == broker.OffsetAbsolute && len(filters) == 0 {
		return min(max(uint64(max(value, 0)), in.FirstOffset), next), nil
	}
	pos, err := q.StreamPosition(kind, value)
	if err != nil {
		return 0, err
	}
	r := l.NewReader(pos)
	defer r.Close()
	for {
		ch, err := r.Next()
		if errors.Is(err, streamlog.ErrNoChunk) {
			return next, nil
		}
		if err != nil {
			return 0, err
		}
		if ch.Type != streamlog.ChunkUser {
			continue
		}
		if len(filters) > 0 && !streamlog.Matches(ch.Bloom(), filters, unfiltered) {
			continue
		}
		if kind == broker.OffsetAbsolute {
			return max(uint64(max(value, 0)), ch.ID), nil
		}
		return ch.ID, nil
	}
}

func (c *conn) streamStats(corr uint32, d *sp.Dec) error {
	name := d.S()
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed stream_stats"}
	}
	q, code := c.stream(name, broker.Read)
	if q == nil {
		c.respond(sp.KeyStreamStats, corr, code)
		return nil
	}
	in := q.StreamLog().Info()
	first, last, committed := int64(-1), int64(-1), int64(-1)
	if in.Chunks > 0 {
		first, last = int64(in.FirstOffset), int64(in.LastChunkID)
		committed = last
	}
	c.send(func(e *sp.Enc) {
		e.Response(sp.KeyStreamStats, corr, sp.OK)
		e.U32(3)
		for _, kv := range []struct {
			k string
			v int64
		}{{"first_chunk_id", first}, {"committed_chunk_id", committed}, {"last_chunk_id", last}} {
			e.Str(kv.k)
			e.U64(uint64(kv.v))
		}
		e.Finish()
	})
	return nil
}

// --- publishing ---

func (c *conn) declarePublisher(corr uint32, d *sp.Dec) error {
	id := d.U8()
	ref := d.S()
	name := d.S()
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed declare_publisher"}
	}
	if len(ref) > streamlog.MaxReference {
		c.respond(sp.KeyDeclarePublisher, corr, sp.PreconditionFailed)
		return nil
	}
	q, code := c.stream(name, broker.Write)
	if q == nil {
		c.respond(sp.KeyDeclarePublisher, corr, code)
		return nil
	}
	c.mu.Lock()
	_, taken := c.pubs[id]
	for _, p := range c.pubs {
		if ref != "" && p.ref == ref && p.stream == name {
			taken = true
		}
	}
	if !taken {
		c.pubs[id] = &publisher{id: id, ref: ref, stream: name, q: q}
	}
	c.mu.Unlock()
	if taken {
		c.respond(sp.KeyDeclarePublisher, corr, sp.PreconditionFailed)
		return nil
	}
	c.watch(q, name)
	c.respond(sp.KeyDeclarePublisher, corr, sp.OK)
	return nil
}

func (c *conn) deletePublisher(corr uint32, d *sp.Dec) error {
	id := d.U8()
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed delete_publisher"}
	}
	c.mu.Lock()
	_, ok := c.pubs[id]
	delete(c.pubs, id)
	c.mu.Unlock()
	if !ok {
		c.respond(sp.KeyDeletePublisher, corr, sp.PublisherDoesNotExist)
		return nil
	}
	c.respond(sp.KeyDeletePublisher, corr, sp.OK)
	return nil
}

func (c *conn) queryPublisherSequence(corr uint32, d *sp.Dec) error {
	ref := d.S()
	name := d.S()
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed query_publisher_sequence"}
	}
	q, code := c.stream(name, broker.Read)
	var seq uint64
	if q != nil {
		seq, _ = q.StreamWriterSeq(ref)
	}
	c.send(func(e *sp.Enc) {
		e.Response(sp.KeyQueryPublisherSequence, corr, code)
		e.U64(seq)
		e.Finish()
	})
	return nil
}

// publish takes a Publish frame: its messages go to the stream's writer
// as one piece of work, confirmed together once on disk.
func (c *conn) publish(version uint16, d *sp.Dec) error {
	id := d.U8()
	n := d.Count(12)
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed publish"}
	}
	c.mu.Lock()
	p := c.pubs[id]
	c.mu.Unlock()
	ids := make([]uint64, 0, n)
	op := &broker.StreamPublish{IDs: ids}
	// one copy of the frame's entries, sliced per entry
	body := make([]byte, 0, d.Len())
	for range n {
		pid := d.U64()
		if version >= 2 {
			v, _ := d.Str() // the filter value: into the chunk's Bloom filter
			op.Filters = append(op.Filters, v)
		}
		start := len(body)
		var recs uint16
		if d.Peek()&0x80 == 0 {
			size := d.U32()
			body = streamlog.AppendEntry(body, d.Take(int(size)))
			recs = 1
		} else {
			hdr := d.U8()
			count := d.U16()
			plain := d.U32()
			size := d.U32()
			body = streamlog.AppendSubBatch(body, hdr>>4&7, count, plain, d.Take(int(size)))
			recs = count
		}
		if d.Err() != nil {
			break
		}
		op.IDs = append(op.IDs, pid)
		op.Entries = append(op.Entries, body[start:len(body):len(body)])
		op.Records = append(op.Records, recs)
	}
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed publish"}
	}
	if len(op.IDs) == 0 {
		return nil
	}
	c.published.Add(uint64(len(op.IDs)))
	if p == nil {
		c.publishError(id, op.IDs, sp.PublisherDoesNotExist)
		return nil
	}
	p.published.Add(uint64(len(op.IDs)))
	c.s.published.Add(uint64(len(op.IDs)))
	op.Ref = p.ref
	idsDone := op.IDs
	op.Done = func(err error) {
		if err != nil {
			p.errored.Add(uint64(len(idsDone)))
			c.s.errored.Add(uint64(len(idsDone)))
			c.publishError(id, idsDone, sp.InternalError)
		} else {
			p.confirmed.Add(uint64(len(idsDone)))
			c.s.confirmed.Add(uint64(len(idsDone)))
			c.confirms.Add(uint64(len(idsDone)))
			c.send(func(e *sp.Enc) {
				e.Start(sp.KeyPublishConfirm, 1)
				e.U8(id)
				e.U32(uint32(len(idsDone)))
				for _, x := range idsDone {
					e.U64(x)
				}
				e.Finish()
			})
		}
		c.mu.Lock()
		c.unconfirmed -= len(idsDone)
		c.confirmed.Broadcast()
		c.mu.Unlock()
	}
	c.mu.Lock()
	c.unconfirmed += len(op.IDs)
	c.mu.Unlock()
	if !p.q.StreamPublish(op) {
		c.mu.Lock()
		c.unconfirmed -= len(op.IDs)
		c.mu.Unlock()
		c.publishError(id, op.IDs, sp.StreamNotAvailable)
		return nil
	}
	// Reading pauses while too many publishes wait for their confirms.
	c.mu.Lock()
	for c.unconfirmed > maxUnconfirmed && !c.closed {
		c.confirmed.Wait()
	}
	c.mu.Unlock()
	return nil
}

func (c *conn) publishError(id uint8, ids []uint64, code uint16) {
	c.send(func(e *sp.Enc) {
		e.Start(sp.KeyPublishError, 1)
		e.U8(id)
		e.U32(uint32(len(ids)))
		for _, x := range ids {
			e.U64(x)
			e.U16(code)
		}
		e.Finish()
	})
}

// --- offsets ---

func (c *conn) storeOffset(d *sp.Dec) error {
	ref := d.S()
	name := d.S()
	off := d.U64()
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed store_offset"}
	}
	if ref == "" || len(ref) > streamlog.MaxReference {
		return nil
	}
	if q, _ := c.stream(name, broker.Read); q != nil {
		q.StreamStoreOffset(ref, off)
	}
	return nil
}

func (c *conn) queryOffset(corr uint32, d *sp.Dec) error {
	ref := d.S()
	name := d.S()
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed query_offset"}
	}
	q, code := c.stream(name, broker.Read)
	var off uint64
	if q != nil {
		var ok bool
		if off, ok = q.StreamOffset(ref); !ok {
			code = sp.NoOffset
		}
	}
	c.send(func(e *sp.Enc) {
		e.Response(sp.KeyQueryOffset, corr, code)
		e.U64(off)
		e.Finish()
	})
	return nil
}

// watch sends MetadataUpdate when stream q goes away, and forgets the
// connection's publishers and subscriptions of it.
func (c *conn) watch(q *broker.Queue, name string) {
	c.mu.Lock()
	seen := c.watched[q]
	if c.watched == nil {
		c.watched = map[*broker.Queue]bool{}
	}
	c.watched[q] = true
	c.mu.Unlock()
	if seen {
		return // one watcher per stream forgets all its publishers and subscriptions
	}
	go func() {
		select {
		case <-c.done:
			return
		case <-q.StreamGone():
		}
		if c.s.b.Closed() {
			return
		}
		var subs []*subscription
		c.mu.Lock()
		delete(c.watched, q)
		for id, p := range c.pubs {
			if p.q == q {
				delete(c.pubs, id)
			}
		}
		for id, sub := range c.subs {
			if sub.q == q {
				delete(c.subs, id)
				subs = append(subs, sub)
			}
		}
		c.mu.Unlock()
		for _, sub := range subs {
			sub.stop()
		}
		c.send(func(e *sp.Enc) {
			e.Start(sp.KeyMetadataUpdate, 1)
			e.U16(sp.StreamNotAvailable)
			e.Str(name)
			e.Finish()
		})
	}()
}
