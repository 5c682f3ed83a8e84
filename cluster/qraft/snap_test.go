package qraft

import (
	"errors"
	"fmt"
	"testing"
)

// fillWithOneLive proposes an "old" entry, then n enqueue/delete pairs,
// so that everything but the old entry is dead; it returns the old
// entry's index.
func fillWithOneLive(t *testing.T, c *tcluster, l string, gid uint64, n int) uint64 {
	t.Helper()
	old, err := c.propose(l, gid, "enq:old")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		idx, err := c.propose(l, gid, fmt.Sprintf("enq:%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.propose(l, gid, fmt.Sprintf("del:%d", idx)); err != nil {
			t.Fatal(err)
		}
	}
	return old
}

// issue 14: the log is compacted by live entries: after snapshots, one
// old unacknowledged message's entry stays readable (also after a
// restart) while the dead entries around it are gone.
func TestCompactionKeepsLiveEntry(t *testing.T) {
	c := newTCluster(t, 1, func(cfg *Config) { cfg.SnapshotEntries = 20; cfg.KeepEntries = -1 })
	c.startAll(1, "n1")
	c.leader(1)
	old := fillWithOneLive(t, c, "n1", 1, 100)
	g := c.groups["n1"][1]
	st := g.Status()
	if st.SnapshotIndex <= old+20 || c.hosts["n1"].Stats().Snapshots == 0 {
		t.Fatalf("no snapshot past the old entry: %+v", st)
	}
	if st.LogEntries > 25 {
		t.Fatalf("log not compacted: %d entries kept", st.LogEntries)
	}
	check := func(g *Group) {
		t.Helper()
		if data, err := g.ReadEntry(old); err != nil || string(data) != "enq:old" {
			t.Fatalf("ReadEntry(old %d) = %q, %v", old, data, err)
		}
		if _, err := g.ReadEntry(old + 1); !errors.Is(err, ErrNotFound) {
			t.Fatalf("ReadEntry of a dead compacted entry: %v, want ErrNotFound", err)
		}
	}
	check(g)
	want, n, live := c.sms["n1"][1].state()
	if live != 1 {
		t.Fatalf("%d live entries, want 1", live)
	}
	c.stop("n1", true)
	c.open("n1")
	sm := c.start("n1", 1, nil, false)
	c.leader(1)
	if h, n2, live2 := sm.state(); h != want || n2 != n || live2 != 1 {
		t.Fatalf("recovered state %x/%d/%d, want %x/%d/1", h, n2, live2, want, n)
	}
	check(c.groups["n1"][1])
}

// issue 14: a member that missed compacted entries gets a snapshot that
// carries the live entries' bodies; it can read them, also after its
// restart, and follows the log after.
func TestSnapshotInstallToLaggingMember(t *testing.T) {
	c := newTCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries = 20; cfg.KeepEntries = 5 })
	c.startAll(1, c.names...)
	l := c.leader(1)
	var lag string
	var up []string
	for _, n := range c.names {
		if n != l && lag == "" {
			lag = n
		} else {
			up = append(up, n)
		}
	}
	c.net.isolate(lag, c.names...)
	old := fillWithOneLive(t, c, l, 1, 60)
	c.converge(1, 121, up...)
	c.net.heal()
	c.converge(1, 121, c.names...)
	if c.hosts[lag].Stats().SnapsIn == 0 || c.hosts[l].Stats().SnapsSent == 0 {
		t.Fatalf("no snapshot was sent to the lagging member")
	}
	sm := c.sms[lag][1]
	sm.mu.Lock()
	restores := sm.restores
	sm.mu.Unlock()
	if restores == 0 {
		t.Fatal("the lagging member's state machine was not restored")
	}
	if data, err := c.groups[lag][1].ReadEntry(old); err != nil || string(data) != "enq:old" {
		t.Fatalf("lagging member: ReadEntry(old) = %q, %v", data, err)
	}
	c.stop(lag, true)
	c.open(lag)
	c.start(lag, 1, nil, false)
	c.converge(1, 121, c.names...)
	if data, err := c.groups[lag][1].ReadEntry(old); err != nil || string(data) != "enq:old" {
		t.Fatalf("lagging member after restart: ReadEntry(old) = %q, %v", data, err)
	}
	if _, err := c.propose(c.leader(1), 1, "enq:after"); err != nil {
		t.Fatal(err)
	}
	c.converge(1, 122, c.names...)
}
