// Package cluster makes Warren nodes a cluster (issue 13): the inter-node
// transport (cluster/transport), the metadata Raft group holding the
// definitions (cluster/meta), and the glue that connects them to a broker,
// its management API and its remote queues.
package cluster

import (
	"crypto/tls"
	"errors"
	"log/slog"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/mgmt"
)

// Config configures a node.
type Config struct {
	// Node is this node's name, "warren@host".
	Node string
	// Listen is the inter-node listen address ("host:port"); Advertise
	// the address other nodes dial (default Listen).
	Listen, Advertise string
	// Peers are the other nodes of a static peer list: name -> address.
	Peers map[string]string
	// Secret is the shared cluster secret (RabbitMQ's Erlang cookie).
	Secret []byte
	// TLS, if set, encrypts inter-node links.
	TLS *tls.Config
	// Join starts the node empty, waiting to be added to a running
	// cluster (warren cluster join), instead of forming one from Peers.
	Join bool
	// DataDir keeps the node's Raft state.
	DataDir string
	Logger  *slog.Logger
}

// Node is a running cluster node.
type Node struct{}

// Start joins b (opened with Config.Node set) and its management server m
// (nil if disabled) to the cluster. Call it before serving clients.
func Start(cfg Config, b *broker.Broker, m *mgmt.Server) (*Node, error) {
	return nil, errors.New("cluster: not built yet (issue 13 in progress)")
}

// Close leaves the cluster's links and stops the node's Raft groups.
func (n *Node) Close() error { return nil }
