package wal

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var template struct {
	once sync.Once
	seg  []byte // a valid segment: 40 records, one a copy made by Compact
	n    int
}

func validSegment(t testing.TB) ([]byte, int) {
	template.once.Do(func() {
		dir, err := os.MkdirTemp("", "walfuzz")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		w, err := Open(Options{Dir: dir, Logger: quiet(), NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		var recs []Record
		for i := uint64(0); i < 40; i++ {
			recs = append(recs, rec(i, 0))
		}
		pos, err := w.Append(recs)
		if err != nil {
			t.Fatal(err)
		}
		w.wmu.Lock()
		err = w.appendLocked([]Record{rec(3, 0)}, make([]Pos, 1), []uint64{pos[3].key()})
		w.wmu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
		template.seg, err = os.ReadFile(filepath.Join(dir, segName(1)))
		if err != nil {
			t.Fatal(err)
		}
		template.n = 40
	})
	return template.seg, template.n
}

// checkArbitrary writes data as one segment file next to a valid one (data
// as the last segment if tail, else as a sealed one before it) and checks
// that Open never panics, recovers or refuses cleanly, and that a
// recovered log replays, takes an append and replays it after a reopen.
func checkArbitrary(t *testing.T, data []byte, tail bool) {
	valid, _ := validSegment(t)
	dir, err := os.MkdirTemp("", "walfuzz")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	first, second := valid, data
	if !tail {
		first, second = data, valid
	}
	if err := os.WriteFile(filepath.Join(dir, segName(1)), first, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, segName(2)), second, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := Open(Options{Dir: dir, SegmentSize: 1 << 20, Logger: quiet(), NoSync: true})
	if err != nil {
		var ce *CorruptError
		if tail || !errors.As(err, &ce) {
			t.Fatalf("Open (tail %v): %v", tail, err)
		}
		return
	}
	var n int
	var last Pos
	err = w.Replay(func(p Pos, r Record) error {
		n++
		if _, err := w.Read(p); err != nil {
			t.Fatalf("Read(%v) of a replayed record: %v", p, err)
		}
		last = p
		return nil
	})
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	_ = last
	if _, err := w.Append([]Record{{Group: 9, Index: 1 << 40, Data: []byte("end")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Compact(func(Pos, Pos, Record) {}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w, err = Open(Options{Dir: dir, SegmentSize: 1 << 20, Logger: quiet(), NoSync: true})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer w.Close()
	var m int
	var end bool
	if err := w.Replay(func(p Pos, r Record) error {
		m++
		end = r.Index == 1<<40 && bytes.Equal(r.Data, []byte("end"))
		return nil
	}); err != nil {
		t.Fatalf("second Replay: %v", err)
	}
	if m != n+1 || !end {
		t.Fatalf("second replay: %d records (end %v), want %d then the appended one", m, end, n+1)
	}
}

// issue 14: Open and Replay of arbitrary bytes never panic: a last segment
// is recovered (its damaged tail cut), a sealed one recovered or refused.
func FuzzOpen(f *testing.F) {
	valid, _ := validSegment(f)
	f.Add(valid, true)
	f.Add(valid, false)
	f.Add(valid[:len(valid)/2], true)
	f.Add(valid[:3], true)
	f.Add([]byte{}, true)
	f.Add(bytes.Repeat([]byte{0}, 100), true)
	f.Fuzz(func(t *testing.T, data []byte, tail bool) {
		checkArbitrary(t, data, tail)
	})
}

// issue 14: the fuzz check over random bytes and random mutations of a
// valid segment (bounded: about 2 seconds).
func TestOpenRandomBytes(t *testing.T) {
	valid, _ := validSegment(t)
	rng := rand.New(rand.NewPCG(11, 12))
	deadline := time.Now().Add(2 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		var data []byte
		switch i % 3 {
		case 0:
			data = make([]byte, rng.IntN(300))
			for j := range data {
				data[j] = byte(rng.UintN(256))
			}
			if len(data) >= hdrSize && rng.IntN(2) == 0 {
				copy(data, valid[:hdrSize])
			}
		default:
			data = bytes.Clone(valid[:rng.IntN(len(valid)+1)])
			for k := 1 + rng.IntN(4); k > 0 && len(data) > 0; k-- {
				data[rng.IntN(len(data))] ^= byte(1 + rng.IntN(255))
			}
		}
		checkArbitrary(t, data, i%2 == 0)
		if t.Failed() {
			t.Fatalf("iteration %d failed", i)
		}
	}
}
