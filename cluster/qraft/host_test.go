package qraft

import (
	"errors"
	"fmt"
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
	st := c.groups[l][1].Status()
	if st.Role != "leader" || st.Leader != l || len(st.Members) != 3 || st.Applied < last || st.Commit < last {
		t.Fatalf("status %+v", st)
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
	c := newTCluster(t, 3, nil)
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
// the leader's node down, and elect a new leader after the election
// timeout; without that report they stay quiet (no spurious elections).
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
