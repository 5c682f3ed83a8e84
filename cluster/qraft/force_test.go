package qraft

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// issue 22: recovery from a lost majority (force_shrink_member_to_current_
// member for every group): the survivor started with ForceAlone removes
// the others from each group's log, keeps every entry it had (the tail it
// never knew committed too), leads alone, and an old member back with its
// old data does not unseat it.
func TestForceAlone(t *testing.T) {
	c := newTCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries = 8; cfg.KeepEntries = 2 })
	for gid := uint64(1); gid <= 2; gid++ {
		c.startAll(gid, c.names...)
	}
	c.start("n2", 3, []string{"n2", "n3"}, false) // no member on n1: lost with n2 and n3
	c.start("n3", 3, []string{"n2", "n3"}, false)
	for gid := uint64(1); gid <= 2; gid++ {
		l := c.leader(gid)
		for i := 0; i < 20; i++ { // past a snapshot
			if _, err := c.propose(l, gid, fmt.Sprintf("enq:%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		c.converge(gid, 20, c.names...)
		if l != "n1" {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := c.groups[l][gid].TransferLeader(ctx, "n1"); err != nil {
				t.Fatalf("group %d: transfer to n1: %v", gid, err)
			}
			cancel()
			if c.leader(gid) != "n1" {
				t.Fatalf("group %d: n1 does not lead", gid)
			}
		}
	}
	c.stop("n2", true)
	c.stop("n3", true)
	// An entry only n1 has: never committed, never confirmed.
	tail := make(chan error, 1)
	c.groups["n1"][1].Propose([]byte("enq:tail"), func(_ uint64, err error) { tail <- err })
	waitFor(t, 5*time.Second, "the tail in n1's log", func() bool {
		st := c.groups["n1"][1].Status()
		return st.LastIndex > st.Commit
	})
	c.stop("n1", false)
	if err := <-tail; err == nil {
		t.Fatal("the tail committed without a quorum")
	}

	c.cfg = func(cfg *Config) { cfg.ForceAlone = cfg.Self == "n1" }
	h := c.open("n1")
	forced := h.Forced()
	for gid := uint64(1); gid <= 2; gid++ {
		if got := forced[gid]; !slices.Equal(got, []string{"n2", "n3"}) {
			t.Fatalf("group %d: removed %v, want [n2 n3]", gid, got)
		}
	}
	if len(forced) != 2 {
		t.Fatalf("forced groups %v, want 1 and 2", forced)
	}
	for gid := uint64(1); gid <= 2; gid++ {
		c.start("n1", gid, nil, false)
	}
	for gid := uint64(1); gid <= 2; gid++ {
		if l := c.leader(gid, "n1"); l != "n1" {
			t.Fatalf("group %d: leader %s", gid, l)
		}
		want := 20
		if gid == 1 {
			want = 21 // the tail is kept
		}
		waitFor(t, 5*time.Second, fmt.Sprintf("group %d's state", gid), func() bool {
			_, n, _ := c.sms["n1"][gid].state()
			return n == want
		})
		if _, err := c.propose("n1", gid, "enq:after"); err != nil {
			t.Fatalf("group %d after the forced start: %v", gid, err)
		}
		if m := c.groups["n1"][gid].Status().Members; !slices.Equal(m, []string{"n1"}) {
			t.Fatalf("group %d members %v", gid, m)
		}
	}

	// An old member back with its old data: not a member any more.
	c.cfg = nil
	c.open("n2")
	c.start("n2", 1, nil, false)
	time.Sleep(50 * 10 * time.Millisecond)
	if _, err := c.propose("n1", 1, "enq:later"); err != nil {
		t.Fatalf("with an old member back: %v", err)
	}
	if l, _ := c.groups["n2"][1].Leader(); l == "n2" {
		t.Fatal("the old member leads")
	}
	if st := c.groups["n1"][1].Status(); st.Role != "leader" || !slices.Equal(st.Members, []string{"n1"}) {
		t.Fatalf("survivor: %+v", st)
	}
}
