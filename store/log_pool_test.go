package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
)

// countFS counts the files open at once (and the most ever), and notes a
// file closed while it held writes that no fsync covered.
type countFS struct {
	FS
	mu            sync.Mutex
	open, maxOpen int
	dirtyCloses   []string
}

func (c *countFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.open++
	c.maxOpen = max(c.maxOpen, c.open)
	c.mu.Unlock()
	return &countFile{File: f, fs: c, name: name}, nil
}

type countFile struct {
	File
	fs    *countFS
	name  string
	dirty bool
}

func (f *countFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	f.dirty = true
	f.fs.mu.Unlock()
	return f.File.WriteAt(p, off)
}

func (f *countFile) Sync() error {
	err := f.File.Sync()
	if err == nil {
		f.fs.mu.Lock()
		f.dirty = false
		f.fs.mu.Unlock()
	}
	return err
}

func (f *countFile) Close() error {
	f.fs.mu.Lock()
	f.fs.open--
	if f.dirty {
		f.fs.dirtyCloses = append(f.fs.dirtyCloses, f.name)
	}
	f.fs.mu.Unlock()
	return f.File.Close()
}

// TestFilePoolBoundsOpenFiles: issue 11 item 4 (storage part), "every
// durable queue holds a descriptor for its whole life". Sixty logs share a
// pool of 8 files while goroutines append, sync, read, scan, roll and
// remove segments in all of them; the files open at once never pass the
// bound by more than the operations in flight, every record reads back, no
// file with unsynced writes is closed by an eviction, and everything
// survives reopening the logs (and a crash, for what was synced).
func TestFilePoolBoundsOpenFiles(t *testing.T) {
	const (
		logs    = 60
		bound   = 8
		workers = 4
	)
	mem := NewMemFS()
	cfs := &countFS{FS: mem}
	pool := NewFilePool(bound)
	opts := Options{FS: cfs, SegmentSize: 2048, Files: pool}
	ls := make([]*Log, logs)
	for i := range ls {
		ls[i] = mustOpen(t, fmt.Sprintf("/q%02d", i), opts)
	}
	var mu sync.Mutex
	model := make([][]rec, logs) // records of each log, in order
	synced := make([]int, logs)  // model[i][:synced[i]] are durable
	seed := testSeed(t)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for range iterations(3000, 600) {
				i := rng.IntN(logs)
				// Each worker owns the logs i%workers == w for writing, so
				// that the model's order is the log's.
				l := ls[i]
				switch op := rng.IntN(100); {
				case op < 50 && i%workers == w:
					p := randPayload(rng, 300)
					pos, err := l.Append(byte(i), p)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					model[i] = append(model[i], rec{pos, byte(i), p})
					mu.Unlock()
				case op < 65 && i%workers == w:
					mu.Lock()
					n := len(model[i])
					mu.Unlock()
					if err := l.Sync(); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					synced[i] = max(synced[i], n)
					mu.Unlock()
				case op < 85:
					mu.Lock()
					var r rec
					if len(model[i]) > 0 {
						r = model[i][rng.IntN(len(model[i]))]
					}
					mu.Unlock()
					if r.payload == nil {
						continue
					}
					typ, p, err := l.ReadAt(r.pos)
					if errors.Is(err, ErrNotFound) {
						// The log's owner may have removed the record's
						// segment since it was picked: only a record
						// still in the model must be found.
						mu.Lock()
						gone := len(model[i]) == 0 || r.pos.Seg < model[i][0].pos.Seg
						mu.Unlock()
						if gone {
							continue
						}
					}
					if err != nil || typ != r.typ || !bytes.Equal(p, r.payload) {
						t.Errorf("log %d: ReadAt(%v): %v", i, r.pos, err)
						return
					}
				case op < 90:
					n := 0
					if err := l.Scan(func(Pos, byte, []byte) error { n++; return nil }); err != nil {
						t.Errorf("log %d: Scan: %v", i, err)
						return
					}
				case op < 95 && i%workers == w:
					if err := l.Roll(); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					synced[i] = len(model[i])
					mu.Unlock()
				case i%workers == w:
					// Remove the segments before the last few records.
					mu.Lock()
					m := model[i]
					var cut uint32
					if len(m) > 10 {
						cut = m[len(m)-10].pos.Seg
					}
					if cut == 0 {
						mu.Unlock()
						continue
					}
					// The model forgets the records first, so that a
					// reader whose ReadAt finds one gone sees it gone
					// from the model too.
					k := 0
					for k < len(model[i]) && model[i][k].pos.Seg < cut {
						k++
					}
					model[i] = model[i][k:]
					synced[i] = max(0, synced[i]-k)
					mu.Unlock()
					if err := l.RemoveSegmentsBefore(cut); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	st := pool.Stats()
	cfs.mu.Lock()
	maxOpen, dirty := cfs.maxOpen, cfs.dirtyCloses
	cfs.mu.Unlock()
	t.Logf("%d logs, bound %d: at most %d files open at once; %d opens, %d evictions", logs, bound, maxOpen, st.Opens, st.Evictions)
	// Each operation in flight may hold one file beyond the bound, and an
	// open counts before the evictions it causes have closed their files.
	if maxOpen > bound+2*workers {
		t.Errorf("%d files open at once, bound %d with %d workers", maxOpen, bound, workers)
	}
	if st.Evictions == 0 {
		t.Error("no file was ever closed to stay within the bound")
	}
	if len(dirty) > 0 {
		t.Errorf("files closed with writes no fsync covered: %q", dirty)
	}
	for i, l := range ls {
		checkRecords(t, scanAll(t, l), model[i])
		checkReadAt(t, l, model[i])
	}
	// Synced records survive a crash; the logs reopen within the bound.
	mem.Crash(rand.New(rand.NewPCG(seed, 99)))
	for i, l := range ls {
		l.Close()
		ls[i] = mustOpen(t, fmt.Sprintf("/q%02d", i), opts)
		got := scanAll(t, ls[i])
		if len(got) < synced[i] {
			t.Fatalf("log %d: %d records after the crash, %d were synced", i, len(got), synced[i])
		}
		checkRecords(t, got[:synced[i]], model[i][:synced[i]])
	}
	if st := pool.Stats(); st.Open > bound {
		t.Errorf("%d files open after reopening %d logs, bound %d", st.Open, logs, bound)
	}
	for _, l := range ls {
		l.Close()
	}
	if st := pool.Stats(); st.Open != 0 {
		t.Errorf("%d files still open after every log closed", st.Open)
	}
}
