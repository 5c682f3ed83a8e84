package streamserver

import (
	"cmp"
	"encoding/binary"
	"errors"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/streamlog"
	sp "github.com/warrenmq/warren/streamproto"
)

// subscription is one Subscribe: a reader of its stream's chunks that
// sends one whole chunk per credit.
type subscription struct {
	c      *conn
	id     uint8
	q      *broker.Queue
	stream string
	props  map[string]string
	name   string // the consumer's name (offset tracking, SAC groups)

	mu      sync.Mutex
	credit  int  // chunks it may still be sent
	active  bool // delivering (false while a SAC consumer waits)
	started bool // its reader runs
	kind    uint16
	value   int64
	wake    chan struct{}
	quit    chan struct{}
	done    chan struct{}
	once    sync.Once
	sac     *sacGroup

	// counters for the management API
	offset    atomic.Uint64 // the last offset sent
	chunks    atomic.Uint64
	messages  atomic.Uint64
	delivered atomic.Uint64
}

func (sub *subscription) poke() {
	select {
	case sub.wake <- struct{}{}:
	default:
	}
}

func (sub *subscription) stop() {
	sub.once.Do(func() { close(sub.quit) })
	sub.mu.Lock()
	started := sub.started
	sub.mu.Unlock()
	if started {
		<-sub.done
	}
	if sub.sac != nil {
		sub.c.s.sac.leave(sub)
	}
}

func (c *conn) subscribe(corr uint32, d *sp.Dec) error {
	id := d.U8()
	name := d.S()
	kind := d.U16()
	var value int64
	if kind == broker.OffsetAbsolute || kind == broker.OffsetTimestamp {
		value = int64(d.U64())
	}
	credit := d.U16()
	var props map[string]string
	if d.Len() > 0 {
		props = d.Map()
	}
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed subscribe"}
	}
	if kind < broker.OffsetFirst || kind > broker.OffsetTimestamp {
		c.respond(sp.KeySubscribe, corr, sp.PreconditionFailed)
		return nil
	}
	q, code := c.stream(name, broker.Read)
	if q == nil {
		c.respond(sp.KeySubscribe, corr, code)
		return nil
	}
	if !q.StreamHere() {
		// no member of the stream on this node: the client reads a replica
		c.respond(sp.KeySubscribe, corr, sp.StreamNotAvailable)
		return nil
	}
	sub := &subscription{c: c, id: id, q: q, stream: name, props: props, name: props["name"], credit: int(credit),
		kind: kind, value: value, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	c.mu.Lock()
	if _, taken := c.subs[id]; taken {
		c.mu.Unlock()
		c.respond(sp.KeySubscribe, corr, sp.SubscriptionIDExists)
		return nil
	}
	sac := props["single-active-consumer"] == "true"
	if sac && sub.name == "" {
		c.mu.Unlock()
		c.respond(sp.KeySubscribe, corr, sp.PreconditionFailed)
		return nil
	}
	c.subs[id] = sub
	c.mu.Unlock()
	c.watch(q, name)
	c.respond(sp.KeySubscribe, corr, sp.OK)
	if sac {
		c.s.sac.join(sub, props["super-stream"])
		return nil
	}
	sub.start(kind, value)
	return nil
}

// start begins reading at (kind, value).
func (sub *subscription) start(kind uint16, value int64) {
	sub.mu.Lock()
	if sub.started {
		sub.mu.Unlock()
		return
	}
	select {
	case <-sub.quit:
		sub.mu.Unlock()
		return
	default:
	}
	sub.started, sub.active = true, true
	sub.mu.Unlock()
	pos, err := sub.q.StreamPosition(kind, value)
	if err != nil {
		pos = sub.q.StreamLog().End()
	}
	go sub.run(sub.q.StreamLog().NewReader(pos))
}

// filtersOf are the filter values (filter.N) of a subscription's or a
// ResolveOffsetSpec's properties, and whether it wants unfiltered
// messages too.
func filtersOf(props map[string]string) ([]string, bool) {
	var fs []string
	for k, v := range props {
		if strings.HasPrefix(k, "filter.") {
			fs = append(fs, v)
		}
	}
	return fs, props["match-unfiltered"] == "true"
}

func (sub *subscription) run(r *streamlog.Reader) {
	defer close(sub.done)
	defer r.Close()
	defer func() {
		if p := recover(); p != nil {
			sub.c.s.log.Error("stream subscription failed: internal error", "conn", sub.c.id, "panic", p, "stack", string(debug.Stack()))
			sub.c.nc.Close()
		}
	}()
	c := sub.c
	log := sub.q.StreamLog()
	values, unfiltered := filtersOf(sub.props)
	for {
		// wait for credit
		sub.mu.Lock()
		for sub.credit <= 0 {
			sub.mu.Unlock()
			select {
			case <-sub.quit:
				return
			case <-sub.wake:
			}
			sub.mu.Lock()
		}
		sub.mu.Unlock()
		wake := log.Wait()
		bufp := chunkBufs.Get().(*[]byte)
		r.UseBuffer(*bufp)
		ch, err := r.Next()
		if err != nil || ch.Type != streamlog.ChunkUser {
			chunkBufs.Put(bufp)
		}
		if errors.Is(err, streamlog.ErrNoChunk) {
			select {
			case <-sub.quit:
				return
			case <-wake:
			case <-sub.wake:
			}
			continue
		}
		if err != nil {
			return
		}
		if ch.Type != streamlog.ChunkUser {
			continue
		}
		if len(values) > 0 && !streamlog.Matches(ch.Bloom(), values, unfiltered) {
			chunkBufs.Put(bufp)
			continue // no message it wants: skipped, no credit spent
		}
		*bufp = ch.Raw // the chunk's buffer, the writer's once queued
		var lastChunk uint64
		if c.deliverV2 {
			lastChunk = log.Info().LastChunkID
		}
		// wait for room in the connection's output
		c.mu.Lock()
		for c.pending() > outHighWater && !c.closed {
			c.room.Wait()
		}
		if c.closed {
			c.mu.Unlock()
			chunkBufs.Put(bufp)
			return
		}
		select {
		case <-sub.quit:
			c.mu.Unlock()
			chunkBufs.Put(bufp)
			return
		default:
		}
		// The frame: its start and the chunk's header in out, then the
		// chunk's data from its own buffer (the frame's size counts it).
		data := ch.Data()
		start := len(c.out)
		e := sp.Enc{B: c.out}
		v := uint16(1)
		if c.deliverV2 {
			v = 2
		}
		e.Start(sp.KeyDeliver, v)
		e.U8(sub.id)
		if v == 2 {
			e.U64(lastChunk)
		}
		e.B = append(e.B, ch.Raw[:streamlog.HeaderSize]...)
		binary.BigEndian.PutUint32(e.B[start:], uint32(len(e.B)-start-4+len(data)))
		c.outq = append(c.outq, outPiece{b: e.B}, outPiece{b: data, pooled: bufp})
		c.outBytes += len(e.B) + len(data)
		c.out = nil
		c.mu.Unlock()
		c.poke()
		sub.mu.Lock()
		sub.credit--
		sub.mu.Unlock()
		sub.offset.Store(ch.Next() - 1) // the last offset sent, as RabbitMQ reports it
		sub.chunks.Add(1)
		sub.messages.Add(uint64(ch.Records))
		sub.c.s.delivered.Add(uint64(ch.Records))
	}
}

func (c *conn) credit(d *sp.Dec) error {
	id := d.U8()
	n := d.U16()
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed credit"}
	}
	c.mu.Lock()
	sub := c.subs[id]
	c.mu.Unlock()
	if sub == nil {
		c.send(func(e *sp.Enc) {
			e.Start(sp.KeyCreditResponse, 1)
			e.U16(sp.SubscriptionIDNotExist)
			e.U8(id)
			e.Finish()
		})
		return nil
	}
	sub.mu.Lock()
	sub.credit = min(sub.credit+int(n), 1<<20)
	sub.mu.Unlock()
	sub.poke()
	return nil
}

func (c *conn) unsubscribe(corr uint32, d *sp.Dec) error {
	id := d.U8()
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed unsubscribe"}
	}
	c.mu.Lock()
	sub := c.subs[id]
	delete(c.subs, id)
	c.mu.Unlock()
	if sub == nil {
		c.respond(sp.KeyUnsubscribe, corr, sp.SubscriptionIDNotExist)
		return nil
	}
	sub.stop()
	c.respond(sp.KeyUnsubscribe, corr, sp.OK)
	return nil
}

// --- single active consumer ---

// sacGroups are the single-active-consumer groups of the node: by vhost,
// stream and consumer name, the subscriptions in order of arrival. The
// first is active; when it goes, the next is told (ConsumerUpdate) and
// starts where it answers. In a super stream, the group of partition i
// makes its consumer i mod n active (n consumers in the group), so the
// partitions spread over the consumers.
type sacGroups struct {
	s      *Server
	mu     sync.Mutex
	groups map[string]*sacGroup
	corr   uint32
	// pending ConsumerUpdate answers, by correlation id
	waiting map[uint32]*subscription
}

type sacGroup struct {
	key       string
	partition int // the stream's index in its super stream (-1: none)
	subs      []*subscription
	active    *subscription
}

func newSACGroups(s *Server) *sacGroups {
	return &sacGroups{s: s, groups: map[string]*sacGroup{}, waiting: map[uint32]*subscription{}}
}

func (g *sacGroups) join(sub *subscription, superStream string) {
	key := sub.c.vhost.Name + "\x00" + sub.stream + "\x00" + sub.name
	g.mu.Lock()
	grp := g.groups[key]
	if grp == nil {
		grp = &sacGroup{key: key, partition: -1}
		if superStream != "" {
			grp.partition = partitionIndex(sub.c.vhost, superStream, sub.stream)
		}
		g.groups[key] = grp
	}
	sub.sac = grp
	grp.subs = append(grp.subs, sub)
	g.rebalanceLocked(grp)
	g.mu.Unlock()
}

func (g *sacGroups) leave(sub *subscription) {
	g.mu.Lock()
	defer g.mu.Unlock()
	grp := sub.sac
	if grp == nil {
		return
	}
	i := -1
	for j, s := range grp.subs {
		if s == sub {
			i = j
		}
	}
	if i < 0 {
		return
	}
	grp.subs = append(grp.subs[:i], grp.subs[i+1:]...)
	for corr, w := range g.waiting {
		if w == sub {
			delete(g.waiting, corr)
		}
	}
	if grp.active == sub {
		grp.active = nil
	}
	if len(grp.subs) == 0 {
		delete(g.groups, grp.key)
		return
	}
	g.rebalanceLocked(grp)
}

// rebalanceLocked makes the right subscription of grp active.
func (g *sacGroups) rebalanceLocked(grp *sacGroup) {
	want := grp.subs[0]
	if grp.partition >= 0 {
		want = grp.subs[grp.partition%len(grp.subs)]
	}
	if grp.active == want {
		return
	}
	if old := grp.active; old != nil {
		// the old one steps down first (it stops reading)
		old.mu.Lock()
		old.active = false
		old.mu.Unlock()
		old.c.mu.Lock()
		delete(old.c.subs, old.id)
		old.c.mu.Unlock()
		go func(old *subscription) {
			old.once.Do(func() { close(old.quit) })
			old.mu.Lock()
			started := old.started
			old.mu.Unlock()
			if started {
				<-old.done
			}
			// it stays subscribed, inactive: a fresh reader for later
			fresh := &subscription{c: old.c, id: old.id, q: old.q, stream: old.stream, props: old.props, name: old.name,
				credit: old.credit, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}), sac: old.sac}
			g.mu.Lock()
			for i, s := range grp.subs {
				if s == old {
					grp.subs[i] = fresh
				}
			}
			g.mu.Unlock()
			old.c.mu.Lock()
			if !old.c.closed {
				old.c.subs[old.id] = fresh
			}
			old.c.mu.Unlock()
			g.consumerUpdate(fresh, false)
		}(old)
	}
	grp.active = want
	g.consumerUpdateLocked(want, true)
}

// consumerUpdate tells sub whether it is active; an active one starts
// once it answers with where to start.
func (g *sacGroups) consumerUpdate(sub *subscription, active bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.consumerUpdateLocked(sub, active)
}

func (g *sacGroups) consumerUpdateLocked(sub *subscription, active bool) {
	g.corr++
	corr := g.corr
	if active {
		g.waiting[corr] = sub
	}
	a := uint8(0)
	if active {
		a = 1
	}
	sub.c.send(func(e *sp.Enc) {
		e.Start(sp.KeyConsumerUpdate, 1)
		e.U32(corr)
		e.U8(sub.id)
		e.U8(a)
		e.Finish()
	})
}

func (c *conn) consumerUpdateResponse(d *sp.Dec) error {
	corr := d.U32()
	_ = d.U16() // code
	kind := d.U16()
	var value int64
	if kind == broker.OffsetAbsolute || kind == broker.OffsetTimestamp {
		value = int64(d.U64())
	}
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed consumer_update response"}
	}
	g := c.s.sac
	g.mu.Lock()
	sub := g.waiting[corr]
	delete(g.waiting, corr)
	g.mu.Unlock()
	if sub == nil {
		return nil
	}
	if kind == 0 {
		kind, value = sub.kind, sub.value // "none": its own
	}
	if kind < broker.OffsetFirst || kind > broker.OffsetTimestamp {
		kind, value = broker.OffsetNext, 0
	}
	sub.start(kind, value)
	return nil
}

// --- super streams ---

// superStreamArg marks a super stream's exchange, as RabbitMQ's.
const superStreamArg = "x-super-stream"

// partitions are a super stream's streams in partition order.
func partitions(v *broker.VHost, superStream string) ([]string, bool) {
	x := v.Exchange(superStream)
	if x == nil {
		return nil, false
	}
	type part struct {
		name  string
		order int64
	}
	var ps []part
	for _, b := range v.Bindings() {
		if b.Source != superStream || !b.DestinationIsQueue {
			continue
		}
		order, _ := broker.IntArg(b.Args["x-stream-partition-order"])
		ps = append(ps, part{b.Destination, order})
	}
	slices.SortFunc(ps, func(a, b part) int { return cmp.Or(cmp.Compare(a.order, b.order), strings.Compare(a.name, b.name)) })
	var out []string
	for _, p := range ps {
		if len(out) == 0 || out[len(out)-1] != p.name {
			out = append(out, p.name)
		}
	}
	return out, true
}

func partitionIndex(v *broker.VHost, superStream, stream string) int {
	ps, _ := partitions(v, superStream)
	for i, p := range ps {
		if p == stream {
			return i
		}
	}
	return -1
}

func (c *conn) partitions(corr uint32, d *sp.Dec) error {
	ss := d.S()
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed partitions"}
	}
	ps, ok := partitions(c.vhost, ss)
	code := sp.OK
	if !ok {
		code = sp.StreamDoesNotExist
	}
	c.send(func(e *sp.Enc) {
		e.Response(sp.KeyPartitions, corr, code)
		e.Strs(ps)
		e.Finish()
	})
	return nil
}

func (c *conn) route(corr uint32, d *sp.Dec) error {
	key := d.S()
	ss := d.S()
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed route"}
	}
	x := c.vhost.Exchange(ss)
	var out []string
	code := sp.OK
	if x == nil {
		code = sp.StreamDoesNotExist
	} else {
		for _, b := range c.vhost.Bindings() {
			if b.Source == ss && b.DestinationIsQueue && b.RoutingKey == key {
				out = append(out, b.Destination)
			}
		}
	}
	c.send(func(e *sp.Enc) {
		e.Response(sp.KeyRoute, corr, code)
		e.Strs(out)
		e.Finish()
	})
	return nil
}

func (c *conn) createSuperStream(corr uint32, d *sp.Dec) error {
	name := d.S()
	parts := d.Strs()
	keys := d.Strs()
	args := d.Map()
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed create_super_stream"}
	}
	c.respond(sp.KeyCreateSuperStream, corr, c.makeSuperStream(name, parts, keys, args))
	return nil
}

// makeSuperStream creates super stream name: its partitions (streams),
// its direct exchange marked x-super-stream, and a binding of each
// partition with its key and x-stream-partition-order, as RabbitMQ's
// stream manager does.
func (c *conn) makeSuperStream(name string, parts, keys []string, args map[string]string) uint16 {
	if name == "" || len(parts) == 0 || len(parts) != len(keys) {
		return sp.PreconditionFailed
	}
	if !c.s.b.Check(c.user, c.vhost.Name, broker.Configure, name) {
		return sp.AccessRefused
	}
	if c.vhost.Exchange(name) != nil {
		return sp.StreamAlreadyExists
	}
	for _, p := range parts {
		if c.vhost.Queue(p) != nil {
			return sp.StreamAlreadyExists
		}
		if !c.s.b.Check(c.user, c.vhost.Name, broker.Configure, p) {
			return sp.AccessRefused
		}
	}
	for _, p := range parts {
		if code := c.createStream(p, args); code != sp.OK {
			return code
		}
	}
	if err := c.vhost.DeclareExchange(broker.ExchangeSpec{Name: name, Kind: "direct", Durable: true,
		Args: amqp.Table{superStreamArg: true}}, false); err != nil {
		return sp.PreconditionFailed
	}
	for i, p := range parts {
		if err := c.vhost.Bind(name, p, false, keys[i], amqp.Table{"x-stream-partition-order": int64(i)}, 0); err != nil {
			return sp.PreconditionFailed
		}
	}
	return sp.OK
}

func (c *conn) deleteSuperStream(corr uint32, d *sp.Dec) error {
	name := d.S()
	if d.Err() != nil {
		return &errClose{sp.UnknownFrame, "malformed delete_super_stream"}
	}
	ps, ok := partitions(c.vhost, name)
	switch {
	case !ok:
		c.respond(sp.KeyDeleteSuperStream, corr, sp.StreamDoesNotExist)
		return nil
	case !c.s.b.Check(c.user, c.vhost.Name, broker.Configure, name):
		c.respond(sp.KeyDeleteSuperStream, corr, sp.AccessRefused)
		return nil
	}
	c.vhost.DeleteExchange(name, false)
	for _, p := range ps {
		if c.vhost.Stream(p) != nil {
			c.vhost.DeleteQueue(p, 0, false, false)
		}
	}
	c.respond(sp.KeyDeleteSuperStream, corr, sp.OK)
	return nil
}
