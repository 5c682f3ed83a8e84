package wal

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

type moveRec struct {
	old, new Pos
	r        Record
}

func compact(t *testing.T, w *WAL) (CompactStats, []moveRec) {
	t.Helper()
	var mv []moveRec
	st, err := w.Compact(func(old, new Pos, r Record) { mv = append(mv, moveRec{old, new, r}) })
	if err != nil {
		t.Fatalf("Compact: %v", err)
	}
	return st, mv
}

// issue 14: one old live record does not pin its segment: Compact copies it
// to the head, reports the move, deletes the segment; the old position
// still reads (forwarded) until the next Compact; after a reopen Replay
// hands the record at its original place with its new position.
func TestCompactMovesLiveRecord(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir, 4096)
	pos := appendIDs(t, w, 0, 300)
	first := pos[0].Seg // 2 when preallocating and the spare was ready first
	keep := map[int]bool{3: true}
	lastSeg := pos[len(pos)-1].Seg
	for i, p := range pos {
		if p.Seg >= lastSeg-1 {
			keep[i] = true
		}
	}
	for i, p := range pos {
		if !keep[i] {
			w.Release(p)
		}
	}
	before := w.Stats()
	if before.Compactable != 1 {
		t.Fatalf("Compactable = %d, want 1 (the first segment)", before.Compactable)
	}
	if _, err := os.Stat(filepath.Join(dir, segName(first))); err != nil {
		t.Fatalf("first segment should be pinned by record 3: %v", err)
	}
	if before.Segments != 3 {
		t.Fatalf("segments before compaction: %d, want 3", before.Segments)
	}
	st, mv := compact(t, w)
	if len(mv) != 1 || mv[0].old != pos[3] || mv[0].r.Index != 3 || mv[0].r.Group != 3 || mv[0].r.Data != nil {
		t.Fatalf("moves %+v", mv)
	}
	if st.Moved != 1 || st.Segments != 1 || st.FreedBytes < 4000 {
		t.Fatalf("compact stats %+v", st)
	}
	if !pos[len(pos)-1].Less(mv[0].new) {
		t.Fatalf("copy at %v, want at the head after %v", mv[0].new, pos[len(pos)-1])
	}
	if _, err := os.Stat(filepath.Join(dir, segName(first))); !os.IsNotExist(err) {
		t.Fatalf("first segment not deleted: %v", err)
	}
	for _, p := range []Pos{mv[0].new, pos[3]} {
		if r, err := w.Read(p); err != nil || !sameRec(r, rec(3, 0)) {
			t.Fatalf("Read(%v) = %+v %v", p, r, err)
		}
	}
	after := w.Stats()
	wantSegs := 2
	if mv[0].new.Seg != lastSeg {
		wantSegs = 3 // preallocating: the head moved to the spare first
	}
	// The copy of record 3 keeps its original position as the oldest.
	if before.Oldest != (Pos{first, hdrSize}) || after.Oldest != pos[3] {
		t.Fatalf("Oldest before %v after %v, want %v then %v", before.Oldest, after.Oldest, Pos{first, hdrSize}, pos[3])
	}
	if after.LiveRecords != before.LiveRecords || after.Segments != wantSegs || after.Moved != 1 || after.Compactable != 0 {
		t.Fatalf("stats after %+v, before %+v", after, before)
	}
	// Nothing more to do.
	if st, mv2 := compact(t, w); st.Moved != 0 || len(mv2) != 0 {
		t.Fatalf("second compaction moved %+v", st)
	}
	if _, err := w.Read(pos[3]); !errors.Is(err, ErrGone) {
		t.Fatalf("old position after the next Compact: %v, want ErrGone", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	w = open(t, dir, 4096)
	defer w.Close()
	got := replayAll(t, w)
	if len(got) != len(keep) {
		t.Fatalf("replayed %d, want %d", len(got), len(keep))
	}
	if got[0].p != mv[0].new || !sameRec(got[0].r, rec(3, 0)) {
		t.Fatalf("first replayed %v %+v, want record 3 at %v", got[0].p, got[0].r.Index, mv[0].new)
	}
	for i := 1; i < len(got); i++ {
		if got[i].r.Index <= got[i-1].r.Index {
			t.Fatalf("replay not in original order at %d: %d after %d", i, got[i].r.Index, got[i-1].r.Index)
		}
	}
}

// issue 14: Release and Retain of an old position after a Compact act on the
// copy, and references move with the record.
func TestCompactReferencesFollow(t *testing.T) {
	w := open(t, t.TempDir(), 4096)
	defer w.Close()
	pos := appendIDs(t, w, 0, 300)
	for i, p := range pos {
		if i != 3 && i != 5 && p.Seg == 1 {
			w.Release(p)
		}
	}
	if err := w.Retain(pos[5]); err != nil {
		t.Fatal(err)
	}
	_, mv := compact(t, w)
	if len(mv) != 2 {
		t.Fatalf("moves %+v", mv)
	}
	w.Release(pos[3]) // old position: releases the copy
	if _, err := w.Read(mv[0].new); !errors.Is(err, ErrReleased) {
		t.Fatalf("copy of 3 after Release(old): %v", err)
	}
	w.Release(mv[1].new) // 5 had two references
	if _, err := w.Read(mv[1].new); err != nil {
		t.Fatalf("copy of 5 after one of two releases: %v", err)
	}
	w.Release(pos[5])
	if _, err := w.Read(mv[1].new); !errors.Is(err, ErrReleased) {
		t.Fatalf("copy of 5 after two releases: %v", err)
	}
}

// issue 14: a crash after a compaction synced its copies but before the old
// segment's deletion was durable leaves both: Replay hands the record once,
// as the copy, at its original place.
func TestCompactCrashLeavesBoth(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "w")
	w := open(t, dir, 4096)
	pos := appendIDs(t, w, 0, 300)
	first := pos[0].Seg // 2 when preallocating and the spare was ready first
	seg1, err := os.ReadFile(filepath.Join(dir, segName(first)))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pos {
		if i != 3 && p.Seg == first {
			w.Release(p)
		}
	}
	_, mv := compact(t, w)
	if len(mv) != 1 {
		t.Fatalf("moves %+v", mv)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, segName(first)), seg1, 0o644); err != nil {
		t.Fatal(err)
	}
	w = open(t, dir, 4096)
	defer w.Close()
	got := replayAll(t, w)
	if len(got) != len(pos) {
		t.Fatalf("replayed %d, want %d", len(got), len(pos))
	}
	for i, h := range got {
		want := pos[i]
		if i == 3 {
			want = mv[0].new
		}
		if h.p != want || !sameRec(h.r, rec(uint64(i), 0)) {
			t.Fatalf("replay %d: %v %d, want %v", i, h.p, h.r.Index, want)
		}
	}
	// The original is dead: releasing the rest of segment 1 deletes it.
	for _, h := range got {
		if h.p.Seg == first {
			w.Release(h.p)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, segName(first))); !os.IsNotExist(err) {
		t.Fatalf("first segment kept by the dead original: %v", err)
	}
}

// issue 14: a record moved twice keeps its original place, and segments
// holding only copies are compacted like the others.
func TestCompactTwice(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir, 4096)
	pos := appendIDs(t, w, 0, 100)
	for i, p := range pos {
		if i != 3 && p.Seg == 1 {
			w.Release(p)
		}
	}
	_, mv := compact(t, w)
	if len(mv) != 1 {
		t.Fatalf("moves %+v", mv)
	}
	copy1 := mv[0].new
	// Fill past the copy's segment and release everything around it.
	more := appendIDs(t, w, 100, 300)
	for _, p := range append(pos, more...) {
		if p.Seg == copy1.Seg {
			w.Release(p)
		}
	}
	_, mv = compact(t, w)
	if len(mv) != 1 || mv[0].old != copy1 || mv[0].r.Index != 3 {
		t.Fatalf("second moves %+v (copy was at %v)", mv, copy1)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w = open(t, dir, 4096)
	defer w.Close()
	got := replayAll(t, w)
	if got[0].r.Index != 3 || got[0].p != mv[0].new {
		t.Fatalf("first replayed: %d at %v", got[0].r.Index, got[0].p)
	}
	for i := 1; i < len(got); i++ {
		if got[i].r.Index <= got[i-1].r.Index {
			t.Fatalf("order broken at %d", i)
		}
	}
}

// issue 14: Compact leaves mostly-live segments alone.
func TestCompactRatio(t *testing.T) {
	w := open(t, t.TempDir(), 4096)
	defer w.Close()
	pos := appendIDs(t, w, 0, 300)
	// Release half of segment 1: above the 25% threshold.
	n := 0
	for _, p := range pos {
		if p.Seg == 1 {
			n++
			if n%2 == 0 {
				w.Release(p)
			}
		}
	}
	if c := w.Stats().Compactable; c != 0 {
		t.Fatalf("Compactable = %d with a half-live segment", c)
	}
	if st, _ := compact(t, w); st.Segments != 0 {
		t.Fatalf("compacted a half-live segment: %+v", st)
	}
}
