package store

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// MemFS is an in-memory FS that remembers what has been made durable and can
// simulate a crash (power loss or kill -9 followed by a reboot). It is meant for
// tests of code built on Log, in this package and others.
//
// Model: a file's durable content is its content at its last File.Sync; a
// directory's durable entries are its entries at its last SyncDir. Crash
// replaces the state with what a disk might hold afterwards, chosen with the
// given random source:
//   - each file keeps its durable content plus, if it was only appended to
//     since, nothing, all, or a random prefix of the unsynced bytes, possibly
//     with random 512-byte blocks of that prefix zeroed or filled with garbage
//     (torn writes, pages written back out of order);
//   - a file created since the last SyncDir of its directory survives or
//     vanishes at random; a file removed since then stays removed or comes back
//     with its durable content at random.
//
// Handles opened before a Crash return an error on every call afterwards.
// MemFS is safe for concurrent use.
type MemFS struct {
	mu      sync.Mutex
	gen     uint64
	dirs    map[string]bool
	files   map[string]*memInode // current namespace, by clean path
	durable map[string]*memInode // namespace as of the last SyncDir of each dir
}

type memInode struct {
	data    []byte
	durable []byte
}

// NewMemFS returns an empty MemFS.
func NewMemFS() *MemFS {
	return &MemFS{dirs: map[string]bool{}, files: map[string]*memInode{}, durable: map[string]*memInode{}}
}

var _ FS = (*MemFS)(nil)

// MkdirAll implements FS. Directories are durable at once.
func (m *MemFS) MkdirAll(dir string, perm os.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		m.dirs[d] = true
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// OpenFile implements FS.
func (m *MemFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name = filepath.Clean(name)
	if !m.dirs[filepath.Dir(name)] {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	ino, ok := m.files[name]
	switch {
	case ok && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrExist}
	case !ok && flag&os.O_CREATE == 0:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	case !ok:
		ino = &memInode{}
		m.files[name] = ino
	}
	if flag&os.O_TRUNC != 0 {
		ino.data = ino.data[:0]
	}
	return &memFile{fs: m, gen: m.gen, name: name, ino: ino}, nil
}

// Remove implements FS.
func (m *MemFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	name = filepath.Clean(name)
	if _, ok := m.files[name]; !ok {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	delete(m.files, name)
	return nil
}

// ReadDir implements FS.
func (m *MemFS) ReadDir(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir = filepath.Clean(dir)
	if !m.dirs[dir] {
		return nil, &fs.PathError{Op: "readdir", Path: dir, Err: fs.ErrNotExist}
	}
	var names []string
	for p := range m.files {
		if filepath.Dir(p) == dir {
			names = append(names, filepath.Base(p))
		}
	}
	sort.Strings(names)
	return names, nil
}

// SyncDir implements FS.
func (m *MemFS) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	dir = filepath.Clean(dir)
	for p := range m.durable {
		if filepath.Dir(p) == dir {
			delete(m.durable, p)
		}
	}
	for p, ino := range m.files {
		if filepath.Dir(p) == dir {
			m.durable[p] = ino
		}
	}
	return nil
}

// ReadFile returns a copy of the current content of name (test helper).
func (m *MemFS) ReadFile(name string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ino, ok := m.files[filepath.Clean(name)]
	if !ok {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
	}
	return bytes.Clone(ino.data), nil
}

// WriteFile replaces the content of an existing file name, durably (test
// helper for simulating corruption on disk).
func (m *MemFS) WriteFile(name string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ino, ok := m.files[filepath.Clean(name)]
	if !ok {
		return &fs.PathError{Op: "write", Path: name, Err: fs.ErrNotExist}
	}
	ino.data = bytes.Clone(data)
	ino.durable = bytes.Clone(data)
	return nil
}

// Crash simulates a crash: the state becomes one a disk could hold after power
// loss (see MemFS), chosen with rng. It returns a one-line description per
// file whose unsynced state was lost or mangled, for test logs.
func (m *MemFS) Crash(rng *rand.Rand) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	var notes []string
	next := map[string]*memInode{}
	paths := make([]string, 0, len(m.files)+len(m.durable))
	for p := range m.files {
		paths = append(paths, p)
	}
	for p := range m.durable {
		if _, ok := m.files[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths) // determinism for a given seed
	for _, p := range paths {
		cur, inCur := m.files[p]
		dur, inDur := m.durable[p]
		var ino *memInode
		switch {
		case inCur && inDur && cur == dur:
			ino = cur
		case inCur && rng.IntN(2) == 0: // created, entry not yet durable: survives
			ino = cur
		case inCur:
			notes = append(notes, fmt.Sprintf("%s: created but directory not synced: lost", p))
			if inDur {
				ino = dur
			}
		case rng.IntN(2) == 0: // removed, removal not durable: comes back
			notes = append(notes, fmt.Sprintf("%s: removed but directory not synced: back", p))
			ino = dur
		}
		if ino == nil {
			continue
		}
		data, note := crashContent(ino, rng)
		if note != "" {
			notes = append(notes, p+": "+note)
		}
		next[p] = &memInode{data: data, durable: bytes.Clone(data)}
	}
	m.files = next
	m.durable = map[string]*memInode{}
	for p, ino := range next {
		m.durable[p] = ino
	}
	return notes
}

// crashContent picks what a crash leaves of one file.
func crashContent(ino *memInode, rng *rand.Rand) ([]byte, string) {
	d, c := ino.durable, ino.data
	if bytes.Equal(d, c) {
		return bytes.Clone(d), ""
	}
	if len(c) < len(d) || !bytes.Equal(c[:len(d)], d) {
		// Truncated or overwritten since the last sync: either state.
		if rng.IntN(2) == 0 {
			return bytes.Clone(d), fmt.Sprintf("unsynced rewrite lost (%d bytes kept)", len(d))
		}
		return bytes.Clone(c), ""
	}
	extra := c[len(d):]
	out := bytes.Clone(d)
	switch rng.IntN(4) {
	case 0:
		return out, fmt.Sprintf("all %d unsynced bytes lost", len(extra))
	case 1:
		return append(out, extra...), ""
	case 2:
		n := rng.IntN(len(extra) + 1)
		return append(out, extra[:n]...), fmt.Sprintf("torn: kept %d of %d unsynced bytes", n, len(extra))
	default:
		n := rng.IntN(len(extra) + 1)
		out = append(out, extra[:n]...)
		mangled := 0
		for b := len(d) &^ 511; b < len(out); b += 512 {
			if b < len(d) || rng.IntN(3) != 0 {
				continue
			}
			end := min(b+512, len(out))
			garbage := rng.IntN(2) == 0
			for i := b; i < end; i++ {
				if garbage {
					out[i] = byte(rng.Uint32())
				} else {
					out[i] = 0
				}
			}
			mangled++
		}
		return out, fmt.Sprintf("torn: kept %d of %d unsynced bytes, %d blocks mangled", n, len(extra), mangled)
	}
}

type memFile struct {
	fs   *MemFS
	gen  uint64
	name string
	ino  *memInode
}

func (f *memFile) check() error {
	if f.ino == nil {
		return os.ErrClosed
	}
	if f.gen != f.fs.gen {
		return errCrashed
	}
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if off >= int64(len(f.ino.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.ino.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(); err != nil {
		return 0, err
	}
	if end := off + int64(len(p)); end > int64(len(f.ino.data)) {
		f.ino.data = append(f.ino.data, make([]byte, end-int64(len(f.ino.data)))...)
	}
	copy(f.ino.data[off:], p)
	return len(p), nil
}

func (f *memFile) Size() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(); err != nil {
		return 0, err
	}
	return int64(len(f.ino.data)), nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(); err != nil {
		return err
	}
	if size <= int64(len(f.ino.data)) {
		f.ino.data = f.ino.data[:size:size]
	} else {
		f.ino.data = append(f.ino.data, make([]byte, size-int64(len(f.ino.data)))...)
	}
	return nil
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check(); err != nil {
		return err
	}
	f.ino.durable = bytes.Clone(f.ino.data)
	return nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.ino == nil {
		return os.ErrClosed
	}
	f.ino = nil
	return nil
}
