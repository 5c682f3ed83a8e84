package broker

import "hash/fnv"

// Cluster membership as the broker sees it (issue 13). A broker with
// Config.Node == "" is a single node: no replication, no remote queues,
// today's code paths. With a node name, definition changes go through the
// cluster's Replicator (cmd.go) and queues homed on other nodes are
// reached through Peers (remote.go).

// Node returns this node's name ("warren@host"), "" for a single node.
func (b *Broker) Node() string { return b.node }

// Clustered reports whether this broker is a node of a cluster.
func (b *Broker) Clustered() bool { return b.node != "" }

// ConnIDBase returns the offset a node adds to its connection ids so that
// they are unique across the cluster (an exclusive queue's owner is known
// to every node): the low 24 bits of the FNV-1a hash of the node name,
// shifted left by 40. It is 0 for a single node.
func ConnIDBase(node string) uint64 {
	if node == "" {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(node))
	return uint64(h.Sum32()&0xFFFFFF) << 40
}

// IsLocal reports whether q lives on this node: always for a single
// node; in a cluster, when its home is this node.
func (q *Queue) IsLocal() bool { return q.Home == "" || q.Home == q.vhost.b.node }
