package qraft

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
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

// issue 14: the node-wide WAL reclaims space: segments whose records are
// all released are deleted, and the one holding an old live entry is
// compacted (the entry moves, its position is updated), so the WAL stays
// small while the old entry stays readable, also after a restart.
func TestWALReclaimsSpaceKeepsLiveEntry(t *testing.T) {
	c := newTCluster(t, 1, func(cfg *Config) {
		cfg.SnapshotEntries = 50
		cfg.KeepEntries = -1
		cfg.SegmentSize = 32 << 10
	})
	c.startAll(1, "n1")
	c.leader(1)
	old, err := c.propose("n1", 1, "enq:old")
	if err != nil {
		t.Fatal(err)
	}
	// A reader (the leader's broker reading a body) runs all along, while
	// snapshots compact the log and the WAL moves the old entry.
	stop := make(chan struct{})
	readErr := make(chan error, 1)
	go func() {
		defer close(readErr)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if data, err := c.groups["n1"][1].ReadEntry(old); err != nil || string(data) != "enq:old" {
				readErr <- fmt.Errorf("concurrent ReadEntry(old) = %q, %v", data, err)
				return
			}
		}
	}()
	pad := strings.Repeat("x", 1000)
	for i := 0; i < 400; i++ {
		idx, err := c.propose("n1", 1, fmt.Sprintf("enq:%d:%s", i, pad))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.propose("n1", 1, fmt.Sprintf("del:%d", idx)); err != nil {
			t.Fatal(err)
		}
	}
	h := c.hosts["n1"]
	waitFor(t, 10*time.Second, "the WAL to shrink and compact", func() bool {
		st := h.Stats()
		return st.Moved > 0 && st.Segments <= 6
	})
	close(stop)
	if err := <-readErr; err != nil {
		t.Fatal(err)
	}
	st := h.Stats()
	t.Logf("WAL: %d segments, %d bytes (%d live), %d compactions, %d records moved", st.Segments, st.LogBytes, st.LiveBytes, st.Compactions, st.Moved)
	if data, err := c.groups["n1"][1].ReadEntry(old); err != nil || string(data) != "enq:old" {
		t.Fatalf("ReadEntry(old) = %q, %v", data, err)
	}
	want, n, _ := c.sms["n1"][1].state()
	c.stop("n1", true)
	c.open("n1")
	sm := c.start("n1", 1, nil, false)
	c.leader(1)
	if h, n2, live := sm.state(); h != want || n2 != n || live != 1 {
		t.Fatalf("recovered %x/%d/%d, want %x/%d/1", h, n2, live, want, n)
	}
	if data, err := c.groups["n1"][1].ReadEntry(old); err != nil || string(data) != "enq:old" {
		t.Fatalf("after restart: ReadEntry(old) = %q, %v", data, err)
	}
	if _, err := c.propose("n1", 1, "enq:after"); err != nil {
		t.Fatal(err)
	}
}

// issue 14: a snapshot larger than a transport frame (live bodies) goes
// in chunks and is reassembled by the lagging member: a leader without a
// bulk lane (Config.SendBulk nil) sends it whole, as nodes before issue
// 22 did; a member still takes it.
func TestSnapshotInstallChunked(t *testing.T) {
	old := defaultChunkSize
	t.Cleanup(func() { defaultChunkSize = old }) // after the hosts close
	defaultChunkSize = 1 << 10
	c := newTCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries = 20; cfg.KeepEntries = 5; cfg.SendBulk = nil })
	c.startAll(1, c.names...)
	l := c.leader(1)
	lag := "n1"
	if l == lag {
		lag = "n2"
	}
	c.net.isolate(lag, c.names...)
	pad := strings.Repeat("y", 700)
	var live []uint64
	for i := 0; i < 60; i++ {
		idx, err := c.propose(l, 1, fmt.Sprintf("enq:%d:%s", i, pad))
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, idx)
	}
	c.net.heal()
	c.converge(1, 60, c.names...)
	if c.hosts[lag].Stats().SnapsIn == 0 {
		t.Fatal("no snapshot installed")
	}
	for i, idx := range live {
		if data, err := c.groups[lag][1].ReadEntry(idx); err != nil || string(data) != fmt.Sprintf("enq:%d:%s", i, pad) {
			t.Fatalf("ReadEntry(%d) on the lagging member: %v", idx, err)
		}
	}
	// ReadEntries: every live body, in index order, on both members.
	rev := append([]uint64(nil), live...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	for _, n := range []string{l, lag} {
		k := 0
		err := c.groups[n][1].ReadEntries(rev, func(index uint64, data []byte) error {
			if index != live[k] || string(data) != fmt.Sprintf("enq:%d:%s", k, pad) {
				return fmt.Errorf("entry %d: got index %d %.10q", k, index, data)
			}
			k++
			return nil
		})
		if err != nil || k != len(live) {
			t.Fatalf("%s: ReadEntries: %v after %d entries", n, err, k)
		}
		if err := c.groups[n][1].ReadEntries([]uint64{live[0], 1 << 40}, func(uint64, []byte) error { return nil }); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: ReadEntries of a missing entry: %v", n, err)
		}
	}
}

// issue 14: a big state (a long queue) is not snapshotted every
// SnapshotEntries entries: the log must weigh snapWeighFactor times the
// last snapshot first, bounding the snapshots' write amplification.
func TestSnapshotPacedBySize(t *testing.T) {
	c := newTCluster(t, 1, func(cfg *Config) { cfg.SnapshotEntries = 20; cfg.KeepEntries = -1 })
	c.startAll(1, "n1")
	c.leader(1)
	big := strings.Repeat("z", 20000)
	if _, err := c.propose("n1", 1, "enq:"+big); err != nil { // the test state keeps every data: a 20 kB state
		t.Fatal(err)
	}
	for i := 0; i < 25; i++ { // past SnapshotEntries: the first snapshot (a 20 kB state)
		if _, err := c.propose("n1", 1, fmt.Sprintf("enq:%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	snaps := c.hosts["n1"].Stats().Snapshots
	for i := 0; i < 1000; i++ { // 1000 small entries weigh less than 4 x 20 kB: no new snapshot
		if _, err := c.propose("n1", 1, fmt.Sprintf("enq:b%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.hosts["n1"].Stats().Snapshots; got != snaps {
		t.Fatalf("%d snapshots of a big state after 1000 small entries, want %d", got, snaps)
	}
	for i := 0; i < 300; i++ {
		if _, err := c.propose("n1", 1, fmt.Sprintf("enq:c%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.hosts["n1"].Stats().Snapshots; got == snaps {
		t.Fatal("no snapshot once the log outweighed the state")
	}
}

// snapTap records the snapshot items a memNet carries and may drop some.
type snapTap struct {
	mu       sync.Mutex
	parts    int
	maxPart  int // bytes of bodies in one part
	ends     int
	chunks   int
	dropEnds int // drop this many stream ends first
	dropPart int // drop the part with this number (1: the first)
	frags    int
}

func (s *snapTap) filter(_, _ string, it *wireItem) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch it.kind {
	case itemSnapFrag:
		s.frags++
	case itemSnapPart:
		s.parts++
		if s.parts == s.dropPart {
			return true
		}
		n := 0
		for _, e := range it.ents {
			n += len(e.data)
		}
		s.maxPart = max(s.maxPart, n)
	case itemSnapEnd:
		s.ends++
		if s.dropEnds > 0 {
			s.dropEnds--
			return true
		}
	case itemChunk:
		s.chunks++
	}
	return false
}

// issue 22: a lagging member's snapshot of a deep queue is streamed: the
// live bodies go in parts of about snapPartBytes on the bulk lane (never
// one message holding them all), the member writes them as they come and
// installs them with the MsgSnap that ends the stream; it reads every
// body, also after a crash and restart, and follows the log after.
func TestSnapshotStreamed(t *testing.T) {
	c := newTCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries = 20; cfg.KeepEntries = 5 })
	tap := &snapTap{}
	c.net.filter = tap.filter
	c.startAll(1, c.names...)
	l := c.leader(1)
	lag := c.others(l)[0]
	c.net.isolate(lag, c.names...)
	big := strings.Repeat("B", 3*snapPartBytes+100) // sent in fragments
	bigIdx, err := c.propose(l, 1, "enq:"+big)
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("z", 20<<10)
	var live []uint64
	for i := range 200 { // 4 MiB of live bodies
		idx, err := c.propose(l, 1, fmt.Sprintf("enq:%d:%s", i, pad))
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, idx)
	}
	c.net.heal()
	c.converge(1, 201, c.names...)
	tap.mu.Lock()
	parts, maxPart, ends, chunks, frags := tap.parts, tap.maxPart, tap.ends, tap.chunks, tap.frags
	tap.mu.Unlock()
	if frags != 4 {
		t.Fatalf("%d fragments of the large entry, want 4", frags)
	}
	if c.hosts[lag].Stats().SnapsIn == 0 || ends == 0 {
		t.Fatalf("no streamed snapshot installed (%d stream ends)", ends)
	}
	if parts < 1 || maxPart > snapPartBytes+len(pad)+64 || chunks != 0 {
		t.Fatalf("%d parts, the largest %d bytes, %d chunks: want parts of about %d bytes at most, no chunk", parts, maxPart, chunks, snapPartBytes)
	}
	check := func(when string) {
		t.Helper()
		if data, err := c.groups[lag][1].ReadEntry(bigIdx); err != nil || string(data) != "enq:"+big {
			t.Fatalf("%s: ReadEntry of the large entry on the lagging member: %d bytes, %v", when, len(data), err)
		}
		for i, idx := range live {
			if data, err := c.groups[lag][1].ReadEntry(idx); err != nil || string(data) != fmt.Sprintf("enq:%d:%s", i, pad) {
				t.Fatalf("%s: ReadEntry(%d) on the lagging member: %v", when, idx, err)
			}
		}
	}
	check("after the install")
	if ls := c.groups[lag][1].ls; ls.incoming != nil || ls.inID != 0 {
		t.Fatalf("the stream's entries are still held as incoming: %d", len(ls.incoming))
	}
	c.stop(lag, true)
	c.open(lag)
	c.start(lag, 1, nil, false)
	c.converge(1, 201, c.names...)
	check("after a crash and restart")
	if _, err := c.propose(c.leader(1), 1, "enq:after"); err != nil {
		t.Fatal(err)
	}
	c.converge(1, 202, c.names...)
	t.Logf("%d parts, the largest %d bytes of bodies", parts, maxPart)
}

// issue 22: a stream whose end is lost is given up after snapAckTicks
// without an answer from the member; raft probes it again and a second
// stream installs. The first stream's entries are released, not kept.
func TestSnapshotStreamLostEnd(t *testing.T) {
	c := newTCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries = 20; cfg.KeepEntries = 5 })
	tap := &snapTap{dropEnds: 1}
	c.net.filter = tap.filter
	c.startAll(1, c.names...)
	l := c.leader(1)
	lag := c.others(l)[0]
	c.net.isolate(lag, c.names...)
	old := fillWithOneLive(t, c, l, 1, 60)
	c.net.heal()
	c.converge(1, 121, c.names...)
	tap.mu.Lock()
	ends := tap.ends
	tap.mu.Unlock()
	if ends < 2 {
		t.Fatalf("%d stream ends, want a second stream after the lost one", ends)
	}
	if data, err := c.groups[lag][1].ReadEntry(old); err != nil || string(data) != "enq:old" {
		t.Fatalf("ReadEntry(old) = %q, %v", data, err)
	}
	if ls := c.groups[lag][1].ls; ls.incoming != nil {
		t.Fatalf("%d entries of a stream still held", len(ls.incoming))
	}
}

// issue 22: a stream that lost a part on the way (its end counts the
// entries sent) is refused by the member, not installed short of bodies;
// the leader, without an answer, streams again.
func TestSnapshotStreamLostPart(t *testing.T) {
	c := newTCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries = 20; cfg.KeepEntries = 5 })
	tap := &snapTap{dropPart: 1}
	c.net.filter = tap.filter
	c.startAll(1, c.names...)
	l := c.leader(1)
	lag := c.others(l)[0]
	c.net.isolate(lag, c.names...)
	pad := strings.Repeat("p", 100<<10)
	var live []uint64
	for i := range 60 {
		idx, err := c.propose(l, 1, fmt.Sprintf("enq:%d:%s", i, pad))
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, idx)
	}
	c.net.heal()
	c.converge(1, 60, c.names...)
	tap.mu.Lock()
	ends := tap.ends
	tap.mu.Unlock()
	if ends < 2 {
		t.Fatalf("%d stream ends, want a second stream after the one that lost a part", ends)
	}
	for i, idx := range live {
		if data, err := c.groups[lag][1].ReadEntry(idx); err != nil || string(data) != fmt.Sprintf("enq:%d:%s", i, pad) {
			t.Fatalf("ReadEntry(%d) on the lagging member: %v", idx, err)
		}
	}
}
