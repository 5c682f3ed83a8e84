package streamserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/warrenmq/warren/broker"
	sp "github.com/warrenmq/warren/streamproto"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// start serves an in-memory broker's streams on a loopback port.
func start(t *testing.T) (*Server, *broker.Broker, string) {
	t.Helper()
	b := broker.New(broker.Config{})
	s := New(b, Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Serve(ln)
	t.Cleanup(func() {
		s.Close()
		b.Close()
	})
	return s, b, ln.Addr().String()
}

// raw is a client that speaks frames by hand.
type raw struct {
	t    *testing.T
	nc   net.Conn
	r    *sp.Reader
	corr uint32
}

func dialRaw(t *testing.T, addr string) *raw {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &raw{t: t, nc: nc, r: sp.NewReader(nc, 16<<20)}
}

func (c *raw) send(key, version uint16, fields func(e *sp.Enc)) {
	c.t.Helper()
	var e sp.Enc
	e.Start(key, version)
	if fields != nil {
		fields(&e)
	}
	e.Finish()
	if _, err := c.nc.Write(e.B); err != nil {
		c.t.Fatal(err)
	}
}

func (c *raw) request(key uint16, fields func(e *sp.Enc)) uint32 {
	c.t.Helper()
	c.corr++
	corr := c.corr
	c.send(key, 1, func(e *sp.Enc) {
		e.U32(corr)
		if fields != nil {
			fields(e)
		}
	})
	return corr
}

// next reads the next frame that is not a heartbeat.
func (c *raw) next() sp.Frame {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := c.r.Next()
		if err != nil {
			c.t.Fatalf("reading: %v", err)
		}
		if f.Key != sp.KeyHeartbeat {
			f.Body = append([]byte(nil), f.Body...)
			return f
		}
	}
}

// code reads a response to key and returns its code.
func (c *raw) code(key uint16) uint16 {
	c.t.Helper()
	f := c.next()
	if f.Key != key|sp.ResponseBit {
		c.t.Fatalf("got %s, want the response to %s", sp.KeyName(f.Key), sp.KeyName(key))
	}
	d := sp.NewDec(f.Body)
	d.U32()
	return d.U16()
}

// closed expects a Close of code, then the end of the connection.
func (c *raw) closed(code uint16) {
	c.t.Helper()
	f := c.next()
	if f.Key != sp.KeyClose {
		c.t.Fatalf("got %s, want close", sp.KeyName(f.Key))
	}
	d := sp.NewDec(f.Body)
	d.U32()
	if got := d.U16(); got != code {
		c.t.Fatalf("close code %d (%s), want %d", got, d.S(), code)
	}
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.r.Next(); !errors.Is(err, io.EOF) && !isReset(err) {
		c.t.Fatalf("after close: %v", err)
	}
}

func isReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe)
}

// open runs the handshake as guest on vhost /.
func (c *raw) open() {
	c.t.Helper()
	c.request(sp.KeyPeerProperties, func(e *sp.Enc) { e.Map(nil, nil) })
	if code := c.code(sp.KeyPeerProperties); code != sp.OK {
		c.t.Fatalf("peer properties: %d", code)
	}
	c.request(sp.KeySaslAuthenticate, func(e *sp.Enc) {
		e.Str("PLAIN")
		e.Bytes([]byte("\x00guest\x00guest"))
	})
	if code := c.code(sp.KeySaslAuthenticate); code != sp.OK {
		c.t.Fatalf("authenticate: %d", code)
	}
	if f := c.next(); f.Key != sp.KeyTune {
		c.t.Fatalf("got %s, want tune", sp.KeyName(f.Key))
	}
	c.send(sp.KeyTuneResponse, 1, func(e *sp.Enc) {
		e.U32(65536)
		e.U32(0)
	})
	c.request(sp.KeyOpen, func(e *sp.Enc) { e.Str("/") })
	if code := c.code(sp.KeyOpen); code != sp.OK {
		c.t.Fatalf("open: %d", code)
	}
}

// Commands before authentication are refused: the connection is closed
// and nothing happens.
func TestCommandsBeforeAuthentication(t *testing.T) {
	_, b, addr := start(t)
	for _, key := range []uint16{sp.KeyCreate, sp.KeyOpen, sp.KeyDeclarePublisher, sp.KeyMetadata} {
		c := dialRaw(t, addr)
		c.request(key, func(e *sp.Enc) { e.Str("s1") })
		c.closed(sp.UnknownFrame)
	}
	// authenticated but not open
	c := dialRaw(t, addr)
	c.request(sp.KeySaslAuthenticate, func(e *sp.Enc) {
		e.Str("PLAIN")
		e.Bytes([]byte("\x00guest\x00guest"))
	})
	c.code(sp.KeySaslAuthenticate)
	c.next() // tune
	c.request(sp.KeyCreate, func(e *sp.Enc) {
		e.Str("s1")
		e.Map(nil, nil)
	})
	c.closed(sp.UnknownFrame)
	if b.VHost("/").Queue("s1") != nil {
		t.Fatal("a stream created before the connection was open")
	}
}

func TestAuthenticationRefused(t *testing.T) {
	_, _, addr := start(t)
	c := dialRaw(t, addr)
	c.request(sp.KeySaslAuthenticate, func(e *sp.Enc) {
		e.Str("PLAIN")
		e.Bytes([]byte("\x00guest\x00wrong"))
	})
	if code := c.code(sp.KeySaslAuthenticate); code != sp.AuthenticationFailure {
		t.Fatalf("code %d", code)
	}
	c = dialRaw(t, addr)
	c.request(sp.KeySaslAuthenticate, func(e *sp.Enc) {
		e.Str("EXTERNAL")
		e.Bytes(nil)
	})
	if code := c.code(sp.KeySaslAuthenticate); code != sp.SASLMechanismUnsupported {
		t.Fatalf("code %d", code)
	}
	c = dialRaw(t, addr)
	c.open()
	c.request(sp.KeyOpen, func(e *sp.Enc) { e.Str("/") })
	c.code(sp.KeyOpen) // a second open is answered
	c2 := dialRaw(t, addr)
	c2.request(sp.KeySaslAuthenticate, func(e *sp.Enc) {
		e.Str("PLAIN")
		e.Bytes([]byte("\x00guest\x00guest"))
	})
	c2.code(sp.KeySaslAuthenticate)
	c2.next()
	c2.request(sp.KeyOpen, func(e *sp.Enc) { e.Str("no-such-vhost") })
	if code := c2.code(sp.KeyOpen); code != sp.VirtualHostAccessFailure {
		t.Fatalf("open of a missing vhost: %d", code)
	}
}

// Frames are bounded: 8,192 bytes before the connection is open, the
// negotiated maximum after.
func TestFrameSizeBounded(t *testing.T) {
	_, _, addr := start(t)
	c := dialRaw(t, addr)
	c.request(sp.KeyPeerProperties, func(e *sp.Enc) {
		e.U32(1)
		e.Str("big")
		e.Str(string(make([]byte, 9000)))
	})
	c.closed(sp.FrameTooLarge)
	c = dialRaw(t, addr)
	c.open() // frame max 65536
	c.request(sp.KeyCreate, func(e *sp.Enc) {
		e.Str("s")
		e.U32(1)
		e.Str("x")
		e.Str(string(make([]byte, 30000)))
		e.Str(string(make([]byte, 30000)))
		e.Str(string(make([]byte, 30000)))
	})
	c.closed(sp.FrameTooLarge)
	// an announced size the frame cannot hold closes, allocates nothing
	c = dialRaw(t, addr)
	c.open()
	c.request(sp.KeyMetadata, func(e *sp.Enc) { e.U32(1 << 30) })
	c.closed(sp.UnknownFrame)
}

// A publish of an unknown publisher is refused per message (18); a
// malformed publish closes the connection; other connections go on.
func TestPublishErrors(t *testing.T) {
	_, b, addr := start(t)
	c := dialRaw(t, addr)
	c.open()
	c.request(sp.KeyCreate, func(e *sp.Enc) {
		e.Str("s")
		e.Map(nil, nil)
	})
	if code := c.code(sp.KeyCreate); code != sp.OK {
		t.Fatalf("create: %d", code)
	}
	c.send(sp.KeyPublish, 1, func(e *sp.Enc) {
		e.U8(7)
		e.U32(2)
		for i := range 2 {
			e.U64(uint64(i))
			e.Bytes([]byte("m"))
		}
	})
	f := c.next()
	d := sp.NewDec(f.Body)
	if f.Key != sp.KeyPublishError || d.U8() != 7 || d.U32() != 2 || d.U64() != 0 || d.U16() != sp.PublisherDoesNotExist {
		t.Fatalf("got %s % x", sp.KeyName(f.Key), f.Body)
	}
	// publisher 0 on s, then a publish whose entry claims more than the
	// frame holds
	c.request(sp.KeyDeclarePublisher, func(e *sp.Enc) {
		e.U8(0)
		e.Str("")
		e.Str("s")
	})
	if code := c.code(sp.KeyDeclarePublisher); code != sp.OK {
		t.Fatalf("declare publisher: %d", code)
	}
	c.send(sp.KeyPublish, 1, func(e *sp.Enc) {
		e.U8(0)
		e.U32(1)
		e.U64(1)
		e.U32(1 << 20)
		e.B = append(e.B, "short"...)
	})
	c.closed(sp.UnknownFrame)
	other := dialRaw(t, addr)
	other.open()
	other.request(sp.KeyDeclarePublisher, func(e *sp.Enc) {
		e.U8(0)
		e.Str("")
		e.Str("s")
	})
	if code := other.code(sp.KeyDeclarePublisher); code != sp.OK {
		t.Fatalf("another connection: %d", code)
	}
	if in, _ := b.VHost("/").Queue("s").StreamInfo(); in.Next != 0 {
		t.Fatalf("a malformed publish wrote %d records", in.Next)
	}
	// a reference is the publisher's alone on its stream
	other.request(sp.KeyDeclarePublisher, func(e *sp.Enc) {
		e.U8(1)
		e.Str("ref")
		e.Str("s")
	})
	other.code(sp.KeyDeclarePublisher)
	other.request(sp.KeyDeclarePublisher, func(e *sp.Enc) {
		e.U8(2)
		e.Str("ref")
		e.Str("s")
	})
	if code := other.code(sp.KeyDeclarePublisher); code != sp.PreconditionFailed {
		t.Fatalf("a reference in use: %d", code)
	}
	other.request(sp.KeyDeclarePublisher, func(e *sp.Enc) {
		e.U8(1)
		e.Str("")
		e.Str("s")
	})
	if code := other.code(sp.KeyDeclarePublisher); code != sp.PreconditionFailed {
		t.Fatalf("a publisher id in use: %d", code)
	}
}

// Subscriptions: an id in use (3), an unknown one (4), a missing stream
// (2), an unknown offset type (17); credit to an unknown id is answered
// with 4; credit adds up without overflowing.
func TestSubscriptionErrors(t *testing.T) {
	_, _, addr := start(t)
	c := dialRaw(t, addr)
	c.open()
	c.request(sp.KeyCreate, func(e *sp.Enc) {
		e.Str("s")
		e.Map(nil, nil)
	})
	c.code(sp.KeyCreate)
	sub := func(id uint8, stream string, kind uint16) uint16 {
		c.request(sp.KeySubscribe, func(e *sp.Enc) {
			e.U8(id)
			e.Str(stream)
			e.U16(kind)
			e.U16(10)
		})
		return c.code(sp.KeySubscribe)
	}
	if code := sub(1, "s", broker.OffsetFirst); code != sp.OK {
		t.Fatalf("subscribe: %d", code)
	}
	if code := sub(1, "s", broker.OffsetFirst); code != sp.SubscriptionIDExists {
		t.Fatalf("an id in use: %d", code)
	}
	if code := sub(2, "missing", broker.OffsetFirst); code != sp.StreamDoesNotExist {
		t.Fatalf("a missing stream: %d", code)
	}
	if code := sub(3, "s", 99); code != sp.PreconditionFailed {
		t.Fatalf("an unknown offset type: %d", code)
	}
	for range 3 {
		c.send(sp.KeyCredit, 1, func(e *sp.Enc) {
			e.U8(1)
			e.U16(0xffff)
		})
	}
	c.send(sp.KeyCredit, 1, func(e *sp.Enc) {
		e.U8(9)
		e.U16(1)
	})
	f := c.next()
	d := sp.NewDec(f.Body)
	if f.Key != sp.KeyCreditResponse || d.U16() != sp.SubscriptionIDNotExist || d.U8() != 9 {
		t.Fatalf("credit to an unknown subscription: %s % x", sp.KeyName(f.Key), f.Body)
	}
	c.request(sp.KeyUnsubscribe, func(e *sp.Enc) { e.U8(5) })
	if code := c.code(sp.KeyUnsubscribe); code != sp.SubscriptionIDNotExist {
		t.Fatalf("unsubscribe of an unknown id: %d", code)
	}
	c.request(sp.KeyUnsubscribe, func(e *sp.Enc) { e.U8(1) })
	if code := c.code(sp.KeyUnsubscribe); code != sp.OK {
		t.Fatalf("unsubscribe: %d", code)
	}
}

// Permissions: a user without write permission cannot publish, without
// read permission cannot subscribe, without configure cannot create or
// delete.
func TestStreamPermissions(t *testing.T) {
	_, b, addr := start(t)
	b.PutUser("u", "pw", nil)
	if err := b.SetPermissions("/", "u", broker.Permission{Configure: "^c-", Write: "^w-", Read: "^r-"}); err != nil {
		t.Fatal(err)
	}
	admin := dialRaw(t, addr)
	admin.open()
	for _, s := range []string{"c-s", "w-s", "r-s"} {
		admin.request(sp.KeyCreate, func(e *sp.Enc) {
			e.Str(s)
			e.Map(nil, nil)
		})
		admin.code(sp.KeyCreate)
	}
	c := dialRaw(t, addr)
	c.request(sp.KeySaslAuthenticate, func(e *sp.Enc) {
		e.Str("PLAIN")
		e.Bytes([]byte("\x00u\x00pw"))
	})
	if code := c.code(sp.KeySaslAuthenticate); code != sp.OK {
		t.Fatalf("u: %d", code)
	}
	c.next()
	c.request(sp.KeyOpen, func(e *sp.Enc) { e.Str("/") })
	c.code(sp.KeyOpen)
	try := func(key uint16, fields func(e *sp.Enc)) uint16 {
		c.request(key, fields)
		return c.code(key)
	}
	pub := func(id uint8, s string) func(e *sp.Enc) {
		return func(e *sp.Enc) { e.U8(id); e.Str(""); e.Str(s) }
	}
	subs := func(id uint8, s string) func(e *sp.Enc) {
		return func(e *sp.Enc) { e.U8(id); e.Str(s); e.U16(broker.OffsetFirst); e.U16(1) }
	}
	create := func(s string) func(e *sp.Enc) { return func(e *sp.Enc) { e.Str(s); e.Map(nil, nil) } }
	for _, tc := range []struct {
		name string
		key  uint16
		f    func(e *sp.Enc)
		want uint16
	}{
		{"publish to r-s", sp.KeyDeclarePublisher, pub(0, "r-s"), sp.AccessRefused},
		{"publish to w-s", sp.KeyDeclarePublisher, pub(1, "w-s"), sp.OK},
		{"subscribe to w-s", sp.KeySubscribe, subs(0, "w-s"), sp.AccessRefused},
		{"subscribe to r-s", sp.KeySubscribe, subs(1, "r-s"), sp.OK},
		{"create w-x", sp.KeyCreate, create("w-x"), sp.AccessRefused},
		{"create c-x", sp.KeyCreate, create("c-x"), sp.OK},
		{"delete r-s", sp.KeyDelete, func(e *sp.Enc) { e.Str("r-s") }, sp.AccessRefused},
		{"delete c-s", sp.KeyDelete, func(e *sp.Enc) { e.Str("c-s") }, sp.OK},
	} {
		if got := try(tc.key, tc.f); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// FuzzConn: whatever an authenticated client sends, the server neither
// panics nor stops serving others. Each input is sent raw after the
// handshake; the connection then answers a metadata request or is
// closed.
func FuzzConn(f *testing.F) {
	frame := func(key uint16, fields func(e *sp.Enc)) []byte {
		var e sp.Enc
		e.Start(key, 1)
		fields(&e)
		e.Finish()
		return e.B
	}
	f.Add(frame(sp.KeyCreate, func(e *sp.Enc) { e.U32(1); e.Str("s"); e.Map(nil, nil) }))
	f.Add(frame(sp.KeyPublish, func(e *sp.Enc) { e.U8(0); e.U32(1); e.U64(1); e.U32(3); e.B = append(e.B, "abc"...) }))
	f.Add(frame(sp.KeySubscribe, func(e *sp.Enc) { e.U32(1); e.U8(0); e.Str("s"); e.U16(1); e.U16(5) }))
	f.Add(frame(sp.KeyCreateSuperStream, func(e *sp.Enc) { e.U32(1); e.Str("x"); e.Strs([]string{"a"}); e.Strs([]string{"k"}); e.Map(nil, nil) }))
	b := broker.New(broker.Config{})
	s := New(b, Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	s.Serve(ln)
	defer func() {
		s.Close()
		b.Close()
	}()
	addr := ln.Addr().String()
	f.Fuzz(func(t *testing.T, in []byte) {
		c := dialRaw(t, addr)
		c.open()
		// a declared publisher and a stream make more commands reachable
		c.request(sp.KeyCreate, func(e *sp.Enc) { e.Str("s"); e.Map(nil, nil) })
		c.code(sp.KeyCreate)
		c.nc.Write(in)
		c.request(sp.KeyMetadata, func(e *sp.Enc) { e.Strs([]string{"s"}) })
		c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			fr, err := c.r.Next()
			if err != nil {
				break // closed by the server: fine
			}
			if fr.Key == sp.KeyMetadata|sp.ResponseBit {
				break
			}
		}
		c.nc.Close()
		other := dialRaw(t, addr)
		other.open()
		other.nc.Close()
	})
}

// TLS beside the plain listener (RabbitMQ's 5551): the same protocol.
func TestStreamTLS(t *testing.T) {
	cert := selfSigned(t)
	b := broker.New(broker.Config{})
	s := New(b, Config{Addr: "127.0.0.1:0", TLSAddr: "127.0.0.1:0", TLS: &tls.Config{Certificates: []tls.Certificate{cert}}})
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		s.Close()
		b.Close()
	}()
	addrs := s.Addrs()
	if len(addrs) != 2 {
		t.Fatalf("listeners %v", addrs)
	}
	nc, err := tls.Dial("tcp", addrs[1].String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := &raw{t: t, nc: nc, r: sp.NewReader(nc, 16<<20)}
	c.open()
	c.request(sp.KeyCreate, func(e *sp.Enc) { e.Str("over-tls"); e.Map(nil, nil) })
	if code := c.code(sp.KeyCreate); code != sp.OK {
		t.Fatalf("create over TLS: %d", code)
	}
	// plain bytes on the TLS port are not the protocol
	plain := dialRaw(t, addrs[1].String())
	plain.request(sp.KeyPeerProperties, func(e *sp.Enc) { e.Map(nil, nil) })
	plain.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := plain.r.Next(); err == nil {
		t.Fatal("a plain client was answered on the TLS port")
	}
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
