package mgmt

import (
	"context"
	"time"

	"github.com/warrenmq/warren/server"
)

// Maintenance mode of the node asked (issue 22): warren node drain and
// warren node revive, as RabbitMQ's rabbitmq-upgrade drain and revive.
// /api/nodes shows being_drained.
//
//	POST /api/node/drain    close the AMQP listeners, hand the quorum
//	                        leaderships over, close the connections
//	                        once their publishes are confirmed
//	POST /api/node/revive   listen again
func (s *Server) maintenanceRoutes() {
	s.handle("POST /api/node/drain", lvlAdmin, (*call).nodeDrain)
	s.handle("POST /api/node/revive", lvlAdmin, (*call).nodeRevive)
}

// Drain's bounds: a quorum leadership's transfer, and the connections'
// graceful close.
const (
	drainTransferWait = 5 * time.Second
	drainConnWait     = 15 * time.Second
)

// NodeMaintenance is the reply of both (warren node drain|revive reads
// it too).
type NodeMaintenance struct {
	Node            string `json:"node"`
	BeingDrained    bool   `json:"being_drained"`
	LeadersMoved    int    `json:"quorum_leaders_moved"`
	LeadersKept     int    `json:"quorum_leaders_kept"`
	ConnectionsLeft int    `json:"connections_left"`
}

func (c *call) nodeDrain() error {
	if err := c.s.srv.Suspend(); err != nil {
		return &apiError{Status: 500, Err: "internal_server_error", Reason: "drain: " + err.Error()}
	}
	c.s.log.Warn("node drain: listeners closed; handing over quorum leaderships and closing connections")
	moved, kept := c.s.b.TransferLeadershipsAway(context.Background(), drainTransferWait)
	if h, ok := c.s.cluster().(interface {
		HandOverMetaLeadership(context.Context) error
	}); ok {
		// The definitions' group too: changes then wait for no election
		// when this node stops.
		ctx, cancel := context.WithTimeout(context.Background(), drainTransferWait)
		if err := h.HandOverMetaLeadership(ctx); err != nil {
			c.s.log.Warn("node drain: the metadata leadership was not handed over", "err", err)
		}
		cancel()
	}
	left := c.s.srv.DrainConnections(server.MaintenanceReason, drainConnWait)
	return c.ok(NodeMaintenance{Node: c.s.node, BeingDrained: true, LeadersMoved: moved, LeadersKept: kept, ConnectionsLeft: left})
}

func (c *call) nodeRevive() error {
	if err := c.s.srv.Revive(); err != nil {
		return &apiError{Status: 500, Err: "internal_server_error", Reason: "revive: " + err.Error()}
	}
	return c.ok(NodeMaintenance{Node: c.s.node, BeingDrained: false})
}
