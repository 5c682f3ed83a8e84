package wal

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

type mrec struct {
	id     uint64
	pos    Pos
	orig   Pos // the position Append gave
	live   bool
	synced bool // a Sync returned after its Append
	gone   bool // lost in a crash, or known deleted
}

// issue 14: random sequences of Append, Sync, Release, Retain, Compact,
// Read, crash (losing what no Sync covered) and reopen, checked against a
// model: Replay hands appended records only, each once, in append order,
// every live synced record among them, at its current position; Read returns
// every live record; Stats agree on the live count.
func TestModelRandom(t *testing.T) {
	deadline := time.Now().Add(3 * time.Second)
	seed := uint64(1)
	for ; seed < 1000 && time.Now().Before(deadline); seed++ {
		modelRun(t, seed)
		if t.Failed() {
			t.Fatalf("seed %d failed", seed)
		}
	}
	t.Logf("%d seeds", seed-1)
}

func modelRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	dir := t.TempDir()
	segSize := int64(4096 + rng.IntN(3)*4096)
	w := open(t, dir, segSize)
	defer func() { w.Close() }()
	var recs []*mrec
	byID := map[uint64]*mrec{}
	refs := map[uint64]int{} // extra references
	next := uint64(0)
	live := func() []*mrec {
		var out []*mrec
		for _, r := range recs {
			if r.live && !r.gone {
				out = append(out, r)
			}
		}
		return out
	}
	reopen := func(crash bool) {
		if crash {
			if err := w.CrashForTest(); err != nil {
				t.Fatalf("seed %d: crash: %v", seed, err)
			}
		} else if err := w.Close(); err != nil {
			t.Fatalf("seed %d: close: %v", seed, err)
		}
		w = open(t, dir, segSize)
		seen := map[uint64]Pos{}
		last := int64(-1)
		err := w.Replay(func(p Pos, r Record) error {
			m := byID[r.Index]
			if m == nil || m.gone {
				t.Fatalf("seed %d: replay handed unknown or lost record %d", seed, r.Index)
			}
			if !sameRec(r, rec(r.Index, 0)) {
				t.Fatalf("seed %d: replay record %d content differs", seed, r.Index)
			}
			if _, dup := seen[r.Index]; dup {
				t.Fatalf("seed %d: record %d handed twice", seed, r.Index)
			}
			if int64(r.Index) <= last {
				t.Fatalf("seed %d: record %d handed after %d", seed, r.Index, last)
			}
			last = int64(r.Index)
			if m.live && p != m.pos {
				t.Fatalf("seed %d: live record %d at %v, model has %v", seed, r.Index, p, m.pos)
			}
			seen[r.Index] = p
			if !m.live {
				w.Release(p) // the host re-releases what it no longer needs
			}
			return nil
		})
		if err != nil {
			t.Fatalf("seed %d: replay: %v", seed, err)
		}
		refs = map[uint64]int{}
		for _, m := range recs {
			if m.gone || !m.live {
				continue
			}
			if _, ok := seen[m.id]; !ok {
				if m.synced || !crash {
					t.Fatalf("seed %d: live record %d (synced %v) not replayed after %s", seed, m.id, m.synced, map[bool]string{true: "crash", false: "close"}[crash])
				}
				m.gone = true
			}
			m.synced = true // what came back is on disk
		}
	}
	for step := 0; step < 150; step++ {
		switch op := rng.IntN(100); {
		case op < 35: // append
			n := 1 + rng.IntN(20)
			batch := make([]Record, n)
			for i := range batch {
				batch[i] = rec(next+uint64(i), 0)
			}
			pos, err := w.Append(batch)
			if err != nil {
				t.Fatalf("seed %d: append: %v", seed, err)
			}
			for i, p := range pos {
				m := &mrec{id: next + uint64(i), pos: p, orig: p, live: true}
				recs = append(recs, m)
				byID[m.id] = m
			}
			next += uint64(n)
		case op < 50: // sync
			if err := w.Sync(); err != nil {
				t.Fatalf("seed %d: sync: %v", seed, err)
			}
			for _, m := range recs {
				m.synced = true
			}
		case op < 75: // release some
			l := live()
			for k := rng.IntN(len(l) + 1); k > 0; k-- {
				m := l[rng.IntN(len(l))]
				if !m.live {
					continue
				}
				w.Release(m.pos)
				if refs[m.id] > 0 {
					refs[m.id]--
				} else {
					m.live = false
				}
			}
		case op < 78: // retain
			if l := live(); len(l) > 0 {
				m := l[rng.IntN(len(l))]
				if err := w.Retain(m.pos); err != nil {
					t.Fatalf("seed %d: retain %d: %v", seed, m.id, err)
				}
				refs[m.id]++
			}
		case op < 88: // compact
			_, err := w.Compact(func(old, new Pos, r Record) {
				m := byID[r.Index]
				if m == nil || m.pos != old || !m.live {
					t.Fatalf("seed %d: move of %d from %v: model %+v", seed, r.Index, old, m)
				}
				m.pos = new
			})
			if err != nil {
				t.Fatalf("seed %d: compact: %v", seed, err)
			}
		case op < 94: // read
			for _, m := range live() {
				r, err := w.Read(m.pos)
				if err != nil || !sameRec(r, rec(m.id, 0)) {
					t.Fatalf("seed %d: read %d at %v: %v", seed, m.id, m.pos, err)
				}
			}
		case op < 97:
			reopen(true)
		default:
			reopen(false)
		}
		var nl int64
		var oldest Pos
		for _, m := range live() {
			nl++
			if oldest.IsZero() || m.orig.Less(oldest) {
				oldest = m.orig
			}
		}
		st := w.Stats()
		if st.LiveRecords != nl {
			t.Fatalf("seed %d step %d: Stats.LiveRecords %d, model %d", seed, step, st.LiveRecords, nl)
		}
		if nl > 0 && (st.Oldest.IsZero() || oldest.Less(st.Oldest)) {
			t.Fatalf("seed %d step %d: Stats.Oldest %v after live record at %v", seed, step, st.Oldest, oldest)
		}
	}
	// Everything released: only the head remains.
	var all []Pos
	for _, m := range live() {
		all = append(all, m.pos)
		for k := refs[m.id]; k > 0; k-- {
			all = append(all, m.pos)
		}
	}
	w.ReleaseAll(all)
	if _, err := w.Compact(func(Pos, Pos, Record) { t.Fatal("move with nothing live") }); err != nil && !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Segments != 1 || st.LiveRecords != 0 {
		t.Fatalf("seed %d: after releasing everything: %+v", seed, st)
	}
}
