package broker

import "github.com/warrenmq/warren/broker/machine"

// Replicated quorum queues, the leader's side (issue 14). Stubs the
// leader-side owner fills in; see /work/i14-design.md.

// qqState is a replicated quorum queue's state on this node: nil on a
// single node and for every other queue type.
type qqState struct{}

// leaderHere reports whether this node is the queue's leader and has
// taken over (its Queue holds the messages and serves consumers).
func (s *qqState) leaderHere() bool { return false }

// leaderNode is the queue's leader as this node knows it, "" when none
// is known.
func (s *qqState) leaderNode() string { return "" }

// qqEnqueueAtLeader enqueues m under the publish id id on this node, the
// leader: done runs once with enqOK after the enqueue is committed on a
// majority and applied here, enqRejected for a reject-publish refusal,
// enqNotLeader when this node is not (or stopped being) the leader, or
// enqFailed. id.Publisher 0 means no deduplication.
func (q *Queue) qqEnqueueAtLeader(id machine.PubID, m *Message, done func(status byte)) {
	done(enqNotLeader)
}
