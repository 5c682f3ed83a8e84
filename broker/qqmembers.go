package broker

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"time"
)

// Quorum queue membership operations (issue 14): add and delete a member,
// move leadership, and what grow, shrink, rebalance and the quorum status
// are built from. RabbitMQ's rabbit_quorum_queue is the model: the same
// checks in the same order, the same reasons (its error atoms), the same
// idempotence (adding a member already there or deleting one that is not
// is ok).
//
// A change runs on the queue's leader (its ConfChange is the leader's to
// propose): the management API routes it there. Adding a member is the
// metadata command that puts the node in the queue record's Members (so
// that the node, applying it, starts its group member empty, join=true)
// and then the group's ConfChange; deleting one is the ConfChange first,
// then the command (the node, applying it, deletes its member). A change
// whose ConfChange fails is undone in the record, as RabbitMQ force-
// deletes the server it started.
//
// A quorum queue that is not replicated (a single node) has one member,
// its node: adding that node is ok, deleting it is last_node. A single
// node's name is "" here (the management API shows its own).

// MemberError is a membership operation refused, with RabbitMQ's reason:
// the error atom of rabbit_quorum_queue (not_found,
// classic_queue_not_supported, not_quorum_queue, node_not_running,
// last_node, timeout, ...).
type MemberError struct {
	Reason string
	Err    error // the cause, when there is one
}

func (e *MemberError) Error() string {
	if e.Err != nil {
		return e.Reason + ": " + e.Err.Error()
	}
	return e.Reason
}

func (e *MemberError) Unwrap() error { return e.Err }

func memberError(reason string) *MemberError { return &MemberError{Reason: reason} }

// NotLeaderError is a change asked of a node that does not lead the queue
// (any more): run it on Leader ("" while no leader is known).
type NotLeaderError struct{ Leader string }

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return "not_leader: the queue has no leader"
	}
	return "not_leader: the queue's leader is " + e.Leader
}

// QuorumMembership is a quorum queue's membership as this node knows it.
type QuorumMembership struct {
	VHost, Name string
	// Members are the nodes of its group (its record's Members), sorted.
	Members []string
	// Leader is its leader as this node knows it ("" when unknown).
	Leader string
	// Replicated is false for a quorum queue without a Raft group (a
	// single node): its one member is its node.
	Replicated bool
}

// QuorumMemberStatus is one member's Raft state, for the quorum status
// (RabbitMQ's rabbit_quorum_queue:status/2 rows).
type QuorumMemberStatus struct {
	Node           string
	RaftState      string // leader, follower, candidate, pre_vote; noproc when the member does not run
	Membership     string // voter
	LastLogIndex   uint64
	LastWritten    uint64
	LastApplied    uint64
	CommitIndex    uint64
	SnapshotIndex  uint64
	Term           uint64
	MachineVersion int
	LogBytes       int64 // Warren's: the member's log size on disk
	LogEntries     uint64
}

// quorumLookup finds a quorum queue for a membership operation, with
// RabbitMQ's reasons for what is not one.
func (b *Broker) quorumLookup(vhost, name string) (*Queue, error) {
	v := b.VHost(vhost)
	if v == nil {
		return nil, memberError("not_found")
	}
	q := v.Queue(name)
	if q == nil {
		return nil, memberError("not_found")
	}
	switch q.Config.Type {
	case QueueTypeQuorum:
		return q, nil
	case QueueTypeStream:
		return nil, memberError("not_quorum_queue")
	}
	return nil, memberError("classic_queue_not_supported")
}

// QuorumMembershipOf returns a quorum queue's membership; a MemberError
// not_found, classic_queue_not_supported or not_quorum_queue otherwise.
func (b *Broker) QuorumMembershipOf(vhost, name string) (QuorumMembership, error) {
	q, err := b.quorumLookup(vhost, name)
	if err != nil {
		return QuorumMembership{}, err
	}
	return b.membership(q), nil
}

// QuorumQueues lists every quorum queue's membership, by vhost and name.
func (b *Broker) QuorumMemberships() []QuorumMembership {
	var out []QuorumMembership
	for _, vn := range b.VHosts() {
		v := b.VHost(vn)
		if v == nil {
			continue
		}
		for _, q := range v.Queues() {
			if q.Config.Type == QueueTypeQuorum {
				out = append(out, b.membership(q))
			}
		}
	}
	return out
}

func (b *Broker) membership(q *Queue) QuorumMembership {
	info := QuorumMembership{VHost: q.vhost.Name, Name: q.Name}
	if ms := q.qqMemberNodes(); ms != nil {
		info.Members, info.Leader, info.Replicated = ms, q.HomeNode(), true
		return info
	}
	home := q.Home
	if home == "" {
		home = b.node
	}
	info.Members, info.Leader = []string{home}, home
	return info
}

// qqMemberNodes returns a replicated quorum queue's members, sorted; nil
// for a queue without a group.
func (q *Queue) qqMemberNodes() []string {
	if q.qq == nil {
		return nil
	}
	ms := slices.Clone(q.qqMembersRecord())
	sort.Strings(ms)
	return ms
}

// isClusterNode reports whether node is a member of the cluster (a single
// node: itself, "").
func (b *Broker) isClusterNode(node string) bool {
	if b.node == "" {
		return node == ""
	}
	if node == b.node {
		return true
	}
	return b.nodes != nil && slices.Contains(b.nodes(), node)
}

// AddQuorumMember adds a member on node to the quorum queue (RabbitMQ's
// rabbit_quorum_queue:add_member): ok when node is a member already. It
// runs on the queue's leader; elsewhere it answers *NotLeaderError. The
// caller checked that node is a running member of the cluster (RabbitMQ's
// node_not_running); a node outside the cluster is node_not_running here
// too.
func (b *Broker) AddQuorumMember(ctx context.Context, vhost, name, node string) error {
	q, err := b.quorumLookup(vhost, name)
	if err != nil {
		return err
	}
	info := b.membership(q)
	if !b.isClusterNode(node) {
		return memberError("node_not_running")
	}
	if slices.Contains(info.Members, node) {
		return nil // idempotent by design, as RabbitMQ
	}
	if !info.Replicated {
		// A quorum queue without a group (never in a cluster with the
		// replicated queues on) cannot grow.
		return memberError("not_replicated")
	}
	return b.qqAddMember(ctx, q, node)
}

// DeleteQuorumMember deletes the member on node (RabbitMQ's
// rabbit_quorum_queue:delete_member): ok when node is not a member,
// last_node for the only one. It runs on the queue's leader; elsewhere
// it answers *NotLeaderError. Deleting the leader's own member moves the
// leadership away first and then answers *NotLeaderError with the new
// leader, where the caller runs it again.
func (b *Broker) DeleteQuorumMember(ctx context.Context, vhost, name, node string) error {
	q, err := b.quorumLookup(vhost, name)
	if err != nil {
		return err
	}
	info := b.membership(q)
	if !slices.Contains(info.Members, node) {
		return nil // idempotent by design
	}
	if len(info.Members) == 1 {
		return memberError("last_node")
	}
	if !info.Replicated {
		return memberError("not_replicated")
	}
	return b.qqDeleteMember(ctx, q, node)
}

// TransferQuorumLeader moves the queue's leadership to the member on node
// (what rebalance does). It runs on the leader; elsewhere it answers
// *NotLeaderError. Ok when node leads already.
func (b *Broker) TransferQuorumLeader(ctx context.Context, vhost, name, node string) error {
	q, err := b.quorumLookup(vhost, name)
	if err != nil {
		return err
	}
	info := b.membership(q)
	if info.Leader == node {
		return nil
	}
	if !slices.Contains(info.Members, node) {
		return memberError("not_a_member")
	}
	if !info.Replicated {
		return memberError("not_replicated")
	}
	return b.qqTransferLeader(ctx, q, node)
}

// QuorumLocalStatus is this node's member of the queue's group, for the
// quorum status; noproc when this node runs no member of it.
func (b *Broker) QuorumLocalStatus(vhost, name string) (QuorumMemberStatus, error) {
	q, err := b.quorumLookup(vhost, name)
	if err != nil {
		return QuorumMemberStatus{}, err
	}
	return b.qqLocalStatus(q), nil
}

// GrowTargets are the quorum queues grow adds a member on node to
// (RabbitMQ's rabbit_quorum_queue:grow/4 selection): those matching the
// vhost and queue patterns (regular expressions, unanchored as re:run),
// without a member on node, and for strategy "even" with an even number
// of members. An invalid pattern or strategy is an error.
func (b *Broker) GrowTargets(node, vhostPattern, queuePattern, strategy string) ([]QuorumMembership, error) {
	if strategy != "all" && strategy != "even" {
		return nil, fmt.Errorf("strategy '%s' is not recognised.", strategy)
	}
	vre, err := regexp.Compile(vhostPattern)
	if err != nil {
		return nil, fmt.Errorf("vhost_pattern: %v", err)
	}
	qre, err := regexp.Compile(queuePattern)
	if err != nil {
		return nil, fmt.Errorf("queue_pattern: %v", err)
	}
	var out []QuorumMembership
	for _, info := range b.QuorumMemberships() {
		if slices.Contains(info.Members, node) || strategy == "even" && len(info.Members)%2 != 0 {
			continue
		}
		if vre.MatchString(info.VHost) && qre.MatchString(info.Name) {
			out = append(out, info)
		}
	}
	return out, nil
}

// ShrinkTargets are the quorum queues with a member on node (RabbitMQ's
// shrink_all/1 selection).
func (b *Broker) ShrinkTargets(node string) []QuorumMembership {
	var out []QuorumMembership
	for _, info := range b.QuorumMemberships() {
		if slices.Contains(info.Members, node) {
			out = append(out, info)
		}
	}
	return out
}

// LeaderMove is one leadership transfer of a rebalance.
type LeaderMove struct {
	VHost, Name string
	From, To    string
}

// RebalancePlan evens the leaders of the quorum queues matching the
// patterns out over the running nodes (RabbitMQ's
// rabbit_amqqueue:rebalance/3): at most ceil(queues/nodes) leaders per
// node; a node over that gives queues, one at a time, to the member of
// the queue with the fewest leaders, while that member is under it.
// Queues without a known leader stay where they are.
func RebalancePlan(queues []QuorumMembership, running []string, vhostPattern, queuePattern string) ([]LeaderMove, error) {
	vre, err := regexp.Compile(vhostPattern)
	if err != nil {
		return nil, fmt.Errorf("vhost_pattern: %v", err)
	}
	qre, err := regexp.Compile(queuePattern)
	if err != nil {
		return nil, fmt.Errorf("queue_pattern: %v", err)
	}
	if len(running) == 0 {
		return nil, nil
	}
	isRunning := map[string]bool{}
	for _, n := range running {
		isRunning[n] = true
	}
	var qs []QuorumMembership
	for _, q := range queues {
		if q.Replicated && len(q.Members) > 1 && vre.MatchString(q.VHost) && qre.MatchString(q.Name) {
			qs = append(qs, q)
		}
	}
	byNode := map[string][]int{} // leader -> indices into qs
	for i, q := range qs {
		if q.Leader != "" {
			byNode[q.Leader] = append(byNode[q.Leader], i)
		}
	}
	max := len(qs) / len(running)
	if len(qs)%len(running) != 0 {
		max++
	}
	var moves []LeaderMove
	nodes := make([]string, 0, len(byNode))
	for n := range byNode {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, from := range nodes {
		for _, i := range slices.Clone(byNode[from]) {
			if len(byNode[from]) <= max {
				break
			}
			q := qs[i]
			to := ""
			for _, m := range q.Members {
				if m == from || !isRunning[m] || len(byNode[m]) >= max {
					continue
				}
				if to == "" || len(byNode[m]) < len(byNode[to]) {
					to = m
				}
			}
			if to == "" {
				continue
			}
			byNode[from] = slices.DeleteFunc(byNode[from], func(j int) bool { return j == i })
			byNode[to] = append(byNode[to], i)
			moves = append(moves, LeaderMove{VHost: q.VHost, Name: q.Name, From: from, To: to})
		}
	}
	return moves, nil
}

// --- the group side ---

// opQueueMembers is the metadata command that sets a replicated quorum
// queue's members (VHost, Name, Members; Value is its group id, so that a
// command for a queue deleted and declared again does nothing).
const opQueueMembers = "queue.members"

// memberList returns the queue's members as its record has them (the
// vhost's lock guards the record; the metadata apply changes it).
func (s *qqState) memberList() []string {
	v := s.q.vhost
	v.mu.RLock()
	defer v.mu.RUnlock()
	return slices.Clone(s.members)
}

func (q *Queue) qqMembersRecord() []string { return q.qq.memberList() }

// group returns this node's member of the queue's group, nil when there
// is none.
func (s *qqState) group() QuorumGroup {
	s.smu.Lock()
	defer s.smu.Unlock()
	return s.g
}

// proposeMembers makes members the queue's members through the metadata
// group; every node applies it (applyQueueMembers).
func (b *Broker) proposeMembers(q *Queue, members []string) error {
	if b.repl == nil {
		return errors.New("not clustered")
	}
	kind := "queue"
	if q.IsStream() {
		kind = "stream"
	}
	_, group := q.typ().replicas()
	return b.propose(fmt.Sprintf("members of %s '%s' in vhost '%s'", kind, q.Name, q.vhost.Name),
		&command{Op: opQueueMembers, VHost: q.vhost.Name, Name: q.Name, Members: members, Value: int64(group)})
}

// applyQueueMembers applies an opQueueMembers command: the record's
// members change (and are written to the store); a node that becomes a
// member starts its member of the group, empty (join: the leader catches
// it up); one that stops being a member deletes its member and log.
func (v *VHost) applyQueueMembers(c *command) error {
	v.mu.Lock()
	q := v.queues[c.Name]
	if q != nil && q.sq != nil && q.sq.repl != nil {
		v.mu.Unlock()
		return v.applyStreamMembers(q, c)
	}
	if q == nil || q.qq == nil || q.qq.id != uint64(c.Value) || len(c.Members) == 0 {
		v.mu.Unlock()
		return memberError("not_found")
	}
	s := q.qq
	old := s.members
	s.members = slices.Clone(c.Members)
	if q.recorded() {
		v.recordLocked(queueOp(v, q))
	}
	if err := v.unlockPersist(nil); err != nil {
		v.b.log.Error("quorum queue: recording its members", "queue", q.Name, "vhost", v.Name, "err", err)
	}
	self := v.b.node
	switch was, is := slices.Contains(old, self), slices.Contains(c.Members, self); {
	case is && !was:
		s.join()
	case was && !is:
		s.leave()
	}
	v.b.log.Info("quorum queue: members changed", "queue", q.Name, "vhost", v.Name, "members", c.Members)
	return nil
}

// join starts this node's member of the group, empty and waiting for the
// leader (a member added later): start with join=true.
func (s *qqState) join() {
	b := s.q.vhost.b
	h := b.quorumHost()
	if h == nil {
		return
	}
	s.smu.Lock()
	if s.g != nil || s.gone || s.starting {
		s.smu.Unlock()
		return
	}
	s.starting = true
	s.st = nil // the leader's snapshot or log rebuilds it
	s.smu.Unlock()
	g, err := h.StartGroup(s.id, s.memberList(), (*qqSM)(s), true)
	s.smu.Lock()
	s.starting = false
	if err != nil {
		s.smu.Unlock()
		b.log.Error("quorum queue: starting a new member", "queue", s.q.Name, "vhost", s.q.vhost.Name, "group", s.id, "err", err)
		return
	}
	if s.gone {
		s.smu.Unlock()
		h.DeleteGroup(s.id)
		return
	}
	s.g = g
	takeover, term := s.pending, s.pterm
	s.pending = false
	s.smu.Unlock()
	if takeover {
		s.leaderChanged(b.node, term, true)
	}
}

// leave deletes this node's member of the group (its member was
// removed): the queue stays, led from elsewhere.
func (s *qqState) leave() {
	s.smu.Lock()
	g := s.g
	s.g = nil
	if s.here.Load() {
		s.stepDownLocked()
	}
	s.st = nil
	s.smu.Unlock()
	if h := s.q.vhost.b.quorumHost(); h != nil {
		if g != nil {
			h.DeleteGroup(s.id)
		}
		s.ask(h) // who leads now: the leader answers with its announcement
	}
}

// leading returns this node's group member when it leads the queue, else
// a *NotLeaderError naming the leader.
func (s *qqState) leading() (QuorumGroup, error) {
	g := s.group()
	if g == nil || !s.here.Load() {
		return nil, &NotLeaderError{Leader: s.leaderNode()}
	}
	if l, _ := g.Leader(); l != s.q.vhost.b.node {
		return nil, &NotLeaderError{Leader: l}
	}
	return g, nil
}

// changeFailed maps a group change's failure: the leadership moved, or it
// timed out.
func (s *qqState) changeFailed(err error) error {
	if !s.here.Load() {
		return &NotLeaderError{Leader: s.leaderNode()}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return memberError("timeout")
	}
	return &MemberError{Reason: "change_failed", Err: err}
}

func (b *Broker) qqAddMember(ctx context.Context, q *Queue, node string) error {
	s := q.qq
	g, err := s.leading()
	if err != nil {
		return err
	}
	cur := s.memberList()
	if slices.Contains(cur, node) {
		return nil
	}
	next := append(slices.Clone(cur), node)
	// The record first: node, applying it, starts its member (join), and
	// the change answers once every running node applied it.
	if err := b.proposeMembers(q, next); err != nil {
		return err
	}
	if err := g.AddMember(ctx, node); err != nil {
		// Undo, as RabbitMQ removes the member and deletes the server
		// it started: the change may still commit after a timeout.
		rctx, cancel := context.WithTimeout(context.Background(), leaderMoveWait)
		_ = g.RemoveMember(rctx, node)
		cancel()
		if uerr := b.proposeMembers(q, cur); uerr != nil {
			b.log.Error("quorum queue: undoing a member's record", "queue", q.Name, "vhost", q.vhost.Name, "node", node, "err", uerr)
		}
		return s.changeFailed(err)
	}
	b.log.Info("quorum queue: added a member", "queue", q.Name, "vhost", q.vhost.Name, "node", node)
	return nil
}

// leaderMoveWait bounds moving the leadership off a member being deleted.
const leaderMoveWait = 10 * time.Second

func (b *Broker) qqDeleteMember(ctx context.Context, q *Queue, node string) error {
	s := q.qq
	g, err := s.leading()
	if err != nil {
		return err
	}
	cur := s.memberList()
	if node == b.node {
		// The leader's own member: the leadership moves to another
		// (online) member first, which then deletes this one.
		st := g.Status()
		to := ""
		for _, m := range cur {
			if m != node && slices.Contains(st.Online, m) {
				to = m
				break
			}
		}
		if to == "" {
			return memberError("no_other_member_online")
		}
		tctx, cancel := context.WithTimeout(ctx, leaderMoveWait)
		defer cancel()
		if err := g.TransferLeader(tctx, to); err != nil {
			return s.changeFailed(err)
		}
		return &NotLeaderError{Leader: to}
	}
	if err := g.RemoveMember(ctx, node); err != nil {
		return s.changeFailed(err)
	}
	next := slices.DeleteFunc(slices.Clone(cur), func(m string) bool { return m == node })
	if err := b.proposeMembers(q, next); err != nil {
		return err
	}
	b.log.Info("quorum queue: deleted a member", "queue", q.Name, "vhost", q.vhost.Name, "node", node)
	return nil
}

func (b *Broker) qqTransferLeader(ctx context.Context, q *Queue, node string) error {
	s := q.qq
	g, err := s.leading()
	if err != nil {
		return err
	}
	if err := g.TransferLeader(ctx, node); err != nil {
		return s.changeFailed(err)
	}
	return nil
}

// qqMachineVersion is the quorum status's Machine Version: the version of
// the replicated state's command codec.
const qqMachineVersion = 1

func (b *Broker) qqLocalStatus(q *Queue) QuorumMemberStatus {
	st := QuorumMemberStatus{Node: b.node, RaftState: "noproc"}
	if q.qq == nil {
		info := b.membership(q)
		if slices.Contains(info.Members, b.node) {
			st.RaftState, st.Membership = "leader", "voter"
		}
		return st
	}
	g := q.qq.group()
	if g == nil {
		return st
	}
	gs := g.Status()
	st.Membership, st.MachineVersion = "voter", qqMachineVersion
	switch gs.Role {
	case "leader", "follower", "candidate":
		st.RaftState = gs.Role
	case "precandidate":
		st.RaftState = "pre_vote" // Ra's name for the pre-vote phase
	case "stopped":
		st.RaftState = "noproc"
	default:
		st.RaftState = "follower"
	}
	st.Term, st.CommitIndex, st.LastApplied = gs.Term, gs.Commit, gs.Applied
	st.LastLogIndex, st.LastWritten = gs.LastIndex, gs.LastIndex
	st.SnapshotIndex, st.LogBytes, st.LogEntries = gs.SnapshotIndex, gs.LogBytes, gs.LogEntries
	return st
}

// ForcedAlone brings the queue records in line with a forced start of
// this node as the only member of its cluster (issue 22, warren node
// force-boot): each quorum queue with a member here gets this node as its
// only member (its group was shrunk the same way); the queues that had
// no replica here (quorum queues without a member here, classic queues
// of other nodes) are returned as lost: their messages were on the lost
// nodes. An error means some records could not be changed yet (retry).
func (b *Broker) ForcedAlone() (shrunk, lost []string, err error) {
	self := b.node
	for _, vn := range b.VHosts() {
		v := b.VHost(vn)
		if v == nil {
			continue
		}
		for _, q := range v.Queues() {
			id := fmt.Sprintf("'%s' in vhost '%s'", q.Name, vn)
			ms := q.qqMemberNodes()
			switch {
			case ms != nil && slices.Contains(ms, self):
				if len(ms) == 1 {
					continue
				}
				if perr := b.proposeMembers(q, []string{self}); perr != nil {
					err = errors.Join(err, perr)
					continue
				}
				shrunk = append(shrunk, id)
			case ms != nil:
				lost = append(lost, id)
			case q.Home != "" && q.Home != self:
				lost = append(lost, id)
			}
		}
	}
	return shrunk, lost, err
}
