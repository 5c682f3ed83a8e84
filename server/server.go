// Package server is Warren's AMQP 0-9-1 front end: the listener,
// connections (one reader and one writer goroutine each), channels, SASL,
// heartbeats, flow control, publisher confirms and transactions. It is the
// only package that owns sockets; the model lives in package broker.
//
// The API follows net/http: New, Start (returns once listening), Addr,
// Shutdown, and an idempotent Close.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/internal/clock"
)

// Config configures a Server. Zero values take RabbitMQ's defaults.
type Config struct {
	// AMQPAddr is the TCP address to listen on; default ":5672".
	AMQPAddr string
	// AMQPSAddr is the TLS listener's address, used when TLS is set;
	// default ":5671".
	AMQPSAddr string
	TLS       *tls.Config
	// TLSCertFile names the file TLS's certificate came from, for the
	// management API's certificate-expiration check; informational.
	TLSCertFile string
	// Heartbeat is the interval the server proposes; default 60s. Negative disables.
	Heartbeat time.Duration
	// FrameMax is the largest frame the server accepts; default 131072.
	FrameMax uint32
	// ChannelMax is the highest channel number; default 2047.
	ChannelMax uint16
	// MaxMessageSize bounds a message body; default 128 MiB, as RabbitMQ.
	MaxMessageSize int
	// HandshakeTimeout bounds the protocol handshake; default 10s.
	HandshakeTimeout time.Duration
	// LoopbackUsers may only connect from loopback addresses; default ["guest"].
	LoopbackUsers []string
	// DataDir is where durable state lives: the broker New opens keeps
	// its stores there (broker.Open), and the disk alarm watches its file
	// system.
	DataDir string

	// MemoryHighWatermark raises the memory alarm when the broker's Go heap
	// and stacks exceed it, in bytes; default 40% of the machine's memory,
	// as RabbitMQ's vm_memory_high_watermark 0.4. DiskFreeLimit raises the
	// disk alarm when the file system of DataDir has less free space;
	// default 50 MB, as RabbitMQ's disk_free_limit. ResourceCheckInterval is
	// how often both are checked; default 1s. A negative watermark or limit
	// disables that alarm.
	MemoryHighWatermark int64
	DiskFreeLimit       int64
	// QueueWindow is how many ready messages a queue keeps in memory
	// before the rest live on disk only (default broker.DefaultQueueWindow).
	QueueWindow           int
	ResourceCheckInterval time.Duration

	// MessageStore configures the message store of the broker New opens
	// (broker.Config.MessageStore).
	MessageStore broker.MsgStoreOptions

	Logger *slog.Logger
	Clock  clock.Clock
	// Broker is the model to serve. If nil, New opens one with
	// broker.Open (DataDir, QueueWindow, MessageStore, Logger, Clock) and
	// the server owns it: Shutdown closes it once the connections are
	// closed. A Broker given here belongs to the caller, who closes it
	// after Shutdown (Close if Shutdown returned nil, else CloseUnclean).
	Broker *broker.Broker
	// ConnIDBase is added to every connection id, so that ids are unique
	// in a cluster (broker.ConnIDBase of the node's name); 0 for a
	// single node.
	ConnIDBase uint64
}

func (c *Config) setDefaults() {
	if c.AMQPAddr == "" {
		c.AMQPAddr = ":5672"
	}
	if c.AMQPSAddr == "" {
		c.AMQPSAddr = ":5671"
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = 60 * time.Second
	}
	if c.FrameMax == 0 {
		c.FrameMax = 131072
	}
	if c.ChannelMax == 0 {
		c.ChannelMax = 2047
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = 128 << 20
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.MemoryHighWatermark == 0 {
		c.MemoryHighWatermark = int64(float64(totalMemory()) * 0.4)
	}
	if c.DiskFreeLimit == 0 {
		c.DiskFreeLimit = 50_000_000
	}
	if c.ResourceCheckInterval == 0 {
		c.ResourceCheckInterval = time.Second
	}
	if c.LoopbackUsers == nil {
		c.LoopbackUsers = []string{"guest"}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
}

// Server serves AMQP 0-9-1 connections for a broker.
type Server struct {
	cfg    Config
	log    *slog.Logger
	broker *broker.Broker
	// ownsBroker: New opened the broker, and Shutdown closes it.
	ownsBroker bool

	mu        sync.Mutex
	ln        net.Listener
	tlsLn     net.Listener
	lnDown    bool // the listener's accept loop ended while the server is open
	tlsLnDown bool
	suspended bool // in maintenance: listeners closed until Revive (drain.go)
	// the listeners' addresses once bound, for Revive
	boundAddr, boundTLSAddr string
	conns                   map[*conn]struct{}
	started                 bool
	closed                  bool
	wg                      sync.WaitGroup
	nextConn                atomic.Uint64
	alarms                  map[string]bool
	alarmCh                 chan struct{} // closed and replaced when the alarm state changes
	stopped                 chan struct{} // closed by stop
	alarmed                 atomic.Bool   // some alarm is raised (read per publish)
	closeOnce               sync.Once

	statsMu     sync.Mutex
	closedStats MessageStats // counters of closed channels (info.go)
	closedX     map[exchangeKey]ExchangeCounts
}

// New returns a server for cfg. It does not listen until Start.
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if cfg.FrameMax < 4096 {
		return nil, fmt.Errorf("server: frame-max %d is below the minimum 4096", cfg.FrameMax)
	}
	b, owns := cfg.Broker, false
	if b == nil {
		var err error
		b, err = broker.Open(broker.Config{Logger: cfg.Logger, Clock: cfg.Clock, QueueWindow: cfg.QueueWindow,
			DataDir: cfg.DataDir, MessageStore: cfg.MessageStore})
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		owns = true
	} else if err := b.Recover(); err != nil {
		// Durable definitions and messages are loaded before anything can
		// listen (a no-op for a broker already recovered, as Open's).
		return nil, fmt.Errorf("server: recovering definitions: %w", err)
	}
	return &Server{cfg: cfg, log: cfg.Logger, broker: b, ownsBroker: owns, conns: map[*conn]struct{}{},
		alarms: map[string]bool{}, alarmCh: make(chan struct{})}, nil
}

// closeBroker closes the broker if the server opened it (the broker
// closes its stores once). clean says that every connection closed (their
// unacked messages were returned).
func (s *Server) closeBroker(clean bool) {
	if !s.ownsBroker {
		return
	}
	if clean {
		s.broker.Close()
	} else {
		s.broker.CloseUnclean()
	}
}

// SyncStats returns the message store's group-commit counters (zero
// without a data directory): requests, rounds and fsyncs, from which
// messages per fsync follow.
func (s *Server) SyncStats() broker.SyncStats { return s.broker.SyncStats() }

// Broker returns the model the server serves.
func (s *Server) Broker() *broker.Broker { return s.broker }

// Start listens and serves in the background; it returns once the
// listeners accept connections.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("server: already started")
	}
	if s.closed {
		return errors.New("server: closed")
	}
	s.started = true
	s.go_(s.monitorResources)
	if s.maintenanceMarked() {
		s.suspended = true
		s.log.Warn("node is in maintenance mode (drained): AMQP listeners stay closed until 'warren node revive'")
		return nil
	}
	return s.listenLocked()
}

// listenLocked opens the AMQP (and AMQPS) listeners and serves them.
// A revived node listens where it listened before (a port chosen by the
// kernel, ":0", included).
func (s *Server) listenLocked() error {
	addr, tlsAddr := s.cfg.AMQPAddr, s.cfg.AMQPSAddr
	if s.boundAddr != "" {
		addr, tlsAddr = s.boundAddr, s.boundTLSAddr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	var tl net.Listener
	if s.cfg.TLS != nil {
		if tl, err = tls.Listen("tcp", tlsAddr, s.cfg.TLS); err != nil {
			ln.Close()
			return err
		}
		s.boundTLSAddr = tl.Addr().String()
	}
	s.boundAddr = ln.Addr().String()
	s.ln, s.tlsLn, s.lnDown, s.tlsLnDown = ln, tl, false, false
	s.go_(func() { s.serve(ln) })
	if tl != nil {
		s.go_(func() { s.serve(tl) })
	}
	s.log.Info("AMQP listener started", "addr", ln.Addr().String())
	return nil
}

// go_ runs f in a goroutine registered with the server's WaitGroup.
func (s *Server) go_(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// Addr is the AMQP listener's address: nil before Start, and nil when the
// listener stopped accepting for good while the server is open (the
// management API's port-listener and protocol-listener health checks then
// fail).
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil || s.lnDown {
		return nil
	}
	return s.ln.Addr()
}

// TLSAddr is the AMQPS listener's address, or nil (as Addr).
func (s *Server) TLSAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tlsLn == nil || s.tlsLnDown {
		return nil
	}
	return s.tlsLn.Addr()
}

// serve accepts connections on ln until the server closes. Accept errors
// (EMFILE when descriptors run out, ECONNABORTED, ENOBUFS...) are retried
// with a backoff, as net/http does: 5 ms doubling to 1 s, logged at most
// once per acceptLogEvery. Only a listener closed under it (net.ErrClosed
// while the server is open) ends the loop for good; the listener is then
// marked down, and Addr reports nil so the health checks fail.
func (s *Server) serve(ln net.Listener) {
	var delay time.Duration
	var lastLog time.Time
	var failed int // accept errors since the last log line
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isClosed() || s.isSuspended(ln) {
				return
			}
			if errors.Is(err, net.ErrClosed) {
				s.log.Error("AMQP listener closed; no new connections are accepted", "addr", ln.Addr().String(), "err", err)
				s.listenerDown(ln)
				return
			}
			failed++
			if now := time.Now(); now.Sub(lastLog) >= acceptLogEvery {
				s.log.Error("accepting an AMQP connection failed; retrying", "addr", ln.Addr().String(), "err", err, "failures", failed)
				lastLog, failed = now, 0
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-s.done():
				t.Stop()
				return
			}
			continue
		}
		if delay != 0 {
			s.log.Info("accepting AMQP connections again", "addr", ln.Addr().String())
			delay = 0
		}
		c := newConn(s, nc)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.go_(c.run)
	}
}

// acceptLogEvery rate-limits the log lines of a failing accept loop.
const acceptLogEvery = 10 * time.Second

// listenerDown records that ln stopped accepting for good.
func (s *Server) listenerDown(ln net.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == ln {
		s.lnDown = true
	}
	if s.tlsLn == ln {
		s.tlsLnDown = true
	}
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (s *Server) removeConn(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Shutdown stops accepting, closes every connection with 320
// CONNECTION_FORCED as RabbitMQ does on shutdown, and waits for all
// goroutines or for ctx.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stop()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		s.closeBroker(true)
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.nc.Close()
		}
		s.mu.Unlock()
		s.closeBroker(false)
		return ctx.Err()
	}
}

func (s *Server) stop() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		if s.stopped == nil {
			s.stopped = make(chan struct{})
		}
		close(s.stopped)
		if s.ln != nil {
			s.ln.Close()
		}
		if s.tlsLn != nil {
			s.tlsLn.Close()
		}
		conns := make([]*conn, 0, len(s.conns))
		for c := range s.conns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		for _, c := range conns {
			c.forceClose("broker forced connection closure with reason 'shutdown'")
		}
	})
}

// Close shuts the server down, waiting at most a few seconds. It is idempotent.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Shutdown(ctx)
}

// SetAlarm raises or clears a resource alarm (e.g. "memory", "disk").
// While any alarm is raised, connections that publish are blocked: they
// get connection.blocked (if the client supports it) and are not read
// from until every alarm clears.
func (s *Server) SetAlarm(name string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.alarms[name] == on {
		return
	}
	if on {
		s.alarms[name] = true
	} else {
		delete(s.alarms, name)
	}
	s.alarmed.Store(len(s.alarms) > 0)
	close(s.alarmCh)
	s.alarmCh = make(chan struct{})
}

// alarmState returns the raised alarms (nil if none) and a channel closed
// on the next change.
func (s *Server) alarmState() ([]string, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for n := range s.alarms {
		names = append(names, n)
	}
	return names, s.alarmCh
}

// ConnectionCount returns the number of open connections.
func (s *Server) ConnectionCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}
