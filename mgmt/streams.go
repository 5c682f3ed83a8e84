package mgmt

import "github.com/warrenmq/warren/mgmt/api"

// StreamLister is the stream protocol's listener as the management API
// sees it (streamserver.Server): rabbitmq_stream_management's
// /api/stream/connections, /api/stream/publishers, /api/stream/consumers.
type StreamLister interface {
	Connections() []api.StreamConnection
	Publishers() []api.StreamPublisher
	Consumers() []api.StreamConsumer
}

func (s *Server) streamRoutes() {
	for _, base := range []string{"/api/stream/connections", "/api/stream/publishers", "/api/stream/consumers"} {
		s.handle("GET "+base, lvlManagement, (*call).streamList)
		s.handle("GET "+base+"/{vhost}", lvlManagement, (*call).streamList)
	}
}

// streamList lists what the user may see: its own connections (all of
// them for monitoring and administrators), on the vhosts it can see, on
// every node of a cluster (as RabbitMQ's lists are).
func (c *call) streamList() error {
	vh, err := c.pathVHost()
	if err != nil {
		return err
	}
	keep := func(user, vhost string) bool {
		return c.seesUser(user) && c.canSee(vhost) && (vh == "" || vhost == vh)
	}
	sl := c.s.cfg.Streams
	switch {
	case hasSuffixPath(c, "/api/stream/connections"):
		list := []api.StreamConnection{}
		if sl != nil {
			for _, x := range sl.Connections() {
				if keep(x.User, x.VHost) {
					list = append(list, x)
				}
			}
		}
		if c.clustered() {
			list = append(list, remoteVisible(c, func(x api.StreamConnection) bool { return keep(x.User, x.VHost) })...)
		}
		return listOf(c, list)
	case hasSuffixPath(c, "/api/stream/publishers"):
		list := []api.StreamPublisher{}
		if sl != nil {
			for _, x := range sl.Publishers() {
				if keep(x.ConnectionDetails.User, x.Queue.VHost) {
					list = append(list, x)
				}
			}
		}
		if c.clustered() {
			list = append(list, remoteVisible(c, func(x api.StreamPublisher) bool { return keep(x.ConnectionDetails.User, x.Queue.VHost) })...)
		}
		return listOf(c, list)
	}
	list := []api.StreamConsumer{}
	if sl != nil {
		for _, x := range sl.Consumers() {
			if keep(x.ConnectionDetails.User, x.Queue.VHost) {
				list = append(list, x)
			}
		}
	}
	if c.clustered() {
		list = append(list, remoteVisible(c, func(x api.StreamConsumer) bool { return keep(x.ConnectionDetails.User, x.Queue.VHost) })...)
	}
	return listOf(c, list)
}

// hasSuffixPath reports whether the request's path is base or base/{vhost}.
func hasSuffixPath(c *call, base string) bool {
	p := c.r.URL.Path
	return p == base || len(p) > len(base) && p[:len(base)+1] == base+"/"
}
