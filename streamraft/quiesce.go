package streamraft

import (
	"bytes"
	"time"

	"github.com/warrenmq/warren/internal/raftpeer"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Quiescence, as the quorum queues' groups do it (cluster/qraft/doc.go).
//
// An idle stream costs nothing: a leader whose group is idle (nothing
// proposed or in flight, every reachable member caught up and recently
// active, the commit unchanged for Config.QuiesceTicks ticks) stops
// ticking, so it sends no heartbeats, and tells its followers, which stop
// too when their log and commit match its. A quiesced member wakes on a
// proposal, an operation or a raft message (a heartbeat response
// excepted); a woken leader heartbeats again.
//
// A quiesced follower does not count down to an election, so the
// failure of its leader's node comes from the cluster's links
// (PeerState): the follower forgets that leader and campaigns after a
// short delay spread by node. PreVote and CheckQuorum stay on, so a
// follower merely cut off from a live leader only pre-votes, which the
// members that still hear from the leader refuse: no term moves. A
// quiesced leader wakes when a member's node goes down (so that
// CheckQuorum makes it step down if it lost its quorum) or comes back
// up (to catch it up).

// quiesceCtx marks the leader's "quiesce" message: a heartbeat that only
// a member of this package reads as such (it is never stepped).
var quiesceCtx = []byte("warren-quiesce")

func isQuiesce(m *pb.Message) bool {
	return m.GetType() == pb.MsgHeartbeat && bytes.Equal(m.GetContext(), quiesceCtx)
}

type peerEvent struct {
	node string
	up   bool
}

// PeerState tells the member that the link to node went down or came up
// (the cluster's transport saw it).
func (n *Node) PeerState(node string, up bool) {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return
	}
	n.peerEv = append(n.peerEv, peerEvent{node, up})
	n.mu.Unlock()
	n.poke()
}

func (n *Node) online(name string) bool {
	return name == n.cfg.Self || n.cfg.Online == nil || n.cfg.Online(name)
}

// tick advances raft's clock, unless the group quiesces now.
func (n *Node) tick() {
	if n.quiesced || n.maybeQuiesce() {
		return
	}
	n.rn.Tick()
}

func (n *Node) unquiesce() {
	n.quiesced = false
	n.idleTicks = 0
}

// maybeQuiesce quiesces a leader's idle group; it reports whether it did.
func (n *Node) maybeQuiesce() bool {
	if n.cfg.QuiesceTicks < 0 {
		return false
	}
	reset := func() bool { n.idleTicks = 0; return false }
	st := n.rn.BasicStatus()
	if st.RaftState != raft.StateLeader || st.LeadTransferee != raft.None || !n.ready ||
		len(n.inflight) > 0 || len(n.fresh) > 0 || n.rn.HasReady() {
		return reset()
	}
	last := n.log.LastIndex()
	if st.GetCommit() != last || st.Applied != last {
		return reset()
	}
	followers, ok := raftpeer.Followers(n.rn, n.self, last, n.st.cs.GetVoters(), func(id uint64) bool {
		name := n.name(id)
		return name != "" && n.online(name)
	})
	if !ok {
		return reset()
	}
	if st.GetCommit() != n.idleCommit {
		n.idleCommit = st.GetCommit()
		n.idleTicks = 0
	}
	n.idleTicks++
	if n.idleTicks < n.cfg.QuiesceTicks {
		return false
	}
	n.quiesced = true
	for _, f := range followers {
		m := &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(n.self), To: new(f),
			Term: new(st.GetTerm()), Commit: new(st.GetCommit()), Context: quiesceCtx}
		if b, err := proto.Marshal(m); err == nil {
			n.cfg.Send(n.name(f), b)
		}
	}
	return true
}

// followQuiesce quiesces a follower told to by its leader, once its log
// and commit are the leader's. The message is first a heartbeat (without
// the mark, so that raft reads no read-index context in the answer): it
// carries the leader's commit, which the follower's log holds.
func (n *Node) followQuiesce(m *pb.Message) {
	st := n.rn.BasicStatus()
	if st.RaftState != raft.StateFollower || st.GetTerm() != m.GetTerm() || st.Lead != m.GetFrom() ||
		n.log.LastIndex() != m.GetCommit() {
		return
	}
	hb := &pb.Message{Type: pb.MsgHeartbeat.Enum(), From: new(m.GetFrom()), To: new(m.GetTo()),
		Term: new(m.GetTerm()), Commit: new(m.GetCommit())}
	if err := n.rn.Step(hb); err != nil {
		return
	}
	if n.rn.BasicStatus().GetCommit() == m.GetCommit() {
		n.quiesced = true
	}
}

// peerEvent wakes the member where a node's state matters to it.
func (n *Node) peerEvent(ev peerEvent) {
	id := NodeID(ev.node)
	st := n.rn.BasicStatus()
	if !ev.up && st.Lead == id && st.RaftState == raft.StateFollower {
		n.leaderDown(st.GetTerm(), id)
		return
	}
	if n.quiesced && st.RaftState == raft.StateLeader && n.isVoter(id) {
		// up: catch the member up; down: tick, so that CheckQuorum
		// makes a leader cut off from its quorum step down
		n.unquiesce()
	}
}

func (n *Node) isVoter(id uint64) bool {
	for _, v := range n.st.cs.GetVoters() {
		if v == id {
			return true
		}
	}
	return false
}

// leaderDown: the link to this follower's leader's node is down. The
// follower forgets its leader at once and campaigns after a delay spread
// by node (raftpeer.CampaignDelay), instead of an election timeout later (a
// quiesced follower does not even count). The campaign is a pre-vote,
// which a member still hearing from the leader refuses (its lease
// holds), so a cut link alone moves no term.
func (n *Node) leaderDown(term, leader uint64) {
	n.unquiesce()
	_ = n.rn.ForgetLeader()
	time.AfterFunc(raftpeer.CampaignDelay(n.cfg.Group, n.self, leader, n.st.cs.GetVoters()), func() {
		n.op(func() {
			st := n.rn.BasicStatus()
			if st.RaftState != raft.StateFollower || st.Lead != raft.None || st.GetTerm() != term {
				return // a leader (or an election) came first
			}
			_ = n.rn.Campaign()
		})
	})
}
