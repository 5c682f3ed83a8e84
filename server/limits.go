package server

import (
	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

// Enforcing RabbitMQ's vhost and user limits (broker/limits.go) that count
// connections and channels: max-connections of a vhost and of a user,
// checked at connection.open; max-channels of a user, at channel.open.

// openConns counts the connections past their handshake for which match
// holds, and the channels they have open.
func (s *Server) openConns(match func(vhost *broker.VHost, user string) bool) (conns, channels int64) {
	for _, c := range s.connList() {
		c.chMu.Lock()
		if c.vhost != nil && match(c.vhost, c.user.Name) {
			conns++
			channels += int64(len(c.channels))
		}
		c.chMu.Unlock()
	}
	return conns, channels
}

// checkConnLimits refuses a connection to v over the vhost's or the
// user's max-connections.
func (c *conn) checkConnLimits(v *broker.VHost) error {
	user := c.user.Name
	if n := v.MaxConnections(); n >= 0 {
		if open, _ := c.s.openConns(func(vh *broker.VHost, _ string) bool { return vh == v }); open >= n {
			return amqp.ConnErrorf(amqp.NotAllowed, "access to vhost '%s' refused for user '%s': connection limit (%d) is reached", v.Name, user, n)
		}
	}
	if n, ok := c.s.broker.UserLimit(user, broker.LimitMaxConnections); ok && n >= 0 {
		if open, _ := c.s.openConns(func(_ *broker.VHost, u string) bool { return u == user }); open >= n {
			return amqp.ConnErrorf(amqp.NotAllowed, "connection refused for user '%s': user connection limit (%d) is reached", user, n)
		}
	}
	return nil
}

// checkChannelLimit refuses a channel over the user's max-channels, as
// RabbitMQ does: by closing the connection.
func (c *conn) checkChannelLimit() error {
	n, ok := c.s.broker.UserLimit(c.user.Name, broker.LimitMaxChannels)
	if !ok || n < 0 {
		return nil
	}
	if _, open := c.s.openConns(func(_ *broker.VHost, u string) bool { return u == c.user.Name }); open >= n {
		return amqp.ConnErrorf(amqp.NotAllowed, "number of channels opened for user '%s' has reached the maximum allowed user limit of (%d)", c.user.Name, n)
	}
	return nil
}
