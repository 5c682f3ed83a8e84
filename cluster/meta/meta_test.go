package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testutil"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// applyErr is the test state machine's outcome for a "fail:" command.
type applyErr struct{ cmd string }

func (e *applyErr) Error() string { return "refused " + e.cmd }

// kv is the test state machine: the sequence of applied commands. It is
// "durable" (survives a group restart) unless a test makes a new one.
type kv struct {
	mu       sync.Mutex
	last     uint64
	seq      []string
	restores int
	lastErr  error
}

func (s *kv) Apply(index uint64, cmd []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if index <= s.last {
		return nil
	}
	s.last = index
	c := string(cmd)
	if strings.HasPrefix(c, "fail:") {
		s.lastErr = &applyErr{c}
		return s.lastErr
	}
	s.seq = append(s.seq, c)
	return nil
}

type kvSnap struct {
	Last uint64   `json:"last"`
	Seq  []string `json:"seq"`
}

func (s *kv) Snapshot() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return json.Marshal(kvSnap{s.last, s.seq})
}

func (s *kv) Restore(index uint64, data []byte) error {
	var sn kvSnap
	if err := json.Unmarshal(data, &sn); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last, s.seq = index, sn.Seq
	s.restores++
	return nil
}

func (s *kv) get() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seq...)
}

func (s *kv) count(c string) int {
	n := 0
	for _, x := range s.get() {
		if x == c {
			n++
		}
	}
	return n
}

func (s *kv) has(c string) bool {
	for _, x := range s.get() {
		if x == c {
			return true
		}
	}
	return false
}

// net is an in-memory transport: one delivery goroutine per node calls
// Step; a cut node's traffic (both ways) is dropped silently.
type net struct {
	t      *testing.T
	mu     sync.Mutex
	groups map[string]*Group
	sms    map[string]*kv
	dirs   map[string]string
	cut    map[string]bool
	deaf   map[string]bool // drops only the traffic to the node
	queues map[string]chan [2]string
	wg     sync.WaitGroup
	stop   chan struct{}
	peers  map[string]string
	cfg    func(*Config)
}

const testTimeout = time.Second

func newNet(t *testing.T, n int, tweak func(*Config)) *net {
	t.Helper()
	nw := &net{
		t: t, groups: map[string]*Group{}, sms: map[string]*kv{}, dirs: map[string]string{},
		cut: map[string]bool{}, deaf: map[string]bool{}, queues: map[string]chan [2]string{}, stop: make(chan struct{}),
		peers: map[string]string{}, cfg: tweak,
	}
	for i := 0; i < n; i++ {
		nw.peers[name(i)] = fmt.Sprintf("127.0.0.1:%d", 25000+i)
	}
	for i := 0; i < n; i++ {
		nw.open(name(i), false, &kv{})
	}
	t.Cleanup(nw.shutdown)
	return nw
}

func name(i int) string { return fmt.Sprintf("warren@n%d", i) }

func (nw *net) open(self string, join bool, sm *kv) *Group {
	nw.t.Helper()
	nw.mu.Lock()
	dir := nw.dirs[self]
	if dir == "" {
		dir = nw.t.TempDir()
		nw.dirs[self] = dir
	}
	q := nw.queues[self]
	if q == nil {
		q = make(chan [2]string, 4096)
		nw.queues[self] = q
		nw.wg.Add(1)
		go nw.deliver(self, q)
	}
	nw.mu.Unlock()
	cfg := Config{
		Self: self, Dir: dir, Peers: nw.peers, Join: join, SM: sm,
		Send:           nw.sender(self),
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		ProposeTimeout: testTimeout,
		Tick:           10 * time.Millisecond,
	}
	if join {
		cfg.Peers = nil
	}
	if nw.cfg != nil {
		nw.cfg(&cfg)
	}
	g, err := Open(cfg)
	if err != nil {
		nw.t.Fatalf("open %s: %v", self, err)
	}
	nw.mu.Lock()
	nw.groups[self], nw.sms[self] = g, sm
	nw.mu.Unlock()
	return g
}

func (nw *net) sender(from string) func(string, []byte) error {
	return func(to string, data []byte) error {
		nw.mu.Lock()
		q, cut := nw.queues[to], nw.cut[from] || nw.cut[to] || nw.deaf[to]
		nw.mu.Unlock()
		if cut {
			return nil // lost on the wire
		}
		if q == nil {
			return errors.New("unreachable")
		}
		select {
		case q <- [2]string{from, string(data)}:
			return nil
		default:
			return errors.New("queue full")
		}
	}
}

func (nw *net) deliver(to string, q chan [2]string) {
	defer nw.wg.Done()
	for {
		select {
		case <-nw.stop:
			return
		case m := <-q:
			nw.mu.Lock()
			g, cut := nw.groups[to], nw.cut[m[0]] || nw.cut[to] || nw.deaf[to]
			nw.mu.Unlock()
			if g != nil && !cut {
				g.Step(m[0], []byte(m[1]))
			}
		}
	}
}

func (nw *net) g(self string) *Group {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.groups[self]
}

func (nw *net) sm(self string) *kv {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.sms[self]
}

func (nw *net) setCut(self string, cut bool) {
	nw.mu.Lock()
	nw.cut[self] = cut
	nw.mu.Unlock()
}

func (nw *net) closeNode(self string) {
	nw.t.Helper()
	g := nw.g(self)
	nw.mu.Lock()
	delete(nw.groups, self)
	nw.mu.Unlock()
	if err := g.Close(); err != nil {
		nw.t.Fatalf("close %s: %v", self, err)
	}
}

func (nw *net) names() []string {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	var out []string
	for n := range nw.groups {
		out = append(out, n)
	}
	return out
}

func (nw *net) shutdown() {
	for _, n := range nw.names() {
		nw.g(n).Close()
	}
	close(nw.stop)
	nw.wg.Wait()
}

// waitFor polls cond every 5 ms until it holds or d passes: cond often
// ticks the nodes, so the polls keep a fixed pace.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.EventuallyEvery(t, 5*time.Millisecond, d, what, cond)
}

func (nw *net) leader() string {
	for _, n := range nw.names() {
		if nw.g(n).Status().Role == "leader" {
			return n
		}
	}
	return ""
}

func (nw *net) waitLeader(t *testing.T) string {
	t.Helper()
	var l string
	waitFor(t, 5*time.Second, "a leader", func() bool { l = nw.leader(); return l != "" })
	return l
}

// waitSame waits until every open node applied the same sequence and
// returns it.
func (nw *net) waitSame(t *testing.T, minLen int) []string {
	t.Helper()
	var ref []string
	waitFor(t, 10*time.Second, "the same applied sequence everywhere", func() bool {
		names := nw.names()
		ref = nw.sm(names[0]).get()
		if len(ref) < minLen {
			return false
		}
		for _, n := range names[1:] {
			if strings.Join(nw.sm(n).get(), ",") != strings.Join(ref, ",") {
				return false
			}
		}
		return true
	})
	return ref
}

func propose(t *testing.T, g *Group, cmd string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Right after an election a proposal may fail; retry until one
	// commits (the retried command is only ever answered ok once).
	var err error
	for i := 0; i < 20; i++ {
		if err = g.Propose(ctx, []byte(cmd)); err == nil {
			return
		}
		if errors.Is(err, ErrOutcomeUnknown) {
			t.Fatalf("propose %s: %v", cmd, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("propose %s: %v", cmd, err)
}

// issue 13: definitions through Raft: a change proposed on any node is
// applied on every node, in the same order.
func TestProposeFromEveryNode(t *testing.T) {
	nw := newNet(t, 3, nil)
	nw.waitLeader(t)
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 10; j++ {
				propose(t, nw.g(name(i)), fmt.Sprintf("c%d-%d", i, j))
			}
		}(i)
	}
	wg.Wait()
	seq := nw.waitSame(t, 30)
	if len(seq) != 30 {
		t.Fatalf("applied %d commands, want 30: %v", len(seq), seq)
	}
	for _, n := range nw.names() {
		if got := nw.g(n).Members(); len(got) != 3 {
			t.Fatalf("%s sees members %+v", n, got)
		}
	}
}

// issue 13: a change made while no leader is known (here: before the
// first election) waits for one instead of failing.
func TestProposeWaitsForElection(t *testing.T) {
	nw := newNet(t, 3, nil)
	g := nw.g(name(2))
	if g.Leader() != "" {
		t.Skip("a leader was elected before the test could propose")
	}
	if err := g.Propose(context.Background(), []byte("early")); err != nil {
		t.Fatalf("Propose during the first election = %v", err)
	}
	nw.waitSame(t, 1)
}

// issue 13: a one-node cluster (Peers = itself) elects itself and
// commits alone, and keeps its state across a restart.
func TestSingleNode(t *testing.T) {
	nw := newNet(t, 1, nil)
	propose(t, nw.g(name(0)), "solo")
	nw.closeNode(name(0))
	g := nw.open(name(0), false, nw.sm(name(0)))
	propose(t, g, "solo-2")
	if got := nw.sm(name(0)).get(); strings.Join(got, ",") != "solo,solo-2" {
		t.Fatalf("applied %v", got)
	}
	if ms := g.Members(); len(ms) != 1 || !ms[0].Self || !ms[0].Leader || ms[0].Addr != "127.0.0.1:25000" {
		t.Fatalf("members %+v", ms)
	}
}

// issue 13: a change answers with the error the local apply gave (the
// very value, so the broker keeps its AMQP codes).
func TestApplyErrorReachesProposer(t *testing.T) {
	nw := newNet(t, 3, nil)
	l := nw.waitLeader(t)
	var follower string
	for _, n := range nw.names() {
		if n != l {
			follower = n
		}
	}
	propose(t, nw.g(follower), "ok1")
	err := nw.g(follower).Propose(context.Background(), []byte("fail:x"))
	var ae *applyErr
	if !errors.As(err, &ae) {
		t.Fatalf("Propose = %v, want the apply error", err)
	}
	sm := nw.sm(follower)
	sm.mu.Lock()
	same := error(ae) == sm.lastErr
	sm.mu.Unlock()
	if !same {
		t.Fatalf("got a copy of the apply error, want the value Apply returned")
	}
	if err := nw.g(l).Propose(context.Background(), []byte("ok2")); err != nil {
		t.Fatal(err)
	}
}

// issue 13: without a quorum, changes fail with a clear error (the
// minority side refuses them) while the majority keeps committing; a
// change answered as definitely failed is absent everywhere after healing.
func TestMinorityGetsNoQuorum(t *testing.T) {
	nw := newNet(t, 3, nil)
	l := nw.waitLeader(t)
	propose(t, nw.g(l), "before")
	nw.waitSame(t, 1)
	// Cut off the leader itself: it must step down (CheckQuorum).
	nw.setCut(l, true)
	start := time.Now()
	err := nw.g(l).Propose(context.Background(), []byte("minority-1"))
	if !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("cut-off Propose = %v, want ErrNoQuorum", err)
	}
	if el := time.Since(start); el > testTimeout+time.Second {
		t.Fatalf("ErrNoQuorum after %v, want within the timeout", el)
	}
	if !strings.Contains(err.Error(), "cluster has no quorum") {
		t.Fatalf("error text %q", err)
	}
	unknown1 := errors.Is(err, ErrOutcomeUnknown)
	waitFor(t, 5*time.Second, "the cut-off node to lose its leader", func() bool { return nw.g(l).Leader() == "" })
	err = nw.g(l).Propose(context.Background(), []byte("minority-2"))
	if !errors.Is(err, ErrNoQuorum) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("leaderless Propose = %v, want a definite ErrNoQuorum", err)
	}
	if got, want := err.Error(), "cluster has no quorum: no leader within 1s"; got != want {
		t.Fatalf("error text %q, want %q", got, want)
	}
	// The majority elects a leader and keeps committing.
	var others []string
	for _, n := range nw.names() {
		if n != l {
			others = append(others, n)
		}
	}
	for i := 0; i < 5; i++ {
		propose(t, nw.g(others[i%2]), fmt.Sprintf("majority-%d", i))
	}
	nw.setCut(l, false)
	seq := nw.waitSame(t, 6)
	for _, c := range seq {
		if c == "minority-2" || (c == "minority-1" && !unknown1) {
			t.Fatalf("failed change %s was applied: %v", c, seq)
		}
	}
}

// issue 13: a change whose outcome the proposer could not learn in time
// is answered ErrNoQuorum+ErrOutcomeUnknown, never as a definite failure:
// here it commits on the majority while the proposer hears nothing, and
// applies on the proposer once it hears again.
func TestUnknownOutcomeMayApplyLater(t *testing.T) {
	nw := newNet(t, 3, nil)
	l := nw.waitLeader(t)
	var f string
	for _, n := range nw.names() {
		if n != l {
			f = n
		}
	}
	propose(t, nw.g(f), "before")
	nw.waitSame(t, 1)
	nw.mu.Lock()
	nw.deaf[f] = true
	nw.mu.Unlock()
	err := nw.g(f).Propose(context.Background(), []byte("late"))
	if !errors.Is(err, ErrNoQuorum) || !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("Propose from a deaf follower = %v, want ErrNoQuorum with ErrOutcomeUnknown", err)
	}
	if !nw.sm(l).has("late") {
		t.Fatalf("the leader did not commit the forwarded change")
	}
	nw.mu.Lock()
	nw.deaf[f] = false
	nw.mu.Unlock()
	waitFor(t, 5*time.Second, "the deaf node to apply the change", func() bool { return nw.sm(f).has("late") })
}

// issue 13: a leader drops a forwarded proposal whose proposer already
// gave up (its notAfter passed), so a change answered as failed after a
// slow link does not apply later.
func TestLeaderDropsExpiredForwardedProposal(t *testing.T) {
	nw := newNet(t, 3, nil)
	l := nw.waitLeader(t)
	var f string
	for _, n := range nw.names() {
		if n != l {
			f = n
		}
	}
	mk := func(cmd string, notAfter time.Time) []byte {
		env := envelope{kind: kindCommand, key: proposalKey{Node: NodeID(f), Inc: 7, Seq: uint64(len(cmd))}, notAfter: notAfter.UnixMilli(), payload: []byte(cmd)}
		m := &pb.Message{Type: pb.MsgProp.Enum(), From: new(NodeID(f)), To: new(NodeID(l)),
			Entries: []*pb.Entry{{Type: pb.EntryNormal.Enum(), Data: env.marshal()}}}
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	nw.g(l).Step(f, mk("expired", time.Now().Add(-time.Second)))
	nw.g(l).Step(f, mk("in-time", time.Now().Add(time.Minute)))
	waitFor(t, 5*time.Second, "the in-time change", func() bool { return nw.sm(l).has("in-time") })
	propose(t, nw.g(l), "after")
	if seq := nw.waitSame(t, 2); nw.sm(l).has("expired") {
		t.Fatalf("an expired forwarded proposal was applied: %v", seq)
	}
}

// issue 13: a node that was down catches up from the log.
func TestRestartCatchesUpFromLog(t *testing.T) {
	nw := newNet(t, 3, nil)
	l := nw.waitLeader(t)
	propose(t, nw.g(l), "a")
	nw.waitSame(t, 1)
	var down string
	for _, n := range nw.names() {
		if n != l {
			down = n
		}
	}
	nw.closeNode(down)
	for i := 0; i < 10; i++ {
		propose(t, nw.g(l), fmt.Sprintf("b%d", i))
	}
	nw.open(down, false, nw.sm(down))
	seq := nw.waitSame(t, 11)
	if len(seq) != 11 {
		t.Fatalf("applied %v", seq)
	}
	if r := nw.sm(down).restores; r != 0 {
		t.Fatalf("caught up with %d snapshot restores, want the log", r)
	}
}

// issue 13: a node far behind catches up from a snapshot; and a state
// machine without state of its own (RestoreOnOpen) is rebuilt at open.
func TestSnapshotCatchUp(t *testing.T) {
	nw := newNet(t, 3, func(c *Config) { c.SnapshotEvery, c.KeepEntries = 10, 3 })
	l := nw.waitLeader(t)
	var down string
	for _, n := range nw.names() {
		if n != l {
			down = n
		}
	}
	nw.closeNode(down)
	for i := 0; i < 40; i++ {
		propose(t, nw.g(l), fmt.Sprintf("s%d", i))
	}
	sm := nw.sm(down)
	nw.open(down, false, sm)
	nw.waitSame(t, 40)
	sm.mu.Lock()
	r := sm.restores
	sm.mu.Unlock()
	if r == 0 {
		t.Fatalf("the lagging node caught up without a snapshot")
	}
	// The leader reopened with a fresh, empty state machine.
	nw.closeNode(l)
	fresh := &kv{}
	nw.cfg = func(c *Config) { c.SnapshotEvery, c.KeepEntries, c.RestoreOnOpen = 10, 3, true }
	nw.open(l, false, fresh)
	if got := fresh.get(); len(got) < 30 {
		t.Fatalf("RestoreOnOpen gave %d commands at open, want the snapshot's", len(got))
	}
	nw.waitSame(t, 40)
}

// issue 13: add and remove nodes later (warren cluster join, forget).
func TestAddRemoveMember(t *testing.T) {
	nw := newNet(t, 3, func(c *Config) { c.SnapshotEvery, c.KeepEntries = 20, 5 })
	l := nw.waitLeader(t)
	for i := 0; i < 30; i++ {
		propose(t, nw.g(l), fmt.Sprintf("x%d", i))
	}
	var seen [][]Member
	var mu sync.Mutex
	nw.g(name(0)).OnMembers(func(ms []Member) { mu.Lock(); seen = append(seen, ms); mu.Unlock() })
	d := "warren@n3"
	dg := nw.open(d, true, &kv{})
	if err := nw.g(name(0)).AddMember(context.Background(), d, "127.0.0.1:25003"); err != nil {
		t.Fatalf("AddMember: %v", err)
	}
	nw.waitSame(t, 30)
	propose(t, dg, "from-d")
	nw.waitSame(t, 31)
	if len(nw.g(l).Members()) != 4 {
		t.Fatalf("members %+v", nw.g(l).Members())
	}
	mu.Lock()
	last := seen[len(seen)-1]
	mu.Unlock()
	if len(last) != 4 || last[3].Name != d || last[3].Addr != "127.0.0.1:25003" {
		t.Fatalf("OnMembers saw %+v", last)
	}
	if dg.ClusterID() == "" || dg.ClusterID() != nw.g(l).ClusterID() {
		t.Fatalf("joined node's cluster id %q, leader's %q", dg.ClusterID(), nw.g(l).ClusterID())
	}
	if err := nw.g(name(1)).RemoveMember(context.Background(), d); err != nil {
		t.Fatalf("RemoveMember: %v", err)
	}
	select {
	case <-dg.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("removed node's group still runs")
	}
	if err := dg.Propose(context.Background(), []byte("after")); !errors.Is(err, ErrRemoved) {
		t.Fatalf("Propose on a removed node = %v", err)
	}
	nw.closeNode(d)
	waitFor(t, 5*time.Second, "every node to see 3 members", func() bool {
		for _, n := range nw.names() {
			if ms := nw.g(n).Members(); len(ms) != 3 {
				return false
			}
		}
		return true
	})
	propose(t, nw.g(name(2)), "after-remove")
	nw.waitSame(t, 32)
}

// issue 13: one cluster id, the same on every node, kept in the data
// directory across restarts.
func TestClusterIDPersisted(t *testing.T) {
	nw := newNet(t, 3, nil)
	nw.waitLeader(t)
	var id string
	waitFor(t, 5*time.Second, "a cluster id everywhere", func() bool {
		id = nw.g(name(0)).ClusterID()
		for _, n := range nw.names() {
			if c := nw.g(n).ClusterID(); c == "" || c != id {
				return false
			}
		}
		return true
	})
	nw.closeNode(name(1))
	g := nw.open(name(1), false, nw.sm(name(1)))
	if got := g.ClusterID(); got != id {
		t.Fatalf("cluster id after restart %q, want %q", got, id)
	}
	if err := g.SetClusterID("other"); !errors.Is(err, ErrClusterIDMismatch) {
		t.Fatalf("SetClusterID(other) = %v", err)
	}
	nw.closeNode(name(1))
	cfg := Config{Self: name(1), Dir: nw.dirs[name(1)], SM: &kv{}, Send: func(string, []byte) error { return nil }, ClusterID: "other"}
	if _, err := Open(cfg); !errors.Is(err, ErrClusterIDMismatch) {
		t.Fatalf("Open with another cluster id = %v", err)
	}
	nw.open(name(1), false, nw.sm(name(1)))
}

// issue 13: seeded random proposals from every node with partitions and
// restarts: every node's applied sequence is always a prefix of the
// longest; after healing all are equal, every change answered ok is in it
// and none answered as definitely failed is.
func TestRandomizedPartitionsAndRestarts(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	nw := newNet(t, 5, func(c *Config) { c.SnapshotEvery, c.KeepEntries = 25, 5 })
	nw.waitLeader(t)
	var (
		mu              sync.Mutex
		ok, failed, unk []string
		wg              sync.WaitGroup
	)
	checkPrefix := func() {
		var seqs [][]string
		longest := 0
		for _, n := range nw.names() {
			s := nw.sm(n).get()
			seqs = append(seqs, s)
			if len(s) > len(seqs[longest]) {
				longest = len(seqs) - 1
			}
		}
		for _, s := range seqs {
			for i := range s {
				if s[i] != seqs[longest][i] {
					t.Fatalf("diverged at %d: %v vs %v", i, s, seqs[longest])
				}
			}
		}
		// Every command is proposed once under its own key: one applied
		// twice is a re-proposal the apply failed to drop.
		seen := map[string]bool{}
		for _, c := range seqs[longest] {
			if seen[c] {
				t.Fatalf("%s applied twice: %v", c, seqs[longest])
			}
			seen[c] = true
		}
	}
	deadline := time.Now().Add(8 * time.Second)
	for step := 0; time.Now().Before(deadline); step++ {
		names := nw.names()
		n := names[rng.Intn(len(names))]
		switch r := rng.Intn(20); {
		case r < 14:
			g := nw.g(n)
			cmd := fmt.Sprintf("r%d", step)
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := g.Propose(context.Background(), []byte(cmd))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					ok = append(ok, cmd)
				case errors.Is(err, ErrOutcomeUnknown):
					unk = append(unk, cmd)
				case errors.Is(err, ErrNoQuorum):
					failed = append(failed, cmd)
				}
			}()
		case r < 17:
			nw.mu.Lock()
			cuts := 0
			for _, c := range nw.cut {
				if c {
					cuts++
				}
			}
			nw.mu.Unlock()
			nw.setCut(n, cuts < 2 && rng.Intn(2) == 0)
		default:
			if len(names) == 5 {
				nw.closeNode(n)
				nw.open(n, false, nw.sm(n))
			}
		}
		checkPrefix()
		time.Sleep(time.Duration(rng.Intn(30)) * time.Millisecond)
	}
	wg.Wait()
	for _, n := range nw.names() {
		nw.setCut(n, false)
	}
	// A last change makes every node catch up. Right after healing, the
	// node that looks like the leader may be a stale one (it steps down
	// once it hears the new term): retry with a new command.
	final := ""
	for i := 0; final == "" && i < 10; i++ {
		cmd := fmt.Sprintf("final-%d", i)
		err := nw.g(nw.waitLeader(t)).Propose(context.Background(), []byte(cmd))
		switch {
		case err == nil:
			final = cmd
			ok = append(ok, cmd)
		case errors.Is(err, ErrOutcomeUnknown):
			unk = append(unk, cmd)
		default:
			failed = append(failed, cmd)
		}
	}
	if final == "" {
		t.Fatalf("no change committed after healing")
	}
	waitFor(t, 10*time.Second, "every node to apply the final change", func() bool {
		for _, n := range nw.names() {
			if !nw.sm(n).has(final) {
				return false
			}
		}
		return true
	})
	seq := nw.waitSame(t, 1)
	in := map[string]bool{}
	for _, c := range seq {
		if in[c] {
			t.Fatalf("%s applied twice", c)
		}
		in[c] = true
	}
	for _, c := range ok {
		if !in[c] {
			t.Fatalf("change %s answered ok is missing", c)
		}
	}
	for _, c := range failed {
		if in[c] {
			t.Fatalf("change %s answered as failed is present", c)
		}
	}
	t.Logf("ok %d, failed %d, unknown %d, applied %d", len(ok), len(failed), len(unk), len(seq))
	if len(ok) == 0 {
		t.Fatalf("no change succeeded")
	}
}

// others returns the open nodes but the given ones.
func (nw *net) others(not ...string) []string {
	var out []string
	for _, n := range nw.names() {
		skip := false
		for _, x := range not {
			skip = skip || n == x
		}
		if !skip {
			out = append(out, n)
		}
	}
	return out
}

// waitOnce waits until every open node applied cmd, and fails if any
// applied it more than once.
func (nw *net) waitOnce(t *testing.T, cmd string) {
	t.Helper()
	waitFor(t, 10*time.Second, cmd+" applied everywhere", func() bool {
		for _, n := range nw.names() {
			if !nw.sm(n).has(cmd) {
				return false
			}
		}
		return true
	})
	nw.waitSame(t, 1)
	for _, n := range nw.names() {
		if c := nw.sm(n).count(cmd); c != 1 {
			t.Fatalf("%s applied %s %d times: %v", n, cmd, c, nw.sm(n).get())
		}
	}
}

// issue 13: a proposal made on a follower and forwarded to a leader that
// is cut off (as good as killed) before it replicates it is re-proposed
// to the new leader: it succeeds within the timeout instead of ending as
// "outcome unknown", and applies exactly once everywhere. Same for a
// leader that appended its own proposal and lost leadership before
// replicating it.
func TestProposalSurvivesLeaderLoss(t *testing.T) {
	nw := newNet(t, 3, func(c *Config) { c.ProposeTimeout = 3 * time.Second })
	l := nw.waitLeader(t)
	f := nw.others(l)[0]
	propose(t, nw.g(f), "before")
	nw.waitSame(t, 1)

	// The follower still takes l for the leader and forwards to it.
	nw.setCut(l, true)
	if err := nw.g(f).Propose(context.Background(), []byte("from-follower")); err != nil {
		t.Fatalf("Propose on a follower while the leader is lost = %v, want nil", err)
	}
	nw.setCut(l, false)
	nw.waitOnce(t, "from-follower")

	// A leader appends its own proposal, is cut off, steps down
	// (CheckQuorum), and hears the new leader once healed: its entry is
	// overwritten, the re-proposal commits.
	l2 := nw.waitLeader(t)
	nw.setCut(l2, true)
	done := make(chan error, 1)
	go func() { done <- nw.g(l2).Propose(context.Background(), []byte("from-leader")) }()
	waitFor(t, 5*time.Second, "a new leader on the majority side", func() bool {
		if nw.g(l2).Status().Role == "leader" {
			return false
		}
		for _, n := range nw.others(l2) {
			if nw.g(n).Status().Role == "leader" {
				return true
			}
		}
		return false
	})
	nw.setCut(l2, false)
	if err := <-done; err != nil {
		t.Fatalf("Propose on a leader that lost leadership = %v, want nil", err)
	}
	nw.waitOnce(t, "from-leader")
}

// stepProp hands to's group the proposal env as if from had forwarded it.
func (nw *net) stepProp(t *testing.T, from, to string, env envelope) {
	t.Helper()
	m := &pb.Message{Type: pb.MsgProp.Enum(), From: new(NodeID(from)), To: new(NodeID(to)),
		Entries: []*pb.Entry{{Type: pb.EntryNormal.Enum(), Data: env.marshal()}}}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	nw.g(to).Step(from, b)
}

func dupEnvelope(from, cmd string) envelope {
	return envelope{kind: kindCommand, key: proposalKey{Node: NodeID(from), Inc: 42, Seq: 1}, notAfter: time.Now().Add(time.Minute).UnixMilli(), payload: []byte(cmd)}
}

// issue 13: the same envelope (same proposal key) committed twice, as a
// re-proposal whose original also committed, applies once on every node,
// also on a node restarted from disk after the first copy (the set of
// applied keys is rebuilt from the stored entries).
func TestDuplicateAppliedOnce(t *testing.T) {
	nw := newNet(t, 3, nil)
	l := nw.waitLeader(t)
	f := nw.others(l)[0]
	env := dupEnvelope(f, "dup")
	nw.stepProp(t, f, l, env)
	nw.stepProp(t, f, l, env)
	propose(t, nw.g(l), "after-1")
	nw.waitOnce(t, "after-1")
	nw.waitOnce(t, "dup")

	r := nw.others(l, f)[0]
	nw.closeNode(r)
	nw.open(r, false, nw.sm(r))
	nw.waitLeader(t)
	env.notAfter = time.Now().Add(time.Minute).UnixMilli()
	nw.stepProp(t, f, nw.waitLeader(t), env)
	propose(t, nw.g(r), "after-2")
	nw.waitOnce(t, "after-2")
	nw.waitOnce(t, "dup")
}

// issue 13: the set of applied keys travels in snapshots: a node that
// caught up by snapshot (never saw the first copy's entry) and a node
// restarted from a snapshot on disk drop a later duplicate too.
func TestDuplicateAfterSnapshot(t *testing.T) {
	nw := newNet(t, 3, func(c *Config) { c.SnapshotEvery, c.KeepEntries = 10, 3 })
	l := nw.waitLeader(t)
	f, d := nw.others(l)[0], nw.others(l)[1]
	nw.closeNode(d)
	env := dupEnvelope(f, "dup")
	nw.stepProp(t, f, l, env)
	for i := 0; i < 40; i++ {
		propose(t, nw.g(l), fmt.Sprintf("s%d", i))
	}
	sm := nw.sm(d)
	nw.open(d, false, sm)
	nw.waitSame(t, 41)
	sm.mu.Lock()
	restores := sm.restores
	sm.mu.Unlock()
	if restores == 0 {
		t.Fatalf("the lagging node caught up without a snapshot")
	}
	env.notAfter = time.Now().Add(time.Minute).UnixMilli()
	nw.stepProp(t, f, nw.waitLeader(t), env)
	propose(t, nw.g(l), "after-1")
	nw.waitOnce(t, "after-1")
	nw.waitOnce(t, "dup")

	// f restarts from its own snapshot and the entries after it.
	nw.closeNode(f)
	nw.open(f, false, nw.sm(f))
	env.notAfter = time.Now().Add(time.Minute).UnixMilli()
	nw.stepProp(t, f, nw.waitLeader(t), env)
	propose(t, nw.g(d), "after-2")
	nw.waitOnce(t, "after-2")
	nw.waitOnce(t, "dup")
}

// issue 13: the dedup window is a function of the log positions alone: a
// key is a duplicate within the window after the last position that
// carried it and forgotten beyond it, whenever pruning happened, and a
// set carried through a snapshot decides the same.
func TestSeenSetWindow(t *testing.T) {
	k := func(i uint64) proposalKey { return proposalKey{Node: 1, Inc: 2, Seq: i} }
	s := newSeenSet(3)
	steps := []struct {
		key  uint64
		idx  uint64
		want bool
	}{
		{1, 1, false}, {2, 2, false}, {1, 3, true}, // 1 carried at 1: 3-1 < 3
		{1, 6, false}, // last carried at 3: 6-3 = 3, forgotten
		{2, 7, false}, {1, 8, true},
	}
	for _, st := range steps {
		if got := s.observe(k(st.key), st.idx); got != st.want {
			t.Fatalf("observe(%d at %d) = %v, want %v", st.key, st.idx, got, st.want)
		}
	}
	s.prune(9) // a snapshot at 9: positions 7 and 8 remain
	c, err := unmarshalSeenSet(3, s.marshal())
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range []*seenSet{s, c} {
		if len(set.last) != 2 || set.last[k(1)] != 8 || set.last[k(2)] != 7 {
			t.Fatalf("window at 9: %v", set.last)
		}
	}
	if !c.observe(k(1), 10) || c.observe(k(2), 10) {
		t.Fatalf("restored set decides differently")
	}
	if _, err := unmarshalSeenSet(3, make([]byte, 31)); err == nil {
		t.Fatalf("malformed set accepted")
	}
}

// issue 22: recovery from a lost majority (etcd's --force-new-cluster):
// the survivor, started forced, removes the others in its log, elects
// itself and keeps every change it had; an old member started again with
// its old data does not take the leadership or the log back.
func TestForceNewCluster(t *testing.T) {
	nw := newNet(t, 3, nil)
	l := nw.waitLeader(t)
	for i := 0; i < 5; i++ {
		propose(t, nw.g(l), fmt.Sprintf("c%d", i))
	}
	nw.waitSame(t, 5)
	survivor := nw.others(l)[0]
	lost := nw.others(survivor)
	for _, n := range lost {
		nw.closeNode(n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := nw.g(survivor).Propose(ctx, []byte("lost"))
	cancel()
	if err == nil {
		t.Fatal("a proposal committed on a node without a quorum")
	}
	nw.closeNode(survivor)

	// A forced start of a node without state is refused, and so is one of
	// a node that is not in its own configuration.
	if _, err := ForceNewCluster(t.TempDir(), survivor); err == nil || !strings.Contains(err.Error(), "nothing to recover") {
		t.Fatalf("forced start of a blank directory: %v", err)
	}
	if _, err := ForceNewCluster(nw.dirs[survivor], "warren@other"); !errors.Is(err, ErrNotMember) {
		t.Fatalf("forced start as a non-member: %v", err)
	}

	sm := nw.sm(survivor)
	got, err := ForceNewCluster(nw.dirs[survivor], survivor)
	sort.Strings(lost)
	if err != nil || strings.Join(got, ",") != strings.Join(lost, ",") {
		t.Fatalf("ForceNewCluster = %v, %v; want %v", got, err, lost)
	}
	g := nw.open(survivor, false, sm)
	waitFor(t, 5*time.Second, "the survivor to lead alone", func() bool { return g.Status().Role == "leader" })
	propose(t, g, "after")
	if ms := g.Members(); len(ms) != 1 || ms[0].Name != survivor {
		t.Fatalf("members after the forced start: %+v", ms)
	}
	if !sm.has("c4") || !sm.has("after") || sm.has("lost") && sm.count("lost") > 1 {
		t.Fatalf("survivor's state: %v", sm.get())
	}
	term := g.Status().Term

	// Forced again, the node is alone already: nothing more is removed.
	nw.closeNode(survivor)
	if f, err := ForceNewCluster(nw.dirs[survivor], survivor); err != nil || len(f) != 0 {
		t.Fatalf("forced again: %v, %v", f, err)
	}
	g = nw.open(survivor, false, sm)
	waitFor(t, 5*time.Second, "the survivor to lead again", func() bool { return g.Status().Role == "leader" })

	// An old member comes back with its old data: it is not a member any
	// more and cannot unseat the survivor.
	old := nw.open(lost[0], false, nw.sm(lost[0]))
	time.Sleep(50 * nw.g(survivor).cfg.Tick)
	propose(t, g, "later")
	if st := g.Status(); st.Role != "leader" || st.Term < term {
		t.Fatalf("survivor after an old member returned: %+v", st)
	}
	if old.Status().Role == "leader" {
		t.Fatal("the old member became a leader")
	}
	if ms := g.Members(); len(ms) != 1 {
		t.Fatalf("members: %+v", ms)
	}
}
