package mgmt

import (
	"context"
	"net/http"
	"slices"
)

// A replicated stream's replicas over the API (issue 25): what
// rabbitmq-streams add_replica and delete_replica do (RabbitMQ has them
// on its CLI only), with the quorum queues' conventions (quorum.go):
//
//	POST   /api/streams/{vhost}/{name}/replicas/add      {"node"}  204
//	DELETE /api/streams/{vhost}/{name}/replicas/delete   {"node"}  202
//
// Administrators only. A refused change is 503 {"error":
// "service_unavailable", "reason": rabbit_stream_queue's error atom}; the
// change runs on the stream's leader, where the node asked forwards it.

func (s *Server) streamReplicaRoutes() {
	s.handle("POST /api/streams/{vhost}/{name}/replicas/add", lvlAdmin, (*call).streamAddReplica)
	s.handle("DELETE /api/streams/{vhost}/{name}/replicas/delete", lvlAdmin, (*call).streamDeleteReplica)
}

func (c *call) streamAddReplica() error {
	r, err := c.memberRequestOf(c.s.b.StreamMembershipOf)
	if err != nil {
		return err
	}
	if !c.local && !c.s.isRunning(r.node) {
		return unavailable("node_not_running")
	}
	if slices.Contains(r.info.Members, r.node) {
		return c.noContent()
	}
	return c.relay(c.atLeader(r.vhost, r.name, c.escapedPath(), r.raw, http.StatusNoContent, func(ctx context.Context) error {
		return c.s.b.AddStreamReplica(ctx, r.vhost, r.name, r.node)
	}))
}

func (c *call) streamDeleteReplica() error {
	r, err := c.memberRequestOf(c.s.b.StreamMembershipOf)
	if err != nil {
		return err
	}
	return c.relay(c.atLeader(r.vhost, r.name, c.escapedPath(), r.raw, http.StatusAccepted, func(ctx context.Context) error {
		return c.s.b.DeleteStreamReplica(ctx, r.vhost, r.name, r.node)
	}))
}
