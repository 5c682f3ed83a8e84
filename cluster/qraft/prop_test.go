package qraft

import (
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// issue 14 (property): under random partitions, crashes and restarts
// (with snapshots and compaction going on), members applying the same
// log reach the same state, and every acknowledged proposal is applied
// exactly once on every member. WARREN_QRAFT_PROP_SECONDS runs it longer,
// WARREN_QRAFT_SEED replays a seed.
func TestPropertySameLogSameState(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("WARREN_QRAFT_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	dur := 3 * time.Second
	if s := os.Getenv("WARREN_QRAFT_PROP_SECONDS"); s != "" {
		n, _ := strconv.Atoi(s)
		dur = time.Duration(n) * time.Second
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	c := newTCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries = 30; cfg.KeepEntries = 10 })
	const groups = 4
	for gid := uint64(1); gid <= groups; gid++ {
		c.startAll(gid, c.names...)
	}
	cut := ""
	peerState := func(n string, up bool) {
		for _, o := range c.names {
			if o != n {
				c.hosts[o].PeerState(n, up)
				c.hosts[n].PeerState(o, up)
			}
		}
	}
	heal := func() {
		c.net.heal()
		if cut != "" {
			peerState(cut, true)
			cut = ""
		}
	}
	var mu sync.Mutex
	acked := map[string]bool{}
	seq := 0
	faults := 0
	deadline := time.Now().Add(dur)
	for time.Now().Before(deadline) {
		switch r := rng.Intn(20); {
		case r == 0:
			heal()
			cut = c.names[rng.Intn(3)]
			c.net.isolate(cut, c.names...)
			if rng.Intn(2) == 0 { // the transport notices (or not yet)
				peerState(cut, false)
			}
			faults++
		case r < 3:
			heal()
		case r == 3:
			n := c.names[rng.Intn(3)]
			c.stop(n, rng.Intn(2) == 0)
			c.open(n)
			if cut != "" { // tell the new host of the cut (it may know already)
				for _, o := range c.names {
					if o != n && (n == cut || o == cut) {
						c.hosts[n].PeerState(o, false)
					}
				}
			}
			for gid := uint64(1); gid <= groups; gid++ {
				// The members, as the broker passes them at a restart:
				// the log is recovered if the host has one; a crash
				// right after the first start, before its first sync,
				// left none, and the member starts again.
				c.start(n, gid, c.names, false)
			}
			faults++
		default:
			for gid := uint64(1); gid <= groups; gid++ {
				for _, n := range c.names {
					g := c.groups[n][gid]
					if g.Status().Role != "leader" {
						continue
					}
					for i := 0; i < 1+rng.Intn(8); i++ {
						seq++
						d := fmt.Sprintf("enq:%d-%d", gid, seq)
						if rng.Intn(3) == 0 {
							d = fmt.Sprintf("del:%d", rng.Intn(seq)+1)
							d = fmt.Sprintf("%s-%d", d, seq) // unique too
						}
						g.Propose([]byte(d), func(_ uint64, err error) {
							if err == nil {
								mu.Lock()
								acked[d] = true
								mu.Unlock()
							}
						})
					}
				}
			}
		}
		time.Sleep(time.Duration(rng.Intn(15)) * time.Millisecond) // pacing of the schedule
	}
	heal()
	for gid := uint64(1); gid <= groups; gid++ {
		final := fmt.Sprintf("enq:final-%d", gid)
		waitFor(t, 15*time.Second, fmt.Sprintf("group %d to take a final entry", gid), func() bool {
			l := c.leader(gid)
			_, err := c.propose(l, gid, final)
			return err == nil
		})
		waitFor(t, 15*time.Second, fmt.Sprintf("group %d to converge", gid), func() bool {
			var h0 uint64
			for i, n := range c.names {
				sm := c.sms[n][gid]
				sm.mu.Lock()
				h, got := sm.hash, sm.datas[final]
				sm.mu.Unlock()
				if got == 0 {
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
	mu.Lock()
	defer mu.Unlock()
	for _, n := range c.names {
		for gid := uint64(1); gid <= groups; gid++ {
			sm := c.sms[n][gid]
			sm.mu.Lock()
			for d, k := range sm.datas {
				if k != 1 {
					t.Errorf("%s group %d: %q applied %d times", n, gid, d, k)
				}
			}
			for d := range acked {
				var g uint64
				if _, err := fmt.Sscanf(d, "enq:%d-", &g); err == nil && g == gid && sm.datas[d] != 1 {
					t.Errorf("%s group %d: acknowledged %q applied %d times", n, gid, d, sm.datas[d])
				}
			}
			sm.mu.Unlock()
		}
	}
	t.Logf("%d proposals, %d acknowledged, %d faults", seq, len(acked), faults)
}
