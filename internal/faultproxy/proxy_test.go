package faultproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer accepts connections and echoes what they send; it counts the
// bytes it received.
type echoServer struct {
	ln       net.Listener
	mu       sync.Mutex
	received int
	accepted int
	wg       sync.WaitGroup
	conns    []net.Conn
}

func newEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.accepted++
			e.conns = append(e.conns, c)
			e.mu.Unlock()
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						e.mu.Lock()
						e.received += n
						e.mu.Unlock()
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		e.mu.Lock()
		for _, c := range e.conns {
			c.Close()
		}
		e.mu.Unlock()
		e.wg.Wait()
	})
	return e
}

func (e *echoServer) stats() (received, accepted int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.received, e.accepted
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads the echo within timeout.
func roundTrip(c net.Conn, msg []byte, timeout time.Duration) error {
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return errors.New("echo differs")
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestPass: issue 13: the proxy forwards both ways, large transfers intact.
func TestPass(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	errc := make(chan error, 1)
	go func() { _, err := c.Write(big); errc <- err }()
	got := make([]byte, len(big))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, big) {
		t.Fatal("1 MiB through the proxy came back different")
	}
}

// TestDrop: issue 13: Drop is a silent partition: the open connection
// stays open, nothing reaches the far side, writes still succeed; a new
// connection is held without reaching the target; back to Pass, the
// connections that lost bytes are closed and new ones are forwarded.
func TestDrop(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	if err := roundTrip(c, []byte("before"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.SetMode(Drop)
	recv0, acc0 := e.stats()
	err := roundTrip(c, []byte("during"), 300*time.Millisecond)
	if !isTimeout(err) {
		t.Fatalf("round trip during Drop: got %v, want a timeout (nothing back, connection open)", err)
	}
	held := dial(t, p.Addr())
	if _, err := held.Write([]byte("held")); err != nil {
		t.Fatalf("write on a held connection: %v", err)
	}
	if err := roundTrip(held, []byte("x"), 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("round trip on a new connection during Drop: got %v, want a timeout", err)
	}
	if recv, acc := e.stats(); recv != recv0 || acc != acc0 {
		t.Fatalf("during Drop the target received %d bytes and %d connections, want none", recv-recv0, acc-acc0)
	}

	p.SetMode(Pass)
	for _, cc := range []net.Conn{c, held} {
		cc.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 16)
		for {
			_, err := cc.Read(buf)
			if err == nil {
				continue // an echo still in flight
			}
			if isTimeout(err) {
				t.Fatal("a connection that lived through Drop was not closed on Pass")
			}
			break
		}
	}
	c2 := dial(t, p.Addr())
	if err := roundTrip(c2, []byte("after"), 5*time.Second); err != nil {
		t.Fatalf("new connection after healing: %v", err)
	}
}

// TestReset: issue 13: Reset closes every connection with an RST and
// refuses new ones until the mode is Pass again.
func TestReset(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	if err := roundTrip(c, []byte("hello"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.SetMode(Reset)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after Reset: got %v, want connection reset", err)
	}
	_, acc0 := e.stats()
	c2, err := net.DialTimeout("tcp", p.Addr(), 2*time.Second)
	if err == nil {
		c2.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c2.Read(make([]byte, 1))
		c2.Close()
	}
	if err == nil || isTimeout(err) {
		t.Fatalf("new connection during Reset: got %v, want it refused or reset", err)
	}
	if _, acc := e.stats(); acc != acc0 {
		t.Fatal("a connection reached the target during Reset")
	}
	p.SetMode(Pass)
	c3 := dial(t, p.Addr())
	if err := roundTrip(c3, []byte("again"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestDelay: issue 13: each chunk arrives no sooner than the delay.
func TestDelay(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	const d = 150 * time.Millisecond
	p.SetDelay(d)
	start := time.Now()
	if err := roundTrip(c, []byte("slow"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// Two hops through the proxy (there and back), each delayed.
	if el := time.Since(start); el < 2*d {
		t.Fatalf("round trip took %v, want at least %v with a %v delay each way", el, 2*d, d)
	}
	p.SetDelay(0)
	if err := roundTrip(c, []byte("fast"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestTargetDown: a connection through the proxy to a target that does
// not listen is closed, as dialling the target would fail.
func TestTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The proxy listens before the target's port is freed, so it cannot
	// get that port itself.
	p := newProxy(t, ln.Addr().String())
	ln.Close()
	// On loopback the reset can come before connect returns.
	c, err := net.DialTimeout("tcp", p.Addr(), 2*time.Second)
	if err == nil {
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
	}
	if err == nil || isTimeout(err) {
		t.Fatalf("got %v, want the connection closed", err)
	}
}

// TestCloseClosesConnections: Close ends every connection and goroutine
// (goleak in TestMain checks the latter).
func TestCloseClosesConnections(t *testing.T) {
	e := newEcho(t)
	p, err := New("127.0.0.1:0", e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p.Addr())
	if err := roundTrip(c, []byte("x"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.SetMode(Drop)
	held := dial(t, p.Addr())
	held.Write([]byte("y"))
	p.Close()
	for _, cc := range []net.Conn{c, held} {
		cc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := cc.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("after Close: got %v, want the connection closed", err)
		}
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("proxy still accepts after Close")
	}
}
