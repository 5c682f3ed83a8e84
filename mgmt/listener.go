package mgmt

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The management port faces whoever can reach it, before any login, so
// nobody may hold it with connections that do nothing (issue 22 item 5):
//
//   - The listener keeps at most Config.MaxConnections open. A connection
//     over the cap takes the slot of the longest-waiting connection that
//     has no request in progress: one that has sent nothing yet, is still
//     sending its headers, or idles between keep-alive requests. That one
//     is closed. Idle sockets therefore cost a descriptor each, up to the
//     cap, and never keep an operator's request or a health check out.
//     Only when every slot is serving a request is a new connection
//     answered 503 and closed.
//   - Headers must arrive within ReadHeaderTimeout. A body gets ReadTimeout
//     of grace and must then keep arriving at MinRate; a reply likewise
//     gets WriteTimeout and must then be read at MinRate. A trickle is cut;
//     a large import or export that moves is not.
//   - A body over MaxBodySize is refused before it is read (400, as
//     RabbitMQ's management.http.max_body_size).

// limitListener caps the open connections, evicting the longest-waiting
// connection without a request in progress when it must.
type limitListener struct {
	net.Listener
	max     int
	log     *slog.Logger
	refused atomic.Int64
	evicted atomic.Int64

	mu    sync.Mutex
	conns map[*limitConn]struct{}
}

func newLimitListener(ln net.Listener, max int, log *slog.Logger) *limitListener {
	return &limitListener{Listener: ln, max: max, log: log, conns: map[*limitConn]struct{}{}}
}

// tooMany is the reply to a connection over the cap while every slot is
// serving a request.
var tooMany = func() string {
	body := `{"error":"service_unavailable","reason":"too many management HTTP connections"}` + "\n"
	return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}()

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitConn{Conn: c, l: l}
		lc.waitingSince.Store(time.Now().UnixNano())
		l.mu.Lock()
		var victim *limitConn
		if len(l.conns) >= l.max {
			victim = l.victimLocked()
			if victim != nil {
				delete(l.conns, victim)
			}
		}
		admitted := len(l.conns) < l.max
		if admitted {
			l.conns[lc] = struct{}{}
		}
		l.mu.Unlock()
		if victim != nil {
			victim.Conn.Close()
			if n := l.evicted.Add(1); n&(n-1) == 0 { // 1, 2, 4, 8...: no log flood
				l.log.Warn("management HTTP: closed a waiting connection to make room", "max", l.max, "evicted", n)
			}
		}
		if admitted {
			return lc, nil
		}
		if n := l.refused.Add(1); n&(n-1) == 0 {
			l.log.Warn("management HTTP connection refused: every connection is serving a request", "max", l.max, "refused", n)
		}
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = io.WriteString(c, tooMany)
		_ = c.Close()
	}
}

// victimLocked is the connection without a request in progress that has
// waited longest, or nil.
func (l *limitListener) victimLocked() *limitConn {
	var victim *limitConn
	var oldest int64
	for c := range l.conns {
		if c.busy.Load() {
			continue
		}
		if since := c.waitingSince.Load(); victim == nil || since < oldest {
			victim, oldest = c, since
		}
	}
	return victim
}

func (l *limitListener) release(c *limitConn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

// connState follows each connection: from the moment a request's headers
// are read (StateActive) until its reply is done it is busy; while new or
// idle it waits, and may be evicted.
func (l *limitListener) connState(c net.Conn, st http.ConnState) {
	lc, ok := c.(*limitConn)
	if !ok {
		return
	}
	switch st {
	case http.StateActive:
		lc.busy.Store(true)
	case http.StateIdle:
		lc.waitingSince.Store(time.Now().UnixNano())
		lc.busy.Store(false)
	}
}

// limitConn gives its slot back when closed.
type limitConn struct {
	net.Conn
	l            *limitListener
	busy         atomic.Bool
	waitingSince atomic.Int64 // unix ns: accepted, or last became idle
	once         sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c) })
	return err
}

// errBodyTooLarge is RabbitMQ's reason for a body over the limit.
const errBodyTooLarge = "Exceeded HTTP request body size limit"

// paced wraps the API's handler with the body limit and the deadlines
// that make a slow body or an unread reply give up its connection.
func (s *Server) paced(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > s.cfg.MaxBodySize {
			s.log.Warn("management API: request body over the limit refused", "limit", s.cfg.MaxBodySize,
				"size", r.ContentLength, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
			w.Header().Set("Connection", "close")
			s.writeError(w, badRequest(errBodyTooLarge))
			return
		}
		rc := http.NewResponseController(w)
		start := time.Now()
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &pacedBody{ReadCloser: http.MaxBytesReader(w, r.Body, s.cfg.MaxBodySize), rc: rc, start: start,
				grace: s.cfg.ReadTimeout, rate: s.cfg.MinRate}
			_ = rc.SetReadDeadline(start.Add(s.cfg.ReadTimeout))
		}
		// The write deadline is the server's to set (WriteTimeout is 0
		// there): a keep-alive connection still has the last request's.
		pw := &pacedWriter{ResponseWriter: w, rc: rc, grace: s.cfg.WriteTimeout, rate: s.cfg.MinRate}
		_ = rc.SetWriteDeadline(start.Add(s.cfg.WriteTimeout))
		h.ServeHTTP(pw, r)
		// What is left buffered (a few KiB at most) gets its own grace.
		_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	})
}

// deadline is start + grace + the time n bytes take at rate.
func deadline(start time.Time, grace time.Duration, n, rate int64) time.Time {
	return start.Add(grace + time.Duration(float64(n)/float64(rate)*float64(time.Second)))
}

// pacedBody pushes the read deadline out as the body arrives.
type pacedBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	start time.Time
	grace time.Duration
	rate  int64
	n     int64
}

func (b *pacedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	switch {
	case err == io.EOF:
		// Whole: no deadline once the body is read, or the server's
		// background read would time out and cancel the request's
		// context while the handler runs. (After any other error the
		// deadline stays, so the rest of a trickled body is not waited
		// for either.)
		_ = b.rc.SetReadDeadline(time.Time{})
	case n > 0:
		_ = b.rc.SetReadDeadline(deadline(b.start, b.grace, b.n, b.rate))
	}
	return n, err
}

// pacedWriter pushes the write deadline out as the reply is taken,
// counting from its first write.
type pacedWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	start time.Time
	grace time.Duration
	rate  int64
	n     int64
}

func (w *pacedWriter) Write(p []byte) (int, error) {
	if w.start.IsZero() {
		w.start = time.Now()
	}
	_ = w.rc.SetWriteDeadline(deadline(w.start, w.grace, w.n+int64(len(p)), w.rate))
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *pacedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// isBodyTooLarge reports a read that stopped at MaxBodySize.
func isBodyTooLarge(err error) bool {
	var mb *http.MaxBytesError
	return errors.As(err, &mb)
}
