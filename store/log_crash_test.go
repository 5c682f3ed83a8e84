package store

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// recorder collects a log's reports for the test log of a failing iteration.
type recorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (r *recorder) logger() *slog.Logger { return slog.New(slog.NewTextHandler(r, nil)) }

// TestCrashRecovery appends random records to a log on a MemFS with random
// Syncs, Rolls and removals, crashes the file system (dropping unsynced
// writes, keeping torn prefixes, mangling unsynced blocks), reopens the log
// and checks the invariants, several times per iteration:
//   - every record whose Sync returned nil (or that a Roll sealed) is present
//     and intact;
//   - the records recovered are the durable ones followed by a subsequence
//     of the unsynced ones, in order: none is corrupt, none is invented, only
//     records after the last durable one may be missing (a hole the crash
//     left in the unsynced tail is skipped, the intact records after it
//     kept);
//   - appends continue after recovery.
//
// Replay a failure with -store.seed=N -run TestCrashRecovery.
func TestCrashRecovery(t *testing.T) {
	t.Run("own-files", func(t *testing.T) { crashRecovery(t, false) })
	// Through a FilePool of two files: segment files are closed and
	// reopened all the time, and synced before an eviction closes them.
	t.Run("file-pool", func(t *testing.T) { crashRecovery(t, true) })
}

func crashRecovery(t *testing.T, pool bool) {
	seed := testSeed(t)
	iters := iterations(400, 60)
	var crashes, cutRecords int
	for iter := range iters {
		rng := rand.New(rand.NewPCG(seed, uint64(iter)))
		var history []string
		fail := func(format string, args ...any) {
			t.Helper()
			for _, h := range history {
				t.Log(h)
			}
			t.Fatalf("seed %d iteration %d: %s", seed, iter, fmt.Sprintf(format, args...))
		}
		fs := NewMemFS()
		rep := &recorder{}
		opts := Options{FS: fs, SegmentSize: int64(256 + rng.IntN(4096)), Logger: rep.logger()}
		if pool {
			opts.Files = NewFilePool(2)
		}
		var model []rec // records expected in the log, in order
		durable := 0    // model[:durable] must survive a crash
		rounds := 1 + rng.IntN(5)
		for round := 0; round <= rounds; round++ {
			rep.lines = nil
			l, err := OpenLog("/q", opts)
			if err != nil {
				fail("round %d: OpenLog: %v", round, err)
			}
			history = append(history, rep.lines...)
			got := scanAll(t, l)
			if len(got) > len(model) || len(got) < durable {
				fail("round %d: recovered %d records, want between %d (durable) and %d (appended)", round, len(got), durable, len(model))
			}
			same := func(a, b rec) bool {
				return a.pos == b.pos && a.typ == b.typ && bytes.Equal(a.payload, b.payload)
			}
			for i := range durable {
				if !same(got[i], model[i]) {
					fail("round %d: recovered record %d is %v, want the durable %v", round, i, got[i], model[i])
				}
			}
			// After the durable ones: a subsequence of the unsynced records
			// (a hole the crash left in them is skipped).
			for i, j := durable, durable; i < len(got); i++ {
				for j < len(model) && !same(got[i], model[j]) {
					j++
				}
				if j == len(model) {
					fail("round %d: recovered record %d (%v) is not one appended after the durable ones, in order", round, i, got[i])
				}
				j++
			}
			checkReadAt(t, l, got)
			cutRecords += len(model) - len(got)
			model, durable = got, len(got)
			if round == rounds {
				l.Close()
				break
			}
			nops := rng.IntN(300)
			for range nops {
				switch op := rng.IntN(100); {
				case op < 70:
					n := 64
					if rng.IntN(10) == 0 {
						n = int(opts.SegmentSize) * 2
					}
					typ, payload := byte(rng.Uint32()), randPayload(rng, n)
					p, err := l.Append(typ, payload)
					if err != nil {
						fail("Append: %v", err)
					}
					model = append(model, rec{p, typ, payload})
				case op < 85:
					if err := l.Sync(); err != nil {
						fail("Sync: %v", err)
					}
					durable = len(model)
				case op < 88:
					if err := l.Roll(); err != nil {
						fail("Roll: %v", err)
					}
					durable = len(model)
				case op < 91:
					segs := l.Segments()
					cut := segs[rng.IntN(len(segs))] + uint32(rng.IntN(2))
					cut = min(cut, segs[len(segs)-1])
					if err := l.RemoveSegmentsBefore(cut); err != nil {
						fail("RemoveSegmentsBefore: %v", err)
					}
					n := 0
					for n < len(model) && model[n].pos.Seg < cut {
						n++
					}
					model = model[n:]
					durable = max(0, durable-n)
					history = append(history, fmt.Sprintf("removed segments before %d (%d records)", cut, n))
				default:
					if len(model) > 0 {
						checkReadAt(t, l, []rec{model[rng.IntN(len(model))]})
					}
				}
			}
			history = append(history, fmt.Sprintf("round %d: %d records appended in all, %d durable; crash:", round, len(model), durable))
			for _, n := range fs.Crash(rng) {
				history = append(history, "  "+n)
			}
			crashes++
			// (A pooled file evicted meanwhile is reopened on the new
			// file system: that log may sync.)
			if _, err := l.Append(1, nil); err == nil && !pool {
				if err := l.Sync(); err == nil {
					fail("a log opened before the crash still syncs")
				}
			}
		}
	}
	t.Logf("%d iterations, %d crashes, %d unsynced records lost in all", iters, crashes, cutRecords)
}

// corrupter reads and writes raw segment files.
type corrupter interface {
	ReadFile(name string) ([]byte, error)
	WriteFile(name string, data []byte) error
	Remove(name string) error
}

type osCorrupter struct{}

func (osCorrupter) ReadFile(name string) ([]byte, error)     { return os.ReadFile(name) }
func (osCorrupter) WriteFile(name string, data []byte) error { return os.WriteFile(name, data, 0o644) }
func (osCorrupter) Remove(name string) error                 { return os.Remove(name) }

// corrupt damages one segment file at random and says how.
func corrupt(rng *rand.Rand, c corrupter, path string) (string, error) {
	data, err := c.ReadFile(path)
	if err != nil {
		return "", err
	}
	name := filepath.Base(path)
	if len(data) == 0 {
		return name + ": empty, left alone", nil
	}
	var how string
	switch rng.IntN(7) {
	case 0:
		n := 1 + rng.IntN(8)
		for range n {
			data[rng.IntN(len(data))] ^= 1 << rng.IntN(8)
		}
		how = fmt.Sprintf("flipped %d bits", n)
	case 1:
		at := rng.IntN(len(data))
		data = data[:at]
		how = fmt.Sprintf("truncated at %d", at)
	case 2:
		at := rng.IntN(len(data))
		n := min(len(data)-at, 1+rng.IntN(600))
		clear(data[at : at+n])
		how = fmt.Sprintf("zeroed %d bytes at %d", n, at)
	case 3:
		at := rng.IntN(len(data))
		n := min(len(data)-at, 1+rng.IntN(600))
		for i := at; i < at+n; i++ {
			data[i] = byte(rng.Uint32())
		}
		how = fmt.Sprintf("garbage over %d bytes at %d", n, at)
	case 4:
		g := randPayload(rng, 300)
		data = append(data, g...)
		how = fmt.Sprintf("appended %d bytes of garbage", len(g))
	case 5:
		at := rng.IntN(len(data))
		data[at] = byte(rng.Uint32())
		how = fmt.Sprintf("one byte at %d overwritten", at)
	default:
		return name + ": removed", c.Remove(path)
	}
	return name + ": " + how, c.WriteFile(path, data)
}

// TestCorruption damages segment files at random (flipped bits, truncation,
// zeroed or garbage ranges, garbage appended, files removed) and checks that
// OpenLog still opens the log, never panics, and that every record Scan or
// ReadAt returns is one that was written at that position; then that the log
// takes appends and keeps them across a reopen.
//
// Replay a failure with -store.seed=N -run TestCorruption.
func TestCorruption(t *testing.T) {
	seed := testSeed(t)
	for _, kind := range []string{"mem", "os"} {
		t.Run(kind, func(t *testing.T) {
			iters := iterations(300, 40)
			if kind == "os" {
				iters = iterations(40, 10)
			}
			var returned, written int
			for iter := range iters {
				rng := rand.New(rand.NewPCG(seed, uint64(iter)))
				var opts Options
				var c corrupter
				dir := "/q"
				if kind == "mem" {
					fs := NewMemFS()
					opts.FS, c = fs, fs
				} else {
					dir, c = t.TempDir(), osCorrupter{}
				}
				rep := &recorder{}
				opts.SegmentSize = int64(256 + rng.IntN(2048))
				opts.Logger = rep.logger()
				var history []string
				fail := func(format string, args ...any) {
					t.Helper()
					for _, h := range append(history, rep.lines...) {
						t.Log(h)
					}
					t.Fatalf("seed %d iteration %d: %s", seed, iter, fmt.Sprintf(format, args...))
				}
				l, err := OpenLog(dir, opts)
				if err != nil {
					fail("OpenLog: %v", err)
				}
				byPos := map[Pos]rec{}
				var all []rec
				for range 20 + rng.IntN(200) {
					r := mustAppend(t, l, byte(rng.Uint32()), randPayload(rng, 200))
					byPos[r.pos] = r
					all = append(all, r)
				}
				if err := l.Close(); err != nil {
					fail("Close: %v", err)
				}
				names, _ := listSegs(opts, dir)
				for range 1 + rng.IntN(3) {
					how, err := corrupt(rng, c, filepath.Join(dir, names[rng.IntN(len(names))]))
					if err != nil && !errors.Is(err, os.ErrNotExist) {
						fail("corrupting: %v", err)
					}
					history = append(history, how)
				}
				for pass := range 2 {
					l, err = OpenLog(dir, opts)
					if err != nil {
						fail("pass %d: OpenLog after corruption: %v", pass, err)
					}
					var prev Pos
					err = l.Scan(func(p Pos, typ byte, payload []byte) error {
						w, ok := byPos[p]
						if !ok || w.typ != typ || !bytes.Equal(w.payload, payload) {
							return fmt.Errorf("Scan returned a record at %v (type %d, %d bytes) that was not written there", p, typ, len(payload))
						}
						if !prev.Less(p) {
							return fmt.Errorf("Scan returned %v after %v", p, prev)
						}
						prev = p
						returned++
						return nil
					})
					if err != nil {
						fail("pass %d: %v", pass, err)
					}
					// Positions of records lost to the corruption may be
					// reused by later appends: byPos holds the latest.
					for _, w := range byPos {
						typ, payload, err := l.ReadAt(w.pos)
						if err == nil && (typ != w.typ || !bytes.Equal(payload, w.payload)) {
							fail("pass %d: ReadAt(%v) returned a record that was not written there", pass, w.pos)
						}
						if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrCorrupt) {
							fail("pass %d: ReadAt(%v): %v, want nil, ErrNotFound or ErrCorrupt", pass, w.pos, err)
						}
					}
					// The log takes appends after recovery, and keeps them.
					r := mustAppend(t, l, 0xAB, fmt.Appendf(nil, "after corruption %d", pass))
					byPos[r.pos] = r
					all = append(all, r)
					if err := l.Close(); err != nil {
						fail("Close: %v", err)
					}
					written++
				}
				l = mustOpen(t, dir, opts)
				got := scanAll(t, l)
				if len(got) < 2 || got[len(got)-1].typ != 0xAB || got[len(got)-2].typ != 0xAB {
					fail("the records appended after recovery are not the last two of the log: %v", got)
				}
				l.Close()
				written += len(all)
			}
			t.Logf("%d iterations; %d records returned by scans, all verified", iters, returned)
		})
	}
}

func listSegs(opts Options, dir string) ([]string, error) {
	fs := opts.FS
	if fs == nil {
		fs = OSFS{}
	}
	names, err := fs.ReadDir(dir)
	var segs []string
	for _, n := range names {
		if _, ok := parseSegName(n); ok {
			segs = append(segs, n)
		}
	}
	return segs, err
}

// FuzzRecover opens a log whose only segment holds arbitrary bytes: OpenLog
// must not fail or panic, every record returned must pass its checksum, and
// appends must work after recovery.
func FuzzRecover(f *testing.F) {
	seg := appendSegHeader(nil)
	for i := range 5 {
		seg = appendRecord(seg, byte(i), bytes.Repeat([]byte{byte(i)}, i*7))
	}
	f.Add(seg)
	f.Add(seg[:len(seg)-3])
	f.Add(seg[:segHeaderSize])
	f.Add([]byte{})
	f.Add(append(bytes.Clone(seg), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := NewMemFS()
		fs.MkdirAll("/q", 0o755)
		file, _ := fs.OpenFile("/q/"+segName(3), os.O_CREATE|os.O_RDWR, 0o644)
		file.WriteAt(data, 0)
		file.Close()
		l, err := OpenLog("/q", Options{FS: fs})
		if err != nil {
			t.Fatalf("OpenLog: %v", err)
		}
		var n int
		if err := l.Scan(func(p Pos, typ byte, payload []byte) error {
			if int(p.Off)+recHeaderSize+len(payload) > len(data) ||
				!bytes.Equal(data[int(p.Off)+recHeaderSize:int(p.Off)+recHeaderSize+len(payload)], payload) {
				return fmt.Errorf("record at %v is not the bytes of the file", p)
			}
			n++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		r := mustAppend(t, l, 1, []byte("after"))
		l.Close()
		l = mustOpen(t, "/q", Options{FS: fs})
		defer l.Close()
		got := scanAll(t, l)
		if len(got) != n+1 || got[n].pos != r.pos {
			t.Fatalf("after reopen: %d records, want %d ending at %v", len(got), n+1, r.pos)
		}
	})
}
