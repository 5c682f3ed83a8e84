// Package raftpeer is what every raft group Warren drives (cluster/meta,
// cluster/qraft, streamraft) agrees on about its members: a node's raft
// id, and the order in which followers campaign once their leader's node
// is reported down.
package raftpeer

import (
	"encoding/binary"
	"hash/fnv"
	"math/rand/v2"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// NodeID is a node's static Raft id: FNV-1a 64 of its name, 0 mapped to 1.
func NodeID(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	if id := h.Sum64(); id != 0 {
		return id
	}
	return 1
}

// CampaignStagger spaces the campaigns of a group's followers after its
// leader's node went down: the follower ranked k campaigns after
// k*CampaignStagger plus up to half of it at random, so that two rarely
// split the vote.
const CampaignStagger = 50 * time.Millisecond

// CampaignDelay is how long follower self of group waits before it
// campaigns, its leader's node down: by its rank among the voters other
// than leader, in an order by a hash of the group and the node (so that
// the groups of a dead node spread their new leaders over the others).
func CampaignDelay(group, self, leader uint64, voters []uint64) time.Duration {
	key := func(id uint64) uint64 {
		h := fnv.New64a()
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], group)
		binary.BigEndian.PutUint64(b[8:], id)
		h.Write(b[:])
		return h.Sum64()
	}
	mine := key(self)
	rank := 0
	for _, v := range voters {
		if v == self || v == leader {
			continue
		}
		if k := key(v); k < mine || k == mine && v < self {
			rank++
		}
	}
	return time.Duration(rank)*CampaignStagger + rand.N(CampaignStagger/2+1)
}

// Followers checks, for a leader whose log ends at last, whether its
// followers let its idle group quiesce: every follower whose node is
// online (online, which says false for an unknown id) has matched last,
// was recently active and is replicating, and a quorum of the voters,
// the leader included, is online (without one the leader keeps ticking,
// so that CheckQuorum makes it step down). It returns the online
// followers, which the leader tells to quiesce.
func Followers(rn *raft.RawNode, self, last uint64, voters []uint64, online func(id uint64) bool) ([]uint64, bool) {
	ok := true
	var followers []uint64
	rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id == self || !online(id) {
			return
		}
		if pr.Match != last || !pr.RecentActive || pr.State != tracker.StateReplicate {
			ok = false
		}
		followers = append(followers, id)
	})
	reachable := 1
	for _, id := range voters {
		if id != self && online(id) {
			reachable++
		}
	}
	return followers, ok && reachable >= len(voters)/2+1
}
