package qraft

import (
	"fmt"
	"testing"
	"time"
)

// manualCluster is a tcluster whose hosts tick only when told (tickAll):
// anything that happens without a tick did not wait for an election
// timeout.
func manualCluster(t *testing.T, n int) *tcluster {
	return newTCluster(t, n, func(c *Config) { c.manualTicks = true })
}

func (c *tcluster) tickAll() {
	for _, n := range c.names {
		if h := c.hosts[n]; h != nil {
			h.tickNow()
		}
	}
}

// elect makes node lead gid (no ticks: campaigns, again until one wins:
// a member just started may still have its bootstrap configuration to
// apply, and refuses to campaign) and waits for it.
func (c *tcluster) elect(node string, gid uint64) {
	c.t.Helper()
	waitFor(c.t, 10*time.Second, fmt.Sprintf("%s to lead group %d", node, gid), func() bool {
		if l, _ := c.groups[node][gid].Leader(); l == node {
			return true
		}
		if err := c.groups[node][gid].Campaign(); err != nil {
			c.t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		return false
	})
	if l := c.leader(gid); l != node {
		c.t.Fatalf("group %d: %s leads, want %s", gid, l, node)
	}
}

// quiesceManual ticks every host until every group is quiesced.
func (c *tcluster) quiesceManual(groups int) {
	c.t.Helper()
	waitFor(c.t, 10*time.Second, "every group to quiesce", func() bool {
		c.tickAll()
		time.Sleep(2 * time.Millisecond) // let the heartbeats of this tick land
		for _, name := range c.names {
			if h := c.hosts[name]; h != nil && h.Stats().Quiesced != groups {
				return false
			}
		}
		return true
	})
}

func (c *tcluster) others(except string) []string {
	var out []string
	for _, n := range c.names {
		if n != except {
			out = append(out, n)
		}
	}
	return out
}

// issue 14 (faster failover): when the transport reports the node of a
// group's leader down, its followers forget the leader and campaign
// after a short per-node delay, instead of waiting out the election
// timeout. Here no host ticks at all after the kill (and the groups were
// quiesced before it): every group the dead node led gets a new leader
// anyway, the others keep theirs, and the new leaders commit.
func TestCampaignOnLeaderDownWithoutTicks(t *testing.T) {
	c := manualCluster(t, 3)
	const groups = 12
	for gid := uint64(1); gid <= groups; gid++ {
		c.startAll(gid, c.names...)
		c.elect(c.names[gid%3], gid)
		if _, err := c.propose(c.names[gid%3], gid, "enq:a"); err != nil {
			t.Fatal(err)
		}
		c.converge(gid, 1, c.names...)
	}
	c.quiesceManual(groups)
	type lt struct {
		leader string
		term   uint64
	}
	before := map[uint64]lt{}
	for gid := uint64(1); gid <= groups; gid++ {
		l, term := c.groups["n2"][gid].Leader()
		before[gid] = lt{l, term}
	}
	dead := "n1"
	c.stop(dead, true)
	alive := c.others(dead)
	for _, n := range alive {
		c.hosts[n].PeerState(dead, false)
	}
	newLeaders := map[string]int{}
	for gid := uint64(1); gid <= groups; gid++ {
		if before[gid].leader != dead {
			continue
		}
		l2 := c.leader(gid, alive...) // no tick runs: only the campaign on the report elects
		newLeaders[l2]++
		if _, err := c.propose(l2, gid, "enq:b"); err != nil {
			t.Fatalf("group %d: propose on the new leader %s: %v", gid, l2, err)
		}
		c.converge(gid, 2, alive...)
		_, term := c.groups[l2][gid].Leader()
		t.Logf("group %d: %s -> %s, term %d -> %d", gid, dead, l2, before[gid].term, term)
	}
	if len(newLeaders) == 0 {
		t.Fatal("the dead node led no group")
	}
	for gid := uint64(1); gid <= groups; gid++ {
		if before[gid].leader == dead {
			continue
		}
		for _, n := range alive {
			if l, term := c.groups[n][gid].Leader(); l != before[gid].leader || term != before[gid].term {
				t.Fatalf("group %d on %s: leader %s term %d, want %s term %d (its leader is alive)", gid, n, l, term,
					before[gid].leader, before[gid].term)
			}
		}
	}
	t.Logf("new leaders: %v", newLeaders)
}

// issue 14 (faster failover, safety): the leader cut off alone (a
// partition: its node is "down" as both followers' links see it) is
// replaced on the majority side without any tick, and after the heal the
// old leader follows the new one.
func TestLeaderCutOffAloneElectsOnMajority(t *testing.T) {
	c := manualCluster(t, 3)
	c.startAll(1, c.names...)
	c.elect("n1", 1)
	if _, err := c.propose("n1", 1, "enq:a"); err != nil {
		t.Fatal(err)
	}
	c.converge(1, 1, c.names...)
	c.quiesceManual(1)
	_, term := c.groups["n1"][1].Leader()
	c.net.isolate("n1", c.names...)
	others := c.others("n1")
	for _, n := range others {
		c.hosts[n].PeerState("n1", false)
		c.hosts["n1"].PeerState(n, false)
	}
	l2 := c.leader(1, others...)
	if _, t2 := c.groups[l2][1].Leader(); t2 <= term {
		t.Fatalf("new leader %s in term %d, not above %d", l2, t2, term)
	}
	if _, err := c.propose(l2, 1, "enq:b"); err != nil {
		t.Fatal(err)
	}
	c.converge(1, 2, others...)
	c.net.heal()
	for _, n := range others {
		c.hosts[n].PeerState("n1", true)
		c.hosts["n1"].PeerState(n, true)
	}
	waitFor(t, 10*time.Second, "the old leader to follow the new one", func() bool {
		c.tickAll()
		time.Sleep(2 * time.Millisecond)
		ld, _ := c.groups["n1"][1].Leader()
		return ld == l2
	})
	c.converge(1, 2, c.names...)
}

// issue 14 (faster failover, safety): a follower cut off alone sees its
// leader's node "down" and campaigns at once, but only with a pre-vote,
// which the majority (still hearing from the leader) refuses: while cut
// off and after the heal nobody's term moves and the leader keeps leading
// (a real election runs ticks here, so that the cut-off follower keeps
// retrying on its election timeout too).
func TestFollowerCutOffAloneKeepsLeader(t *testing.T) {
	c := newTCluster(t, 3, nil)
	c.startAll(1, c.names...)
	l := c.leader(1)
	if _, err := c.propose(l, 1, "enq:a"); err != nil {
		t.Fatal(err)
	}
	c.converge(1, 1, c.names...)
	c.allQuiesced(1)
	_, term := c.groups[l][1].Leader()
	var f string
	for _, n := range c.names {
		if n != l {
			f = n
			break
		}
	}
	c.net.isolate(f, c.names...)
	for _, n := range c.others(f) {
		c.hosts[f].PeerState(n, false)
		c.hosts[n].PeerState(f, false)
	}
	waitFor(t, 5*time.Second, "the cut-off follower to campaign", func() bool {
		r := c.groups[f][1].Status().Role
		return r == "precandidate" || r == "candidate"
	})
	for i := 0; i < 5; i++ {
		if _, err := c.propose(l, 1, fmt.Sprintf("enq:b%d", i)); err != nil {
			t.Fatalf("the leader with its majority: %v", err)
		}
	}
	c.converge(1, 6, c.others(f)...)
	time.Sleep(30 * c.hosts[f].cfg.TickInterval) // a measurement window: the cut-off follower retries (3 election timeouts)
	if st := c.groups[f][1].Status(); st.Term != term {
		t.Fatalf("cut-off follower: term %d, want %d (a pre-vote must not move it)", st.Term, term)
	}
	c.net.heal()
	for _, n := range c.others(f) {
		c.hosts[f].PeerState(n, true)
		c.hosts[n].PeerState(f, true)
	}
	waitFor(t, 10*time.Second, "the cut-off follower to follow the leader again", func() bool {
		ld, _ := c.groups[f][1].Leader()
		return ld == l
	})
	c.converge(1, 6, c.names...)
	for _, n := range c.names {
		if ld, tm := c.groups[n][1].Leader(); ld != l || tm != term {
			t.Fatalf("%s after the heal: leader %q term %d, want %q term %d", n, ld, tm, l, term)
		}
	}
}
