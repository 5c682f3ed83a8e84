package broker

import (
	"context"
	"errors"
	"path/filepath"
	"slices"

	"github.com/warrenmq/warren/streamraft"
)

// A replicated stream's replicas (issue 25): rabbitmq-streams add_replica
// and delete_replica. As for a quorum queue (qqmembers.go) a change runs
// on the stream's leader, whose ConfChange it is: adding a replica is the
// metadata command that puts the node in the stream's members (the node,
// applying it, starts its member empty, and the leader sends it the
// whole log) and then the ConfChange; deleting one is the ConfChange
// first, then the command (the node, applying it, stops its member and
// empties its log). Adding a member already there, or deleting one that
// is not, is ok.

// streamLookup finds a stream for a replica operation, with RabbitMQ's
// reasons (rabbit_stream_queue:add_replica) for what is not one.
func (b *Broker) streamLookup(vhost, name string) (*Queue, error) {
	v := b.VHost(vhost)
	if v == nil {
		return nil, memberError("not_found")
	}
	q := v.Queue(name)
	if q == nil {
		return nil, memberError("not_found")
	}
	switch q.Config.Type {
	case QueueTypeStream:
		if q.sq.repl == nil {
			return nil, memberError("not_replicated")
		}
		return q, nil
	case QueueTypeQuorum:
		return nil, memberError("quorum_queue_not_supported")
	}
	return nil, memberError("classic_queue_not_supported")
}

// StreamMembershipOf is a stream's members and leader as this node knows
// them.
func (b *Broker) StreamMembershipOf(vhost, name string) (QuorumMembership, error) {
	q, err := b.streamLookup(vhost, name)
	if err != nil {
		return QuorumMembership{}, err
	}
	ms, _ := q.StreamReplicas()
	return QuorumMembership{VHost: vhost, Name: name, Members: ms, Leader: q.sq.repl.leaderNode(), Replicated: true}, nil
}

// leadingNode returns the stream's raft member if this node leads it,
// else a *NotLeaderError naming the leader.
func (r *streamRepl) leadingNode() (*streamraft.Node, error) {
	r.mu.Lock()
	node, l := r.node, r.leader
	r.mu.Unlock()
	if node == nil || !l.ready || l.node != r.s.q.vhost.b.node {
		leader := r.leaderNode()
		if leader == r.s.q.vhost.b.node {
			leader = "" // not ready yet: ask again
		}
		return nil, &NotLeaderError{Leader: leader}
	}
	return node, nil
}

// AddStreamReplica adds a replica of the stream on node (RabbitMQ's
// rabbitmq-streams add_replica). It runs on the stream's leader;
// elsewhere it answers *NotLeaderError.
func (b *Broker) AddStreamReplica(ctx context.Context, vhost, name, node string) error {
	q, err := b.streamLookup(vhost, name)
	if err != nil {
		return err
	}
	if !b.isClusterNode(node) {
		return memberError("node_not_running")
	}
	r := q.sq.repl
	cur := r.memberList()
	if slices.Contains(cur, node) {
		return nil
	}
	g, err := r.leadingNode()
	if err != nil {
		return err
	}
	next := append(slices.Clone(cur), node)
	if err := b.proposeMembers(q, next); err != nil {
		return err
	}
	if err := g.AddMember(ctx, node); err != nil {
		_ = b.proposeMembers(q, cur)
		return streamChangeFailed(err)
	}
	b.log.Info("stream: added a replica", "queue", name, "vhost", vhost, "node", node)
	return nil
}

// DeleteStreamReplica deletes the stream's replica on node (rabbitmq-
// streams delete_replica): last_stream_member for the only one. It runs
// on the leader; deleting the leader's own replica moves the leadership
// first and answers *NotLeaderError with the new leader.
func (b *Broker) DeleteStreamReplica(ctx context.Context, vhost, name, node string) error {
	q, err := b.streamLookup(vhost, name)
	if err != nil {
		return err
	}
	r := q.sq.repl
	cur := r.memberList()
	if !slices.Contains(cur, node) {
		return nil
	}
	if len(cur) == 1 {
		return memberError("last_stream_member")
	}
	g, err := r.leadingNode()
	if err != nil {
		return err
	}
	if node == b.node {
		p := b.getPeers()
		for _, m := range cur {
			if m != node && p != nil && p.Up(m) {
				g.TransferLeader(m)
				return &NotLeaderError{Leader: m}
			}
		}
		return memberError("no_other_member_online")
	}
	if err := g.RemoveMember(ctx, node); err != nil {
		return streamChangeFailed(err)
	}
	if err := b.proposeMembers(q, slices.DeleteFunc(slices.Clone(cur), func(m string) bool { return m == node })); err != nil {
		return err
	}
	b.log.Info("stream: deleted a replica", "queue", name, "vhost", vhost, "node", node)
	return nil
}

func streamChangeFailed(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return memberError("timeout")
	case errors.Is(err, streamraft.ErrNotLeader), errors.Is(err, streamraft.ErrDropped):
		return &NotLeaderError{}
	}
	return &MemberError{Reason: "error", Err: err}
}

// applyStreamMembers applies an opQueueMembers command to a stream: a
// node that becomes a member starts its member, empty; one that stops
// being one stops it and empties its log.
func (v *VHost) applyStreamMembers(q *Queue, c *command) error {
	r := q.sq.repl
	if r.group != uint64(c.Value) || len(c.Members) == 0 {
		return memberError("not_found")
	}
	r.mu.Lock()
	old := r.members
	r.members = slices.Clone(c.Members)
	r.mu.Unlock()
	v.mu.Lock()
	if q.recorded() {
		v.recordLocked(queueOp(v, q))
	}
	if err := v.unlockPersist(nil); err != nil {
		v.b.log.Error("stream: recording its members", "queue", q.Name, "vhost", v.Name, "err", err)
	}
	self := v.b.node
	switch was, is := slices.Contains(old, self), slices.Contains(c.Members, self); {
	case is && !was:
		r.member.Store(true)
		go r.startMember(false, true)
	case was && !is:
		r.member.Store(false)
		go r.leave()
	}
	v.b.log.Info("stream: members changed", "queue", q.Name, "vhost", v.Name, "members", c.Members)
	return nil
}

// leave stops this node's member (no longer one) and empties its log,
// so that it starts empty if it is added again.
func (r *streamRepl) leave() {
	r.mu.Lock()
	node := r.node
	r.node = nil
	r.leader = streamLeader{}
	r.mu.Unlock()
	if node != nil {
		node.Stop()
	}
	s := r.s
	s.mu.Lock()
	cons := make([]*streamConsumer, 0, len(s.cons))
	for _, c := range s.cons {
		cons = append(cons, c)
	}
	s.mu.Unlock()
	for _, c := range cons {
		c.stop()
	}
	fs, dir := s.q.vhost.streamPath(s.q.Name)
	_ = fs.Remove(filepath.Join(dir, "raft.state"))
	if err := s.log.Reset(0, 1, 0, nil); err != nil {
		s.q.vhost.b.log.Error("stream: emptying a deleted replica's log", "queue", s.q.Name, "err", err)
	}
}
