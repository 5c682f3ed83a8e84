// Package bridge moves messages between brokers: RabbitMQ's dynamic
// shovels (issue 24), to and from any AMQP 0-9-1 broker, this one
// included. A link is a runtime parameter of the broker (kept with the
// user who defined it, replicated in a cluster); the Manager runs the
// links this node owns and reports their state.
//
// A link reaches another broker over TCP (amqp091-go), with the
// credentials of its URI, and this broker in-process (a URI without a
// host) over a direct connection as the user who defined it: that user's
// permissions apply to everything it does here, as to any client.
package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/broker"
)

// authorizeShovel checks, for each side of d on this broker, what the
// shovel will do there as user, as a client doing it would need: access
// to the vhost, read on the source queue (or exchange), write on the
// destination exchange. The shovel then runs as user, checked again at
// every step; a remote broker checks its URI's user itself.
func (m *Manager) authorizeShovel(user string, d *ShovelDef) error {
	b := m.cfg.Broker
	local := func(uris []string) []string {
		var vhosts []string
		for _, raw := range uris {
			if u, err := ParseURI(raw); err == nil && u.Local {
				vh := "/" // (a shovel's URI without a vhost names "/")
				if u.HasVHost {
					vh = u.VHost
				}
				vhosts = append(vhosts, vh)
			}
		}
		return vhosts
	}
	refused := func(vh, kind, name string) error {
		return &broker.AccessRefusedError{VHost: vh, Kind: kind, Name: name, User: user}
	}
	for _, vh := range append(local(d.SrcURIs), local(d.DestURIs)...) {
		if !b.CanAccessVHost(user, vh) {
			return &RefusedError{Msg: fmt.Sprintf("access to vhost '%s' refused for user '%s'", vh, user)}
		}
	}
	for _, vh := range local(d.SrcURIs) {
		if d.SrcQueue != "" && !b.Check(user, vh, broker.Read, d.SrcQueue) {
			return refused(vh, "queue", d.SrcQueue)
		}
		if d.SrcExchange != "" && !b.Check(user, vh, broker.Read, d.SrcExchange) {
			return refused(vh, "exchange", exchangeName(d.SrcExchange))
		}
	}
	for _, vh := range local(d.DestURIs) {
		x := ""
		switch {
		case d.DestQueue != "":
		case d.DestExchange != nil:
			x = *d.DestExchange
		default:
			continue // the message's own exchange: checked as it goes
		}
		if !b.Check(user, vh, broker.Write, exchangeName(x)) {
			return refused(vh, "exchange", exchangeName(x))
		}
	}
	return nil
}

// RefusedError is a link its user may not define (401).
type RefusedError struct{ Msg string }

func (e *RefusedError) Error() string { return e.Msg }

func exchangeName(x string) string {
	if x == "" {
		return "amq.default"
	}
	return x
}

// Config configures a Manager.
type Config struct {
	Broker *broker.Broker
	// Direct opens an in-process connection to this broker as user
	// (server.Server.DialDirect).
	Direct func(user string) (net.Conn, error)
	// Node is this node's name, shown in the links' status.
	Node string
	// ClusterName names this broker in x-shovelled headers (default: the
	// broker's cluster name).
	ClusterName string
	Logger      *slog.Logger
	// Owns reports whether this node runs the link (a cluster runs each
	// on one node); nil: every link.
	Owns func(component, vhost, name string) bool
	// Every is how often the manager reconciles its links with the
	// parameters (default 1 s); a change through the manager reconciles
	// at once.
	Every time.Duration
	// Static are shovels from this node's configuration (RabbitMQ's
	// static shovels): they run here, as their user, and the API cannot
	// delete them.
	Static []StaticShovel
}

// StaticShovel is a shovel of the configuration: a dynamic shovel's value
// and the user it acts as on this broker.
type StaticShovel struct {
	VHost string         `json:"vhost"`
	Name  string         `json:"name"`
	User  string         `json:"user"`
	Value map[string]any `json:"value"`
}

// ParseStatic reads a static shovels file: {"shovels": [StaticShovel...]},
// each checked as a dynamic shovel (src-delete-after must be never: the
// configuration cannot delete them).
func ParseStatic(data []byte) ([]StaticShovel, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	d.DisallowUnknownFields()
	var f struct {
		Shovels []StaticShovel `json:"shovels"`
	}
	if err := d.Decode(&f); err != nil {
		return nil, fmt.Errorf("static shovels: %w", err)
	}
	seen := map[linkKey]bool{}
	for i, s := range f.Shovels {
		if s.VHost == "" {
			s.VHost = "/"
			f.Shovels[i].VHost = "/"
		}
		if s.Name == "" || s.User == "" {
			return nil, fmt.Errorf("static shovel %d: a name and a user are required", i+1)
		}
		if seen[linkKey{s.VHost, s.Name}] {
			return nil, fmt.Errorf("static shovel %q in vhost %q: defined twice", s.Name, s.VHost)
		}
		seen[linkKey{s.VHost, s.Name}] = true
		def, err := ParseShovel(s.VHost, s.Name, s.Value)
		if err != nil {
			return nil, fmt.Errorf("static shovel %q: %w", s.Name, err)
		}
		if !def.SrcDeleteAfter.Never() {
			return nil, fmt.Errorf("static shovel %q: src-delete-after must be never", s.Name)
		}
	}
	return f.Shovels, nil
}

// Manager runs the links this node owns.
type Manager struct {
	cfg    Config
	log    *slog.Logger
	ctx    context.Context // ended by Close: every link's stops
	cancel context.CancelFunc
	stop   chan struct{}
	wg     sync.WaitGroup
	kick   chan struct{}

	owns atomic.Pointer[func(component, vhost, name string) bool] // SetOwns

	mu      sync.Mutex
	shovels map[linkKey]*shovelWorker
	fed     map[fedKey]*fedLink
	closed  bool
}

// SetOwns sets which links this node runs (a cluster's choice, each link
// on one node); nil: every link. The manager looks again at once.
func (m *Manager) SetOwns(fn func(component, vhost, name string) bool) {
	if fn == nil {
		m.owns.Store(nil)
	} else {
		m.owns.Store(&fn)
	}
	m.Kick()
}

// ownsLink reports whether this node runs the link.
func (m *Manager) ownsLink(component, vhost, name string) bool {
	if fn := m.owns.Load(); fn != nil {
		return (*fn)(component, vhost, name)
	}
	return m.cfg.Owns == nil || m.cfg.Owns(component, vhost, name)
}

type linkKey struct{ vhost, name string }

// New returns a manager; Start runs it.
func New(cfg Config) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{cfg: cfg, log: cfg.Logger.With("component", "bridge"), ctx: ctx, cancel: cancel,
		stop: make(chan struct{}), kick: make(chan struct{}, 1), shovels: map[linkKey]*shovelWorker{}, fed: map[fedKey]*fedLink{}}
}

// Start starts the links of the parameters kept and watches for changes.
func (m *Manager) Start() {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(m.cfg.Every)
		defer t.Stop()
		for {
			m.reconcile()
			m.reconcileFederation()
			select {
			case <-m.stop:
				return
			case <-t.C:
			case <-m.kick:
			}
		}
	}()
}

// Kick makes the manager look at the parameters now (one changed).
func (m *Manager) Kick() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Close stops every link (their parameters stay) and waits for them.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	ws := make([]*shovelWorker, 0, len(m.shovels))
	for k, w := range m.shovels {
		ws = append(ws, w)
		delete(m.shovels, k)
	}
	ls := make([]*fedLink, 0, len(m.fed))
	for k, l := range m.fed {
		ls = append(ls, l)
		delete(m.fed, k)
	}
	m.mu.Unlock()
	close(m.stop)
	m.cancel()
	for _, w := range ws {
		w.halt()
	}
	for _, l := range ls {
		l.halt(false) // (the node stops; the links stay defined)
	}
	m.wg.Wait()
}

// reconcile starts the links whose parameters this node owns and that do
// not run (or run an older value), and stops the others.
func (m *Manager) reconcile() {
	want := map[linkKey]broker.DefParameter{}
	for _, p := range m.cfg.Broker.Parameters(ShovelComponent) {
		if m.ownsLink(ShovelComponent, p.VHost, p.Name) {
			want[linkKey{p.VHost, p.Name}] = p
		}
	}
	for _, s := range m.cfg.Static {
		want[linkKey{s.VHost, s.Name}] = broker.DefParameter{VHost: s.VHost, Component: staticComponent, Name: s.Name,
			Value: s.Value, User: s.User}
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	var stop []*shovelWorker
	for k, w := range m.shovels {
		p, ok := want[k]
		if !ok || !sameParam(w.param, p) {
			stop = append(stop, w)
			delete(m.shovels, k)
		}
	}
	var running []*shovelWorker
	for k, p := range want {
		if w, ok := m.shovels[k]; ok {
			running = append(running, w)
			continue
		}
		w := m.newShovel(p)
		m.shovels[k] = w
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			w.run()
		}()
	}
	m.mu.Unlock()
	for _, w := range stop {
		w.halt()
	}
	for _, w := range running {
		if w.def != nil {
			if err := m.authorizeShovel(w.param.User, w.def); err != nil {
				w.refuse(err)
			}
		}
	}
}

func sameParam(a, b broker.DefParameter) bool {
	if a.User != b.User {
		return false
	}
	ja, _ := json.Marshal(a.Value)
	jb, _ := json.Marshal(b.Value)
	return reflect.DeepEqual(ja, jb)
}

// finished removes a shovel that did its job (src-delete-after) and its
// parameter, as RabbitMQ's does.
func (m *Manager) finished(w *shovelWorker) {
	m.mu.Lock()
	k := linkKey{w.param.VHost, w.param.Name}
	mine := m.shovels[k] == w
	if mine {
		delete(m.shovels, k)
	}
	m.mu.Unlock()
	if mine {
		if err := m.cfg.Broker.DeleteParameter(w.param.VHost, ShovelComponent, w.param.Name); err != nil {
			m.log.Warn("shovel finished; its parameter could not be deleted", "vhost", w.param.VHost, "name", w.param.Name, "err", err)
		}
	}
}

// clusterName names this broker in the headers links add.
func (m *Manager) clusterName() string {
	if m.cfg.ClusterName != "" {
		return m.cfg.ClusterName
	}
	return m.cfg.Broker.ClusterName()
}

// PutShovel validates and keeps shovel name of vhost, defined by user:
// it starts on the node that owns it. created is false when it replaced
// one. Its errors are *ValidationError or the broker's.
func (m *Manager) PutShovel(user, vhost, name string, value map[string]any) (created bool, err error) {
	d, err := ParseShovel(vhost, name, value)
	if err != nil {
		return false, err
	}
	if err := m.authorizeShovel(user, d); err != nil {
		return false, err
	}
	_, existed := m.Param(ShovelComponent, vhost, name)
	if err := m.cfg.Broker.SetParameterAs(vhost, ShovelComponent, name, value, user); err != nil {
		return false, err
	}
	m.Kick()
	return !existed, nil
}

// DeleteParam deletes a parameter of component (a shovel, an upstream, an
// upstream set); false if there is none.
func (m *Manager) DeleteParam(component, vhost, name string) (bool, error) {
	if _, ok := m.Param(component, vhost, name); !ok {
		return false, nil
	}
	if err := m.cfg.Broker.DeleteParameter(vhost, component, name); err != nil {
		return false, err
	}
	m.Kick()
	return true, nil
}

// Params returns the parameters of component in vhost ("" all).
func (m *Manager) Params(component, vhost string) []broker.DefParameter {
	var out []broker.DefParameter
	for _, p := range m.cfg.Broker.Parameters(component) {
		if vhost == "" || p.VHost == vhost {
			out = append(out, p)
		}
	}
	return out
}

// Param returns one parameter of component.
func (m *Manager) Param(component, vhost, name string) (broker.DefParameter, bool) {
	for _, p := range m.cfg.Broker.Parameters(component) {
		if p.VHost == vhost && p.Name == name {
			return p, true
		}
	}
	return broker.DefParameter{}, false
}

// Shovels returns the state of the shovels this node runs, of vhost (""
// all), by vhost and name.
func (m *Manager) Shovels(vhost string) []ShovelStatus {
	m.mu.Lock()
	ws := make([]*shovelWorker, 0, len(m.shovels))
	for k, w := range m.shovels {
		if vhost == "" || k.vhost == vhost {
			ws = append(ws, w)
		}
	}
	m.mu.Unlock()
	out := make([]ShovelStatus, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.status())
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].VHost < out[j].VHost || out[i].VHost == out[j].VHost && out[i].Name < out[j].Name
	})
	return out
}
