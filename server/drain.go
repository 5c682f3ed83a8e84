package server

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Maintenance mode (issue 22), as RabbitMQ's rabbitmq-upgrade drain and
// revive: a drained node takes no client connections (its AMQP listeners
// are closed, so a load balancer's health check sends clients elsewhere)
// and has closed the ones it had, each only once its publishes were
// confirmed, with 320 CONNECTION_FORCED "Node was put into maintenance
// mode". The mark is kept in the data directory, so the node stays drained
// across a restart until it is revived (a rolling upgrade: drain, restart,
// check, revive).

// MaintenanceReason is the reason a drained node's connections are closed
// with (RabbitMQ's text).
const MaintenanceReason = "Node was put into maintenance mode"

const maintenanceFile = "maintenance"

// drainConfirmWait bounds how long a connection being drained waits for its
// publishes to be confirmed before it is closed anyway.
const drainConfirmWait = 5 * time.Second

func (s *Server) maintenancePath() string {
	if s.cfg.DataDir == "" {
		return ""
	}
	return filepath.Join(s.cfg.DataDir, maintenanceFile)
}

func (s *Server) maintenanceMarked() bool {
	p := s.maintenancePath()
	if p == "" {
		return false
	}
	_, err := os.Stat(p)
	return err == nil
}

// Suspended reports whether the node is in maintenance mode.
func (s *Server) Suspended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.suspended
}

// isSuspended reports whether ln was closed by Suspend.
func (s *Server) isSuspended(ln net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.suspended && s.ln != ln && s.tlsLn != ln
}

// Suspend puts the node into maintenance mode: the mark is written, and
// the AMQP listeners are closed. Connections stay (DrainConnections).
func (s *Server) Suspend() error {
	if p := s.maintenancePath(); p != "" {
		if err := os.WriteFile(p, []byte("drained "+time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("server: closed")
	}
	if s.suspended {
		return nil
	}
	s.suspended = true
	for _, ln := range []net.Listener{s.ln, s.tlsLn} {
		if ln != nil {
			ln.Close()
		}
	}
	s.ln, s.tlsLn = nil, nil
	s.log.Warn("node put into maintenance mode: AMQP listeners closed")
	return nil
}

// Revive ends maintenance mode: the mark is removed and the listeners
// open again on their addresses.
func (s *Server) Revive() error {
	if p := s.maintenancePath(); p != "" {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("server: closed")
	}
	if !s.suspended {
		return nil
	}
	if !s.started {
		s.suspended = false
		return nil
	}
	if err := s.listenLocked(); err != nil {
		return err
	}
	s.suspended = false
	s.log.Info("node revived from maintenance mode")
	return nil
}

// DrainConnections closes every client connection gracefully with 320
// CONNECTION_FORCED and reason: each stops taking frames, sends the
// confirms of the publishes it took (waiting for them at most
// drainConfirmWait), then its connection.close. It returns once all are
// gone, or after wait.
func (s *Server) DrainConnections(reason string, wait time.Duration) (left int) {
	for _, c := range s.connList() {
		c.drainClose(reason)
	}
	deadline := time.Now().Add(wait)
	for {
		s.mu.Lock()
		n := len(s.conns)
		s.mu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// drainClose asks c's reader to close the connection gracefully (drain).
func (c *conn) drainClose(reason string) {
	if c.drain.Swap(&reason) != nil {
		return
	}
	// Wake a reader blocked on the socket: its read times out, and it
	// closes the connection (readLoop).
	c.nc.SetReadDeadline(time.Now())
}

// finishDrain runs on the reader: it confirms what it can, then closes.
func (c *conn) finishDrain(reason string) {
	deadline := time.Now().Add(drainConfirmWait)
	for {
		c.flushConfirms()
		if c.unconfirmed() == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.forceClose(reason)
}

// unconfirmed counts the publishes of c's channels not yet confirmed
// (reader goroutine).
func (c *conn) unconfirmed() uint64 {
	var n uint64
	for _, ch := range c.channels {
		if ch == nil {
			continue
		}
		ch.confMu.Lock()
		n += ch.publishSeq - ch.ackedUpTo
		ch.confMu.Unlock()
	}
	return n
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
