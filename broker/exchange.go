package broker

import (
	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/topic"
)

// Exchange kinds.
const (
	KindDirect  = "direct"
	KindFanout  = "fanout"
	KindTopic   = "topic"
	KindHeaders = "headers"
)

// dest is a binding destination: a queue or an exchange.
type dest struct {
	q *Queue
	x *Exchange
}

func (d dest) name() string {
	if d.q != nil {
		return d.q.Name
	}
	return d.x.Name
}

// Binding links a source exchange to a queue or an exchange.
type Binding struct {
	Source     *Exchange
	dest       dest
	RoutingKey string
	Args       amqp.Table
	id         bindingID
}

// DestinationName is the bound queue's or exchange's name.
func (b *Binding) DestinationName() string { return b.dest.name() }

// DestinationIsQueue reports whether the destination is a queue.
func (b *Binding) DestinationIsQueue() bool { return b.dest.q != nil }

type bindingID struct {
	d    dest
	key  string
	args string // canonical encoding of the arguments
}

func argsKey(t amqp.Table) string {
	if len(t) == 0 {
		return ""
	}
	return string(amqp.AppendTable(nil, t))
}

// Exchange routes messages to queues and exchanges. Its fields other than
// the immutable declaration are guarded by the vhost's lock.
type Exchange struct {
	vhost      *VHost
	Name       string
	Kind       string
	Durable    bool
	AutoDelete bool
	Internal   bool
	Args       amqp.Table

	bindings map[bindingID]*Binding // outgoing, by destination, key and arguments
	// inbound holds the bindings that have this exchange as destination.
	// They are kept by identity: a bindingID does not name its source, so
	// two sources binding here with the same key and arguments would
	// share one (issue 11 item 7).
	inbound map[*Binding]struct{}
	direct  map[string][]dest
	fanout  []dest
	topic   *topic.Trie[dest]
	headers []*Binding
	deleted bool

	// route is the type that routes: Kind, or for a delayed exchange its
	// x-delayed-type. delayed holds a delayed exchange's messages.
	route   string
	delayed *delayedState
	// upstream is an x-federation-upstream exchange's filter (it routes
	// as a fanout).
	upstream *upstreamFilter
}

func newExchange(v *VHost, name, kind string, durable, autoDelete, internal bool, args amqp.Table) *Exchange {
	x := &Exchange{vhost: v, Name: name, Kind: kind, Durable: durable, AutoDelete: autoDelete, Internal: internal, Args: args,
		bindings: map[bindingID]*Binding{}, inbound: map[*Binding]struct{}{}, route: kind}
	switch kind {
	case KindDelayed:
		x.route, _ = delayedType(args)
		x.delayed = newDelayedState(x)
	case KindFederationUpstream:
		x.route, x.upstream = KindFanout, newUpstreamFilter(args)
	}
	switch x.route {
	case KindDirect:
		x.direct = map[string][]dest{}
	case KindTopic:
		x.topic = topic.New[dest]()
	}
	return x
}

// validKind reports whether kind is an exchange type Warren implements.
func validKind(kind string) bool {
	switch kind {
	case KindDirect, KindFanout, KindTopic, KindHeaders, KindDelayed, KindFederationUpstream:
		return true
	}
	return false
}

func (x *Exchange) alternate() string {
	if s, ok := x.Args["alternate-exchange"].(string); ok {
		return s
	}
	return x.vhost.policyAlternateExchange(x.Name) // the argument wins over a policy
}

func (x *Exchange) addBinding(b *Binding) {
	x.bindings[b.id] = b
	switch x.route {
	case KindDirect:
		x.direct[b.RoutingKey] = append(x.direct[b.RoutingKey], b.dest)
	case KindFanout:
		x.fanout = append(x.fanout, b.dest)
	case KindTopic:
		x.topic.Add(b.RoutingKey, b.dest)
	case KindHeaders:
		x.headers = append(x.headers, b)
	}
}

func (x *Exchange) removeBinding(b *Binding) {
	delete(x.bindings, b.id)
	switch x.route {
	case KindDirect:
		ds := removeDest(x.direct[b.RoutingKey], b.dest)
		if len(ds) == 0 {
			delete(x.direct, b.RoutingKey)
		} else {
			x.direct[b.RoutingKey] = ds
		}
	case KindFanout:
		x.fanout = removeDest(x.fanout, b.dest)
	case KindTopic:
		x.topic.Remove(b.RoutingKey, b.dest)
		// Another binding of the same dest and key with other arguments
		// keeps the route alive.
		for _, o := range x.bindings {
			if o.dest == b.dest && o.RoutingKey == b.RoutingKey {
				x.topic.Add(o.RoutingKey, o.dest)
				break
			}
		}
	case KindHeaders:
		for i, o := range x.headers {
			if o == b {
				x.headers = append(x.headers[:i], x.headers[i+1:]...)
				break
			}
		}
	}
}

func removeDest(ds []dest, d dest) []dest {
	for i, o := range ds {
		if o == d {
			return append(ds[:i:i], ds[i+1:]...)
		}
	}
	return ds
}

// match calls fn for each destination this exchange routes m's keys to.
// The same destination may be reported more than once.
func (x *Exchange) match(keys []string, headers amqp.Table, fn func(dest)) {
	if x.upstream != nil && !x.upstream.forward(headers) {
		return
	}
	switch x.route {
	case KindDirect:
		for _, k := range keys {
			for _, d := range x.direct[k] {
				fn(d)
			}
		}
	case KindFanout:
		for _, d := range x.fanout {
			fn(d)
		}
	case KindTopic:
		for _, k := range keys {
			x.topic.Match(k, fn)
		}
	case KindHeaders:
		for _, b := range x.headers {
			if headersMatch(b.Args, headers) {
				fn(b.dest)
			}
		}
	}
}
