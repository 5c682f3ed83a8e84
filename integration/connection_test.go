package integration

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	wire "github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/server"
	"github.com/warrenmq/warren/warrentest"
)

// userURL is the broker's URL for another user and vhost.
func userURL(addr, user, pass, vhost string) string {
	return (&url.URL{Scheme: "amqp", User: url.UserPassword(user, pass), Host: addr, Path: "/" + vhost, RawPath: "/" + url.PathEscape(vhost)}).String()
}

func TestSASLMechanisms(t *testing.T) {
	e := newEnv(t)
	w := e.warren()
	w.Broker().PutUser("alice", "s3cret", nil)
	if err := w.Broker().SetPermissions("/", "alice", broker.Permission{Configure: ".*", Write: ".*", Read: ".*"}); err != nil {
		t.Fatal(err)
	}
	u := "amqp://" + w.Addr() + "/"
	for _, tc := range []struct {
		mech       string
		user, pass string
		ok         bool
	}{
		{"PLAIN", "alice", "s3cret", true},
		{"PLAIN", "alice", "wrong", false},
		{"PLAIN", "nobody", "s3cret", false},
		{"AMQPLAIN", "alice", "s3cret", true},
		{"AMQPLAIN", "alice", "wrong", false},
		{"AMQPLAIN", "guest", "guest", true},
	} {
		t.Run(fmt.Sprintf("%s/%s/%s", tc.mech, tc.user, tc.pass), func(t *testing.T) {
			var auth amqp.Authentication = &amqp.PlainAuth{Username: tc.user, Password: tc.pass}
			if tc.mech == "AMQPLAIN" {
				auth = &amqp.AMQPlainAuth{Username: tc.user, Password: tc.pass}
			}
			c, err := amqp.DialConfig(u, amqp.Config{SASL: []amqp.Authentication{auth}})
			if !tc.ok {
				if err == nil {
					c.Close()
					t.Fatal("login succeeded, want it refused")
				}
				var ae *amqp.Error
				if !errors.Is(err, amqp.ErrCredentials) && !(errors.As(err, &ae) && ae.Code == amqp.AccessRefused) {
					t.Fatalf("got %v, want 403 ACCESS_REFUSED", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("login: %v", err)
			}
			defer c.Close()
			if _, err := openChannel(t, c).QueueDeclare("", false, true, true, false, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestVHostAccess(t *testing.T) {
	e := newEnv(t)
	w := e.warren()
	b := w.Broker()
	b.AddVHost("v1")
	b.AddVHost("v2")
	b.PutUser("alice", "pw", nil)
	if err := b.SetPermissions("v1", "alice", broker.Permission{Configure: ".*", Write: ".*", Read: ".*"}); err != nil {
		t.Fatal(err)
	}
	c, err := amqp.Dial(userURL(w.Addr(), "alice", "pw", "v1"))
	if err != nil {
		t.Fatalf("alice on v1: %v", err)
	}
	defer c.Close()
	// Queues are per vhost.
	ch := openChannel(t, c)
	if _, err := ch.QueueDeclare("shared-name", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if b.VHost("/").Queue("shared-name") != nil || b.VHost("v1").Queue("shared-name") == nil {
		t.Fatal("queue declared in v1 is not (only) in v1")
	}
	for _, vhost := range []string{"v2", "", "missing"} {
		_, err := amqp.Dial(userURL(w.Addr(), "alice", "pw", vhost))
		wantCode(t, err, amqp.NotAllowed)
	}
}

func TestPermissions(t *testing.T) {
	e := newEnv(t)
	w := e.warren()
	b := w.Broker()
	b.PutUser("alice", "pw", nil)
	// RabbitMQ's name for the default exchange in permission checks is amq.default.
	if err := b.SetPermissions("/", "alice", broker.Permission{
		Configure: "^alice-", Write: `^(alice-.*|amq\.default)$`, Read: "^(alice-.*|amq.direct)$",
	}); err != nil {
		t.Fatal(err)
	}
	admin := e.channel()
	e.queue(admin, "bob-q", nil)
	publishBody(t, admin, "", "bob-q", "for bob")
	c, err := amqp.Dial(userURL(w.Addr(), "alice", "pw", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch := openChannel(t, c)
	e.queue(ch, "alice-q", nil)
	e.exchange(ch, "alice-x", "fanout", nil)
	bind(t, ch, "alice-q", "", "alice-x", nil)
	bind(t, ch, "alice-q", "k", "amq.direct", nil)
	publishBody(t, ch, "alice-x", "", "via alice-x")
	publishBody(t, ch, "", "alice-q", "via default")
	consume(t, ch, "alice-q", "", false, nil)

	for _, tc := range []struct {
		name string
		op   func(ch *amqp.Channel) error
	}{
		{"declare queue", func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare("bob-q2", false, false, false, false, nil)
			return err
		}},
		{"declare exchange", func(ch *amqp.Channel) error {
			return ch.ExchangeDeclare("bob-x", "direct", false, false, false, false, nil)
		}},
		{"delete queue", func(ch *amqp.Channel) error {
			_, err := ch.QueueDelete("bob-q", false, false, false)
			return err
		}},
		{"bind from unreadable exchange", func(ch *amqp.Channel) error { return ch.QueueBind("alice-q", "", "amq.fanout", false, nil) }},
		{"bind unwritable queue", func(ch *amqp.Channel) error { return ch.QueueBind("bob-q", "", "alice-x", false, nil) }},
		{"publish to unwritable exchange", func(ch *amqp.Channel) error {
			if err := ch.Confirm(false); err != nil {
				return err
			}
			dc, err := ch.PublishWithDeferredConfirm("amq.direct", "k", false, false, amqp.Publishing{})
			if err != nil {
				return err
			}
			closed := ch.NotifyClose(make(chan *amqp.Error, 1))
			select {
			case <-dc.Done():
			case <-time.After(waitTimeout):
			}
			select {
			case err := <-closed:
				return err
			case <-time.After(waitTimeout):
				return nil
			}
		}},
		{"get from unreadable queue", func(ch *amqp.Channel) error {
			_, _, err := ch.Get("bob-q", false)
			return err
		}},
		{"consume from unreadable queue", func(ch *amqp.Channel) error {
			_, err := ch.Consume("bob-q", "", false, false, false, false, nil)
			return err
		}},
		{"purge unreadable queue", func(ch *amqp.Channel) error {
			_, err := ch.QueuePurge("bob-q", false)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, tc.op(openChannel(t, c)), amqp.AccessRefused)
		})
	}
	if m, _ := counts(t, admin, "bob-q"); m != 1 {
		t.Fatalf("bob-q: got %d messages, want 1", m)
	}
}

func TestGuestLoopbackOnly(t *testing.T) {
	ip := nonLoopbackIP(t)
	w := warrentest.Start(t, warrentest.WithConfig(func(c *server.Config) { c.AMQPAddr = "0.0.0.0:0" }))
	_, port, _ := net.SplitHostPort(w.Server().Addr().String())
	remote := net.JoinHostPort(ip.String(), port)
	local := net.JoinHostPort("127.0.0.1", port)

	if c, err := amqp.Dial(userURL(local, "guest", "guest", "")); err != nil {
		t.Fatalf("guest from loopback: %v", err)
	} else {
		c.Close()
	}
	_, err := amqp.Dial(userURL(remote, "guest", "guest", ""))
	if err == nil {
		t.Fatalf("guest from %s: login succeeded, want refused", ip)
	}
	var ae *amqp.Error
	if !errors.Is(err, amqp.ErrCredentials) && !(errors.As(err, &ae) && ae.Code == amqp.AccessRefused) {
		t.Fatalf("guest from %s: got %v, want 403 ACCESS_REFUSED", ip, err)
	}
	w.Broker().PutUser("remote", "pw", nil)
	w.Broker().SetPermissions("/", "remote", broker.Permission{Configure: ".*", Write: ".*", Read: ".*"})
	c, err := amqp.Dial(userURL(remote, "remote", "pw", ""))
	if err != nil {
		t.Fatalf("other user from %s: %v", ip, err)
	}
	c.Close()
}

func nonLoopbackIP(t *testing.T) net.IP {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skipf("cannot list interface addresses: %v", err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			return ipn.IP
		}
	}
	t.Skip("no non-loopback IPv4 address on this machine")
	return nil
}

func TestHeartbeatKeepsIdleConnectionAlive(t *testing.T) {
	e := newEnv(t)
	c := e.dialConfig(amqp.Config{Heartbeat: time.Second})
	ch := openChannel(t, c)
	closed := c.NotifyClose(make(chan *amqp.Error, 1))
	// Idle for several intervals: amqp091-go drops the connection when it
	// hears nothing for 3 intervals, the server after 2.
	select {
	case err := <-closed:
		t.Fatalf("idle connection with 1s heartbeats closed: %v", err)
	case <-time.After(3500 * time.Millisecond):
	}
	if _, err := ch.QueueDeclare("", false, true, true, false, nil); err != nil {
		t.Fatalf("after idling: %v", err)
	}
}

func TestHeartbeatTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rc := dialRaw(t, e.addr(), 1, 0)
	start := time.Now()
	heartbeats := 0
	rc.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := rc.r.ReadFrame()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("silent client still connected after %v, want disconnected after ~2s", time.Since(start))
			}
			break
		}
		if f.Type == wire.FrameHeartbeat {
			heartbeats++
		}
	}
	elapsed := time.Since(start)
	if elapsed < time.Second || elapsed > 5*time.Second {
		t.Errorf("silent client disconnected after %v, want about 2 heartbeat intervals", elapsed)
	}
	if heartbeats == 0 {
		t.Errorf("got no heartbeats from the server before the disconnect")
	}
}

func TestFrameMax(t *testing.T) {
	e := newEnv(t)
	c := e.dialConfig(amqp.Config{FrameSize: 4096})
	ch := openChannel(t, c)
	q := e.queue(ch, "", nil)
	body := make([]byte, 1<<20)
	rand.Read(body)
	publish(t, ch, "", q, amqp.Publishing{Body: body})
	d := recv(t, consume(t, ch, q, "", true, nil))
	if !bytes.Equal(d.Body, body) {
		t.Fatalf("got a %d-byte body that differs from the %d bytes sent", len(d.Body), len(body))
	}

	// On the wire, every frame the server sends fits the negotiated size.
	q = e.queue(ch, "", nil)
	rc := dialRaw(t, e.addr(), 0, 4096)
	rc.openChannel(1)
	small := make([]byte, 20000)
	rand.Read(small)
	rc.write(rc.appendPublish(nil, 1, "", q, small))
	rc.send(1, &wire.BasicGet{Queue: q, NoAck: true})
	var got []byte
	for len(got) < len(small) {
		f := rc.frame()
		if n := len(f.Payload) + 8; n > 4096 {
			t.Fatalf("got a %d-byte frame, want at most 4096", n)
		}
		if f.Type == wire.FrameBody {
			got = append(got, f.Payload...)
		}
	}
	if !bytes.Equal(got, small) {
		t.Fatal("body received over 4096-byte frames differs from the one sent")
	}
}

// TestChannelFlow: channel.flow(active=true) is acknowledged;
// active=false is refused with 540 NOT_IMPLEMENTED as RabbitMQ does
// (amqp091-go's own suite expects exactly that).
func TestChannelFlow(t *testing.T) {
	e := newEnv(t)
	e.warren()
	ch := e.channel()
	if err := ch.Flow(true); err != nil {
		t.Fatalf("flow(true): %v", err)
	}
	err := ch.Flow(false)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != 540 || ae.Reason != "NOT_IMPLEMENTED - active=false" {
		t.Fatalf("flow(false): got %v, want 540 NOT_IMPLEMENTED - active=false", err)
	}
}

func TestConnectionBlocked(t *testing.T) {
	e := newEnv(t)
	w := e.warren()
	c := e.dial()
	blocked := c.NotifyBlocked(make(chan amqp.Blocking, 4))
	ch := openChannel(t, c)
	q := e.queue(ch, "", nil)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 20))

	// The first publish during the alarm blocks the connection; what the
	// client sends after connection.blocked waits in the socket.
	w.Server().SetAlarm("memory", true)
	publishNoWait(t, ch, "", q, amqp.Publishing{Body: []byte("0")})
	select {
	case b := <-blocked:
		if !b.Active || b.Reason != "low on memory" {
			t.Fatalf("got %+v, want blocked with reason 'low on memory'", b)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no connection.blocked")
	}
	for i := 1; i < 10; i++ {
		publishNoWait(t, ch, "", q, amqp.Publishing{Body: []byte(fmt.Sprint(i))})
	}
	other := e.channel()
	if m, _ := counts(t, other, q); m > 1 {
		t.Fatalf("got %d messages in the queue while blocked, want at most 1", m)
	}
	w.Server().SetAlarm("memory", false)
	select {
	case b := <-blocked:
		if b.Active {
			t.Fatalf("got %+v, want unblocked", b)
		}
	case <-time.After(waitTimeout):
		t.Fatal("no connection.unblocked")
	}
	for i := 1; i <= 10; i++ {
		select {
		case cf := <-confirms:
			if !cf.Ack || cf.DeliveryTag != uint64(i) {
				t.Fatalf("got confirm %+v, want ack %d", cf, i)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("got %d confirms, want 10", i-1)
		}
	}
	if got := getBodies(t, e.channel(), q); !slices.Equal(got, []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}) {
		t.Fatalf("after unblock: got %v, want all 10 in order", got)
	}
}

func TestUpdateSecret(t *testing.T) {
	e := newEnv(t)
	c := e.dial()
	if err := c.UpdateSecret("guest", "rotation"); err != nil {
		t.Fatalf("update-secret: %v", err)
	}
	if _, err := openChannel(t, c).QueueDeclare("", false, true, true, false, nil); err != nil {
		t.Fatalf("after update-secret: %v", err)
	}
}

func TestTLS(t *testing.T) {
	cert, pool := selfSignedCert(t)
	w := warrentest.Start(t, warrentest.WithConfig(func(c *server.Config) {
		c.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		c.AMQPSAddr = "127.0.0.1:0"
	}))
	addr := w.Server().TLSAddr()
	if addr == nil {
		t.Fatal("no TLS listener")
	}
	c, err := amqp.DialTLS("amqps://guest:guest@"+addr.String()+"/", &tls.Config{RootCAs: pool, ServerName: "localhost"})
	if err != nil {
		t.Fatalf("amqps dial: %v", err)
	}
	defer c.Close()
	if st := c.ConnectionState(); !st.HandshakeComplete {
		t.Fatalf("got TLS state %+v, want a completed handshake", st)
	}
	ch := openChannel(t, c)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	publishBody(t, ch, "", q.Name, "secure")
	if got := getBodies(t, ch, q.Name); !slices.Equal(got, []string{"secure"}) {
		t.Fatalf("got %v, want [secure]", got)
	}
	// A client that does not trust the certificate fails the handshake.
	if c, err := amqp.DialTLS("amqps://guest:guest@"+addr.String()+"/", &tls.Config{ServerName: "localhost"}); err == nil {
		c.Close()
		t.Fatal("dial without trusting the self-signed certificate succeeded")
	}
}

func selfSignedCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "localhost"},
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// TestShutdownWhileBlocked: a connection held by a resource alarm does not
// stall the server's shutdown.
func TestShutdownWhileBlocked(t *testing.T) {
	e := newEnv(t)
	w := e.warren()
	c := e.dial()
	blocked := c.NotifyBlocked(make(chan amqp.Blocking, 1))
	ch := openChannel(t, c)
	w.Server().SetAlarm("disk", true)
	publishNoWait(t, ch, "", "any", amqp.Publishing{Body: []byte("x")})
	select {
	case <-blocked:
	case <-time.After(waitTimeout):
		t.Fatal("no connection.blocked")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := w.Server().Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with a blocked connection: %v", err)
	}
}

// TestBlockedConnectionKeepsHeartbeats: while a connection is blocked the
// server does not read its heartbeats, so, like RabbitMQ, it must not time
// it out for missing them.
func TestBlockedConnectionKeepsHeartbeats(t *testing.T) {
	e := newEnv(t)
	w := e.warren()
	c := e.dialConfig(amqp.Config{Heartbeat: time.Second})
	blocked := c.NotifyBlocked(make(chan amqp.Blocking, 2))
	closed := c.NotifyClose(make(chan *amqp.Error, 1))
	ch := openChannel(t, c)
	q := e.queue(ch, "", nil)
	w.Server().SetAlarm("memory", true)
	publishNoWait(t, ch, "", q, amqp.Publishing{Body: []byte("x")})
	select {
	case <-blocked:
	case <-time.After(waitTimeout):
		t.Fatal("no connection.blocked")
	}
	select {
	case err := <-closed:
		t.Fatalf("blocked connection closed: %v", err)
	case <-time.After(5 * time.Second):
	}
	w.Server().SetAlarm("memory", false)
	e.waitMessages(q, 1)
}
