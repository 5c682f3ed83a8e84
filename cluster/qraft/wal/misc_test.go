package wal

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// issue 14: releasing records from the Replay callback (the host dropping
// what it no longer needs) deletes their segments once Replay is done, and
// Replay still reads every segment.
func TestReleaseDuringReplay(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir, 4096)
	pos := appendIDs(t, w, 0, 300)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w = open(t, dir, 4096)
	defer w.Close()
	n := 0
	err := w.Replay(func(p Pos, r Record) error {
		if r.Index != uint64(n) {
			t.Fatalf("replayed %d, want %d", r.Index, n)
		}
		n++
		if r.Index != 299 {
			w.Release(p)
		}
		return nil
	})
	if err != nil || n != 300 {
		t.Fatalf("Replay: %v after %d records", err, n)
	}
	st := w.Stats()
	if st.Segments != 1 || st.LiveRecords != 1 {
		t.Fatalf("after releasing during Replay: %+v", st)
	}
	if files := segFiles(t, dir); len(files) != 1 || filepath.Base(files[0]) != segName(pos[299].Seg) {
		t.Fatalf("files %v, want the head only", files)
	}
	if r, err := w.Read(pos[299]); err != nil || r.Index != 299 {
		t.Fatalf("Read of the kept record: %v", err)
	}
}

// issue 14: an error from the Replay callback stops it and is returned.
func TestReplayError(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir, 4096)
	appendIDs(t, w, 0, 10)
	w.Close()
	w = open(t, dir, 4096)
	defer w.Close()
	boom := errors.New("boom")
	n := 0
	if err := w.Replay(func(Pos, Record) error { n++; return boom }); !errors.Is(err, boom) || n != 1 {
		t.Fatalf("Replay = %v after %d calls", err, n)
	}
}

// issue 14: a failed write fails the WAL: Append and Sync return the error
// from then on; a reopen recovers what reached the disk.
func TestWriteFailureIsSticky(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir, 1<<20)
	pos := appendIDs(t, w, 0, 10)
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	appendIDs(t, w, 10, 20)
	w.head.f.Close() // the next write fails
	if err := w.Sync(); err == nil {
		t.Fatal("Sync after a failed write succeeded")
	}
	if _, err := w.Append([]Record{rec(99, 0)}); err == nil {
		t.Fatal("Append on a failed WAL succeeded")
	}
	if err := w.Sync(); err == nil {
		t.Fatal("second Sync on a failed WAL succeeded")
	}
	w.Close()
	checkPrefix(t, dir, pos, 10)
}

// issue 14: data above MaxDataSize is refused before anything is written.
func TestTooLarge(t *testing.T) {
	defer func(m int) { maxData = m }(maxData)
	maxData = 1000
	w := open(t, t.TempDir(), 1<<20)
	defer w.Close()
	_, err := w.Append([]Record{rec(1, 0), {Data: make([]byte, 1001)}})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Append: %v", err)
	}
	if st := w.Stats(); st.Appends != 0 || st.LiveRecords != 0 {
		t.Fatalf("something was appended: %+v", st)
	}
}

// issue 14: a record larger than a segment gets one of its own.
func TestLargeRecord(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir, 4096)
	big := rec(7, 10000)
	pos, err := w.Append([]Record{rec(1, 0), big, rec(2, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if pos[0].Seg == pos[1].Seg || pos[1].Seg == pos[2].Seg {
		t.Fatalf("positions %v", pos)
	}
	if r, err := w.Read(pos[1]); err != nil || !sameRec(r, big) {
		t.Fatalf("Read of the large record: %v", err)
	}
	w.Close()
	w = open(t, dir, 4096)
	defer w.Close()
	got := replayAll(t, w)
	if len(got) != 3 || !sameRec(got[1].r, big) {
		t.Fatalf("replayed %d", len(got))
	}
	if _, err := os.Stat(filepath.Join(dir, segName(pos[1].Seg))); err != nil {
		t.Fatal(err)
	}
}

// issue 14: ReadMany reads any set of live records (buffered, on file,
// moved by Compact, duplicates) in log order, and stops at a released one.
func TestReadMany(t *testing.T) {
	w := open(t, t.TempDir(), 8192)
	defer w.Close()
	pos := appendIDs(t, w, 0, 500)
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	// Segment 1 mostly released: 3 and 5 are moved.
	for i, p := range pos {
		if p.Seg == 1 && i != 3 && i != 5 {
			w.Release(p)
		}
	}
	if _, mv := compact(t, w); len(mv) != 2 {
		t.Fatalf("moves %v", mv)
	}
	pos = append(pos, appendIDs(t, w, 500, 510)...) // buffered
	var ps []Pos
	var ids []uint64
	for i := len(pos) - 1; i >= 0; i -= 3 {
		if pos[i].Seg == 1 && i != 3 && i != 5 {
			continue
		}
		ps = append(ps, pos[i])
		ids = append(ids, uint64(i))
	}
	ps = append(ps, pos[3], pos[5], pos[3]) // old positions: forwarded; a duplicate
	ids = append(ids, 3, 5, 3)
	seen := 0
	last := Pos{}
	err := w.ReadMany(ps, func(i int, r Record) error {
		seen++
		if !sameRec(r, rec(ids[i], 0)) {
			t.Fatalf("ReadMany item %d: record %d, want %d", i, r.Index, ids[i])
		}
		if ps[i].Seg != 1 && ps[i].Less(last) {
			t.Fatalf("not in log order: %v after %v", ps[i], last)
		}
		if ps[i].Seg != 1 {
			last = ps[i]
		}
		return nil
	})
	if err != nil || seen != len(ps) {
		t.Fatalf("ReadMany: %v, %d of %d", err, seen, len(ps))
	}
	w.Release(pos[100])
	if err := w.ReadMany([]Pos{pos[99], pos[100]}, func(int, Record) error { return nil }); !errors.Is(err, ErrReleased) {
		t.Fatalf("ReadMany with a released record: %v", err)
	}
}
