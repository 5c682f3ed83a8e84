package wal

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// issue 14: records appended across segment rolls read back by position and
// come back from Replay, in order, at the same positions, after a reopen.
func TestAppendReadReplay(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir, 4096)
	var pos []Pos
	for b := uint64(0); b < 40; b++ {
		pos = append(pos, appendIDs(t, w, b*10, b*10+10)...)
		if b%3 == 0 {
			if err := w.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, p := range pos {
		if i > 0 && !pos[i-1].Less(p) {
			t.Fatalf("positions not increasing: %v then %v", pos[i-1], p)
		}
		r, err := w.Read(p)
		if err != nil || !sameRec(r, rec(uint64(i), 0)) {
			t.Fatalf("Read(%v) = %+v, %v; want id %d", p, r, err, i)
		}
	}
	st := w.Stats()
	if st.Segments < 5 || st.Appends != 400 || st.LiveRecords != 400 || st.LiveBytes != st.Bytes-int64(st.Segments*hdrSize) {
		t.Fatalf("stats %+v", st)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w = open(t, dir, 4096)
	defer w.Close()
	got := replayAll(t, w)
	if len(got) != len(pos) {
		t.Fatalf("replayed %d records, want %d", len(got), len(pos))
	}
	for i, h := range got {
		if h.p != pos[i] || !sameRec(h.r, rec(uint64(i), 0)) {
			t.Fatalf("replay %d: %v %+v, want %v id %d", i, h.p, h.r, pos[i], i)
		}
	}
	if err := w.Replay(func(Pos, Record) error { return nil }); err != nil {
		t.Fatalf("second Replay before Append: %v", err)
	}
	appendIDs(t, w, 1000, 1001)
	if err := w.Replay(func(Pos, Record) error { return nil }); !errors.Is(err, ErrReplay) {
		t.Fatalf("Replay after Append: %v, want ErrReplay", err)
	}
}

// issue 14: one fdatasync per Sync, none when nothing was appended since the
// last one, whatever the number of records and Appends in the batch.
func TestSyncCount(t *testing.T) {
	w := open(t, t.TempDir(), 1<<20)
	defer w.Close()
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if s := w.Stats().Syncs; s != 0 {
		t.Fatalf("Syncs after an empty Sync = %d, want 0", s)
	}
	for b := 0; b < 10; b++ {
		for i := 0; i < 5; i++ {
			appendIDs(t, w, uint64(b*100+i*10), uint64(b*100+i*10+10))
		}
		if err := w.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := w.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	st := w.Stats()
	if st.Syncs != 10 || st.Appends != 500 {
		t.Fatalf("Syncs %d Appends %d, want 10 and 500", st.Syncs, st.Appends)
	}
}

// issue 14: a real fdatasync path (NoSync off) works and counts.
func TestRealSync(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(Options{Dir: dir, SegmentSize: 8192, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	pos := appendIDs(t, w, 0, 100) // several rolls, each synced
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, p := range pos {
		if p.Seg == 1 {
			w.Release(p) // deleted, the directory synced
		}
	}
	if _, err := os.Stat(filepath.Join(dir, segName(1))); !os.IsNotExist(err) {
		t.Fatalf("segment 1: %v", err)
	}
	st := w.Stats()
	if st.Oldest.Seg != 2 {
		t.Fatalf("Oldest %v after segment 1 went", st.Oldest)
	}
	if st.Syncs < uint64(st.Segments) {
		t.Fatalf("Syncs %d < segments %d (each roll and the final Sync fdatasync)", st.Syncs, st.Segments)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := w.Append([]Record{rec(1, 0)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
}

// issue 14: a segment whose records are all released is deleted, never the
// head; released records read as released; double release is harmless.
func TestReleaseDeletesSegments(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir, 4096)
	defer w.Close()
	pos := appendIDs(t, w, 0, 200)
	bySeg := map[uint32][]Pos{}
	for _, p := range pos {
		bySeg[p.Seg] = append(bySeg[p.Seg], p)
	}
	if len(bySeg) < 4 {
		t.Fatalf("want several segments, got %d", len(bySeg))
	}
	first := bySeg[1]
	for _, p := range first[:len(first)-1] {
		w.Release(p)
	}
	if _, err := os.Stat(filepath.Join(dir, segName(1))); err != nil {
		t.Fatalf("segment 1 deleted with a live record: %v", err)
	}
	if _, err := w.Read(first[0]); !errors.Is(err, ErrReleased) {
		t.Fatalf("Read of released: %v", err)
	}
	if r, err := w.Read(first[len(first)-1]); err != nil || r.Index != uint64(len(first)-1) {
		t.Fatalf("Read of the live record: %+v %v", r, err)
	}
	w.Release(first[0]) // again: ignored
	w.Release(first[len(first)-1])
	if _, err := os.Stat(filepath.Join(dir, segName(1))); !os.IsNotExist(err) {
		t.Fatalf("segment 1 still there after its last release: %v", err)
	}
	if _, err := w.Read(first[0]); !errors.Is(err, ErrGone) {
		t.Fatalf("Read in a deleted segment: %v", err)
	}
	w.Release(first[0]) // a deleted segment: ignored
	w.ReleaseAll(pos)   // everything, the head included
	st := w.Stats()
	if st.Segments != 1 || st.LiveRecords != 0 || st.LiveBytes != 0 || st.SegmentsDeleted != uint64(len(bySeg)-1) {
		t.Fatalf("after releasing everything: %+v (segments %d)", st, len(bySeg))
	}
	if n := len(segFiles(t, dir)); n != 1 {
		t.Fatalf("%d files left, want the head only", n)
	}
	// The head is sealed by the next roll and then goes.
	headSeg := pos[len(pos)-1].Seg
	more := appendIDs(t, w, 1000, 1100)
	if more[len(more)-1].Seg == headSeg {
		t.Fatal("no roll")
	}
	for _, p := range more {
		if p.Seg == headSeg {
			w.Release(p)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, segName(headSeg))); !os.IsNotExist(err) {
		t.Fatalf("old head kept once sealed with nothing live: %v", err)
	}
	if st := w.Stats(); st.LiveRecords >= 100 || st.LiveRecords == 0 {
		t.Fatalf("after more appends: %+v", st)
	}
}

// issue 14: Retain adds references; the record lives until each is released.
func TestRetain(t *testing.T) {
	w := open(t, t.TempDir(), 4096)
	defer w.Close()
	pos := appendIDs(t, w, 0, 100)
	p := pos[0]
	if err := w.Retain(p); err != nil {
		t.Fatal(err)
	}
	if err := w.Retain(p); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		w.Release(p)
		if _, err := w.Read(p); err != nil {
			t.Fatalf("read after %d of 3 releases: %v", i+1, err)
		}
	}
	w.Release(p)
	if _, err := w.Read(p); !errors.Is(err, ErrReleased) && !errors.Is(err, ErrGone) {
		t.Fatalf("read after the last release: %v", err)
	}
	if err := w.Retain(p); err == nil {
		t.Fatal("Retain of a released record succeeded")
	}
	if err := w.Retain(Pos{Seg: pos[1].Seg, Off: pos[1].Off + 1}); !errors.Is(err, ErrReleased) {
		t.Fatalf("Retain of a bad position: %v", err)
	}
}

// issue 14: a 1,000,000-record live set costs well under 32 bytes a record
// of WAL memory (4 bytes of offsets while a segment is mostly live, at
// most 8 per live record once it is mostly dead).
func TestIndexMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	w := open(t, t.TempDir(), 16<<20)
	defer w.Close()
	recs := make([]Record, 1000)
	d := make([]byte, 16)
	var all []Pos
	for b := 0; b < 1000; b++ {
		for i := range recs {
			recs[i] = Record{Group: uint64(i % 50), Index: uint64(b*1000 + i), Term: 3, Data: d}
		}
		pos, err := w.Append(recs)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, pos...)
	}
	st := w.Stats()
	if st.LiveRecords != 1_000_000 {
		t.Fatalf("live %d", st.LiveRecords)
	}
	per := float64(st.IndexBytes) / 1e6
	t.Logf("1M live records: %d segments, index %d bytes = %.2f bytes/record", st.Segments, st.IndexBytes, per)
	if per > 8 {
		t.Fatalf("index costs %.2f bytes per live record, want <= 8", per)
	}
	// Mostly dead sealed segments are pruned: never more than 16 bytes
	// per live record (the head, 4 bytes per record appended, aside), where
	// they held 4 bytes for every record appended.
	for i, p := range all {
		if i%16 != 0 {
			w.Release(p)
		}
	}
	st = w.Stats()
	if st.LiveRecords != 62500 {
		t.Fatalf("live %d", st.LiveRecords)
	}
	w.mu.Lock()
	headBytes := int64(cap(w.head.offs)) * 4
	headLive := int64(w.head.live)
	w.mu.Unlock()
	per = float64(st.IndexBytes-headBytes) / float64(st.LiveRecords-headLive)
	t.Logf("%d live records: sealed segments' index %.2f bytes/live record", st.LiveRecords, per)
	if per > 16 {
		t.Fatalf("pruned index costs %.2f bytes per live record, want <= 16", per)
	}
}
