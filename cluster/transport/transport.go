// Package transport is the inter-node link of a Warren cluster (issue 13):
// one multiplexed, authenticated TCP connection per node pair, carrying the
// metadata group's Raft messages (one-way, Send/OnMessage) and the
// data-plane calls (request/response, Call/Handle) between nodes.
//
// # Who dials
//
// Of two nodes, the one whose name is lexically smaller dials (SetPeer with
// a larger name starts a background dialer; with a smaller name it only
// records the peer and waits to be dialled), so a link exists once the
// smaller node has been told the larger's address: every node should
// SetPeer every member. The dialer redials with a capped exponential
// backoff (50 ms doubling to 2 s) whenever the link is down; RemovePeer
// stops it. The accepting side takes any link that
// authenticates: when one already exists for that name, the new link
// replaces it (the peer restarted, the old link is dead but not noticed
// yet), and the peer state goes down then up. Names not given to SetPeer
// are accepted too (they appear in Peers until their link drops), so the
// glue decides what an unknown member may do; a name removed with RemovePeer
// is refused until SetPeer names it again.
//
// # Handshake
//
// Inside TLS when Config.TLS is set (tls.Client / tls.Server with the same
// config), under a 10 s deadline (5 s on the accepting side):
//
//	dialer -> acceptor  "WRNT", version 2, 32-byte random nonce,
//	                    u8 len + node name, u8 len + cluster id ("" if none)
//	acceptor -> dialer  "WRNT", version 2, its own 32-byte nonce
//	dialer -> acceptor  32-byte HMAC-SHA256(secret, "dialer", nonces, its name and id)
//	acceptor -> dialer  0x00 + u8 len + node name + u8 len + cluster id
//	                    + HMAC-SHA256(secret, "acceptor", nonces, both names and ids)
//	                    or 0x01 + u16 len + refusal text
//
// Each field is length-prefixed inside the MACs; the secret itself never
// crosses the wire. The acceptor says nothing about itself (name, cluster
// id) until the dialer has proved the secret, and a dialer that has not is
// told only "authentication failed" (issue 22 item 9), so a stranger on the
// cluster port learns nothing and has nothing to guess offline. The
// dialer's proof is shown to whoever answers at the peer's address, so use
// a long random secret, and TLS with verified certificates where that
// network is not trusted.
// After authentication, when both cluster ids are non-empty and differ the
// link is refused and both sides log an error naming both ids; a side
// whose id is "" learns the peer's through Config.LearnID. A wrong secret,
// a refused id or garbage only ends that one connection. Refusals of
// strangers are logged at most once every 10 s, with a count.
//
// At most 64 inbound handshakes are in progress; one more closes the
// connection that has been at it longest (none of them has proved the
// secret, and a real peer's takes a round trip or two), so connections
// that idle or stall, however many, never keep a peer out (issue 22 item
// 4).
//
// # Frames
//
// After the handshake both directions carry frames:
//
//	u32 body length | u8 kind | u8 service | u64 request id | body
//
// all big-endian. Kinds: 1 call request, 2 call response, 3 call error
// response (body: the handler's error text, surfaced as *RemoteError),
// 4 one-way message (id 0), 5 heartbeat (empty). A length above
// Config.MaxFrame, or an unknown kind, drops the connection before any
// body is allocated. Each side sends a heartbeat after a second without
// traffic and drops a link silent for 5 s.
//
// Each link has one writer goroutine fed by a bounded queue (4096 frames)
// that batches frames in a bufio.Writer and flushes when the queue is
// empty, so many small Raft messages share a syscall; Send is ordered per
// peer and never blocks (ErrQueueFull, ErrUnreachable). One reader
// goroutine per link runs OnMessage handlers inline and Handle handlers on
// their own goroutines, at most 256 at once per link: beyond that the
// reader waits (back-pressure on the peer). A link drop fails every call
// pending on it at once with an error wrapping ErrUnreachable. Since the
// reader also delivers call responses, a handler that calls back the
// peer that called it should not do so 256 deep in both directions.
//
// Close closes the listeners and links and waits for every goroutine the
// transport started, handlers included: handlers must return.
package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Tunables (variables so tests can shorten them).
var (
	handshakeTimeout  = 10 * time.Second
	acceptTimeout     = 5 * time.Second // an inbound handshake, TLS included
	heartbeatInterval = time.Second
	idleTimeout       = 5 * time.Second
	minBackoff        = 50 * time.Millisecond
	maxBackoff        = 2 * time.Second
	dialTimeout       = 5 * time.Second
)

const (
	defaultMaxFrame = 64 << 20
	sendQueueLen    = 4096
	maxIncoming     = 256 // concurrent handler calls per link
	maxHandshakes   = 64  // concurrent inbound handshakes
)

// ErrUnreachable is wrapped by the errors of Call and Send when the peer has
// no live link, and by the error of every call pending on a link that drops.
var ErrUnreachable = errors.New("unreachable")

// ErrQueueFull is returned by Send when the peer's send queue is full.
var ErrQueueFull = errors.New("send queue full")

// ErrClosed is returned after Close.
var ErrClosed = errors.New("transport closed")

// RemoteError is a handler's error, returned to the caller with the same
// text.
type RemoteError struct {
	Peer string // the node whose handler failed
	Msg  string
}

func (e *RemoteError) Error() string { return e.Msg }

// Config configures a Transport.
type Config struct {
	Self      string        // node name
	Secret    []byte        // shared cluster secret
	ClusterID func() string // current id, "" if unknown; handshake compares
	LearnID   func(string)  // called when a peer tells an id and ours is "" (from handshake goroutines, before the link is up; may run concurrently)
	TLS       *tls.Config   // nil: plain TCP
	Logger    *slog.Logger
	MaxFrame  int // bound on a frame (default 64 MiB); larger -> connection dropped
	// Incarnation identifies this node's data directory (random, kept
	// in it): a node that lost its data comes back with another one.
	Incarnation uint64
	// CheckPeer, if set, may refuse a peer that proved the secret, by
	// its name and incarnation, on either side of a handshake (the
	// glue refuses a member whose data directory was replaced). Its
	// error text is what the peer is told.
	CheckPeer func(name string, inc uint64) error
	// Priority lists the services whose one-way messages go ahead of
	// everything else on a link (the Raft groups' messages: a heartbeat
	// or a vote must not wait behind bulk data-plane traffic). Each
	// service's messages stay in order.
	Priority []byte
	// ProbeInfo, if set, is what this node answers a Probe from the
	// node name (incarnation inc) with, after authentication.
	ProbeInfo func(name string, inc uint64) []byte
}

// PeerStatus is one peer as Peers lists it.
type PeerStatus struct {
	Name     string
	Addr     string // "" for a peer that dialled us without SetPeer
	Up       bool
	Since    time.Time // when Up last changed (zero if never up)
	BytesIn  uint64    // over every link to this peer since SetPeer
	BytesOut uint64
	CallsOut int // our calls awaiting its answer
	CallsIn  int // its calls our handlers are running
}

// Transport is one node's end of the cluster links.
type Transport struct {
	cfg      Config
	log      *slog.Logger
	ctx      context.Context // cancelled by Close
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	refusals logLimiter    // refused inbound handshakes: logged sparingly
	priority [256]bool     // Config.Priority
	hold     atomic.Bool   // HoldLinks: inbound links refused, probes answered
	evicted  atomic.Uint64 // inbound handshakes closed to make room

	hmu      sync.RWMutex
	handlers [256]func(from string, req []byte) ([]byte, error)
	messages [256]func(from string, msg []byte)

	mu        sync.Mutex
	closed    bool
	peers     map[string]*peer
	removed   map[string]bool
	listeners map[net.Listener]struct{}
	pending   map[net.Conn]pendingConn // connections in handshake
	watchers  []func(name string, up bool)

	evmu   sync.Mutex
	events []event
	evkick chan struct{}
	evstop chan struct{} // closed by Close after every link is down
	evdone chan struct{} // closed when the notifier has returned
}

type event struct {
	name string
	up   bool
}

type peer struct {
	name       string
	addr       string
	configured bool // named by SetPeer
	link       *link
	since      time.Time
	in, out    atomic.Uint64
	stop       chan struct{} // closed by RemovePeer / replacement
	kick       chan struct{} // cap 1: address changed
	dialer     bool
}

// New returns a transport; call Serve to accept links and SetPeer to add
// peers.
func New(cfg Config) *Transport {
	if cfg.MaxFrame <= 0 {
		cfg.MaxFrame = defaultMaxFrame
	}
	cfg.MaxFrame = min(cfg.MaxFrame, 1<<32-1) // the length field is 32 bits
	if cfg.ClusterID == nil {
		cfg.ClusterID = func() string { return "" }
	}
	if cfg.LearnID == nil {
		cfg.LearnID = func(string) {}
	}
	var pri [256]bool
	for _, svc := range cfg.Priority {
		pri[svc] = true
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &Transport{
		cfg:       cfg,
		priority:  pri,
		log:       log.With("component", "cluster-transport", "node", cfg.Self),
		ctx:       ctx,
		cancel:    cancel,
		peers:     map[string]*peer{},
		removed:   map[string]bool{},
		listeners: map[net.Listener]struct{}{},
		pending:   map[net.Conn]pendingConn{},
		evkick:    make(chan struct{}, 1),
		evstop:    make(chan struct{}),
		evdone:    make(chan struct{}),
	}
	go t.notifier()
	return t
}

// Serve accepts links on ln until Close (then it returns nil) or until ln
// fails.
func (t *Transport) Serve(ln net.Listener) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		ln.Close()
		return ErrClosed
	}
	t.listeners[ln] = struct{}{}
	t.wg.Add(1)
	t.mu.Unlock()
	defer t.wg.Done()
	var pause time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if t.ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(pause):
				case <-t.ctx.Done():
					return nil
				}
				continue
			}
			t.mu.Lock()
			delete(t.listeners, ln)
			t.mu.Unlock()
			return err
		}
		pause = 0
		if !t.track(c, true) {
			c.Close()
			return nil
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.accept(c)
		}()
	}
}

// pendingConn is a connection in handshake.
type pendingConn struct {
	since   time.Time
	inbound bool
}

// track registers a connection in handshake so Close can cut it. For an
// accepted one (inbound), at maxHandshakes the inbound one that has been
// at it longest is closed to make room: none of them has proved the secret
// yet, and a peer's handshake takes a round trip or two, so idle or
// stalled connections, however many, cannot keep a peer out (issue 22
// item 4).
func (t *Transport) track(c net.Conn, inbound bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	if inbound {
		n := 0
		var oldest net.Conn
		var since time.Time
		for pc, p := range t.pending {
			if !p.inbound {
				continue
			}
			n++
			if oldest == nil || p.since.Before(since) {
				oldest, since = pc, p.since
			}
		}
		if n >= maxHandshakes && oldest != nil {
			delete(t.pending, oldest)
			oldest.Close()
			t.evicted.Add(1)
		}
	}
	t.pending[c] = pendingConn{since: time.Now(), inbound: inbound}
	return true
}

func (t *Transport) untrack(c net.Conn) {
	t.mu.Lock()
	delete(t.pending, c)
	t.mu.Unlock()
}

func (t *Transport) accept(raw net.Conn) {
	defer t.untrack(raw)
	raw.SetDeadline(time.Now().Add(acceptTimeout))
	var c net.Conn = raw
	if t.cfg.TLS != nil {
		tc := tls.Server(raw, t.cfg.TLS)
		if err := tc.HandshakeContext(t.ctx); err != nil {
			t.log.Warn("cluster link refused: TLS handshake failed", "remote", raw.RemoteAddr().String(), "err", err)
			raw.Close()
			return
		}
		c = tc
	}
	selfID := t.cfg.ClusterID()
	them, err := acceptHandshake(c, t.cfg.Secret, hello{name: t.cfg.Self, id: selfID, inc: t.cfg.Incarnation}, func(h hello) error {
		if h.name == t.cfg.Self {
			return peerRefused{fmt.Errorf("peer claims this node's own name %s", h.name)}
		}
		if h.flags&flagProbe != 0 {
			return nil // a probe asks; it gets no link
		}
		if t.hold.Load() {
			return peerRefused{errStarting}
		}
		t.mu.Lock()
		removed := t.removed[h.name]
		t.mu.Unlock()
		if removed {
			return peerRefused{fmt.Errorf("node %s was removed from the cluster", h.name)}
		}
		if t.cfg.CheckPeer != nil {
			if err := t.cfg.CheckPeer(h.name, h.inc); err != nil {
				return peerRefused{err}
			}
		}
		return nil
	})
	if err == nil {
		// The dialer's verdict on us: it may refuse this node.
		if verr := readVerdict(c); verr != nil {
			err = peerRefused{fmt.Errorf("%s refused this node: %w", them.name, verr)}
		}
	}
	if err != nil {
		raw.Close()
		if t.ctx.Err() != nil {
			return
		}
		// A peer that proved the secret and was refused (another
		// cluster's, a removed node) is logged every time; anything
		// else (garbage, a wrong secret, a port scan, a client that
		// never finished) at most once every refusalLogEvery, with a
		// count, so that strangers cannot flood the log.
		if isIDMismatch(err) {
			t.log.Error("cluster link refused", "remote", raw.RemoteAddr().String(), "err", err)
		} else if pr, ok := err.(peerRefused); ok && errors.Is(pr.error, errStarting) {
			t.log.Debug("cluster link refused", "remote", raw.RemoteAddr().String(), "err", err)
		} else if _, ok := err.(peerRefused); ok {
			t.log.Warn("cluster link refused", "remote", raw.RemoteAddr().String(), "err", err)
		} else if ok, more := t.refusals.allow(time.Now()); ok {
			t.log.Warn("cluster link refused", "remote", raw.RemoteAddr().String(), "err", err, "also_refused_since_last_logged", more)
		}
		return
	}
	if them.flags&flagProbe != 0 {
		var info []byte
		if t.cfg.ProbeInfo != nil {
			info = t.cfg.ProbeInfo(them.name, them.inc)
		}
		if len(info) > maxProbeInfo {
			info = info[:0]
		}
		c.Write(binary.BigEndian.AppendUint32(nil, uint32(len(info))))
		c.Write(info)
		raw.Close()
		return
	}
	raw.SetDeadline(time.Time{})
	if selfID == "" && them.id != "" {
		t.cfg.LearnID(them.id)
	}
	t.attach(them.name, c, raw, nil)
}

// maxProbeInfo bounds a probe's answer.
const maxProbeInfo = 64 << 10

// Probe asks the node at addr, which must be name and know the secret,
// how it is (its Config.ProbeInfo), without making a link: a membership
// change checks with it that the node it names is there and answers.
func (t *Transport) Probe(ctx context.Context, name, addr string) ([]byte, error) {
	if t.ctx.Err() != nil {
		return nil, ErrClosed
	}
	d := net.Dialer{Timeout: dialTimeout}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer raw.Close()
	dl := time.Now().Add(handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	raw.SetDeadline(dl)
	c, err := t.clientTLS(ctx, raw, addr)
	if err != nil {
		return nil, err
	}
	if _, err := dialHandshake(c, t.cfg.Secret, hello{flags: flagProbe, name: t.cfg.Self, id: t.cfg.ClusterID(), inc: t.cfg.Incarnation}, name); err != nil {
		return nil, err
	}
	if err := verdict(c, nil); err != nil {
		return nil, err
	}
	var l [4]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(l[:])
	if n > maxProbeInfo {
		return nil, fmt.Errorf("probe answer of %d bytes", n)
	}
	info := make([]byte, n)
	_, err = io.ReadFull(c, info)
	return info, err
}

// clientTLS wraps an outgoing connection in TLS when the links use it.
func (t *Transport) clientTLS(ctx context.Context, raw net.Conn, addr string) (net.Conn, error) {
	if t.cfg.TLS == nil {
		return raw, nil
	}
	cfg := t.cfg.TLS
	if cfg.ServerName == "" && !cfg.InsecureSkipVerify {
		cfg = cfg.Clone()
		host, _, _ := net.SplitHostPort(addr)
		cfg.ServerName = host
	}
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return tc, nil
}

// errStarting refuses links while HoldLinks holds them.
var errStarting = errors.New(reasonStarting)

const reasonStarting = "node is starting"

// HoldLinks makes the transport refuse inbound links (with "node is
// starting": the peer's dialer retries) while it answers probes: a node
// serves its port early in its start, so that peers starting at the same
// time can probe it, and takes links once it is ready for them.
func (t *Transport) HoldLinks(on bool) { t.hold.Store(on) }

// PeerCheckError is a dial whose peer Config.CheckPeer refused.
type PeerCheckError struct {
	Peer string
	Err  error
}

func (e *PeerCheckError) Error() string { return "refused the peer: " + e.Err.Error() }
func (e *PeerCheckError) Unwrap() error { return e.Err }

// peerRefused is a refusal of a dialer that proved the secret.
type peerRefused struct{ error }

// refusalLogEvery is how often refused strangers are logged.
const refusalLogEvery = 10 * time.Second

// logLimiter lets one log line through per refusalLogEvery and counts
// the rest.
type logLimiter struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// allow reports whether to log now, and how many were held back since
// the last line.
func (l *logLimiter) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < refusalLogEvery {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	return true, n
}

func isIDMismatch(err error) bool {
	var re *refusedError
	if errors.As(err, &re) {
		return strings.HasPrefix(re.reason, "cluster id mismatch:")
	}
	return strings.HasPrefix(err.Error(), "cluster id mismatch:")
}

// SetPeer adds a peer or updates its address. It never blocks: when this
// node's name is the smaller, a background dialer connects (and redials
// with backoff while the peer is set).
func (t *Transport) SetPeer(name, addr string) {
	if name == t.cfg.Self || name == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	delete(t.removed, name)
	p := t.peers[name]
	if p == nil {
		p = &peer{name: name, stop: make(chan struct{}), kick: make(chan struct{}, 1)}
		t.peers[name] = p
	}
	changed := p.addr != addr
	p.addr, p.configured = addr, true
	if t.cfg.Self < name && !p.dialer {
		p.dialer = true
		t.wg.Add(1)
		go t.dialLoop(p)
	} else if changed {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// RemovePeer forgets a peer: its link is closed, it is not redialled, and
// a link it opens is refused until SetPeer names it again.
func (t *Transport) RemovePeer(name string) {
	t.mu.Lock()
	p := t.peers[name]
	t.removed[name] = true
	var l *link
	if p != nil {
		delete(t.peers, name)
		close(p.stop)
		l = p.link
	}
	t.mu.Unlock()
	if l != nil {
		l.close(fmt.Errorf("peer %s removed", name))
	}
}

// Handle registers the handler of calls to service svc. It runs on its own
// goroutine per call; it must return (Close waits for it).
func (t *Transport) Handle(svc byte, h func(from string, req []byte) ([]byte, error)) {
	t.hmu.Lock()
	t.handlers[svc] = h
	t.hmu.Unlock()
}

// OnMessage registers the handler of one-way messages to service svc. It
// runs on the link's reader goroutine, in order: it must not block long.
func (t *Transport) OnMessage(svc byte, h func(from string, msg []byte)) {
	t.hmu.Lock()
	t.messages[svc] = h
	t.hmu.Unlock()
}

// OnPeerState registers fn, called with (name, true) when a link to a peer
// comes up and (name, false) when it goes down, in order, on one goroutine,
// under none of the transport's locks.
func (t *Transport) OnPeerState(fn func(name string, up bool)) {
	t.mu.Lock()
	t.watchers = append(t.watchers, fn)
	t.mu.Unlock()
}

func (t *Transport) linkTo(name string) (*link, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, fmt.Errorf("transport: %s: %w (%w)", name, ErrUnreachable, ErrClosed)
	}
	p := t.peers[name]
	if p == nil {
		return nil, fmt.Errorf("transport: node %s: %w (not a known peer)", name, ErrUnreachable)
	}
	if p.link == nil {
		return nil, fmt.Errorf("transport: node %s: %w (link down)", name, ErrUnreachable)
	}
	return p.link, nil
}

// Call sends req to service svc on node to and waits for the answer, until
// ctx ends. A handler error comes back as *RemoteError; no live link, or
// the link dropping while waiting, gives an error wrapping ErrUnreachable.
// req must not be modified until Call returns.
func (t *Transport) Call(ctx context.Context, to string, svc byte, req []byte) ([]byte, error) {
	if len(req) > t.cfg.MaxFrame {
		return nil, fmt.Errorf("transport: request of %d bytes exceeds the frame limit %d", len(req), t.cfg.MaxFrame)
	}
	l, err := t.linkTo(to)
	if err != nil {
		return nil, err
	}
	return l.call(ctx, svc, req)
}

// Send queues a one-way message to service svc on node to. Messages to one
// peer arrive in order; Send never blocks: it fails at once when the peer
// has no live link (ErrUnreachable) or its queue is full (ErrQueueFull).
// The transport keeps msg until written: do not modify it.
func (t *Transport) Send(to string, svc byte, msg []byte) error {
	if len(msg) > t.cfg.MaxFrame {
		return fmt.Errorf("transport: message of %d bytes exceeds the frame limit %d", len(msg), t.cfg.MaxFrame)
	}
	l, err := t.linkTo(to)
	if err != nil {
		return err
	}
	q := l.out
	if t.priority[svc] {
		q = l.pri
	}
	select {
	case q <- frame{kind: kindMessage, svc: svc, body: msg}:
		return nil
	case <-l.done:
		return fmt.Errorf("transport: node %s: %w (link down)", to, ErrUnreachable)
	default:
		return fmt.Errorf("transport: node %s: %w", to, ErrQueueFull)
	}
}

// SendWait is Send that waits while the peer's send queue holds
// bulkLimit frames or more, until ctx is done: the push-back a publisher
// feeding another node's queue must feel. It leaves the rest of the queue
// to what must not wait behind bulk traffic (Raft messages, acks,
// answers), so those queue behind at most bulkLimit publishes. Send,
// which Raft uses, never waits. It fails at once when the peer is
// unreachable.
func (t *Transport) SendWait(ctx context.Context, to string, svc byte, msg []byte) error {
	if len(msg) > t.cfg.MaxFrame {
		return fmt.Errorf("transport: message of %d bytes exceeds the frame limit %d", len(msg), t.cfg.MaxFrame)
	}
	l, err := t.linkTo(to)
	if err != nil {
		return err
	}
	f := frame{kind: kindMessage, svc: svc, body: msg}
	for pause := 50 * time.Microsecond; ; pause = min(2*pause, 2*time.Millisecond) {
		if len(l.out) < bulkLimit {
			select {
			case l.out <- f:
				return nil
			default:
			}
		}
		select {
		case <-l.done:
			return fmt.Errorf("transport: node %s: %w (link down)", to, ErrUnreachable)
		case <-ctx.Done():
			return fmt.Errorf("transport: node %s: %w (%w)", to, ErrQueueFull, ctx.Err())
		case <-time.After(pause):
		}
	}
}

// bulkLimit is how full SendWait lets a link's send queue get (a quarter
// of it).
const bulkLimit = sendQueueLen / 4

// Up reports whether a live link to the named peer exists.
func (t *Transport) Up(name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.peers[name]
	return p != nil && p.link != nil
}

// Peers lists the peers, sorted by name.
func (t *Transport) Peers() []PeerStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]PeerStatus, 0, len(t.peers))
	for _, p := range t.peers {
		s := PeerStatus{Name: p.name, Addr: p.addr, Up: p.link != nil, Since: p.since,
			BytesIn: p.in.Load(), BytesOut: p.out.Load()}
		if p.link != nil {
			s.CallsOut, s.CallsIn = p.link.inFlight()
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Close closes the listeners and every link, fails pending calls, and waits
// for every goroutine the transport started (handlers included).
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		t.wg.Wait()
		<-t.evdone
		return nil
	}
	t.closed = true
	t.cancel()
	var links []*link
	for _, p := range t.peers {
		if p.link != nil {
			links = append(links, p.link)
		}
	}
	for ln := range t.listeners {
		ln.Close()
	}
	for c := range t.pending {
		c.Close()
	}
	t.mu.Unlock()
	for _, l := range links {
		l.close(ErrClosed)
	}
	t.wg.Wait()
	close(t.evstop)
	<-t.evdone
	return nil
}

// dialLoop keeps a link to p up while p is set (this node dials p).
func (t *Transport) dialLoop(p *peer) {
	defer t.wg.Done()
	backoff := minBackoff
	for {
		t.mu.Lock()
		addr, l := p.addr, p.link
		t.mu.Unlock()
		if l != nil {
			select {
			case <-l.done:
			case <-p.stop:
				return
			case <-t.ctx.Done():
				return
			}
			backoff = minBackoff
			continue
		}
		select {
		case <-p.stop:
			return
		case <-t.ctx.Done():
			return
		default:
		}
		err := t.dial(p, addr)
		if err == nil {
			backoff = minBackoff
			continue
		}
		if t.ctx.Err() != nil {
			return
		}
		lvl := slog.LevelDebug // a down peer: said once at Info, then quiet
		if backoff == minBackoff {
			lvl = slog.LevelInfo
		}
		var re *refusedError
		var pc *PeerCheckError
		if isIDMismatch(err) || errors.As(err, &pc) {
			lvl = slog.LevelError
		} else if errors.As(err, &re) && re.reason == reasonStarting {
			lvl = slog.LevelDebug
		} else if errors.As(err, &re) || isAuthErr(err) {
			lvl = slog.LevelWarn
		}
		t.log.Log(context.Background(), lvl, "cluster link to peer failed", "peer", p.name, "addr", addr, "retry_in", backoff, "err", err)
		timer := time.NewTimer(backoff)
		select {
		case <-timer.C:
		case <-p.kick:
			timer.Stop()
		case <-p.stop:
			timer.Stop()
			return
		case <-t.ctx.Done():
			timer.Stop()
			return
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func isAuthErr(err error) bool {
	return strings.HasPrefix(err.Error(), "authentication failed")
}

func (t *Transport) dial(p *peer, addr string) error {
	if addr == "" {
		return errors.New("no address")
	}
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: 15 * time.Second}
	raw, err := d.DialContext(t.ctx, "tcp", addr)
	if err != nil {
		return err
	}
	if !t.track(raw, false) {
		raw.Close()
		return ErrClosed
	}
	defer t.untrack(raw)
	raw.SetDeadline(time.Now().Add(handshakeTimeout))
	c, err := t.clientTLS(t.ctx, raw, addr)
	if err != nil {
		raw.Close()
		return err
	}
	selfID := t.cfg.ClusterID()
	them, err := dialHandshake(c, t.cfg.Secret, hello{name: t.cfg.Self, id: selfID, inc: t.cfg.Incarnation}, p.name)
	if err != nil {
		raw.Close()
		return err
	}
	var refuse error
	if t.cfg.CheckPeer != nil {
		refuse = t.cfg.CheckPeer(them.name, them.inc)
	}
	if err := verdict(c, refuse); err != nil || refuse != nil {
		raw.Close()
		if refuse != nil {
			return &PeerCheckError{Peer: them.name, Err: refuse}
		}
		return err
	}
	raw.SetDeadline(time.Time{})
	if selfID == "" && them.id != "" {
		t.cfg.LearnID(them.id)
	}
	if !t.attach(p.name, c, raw, p) {
		return ErrClosed
	}
	return nil
}

// attach makes c the live link to name. want, if set, is the peer entry the
// dialer works for: if it was removed meanwhile, the link is dropped.
func (t *Transport) attach(name string, c, raw net.Conn, want *peer) bool {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		raw.Close()
		return false
	}
	p := t.peers[name]
	if want != nil && p != want {
		t.mu.Unlock()
		raw.Close()
		return false
	}
	if p == nil {
		p = &peer{name: name, stop: make(chan struct{}), kick: make(chan struct{}, 1)}
		t.peers[name] = p
	}
	old := p.link
	l := newLink(t, p, c, raw)
	p.link = l
	p.since = time.Now()
	if old != nil {
		t.emit(name, false)
	}
	t.emit(name, true)
	t.wg.Add(2)
	go l.readLoop()
	go l.writeLoop()
	t.mu.Unlock()
	if old != nil {
		old.close(errors.New("replaced by a new link"))
	}
	t.log.Info("cluster link up", "peer", name, "remote", c.RemoteAddr().String())
	return true
}

// detach is called once by a link's reader when the link is dead.
func (t *Transport) detach(l *link, err error) {
	t.mu.Lock()
	p := l.peer
	if p.link == l {
		p.link = nil
		p.since = time.Now()
		t.emit(p.name, false)
		if !p.configured && t.peers[p.name] == p {
			delete(t.peers, p.name)
		}
		if t.ctx.Err() == nil {
			t.log.Info("cluster link down", "peer", p.name, "err", err)
		}
	}
	t.mu.Unlock()
}

// emit queues a peer-state event (t.mu held, so events keep the order of
// the state changes).
func (t *Transport) emit(name string, up bool) {
	t.evmu.Lock()
	t.events = append(t.events, event{name, up})
	t.evmu.Unlock()
	select {
	case t.evkick <- struct{}{}:
	default:
	}
}

// notifier delivers peer-state events to the watchers, in order, outside
// every lock. Close stops it last, once every link is down, and it drains
// what is queued before exiting.
func (t *Transport) notifier() {
	defer close(t.evdone)
	for {
		t.evmu.Lock()
		evs := t.events
		t.events = nil
		t.evmu.Unlock()
		if len(evs) > 0 {
			t.mu.Lock()
			ws := slices.Clone(t.watchers)
			t.mu.Unlock()
			for _, e := range evs {
				for _, w := range ws {
					w(e.name, e.up)
				}
			}
			continue
		}
		select {
		case <-t.evkick:
		case <-t.evstop:
			t.evmu.Lock()
			n := len(t.events)
			t.evmu.Unlock()
			if n == 0 {
				return
			}
		}
	}
}

// countingConn counts bytes into the peer's counters.
type countingConn struct {
	net.Conn
	p *peer
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.p.in.Add(uint64(n))
	return n, err
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.p.out.Add(uint64(n))
	return n, err
}

// link is one live connection to a peer.
type link struct {
	t    *Transport
	peer *peer
	conn net.Conn // TLS or raw
	raw  net.Conn // closed to kill the link: a tls.Conn Close could block on close_notify
	r    *bufio.Reader
	w    *bufio.Writer
	out  chan frame
	pri  chan frame // Config.Priority's messages: written first
	done chan struct{}
	sem  chan struct{} // incoming calls in flight

	once   sync.Once
	mu     sync.Mutex
	err    error // set once failed
	nextID uint64
	calls  map[uint64]chan result
}

type result struct {
	body []byte
	err  error
}

func newLink(t *Transport, p *peer, c, raw net.Conn) *link {
	cc := countingConn{Conn: c, p: p}
	return &link{
		t: t, peer: p, conn: c, raw: raw,
		r:     bufio.NewReaderSize(cc, 64<<10),
		w:     bufio.NewWriterSize(cc, 64<<10),
		out:   make(chan frame, sendQueueLen),
		pri:   make(chan frame, sendQueueLen),
		done:  make(chan struct{}),
		sem:   make(chan struct{}, maxIncoming),
		calls: map[uint64]chan result{},
	}
}

func (l *link) inFlight() (out, in int) {
	l.mu.Lock()
	out = len(l.calls)
	l.mu.Unlock()
	return out, len(l.sem)
}

// close kills the link and fails every pending call with an error wrapping
// ErrUnreachable. Idempotent.
func (l *link) close(cause error) {
	l.once.Do(func() {
		err := fmt.Errorf("transport: node %s: %w (link lost: %w)", l.peer.name, ErrUnreachable, cause)
		l.mu.Lock()
		l.err = err
		calls := l.calls
		l.calls = nil
		l.mu.Unlock()
		close(l.done)
		l.raw.Close()
		for _, ch := range calls {
			ch <- result{err: err}
		}
	})
}

func (l *link) call(ctx context.Context, svc byte, req []byte) ([]byte, error) {
	ch := make(chan result, 1)
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return nil, err
	}
	l.nextID++
	id := l.nextID
	l.calls[id] = ch
	l.mu.Unlock()
	abandon := func() {
		l.mu.Lock()
		if l.calls != nil {
			delete(l.calls, id)
		}
		l.mu.Unlock()
	}
	select {
	case l.out <- frame{kind: kindRequest, svc: svc, id: id, body: req}:
	case r := <-ch: // link failed
		return nil, r.err
	case <-ctx.Done():
		abandon()
		return nil, ctx.Err()
	}
	select {
	case r := <-ch:
		return r.body, r.err
	case <-ctx.Done():
		abandon()
		return nil, ctx.Err()
	}
}

func (l *link) readLoop() {
	defer l.t.wg.Done()
	err := l.read()
	l.close(err)
	l.t.detach(l, err)
}

func (l *link) read() error {
	t := l.t
	for {
		l.conn.SetReadDeadline(time.Now().Add(idleTimeout))
		f, err := readFrame(l.r, t.cfg.MaxFrame)
		if err != nil {
			select {
			case <-l.done:
				return err
			default:
			}
			if errors.Is(err, errFrameTooLarge) || errors.Is(err, errBadKind) {
				t.log.Warn("cluster link dropped: bad input from peer", "peer", l.peer.name, "err", err)
			}
			return err
		}
		switch f.kind {
		case kindPing:
		case kindMessage:
			t.hmu.RLock()
			h := t.messages[f.svc]
			t.hmu.RUnlock()
			if h != nil {
				h(l.peer.name, f.body)
			}
		case kindResponse, kindError:
			l.mu.Lock()
			ch := l.calls[f.id]
			delete(l.calls, f.id)
			l.mu.Unlock()
			if ch == nil {
				continue // abandoned call
			}
			if f.kind == kindError {
				ch <- result{err: &RemoteError{Peer: l.peer.name, Msg: string(f.body)}}
			} else {
				ch <- result{body: f.body}
			}
		case kindRequest:
			select {
			case l.sem <- struct{}{}:
			case <-l.done:
				return ErrClosed
			}
			t.wg.Add(1)
			go l.serve(f)
		}
	}
}

func (l *link) serve(f frame) {
	defer l.t.wg.Done()
	defer func() { <-l.sem }()
	l.t.hmu.RLock()
	h := l.t.handlers[f.svc]
	l.t.hmu.RUnlock()
	resp := frame{kind: kindResponse, id: f.id}
	if h == nil {
		resp.kind = kindError
		resp.body = fmt.Appendf(nil, "transport: node %s has no handler for service %d", l.t.cfg.Self, f.svc)
	} else if body, err := h(l.peer.name, f.body); err != nil {
		resp.kind = kindError
		resp.body = []byte(err.Error())
	} else {
		resp.body = body
	}
	if len(resp.body) > l.t.cfg.MaxFrame {
		resp.kind = kindError
		resp.body = fmt.Appendf(nil, "transport: response of %d bytes exceeds the frame limit", len(resp.body))
	}
	select {
	case l.out <- resp:
	case <-l.done:
	}
}

func (l *link) writeLoop() {
	defer l.t.wg.Done()
	tick := time.NewTicker(heartbeatInterval)
	defer tick.Stop()
	wrote := false // since the last tick: a heartbeat is due only on silence
	// next takes a priority frame if one waits, else any frame.
	next := func() (frame, bool) {
		select {
		case f := <-l.pri:
			return f, true
		default:
		}
		select {
		case f := <-l.pri:
			return f, true
		case f := <-l.out:
			return f, true
		default:
			return frame{}, false
		}
	}
	for {
		var f frame
		select {
		case f = <-l.pri:
			wrote = true
		case f = <-l.out:
			wrote = true
		case <-tick.C:
			if wrote {
				wrote = false
				continue
			}
			f = frame{kind: kindPing}
		case <-l.done:
			return
		}
		// Priority frames that wait go before the one taken.
		var err error
		if f.kind == kindMessage && !l.t.priority[f.svc] {
			for ok := true; ok && err == nil; {
				var p frame
				select {
				case p = <-l.pri:
					err = l.write(p)
				default:
					ok = false
				}
			}
		}
		if err == nil {
			err = l.write(f)
		}
		for err == nil {
			g, ok := next()
			if !ok {
				break
			}
			err = l.write(g)
		}
		if err == nil {
			err = l.w.Flush()
		}
		if err != nil {
			l.close(err)
			return
		}
	}
}

func (l *link) write(f frame) error {
	if len(f.body) > l.t.cfg.MaxFrame {
		return nil // Call, Send and serve refuse these before queueing
	}
	return writeFrame(l.w, f)
}
