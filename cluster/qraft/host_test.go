package qraft

import (
	"errors"
	"fmt"
	"github.com/warrenmq/warren/internal/testutil"
	"sync"
	"testing"
	"time"
)

// issue 14: a group on three hosts commits proposals made on its leader,
// in order, and every member applies the same entries.
func TestProposeApply(t *testing.T) {
	c := newTCluster(t, 3, nil)
	c.startAll(1, c.names...)
	l := c.leader(1)
	var last uint64
	for i := 0; i < 50; i++ {
		idx, err := c.propose(l, 1, fmt.Sprintf("enq:%d", i))
		if err != nil {
			t.Fatalf("propose %d: %v", i, err)
		}
		if idx <= last {
			t.Fatalf("index %d after %d", idx, last)
		}
		last = idx
		// done runs after the state machine applied the entry here
		if _, n, _ := c.sms[l][1].state(); n != i+1 {
			t.Fatalf("done before apply: %d applied after proposal %d", n, i)
		}
	}
	c.converge(1, 50, c.names...)
	for _, n := range c.names {
		if data, err := c.groups[n][1].ReadEntry(last); err != nil || string(data) != "enq:49" {
			t.Fatalf("%s: ReadEntry(%d) = %q, %v", n, last, data, err)
		}
	}
	for _, n := range c.names {
		if n == l {
			continue
		}
		if _, err := c.propose(n, 1, "enq:x"); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("propose on follower %s: %v, want ErrNotLeader", n, err)
		}
		if ld, _ := c.groups[n][1].Leader(); ld != l {
			t.Fatalf("%s sees leader %q, want %q", n, ld, l)
		}
	}
	// Applied entries' bodies are not kept in memory: ReadEntry above read
	// them back from the store.
	for _, n := range c.names {
		ls := c.groups[n][1].ls
		ls.mu.Lock()
		for i, m := range ls.ents[1:] {
			if idx := ls.first + 1 + uint64(i); m.ent != nil && idx <= c.groups[n][1].Status().Applied {
				t.Errorf("%s: body of applied entry %d still cached", n, idx)
			}
		}
		ls.mu.Unlock()
	}
	// The status is the loop's view, refreshed at the end of each of its
	// passes: it may show the last apply a pass later than its done ran
	// (seen once under -race in CI: Applied 53 with last 54).
	var st GroupStatus
	if !testutil.Until(5*time.Second, func() bool {
		st = c.groups[l][1].Status()
		return st.Role == "leader" && st.Leader == l && len(st.Members) == 3 && st.Applied >= last && st.Commit >= last
	}) {
		t.Fatalf("status %+v, want leader %s, 3 members, applied and committed %d", st, l, last)
	}
}

// issue 14: many groups on the same hosts are driven by one loop per host;
// raft messages to a peer are batched in one transport message per pass.
func TestManyGroups(t *testing.T) {
	c := newTCluster(t, 3, nil)
	const groups = 40
	for gid := uint64(1); gid <= groups; gid++ {
		c.startAll(gid, c.names...)
	}
	leaders := map[uint64]string{}
	for gid := uint64(1); gid <= groups; gid++ {
		leaders[gid] = c.leader(gid)
	}
	var wg sync.WaitGroup
	errs := make(chan error, groups)
	for gid := uint64(1); gid <= groups; gid++ {
		wg.Add(1)
		go func(gid uint64) {
			defer wg.Done()
			l := leaders[gid]
			var pwg sync.WaitGroup
			for i := 0; i < 20; i++ {
				pwg.Add(1)
				c.groups[l][gid].Propose([]byte(fmt.Sprintf("enq:%d", i)), func(_ uint64, err error) {
					if err != nil {
						errs <- fmt.Errorf("group %d: %w", gid, err)
					}
					pwg.Done()
				})
			}
			pwg.Wait()
		}(gid)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for gid := uint64(1); gid <= groups; gid++ {
		c.converge(gid, 20, c.names...)
	}
	var msgs, batches uint64
	for _, n := range c.names {
		st := c.hosts[n].Stats()
		msgs += st.RaftMsgs
		batches += st.Batches
		if st.Groups != groups {
			t.Fatalf("%s drives %d groups", n, st.Groups)
		}
	}
	for _, n := range c.names {
		// One fdatasync per batch of Readies (plus one after a round of
		// snapshots, and the WAL's own at a segment roll).
		st := c.hosts[n].Stats()
		if st.Syncs > st.Cycles+st.Snapshots+uint64(st.Segments) {
			t.Fatalf("%s: %d syncs for %d Ready batches", n, st.Syncs, st.Cycles)
		}
	}
	if batches*2 > msgs {
		t.Fatalf("raft messages are not batched: %d messages in %d transport messages", msgs, batches)
	}
	t.Logf("%d raft messages in %d transport messages", msgs, batches)
}

// issue 14: the leader's host going away elects another member, which
// signals LeaderChanged(self) only once every entry committed before is
// applied (here the new leader holds the last entries without knowing
// they committed); proposals continue, and the old leader catches up.
func TestLeaderLossReelection(t *testing.T) {
	c := newTCluster(t, 3, nil)
	c.startAll(1, c.names...)
	l := c.leader(1)
	var a, b string
	for _, n := range c.names {
		if n != l {
			if a == "" {
				a = n
			} else {
				b = n
			}
		}
	}
	// b hears nothing from l; a gets only appends, never a heartbeat, so
	// a learns commit indices late (an append carries the previous one).
	c.net.mu.Lock()
	c.net.filter = func(from, to string, it *wireItem) bool {
		if from != l {
			return false
		}
		return to == b || it.kind != itemRaft || it.msg.GetType().String() != "MsgApp" || len(it.msg.GetEntries()) == 0
	}
	c.net.mu.Unlock()
	for i := 0; i < 30; i++ {
		if _, err := c.propose(l, 1, fmt.Sprintf("enq:%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	c.net.mu.Lock()
	c.net.filter = nil
	c.net.mu.Unlock()
	c.net.isolate(l, c.names...)
	l2 := c.leader(1, a, b)
	sm := c.sms[l2][1]
	sm.mu.Lock()
	at := sm.appliedAtSelf[len(sm.appliedAtSelf)-1]
	sm.mu.Unlock()
	if at < 30 {
		t.Fatalf("new leader %s signalled with %d entries applied, want all 30 committed before", l2, at)
	}
	for i := 30; i < 40; i++ {
		if _, err := c.propose(l2, 1, fmt.Sprintf("enq:%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	c.converge(1, 40, a, b)
	c.net.heal()
	c.converge(1, 40, c.names...)
	waitFor(t, 5*time.Second, "the old leader to follow", func() bool {
		ld, _ := c.groups[l][1].Leader()
		return ld == l2
	})
}

// issue 14: a proposal whose leader loses leadership before the entry
// commits gets ErrDropped (outcome unknown), never a false success.
func TestProposalDroppedOnLeaderChange(t *testing.T) {
	c := newTCluster(t, 3, nil)
	c.startAll(1, c.names...)
	l := c.leader(1)
	c.net.isolate(l, c.names...)
	ch := make(chan error, 1)
	c.groups[l][1].Propose([]byte("enq:lost"), func(_ uint64, err error) { ch <- err })
	var others []string
	for _, n := range c.names {
		if n != l {
			others = append(others, n)
		}
	}
	l2 := c.leader(1, others...)
	if _, err := c.propose(l2, 1, "enq:new"); err != nil {
		t.Fatal(err)
	}
	c.net.heal()
	select {
	case err := <-ch:
		if !errors.Is(err, ErrDropped) {
			t.Fatalf("got %v, want ErrDropped", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer for the cut-off proposal")
	}
	c.converge(1, 1, c.names...)
}

// issue 14: hosts closed (and one crashed: closed without a final flush)
// and reopened recover every group's log from disk; the state machines
// are rebuilt and the groups go on.
func TestRestartFromDisk(t *testing.T) {
	c := newTCluster(t, 3, func(cfg *Config) { cfg.NoSync = false }) // real fdatasyncs
	for gid := uint64(1); gid <= 3; gid++ {
		c.startAll(gid, c.names...)
	}
	for gid := uint64(1); gid <= 3; gid++ {
		l := c.leader(gid)
		for i := 0; i < 25; i++ {
			if _, err := c.propose(l, gid, fmt.Sprintf("enq:%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		c.converge(gid, 25, c.names...)
	}
	want := map[uint64]uint64{}
	for gid := uint64(1); gid <= 3; gid++ {
		want[gid], _, _ = c.sms["n1"][gid].state()
	}
	c.stop("n1", true)
	c.stop("n2", false)
	c.stop("n3", false)
	for _, n := range c.names {
		c.open(n)
		for gid := uint64(1); gid <= 3; gid++ {
			c.start(n, gid, nil, false) // members ignored: the log is recovered
		}
	}
	for gid := uint64(1); gid <= 3; gid++ {
		c.converge(gid, 25, c.names...)
		if h, _, _ := c.sms["n2"][gid].state(); h != want[gid] {
			t.Fatalf("group %d recovered a different state", gid)
		}
		l := c.leader(gid)
		if _, err := c.propose(l, gid, "enq:after"); err != nil {
			t.Fatal(err)
		}
		c.converge(gid, 26, c.names...)
	}
}

// issue 14: StopGroup then StartGroup on a running host resumes from the
// group's log; DeleteGroup forgets it (a restart does not bring it back).
func TestStopStartDeleteGroup(t *testing.T) {
	c := newTCluster(t, 1, nil)
	c.startAll(7, "n1")
	c.leader(7)
	for i := 0; i < 5; i++ {
		if _, err := c.propose("n1", 7, fmt.Sprintf("enq:%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	h := c.hosts["n1"]
	h.StopGroup(7)
	if _, err := c.propose("n1", 7, "enq:late"); !errors.Is(err, ErrClosed) {
		t.Fatalf("propose on a stopped group: %v", err)
	}
	sm := c.start("n1", 7, []string{"n1"}, false)
	c.leader(7)
	waitFor(t, 5*time.Second, "the restarted group to apply its log", func() bool {
		_, n, _ := sm.state()
		return n == 5
	})
	h.DeleteGroup(7)
	c.stop("n1", false)
	h = c.open("n1")
	h.mu.Lock()
	_, kept := h.rec[7]
	h.mu.Unlock()
	if kept {
		t.Fatal("a deleted group came back after a restart")
	}
}

// allQuiesced waits until every host drives n quiesced groups.
func (c *tcluster) allQuiesced(n int) {
	c.t.Helper()
	waitFor(c.t, 10*time.Second, "every group to quiesce", func() bool {
		for _, name := range c.names {
			h := c.hosts[name]
			if h == nil {
				continue
			}
			if st := h.Stats(); st.Quiesced != n {
				return false
			}
		}
		return true
	})
}

// issue 14: idle groups quiesce: no ticks, no heartbeats, no messages at
// all; a proposal wakes a group and it quiesces again after.
func TestQuiescence(t *testing.T) {
	c := newTCluster(t, 3, nil)
	const groups = 20
	for gid := uint64(1); gid <= groups; gid++ {
		c.startAll(gid, c.names...)
	}
	for gid := uint64(1); gid <= groups; gid++ {
		l := c.leader(gid)
		if _, err := c.propose(l, gid, "enq:a"); err != nil {
			t.Fatal(err)
		}
	}
	c.allQuiesced(groups)
	before := c.net.totalSent()
	time.Sleep(40 * c.hosts["n1"].cfg.TickInterval) // a measurement window: 4 election timeouts
	if d := c.net.totalSent() - before; d != 0 {
		t.Fatalf("%d transport messages while every group was quiesced", d)
	}
	for _, n := range c.names {
		for gid := uint64(1); gid <= groups; gid++ {
			if !c.groups[n][gid].Status().Quiesced {
				t.Fatalf("group %d on %s: status not quiesced", gid, n)
			}
		}
	}
	// A proposal wakes its group (leader and followers), then it settles.
	l := c.leader(5)
	if _, err := c.propose(l, 5, "enq:b"); err != nil {
		t.Fatal(err)
	}
	c.converge(5, 2, c.names...)
	c.allQuiesced(groups)
}

// issue 14: followers of a quiesced group wake when the transport reports
// the leader's node down, and elect a new leader (at once: see
// failover_test.go); without that report they stay quiet (no spurious elections).
func TestQuiescedWakeOnLeaderDown(t *testing.T) {
	c := newTCluster(t, 3, nil)
	c.startAll(1, c.names...)
	l := c.leader(1)
	if _, err := c.propose(l, 1, "enq:a"); err != nil {
		t.Fatal(err)
	}
	c.converge(1, 1, c.names...)
	c.allQuiesced(1)
	_, term := c.groups[l][1].Leader()
	c.stop(l, false)
	var others []string
	for _, n := range c.names {
		if n != l {
			others = append(others, n)
		}
	}
	time.Sleep(30 * c.hosts[others[0]].cfg.TickInterval) // a measurement window: 3 election timeouts
	for _, n := range others {
		if ld, tm := c.groups[n][1].Leader(); ld != l || tm != term {
			t.Fatalf("%s: leader %q term %d: a quiesced group held an election without cause", n, ld, tm)
		}
	}
	for _, n := range others {
		c.hosts[n].PeerState(l, false)
	}
	l2 := c.leader(1, others...)
	if _, err := c.propose(l2, 1, "enq:b"); err != nil {
		t.Fatal(err)
	}
	c.converge(1, 2, others...)
	st := c.groups[l2][1].Status()
	if len(st.Online) != 2 || len(st.Members) != 3 {
		t.Fatalf("status members %v online %v", st.Members, st.Online)
	}
}

// issue 14: a member restarting while its group is quiesced (the leader
// sends no heartbeats) does not depose the live leader: its vote request
// wakes the leader, and it follows.
func TestQuiescedMemberRestartKeepsLeader(t *testing.T) {
	c := newTCluster(t, 3, nil)
	c.startAll(1, c.names...)
	l := c.leader(1)
	if _, err := c.propose(l, 1, "enq:a"); err != nil {
		t.Fatal(err)
	}
	c.converge(1, 1, c.names...)
	c.allQuiesced(1)
	_, term := c.groups[l][1].Leader()
	f := "n1"
	if f == l {
		f = "n2"
	}
	c.stop(f, false)
	c.open(f)
	c.start(f, 1, nil, false)
	waitFor(t, 10*time.Second, "the restarted member to follow", func() bool {
		ld, _ := c.groups[f][1].Leader()
		return ld != ""
	})
	c.allQuiesced(1)
	for _, n := range c.names {
		if ld, tm := c.groups[n][1].Leader(); ld != l || tm != term {
			t.Fatalf("%s: leader %q term %d, want %q term %d", n, ld, tm, l, term)
		}
	}
}

// issue 14: deleting a group recovered but never started releases its
// records (the WAL keeps only the tombstone), and a delete right after a
// stop is not undone by the stop.
func TestDeleteRecoveredAndStoppingGroups(t *testing.T) {
	c := newTCluster(t, 1, nil)
	for _, gid := range []uint64{8, 9} {
		c.startAll(gid, "n1")
		c.leader(gid)
		for i := 0; i < 20; i++ {
			if _, err := c.propose("n1", gid, fmt.Sprintf("enq:%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	h := c.hosts["n1"]
	h.StopGroup(9)
	h.DeleteGroup(9)
	c.stop("n1", false)
	h = c.open("n1")
	h.mu.Lock()
	_, has8 := h.rec[8]
	_, has9 := h.rec[9]
	h.mu.Unlock()
	if !has8 || has9 {
		t.Fatalf("after restart: group 8 recovered %v (want true), group 9 %v (want false)", has8, has9)
	}
	before := h.store.Stats().LiveRecords
	h.DeleteGroup(8) // never started since the restart
	waitFor(t, 5*time.Second, "group 8's records to be released", func() bool {
		return h.store.Stats().LiveRecords <= 2 // the tombstones
	})
	t.Logf("live WAL records: %d before the delete, %d after", before, h.store.Stats().LiveRecords)
	c.stop("n1", false)
	h = c.open("n1")
	h.mu.Lock()
	n := len(h.rec)
	h.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d groups recovered after deleting them all", n)
	}
}

// issue 14: a quiesced leader cut off from both followers (the transport
// reports them down) wakes, and CheckQuorum makes it step down and say so,
// while the followers elect a new leader.
func TestQuiescedLeaderPartitionedStepsDown(t *testing.T) {
	c := newTCluster(t, 3, nil)
	c.startAll(1, c.names...)
	l := c.leader(1)
	if _, err := c.propose(l, 1, "enq:a"); err != nil {
		t.Fatal(err)
	}
	c.converge(1, 1, c.names...)
	c.allQuiesced(1)
	c.net.isolate(l, c.names...)
	var others []string
	for _, n := range c.names {
		if n != l {
			others = append(others, n)
			c.hosts[n].PeerState(l, false)
			c.hosts[l].PeerState(n, false)
		}
	}
	l2 := c.leader(1, others...)
	waitFor(t, 10*time.Second, "the cut-off leader to step down", func() bool {
		return c.groups[l][1].Status().Role != "leader"
	})
	sm := c.sms[l][1]
	waitFor(t, 5*time.Second, "the cut-off leader's state machine to hear it", func() bool {
		sm.mu.Lock()
		defer sm.mu.Unlock()
		return sm.leader != l
	})
	c.net.heal()
	for _, n := range others {
		c.hosts[n].PeerState(l, true)
		c.hosts[l].PeerState(n, true)
	}
	waitFor(t, 10*time.Second, "the old leader to follow the new one", func() bool {
		ld, _ := c.groups[l][1].Leader()
		return ld == l2
	})
}
