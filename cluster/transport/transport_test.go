package transport

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testutil"
	"go.uber.org/goleak"
)

// TestMain shortens the backoff and handshake deadline so failure paths
// run fast, and fails the run when a goroutine outlives the tests.
func TestMain(m *testing.M) {
	minBackoff = 10 * time.Millisecond
	maxBackoff = 200 * time.Millisecond
	handshakeTimeout = 2 * time.Second
	acceptTimeout = 2 * time.Second
	heartbeatInterval = 200 * time.Millisecond
	idleTimeout = 2 * time.Second
	goleak.VerifyTestMain(m)
}

const wait = 10 * time.Second

var secret = []byte("issue-13-cookie")

// logBuf is a goroutine-safe log sink tests can search.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

func (l *logBuf) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.b.String(), s)
}

type node struct {
	name string
	addr string
	tr   *Transport
	logs *logBuf
	ids  chan string // what LearnID was told
}

type opts struct {
	secret   []byte
	id       string
	tls      *tls.Config
	maxFrame int
	addr     string // listen address (default 127.0.0.1:0)
	inc      uint64
	check    func(name string, inc uint64) error
	probe    func(name string, inc uint64) []byte
	priority []byte
}

func start(t *testing.T, name string, o opts) *node {
	t.Helper()
	if o.secret == nil {
		o.secret = secret
	}
	if o.addr == "" {
		o.addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{name: name, addr: ln.Addr().String(), logs: &logBuf{}, ids: make(chan string, 16)}
	var idMu sync.Mutex
	id := o.id
	n.tr = New(Config{
		Self:   name,
		Secret: o.secret,
		ClusterID: func() string {
			idMu.Lock()
			defer idMu.Unlock()
			return id
		},
		LearnID: func(s string) {
			idMu.Lock()
			id = s
			idMu.Unlock()
			n.ids <- s
		},
		TLS:         o.tls,
		Logger:      slog.New(slog.NewTextHandler(n.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		MaxFrame:    o.maxFrame,
		Incarnation: o.inc,
		CheckPeer:   o.check,
		ProbeInfo:   o.probe,
		Priority:    o.priority,
	})
	served := make(chan error, 1)
	go func() { served <- n.tr.Serve(ln) }()
	t.Cleanup(func() {
		n.tr.Close()
		if err := <-served; err != nil {
			t.Errorf("%s: Serve: %v", name, err)
		}
	})
	return n
}

func (n *node) status(peer string) (PeerStatus, bool) {
	for _, p := range n.tr.Peers() {
		if p.Name == peer {
			return p, true
		}
	}
	return PeerStatus{}, false
}

func (n *node) up(peer string) bool {
	s, ok := n.status(peer)
	return ok && s.Up
}

// linkUp makes a and b peers of each other and waits for the link.
func linkUp(t *testing.T, a, b *node) {
	t.Helper()
	a.tr.SetPeer(b.name, b.addr)
	b.tr.SetPeer(a.name, a.addr)
	testutil.Eventually(t, wait, a.name+" <-> "+b.name+" link up", func() bool {
		return a.up(b.name) && b.up(a.name)
	})
}

func echo(self string) func(string, []byte) ([]byte, error) {
	return func(from string, req []byte) ([]byte, error) {
		if string(req) == "fail" {
			return nil, fmt.Errorf("handler on %s refused a call from %s", self, from)
		}
		return append([]byte(self+" got "), req...), nil
	}
}

// TestCallBothWays: issue 13: calls and responses travel both ways over
// the one link; a handler error comes back as *RemoteError with its text;
// an unknown service answers an error, not a panic.
func TestCallBothWays(t *testing.T) {
	a := start(t, "warren@a", opts{})
	b := start(t, "warren@b", opts{})
	a.tr.Handle(1, echo(a.name))
	b.tr.Handle(1, echo(b.name))
	linkUp(t, a, b)
	ctx := context.Background()

	got, err := a.tr.Call(ctx, b.name, 1, []byte("hello"))
	if err != nil || string(got) != "warren@b got hello" {
		t.Fatalf("a->b: %q %v", got, err)
	}
	got, err = b.tr.Call(ctx, a.name, 1, []byte("hi"))
	if err != nil || string(got) != "warren@a got hi" {
		t.Fatalf("b->a: %q %v", got, err)
	}
	_, err = a.tr.Call(ctx, b.name, 1, []byte("fail"))
	var re *RemoteError
	if !errors.As(err, &re) || err.Error() != "handler on warren@b refused a call from warren@a" || re.Peer != b.name {
		t.Fatalf("handler error: %#v", err)
	}
	_, err = a.tr.Call(ctx, b.name, 9, nil)
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "no handler for service 9") {
		t.Fatalf("unknown service: %v", err)
	}
	// An empty request and response survive.
	b.tr.Handle(2, func(string, []byte) ([]byte, error) { return nil, nil })
	if got, err := a.tr.Call(ctx, b.name, 2, nil); err != nil || len(got) != 0 {
		t.Fatalf("empty call: %q %v", got, err)
	}
	s, _ := a.status(b.name)
	if !s.Up || s.Addr != b.addr || s.BytesIn == 0 || s.BytesOut == 0 || s.Since.IsZero() {
		t.Fatalf("peer status: %+v", s)
	}
	if !a.tr.Up(b.name) || !b.tr.Up(a.name) || a.tr.Up("warren@c") {
		t.Fatal("Up disagrees with the links")
	}
	if n := len(a.tr.Peers()); n != 1 {
		t.Fatalf("a has %d peers", n)
	}
}

// TestManyConcurrentCalls: issue 13: calls are multiplexed over the link
// and every response reaches its own caller; incoming calls in flight per
// link are bounded (256), the rest wait.
func TestManyConcurrentCalls(t *testing.T) {
	a := start(t, "warren@a", opts{})
	b := start(t, "warren@b", opts{})
	b.tr.Handle(1, echo(b.name))
	gate := make(chan struct{})
	var running, peak atomic.Int64
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open) // before the transports close, even on failure
	b.tr.Handle(2, func(_ string, req []byte) ([]byte, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-gate
		return req, nil
	})
	linkUp(t, a, b)

	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for g := range 32 {
		wg.Go(func() {
			for i := range 50 {
				req := fmt.Sprintf("g%d-%d", g, i)
				got, err := a.tr.Call(context.Background(), b.name, 1, []byte(req))
				if err == nil && string(got) != "warren@b got "+req {
					err = fmt.Errorf("call %s answered %q", req, got)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}

	// 300 blocked calls: exactly 256 run, the rest wait in the reader.
	for i := range 300 {
		wg.Go(func() {
			req := []byte{byte(i), byte(i >> 8)}
			got, err := a.tr.Call(context.Background(), b.name, 2, req)
			if err == nil && !bytes.Equal(got, req) {
				err = fmt.Errorf("blocked call %d answered %v", i, got)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	testutil.Eventually(t, wait, "256 handlers running", func() bool { return running.Load() == maxIncoming })
	if s, _ := b.status(a.name); s.CallsIn != maxIncoming {
		t.Errorf("b reports %d incoming calls in flight", s.CallsIn)
	}
	testutil.Eventually(t, wait, "a reports 300 outgoing calls in flight", func() bool {
		s, _ := a.status(b.name)
		return s.CallsOut == 300
	})
	open()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if p := peak.Load(); p > maxIncoming {
		t.Fatalf("%d handlers ran at once, bound is %d", p, maxIncoming)
	}
}

// TestSendOrdered: issue 13: one-way messages to a peer arrive in order
// (10k of them, both directions), batched on one link.
func TestSendOrdered(t *testing.T) {
	a := start(t, "warren@a", opts{})
	b := start(t, "warren@b", opts{})
	const n = 10000
	type sink struct {
		mu   sync.Mutex
		got  []uint32
		from string
	}
	recv := func(s *sink) func(string, []byte) {
		return func(from string, msg []byte) {
			s.mu.Lock()
			s.got = append(s.got, binary.BigEndian.Uint32(msg))
			s.from = from
			s.mu.Unlock()
		}
	}
	var atB, atA sink
	b.tr.OnMessage(7, recv(&atB))
	a.tr.OnMessage(7, recv(&atA))
	linkUp(t, a, b)
	send := func(from, to *node) {
		for i := range n {
			msg := binary.BigEndian.AppendUint32(nil, uint32(i))
			for {
				err := from.tr.Send(to.name, 7, msg)
				if err == nil {
					break
				}
				if !errors.Is(err, ErrQueueFull) {
					t.Errorf("send %d: %v", i, err)
					return
				}
				time.Sleep(100 * time.Microsecond) // queue full: let the writer drain
			}
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { send(a, b) })
	wg.Go(func() { send(b, a) })
	wg.Wait()
	for _, c := range []struct {
		s    *sink
		from string
	}{{&atB, a.name}, {&atA, b.name}} {
		testutil.Eventually(t, wait, "10k messages", func() bool {
			c.s.mu.Lock()
			defer c.s.mu.Unlock()
			return len(c.s.got) >= n
		})
		c.s.mu.Lock()
		if len(c.s.got) != n || c.s.from != c.from {
			t.Fatalf("got %d messages from %s", len(c.s.got), c.s.from)
		}
		for i, v := range c.s.got {
			if v != uint32(i) {
				t.Fatalf("message %d is %d: out of order", i, v)
			}
		}
		c.s.mu.Unlock()
	}
}

// TestWrongSecretRefused: issue 13: a node with the wrong secret is refused
// on either side of the handshake and logged; the accept loop goes on and a
// node with the right secret still links.
func TestWrongSecretRefused(t *testing.T) {
	a := start(t, "warren@a", opts{})
	bad := start(t, "warren@0", opts{secret: []byte("not-the-cookie")}) // dials a
	bad2 := start(t, "warren@z", opts{secret: []byte("nor-this")})      // dialled by a
	bad.tr.SetPeer(a.name, a.addr)
	a.tr.SetPeer(bad.name, bad.addr)
	a.tr.SetPeer(bad2.name, bad2.addr)
	bad2.tr.SetPeer(a.name, a.addr)
	testutil.Eventually(t, wait, "a refuses warren@0", func() bool {
		return a.logs.has(`authentication failed: a client calling itself \"warren@0\" does not know the cluster secret`)
	})
	testutil.Eventually(t, wait, "warren@z refuses a", func() bool {
		return bad2.logs.has(`authentication failed: a client calling itself \"warren@a\" does not know the cluster secret`)
	})
	testutil.Eventually(t, wait, "warren@0 told it was refused", func() bool {
		return bad.logs.has("refused by peer: authentication failed")
	})
	if bad.up(a.name) || a.up(bad.name) || a.up(bad2.name) || bad2.up(a.name) {
		t.Fatalf("a link with a wrong secret came up: %+v", a.tr.Peers())
	}
	if _, err := bad.tr.Call(context.Background(), a.name, 1, nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("call over a refused link: %v", err)
	}

	c := start(t, "warren@c", opts{})
	c.tr.Handle(1, echo(c.name))
	linkUp(t, a, c)
	if got, err := a.tr.Call(context.Background(), c.name, 1, []byte("x")); err != nil || string(got) != "warren@c got x" {
		t.Fatalf("call to the good peer: %q %v", got, err)
	}
}

// TestClusterIDMismatch: issue 13: nodes of different clusters refuse each
// other and both log both ids; a node without an id links and learns the
// peer's, whether it dials or accepts.
func TestClusterIDMismatch(t *testing.T) {
	a := start(t, "warren@a", opts{id: "cluster-X"})
	b := start(t, "warren@b", opts{id: "cluster-Y"})
	a.tr.SetPeer(b.name, b.addr)
	b.tr.SetPeer(a.name, a.addr)
	for _, n := range []*node{a, b} {
		testutil.Eventually(t, wait, n.name+" logs the id mismatch", func() bool {
			return n.logs.has(`cluster id mismatch: this node warren@b is in cluster \"cluster-Y\", peer warren@a is in cluster \"cluster-X\"`) &&
				n.logs.has("level=ERROR")
		})
	}
	if a.up(b.name) || b.up(a.name) {
		t.Fatal("nodes of different clusters linked")
	}

	// c (no id) is dialled by a: learns X. 0 (no id) dials b: learns Y.
	c := start(t, "warren@c", opts{})
	linkUp(t, a, c)
	if id := learned(t, c); id != "cluster-X" {
		t.Fatalf("c learned %q", id)
	}
	z := start(t, "warren@0", opts{})
	linkUp(t, z, b)
	if id := learned(t, z); id != "cluster-Y" {
		t.Fatalf("warren@0 learned %q", id)
	}
	// Having learned X, c now refuses Y.
	c.tr.SetPeer(b.name, b.addr)
	b.tr.SetPeer(c.name, c.addr)
	testutil.Eventually(t, wait, "c refuses b", func() bool {
		return c.logs.has(`this node warren@c is in cluster \"cluster-X\", peer warren@b is in cluster \"cluster-Y\"`)
	})
	if len(a.ids)+len(b.ids) != 0 {
		t.Fatal("a node with an id learned another")
	}
}

// learned returns the id n was told through LearnID.
func learned(t *testing.T, n *node) string {
	t.Helper()
	select {
	case id := <-n.ids:
		return id
	case <-time.After(wait):
		t.Fatalf("%s learned no cluster id", n.name)
		return ""
	}
}

// TestReconnect: issue 13: when a peer's transport closes, the link goes
// down (OnPeerState), and a new transport on the same address is linked
// again by the dialer's backoff; the same holds when the dialer restarts.
func TestReconnect(t *testing.T) {
	a := start(t, "warren@a", opts{})
	b := start(t, "warren@b", opts{})
	var mu sync.Mutex
	var events []string
	a.tr.OnPeerState(func(name string, up bool) {
		mu.Lock()
		events = append(events, fmt.Sprintf("%s:%v", name, up))
		mu.Unlock()
	})
	seen := func(want ...string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return strings.Join(events, " ") == strings.Join(want, " ")
		}
	}
	linkUp(t, a, b)
	testutil.Eventually(t, wait, "up event", seen("warren@b:true"))

	b.tr.Close()
	testutil.Eventually(t, wait, "down event", seen("warren@b:true", "warren@b:false"))
	if a.up(b.name) {
		t.Fatal("a still up")
	}
	b2 := start(t, "warren@b", opts{addr: b.addr})
	b2.tr.Handle(1, echo("b2"))
	b2.tr.SetPeer(a.name, a.addr)
	testutil.Eventually(t, wait, "a redials b", func() bool { return a.up(b.name) && b2.up(a.name) })
	testutil.Eventually(t, wait, "up again", seen("warren@b:true", "warren@b:false", "warren@b:true"))
	if got, err := a.tr.Call(context.Background(), b.name, 1, []byte("x")); err != nil || string(got) != "b2 got x" {
		t.Fatalf("call after reconnect: %q %v", got, err)
	}

	// The dialer restarts (new address): b2 accepts its new link.
	a.tr.Close()
	testutil.Eventually(t, wait, "b2 sees a down", func() bool { return !b2.up(a.name) })
	a2 := start(t, "warren@a", opts{})
	a2.tr.SetPeer(b.name, b.addr)
	testutil.Eventually(t, wait, "a2 links", func() bool { return a2.up(b.name) && b2.up(a.name) })
	if got, err := a2.tr.Call(context.Background(), b.name, 1, []byte("y")); err != nil || string(got) != "b2 got y" {
		t.Fatalf("call from restarted dialer: %q %v", got, err)
	}
}

// TestDownPeerFailsFast: issue 13: Call and Send to a peer without a live
// link fail at once with ErrUnreachable naming the peer, never hang.
func TestDownPeerFailsFast(t *testing.T) {
	a := start(t, "warren@a", opts{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	a.tr.SetPeer("warren@b", dead) // a dials: connection refused, backoff
	a.tr.SetPeer("warren@0", dead) // dials a: never does
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for _, to := range []string{"warren@b", "warren@0", "warren@unknown"} {
		_, err := a.tr.Call(ctx, to, 1, []byte("x"))
		if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), to) {
			t.Fatalf("call to %s: %v", to, err)
		}
		if err := a.tr.Send(to, 1, []byte("x")); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("send to %s: %v", to, err)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("calls waited for the context")
	}
	if a.tr.Up("warren@b") {
		t.Fatal("a dead peer is up")
	}
	testutil.Eventually(t, wait, "redial attempts logged", func() bool {
		return a.logs.has(`msg="cluster link to peer failed" component=cluster-transport node=warren@a peer=warren@b`)
	})
}

// TestPendingCallsFailOnDrop: issue 13: a link drop fails every call
// pending on it at once with ErrUnreachable; a cancelled context abandons
// its call.
func TestPendingCallsFailOnDrop(t *testing.T) {
	a := start(t, "warren@a", opts{})
	b := start(t, "warren@b", opts{})
	release := make(chan struct{})
	b.tr.Handle(1, func(string, []byte) ([]byte, error) { <-release; return []byte("late"), nil })
	linkUp(t, a, b)
	defer close(release)

	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan error, 1)
	go func() { _, err := a.tr.Call(ctx, b.name, 1, nil); cancelled <- err }()
	testutil.Eventually(t, wait, "1 call in flight", func() bool { s, _ := b.status(a.name); return s.CallsIn == 1 })
	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	if s, _ := a.status(b.name); s.CallsOut != 0 {
		t.Fatalf("abandoned call still pending: %+v", s)
	}

	errs := make(chan error, 5)
	for range 5 {
		go func() { _, err := a.tr.Call(context.Background(), b.name, 1, nil); errs <- err }()
	}
	testutil.Eventually(t, wait, "6 calls in flight", func() bool { s, _ := b.status(a.name); return s.CallsIn == 6 })
	// Cut the TCP connection under the link (as a network fault would).
	s0, _ := a.status(b.name)
	a.tr.mu.Lock()
	a.tr.peers[b.name].link.raw.Close()
	a.tr.mu.Unlock()
	for range 5 {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), b.name) {
				t.Fatalf("pending call: %v", err)
			}
		case <-time.After(wait):
			t.Fatal("pending calls not failed by the link drop")
		}
	}
	testutil.Eventually(t, wait, "relinked", func() bool {
		s, _ := a.status(b.name)
		return s.Up && !s.Since.Equal(s0.Since) && b.up(a.name)
	})

	// Close fails the caller's pending calls too.
	go func() { _, err := a.tr.Call(context.Background(), b.name, 1, nil); errs <- err }()
	testutil.Eventually(t, wait, "call in flight", func() bool { s, _ := a.status(b.name); return s.CallsOut == 1 })
	a.tr.Close()
	if err := <-errs; !errors.Is(err, ErrUnreachable) || !errors.Is(err, ErrClosed) {
		t.Fatalf("call pending at Close: %v", err)
	}
	if _, err := a.tr.Call(context.Background(), b.name, 1, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: %v", err)
	}
}

// TestOversizedFrameDropsLink: issue 13: a frame announcing more than
// MaxFrame drops the connection (logged) without reading it; a transport
// never sends one (the call fails locally).
func TestOversizedFrameDropsLink(t *testing.T) {
	b := start(t, "warren@b", opts{maxFrame: 1024})
	b.tr.Handle(1, echo(b.name))
	c := rawPeer(t, "warren@a", b)
	var h [headerLen]byte
	binary.BigEndian.PutUint32(h[:], 1<<31)
	h[4] = kindMessage
	if _, err := c.Write(h[:]); err != nil {
		t.Fatal(err)
	}
	if err := closedByPeer(c); err != nil {
		t.Fatalf("b did not close the link: %v", err)
	}
	testutil.Eventually(t, wait, "b logs the oversized frame", func() bool { return b.logs.has("frame too large: 2147483648 bytes announced, limit 1024") })

	// A transport refuses to send what its own limit forbids.
	a := start(t, "warren@a", opts{maxFrame: 1024})
	linkUp(t, a, b)
	_, err := a.tr.Call(context.Background(), b.name, 1, make([]byte, 2000))
	if err == nil || !strings.Contains(err.Error(), "exceeds the frame limit") {
		t.Fatalf("oversized call: %v", err)
	}
	if err := a.tr.Send(b.name, 1, make([]byte, 2000)); err == nil || !strings.Contains(err.Error(), "exceeds the frame limit") {
		t.Fatalf("oversized send: %v", err)
	}
	if got, err := a.tr.Call(context.Background(), b.name, 1, []byte("ok")); err != nil || string(got) != "warren@b got ok" {
		t.Fatalf("link after refused oversized call: %q %v", got, err)
	}

	// A peer with a larger limit loses its link for an oversized message,
	// fails its pending call, and redials.
	big := start(t, "warren@0", opts{})
	linkUp(t, big, b)
	pending := make(chan error, 1)
	release := make(chan struct{})
	defer close(release)
	b.tr.Handle(2, func(string, []byte) ([]byte, error) { <-release; return nil, nil })
	go func() { _, err := big.tr.Call(context.Background(), b.name, 2, nil); pending <- err }()
	testutil.Eventually(t, wait, "call in flight", func() bool { s, _ := b.status(big.name); return s.CallsIn == 1 })
	if err := big.tr.Send(b.name, 1, make([]byte, 4000)); err != nil {
		t.Fatal(err)
	}
	if err := <-pending; !errors.Is(err, ErrUnreachable) {
		t.Fatalf("call on the dropped link: %v", err)
	}
	testutil.Eventually(t, wait, "b logs the oversized message", func() bool {
		return b.logs.has("peer=warren@0 err=\"frame too large: 4000 bytes announced, limit 1024\"")
	})
	testutil.Eventually(t, wait, "relinked", func() bool { return big.up(b.name) && b.up(big.name) })
}

// TestHeartbeat: issue 13: an idle link stays up on heartbeats; a peer
// silent past the idle timeout is dropped.
func TestHeartbeat(t *testing.T) {
	a := start(t, "warren@a", opts{})
	b := start(t, "warren@b", opts{})
	linkUp(t, a, b)
	s0, _ := a.status(b.name)
	testutil.Eventually(t, wait, "heartbeats past the idle timeout", func() bool {
		s, _ := a.status(b.name)
		return s.BytesIn >= s0.BytesIn+uint64(headerLen)*uint64(idleTimeout/heartbeatInterval+2)
	})
	if s, _ := a.status(b.name); !s.Up || !s.Since.Equal(s0.Since) {
		t.Fatalf("idle link did not stay up: %+v then %+v", s0, s)
	}
	c := rawPeer(t, "warren@x", b) // says nothing after the handshake
	if err := closedByPeer(c); err != nil {
		t.Fatalf("silent peer not dropped: %v", err)
	}
}

// rawPeer links to n as a hand-driven peer named name (correct secret).
func rawPeer(t *testing.T, name string, n *node) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := dialHandshake(c, secret, hello{name: name}, n.name); err != nil {
		t.Fatal(err)
	}
	if err := verdict(c, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, wait, "raw peer linked", func() bool { return n.up(name) })
	return c
}

// closedByPeer reads c until the peer closes it (EOF or reset); it fails
// on a timeout.
func closedByPeer(c net.Conn) error {
	c.SetReadDeadline(time.Now().Add(wait))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return err
	}
	return nil
}

// TestGarbageDisconnects: issue 13: garbage before or after the handshake,
// and a client that says nothing, only lose their own connection; a real
// peer links meanwhile.
func TestGarbageDisconnects(t *testing.T) {
	b := start(t, "warren@b", opts{})
	b.tr.Handle(1, echo(b.name))
	junk := make([]byte, 4096)
	rand.Read(junk)

	pre, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer pre.Close()
	silent, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	pre.Write(junk)

	post := rawPeer(t, "warren@x", b)
	post.Write([]byte{0, 0, 0, 4, 99, 0, 0, 0, 0, 0, 0, 0, 0, 0}) // unknown kind
	post.Write(junk)

	a := start(t, "warren@a", opts{})
	linkUp(t, a, b)
	if got, err := a.tr.Call(context.Background(), b.name, 1, []byte("x")); err != nil || string(got) != "warren@b got x" {
		t.Fatalf("call: %q %v", got, err)
	}
	for name, c := range map[string]net.Conn{"garbage": pre, "silent": silent, "garbage after handshake": post} {
		if err := closedByPeer(c); err != nil {
			t.Fatalf("%s client not disconnected: %v", name, err)
		}
	}
	testutil.Eventually(t, wait, "warren@x dropped", func() bool { _, ok := b.status("warren@x"); return !ok })
	if !b.logs.has("unknown frame kind 99") || !b.logs.has("bad magic") {
		t.Fatalf("refusals not logged:\n%s", b.logs.b.String())
	}
}

// TestRemovePeer: issue 13: a removed peer is not redialled and its links
// are refused until SetPeer names it again.
func TestRemovePeer(t *testing.T) {
	a := start(t, "warren@a", opts{})
	b := start(t, "warren@b", opts{})
	linkUp(t, a, b)
	b.tr.RemovePeer(a.name) // a keeps dialling; b refuses
	testutil.Eventually(t, wait, "b refuses a", func() bool {
		return b.logs.has("node warren@a was removed from the cluster")
	})
	if a.up(b.name) || b.up(a.name) {
		t.Fatal("removed peer linked")
	}
	b.tr.SetPeer(a.name, a.addr)
	testutil.Eventually(t, wait, "relinked", func() bool { return a.up(b.name) && b.up(a.name) })
	a.tr.RemovePeer(b.name) // the dialer stops
	testutil.Eventually(t, wait, "b sees a down", func() bool { return !b.up(a.name) })
	if len(a.tr.Peers()) != 0 {
		t.Fatalf("a still lists %+v", a.tr.Peers())
	}
}

// TestTLSCall: issue 13: with Config.TLS both sides speak TLS (mutual
// certificates here) and the HMAC handshake runs inside; a plain-TCP node
// cannot link to a TLS node.
func TestTLSCall(t *testing.T) {
	cfg := selfSignedTLS(t)
	a := start(t, "warren@a", opts{tls: cfg})
	b := start(t, "warren@b", opts{tls: cfg})
	a.tr.Handle(1, echo(a.name))
	b.tr.Handle(1, echo(b.name))
	linkUp(t, a, b)
	if got, err := a.tr.Call(context.Background(), b.name, 1, []byte("tls")); err != nil || string(got) != "warren@b got tls" {
		t.Fatalf("a->b: %q %v", got, err)
	}
	if got, err := b.tr.Call(context.Background(), a.name, 1, []byte("tls")); err != nil || string(got) != "warren@a got tls" {
		t.Fatalf("b->a: %q %v", got, err)
	}
	plain := start(t, "warren@0", opts{})
	plain.tr.SetPeer(b.name, b.addr)
	b.tr.SetPeer(plain.name, plain.addr)
	testutil.Eventually(t, wait, "b refuses plain TCP", func() bool { return b.logs.has("TLS handshake failed") })
	if plain.up(b.name) {
		t.Fatal("plain TCP peer linked to a TLS node")
	}
}

func selfSignedTLS(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(13),
		Subject:               pkix.Name{CommonName: "warren cluster test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}
}

// FuzzReadFrame: issue 13: the frame reader never panics on hostile input
// and never returns a body above the limit.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{0, 0, 0, 2, kindMessage, 3, 0, 0, 0, 0, 0, 0, 0, 0, 'h', 'i'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, kindRequest, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{0, 0, 0, 9, kindResponse, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1})
	f.Add([]byte("WRNT garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		for {
			fr, err := readFrame(r, 64)
			if err != nil {
				return
			}
			if len(fr.body) > 64 || fr.kind < kindRequest || fr.kind > kindPing {
				t.Fatalf("bad frame accepted: %+v", fr)
			}
		}
	})
}

// FuzzHello: issue 13: the handshake reader never panics on hostile input.
func FuzzHello(f *testing.F) {
	var b bytes.Buffer
	h, _ := newHello("warren@a", "id")
	writeHello(&b, h)
	f.Add(b.Bytes())
	f.Add([]byte("WRNT\x02"))
	f.Fuzz(func(t *testing.T, data []byte) {
		readHello(bytes.NewReader(data))
		acceptHandshake(&rw{bytes.NewReader(data), io.Discard}, secret, hello{name: "warren@b"}, func(hello) error { return nil })
		dialHandshake(&rw{bytes.NewReader(data), io.Discard}, secret, hello{name: "warren@b"}, "")
		readVerdict(bytes.NewReader(data))
	})
}

type rw struct {
	io.Reader
	io.Writer
}

// TestNothingRevealedBeforeAuth: issue 22 item 9: before authentication a
// stranger on the cluster port learned the node's name and the cluster
// id, and every refused try wrote a WARN line. Now the acceptor sends only
// its nonce before the dialer's proof, a wrong proof is answered with
// "authentication failed" and nothing else, and 200 refused tries write
// at most a couple of lines.
func TestNothingRevealedBeforeAuth(t *testing.T) {
	a := start(t, "warren@secret-name", opts{id: "cluster-id-5e3f"})
	try := func() []byte {
		c, err := net.Dial("tcp", a.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		h, _ := newHello("warren@stranger", "")
		if err := writeHello(c, h); err != nil {
			t.Fatal(err)
		}
		var pre [4 + 1 + nonceLen]byte
		if _, err := io.ReadFull(c, pre[:]); err != nil {
			t.Fatalf("no nonce: %v", err)
		}
		c.Write(make([]byte, 32)) // a proof made without the secret
		c.SetReadDeadline(time.Now().Add(wait))
		rest, _ := io.ReadAll(c)
		return append(pre[:], rest...)
	}
	for i := range 200 {
		got := try()
		for _, secret := range []string{"warren@secret-name", "cluster-id-5e3f", "secret-name", "5e3f"} {
			if bytes.Contains(got, []byte(secret)) {
				t.Fatalf("try %d: a stranger was told %q: %q", i, secret, got)
			}
		}
		want := append([]byte{statusRefused, 0, byte(len(errAuth))}, errAuth...)
		if !bytes.HasSuffix(got, want) {
			t.Fatalf("try %d: refusal %q, want it to end with %q", i, got, want)
		}
	}
	testutil.Eventually(t, wait, "the refusals logged", func() bool { return a.logs.has("cluster link refused") })
	if n := a.logs.count("cluster link refused"); n > 2 {
		t.Fatalf("200 refused strangers wrote %d log lines", n)
	}
	// A real peer still links, and learns the name only now.
	b := start(t, "warren@b", opts{}) // dials a (the smaller name dials)
	b.tr.SetPeer(a.name, a.addr)
	a.tr.SetPeer(b.name, b.addr)
	testutil.Eventually(t, wait, "b linked to a", func() bool { return b.up(a.name) && a.up(b.name) })
}

// TestIdleHandshakesDoNotBlockPeers: issue 22 item 4: about 400 idle TCP
// connections to the cluster port, without the secret, kept a restarted
// node out for as long as they stayed (64 handshake slots, held 10 s
// each). Now 1,000 connections that send nothing or half a hello leave a
// real peer linking at once.
func TestIdleHandshakesDoNotBlockPeers(t *testing.T) {
	a := start(t, "warren@z", opts{}) // b dials it: the smaller name dials
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range 1000 {
		c, err := net.Dial("tcp", a.addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		if i%2 == 1 {
			c.Write([]byte("WRNT\x02")) // half a hello, then nothing
		}
		conns = append(conns, c)
	}
	b := start(t, "warren@b", opts{})
	begin := time.Now()
	b.tr.SetPeer(a.name, a.addr)
	a.tr.SetPeer(b.name, b.addr)
	testutil.Eventually(t, wait, "b linked to a", func() bool { return b.up(a.name) && a.up(b.name) })
	if d := time.Since(begin); d > time.Second {
		t.Fatalf("a peer took %s to link past 1,000 idle connections", d)
	}
	if a.tr.evicted.Load() == 0 {
		t.Fatal("no idle handshake was closed to make room")
	}
}

// TestProbe: issue 22: a membership change first asks the node it names
// whether it is there: Probe authenticates both ways, checks the name,
// returns the node's answer and makes no link.
func TestProbe(t *testing.T) {
	a := start(t, "warren@a", opts{probe: func(string, uint64) []byte { return []byte(`{"waiting_to_join":true}`) }})
	b := start(t, "warren@b", opts{})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	info, err := b.tr.Probe(ctx, a.name, a.addr)
	if err != nil || string(info) != `{"waiting_to_join":true}` {
		t.Fatalf("probe: %q %v", info, err)
	}
	if _, err := b.tr.Probe(ctx, "warren@typo", a.addr); err == nil || !strings.Contains(err.Error(), "but the node there is warren@a") {
		t.Fatalf("probe of the wrong name: %v", err)
	}
	bad := start(t, "warren@c", opts{secret: []byte("other")})
	if _, err := bad.tr.Probe(ctx, a.name, a.addr); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("probe without the secret: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0") // something else: says nothing
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			c.Close()
		}
	}()
	if _, err := b.tr.Probe(ctx, a.name, ln.Addr().String()); err == nil || !strings.Contains(err.Error(), "not a warren cluster peer") {
		t.Fatalf("probe of an HTTP port: %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	if a.up(b.name) || b.up(a.name) || a.up(bad.name) {
		t.Fatalf("a probe made a link: %+v", a.tr.Peers())
	}
}

// TestCheckPeerEitherSide: issue 22 item 1: a node can refuse a peer by
// its incarnation (its data directory was replaced) whichever side dials;
// the refused node is told why, and learns nothing (no cluster id).
func TestCheckPeerEitherSide(t *testing.T) {
	refuse := func(name string, inc uint64) error {
		if inc == 666 {
			return fmt.Errorf("%s came back with another data directory", name)
		}
		return nil
	}
	for _, tc := range []struct{ guard, blank string }{{"warren@a", "warren@b"}, {"warren@b", "warren@a"}} {
		g := start(t, tc.guard, opts{check: refuse, inc: 1, id: "the-cluster"})
		bl := start(t, tc.blank, opts{inc: 666})
		g.tr.SetPeer(bl.name, bl.addr)
		bl.tr.SetPeer(g.name, g.addr)
		testutil.Eventually(t, wait, "the guard refuses", func() bool {
			return g.logs.has("came back with another data directory")
		})
		testutil.Eventually(t, wait, "the blank node is told", func() bool {
			return bl.logs.has("came back with another data directory")
		})
		if g.up(bl.name) || bl.up(g.name) {
			t.Fatalf("%s: a refused peer linked", tc.guard)
		}
		select {
		case id := <-bl.ids:
			t.Fatalf("%s: the refused node learned the cluster id %q", tc.guard, id)
		default:
		}
		g.tr.Close()
		bl.tr.Close()
	}
}

// TestPriorityLane: issue 22, Raft ahead of data. A message of a priority
// service (the Raft groups') sent behind 2,000 bulk messages of 16 KiB is
// written before the ones still queued: it arrives among the first few
// hundred, not last. Each service's messages stay in order.
func TestPriorityLane(t *testing.T) {
	const raftSvc, bulkSvc = 7, 8
	a := start(t, "warren@a", opts{priority: []byte{raftSvc}})
	b := start(t, "warren@b", opts{priority: []byte{raftSvc}})
	var mu sync.Mutex
	var order []byte
	var bulkSeq []uint32
	b.tr.OnMessage(bulkSvc, func(from string, msg []byte) {
		mu.Lock()
		order = append(order, bulkSvc)
		bulkSeq = append(bulkSeq, binary.BigEndian.Uint32(msg))
		mu.Unlock()
		time.Sleep(50 * time.Microsecond) // a slow reader: the sender's queue backs up
	})
	b.tr.OnMessage(raftSvc, func(from string, msg []byte) {
		mu.Lock()
		order = append(order, raftSvc)
		mu.Unlock()
	})
	a.tr.SetPeer(b.name, b.addr)
	b.tr.SetPeer(a.name, a.addr)
	testutil.Eventually(t, wait, "linked", func() bool { return a.up(b.name) && b.up(a.name) })
	const n = 2000
	for i := range n {
		msg := make([]byte, 16<<10)
		binary.BigEndian.PutUint32(msg, uint32(i))
		if err := a.tr.Send(b.name, bulkSvc, msg); err != nil {
			t.Fatalf("bulk %d: %v", i, err)
		}
	}
	if err := a.tr.Send(b.name, raftSvc, []byte("vote")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "everything delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == n+1
	})
	mu.Lock()
	defer mu.Unlock()
	at := bytes.IndexByte(order, raftSvc)
	t.Logf("the priority message arrived after %d of %d bulk messages", at, n)
	if at > n/2 {
		t.Fatalf("the priority message waited behind %d of %d bulk messages", at, n)
	}
	for i, v := range bulkSeq {
		if v != uint32(i) {
			t.Fatalf("bulk message %d arrived as %d: out of order", i, v)
		}
	}
}
