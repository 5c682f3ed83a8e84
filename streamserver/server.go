// Package streamserver serves RabbitMQ's stream protocol (issue 25) on
// port 5552: stream clients (RabbitMQ's Go, Java, .NET, Python and JS
// stream clients) publish to and read from Warren's streams with it.
//
// A connection is read on one goroutine, which answers each command in
// order; what it sends goes through one output buffer, written to the
// socket by a goroutine of its own. Each subscription reads its stream's
// files on a goroutine of its own, one chunk per credit, and waits while
// the connection's output is backlogged. Publish confirms come from the
// stream's writer once the chunk is on disk.
//
// Every per-connection resource is bounded: frames (FrameMax, and 8,192
// bytes before the connection is opened), publishers and subscriptions
// (256 each, their ids are a byte), credit (a subscription's credit is a
// uint16, summed with saturation), unconfirmed publishes (reading pauses
// beyond 50,000) and the output buffer.
package streamserver

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/mgmt/api"
)

// Config configures a Server.
type Config struct {
	// Addr is the plain listener's address (":5552"); TLSAddr and TLS the
	// TLS one's (RabbitMQ's 5551), when set.
	Addr    string
	TLSAddr string
	TLS     *tls.Config
	// AdvertisedHost and AdvertisedPort are what Open and Metadata tell
	// clients to connect to; by default the address the client reached.
	AdvertisedHost string
	AdvertisedPort int
	// FrameMax is the largest frame accepted and offered (1,048,576 when
	// 0); Heartbeat the interval offered (60 s when 0).
	FrameMax  uint32
	Heartbeat time.Duration
	// LoopbackUsers may connect from localhost only (guest by default,
	// as in the AMQP listener).
	LoopbackUsers []string
	Logger        *slog.Logger
	// Version is the RabbitMQ version reported to clients, whose
	// features they then use ("4.1.0": filtering, single active consumer,
	// super streams over the protocol).
	Version string
}

const (
	defaultFrameMax  = 1048576
	preOpenFrameMax  = 8192
	maxUnconfirmed   = 50_000
	outHighWater     = 8 << 20
	defaultHeartbeat = 60 * time.Second
)

// Server is the stream protocol listener.
type Server struct {
	b   *broker.Broker
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	lns    []net.Listener
	conns  map[*conn]struct{}
	closed bool
	wg     sync.WaitGroup
	nextID uint64

	sac *sacGroups

	// what the listener did since it started (the Prometheus counters)
	published, confirmed, errored, delivered atomic.Uint64
}

// Counters returns the messages the listener's publishers published, had
// confirmed or refused, and its subscriptions delivered, since it
// started.
func (s *Server) Counters() api.StreamCounters {
	return api.StreamCounters{Published: s.published.Load(), Confirmed: s.confirmed.Load(),
		Errored: s.errored.Load(), Delivered: s.delivered.Load()}
}

// New returns a server of b's streams.
func New(b *broker.Broker, cfg Config) *Server {
	if cfg.FrameMax == 0 {
		cfg.FrameMax = defaultFrameMax
	}
	cfg.FrameMax = max(cfg.FrameMax, preOpenFrameMax)
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = defaultHeartbeat
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Version == "" {
		cfg.Version = "4.1.0"
	}
	if cfg.LoopbackUsers == nil {
		cfg.LoopbackUsers = []string{"guest"}
	}
	s := &Server{b: b, cfg: cfg, log: cfg.Logger.With("component", "stream"), conns: map[*conn]struct{}{}}
	s.sac = newSACGroups(s)
	return s
}

// Listen opens the configured listeners and serves them.
func (s *Server) Listen() error {
	if s.cfg.Addr != "" {
		ln, err := net.Listen("tcp", s.cfg.Addr)
		if err != nil {
			return err
		}
		s.Serve(ln)
	}
	if s.cfg.TLSAddr != "" && s.cfg.TLS != nil {
		ln, err := net.Listen("tcp", s.cfg.TLSAddr)
		if err != nil {
			s.Close()
			return err
		}
		s.Serve(tls.NewListener(ln, s.cfg.TLS))
	}
	return nil
}

// Serve accepts connections on ln until Close.
func (s *Server) Serve(ln net.Listener) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return
	}
	s.lns = append(s.lns, ln)
	s.wg.Add(1)
	s.mu.Unlock()
	s.log.Info("stream listener started", "addr", ln.Addr().String())
	go func() {
		defer s.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				return
			}
			c := s.newConn(nc)
			if c == nil {
				nc.Close()
				continue
			}
			go c.serve()
		}
	}()
}

// Addrs are the listeners' addresses.
func (s *Server) Addrs() []net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []net.Addr
	for _, ln := range s.lns {
		out = append(out, ln.Addr())
	}
	return out
}

// Close stops the listeners and closes every connection.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	lns := s.lns
	cs := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	for _, c := range cs {
		c.nc.Close()
	}
	s.wg.Wait()
}

func (s *Server) newConn(nc net.Conn) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.nextID++
	c := &conn{s: s, nc: nc, id: s.nextID, pubs: map[uint8]*publisher{}, subs: map[uint8]*subscription{},
		wake: make(chan struct{}, 1), done: make(chan struct{}), started: time.Now()}
	c.room = sync.NewCond(&c.mu)
	c.confirmed = sync.NewCond(&c.mu)
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return c
}

func (s *Server) dropConn(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

// advertised is the host and port a client on nc is told to use.
func (s *Server) advertised(nc net.Conn) (string, string) {
	host, port := s.cfg.AdvertisedHost, ""
	if s.cfg.AdvertisedPort != 0 {
		port = strconv.Itoa(s.cfg.AdvertisedPort)
	}
	if h, p, err := net.SplitHostPort(nc.LocalAddr().String()); err == nil {
		if host == "" {
			host = h
		}
		if port == "" {
			port = p
		}
	}
	return host, port
}
