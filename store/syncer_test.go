package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSyncerGroupsRequests holds the first fsync of a round on a gate, makes
// more requests meanwhile, and checks that the next round serves all of them
// with one fsync per log, and that they are then durable across a crash.
func TestSyncerGroupsRequests(t *testing.T) {
	mem := NewMemFS()
	ffs := &faultFS{FS: mem}
	l1 := mustOpen(t, "/q1", Options{FS: ffs})
	l2 := mustOpen(t, "/q2", Options{FS: ffs})
	gate, inSync := make(chan struct{}), make(chan struct{}, 1)
	ffs.mu.Lock()
	ffs.gate, ffs.inSync = gate, inSync
	ffs.mu.Unlock()

	s := NewSyncer(0)
	defer s.Close()
	results := make(chan error, 100)
	done := func(err error) { results <- err }
	var want1, want2 []rec
	want1 = append(want1, mustAppend(t, l1, 1, []byte("first")))
	if err := s.Request(l1, done); err != nil {
		t.Fatal(err)
	}
	<-inSync // round 1 is in its fsync
	ffs.mu.Lock()
	ffs.inSync = nil
	ffs.mu.Unlock()
	for i := range 10 {
		want1 = append(want1, mustAppend(t, l1, 1, fmt.Appendf(nil, "l1 %d", i)))
		if err := s.Request(l1, done); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		want2 = append(want2, mustAppend(t, l2, 2, fmt.Appendf(nil, "l2 %d", i)))
		if err := s.Request(l2, done); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-results:
		t.Fatalf("a request completed (%v) while its fsync was held", err)
	default:
	}
	close(gate) // release round 1 and let round 2 through
	for range 16 {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	if st.Requests != 16 || st.Rounds != 2 || st.Fsyncs != 3 {
		t.Fatalf("stats %+v, want 16 requests in 2 rounds with 3 fsyncs (1, then 1 per log)", st)
	}
	if got, want := st.RequestsPerFsync(), 16.0/3; got != want {
		t.Fatalf("RequestsPerFsync %v, want %v", got, want)
	}

	// Completed means durable: nothing is lost by a crash now.
	mem.Crash(rand.New(rand.NewPCG(1, 2)))
	for dir, want := range map[string][]rec{"/q1": want1, "/q2": want2} {
		l := mustOpen(t, dir, Options{FS: mem})
		checkRecords(t, scanAll(t, l), want)
		l.Close()
	}
}

func TestSyncerErrors(t *testing.T) {
	ffs := &faultFS{FS: NewMemFS()}
	l := mustOpen(t, "/q", Options{FS: ffs})
	s := NewSyncer(0)
	mustAppend(t, l, 1, []byte("x"))
	eio := errors.New("injected EIO")
	ffs.mu.Lock()
	ffs.failSync = eio
	ffs.mu.Unlock()
	if err := s.Wait(t.Context(), l); !errors.Is(err, eio) {
		t.Fatalf("Wait with a failing fsync: got %v, want the injected error", err)
	}
	if err := s.Wait(t.Context(), l); !errors.Is(err, eio) {
		t.Fatalf("Wait on a failed log: got %v, want the sticky error", err)
	}
	l.Close()
	if err := s.Wait(t.Context(), l); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait on a closed log: got %v, want ErrClosed", err)
	}

	// A request completes on Close of the Syncer; later ones are refused.
	l2 := mustOpen(t, "/q2", Options{FS: NewMemFS()})
	defer l2.Close()
	mustAppend(t, l2, 1, []byte("y"))
	var called atomic.Int32
	if err := s.Request(l2, func(err error) {
		if err != nil {
			t.Errorf("request completed with %v", err)
		}
		called.Add(1)
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if called.Load() != 1 {
		t.Fatalf("done called %d times by Close, want 1", called.Load())
	}
	s.Close() // idempotent
	if err := s.Request(l2, func(error) { t.Error("done called after Close") }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Request after Close: got %v, want ErrClosed", err)
	}
}

func TestSyncerWaitContext(t *testing.T) {
	ffs := &faultFS{FS: NewMemFS()}
	l := mustOpen(t, "/q", Options{FS: ffs})
	defer l.Close()
	gate := make(chan struct{})
	ffs.mu.Lock()
	ffs.gate = gate
	ffs.mu.Unlock()
	s := NewSyncer(0)
	defer s.Close()
	mustAppend(t, l, 1, []byte("x"))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if err := s.Wait(ctx, l); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait: got %v, want DeadlineExceeded", err)
	}
	close(gate)
}

// TestSyncerConcurrent: many goroutines on many logs append and wait; each
// completed wait must cover its record (checked after a crash).
func TestSyncerConcurrent(t *testing.T) {
	mem := NewMemFS()
	const logs, writers, perWriter = 4, 32, 50
	var ls [logs]*Log
	for i := range ls {
		ls[i] = mustOpen(t, fmt.Sprintf("/q%d", i), Options{FS: mem, SegmentSize: 4096})
	}
	s := NewSyncer(2)
	var (
		mu      sync.Mutex
		durable = map[string]bool{}
		wg      sync.WaitGroup
	)
	for w := range writers {
		wg.Go(func() {
			l := ls[w%logs]
			for i := range perWriter {
				payload := fmt.Appendf(nil, "%d/%d", w, i)
				if _, err := l.Append(1, payload); err != nil {
					t.Error(err)
					return
				}
				if err := s.Wait(t.Context(), l); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				durable[string(payload)] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	s.Close()
	st := s.Stats()
	t.Logf("stats %+v, %.1f requests per fsync", st, st.RequestsPerFsync())
	if st.Requests != writers*perWriter || st.Fsyncs > st.Requests {
		t.Fatalf("stats %+v, want %d requests and no more fsyncs than requests", st, writers*perWriter)
	}
	mem.Crash(rand.New(rand.NewPCG(3, 4)))
	for i := range ls {
		l := mustOpen(t, fmt.Sprintf("/q%d", i), Options{FS: mem})
		for _, r := range scanAll(t, l) {
			delete(durable, string(r.payload))
		}
		l.Close()
	}
	if len(durable) != 0 {
		t.Fatalf("%d records whose Wait returned nil were lost in a crash", len(durable))
	}
}

func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{16, 1024} {
		b.Run(fmt.Sprintf("payload=%dB", size), func(b *testing.B) {
			l := mustOpen(b, b.TempDir(), Options{})
			defer l.Close()
			payload := make([]byte, size)
			b.SetBytes(int64(recHeaderSize + size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.Append(1, payload); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkGroupCommit: writers each append a 16-byte record and wait for it
// to be durable through one Syncer, as publishers waiting for confirms do, on
// the real disk. It reports records/s and records per fsync.
func BenchmarkGroupCommit(b *testing.B) {
	for _, c := range []struct{ writers, logs int }{{1, 1}, {100, 1}, {100, 10}} {
		b.Run(fmt.Sprintf("writers=%d/logs=%d", c.writers, c.logs), func(b *testing.B) {
			dir := b.TempDir()
			ls := make([]*Log, c.logs)
			for i := range ls {
				ls[i] = mustOpen(b, fmt.Sprintf("%s/q%d", dir, i), Options{})
				defer ls[i].Close()
			}
			s := NewSyncer(0)
			defer s.Close()
			payload := make([]byte, 16)
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := range c.writers {
				wg.Go(func() {
					l := ls[w%c.logs]
					for next.Add(1) <= int64(b.N) {
						if _, err := l.Append(1, payload); err != nil {
							b.Error(err)
							return
						}
						if err := s.Wait(context.Background(), l); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			st := s.Stats()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(st.RequestsPerFsync(), "records/fsync")
		})
	}
}
