package store

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// enospcFS injects "no space left on device" into a file system: writes
// (half of the bytes written, then the error, as a full disk does), fsyncs
// and file creation fail while the corresponding switch is on.
type enospcFS struct {
	FS
	mu                        sync.Mutex
	write, sync, create, trnc bool
}

func (f *enospcFS) set(write, sync, create bool) {
	f.mu.Lock()
	f.write, f.sync, f.create = write, sync, create
	f.mu.Unlock()
}

func (f *enospcFS) fails(which *bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return *which
}

var errNoSpace = &fs.PathError{Op: "write", Path: "segment", Err: syscall.ENOSPC}

func (f *enospcFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if flag&os.O_CREATE != 0 && f.fails(&f.create) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.ENOSPC}
	}
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &enospcFile{File: file, fs: f}, nil
}

type enospcFile struct {
	File
	fs *enospcFS
}

func (f *enospcFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fs.fails(&f.fs.write) {
		n, _ := f.File.WriteAt(p[:len(p)/2], off)
		return n, errNoSpace
	}
	return f.File.WriteAt(p, off)
}

func (f *enospcFile) Sync() error {
	if f.fs.fails(&f.fs.sync) {
		return &fs.PathError{Op: "fdatasync", Path: "segment", Err: syscall.ENOSPC}
	}
	return f.File.Sync()
}

// TestWriteENOSPCRepairs: issue 11 item 10, at the log. A write that fails
// with ENOSPC fails the log: appends and syncs are refused while the disk
// is full, and nothing is reported durable. Once writes succeed again the
// log repairs itself on the next call (the partial write cut, the buffer
// written again) and continues where it was: nothing appended before the
// failure is lost, every position stays valid, and it all survives a
// reopen and a crash once synced.
func TestWriteENOSPCRepairs(t *testing.T) {
	mem := NewMemFS()
	efs := &enospcFS{FS: mem}
	opts := Options{FS: efs, SegmentSize: 4096, Logger: testLogger(t), RetryInterval: -1}
	l := mustOpen(t, "/q", opts)
	var want []rec
	for i := range 10 {
		want = append(want, mustAppend(t, l, 1, fmt.Appendf(nil, "synced %d", i)))
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		want = append(want, mustAppend(t, l, 2, fmt.Appendf(nil, "buffered %d", i)))
	}
	efs.set(true, false, false)
	if err := l.Sync(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Sync on a full disk: %v, want ENOSPC", err)
	}
	for range 3 { // still full: refused, and retried each time
		if _, err := l.Append(3, []byte("refused")); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("Append on a full disk: %v, want ENOSPC", err)
		}
		if err := l.Sync(); err == nil {
			t.Fatal("Sync on a full disk returned nil")
		}
	}
	efs.set(false, false, false)
	// Space is back: appends continue, across rolls.
	for i := range 100 {
		want = append(want, mustAppend(t, l, 4, fmt.Appendf(nil, "after %d %s", i, bytes.Repeat([]byte("x"), 100))))
	}
	if err := l.Sync(); err != nil {
		t.Fatalf("Sync once space is back: %v", err)
	}
	checkRecords(t, scanAll(t, l), want)
	checkReadAt(t, l, want)
	mem.Crash(rand.New(rand.NewPCG(1, 2)))
	l.Close()
	l = mustOpen(t, "/q", opts)
	defer l.Close()
	checkRecords(t, scanAll(t, l), want)
}

// TestSyncENOSPCRepairs: issue 11 item 10, an fsync that fails. The
// kernel may have marked the pages clean without writing them, so the
// repair reads back what was written since the last good fsync, verifies
// it, writes it again and syncs: nothing is lost, positions stay valid, and
// the records appended before the failure are durable once a later Sync
// returns nil (they survive a crash).
func TestSyncENOSPCRepairs(t *testing.T) {
	mem := NewMemFS()
	efs := &enospcFS{FS: mem}
	opts := Options{FS: efs, Logger: testLogger(t), RetryInterval: -1}
	l := mustOpen(t, "/q", opts)
	s := NewSyncer(0)
	defer s.Close()
	var want []rec
	for i := range 10 {
		want = append(want, mustAppend(t, l, 1, fmt.Appendf(nil, "synced %d", i)))
	}
	if err := s.Wait(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	want = append(want, mustAppend(t, l, 2, []byte("written, fsync failed")))
	efs.set(false, true, false)
	if err := s.Wait(t.Context(), l); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("request on a failing fsync: %v, want ENOSPC", err)
	}
	if _, err := l.Append(3, []byte("refused")); err == nil {
		t.Fatal("Append accepted while fsync fails")
	}
	efs.set(false, false, false)
	if err := s.Wait(t.Context(), l); err != nil {
		t.Fatalf("request once fsync works again: %v", err)
	}
	want = append(want, mustAppend(t, l, 3, []byte("after the repair")))
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	checkRecords(t, scanAll(t, l), want)
	checkReadAt(t, l, want)
	mem.Crash(rand.New(rand.NewPCG(3, 4)))
	l.Close()
	l = mustOpen(t, "/q", opts)
	defer l.Close()
	checkRecords(t, scanAll(t, l), want)
}

// TestSyncFailureWithDroppedPages: if the pages of a failed fsync are gone
// (evicted, the disk holding older bytes), records that were appended
// cannot be written again: the log stays failed (it never reports them
// durable) until it is reopened, which recovers what is on disk.
func TestSyncFailureWithDroppedPages(t *testing.T) {
	mem := NewMemFS()
	efs := &enospcFS{FS: mem}
	opts := Options{FS: efs, Logger: testLogger(t), RetryInterval: -1}
	l := mustOpen(t, "/q", opts)
	good := mustAppend(t, l, 1, []byte("synced"))
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, 2, []byte("its pages will be dropped"))
	efs.set(false, true, false)
	if err := l.Sync(); err == nil {
		t.Fatal("Sync returned nil")
	}
	// The kernel dropped the pages: the file reads as what is on disk.
	path := "/q/" + segName(0)
	data, _ := mem.ReadFile(path)
	clear(data[good.pos.Off+recHeaderSize+uint32(len(good.payload)):])
	mem.WriteFile(path, data)
	efs.set(false, false, false)
	for range 3 {
		if err := l.Sync(); err == nil {
			t.Fatal("Sync returned nil although an appended record is gone")
		}
		if _, err := l.Append(3, nil); err == nil {
			t.Fatal("Append accepted by a log that lost records")
		}
	}
	l.Close()
	l = mustOpen(t, "/q", opts)
	defer l.Close()
	checkRecords(t, scanAll(t, l), []rec{good})
	mustAppend(t, l, 4, []byte("continues"))
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestCloseRepairs: a log that failed on a full disk and saw no call since
// the space came back writes its records at Close.
func TestCloseRepairs(t *testing.T) {
	mem := NewMemFS()
	efs := &enospcFS{FS: mem}
	opts := Options{FS: efs, RetryInterval: time.Hour}
	l := mustOpen(t, "/q", opts)
	want := []rec{mustAppend(t, l, 1, []byte("a")), mustAppend(t, l, 1, []byte("b"))}
	efs.set(true, false, false)
	if err := l.Sync(); err == nil {
		t.Fatal("Sync on a full disk returned nil")
	}
	efs.set(false, false, false)
	if err := l.Close(); err != nil {
		t.Fatalf("Close once space is back: %v", err)
	}
	mem.Crash(rand.New(rand.NewPCG(5, 6)))
	l = mustOpen(t, "/q", opts)
	defer l.Close()
	checkRecords(t, scanAll(t, l), want)
}

// TestRollENOSPCRepairs: a roll whose new segment cannot be created (no
// space for the file) fails the log until the file can be created.
func TestRollENOSPCRepairs(t *testing.T) {
	efs := &enospcFS{FS: NewMemFS()}
	opts := Options{FS: efs, SegmentSize: 512, Logger: testLogger(t), RetryInterval: -1}
	l := mustOpen(t, "/q", opts)
	defer l.Close()
	var want []rec
	efs.set(false, false, true)
	var refused int
	for i := range 20 {
		r, err := l.Append(1, bytes.Repeat([]byte{byte(i)}, 91))
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Append: %v", err)
			}
			refused++
			continue
		}
		want = append(want, rec{r, 1, bytes.Repeat([]byte{byte(i)}, 91)})
	}
	if refused == 0 {
		t.Fatal("no append needed a new segment")
	}
	efs.set(false, false, false)
	want = append(want, mustAppend(t, l, 2, []byte("after")))
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	checkRecords(t, scanAll(t, l), want)
}

// TestFaultsAndCrashes runs random appends, syncs and rolls through a file
// system whose writes, fsyncs and file creations fail with ENOSPC at
// random for a while, then crashes it, many times. Invariants: every record
// whose Sync returned nil survives the crash; nothing else is invented;
// the log always works again once the faults stop.
func TestFaultsAndCrashes(t *testing.T) {
	seed := testSeed(t)
	iters := iterations(200, 40)
	for iter := range iters {
		rng := rand.New(rand.NewPCG(seed, uint64(iter)))
		mem := NewMemFS()
		efs := &enospcFS{FS: mem}
		opts := Options{FS: efs, SegmentSize: int64(256 + rng.IntN(2048)), RetryInterval: -1}
		byPos := map[Pos]rec{}
		var durable []rec
		for round := range 3 {
			efs.set(false, false, false)
			l, err := OpenLog("/q", opts)
			if err != nil {
				t.Fatalf("seed %d iter %d round %d: OpenLog: %v", seed, iter, round, err)
			}
			got := scanAll(t, l)
			gotBy := map[Pos]bool{}
			for _, g := range got {
				w, ok := byPos[g.pos]
				if !ok || w.typ != g.typ || !bytes.Equal(w.payload, g.payload) {
					t.Fatalf("seed %d iter %d round %d: recovered %v, which was not appended there", seed, iter, round, g)
				}
				gotBy[g.pos] = true
			}
			for _, d := range durable {
				if !gotBy[d.pos] {
					t.Fatalf("seed %d iter %d round %d: synced record %v lost", seed, iter, round, d)
				}
			}
			durable = got
			var pending []rec
			for range rng.IntN(200) {
				switch op := rng.IntN(100); {
				case op < 8:
					efs.set(rng.IntN(2) == 0, rng.IntN(2) == 0, rng.IntN(2) == 0)
				case op < 20:
					efs.set(false, false, false)
				case op < 70:
					p := randPayload(rng, 200)
					if pos, err := l.Append(5, p); err == nil {
						r := rec{pos, 5, p}
						byPos[pos] = r
						pending = append(pending, r)
					}
				case op < 95:
					if err := l.Sync(); err == nil {
						durable = append(durable, pending...)
						pending = nil
					}
				default:
					l.Roll()
				}
			}
			efs.set(false, false, false)
			// Once the faults are over the log works again, and a Sync
			// covers every record appended before it, also those appended
			// before a failure.
			r := rec{typ: 6, payload: []byte("the faults are over")}
			if r.pos, err = l.Append(r.typ, r.payload); err != nil {
				t.Fatalf("seed %d iter %d: Append after the faults: %v", seed, iter, err)
			}
			byPos[r.pos] = r
			if err := l.Sync(); err != nil {
				t.Fatalf("seed %d iter %d: Sync after the faults: %v", seed, iter, err)
			}
			durable = append(durable, append(pending, r)...)
			mem.Crash(rng)
			l.Close()
		}
	}
}
