package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
)

// The client side of replicated quorum queues (qqclient.go) with a
// stand-in leader side: three brokers in one process linked by an
// in-memory network; the client node A holds the queue as a replicated
// quorum queue (q.qq set), B and C each hold a plain queue homed on
// themselves, standing for the leader when A is told so
// (qqLeaderChanged). The messages do not move between B and C (no Raft
// here): what is tested is where A sends publishes, consumers and
// settles, and when.

// qqNet is an in-memory network: ordered one-way messages per node pair
// (a goroutine per link), calls run on the caller's goroutine.
type qqNet struct {
	mu    sync.Mutex
	nodes map[string]*Broker
	down  map[string]bool
	// tap sees every one-way message; true drops it.
	tap    func(from, to string, msg []byte) bool
	links  map[[2]string]chan []byte
	closed bool
	wg     sync.WaitGroup
}

type qqPeers struct {
	n    *qqNet
	self string
}

func (p *qqPeers) Send(to string, msg []byte) error {
	n := p.n
	n.mu.Lock()
	if n.down[to] || n.down[p.self] || n.closed {
		n.mu.Unlock()
		return errors.New("node down")
	}
	if n.tap != nil && n.tap(p.self, to, msg) {
		n.mu.Unlock()
		return nil
	}
	k := [2]string{p.self, to}
	ch := n.links[k]
	if ch == nil {
		ch = make(chan []byte, 1<<16)
		n.links[k] = ch
		b, from := n.nodes[to], p.self
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			for m := range ch {
				b.HandlePeerMessage(from, m)
			}
		}()
	}
	ch <- slices.Clone(msg) // under mu: the buffer is never full in these tests
	n.mu.Unlock()
	return nil
}

func (p *qqPeers) Call(ctx context.Context, to string, req []byte) ([]byte, error) {
	n := p.n
	n.mu.Lock()
	down := n.down[to] || n.down[p.self]
	b := n.nodes[to]
	n.mu.Unlock()
	if down {
		return nil, errors.New("node down")
	}
	return b.HandlePeerCall(p.self, slices.Clone(req))
}

func (p *qqPeers) Up(to string) bool {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	return !p.n.down[to] && !p.n.down[p.self]
}

func (n *qqNet) setTap(f func(from, to string, msg []byte) bool) {
	n.mu.Lock()
	n.tap = f
	n.mu.Unlock()
}

// setDown cuts node off (or back) and tells every broker, as the
// transport's OnPeerState would.
func (n *qqNet) setDown(node string, down bool) {
	n.mu.Lock()
	n.down[node] = down
	n.mu.Unlock()
	for name, b := range n.nodes {
		if name != node {
			b.PeerState(node, !down)
			n.nodes[node].PeerState(name, !down)
		}
	}
}

const (
	qqA = "warren@a"
	qqB = "warren@b"
	qqC = "warren@c"
)

// qqFixture: brokers A, B, C; queue "qq" is A's replicated quorum queue
// (led by nobody yet) and a plain local queue on B and on C.
func qqFixture(t *testing.T) (n *qqNet, qa, qb, qc *Queue) {
	t.Helper()
	n = &qqNet{nodes: map[string]*Broker{}, down: map[string]bool{}, links: map[[2]string]chan []byte{}}
	for _, name := range []string{qqA, qqB, qqC} {
		b := New(Config{Node: name})
		b.SetPeers(&qqPeers{n: n, self: name})
		n.nodes[name] = b
	}
	t.Cleanup(func() {
		n.mu.Lock()
		for _, ch := range n.links {
			close(ch)
		}
		n.links, n.closed = map[[2]string]chan []byte{}, true
		n.mu.Unlock()
		n.wg.Wait()
	})
	declare := func(node, home string) *Queue {
		q, _, _, err := n.nodes[node].VHost("/").DeclareQueue(QueueSpec{Name: "qq", Durable: true, Home: home}, false)
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	qa = declare(qqA, qqB)
	qa.qq = newQQState(qa, 1, nil)
	qb, qc = declare(qqB, qqB), declare(qqC, qqC)
	return n, qa, qb, qc
}

// qqPublish publishes n messages "<from>".."<from+n-1>" on A with a
// confirm wait and returns the joined wait.
func qqPublishN(t *testing.T, qa *Queue, from, n int) Durability {
	t.Helper()
	var r Router
	var tok Durability
	for i := from; i < from+n; i++ {
		res, err := qa.vhost.Publish(&r, "", &Message{RoutingKey: "qq", Body: []byte(strconv.Itoa(i))})
		if err != nil || res.Routed != 1 || res.Failed {
			t.Fatalf("publish %d: %+v %v", i, res, err)
		}
		tok.Add(res.Durable)
	}
	if !tok.Pending() {
		t.Fatal("a publish to a quorum queue has nothing to wait for")
	}
	return tok
}

func qqWait(tok Durability, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return tok.Wait(ctx)
}

// bodies drains q (no-ack gets) and returns the bodies in order.
func bodies(q *Queue) []string {
	var out []string
	for {
		d, _, ok := q.getHere(true)
		if !ok {
			return out
		}
		out = append(out, string(d.Msg.Body))
	}
}

func qqBodies(from, n int) []string {
	var out []string
	for i := from; i < from+n; i++ {
		out = append(out, strconv.Itoa(i))
	}
	return out
}

// qqSeqsTo records the publish seqs of A's enqueues to node, in the order
// they were sent; drop makes the tap drop them.
type qqSeqs struct {
	mu   sync.Mutex
	seqs []uint64
}

func (s *qqSeqs) tap(to string, drop func() bool) func(from, dst string, msg []byte) bool {
	return func(from, dst string, msg []byte) bool {
		if from != qqA || dst != to || msg[0] != opQQEnqueue {
			return false
		}
		d := newDecoder(msg[1:])
		d.Uvarint()
		s.mu.Lock()
		s.seqs = append(s.seqs, d.Uvarint())
		s.mu.Unlock()
		return drop()
	}
}

// firstSeen is seqs without repeats, in order of first appearance.
func (s *qqSeqs) firstSeen() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[uint64]bool{}
	var out []uint64
	for _, q := range s.seqs {
		if !seen[q] {
			seen[q] = true
			out = append(out, q)
		}
	}
	return out
}

// issue 14 (publishing through any node): publishes the leader never
// answers stay pending, unconfirmed; on a leader change they are resent
// to the new leader in id order and confirmed once it answers; nothing
// is lost and the new leader sees them in publish order.
func TestQQPublishResendOnLeaderChange(t *testing.T) {
	n, qa, qb, qc := qqFixture(t)
	var toB, toC qqSeqs
	tapB, tapC := toB.tap(qqB, func() bool { return true }), toC.tap(qqC, func() bool { return false })
	n.setTap(func(from, to string, msg []byte) bool { return tapB(from, to, msg) || tapC(from, to, msg) })
	qa.qqLeaderChanged(qqB, 1)
	tok := qqPublishN(t, qa, 0, 20)
	if err := qqWait(tok, 200*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("confirm before the leader answered: %v", err)
	}
	if got := len(toB.firstSeen()); got != 20 {
		t.Fatalf("%d publishes sent to the leader, want 20", got)
	}
	qa.qqLeaderChanged(qqC, 2)
	// A publish right after the change must not overtake the resend of
	// the earlier ones (the dedup would then drop those).
	tok.Add(qqPublishN(t, qa, 20, 1))
	// Well before the resend timeout (qqResendAfter): the change resends.
	if err := qqWait(tok, qqResendAfter/2); err != nil {
		t.Fatalf("confirms after the leader change: %v", err)
	}
	if got, want := bodies(qc), qqBodies(0, 21); !slices.Equal(got, want) {
		t.Fatalf("new leader's queue: %v, want %v", got, want)
	}
	if got := bodies(qb); len(got) != 0 {
		t.Fatalf("old leader's queue got %v (its enqueues were lost)", got)
	}
	if s := toC.firstSeen(); !slices.IsSorted(s) || len(s) != 21 {
		t.Fatalf("ids sent to the new leader (first sends): %v, want 21 increasing", s)
	}
	qa.qc.mu.Lock()
	live := qa.qc.pendLive
	qa.qc.mu.Unlock()
	if live != 0 {
		t.Fatalf("%d publishes still pending after their confirms", live)
	}
}

// issue 14: a node that is not the leader answers enqNotLeader; the
// client keeps the publishes (no nack) until a leader takes them; a
// reject-publish refusal is a nack. Issue 22: while the node says it
// does not lead (callQQApplied), the bodies are not sent to it again.
func TestQQPublishNotLeaderThenLeader(t *testing.T) {
	n, qa, qb, qc := qqFixture(t)
	qb.qq = newQQState(qb, 1, nil) // B holds the queue but does not lead it
	var toB qqSeqs
	tapB := toB.tap(qqB, func() bool { return false })
	// B's answers wait until all five were sent: a "not the leader"
	// answer to the first would otherwise stop the direct sends of the
	// others (they then go with the resend, which is not what this
	// test looks at), and how soon it comes is up to the scheduler.
	var held [][]byte
	hold := true
	n.setTap(func(from, to string, msg []byte) bool {
		if from == qqB && to == qqA && msg[0] == opQQEnqueued && hold {
			held = append(held, slices.Clone(msg))
			return true
		}
		return tapB(from, to, msg)
	})
	qa.qqLeaderChanged(qqB, 1)
	tok := qqPublishN(t, qa, 0, 5)
	waitFor(t, "the sends to the node that is not the leader", func() bool {
		toB.mu.Lock()
		defer toB.mu.Unlock()
		return len(toB.seqs) >= 5
	})
	n.mu.Lock()
	hold, answers := false, held
	n.mu.Unlock()
	for _, msg := range answers {
		if err := (&qqPeers{n: n, self: qqB}).Send(qqA, msg); err != nil {
			t.Fatal(err)
		}
	}
	if err := qqWait(tok, 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("confirm while no leader took the messages: %v", err)
	}
	toB.mu.Lock()
	seqs := slices.Clone(toB.seqs)
	toB.mu.Unlock()
	if len(seqs) != 5 || !slices.IsSorted(seqs) {
		t.Fatalf("sends to the node that does not lead: %v, want 5 in id order and no resend", seqs)
	}
	qa.qqLeaderChanged(qqC, 2)
	if err := qqWait(tok, 5*time.Second); err != nil {
		t.Fatalf("confirms after the leader change: %v", err)
	}
	if got, want := bodies(qc), qqBodies(0, 5); !slices.Equal(got, want) {
		t.Fatalf("leader's queue: %v, want %v", got, want)
	}

	// Overflow at the leader: the confirm is a nack.
	full, _, _, err := n.nodes[qqC].VHost("/").DeclareQueue(QueueSpec{Name: "qqfull", Home: qqC,
		Args: amqp.Table{"x-max-length": int64(1), "x-overflow": "reject-publish"}}, false)
	noErr(t, err)
	_ = full
	fa, _, _, err := n.nodes[qqA].VHost("/").DeclareQueue(QueueSpec{Name: "qqfull", Home: qqC}, false)
	noErr(t, err)
	fa.qq = newQQState(fa, 2, nil)
	fa.qqLeaderChanged(qqC, 1)
	var r Router
	var toks []Durability
	for i := 0; i < 2; i++ {
		res, err := fa.vhost.Publish(&r, "", &Message{RoutingKey: "qqfull", Body: []byte("x")})
		noErr(t, err)
		var d Durability
		d.Add(res.Durable)
		toks = append(toks, d)
	}
	if err := qqWait(toks[0], 5*time.Second); err != nil {
		t.Fatalf("first publish: %v", err)
	}
	if err := qqWait(toks[1], 5*time.Second); !errors.Is(err, ErrRemoteRejected) {
		t.Fatalf("publish over reject-publish: %v, want a rejection", err)
	}
}

// qqSink records deliveries and cancels.
type qqSink struct {
	mu        sync.Mutex
	ds        []Delivery
	cancelled int
}

func (s *qqSink) Deliver(c *Consumer, d Delivery) bool {
	s.mu.Lock()
	s.ds = append(s.ds, d)
	s.mu.Unlock()
	return true
}

func (s *qqSink) Cancelled(c *Consumer) {
	s.mu.Lock()
	s.cancelled++
	s.mu.Unlock()
}

func (s *qqSink) take(n int) []Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.ds[:n])
	s.ds = s.ds[n:]
	return out
}

func (s *qqSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ds)
}

func publishTo(t *testing.T, q *Queue, bodies ...string) {
	t.Helper()
	var r Router
	for _, b := range bodies {
		if _, err := q.vhost.Publish(&r, "", &Message{RoutingKey: q.Name, Body: []byte(b)}); err != nil {
			t.Fatal(err)
		}
	}
}

// issue 14 (consuming through any node, failover): a consumer on a
// non-leader node follows the leader: on a leader change its leg moves to
// the new leader without a basic.cancel; deliveries carry the epoch they
// came from; settles of an earlier one go to the machine that made them
// (here the old leader's, still running: they settle there; a machine
// that is gone ignores them) and never to the new leader, while those of
// the current one reach the new leader.
func TestQQConsumerFollowsLeader(t *testing.T) {
	_, qa, qb, qc := qqFixture(t)
	qa.qqLeaderChanged(qqB, 1)
	sink := &qqSink{}
	c := &Consumer{Tag: "ct", Sink: sink, Prefetch: 10}
	okSent := 0
	if err := qa.AddConsumerThen(c, func() { okSent++ }); err != nil {
		t.Fatal(err)
	}
	if okSent != 1 || c.Queue != qa {
		t.Fatalf("consume-ok hook ran %d times, consumer's queue %p", okSent, c.Queue)
	}
	if qb.ConsumerCount() != 1 {
		t.Fatalf("leader has %d consumers, want 1", qb.ConsumerCount())
	}
	publishTo(t, qb, "b1", "b2", "b3")
	waitFor(t, "deliveries from the first leader", func() bool { return sink.count() == 3 })
	old := sink.take(3)

	qa.qqLeaderChanged(qqC, 2)
	waitFor(t, "the consumer re-attached at the new leader", func() bool {
		return qc.ConsumerCount() == 1 && qb.ConsumerCount() == 0
	})
	publishTo(t, qc, "c1", "c2", "c3")
	waitFor(t, "deliveries from the new leader", func() bool { return sink.count() == 3 })
	cur := sink.take(3)
	if cur[0].term == old[0].term || cur[0].term == 0 {
		t.Fatalf("deliveries' epochs: old %d, new %d", old[0].term, cur[0].term)
	}
	if string(cur[0].Msg.Body) != "c1" || cur[0].ConsumerTag != "ct" {
		t.Fatalf("delivery from the new leader: %q tag %q", cur[0].Msg.Body, cur[0].ConsumerTag)
	}
	// Stale acks go to B, whose machine made them: had they gone to C
	// (same seqs as its own deliveries) they would ack c1..c3.
	qa.Ack(old)
	qa.Ack(cur[:1])
	waitFor(t, "the current ack at the new leader", func() bool { return qc.Stats().Unacked == 2 })
	waitFor(t, "the earlier epoch's acks at the old leader", func() bool { return qb.Stats().Unacked == 0 })
	if u := qc.Stats().Unacked; u != 2 {
		t.Fatalf("new leader: %d unacked, want 2 (stale acks reached it)", u)
	}
	// A requeue of the current epoch goes to the leader and comes back.
	qa.Requeue(cur[1:2], false)
	waitFor(t, "the requeued message redelivered", func() bool { return sink.count() == 1 })
	if d := sink.take(1)[0]; string(d.Msg.Body) != "c2" || !d.Redelivered {
		t.Fatalf("redelivery %q redelivered=%v", d.Msg.Body, d.Redelivered)
	}
	sink.mu.Lock()
	cancelled := sink.cancelled
	sink.mu.Unlock()
	if cancelled != 0 {
		t.Fatal("the client's consumer was cancelled by the leader change")
	}
	// A leader of an earlier term, learned late, changes nothing.
	ep := qa.qc.epochA.Load()
	qa.qqLeaderChanged(qqB, 1)
	if qa.qc.epochA.Load() != ep || qc.ConsumerCount() != 1 || qb.ConsumerCount() != 0 {
		t.Fatalf("a stale leader change moved the consumer (epoch %d -> %d)", ep, qa.qc.epochA.Load())
	}
	// basic.cancel: the leg at the leader goes.
	qa.RemoveConsumer(c)
	waitFor(t, "the leg removed at the leader", func() bool { return qc.ConsumerCount() == 0 })
}

// issue 14: while no leader is known, basic.consume and basic.get wait
// (qqLeaderWait) then fail with RabbitMQ 3.10's 541 INTERNAL_ERROR
// (connection error), queue.declare answers 0 messages, 0 consumers, and
// publishes wait pending (no nack) until a leader appears.
func TestQQNoLeader(t *testing.T) {
	old := qqLeaderWait
	qqLeaderWait = 300 * time.Millisecond
	t.Cleanup(func() { qqLeaderWait = old })
	_, qa, _, qc := qqFixture(t)
	publishTo(t, qc, "c1")
	qa.qqLeaderChanged("", 1)
	va := qa.vhost
	start := time.Now()
	_, err := va.LookupQueue("qq", 0)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.InternalError || !ae.Hard || ae.Text != "INTERNAL_ERROR" {
		t.Fatalf("lookup for consume/get without a leader: %v", err)
	}
	if time.Since(start) < qqLeaderWait {
		t.Fatalf("no wait for a leader (%v)", time.Since(start))
	}
	if err := qa.AddConsumer(&Consumer{Tag: "x", Sink: &qqSink{}}); !errors.As(err, &ae) || ae.Code != amqp.InternalError {
		t.Fatalf("consume without a leader: %v", err)
	}
	if _, ok := qaGet(qa); ok {
		t.Fatal("get without a leader returned a message")
	}
	if _, m, c, err := va.DeclareQueue(QueueSpec{Name: "qq", Durable: true, Home: qqB}, true); err != nil || m != 0 || c != 0 {
		t.Fatalf("declare without a leader: %d %d %v, want 0 0 nil", m, c, err)
	}
	tok := qqPublishN(t, qa, 0, 3)
	if err := qqWait(tok, 100*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish without a leader answered: %v", err)
	}
	// A consume waiting for a leader gets it when one appears.
	done := make(chan error, 1)
	go func() { done <- qa.AddConsumer(&Consumer{Tag: "y", Sink: &qqSink{}}) }()
	qa.qqLeaderChanged(qqC, 2)
	if err := <-done; err != nil {
		t.Fatalf("consume as the leader appears: %v", err)
	}
	if err := qqWait(tok, 5*time.Second); err != nil {
		t.Fatalf("confirms once a leader is known: %v", err)
	}
	if _, _, c, err := va.DeclareQueue(QueueSpec{Name: "qq", Durable: true, Home: qqB}, true); err != nil || c != 1 {
		t.Fatalf("declare with a leader: %d consumers, %v; want the leader's 1", c, err)
	}
}

func qaGet(q *Queue) (Delivery, bool) {
	d, _, ok := q.Get(false)
	return d, ok
}

// issue 14 (failover): the leader's node going down neither cancels this
// node's consumers nor nacks its pending publishes; when the node is back
// (still the leader) the consumer is attached again and the publishes
// resent; settles of deliveries from before are dropped.
func TestQQLeaderNodeDownAndBack(t *testing.T) {
	n, qa, qb, _ := qqFixture(t)
	qa.qqLeaderChanged(qqB, 1)
	sink := &qqSink{}
	c := &Consumer{Tag: "ct", Sink: sink}
	noErr(t, qa.AddConsumer(c))
	publishTo(t, qb, "b1")
	waitFor(t, "a delivery", func() bool { return sink.count() == 1 })
	before := sink.take(1)
	n.setDown(qqB, true)
	tok := qqPublishN(t, qa, 0, 3)
	if err := qqWait(tok, 100*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish while the leader is down answered: %v", err)
	}
	n.setDown(qqB, false)
	if err := qqWait(tok, 5*time.Second); err != nil {
		t.Fatalf("confirms once the leader is back: %v", err)
	}
	waitFor(t, "the consumer attached again", func() bool { return qb.ConsumerCount() == 1 })
	// b1 came back (B returned what A held when A went down) with 0..2.
	waitFor(t, "deliveries after the return", func() bool { return sink.count() == 4 })
	got := sink.take(4)
	var names []string
	for _, d := range got {
		names = append(names, string(d.Msg.Body))
	}
	if !slices.Contains(names, "b1") || got[0].term == before[0].term {
		t.Fatalf("after the return: %v (epoch %d, before %d)", names, got[0].term, before[0].term)
	}
	qa.Ack(before) // stale: dropped
	qa.Ack(got[:1])
	waitFor(t, "the current ack", func() bool { return qb.Stats().Unacked == 3 })
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.cancelled != 0 {
		t.Fatal("consumer cancelled by the leader's node going down")
	}
}

// issue 14: the publish ids of one node for one queue increase in send
// order even with concurrent publishers (sends are serialized per queue).
func TestQQConcurrentPublishOrder(t *testing.T) {
	n, qa, _, qc := qqFixture(t)
	var toC qqSeqs
	n.setTap(toC.tap(qqC, func() bool { return false }))
	qa.qqLeaderChanged(qqC, 1)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var all Durability
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			var r Router
			for i := 0; i < 200; i++ {
				res, err := qa.vhost.Publish(&r, "", &Message{RoutingKey: "qq", Body: []byte(fmt.Sprint(g, "-", i))})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				all.Add(res.Durable)
				mu.Unlock()
			}
		}(g)
	}
	wg.Wait()
	if err := qqWait(all, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	toC.mu.Lock()
	seqs := slices.Clone(toC.seqs)
	toC.mu.Unlock()
	if len(seqs) != 800 || !slices.IsSorted(seqs) {
		t.Fatalf("%d sends, sorted %v", len(seqs), slices.IsSorted(seqs))
	}
	if got := len(bodies(qc)); got != 800 {
		t.Fatalf("leader holds %d, want 800", got)
	}
}
