package qraft

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// issue 14: proposals per second through three hosts in one process
// (memNet), with up to 1024 proposals in flight, 100-byte entries.
func BenchmarkPropose(b *testing.B) {
	for _, groups := range []int{1, 100} {
		for _, sync := range []bool{false, true} {
			b.Run(fmt.Sprintf("groups=%d/fsync=%v", groups, sync), func(b *testing.B) {
				benchPropose(b, groups, !sync)
			})
		}
	}
}

func benchPropose(b *testing.B, groups int, noSync bool) {
	c := newTCluster(b, 3, func(cfg *Config) { cfg.NoSync = noSync; cfg.TickInterval = benchTick })
	gs := make([]*Group, groups)
	for i := range gs {
		gid := uint64(i + 1)
		c.startAll(gid, c.names...)
	}
	for i := range gs {
		gid := uint64(i + 1)
		gs[i] = c.groups[c.leader(gid)][gid]
	}
	data := make([]byte, 100)
	sem := make(chan struct{}, 1024)
	var wg sync.WaitGroup
	var failed atomic.Uint64
	syncs0 := uint64(0)
	for _, n := range c.names {
		syncs0 += c.hosts[n].Stats().Syncs
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sem <- struct{}{}
		wg.Add(1)
		gs[i%groups].Propose(data, func(_ uint64, err error) {
			if err != nil {
				failed.Add(1) // a leader change under load: outcome unknown
			}
			<-sem
			wg.Done()
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(failed.Load())/float64(b.N), "failed/op")
	var syncs uint64
	for _, n := range c.names {
		syncs += c.hosts[n].Stats().Syncs
	}
	b.ReportMetric(float64(syncs-syncs0)/float64(b.N), "fsyncs/op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "proposals/s")
}

var benchTick = 100 * time.Millisecond
