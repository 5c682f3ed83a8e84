package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/warrenmq/warren/store"
)

// Record is one entry of the log. Group, Index, Term and Kind are the
// host's: the WAL stores them and hands them back, and gives no meaning to
// any of them.
type Record struct {
	Group, Index, Term uint64
	Kind               byte
	Data               []byte
}

// Pos is where a record is: its segment and its offset in it. Positions are
// comparable and ordered (Less) like the appends that made them. The zero
// Pos is never a record's.
type Pos struct {
	Seg uint32
	Off uint32
}

func (p Pos) key() uint64 { return uint64(p.Seg)<<32 | uint64(p.Off) }

func posOf(k uint64) Pos { return Pos{Seg: uint32(k >> 32), Off: uint32(k)} }

// Less reports whether p is before q in the log.
func (p Pos) Less(q Pos) bool { return p.key() < q.key() }

// IsZero reports whether p is the zero Pos.
func (p Pos) IsZero() bool { return p == Pos{} }

func (p Pos) String() string { return fmt.Sprintf("%d:%d", p.Seg, p.Off) }

// Options configure a WAL.
type Options struct {
	// Dir holds the segment files; it is created if missing. One WAL per
	// directory (not enforced: the node holds a lock on its data directory).
	Dir string
	// SegmentSize is the size at which the head segment is sealed and a new
	// one started (default 64 MiB, at most MaxSegmentSize). A record larger
	// than that gets a segment of its own.
	SegmentSize int64
	// NoSync skips fdatasync (tests and benchmarks only). Stats.Syncs still
	// counts the syncs that would have been made.
	NoSync bool
	// Preallocate writes segments by overwriting prepared zero-filled files
	// instead of appending (prealloc.go): a cheaper fdatasync, at the cost
	// of writing every segment twice. Off by default; ignored under NoSync.
	Preallocate bool
	// Logger receives recovery warnings (default slog.Default()).
	Logger *slog.Logger
	// BufferSize is how many appended bytes are buffered before they are
	// written to the file without waiting for Sync (default 1 MiB).
	BufferSize int
	// CompactRatio: Compact copies a sealed segment's live records when they
	// are fewer than this fraction of its bytes (default 0.25).
	CompactRatio float64
	// CompactMaxBytes bounds the live bytes one Compact call copies (it
	// always takes at least one segment; default SegmentSize).
	CompactMaxBytes int64

	forcePrealloc bool // tests: preallocate under NoSync too
}

// Stats describe a WAL.
type Stats struct {
	Segments        int    // segment files
	Bytes           int64  // their total size (bytes not yet written included)
	LiveRecords     int64  // records not released
	LiveBytes       int64  // their frames' size
	Appends         uint64 // records appended by Append since Open
	AppendBytes     uint64 // their frames' size
	Syncs           uint64 // fdatasyncs since Open (Sync and segment rolls; counted under NoSync too)
	Moved           uint64 // records copied by Compact since Open
	SegmentsDeleted uint64 // segment files deleted since Open
	IndexBytes      int64  // memory held by the per-record bookkeeping
	Compactable     int    // sealed segments below Options.CompactRatio: what Compact would take
	// Oldest is the smallest original position (the Pos Append returned,
	// before any copy) of any record still on disk, released or not, or in
	// a segment whose deletion is not yet durable; zero if there is none.
	Oldest Pos
}

// CompactStats describe one Compact call.
type CompactStats struct {
	Segments   int   // segments emptied and deleted
	Moved      int   // records copied to the head
	MovedBytes int64 // their frames' size
	FreedBytes int64 // size of the deleted segments
}

// Errors.
var (
	ErrClosed   = errors.New("wal: closed")
	ErrReleased = errors.New("wal: no live record at this position (released)")
	ErrGone     = errors.New("wal: segment deleted (record released or moved)")
	ErrTooLarge = errors.New("wal: record data too large")
	ErrReplay   = errors.New("wal: Replay must come before any Append or Compact")
)

// CorruptError reports damaged data where no crash can leave any (a sealed
// segment, synced before the next one was created). Open refuses the log.
type CorruptError struct {
	Seg    uint32
	Off    int64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("wal: corrupt data in sealed segment %s at offset %d: %s", segName(e.Seg), e.Off, e.Reason)
}

type fwd struct {
	off uint32
	to  Pos
}

type movedRec struct {
	orig uint64 // key of the record's first position
	cur  Pos
	size int64
}

// WAL is a node-wide write-ahead log. It is safe for concurrent use.
type WAL struct {
	o   Options
	log *slog.Logger

	// Lock order: cmu, wmu, mu.
	cmu sync.Mutex // one Compact (or Replay) at a time
	wmu sync.Mutex // the writer: Append, Sync, flushes, rolls, Close

	mu       sync.Mutex // everything below
	segs     map[uint32]*segment
	head     *segment
	buf      []byte // appended, not written: head bytes [written+len(pend), size)
	pend     []byte // being written: head bytes [written, written+len(pend))
	spare    []byte
	extra    map[Pos]uint32   // references beyond the first (Retain)
	fwd      map[uint32][]fwd // last Compact: old position -> copy
	moved    []movedRec       // copies found by Open, for Replay
	replayOK bool
	replay   bool                  // Replay running: deletions wait
	deferred []*segment            // deletions waiting for Replay
	removing map[*segment]struct{} // retired, file not yet removed (and the removal synced)
	closed   bool
	failed   error

	appends, appendBytes, movedN, deleted uint64
	syncs                                 atomic.Uint64

	prealloc                      bool // prepare zero-filled segments (prealloc.go)
	spareMu                       sync.Mutex
	spareOK, spareBusy, spareStop bool
	spareWG                       sync.WaitGroup
}

func (o *Options) defaults() error {
	if o.Dir == "" {
		return errors.New("wal: Options.Dir is empty")
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = 64 << 20
	}
	if o.SegmentSize < 4096 || o.SegmentSize > MaxSegmentSize {
		return fmt.Errorf("wal: SegmentSize %d out of [4096, %d]", o.SegmentSize, MaxSegmentSize)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.BufferSize <= 0 {
		o.BufferSize = 1 << 20
	}
	if o.CompactRatio <= 0 {
		o.CompactRatio = 0.25
	}
	if o.CompactMaxBytes <= 0 {
		o.CompactMaxBytes = o.SegmentSize
	}
	return nil
}

// Append adds records at the end of the log, in order, each referenced once,
// and returns their positions. They are buffered: durable only once a later
// Sync returns nil. Readable (Read) at once. Nothing is retained from recs.
func (w *WAL) Append(recs []Record) ([]Pos, error) {
	if len(recs) == 0 {
		return nil, nil
	}
	pos := make([]Pos, len(recs))
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if err := w.appendLocked(recs, pos, nil); err != nil {
		return nil, err
	}
	return pos, nil
}

func (w *WAL) usableLocked() error {
	if w.closed {
		return ErrClosed
	}
	return w.failed
}

// fail makes err sticky (mu held): after a failed write or fsync the
// kernel may have dropped the data, so nothing more is trusted until the
// log is reopened and recovered.
func (w *WAL) fail(err error) error {
	if w.failed == nil {
		w.failed = fmt.Errorf("wal: failed, reopen to recover: %w", err)
		w.log.Error("wal failed", "err", err)
	}
	return w.failed
}

// appendLocked appends recs (wmu held). origs, if not nil, makes the
// records copies (flagMoved) with those original keys.
func (w *WAL) appendLocked(recs []Record, pos []Pos, origs []uint64) error {
	for i := range recs {
		if len(recs[i].Data) > maxData {
			return ErrTooLarge
		}
	}
	var flags byte
	if origs != nil {
		flags = flagMoved
	}
	w.mu.Lock()
	if err := w.usableLocked(); err != nil {
		w.mu.Unlock()
		return err
	}
	if w.replayOK {
		w.replayOK, w.moved = false, nil
	}
	var bytes int64
	if w.prealloc && !w.head.prealloc && w.spareReady() {
		// Move to a preallocated segment as soon as one is ready.
		w.mu.Unlock()
		if err := w.roll(); err != nil {
			return err
		}
		w.mu.Lock()
	}
	for i := range recs {
		r := &recs[i]
		n := int64(frameLen(r, flags))
		h := w.head
		if h.size+n > w.o.SegmentSize && h.size > hdrSize {
			w.mu.Unlock()
			if err := w.roll(); err != nil {
				return err
			}
			w.mu.Lock()
			h = w.head
		}
		off := h.size
		var orig uint64
		if origs != nil {
			orig = origs[i]
			h.noteOrig(orig)
		} else {
			h.noteOrig(Pos{Seg: h.num, Off: uint32(off)}.key())
		}
		w.buf = appendFrame(w.buf, r, flags, orig)
		h.offs = append(h.offs, uint32(off))
		h.size += n
		h.live++
		h.liveBytes += n
		bytes += n
		pos[i] = Pos{Seg: h.num, Off: uint32(off)}
		if len(w.buf) >= w.o.BufferSize {
			w.mu.Unlock()
			if err := w.flush(); err != nil {
				return err
			}
			w.mu.Lock()
		}
	}
	if origs == nil {
		w.appends += uint64(len(recs))
		w.appendBytes += uint64(bytes)
	} else {
		w.movedN += uint64(len(recs))
	}
	w.mu.Unlock()
	return nil
}

// flush writes the buffer to the head file (wmu held, mu not held).
func (w *WAL) flush() error {
	w.mu.Lock()
	if len(w.buf) == 0 {
		w.mu.Unlock()
		return nil
	}
	h, p, at := w.head, w.buf, w.head.written
	w.pend, w.buf, w.spare = p, w.spare[:0], nil
	w.mu.Unlock()
	_, err := h.f.WriteAt(p, at)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		// The bytes stay readable from pend; the log is failed.
		return w.fail(err)
	}
	h.written += int64(len(p))
	w.pend = nil
	if cap(p) <= 4*w.o.BufferSize {
		w.spare = p[:0]
	}
	return nil
}

// datasync makes f's written data durable, counting it (mu not held).
func (w *WAL) datasync(f *os.File) error {
	w.syncs.Add(1)
	if w.o.NoSync {
		return nil
	}
	return store.Datasync(f)
}

// Sync makes every record appended before it was called durable: it writes
// the buffer and issues one fdatasync of the head segment (none if nothing
// was appended since the last one). Appends wait while it runs; reads do not.
func (w *WAL) Sync() error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	return w.syncLocked()
}

func (w *WAL) syncLocked() error {
	w.mu.Lock()
	if err := w.usableLocked(); err != nil {
		w.mu.Unlock()
		return err
	}
	w.mu.Unlock()
	if err := w.flush(); err != nil {
		return err
	}
	w.mu.Lock()
	h := w.head
	target := h.written
	need := target > h.synced
	w.mu.Unlock()
	if !need {
		return nil
	}
	if err := w.datasync(h.f); err != nil {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.fail(err)
	}
	w.mu.Lock()
	h.synced = target
	w.mu.Unlock()
	return nil
}

// roll seals the head (written and synced first, so that only the last
// segment can have a torn tail) and starts the next one (wmu held).
func (w *WAL) roll() error {
	if err := w.flush(); err != nil {
		return err
	}
	w.mu.Lock()
	old := w.head
	needSync := old.written > old.synced
	w.mu.Unlock()
	if old.prealloc {
		// Sealed segments keep no zeros after their frames.
		if err := old.f.Truncate(old.written); err != nil {
			w.mu.Lock()
			defer w.mu.Unlock()
			return w.fail(err)
		}
		needSync = true
	}
	if needSync {
		if err := w.datasync(old.f); err != nil {
			w.mu.Lock()
			defer w.mu.Unlock()
			return w.fail(err)
		}
	}
	ns, err := w.createSegment(old.num + 1)
	if err != nil {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.fail(err)
	}
	w.mu.Lock()
	old.synced = old.written
	old.seal()
	w.segs[ns.num] = ns
	w.head = ns
	var dead []*segment
	if old.live == 0 && !old.compacting {
		dead = w.retireLocked(old, dead)
	}
	w.mu.Unlock()
	w.remove(dead)
	w.startSpare()
	return nil
}

// createSegment creates segment num with its header and makes its directory
// entry durable.
func (w *WAL) createSegment(num uint32) (*segment, error) {
	s := newSegment(w.o.Dir, num)
	var f *os.File
	var err error
	if w.prealloc && w.takeSpare(s.path) {
		if f, err = os.OpenFile(s.path, os.O_RDWR, 0); err != nil {
			os.Remove(s.path)
			return nil, err
		}
		s.prealloc = true
	} else if f, err = os.OpenFile(s.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644); err != nil {
		return nil, err
	}
	if err := writeHeader(f); err != nil {
		f.Close()
		os.Remove(s.path)
		return nil, err
	}
	if !w.o.NoSync {
		if err := syncDir(w.o.Dir); err != nil {
			f.Close()
			os.Remove(s.path)
			return nil, err
		}
	}
	s.f = f
	// The header is made durable by the first Sync of a record in it; a
	// crash before that leaves a segment with no synced record, reset by
	// Open.
	s.size, s.written, s.synced = hdrSize, hdrSize, hdrSize
	return s, nil
}

func writeHeader(f *os.File) error {
	var h [hdrSize]byte
	copy(h[:], segMagic)
	h[4] = segVersion
	_, err := f.WriteAt(h[:], 0)
	return err
}

// retireLocked removes s from the log (mu held); its file is closed and
// deleted by remove, after mu is released, or when Replay ends.
func (w *WAL) retireLocked(s *segment, dead []*segment) []*segment {
	delete(w.segs, s.num)
	w.deleted++
	if w.removing == nil {
		w.removing = make(map[*segment]struct{})
	}
	w.removing[s] = struct{}{}
	if w.replay {
		w.deferred = append(w.deferred, s)
		return dead
	}
	return append(dead, s)
}

// remove closes and deletes the files of retired segments and syncs the
// directory, so that a deleted segment never comes back after a crash
// (which would hand records older than a tombstone the host released).
func (w *WAL) remove(dead []*segment) {
	if len(dead) == 0 {
		return
	}
	for _, s := range dead {
		s.f.Close()
		if err := os.Remove(s.path); err != nil {
			w.log.Warn("wal: removing segment", "file", s.path, "err", err)
		}
	}
	if !w.o.NoSync {
		if err := syncDir(w.o.Dir); err != nil {
			w.log.Warn("wal: syncing the directory after removing segments", "err", err)
		}
	}
	w.mu.Lock()
	for _, s := range dead {
		delete(w.removing, s)
	}
	w.mu.Unlock()
}

// resolve finds the segment and offs index of p, following the forwarding
// of the last Compact (mu held). The index is -1 if p is not a record start.
func (w *WAL) resolve(p Pos) (*segment, int, Pos) {
	if fl, ok := w.fwd[p.Seg]; ok {
		i := sort.Search(len(fl), func(i int) bool { return fl[i].off >= p.Off })
		if i < len(fl) && fl[i].off == p.Off {
			p = fl[i].to
		}
	}
	s := w.segs[p.Seg]
	if s == nil {
		return nil, -1, p
	}
	return s, s.find(p.Off), p
}

// Retain adds a reference to the record at p: it then takes one more Release
// to free it. References beyond the first are not persisted (Replay hands
// every record referenced once).
func (w *WAL) Retain(p Pos) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	s, i, p := w.resolve(p)
	switch {
	case s == nil:
		return ErrGone
	case i < 0 || s.offs[i]&deadBit != 0:
		return ErrReleased
	}
	if w.extra == nil {
		w.extra = make(map[Pos]uint32)
	}
	w.extra[p]++
	return nil
}

// Release drops a reference to the record at p. Once a segment other than
// the head has no referenced record it is deleted. Releasing a record that
// is already released, or a position that is not a record's, does nothing.
func (w *WAL) Release(p Pos) {
	w.mu.Lock()
	dead := w.releaseLocked(p, nil)
	w.mu.Unlock()
	w.remove(dead)
}

// ReleaseAll is Release for many positions, under one lock.
func (w *WAL) ReleaseAll(ps []Pos) {
	w.mu.Lock()
	var dead []*segment
	for _, p := range ps {
		dead = w.releaseLocked(p, dead)
	}
	w.mu.Unlock()
	w.remove(dead)
}

func (w *WAL) releaseLocked(p Pos, dead []*segment) []*segment {
	if w.closed {
		return dead
	}
	s, i, p := w.resolve(p)
	if s == nil || i < 0 || s.offs[i]&deadBit != 0 {
		return dead
	}
	if n := w.extra[p]; n > 0 {
		if n == 1 {
			delete(w.extra, p)
		} else {
			w.extra[p] = n - 1
		}
		return dead
	}
	s.kill(i)
	if s.sealed && !s.compacting {
		if s.live == 0 {
			return w.retireLocked(s, dead)
		}
		s.maybePrune()
	}
	return dead
}

// Read returns the record at p, which must not have been released
// (ErrReleased: released, or p is not a record's; ErrGone: its segment was
// deleted, the record released or moved by an earlier Compact). It runs
// concurrently with appends (a record still buffered is copied from memory,
// others are read with one pread). r.Data is the caller's.
func (w *WAL) Read(p Pos) (Record, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return Record{}, ErrClosed
	}
	s, i, p := w.resolve(p)
	switch {
	case s == nil:
		w.mu.Unlock()
		return Record{}, ErrGone
	case i < 0 || s.offs[i]&deadBit != 0:
		w.mu.Unlock()
		return Record{}, ErrReleased
	}
	off := int64(p.Off)
	b := make([]byte, s.end(i)-off)
	if s == w.head && off >= s.written {
		rel := off - s.written
		if rel < int64(len(w.pend)) {
			copy(b, w.pend[rel:])
		} else {
			copy(b, w.buf[rel-int64(len(w.pend)):])
		}
		w.mu.Unlock()
	} else {
		f := s.f
		w.mu.Unlock()
		if _, err := f.ReadAt(b, off); err != nil {
			if errors.Is(err, os.ErrClosed) {
				w.mu.Lock()
				closed := w.closed
				w.mu.Unlock()
				if closed {
					return Record{}, ErrClosed
				}
				return Record{}, ErrGone
			}
			return Record{}, fmt.Errorf("wal: read %v: %w", p, err)
		}
	}
	if len(b) < frameHdr+minBody || !verifyFrame(b) {
		return Record{}, fmt.Errorf("wal: read %v: checksum mismatch", p)
	}
	r, _, _, err := decodeBody(b[frameHdr:])
	if err != nil {
		return Record{}, fmt.Errorf("wal: read %v: %w", p, err)
	}
	return r, nil
}

// Stats returns the WAL's figures.
func (w *WAL) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := Stats{
		Segments:        len(w.segs),
		Appends:         w.appends,
		AppendBytes:     w.appendBytes,
		Syncs:           w.syncs.Load(),
		Moved:           w.movedN,
		SegmentsDeleted: w.deleted,
	}
	for _, s := range w.segs {
		st.Bytes += s.size
		st.LiveRecords += int64(s.live)
		st.LiveBytes += s.liveBytes
		st.IndexBytes += int64(cap(s.offs)) * 4
		if w.compactable(s) {
			st.Compactable++
		}
		if s.minOrig != 0 && (st.Oldest.IsZero() || s.minOrig < st.Oldest.key()) {
			st.Oldest = posOf(s.minOrig)
		}
	}
	for s := range w.removing {
		if s.minOrig != 0 && (st.Oldest.IsZero() || s.minOrig < st.Oldest.key()) {
			st.Oldest = posOf(s.minOrig)
		}
	}
	for _, fl := range w.fwd {
		st.IndexBytes += int64(cap(fl)) * 12
	}
	st.IndexBytes += int64(len(w.extra)) * 16
	return st
}

// Close writes and syncs what was appended (unless NoSync) and closes the
// files. It waits for a Compact or Replay in progress (so it must not be
// called while holding a lock that a move callback takes). Later calls
// return ErrClosed.
func (w *WAL) Close() error {
	w.cmu.Lock()
	defer w.cmu.Unlock()
	w.wmu.Lock()
	defer w.wmu.Unlock()
	var err error
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	usable := w.failed == nil
	w.mu.Unlock()
	if usable {
		err = w.syncLocked()
	}
	w.mu.Lock()
	w.closeFilesLocked()
	w.mu.Unlock()
	w.stopSpare()
	return err
}

func (w *WAL) closeFilesLocked() {
	for _, s := range w.segs {
		s.f.Close()
	}
	w.closed = true
	w.buf, w.pend, w.spare = nil, nil, nil
}

// CrashForTest closes the WAL as the worst crash would leave it: every byte
// appended after the last Sync is lost (the head file is cut to the length
// the last Sync covered; sealed segments were synced when sealed). For
// tests of the layers above (with NoSync too). The WAL is closed afterwards.
func (w *WAL) CrashForTest() error {
	w.cmu.Lock()
	defer w.cmu.Unlock()
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	err := w.head.f.Truncate(w.head.synced)
	w.closeFilesLocked()
	w.mu.Unlock()
	w.stopSpare()
	return err
}
