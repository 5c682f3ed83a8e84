package wal

import (
	"bytes"
	"encoding/binary"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// rec builds a deterministic record with id in Index; its data length
// varies with id (and size, if not zero).
func rec(id uint64, size int) Record {
	if size == 0 {
		size = int(id*7919%200) + 1
	}
	d := make([]byte, size)
	for i := range d {
		d[i] = byte(id*31 + uint64(i))
	}
	if size >= 8 {
		binary.LittleEndian.PutUint64(d, id)
	}
	return Record{Group: id % 7, Index: id, Term: id / 100, Kind: byte(id % 3), Data: d}
}

func sameRec(a, b Record) bool {
	return a.Group == b.Group && a.Index == b.Index && a.Term == b.Term && a.Kind == b.Kind && bytes.Equal(a.Data, b.Data)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testPrealloc makes open preallocate segments (prealloc.go) under NoSync.
var testPrealloc bool

func open(t testing.TB, dir string, seg int64) *WAL {
	t.Helper()
	w, err := Open(Options{Dir: dir, SegmentSize: seg, Logger: quiet(), NoSync: true, forcePrealloc: testPrealloc})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if testPrealloc && testSpareFirst {
		waitSpare(t, w)
	}
	return w
}

// testSpareFirst makes open wait for the spare segment when preallocating,
// so the first append rolls to it: the order a loaded machine gives at
// random.
var testSpareFirst bool

type handed struct {
	p Pos
	r Record
}

func replayAll(t testing.TB, w *WAL) []handed {
	t.Helper()
	var out []handed
	err := w.Replay(func(p Pos, r Record) error {
		out = append(out, handed{p, r}) // r.Data is ours: kept as is

		return nil
	})
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	return out
}

func segFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "wal-*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range segFiles(t, src) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func appendIDs(t testing.TB, w *WAL, from, to uint64) []Pos {
	t.Helper()
	var recs []Record
	for id := from; id < to; id++ {
		recs = append(recs, rec(id, 0))
	}
	pos, err := w.Append(recs)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return pos
}
