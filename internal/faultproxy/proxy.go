// Package faultproxy is a TCP proxy for fault tests (issue 13): the
// process-cluster harness puts one on every directed inter-node link, so a
// test can cut, delay or reset the traffic between nodes without root.
//
// Modes:
//   - Pass forwards bytes both ways (after the delay, if one is set).
//   - Drop is a silent partition: connections stay open but every byte is
//     discarded in both directions, so the far side sees nothing and the
//     sender's writes still succeed; new connections are accepted and held
//     (the target is not dialled) and what they send is discarded. A
//     connection that lived through a Drop has lost bytes, so its stream
//     cannot resume: when the mode goes back to Pass such connections are
//     closed (as a TCP connection that timed out during a partition), and
//     new connections are forwarded again.
//   - Reset closes every current connection with a TCP RST (SO_LINGER 0)
//     and refuses new ones (accepted and reset at once) until the mode
//     changes.
package faultproxy

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Mode is what the proxy does with traffic.
type Mode int

const (
	Pass Mode = iota
	Drop
	Reset
)

func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Drop:
		return "drop"
	case Reset:
		return "reset"
	}
	return "unknown"
}

// Proxy forwards connections accepted on its address to a target.
type Proxy struct {
	ln net.Listener

	mu     sync.Mutex
	target string
	mode   Mode
	delay  time.Duration
	conns  map[*link]struct{}
	closed bool
	wg     sync.WaitGroup
}

// link is one accepted connection and, unless it is held, its upstream.
type link struct {
	down, up net.Conn // up is nil while held (accepted during Drop)
	tainted  bool     // lived through a Drop: bytes were lost
	once     sync.Once
}

func (l *link) close(rst bool) {
	l.once.Do(func() {
		for _, c := range []net.Conn{l.down, l.up} {
			if c == nil {
				continue
			}
			if tc, ok := c.(*net.TCPConn); ok && rst {
				tc.SetLinger(0)
			}
			c.Close()
		}
	})
}

// New listens on listenAddr ("127.0.0.1:0" for a free port) and forwards
// to target, in Pass mode.
func New(listenAddr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Mode returns the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// SetMode switches the mode (see the package comment).
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || m == p.mode {
		p.mode = m
		return
	}
	p.mode = m
	switch m {
	case Drop:
		for l := range p.conns {
			l.tainted = true
		}
	case Reset:
		for l := range p.conns {
			l.close(true)
			delete(p.conns, l)
		}
	case Pass:
		for l := range p.conns {
			if l.tainted {
				l.close(true)
				delete(p.conns, l)
			}
		}
	}
}

// SetDelay delays every chunk of bytes forwarded from now on by d (0: none).
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	for l := range p.conns {
		l.close(false)
		delete(p.conns, l)
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		mode, closed := p.mode, p.closed
		if closed || mode == Reset {
			p.mu.Unlock()
			(&link{down: c}).close(true)
			continue
		}
		l := &link{down: c}
		p.conns[l] = struct{}{}
		if mode == Drop {
			l.tainted = true
			p.wg.Add(1)
			p.mu.Unlock()
			go p.hold(l)
			continue
		}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.dial(l)
	}
}

// hold discards what a connection accepted during Drop sends until it is
// closed (by the client, or by SetMode or Close).
func (p *Proxy) hold(l *link) {
	defer p.wg.Done()
	defer p.forget(l)
	buf := make([]byte, 32<<10)
	for {
		if _, err := l.down.Read(buf); err != nil {
			return
		}
	}
}

func (p *Proxy) forget(l *link) {
	l.close(false)
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

// Retarget makes new connections go to target (a process that restarted
// on another port); current ones are left alone.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

func (p *Proxy) dial(l *link) {
	defer p.wg.Done()
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	up, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		// The target is down: the client sees its connection reset, as
		// it would dialling the target directly.
		l.close(true)
		p.forget(l)
		return
	}
	p.mu.Lock()
	if _, ok := p.conns[l]; !ok || p.closed {
		p.mu.Unlock()
		up.Close()
		return
	}
	l.up = up
	p.wg.Add(2)
	p.mu.Unlock()
	go p.pipe(l, l.up, l.down)
	go p.pipe(l, l.down, l.up)
}

type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst through the mode and the delay. A reader
// goroutine (this one) reads and decides; a writer goroutine waits out
// each chunk's delay and writes, so a delay does not slow throughput.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	defer p.wg.Done()
	defer p.forget(l)
	q := make(chan chunk, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(c.data); err != nil {
				l.close(false)
				for range q {
				}
				return
			}
		}
	}()
	defer func() { close(q); <-done }()
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			mode, delay := p.mode, p.delay
			p.mu.Unlock()
			if mode == Pass {
				q <- chunk{data: buf[:n], due: time.Now().Add(delay)}
			}
		}
		if err != nil {
			return
		}
	}
}
