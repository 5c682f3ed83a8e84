package bridge

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"sort"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	wamqp "github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

// Federated exchanges (issue 24), Warren as the downstream, as RabbitMQ's
// federation plugin links them (rabbit_federation_exchange_link): for an
// exchange X of this broker whose policy names upstreams, a link per
// upstream that, on the upstream,
//
//  1. uses (or declares, like X) the upstream exchange;
//  2. declares the queue "federation: X -> <this cluster>" and an
//     internal x-federation-upstream exchange bound to it;
//  3. binds the upstream exchange to that exchange with the keys of X's
//     bindings here (x-bound-from, hops counted down), kept in step;
//
// then consumes the queue and publishes each message to X here with
// x-received-from prepended, acking upstream once X's queues have it
// (on-confirm). A message that went round already (x-max-hops entries,
// or one naming this cluster and vhost) is dropped.

// FederationLink is a link as /api/federation-links shows it.
type FederationLink struct {
	Node, VHost, Upstream, Type string
	Exchange, UpstreamExchange  string
	Queue, UpstreamQueue        string // a federated queue's
	ConsumerTag                 string
	ID                          string
	Status                      string // starting, running, error
	Error                       string
	URI                         string // without credentials, while connected
	LocalConnection             string
	Since                       time.Time
}

// fedKey names a link: a federated exchange's or queue's (kind), and its
// upstream.
type fedKey struct{ vhost, kind, name, upstream string }

type fedLink struct {
	m    *Manager
	key  fedKey
	up   *Upstream
	user string
	ctx  context.Context
	stop context.CancelFunc
	done chan struct{}

	mu      sync.Mutex
	st      FederationLink
	cleanup bool // remove the upstream's queue and exchange on stop
}

func linkID(k fedKey) string {
	h := fnv.New32a()
	h.Write([]byte(k.vhost + "\x00" + k.kind + "\x00" + k.name + "\x00" + k.upstream))
	return fmt.Sprintf("%08x", h.Sum32())
}

func (m *Manager) newFedLink(k fedKey, lu linkUpstream) *fedLink {
	ctx, cancel := context.WithCancel(m.ctx)
	st := FederationLink{Node: m.cfg.Node, VHost: k.vhost, Upstream: k.upstream, Type: k.kind, ID: linkID(k),
		Status: "starting", Since: time.Now()}
	if k.kind == "queue" {
		st.Queue, st.UpstreamQueue, st.ConsumerTag = k.name, lu.u.Queue, lu.u.ConsumerTag
		if st.UpstreamQueue == "" {
			st.UpstreamQueue = k.name
		}
	} else {
		st.Exchange, st.UpstreamExchange = k.name, lu.u.Exchange
		if st.UpstreamExchange == "" {
			st.UpstreamExchange = k.name
		}
	}
	return &fedLink{m: m, key: k, up: lu.u, user: lu.user, ctx: ctx, stop: cancel, done: make(chan struct{}), st: st}
}

func (l *fedLink) status() FederationLink {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st
}

func (l *fedLink) set(status, errText, uri string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.st.Status != status || l.st.Error != errText {
		l.st.Since = time.Now()
	}
	l.st.Status, l.st.Error, l.st.URI = status, errText, uri
	if status != "running" {
		l.st.LocalConnection = ""
	}
}

// halt stops the link; with cleanup (its policy or upstream went) its
// queue and exchange on the upstream go too, as RabbitMQ's do.
func (l *fedLink) halt(cleanup bool) {
	l.mu.Lock()
	l.cleanup = cleanup && !l.up.CleanupNever
	l.mu.Unlock()
	l.stop()
	<-l.done
}

func (l *fedLink) run() {
	defer close(l.done)
	log := l.m.log.With("vhost", l.key.vhost, l.key.kind, l.key.name, "upstream", l.key.upstream)
	for {
		l.set("starting", "", "")
		var err error
		if l.key.kind == "queue" {
			err = l.queueSession()
		} else {
			err = l.session()
		}
		if l.ctx.Err() != nil {
			return
		}
		l.set("error", err.Error(), "")
		log.Warn("federation link failed; restarting", "err", err, "after", l.up.ReconnectDelay)
		if l.up.ReconnectDelay <= 0 {
			return
		}
		t := time.NewTimer(l.up.ReconnectDelay)
		select {
		case <-l.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// queueName returns the link's queue on the upstream; its internal
// exchanges are the queue's name with " A" or " B".
func (l *fedLink) queueName(cluster, upX string) string {
	q := "federation: " + upX + " -> " + cluster
	if l.key.vhost != "/" || upX != l.key.name {
		q += ":" + l.key.vhost + ":" + l.key.name
	}
	return q
}

func (l *fedLink) session() error {
	m, up, k := l.m, l.up, l.key
	v := m.cfg.Broker.VHost(k.vhost)
	if v == nil {
		return errors.New("no such vhost")
	}
	lx := v.Exchange(k.name)
	if lx == nil {
		return fmt.Errorf("no exchange '%s' here", k.name)
	}
	connName := fmt.Sprintf("Federation link (upstream: %s, exchange: %s)", up.Name, k.name)
	uconn, uu, err := m.dialAny(l.ctx, up.URIs, l.user, k.vhost, connName)
	if err != nil {
		return err
	}
	defer uconn.Close()
	local, err := m.dial(l.ctx, &URI{Local: true, Heartbeat: -1}, l.user, k.vhost, connName)
	if err != nil {
		return fmt.Errorf("local: %w", err)
	}
	defer local.Close()
	uch, err := uconn.Channel()
	if err != nil {
		return err
	}
	lch, err := local.Channel()
	if err != nil {
		return fmt.Errorf("local: %w", err)
	}
	upX := l.status().UpstreamExchange
	cluster := m.clusterName()
	upCluster, _ := uconn.Properties["cluster_name"].(string)
	upVHost := k.vhost
	if uu.HasVHost {
		upVHost = uu.VHost
	}
	// 1. The upstream exchange: as it is, or declared like ours.
	if err := ensureExchange(uconn, uch, upX, lx); err != nil {
		return err
	}
	// 2. The queue and the internal exchange.
	qname := l.queueName(cluster, upX)
	// The internal exchange alternates between " A" and " B": a binding
	// removed here is removed upstream by moving every other binding to
	// a new exchange and deleting the old one (an exchange.unbind would
	// have to repeat the binding's arguments byte for byte, and a
	// client's tables do not keep their order). A session starts on a
	// new one too, so that no binding of an earlier one stays behind.
	for _, suffix := range []string{" A", " B"} {
		if err := uch.ExchangeDelete(qname+suffix, false, false); err != nil {
			return err
		}
	}
	iname := qname + " A"
	qargs := amqp.Table{"x-internal-purpose": "federation"}
	if up.Expires > 0 {
		qargs["x-expires"] = up.Expires
	}
	if up.MessageTTL > 0 {
		qargs["x-message-ttl"] = up.MessageTTL
	}
	if up.QueueType != "" {
		qargs["x-queue-type"] = up.QueueType
	}
	if _, err := uch.QueueDeclare(qname, true, false, false, false, qargs); err != nil {
		return err
	}
	iargs := amqp.Table{"x-max-hops": int64(up.MaxHops), "x-downstream-name": cluster, "x-downstream-vhost": k.vhost,
		"x-internal-purpose": "federation"}
	kind := broker.KindFederationUpstream
	declareI := func(name string) error {
		err := uch.ExchangeDeclare(name, kind, true, true, true, false, iargs)
		var ae *amqp.Error
		if err != nil && kind != "fanout" && errors.As(err, &ae) && (ae.Code == amqp.CommandInvalid || ae.Code == amqp.NotImplemented) {
			// An upstream without the type (RabbitMQ without
			// federation): a fanout, and only this side stops loops.
			if uch, err = uconn.Channel(); err != nil {
				return err
			}
			kind, iargs = "fanout", amqp.Table{"x-internal-purpose": "federation"}
			err = uch.ExchangeDeclare(name, kind, true, true, true, false, iargs)
		}
		if err != nil {
			return err
		}
		return uch.QueueBind(qname, "", name, false, nil)
	}
	if err := declareI(iname); err != nil {
		return err
	}
	defer func() {
		l.mu.Lock()
		clean := l.cleanup
		l.mu.Unlock()
		if clean {
			if ch, err := uconn.Channel(); err == nil {
				ch.ExchangeDelete(qname+" A", false, false)
				ch.ExchangeDelete(qname+" B", false, false)
				ch.QueueDelete(qname, false, false, false)
			}
		}
	}()
	// 3. Our bindings, upstream.
	bound := map[string]bindKey{}
	sync := func() error {
		want := map[string]bindKey{}
		for _, b := range v.Bindings() {
			if b.Source != k.name {
				continue
			}
			bargs, _ := clientValue(map[string]any(b.Args)).(amqp.Table)
			hops := up.MaxHops
			if from, ok := bargs["x-bound-from"].([]any); ok && len(from) > 0 {
				if t, ok := from[0].(amqp.Table); ok {
					if h, ok := intOf(t["hops"]); ok {
						hops = min(int(h)-1, up.MaxHops)
					}
				}
			}
			if hops <= 0 {
				continue
			}
			args := amqp.Table{}
			for kk, vv := range bargs {
				args[kk] = vv
			}
			prev, _ := args["x-bound-from"].([]any)
			args["x-bound-from"] = append([]any{amqp.Table{"cluster-name": cluster, "vhost": k.vhost,
				"exchange": k.vhost + ":" + k.name + " A", "hops": int64(hops)}}, prev...)
			bk := bindKey{key: b.RoutingKey, args: args}
			want[bk.id()] = bk
		}
		for id, bk := range want {
			if _, ok := bound[id]; !ok {
				if err := uch.ExchangeBind(iname, bk.key, upX, false, bk.args); err != nil {
					return err
				}
				bound[id] = bk
			}
		}
		removed := false
		for id := range bound {
			if _, ok := want[id]; !ok {
				removed = true
			}
		}
		if !removed {
			return nil
		}
		next := qname + " A"
		if iname == next {
			next = qname + " B"
		}
		if err := declareI(next); err != nil {
			return err
		}
		for _, bk := range want {
			if err := uch.ExchangeBind(next, bk.key, upX, false, bk.args); err != nil {
				return err
			}
		}
		if err := uch.ExchangeDelete(iname, false, false); err != nil {
			return err
		}
		iname, bound = next, want
		return nil
	}
	if err := sync(); err != nil {
		return err
	}
	// Consume and republish.
	var confirms chan amqp.Confirmation
	if up.AckMode == OnConfirm {
		if err := lch.Confirm(false); err != nil {
			return fmt.Errorf("local: %w", err)
		}
		confirms = lch.NotifyPublish(make(chan amqp.Confirmation, max(up.Prefetch, 1)+64))
	}
	if err := uch.Qos(up.Prefetch, 0, false); err != nil {
		return err
	}
	deliveries, err := uch.ConsumeWithContext(l.ctx, qname, up.ConsumerTag, false, false, false, false, nil)
	if err != nil {
		return err
	}
	uClosed := uconn.NotifyClose(make(chan *amqp.Error, 1))
	lClosed := local.NotifyClose(make(chan *amqp.Error, 1))
	ucClosed := uch.NotifyClose(make(chan *amqp.Error, 1))
	lcClosed := lch.NotifyClose(make(chan *amqp.Error, 1))
	l.set("running", "", Redact(uu.Raw))
	l.mu.Lock()
	l.st.LocalConnection = connName
	l.mu.Unlock()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	settle := settler{ch: uch}
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("the upstream closed the consumer")
			}
			if !forwards(d.Headers, up.MaxHops, cluster, k.vhost) {
				settle.ack(d.DeliveryTag) // went round already
			} else {
				if up.AckMode == NoAck {
					settle.ack(d.DeliveryTag)
				}
				p := linkPublishing(&d, up.TrustUserID)
				prev, _ := p.Headers["x-received-from"].([]any)
				p.Headers["x-received-from"] = append([]any{amqp.Table{"uri": Redact(uu.Raw), "exchange": upX,
					"redelivered": d.Redelivered, "cluster-name": upCluster, "vhost": upVHost}}, prev...)
				if err := lch.PublishWithContext(l.ctx, k.name, d.RoutingKey, false, false, p); err != nil {
					return fmt.Errorf("local: %w", err)
				}
				settle.sent(up.AckMode, d.DeliveryTag)
			}
			if len(deliveries) == 0 {
				if err := settle.flush(); err != nil {
					return err
				}
			}
		case c := <-confirms:
			if err := settle.confirmed(c); err != nil {
				return err
			}
			if len(confirms) == 0 {
				if err := settle.flush(); err != nil {
					return err
				}
			}
		case <-tick.C:
			if err := sync(); err != nil {
				return err
			}
		case e := <-uClosed:
			return closeErr("upstream", e)
		case e := <-ucClosed:
			return closeErr("upstream", e)
		case e := <-lClosed:
			return closeErr("local", e)
		case e := <-lcClosed:
			return closeErr("local", e)
		case <-l.ctx.Done():
			return l.ctx.Err()
		}
	}
}

// bindKey is a binding of the upstream exchange to the link's exchange.
type bindKey struct {
	key  string
	args amqp.Table
}

func (b bindKey) id() string { return fmt.Sprintf("%q %v", b.key, sortedTable(b.args)) }

func sortedTable(t amqp.Table) []string {
	out := make([]string, 0, len(t))
	for k, v := range t {
		out = append(out, fmt.Sprintf("%s=%v", k, v))
	}
	sort.Strings(out)
	return out
}

func intOf(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int32:
		return int64(n), true
	case int16:
		return int64(n), true
	case int8:
		return int64(n), true
	case uint8:
		return int64(n), true
	case int:
		return int64(n), true
	}
	return 0, false
}

// forwards is RabbitMQ's should_forward: a message whose x-received-from
// has maxHops entries or more, or names this cluster and vhost, went
// round already.
func forwards(h amqp.Table, maxHops int, cluster, vhost string) bool {
	from, ok := h["x-received-from"].([]any)
	if !ok {
		return true
	}
	if len(from) >= maxHops {
		return false
	}
	for _, e := range from {
		if t, ok := e.(amqp.Table); ok && t["cluster-name"] == cluster && t["vhost"] == vhost {
			return false
		}
	}
	return true
}

// ensureExchange uses exchange name on c as it is, or declares it like x.
func ensureExchange(c *amqp.Connection, ch *amqp.Channel, name string, x *broker.Exchange) error {
	probe, err := c.Channel()
	if err != nil {
		return err
	}
	err = probe.ExchangeDeclarePassive(name, x.Kind, x.Durable, x.AutoDelete, x.Internal, false, nil)
	if err == nil {
		probe.Close()
		return nil
	}
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.NotFound {
		return err
	}
	args := amqp.Table{}
	for k, v := range x.Args {
		args[k] = v
	}
	return ch.ExchangeDeclare(name, x.Kind, x.Durable, x.AutoDelete, x.Internal, false, args)
}

// reconcileFederation starts the links the policies ask for and this node
// owns, and stops the others.
func (m *Manager) reconcileFederation() {
	b := m.cfg.Broker
	want := map[fedKey]linkUpstream{}
	add := func(vn, kind, name, key string, val any) {
		for _, lu := range upstreamsFor(b, vn, key, val) {
			k := fedKey{vn, kind, name, lu.u.Name}
			if m.ownsLink(UpstreamComponent, vn, kind+"\x00"+name+"\x00"+lu.u.Name) {
				want[k] = lu
			}
		}
	}
	keys := []string{"federation-upstream", "federation-upstream-set", "federation-upstream-pattern"}
	for _, vn := range b.VHosts() {
		v := b.VHost(vn)
		if v == nil {
			continue
		}
		for _, x := range v.Exchanges() {
			if x.Name == "" || x.Kind == broker.KindFederationUpstream {
				continue
			}
			for _, key := range keys {
				if val, ok := v.ExchangePolicyKey(x.Name, key); ok {
					add(vn, "exchange", x.Name, key, val)
				}
			}
		}
		for _, q := range v.Queues() {
			for _, key := range keys {
				if val, ok := v.QueuePolicyKey(q, key); ok {
					add(vn, "queue", q.Name, key, val)
				}
			}
		}
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	type stopping struct {
		l       *fedLink
		cleanup bool
	}
	var stop []stopping
	for k, l := range m.fed {
		lu, ok := want[k]
		if !ok || !reflect.DeepEqual(*l.up, *lu.u) || l.user != lu.user {
			stop = append(stop, stopping{l, !ok})
			delete(m.fed, k)
		}
	}
	for k, lu := range want {
		if _, ok := m.fed[k]; ok {
			continue
		}
		l := m.newFedLink(k, lu)
		m.fed[k] = l
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			l.run()
		}()
	}
	m.mu.Unlock()
	for _, s := range stop {
		s.l.halt(s.cleanup)
	}
}

// FederationLinks returns the links this node runs, of vhost ("" all).
func (m *Manager) FederationLinks(vhost string) []FederationLink {
	m.mu.Lock()
	out := make([]FederationLink, 0, len(m.fed))
	for k, l := range m.fed {
		if vhost == "" || k.vhost == vhost {
			out = append(out, l.status())
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.VHost != b.VHost {
			return a.VHost < b.VHost
		}
		if a.Exchange+a.Queue != b.Exchange+b.Queue {
			return a.Exchange+a.Queue < b.Exchange+b.Queue
		}
		return a.Upstream < b.Upstream
	})
	return out
}

// clientValue turns a broker-side table value (Warren's amqp.Table, at
// any depth) into the client library's, which is what it encodes.
func clientValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		t := amqp.Table{}
		for k, e := range x {
			t[k] = clientValue(e)
		}
		return t
	case wamqp.Table:
		return clientValue(map[string]any(x))
	case amqp.Table:
		return clientValue(map[string]any(x))
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = clientValue(e)
		}
		return l
	}
	return v
}

// RestartLink restarts the link id of vhost if this node runs it (a new
// session at once, as RabbitMQ's restart of a link).
func (m *Manager) RestartLink(vhost, id string) bool {
	m.mu.Lock()
	var l *fedLink
	for k, x := range m.fed {
		if k.vhost == vhost && x.st.ID == id {
			l = x
			delete(m.fed, k)
			break
		}
	}
	m.mu.Unlock()
	if l == nil {
		return false
	}
	l.halt(false)
	m.Kick() // the reconcile starts it again
	return true
}
