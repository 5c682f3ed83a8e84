package cluster

import (
	"hash/fnv"
)

// Links (shovels, issue 24) are runtime parameters every node holds;
// each runs on one node: the member that ranks first for it among those
// this node sees running (rendezvous hashing), so that links spread over
// the nodes and those of a node that dies move to the others, each to
// one of them. Two nodes that see each other down (a cut between them)
// may both run a link for a while: a shovel's on-confirm acks then
// deliver some messages twice, never lose one.

// ownsLink reports whether this node runs the link.
func (n *Node) ownsLink(component, vhost, name string) bool {
	best, bestScore := "", uint64(0)
	for _, node := range n.nodeNames() {
		if node != n.cfg.Node && !n.tr.Up(node) {
			continue
		}
		h := fnv.New64a()
		h.Write([]byte(node))
		h.Write([]byte{0})
		h.Write([]byte(component))
		h.Write([]byte{0})
		h.Write([]byte(vhost))
		h.Write([]byte{0})
		h.Write([]byte(name))
		if s := h.Sum64(); best == "" || s > bestScore {
			best, bestScore = node, s
		}
	}
	return best == n.cfg.Node
}
