// Package loopnet joins in-process broker nodes for tests, without the
// cluster packages: the inter-node calls and one-way messages (what
// broker.Peers and broker.PacedPeers carry), delivered in order per link
// by one goroutine each, over links a test can cut; and a loopback
// metadata group (broker.Replicator) that applies every definition
// command on every node in one order.
//
// It knows nodes only through the small interfaces below, so that the
// broker's own tests can use it as well as the integration tests.
package loopnet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Node is a node's side of the data plane (*broker.Broker).
type Node interface {
	HandlePeerCall(from string, req []byte) ([]byte, error)
	HandlePeerMessage(from string, msg []byte)
}

// ErrUnreachable is a call or send to a node that is unknown, cut off or
// gone (the network is closing).
var ErrUnreachable = errors.New("loopnet: node unreachable")

// Net is the network: its nodes, its links and which are cut.
type Net struct {
	// ErrFull is what Send returns on a full link (the broker's
	// ErrLinkFull, so that it paces).
	ErrFull error

	mu      sync.Mutex
	linkCap int
	nodes   map[string]Node
	cut     map[[2]string]bool
	links   map[[2]string]chan []byte
	closed  bool
	wg      sync.WaitGroup
}

// New is an empty network whose full links fail with errFull.
func New(errFull error) *Net {
	return &Net{ErrFull: errFull, nodes: map[string]Node{}, cut: map[[2]string]bool{}, links: map[[2]string]chan []byte{}}
}

// Add joins node under name.
func (n *Net) Add(name string, node Node) {
	n.mu.Lock()
	n.nodes[name] = node
	n.mu.Unlock()
}

// SetLinkCap bounds the one-way messages a link queues; beyond it Send
// fails with ErrFull, as the transport's does (0: 65536). Links take the
// value in force when they are first used.
func (n *Net) SetLinkCap(c int) {
	n.mu.Lock()
	n.linkCap = c
	n.mu.Unlock()
}

// Peers is name's view of the network (broker.Peers, broker.PacedPeers).
func (n *Net) Peers(name string) *Peers { return &Peers{self: name, n: n} }

// SetCut makes the link between a and b unreachable both ways (or
// reachable again). Messages queued on a cut link are dropped.
func (n *Net) SetCut(a, b string, cut bool) {
	n.mu.Lock()
	n.cut[[2]string{a, b}], n.cut[[2]string{b, a}] = cut, cut
	n.mu.Unlock()
}

// Reachable reports whether from can reach to.
func (n *Net) Reachable(from, to string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.reachableLocked(from, to)
}

func (n *Net) reachableLocked(from, to string) bool {
	return n.nodes[to] != nil && !n.cut[[2]string{from, to}] && !n.closed
}

// Close ends every link and waits for their goroutines; sends fail after.
func (n *Net) Close() {
	n.mu.Lock()
	n.closed = true
	for k, ch := range n.links {
		close(ch)
		delete(n.links, k)
	}
	n.mu.Unlock()
	n.wg.Wait()
}

// Peers is one node's view of the network.
type Peers struct {
	self string
	n    *Net
}

// Up reports whether node is reachable.
func (p *Peers) Up(node string) bool { return p.n.Reachable(p.self, node) }

// Call runs req on node and returns its answer, or ctx's error if it
// ends first.
func (p *Peers) Call(ctx context.Context, node string, req []byte) ([]byte, error) {
	p.n.mu.Lock()
	ok, to := p.n.reachableLocked(p.self, node), p.n.nodes[node]
	p.n.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%s: %w", node, ErrUnreachable)
	}
	type answer struct {
		b   []byte
		err error
	}
	done := make(chan answer, 1)
	req = append([]byte(nil), req...) // the caller may reuse its buffer
	go func() {
		b, err := to.HandlePeerCall(p.self, req)
		done <- answer{b, err}
	}()
	select {
	case a := <-done:
		return a.b, a.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Send queues msg for node, after what was sent to it before; it never
// waits (a full link is ErrFull).
func (p *Peers) Send(node string, msg []byte) error {
	n := p.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.reachableLocked(p.self, node) {
		return fmt.Errorf("%s: %w", node, ErrUnreachable)
	}
	k := [2]string{p.self, node}
	ch := n.links[k]
	if ch == nil {
		c := n.linkCap
		if c == 0 {
			c = 1 << 16
		}
		ch = make(chan []byte, c)
		n.links[k] = ch
		to, from := n.nodes[node], p.self
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			for m := range ch {
				if n.Reachable(from, node) {
					to.HandlePeerMessage(from, m)
				}
			}
		}()
	}
	select {
	case ch <- msg:
		return nil
	default:
		return fmt.Errorf("%s: %w", node, n.ErrFull)
	}
}

// SendWait is Send that waits while the link is full, polling it.
func (p *Peers) SendWait(ctx context.Context, node string, msg []byte) error {
	for {
		err := p.Send(node, msg)
		if err == nil || !errors.Is(err, p.n.ErrFull) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Microsecond):
		}
	}
}

// Applier applies a committed definition command (*broker.Broker).
type Applier interface {
	ApplyCommand(index uint64, cmd []byte) error
}

// Repl is a loopback metadata group: it sequences proposals and applies
// each command on every member in the same order, answering the
// proposer with its own apply's result.
type Repl struct {
	mu      sync.Mutex
	index   uint64
	members []Applier
	fail    error
	failed  int
	log     [][]byte
}

// Join adds a member and returns its replicator (broker.Replicator).
func (r *Repl) Join(a Applier) Member {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.members = append(r.members, a)
	return Member{r: r, self: len(r.members) - 1}
}

// SetFail makes every proposal fail with err (nil: succeed again),
// nothing applied.
func (r *Repl) SetFail(err error) { r.mu.Lock(); r.fail = err; r.mu.Unlock() }

// Failures counts the proposals failed by SetFail.
func (r *Repl) Failures() int { r.mu.Lock(); defer r.mu.Unlock(); return r.failed }

// Index is the index of the last command applied.
func (r *Repl) Index() uint64 { r.mu.Lock(); defer r.mu.Unlock(); return r.index }

// Log is the commands applied, in order.
func (r *Repl) Log() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.log...)
}

// Member is one member's replicator.
type Member struct {
	r    *Repl
	self int
}

// Propose applies cmd on every member, in the group's order.
func (m Member) Propose(_ context.Context, cmd []byte) error {
	r := m.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		r.failed++
		return r.fail
	}
	r.index++
	r.log = append(r.log, cmd)
	var res error
	for i, a := range r.members {
		if err := a.ApplyCommand(r.index, cmd); i == m.self {
			res = err
		}
	}
	return res
}
