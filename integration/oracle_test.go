package integration

// Shared helpers for the error and bad-input tests: the RabbitMQ oracle
// (reachability, users and vhosts via rabbitmqctl), targets that let one
// scenario run against Warren and RabbitMQ alike, and a raw AMQP client
// that speaks frames over a plain TCP socket.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/warrentest"
)

// rabbitURL returns the URL of the RabbitMQ oracle, or "" (after logging
// why) when it is not reachable. Under CI=true it must be reachable.
func rabbitURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("WARREN_RABBITMQ_URL")
	if u == "" {
		u = "amqp://guest:guest@127.0.0.1:5672/"
	}
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatalf("WARREN_RABBITMQ_URL: %v", err)
	}
	nc, err := net.DialTimeout("tcp", pu.Host, 2*time.Second)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("RabbitMQ oracle %s not reachable under CI=true: %v", pu.Host, err)
		}
		t.Logf("RabbitMQ oracle %s not reachable (%v): skipping the differential comparison; set WARREN_RABBITMQ_URL to enable it", pu.Host, err)
		return ""
	}
	nc.Close()
	return u
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// target is one broker a scenario runs against.
type target struct {
	kind   string // "warren" or "rabbitmq"
	url    string // guest URL on vhost "/"
	addr   string // host:port
	base   string // unique per run
	prefix string // unique per scenario (base-N): every name a scenario creates starts with it

	warren *warrentest.Broker // nil for RabbitMQ

	*targetRun // shared by every scenario's view of the target (scenario)
}

// targetRun is what a run creates on a target, shared by the views that
// parallel scenarios take of it.
type targetRun struct {
	mu       sync.Mutex
	users    map[string]bool
	vhosts   map[string]bool
	cleanups []func()
}

// scenario returns a view of tg whose names start with prefix, for a
// scenario that may run alongside others.
func (tg *target) scenario(prefix string) *target {
	c := *tg
	c.prefix = prefix
	return &c
}

func newWarrenTarget(t *testing.T) *target {
	b := warrentest.Start(t)
	return &target{kind: "warren", url: b.URL(), addr: b.Addr(), base: "werr-" + randomSuffix(), warren: b, targetRun: &targetRun{}}
}

func newRabbitTarget(t *testing.T, u string) *target {
	pu, _ := url.Parse(u)
	return &target{kind: "rabbitmq", url: u, addr: pu.Host, base: "werr-" + randomSuffix(), targetRun: &targetRun{}}
}

// name returns a unique resource name for this run.
func (tg *target) name(s string) string { return tg.prefix + "-" + s }

// urlFor returns the URL for another user and vhost.
func (tg *target) urlFor(user, pass, vhost string) string {
	return fmt.Sprintf("amqp://%s:%s@%s/%s", url.PathEscape(user), url.PathEscape(pass), tg.addr, url.PathEscape(vhost))
}

// close removes what the target created on the broker (RabbitMQ only
// keeps state across runs).
func (tg *target) close() {
	tg.mu.Lock()
	cs := tg.cleanups
	tg.cleanups = nil
	tg.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

func rabbitmqctl(args ...string) error {
	out, err := exec.Command("rabbitmqctl", append([]string{"-q"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("rabbitmqctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// ensureUser creates user (password = user) with the given permissions on
// vhost "/", once per target.
func (tg *target) ensureUser(t *testing.T, user string, p broker.Permission) {
	t.Helper()
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if tg.users == nil {
		tg.users = map[string]bool{}
	}
	if tg.users[user] {
		return
	}
	if tg.warren != nil {
		bk := tg.warren.Broker()
		bk.PutUser(user, user, nil)
		if err := bk.SetPermissions("/", user, p); err != nil {
			t.Fatal(err)
		}
	} else {
		if err := rabbitmqctl("add_user", user, user); err != nil {
			t.Fatal(err)
		}
		tg.cleanups = append(tg.cleanups, func() { _ = rabbitmqctl("delete_user", user) })
		if err := rabbitmqctl("set_permissions", "-p", "/", user, p.Configure, p.Write, p.Read); err != nil {
			t.Fatal(err)
		}
	}
	tg.users[user] = true
}

// ensureVHost creates a vhost nobody has permissions on, once per target.
func (tg *target) ensureVHost(t *testing.T, name string) {
	t.Helper()
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if tg.vhosts == nil {
		tg.vhosts = map[string]bool{}
	}
	if tg.vhosts[name] {
		return
	}
	if tg.warren != nil {
		tg.warren.Broker().AddVHost(name)
	} else {
		if err := rabbitmqctl("add_vhost", name); err != nil {
			t.Fatal(err)
		}
		tg.cleanups = append(tg.cleanups, func() { _ = rabbitmqctl("delete_vhost", name) })
	}
	tg.vhosts[name] = true
}

// --- raw client ---

// rawConn is an AMQP client that writes frames byte by byte, for input no
// client library would produce.
type rawConn struct {
	t  testing.TB
	nc net.Conn
	r  *amqp.FrameReader
}

func rawDial(t testing.TB, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{t: t, nc: nc, r: amqp.NewFrameReader(nc, 64<<10)}
}

func (c *rawConn) write(b []byte) error {
	_, err := c.nc.Write(b)
	return err
}

func (c *rawConn) sendMethod(ch uint16, m amqp.Method) error {
	return c.write(amqp.AppendMethodFrame(nil, ch, m))
}

// readMethod returns the next method frame, skipping heartbeats.
func (c *rawConn) readMethod() (uint16, amqp.Method, error) {
	for {
		f, err := c.r.ReadFrame()
		if err != nil {
			return 0, nil, err
		}
		if f.Type != amqp.FrameMethod {
			continue
		}
		m, err := amqp.DecodeServerMethod(f.Payload)
		return f.Channel, m, err
	}
}

// handshake opens the connection as guest on vhost "/", negotiating
// channelMax and frameMax (0: accept the server's).
func (c *rawConn) handshake(channelMax uint16, frameMax uint32) error {
	return c.handshakeWith(rawLogin{user: "guest", pass: "guest", vhost: "/", channelMax: channelMax, frameMax: frameMax})
}

type rawLogin struct {
	user, pass, vhost string
	channelMax        uint16
	frameMax          uint32
	// authFailureClose advertises the authentication_failure_close
	// capability: the server then reports a failed login with
	// connection.close instead of dropping the socket.
	authFailureClose bool
}

func (c *rawConn) handshakeWith(l rawLogin) error {
	if err := c.write(amqp.ProtocolHeader); err != nil {
		return err
	}
	_, m, err := c.readMethod()
	if err != nil {
		return err
	}
	if _, ok := m.(*amqp.ConnectionStart); !ok {
		return fmt.Errorf("want connection.start, got %s", m.Name())
	}
	props := amqp.Table{"product": "warren-rawtest"}
	if l.authFailureClose {
		props["capabilities"] = amqp.Table{"authentication_failure_close": true}
	}
	if err := c.sendMethod(0, &amqp.ConnectionStartOk{ClientProperties: props,
		Mechanism: "PLAIN", Response: "\x00" + l.user + "\x00" + l.pass, Locale: "en_US"}); err != nil {
		return err
	}
	_, m, err = c.readMethod()
	if err != nil {
		return err
	}
	tune, ok := m.(*amqp.ConnectionTune)
	if !ok {
		return &unexpectedMethod{m}
	}
	channelMax, frameMax := l.channelMax, l.frameMax
	if channelMax == 0 {
		channelMax = tune.ChannelMax
	}
	if frameMax == 0 {
		frameMax = tune.FrameMax
	}
	if err := c.sendMethod(0, &amqp.ConnectionTuneOk{ChannelMax: channelMax, FrameMax: frameMax, Heartbeat: 0}); err != nil {
		return err
	}
	c.r.SetMaxFrameSize(0)
	if err := c.sendMethod(0, &amqp.ConnectionOpen{VirtualHost: l.vhost}); err != nil {
		return err
	}
	_, m, err = c.readMethod()
	if err != nil {
		return err
	}
	if _, ok := m.(*amqp.ConnectionOpenOk); !ok {
		return &unexpectedMethod{m}
	}
	return nil
}

// unexpectedMethod is a handshake reply other than the next step, such as
// a connection.close.
type unexpectedMethod struct{ m amqp.Method }

func (e *unexpectedMethod) Error() string { return "unexpected " + e.m.Name() }

// openChannel opens channel id and waits for open-ok.
func (c *rawConn) openChannel(id uint16) error {
	if err := c.sendMethod(id, &amqp.ChannelOpen{}); err != nil {
		return err
	}
	ch, m, err := c.readMethod()
	if err != nil {
		return err
	}
	if _, ok := m.(*amqp.ChannelOpenOk); !ok || ch != id {
		return fmt.Errorf("want channel.open-ok on %d, got %s on %d", id, m.Name(), ch)
	}
	return nil
}

// closeResult is what the server did after bad input.
type closeResult struct {
	Level          string // "connection", "channel", or "dropped" (socket closed without a close method)
	Code           uint16
	Text           string
	Class, Method  uint16
	Err            error // why the read ended, for "dropped"
	UnexpectedSeen []string
}

func (r closeResult) String() string {
	if r.Level == "dropped" {
		if errors.Is(r.Err, io.EOF) || errors.Is(r.Err, io.ErrUnexpectedEOF) || strings.Contains(fmt.Sprint(r.Err), "reset by peer") {
			return "dropped"
		}
		var ne net.Error
		if errors.As(r.Err, &ne) && ne.Timeout() {
			return "no reply (timeout)"
		}
		return fmt.Sprintf("dropped (%v)", r.Err)
	}
	return fmt.Sprintf("%s.close %d %q (%d.%d)", r.Level, r.Code, r.Text, r.Class, r.Method)
}

// awaitClose reads until the server closes the channel or connection,
// answering with close-ok.
func (c *rawConn) awaitClose() closeResult {
	c.nc.SetReadDeadline(time.Now().Add(3 * time.Second))
	var res closeResult
	for {
		ch, m, err := c.readMethod()
		if err != nil {
			var ae *amqp.Error
			if errors.As(err, &ae) {
				// A frame we cannot decode: record and keep reading.
				res.UnexpectedSeen = append(res.UnexpectedSeen, err.Error())
				continue
			}
			res.Level, res.Err = "dropped", err
			return res
		}
		switch m := m.(type) {
		case *amqp.ConnectionClose:
			_ = c.sendMethod(0, &amqp.ConnectionCloseOk{})
			res.Level, res.Code, res.Text, res.Class, res.Method = "connection", m.ReplyCode, m.ReplyText, m.FailingClassID, m.FailingMethodID
			return res
		case *amqp.ChannelClose:
			_ = c.sendMethod(ch, &amqp.ChannelCloseOk{})
			res.Level, res.Code, res.Text, res.Class, res.Method = "channel", m.ReplyCode, m.ReplyText, m.FailingClassID, m.FailingMethodID
			return res
		default:
			res.UnexpectedSeen = append(res.UnexpectedSeen, m.Name())
		}
	}
}

// awaitEOF reports whether the server closes the socket within d.
func (c *rawConn) awaitEOF(d time.Duration) error {
	c.nc.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 4096)
	for {
		_, err := c.nc.Read(buf)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "reset") {
				return nil
			}
			return err
		}
	}
}
