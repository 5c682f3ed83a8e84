package qraft

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// issue 14: a member added later starts empty (join), is caught up by a
// snapshot carrying the live entries, and votes; a removed member stops
// receiving the log and the group goes on without it.
func TestMembershipAddRemove(t *testing.T) {
	c := newTCluster(t, 4, func(cfg *Config) { cfg.SnapshotEntries = 20; cfg.KeepEntries = 5 })
	first := []string{"n1", "n2", "n3"}
	c.startAll(1, first...)
	l := c.leader(1, first...)
	old := fillWithOneLive(t, c, l, 1, 30)
	c.start("n4", 1, nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.groups[l][1].AddMember(ctx, "n4"); err != nil {
		t.Fatalf("add n4: %v", err)
	}
	c.converge(1, 61, c.names...)
	if data, err := c.groups["n4"][1].ReadEntry(old); err != nil || string(data) != "enq:old" {
		t.Fatalf("n4: ReadEntry(old) = %q, %v", data, err)
	}
	waitFor(t, 5*time.Second, "n4 to see four members", func() bool {
		return reflect.DeepEqual(c.groups["n4"][1].Status().Members, []string{"n1", "n2", "n3", "n4"})
	})
	// Remove a follower (not the leader).
	victim := "n2"
	if l == victim {
		victim = "n3"
	}
	if err := c.groups[l][1].RemoveMember(ctx, victim); err != nil {
		t.Fatalf("remove %s: %v", victim, err)
	}
	var rest []string
	for _, n := range c.names {
		if n != victim {
			rest = append(rest, n)
		}
	}
	waitFor(t, 5*time.Second, "the leader to see three members", func() bool {
		return len(c.groups[l][1].Status().Members) == 3
	})
	c.hosts[victim].DeleteGroup(1)
	if _, err := c.propose(l, 1, "enq:after"); err != nil {
		t.Fatal(err)
	}
	c.converge(1, 62, rest...)
	// The three remaining members still make a quorum when one more fails.
	if _, err := c.propose(c.leader(1, rest...), 1, "enq:more"); err != nil {
		t.Fatal(err)
	}
	c.converge(1, 63, rest...)
	if err := c.groups["n4"][1].AddMember(ctx, "n2"); !errors.Is(err, ErrNotLeader) && c.leader(1, rest...) != "n4" {
		t.Fatalf("AddMember on a follower: %v, want ErrNotLeader", err)
	}
}

// issue 14: leadership transfer hands the group to the named member,
// which signals LeaderChanged(self) and takes proposals.
func TestTransferLeader(t *testing.T) {
	c := newTCluster(t, 3, nil)
	c.startAll(1, c.names...)
	l := c.leader(1)
	if _, err := c.propose(l, 1, "enq:a"); err != nil {
		t.Fatal(err)
	}
	target := "n1"
	if l == target {
		target = "n2"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.groups[l][1].TransferLeader(ctx, target); err != nil {
		t.Fatalf("transfer to %s: %v", target, err)
	}
	if got := c.leader(1); got != target {
		t.Fatalf("leader %s after transfer to %s", got, target)
	}
	if _, err := c.propose(target, 1, "enq:b"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.propose(l, 1, "enq:c"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("old leader: %v, want ErrNotLeader", err)
	}
	c.converge(1, 2, c.names...)
	if err := c.groups[l][1].TransferLeader(ctx, l); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("transfer from a follower: %v, want ErrNotLeader", err)
	}
}

// issue 14: the leader can remove itself: it steps down once the change
// is applied, the others elect a leader among themselves and go on.
func TestRemoveLeaderItself(t *testing.T) {
	c := newTCluster(t, 3, nil)
	c.startAll(1, c.names...)
	l := c.leader(1)
	if _, err := c.propose(l, 1, "enq:a"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.groups[l][1].RemoveMember(ctx, l); err != nil {
		t.Fatalf("remove the leader %s: %v", l, err)
	}
	var rest []string
	for _, n := range c.names {
		if n != l {
			rest = append(rest, n)
		}
	}
	c.hosts[l].DeleteGroup(1)
	l2 := c.leader(1, rest...)
	if _, err := c.propose(l2, 1, "enq:b"); err != nil {
		t.Fatal(err)
	}
	c.converge(1, 2, rest...)
	if m := c.groups[l2][1].Status().Members; !reflect.DeepEqual(m, rest) {
		t.Fatalf("members %v, want %v", m, rest)
	}
}

// issue 14: a member removed (its group deleted on its node) and added
// back later on the same node gets a fresh copy, which survives a restart
// of that node (the tombstone drops only what came before it).
func TestMemberRemovedAndAddedBack(t *testing.T) {
	c := newTCluster(t, 3, nil)
	c.startAll(1, c.names...)
	l := c.leader(1)
	for i := 0; i < 10; i++ {
		if _, err := c.propose(l, 1, fmt.Sprintf("enq:%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	v := "n1"
	if v == l {
		v = "n2"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.groups[l][1].RemoveMember(ctx, v); err != nil {
		t.Fatal(err)
	}
	c.hosts[v].DeleteGroup(1)
	if _, err := c.propose(l, 1, "enq:while-away"); err != nil {
		t.Fatal(err)
	}
	c.start(v, 1, nil, true)
	if err := c.groups[l][1].AddMember(ctx, v); err != nil {
		t.Fatal(err)
	}
	c.converge(1, 11, c.names...)
	c.stop(v, true)
	c.open(v)
	c.start(v, 1, nil, false)
	if _, err := c.propose(l, 1, "enq:after"); err != nil {
		t.Fatal(err)
	}
	c.converge(1, 12, c.names...)
}
