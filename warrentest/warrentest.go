// Package warrentest starts a real Warren broker in-process for tests:
//
//	b := warrentest.Start(t)
//	conn, err := amqp091.Dial(b.URL())
//
// The broker listens on 127.0.0.1 on a free port, keeps its data in
// t.TempDir(), and is shut down by t.Cleanup.
package warrentest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/internal/clock"
	"github.com/warrenmq/warren/mgmt"
	"github.com/warrenmq/warren/server"
	"github.com/warrenmq/warren/streamserver"
)

// Broker is a running test broker.
type Broker struct {
	t       testing.TB
	srv     *server.Server
	cfg     server.Config
	dataDir string
	addr    string
	mg      *mgmt.Server
	mgAddr  string
	// the stream protocol's listener (issue 25)
	ss     *streamserver.Server
	ssAddr string
}

// Option adjusts the server configuration.
type Option func(*server.Config)

// WithClock drives the broker's time (TTLs, expiries, delays) from c.
func WithClock(c clock.Clock) Option { return func(cfg *server.Config) { cfg.Clock = c } }

// WithConfig lets a test change any server setting.
func WithConfig(f func(*server.Config)) Option { return Option(f) }

// Start starts a broker and registers its shutdown with t.Cleanup.
func Start(t testing.TB, opts ...Option) *Broker {
	t.Helper()
	cfg := server.Config{AMQPAddr: "127.0.0.1:0", Heartbeat: 60 * time.Second}
	if os.Getenv("WARREN_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	b := &Broker{t: t, cfg: cfg, dataDir: cfg.DataDir}
	b.start()
	t.Cleanup(b.Close)
	return b
}

func (b *Broker) start() {
	b.t.Helper()
	srv, err := server.New(b.cfg)
	if err != nil {
		b.t.Fatalf("warrentest: %v", err)
	}
	if err := srv.Start(); err != nil {
		b.t.Fatalf("warrentest: %v", err)
	}
	b.srv = srv
	b.addr = srv.Addr().String()
	// Keep the port across Restart.
	b.cfg.AMQPAddr = b.addr
	b.startStreams()
	b.startMgmt()
}

// startStreams starts the stream protocol listener on a loopback port
// (the same one after a Restart).
func (b *Broker) startStreams() {
	b.t.Helper()
	addr := b.ssAddr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var err error
	for i := 0; i < 50; i++ {
		ss := streamserver.New(b.srv.Broker(), streamserver.Config{Logger: b.cfg.Logger})
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			ss.Serve(ln)
			b.ss, b.ssAddr = ss, ln.Addr().String()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.t.Fatalf("warrentest: stream listener: %v", err)
}

// StreamAddr is the stream protocol listener's host:port.
func (b *Broker) StreamAddr() string { return b.ssAddr }

// StreamURI is the rabbitmq-stream:// URI of the broker for guest.
func (b *Broker) StreamURI() string { return "rabbitmq-stream://guest:guest@" + b.ssAddr + "/%2f" }

// startMgmt starts the management API on a loopback port (the same one
// after a Restart).
func (b *Broker) startMgmt() {
	b.t.Helper()
	addr := b.mgAddr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var err error
	for i := 0; i < 50; i++ {
		m := mgmt.New(mgmt.Config{Server: b.srv, Addr: addr, Logger: b.cfg.Logger, UI: mgmt.DefaultUI(), Streams: b.ss})
		if err = m.Start(); err == nil {
			b.mg = m
			b.mgAddr = m.Addr().String()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.t.Fatalf("warrentest: management API: %v", err)
}

// MgmtURL is the base URL of the broker's management HTTP API, e.g.
// http://127.0.0.1:41234 (guest/guest works from loopback).
func (b *Broker) MgmtURL() string { return "http://" + b.mgAddr }

// Mgmt returns the running management server.
func (b *Broker) Mgmt() *mgmt.Server { return b.mg }

// URL is the amqp:// URL of the broker for the guest user.
func (b *Broker) URL() string { return fmt.Sprintf("amqp://guest:guest@%s/", b.addr) }

// Addr is the broker's host:port.
func (b *Broker) Addr() string { return b.addr }

// Server returns the running server.
func (b *Broker) Server() *server.Server { return b.srv }

// Broker returns the broker model, for inspection in tests.
func (b *Broker) Broker() *broker.Broker { return b.srv.Broker() }

// DataDir is the broker's data directory.
func (b *Broker) DataDir() string { return b.dataDir }

// Restart stops the broker and starts it again on the same port and data
// directory: durable definitions survive, transient ones do not.
func (b *Broker) Restart() {
	b.t.Helper()
	b.shutdown()
	b.cfg.Broker = nil
	for i := 0; ; i++ {
		srv, err := server.New(b.cfg)
		if err == nil {
			if err = srv.Start(); err == nil {
				b.srv = srv
				b.startStreams()
				b.startMgmt()
				return
			}
		}
		var oe *net.OpError
		if i > 50 || !asOpError(err, &oe) {
			b.t.Fatalf("warrentest: restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func asOpError(err error, oe **net.OpError) bool {
	e, ok := err.(*net.OpError)
	if ok {
		*oe = e
	}
	return ok
}

func (b *Broker) shutdown() {
	if b.srv == nil {
		return
	}
	if b.mg != nil {
		b.mg.Close()
		b.mg = nil
	}
	if b.ss != nil {
		b.ss.Close()
		b.ss = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.srv.Shutdown(ctx); err != nil {
		b.t.Errorf("warrentest: shutdown: %v", err)
	}
}

// Close shuts the broker down. It is idempotent.
func (b *Broker) Close() {
	b.shutdown()
	b.srv = nil
}
