// Package perfclient is a lean AMQP 0-9-1 client for load generation
// (cmd/warren-perf), built on Warren's codec (package amqp).
//
// It does only what a load generator needs, and does it without
// per-message allocations or per-message system calls:
//
//   - Publish appends the basic.publish method, content header and body
//     frames to the channel's own buffer; the buffer is written when it
//     holds FlushThreshold bytes, before any RPC on the channel, before
//     WaitConfirms blocks, and on Flush.
//   - One reader goroutine per connection parses frames off the wire.
//     Deliveries are handed to the consumer's callback on that goroutine,
//     with the body aliasing the read buffer when it came in one frame.
//     Acks made from the callback (Delivery.Ack, Nack, Reject) are batched
//     and written just before the reader next reads from the socket.
//   - Publisher confirms are counted by the reader goroutine (multiple and
//     single, acks and nacks); WaitConfirms blocks until fewer than N are
//     outstanding.
//
// Concurrency: a Conn may be shared; each Channel's publishing side
// (Publish, Flush, WaitConfirms) belongs to one goroutine at a time. RPCs
// (declares, Qos, Consume...) may be called from any goroutine but they
// flush the channel's pending publishes, so call them from the publishing
// goroutine when the channel publishes. A connection whose publisher is
// blocked in a write (TCP back-pressure) also delays the reader's batched
// acks: give publishers and consumers their own connections, as
// warren-perf does.
//
// Not supported: TLS, SASL mechanisms other than PLAIN, transactions,
// basic.get, heartbeat timeout detection (heartbeats are sent, when
// negotiated, but a silent server is not detected).
package perfclient

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/amqp"
)

// ErrClosed is returned by operations on a connection or channel that the
// client closed.
var ErrClosed = errors.New("perfclient: closed")

// Config tunes a connection. The zero value is usable.
type Config struct {
	// Heartbeat is the heartbeat interval asked for in connection.tune-ok;
	// 0 disables heartbeats (both RabbitMQ and Warren accept that).
	Heartbeat time.Duration
	// FrameMax caps the negotiated frame-max; 0 takes the server's.
	FrameMax uint32
	// ConnectionName is sent as the connection_name client property.
	ConnectionName string
	// DialTimeout bounds the TCP dial and the handshake (default 10s).
	DialTimeout time.Duration
	// ReadBufferSize is the frame reader's buffer (default 256 KiB).
	ReadBufferSize int
}

// URI is a parsed amqp:// URI.
type URI struct {
	Addr     string // host:port
	Username string
	Password string
	VHost    string
}

// Redacted returns the URI without the password.
func (u URI) Redacted() string {
	v := u.VHost
	if v == "/" {
		v = ""
	}
	return "amqp://" + u.Username + "@" + u.Addr + "/" + url.PathEscape(v)
}

// ParseURI parses amqp://user:pass@host:port/vhost the way amqp091-go
// does: no path or "/" is the vhost "/", "/%2f" is "/" too, "/name" is
// "name". The user defaults to guest/guest and the port to 5672.
func ParseURI(s string) (URI, error) {
	u, err := url.Parse(s)
	if err != nil {
		return URI{}, err
	}
	if u.Scheme != "amqp" {
		return URI{}, fmt.Errorf("perfclient: unsupported scheme %q (only amqp://)", u.Scheme)
	}
	r := URI{Username: "guest", Password: "guest", VHost: "/"}
	if u.User != nil {
		r.Username = u.User.Username()
		r.Password, _ = u.User.Password()
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		host = "localhost"
	}
	if port == "" {
		port = "5672"
	}
	r.Addr = net.JoinHostPort(host, port)
	if len(u.Path) > 1 {
		r.VHost = u.Path[1:]
	}
	return r, nil
}

// Conn is an AMQP connection.
type Conn struct {
	nc       net.Conn
	fr       *amqp.FrameReader
	frameMax uint32
	chanMax  uint16

	// ServerProperties are connection.start's server-properties
	// (product, version, capabilities...).
	ServerProperties amqp.Table

	wmu  sync.Mutex
	werr error // first write error, under wmu
	// rout is batched output (acks from delivery callbacks, replies),
	// under wmu: written before each read from the socket and before
	// anything else is written, so frames keep their order.
	rout []byte

	mu       sync.Mutex
	chans    atomic.Pointer[[]*Channel] // indexed by channel id, copy on write
	nextID   uint16
	err      error // why the connection ended, under mu
	closing  bool  // Close was called, under mu
	done     chan struct{}
	blocked  atomic.Bool
	nBlocked atomic.Uint64
}

// flushReader writes the reader's batched output before every read from
// the socket: acks made while processing what was read go out before the
// reader may block.
type flushReader struct{ c *Conn }

func (r flushReader) Read(p []byte) (int, error) {
	r.c.flushRout()
	return r.c.nc.Read(p)
}

// flushRout writes the batched output.
func (c *Conn) flushRout() {
	c.wmu.Lock()
	c.writeLocked(nil)
	c.wmu.Unlock()
}

// queue adds a method frame to the batched output, written before the
// reader next reads (or before anything else is written).
func (c *Conn) queue(ch uint16, m amqp.Method) {
	c.wmu.Lock()
	c.rout = amqp.AppendMethodFrame(c.rout, ch, m)
	if len(c.rout) >= 64<<10 {
		c.writeLocked(nil)
	}
	c.wmu.Unlock()
}

// write writes the batched output, then b, to the socket.
func (c *Conn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeLocked(b)
}

func (c *Conn) writeLocked(b []byte) error {
	if c.werr != nil {
		c.rout = c.rout[:0]
		return c.werr
	}
	if len(c.rout) > 0 {
		_, err := c.nc.Write(c.rout)
		c.rout = c.rout[:0]
		if err != nil {
			c.werr = err
			return err
		}
	}
	if len(b) == 0 {
		return nil
	}
	if _, err := c.nc.Write(b); err != nil {
		c.werr = err
		return err
	}
	return nil
}

func (c *Conn) writeMethod(ch uint16, m amqp.Method) error {
	return c.write(amqp.AppendMethodFrame(nil, ch, m))
}

// Dial connects and performs the AMQP handshake (SASL PLAIN).
func Dial(uri string, cfg Config) (*Conn, error) {
	u, err := ParseURI(uri)
	if err != nil {
		return nil, err
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.ReadBufferSize <= 0 {
		cfg.ReadBufferSize = 256 << 10
	}
	nc, err := net.DialTimeout("tcp", u.Addr, cfg.DialTimeout)
	if err != nil {
		return nil, err
	}
	c := &Conn{nc: nc, done: make(chan struct{})}
	empty := make([]*Channel, 1)
	c.chans.Store(&empty)
	c.fr = amqp.NewFrameReader(flushReader{c}, cfg.ReadBufferSize)
	nc.SetDeadline(time.Now().Add(cfg.DialTimeout))
	if err := c.handshake(u, cfg); err != nil {
		nc.Close()
		return nil, fmt.Errorf("perfclient: handshake with %s: %w", u.Addr, err)
	}
	nc.SetDeadline(time.Time{})
	go c.readLoop()
	if cfg.Heartbeat > 0 {
		go c.heartbeats(cfg.Heartbeat)
	}
	return c, nil
}

// readMethod reads a method frame on channel 0 during the handshake. A
// connection.close from the server is returned as its *amqp.Error.
func (c *Conn) readMethod() (amqp.Method, error) {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		if f.Type == amqp.FrameHeartbeat {
			continue
		}
		if f.Type != amqp.FrameMethod || f.Channel != 0 {
			return nil, fmt.Errorf("unexpected frame type %d on channel %d", f.Type, f.Channel)
		}
		m, err := amqp.DecodeServerMethod(f.Payload)
		if err != nil {
			return nil, err
		}
		if cl, ok := m.(*amqp.ConnectionClose); ok {
			c.write(amqp.AppendMethodFrame(nil, 0, &amqp.ConnectionCloseOk{}))
			return nil, closeError(cl.ReplyCode, cl.ReplyText, cl.FailingClassID, cl.FailingMethodID, true)
		}
		return m, nil
	}
}

func closeError(code uint16, text string, cid, mid uint16, hard bool) *amqp.Error {
	return &amqp.Error{Code: code, Text: text, ClassID: cid, MethodID: mid, Hard: hard}
}

func (c *Conn) handshake(u URI, cfg Config) error {
	if _, err := c.nc.Write(amqp.ProtocolHeader); err != nil {
		return err
	}
	m, err := c.readMethod()
	if err != nil {
		return err
	}
	start, ok := m.(*amqp.ConnectionStart)
	if !ok {
		return fmt.Errorf("expected connection.start, got %s", m.Name())
	}
	c.ServerProperties = start.ServerProperties
	if !contains(strings.Fields(start.Mechanisms), "PLAIN") {
		return fmt.Errorf("server does not offer SASL PLAIN (%q)", start.Mechanisms)
	}
	props := amqp.Table{
		"product":     "warren-perf",
		"version":     "1",
		"platform":    "Go",
		"information": "internal/perfclient",
		"capabilities": amqp.Table{
			"publisher_confirms":           true,
			"consumer_cancel_notify":       true,
			"basic.nack":                   true,
			"connection.blocked":           true,
			"authentication_failure_close": true,
			"exchange_exchange_bindings":   true,
			"per_consumer_qos":             true,
		},
	}
	if cfg.ConnectionName != "" {
		props["connection_name"] = cfg.ConnectionName
	}
	err = c.writeMethod(0, &amqp.ConnectionStartOk{
		ClientProperties: props,
		Mechanism:        "PLAIN",
		Response:         "\x00" + u.Username + "\x00" + u.Password,
		Locale:           "en_US",
	})
	if err != nil {
		return err
	}
	m, err = c.readMethod()
	if err != nil {
		return err
	}
	tune, ok := m.(*amqp.ConnectionTune)
	if !ok {
		return fmt.Errorf("expected connection.tune, got %s", m.Name())
	}
	fm := tune.FrameMax
	if cfg.FrameMax != 0 && (fm == 0 || cfg.FrameMax < fm) {
		fm = cfg.FrameMax
	}
	if fm == 0 {
		fm = 1 << 20
	}
	c.frameMax = fm
	c.chanMax = tune.ChannelMax
	if c.chanMax == 0 {
		c.chanMax = 65535
	}
	hb := uint16(cfg.Heartbeat / time.Second)
	if cfg.Heartbeat > 0 && hb == 0 {
		hb = 1
	}
	b := amqp.AppendMethodFrame(nil, 0, &amqp.ConnectionTuneOk{ChannelMax: c.chanMax, FrameMax: fm, Heartbeat: hb})
	b = amqp.AppendMethodFrame(b, 0, &amqp.ConnectionOpen{VirtualHost: u.VHost})
	if _, err := c.nc.Write(b); err != nil {
		return err
	}
	c.fr.SetMaxFrameSize(fm)
	m, err = c.readMethod()
	if err != nil {
		return err
	}
	if _, ok := m.(*amqp.ConnectionOpenOk); !ok {
		return fmt.Errorf("expected connection.open-ok, got %s", m.Name())
	}
	return nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// FrameMax is the negotiated frame-max.
func (c *Conn) FrameMax() uint32 { return c.frameMax }

// Blocked reports whether the server has the connection blocked
// (connection.blocked received, not yet unblocked).
func (c *Conn) Blocked() bool { return c.blocked.Load() }

// BlockedCount is the number of connection.blocked received.
func (c *Conn) BlockedCount() uint64 { return c.nBlocked.Load() }

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the connection ended: nil while it is open, ErrClosed after
// Close, an *amqp.Error when the server closed it, an I/O error otherwise.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Conn) heartbeats(d time.Duration) {
	t := time.NewTicker(d / 2)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			c.write(amqp.AppendHeartbeat(nil))
		}
	}
}

// Close sends connection.close, waits (at most 5s) for close-ok and
// closes the socket. Unflushed publishes are lost: Flush first.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closing || c.err != nil {
		c.mu.Unlock()
		<-c.done
		return nil
	}
	c.closing = true
	c.mu.Unlock()
	// A write blocked by a server that stopped reading fails too.
	c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if err := c.writeMethod(0, &amqp.ConnectionClose{ReplyCode: amqp.ReplySuccess, ReplyText: "bye"}); err == nil {
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
		}
	}
	c.nc.Close()
	<-c.done
	return nil
}

// Abort closes the socket at once, without the closing handshake:
// blocked writes and waits fail with ErrClosed.
func (c *Conn) Abort() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.nc.Close()
	<-c.done
}

func (c *Conn) channel(id uint16) *Channel {
	cs := *c.chans.Load()
	if int(id) < len(cs) {
		return cs[id]
	}
	return nil
}

func (c *Conn) setChannel(id uint16, ch *Channel) {
	old := *c.chans.Load()
	n := max(len(old), int(id)+1)
	cs := make([]*Channel, n)
	copy(cs, old)
	cs[id] = ch
	c.chans.Store(&cs)
}

func (c *Conn) readLoop() {
	err := c.readFrames()
	c.mu.Lock()
	if c.closing && (err == nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)) {
		err = ErrClosed
	}
	if err == nil {
		err = io.EOF
	}
	c.err = err
	c.mu.Unlock()
	c.nc.Close()
	for _, ch := range *c.chans.Load() {
		if ch != nil {
			ch.shutdown(err)
		}
	}
	close(c.done)
}

func (c *Conn) readFrames() error {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return err
		}
		if f.Channel == 0 {
			switch f.Type {
			case amqp.FrameHeartbeat:
				continue
			case amqp.FrameMethod:
				done, err := c.connMethod(f.Payload)
				if done || err != nil {
					return err
				}
				continue
			default:
				return fmt.Errorf("perfclient: frame type %d on channel 0", f.Type)
			}
		}
		ch := c.channel(f.Channel)
		if ch == nil {
			continue // a channel we closed; late frames are dropped
		}
		if err := ch.frame(f); err != nil {
			return err
		}
	}
}

// connMethod handles a method on channel 0; done reports the end of the
// connection.
func (c *Conn) connMethod(payload []byte) (done bool, err error) {
	m, err := amqp.DecodeServerMethod(payload)
	if err != nil {
		return true, err
	}
	switch m := m.(type) {
	case *amqp.ConnectionClose:
		c.write(amqp.AppendMethodFrame(nil, 0, &amqp.ConnectionCloseOk{}))
		return true, closeError(m.ReplyCode, m.ReplyText, m.FailingClassID, m.FailingMethodID, true)
	case *amqp.ConnectionCloseOk:
		return true, nil
	case *amqp.ConnectionBlocked:
		c.blocked.Store(true)
		c.nBlocked.Add(1)
	case *amqp.ConnectionUnblocked:
		c.blocked.Store(false)
	}
	return false, nil
}

// Channel opens a new channel.
func (c *Conn) Channel() (*Channel, error) {
	c.mu.Lock()
	if c.err != nil || c.closing {
		err := c.err
		c.mu.Unlock()
		if err == nil {
			err = ErrClosed
		}
		return nil, err
	}
	if c.nextID >= c.chanMax {
		c.mu.Unlock()
		return nil, errors.New("perfclient: no free channel id")
	}
	c.nextID++
	ch := newChannel(c, c.nextID)
	c.setChannel(ch.id, ch)
	c.mu.Unlock()
	if _, err := ch.call(&amqp.ChannelOpen{}); err != nil {
		return nil, err
	}
	return ch, nil
}

func (c *Conn) forget(id uint16) {
	c.mu.Lock()
	c.setChannel(id, nil)
	c.mu.Unlock()
}

var be = binary.BigEndian

// itoa is strconv.Itoa, shorter.
func itoa(n int) string { return strconv.Itoa(n) }
