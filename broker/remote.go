package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/amqp"
)

// Remote queues (issue 13): the data plane of "any queue from any node".
//
// Every node holds every queue's record (definitions are replicated), and
// routes locally. A queue whose Home is another node is a remote queue on
// this node: its messages, consumers and machine live on the home node,
// and this node's Queue forwards what clients do with it there, through
// Peers (the inter-node transport, implemented by the cluster glue):
//
//   - publish: enqueue messages travel one-way (Send, ordered per node,
//     pipelined: no round trip on the publisher's goroutine); the home
//     answers each with an enqueued message once the message is on disk
//     (durable queue, persistent message: after its fsync) or enqueued;
//     the publisher's Durability waits for those answers (durable.go). A
//     reject-publish refusal, a failure or the home going down makes the
//     wait fail, so the confirm is a nack.
//   - consume: a call registers a proxy consumer on the home, with the
//     channel's prefetch as its credit; deliveries stream back one-way and
//     are handed to the local Sink; a delivery the Sink refuses is kept in
//     a buffer and offered again on Dispatch (so none is lost and the
//     prefetch holds); acks, rejects and requeues travel back one-way; the
//     home restores the consumer's credit as they arrive.
//   - basic.get, purge, counts (declare-ok), delete and browse are calls.
//
// Node loss: on the home, PeerState(node, false) removes that node's proxy
// consumers and returns every message the node held unacked, redelivered
// (as RabbitMQ does for a dead channel). On a client's node,
// PeerState(home, false) cancels the local consumers of queues homed
// there (basic.cancel; RabbitMQ's rabbit_channel
// handle_consuming_queue_down_or_eol re-consumes, which fails for a
// classic queue whose node is down, and then cancels) and fails the
// pending publish waits (nacks). While the home is down, declare,
// consume, get, purge and delete answer RabbitMQ's 404 for an absent
// queue (rabbit_amqqueue:priv_absent).

// Peers is how a broker reaches the other nodes of its cluster.
type Peers interface {
	// Call sends req to node's HandlePeerCall and returns its answer.
	Call(ctx context.Context, node string, req []byte) ([]byte, error)
	// Send sends msg one-way to node's HandlePeerMessage, ordered per
	// node; it may fail fast when the node is unreachable.
	Send(node string, msg []byte) error
	// Up reports whether node is reachable.
	Up(node string) bool
}

// SetPeers installs the inter-node link, before serving.
func (b *Broker) SetPeers(p Peers) {
	b.remote.mu.Lock()
	b.remote.peers = p
	b.remote.mu.Unlock()
}

// remoteCallTimeout bounds every call to another node.
const remoteCallTimeout = 5 * time.Second

// Message (one-way) and call opcodes.
const (
	opEnqueue  byte = 'E' // client node -> home: id, vhost, queue, message
	opEnqueued byte = 'e' // home -> client node: id, status
	opDeliver  byte = 'D' // home -> consumer node: cid, delivery, message
	opSettle   byte = 'S' // consumer node -> home: vhost, queue, kind, seqs
	opCancel   byte = 'C' // consumer node -> home: cid
	opCanceled byte = 'c' // home -> consumer node: cid (queue deleted)
	opBarrier  byte = 'b' // client node -> home: id, ahead of a call
	opStale    byte = 's' // consumer node -> home: cid unknown here (a previous run's)

	callConsume byte = 'K'
	callGet     byte = 'G'
	callPurge   byte = 'P'
	callCounts  byte = 'N'
	callDelete  byte = 'X'
	callBrowse  byte = 'B'
)

// Settle kinds of opSettle.
const (
	settleAck byte = iota
	settleReject
	settleRequeue
	settleRequeueFailed
)

// Statuses of opEnqueued.
const (
	enqOK byte = iota
	enqRejected
	enqFailed
	enqNoQueue
	// enqNotLeader: the node is not (or no longer) the quorum queue's
	// leader; the sender resends to the leader it learns (issue 14).
	enqNotLeader
)

// ErrRemoteRejected fails a publish wait when the home node refused the
// message (reject-publish overflow): the confirm is a nack.
var ErrRemoteRejected = errors.New("rejected by the queue's home node (overflow)")

// errRemoteFailed fails a publish wait when the home node could not take
// the message (disk error, queue gone, node down).
var errRemoteFailed = errors.New("the queue's home node did not take the message")

// remoteState is a broker's side of remote queues. mu is a leaf: it is
// taken under Queue.mu (a proxy sink's Deliver) and no other lock is
// taken while it is held.
type remoteState struct {
	// quorum queue publishes: enqueues received from other nodes, and
	// pending ones confirmed by a new leader's applied mark (tests and
	// figures).
	qqEnqIn, qqSettledByMark atomic.Uint64

	mu     sync.Mutex
	peers  Peers
	nextID uint64
	// client side: publish waits and consumers of remote queues.
	waits map[uint64]pubWait
	cons  map[uint64]*rconsumer
	// home side: proxy consumers for other nodes, and the deliveries
	// each node holds unacked.
	proxies map[proxyKey]*proxy
	held    map[string]map[heldKey]heldDelivery
	// routers for enqueues arriving from other nodes.
	routers sync.Pool
	// barriers: the highest barrier id handled per node, and a Cond (on
	// mu) for the calls waiting for theirs.
	barriers map[string]uint64
	barrierC *sync.Cond
	// outboxes: the lossless, ordered one-way messages per node (remoteout.go).
	outs map[string]*outbox
	// replicated quorum queues (qqclient.go): those this node publishes
	// to or consumes from, this run's publisher id and the last seq.
	qqs   map[*Queue]struct{}
	qqPub atomic.Uint64
	qqSeq atomic.Uint64
}

type pubWait struct {
	rw   *rwait
	node string
}

type proxyKey struct {
	node string
	cid  uint64
}

type heldKey struct {
	q   *Queue
	seq uint64
}

type heldDelivery struct {
	d Delivery
	p *proxy // nil for basic.get
}

// id returns a new id for a wait, a consumer or a barrier. Ids start at
// the clock's nanoseconds, so that a restarted node does not reuse the
// ids its previous run gave its peers.
func (rs *remoteState) id() uint64 {
	if rs.nextID == 0 {
		rs.nextID = uint64(time.Now().UnixNano())
	}
	rs.nextID++
	return rs.nextID
}

func (b *Broker) getPeers() Peers {
	b.remote.mu.Lock()
	defer b.remote.mu.Unlock()
	return b.remote.peers
}

// --- home node down ---

// homeDown is RabbitMQ's answer for a queue whose node is down
// (rabbit_amqqueue:priv_absent, nodedown).
func (q *Queue) homeDown() *amqp.Error {
	if q.Durable {
		return amqp.Errorf(amqp.NotFound, "home node '%s' of durable queue '%s' in vhost '%s' is down or inaccessible", q.HomeNode(), q.Name, q.vhost.Name)
	}
	return amqp.Errorf(amqp.NotFound, "home node '%s' of queue '%s' in vhost '%s' is down or inaccessible", q.HomeNode(), q.Name, q.vhost.Name)
}

// checkHome returns the error that makes q unusable now: a remote
// queue's home is down, a quorum queue has no leader (nil for a local
// queue).
func (q *Queue) checkHome() error { return q.typ().available() }

// available: the unavailable-queue error while the home is down.
func (k remoteType) available() error {
	q := k.q
	p := q.vhost.b.getPeers()
	if p == nil {
		return nil // no data plane wired (a definitions-only broker): nothing to check
	}
	if !p.Up(q.HomeNode()) {
		return q.homeDown()
	}
	return nil
}

// call runs a call on q's home node; a transport failure is the
// unavailable-queue error, an error the home answered keeps its code.
func (q *Queue) call(req []byte) (*msgDecoder, error) { return q.typ().callHome(req) }

func (k remoteType) callHome(req []byte) (*msgDecoder, error) { return k.q.callNode(k.q.Home, req) }

// homeLost: a remote queue's home is down.
func (k remoteType) homeLost() error { return k.q.homeDown() }

// homeAnswer: an error the home answered keeps its code.
func (remoteType) homeAnswer(err error) error { return err }

// callNode runs a call on node, q's home (or its leader); for a quorum
// queue, node unreachable or not its leader is errQQRetry (homeLost,
// homeAnswer).
func (q *Queue) callNode(node string, req []byte) (*msgDecoder, error) {
	p := q.vhost.b.getPeers()
	if p == nil || !p.Up(node) {
		return nil, q.typ().homeLost()
	}
	// Calls and one-way messages travel separately: a barrier sent
	// one-way ahead of the call, which the home waits for, keeps the
	// client's order (an ack or a requeue, then a get or a purge).
	rs := &q.vhost.b.remote
	rs.mu.Lock()
	bid := rs.id()
	rs.mu.Unlock()
	q.vhost.b.sendOrdered(node, binary.AppendUvarint([]byte{opBarrier}, bid))
	req = append(binary.AppendUvarint([]byte{req[0]}, bid), req[1:]...)
	ctx, cancel := context.WithTimeout(context.Background(), remoteCallTimeout)
	defer cancel()
	resp, err := p.Call(ctx, node, req)
	if err != nil {
		q.vhost.b.log.Warn("cluster: call to a queue's home node failed", "queue", q.Name, "vhost", q.vhost.Name, "home", node, "err", err)
		return nil, q.typ().homeLost()
	}
	d, err := decodeResult(resp)
	if err != nil {
		return nil, q.typ().homeAnswer(err)
	}
	return d, nil
}

// --- encoding ---

func (q *Queue) appendRef(b []byte, op byte) []byte {
	b = append(b, op)
	b = appendStr(b, q.vhost.Name)
	return appendStr(b, q.Name)
}

// appendResult starts a call's answer: 0 ok, or 1 and an AMQP error.
func appendResult(b []byte, err error) []byte {
	if err == nil {
		return append(b, 0)
	}
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		ae = &amqp.Error{Code: amqp.InternalError, Text: "INTERNAL_ERROR - " + err.Error()}
	}
	b = append(b, 1)
	b = binary.AppendUvarint(b, uint64(ae.Code))
	b = appendBool(b, ae.Hard)
	return appendStr(b, ae.Text)
}

func decodeResult(resp []byte) (*msgDecoder, error) {
	if len(resp) == 0 {
		return nil, errors.New("cluster: empty answer")
	}
	d := newDecoder(resp[1:])
	if resp[0] == 0 {
		return d, nil
	}
	code, hard, text := d.Uvarint(), d.Bool(), d.Str()
	if d.Err() != nil {
		return nil, d.Err()
	}
	return nil, &amqp.Error{Code: uint16(code), Hard: hard, Text: text}
}

// appendDelivery encodes a delivery's queue-side facts and its message.
func appendDelivery(b []byte, d *Delivery) []byte {
	b = binary.AppendUvarint(b, d.Seq)
	b = appendBool(b, d.Redelivered)
	b = binary.AppendUvarint(b, uint64(d.DeliveryCount))
	b = binary.AppendUvarint(b, uint64(d.AcquiredCount))
	b = binary.AppendVarint(b, d.ExpiresAt)
	return appendMessage(b, d.Msg)
}

func (q *Queue) decodeDelivery(d *msgDecoder, tag string) (Delivery, error) {
	dv := Delivery{Queue: q, ConsumerTag: tag}
	dv.Seq, dv.Redelivered = d.Uvarint(), d.Bool()
	dv.DeliveryCount, dv.AcquiredCount = uint32(d.Uvarint()), uint32(d.Uvarint())
	dv.ExpiresAt = d.Varint()
	if d.Err() != nil {
		return Delivery{}, d.Err()
	}
	m, err := decodeMessage(d.Rest())
	if err != nil {
		return Delivery{}, err
	}
	dv.Msg = m
	return dv, nil
}

// lookupRef finds the local queue a peer names.
func (b *Broker) lookupRef(d *msgDecoder) (*Queue, error) {
	vn, qn := d.Str(), d.Str()
	if d.Err() != nil {
		return nil, d.Err()
	}
	v := b.VHost(vn)
	if v == nil {
		return nil, amqp.Errorf(amqp.NotFound, "no vhost '%s'", vn)
	}
	q := v.Queue(qn)
	if q == nil {
		return nil, notFoundQueue(qn, vn)
	}
	if k := q.typ(); !k.here() {
		return nil, k.notHere()
	}
	return q, nil
}

// --- publish (client node) ---

// rwait is what a publish waits for from the home nodes of the remote
// queues it was routed to: one answer per queue.
type rwait struct {
	mu   sync.Mutex
	left int
	err  error
	cbs  []func(error)
	ch   chan struct{}
}

// add changes the count of answers awaited, on the publisher's
// goroutine while it routes (the wait is not yet handed out, so it
// cannot reach 0 for good before routing ends).
func (w *rwait) add(n int) {
	w.mu.Lock()
	w.left += n
	w.mu.Unlock()
}

func (w *rwait) done(err error) {
	w.mu.Lock()
	if err != nil && w.err == nil {
		w.err = err
	}
	w.left--
	if w.left != 0 {
		w.mu.Unlock()
		return
	}
	cbs, e := w.cbs, w.err
	w.cbs = nil
	if w.ch != nil {
		close(w.ch)
	}
	w.mu.Unlock()
	for _, f := range cbs {
		f(e)
	}
}

// notify calls f once every answer is in (at once if they are).
func (w *rwait) notify(f func(error)) {
	w.mu.Lock()
	if w.left <= 0 {
		e := w.err
		w.mu.Unlock()
		f(e)
		return
	}
	w.cbs = append(w.cbs, f)
	w.mu.Unlock()
}

func (w *rwait) wait(ctx context.Context) error {
	w.mu.Lock()
	if w.left <= 0 {
		e := w.err
		w.mu.Unlock()
		return e
	}
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	ch := w.ch
	w.mu.Unlock()
	select {
	case <-ch:
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PacedPeers is implemented by Peers whose one-way messages can wait for
// room on the link (the transport's SendWait).
type PacedPeers interface {
	SendWait(ctx context.Context, node string, msg []byte) error
}

// forwardWait bounds how long a publish waits for room on the link to
// its queue's home before it is dropped (a confirm is then a nack).
const forwardWait = 5 * time.Second

// sendPaced sends a publish to its home: it waits while the link is full,
// so that a publisher faster than the home node (or the link) is slowed
// down, as a local queue slows it, instead of its messages being dropped.
// No lock is held (Queue.enqueue forwards before locking).
func sendPaced(p Peers, node string, msg []byte) error {
	pp, ok := p.(PacedPeers)
	if !ok {
		return p.Send(node, msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), forwardWait)
	defer cancel()
	return pp.SendWait(ctx, node, msg)
}

// answerPeer sends a publish's answer (the confirm the publisher's node
// waits for). It runs on the message store's sync goroutine, so it must
// not wait; an answer that finds the link's queue full is sent by a
// goroutine that waits for room rather than lost (its publisher would
// wait for it until the link dropped).
func answerPeer(p Peers, node string, msg []byte) {
	err := p.Send(node, msg)
	pp, ok := p.(PacedPeers)
	if err == nil || !ok || !errors.Is(err, ErrLinkFull) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = pp.SendWait(ctx, node, msg)
	}()
}

// ErrLinkFull is what a Peers' Send wraps when its link to a node has no
// room now (the message was not sent; the node may still be reachable).
var ErrLinkFull = errors.New("link to the node is full")

// forward sends m to q's home node. r (nil for moves, which nobody
// confirms) collects the wait for the home's answer. Dead letters go
// through forwardDL instead (dlremote.go: at least once).
func (q *Queue) forward(m *Message, r *Router) enqueueResult {
	b := q.vhost.b
	rs := &b.remote
	var w *rwait
	if r != nil && !r.NoWait {
		if r.rw == nil {
			r.rw = &rwait{}
		}
		w = r.rw
		w.add(1) // answers for earlier queues of this publish may be arriving
	}
	rs.mu.Lock()
	p := rs.peers
	var id uint64
	if w != nil && p != nil {
		id = rs.id()
		if rs.waits == nil {
			rs.waits = map[uint64]pubWait{}
		}
		rs.waits[id] = pubWait{rw: w, node: q.HomeNode()}
	}
	rs.mu.Unlock()
	if p == nil {
		if w != nil {
			w.add(-1)
			r.failed = true
		}
		return enqueued
	}
	buf := make([]byte, 0, 32+len(q.vhost.Name)+len(q.Name)+len(m.Body)+len(m.Exchange)+len(m.RoutingKey)+64)
	buf = append(buf, opEnqueue)
	buf = binary.AppendUvarint(buf, id)
	buf = appendStr(buf, q.vhost.Name)
	buf = appendStr(buf, q.Name)
	buf = appendMessage(buf, m)
	if err := sendPaced(p, q.HomeNode(), buf); err != nil && w != nil {
		rs.mu.Lock()
		_, ok := rs.waits[id]
		delete(rs.waits, id)
		rs.mu.Unlock()
		if ok {
			w.add(-1)
			r.failed = true
		}
	}
	return enqueued
}

// enqueuedFromHome is the home's answer for publish wait id.
func (b *Broker) enqueuedFromHome(d *msgDecoder) {
	id, st := d.Uvarint(), d.Byte()
	if d.Err() != nil {
		return
	}
	rs := &b.remote
	rs.mu.Lock()
	pw, ok := rs.waits[id]
	delete(rs.waits, id)
	rs.mu.Unlock()
	if !ok {
		return
	}
	switch st {
	case enqOK:
		pw.rw.done(nil)
	case enqRejected:
		pw.rw.done(ErrRemoteRejected)
	case enqNoQueue:
		pw.rw.done(errRemoteNoQueue)
	default:
		pw.rw.done(errRemoteFailed)
	}
}

// --- publish (home node) ---

func (b *Broker) enqueueFromPeer(from string, d *msgDecoder) {
	id := d.Uvarint()
	q, err := b.lookupRef(d)
	var m *Message
	if err == nil {
		m, err = decodeMessage(d.Rest())
	}
	p := b.getPeers()
	answer := func(st byte) {
		if id == 0 || p == nil {
			return
		}
		var a [12]byte
		out := binary.AppendUvarint(append(a[:0], opEnqueued), id)
		answerPeer(p, from, append(out, st))
	}
	if err != nil {
		answer(enqNoQueue)
		return
	}
	if id == 0 {
		answer = nil
	}
	b.enqueueAnswered(q, m, answer)
}

// enqueueAnswered enqueues m from a peer into q, homed here, and calls
// answer (nil: nobody waits) with the outcome once it is durable. A
// quorum queue's enqueue goes through its leader (qqclient.go).
func (b *Broker) enqueueAnswered(q *Queue, m *Message, answer func(byte)) {
	r, _ := b.remote.routers.Get().(*Router)
	if r == nil {
		r = &Router{}
	}
	clear(r.logs)
	r.logs, r.failed, r.busy, r.rw, r.NoWait = r.logs[:0], false, false, nil, answer == nil
	res := q.enqueue(m, r)
	tok := b.durability(r.logs)
	if r.rw != nil {
		tok.rws = []*rwait{r.rw}
		r.rw = nil
	}
	failed := r.failed
	defer b.remote.routers.Put(r) // after Notify, which reads r.logs
	switch {
	case answer == nil:
	case res == rejectedOverflow:
		answer(enqRejected)
	case failed:
		answer(enqFailed)
	default:
		tok.Notify(func(err error) {
			switch {
			case err == nil:
				answer(enqOK)
			case errors.Is(err, ErrRemoteRejected):
				answer(enqRejected)
			default:
				answer(enqFailed)
			}
		})
	}
}

// --- consume (client node) ---

// rconsumer is a local consumer of a remote queue. Its fields are guarded
// by the remote queue's mu.
type rconsumer struct {
	id     uint64
	c      *Consumer
	q      *Queue
	active bool       // the home accepted it
	buf    []Delivery // deliveries its Sink could not take yet, in order
	gone   bool
	// a quorum queue's leg (qqclient.go): the epoch of this node's view
	// of the leader it is attached to (0 for other queues), and the node.
	epoch uint64
	node  string
}

// remoteQ is a remote queue's state on a client node (guarded by q.mu).
type remoteQ struct {
	cons map[uint64]*rconsumer
}

func (q *Queue) remoteLocked() *remoteQ {
	if q.rq == nil {
		q.rq = &remoteQ{cons: map[uint64]*rconsumer{}}
	}
	return q.rq
}

func (q *Queue) remoteAddConsumer(c *Consumer, added func()) error {
	if err := q.checkHome(); err != nil {
		return err
	}
	b := q.vhost.b
	rs := &b.remote
	rc := &rconsumer{c: c, q: q}
	rs.mu.Lock()
	rc.id = rs.id()
	if rs.cons == nil {
		rs.cons = map[uint64]*rconsumer{}
	}
	rs.cons[rc.id] = rc
	rs.mu.Unlock()
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		q.forgetConsumer(rc)
		return notFoundQueue(q.Name, q.vhost.Name)
	}
	q.remoteLocked().cons[rc.id] = rc
	q.mu.Unlock()

	req := q.appendRef(nil, callConsume)
	req = binary.AppendUvarint(req, rc.id)
	req = appendStr(req, c.Tag)
	req = appendBool(req, c.NoAck)
	req = appendBool(req, c.Exclusive)
	req = binary.AppendVarint(req, int64(c.Priority))
	req = binary.AppendUvarint(req, c.Owner)
	req = binary.AppendUvarint(req, uint64(max(c.Prefetch, 0)))
	req = amqp.AppendTable(req, c.Args)
	if _, err := q.call(req); err != nil {
		q.mu.Lock()
		delete(q.remoteLocked().cons, rc.id)
		rc.gone = true
		buf := rc.buf
		rc.buf = nil
		q.mu.Unlock()
		q.forgetConsumer(rc)
		q.returnDeliveries(buf)
		return err
	}
	q.mu.Lock()
	c.Queue = q
	if added != nil {
		added()
	}
	rc.active = true
	rc.flushLocked()
	q.mu.Unlock()
	return nil
}

func (q *Queue) forgetConsumer(rc *rconsumer) { q.vhost.b.remote.forget(rc) }

func (rs *remoteState) forget(rc *rconsumer) {
	rs.mu.Lock()
	delete(rs.cons, rc.id)
	rs.mu.Unlock()
}

// flushLocked offers the buffered deliveries to the sink while it takes them.
func (rc *rconsumer) flushLocked() {
	n := 0
	for n < len(rc.buf) && rc.c.Sink.Deliver(rc.c, rc.buf[n]) {
		n++
	}
	if n > 0 {
		clear(rc.buf[:n])
		rc.buf = rc.buf[n:]
		if len(rc.buf) == 0 {
			rc.buf = nil
		}
	}
}

// returnDeliveries gives deliveries no client saw back to the home.
func (q *Queue) returnDeliveries(ds []Delivery) {
	if len(ds) > 0 {
		q.typ().returnUnseen(ds)
	}
}

func (q *Queue) remoteRemoveConsumer(c *Consumer) {
	var rc *rconsumer
	q.mu.Lock()
	if q.rq != nil {
		for _, o := range q.rq.cons {
			if o.c == c {
				rc = o
				break
			}
		}
	}
	var buf []Delivery
	if rc != nil {
		delete(q.rq.cons, rc.id)
		rc.gone = true
		buf, rc.buf = rc.buf, nil
	}
	q.mu.Unlock()
	if rc == nil {
		return
	}
	// The cancel first: the returned messages must not go back to it.
	// rc stays known (gone) until the home's answer ends its stream, so
	// that deliveries crossing the cancel are returned.
	if p := q.vhost.b.getPeers(); p == nil || !p.Up(q.HomeNode()) {
		q.forgetConsumer(rc)
	} else {
		q.vhost.b.sendOrdered(q.HomeNode(), binary.AppendUvarint([]byte{opCancel}, rc.id))
	}
	q.returnDeliveries(buf)
	if q.AutoDelete {
		// Wait until the home has handled the cancel (a call follows its
		// barrier), and with it an auto-delete: the client's cancel or
		// close answers once the queue is gone, as on the home node.
		_, _, _ = q.remoteCounts(false)
	}
}

// deliverFromHome hands a delivery from the home to the local consumer.
func (b *Broker) deliverFromHome(from string, d *msgDecoder) {
	cid := d.Uvarint()
	if d.Err() != nil {
		return
	}
	rs := &b.remote
	rs.mu.Lock()
	rc := rs.cons[cid]
	rs.mu.Unlock()
	if rc == nil {
		// Not a consumer of this run (a cancel crossed it, the home gets
		// its messages back then), or of a previous run of this node
		// that the home did not see go: the home drops it and requeues
		// what it holds.
		b.sendOrdered(from, binary.AppendUvarint([]byte{opStale}, cid))
		return
	}
	q := rc.q
	dv, err := q.decodeDelivery(d, rc.c.Tag)
	if err != nil {
		b.log.Warn("cluster: bad delivery from a queue's home node", "queue", q.Name, "err", err)
		return
	}
	dv.term = rc.epoch
	q.mu.Lock()
	if rc.gone {
		q.mu.Unlock()
		q.returnDeliveries([]Delivery{dv}) // a quorum queue's of an earlier epoch are dropped there
		return
	}
	if !rc.active || len(rc.buf) > 0 || !rc.c.Sink.Deliver(rc.c, dv) {
		rc.buf = append(rc.buf, dv)
	}
	q.mu.Unlock()
}

// canceledFromHome: the home removed the consumer (its queue was deleted).
func (b *Broker) canceledFromHome(d *msgDecoder) {
	cid := d.Uvarint()
	rs := &b.remote
	rs.mu.Lock()
	rc := rs.cons[cid]
	delete(rs.cons, cid)
	rs.mu.Unlock()
	if rc == nil {
		return
	}
	if rc.q.typ().legCanceled(rc) {
		return
	}
	// Either the answer to our cancel (rc is gone already: its stream
	// is over) or the home dropped it (basic.cancel to the client).
	rc.q.dropRemoteConsumers(func(o *rconsumer) bool { return o == rc })
}

// dropRemoteConsumers removes the local consumers of remote queue q that
// match and tells their sinks (basic.cancel).
func (q *Queue) dropRemoteConsumers(match func(*rconsumer) bool) {
	var cs []*Consumer
	q.mu.Lock()
	if q.rq != nil {
		for id, rc := range q.rq.cons {
			if match(rc) {
				delete(q.rq.cons, id)
				rc.gone = true
				rc.buf = nil
				cs = append(cs, rc.c)
			}
		}
	}
	q.mu.Unlock()
	for _, c := range cs {
		c.Sink.Cancelled(c)
	}
}

func (q *Queue) remoteDispatch() {
	q.mu.Lock()
	if q.rq != nil {
		for _, rc := range q.rq.cons {
			if rc.active && len(rc.buf) > 0 {
				rc.flushLocked()
			}
		}
	}
	q.mu.Unlock()
}

// remoteSettle sends acks, rejects or requeues to the home, one message.
func (q *Queue) remoteSettle(ds []Delivery, kind byte) {
	if len(ds) == 0 {
		return
	}
	// Never lost while the home is up (a full link waits, in order); when
	// it is down, it returns what this node held (PeerState).
	q.vhost.b.settleOrdered(q, kind, ds)
}

// --- consume (home node) ---

// proxy is a consumer on the home node standing for a consumer on
// another node. out and credit are guarded by remoteState.mu.
type proxy struct {
	b      *Broker
	node   string
	cid    uint64
	c      *Consumer
	credit int // the consumer's prefetch; 0: unlimited
	out    int // deliveries held by the node, not yet settled
	retry  atomic.Bool
	q      *Queue // the queue (c.Queue is set later, under the queue's lock)
	stale  bool   // its node dropped it (staleForPeer); remoteState.mu
	gen    uint64 // a quorum queue's: the leader term of the machine it joined (under q.mu)
}

// sendRetry is how soon a delivery the link could not take is offered again.
const sendRetry = 10 * time.Millisecond

// Deliver sends d to the consumer's node, within its credit.
func (p *proxy) Deliver(c *Consumer, d Delivery) bool {
	rs := &p.b.remote
	peers := p.b.getPeers()
	if peers == nil {
		return false
	}
	// Held before it is sent: its settle may come back before Send
	// returns.
	if !c.NoAck {
		rs.mu.Lock()
		if p.credit > 0 && p.out >= p.credit {
			rs.mu.Unlock()
			return false
		}
		p.out++
		h := rs.held[p.node]
		if h == nil {
			if rs.held == nil {
				rs.held = map[string]map[heldKey]heldDelivery{}
			}
			h = map[heldKey]heldDelivery{}
			rs.held[p.node] = h
		}
		h[heldKey{d.Queue, d.Seq}] = heldDelivery{d: d, p: p}
		rs.mu.Unlock()
	}
	buf := make([]byte, 0, 48+len(d.Msg.Body)+len(d.Msg.Exchange)+len(d.Msg.RoutingKey))
	buf = binary.AppendUvarint(append(buf, opDeliver), p.cid)
	buf = appendDelivery(buf, &d)
	if err := peers.Send(p.node, buf); err != nil {
		if !c.NoAck {
			rs.mu.Lock()
			if h := rs.held[p.node]; h != nil {
				if _, ok := h[heldKey{d.Queue, d.Seq}]; ok {
					delete(h, heldKey{d.Queue, d.Seq})
					p.out--
				}
			}
			rs.mu.Unlock()
		}
		// The link's send queue is full (or the node just went): offer
		// again shortly, as nothing else may wake the consumer (a no-ack
		// consumer has no settles to restore credit).
		if peers.Up(p.node) && p.retry.CompareAndSwap(false, true) {
			q := d.Queue
			time.AfterFunc(sendRetry, func() { p.retry.Store(false); q.Dispatch() })
		}
		return false
	}
	return true
}

// Cancelled tells the consumer's node that the queue dropped it.
func (p *proxy) Cancelled(c *Consumer) {
	rs := &p.b.remote
	rs.mu.Lock()
	delete(rs.proxies, proxyKey{p.node, p.cid})
	rs.mu.Unlock()
	p.b.sendOrdered(p.node, binary.AppendUvarint([]byte{opCanceled}, p.cid))
}

func (b *Broker) consumeForPeer(from string, d *msgDecoder, qq bool) error {
	var term uint64
	if qq {
		term = d.Uvarint()
	}
	q, err := b.lookupRef(d)
	if err != nil {
		return err
	}
	if err := q.qqCheckTerm(term); err != nil {
		return err
	}
	cid, tag := d.Uvarint(), d.Str()
	noAck, excl := d.Bool(), d.Bool()
	prio, owner, prefetch := d.Varint(), d.Uvarint(), d.Uvarint()
	if d.Err() != nil {
		return d.Err()
	}
	args, _, err := amqp.DecodeTable(d.Rest())
	if err != nil {
		return err
	}
	if len(args) == 0 {
		args = nil
	}
	p := &proxy{b: b, node: from, cid: cid, credit: int(prefetch), q: q}
	p.c = &Consumer{Tag: tag, NoAck: noAck, Exclusive: excl, Priority: int(prio), Args: args, Sink: p, Owner: owner, Prefetch: int(prefetch)}
	rs := &b.remote
	rs.mu.Lock()
	if rs.proxies == nil {
		rs.proxies = map[proxyKey]*proxy{}
	}
	rs.proxies[proxyKey{from, cid}] = p
	rs.mu.Unlock()
	err = q.addConsumerHere(p.c, func() {
		if gen, ok := q.typ().proxyGen(); ok { // the machine it joins (dropQQProxies)
			p.gen = gen
		}
	})
	if err != nil {
		rs.mu.Lock()
		delete(rs.proxies, proxyKey{from, cid})
		rs.mu.Unlock()
		return err
	}
	// Its node may have dropped it while it was being added (a call that
	// timed out there: qqAttach): then return what it took meanwhile.
	rs.mu.Lock()
	stale := p.stale
	rs.mu.Unlock()
	if stale {
		p.returnHeld()
	}
	return nil
}

// staleForPeer drops a proxy consumer its node no longer knows and
// returns what it held, redelivered.
func (b *Broker) staleForPeer(from string, d *msgDecoder) {
	cid := d.Uvarint()
	rs := &b.remote
	rs.mu.Lock()
	p := rs.proxies[proxyKey{from, cid}]
	delete(rs.proxies, proxyKey{from, cid})
	if p != nil {
		p.stale = true
	}
	rs.mu.Unlock()
	if p != nil {
		p.returnHeld()
	}
}

// returnHeld removes the proxy's consumer from its queue, then returns
// what it held (in that order: nothing is delivered to it after), as a
// failed delivery for a classic queue, as a plain return for a quorum
// queue (its leg moved: a delivery attempt that did not fail).
func (p *proxy) returnHeld() {
	q := p.q
	q.RemoveConsumer(p.c)
	rs := &p.b.remote
	rs.mu.Lock()
	var ds []Delivery
	h := rs.held[p.node]
	for k, hd := range h {
		if hd.p == p {
			ds = append(ds, hd.d)
			delete(h, k)
		}
	}
	rs.mu.Unlock()
	q.Requeue(ds, q.typ().heldFailed())
}

func (b *Broker) cancelForPeer(from string, d *msgDecoder) {
	cid := d.Uvarint()
	rs := &b.remote
	rs.mu.Lock()
	p := rs.proxies[proxyKey{from, cid}]
	delete(rs.proxies, proxyKey{from, cid})
	rs.mu.Unlock()
	if p != nil && p.c.Queue != nil {
		p.c.Queue.RemoveConsumer(p.c)
	}
	// The end of the consumer's stream: nothing more follows for cid.
	b.sendOrdered(from, binary.AppendUvarint([]byte{opCanceled}, cid))
}

// takeHeld removes the deliveries node holds for q's seqs and restores
// their consumers' credit; it returns the deliveries and the consumers
// whose credit grew.
func (rs *remoteState) takeHeld(node string, q *Queue, seqs []uint64) ([]Delivery, []*proxy) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	h := rs.held[node]
	ds := make([]Delivery, 0, len(seqs))
	var ps []*proxy
	for _, s := range seqs {
		hd, ok := h[heldKey{q, s}]
		if !ok {
			continue
		}
		delete(h, heldKey{q, s})
		ds = append(ds, hd.d)
		if hd.p != nil {
			hd.p.out--
			if len(ps) == 0 || ps[len(ps)-1] != hd.p {
				ps = append(ps, hd.p)
			}
		}
	}
	return ds, ps
}

func (b *Broker) settleForPeer(from string, d *msgDecoder) {
	q, err := b.lookupRef(d)
	if err != nil {
		return
	}
	kind := d.Byte()
	n := d.Count()
	seqs := make([]uint64, 0, n)
	for i := 0; i < n; i++ {
		seqs = append(seqs, d.Uvarint())
	}
	if d.Err() != nil {
		return
	}
	ds, ps := b.remote.takeHeld(from, q, seqs)
	q.settleLocal(ds, kind)
	if len(ps) > 0 {
		q.Dispatch()
	}
}

// settleLocal applies a settle kind to deliveries of local queue q.
func (q *Queue) settleLocal(ds []Delivery, kind byte) {
	if len(ds) == 0 {
		return
	}
	switch kind {
	case settleAck:
		q.Ack(ds)
	case settleReject:
		q.Reject(ds)
	case settleRequeue:
		q.Requeue(ds, false)
	default:
		q.Requeue(ds, true)
	}
}

// --- node up and down ---

// PeerState tells the broker that node became reachable or not. Down, on
// a home node: that node's consumers are removed and the messages it held
// unacked return to their queues, redelivered. Down, on a client node:
// the local consumers of queues homed there are cancelled and the
// publishes waiting for it fail (nack).
func (b *Broker) PeerState(node string, up bool) {
	if node != b.node {
		defer b.qqPeerState(node, up) // quorum queues wait for their leader (qqclient.go)
		defer b.streamPeerState(node, up)
	}
	if up && node != b.node {
		b.retryRemoteDLsNow()
	}
	if up || node == b.node {
		return
	}
	rs := &b.remote
	rs.mu.Lock()
	var ws []*rwait
	for id, w := range rs.waits {
		if w.node == node {
			ws = append(ws, w.rw)
			delete(rs.waits, id)
		}
	}
	var ps []*proxy
	for k, p := range rs.proxies {
		if k.node == node {
			ps = append(ps, p)
			delete(rs.proxies, k)
		}
	}
	held := rs.held[node]
	delete(rs.held, node)
	delete(rs.barriers, node) // a restarted node counts from 0 again
	var rqs []*Queue
	for id, rc := range rs.cons {
		ends, drop := rc.q.typ().legHomeDown(rc, node)
		if ends {
			delete(rs.cons, id)
		}
		if drop {
			rqs = append(rqs, rc.q)
		}
	}
	rs.mu.Unlock()
	for _, w := range ws {
		w.done(errRemoteFailed)
	}
	// Consumers first, so that the returned messages do not go back to them.
	for _, p := range ps {
		if p.c.Queue != nil {
			p.c.Queue.RemoveConsumer(p.c)
		}
	}
	byQ := map[*Queue][]Delivery{}
	for k, hd := range held {
		byQ[k.q] = append(byQ[k.q], hd.d)
	}
	for q, ds := range byQ {
		q.Requeue(ds, true)
	}
	seen := map[*Queue]bool{}
	for _, q := range rqs {
		if !seen[q] {
			seen[q] = true
			q.dropRemoteConsumers(func(*rconsumer) bool { return true })
		}
	}
}

// --- calls ---

func (q *Queue) remoteGet(noAck bool) (Delivery, int, bool) {
	req := appendBool(q.appendRef(nil, callGet), noAck)
	d, err := q.call(req)
	if err != nil || !d.Bool() {
		return Delivery{}, 0, false
	}
	remaining := int(d.Uvarint())
	dv, err := q.decodeDelivery(d, "")
	if err != nil {
		return Delivery{}, 0, false
	}
	return dv, remaining, true
}

// remoteCounts is declare-ok's message and consumer counts from the home;
// the call is a use of the queue (x-expires) there.
func (q *Queue) remoteCounts(touch bool) (int, int, error) {
	req := appendBool(q.appendRef(nil, callCounts), touch)
	d, err := q.typ().countsCall(req, touch)
	if err != nil {
		return 0, 0, err
	}
	m, c := d.Uvarint(), d.Uvarint()
	return int(m), int(c), d.Err()
}

func (q *Queue) remotePurge() (int, error) {
	d, err := q.call(q.appendRef(nil, callPurge))
	if err != nil {
		return 0, err
	}
	return int(d.Uvarint()), d.Err()
}

// remoteDelete deletes the queue on its home (with the if-unused and
// if-empty checks there) and returns its message count.
func (q *Queue) remoteDelete(ifUnused, ifEmpty bool) (int, error) {
	req := appendBool(appendBool(q.appendRef(nil, callDelete), ifUnused), ifEmpty)
	d, err := q.call(req)
	if err != nil {
		return 0, err
	}
	return int(d.Uvarint()), d.Err()
}

// HandlePeerCall answers a call from node from (the transport's handler).
func (b *Broker) HandlePeerCall(from string, req []byte) ([]byte, error) {
	if len(req) == 0 {
		return nil, errors.New("cluster: empty call")
	}
	d := newDecoder(req[1:])
	if bid := d.Uvarint(); d.Err() == nil {
		b.awaitBarrier(from, bid)
	}
	switch req[0] {
	case callConsume, callQQConsume:
		return appendResult(nil, b.consumeForPeer(from, d, req[0] == callQQConsume)), nil
	case callStreamAppend:
		out, err := b.streamAppendForPeer(d)
		if err != nil {
			return appendResult(nil, err), nil
		}
		return out, nil
	case callStreamQuery:
		out, err := b.streamQueryForPeer(d)
		if err != nil {
			return appendResult(nil, err), nil
		}
		return out, nil
	case callStreamLeader:
		out, err := b.streamLeaderForPeer(d)
		if err != nil {
			return appendResult(nil, err), nil
		}
		return out, nil
	case callGet, callQQGet:
		var term uint64
		if req[0] == callQQGet {
			term = d.Uvarint()
		}
		q, err := b.lookupRef(d)
		if err == nil {
			err = q.qqCheckTerm(term)
		}
		if err != nil {
			return appendResult(nil, err), nil
		}
		noAck := d.Bool()
		dv, remaining, ok := q.getHere(noAck)
		out := appendBool(appendResult(nil, nil), ok)
		if !ok {
			return out, nil
		}
		if !noAck {
			rs := &b.remote
			rs.mu.Lock()
			if rs.held == nil {
				rs.held = map[string]map[heldKey]heldDelivery{}
			}
			if rs.held[from] == nil {
				rs.held[from] = map[heldKey]heldDelivery{}
			}
			rs.held[from][heldKey{q, dv.Seq}] = heldDelivery{d: dv}
			rs.mu.Unlock()
		}
		out = binary.AppendUvarint(out, uint64(remaining))
		return appendDelivery(out, &dv), nil
	case callQQApplied:
		return b.serveQQApplied(d), nil
	case callCounts:
		q, err := b.lookupRef(d)
		if err != nil {
			return appendResult(nil, err), nil
		}
		if d.Bool() {
			q.Touch()
		}
		m, c := q.Counts()
		return binary.AppendUvarint(binary.AppendUvarint(appendResult(nil, nil), uint64(m)), uint64(c)), nil
	case callPurge:
		q, err := b.lookupRef(d)
		if err != nil {
			return appendResult(nil, err), nil
		}
		return binary.AppendUvarint(appendResult(nil, nil), uint64(q.Purge())), nil
	case callDelete:
		q, err := b.lookupRef(d)
		if err != nil {
			// Already gone: deleting a missing queue succeeds with 0.
			return binary.AppendUvarint(appendResult(nil, nil), 0), nil
		}
		ifUnused, ifEmpty := d.Bool(), d.Bool()
		n, err := q.vhost.deleteQueue(q, ifUnused, ifEmpty)
		if err != nil {
			return appendResult(nil, err), nil
		}
		return binary.AppendUvarint(appendResult(nil, nil), uint64(n)), nil
	case callBrowse:
		return b.browseForPeer(d)
	}
	return nil, fmt.Errorf("cluster: unknown call %q", req[0])
}

// HandlePeerMessage handles a one-way message from node from (the
// transport's handler; messages from one node arrive in order).
func (b *Broker) HandlePeerMessage(from string, msg []byte) {
	if len(msg) == 0 {
		return
	}
	d := newDecoder(msg[1:])
	switch msg[0] {
	case opEnqueue:
		b.enqueueFromPeer(from, d)
	case opEnqueued:
		b.enqueuedFromHome(d)
	case opDeliver:
		b.deliverFromHome(from, d)
	case opSettle:
		b.settleForPeer(from, d)
	case opCancel:
		b.cancelForPeer(from, d)
	case opCanceled:
		b.canceledFromHome(d)
	case opBarrier:
		b.barrierFromPeer(from, d.Uvarint())
	case opStale:
		b.staleForPeer(from, d)
	case opQQEnqueue:
		b.qqEnqueueFromPeer(from, d)
	case opQQEnqueued:
		b.qqEnqueuedFromPeer(d)
	}
}

// barrierWait bounds how long a call waits for its barrier (lost with a
// connection: the call then goes on).
const barrierWait = 2 * time.Second

func (rs *remoteState) condLocked() *sync.Cond {
	if rs.barrierC == nil {
		rs.barrierC = sync.NewCond(&rs.mu)
		rs.barriers = map[string]uint64{}
	}
	return rs.barrierC
}

func (b *Broker) barrierFromPeer(from string, id uint64) {
	rs := &b.remote
	rs.mu.Lock()
	c := rs.condLocked()
	rs.barriers[from] = max(rs.barriers[from], id)
	rs.mu.Unlock()
	c.Broadcast()
}

// awaitBarrier waits until the messages node from sent before barrier id
// are handled.
func (b *Broker) awaitBarrier(from string, id uint64) {
	rs := &b.remote
	rs.mu.Lock()
	defer rs.mu.Unlock()
	c := rs.condLocked()
	if rs.barriers[from] >= id {
		return
	}
	expired := false
	t := time.AfterFunc(barrierWait, func() {
		rs.mu.Lock()
		expired = true
		rs.mu.Unlock()
		c.Broadcast()
	})
	defer t.Stop()
	for rs.barriers[from] < id && !expired {
		c.Wait()
	}
}

// declareCounts is queue.declare-ok's counts for an existing queue, whose
// declare is a use (x-expires); from the home for a remote queue.
func (q *Queue) declareCounts() (*Queue, int, int, error) { return q.typ().declareCounts() }

func (k remoteType) declareCounts() (*Queue, int, int, error) {
	if k.q.vhost.b.getPeers() == nil {
		return k.q, 0, 0, nil // no data plane wired (a definitions-only broker)
	}
	m, c, err := k.q.remoteCounts(true)
	if err != nil {
		return nil, 0, 0, err
	}
	return k.q, m, c, nil
}

// deleteAtHome deletes a remote queue on its home first (its checks and
// its message count are there); nothing to do for a local queue.
func (q *Queue) deleteAtHome(ifUnused, ifEmpty bool) (int, error) {
	if q.typ().here() || q.vhost.b.getPeers() == nil {
		return 0, nil
	}
	return q.remoteDelete(ifUnused, ifEmpty)
}

// remoteBrowseMax bounds the messages one browse call brings back.
const remoteBrowseMax = 1000

// remoteBrowse is Browse on the home node: up to remoteBrowseMax
// messages from offset.
func (q *Queue) remoteBrowse(offset int, fn func(Browsed) bool) int {
	req := binary.AppendUvarint(q.appendRef(nil, callBrowse), uint64(max(offset, 0)))
	d, err := q.call(req)
	if err != nil {
		return 0
	}
	total, n := int(d.Uvarint()), d.Count()
	for i := 0; i < n && d.Err() == nil; i++ {
		red, exp := d.Bool(), d.Varint()
		item := d.Bytes()
		if d.Err() != nil {
			break
		}
		m, err := decodeMessage(item)
		if err != nil || !fn(Browsed{Msg: m, Redelivered: red, ExpiresAt: exp}) {
			break
		}
	}
	return total
}

func (b *Broker) browseForPeer(d *msgDecoder) ([]byte, error) {
	q, err := b.lookupRef(d)
	if err != nil {
		return appendResult(nil, err), nil
	}
	offset := int(d.Uvarint())
	var items []byte
	n := 0
	total := q.Browse(offset, func(br Browsed) bool {
		items = appendBool(items, br.Redelivered)
		items = binary.AppendVarint(items, br.ExpiresAt)
		m := appendMessage(nil, br.Msg)
		items = append(binary.AppendUvarint(items, uint64(len(m))), m...)
		n++
		return n < remoteBrowseMax
	})
	out := binary.AppendUvarint(appendResult(nil, nil), uint64(total))
	out = binary.AppendUvarint(out, uint64(n))
	return append(out, items...), nil
}

// remoteType is a classic queue homed on another node (kinds.go).
type remoteType struct{ q *Queue }

func (k remoteType) enqueue(m *Message, r *Router) enqueueResult { return k.q.forward(m, r) }
func (k remoteType) get(noAck bool) (Delivery, int, bool)        { return k.q.remoteGet(noAck) }
func (k remoteType) dispatch()                                   { k.q.remoteDispatch() }
func (k remoteType) settle(ds []Delivery, kind byte)             { k.q.remoteSettle(ds, kind) }
func (k remoteType) purge() int {
	n, _ := k.q.remotePurge()
	return n
}
func (k remoteType) addConsumer(c *Consumer, added func()) error {
	return k.q.remoteAddConsumer(c, added)
}
func (k remoteType) removeConsumer(c *Consumer) { k.q.remoteRemoveConsumer(c) }

// counts are the home's (0, 0 while it is down).
func (k remoteType) counts() (messages, consumers int) {
	messages, consumers, _ = k.q.remoteCounts(false)
	return messages, consumers
}
func (k remoteType) browse(offset int, fn func(Browsed) bool) int {
	return k.q.remoteBrowse(offset, fn)
}
func (k remoteType) here() bool   { return false }
func (k remoteType) home() string { return k.q.Home }

func (k remoteType) takeDeadLetter(src *Queue, rd *remoteDL, name string) {
	src.forwardDL(k.q, rd, name)
}
func (remoteType) answersLater() bool { return true }

// notHere: a call for a queue homed elsewhere.
func (k remoteType) notHere() error {
	q := k.q
	return amqp.Errorf(amqp.NotFound, "queue '%s' in vhost '%s' is not homed on node '%s'", q.Name, q.vhost.Name, q.vhost.b.node)
}
func (remoteType) replicas() (members []string, group uint64) { return nil, 0 }
func (remoteType) started(bool)                               {}
func (k remoteType) deletable() error                         { return k.available() }
func (remoteType) deleted()                                   {}
func (remoteType) ownLog() bool                               { return false }
func (remoteType) statsLocked(*QueueStats)                    {}
func (remoteType) closing()                                   {}

// A classic queue's legs end with its home (dropped when the home goes
// down; answered by a basic.cancel when the home cancels), and what they
// held goes back to the home as requeued.
func (remoteType) legCanceled(*rconsumer) bool { return false }
func (k remoteType) legHomeDown(rc *rconsumer, node string) (bool, bool) {
	d := k.q.HomeNode() == node
	return d, d
}
func (k remoteType) returnUnseen(ds []Delivery) { k.q.remoteSettle(ds, settleRequeue) }
func (remoteType) proxyGen() (uint64, bool)     { return 0, false }
func (remoteType) heldFailed() bool             { return true }
func (k remoteType) countsCall(req []byte, _ bool) (*msgDecoder, error) {
	return k.q.call(req)
}
