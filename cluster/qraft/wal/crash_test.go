package wal

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// buildLog writes n records (ids 0..n-1) with small segments, syncs, closes,
// and returns their positions and the frames' ends.
func buildLog(t *testing.T, dir string, n int) (pos []Pos, ends []int64) {
	t.Helper()
	w := open(t, dir, 4096)
	for i := 0; i < n; i += 25 {
		pos = append(pos, appendIDs(t, w, uint64(i), uint64(min(i+25, n)))...)
		if err := w.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range pos {
		ends = append(ends, int64(p.Off)+int64(frameLen(ptr(rec(uint64(i), 0)), 0)))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return pos, ends
}

func ptr(r Record) *Record { return &r }

// checkPrefix checks that a reopened log replays exactly records 0..want-1
// at their positions, then takes new appends and replays them after a
// reopen.
func checkPrefix(t *testing.T, dir string, pos []Pos, want int) {
	t.Helper()
	w := open(t, dir, 4096)
	got := replayAll(t, w)
	if len(got) != want {
		w.Close()
		t.Fatalf("replayed %d records, want %d", len(got), want)
	}
	for i, h := range got {
		if h.p != pos[i] || !sameRec(h.r, rec(uint64(i), 0)) {
			w.Close()
			t.Fatalf("record %d: %v %+v", i, h.p, h.r)
		}
	}
	appendIDs(t, w, 5000, 5010)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w = open(t, dir, 4096)
	defer w.Close()
	got = replayAll(t, w)
	if len(got) != want+10 || got[want].r.Index != 5000 || got[len(got)-1].r.Index != 5009 {
		t.Fatalf("after appending to the recovered log: %d records", len(got))
	}
}

// issue 14: crash simulation: the last segment cut at random offsets
// (a torn tail) recovers exactly the records wholly before the cut, and the
// log takes appends again; a sealed segment cut short is refused.
func TestCrashTruncateTail(t *testing.T) {
	base := t.TempDir()
	pos, ends := buildLog(t, filepath.Join(base, "orig"), 300)
	lastSeg := pos[len(pos)-1].Seg
	lastFile := filepath.Join(base, "orig", segName(lastSeg))
	fi, err := os.Stat(lastFile)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	cuts := []int64{0, 3, hdrSize, hdrSize + 1, fi.Size() - 1, fi.Size()}
	for len(cuts) < 60 {
		cuts = append(cuts, rng.Int64N(fi.Size()+1))
	}
	for ci, cut := range cuts {
		dir := filepath.Join(base, "c", string(rune('a'+ci%26))+string(rune('a'+ci/26)))
		copyDir(t, filepath.Join(base, "orig"), dir)
		if err := os.Truncate(filepath.Join(dir, segName(lastSeg)), cut); err != nil {
			t.Fatal(err)
		}
		want := 0
		for i, p := range pos {
			if p.Seg < lastSeg || ends[i] <= cut {
				want = i + 1
			}
		}
		checkPrefix(t, dir, pos, want)
	}

	// A sealed segment cut short can only be damage: refused.
	dir := filepath.Join(base, "sealed")
	copyDir(t, filepath.Join(base, "orig"), dir)
	if err := os.Truncate(filepath.Join(dir, segName(2)), 100); err != nil {
		t.Fatal(err)
	}
	_, err = Open(Options{Dir: dir, SegmentSize: 4096, Logger: quiet()})
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Seg != 2 {
		t.Fatalf("Open with a cut sealed segment: %v, want a CorruptError for segment 2", err)
	}
}

// issue 14: crash simulation: a flipped byte in the last segment cuts the
// log at the damaged record; in a sealed segment Open refuses with an error
// naming the segment and the record's offset.
func TestCrashFlipByte(t *testing.T) {
	base := t.TempDir()
	pos, ends := buildLog(t, filepath.Join(base, "orig"), 300)
	lastSeg := pos[len(pos)-1].Seg
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 60; trial++ {
		dir := filepath.Join(base, "t", string(rune('a'+trial%26))+string(rune('a'+trial/26)))
		copyDir(t, filepath.Join(base, "orig"), dir)
		seg := lastSeg
		if first := pos[0].Seg; trial%2 == 1 {
			// A sealed segment. The log starts in segment 1, or in 2
			// when the preallocated spare was ready before the first
			// append (TestCrashPrealloc).
			seg = first + uint32(rng.IntN(int(lastSeg-first)))
		}
		file := filepath.Join(dir, segName(seg))
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		at := int64(rng.IntN(len(b)))
		b[at] ^= byte(1 + rng.IntN(255))
		if err := os.WriteFile(file, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if seg != lastSeg {
			_, err := Open(Options{Dir: dir, SegmentSize: 4096, Logger: quiet()})
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Seg != seg {
				t.Fatalf("flip at %d of sealed segment %d: Open %v", at, seg, err)
			}
			if at >= hdrSize {
				// The offset named is the damaged record's.
				var start int64 = -1
				for i, p := range pos {
					if p.Seg == seg && int64(p.Off) <= at && at < ends[i] {
						start = int64(p.Off)
					}
				}
				if ce.Off != start {
					t.Fatalf("flip at %d: error names offset %d, want %d", at, ce.Off, start)
				}
			}
			continue
		}
		want := 0
		for i, p := range pos {
			if p.Seg < lastSeg || (at >= hdrSize && ends[i] <= at) {
				want = i + 1
			}
		}
		checkPrefix(t, dir, pos, want)
	}
}

// issue 14: CrashForTest loses exactly what was appended after the last
// Sync; what was synced comes back, and the log continues.
func TestCrashForTest(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir, 4096)
	pos := appendIDs(t, w, 0, 57)
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	appendIDs(t, w, 57, 60) // lost: same segment, not synced
	if err := w.CrashForTest(); err != nil {
		t.Fatal(err)
	}
	checkPrefix(t, dir, pos, 57)
}
