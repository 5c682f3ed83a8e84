package broker

// Replicated quorum queues, the side of every node that publishes to and
// consumes from them (issue 14). Stubs the client-side owner fills in;
// see /work/i14-design.md.

// qqLeaderChanged tells this node that queue q's leader is now leader in
// term term ("" when the node that led it is down and no new leader is
// known yet). It runs on every node, for every change this node learns
// of, in increasing term order, without queue locks held: the client side
// moves this node's consumers of q to the new leader and resends the
// publishes still waiting for it.
func (q *Queue) qqLeaderChanged(leader string, term uint64) {}
