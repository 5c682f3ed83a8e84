package streamserver

import (
	"crypto/tls"
	"net"
	"slices"
	"strconv"

	"github.com/warrenmq/warren/mgmt/api"
)

// The stream protocol's objects for the management API, with
// rabbitmq_stream_management's fields: /api/stream/connections,
// /api/stream/publishers, /api/stream/consumers.

func (s *Server) connsSnapshot() []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *conn) int { return int(a.id - b.id) })
	return out
}

func hostPort(a net.Addr) (string, int) {
	h, p, _ := net.SplitHostPort(a.String())
	n, _ := strconv.Atoi(p)
	return h, n
}

// name is RabbitMQ's connection name, "peer -> local".
func (c *conn) name() string {
	return c.nc.RemoteAddr().String() + " -> " + c.nc.LocalAddr().String()
}

func (c *conn) details() api.StreamConnectionDetails {
	h, p := hostPort(c.nc.RemoteAddr())
	return api.StreamConnectionDetails{Name: c.name(), Node: c.s.b.NodeName(), PeerHost: h, PeerPort: p, User: c.user}
}

// Connections are the open connections (opened: past the handshake).
func (s *Server) Connections() []api.StreamConnection {
	var out []api.StreamConnection
	for _, c := range s.connsSnapshot() {
		if !c.openedNow() {
			continue
		}
		ph, pp := hostPort(c.nc.RemoteAddr())
		lh, lp := hostPort(c.nc.LocalAddr())
		props := map[string]string{}
		for k, v := range c.peer {
			props[k] = v
		}
		_, isTLS := c.nc.(*tls.Conn)
		out = append(out, api.StreamConnection{AuthMechanism: c.mech, ClientProperties: props,
			ConnectedAt: c.started.UnixMilli(), FrameMax: c.frameMax, Host: lh, Name: c.name(), Node: s.b.NodeName(),
			PeerHost: ph, PeerPort: pp, Port: lp, Protocol: "stream", RecvOct: c.recvBytes.Load(), SendOct: c.sentBytes.Load(),
			SSL: isTLS, State: "running",
			Timeout: int(c.heartbeat.Seconds()), User: c.user, UserProvidedName: props["connection_name"], VHost: c.vhost.Name})
	}
	return out
}

// openedNow reports whether the connection is open (its handshake done).
func (c *conn) openedNow() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.vhost != nil && !c.closed
}

// Publishers are the declared publishers.
func (s *Server) Publishers() []api.StreamPublisher {
	var out []api.StreamPublisher
	for _, c := range s.connsSnapshot() {
		if !c.openedNow() {
			continue
		}
		c.mu.Lock()
		for _, p := range c.pubs {
			out = append(out, api.StreamPublisher{ConnectionDetails: c.details(), Confirmed: p.confirmed.Load(),
				Errored: p.errored.Load(), Published: p.published.Load(), PublisherID: p.id,
				Queue: api.QueueRef{Name: p.stream, VHost: c.vhost.Name}, Reference: p.ref})
		}
		c.mu.Unlock()
	}
	return out
}

// Consumers are the subscriptions.
func (s *Server) Consumers() []api.StreamConsumer {
	var out []api.StreamConsumer
	for _, c := range s.connsSnapshot() {
		if !c.openedNow() {
			continue
		}
		c.mu.Lock()
		subs := make([]*subscription, 0, len(c.subs))
		for _, sub := range c.subs {
			subs = append(subs, sub)
		}
		c.mu.Unlock()
		for _, sub := range subs {
			sub.mu.Lock()
			credit, active := sub.credit, sub.active
			sub.mu.Unlock()
			props := map[string]string{}
			for k, v := range sub.props {
				props[k] = v
			}
			off := sub.offset.Load()
			var lag uint64
			if next := sub.q.StreamLog().Info().Committed; next > off+1 {
				lag = next - 1 - off // to the last committed offset
			}
			out = append(out, api.StreamConsumer{ConnectionDetails: c.details(), Consumed: sub.messages.Load(),
				Credits: credit, Offset: off, OffsetLag: lag, Properties: props,
				Queue: api.QueueRef{Name: sub.stream, VHost: c.vhost.Name}, SubscriptionID: sub.id, Active: active})
		}
	}
	return out
}
