package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/wire"
	"github.com/warrenmq/warren/streamlog"
	"github.com/warrenmq/warren/streamraft"
)

// Replicated streams (issue 25): in a cluster a stream lives on
// x-initial-cluster-size nodes (all of them by default, as in RabbitMQ),
// each with the whole log, kept in step by the stream's Raft group
// (streamraft: etcd raft whose log is the stream's segments). The group's
// id is the declare's log index, as a quorum queue's.
//
// Only the leader writes. Its writer packs what waits into a chunk,
// proposes it and confirms once the group committed it (a majority of the
// members synced it). On another node the writer sends what waits to the
// leader (callStreamAppend), whose writer takes it as its own publishers'
// (deduplication happens there) and answers once it is committed. Readers
// on every member read their own log, which shows committed chunks only.

// StreamNet is the cluster's link for the streams' Raft groups, installed
// by the cluster glue (cluster/node.go).
type StreamNet interface {
	// Send sends a raft message one-way to node's HandleStreamRaft; it
	// must not block.
	Send(node string, msg []byte)
	// Endpoint is node's stream-protocol endpoint as it advertises it
	// (false when not known: the node has no listener or did not say).
	Endpoint(node string) (host string, port int, ok bool)
}

// streamNets is a broker's side of the replicated streams.
type streamNets struct {
	mu     sync.Mutex
	net    StreamNet
	groups map[uint64]*streamRepl
	on     atomic.Bool // every node of the cluster replicates streams
}

// SetStreamNet installs the cluster's link for streams (cluster mode,
// before the metadata log is replayed): it starts this node's member of
// every replicated stream recovered from the store.
func (b *Broker) SetStreamNet(n StreamNet) {
	b.sn.mu.Lock()
	b.sn.net = n
	groups := make([]*streamRepl, 0, len(b.sn.groups))
	for _, r := range b.sn.groups {
		groups = append(groups, r)
	}
	b.sn.mu.Unlock()
	for _, r := range groups {
		r.start(false)
	}
}

// SetStreamReplication says whether every node of the cluster replicates
// streams (the glue learns it from the peers' features): a cluster
// declares streams only then.
func (b *Broker) SetStreamReplication(on bool) { b.sn.on.Store(on) }

func (b *Broker) streamNet() StreamNet {
	b.sn.mu.Lock()
	defer b.sn.mu.Unlock()
	return b.sn.net
}

// StreamEndpoint is node's stream-protocol endpoint (streamserver's
// Metadata answer); false when unknown.
func (b *Broker) StreamEndpoint(node string) (string, int, bool) {
	if n := b.streamNet(); n != nil {
		return n.Endpoint(node)
	}
	return "", 0, false
}

// HandleStreamRaft takes a raft message for a stream's group from node
// from: the group's id, then the message.
func (b *Broker) HandleStreamRaft(from string, msg []byte) {
	id, n := binary.Uvarint(msg)
	if n <= 0 {
		return
	}
	b.sn.mu.Lock()
	r := b.sn.groups[id]
	b.sn.mu.Unlock()
	if r == nil {
		return
	}
	if node := r.raftNode(); node != nil {
		_ = node.Step(from, msg[n:])
	}
}

// streamPeerState tells this node's stream members that the link to
// node went down or came up: an idle stream's group is quiesced and
// learns of its leader's loss this way (streamraft/quiesce.go).
func (b *Broker) streamPeerState(node string, up bool) {
	b.sn.mu.Lock()
	groups := make([]*streamRepl, 0, len(b.sn.groups))
	for _, r := range b.sn.groups {
		groups = append(groups, r)
	}
	b.sn.mu.Unlock()
	for _, r := range groups {
		if n := r.raftNode(); n != nil {
			n.PeerState(node, up)
		}
	}
}

// defaultStreamClusterSize: x-initial-cluster-size's default is every
// node (RabbitMQ's).
const defaultStreamClusterSize = 1 << 16

// streamMembers chooses a new stream's members as quorumMembers does,
// up to x-initial-cluster-size (default: every node).
func (b *Broker) streamMembers(s QueueSpec) []string {
	if b.node == "" || b.streamNet() == nil {
		return nil
	}
	size := defaultStreamClusterSize
	if n, ok := IntArg(s.Args["x-initial-cluster-size"]); ok && n > 0 {
		size = int(min(n, 1<<16))
	}
	return b.chooseMembers(s.Home, size, func(q *Queue) []string {
		if q.sq != nil && q.sq.repl != nil {
			return q.sq.repl.memberList()
		}
		return nil
	})
}

// streamLeader is the leader of a stream's group as its member knows it.
type streamLeader struct {
	node  string
	term  uint64
	ready bool // this node leads and every entry before its term is committed
}

// streamRepl is a replicated stream's side of its stream.
type streamRepl struct {
	s      *streamState
	group  uint64
	member atomic.Bool // this node is one of the members

	mu       sync.Mutex
	members  []string // the record's members (the first ones: the preferred leader first)
	node     *streamraft.Node
	starting bool
	gone     bool
	leader   streamLeader
	changed  chan struct{} // closed at the next leader change
	asked    string        // a node that is not a member: the leader it was told
	askedAt  time.Time
}

func newStreamRepl(s *streamState, members []string, group uint64) *streamRepl {
	r := &streamRepl{s: s, members: slices.Clone(members), group: group, changed: make(chan struct{})}
	r.member.Store(slices.Contains(members, s.q.vhost.b.node))
	return r
}

// memberList is the record's members.
func (r *streamRepl) memberList() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.members)
}

func (r *streamRepl) raftNode() *streamraft.Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.node
}

// register makes the group known to HandleStreamRaft.
func (r *streamRepl) register() {
	b := r.s.q.vhost.b
	b.sn.mu.Lock()
	if b.sn.groups == nil {
		b.sn.groups = map[uint64]*streamRepl{}
	}
	b.sn.groups[r.group] = r
	b.sn.mu.Unlock()
}

// start starts this node's member of the group once the link is there.
// fresh: the declare is being applied; the preferred leader campaigns.
func (r *streamRepl) start(fresh bool) { r.startMember(fresh, false) }

// startMember starts this node's member; join: a member added later,
// which waits for the leader to send it the log.
func (r *streamRepl) startMember(fresh, join bool) {
	b := r.s.q.vhost.b
	net := b.streamNet()
	if net == nil || !r.member.Load() {
		return
	}
	r.mu.Lock()
	members := slices.Clone(r.members)
	if r.node != nil || r.starting || r.gone {
		r.mu.Unlock()
		return
	}
	r.starting = true
	r.mu.Unlock()
	fs, dir := r.s.q.vhost.streamPath(r.s.q.Name)
	group := r.group
	node, err := streamraft.Start(streamraft.Config{
		Self: b.node, Members: members, Join: join, Log: r.s.log, FS: fs, Dir: dir,
		Send: func(to string, msg []byte) {
			net.Send(to, append(binary.AppendUvarint(make([]byte, 0, len(msg)+10), group), msg...))
		},
		OnLeader: r.onLeader,
		Log2:     b.log.With("queue", r.s.q.Name, "vhost", r.s.q.vhost.Name),
		Tick:     streamTick,
		Online:   r.reachable,
		Group:    group,
	})
	r.mu.Lock()
	r.starting = false
	if err != nil {
		r.mu.Unlock()
		b.log.Error("stream: starting its replica", "queue", r.s.q.Name, "vhost", r.s.q.vhost.Name, "err", err)
		return
	}
	if r.gone {
		r.mu.Unlock()
		node.Stop()
		return
	}
	r.node = node
	r.mu.Unlock()
	if fresh && members[0] == b.node && len(members) > 1 {
		go campaignUntilLed(50*time.Millisecond, func() bool { l, _ := node.Leader(); return l != "" }, func() bool {
			if r.isGone() {
				return true
			}
			node.Campaign()
			return false
		})
	}
}

// streamTick is the streams' raft tick (the quorum queues' default): a
// heartbeat each, an election after 10 to 20 (1 to 2 s).
var streamTick = 100 * time.Millisecond

func (r *streamRepl) isGone() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gone
}

func (r *streamRepl) onLeader(leader string, term uint64, isSelf bool) {
	r.mu.Lock()
	r.leader = streamLeader{node: leader, term: term, ready: isSelf}
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	r.s.q.vhost.b.log.Debug("stream leader", "queue", r.s.q.Name, "leader", leader, "term", term, "self", isSelf)
}

// currentLeader waits up to wait for a leader and returns it.
func (r *streamRepl) currentLeader(wait time.Duration) streamLeader {
	end := time.Now().Add(wait)
	for {
		r.mu.Lock()
		l, ch, node := r.leader, r.changed, r.node
		r.mu.Unlock()
		// (a member not started yet, its link coming later at a restart,
		// knows no leader)
		started := node != nil || !r.member.Load()
		if started && l.node != "" && (l.node != r.s.q.vhost.b.node || l.ready) && r.reachable(l.node) {
			return l
		}
		if !r.member.Load() && l.node == "" {
			// a node that is not a member asks a member who leads
			if ld := r.askLeader(); ld != "" {
				return streamLeader{node: ld}
			}
		}
		left := time.Until(end)
		if left <= 0 {
			return streamLeader{}
		}
		select {
		case <-ch:
		case <-time.After(min(left, 100*time.Millisecond)):
		}
	}
}

// reachable reports whether node is this one or a peer that is up.
func (r *streamRepl) reachable(node string) bool {
	b := r.s.q.vhost.b
	if node == b.node {
		return true
	}
	p := b.getPeers()
	return p != nil && p.Up(node)
}

// askLeader asks the members who leads (for a node that is not one).
func (r *streamRepl) askLeader() string {
	p := r.s.q.vhost.b.getPeers()
	if p == nil {
		return ""
	}
	for _, m := range r.memberList() {
		if !p.Up(m) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req := appendStr(appendStr([]byte{callStreamLeader, 0}, r.s.q.vhost.Name), r.s.q.Name)
		resp, err := p.Call(ctx, m, req)
		cancel()
		if err != nil {
			continue
		}
		d, err := decodeResult(resp)
		if err != nil {
			continue
		}
		if l := d.Str(); d.Err() == nil && l != "" {
			return l
		}
	}
	return ""
}

// leaderNode returns the stream's leader as this node knows it ("" none);
// a node that is not a member asks the members (at most once a second).
func (r *streamRepl) leaderNode() string {
	if r.member.Load() {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.leader.node
	}
	r.mu.Lock()
	if time.Since(r.askedAt) < time.Second {
		l := r.asked
		r.mu.Unlock()
		return l
	}
	r.mu.Unlock()
	l := r.askLeader()
	r.mu.Lock()
	r.asked, r.askedAt = l, time.Now()
	r.mu.Unlock()
	return l
}

// leading reports whether this node's writer may write: it leads, with
// every earlier entry committed.
func (r *streamRepl) leading() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leader.ready && r.leader.node == r.s.q.vhost.b.node
}

// close stops the member (del: the stream is deleted).
func (r *streamRepl) close(del bool) {
	r.mu.Lock()
	node := r.node
	r.node = nil
	r.gone = true
	r.mu.Unlock()
	if node != nil {
		node.Stop()
	}
	if del {
		b := r.s.q.vhost.b
		b.sn.mu.Lock()
		if b.sn.groups[r.group] == r {
			delete(b.sn.groups, r.group)
		}
		b.sn.mu.Unlock()
	}
}

// errStreamNoLeader: nothing leads the stream's group now.
func errStreamNoLeader(q *Queue) error {
	return amqp.Errorf(amqp.InternalError, "stream queue '%s' in vhost '%s' has no leader", q.Name, q.vhost.Name)
}

// propose proposes a chunk on the leader and waits until it is committed.
func (r *streamRepl) propose(b *streamlog.Batch) error {
	node := r.raftNode()
	if node == nil {
		return errStreamNoLeader(r.s.q)
	}
	// a leader's clock may be behind its predecessor's: chunk times only grow
	b.Timestamp = max(b.Timestamp, r.s.log.Info().LastTimestamp)
	raw, err := streamlog.EncodeChunk(b)
	if err != nil {
		return err
	}
	ch := make(chan error, 1)
	node.Propose(raw, func(err error) { ch <- err })
	return <-ch
}

// storeOffset proposes a stored offset.
func (r *streamRepl) storeOffset(st *streamStore, ts int64) error {
	return r.propose(&streamlog.Batch{Type: streamlog.ChunkTrackingDelta, Entries: 1, Records: 1,
		Data: streamlog.OffsetData(st.ref, st.offset), Timestamp: ts})
}

// --- forwarding to the leader ---

const (
	callStreamAppend byte = 'T' // vhost, queue, group, pubs: a writer's batch for the leader's writer
	callStreamLeader byte = 'L' // vhost, queue: who leads (a node that is not a member asks)
	callStreamQuery  byte = 'O' // vhost, queue, kind, ref: the leader's writer sequence or stored offset
)

// Kinds of callStreamQuery.
const (
	streamQuerySeq    byte = iota // QueryPublisherSequence: a publisher's last publishing id
	streamQueryOffset             // QueryOffset: a consumer's stored offset
)

// query answers a publisher's sequence or a consumer's stored offset as
// the leader knows it, as RabbitMQ does (rabbit_stream_reader asks the
// leader's osiris writer for both): a replica's log is a moment behind
// the leader's, where a StoreOffset sent through any node goes. On the
// leader, a single node, or with no leader reachable, the local log
// answers.
func (s *streamState) query(kind byte, ref string) (uint64, bool) {
	local := func() (uint64, bool) { return s.localQuery(kind, ref) }
	r := s.repl
	b := s.q.vhost.b
	if r == nil {
		return local()
	}
	l := r.currentLeader(2 * time.Second)
	p := b.getPeers()
	if l.node == "" || l.node == b.node || p == nil {
		return local()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req := appendStr(appendStr([]byte{callStreamQuery, 0}, s.q.vhost.Name), s.q.Name)
	req = appendStr(append(req, kind), ref)
	resp, err := p.Call(ctx, l.node, req)
	if err != nil {
		return local()
	}
	d, err := decodeResult(resp)
	if err != nil {
		return local()
	}
	v, ok := d.Uvarint(), d.Bool()
	if d.Err() != nil {
		return local()
	}
	return v, ok
}

// localQuery answers query from this node's log.
func (s *streamState) localQuery(kind byte, ref string) (uint64, bool) {
	if kind == streamQuerySeq {
		return s.log.WriterSeq(ref)
	}
	return s.log.Offset(ref)
}

// streamQueryForPeer answers callStreamQuery from this node's log.
func (b *Broker) streamQueryForPeer(d *msgDecoder) ([]byte, error) {
	vn, qn := d.Str(), d.Str()
	kind, ref := d.Byte(), d.Str()
	if d.Err() != nil {
		return nil, d.Err()
	}
	q := b.peerStream(vn, qn)
	if q == nil {
		return nil, notFoundQueue(qn, vn)
	}
	val, ok := q.sq.localQuery(kind, ref)
	out := binary.AppendUvarint(appendResult(nil, nil), val)
	if ok {
		return append(out, 1), nil
	}
	return append(out, 0), nil
}

// Forwarded publish kinds.
const (
	fwdRecord byte = iota
	fwdOp
	fwdStore
)

// forward sends pubs to the leader's writer and waits for its answer:
// each pub's error (nil: written), and whether it may go to the next
// leader (nothing was written: the leader is down, or its writer refused
// it as it lost the leadership).
func (r *streamRepl) forward(leader string, pubs []streamPub) (errs []error, retry []bool) {
	q := r.s.q
	errs, retry = make([]error, len(pubs)), make([]bool, len(pubs))
	all := func(err error, again bool) ([]error, []bool) {
		for i := range pubs {
			errs[i], retry[i] = err, again
		}
		return errs, retry
	}
	p := q.vhost.b.getPeers()
	if p == nil || !p.Up(leader) {
		return all(errStreamNoLeader(q), true)
	}
	req := []byte{callStreamAppend, 0}
	req = appendStr(req, q.vhost.Name)
	req = appendStr(req, q.Name)
	req = binary.AppendUvarint(req, r.group)
	req = binary.AppendUvarint(req, uint64(len(pubs)))
	for i := range pubs {
		pb := &pubs[i]
		switch {
		case pb.op != nil:
			op := pb.op
			req = append(req, fwdOp)
			req = appendStr(req, op.Ref)
			req = binary.AppendUvarint(req, uint64(len(op.Entries)))
			for j, e := range op.Entries {
				req = binary.AppendUvarint(req, op.IDs[j])
				req = wire.AppendBytes(req, e)
				req = binary.AppendUvarint(req, uint64(op.Records[j]))
				f := ""
				if j < len(op.Filters) {
					f = op.Filters[j]
				}
				req = appendStr(req, f)
			}
		case pb.store != nil:
			req = append(req, fwdStore)
			req = appendStr(req, pb.store.ref)
			req = binary.AppendUvarint(req, pb.store.offset)
		default:
			req = append(req, fwdRecord)
			req = wire.AppendBytes(req, pb.rec)
			req = appendStr(req, pb.filter)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := p.Call(ctx, leader, req)
	if err != nil {
		return all(errStreamNoLeader(q), false) // it may have written them
	}
	d, err := decodeResult(resp)
	if err != nil {
		var ae *amqp.Error
		again := errors.As(err, &ae) && ae.Text == errStreamNoLeader(q).(*amqp.Error).Text
		return all(err, again)
	}
	if d.CountAtMost(uint64(len(pubs))) != len(pubs) {
		return all(errStreamNoLeader(q), false)
	}
	for i := range pubs {
		switch d.Byte() {
		case fwdOK:
		case fwdRefused:
			errs[i], retry[i] = errStreamNoLeader(q), true
		default:
			errs[i] = amqp.Errorf(amqp.InternalError, "%s", d.Str())
		}
	}
	if d.Err() != nil {
		return all(errStreamNoLeader(q), false)
	}
	return errs, retry
}

// Per-pub answers of callStreamAppend.
const (
	fwdOK      byte = iota
	fwdRefused      // not written: the leader lost the leadership
	fwdFailed       // then the error's text
)

// waitChange waits until the leader is no longer l (or wait passed).
func (r *streamRepl) waitChange(l streamLeader, wait time.Duration) {
	r.mu.Lock()
	cur, ch := r.leader, r.changed
	r.mu.Unlock()
	if cur != l {
		return
	}
	select {
	case <-ch:
	case <-time.After(min(wait, 200*time.Millisecond)):
	}
}

// streamAppendForPeer is the leader's side of callStreamAppend: the pubs
// go to its writer as its own publishers' do.
func (b *Broker) streamAppendForPeer(d *msgDecoder) ([]byte, error) {
	vn, qn, group := d.Str(), d.Str(), d.Uvarint()
	n := d.CountAtMost(1 << 20)
	if d.Err() != nil {
		return nil, d.Err()
	}
	q := b.peerStream(vn, qn)
	if q == nil || q.sq.repl.group != group {
		return nil, notFoundQueue(qn, vn)
	}
	s := q.sq
	if !s.repl.leading() {
		return nil, errStreamNoLeader(q)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		kind := d.Byte()
		var pub streamPub
		w := &rwait{}
		w.add(1)
		wg.Add(1)
		w.notify(func(err error) { errs[i] = err; wg.Done() })
		switch kind {
		case fwdRecord:
			pub.rec, pub.filter = d.Bytes(), d.Str()
			pub.w = w
		case fwdOp:
			op := &StreamPublish{Ref: d.Str()}
			k := d.CountAtMost(streamlog.MaxEntries)
			for range k {
				op.IDs = append(op.IDs, d.Uvarint())
				op.Entries = append(op.Entries, d.Bytes())
				op.Records = append(op.Records, uint16(d.Uvarint()))
				op.Filters = append(op.Filters, d.Str())
			}
			op.Done = w.done
			pub.op = op
		case fwdStore:
			pub.store = &streamStore{ref: d.Str(), offset: d.Uvarint()}
			w.done(nil) // a stored offset has no answer
		default:
			d.Fail()
		}
		if d.Err() != nil {
			w.done(d.Err())
			for j := i + 1; j < n; j++ {
				errs[j] = d.Err()
			}
			break
		}
		pub.local = true
		var ok bool
		if pub.op != nil {
			ok = s.publishOp(pub.op)
		} else {
			ok = s.queue(pub)
		}
		if !ok && pub.store == nil {
			w.done(streamlog.ErrClosed)
		}
	}
	wg.Wait()
	out := appendResult(nil, nil)
	out = binary.AppendUvarint(out, uint64(n))
	for _, err := range errs {
		var ae *amqp.Error
		switch {
		case err == nil:
			out = append(out, fwdOK)
		case errors.As(err, &ae) && ae.Text == errStreamNoLeader(q).(*amqp.Error).Text:
			out = append(out, fwdRefused)
		default:
			out = appendStr(append(out, fwdFailed), err.Error())
		}
	}
	return out, nil
}

// streamLeaderForPeer answers callStreamLeader.
func (b *Broker) streamLeaderForPeer(d *msgDecoder) ([]byte, error) {
	vn, qn := d.Str(), d.Str()
	if d.Err() != nil {
		return nil, d.Err()
	}
	q := b.peerStream(vn, qn)
	if q == nil {
		return nil, notFoundQueue(qn, vn)
	}
	return appendStr(appendResult(nil, nil), q.sq.repl.leaderNode()), nil
}

// peerStream is replicated stream qn of vhost vn, for a peer's call (nil
// if there is none).
func (b *Broker) peerStream(vn, qn string) *Queue {
	v := b.VHost(vn)
	if v == nil {
		return nil
	}
	q := v.Queue(qn)
	if q == nil || q.sq == nil || q.sq.repl == nil {
		return nil
	}
	return q
}

// --- the stream protocol's view ---

// StreamMembers returns stream q's leader ("" none known) and its other
// members; a single node's stream is led by this node (node "").
func (q *Queue) StreamMembers() (leader string, replicas []string) {
	r := q.sq.repl
	if r == nil {
		return q.vhost.b.node, nil
	}
	l := r.leaderNode()
	for _, m := range r.memberList() {
		if m != l {
			replicas = append(replicas, m)
		}
	}
	return l, replicas
}

// StreamReplicas returns a replicated stream's members, sorted (false
// on a single node).
func (q *Queue) StreamReplicas() ([]string, bool) {
	r := q.sq.repl
	if r == nil {
		return nil, false
	}
	ms := r.memberList()
	if node := r.raftNode(); node != nil {
		if st := node.Status(); len(st.Members) > 0 {
			ms = st.Members
		}
	}
	slices.Sort(ms)
	return ms, true
}

// StreamHere reports whether this node holds stream q's log (a single
// node, or a member of its group): readers read here.
func (q *Queue) StreamHere() bool { return q.sq.repl == nil || q.sq.repl.member.Load() }

// StreamRaftStatus returns this node's member's view of a replicated
// stream's group (false: single node, or no member here).
func (q *Queue) StreamRaftStatus() (streamraft.Status, bool) {
	if q.sq == nil || q.sq.repl == nil {
		return streamraft.Status{}, false
	}
	n := q.sq.repl.raftNode()
	if n == nil {
		return streamraft.Status{}, false
	}
	return n.Status(), true
}
