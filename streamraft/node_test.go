package streamraft

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/store"
	"github.com/warrenmq/warren/streamlog"
)

// cluster is a group of members in one process over a network that can
// be cut, on file systems that can crash.
type cluster struct {
	t    *testing.T
	opts streamlog.Options

	mu    sync.Mutex
	nodes map[string]*member
	cut   map[[2]string]bool
	sent  int // messages delivered
}

type member struct {
	name string
	fs   *store.MemFS
	log  *streamlog.Log
	node *Node
}

func newCluster(t *testing.T, opts streamlog.Options, names ...string) *cluster {
	c := &cluster{t: t, opts: opts, nodes: map[string]*member{}, cut: map[[2]string]bool{}}
	for _, n := range names {
		c.nodes[n] = &member{name: n, fs: store.NewMemFS()}
	}
	for _, n := range names {
		c.start(n, names, false)
	}
	t.Cleanup(func() {
		for _, n := range names {
			c.stop(n)
		}
	})
	return c
}

func (c *cluster) start(name string, members []string, join bool) {
	c.t.Helper()
	c.mu.Lock()
	m := c.nodes[name]
	if m == nil {
		m = &member{name: name, fs: store.NewMemFS()}
		c.nodes[name] = m
	}
	c.mu.Unlock()
	opts := c.opts
	opts.FS, opts.Raft = m.fs, true
	l, err := streamlog.Open("/s", opts)
	if err != nil {
		c.t.Fatalf("%s: open: %v", name, err)
	}
	n, err := Start(Config{Self: name, Members: members, Join: join, Log: l, FS: m.fs, Dir: "/s",
		Tick: 10 * time.Millisecond, Log2: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Send: func(to string, msg []byte) { c.send(name, to, msg) }, Group: 1,
		Online: func(node string) bool { return c.up(name, node) }})
	if err != nil {
		c.t.Fatalf("%s: start: %v", name, err)
	}
	c.mu.Lock()
	m.log, m.node = l, n
	c.mu.Unlock()
	c.peerState(name, true)
}

// up reports whether from's link to node is up (node runs, not cut off),
// as the cluster's transport would.
func (c *cluster) up(from, node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.nodes[node]
	return m != nil && m.node != nil && !c.cut[[2]string{from, node}] && !c.cut[[2]string{node, from}]
}

// peerState tells every other running member that name's link went up
// or down (a transport's report).
func (c *cluster) peerState(name string, up bool) {
	c.mu.Lock()
	var others []*Node
	for o, m := range c.nodes {
		if o != name && m.node != nil {
			others = append(others, m.node)
		}
	}
	c.mu.Unlock()
	for _, n := range others {
		n.PeerState(name, up)
	}
}

func (c *cluster) sentCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent
}

// stop stops a member (its files stay as they are).
func (c *cluster) stop(name string) {
	c.mu.Lock()
	m := c.nodes[name]
	n, l := m.node, m.log
	m.node, m.log = nil, nil
	c.mu.Unlock()
	if n != nil {
		n.Stop()
		l.Close()
	}
	c.peerState(name, false)
}

// crash stops a member and loses what it did not sync.
func (c *cluster) crash(name string, rng *rand.Rand) {
	c.stop(name)
	c.nodes[name].fs.Crash(rng)
}

func (c *cluster) send(from, to string, msg []byte) {
	c.mu.Lock()
	m := c.nodes[to]
	if m == nil || m.node == nil || c.cut[[2]string{from, to}] || c.cut[[2]string{to, from}] {
		c.mu.Unlock()
		return
	}
	n := m.node
	c.sent++
	c.mu.Unlock()
	_ = n.Step(from, msg)
}

// isolate cuts name off from every other member (heal: false restores).
func (c *cluster) isolate(name string, cut bool) {
	c.mu.Lock()
	var others []string
	for o, m := range c.nodes {
		if o != name {
			if cut {
				c.cut[[2]string{name, o}] = true
			} else {
				delete(c.cut, [2]string{name, o})
			}
			if m.node != nil {
				others = append(others, o)
			}
		}
	}
	self := c.nodes[name].node
	c.mu.Unlock()
	// both ends of each link see it go down or come up
	c.peerState(name, !cut)
	if self != nil {
		for _, o := range others {
			self.PeerState(o, !cut)
		}
	}
}

func (c *cluster) node(name string) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[name].node
}

// leader waits for a leader among the running members that says it is
// ready, and returns it.
func (c *cluster) leader(among ...string) string {
	c.t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		for _, name := range among {
			n := c.node(name)
			if n == nil {
				continue
			}
			st := n.Status()
			if st.Role == "StateLeader" && st.Leader == name {
				if t, err := c.nodes[name].log.Term(st.Commit); err == nil && t == st.Term {
					return name
				}
			}
		}
	}
	for _, name := range among {
		if n := c.node(name); n != nil {
			c.t.Logf("%s: %+v last %d", name, n.Status(), c.nodes[name].log.LastIndex())
		}
	}
	c.t.Fatalf("no leader among %v", among)
	return ""
}

// publish proposes a chunk of records "p<i>" on name and waits for its answer.
func (c *cluster) publish(name string, i int) error {
	data := streamlog.AppendEntry(nil, fmt.Appendf(nil, "p%d", i))
	raw, err := streamlog.EncodeChunk(&streamlog.Batch{Entries: 1, Records: 1, Data: data, Timestamp: int64(1000 + i),
		Writers: map[string]uint64{"pub": uint64(i)}})
	if err != nil {
		c.t.Fatal(err)
	}
	ch := make(chan error, 1)
	c.node(name).Propose(raw, func(err error) { ch <- err })
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		return errors.New("no answer")
	}
}

// records reads what name's readers see.
func (c *cluster) records(name string) []string {
	c.t.Helper()
	l := c.nodes[name].log
	r := l.NewReader(l.First())
	defer r.Close()
	var out []string
	for {
		ch, err := r.Next()
		if errors.Is(err, streamlog.ErrNoChunk) {
			return out
		}
		if err != nil {
			c.t.Fatal(err)
		}
		if ch.Type != streamlog.ChunkUser {
			continue
		}
		d := ch.Data()
		for len(d) > 0 {
			e, rest, err := streamlog.NextEntry(d)
			if err != nil {
				c.t.Fatal(err)
			}
			out = append(out, string(e.Data))
			d = rest
		}
	}
}

// caughtUp waits until every running member has committed what the
// leader has.
func (c *cluster) caughtUp(names ...string) {
	c.t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		var commits []uint64
		for _, n := range names {
			commits = append(commits, c.node(n).Status().Commit)
		}
		var lasts []uint64
		for _, n := range names {
			lasts = append(lasts, c.nodes[n].log.LastIndex())
		}
		if slices.Min(commits) == slices.Max(commits) && slices.Min(lasts) == slices.Max(lasts) && commits[0] == lasts[0] {
			return
		}
	}
	c.t.Fatalf("members %v did not catch up", names)
}

// sameBytes checks that the members hold the same segment files, byte
// for byte, for every segment they both keep.
func (c *cluster) sameBytes(names ...string) {
	c.t.Helper()
	files := func(n string) map[string][]byte {
		fs := c.nodes[n].fs
		ls, err := fs.ReadDir("/s")
		if err != nil {
			c.t.Fatal(err)
		}
		out := map[string][]byte{}
		for _, f := range ls {
			if strings.HasSuffix(f, ".segment") || strings.HasSuffix(f, ".index") {
				b, err := fs.ReadFile(filepath.Join("/s", f))
				if err != nil {
					c.t.Fatal(err)
				}
				out[f] = b
			}
		}
		return out
	}
	ref := files(names[0])
	for _, n := range names[1:] {
		got := files(n)
		common := 0
		for f, b := range got {
			if rb, ok := ref[f]; ok {
				common++
				if !bytes.Equal(rb, b) {
					c.t.Fatalf("%s differs between %s (%d bytes) and %s (%d bytes)", f, names[0], len(rb), n, len(b))
				}
			}
		}
		if common == 0 {
			c.t.Fatalf("%s and %s keep no segment in common", names[0], n)
		}
	}
}

func TestReplicateAndAgree(t *testing.T) {
	c := newCluster(t, streamlog.Options{MaxSegmentChunks: 16}, "a", "b", "c")
	l := c.leader("a", "b", "c")
	for i := range 100 {
		if err := c.publish(l, i); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	c.caughtUp("a", "b", "c")
	want := c.records(l)
	if len(want) != 100 {
		t.Fatalf("leader reads %d records", len(want))
	}
	for _, n := range []string{"a", "b", "c"} {
		if got := c.records(n); !slices.Equal(got, want) {
			t.Fatalf("%s reads %d records, the leader %d", n, len(got), len(want))
		}
		if seq, ok := c.nodes[n].log.WriterSeq("pub"); !ok || seq != 99 {
			t.Fatalf("%s: publisher's last id %d %v", n, seq, ok)
		}
	}
	c.sameBytes("a", "b", "c")
}

func TestProposeOnFollowerRefused(t *testing.T) {
	c := newCluster(t, streamlog.Options{}, "a", "b", "c")
	l := c.leader("a", "b", "c")
	f := "a"
	if l == "a" {
		f = "b"
	}
	if err := c.publish(f, 1); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a follower's proposal: %v", err)
	}
	if _, err := streamlog.ParseRaw([]byte("garbage")); err == nil {
		t.Fatal("garbage parsed as a chunk")
	}
	ch := make(chan error, 1)
	c.node(l).Propose([]byte("not a chunk"), func(err error) { ch <- err })
	if err := <-ch; err == nil {
		t.Fatal("a malformed chunk was proposed")
	}
}

// A crashed leader loses no confirmed message; the member that comes
// back catches up and holds the same bytes.
func TestLeaderCrash(t *testing.T) {
	for seed := range uint64(5) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			c := newCluster(t, streamlog.Options{MaxSegmentChunks: 8}, "a", "b", "c")
			l := c.leader("a", "b", "c")
			confirmed := 0
			for i := range 30 {
				if err := c.publish(l, i); err != nil {
					t.Fatalf("publish %d: %v", i, err)
				}
				confirmed++
			}
			c.crash(l, rng)
			rest := slices.DeleteFunc([]string{"a", "b", "c"}, func(s string) bool { return s == l })
			l2 := c.leader(rest...)
			for i := 30; i < 60; i++ {
				if err := c.publish(l2, i); err != nil {
					t.Fatalf("publish %d: %v", i, err)
				}
			}
			c.start(l, []string{"a", "b", "c"}, false)
			c.caughtUp("a", "b", "c")
			for _, n := range []string{"a", "b", "c"} {
				got := c.records(n)
				if len(got) != 60 {
					t.Fatalf("%s reads %d records, want 60", n, len(got))
				}
				for i, r := range got {
					if r != fmt.Sprintf("p%d", i) {
						t.Fatalf("%s: record %d is %s", n, i, r)
					}
				}
			}
			c.sameBytes("a", "b", "c")
		})
	}
}

// An isolated leader's entries that never commit are cut from its log
// when it hears from the new leader; readers never saw them.
func TestIsolatedLeaderTruncates(t *testing.T) {
	c := newCluster(t, streamlog.Options{MaxSegmentChunks: 4}, "a", "b", "c")
	l := c.leader("a", "b", "c")
	for i := range 5 {
		if err := c.publish(l, i); err != nil {
			t.Fatal(err)
		}
	}
	c.caughtUp("a", "b", "c")
	c.isolate(l, true)
	// proposals on the isolated leader cannot commit
	var wg sync.WaitGroup
	lost := make(chan error, 10)
	for i := range 10 {
		wg.Go(func() { lost <- c.publish(l, 100+i) })
	}
	rest := slices.DeleteFunc([]string{"a", "b", "c"}, func(s string) bool { return s == l })
	l2 := c.leader(rest...)
	for i := 5; i < 25; i++ {
		if err := c.publish(l2, i); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.records(l); len(got) != 5 {
		t.Fatalf("the isolated leader's readers see %d records, want the 5 committed", len(got))
	}
	c.isolate(l, false)
	wg.Wait()
	close(lost)
	for err := range lost {
		if err == nil {
			t.Fatal("a proposal of the isolated leader was confirmed")
		}
	}
	c.caughtUp("a", "b", "c")
	for _, n := range []string{"a", "b", "c"} {
		got := c.records(n)
		if len(got) != 25 || got[24] != "p24" {
			t.Fatalf("%s reads %v", n, got)
		}
	}
	c.sameBytes("a", "b", "c")
}

// A member that was down while the retention dropped what it lacks gets
// a snapshot and starts again at the leader's first segment.
func TestLaggingMemberAfterRetention(t *testing.T) {
	c := newCluster(t, streamlog.Options{MaxSegmentChunks: 4, MaxBytes: 1500}, "a", "b", "c")
	l := c.leader("a", "b", "c")
	f := "a"
	if l == "a" {
		f = "b"
	}
	c.stop(f)
	for i := range 60 {
		if err := c.publish(l, i); err != nil {
			t.Fatal(err)
		}
	}
	if first := c.nodes[l].log.FirstIndex(); first <= 1 {
		t.Fatalf("the retention dropped nothing (first index %d)", first)
	}
	c.start(f, []string{"a", "b", "c"}, false)
	c.caughtUp("a", "b", "c")
	got, want := c.records(f), c.records(l)
	if len(got) == 0 || got[len(got)-1] != "p59" || !slices.Equal(got, want[len(want)-len(got):]) {
		t.Fatalf("the lagging member reads %v, the leader %v", got, want)
	}
	if seq, ok := c.nodes[f].log.WriterSeq("pub"); !ok || seq != 59 {
		t.Fatalf("the lagging member's publisher id: %d %v", seq, ok)
	}
	c.sameBytes(l, f)
	// and it goes on replicating
	if err := c.publish(l, 60); err != nil {
		t.Fatal(err)
	}
	c.caughtUp("a", "b", "c")
	c.sameBytes(l, f)
}

// A member added later receives the whole log; a removed one leaves.
func TestAddAndRemoveMember(t *testing.T) {
	c := newCluster(t, streamlog.Options{MaxSegmentChunks: 8}, "a", "b", "c")
	l := c.leader("a", "b", "c")
	for i := range 20 {
		if err := c.publish(l, i); err != nil {
			t.Fatal(err)
		}
	}
	c.start("d", nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.node(l).AddMember(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	c.caughtUp("a", "b", "c", "d")
	if got := c.records("d"); len(got) != 20 {
		t.Fatalf("the new member reads %d records", len(got))
	}
	c.sameBytes(l, "d")
	if st := c.node(l).Status(); !slices.Equal(st.Members, []string{"a", "b", "c", "d"}) {
		t.Fatalf("members %v", st.Members)
	}
	rm := "a"
	if l == "a" {
		rm = "b"
	}
	if err := c.node(l).RemoveMember(ctx, rm); err != nil {
		t.Fatal(err)
	}
	if st := c.node(l).Status(); slices.Contains(st.Members, rm) {
		t.Fatalf("members %v after removing %s", st.Members, rm)
	}
	if err := c.publish(l, 20); err != nil {
		t.Fatal(err)
	}
}

// Restarting every member keeps what was committed, and only that is
// visible before the group says it is committed.
func TestRestartAll(t *testing.T) {
	c := newCluster(t, streamlog.Options{MaxSegmentChunks: 8}, "a", "b", "c")
	l := c.leader("a", "b", "c")
	for i := range 30 {
		if err := c.publish(l, i); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(3, 3))
	for _, n := range []string{"a", "b", "c"} {
		c.crash(n, rng)
	}
	for _, n := range []string{"a", "b", "c"} {
		c.start(n, []string{"a", "b", "c"}, false)
	}
	l = c.leader("a", "b", "c")
	if err := c.publish(l, 30); err != nil {
		t.Fatal(err)
	}
	c.caughtUp("a", "b", "c")
	for _, n := range []string{"a", "b", "c"} {
		if got := c.records(n); len(got) != 31 {
			t.Fatalf("%s reads %d", n, len(got))
		}
	}
	c.sameBytes("a", "b", "c")
}

// quiesced waits until every named member says its group is quiesced.
func (c *cluster) quiesced(names ...string) {
	c.t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		all := true
		for _, n := range names {
			all = all && c.node(n).Status().Quiesced
		}
		if all {
			return
		}
	}
	for _, n := range names {
		c.t.Logf("%s: %+v", n, c.node(n).Status())
	}
	c.t.Fatalf("members %v did not quiesce", names)
}

// TestQuiesce: an idle group quiesces (no message for many election
// timeouts), wakes for a publish, commits it on every member and
// quiesces again.
func TestQuiesce(t *testing.T) {
	c := newCluster(t, streamlog.Options{}, "a", "b", "c")
	l := c.leader("a", "b", "c")
	if err := c.publish(l, 1); err != nil {
		t.Fatal(err)
	}
	c.caughtUp("a", "b", "c")
	c.quiesced("a", "b", "c")
	before := c.sentCount()
	time.Sleep(300 * time.Millisecond) // 30 ticks: 2 election timeouts at least
	if n := c.sentCount() - before; n != 0 {
		t.Fatalf("a quiesced group sent %d messages", n)
	}
	if l2, _ := c.node("b").Leader(); l2 != l {
		t.Fatalf("leader %q after quiescence, was %q", l2, l)
	}
	if err := c.publish(l, 2); err != nil {
		t.Fatal(err)
	}
	c.caughtUp("a", "b", "c")
	for _, n := range []string{"a", "b", "c"} {
		if got := c.records(n); !slices.Equal(got, []string{"p1", "p2"}) {
			t.Fatalf("%s reads %v", n, got)
		}
	}
	c.quiesced("a", "b", "c")
}

// TestQuiescedLeaderLost: the leader of a quiesced group goes (its node
// stops, then: its links are cut); the followers, which do not count
// down to an election while quiesced, hear it from the links, elect
// another and take publishes; the old leader, isolated, steps down.
func TestQuiescedLeaderLost(t *testing.T) {
	for _, how := range []string{"stop", "isolate"} {
		t.Run(how, func(t *testing.T) {
			names := []string{"a", "b", "c"}
			c := newCluster(t, streamlog.Options{}, names...)
			l := c.leader(names...)
			if err := c.publish(l, 1); err != nil {
				t.Fatal(err)
			}
			c.caughtUp(names...)
			c.quiesced(names...)
			rest := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == l })
			if how == "stop" {
				c.stop(l)
			} else {
				c.isolate(l, true)
			}
			l2 := c.leader(rest...)
			if err := c.publish(l2, 2); err != nil {
				t.Fatal(err)
			}
			c.caughtUp(rest...)
			if how == "stop" {
				c.start(l, names, false)
			} else {
				// cut off from its quorum, the old leader steps down
				for end := time.Now().Add(10 * time.Second); c.node(l).Status().Role == "StateLeader"; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(end) {
						t.Fatalf("the isolated leader %s still leads: %+v", l, c.node(l).Status())
					}
				}
				c.isolate(l, false)
			}
			if err := c.publish(c.leader(names...), 3); err != nil {
				t.Fatal(err)
			}
			c.caughtUp(names...)
			for _, n := range names {
				if got := c.records(n); !slices.Equal(got, []string{"p1", "p2", "p3"}) {
					t.Fatalf("%s reads %v", n, got)
				}
			}
			c.sameBytes(names...)
			c.quiesced(names...)
		})
	}
}
