package broker

import (
	"crypto/rand"
	"encoding/binary"
	"hash/fnv"
	"os"
	"strings"
)

// Cluster membership as the broker sees it (issue 13). A broker with
// Config.Node == "" is a single node: no replication, no remote queues,
// today's code paths. With a node name, definition changes go through the
// cluster's Replicator (cmd.go) and queues homed on other nodes are
// reached through Peers (remote.go).

// Node returns this node's name ("warren@host"), "" for a single node.
func (b *Broker) Node() string { return b.node }

// NodeName is the node's name as the management API and the cluster name
// show it: Config.Node in a cluster, else "warren@" and the short host
// name (RabbitMQ's rabbit@host).
func (b *Broker) NodeName() string {
	if b.node != "" {
		return b.node
	}
	host, _ := os.Hostname()
	if i := strings.IndexByte(host, '.'); i > 0 {
		host = host[:i]
	}
	if host == "" {
		host = "localhost"
	}
	return "warren@" + host
}

// ClusterName is RabbitMQ's cluster_name: a single node's own name, a
// cluster's least member name (the same whichever node answers). The
// server announces it in connection.start, federation links write it in
// x-received-from, shovels in x-shovelled.
func (b *Broker) ClusterName() string {
	name := b.NodeName()
	if b.nodes != nil {
		for _, n := range b.nodes() {
			if n < name {
				name = n
			}
		}
	}
	return name
}

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

// RunConnIDBase is what this run of the node adds to its connection ids
// (server.Config.ConnIDBase): ConnIDBase(node) plus a random 16-bit run
// epoch in bits 24-39, so that a restarted node's connections never take
// over the exclusive queues of its previous run's connections (which
// DropStaleExclusive deletes). 0 for a single node.
func (b *Broker) RunConnIDBase() uint64 { return b.runBase }

func newRunBase(node string) uint64 {
	if node == "" {
		return 0
	}
	var e [2]byte
	_, _ = rand.Read(e[:])
	return ConnIDBase(node) | uint64(binary.LittleEndian.Uint16(e[:]))<<24
}

// chooseHome picks the home node of a new queue in a cluster (called by
// the declaring node before it proposes the declare): Config.PlaceQueue
// if it answers; an exclusive queue's owner connection's node (this one);
// else the x-queue-leader-locator argument or the queue-leader-locator
// policy key: "client-local" (the default) is this node, "balanced" the
// node with the fewest queues homed on it, ties by name. v may be nil
// (a vhost an import creates).
func (b *Broker) chooseHome(vhost string, v *VHost, s QueueSpec) string {
	if b.node == "" {
		return ""
	}
	if b.placeQueue != nil {
		if h := b.placeQueue(vhost, s.Name); h != "" {
			return h
		}
	}
	if s.Exclusive {
		return b.node
	}
	loc, _ := s.Args["x-queue-leader-locator"].(string)
	if loc == "" && v != nil {
		typ, _ := s.Args["x-queue-type"].(string)
		if typ == "" {
			typ = QueueTypeClassic
		}
		if p := firstQueuePolicy(v.policies.load().user, s.Name, typ); p != nil {
			loc, _ = p.Definition["queue-leader-locator"].(string)
		}
	}
	switch loc {
	case "balanced", "least-leaders", "random":
		// RabbitMQ 3.10 maps its older values random and least-leaders
		// to balanced.
		return b.leastLoaded()
	}
	return b.node
}

// leastLoaded returns the cluster node with the fewest queues homed on
// it, ties broken by name.
func (b *Broker) leastLoaded() string {
	nodes := []string{b.node}
	if b.nodes != nil {
		if ns := b.nodes(); len(ns) > 0 {
			nodes = ns
		}
	}
	count := map[string]int{}
	for _, name := range b.VHosts() {
		v := b.VHost(name)
		if v == nil {
			continue
		}
		v.mu.RLock()
		for _, q := range v.queues {
			count[q.Home]++
		}
		v.mu.RUnlock()
	}
	best := ""
	for _, n := range nodes {
		if best == "" || count[n] < count[best] || count[n] == count[best] && n < best {
			best = n
		}
	}
	return best
}
