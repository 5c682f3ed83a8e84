package qraft

import (
	"errors"
	"fmt"
	"strings"
	"sync"
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

// issue 14 (faster quorum publishing): a Ready that only moves the commit
// index needs no fdatasync (raft's MustSync): with one proposal at a time
// and no ticks, the leader syncs about once per proposal (its entry), not
// twice (entry, then the commit), and so does each follower.
func TestCommitOnlyHardStateNotSynced(t *testing.T) {
	c := manualCluster(t, 3)
	c.startAll(1, c.names...)
	c.elect("n1", 1)
	if _, err := c.propose("n1", 1, "enq:warm"); err != nil {
		t.Fatal(err)
	}
	c.converge(1, 1, c.names...)
	before := map[string]uint64{}
	for _, n := range c.names {
		before[n] = c.hosts[n].Stats().Syncs
	}
	const n = 40
	for i := 0; i < n; i++ {
		if _, err := c.propose("n1", 1, fmt.Sprintf("enq:%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	c.converge(1, n+1, c.names...)
	for _, name := range c.names {
		d := c.hosts[name].Stats().Syncs - before[name]
		t.Logf("%s: %d syncs for %d proposals", name, d, n)
		if d > n+n/4 {
			t.Fatalf("%s: %d syncs for %d sequential proposals: the commit-only hard states are synced too", name, d, n)
		}
	}
}

// issue 14 (faster quorum publishing): a hard state appended without a
// sync does not release the one it supersedes before a sync: a crash
// right after loses only the commit index, never the term or the vote,
// and the member recovers and catches up. (The leader's last Ready here
// only moves its commit index: it is the member with a lazy hard state.)
func TestLazyHardStateCrashKeepsTermAndVote(t *testing.T) {
	c := manualCluster(t, 3)
	c.startAll(1, c.names...)
	c.elect("n1", 1)
	for i := 0; i < 10; i++ {
		if _, err := c.propose("n1", 1, fmt.Sprintf("enq:%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	c.converge(1, 10, c.names...)
	h := c.hosts["n1"]
	g := c.groups["n1"][1]
	type view struct {
		lazy, waiting int
		term, vote    uint64
	}
	look := func(g *Group, h *Host) view {
		ch := make(chan view, 1)
		if err := g.do(func() {
			hs := g.rn.BasicStatus().HardState
			ch <- view{h.lazy, len(h.afterSync), hs.GetTerm(), hs.GetVote()}
		}); err != nil {
			t.Fatal(err)
		}
		return <-ch
	}
	v := look(g, h)
	if v.lazy == 0 || v.lazy > v.waiting {
		t.Fatalf("leader: %d superseded records waiting lazily (of %d), want some: its commit-only hard state was synced, or its predecessor released", v.lazy, v.waiting)
	}
	c.stop("n1", true) // drops what was not synced
	h = c.open("n1")
	c.start("n1", 1, nil, false)
	w := look(c.groups["n1"][1], h)
	if w.term != v.term || w.vote != v.vote {
		t.Fatalf("after the crash: term %d vote %x, want term %d vote %x", w.term, w.vote, v.term, v.vote)
	}
	var l string
	waitFor(t, 10*time.Second, "a leader after the crash", func() bool {
		c.tickAll()
		time.Sleep(2 * time.Millisecond)
		for _, n := range c.names {
			if ld, _ := c.groups[n][1].Leader(); ld == n {
				l = n
				return true
			}
		}
		return false
	})
	l = c.leader(1)
	if _, err := c.propose(l, 1, "enq:after"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "every member to apply the new entry", func() bool {
		c.tickAll()
		time.Sleep(2 * time.Millisecond)
		for _, n := range c.names {
			if _, cnt, _ := c.sms[n][1].state(); cnt < 11 {
				return false
			}
		}
		return true
	})
	c.converge(1, 11, c.names...)
}

// issue 14 (faster quorum publishing): a leader sends its appends before
// its own fdatasync, so that it writes in parallel with its followers
// (raft counts its own copy only after the sync).
func TestLeaderSendsAppendBeforeItsSync(t *testing.T) {
	c := manualCluster(t, 3)
	c.startAll(1, c.names...)
	c.elect("n1", 1)
	c.converge(1, 0, c.names...)
	lh := c.hosts["n1"]
	var atSend []uint64
	c.net.mu.Lock()
	c.net.filter = func(from, to string, it *wireItem) bool {
		if from == "n1" && it.kind == itemRaft && it.msg.GetType().String() == "MsgApp" {
			for _, e := range it.msg.GetEntries() {
				if string(e.GetData()) == "enq:probe" {
					atSend = append(atSend, lh.store.Stats().Syncs)
				}
			}
		}
		return false
	}
	c.net.mu.Unlock()
	if _, err := c.propose("n1", 1, "enq:probe"); err != nil {
		t.Fatal(err)
	}
	after := lh.store.Stats().Syncs
	c.net.mu.Lock()
	c.net.filter = nil
	sends := append([]uint64(nil), atSend...)
	c.net.mu.Unlock()
	if len(sends) == 0 {
		t.Fatal("no MsgApp carried the probe entry")
	}
	for _, s := range sends {
		if s >= after {
			t.Fatalf("the probe's MsgApp left after the leader's sync (syncs %d at send, %d after the commit)", s, after)
		}
	}
}

// gateStore blocks Sync while armed, until released.
type gateStore struct {
	logStore
	mu      sync.Mutex
	armed   bool
	blocked chan struct{} // closed when a Sync starts waiting
	release chan struct{}
}

func (s *gateStore) arm() {
	s.mu.Lock()
	s.armed = true
	s.blocked = make(chan struct{})
	s.release = make(chan struct{})
	s.mu.Unlock()
}

func (s *gateStore) Sync() error {
	s.mu.Lock()
	armed, blocked, release := s.armed, s.blocked, s.release
	s.armed = false
	s.mu.Unlock()
	if armed {
		close(blocked)
		<-release
	}
	return s.logStore.Sync()
}

// issue 14 (faster quorum publishing): entries committed while a leader
// has new entries to persist are applied (their proposers answered)
// before the sync of the new entries, not after it.
func TestCommittedAppliedBeforeNextSync(t *testing.T) {
	var gate *gateStore
	c := newTCluster(t, 3, func(cfg *Config) {
		cfg.manualTicks = true
		if cfg.Self == "n1" {
			cfg.wrapStore = func(s logStore) logStore { gate = &gateStore{logStore: s}; return gate }
		}
	})
	c.startAll(1, c.names...)
	c.elect("n1", 1)
	if _, err := c.propose("n1", 1, "enq:warm"); err != nil {
		t.Fatal(err)
	}
	c.converge(1, 1, c.names...)
	// A's sync on the leader blocks; the followers get A meanwhile (sent
	// before the sync) and answer; B is proposed while the leader waits.
	gate.arm()
	first := gate.blocked
	g := c.groups["n1"][1]
	before := g.Status().LastIndex
	doneA := make(chan error, 1)
	g.Propose([]byte("enq:A"), func(_ uint64, err error) { doneA <- err })
	<-first
	waitFor(t, 5*time.Second, "the followers to have A", func() bool {
		for _, n := range []string{"n2", "n3"} {
			if st := c.groups[n][1].Status(); st.LastIndex < before+1 {
				return false
			}
		}
		return true
	})
	doneB := make(chan error, 1)
	g.Propose([]byte("enq:B"), func(_ uint64, err error) { doneB <- err })
	// The next sync (B's) blocks too: A must be answered while it waits.
	rel := gate.release
	gate.arm()
	second := gate.blocked
	close(rel)
	select {
	case <-second:
	case <-time.After(5 * time.Second):
		t.Fatal("the leader never synced B")
	}
	select {
	case err := <-doneA:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		close(gate.release)
		t.Fatal("A, committed, was not applied while the leader synced B")
	}
	close(gate.release)
	if err := <-doneB; err != nil {
		t.Fatal(err)
	}
}

// issue 22 (Raft ahead of data): a leader that cannot commit (both
// followers cut off, no ticks: it does not step down) appends at most
// MaxUncommitted bytes; the proposals beyond fail with ErrBusy, in no
// log; once the followers are back, everything appended commits and new
// proposals are taken again.
func TestUncommittedLogBounded(t *testing.T) {
	c := manualCluster(t, 3)
	c.startAll(1, c.names...)
	c.elect("n1", 1)
	if _, err := c.propose("n1", 1, "enq:a"); err != nil {
		t.Fatal(err)
	}
	c.converge(1, 1, c.names...)
	c.net.isolate("n1", c.names...)
	g := c.groups["n1"][1]
	body := "enq:" + strings.Repeat("x", 1<<20)
	var accepted, busy int
	answers := make(chan error, 64)
	for range 64 {
		g.Propose([]byte(body), func(_ uint64, err error) { answers <- err })
	}
	// The refused ones answer at once; the accepted ones wait for the
	// commit.
	waitFor(t, 10*time.Second, "the proposals over the bound to be refused", func() bool {
		for {
			select {
			case err := <-answers:
				if !errors.Is(err, ErrBusy) {
					t.Fatalf("a proposal answered %v while the followers are cut off", err)
				}
				busy++
				continue
			default:
			}
			break
		}
		return busy > 0 && busy+int(g.Status().LastIndex-g.Status().Commit) == 64
	})
	st := g.Status()
	accepted = int(st.LastIndex - st.Commit)
	if accepted*(1<<20) > MaxUncommitted+(1<<20) || accepted == 0 {
		t.Fatalf("%d uncommitted entries of 1 MiB, bound %d bytes", accepted, MaxUncommitted)
	}
	if got := c.hosts["n1"].Stats().Busy; got != uint64(busy) {
		t.Fatalf("Stats().Busy = %d, want %d", got, busy)
	}
	c.net.heal()
	deadline := time.After(10 * time.Second)
	for range accepted {
		for answered := false; !answered; {
			select {
			case err := <-answers:
				if err != nil {
					t.Fatalf("an accepted proposal after the heal: %v", err)
				}
				answered = true
			case <-time.After(10 * time.Millisecond):
				c.tickAll() // the appends lost in the cut go again
			case <-deadline:
				t.Fatal("the accepted proposals did not commit after the heal")
			}
		}
	}
	if _, err := c.propose("n1", 1, "enq:b"); err != nil {
		t.Fatalf("a proposal after the heal: %v", err)
	}
	c.converge(1, 2+accepted, c.names...)
	t.Logf("%d entries of 1 MiB appended uncommitted, %d refused busy", accepted, busy)
}
