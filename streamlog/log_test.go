package streamlog

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/warrenmq/warren/store"
)

// appendN appends chunks of per records each ("m<offset>"), syncs and
// commits, and returns the chunks' ids.
func appendN(t *testing.T, l *Log, chunks, per int, ts int64) []uint64 {
	t.Helper()
	var ids []uint64
	for range chunks {
		next := l.Info().Next
		var data []byte
		for j := range per {
			data = AppendEntry(data, fmt.Appendf(nil, "m%d", next+uint64(j)))
		}
		h, err := l.Append(&Batch{Entries: uint16(per), Records: uint32(per), Data: data, Timestamp: ts})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, h.ID)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	l.Commit()
	return ids
}

// readAll reads every committed user record from p, checking that each
// is "m<its offset>".
func readAll(t *testing.T, l *Log, p Position) []uint64 {
	t.Helper()
	r := l.NewReader(p)
	defer r.Close()
	var offs []uint64
	for {
		c, err := r.Next()
		if errors.Is(err, ErrNoChunk) {
			return offs
		}
		if err != nil {
			t.Fatal(err)
		}
		if c.Type != ChunkUser {
			continue
		}
		data, off := c.Data(), c.ID
		for len(data) > 0 {
			e, rest, err := NextEntry(data)
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("m%d", off); string(e.Data) != want {
				t.Fatalf("record at offset %d is %q", off, e.Data)
			}
			offs = append(offs, off)
			off++
			data = rest
		}
	}
}

func seq(from, to uint64) []uint64 {
	var s []uint64
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

func TestAppendReadAcrossSegments(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{MaxSegmentChunks: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ids := appendN(t, l, 35, 3, 1000)
	if got := readAll(t, l, l.First()); !slices.Equal(got, seq(0, 105)) {
		t.Fatalf("read %v", got)
	}
	in := l.Info()
	if in.Segments != 4 || in.Next != 105 || in.LastChunkID != 102 || in.Chunks != 35 {
		t.Fatalf("info %+v", in)
	}
	if ids[10] != 30 {
		t.Fatalf("ids %v", ids)
	}
	// An offset inside a chunk starts at the chunk (its whole batch).
	p, err := l.AtOffset(50)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, l, p); got[0] != 48 || len(got) != 105-48 {
		t.Fatalf("from offset 50: starts at %d, %d records", got[0], len(got))
	}
	p, _ = l.Last()
	if got := readAll(t, l, p); !slices.Equal(got, []uint64{102, 103, 104}) {
		t.Fatalf("last: %v", got)
	}
	// A reader at the end sees only what comes after.
	end := l.NewReader(l.End())
	if _, err := end.Next(); !errors.Is(err, ErrNoChunk) {
		t.Fatalf("reader at the end: %v", err)
	}
	w := l.Wait()
	appendN(t, l, 1, 2, 2000)
	select {
	case <-w:
	default:
		t.Fatal("commit did not wake the waiters")
	}
	c, err := end.Next()
	if err != nil || c.ID != 105 || c.Records != 2 {
		t.Fatalf("after the end: %+v %v", c, err)
	}
	end.Close()
	p, _ = l.AtTimestamp(1500)
	if got := readAll(t, l, p); !slices.Equal(got, []uint64{105, 106}) {
		t.Fatalf("from timestamp 1500: %v", got)
	}
	p, _ = l.AtOffset(1 << 40)
	if got := readAll(t, l, p); len(got) != 0 {
		t.Fatalf("past the end: %v", got)
	}
}

// Readers see committed chunks only.
func TestUncommittedInvisible(t *testing.T) {
	l, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r := l.NewReader(l.First())
	defer r.Close()
	if _, err := l.Append(&Batch{Entries: 1, Records: 1, Data: AppendEntry(nil, []byte("m0"))}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(); !errors.Is(err, ErrNoChunk) {
		t.Fatalf("uncommitted chunk read: %v", err)
	}
	l.Commit()
	if c, err := r.Next(); err != nil || c.ID != 0 {
		t.Fatalf("%v %v", c, err)
	}
}

func TestRetentionBySizeAndAge(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	dir := t.TempDir()
	l, err := Open(dir, Options{MaxSegmentChunks: 10, MaxBytes: 1500, MaxAge: time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// 40 chunks of ~70 bytes (4 segments of ~700): the size keeps about
	// four segments, never the one written.
	appendN(t, l, 40, 1, now.UnixMilli())
	appendN(t, l, 1, 1, now.UnixMilli())
	in := l.Info()
	if in.Bytes > 1500+in.Bytes/int64(in.Segments)*2 || in.Segments > 5 || in.FirstOffset == 0 {
		t.Fatalf("after size retention: %+v", in)
	}
	got := readAll(t, l, l.First())
	if got[0] != in.FirstOffset || got[len(got)-1] != 40 {
		t.Fatalf("kept %v, first %d", got, in.FirstOffset)
	}
	// A reader left behind the retention goes on from the first kept.
	old := l.NewReader(l.First())
	defer old.Close()
	if n, err := l.Retain(); n != 0 || err != nil {
		t.Fatalf("retention within the limits deleted %d: %v", n, err)
	}
	// Age: two hours later every closed segment whose last chunk is old
	// goes at the next check (the one holding chunk 40 gets new ones).
	now = now.Add(2 * time.Hour)
	appendN(t, l, 10, 1, now.UnixMilli())
	if _, err := l.Retain(); err != nil {
		t.Fatal(err)
	}
	in = l.Info()
	if in.FirstOffset != 40 || in.Segments != 2 {
		t.Fatalf("after age retention: %+v", in)
	}
	names, _ := os.ReadDir(dir)
	if len(names) != 2*in.Segments {
		t.Fatalf("%d files for %d segments", len(names), in.Segments)
	}
	c, err := old.Next()
	if err != nil || c.ID < in.FirstOffset {
		t.Fatalf("reader behind the retention: %+v %v (first %d)", c, err, in.FirstOffset)
	}
}

func TestTrackingSurvivesRestartAndRoll(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{MaxSegmentChunks: 4, MaxBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := l.Append(&Batch{Entries: 1, Records: 1, Data: AppendEntry(nil, []byte("x")),
			Writers: map[string]uint64{fmt.Sprintf("w%d", i%3): uint64(100 + i)}}); err != nil {
			t.Fatal(err)
		}
		if i%5 == 0 {
			if err := l.StoreOffset("c1", uint64(i), 0, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	l.Commit()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(dir, Options{MaxSegmentChunks: 4, MaxBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Info().Segments > 2 {
		t.Fatalf("retention kept %d segments", l.Info().Segments)
	}
	for ref, want := range map[string]uint64{"w0": 118, "w1": 119, "w2": 117} {
		if got, ok := l.WriterSeq(ref); !ok || got != want {
			t.Errorf("writer %s: %d %v, want %d", ref, got, ok, want)
		}
	}
	if o, ok := l.Offset("c1"); !ok || o != 15 {
		t.Errorf("offset c1: %d %v", o, ok)
	}
}

func TestMaxWriters(t *testing.T) {
	tr := newTracking()
	for i := range MaxWriters + 10 {
		tr.Writers[fmt.Sprint(i)] = WriterSeq{Seq: 1, Chunk: uint64(i)}
	}
	tr.trimWriters()
	if len(tr.Writers) != MaxWriters {
		t.Fatalf("%d writers", len(tr.Writers))
	}
	if _, ok := tr.Writers["0"]; ok {
		t.Fatal("the oldest writer kept")
	}
}

// A crash keeps every synced chunk and cuts what was not synced, on a
// file system that tears unsynced writes.
func TestCrashKeepsSynced(t *testing.T) {
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 1))
		fs := store.NewMemFS()
		l, err := Open("/s", Options{FS: fs, MaxSegmentChunks: 7})
		if err != nil {
			t.Fatal(err)
		}
		synced := uint64(0)
		for i := range 40 {
			appendOne(t, l, 2)
			if rng.IntN(3) == 0 || i == 20 {
				if err := l.Sync(); err != nil {
					t.Fatal(err)
				}
				synced = l.Info().Next
			}
		}
		fs.Crash(rng)
		l, err = Open("/s", Options{FS: fs, MaxSegmentChunks: 7})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		got := readAll(t, l, l.First())
		if uint64(len(got)) < synced || !slices.Equal(got, seq(0, uint64(len(got)))) {
			t.Fatalf("seed %d: %d synced, read %v", seed, synced, got)
		}
		// and it appends on after what it kept
		appendOne(t, l, 1)
		l.Commit()
		if got2 := readAll(t, l, l.First()); len(got2) != len(got)+1 {
			t.Fatalf("seed %d: after an append: %d, want %d", seed, len(got2), len(got)+1)
		}
		l.Close()
	}
}

func appendOne(t *testing.T, l *Log, per int) {
	t.Helper()
	next := l.Info().Next
	var data []byte
	for j := range per {
		data = AppendEntry(data, fmt.Appendf(nil, "m%d", next+uint64(j)))
	}
	if _, err := l.Append(&Batch{Entries: uint16(per), Records: uint32(per), Data: data}); err != nil {
		t.Fatal(err)
	}
}

// A damaged chunk costs that chunk only: in a closed segment its readers
// skip it; in the last segment recovery does, and keeps the chunks after.
func TestDamagedChunkLosesOnlyItself(t *testing.T) {
	for _, where := range []string{"closed", "last", "header"} {
		t.Run(where, func(t *testing.T) {
			dir := t.TempDir()
			l, err := Open(dir, Options{MaxSegmentChunks: 10})
			if err != nil {
				t.Fatal(err)
			}
			appendN(t, l, 25, 2, 0)
			l.Close()
			seg := uint64(0)
			if where != "closed" {
				seg = 40 // the last segment: chunks 20..24
			}
			f, err := os.OpenFile(filepath.Join(dir, segName(seg)), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			// Chunk 2 of the segment: each chunk is 48 + 2*(4+len) bytes.
			at := int64(fileHeaderSize)
			var hb [HeaderSize]byte
			for range 2 {
				f.ReadAt(hb[:], at)
				h, _ := ParseHeader(hb[:])
				at += h.Size()
			}
			f.ReadAt(hb[:], at)
			h, _ := ParseHeader(hb[:])
			damage := at + HeaderSize + 3 // its data
			if where == "header" {
				damage = at + 37 // its data size
			}
			if _, err := f.WriteAt([]byte{0xff}, damage); err != nil {
				t.Fatal(err)
			}
			f.Close()
			l, err = Open(dir, Options{MaxSegmentChunks: 10})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			got := readAll(t, l, l.First())
			want := slices.DeleteFunc(seq(0, 50), func(o uint64) bool { return o == h.ID || o == h.ID+1 })
			if !slices.Equal(got, want) {
				t.Fatalf("read %v, want all but %d and %d", got, h.ID, h.ID+1)
			}
			if l.Info().Damaged == 0 {
				t.Fatal("the damage was not counted")
			}
			if l.Info().Next != 50 {
				t.Fatalf("next %d", l.Info().Next)
			}
		})
	}
}

func TestEntries(t *testing.T) {
	data := AppendEntry(nil, []byte("one"))
	data = AppendSubBatch(data, 0, 2, 6, []byte("twothr"))
	e, rest, err := NextEntry(data)
	if err != nil || e.SubBatch || string(e.Data) != "one" {
		t.Fatalf("%+v %v", e, err)
	}
	e, rest, err = NextEntry(rest)
	if err != nil || !e.SubBatch || e.Records != 2 || e.Plain != 6 || string(e.Data) != "twothr" || len(rest) != 0 {
		t.Fatalf("%+v %v", e, err)
	}
	if _, _, err := NextEntry([]byte{0, 0, 0, 9, 1}); err == nil {
		t.Fatal("a short entry parsed")
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	h := Header{Type: 0, Entries: 3, Records: 5, Timestamp: -7, Epoch: 9, ID: 1 << 40, CRC: 0xdeadbeef, DataSize: 100, TrailerSize: 12, BloomSize: 16}
	var b [HeaderSize]byte
	h.Encode(b[:])
	if b[0] != 0x50 {
		t.Fatalf("magic %x", b[0])
	}
	g, err := ParseHeader(b[:])
	if err != nil || g != h {
		t.Fatalf("%+v %v", g, err)
	}
	b[0] = 0x51
	if _, err := ParseHeader(b[:]); err == nil {
		t.Fatal("bad magic parsed")
	}
}

func TestBloom(t *testing.T) {
	b := NewBloom(16)
	b.Add("CA")
	b.Add("")
	if !b.Has("CA") || !Matches(b, []string{"NY", "CA"}, false) || !Matches(b, []string{"NY"}, true) {
		t.Fatal("an added value not found")
	}
	misses := 0
	for i := range 1000 {
		if !b.Has(fmt.Sprint("v", i)) {
			misses++
		}
	}
	if misses < 900 {
		t.Fatalf("a 16-byte filter of 2 values matched %d of 1000 others", 1000-misses)
	}
	if Matches(nil, []string{"CA"}, false) || !Matches(nil, []string{"CA"}, true) {
		t.Fatal("a chunk without a filter")
	}
}
