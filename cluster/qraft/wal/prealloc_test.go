package wal

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func waitSpare(t testing.TB, w *WAL) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !w.spareReady() {
		if time.Now().After(deadline) {
			t.Fatal("spare segment never ready")
		}
		time.Sleep(time.Millisecond)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// issue 14: preallocated segments: the head moves to a zero-filled file
// once one is ready, sealed segments are cut to their frames, a reopen
// (clean or after a crash that left the zeros) finds every record and keeps
// the preallocation, and garbage in the zeros is cut like a torn tail.
func TestPreallocate(t *testing.T) {
	testPrealloc = true
	defer func() { testPrealloc = false }()
	const seg = 64 << 10
	base := t.TempDir()
	dir := filepath.Join(base, "w")
	w := open(t, dir, seg)
	waitSpare(t, w)
	pos := appendIDs(t, w, 0, 10) // first moves to the spare
	if pos[0].Seg != 2 {
		t.Fatalf("first append in segment %d, want 2 (the preallocated one)", pos[0].Seg)
	}
	if _, err := os.Stat(filepath.Join(dir, segName(1))); !os.IsNotExist(err) {
		t.Fatalf("empty first segment not deleted: %v", err)
	}
	head := filepath.Join(dir, segName(2))
	if n := fileSize(t, head); n != seg {
		t.Fatalf("head file %d bytes, want %d (preallocated)", n, seg)
	}
	for i := uint64(10); i < 2000; i += 50 {
		pos = append(pos, appendIDs(t, w, i, i+50)...)
		if err := w.Sync(); err != nil {
			t.Fatal(err)
		}
		waitSpare(t, w)
	}
	st := w.Stats()
	if st.Segments < 4 {
		t.Fatalf("segments %d", st.Segments)
	}
	headSeg := pos[len(pos)-1].Seg
	for _, f := range segFiles(t, dir) {
		n, _ := parseSegName(filepath.Base(f))
		if n == headSeg {
			if sz := fileSize(t, f); sz != seg {
				t.Fatalf("head %s is %d bytes, want %d", f, sz, seg)
			}
			continue
		}
		w.mu.Lock()
		want := w.segs[n].size
		w.mu.Unlock()
		if sz := fileSize(t, f); sz != want {
			t.Fatalf("sealed %s is %d bytes, its frames end at %d", f, sz, want)
		}
	}
	// A crash that leaves the files as they are (zeros after the frames).
	crashed := filepath.Join(base, "crashed")
	copyDir(t, dir, crashed)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, crashed} {
		w = open(t, d, seg)
		got := replayAll(t, w)
		if len(got) != len(pos) {
			t.Fatalf("%s: replayed %d, want %d", d, len(got), len(pos))
		}
		if sz := fileSize(t, filepath.Join(d, segName(headSeg))); sz != seg {
			t.Fatalf("%s: head cut to %d after reopen", d, sz)
		}
		more := appendIDs(t, w, 5000, 5010)
		if more[0].Seg != headSeg {
			t.Fatalf("%s: appends went to %v, want the preallocated head %d", d, more[0], headSeg)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		w = open(t, d, seg)
		if got := replayAll(t, w); len(got) != len(pos)+10 {
			t.Fatalf("%s: replayed %d after appending, want %d", d, len(got), len(pos)+10)
		}
		w.Close()
	}
	// Garbage in the zeros: cut like a torn tail.
	hf := filepath.Join(crashed, segName(headSeg))
	b, err := os.ReadFile(hf)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-100] = 7
	if err := os.WriteFile(hf, b, 0o644); err != nil {
		t.Fatal(err)
	}
	w = open(t, crashed, seg)
	defer w.Close()
	if got := replayAll(t, w); len(got) != len(pos)+10 {
		t.Fatalf("replayed %d with garbage after the frames, want %d", len(got), len(pos)+10)
	}
	if sz := fileSize(t, hf); sz >= seg {
		t.Fatalf("garbage tail not cut: %d bytes", sz)
	}
}

// issue 14: the random model test with preallocated segments (early rolls
// to the spare happen at random points).
func TestModelRandomPrealloc(t *testing.T) {
	testPrealloc = true
	defer func() { testPrealloc = false }()
	deadline := time.Now().Add(2 * time.Second)
	for seed := uint64(500); time.Now().Before(deadline); seed++ {
		modelRun(t, seed)
		if t.Failed() {
			t.Fatalf("seed %d failed", seed)
		}
	}
}

// issue 14: crash simulations with preallocation on.
func TestCrashPrealloc(t *testing.T) {
	testPrealloc = true
	defer func() { testPrealloc = false }()
	t.Run("truncate", TestCrashTruncateTail)
	t.Run("flip", TestCrashFlipByte)
	t.Run("crashfortest", TestCrashForTest)
	t.Run("compact", TestCompactMovesLiveRecord)
	t.Run("bothcopies", TestCompactCrashLeavesBoth)
	t.Run("concurrent", TestConcurrentReadAppend)
	// The spare ready before the first append: the log's first records
	// are in segment 2, not 1.
	testSpareFirst = true
	defer func() { testSpareFirst = false }()
	t.Run("spare-first/truncate", TestCrashTruncateTail)
	t.Run("spare-first/flip", TestCrashFlipByte)
	t.Run("spare-first/compact", TestCompactMovesLiveRecord)
	t.Run("spare-first/bothcopies", TestCompactCrashLeavesBoth)
}

// issue 14: with preallocation, a sealed segment whose cut to its frames
// did not reach the disk (zeros after them) is accepted; without it, the
// same file is refused as corrupt.
func TestPreallocSealedZeros(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir, 4096)
	pos := appendIDs(t, w, 0, 100)
	w.Close()
	f := filepath.Join(dir, segName(pos[0].Seg))
	fi, err := os.Stat(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(f, fi.Size()+3000); err != nil { // zeros
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dir, SegmentSize: 4096, Logger: quiet(), NoSync: true}); err == nil {
		t.Fatal("zeros after a sealed segment's frames accepted without preallocation")
	}
	testPrealloc = true
	defer func() { testPrealloc = false }()
	checkPrefix(t, dir, pos, 100)
}
