package cluster

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warrenmq/warren/cluster/meta"
	"github.com/warrenmq/warren/cluster/transport"
)

// Features: formats a node's build decodes that an older build does not.
// A node writes such a format into a replicated log only once every node
// of the cluster has said it decodes it, since a member that cannot would
// skip the entry and its state would part from the others'. RabbitMQ's
// feature flags do the same job: on only when every node has them, and
// never off again (a build that lacks a format in use must not rejoin).
//
// Each node asks every peer, each time their link comes up, with a call to
// svcFeat; a node too old to have the service answers that it has no
// handler, which means no features.

// featEnqueueBatch: several publishes in one quorum queue entry
// (qrepl.EnqueueBatch).
const featEnqueueBatch = "qq-enqueue-batch"

// featStreamRaft: replicated streams (streamraft); a cluster declares
// streams only once every node has them.
const featStreamRaft = "stream-raft"

// streamEndpointFeat prefixes a line of the answer that is no feature:
// the node's stream-protocol endpoint ("stream@host:port"), which the
// peers give stream clients (an older build ignores it).
const streamEndpointFeat = "stream@"

// ourFeatures are this build's, as svcFeat answers them.
var ourFeatures = []string{featEnqueueBatch, featStreamRaft}

// featuresWait bounds a peer's answer.
const featuresWait = 10 * time.Second

// features is what each peer's build said it decodes. A peer keeps its
// answer while it is down: it restarts with the same build, or with a
// newer one that says so again.
type features struct {
	mu   sync.Mutex
	peer map[string]map[string]bool
}

func (n *Node) serveFeatures(string, []byte) ([]byte, error) {
	fs := ourFeatures
	if n.cfg.StreamEndpoint != "" {
		fs = append(slices.Clone(fs), streamEndpointFeat+n.cfg.StreamEndpoint)
	}
	return []byte(strings.Join(fs, "\n")), nil
}

// peerStreamEndpoint is the stream endpoint peer name said it has.
func (n *Node) peerStreamEndpoint(name string) string {
	n.feat.mu.Lock()
	defer n.feat.mu.Unlock()
	for f := range n.feat.peer[name] {
		if ep, ok := strings.CutPrefix(f, streamEndpointFeat); ok {
			return ep
		}
	}
	return ""
}

// askFeatures asks peer name what it decodes (its link just came up).
func (n *Node) askFeatures(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), featuresWait)
	defer cancel()
	b, err := n.tr.Call(ctx, name, svcFeat, nil)
	var re *transport.RemoteError
	switch {
	case err == nil:
	case errors.As(err, &re):
		b = nil // an older build: no handler, no features
	default:
		return // the link went again: asked when it comes back
	}
	set := map[string]bool{}
	for _, f := range strings.Split(string(b), "\n") {
		if f != "" {
			set[f] = true
		}
	}
	n.feat.mu.Lock()
	if n.feat.peer == nil {
		n.feat.peer = map[string]map[string]bool{}
	}
	n.feat.peer[name] = set
	n.feat.mu.Unlock()
	if g := n.group(); g != nil {
		n.featuresChanged(g.Members())
	}
}

// featuresChanged turns the broker's uses of new formats on once every
// member of the cluster (ms) has them, and off while one has not
// answered.
func (n *Node) featuresChanged(ms []meta.Member) {
	all := len(ms) > 0 && !n.cfg.NoFeatures // (playing an older build, it has none)
	streams := all
	n.feat.mu.Lock()
	for _, m := range ms {
		if m.Name != n.cfg.Node && !n.feat.peer[m.Name][featEnqueueBatch] {
			all = false
		}
		if m.Name != n.cfg.Node && !n.feat.peer[m.Name][featStreamRaft] {
			streams = false
		}
	}
	n.feat.mu.Unlock()
	n.b.SetQuorumBatching(all)
	n.b.SetStreamReplication(streams)
}
