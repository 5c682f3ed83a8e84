package streamlog

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/warrenmq/warren/store"
)

// raftEntry is a one-record chunk as a leader proposes it.
func raftEntry(t *testing.T, i int, writer string) []byte {
	t.Helper()
	b := &Batch{Entries: 1, Records: 1, Data: AppendEntry(nil, fmt.Appendf(nil, "r%d", i)), Timestamp: int64(1000 + i)}
	if writer != "" {
		b.Writers = map[string]uint64{writer: uint64(i)}
	}
	raw, err := EncodeChunk(b)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func openRaft(t *testing.T, fs store.FS, opts Options) *Log {
	t.Helper()
	opts.FS, opts.Raft = fs, true
	l, err := Open("/s", opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A Raft log numbers its entries from 1 across segments (the tracking
// snapshots that open segments are not entries), keeps their terms, and
// shows readers what is committed only, after a restart too.
func TestRaftLogNumbering(t *testing.T) {
	fs := store.NewMemFS()
	l := openRaft(t, fs, Options{MaxSegmentChunks: 4})
	if l.FirstIndex() != 1 || l.LastIndex() != 0 {
		t.Fatalf("empty: first %d last %d", l.FirstIndex(), l.LastIndex())
	}
	for i := 1; i <= 10; i++ {
		term := uint64(1 + i/4)
		if _, err := l.AppendRaw(raftEntry(t, i, "w"), term); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.AppendRaw(RaftChunk(0, nil, 0), 3); err != nil { // a leader's empty entry
		t.Fatal(err)
	}
	if l.LastIndex() != 11 || l.Info().Segments < 3 {
		t.Fatalf("last %d, %d segments", l.LastIndex(), l.Info().Segments)
	}
	for i := uint64(1); i <= 10; i++ {
		if term, err := l.Term(i); err != nil || term != 1+i/4 {
			t.Fatalf("term of %d: %d %v", i, term, err)
		}
	}
	var got []string
	if err := l.Entries(3, 12, 1<<20, func(ord uint64, raw []byte, term uint64) error {
		h, _ := ParseHeader(raw)
		got = append(got, fmt.Sprintf("%d:%d:%d", ord, h.Type, term))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 9 || got[0] != "3:0:1" || got[8] != "11:3:3" {
		t.Fatalf("entries 3..11: %v", got)
	}
	if n := len(readRaft(t, l)); n != 0 {
		t.Fatalf("readers see %d records before any commit", n)
	}
	if err := l.CommitTo(6); err != nil {
		t.Fatal(err)
	}
	if got := readRaft(t, l); len(got) != 6 {
		t.Fatalf("readers see %v after committing 6 entries", got)
	}
	l.Sync()
	l.Close()
	l = openRaft(t, fs, Options{MaxSegmentChunks: 4})
	defer l.Close()
	if l.LastIndex() != 11 || l.CommittedIndex() != 0 {
		t.Fatalf("reopened: last %d committed %d", l.LastIndex(), l.CommittedIndex())
	}
	if n := len(readRaft(t, l)); n != 0 {
		t.Fatalf("readers see %d records after a restart, before the group commits", n)
	}
	if term, _ := l.Term(10); term != 3 {
		t.Fatalf("term of 10 after a restart: %d", term)
	}
	if seq, _ := l.WriterSeq("w"); seq != 10 {
		t.Fatalf("writer seq %d", seq)
	}
}

// Truncating the uncommitted tail, also across segments, leaves a log
// that appends on from there, with the tracking state of what is left.
func TestRaftLogTruncate(t *testing.T) {
	for _, cut := range []uint64{9, 7, 5, 4} {
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			fs := store.NewMemFS()
			l := openRaft(t, fs, Options{MaxSegmentChunks: 3})
			defer l.Close()
			for i := 1; i <= 10; i++ {
				if _, err := l.AppendRaw(raftEntry(t, i, "w"), 1); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.CommitTo(3); err != nil {
				t.Fatal(err)
			}
			if err := l.TruncateFrom(2); err == nil {
				t.Fatal("truncated a committed entry")
			}
			if err := l.TruncateFrom(cut); err != nil {
				t.Fatal(err)
			}
			if l.LastIndex() != cut-1 {
				t.Fatalf("last %d after cutting from %d", l.LastIndex(), cut)
			}
			if seq, _ := l.WriterSeq("w"); seq != cut-1 {
				t.Fatalf("writer seq %d after cutting from %d", seq, cut)
			}
			for i := int(cut); i <= 12; i++ {
				if _, err := l.AppendRaw(raftEntry(t, 100+i, ""), 2); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.CommitTo(12); err != nil {
				t.Fatal(err)
			}
			offs := readRaft(t, l)
			if len(offs) != 12 {
				t.Fatalf("read %d records: %v", len(offs), offs)
			}
			for i := 1; i < len(offs); i++ {
				if offs[i] <= offs[i-1] {
					t.Fatalf("offsets go back: %v", offs)
				}
			}
			if term, _ := l.Term(12); term != 2 {
				t.Fatalf("term of 12: %d", term)
			}
		})
	}
}

// The retention keeps what is not committed and records the numbering
// of the first segment kept; Reset starts an empty log at a snapshot.
func TestRaftLogRetentionAndReset(t *testing.T) {
	fs := store.NewMemFS()
	l := openRaft(t, fs, Options{MaxSegmentChunks: 3, MaxBytes: 1})
	for i := 1; i <= 9; i++ {
		if _, err := l.AppendRaw(raftEntry(t, i, ""), uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if l.FirstIndex() != 1 {
		t.Fatalf("the retention dropped uncommitted entries: first %d", l.FirstIndex())
	}
	if err := l.CommitTo(9); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Retain(); err != nil {
		t.Fatal(err)
	}
	first := l.FirstIndex()
	if first <= 1 {
		t.Fatalf("nothing dropped: first %d", first)
	}
	idx, term := l.Base()
	if idx != first-1 || term != first-1 { // entry i has term i
		t.Fatalf("base %d/%d, first %d", idx, term, first)
	}
	if _, err := l.Term(first - 2); !errors.Is(err, ErrCompacted) {
		t.Fatalf("term before the base: %v", err)
	}
	l.Close()
	l = openRaft(t, fs, Options{MaxSegmentChunks: 3, MaxBytes: 1})
	if l.FirstIndex() != first || l.LastIndex() != 9 {
		t.Fatalf("reopened: first %d last %d, want %d and 9", l.FirstIndex(), l.LastIndex(), first)
	}
	if i, tm := l.Base(); i != first-1 || tm != first-1 {
		t.Fatalf("reopened base %d/%d", i, tm)
	}
	// a snapshot from a leader far ahead
	if err := l.Reset(500, 40, 7, nil); err != nil {
		t.Fatal(err)
	}
	if l.FirstIndex() != 40 || l.LastIndex() != 39 || l.Info().Next != 500 {
		t.Fatalf("after reset: first %d last %d next %d", l.FirstIndex(), l.LastIndex(), l.Info().Next)
	}
	if _, err := l.AppendRaw(raftEntry(t, 40, ""), 8); err != nil {
		t.Fatal(err)
	}
	l.Sync()
	l.Close()
	l = openRaft(t, fs, Options{})
	defer l.Close()
	if l.FirstIndex() != 40 || l.LastIndex() != 40 || l.Info().FirstOffset != 500 {
		t.Fatalf("after reset and reopen: first %d last %d first offset %d", l.FirstIndex(), l.LastIndex(), l.Info().FirstOffset)
	}
	if term, _ := l.Term(39); term != 7 {
		t.Fatalf("the base's term: %d", term)
	}
}

// A crash keeps the synced entries and their numbering.
func TestRaftLogCrash(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 2))
		fs := store.NewMemFS()
		l := openRaft(t, fs, Options{MaxSegmentChunks: 4})
		synced := uint64(0)
		for i := 1; i <= 25; i++ {
			if _, err := l.AppendRaw(raftEntry(t, i, "w"), 1); err != nil {
				t.Fatal(err)
			}
			if rng.IntN(3) == 0 {
				if err := l.Sync(); err != nil {
					t.Fatal(err)
				}
				synced = uint64(i)
			}
		}
		fs.Crash(rng)
		l = openRaft(t, fs, Options{MaxSegmentChunks: 4})
		last := l.LastIndex()
		if last < synced {
			t.Fatalf("seed %d: %d entries synced, %d kept", seed, synced, last)
		}
		var ords []uint64
		if err := l.Entries(1, last+1, 1<<30, func(ord uint64, raw []byte, _ uint64) error {
			c := Chunk{Raw: raw}
			c.Header, _ = ParseHeader(raw)
			e, _, err := NextEntry(c.Data())
			if err != nil || string(e.Data) != fmt.Sprintf("r%d", ord) {
				return fmt.Errorf("entry %d holds %q (%v)", ord, e.Data, err)
			}
			ords = append(ords, ord)
			return nil
		}); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if uint64(len(ords)) != last {
			t.Fatalf("seed %d: read %d entries of %d", seed, len(ords), last)
		}
		l.Close()
	}
}

// readRaft reads the offsets of the records readers see.
func readRaft(t *testing.T, l *Log) []uint64 {
	t.Helper()
	r := l.NewReader(l.First())
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
			_, rest, err := NextEntry(data)
			if err != nil {
				t.Fatal(err)
			}
			offs = append(offs, off)
			off++
			data = rest
		}
	}
}
