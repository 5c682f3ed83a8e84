package bridge

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// URI is an AMQP 0-9-1 URI as RabbitMQ's shovels and federation read it
// (amqp_uri.erl): amqp://user:pass@host:port/vhost?key=value, or amqps://
// with TLS. One without a host (amqp://, amqp:///vhost) is this broker,
// reached in-process as the user who defined the link.
type URI struct {
	Raw   string
	TLS   bool
	Local bool // no host: this broker
	Host  string
	Port  int
	User  string
	Pass  string
	VHost string
	// HasVHost: the URI names a vhost (a path); else the caller's
	// default ("/" for a shovel, the downstream's own for federation).
	HasVHost bool

	Heartbeat   time.Duration // -1 when unset
	ConnTimeout time.Duration // 0 when unset
	ChannelMax  int
	FrameMax    int
	AuthMech    string // "plain", "amqplain", "external" ("" plain)
	tlsConfig   *tls.Config
}

// ParseURI reads s. The errors say what is wrong with it, without the
// password.
func ParseURI(s string) (*URI, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("bad URI %q", Redact(s))
	}
	r := &URI{Raw: s, Heartbeat: -1}
	switch u.Scheme {
	case "amqp":
	case "amqps":
		r.TLS = true
	default:
		return nil, fmt.Errorf("bad URI %q: the scheme is not amqp or amqps", Redact(s))
	}
	if u.Opaque != "" {
		return nil, fmt.Errorf("bad URI %q", Redact(s))
	}
	r.Host = u.Hostname()
	r.Local = u.Host == "" && u.User == nil
	if !r.Local && r.Host == "" {
		return nil, fmt.Errorf("bad URI %q: no host", Redact(s))
	}
	r.Port = 5672
	if r.TLS {
		r.Port = 5671
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("bad URI %q: port %q", Redact(s), p)
		}
		r.Port = n
	}
	r.User, r.Pass = "guest", "guest"
	if u.User != nil {
		r.User = u.User.Username()
		r.Pass, _ = u.User.Password()
	}
	if p := u.EscapedPath(); p != "" {
		if r.VHost, err = url.PathUnescape(strings.TrimPrefix(p, "/")); err != nil {
			return nil, fmt.Errorf("bad URI %q: vhost", Redact(s))
		}
		r.HasVHost = true
	}
	q := u.Query()
	num := func(k string) (int, bool, error) {
		v := q.Get(k)
		if v == "" {
			return 0, false, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, false, fmt.Errorf("bad URI %q: %s=%q is not a non-negative integer", Redact(s), k, v)
		}
		return n, true, nil
	}
	if n, ok, err := num("heartbeat"); err != nil {
		return nil, err
	} else if ok {
		r.Heartbeat = time.Duration(n) * time.Second
	}
	if n, ok, err := num("connection_timeout"); err != nil {
		return nil, err
	} else if ok {
		r.ConnTimeout = time.Duration(n) * time.Millisecond
	}
	if r.ChannelMax, _, err = num("channel_max"); err != nil {
		return nil, err
	}
	if r.FrameMax, _, err = num("frame_max"); err != nil {
		return nil, err
	}
	switch m := q.Get("auth_mechanism"); m {
	case "", "plain", "amqplain", "external":
		r.AuthMech = m
	default:
		return nil, fmt.Errorf("bad URI %q: auth_mechanism %q", Redact(s), m)
	}
	if r.TLS {
		if r.tlsConfig, err = tlsConfigOf(q, r.Host); err != nil {
			return nil, fmt.Errorf("bad URI %q: %w", Redact(s), err)
		}
	} else if r.AuthMech == "external" {
		return nil, fmt.Errorf("bad URI %q: auth_mechanism external needs amqps", Redact(s))
	}
	return r, nil
}

// tlsConfigOf builds an amqps URI's TLS settings from RabbitMQ's query
// keys: cacertfile, certfile, keyfile (files on this node), verify
// (verify_peer, the default here, or verify_none), server_name_indication
// (a name, or disable), fail_if_no_peer_cert and depth (server options:
// accepted and ignored by a client), password (of an encrypted key: not
// supported).
func tlsConfigOf(q url.Values, host string) (*tls.Config, error) {
	c := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if f := q.Get("cacertfile"); f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("cacertfile: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("cacertfile: no certificate in it")
		}
		c.RootCAs = pool
	}
	cert, key := q.Get("certfile"), q.Get("keyfile")
	if (cert == "") != (key == "") {
		return nil, errors.New("certfile and keyfile go together")
	}
	if cert != "" {
		if q.Get("password") != "" {
			return nil, errors.New("password-protected keyfiles are not supported")
		}
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("certfile/keyfile: %v", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	switch v := q.Get("verify"); v {
	case "", "verify_peer":
	case "verify_none":
		c.InsecureSkipVerify = true
	default:
		return nil, fmt.Errorf("verify=%q is not verify_peer or verify_none", v)
	}
	switch sni := q.Get("server_name_indication"); sni {
	case "":
	case "disable":
		// No SNI; the certificate is still checked against the host.
		if !c.InsecureSkipVerify {
			c.InsecureSkipVerify = true
			roots := c.RootCAs
			c.VerifyConnection = func(cs tls.ConnectionState) error {
				return verifyAgainst(cs, host, roots)
			}
		}
		c.ServerName = ""
	default:
		c.ServerName = sni
	}
	if d := q.Get("depth"); d != "" {
		if _, err := strconv.Atoi(d); err != nil {
			return nil, fmt.Errorf("depth=%q is not an integer", d)
		}
	}
	return c, nil
}

// verifyAgainst checks the peer's chain and host name (TLS without SNI).
func verifyAgainst(cs tls.ConnectionState, host string, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("no peer certificate")
	}
	opts := x509.VerifyOptions{Roots: roots, DNSName: host, Intermediates: x509.NewCertPool()}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(opts)
	return err
}

// Addr is the host:port to dial.
func (u *URI) Addr() string { return net.JoinHostPort(u.Host, strconv.Itoa(u.Port)) }

// Redact returns s without its credentials and query, as RabbitMQ shows
// a link's URI in its status, its API and its logs: only the parameter
// itself, read by a policymaker, keeps the password.
func Redact(s string) string {
	rest, ok := strings.CutPrefix(s, "amqp://")
	scheme := "amqp://"
	if !ok {
		if rest, ok = strings.CutPrefix(s, "amqps://"); !ok {
			if i := strings.Index(s, "://"); i >= 0 {
				scheme, rest = s[:i+3], s[i+3:]
			} else {
				return s
			}
		} else {
			scheme = "amqps://"
		}
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest = rest[:i]
	}
	auth := rest
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		auth = rest[:i]
	}
	if at := strings.LastIndexByte(auth, '@'); at >= 0 {
		rest = rest[at+1:]
	}
	return scheme + rest
}
