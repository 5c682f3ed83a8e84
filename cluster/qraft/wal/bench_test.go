package wal

import (
	"fmt"
	"testing"
	"time"
)

// issue 14: the hot path: a batch of small records appended and made
// durable with one fdatasync (RabbitMQ's Ra WAL pattern). Reports records
// per second and fdatasyncs per batch.
func BenchmarkAppendSync(b *testing.B) {
	type mode struct {
		name        string
		nosync, pre bool
	}
	for _, m := range []mode{{"fdatasync", false, false}, {"fdatasync+prealloc", false, true}, {"nosync", true, false}} {
		for _, batch := range []int{1, 16, 256} {
			for _, size := range []int{64, 1024} {
				name := fmt.Sprintf("%s/batch=%d/size=%d", m.name, batch, size)
				b.Run(name, func(b *testing.B) {
					w, err := Open(Options{Dir: b.TempDir(), NoSync: m.nosync, Preallocate: m.pre, Logger: quiet()})
					if err != nil {
						b.Fatal(err)
					}
					defer w.Close()
					if m.pre {
						for !w.spareReady() { // steady state: the head preallocated
							time.Sleep(time.Millisecond)
						}
					}
					recs := make([]Record, batch)
					data := make([]byte, size)
					for i := range recs {
						recs[i] = Record{Group: uint64(i % 100), Term: 7, Kind: 1, Data: data}
					}
					if _, err := w.Append(recs[:1]); err != nil {
						b.Fatal(err)
					}
					if err := w.Sync(); err != nil {
						b.Fatal(err)
					}
					syncs0 := w.Stats().Syncs
					b.SetBytes(int64(batch * size))
					b.ReportAllocs()
					b.ResetTimer()
					idx := uint64(0)
					for n := 0; n < b.N; n++ {
						for i := range recs {
							idx++
							recs[i].Index = idx
						}
						if _, err := w.Append(recs); err != nil {
							b.Fatal(err)
						}
						if err := w.Sync(); err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					st := w.Stats()
					b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "records/s")
					b.ReportMetric(float64(st.Syncs-syncs0)/float64(b.N), "syncs/batch")
				})
			}
		}
	}
}

// issue 14: Read of a record by position (pread, or the buffer).
func BenchmarkRead(b *testing.B) {
	w, err := Open(Options{Dir: b.TempDir(), NoSync: true, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	recs := make([]Record, 10000)
	for i := range recs {
		recs[i] = Record{Group: 1, Index: uint64(i), Data: make([]byte, 256)}
	}
	pos, err := w.Append(recs)
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		if _, err := w.Read(pos[n%len(pos)]); err != nil {
			b.Fatal(err)
		}
	}
}

// issue 14: Release of records (the refcount bookkeeping).
func BenchmarkRelease(b *testing.B) {
	w, err := Open(Options{Dir: b.TempDir(), NoSync: true, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	recs := make([]Record, 1000)
	for i := range recs {
		recs[i] = Record{Group: 1, Index: uint64(i), Data: make([]byte, 64)}
	}
	var all []Pos
	for len(all) < b.N {
		pos, err := w.Append(recs)
		if err != nil {
			b.Fatal(err)
		}
		all = append(all, pos...)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		w.Release(all[n])
	}
}

// issue 14: ReadMany of every 4th record of 10000 (a leader loading its
// messages' bodies), per record.
func BenchmarkReadMany(b *testing.B) {
	w, err := Open(Options{Dir: b.TempDir(), NoSync: true, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	recs := make([]Record, 10000)
	for i := range recs {
		recs[i] = Record{Group: 1, Index: uint64(i), Data: make([]byte, 256)}
	}
	pos, err := w.Append(recs)
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		b.Fatal(err)
	}
	var ps []Pos
	for i := 0; i < len(pos); i += 4 {
		ps = append(ps, pos[i])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n += len(ps) {
		if err := w.ReadMany(ps, func(int, Record) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

// issue 14: Compact of mostly-dead segments (one record in ten live),
// reported per segment freed.
func BenchmarkCompact(b *testing.B) {
	const seg = 1 << 20
	w, err := Open(Options{Dir: b.TempDir(), NoSync: true, SegmentSize: seg, CompactMaxBytes: 1 << 30, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	recs := make([]Record, 1000)
	for i := range recs {
		recs[i] = Record{Group: 1, Index: uint64(i), Data: make([]byte, 200)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	var freed, moved int64
	for n := 0; n < b.N; n += 4 {
		b.StopTimer()
		for written := int64(0); written < 4*seg; written += 1000 * 220 {
			pos, err := w.Append(recs)
			if err != nil {
				b.Fatal(err)
			}
			for i, p := range pos {
				if i%10 != 0 {
					w.Release(p)
				}
			}
		}
		b.StartTimer()
		st, err := w.Compact(func(old, new Pos, r Record) {})
		if err != nil {
			b.Fatal(err)
		}
		freed += st.FreedBytes
		moved += st.MovedBytes
	}
	b.ReportMetric(float64(freed)/b.Elapsed().Seconds()/1e6, "freedMB/s")
	b.ReportMetric(float64(moved)/b.Elapsed().Seconds()/1e6, "movedMB/s")
}
