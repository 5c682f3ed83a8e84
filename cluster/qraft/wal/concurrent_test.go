package wal

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// issue 14: Read runs concurrently with Append, Sync, Release and Compact
// (run with -race): a writer appends batches and syncs, a releaser drops
// most records and compacts, updating the host-side index from the move
// callback, and readers read records by the index's current position and
// check their contents.
func TestConcurrentReadAppend(t *testing.T) {
	w := open(t, t.TempDir(), 16<<10)
	defer w.Close()

	var mu sync.Mutex // the "host index"
	index := map[uint64]Pos{}
	var ids []uint64 // ids still live
	var done, writerDone atomic.Bool
	var wg sync.WaitGroup

	wg.Add(1)
	go func() { // writer
		defer wg.Done()
		defer writerDone.Store(true)
		next := uint64(0)
		for b := 0; b < 300; b++ {
			n := 1 + b%40
			recs := make([]Record, n)
			for i := range recs {
				recs[i] = rec(next+uint64(i), 0)
			}
			// The index is updated under the host's lock together with
			// the Append: a concurrent Compact may move a record as soon
			// as Append returns (if its segment was sealed meanwhile).
			mu.Lock()
			pos, err := w.Append(recs)
			if err != nil {
				mu.Unlock()
				t.Error(err)
				return
			}
			for i, p := range pos {
				index[next+uint64(i)] = p
				ids = append(ids, next+uint64(i))
			}
			mu.Unlock()
			if err := w.Sync(); err != nil {
				t.Error(err)
				return
			}
			next += uint64(n)
		}
	}()

	wg.Add(1)
	go func() { // releaser + compactor
		defer wg.Done()
		defer done.Store(true)
		rng := rand.New(rand.NewPCG(5, 6))
		// Rounds go on after the writer is done until compaction happened
		// (the writer may finish first on a fast machine).
		for after := 0; !writerDone.Load() || after < 10 || w.Stats().Moved == 0; {
			if writerDone.Load() {
				if after++; after > 1000 {
					t.Error("no compaction after 1000 rounds")
					return
				}
			}
			mu.Lock()
			var rel []Pos
			keep := ids[:0]
			for _, id := range ids {
				if id%10 != 0 && rng.IntN(2) == 0 {
					rel = append(rel, index[id])
					delete(index, id)
				} else {
					keep = append(keep, id)
				}
			}
			ids = keep
			mu.Unlock()
			w.ReleaseAll(rel)
			chk := func(step string) {
				mu.Lock()
				defer mu.Unlock()
				for _, id := range ids {
					if _, err := w.Read(index[id]); err != nil && !errorsIsGone(err) {
						t.Errorf("%s: %d at %v: %v %s", step, id, index[id], err, w.debugPos(index[id]))
					}
				}
			}
			chk("release")
			_, err := w.Compact(func(old, new Pos, r Record) {
				mu.Lock()
				if index[r.Index] != old {
					t.Errorf("move of %d from %v, index has %v", r.Index, old, index[r.Index])
				}
				index[r.Index] = new
				mu.Unlock()
			})
			if err != nil {
				t.Error(err)
				return
			}
			chk("compact")
		}
	}()

	var reads atomic.Int64
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(seed uint64) { // readers
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 7))
			for !done.Load() || reads.Load() < 2000 {
				mu.Lock()
				if len(ids) == 0 {
					mu.Unlock()
					continue
				}
				id := ids[rng.IntN(len(ids))]
				p := index[id]
				mu.Unlock()
				r, err := w.Read(p)
				if errors.Is(err, ErrReleased) || errors.Is(err, ErrGone) {
					// Released (or moved twice) after we looked it up: check
					// that it is indeed no longer at p in the index.
					mu.Lock()
					q, ok := index[id]
					mu.Unlock()
					if ok && q == p && errors.Is(err, ErrReleased) {
						t.Errorf("Read(%v) of live record %d: %v", p, id, err)
						return
					}
					continue
				}
				if err != nil {
					t.Errorf("Read(%v) of %d: %v: %s", p, id, err, w.debugPos(p))
					return
				}
				if !sameRec(r, rec(id, 0)) {
					t.Errorf("Read(%v) = record %d, want %d", p, r.Index, id)
					return
				}
				reads.Add(1)
			}
		}(uint64(g))
	}
	wg.Wait()
	st := w.Stats()
	t.Logf("reads %d, stats %+v", reads.Load(), st)
	if st.Moved == 0 || st.SegmentsDeleted == 0 {
		t.Fatalf("the test did not exercise compaction: %+v", st)
	}
	// Every live record still reads right.
	for _, id := range ids {
		r, err := w.Read(index[id])
		if err != nil || !sameRec(r, rec(id, 0)) {
			t.Fatalf("final Read of %d at %v: %v", id, index[id], err)
		}
	}
}

func errorsIsGone(err error) bool { return errors.Is(err, ErrGone) }
