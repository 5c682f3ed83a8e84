package qraft

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testutil"
)

// memNet is an in-memory network between hosts of one process: ordered
// per link (delivery is synchronous), with links that can be cut (both
// directions or one) and nodes that can be isolated.
type memNet struct {
	mu    sync.Mutex
	hosts map[string]*Host
	cut   map[[2]string]bool // from -> to dropped
	sent  map[string]*atomic.Uint64
	drops atomic.Uint64
	// filter, when set, drops the items it returns true for.
	filter func(from, to string, it *wireItem) bool
}

func newMemNet() *memNet {
	return &memNet{hosts: map[string]*Host{}, cut: map[[2]string]bool{}, sent: map[string]*atomic.Uint64{}}
}

func (n *memNet) sender(from string) func(string, []byte) error {
	n.mu.Lock()
	if n.sent[from] == nil {
		n.sent[from] = &atomic.Uint64{}
	}
	ctr := n.sent[from]
	n.mu.Unlock()
	return func(to string, msg []byte) error {
		n.mu.Lock()
		h := n.hosts[to]
		cut := n.cut[[2]string{from, to}]
		filter := n.filter
		n.mu.Unlock()
		ctr.Add(1)
		if h == nil {
			return errors.New("memnet: unreachable")
		}
		if cut {
			n.drops.Add(1)
			return nil
		}
		if filter != nil {
			items, _ := decodeBatch(msg)
			var b batcher
			for i := range items {
				it := &items[i]
				switch {
				case filter(from, to, it):
					n.drops.Add(1)
				case it.kind == itemRaft:
					b.addRaft(it.group, it.msg)
				case it.kind == itemChunk:
					b.addChunk(it.group, it.id, it.seq, it.total, it.part)
				case it.kind == itemSnapPart:
					b.addSnapPart(it.group, it.id, it.ents)
				case it.kind == itemSnapFrag:
					e := it.ents[0]
					b.addSnapFrag(it.group, it.id, e.index, e.term, it.fragTotal, it.fragOff, e.data)
				case it.kind == itemSnapEnd:
					b.addSnapEnd(it.group, it.id, it.total)
				default:
					b.addQuiesce(it.group, it.term, it.commit)
				}
			}
			for _, buf := range b.finish() {
				h.Step(from, buf)
			}
			return nil
		}
		h.Step(from, append([]byte(nil), msg...))
		return nil
	}
}

// bulkSender is sender for Config.SendBulk (synchronous delivery: never
// full).
func (n *memNet) bulkSender(from string) func(context.Context, string, []byte) error {
	send := n.sender(from)
	return func(_ context.Context, to string, msg []byte) error { return send(to, msg) }
}

// sentBy is how many transport messages a node sent so far.
func (n *memNet) sentBy(node string) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c := n.sent[node]; c != nil {
		return c.Load()
	}
	return 0
}

func (n *memNet) totalSent() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	var t uint64
	for _, c := range n.sent {
		t += c.Load()
	}
	return t
}

// isolate cuts every link of node (both ways); heal restores them.
func (n *memNet) isolate(node string, names ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, o := range names {
		if o != node {
			n.cut[[2]string{node, o}] = true
			n.cut[[2]string{o, node}] = true
		}
	}
}

func (n *memNet) heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = map[[2]string]bool{}
}

// testSM is a small queue: "enq:<x>" enqueues (its id is the entry's
// index), "del:<id>" removes; a hash chains every applied entry.
type testSM struct {
	mu        sync.Mutex
	hash      uint64
	n         int
	last      uint64
	live      map[uint64]bool
	datas     map[string]int // how many times each data was applied
	restores  int
	leader    string
	term      uint64
	selfTerms []uint64
	// at the moment of LeaderChanged(self): how many entries were applied
	appliedAtSelf []int
	onLeader      func(leader string, term uint64, self bool)
}

func newTestSM() *testSM { return &testSM{live: map[uint64]bool{}, datas: map[string]int{}} }

func (s *testSM) Apply(ents []Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range ents {
		if e.Index <= s.last {
			panic(fmt.Sprintf("apply out of order: %d after %d", e.Index, s.last))
		}
		h := fnv.New64a()
		var b [16]byte
		binary.LittleEndian.PutUint64(b[:], s.hash)
		binary.LittleEndian.PutUint64(b[8:], e.Index)
		h.Write(b[:])
		h.Write(e.Data)
		s.hash = h.Sum64()
		s.n++
		s.last = e.Index
		d := string(e.Data)
		s.datas[d]++
		switch {
		case strings.HasPrefix(d, "enq:"):
			s.live[e.Index] = true
		case strings.HasPrefix(d, "del:"):
			id, _ := strconv.ParseUint(d[4:], 10, 64)
			delete(s.live, id)
		}
	}
}

type testSnap struct {
	Hash  uint64
	N     int
	Live  []uint64
	Datas map[string]int
}

func (s *testSM) Snapshot() ([]byte, []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]uint64, 0, len(s.live))
	for id := range s.live {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	b, err := json.Marshal(testSnap{Hash: s.hash, N: s.n, Live: ids, Datas: s.datas})
	if err != nil {
		panic(err)
	}
	return b, ids
}

func (s *testSM) Restore(index uint64, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.restores++
	s.last = index
	var ts testSnap
	if err := json.Unmarshal(data, &ts); err != nil {
		panic(err)
	}
	s.hash, s.n = ts.Hash, ts.N
	s.live = map[uint64]bool{}
	for _, id := range ts.Live {
		s.live[id] = true
	}
	s.datas = ts.Datas
	if s.datas == nil {
		s.datas = map[string]int{}
	}
}

func (s *testSM) LeaderChanged(leader string, term uint64, self bool) {
	s.mu.Lock()
	s.leader, s.term = leader, term
	if self {
		s.selfTerms = append(s.selfTerms, term)
		s.appliedAtSelf = append(s.appliedAtSelf, s.n)
	}
	fn := s.onLeader
	s.mu.Unlock()
	if fn != nil {
		fn(leader, term, self)
	}
}

func (s *testSM) state() (hash uint64, n int, live int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hash, s.n, len(s.live)
}

// tcluster is several hosts in one process over a memNet.
type tcluster struct {
	t      testing.TB
	net    *memNet
	names  []string
	dirs   map[string]string
	hosts  map[string]*Host
	sms    map[string]map[uint64]*testSM
	groups map[string]map[uint64]*Group
	cfg    func(*Config)
}

func newTCluster(t testing.TB, n int, cfg func(*Config)) *tcluster {
	c := &tcluster{t: t, net: newMemNet(), dirs: map[string]string{}, hosts: map[string]*Host{},
		sms: map[string]map[uint64]*testSM{}, groups: map[string]map[uint64]*Group{}, cfg: cfg}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("n%d", i)
		c.names = append(c.names, name)
		c.dirs[name] = t.TempDir()
		c.open(name)
	}
	t.Cleanup(func() {
		for _, h := range c.hosts {
			h.Close()
		}
	})
	return c
}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

func (c *tcluster) open(name string) *Host {
	c.t.Helper()
	cfg := Config{Self: name, Dir: c.dirs[name], Send: c.net.sender(name), SendBulk: c.net.bulkSender(name), Logger: quietLog,
		TickInterval: 10 * time.Millisecond, NoSync: true}
	if c.cfg != nil {
		c.cfg(&cfg)
	}
	h, err := Open(cfg)
	if err != nil {
		c.t.Fatalf("open %s: %v", name, err)
	}
	c.net.mu.Lock()
	c.net.hosts[name] = h
	c.net.mu.Unlock()
	c.hosts[name] = h
	c.sms[name] = map[uint64]*testSM{}
	c.groups[name] = map[uint64]*Group{}
	return h
}

// stop closes (or crashes) a host and takes it off the network.
func (c *tcluster) stop(name string, crash bool) {
	c.net.mu.Lock()
	delete(c.net.hosts, name)
	c.net.mu.Unlock()
	h := c.hosts[name]
	delete(c.hosts, name)
	var err error
	if crash {
		err = h.crash()
	} else {
		err = h.Close()
	}
	if err != nil {
		c.t.Fatalf("close %s: %v", name, err)
	}
}

func (c *tcluster) start(name string, gid uint64, members []string, join bool) *testSM {
	c.t.Helper()
	sm := newTestSM()
	g, err := c.hosts[name].StartGroup(gid, members, sm, join)
	if err != nil {
		c.t.Fatalf("start %d on %s: %v", gid, name, err)
	}
	c.sms[name][gid] = sm
	c.groups[name][gid] = g
	return sm
}

func (c *tcluster) startAll(gid uint64, members ...string) {
	for _, m := range members {
		c.start(m, gid, members, false)
	}
}

// waitFor polls cond every 5 ms until it holds or d passes: cond often
// ticks the nodes, so the polls keep a fixed pace.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.EventuallyEvery(t, 5*time.Millisecond, d, what, cond)
}

// leader waits until a member of gid among the given nodes is the leader
// with its state complete (LeaderChanged self), and returns it.
func (c *tcluster) leader(gid uint64, among ...string) string {
	c.t.Helper()
	if len(among) == 0 {
		among = c.names
	}
	var found string
	waitFor(c.t, 10*time.Second, fmt.Sprintf("a leader of group %d", gid), func() bool {
		for _, n := range among {
			g := c.groups[n][gid]
			sm := c.sms[n][gid]
			if g == nil || c.hosts[n] == nil {
				continue
			}
			l, term := g.Leader()
			sm.mu.Lock()
			ready := len(sm.selfTerms) > 0 && sm.selfTerms[len(sm.selfTerms)-1] == term
			sm.mu.Unlock()
			if l == n && ready {
				found = n
				return true
			}
		}
		return false
	})
	return found
}

// propose proposes data on node and waits for the outcome.
func (c *tcluster) propose(node string, gid uint64, data string) (uint64, error) {
	ch := make(chan struct {
		i   uint64
		err error
	}, 1)
	c.groups[node][gid].Propose([]byte(data), func(i uint64, err error) {
		ch <- struct {
			i   uint64
			err error
		}{i, err}
	})
	select {
	case r := <-ch:
		return r.i, r.err
	case <-time.After(10 * time.Second):
		return 0, errors.New("propose: no answer in 10s")
	}
}

// converge waits until every given member of gid has the same state as
// the leader's, with at least n entries applied.
func (c *tcluster) converge(gid uint64, n int, members ...string) {
	c.t.Helper()
	waitFor(c.t, 10*time.Second, fmt.Sprintf("group %d to converge at %d entries", gid, n), func() bool {
		var h0 uint64
		for i, m := range members {
			h, cnt, _ := c.sms[m][gid].state()
			if cnt < n {
				return false
			}
			if i == 0 {
				h0 = h
			} else if h != h0 {
				return false
			}
		}
		return true
	})
}
