package bridge

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// dialTimeout bounds a connection's TCP and TLS handshakes when the URI
// sets no connection_timeout (RabbitMQ's amqp_client: 60 s; shorter here
// so that a link to a dead address says so sooner).
const dialTimeout = 30 * time.Second

// defaultHeartbeat is a link's heartbeat when its URI sets none (RabbitMQ's
// amqp_client asks for 10 s as well).
const defaultHeartbeat = 10 * time.Second

// dial opens a connection to u for a link named connName, as user when u
// is this broker. defVHost is the vhost when u names none.
func (m *Manager) dial(ctx context.Context, u *URI, user, defVHost, connName string) (*amqp.Connection, error) {
	vhost := defVHost
	if u.HasVHost {
		vhost = u.VHost
	}
	cfg := amqp.Config{Vhost: vhost, Locale: "en_US", Heartbeat: defaultHeartbeat,
		Properties: amqp.Table{"connection_name": connName, "product": "Warren " + connName}}
	if u.Heartbeat >= 0 {
		cfg.Heartbeat = u.Heartbeat
	}
	cfg.ChannelMax = uint16(min(u.ChannelMax, 65535))
	cfg.FrameSize = u.FrameMax
	if u.Local {
		if m.cfg.Direct == nil {
			return nil, fmt.Errorf("no direct connections to this broker")
		}
		if user == "" {
			return nil, fmt.Errorf("the link has no user to act as here (kept without one): define it again")
		}
		c, err := m.cfg.Direct(user)
		if err != nil {
			return nil, err
		}
		cfg.SASL = []amqp.Authentication{&amqp.PlainAuth{Username: user}}
		conn, err := amqp.Open(c, cfg)
		if err != nil {
			c.Close()
			return nil, err
		}
		return conn, nil
	}
	switch u.AuthMech {
	case "amqplain":
		cfg.SASL = []amqp.Authentication{&amqp.AMQPlainAuth{Username: u.User, Password: u.Pass}}
	case "external":
		cfg.SASL = []amqp.Authentication{&amqp.ExternalAuth{}}
	default:
		cfg.SASL = []amqp.Authentication{&amqp.PlainAuth{Username: u.User, Password: u.Pass}}
	}
	timeout := dialTimeout
	if u.ConnTimeout > 0 {
		timeout = u.ConnTimeout
	}
	cfg.Dial = func(network, addr string) (net.Conn, error) {
		dctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var d net.Dialer
		c, err := d.DialContext(dctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		if u.TLS {
			tc := tls.Client(c, u.tlsConfig.Clone())
			if err := tc.HandshakeContext(dctx); err != nil {
				c.Close()
				return nil, err
			}
			c = tc
		}
		// amqp091-go's handshake has no deadline of its own: the
		// connection's, lifted once it is open.
		c.SetDeadline(time.Now().Add(timeout))
		return c, nil
	}
	conn, err := amqp.DialConfig("amqp://"+u.Addr()+"/", cfg)
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// dialAny tries uris in turn from a random one (RabbitMQ picks at
// random and skips failures), returning the connection and the URI it
// reached.
func (m *Manager) dialAny(ctx context.Context, uris []string, user, defVHost, connName string) (*amqp.Connection, *URI, error) {
	var last error
	start := rand.IntN(len(uris))
	for i := range uris {
		raw := uris[(start+i)%len(uris)]
		u, err := ParseURI(raw)
		if err != nil {
			last = err
			continue
		}
		c, err := m.dial(ctx, u, user, defVHost, connName)
		if err == nil {
			return c, u, nil
		}
		last = fmt.Errorf("%s: %w", Redact(raw), err)
		if ctx.Err() != nil {
			break
		}
	}
	if last == nil {
		last = fmt.Errorf("no URI")
	}
	return nil, nil, last
}
