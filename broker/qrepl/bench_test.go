package qrepl

import (
	"runtime"
	"testing"
)

// Benchmarks of issue 14's replicated state: Apply of enqueue and remove
// batches as a leader proposes them, Snapshot/Restore/Live of 1,000,000
// live messages, and the codec.

const benchTime = 1_700_000_000_000

func encEnqueue(seq uint64, body []byte) []byte {
	return Encode(Enqueue{Pub: PubID{Publisher: 1 << 40, Seq: seq}, Time: benchTime + int64(seq/1000),
		Persistent: true, Size: uint32(len(body)), Body: body})
}

// BenchmarkApplyEnqueue: one op is one Enqueue entry applied (decode
// included; the body is 1 KiB, not copied) and, in batches of 4096, its
// Remove (a steady queue: see BenchmarkApplyRemoveHead for that part).
func BenchmarkApplyEnqueue(b *testing.B) {
	body := make([]byte, 1024)
	const batch = 4096
	ents := make([][]byte, batch)
	ids := make([]uint64, 0, batch)
	s := New()
	b.ReportAllocs()
	b.ResetTimer()
	idx, seq := uint64(0), uint64(0)
	for i := 0; i < b.N; i++ {
		if i%batch == 0 {
			b.StopTimer()
			if len(ids) > 0 {
				idx++
				s.Apply(idx, Encode(Remove{IDs: ids}))
				ids = ids[:0]
			}
			for j := range ents {
				seq++
				ents[j] = Enqueue{Pub: PubID{Publisher: 1 << 40, Seq: seq}, Time: benchTime + int64(seq/1000),
					Persistent: true, Size: uint32(len(body)), Body: body}.AppendTo(ents[j][:0])
			}
			b.StartTimer()
		}
		idx++
		if _, err := s.Apply(idx, ents[i%batch]); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, idx)
	}
}

// BenchmarkApplyRemoveHead: one op is one message acked, in Remove
// batches of 64 ids taken from near the head of a 100,000-message queue
// that is refilled (enqueues excluded from the timing where possible:
// they are measured above).
func BenchmarkApplyRemoveHead(b *testing.B) {
	benchRemove(b, 64, false)
}

// BenchmarkApplyRemoveScattered: as above, ids anywhere in the queue
// (tombstones compacted lazily).
func BenchmarkApplyRemoveScattered(b *testing.B) {
	benchRemove(b, 64, true)
}

func benchRemove(b *testing.B, batch int, scattered bool) {
	const n = 100_000
	s := New()
	idx := uint64(0)
	var live []uint64 // ids to remove, in removal order
	fill := func() {
		for s.Len() < n {
			idx++
			s.ApplyCommand(idx, Enqueue{Time: benchTime, Size: 100})
		}
		live = s.Live()
		for i := 0; i+1 < len(live); i += 2 {
			live[i], live[i+1] = live[i+1], live[i] // acks slightly out of order
		}
		if scattered {
			for i := range live {
				j := (i * 7919) % len(live) // a fixed shuffle
				live[i], live[j] = live[j], live[i]
			}
		}
		live = live[:n/2]
	}
	fill()
	ids := make([]uint64, batch)
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		if len(live) < batch {
			b.StopTimer()
			fill()
			b.StartTimer()
		}
		copy(ids, live[:batch])
		live = live[batch:]
		idx++
		if r, err := s.Apply(idx, Encode(Remove{IDs: ids})); err != nil || r.N != batch {
			b.Fatalf("%+v %v", r, err)
		}
	}
}

func million(b *testing.B) *State {
	s := New()
	for i := uint64(1); i <= 1_000_000; i++ {
		s.ApplyCommand(i, Enqueue{Pub: PubID{Publisher: 1 + i%3, Seq: i}, Time: benchTime + int64(i/100), Size: 100, Persistent: true})
	}
	// some returned to the back
	items := make([]ReturnItem, 0, 1000)
	for i := uint64(1); i <= 1000; i++ {
		items = append(items, ReturnItem{ID: i * 7, DeliveryCount: 1, Acquired: 1, Redelivered: true, Back: true})
	}
	s.ApplyCommand(1_000_001, Return{Items: items})
	return s
}

// BenchmarkSnapshot1M: one op is a snapshot of 1,000,000 live messages.
func BenchmarkSnapshot1M(b *testing.B) {
	s := million(b)
	buf := s.Snapshot()
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buf = s.AppendSnapshot(buf[:0])
	}
	b.ReportMetric(float64(len(buf)), "snapshot-bytes")
}

// BenchmarkRestore1M: one op is a restore of a 1,000,000-message snapshot.
func BenchmarkRestore1M(b *testing.B) {
	buf := million(b).Snapshot()
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Restore(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLive1M: one op is the live ids of 1,000,000 messages.
func BenchmarkLive1M(b *testing.B) {
	s := million(b)
	dst := s.Live()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dst = s.AppendLive(dst[:0])
	}
}

// BenchmarkEncodeEnqueue and BenchmarkDecodeEnqueue: the codec of the
// hot command (1 KiB body).
func BenchmarkEncodeEnqueue(b *testing.B) {
	e := Enqueue{Pub: PubID{Publisher: 1 << 40, Seq: 12345}, Time: benchTime, Persistent: true, Size: 1024, Body: make([]byte, 1024)}
	buf := make([]byte, 0, 2048)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = e.AppendTo(buf[:0])
	}
}

func BenchmarkDecodeEnqueue(b *testing.B) {
	data := encEnqueue(12345, make([]byte, 1024))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := DecodeEnqueue(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemory1M reports the heap bytes per live message.
func BenchmarkMemory1M(b *testing.B) {
	for i := 0; i < b.N; i++ {
		per, _ := heapPerMessage(1_000_000)
		b.ReportMetric(per, "heap-bytes/msg")
	}
}

// BenchmarkMemory1MAllReturned reports the heap bytes per live message
// when every one of 1,000,000 was returned to the back once (each in the
// moved map: the worst case).
func BenchmarkMemory1MAllReturned(b *testing.B) {
	for i := 0; i < b.N; i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := New()
		const n = 1_000_000
		for id := uint64(1); id <= n; id++ {
			s.ApplyCommand(id, Enqueue{Size: 100, Time: benchTime})
		}
		items := make([]ReturnItem, 0, 1000)
		idx := uint64(n)
		for id := uint64(1); id <= n; id++ {
			items = append(items, ReturnItem{ID: id, Back: true, Redelivered: true, Acquired: 1})
			if len(items) == cap(items) {
				idx++
				s.ApplyCommand(idx, Return{Items: items})
				items = items[:0]
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if s.Len() != n {
			b.Fatal(s.Len())
		}
		runtime.KeepAlive(s)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-bytes/msg")
	}
}
