package store

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var (
	seedFlag  = flag.Uint64("store.seed", 0, "seed for the randomized log tests (0: from the clock)")
	itersFlag = flag.Int("store.iters", 0, "iterations of the randomized log tests (0: default)")
)

// testSeed returns the seed for a randomized test and logs it, so that a
// failure can be replayed with -store.seed.
func testSeed(t testing.TB) uint64 {
	t.Helper()
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -store.seed=%d)", seed, seed)
	return seed
}

func iterations(def, short int) int {
	if *itersFlag > 0 {
		return *itersFlag
	}
	if testing.Short() {
		return short
	}
	return def
}

// testLogger sends the log's reports to the test log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tbWriter struct{ t testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

type rec struct {
	pos     Pos
	typ     byte
	payload []byte
}

func (r rec) String() string { return fmt.Sprintf("%v type %d len %d", r.pos, r.typ, len(r.payload)) }

func mustOpen(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	l, err := OpenLog(dir, opts)
	if err != nil {
		t.Fatalf("OpenLog(%s): %v", dir, err)
	}
	return l
}

func mustAppend(t testing.TB, l *Log, typ byte, payload []byte) rec {
	t.Helper()
	p, err := l.Append(typ, payload)
	if err != nil {
		t.Fatalf("Append(%d, %d bytes): %v", typ, len(payload), err)
	}
	return rec{p, typ, payload}
}

func scanAll(t testing.TB, l *Log) []rec {
	t.Helper()
	var got []rec
	if err := l.Scan(func(p Pos, typ byte, payload []byte) error {
		got = append(got, rec{p, typ, bytes.Clone(payload)})
		return nil
	}); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return got
}

// checkRecords fails unless got equals want record for record.
func checkRecords(t testing.TB, got, want []rec) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].pos != want[i].pos || got[i].typ != want[i].typ || !bytes.Equal(got[i].payload, want[i].payload) {
			t.Fatalf("record %d: got %v, want %v", i, got[i], want[i])
		}
	}
}

func checkReadAt(t testing.TB, l *Log, want []rec) {
	t.Helper()
	for _, w := range want {
		typ, payload, err := l.ReadAt(w.pos)
		if err != nil {
			t.Fatalf("ReadAt(%v): %v", w.pos, err)
		}
		if typ != w.typ || !bytes.Equal(payload, w.payload) {
			t.Fatalf("ReadAt(%v): got type %d len %d, want %v", w.pos, typ, len(payload), w)
		}
	}
}

func randPayload(rng *rand.Rand, max int) []byte {
	b := make([]byte, rng.IntN(max+1))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	for _, name := range []string{"os", "mem"} {
		t.Run(name, func(t *testing.T) {
			opts := Options{Logger: testLogger(t)}
			dir := t.TempDir()
			if name == "mem" {
				opts.FS = NewMemFS()
			}
			l := mustOpen(t, dir, opts)
			var want []rec
			for i, size := range []int{0, 1, 16, 1000, writeBufSize - recHeaderSize, writeBufSize, 3 * writeBufSize, 5} {
				want = append(want, mustAppend(t, l, byte(i), bytes.Repeat([]byte{byte(i + 1)}, size)))
			}
			checkReadAt(t, l, want) // from the buffer and the file, before any Sync
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			checkRecords(t, scanAll(t, l), want)
			checkReadAt(t, l, want)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if _, err := l.Append(1, nil); !errors.Is(err, ErrClosed) {
				t.Fatalf("Append after Close: got %v, want ErrClosed", err)
			}
			l = mustOpen(t, dir, opts)
			defer l.Close()
			checkRecords(t, scanAll(t, l), want)
			checkReadAt(t, l, want)
			more := mustAppend(t, l, 9, []byte("after reopen"))
			if !want[len(want)-1].pos.Less(more.pos) {
				t.Fatalf("position after reopen %v not after %v", more.pos, want[len(want)-1].pos)
			}
			checkRecords(t, scanAll(t, l), append(want, more))
		})
	}
}

func TestSegmentRoll(t *testing.T) {
	fs := NewMemFS()
	const segSize = 1024
	l := mustOpen(t, "/q", Options{FS: fs, SegmentSize: segSize})
	var want []rec
	for i := range 100 {
		want = append(want, mustAppend(t, l, 1, bytes.Repeat([]byte{byte(i)}, 100)))
	}
	big := mustAppend(t, l, 2, make([]byte, 3*segSize)) // larger than a segment: one of its own
	want = append(want, big)
	want = append(want, mustAppend(t, l, 3, []byte("x")))
	if big.pos.Off != segHeaderSize {
		t.Fatalf("oversized record at %v, want it at the start of its own segment", big.pos)
	}
	if want[len(want)-1].pos.Seg != big.pos.Seg+1 {
		t.Fatalf("record after the oversized one in segment %d, want %d", want[len(want)-1].pos.Seg, big.pos.Seg+1)
	}
	segs := l.Segments()
	if len(segs) < 10 {
		t.Fatalf("got %d segments, want at least 10", len(segs))
	}
	for i, s := range segs {
		if s != uint32(i) {
			t.Fatalf("segments %v, want 0..%d", segs, len(segs)-1)
		}
	}
	// 100-byte payloads: 9 records of 109 bytes fit after the 8-byte header.
	for i, r := range want[:100] {
		if r.pos.Seg != uint32(i/9) {
			t.Fatalf("record %d in segment %d, want %d", i, r.pos.Seg, i/9)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	names, _ := fs.ReadDir("/q")
	for _, n := range names {
		data, _ := fs.ReadFile(filepath.Join("/q", n))
		if num, _ := parseSegName(n); len(data) > segSize && num != big.pos.Seg {
			t.Errorf("%s has %d bytes, more than the segment size %d", n, len(data), segSize)
		}
	}
	l = mustOpen(t, "/q", Options{FS: fs, SegmentSize: segSize})
	defer l.Close()
	checkRecords(t, scanAll(t, l), want)
	checkReadAt(t, l, want)
}

func TestScanFrom(t *testing.T) {
	l := mustOpen(t, "/q", Options{FS: NewMemFS(), SegmentSize: 512})
	defer l.Close()
	var want []rec
	for i := range 50 {
		want = append(want, mustAppend(t, l, byte(i), bytes.Repeat([]byte{'a'}, i*3)))
	}
	for _, i := range []int{0, 1, 17, 49} {
		var got []rec
		if err := l.ScanFrom(want[i].pos, func(p Pos, typ byte, payload []byte) error {
			got = append(got, rec{p, typ, bytes.Clone(payload)})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		checkRecords(t, got, want[i:])
	}
	// A segment number alone starts at that segment's first record.
	seg := want[30].pos.Seg
	first := 0
	for want[first].pos.Seg < seg {
		first++
	}
	var n int
	stop := errors.New("stop")
	err := l.ScanFrom(Pos{Seg: seg}, func(p Pos, typ byte, payload []byte) error {
		if p != want[first+n].pos {
			t.Fatalf("ScanFrom(segment %d) record %d at %v, want %v", seg, n, p, want[first+n].pos)
		}
		n++
		if n == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 3 {
		t.Fatalf("got err %v after %d records, want the callback's error after 3", err, n)
	}
}

func TestReadAtBadPositions(t *testing.T) {
	l := mustOpen(t, "/q", Options{FS: NewMemFS()})
	defer l.Close()
	r := mustAppend(t, l, 1, []byte("hello, world"))
	for _, p := range []Pos{{}, {Seg: 0, Off: 3}, {Seg: 1, Off: segHeaderSize}, {Seg: 0, Off: r.pos.Off + 100}} {
		if _, _, err := l.ReadAt(p); !errors.Is(err, ErrNotFound) {
			t.Errorf("ReadAt(%v): got %v, want ErrNotFound", p, err)
		}
	}
	// Inside a record: its bytes are no header with a valid checksum.
	if _, _, err := l.ReadAt(Pos{Seg: 0, Off: r.pos.Off + 2}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ReadAt(inside a record): got %v, want ErrCorrupt", err)
	}
	if _, err := l.Append(1, make([]byte, MaxPayload+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Append(MaxPayload+1): got %v, want ErrTooLarge", err)
	}
}

func TestRemoveSegmentsBefore(t *testing.T) {
	fs := NewMemFS()
	opts := Options{FS: fs, SegmentSize: 512}
	l := mustOpen(t, "/q", opts)
	var want []rec
	for i := range 60 {
		want = append(want, mustAppend(t, l, 1, bytes.Repeat([]byte{byte(i)}, 50)))
	}
	segs := l.Segments()
	if len(segs) < 6 {
		t.Fatalf("got %d segments, want at least 6", len(segs))
	}
	sizeBefore := l.Size()
	cut := segs[3]
	if err := l.RemoveSegmentsBefore(cut); err != nil {
		t.Fatal(err)
	}
	if l.Size() >= sizeBefore {
		t.Errorf("Size %d after removal, want less than %d", l.Size(), sizeBefore)
	}
	var live []rec
	for _, r := range want {
		if r.pos.Seg >= cut {
			live = append(live, r)
		} else if _, _, err := l.ReadAt(r.pos); !errors.Is(err, ErrNotFound) {
			t.Fatalf("ReadAt(%v) in a removed segment: got %v, want ErrNotFound", r.pos, err)
		}
	}
	checkRecords(t, scanAll(t, l), live)
	names, _ := fs.ReadDir("/q")
	if len(names) != len(segs)-3 {
		t.Fatalf("files after removal: %v", names)
	}

	// The active segment is never removed; Roll makes everything removable.
	active := segs[len(segs)-1]
	if err := l.RemoveSegmentsBefore(active + 10); err != nil {
		t.Fatal(err)
	}
	if got := l.Segments(); len(got) != 1 || got[0] != active {
		t.Fatalf("segments %v, want only the active %d", got, active)
	}
	if err := l.Roll(); err != nil {
		t.Fatal(err)
	}
	if err := l.Roll(); err != nil { // no-op on an empty segment
		t.Fatal(err)
	}
	if err := l.RemoveSegmentsBefore(active + 1); err != nil {
		t.Fatal(err)
	}
	if got := scanAll(t, l); len(got) != 0 {
		t.Fatalf("after Roll and removal, Scan returned %d records", len(got))
	}
	r := mustAppend(t, l, 7, []byte("new"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, "/q", opts)
	defer l.Close()
	checkRecords(t, scanAll(t, l), []rec{r})
	if got := l.Segments(); got[0] != active+1 {
		t.Fatalf("segments after reopen %v, want to start at %d", got, active+1)
	}
}

// faultFS fails File.Sync and WriteAt on demand.
type faultFS struct {
	FS
	mu        sync.Mutex
	failSync  error
	failWrite error
	syncs     int
	gate      chan struct{} // if set, Sync waits for a value from it
	inSync    chan struct{} // if set, Sync signals it on entry
}

func (f *faultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f}, nil
}

type faultFile struct {
	File
	fs *faultFS
}

func (f *faultFile) Sync() error {
	f.fs.mu.Lock()
	gate, in := f.fs.gate, f.fs.inSync
	f.fs.mu.Unlock()
	if in != nil {
		in <- struct{}{}
	}
	if gate != nil {
		<-gate
	}
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.fs.syncs++
	if f.fs.failSync != nil {
		return f.fs.failSync
	}
	return f.File.Sync()
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	err := f.fs.failWrite
	f.fs.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func TestFailedSyncFailsTheLog(t *testing.T) {
	mem := NewMemFS()
	ffs := &faultFS{FS: mem}
	// No repair within the test (see log_fault_test.go for repairs).
	l := mustOpen(t, "/q", Options{FS: ffs, Logger: testLogger(t), RetryInterval: time.Hour})
	good := mustAppend(t, l, 1, []byte("synced"))
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, 1, []byte("lost"))
	eio := errors.New("injected EIO")
	ffs.mu.Lock()
	ffs.failSync = eio
	ffs.mu.Unlock()
	if err := l.Sync(); !errors.Is(err, eio) {
		t.Fatalf("Sync: got %v, want the injected error", err)
	}
	ffs.mu.Lock()
	ffs.failSync = nil
	ffs.mu.Unlock()
	if _, err := l.Append(1, []byte("more")); !errors.Is(err, eio) {
		t.Fatalf("Append after a failed Sync: got %v, want the sticky error", err)
	}
	if err := l.Sync(); !errors.Is(err, eio) {
		t.Fatalf("Sync after a failed Sync: got %v, want the sticky error", err)
	}
	l.Close()
	l = mustOpen(t, "/q", Options{FS: ffs})
	defer l.Close()
	got := scanAll(t, l)
	if len(got) == 0 || got[0].pos != good.pos {
		t.Fatalf("after reopening: got %v, want the synced record first", got)
	}
	mustAppend(t, l, 1, []byte("continues"))
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
}

func TestFailedWriteFailsTheLog(t *testing.T) {
	ffs := &faultFS{FS: NewMemFS()}
	l := mustOpen(t, "/q", Options{FS: ffs, RetryInterval: time.Hour})
	defer l.Close()
	mustAppend(t, l, 1, []byte("a"))
	eio := errors.New("injected ENOSPC")
	ffs.mu.Lock()
	ffs.failWrite = eio
	ffs.mu.Unlock()
	if err := l.Sync(); !errors.Is(err, eio) {
		t.Fatalf("Sync: got %v, want the injected error", err)
	}
	if _, err := l.Append(1, nil); !errors.Is(err, eio) {
		t.Fatalf("Append: got %v, want the sticky error", err)
	}
}

func TestIgnoresOtherFiles(t *testing.T) {
	fs := NewMemFS()
	fs.MkdirAll("/q", 0o755)
	for _, n := range []string{"notes.txt", "12.seg", "000000000000000x.seg", "99999999999999999999.seg"} {
		f, _ := fs.OpenFile("/q/"+n, os.O_CREATE|os.O_RDWR, 0o644)
		f.WriteAt([]byte("garbage"), 0)
		f.Close()
	}
	l := mustOpen(t, "/q", Options{FS: fs})
	defer l.Close()
	if got := l.Segments(); len(got) != 1 || got[0] != 0 {
		t.Fatalf("segments %v, want [0]", got)
	}
}

// TestConcurrent runs appenders that wait for their records through a Syncer,
// readers and scanners at the same time (run it with -race). Every record
// must be readable once its Append returned, each writer's records must keep
// their order, and the log must hold exactly the appended records.
func TestConcurrent(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 64 << 10}
	l := mustOpen(t, dir, opts)
	s := NewSyncer(0)
	defer s.Close()
	const writers, perWriter = 16, 300
	var (
		mu    sync.Mutex
		all   = map[Pos]rec{}
		wg    sync.WaitGroup
		errCh = make(chan error, writers+4)
	)
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			var last Pos
			for i := range perWriter {
				payload := append(fmt.Appendf(nil, "%d/%d/", w, i), randPayload(rng, 200)...)
				p, err := l.Append(byte(w), payload)
				if err != nil {
					errCh <- err
					return
				}
				if !last.Less(p) {
					errCh <- fmt.Errorf("writer %d: position %v not after %v", w, p, last)
					return
				}
				last = p
				mu.Lock()
				all[p] = rec{p, byte(w), payload}
				mu.Unlock()
				typ, got, err := l.ReadAt(p)
				if err != nil || typ != byte(w) || !bytes.Equal(got, payload) {
					errCh <- fmt.Errorf("ReadAt(%v) right after Append: type %d, %d bytes, %v", p, typ, len(got), err)
					return
				}
				if i%10 == 0 {
					if err := s.Wait(t.Context(), l); err != nil {
						errCh <- err
						return
					}
				}
			}
		})
	}
	done := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() { // scanner
		for {
			select {
			case <-done:
				return
			default:
			}
			var prev Pos
			if err := l.Scan(func(p Pos, typ byte, payload []byte) error {
				if !prev.Less(p) {
					return fmt.Errorf("Scan: %v after %v", p, prev)
				}
				prev = p
				return nil
			}); err != nil {
				errCh <- err
				return
			}
		}
	})
	bg.Go(func() { // plain Sync calls alongside the Syncer
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := l.Sync(); err != nil {
				errCh <- err
				return
			}
		}
	})
	wg.Wait()
	close(done)
	bg.Wait()
	close(errCh)
	for err := range errCh {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, opts)
	defer l.Close()
	got := scanAll(t, l)
	if len(got) != writers*perWriter {
		t.Fatalf("got %d records after reopen, want %d", len(got), writers*perWriter)
	}
	next := make([]int, writers)
	for _, r := range got {
		w := all[r.pos]
		if w.pos != r.pos || w.typ != r.typ || !bytes.Equal(w.payload, r.payload) {
			t.Fatalf("record %v differs from the one appended", r)
		}
		var gw, gi int
		fmt.Sscanf(string(r.payload), "%d/%d/", &gw, &gi)
		if gi != next[gw] {
			t.Fatalf("writer %d: record %d came before record %d", gw, gi, next[gw])
		}
		next[gw]++
	}
	t.Logf("syncer: %+v, %.1f requests per fsync", s.Stats(), s.Stats().RequestsPerFsync())
}

// TestNoSyncLogWorks: a NoSync log (paging) appends, syncs (without
// fsync), rolls, removes segments and reads its records back.
func TestNoSyncLogWorks(t *testing.T) {
	fs := NewMemFS()
	l, err := OpenLog("/p", Options{FS: fs, SegmentSize: MinSegmentSize, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	rec := make([]byte, 1000)
	for range 200 {
		if _, err := l.Append('M', rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	segs := l.Segments()
	if len(segs) < 2 {
		t.Fatalf("%d segments, want a roll", len(segs))
	}
	if err := l.RemoveSegmentsBefore(segs[len(segs)-1]); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := l.Scan(func(Pos, byte, []byte) error { n++; return nil }); err != nil || n == 0 {
		t.Fatalf("scan: %d records, %v", n, err)
	}
}
