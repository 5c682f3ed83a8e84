package mgmt

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/mgmt/api"
	"github.com/warrenmq/warren/server"
)

func (s *Server) connRoutes() {
	s.handle("GET /api/connections", lvlManagement, (*call).connections)
	s.handle("GET /api/vhosts/{vhost}/connections", lvlManagement, (*call).connections)
	s.handle("GET /api/connections/{name}", lvlManagement, (*call).connectionGet)
	s.handle("DELETE /api/connections/{name}", lvlManagement, (*call).connectionDelete)
	// GET /api/connections/{name}/channels and
	// /api/connections/username/{username} overlap as patterns.
	s.handle("GET /api/connections/{name}/{sub}", lvlManagement, func(c *call) error {
		switch {
		case c.pv("name") == "username":
			return c.userConnections(c.pv("sub"))
		case c.pv("sub") == "channels":
			return c.connectionChannels()
		}
		return errNotFound
	})
	s.handle("DELETE /api/connections/username/{username}", lvlManagement, func(c *call) error {
		return c.userConnectionsDelete(c.pv("username"))
	})
	s.handle("GET /api/channels", lvlManagement, (*call).channels)
	s.handle("GET /api/vhosts/{vhost}/channels", lvlManagement, (*call).channels)
	s.handle("GET /api/channels/{name}", lvlManagement, (*call).channelGet)
	s.handle("GET /api/consumers", lvlManagement, (*call).consumers)
	s.handle("GET /api/consumers/{vhost}", lvlManagement, (*call).consumers)
}

// seesUser reports whether the user may see a connection or channel that
// user opened: its own, or any for monitoring users and administrators,
// as RabbitMQ.
func (c *call) seesUser(user string) bool { return c.monitor() || user == c.user.Name }

func (c *call) connJSON(ci server.ConnectionInfo) api.Connection {
	props := map[string]any{}
	if ci.ClientProperties != nil {
		props = broker.TableJSON(ci.ClientProperties)
	}
	upn, _ := ci.ClientProperties["connection_name"].(string)
	state := "running"
	if ci.Blocked {
		state = "blocked"
	}
	key := connKey(ci.Name)
	typ, proto := "network", "AMQP 0-9-1"
	if ci.Direct {
		typ, proto = "direct", "Direct 0-9-1"
	}
	return api.Connection{
		Name: ci.Name, Node: c.s.node, VHost: ci.VHost, User: ci.User, UserWhoPerformedAction: ci.User,
		State: state, Type: typ, Protocol: proto,
		AuthMechanism: ci.AuthMechanism, SSL: ci.TLS,
		Host: ci.Host, Port: ci.Port, PeerHost: ci.PeerHost, PeerPort: ci.PeerPort,
		Channels: ci.Channels, ChannelMax: ci.ChannelMax, FrameMax: ci.FrameMax, Timeout: int(ci.Heartbeat.Seconds()),
		ClientProperties: props, UserProvidedName: nilIfEmpty(upn),
		ConnectedAt: ci.ConnectedAt.UnixMilli(),
		RecvOct:     ci.RecvOct, RecvOctDetails: c.det(key, kindConn, "recv_oct"),
		SendOct: ci.SendOct, SendOctDetails: c.det(key, kindConn, "send_oct"),
		RecvCnt: ci.RecvCnt, SendCnt: ci.SendCnt, SendPend: ci.SendPend,
		GarbageCollection: map[string]any{}, ReductionsDetails: details(0),
	}
}

func (c *call) visibleConns() ([]server.ConnectionInfo, error) {
	vhost, err := c.pathVHost()
	if err != nil {
		return nil, err
	}
	var out []server.ConnectionInfo
	for _, ci := range c.s.srv.Connections() {
		if c.seesUser(ci.User) && (vhost == "" || ci.VHost == vhost) {
			out = append(out, ci)
		}
	}
	return out, nil
}

func (c *call) connections() error {
	cs, err := c.visibleConns()
	if err != nil {
		return err
	}
	if err := c.parseHistory(false, true); err != nil {
		return err
	}
	list := make([]api.Connection, 0, len(cs))
	for _, ci := range cs {
		list = append(list, c.connJSON(ci))
	}
	if c.clustered() {
		list = append(list, remoteVisible(c, func(m api.Connection) bool { return c.seesUser(m.User) })...)
	}
	return listOf(c, list)
}

// remoteVisible is the other nodes' list for this path, without what
// keep refuses (what the user may not see).
func remoteVisible[T any](c *call, keep func(T) bool) []T {
	items, _ := remoteListOf[T](c)
	out := items[:0]
	for _, m := range items {
		if keep(m) {
			out = append(out, m)
		}
	}
	return out
}

// remoteConn finds a connection on another node: the node and the
// connection as that node shows it, if the user may see it.
func (c *call) remoteConn() (string, api.Connection, error) {
	if !c.clustered() {
		return "", api.Connection{}, errNotFound
	}
	node, m, ok := remoteItemOf[api.Connection](c, "/api/connections/"+url.PathEscape(c.pv("name"))+c.rangeQuery())
	if !ok || !c.seesUser(m.User) {
		return "", api.Connection{}, errNotFound
	}
	return node, m, nil
}

func (c *call) findConn() (server.ConnectionInfo, error) {
	name := c.pv("name")
	for _, ci := range c.s.srv.Connections() {
		if ci.Name == name && c.seesUser(ci.User) {
			return ci, nil
		}
	}
	return server.ConnectionInfo{}, errNotFound
}

func (c *call) connectionGet() error {
	if err := c.parseHistory(false, true); err != nil {
		return err
	}
	ci, err := c.findConn()
	if err == errNotFound && c.clustered() {
		_, m, err := c.remoteConn()
		if err != nil {
			return err
		}
		return c.ok(m)
	}
	if err != nil {
		return err
	}
	return c.ok(c.connJSON(ci))
}

// connectionDelete closes a connection with 320 CONNECTION_FORCED and the
// reason from the X-Reason header, as RabbitMQ ("Closed via management
// plugin" by default).
func (c *call) connectionDelete() error {
	reason := c.reason()
	ci, err := c.findConn()
	if err == errNotFound && c.clustered() {
		// On another node: checked here, closed there.
		node, m, err := c.remoteConn()
		if err != nil {
			return err
		}
		if !c.admin() && m.User != c.user.Name {
			return notAuthorised("Not administrator user")
		}
		body, _ := json.Marshal(map[string]string{"reason": reason})
		ctx, cancel := context.WithTimeout(c.r.Context(), fetchTimeout)
		defer cancel()
		st, resp, err := c.s.cluster().Fetch(ctx, node, http.MethodDelete, c.escapedPath(), body)
		if err != nil {
			return &apiError{Status: http.StatusServiceUnavailable, Err: "unavailable", Reason: "node " + node + ": " + err.Error()}
		}
		if st != http.StatusNoContent {
			c.w.Header().Set("Content-Type", "application/json")
			c.w.WriteHeader(st)
			_, _ = c.w.Write(resp)
			return nil
		}
		return c.noContent()
	}
	if err != nil {
		return err
	}
	if !c.admin() && ci.User != c.user.Name {
		return notAuthorised("Not administrator user")
	}
	c.s.srv.CloseConnection(ci.Name, reason)
	return c.noContent()
}

// reason is a connection close's reason: the X-Reason header, or for a
// request from another node the body's "reason" (ServeLocal carries no
// headers); "Closed via management plugin" by default, as RabbitMQ.
func (c *call) reason() string {
	reason := c.r.Header.Get("X-Reason")
	if c.local {
		var b struct {
			Reason string `json:"reason"`
		}
		if c.decode(&b) == nil {
			reason = b.Reason
		}
	}
	if reason == "" {
		reason = "Closed via management plugin"
	}
	return reason
}

// userConns returns the connections of user name. A user may act on its
// own connections; monitoring users may list anyone's and administrators
// close anyone's. (RabbitMQ 3.10 answers 500 to non-administrators here.)
func (c *call) userConns(name string, others bool) ([]server.ConnectionInfo, error) {
	if name != c.user.Name && !others {
		return nil, notAuthorised("User not authorised to access object")
	}
	var out []server.ConnectionInfo
	for _, ci := range c.s.srv.Connections() {
		if ci.User == name {
			out = append(out, ci)
		}
	}
	return out, nil
}

// userConnections lists a user's connections as RabbitMQ's tracked
// connections: name, vhost, user, node.
func (c *call) userConnections(name string) error {
	cs, err := c.userConns(name, c.monitor())
	if err != nil {
		return err
	}
	list := make([]api.TrackedConnection, 0, len(cs))
	for _, ci := range cs {
		list = append(list, api.TrackedConnection{Name: ci.Name, VHost: ci.VHost, User: ci.User, Node: c.s.node})
	}
	if c.clustered() {
		items, _ := remoteListOf[api.TrackedConnection](c)
		list = append(list, items...)
	}
	return c.ok(list)
}

// userConnectionsDelete closes every connection of a user, as
// connectionDelete closes one.
func (c *call) userConnectionsDelete(name string) error {
	cs, err := c.userConns(name, c.admin())
	if err != nil {
		return err
	}
	reason := c.reason()
	for _, ci := range cs {
		c.s.srv.CloseConnection(ci.Name, reason)
	}
	if c.clustered() {
		body, _ := json.Marshal(map[string]string{"reason": reason})
		c.fanOut(http.MethodDelete, c.escapedPath(), body)
	}
	return c.noContent()
}

func (c *call) chanJSON(ch server.ChannelInfo) api.Channel {
	key := chanKey(ch.Name)
	ms := c.statsWithRates(key, kindChannel, channelCounters(ch), channelStatFields...)
	m := api.Channel{
		Name: ch.Name, Node: c.s.node, Number: ch.Number, VHost: ch.VHost, User: ch.User,
		UserWhoPerformedAction: ch.User, State: "running",
		ConnectionDetails: api.ConnectionDetails{Name: ch.Connection, PeerHost: ch.PeerHost, PeerPort: ch.PeerPort},
		Confirm:           ch.Confirm, Transactional: ch.Tx, ConsumerCount: ch.Consumers,
		PrefetchCount: ch.Prefetch, GlobalPrefetchCount: ch.GlobalPrefetch,
		MessagesUnacknowledged: ch.Unacked, MessagesUnconfirmed: ch.Unconfirmed, MessagesUncommitted: ch.TxPublishes,
		AcksUncommitted: ch.TxAcks, MessageStats: ms,
		GarbageCollection: map[string]any{}, ReductionsDetails: details(0),
	}
	if at, idle := c.s.hist.idleSince(key, channelCounters(ch)); idle {
		m.IdleSince = idleJSON(at)
	}
	return m
}

func (c *call) channelsOf(filter func(server.ChannelInfo) bool) []api.Channel {
	list := []api.Channel{}
	for _, ch := range c.s.srv.Channels() {
		if c.seesUser(ch.User) && filter(ch) {
			list = append(list, c.chanJSON(ch))
		}
	}
	return list
}

func (c *call) channels() error {
	vhost, err := c.pathVHost()
	if err != nil {
		return err
	}
	if err := c.parseHistory(false, false); err != nil {
		return err
	}
	list := c.channelsOf(func(ch server.ChannelInfo) bool { return vhost == "" || ch.VHost == vhost })
	if c.clustered() {
		list = append(list, remoteVisible(c, func(m api.Channel) bool { return c.seesUser(m.User) })...)
	}
	return listOf(c, list)
}

func (c *call) connectionChannels() error {
	if err := c.parseHistory(false, false); err != nil {
		return err
	}
	ci, err := c.findConn()
	if err == errNotFound && c.clustered() {
		node, _, err := c.remoteConn()
		if err != nil {
			return err
		}
		for _, r := range c.fanOut(http.MethodGet, c.escapedPath(), nil) {
			if r.node == node && r.ok200() {
				writeBody(c.w, http.StatusOK, r.body)
				return nil
			}
		}
		return errNotFound
	}
	if err != nil {
		return err
	}
	return c.ok(c.channelsOf(func(ch server.ChannelInfo) bool { return ch.Connection == ci.Name }))
}

func (c *call) channelGet() error {
	if err := c.parseHistory(false, false); err != nil {
		return err
	}
	name := c.pv("name")
	for _, ch := range c.channelsOf(func(server.ChannelInfo) bool { return true }) {
		if ch.Name == name {
			d := api.ChannelDetail{Channel: ch, ConsumerDetails: []api.Consumer{}, Deliveries: []any{}, Publishes: []any{}}
			for _, cs := range c.s.srv.Consumers() {
				if cs.Channel == name {
					d.ConsumerDetails = append(d.ConsumerDetails, consumerJSON(c.s.node, cs))
				}
			}
			return c.ok(d)
		}
	}
	if c.clustered() {
		if _, m, ok := remoteItemOf[api.ChannelDetail](c, c.escapedPath()+c.rangeQuery()); ok && c.seesUser(m.User) {
			return c.ok(m)
		}
	}
	return errNotFound
}

func (c *call) consumers() error {
	vhost, err := c.pathVHost()
	if err != nil {
		return err
	}
	list := []api.Consumer{}
	for _, cs := range c.s.srv.Consumers() {
		if vhost != "" && cs.VHost != vhost || !c.canSee(cs.VHost) {
			continue
		}
		list = append(list, consumerJSON(c.s.node, cs))
	}
	if c.clustered() {
		list = append(list, remoteVisible(c, func(m api.Consumer) bool { return c.canSee(m.Queue.VHost) })...)
	}
	return c.ok(list)
}

func consumerJSON(node string, cs server.ConsumerInfo) api.Consumer {
	args := map[string]any{}
	if cs.Args != nil {
		args = broker.TableJSON(cs.Args)
	}
	return api.Consumer{
		ConsumerTag: cs.Tag, Exclusive: cs.Exclusive, AckRequired: cs.AckRequired,
		PrefetchCount: cs.Prefetch, Active: cs.Active, ActivityStatus: "up", Arguments: args,
		Queue: api.QueueRef{Name: cs.Queue, VHost: cs.VHost},
		ChannelDetails: api.ChannelDetails{Name: cs.Channel, ConnectionName: cs.Connection, Number: cs.ChannelNumber,
			Node: node, PeerHost: cs.PeerHost, PeerPort: cs.PeerPort, User: cs.User},
	}
}
