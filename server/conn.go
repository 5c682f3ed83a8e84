package server

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

// Output buffering: deliveries stop being appended to a connection's
// output once this much is pending, and resume once the writer drained it.
// Other output (replies, returns, confirms) is bounded by the reader: it
// stops reading from the client while this much output is pending, as
// RabbitMQ's flow control does, and resumes once the writer took it.
const outHighWater = 1 << 20

// Version is the server version advertised in connection.start.
const Version = "0.1.0"

// conn is one client connection. The reader goroutine (run) owns the
// socket's read side, the channel table and all protocol state; the writer
// goroutine owns the write side. Other goroutines only append to out.
type conn struct {
	s  *Server
	nc net.Conn
	id uint64
	r  *amqp.FrameReader

	// Set during the handshake, then read-only.
	user       *broker.User
	direct     string // a direct connection's user (direct.go): no password
	vhost      *broker.VHost
	frameMax   uint32
	channelMax uint16
	heartbeat  time.Duration
	clientCaps amqp.Table
	clientName string

	// channels is written by the reader goroutine only, under chMu, so
	// that the management API can list them (info.go).
	channels map[uint16]*channel
	chMu     sync.Mutex
	lastCh   *channel // the channel of the last content frame (reader goroutine; chanByID)

	// For the management API (info.go): set once during the handshake
	// (under chMu), or counted atomically.
	connectedAt time.Time
	authMech    string
	clientProps amqp.Table
	recvOct     atomic.Uint64
	sendOct     atomic.Uint64
	sendCnt     atomic.Uint64

	outMu        sync.Mutex
	out          []byte
	outSignal    chan struct{}
	outFull      atomic.Bool     // len(out) >= outHighWater after a send; cleared by the writer (under outMu)
	outDrained   chan struct{}   // signalled when the writer clears outFull
	kicks        []*broker.Queue // queues to Dispatch once output drained
	confirmDirty []*channel      // channels with sync completions to confirm (confirms.go)
	writerErr    error
	writerPanics int // writer goroutine only

	closing    atomic.Bool // connection.close sent; waiting for close-ok
	panicked   atomic.Bool // a panic was recovered (panics.go)
	closeSent  atomic.Bool
	drain      atomic.Pointer[string] // drainClose's reason (drain.go)
	readFrames atomic.Uint64
	handling   atomic.Bool   // the reader is handling a frame (not reading)
	done       chan struct{} // closed when the reader stops
	writerDone chan struct{}
	blocked    bool // connection.blocked sent (reader goroutine only)
	released   bool // release ran (reader goroutine only)
	releasing  bool // release started (reader goroutine only)
	// readPaused is set while the reader waits out a resource alarm: it
	// reads nothing then, so missed heartbeats are not counted (as
	// RabbitMQ pauses its heartbeat monitor).
	readPaused atomic.Bool
	closeCh    chan struct{} // closed by closeConn, wakes a reader held by an alarm
}

func newConn(s *Server, nc net.Conn) *conn {
	return &conn{s: s, nc: nc, id: s.cfg.ConnIDBase + s.nextConn.Add(1), channels: map[uint16]*channel{}, connectedAt: time.Now(),
		outSignal: make(chan struct{}, 1), outDrained: make(chan struct{}, 1), done: make(chan struct{}), writerDone: make(chan struct{}), closeCh: make(chan struct{}),
		frameMax: s.cfg.FrameMax, channelMax: s.cfg.ChannelMax}
}

// send appends frames to the output under the output lock and wakes the writer.
func (c *conn) send(fn func([]byte) []byte) {
	c.appendOut(fn)
	c.wake()
}

// appendBounded is appendOut unless limit bytes of output are pending
// already; it reports whether it appended.
func (c *conn) appendBounded(limit int, fn func([]byte) []byte) bool {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if len(c.out) >= limit {
		return false
	}
	c.out = fn(c.out)
	if len(c.out) >= outHighWater && !c.outFull.Load() {
		c.outFull.Store(true)
	}
	return true
}

// appendOut appends to the output under outMu (released by a defer: fn
// encodes frames, and a panic in it must not leave the lock held).
func (c *conn) appendOut(fn func([]byte) []byte) {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	c.out = fn(c.out)
	if len(c.out) >= outHighWater && !c.outFull.Load() {
		c.outFull.Store(true)
	}
}

// waitOutput holds the reader while the connection's output is over
// outHighWater (issue 11 item 9): a client that does not read what it
// causes (basic.return of unroutable mandatory publishes, confirms,
// replies) is not read from either, so its output stays bounded instead
// of growing with every frame it sends. Reading resumes once the writer
// took the output; heartbeats are not counted meanwhile.
func (c *conn) waitOutput() {
	c.readPaused.Store(true)
	defer c.readPaused.Store(false)
	for c.outFull.Load() {
		select {
		case <-c.outDrained:
		case <-c.writerDone:
			return
		case <-c.closeCh: // a forced close: go read the close-ok
			return
		}
	}
}

func (c *conn) wake() {
	select {
	case c.outSignal <- struct{}{}:
	default:
	}
}

func (c *conn) sendMethod(ch uint16, m amqp.Method) {
	c.send(func(b []byte) []byte { return amqp.AppendMethodFrame(b, ch, m) })
}

func (c *conn) run() {
	defer c.s.removeConn(c)
	defer c.nc.Close()
	// Until tune-ok, frames are limited to frame_min_size, as in RabbitMQ.
	c.r = amqp.NewFrameReader(countingReader{c.nc, &c.recvOct}, 64<<10)
	c.nc.SetDeadline(time.Now().Add(c.s.cfg.HandshakeTimeout))
	go c.writeLoop()
	err := c.handshakeSafe()
	if err == nil {
		c.nc.SetDeadline(time.Time{})
		if c.drain.Load() != nil {
			// drainClose came during the handshake: the line above
			// cleared the deadline that was to wake the reader.
			c.nc.SetReadDeadline(time.Now())
		}
		err = c.readLoopSafe()
	}
	if errors.Is(err, errClientClose) {
		// The client asked to close: release everything first (as
		// RabbitMQ does, so that its exclusive queues are gone once it
		// sees close-ok), answer, and leave closing the socket to the
		// client (issue 11 item 13).
		c.releaseSafe()
		c.sendMethod(0, &amqp.ConnectionCloseOk{})
		c.s.removeConn(c)
		c.linger()
		err = nil
	}
	c.teardown(err)
}

// closeLinger bounds how long a connection waits, after its close-ok, for
// the client to close the socket: RabbitMQ's CLOSING_TIMEOUT, or the
// heartbeat timeout when it is shorter.
const closeLinger = 30 * time.Second

// linger waits until the client closes the socket after close-ok, as
// RabbitMQ does: a client such as amqp091-go that sees the socket close
// before it has taken in the close-ok reports an error (501 "EOF") for a
// clean close. Whatever the client sends meanwhile is discarded. Server
// shutdown ends the wait.
func (c *conn) linger() {
	d := closeLinger
	if hb := c.heartbeatInterval(); hb > 0 && hb < d {
		d = hb
	}
	c.nc.SetReadDeadline(time.Now().Add(d))
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-c.s.done():
			c.nc.SetReadDeadline(time.Now())
		case <-c.writerDone: // the writer failed: the socket is gone
			c.nc.SetReadDeadline(time.Now())
		case <-stop:
		}
	}()
	buf := make([]byte, 512)
	for {
		if _, err := c.nc.Read(buf); err != nil {
			return
		}
	}
}

// release frees everything the connection holds: unacked messages go back
// to their queues, consumers are cancelled, exclusive queues deleted. It
// runs on the reader goroutine and is idempotent.
func (c *conn) release() {
	for _, ch := range c.channels {
		ch.shutdown()
	}
	c.chMu.Lock()
	c.channels = nil
	c.lastCh = nil
	c.chMu.Unlock()
	if c.vhost != nil && !c.released {
		c.vhost.DeleteExclusive(c.id)
	}
	c.released = true
}

// teardown releases what the connection holds and stops the writer once
// it has flushed the output.
func (c *conn) teardown(err error) {
	c.releaseSafe()
	close(c.done)
	select {
	case <-c.writerDone:
	case <-time.After(5 * time.Second):
	}
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		c.s.log.Debug("connection closed", "conn", c.id, "remote", c.nc.RemoteAddr().String(), "err", err)
	}
}

func (c *conn) writeLoop() {
	defer close(c.writerDone)
	for c.writeLoopSafe() {
	}
}

// writeLoopSafe runs the writer and recovers a panic in it: the first one
// closes the connection with 541 and restarts the writer so that the
// connection.close goes out; a second one drops the socket. It reports
// whether the writer is to run again.
func (c *conn) writeLoopSafe() (again bool) {
	defer func() {
		if r := recover(); r != nil {
			e := c.recovered("writer", r)
			if c.writerPanics++; c.writerPanics == 1 {
				c.closeConn(e)
				again = true
				return
			}
			c.nc.Close()
		}
	}()
	c.writeLoopBody()
	return false
}

func (c *conn) writeLoopBody() {
	var spare []byte
	var tick <-chan time.Time
	if c.s.cfg.Heartbeat > 0 {
		// The negotiated interval is not known yet; tick often and decide.
		t := time.NewTicker(time.Second)
		defer t.Stop()
		tick = t.C
	}
	lastWrite := time.Now()
	lastRead, lastReadCount := time.Now(), uint64(0)
	for {
		final := false
		select {
		case <-c.outSignal:
		case <-c.done:
			final = true
		case now := <-tick:
			hb := c.heartbeatInterval()
			if hb <= 0 {
				continue
			}
			if n := c.readFrames.Load(); n != lastReadCount || c.readPaused.Load() || c.handling.Load() {
				lastReadCount, lastRead = n, now
			} else if now.Sub(lastRead) > 2*hb {
				c.s.log.Warn("missed heartbeats from client", "conn", c.id, "timeout", hb.String())
				c.nc.Close()
			}
			if now.Sub(lastWrite) >= hb/2 {
				c.send(amqp.AppendHeartbeat)
			}
			continue
		}
		c.flushQueuedConfirms()
		c.outMu.Lock()
		buf := c.out
		c.out = spare[:0]
		kicks := c.kicks
		c.kicks = nil
		if c.outFull.Load() {
			c.outFull.Store(false)
			select {
			case c.outDrained <- struct{}{}:
			default:
			}
		}
		c.outMu.Unlock()
		if testHookWrite != nil && len(buf) > 0 {
			testHookWrite(c.clientName)
		}
		if len(buf) > 0 && c.writerErr == nil {
			c.nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
			c.sendOct.Add(uint64(len(buf)))
			c.sendCnt.Add(1)
			if _, err := c.nc.Write(buf); err != nil {
				c.writerErr = err
				c.nc.Close()
			}
			lastWrite = time.Now()
		}
		if cap(buf) <= 4*outHighWater {
			spare = buf
		} else {
			spare = nil
		}
		for _, q := range kicks {
			q.Dispatch()
		}
		if final {
			c.outMu.Lock()
			empty := len(c.out) == 0
			c.outMu.Unlock()
			if empty || c.writerErr != nil {
				return
			}
		}
	}
}

func (c *conn) heartbeatInterval() time.Duration {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	return c.heartbeat
}

// backlogged reports, with outMu held, whether deliveries should pause; if
// so q is remembered and dispatched once the writer drained the output.
func (c *conn) backloggedLocked(q *broker.Queue) bool {
	if len(c.out) < outHighWater {
		return false
	}
	if !slices.Contains(c.kicks, q) {
		c.kicks = append(c.kicks, q)
	}
	return true
}

// readMethod reads the next frame during the handshake and requires a
// method frame on channel 0.
func (c *conn) readMethod() (amqp.Method, error) {
	for {
		f, err := c.r.ReadFrame()
		if err != nil {
			return nil, err
		}
		c.readFrames.Add(1)
		if f.Type == amqp.FrameHeartbeat {
			continue
		}
		if f.Type != amqp.FrameMethod || f.Channel != 0 {
			return nil, amqp.ConnErrorf(amqp.CommandInvalid, "expected a method frame on channel 0 during the handshake")
		}
		return amqp.DecodeMethod0(f.Payload)
	}
}

// protocolHeader09 is the AMQP 0-9 header ("AMQP", class 1, instance 1,
// version 0-9) that some long-lived clients send; RabbitMQ answers it
// with 0-9-1's connection.start and speaks 0-9-1.
const protocolHeader09 = "AMQP\x01\x01\x00\x09"

func (c *conn) handshake() error {
	if h, err := c.r.ReadProtocolHeader(); err != nil {
		if !errors.Is(err, amqp.ErrProtocolHeader) {
			return err
		}
		if string(h[:]) != protocolHeader09 {
			// Answer any other header with the version we speak, then
			// close, as RabbitMQ. (RabbitMQ also speaks 0-8 to
			// "AMQP 1 1 8 0" and "AMQP 1 1 9 1"; Warren does not, and
			// answers those with the 0-9-1 header too.)
			c.send(func(b []byte) []byte { return append(b, amqp.ProtocolHeader...) })
			return errors.New("bad protocol header")
		}
		// The 0-9 header: RabbitMQ treats it as 0-9-1, and so does Warren.
	}
	c.sendMethod(0, &amqp.ConnectionStart{
		VersionMajor:     0,
		VersionMinor:     9,
		ServerProperties: serverProperties(c.s.broker.ClusterName()),
		Mechanisms:       "PLAIN AMQPLAIN",
		Locales:          "en_US",
	})
	m, err := c.readMethod()
	if err != nil {
		return c.handshakeErr(err)
	}
	so, ok := m.(*amqp.ConnectionStartOk)
	if !ok {
		return c.handshakeErr(amqp.ConnErrorf(amqp.CommandInvalid, "expected 'connection.start_ok', got '%s'", m.Name()))
	}
	c.chMu.Lock()
	c.clientProps, c.authMech = so.ClientProperties, so.Mechanism
	c.chMu.Unlock()
	c.clientCaps, _ = so.ClientProperties["capabilities"].(amqp.Table)
	c.clientName, _ = so.ClientProperties["connection_name"].(string)
	if err := c.authenticate(so.Mechanism, so.Response); err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.AccessRefused && !c.clientCap("authentication_failure_close") {
			// As RabbitMQ: a client that cannot take connection.close
			// here sees the socket close.
			return err
		}
		return c.handshakeErr(err)
	}
	hb := uint16(0)
	if c.s.cfg.Heartbeat > 0 {
		hb = uint16(c.s.cfg.Heartbeat / time.Second)
	}
	c.sendMethod(0, &amqp.ConnectionTune{ChannelMax: c.s.cfg.ChannelMax, FrameMax: c.s.cfg.FrameMax, Heartbeat: hb})
	m, err = c.readMethod()
	if err != nil {
		return c.handshakeErr(err)
	}
	to, ok := m.(*amqp.ConnectionTuneOk)
	if !ok {
		return c.handshakeErr(amqp.ConnErrorf(amqp.CommandInvalid, "expected 'connection.tune_ok', got '%s'", m.Name()))
	}
	if err := c.negotiate(to); err != nil {
		return c.handshakeErr(err)
	}
	m, err = c.readMethod()
	if err != nil {
		return c.handshakeErr(err)
	}
	op, ok := m.(*amqp.ConnectionOpen)
	if !ok {
		return c.handshakeErr(amqp.ConnErrorf(amqp.CommandInvalid, "expected 'connection.open', got '%s'", m.Name()))
	}
	v := c.s.broker.VHost(op.VirtualHost)
	if v == nil {
		return c.handshakeErr(amqp.ConnErrorf(amqp.NotAllowed, "vhost %s not found", op.VirtualHost).WithMethod(10, 40))
	}
	if err := c.checkConnLimits(v); err != nil {
		return c.handshakeErr(err.(*amqp.Error).WithMethod(10, 40))
	}
	if !c.s.broker.CanAccessVHost(c.user.Name, v.Name) {
		return c.handshakeErr(amqp.ConnErrorf(amqp.NotAllowed, "access to vhost '%s' refused for user '%s'", v.Name, c.user.Name).WithMethod(10, 40))
	}
	c.chMu.Lock()
	c.vhost = v
	c.chMu.Unlock()
	c.sendMethod(0, &amqp.ConnectionOpenOk{})
	return nil
}

func (c *conn) negotiate(to *amqp.ConnectionTuneOk) error {
	max := c.s.cfg.FrameMax
	switch {
	case to.FrameMax != 0 && to.FrameMax < amqp.FrameMinSize:
		return amqp.ConnErrorf(amqp.NotAllowed, "frame_max=%d < %d min size", to.FrameMax, amqp.FrameMinSize)
	case to.FrameMax > max:
		return amqp.ConnErrorf(amqp.NotAllowed, "frame_max=%d > %d max size", to.FrameMax, max)
	case to.FrameMax != 0:
		max = to.FrameMax
	}
	if to.ChannelMax > c.s.cfg.ChannelMax {
		return amqp.ConnErrorf(amqp.NotAllowed, "negotiated channel_max = %d is higher than the maximum allowed value (%d)", to.ChannelMax, c.s.cfg.ChannelMax)
	}
	c.frameMax = max
	c.r.SetMaxFrameSize(max)
	if to.ChannelMax != 0 {
		c.channelMax = to.ChannelMax
	}
	c.outMu.Lock()
	c.heartbeat = time.Duration(to.Heartbeat) * time.Second
	c.outMu.Unlock()
	return nil
}

// handshakeErr answers a handshake failure. A protocol error gets a
// connection.close (RabbitMQ sends one for authentication failures since
// clients advertise authentication_failure_close), and the socket closes
// after a short wait for close-ok.
func (c *conn) handshakeErr(err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		c.sendMethod(0, &amqp.ConnectionClose{ReplyCode: ae.Code, ReplyText: truncate(ae.Text), FailingClassID: ae.ClassID, FailingMethodID: ae.MethodID})
		c.nc.SetReadDeadline(time.Now().Add(time.Second))
		for {
			m, rerr := c.readMethod()
			if rerr != nil {
				break
			}
			if _, ok := m.(*amqp.ConnectionCloseOk); ok {
				break
			}
		}
	}
	return err
}

func (c *conn) authenticate(mechanism string, response string) error {
	var user, pass string
	switch mechanism {
	case "PLAIN":
		parts := strings.Split(response, "\x00")
		if len(parts) != 3 {
			return amqp.ConnErrorf(amqp.AccessRefused, "Login was refused using authentication mechanism PLAIN. For details see the broker logfile.")
		}
		user, pass = parts[1], parts[2]
	case "AMQPLAIN":
		raw := make([]byte, 4+len(response))
		binary.BigEndian.PutUint32(raw, uint32(len(response)))
		copy(raw[4:], response)
		t, _, err := amqp.DecodeTable(raw)
		if err != nil {
			return amqp.ConnErrorf(amqp.AccessRefused, "Login was refused using authentication mechanism AMQPLAIN. For details see the broker logfile.")
		}
		user, _ = t["LOGIN"].(string)
		pass, _ = t["PASSWORD"].(string)
	default:
		return amqp.ConnErrorf(amqp.CommandInvalid, "unknown authentication mechanism '%s'", mechanism)
	}
	if c.direct != "" {
		u := c.s.broker.User(c.direct)
		if u == nil {
			return amqp.ConnErrorf(amqp.AccessRefused, "Login was refused using authentication mechanism %s. For details see the broker logfile.", mechanism)
		}
		c.user = u
		return nil
	}
	u, ok := c.s.broker.Authenticate(user, pass)
	if !ok {
		return amqp.ConnErrorf(amqp.AccessRefused, "Login was refused using authentication mechanism %s. For details see the broker logfile.", mechanism)
	}
	if slices.Contains(c.s.cfg.LoopbackUsers, user) && !isLoopback(c.nc.RemoteAddr()) {
		c.s.log.Warn("user can only log in via localhost", "user", user)
		return amqp.ConnErrorf(amqp.AccessRefused, "Login was refused using authentication mechanism %s. For details see the broker logfile.", mechanism)
	}
	c.user = u
	return nil
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

func serverProperties(clusterName string) amqp.Table {
	return amqp.Table{
		"product":      "Warren",
		"version":      Version,
		"platform":     "Go",
		"copyright":    "Warren authors",
		"information":  "Licensed under the MPL 2.0",
		"cluster_name": clusterName,
		"capabilities": amqp.Table{
			"publisher_confirms":           true,
			"exchange_exchange_bindings":   true,
			"basic.nack":                   true,
			"consumer_cancel_notify":       true,
			"connection.blocked":           true,
			"consumer_priorities":          true,
			"authentication_failure_close": true,
			"per_consumer_qos":             true,
			"direct_reply_to":              true,
		},
	}
}

func (c *conn) clientCap(name string) bool {
	b, _ := c.clientCaps[name].(bool)
	return b
}

// truncate fits a reply-text into a shortstr as RabbitMQ does: texts
// over 255 bytes are cut to 252 and end in "...".
func truncate(s string) string {
	if len(s) > 255 {
		return s[:252] + "..."
	}
	return s
}

// closeConn starts the connection close handshake with a hard error.
func (c *conn) closeConn(e *amqp.Error) {
	if c.closeSent.Swap(true) {
		return
	}
	c.closing.Store(true)
	close(c.closeCh)
	c.sendMethod(0, &amqp.ConnectionClose{ReplyCode: e.Code, ReplyText: truncate(e.Text), FailingClassID: e.ClassID, FailingMethodID: e.MethodID})
	// Wait for close-ok at most a few seconds, then drop the socket.
	c.nc.SetReadDeadline(time.Now().Add(3 * time.Second))
}

// forceClose is called from other goroutines (server shutdown, management).
func (c *conn) forceClose(reason string) {
	c.closeConn(amqp.ConnErrorf(amqp.ConnectionForced, "%s", reason))
}

// readLoop reads frames until the connection closes. It returns nil after
// a clean close handshake.
func (c *conn) readLoop() error {
	// Frames are counted locally and published to readFrames (which the
	// heartbeat monitor and the management API read) once per read batch:
	// no locked instruction per frame.
	var frames uint64
	defer func() { c.readFrames.Add(frames) }()
	for {
		if c.r.Buffered() == 0 {
			if frames != 0 {
				c.readFrames.Add(frames)
				frames = 0
			}
			c.flushConfirms()
		}
		if c.outFull.Load() {
			c.waitOutput()
		}
		f, err := c.r.ReadFrame()
		if err != nil {
			if r := c.drain.Load(); r != nil && !c.closing.Load() && isTimeout(err) {
				c.finishDrain(*r) // woken by drainClose (drain.go)
				continue
			}
			var ae *amqp.Error
			if errors.As(err, &ae) && !c.closing.Load() {
				c.closeConn(ae)
				continue
			}
			return err
		}
		frames++
		// While a frame is handled the reader is busy, not waiting for
		// the client: a handler that waits (a quorum queue's leader, a
		// full pending list, a remote call) must not read as missed
		// heartbeats (RabbitMQ pauses its heartbeat monitor likewise
		// while the reader is blocked).
		c.handling.Store(true)
		err = c.handleFrameSafe(f)
		c.handling.Store(false)
		if err != nil {
			if errors.Is(err, errClosed) {
				return nil
			}
			if errors.Is(err, errClientClose) {
				return err
			}
			var ae *amqp.Error
			if errors.As(err, &ae) {
				if ae.Hard {
					c.closeConn(ae)
					continue
				}
			}
			return err
		}
	}
}

var errClosed = errors.New("connection closed")

// errClientClose is the client's connection.close: the reader stops, and
// run answers close-ok once the connection's resources are released.
var errClientClose = errors.New("connection closed by the client")

func (c *conn) flushConfirms() {
	for _, ch := range c.channels {
		ch.flushConfirms()
		ch.flushStats()
	}
}

// chanByID returns the open channel id (nil if none), remembering the last
// one: a publish is three frames on one channel, an ack follows on the
// same, and the map lookup was 6% of the CPU of a publish-deliver profile.
func (c *conn) chanByID(id uint16) *channel {
	if ch := c.lastCh; ch != nil && ch.id == id {
		return ch
	}
	ch := c.channels[id]
	if ch != nil {
		c.lastCh = ch
	}
	return ch
}

func (c *conn) handleFrame(f amqp.Frame) error {
	if c.closing.Load() {
		// After connection.close only close and close-ok matter.
		if f.Type == amqp.FrameMethod && f.Channel == 0 {
			m, err := amqp.DecodeMethod(f.Payload)
			if err != nil {
				return nil
			}
			switch m.(type) {
			case *amqp.ConnectionCloseOk:
				return errClosed
			case *amqp.ConnectionClose:
				c.sendMethod(0, &amqp.ConnectionCloseOk{})
				return errClosed
			}
		}
		return nil
	}
	switch f.Type {
	case amqp.FrameHeartbeat:
		if f.Channel != 0 {
			return amqp.UnexpectedFrameError(f)
		}
		return nil
	case amqp.FrameMethod:
		// basic.publish decodes into the channel's own struct, reusing
		// the exchange and routing key strings (amqp/fastpath.go).
		if args, ok := amqp.IsBasicPublish(f.Payload); ok && f.Channel != 0 {
			if ch := c.chanByID(f.Channel); ch != nil && !ch.closing {
				if err := ch.pubScratch.DecodeReuse(args); err != nil {
					return err
				}
				return ch.handleMethod(&ch.pubScratch)
			}
		}
		decode := amqp.DecodeMethod
		if f.Channel == 0 {
			decode = amqp.DecodeMethod0
		}
		m, err := decode(f.Payload)
		if err != nil {
			return err
		}
		if f.Channel == 0 {
			return c.handleConnMethod(m)
		}
		return c.handleChannelMethod(f.Channel, m)
	case amqp.FrameHeader, amqp.FrameBody:
		if f.Channel == 0 {
			return amqp.UnexpectedFrameError(f)
		}
		ch := c.chanByID(f.Channel)
		if ch == nil {
			// RabbitMQ's text for content on a channel that is not open.
			return amqp.ConnErrorf(amqp.UnexpectedFrame, "expected method frame, got non method frame instead")
		}
		return ch.handleContent(f)
	}
	return amqp.ConnErrorf(amqp.FrameError, "unknown frame type %d", f.Type)
}

func (c *conn) handleConnMethod(m amqp.Method) error {
	switch m.(type) {
	case *amqp.ConnectionClose:
		return errClientClose
	case *amqp.ConnectionCloseOk:
		return errClosed
	case *amqp.ConnectionBlocked, *amqp.ConnectionUnblocked:
		return nil
	case *amqp.ConnectionUpdateSecret:
		// Secrets that expire (OAuth tokens) are what update-secret is
		// for; with password users RabbitMQ's internal backend accepts any
		// new secret and keeps the connection's user, and so does Warren
		// (checked against RabbitMQ 3.10).
		c.sendMethod(0, &amqp.ConnectionUpdateSecretOk{})
		return nil
	}
	return amqp.ConnErrorf(amqp.ChannelError, "unexpected method in connection state running").WithMethod(m.ClassID(), m.MethodID())
}

func (c *conn) handleChannelMethod(id uint16, m amqp.Method) error {
	ch := c.chanByID(id)
	if ch == nil {
		if _, ok := m.(*amqp.ChannelOpen); !ok {
			return amqp.ConnErrorf(amqp.ChannelError, "expected 'channel.open'").WithMethod(m.ClassID(), m.MethodID())
		}
		// Like RabbitMQ, channel_max bounds how many channels are open,
		// not the channel numbers.
		if len(c.channels) >= int(c.channelMax) {
			return amqp.ConnErrorf(amqp.NotAllowed, "number of channels opened (%d) has reached the negotiated channel_max (%d)", len(c.channels), c.channelMax)
		}
		if err := c.checkChannelLimit(); err != nil {
			return err
		}
		c.chMu.Lock()
		c.channels[id] = newChannel(c, id)
		c.chMu.Unlock()
		c.sendMethod(id, &amqp.ChannelOpenOk{})
		return nil
	}
	return ch.handleMethod(m)
}

// waitAlarm blocks a publishing connection while a resource alarm is
// raised, as RabbitMQ blocks publishers: connection.blocked is sent once,
// nothing is read until every alarm clears, then connection.unblocked.
func (c *conn) waitAlarm() {
	c.readPaused.Store(true)
	defer c.readPaused.Store(false)
	for {
		alarms, changed := c.s.alarmState()
		if len(alarms) == 0 {
			if c.blocked {
				c.blocked = false
				if c.clientCap("connection.blocked") {
					c.sendMethod(0, &amqp.ConnectionUnblocked{})
				}
			}
			return
		}
		if !c.blocked {
			c.blocked = true
			if c.clientCap("connection.blocked") {
				slices.Sort(alarms)
				c.sendMethod(0, &amqp.ConnectionBlocked{Reason: "low on " + strings.Join(alarms, ", ")})
			}
		}
		select {
		case <-changed:
		case <-c.writerDone:
			return
		case <-c.closeCh: // shutdown or a forced close: go read the close-ok
			return
		}
	}
}
