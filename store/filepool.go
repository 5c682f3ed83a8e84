package store

import (
	"container/list"
	"os"
	"sync"
	"sync/atomic"
)

// A FilePool bounds the number of segment files open at once across the logs
// that share it (Options.Files), so that the file descriptors a node needs do
// not grow with its number of queues: thousands of durable queues run under
// a descriptor limit of 1,024.
//
// Each segment's file is opened on demand and stays open while it is used
// and afterwards, until more than Max files are open: then the least
// recently used ones that no operation is using are closed (a file in use is
// never closed, so the bound may be passed briefly by the operations in
// flight). A file that was written since its last fsync is fsynced before it
// is closed, so that closing it never loses the durability a later Sync
// through a new descriptor would rely on; if that fsync fails, the next Sync
// of the file reports the error, and the log fails as on any fsync error.
// Logs that share a pool must use files of one FS each. A FilePool is safe
// for concurrent use.
type FilePool struct {
	max int

	mu   sync.Mutex
	open int
	lru  list.List // of *pooledFile: open, unused; least recently used first

	opens, evictions atomic.Uint64
}

// NewFilePool returns a pool that keeps at most max files open (max < 1
// means 1).
func NewFilePool(n int) *FilePool {
	return &FilePool{max: max(n, 1)}
}

// FilePoolStats are a FilePool's counters.
type FilePoolStats struct {
	Open      int    // files open now
	Max       int    // the bound
	Opens     uint64 // files opened (including reopened), in all
	Evictions uint64 // files closed to stay within the bound, in all
}

// Stats returns the pool's counters.
func (p *FilePool) Stats() FilePoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return FilePoolStats{Open: p.open, Max: p.max, Opens: p.opens.Load(), Evictions: p.evictions.Load()}
}

// pooledFile is a File whose descriptor the pool may close between
// operations; each operation reopens it if needed.
type pooledFile struct {
	pool   *FilePool
	fs     FS
	name   string
	noSync bool

	// Guarded by pool.mu.
	f        File          // nil while closed
	refs     int           // operations in flight
	elem     *list.Element // in pool.lru while open and unused
	writes   uint64        // writes and truncations done
	synced   uint64        // writes covered by the last successful fsync
	evictErr error         // an fsync before an eviction failed
	closed   bool
}

var _ File = (*pooledFile)(nil)

// adopt puts f, just opened as name, in the pool.
func (p *FilePool) adopt(fs FS, name string, f File, noSync bool) *pooledFile {
	h := &pooledFile{pool: p, fs: fs, name: name, noSync: noSync, f: f}
	p.opens.Add(1)
	p.mu.Lock()
	p.open++
	h.elem = p.lru.PushBack(h)
	victims := p.evictLocked()
	p.mu.Unlock()
	p.closeVictims(victims)
	return h
}

type victim struct {
	h      *pooledFile
	f      File
	writes uint64 // to fsync before closing, if more than h.synced
	dirty  bool
}

// evictLocked takes unused files off the pool while more than max are
// open; the caller closes them (closeVictims) without holding mu.
func (p *FilePool) evictLocked() []victim {
	var vs []victim
	for p.open > p.max && p.lru.Len() > 0 {
		h := p.lru.Remove(p.lru.Front()).(*pooledFile)
		h.elem = nil
		vs = append(vs, victim{h: h, f: h.f, writes: h.writes, dirty: h.writes > h.synced && !h.noSync})
		h.f = nil
		p.open--
	}
	return vs
}

func (p *FilePool) closeVictims(vs []victim) {
	for _, v := range vs {
		p.evictions.Add(1)
		if v.dirty {
			err := v.f.Sync()
			p.mu.Lock()
			if err != nil {
				v.h.evictErr = err
			} else {
				v.h.synced = max(v.h.synced, v.writes)
			}
			p.mu.Unlock()
		}
		v.f.Close()
	}
}

// get returns the open file for one operation; put ends it.
func (h *pooledFile) get() (File, error) {
	p := h.pool
	p.mu.Lock()
	if h.closed {
		p.mu.Unlock()
		return nil, os.ErrClosed
	}
	h.refs++
	if h.elem != nil {
		p.lru.Remove(h.elem)
		h.elem = nil
	}
	if f := h.f; f != nil {
		p.mu.Unlock()
		return f, nil
	}
	p.open++ // counted now, so that concurrent opens evict for it
	victims := p.evictLocked()
	p.mu.Unlock()
	p.closeVictims(victims)

	f, err := h.fs.OpenFile(h.name, os.O_RDWR, 0)
	p.mu.Lock()
	if err != nil {
		p.open--
		h.refs--
		p.mu.Unlock()
		return nil, err
	}
	p.opens.Add(1)
	if cur := h.f; cur != nil { // opened concurrently by another operation
		p.open--
		p.mu.Unlock()
		f.Close()
		return cur, nil
	}
	h.f = f
	p.mu.Unlock()
	return f, nil
}

func (h *pooledFile) put(wrote bool) {
	p := h.pool
	p.mu.Lock()
	h.refs--
	if wrote {
		h.writes++
	}
	var victims []victim
	if h.refs == 0 && h.f != nil && !h.closed {
		h.elem = p.lru.PushBack(h)
		victims = p.evictLocked()
	}
	p.mu.Unlock()
	p.closeVictims(victims)
}

func (h *pooledFile) ReadAt(b []byte, off int64) (int, error) {
	f, err := h.get()
	if err != nil {
		return 0, err
	}
	defer h.put(false)
	return f.ReadAt(b, off)
}

func (h *pooledFile) WriteAt(b []byte, off int64) (int, error) {
	f, err := h.get()
	if err != nil {
		return 0, err
	}
	defer h.put(true)
	return f.WriteAt(b, off)
}

func (h *pooledFile) Truncate(size int64) error {
	f, err := h.get()
	if err != nil {
		return err
	}
	defer h.put(true)
	return f.Truncate(size)
}

func (h *pooledFile) Size() (int64, error) {
	f, err := h.get()
	if err != nil {
		return 0, err
	}
	defer h.put(false)
	return f.Size()
}

// Sync fsyncs the file (through whichever descriptor is open: an fsync
// covers every write to the file, through any descriptor). It reports a
// failed fsync that an eviction did first.
func (h *pooledFile) Sync() error {
	f, err := h.get()
	if err != nil {
		return err
	}
	defer h.put(false)
	p := h.pool
	p.mu.Lock()
	w, eerr := h.writes, h.evictErr
	h.evictErr = nil
	p.mu.Unlock()
	if eerr != nil {
		return eerr
	}
	if err := f.Sync(); err != nil {
		return err
	}
	p.mu.Lock()
	h.synced = max(h.synced, w)
	p.mu.Unlock()
	return nil
}

// Close closes the file for good (the segment is closed or removed).
func (h *pooledFile) Close() error {
	p := h.pool
	p.mu.Lock()
	if h.closed {
		p.mu.Unlock()
		return os.ErrClosed
	}
	h.closed = true
	if h.elem != nil {
		p.lru.Remove(h.elem)
		h.elem = nil
	}
	f := h.f
	h.f = nil
	if f != nil {
		p.open--
	}
	p.mu.Unlock()
	if f == nil {
		return nil
	}
	return f.Close()
}
