package broker

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/store"
)

// VHost is a virtual host: a namespace of exchanges, queues and bindings.
type VHost struct {
	b    *Broker
	Name string

	mu        sync.RWMutex
	exchanges map[string]*Exchange
	queues    map[string]*Queue
	replyTo   map[string]ReplyTarget
	closed    bool
	pending   []defOp // store changes made under mu (persist.go)

	policies vhostPolicies    // policy.go
	meta     VHostMeta        // guarded by b.mu
	limitMap map[string]int64 // guarded by b.mu; copied on write (limits.go)
	limits   vhostLimits
	dlq      dlBacklog // dead letters waiting for their queues' flushers (dlflush.go)
}

// ReplyTarget receives messages published to a direct reply-to address.
type ReplyTarget interface {
	// DeliverReply hands m to the consumer; false if it is gone.
	DeliverReply(m *Message) bool
}

// DirectReplyTo is the pseudo-queue name of RabbitMQ's direct reply-to.
const DirectReplyTo = "amq.rabbitmq.reply-to"

func newVHost(b *Broker, name string) *VHost {
	v := &VHost{b: b, Name: name, exchanges: map[string]*Exchange{}, queues: map[string]*Queue{}, replyTo: map[string]ReplyTarget{}}
	v.limits.init()
	v.exchanges[""] = newExchange(v, "", KindDirect, true, false, false, nil)
	for _, x := range []struct{ name, kind string }{
		{"amq.direct", KindDirect}, {"amq.fanout", KindFanout}, {"amq.topic", KindTopic},
		{"amq.headers", KindHeaders}, {"amq.match", KindHeaders},
	} {
		v.exchanges[x.name] = newExchange(v, x.name, x.kind, true, false, false, nil)
	}
	// RabbitMQ's firehose tracer publishes here when tracing is on; Warren
	// declares it (internal, so clients cannot publish to it) so that
	// topologies and definitions that name it stay valid.
	v.exchanges["amq.rabbitmq.trace"] = newExchange(v, "amq.rabbitmq.trace", KindTopic, true, false, true, nil)
	return v
}

// Broker returns the vhost's broker.
func (v *VHost) Broker() *Broker { return v.b }

func (v *VHost) close() {
	v.mu.Lock()
	v.closed = true
	for _, x := range v.exchanges {
		if x.delayed != nil {
			x.delayed.drop()
		}
	}
	qs := make([]*Queue, 0, len(v.queues))
	for _, q := range v.queues {
		qs = append(qs, q)
	}
	v.mu.Unlock()
	for _, q := range qs {
		v.deleteQueue(q, false, false)
	}
}

// ExchangeSpec describes an exchange.declare.
type ExchangeSpec struct {
	Name                          string
	Kind                          string
	Durable, AutoDelete, Internal bool
	Args                          amqp.Table
}

// DeclareExchange creates an exchange or checks that an existing one is
// equivalent. passive only checks existence.
func (v *VHost) DeclareExchange(s ExchangeSpec, passive bool) (err error) {
	if !passive && s.Name != "" && v.b.replicating() && v.Exchange(s.Name) == nil {
		return v.b.propose(fmt.Sprintf("declare of exchange '%s' in vhost '%s'", s.Name, v.Name), exchangeCommand(v.Name, s))
	}
	return v.declareExchangeLocal(s, passive)
}

func (v *VHost) declareExchangeLocal(s ExchangeSpec, passive bool) (err error) {
	v.mu.Lock()
	defer func() { err = v.unlockPersist(err) }()
	if s.Name == "" {
		return amqp.Errorf(amqp.AccessRefused, "operation not permitted on the default exchange")
	}
	x := v.exchanges[s.Name]
	if passive {
		if x == nil {
			return notFoundExchange(s.Name, v.Name)
		}
		return nil
	}
	if x == nil {
		if strings.HasPrefix(s.Name, "amq.") {
			return amqp.Errorf(amqp.AccessRefused, "exchange name '%s' contains reserved prefix 'amq.*'", s.Name)
		}
		if !validKind(s.Kind) {
			return amqp.ConnErrorf(amqp.CommandInvalid, "unknown exchange type '%s'", s.Kind)
		}
		if s.Kind == KindDelayed {
			if err := validateDelayedArgs(s.Args); err != nil {
				return err
			}
		}
		if s.Kind == KindFederationUpstream {
			if err := validateUpstreamArgs(s.Args); err != nil {
				return err
			}
		}
		x = newExchange(v, s.Name, s.Kind, s.Durable, s.AutoDelete, s.Internal, s.Args)
		v.exchanges[s.Name] = x
		if x.recorded() {
			v.recordLocked(exchangeOp(v, x))
		}
		return nil
	}
	what := fmt.Sprintf("exchange '%s' in vhost '%s'", s.Name, v.Name)
	if x.Kind != s.Kind {
		return amqp.Errorf(amqp.PreconditionFailed, "inequivalent arg 'type' for %s: received '%s' but current is '%s'", what, s.Kind, x.Kind)
	}
	for _, c := range []struct {
		name     string
		got, cur bool
	}{{"durable", s.Durable, x.Durable}, {"auto_delete", s.AutoDelete, x.AutoDelete}, {"internal", s.Internal, x.Internal}} {
		if c.got != c.cur {
			return amqp.Errorf(amqp.PreconditionFailed, "inequivalent arg '%s' for %s: received '%t' but current is '%t'", c.name, what, c.got, c.cur)
		}
	}
	return argsEquivalent(what, x.Args, s.Args, []string{"alternate-exchange"})
}

// Exchange returns the named exchange or nil.
func (v *VHost) Exchange(name string) *Exchange {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.exchanges[name]
}

// Exchanges returns the vhost's exchanges sorted by name.
func (v *VHost) Exchanges() []*Exchange {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]*Exchange, 0, len(v.exchanges))
	for _, x := range v.exchanges {
		out = append(out, x)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// DeleteExchange deletes an exchange and its bindings. Deleting a missing
// exchange succeeds, as in RabbitMQ.
func (v *VHost) DeleteExchange(name string, ifUnused bool) (err error) {
	if name != "" && v.b.replicating() && v.Exchange(name) != nil {
		return v.b.propose(fmt.Sprintf("delete of exchange '%s' in vhost '%s'", name, v.Name),
			&command{Op: opExchangeDelete, VHost: v.Name, Name: name, IfUnused: ifUnused})
	}
	return v.deleteExchangeLocal(name, ifUnused)
}

func (v *VHost) deleteExchangeLocal(name string, ifUnused bool) (err error) {
	v.mu.Lock()
	defer func() { err = v.unlockPersist(err) }()
	if name == "" {
		return amqp.Errorf(amqp.AccessRefused, "operation not permitted on the default exchange")
	}
	if strings.HasPrefix(name, "amq.") && v.exchanges[name] != nil {
		return amqp.Errorf(amqp.AccessRefused, "deletion of system exchange '%s' in vhost '%s' not allowed", name, v.Name)
	}
	x := v.exchanges[name]
	if x == nil {
		return nil
	}
	if ifUnused && len(x.bindings) > 0 {
		return amqp.Errorf(amqp.PreconditionFailed, "exchange '%s' in vhost '%s' in use", name, v.Name)
	}
	v.deleteExchangeLocked(x)
	return nil
}

func (v *VHost) deleteExchangeLocked(x *Exchange) {
	delete(v.exchanges, x.Name)
	x.deleted = true
	if x.recorded() {
		v.recordLocked(delOp(DefKindExchanges, scopedKey(v.Name, x.Name)))
	}
	if x.delayed != nil {
		x.delayed.drop()
	}
	for _, b := range x.bindings {
		v.unlinkLocked(b)
	}
	for b := range x.inbound {
		v.unlinkLocked(b)
	}
}

// unlinkLocked removes a binding from both ends and auto-deletes its
// source exchange if that was its last binding.
func (v *VHost) unlinkLocked(b *Binding) {
	b.Source.removeBinding(b)
	if b.recorded() {
		v.recordLocked(delOp(DefKindBindings, bindingKey(v.Name, b)))
	}
	if b.dest.q != nil {
		delete(b.dest.q.bindings, b)
	} else {
		delete(b.dest.x.inbound, b)
	}
	if src := b.Source; src.AutoDelete && len(src.bindings) == 0 && !src.deleted {
		v.deleteExchangeLocked(src)
	}
}

// QueueSpec describes a queue.declare.
type QueueSpec struct {
	Name                           string
	Durable, Exclusive, AutoDelete bool
	Args                           amqp.Table
	// Owner is the declaring connection's id, for exclusive queues.
	Owner uint64
	// ServerNamed marks a name made by NewQueueName, exempt from the
	// reserved "amq." prefix rule.
	ServerNamed bool
	// Home is the node the queue lives on in a cluster ("" on a single
	// node; Queue.Home).
	Home string
	// Members and Group make a quorum queue in a cluster a replicated
	// one (issue 14, qqgroup.go): its Raft group's initial members, the
	// preferred leader first, and the group's id.
	Members []string
	Group   uint64
	// newGroup: the declare creates the group (its command is being
	// applied), not a restart or a snapshot.
	newGroup bool
}

// NewQueueName returns a server-generated queue name as RabbitMQ makes them.
func NewQueueName() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "amq.gen-" + base64.RawURLEncoding.EncodeToString(b[:])
}

// DeclareQueue creates a queue or checks an existing one. It returns the
// queue with its ready message and consumer counts.
func (v *VHost) DeclareQueue(s QueueSpec, passive bool) (*Queue, int, int, error) {
	if !passive && v.b.replicating() && v.Queue(s.Name) == nil && queueTypeOf(s.Args) == QueueTypeStream &&
		(!v.b.sn.on.Load() || v.b.streamNet() == nil) {
		// Each node would keep a stream of its own: refused while a node
		// of the cluster does not replicate streams, rather than split.
		return nil, 0, 0, amqp.Errorf(amqp.NotImplemented, "stream queue '%s' in vhost '%s' cannot be declared: a node of the cluster does not replicate streams", s.Name, v.Name)
	}
	if !passive && v.b.replicating() && v.Queue(s.Name) == nil {
		return v.proposeQueueDeclare(s)
	}
	return v.declareQueueLocal(s, passive)
}

func (v *VHost) declareQueueLocal(s QueueSpec, passive bool) (*Queue, int, int, error) {
	v.mu.Lock()
	q := v.queues[s.Name]
	if q != nil && q.Exclusive && q.Owner != s.Owner {
		v.mu.Unlock()
		return nil, 0, 0, lockedQueue(s.Name, v.Name)
	}
	if passive {
		v.mu.Unlock()
		if q == nil {
			return nil, 0, 0, notFoundQueue(s.Name, v.Name)
		}
		// RabbitMQ renews x-expires on a passive declare too (its stat
		// call restarts the expiry timer).
		return q.declareCounts()
	}
	if q == nil {
		if strings.HasPrefix(s.Name, "amq.") && !s.ServerNamed {
			v.mu.Unlock()
			return nil, 0, 0, amqp.Errorf(amqp.AccessRefused, "queue name '%s' contains reserved prefix 'amq.*'", s.Name)
		}
		// Arguments are validated on creation only (R1.1); see qargs.go.
		if s.ServerNamed {
			if err := checkServerNamed(s.Args); err != nil {
				v.mu.Unlock()
				return nil, 0, 0, err
			}
		}
		if err := ValidateQueueDeclare(s.Name, v.Name, s); err != nil {
			v.mu.Unlock()
			return nil, 0, 0, err
		}
		if err := v.checkQueueLimitLocked(s.Name); err != nil {
			v.mu.Unlock()
			return nil, 0, 0, err
		}
		q = newQueue(v, s)
		q.Home = s.Home
		v.applyQueuePolicies(q) // existing policies apply (R1.12)
		if err := q.newKind(s, v.b.node); err != nil {
			v.mu.Unlock()
			return nil, 0, 0, err
		}
		v.queues[s.Name] = q
		if q.recorded() {
			v.recordLocked(queueOp(v, q))
		}
		if q.persisted() {
			if ms := v.b.msgs; ms != nil && !v.b.loading.Load() && q.typ().here() && !q.typ().ownLog() {
				q.disk = ms.newDisk(q, 0, "")
			}
		}
		// Every queue is bound to the default exchange by its name; that
		// binding is implicit (see route).
		if err := v.unlockPersist(nil); err != nil {
			return nil, 0, 0, err
		}
		if q.disk != nil {
			// The log exists from the start, so that dead-letter moves
			// can name it (dlmove.go) before its first message.
			q.mu.Lock()
			q.disk.ensure()
			q.mu.Unlock()
		}
		q.typ().started(s.newGroup)
		return q, 0, 0, nil
	}
	v.mu.Unlock()
	what := fmt.Sprintf("queue '%s' in vhost '%s'", s.Name, v.Name)
	if q.Durable != s.Durable {
		return nil, 0, 0, amqp.Errorf(amqp.PreconditionFailed, "inequivalent arg 'durable' for %s: received '%t' but current is '%t'", what, s.Durable, q.Durable)
	}
	if q.AutoDelete != s.AutoDelete {
		return nil, 0, 0, amqp.Errorf(amqp.PreconditionFailed, "inequivalent arg 'auto_delete' for %s: received '%t' but current is '%t'", what, s.AutoDelete, q.AutoDelete)
	}
	if q.Exclusive != s.Exclusive {
		return nil, 0, 0, lockedQueue(s.Name, v.Name)
	}
	if err := queueArgsEquivalent(what, q, s.Args); err != nil { // R1.10
		return nil, 0, 0, err
	}
	return q.declareCounts() // a redeclare is a use (x-expires, R2.7)
}

func lockedQueue(name, vhost string) *amqp.Error {
	return amqp.Errorf(amqp.ResourceLocked, "cannot obtain exclusive access to locked queue '%s' in vhost '%s'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration.", name, vhost)
}

// Queue returns the named queue or nil.
func (v *VHost) Queue(name string) *Queue {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.queues[name]
}

// Queues returns the vhost's queues sorted by name.
func (v *VHost) Queues() []*Queue {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]*Queue, 0, len(v.queues))
	for _, q := range v.queues {
		out = append(out, q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// LookupQueue finds a queue for use by connection conn: 404 if missing, 405
// if it is exclusive to another connection.
func (v *VHost) LookupQueue(name string, conn uint64) (*Queue, error) {
	q := v.Queue(name)
	if q == nil {
		return nil, notFoundQueue(name, v.Name)
	}
	if q.Exclusive && q.Owner != conn {
		return nil, lockedQueue(name, v.Name)
	}
	if err := q.checkHome(); err != nil { // a remote queue whose home is down
		return nil, err
	}
	return q, nil
}

// DeleteQueue deletes a queue, returning the number of ready messages it
// held. Deleting a missing queue succeeds with 0.
func (v *VHost) DeleteQueue(name string, conn uint64, ifUnused, ifEmpty bool) (int, error) {
	q := v.Queue(name)
	if q == nil {
		return 0, nil
	}
	if q.Exclusive && q.Owner != conn {
		return 0, lockedQueue(name, v.Name)
	}
	if v.b.replicating() {
		// The deletion applies on every node, the home's messages with
		// it; a queue whose home is down cannot be deleted (RabbitMQ); a
		// quorum queue without a leader can (RabbitMQ forces it).
		if err := q.typ().deletable(); err != nil {
			return 0, err
		}
		return v.proposeQueueDelete(q, conn, ifUnused, ifEmpty)
	}
	home, err := q.deleteAtHome(ifUnused, ifEmpty) // a remote queue's messages are on its home
	if err != nil {
		return 0, err
	}
	n, err := v.deleteQueue(q, ifUnused, ifEmpty)
	return n + home, err
}

func (v *VHost) deleteQueue(q *Queue, ifUnused, ifEmpty bool) (int, error) {
	v.mu.Lock()
	if v.queues[q.Name] != q {
		v.mu.Unlock()
		return 0, nil
	}
	q.mu.Lock()
	if ifUnused && len(q.m.Consumers()) > 0 {
		q.mu.Unlock()
		v.mu.Unlock()
		return 0, amqp.Errorf(amqp.PreconditionFailed, "queue '%s' in vhost '%s' in use", q.Name, v.Name)
	}
	if ifEmpty && q.readyLocked() > 0 {
		q.mu.Unlock()
		v.mu.Unlock()
		return 0, amqp.Errorf(amqp.PreconditionFailed, "queue '%s' in vhost '%s' not empty", q.Name, v.Name)
	}
	q.mu.Unlock()
	delete(v.queues, q.Name)
	for b := range q.bindings {
		v.unlinkLocked(b)
	}
	if q.recorded() {
		v.recordLocked(delOp(DefKindQueues, scopedKey(v.Name, q.Name)))
	}
	perr := v.unlockPersist(nil)
	n, cs := q.markDeleted()
	q.typ().deleted()
	for _, c := range cs {
		c.Sink.Cancelled(c)
	}
	return n, perr
}

// DeleteExclusive deletes the exclusive queues owned by a closing connection.
func (v *VHost) DeleteExclusive(conn uint64) {
	if v.b.replicating() {
		v.proposeExclusiveDrop(conn)
		return
	}
	v.deleteExclusiveLocal(conn)
}

func (v *VHost) deleteExclusiveLocal(conn uint64) {
	var qs []*Queue
	v.mu.RLock()
	for _, q := range v.queues {
		if q.Exclusive && q.Owner == conn {
			qs = append(qs, q)
		}
	}
	v.mu.RUnlock()
	for _, q := range qs {
		v.deleteQueue(q, false, false)
	}
}

// Bind binds a queue (or, with toExchange, an exchange) to an exchange.
func (v *VHost) Bind(source, destination string, toExchange bool, key string, args amqp.Table, conn uint64) (err error) {
	if v.b.replicating() {
		return v.b.propose(fmt.Sprintf("binding from exchange '%s' in vhost '%s'", source, v.Name),
			bindCommand(opBind, v.Name, source, destination, toExchange, key, args, conn))
	}
	return v.bindLocal(source, destination, toExchange, key, args, conn)
}

func (v *VHost) bindLocal(source, destination string, toExchange bool, key string, args amqp.Table, conn uint64) (err error) {
	v.mu.Lock()
	defer func() { err = v.unlockPersist(err) }()
	d, src, err := v.bindEndsLocked(source, destination, toExchange, conn)
	if err != nil {
		return err
	}
	if src.route == KindHeaders {
		if err := validateHeadersBinding(args); err != nil {
			return err
		}
	}
	id := bindingID{d: d, key: key, args: argsKey(args)}
	if src.bindings[id] != nil {
		return nil
	}
	b := &Binding{Source: src, dest: d, RoutingKey: key, Args: args, id: id}
	src.addBinding(b)
	if d.q != nil {
		d.q.bindings[b] = struct{}{}
	} else {
		d.x.inbound[b] = struct{}{}
	}
	if b.recorded() {
		v.recordLocked(bindingOp(v, b))
	}
	return nil
}

// Unbind removes a binding; removing a missing binding succeeds, even
// when its queue or exchange does not exist (as in RabbitMQ 3.10).
func (v *VHost) Unbind(source, destination string, toExchange bool, key string, args amqp.Table, conn uint64) (err error) {
	if v.b.replicating() {
		return v.b.propose(fmt.Sprintf("binding from exchange '%s' in vhost '%s'", source, v.Name),
			bindCommand(opUnbind, v.Name, source, destination, toExchange, key, args, conn))
	}
	return v.unbindLocal(source, destination, toExchange, key, args, conn)
}

func (v *VHost) unbindLocal(source, destination string, toExchange bool, key string, args amqp.Table, conn uint64) (err error) {
	v.mu.Lock()
	defer func() { err = v.unlockPersist(err) }()
	d, src, err := v.bindEndsLocked(source, destination, toExchange, conn)
	if ae, ok := err.(*amqp.Error); ok && ae.Code == amqp.NotFound {
		return nil
	}
	if err != nil {
		return err
	}
	if b := src.bindings[bindingID{d: d, key: key, args: argsKey(args)}]; b != nil {
		v.unlinkLocked(b)
	}
	return nil
}

func (v *VHost) bindEndsLocked(source, destination string, toExchange bool, conn uint64) (dest, *Exchange, error) {
	if source == "" {
		return dest{}, nil, amqp.Errorf(amqp.AccessRefused, "operation not permitted on the default exchange")
	}
	var d dest
	if toExchange {
		if destination == "" {
			return dest{}, nil, amqp.Errorf(amqp.AccessRefused, "operation not permitted on the default exchange")
		}
		x := v.exchanges[destination]
		if x == nil {
			return dest{}, nil, notFoundExchange(destination, v.Name)
		}
		d.x = x
	} else {
		q := v.queues[destination]
		if q == nil {
			return dest{}, nil, notFoundQueue(destination, v.Name)
		}
		if q.Exclusive && q.Owner != conn {
			return dest{}, nil, lockedQueue(destination, v.Name)
		}
		d.q = q
	}
	src := v.exchanges[source]
	if src == nil {
		return dest{}, nil, notFoundExchange(source, v.Name)
	}
	return d, src, nil
}

// BindingInfo describes a binding for listings.
type BindingInfo struct {
	Source, Destination string
	DestinationIsQueue  bool
	RoutingKey          string
	Args                amqp.Table
}

// Bindings lists the vhost's bindings, including the implicit default
// exchange bindings, sorted.
func (v *VHost) Bindings() []BindingInfo {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []BindingInfo
	for _, q := range v.queues {
		out = append(out, BindingInfo{Source: "", Destination: q.Name, DestinationIsQueue: true, RoutingKey: q.Name})
	}
	for _, x := range v.exchanges {
		for _, b := range x.bindings {
			out = append(out, BindingInfo{Source: x.Name, Destination: b.dest.name(), DestinationIsQueue: b.dest.q != nil, RoutingKey: b.RoutingKey, Args: b.Args})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Source != b.Source {
			return a.Source < b.Source
		}
		if a.Destination != b.Destination {
			return a.Destination < b.Destination
		}
		return a.RoutingKey < b.RoutingKey
	})
	return out
}

// RegisterReplyTo registers a direct reply-to address; UnregisterReplyTo removes it.
func (v *VHost) RegisterReplyTo(addr string, t ReplyTarget) {
	v.mu.Lock()
	v.replyTo[addr] = t
	v.mu.Unlock()
}

// UnregisterReplyTo removes a direct reply-to address.
func (v *VHost) UnregisterReplyTo(addr string) {
	v.mu.Lock()
	delete(v.replyTo, addr)
	v.mu.Unlock()
}

// PublishResult tells the publisher what became of a message.
type PublishResult struct {
	// Routed is the number of queues (or reply-to consumers) it was routed to.
	Routed int
	// Rejected is set when a queue refused it by reject-publish(-dlx)
	// overflow: the publisher's confirm is a nack (R4.5), though other
	// queues may have taken it.
	Rejected bool
	// Durable is what a confirm must wait for: the message on disk in
	// every durable queue it was written to (nothing to wait for if
	// none). It shares the Router's scratch, valid until the Router's
	// next Publish; Durability.Add keeps a copy.
	Durable Durability
	// Failed is set when a durable queue could not write the message to
	// disk: the publisher's confirm is a nack.
	Failed bool
	// Busy is set when a queue's lock was held by others (consumers) at
	// the publish: the publisher should back off a little (flow control).
	Busy bool
}

// Router holds per-publisher scratch space so that routing does not
// allocate. A Router must not be used concurrently.
type Router struct {
	queues []*Queue
	xs     []*Exchange
	keys   []string
	logs   []*store.Log
	failed bool
	busy   bool
	rw     *rwait   // this publish's wait for remote queues' homes (remote.go)
	rws    []*rwait // scratch for Durability
	// NoWait says the publisher will not wait for PublishResult.Durable
	// (no confirms, no transaction): a queue on another node need not
	// answer each message, which halves the link's traffic.
	NoWait bool
	// preview routes without side effects (PreviewReplay): a delayed
	// exchange routes at once instead of holding the message.
	preview bool
}

func (r *Router) addLog(l *store.Log) {
	if !slices.Contains(r.logs, l) {
		r.logs = append(r.logs, l)
	}
}

// Publish routes m through the named exchange and enqueues it. The caller
// has checked write permission. The CC and BCC headers add routing keys
// (sender-selected distribution); BCC is removed from the message.
func (v *VHost) Publish(r *Router, exchange string, m *Message) (PublishResult, error) {
	r.keys = append(r.keys[:0], m.RoutingKey)
	if h := m.Props.Headers; h != nil {
		r.keys = appendKeys(r.keys, h["CC"])
		if bcc, ok := h["BCC"]; ok {
			n := len(r.keys)
			r.keys = appendKeys(r.keys, bcc)
			m.BCC = append([]string(nil), r.keys[n:]...)
			nh := make(amqp.Table, len(h))
			for k, val := range h {
				if k != "BCC" {
					nh[k] = val
				}
			}
			m.Props.Headers = nh
		}
	}
	v.mu.RLock()
	x := v.exchanges[exchange]
	if x == nil {
		v.mu.RUnlock()
		return PublishResult{}, notFoundExchange(exchange, v.Name)
	}
	if x.Internal {
		v.mu.RUnlock()
		return PublishResult{}, amqp.Errorf(amqp.AccessRefused, "cannot publish to internal exchange '%s' in vhost '%s'", exchange, v.Name)
	}
	if exchange == "" && strings.HasPrefix(m.RoutingKey, DirectReplyTo+".") {
		t := v.replyTo[m.RoutingKey]
		v.mu.RUnlock()
		if t != nil && t.DeliverReply(m) {
			return PublishResult{Routed: 1}, nil
		}
		return PublishResult{}, nil
	}
	r.queues = r.queues[:0]
	v.routeLocked(r, x, m)
	v.mu.RUnlock()
	res := PublishResult{Routed: len(r.queues)}
	clear(r.logs)
	r.logs, r.failed, r.busy = r.logs[:0], false, false
	for _, q := range r.queues {
		if q.enqueue(m, r) == rejectedOverflow {
			res.Rejected = true
		}
	}
	clear(r.queues)
	res.Durable, res.Failed, res.Busy = v.b.durability(r.logs), r.failed, r.busy
	if r.rw != nil { // routed to remote queues: wait for their homes too
		r.rws = append(r.rws[:0], r.rw)
		r.rw = nil
		res.Durable.rws = r.rws
	}
	return res, nil
}

func appendKeys(keys []string, v any) []string {
	arr, ok := v.([]any)
	if !ok {
		return keys
	}
	for _, k := range arr {
		if s, ok := k.(string); ok {
			keys = append(keys, s)
		}
	}
	return keys
}

// routeLocked collects into r.queues the distinct queues x routes m to,
// following exchange-to-exchange bindings and alternate exchanges.
func (v *VHost) routeLocked(r *Router, x *Exchange, m *Message) {
	r.xs = append(r.xs[:0], x)
	for i := 0; i < len(r.xs); i++ {
		cur := r.xs[i]
		found := false
		if cur.Name == "" {
			for _, k := range r.keys {
				if q := v.queues[k]; q != nil {
					r.addQueue(q)
					found = true
				}
			}
		} else if cur.delayed != nil && !r.preview && cur.delayed.hold(m, r) {
			// Held until its x-delay elapses (delayed.go); then routed
			// from cur, and only then to its alternate exchange.
			found = true
		} else {
			cur.match(r.keys, m.Props.Headers, func(d dest) {
				found = true
				if d.q != nil {
					r.addQueue(d.q)
				} else {
					r.addExchange(d.x)
				}
			})
		}
		if !found {
			if ae := cur.alternate(); ae != "" {
				if ax := v.exchanges[ae]; ax != nil {
					r.addExchange(ax)
				}
			}
		}
	}
	clear(r.xs)
}

func (r *Router) addQueue(q *Queue) {
	for _, o := range r.queues {
		if o == q {
			return
		}
	}
	r.queues = append(r.queues, q)
}

func (r *Router) addExchange(x *Exchange) {
	for _, o := range r.xs {
		if o == x {
			return
		}
	}
	r.xs = append(r.xs, x)
}

// argsEquivalent checks the keys a declaration supports, as RabbitMQ's
// rabbit_misc:assert_args_equivalence does. Integer widths compare equal.
func argsEquivalent(what string, cur, got amqp.Table, keys []string) error {
	for _, k := range keys {
		c, cok := cur[k]
		g, gok := got[k]
		if k == "x-queue-type" {
			if !cok {
				c, cok = "classic", true
			}
			if !gok {
				g, gok = "classic", true
			}
		}
		if cok == gok && (!cok || equivalentValue(c, g)) {
			continue
		}
		if cok && gok {
			// Both present: RabbitMQ prints the bare values.
			return amqp.Errorf(amqp.PreconditionFailed, "inequivalent arg '%s' for %s: received '%s' but current is '%s'", k, what, formatValue(g), formatValue(c))
		}
		return amqp.Errorf(amqp.PreconditionFailed, "inequivalent arg '%s' for %s: received %s but current is %s", k, what, describeArg(g, gok), describeArg(c, cok))
	}
	return nil
}

func equivalentValue(a, b any) bool {
	ai, aok := IntArg(a)
	bi, bok := IntArg(b)
	if aok || bok {
		return aok && bok && ai == bi
	}
	return fmt.Sprint(a) == fmt.Sprint(b) && fieldTypeName(a) == fieldTypeName(b)
}

func describeArg(v any, ok bool) string {
	if !ok {
		return "none"
	}
	return fmt.Sprintf("the value '%s' of type '%s'", formatValue(v), fieldTypeName(v))
}

func formatValue(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case time.Time:
		return fmt.Sprint(x.Unix())
	}
	return fmt.Sprint(v)
}
