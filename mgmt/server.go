// Package mgmt serves RabbitMQ's management HTTP API for a Warren server:
// the same paths, JSON shapes, status codes, error bodies and basic auth,
// so that RabbitMQ's tooling works unchanged; plus Warren's dead-letter
// endpoints (/api/dead-letters), the embedded web UI at / and Prometheus
// metrics at /metrics. docs/management.md is the contract.
package mgmt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/bridge"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/mgmt/ui"
	"github.com/warrenmq/warren/server"
)

// Config configures the management server.
type Config struct {
	// Server is the broker server to manage (required).
	Server *server.Server
	// Addr is the listen address; default ":15672".
	Addr string
	// Links runs the shovels and federation links (nil: the server makes
	// its own, started and closed with it).
	Links *bridge.Manager
	// Streams is the stream protocol's listener, for /api/stream/* (nil:
	// empty lists).
	Streams StreamLister
	// UI serves the web UI at "/" (nil: no UI).
	UI     http.Handler
	Logger *slog.Logger
	// SampleInterval is how often message rates are sampled; default 5s,
	// as RabbitMQ's collect_statistics_interval.
	SampleInterval time.Duration
	// HistoryRetention is how long the rate and depth history keeps its
	// samples (one per SampleInterval, per object); default 605s, as
	// RabbitMQ's basic retention policy (issue 15).
	HistoryRetention time.Duration

	// The HTTP listener's limits, so that the management port alone
	// cannot take the descriptors the AMQP listener needs (issue 11
	// item 4). Zero means the default.
	//
	// MaxConnections caps the open HTTP connections (default 256). A
	// connection over the cap takes the slot of the longest-waiting one
	// that has no request in progress (idle, or still sending its
	// headers), which is closed; only when every slot serves a request is
	// it answered 503 and closed (listener.go).
	MaxConnections int
	// ReadHeaderTimeout bounds reading a request's headers (default 5s).
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that sends no new
	// request for this long (default 120s, RabbitMQ's
	// management.tcp.idle_timeout).
	IdleTimeout time.Duration
	// ReadTimeout and WriteTimeout are the grace a request's body and its
	// reply get before they must move at MinRate (default 10s and 30s): a
	// body trickled or a reply left unread is cut, while a definitions
	// import or export of any size that moves goes through.
	ReadTimeout, WriteTimeout time.Duration
	// MinRate is the slowest a body may arrive or a reply be read after
	// their grace, in bytes per second (default 16 KiB/s).
	MinRate int64
	// MaxBodySize bounds a request's body (default 20,000,000 bytes,
	// RabbitMQ's management.http.max_body_size); a larger one is refused
	// with 400 "Exceeded HTTP request body size limit" before it is read.
	MaxBodySize int64
}

// The HTTP listener's defaults (Config).
const (
	DefaultMaxConnections    = 256
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultReadTimeout       = 10 * time.Second
	DefaultWriteTimeout      = 30 * time.Second
	DefaultMinRate           = 16 << 10
	DefaultMaxBodySize       = 20_000_000
)

// Server is the management HTTP server.
type Server struct {
	cfg  Config
	srv  *server.Server
	b    *broker.Broker
	log  *slog.Logger
	node string
	mux  *http.ServeMux
	hs   *http.Server
	cop  *http.CrossOriginProtection

	mu     sync.Mutex
	ln     net.Listener
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup
	hist   *history // rate and depth history (issue 15)
	// sampleMu makes sample rounds (the ticker's, SampleNow's) one at a
	// time: a round reads the counters, then records them at its time, so
	// two rounds at once could record an older reading after a newer one.
	sampleMu sync.Mutex
	started  time.Time
	mstate   metricsState            // metrics.go
	cl       atomic.Pointer[Cluster] // SetCluster (cluster.go); nil: a single node
	links    *bridge.Manager         // shovels and federation (shovel.go, federation.go)
	ownLinks bool                    // links is this server's: Start starts it, Close closes it
}

// New returns a management server for cfg.Server; it does not listen
// until Start.
func New(cfg Config) *Server {
	if cfg.Addr == "" {
		cfg.Addr = ":15672"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SampleInterval <= 0 {
		cfg.SampleInterval = 5 * time.Second
	}
	if cfg.HistoryRetention <= 0 {
		cfg.HistoryRetention = DefaultHistoryRetention
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.MinRate <= 0 {
		cfg.MinRate = DefaultMinRate
	}
	if cfg.MaxBodySize <= 0 {
		cfg.MaxBodySize = DefaultMaxBodySize
	}
	node := cfg.Server.Broker().NodeName()
	s := &Server{cfg: cfg, srv: cfg.Server, b: cfg.Server.Broker(), log: cfg.Logger, node: node,
		mux: http.NewServeMux(), cop: http.NewCrossOriginProtection(), stop: make(chan struct{}), started: time.Now()}
	s.hist = newHistory(int((cfg.HistoryRetention + cfg.SampleInterval - 1) / cfg.SampleInterval))
	s.links, s.ownLinks = cfg.Links, cfg.Links == nil
	if s.ownLinks {
		s.links = bridge.New(bridge.Config{Broker: s.b, Direct: s.srv.DialDirect, Node: node, Logger: cfg.Logger})
	}
	s.routes()
	// Replays, moves and shovels count their publishes in the exchange
	// stats, as the API's publish does.
	s.b.OnRepublish(s.srv.CountPublish)
	return s
}

// Links is the server's links manager (shovels): a cluster tells it which
// links this node runs.
func (s *Server) Links() *bridge.Manager { return s.links }

// Handler returns the HTTP handler (API, UI and metrics).
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// Start listens and serves in the background.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.ln = ln
	ll := newLimitListener(ln, s.cfg.MaxConnections, s.log)
	s.hs = &http.Server{Handler: s.paced(http.HandlerFunc(s.serveHTTP)), ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout: s.cfg.IdleTimeout, ConnState: ll.connState,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
	s.mu.Unlock()
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		if err := s.hs.Serve(ll); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("management listener stopped", "err", err)
		}
	}()
	go func() {
		defer s.wg.Done()
		s.sampleLoop()
	}()
	s.log.Info("management HTTP listener started", "addr", ln.Addr().String())
	if s.ownLinks {
		s.links.Start()
	}
	return nil
}

// Addr returns the listen address once started.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// URL returns the base URL of the API, e.g. http://127.0.0.1:15672.
func (s *Server) URL() string {
	a := s.Addr()
	if a == nil {
		return ""
	}
	host, port, _ := net.SplitHostPort(a.String())
	if host == "" || host == "::" || host == "0.0.0.0" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// Close stops the server and any running message moves. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	hs := s.hs
	s.mu.Unlock()
	var err error
	if hs != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err = hs.Shutdown(ctx)
		cancel()
	}
	// The shovels stop (what they had not settled goes back to their
	// sources); their parameters stay, so that they resume on the next
	// Start.
	if s.ownLinks {
		s.links.Close()
	}
	s.wg.Wait()
	return err
}

// serveHTTP strips a trailing slash (RabbitMQ accepts /api/connections/)
// and dispatches.
// An escaped slash inside a segment (the vhost "/" is "%2F") would split
// the segment for net/http's mux, so within /api/ such slashes become
// slashMark for routing and call.pv turns them back.
//
// A state-changing request (not GET, HEAD or OPTIONS) that a browser
// marks as cross-site (Sec-Fetch-Site, or an Origin other than the Host)
// is refused with 403: a page on another site could otherwise send one
// with the browser's cached basic-auth credentials (issue 11 item 12).
// Requests without those headers (curl, rabbitmqadmin, client
// libraries) and the web UI's own (same-origin) pass.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if err := s.cop.Check(r); err != nil {
		s.log.Warn("management API: cross-origin request refused", "method", r.Method, "path", r.URL.Path,
			"origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"), "remote", r.RemoteAddr)
		s.writeError(w, &apiError{Status: http.StatusForbidden, Err: "forbidden", Reason: "cross-origin request refused: " + err.Error()})
		return
	}
	if strings.HasPrefix(r.URL.Path, "/api/") {
		u := *r.URL
		if u.RawPath != "" {
			segs := strings.Split(u.RawPath, "/")
			for i, seg := range segs {
				if un, err := url.PathUnescape(seg); err == nil {
					segs[i] = strings.ReplaceAll(un, "/", slashMark)
				}
			}
			u.Path, u.RawPath = strings.Join(segs, "/"), ""
		}
		if len(u.Path) > len("/api/") && strings.HasSuffix(u.Path, "/") {
			u.Path = strings.TrimSuffix(u.Path, "/")
		}
		r2 := *r
		r2.URL = &u
		r = &r2
	}
	s.mux.ServeHTTP(w, r)
}

const slashMark = "\x00"

// pv returns a path value, with escaped slashes restored.
func (c *call) pv(name string) string {
	return strings.ReplaceAll(c.r.PathValue(name), slashMark, "/")
}

// apiError is an error reply: status and RabbitMQ's {"error","reason"}.
type apiError struct {
	Status int
	Err    string
	Reason string
	// Detail, if set, is the reason instead: RabbitMQ sends some reasons
	// as a JSON list, e.g. ["not_base64","!!!"].
	Detail any
}

func (e *apiError) Error() string { return e.Err + ": " + e.Reason }

var (
	errNotFound = &apiError{Status: http.StatusNotFound, Err: "Object Not Found", Reason: "Not Found"}
	// errNoVHost answers a change in a vhost that does not exist.
	errNoVHost = &apiError{Status: http.StatusNotFound, Err: "not_found", Reason: "vhost_not_found"}
)

func badRequest(reason string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Err: "bad_request", Reason: reason}
}

// keyMissing is RabbitMQ's 400 for a body without a required key.
func keyMissing(key string) *apiError { return badRequest("[{key_missing," + key + "}]") }

// firstMissing is keyMissing for the first of keys whose value is nil.
func firstMissing(keys []string, values ...*string) error {
	for i, v := range values {
		if v == nil {
			return keyMissing(keys[i])
		}
	}
	return nil
}

// badRequestList is a 400 whose reason is a list, as RabbitMQ's
// {error, Term} replies: badRequestList("not_base64", s).
func badRequestList(parts ...string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Err: "bad_request", Detail: parts}
}

func notAuthorised(reason string) *apiError {
	return &apiError{Status: http.StatusUnauthorized, Err: "not_authorised", Reason: reason}
}

// writeJSON writes v with status. The reply is encoded whole before
// anything is sent, so that an encode error never leaves a 200 with an
// empty or cut-off body: it becomes a logged 500 with RabbitMQ's error
// body instead. Non-finite floats are rendered as strings (finite), so
// such an error is not expected.
func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := encodeJSON(v)
	if err != nil {
		s.log.Error("management API: cannot encode the reply", "err", err)
		status = http.StatusInternalServerError
		body, _ = encodeJSON(map[string]any{"error": "internal_server_error", "reason": "JSON encode error: " + err.Error()})
	}
	writeBody(w, status, body)
}

// writeBody sends an encoded JSON reply.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// encodeJSON encodes v as the API sends it (no HTML escaping, a final
// newline). A float JSON cannot carry (NaN or an infinity, which an AMQP
// field table can hold as a double or a float) is sent as the string
// "NaN", "Infinity" or "-Infinity": RabbitMQ cannot hold such a value at
// all, and a string keeps every other entry of a list readable.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	var uv *json.UnsupportedValueError
	if errors.As(err, &uv) {
		buf.Reset()
		err = enc.Encode(finite(reflect.ValueOf(v)).Interface())
	}
	if err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// finite returns a copy of v in which every non-finite float held in an
// interface (a map[string]any value, a []any element, an any field) is
// its string (broker.FloatJSON). The copy shares nothing mutable with v, so the
// broker's own maps are never changed. A non-finite float in a field of
// float type stays, and then fails to encode.
func finite(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Interface:
		if v.IsNil() {
			return v
		}
		e := finite(v.Elem())
		out := reflect.New(v.Type()).Elem()
		if e.Type().AssignableTo(v.Type()) {
			out.Set(e)
		} else {
			out.Set(v.Elem())
		}
		return out
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); math.IsNaN(f) || math.IsInf(f, 0) {
			return reflect.ValueOf(broker.FloatJSON(f))
		}
		return v
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		e := finite(v.Elem())
		if e.Type() != v.Elem().Type() {
			return v
		}
		out := reflect.New(e.Type())
		out.Elem().Set(e)
		return out
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		out := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			out.SetMapIndex(it.Key(), same(finite(it.Value()), it.Value(), v.Type().Elem()))
		}
		return out
	case reflect.Slice:
		if v.IsNil() || v.Type().Elem().Kind() == reflect.Uint8 {
			return v
		}
		out := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			out.Index(i).Set(same(finite(v.Index(i)), v.Index(i), v.Type().Elem()))
		}
		return out
	case reflect.Array:
		out := reflect.New(v.Type()).Elem()
		for i := range v.Len() {
			out.Index(i).Set(same(finite(v.Index(i)), v.Index(i), v.Type().Elem()))
		}
		return out
	case reflect.Struct:
		out := reflect.New(v.Type()).Elem()
		out.Set(v)
		for i := range v.NumField() {
			if f := out.Field(i); f.CanSet() {
				f.Set(same(finite(v.Field(i)), v.Field(i), f.Type()))
			}
		}
		return out
	}
	return v
}

// same returns cleaned when it fits type t (a float becomes a string only
// where an interface can hold it), else orig.
func same(cleaned, orig reflect.Value, t reflect.Type) reflect.Value {
	if cleaned.Type().AssignableTo(t) {
		return cleaned
	}
	return orig
}

func (s *Server) writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) && isNoQuorum(err) {
		ae = noQuorum(err)
	} else if ae == nil {
		ae = &apiError{Status: http.StatusInternalServerError, Err: "internal_server_error", Reason: err.Error()}
	}
	if ae.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Basic realm="RabbitMQ Management"`)
	}
	if ae.Err == "" {
		w.WriteHeader(ae.Status)
		return
	}
	var reason any = ae.Reason
	if ae.Detail != nil {
		reason = ae.Detail
	}
	s.writeJSON(w, ae.Status, map[string]any{"error": ae.Err, "reason": reason})
}

// sampleLoop samples counters for rates until Close.
func (s *Server) sampleLoop() {
	t := time.NewTicker(s.cfg.SampleInterval)
	defer t.Stop()
	s.sample()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sample()
		}
	}
}

// DefaultUI returns the embedded web UI's handler.
func DefaultUI() http.Handler { return ui.Handler() }
