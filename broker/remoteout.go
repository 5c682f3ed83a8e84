package broker

import (
	"context"
	"encoding/binary"
	"sync"
	"time"
)

// The one-way messages of the data plane that must never be lost while
// the node they go to is up (issue 13): settles (acks, rejects, requeues
// and the returns of deliveries no client saw), cancels, the barriers
// ahead of calls, stale-consumer notices and the end of a consumer's
// stream. A lost ack leaves its message unacked at the home for good and
// takes one from its consumer's credit, until the consumer stalls; so
// they do not go to the link with a bare Send, which fails when the
// link's queue is full (a publisher filling it is enough).
//
// Each peer node has an outbox that keeps them in order: a message is
// sent at once when the outbox is empty and the link takes it; otherwise
// it is queued and a goroutine sends the queue in order, waiting for room
// on the link (PacedPeers.SendWait, or retrying Send). Queued settles for
// the same queue and kind are merged into one message, so a consumer
// acking one by one behind a busy link costs the link few messages. The
// callers hold no lock that the sending waits under: queueing takes only
// the outbox's own lock (a leaf, taken under Queue.mu). When the node is
// down the queue is dropped: the node then returns what this node held
// (PeerState) and this node cancels its consumers there.

// outMsg is an outbox entry: an encoded message, or a settle (encoded
// when sent, so that later settles can join it).
type outMsg struct {
	msg  []byte
	q    *Queue
	kind byte
	seqs []uint64
}

func (m *outMsg) encode() []byte {
	if m.q == nil {
		return m.msg
	}
	q := m.q
	buf := q.appendRef(make([]byte, 0, 16+len(q.Name)+len(q.vhost.Name)+5*len(m.seqs)), opSettle)
	buf = append(buf, m.kind)
	buf = binary.AppendUvarint(buf, uint64(len(m.seqs)))
	for _, s := range m.seqs {
		buf = binary.AppendUvarint(buf, s)
	}
	return buf
}

// outbox is the ordered, lossless queue of one-way messages to one node.
type outbox struct {
	mu     sync.Mutex
	q      []outMsg
	sender lazyWorker // its goroutine owns the queue while it runs
}

// outboxMaxSettle bounds the sequence numbers merged into one settle.
const outboxMaxSettle = 4096

func (rs *remoteState) outboxTo(node string) *outbox {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	o := rs.outs[node]
	if o == nil {
		if rs.outs == nil {
			rs.outs = map[string]*outbox{}
		}
		o = &outbox{}
		rs.outs[node] = o
	}
	return o
}

// sendOrdered sends msg one-way to node, after what was queued to it
// before, without loss while node is up. It never waits.
func (b *Broker) sendOrdered(node string, msg []byte) {
	b.sendOut(node, outMsg{msg: msg})
}

// settleOrdered is sendOrdered for a settle of q's deliveries ds.
func (b *Broker) settleOrdered(q *Queue, kind byte, ds []Delivery) {
	seqs := make([]uint64, len(ds))
	for i := range ds {
		seqs[i] = ds[i].Seq
	}
	b.sendOut(q.HomeNode(), outMsg{q: q, kind: kind, seqs: seqs})
}

func (b *Broker) sendOut(node string, m outMsg) {
	p := b.getPeers()
	if p == nil {
		return
	}
	o := b.remote.outboxTo(node)
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.sender.runningLocked() {
		err := p.Send(node, m.encode())
		if err == nil || !p.Up(node) {
			return // sent, or the node is down (see above)
		}
		o.q = append(o.q, m)
		o.sender.startingLocked() // true: it was not running
		go b.drainOutbox(p, node, o)
		return
	}
	if n := len(o.q); m.q != nil && n > 0 {
		last := &o.q[n-1]
		if last.q == m.q && last.kind == m.kind && len(last.seqs)+len(m.seqs) <= outboxMaxSettle {
			last.seqs = append(last.seqs, m.seqs...)
			return
		}
	}
	o.q = append(o.q, m)
}

// outboxRetry is how long the sender waits for room before it checks
// again that the node is up.
const outboxRetry = time.Second

// drainOutbox sends o's queue to node in order, waiting for room on the
// link, until the queue is empty or the node is down.
func (b *Broker) drainOutbox(p Peers, node string, o *outbox) {
	pp, paced := p.(PacedPeers)
	for {
		o.mu.Lock()
		if len(o.q) == 0 {
			o.sender.stopLocked()
			o.q = nil
			o.mu.Unlock()
			return
		}
		m := o.q[0]
		o.q[0] = outMsg{}
		o.q = o.q[1:]
		o.mu.Unlock()
		msg := m.encode()
		for pause := time.Millisecond; ; pause = min(2*pause, 20*time.Millisecond) {
			var err error
			if paced {
				ctx, cancel := context.WithTimeout(context.Background(), outboxRetry)
				err = pp.SendWait(ctx, node, msg)
				cancel()
			} else {
				err = p.Send(node, msg)
			}
			if err == nil {
				break
			}
			if !p.Up(node) || b.closed.Load() {
				// The node is down (see above), or this broker is closing:
				// the links go with it.
				o.mu.Lock()
				o.q = nil
				o.sender.stopLocked()
				o.mu.Unlock()
				return
			}
			// Without a way to wait for room (or when the wait failed at
			// once), poll the link rather than spin.
			time.Sleep(pause)
		}
	}
}
