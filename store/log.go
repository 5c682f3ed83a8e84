package store

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Log. The zero value is usable.
type Options struct {
	// SegmentSize is the size at which the log rolls to a new segment file
	// (default DefaultSegmentSize). A record larger than a segment gets a
	// segment of its own.
	SegmentSize int64
	// FS is the file system (default OSFS).
	FS FS
	// Logger receives recovery reports: torn tails cut, corrupt records found
	// (default: discard).
	Logger *slog.Logger
	// NoSync makes Sync, rolls, segment creation and removal skip fsync:
	// for data that need not survive a crash (a paging log, deleted at
	// start-up). Records still reach the file (the page cache).
	NoSync bool
	// Files, if set, bounds the segment files open at once across the logs
	// that share it (see FilePool); without it a log keeps every segment
	// file open while it is open.
	Files *FilePool
	// RetryInterval is how often a failed log tries to repair itself
	// (see Log.fail): at most once per interval, on an Append or Sync.
	// 0 means DefaultRetryInterval; a negative value retries on every call.
	RetryInterval time.Duration
}

// DefaultRetryInterval is Options.RetryInterval when it is 0.
const DefaultRetryInterval = 250 * time.Millisecond

// failKind says what a failed log must do to repair itself.
type failKind uint8

const (
	failNone   failKind = iota
	failWrite           // writing the buffer failed: the file holds [0, flushed) and the buffer is intact
	failSync            // an fsync failed: what follows durableOff in the active file is unknown
	failCreate          // a roll synced the active segment but could not create the next one
	failFatal           // records that were written may be gone: only a reopen recovers
)

// writeBufSize is the size of the append buffer; Sync, a full buffer, a roll
// and ReadAt or Scan of buffered records write it to the file.
const writeBufSize = 64 << 10

// A Log is an append-only sequence of checksummed records kept in segment
// files in one directory; see the package documentation for the format and
// the guarantees. A Log is safe for concurrent use.
//
// Lock order: syncMu, then rmu, then mu.
type Log struct {
	dir     string
	fs      FS
	segSize int64
	logger  *slog.Logger
	noSync  bool
	retry   time.Duration
	files   *FilePool

	// failed mirrors err != nil for a lock-free check on the hot path.
	failed atomic.Bool

	syncMu sync.Mutex   // serializes the fsync of the active segment
	rmu    sync.RWMutex // held shared while a segment file is read or synced outside mu; exclusively to close or remove one

	mu       sync.Mutex
	err      error      // a write or sync failed; the log refuses writes until repaired
	failKind failKind   // what repairing it takes
	lastTry  time.Time  // of a repair
	closed   bool       // Close was called
	segs     []*segment // by number; the last one is active
	buf      []byte     // appended records not yet written to the active file
	flushed  int64      // file offset where buf starts
	appended uint64     // number of records appended
	synced   uint64     // records [0, synced) are durable (guarded by mu)
	// durableOff: the active segment's bytes [0, durableOff) are durable
	// (an fsync that covered them returned nil).
	durableOff int64
}

type segment struct {
	num  uint32
	f    File
	end  int64 // end of the valid records (for the active segment: of the records written to the file or buffered)
	size int64 // bytes on disk (for reports)
	// holes are the damaged ranges recovery skipped (see segReader.resync);
	// set by OpenLog, never changed afterwards.
	holes []hole
}

// OpenLog opens the log in dir, creating dir and an empty log if needed, and
// recovers it: every segment is read and verified. A damaged record followed
// by valid records is skipped and the records after it are kept; a torn or
// corrupt tail of the last segment is cut (the file is truncated after the
// last good record and synced); a corrupt tail of an older segment is ignored
// (the file is left as it is; the later segments are kept). Each is reported
// to Options.Logger at level Warn (see the package documentation). OpenLog
// does not fail because of bad data, only because of I/O errors.
func OpenLog(dir string, opts Options) (*Log, error) {
	l := &Log{dir: dir, fs: opts.FS, segSize: opts.SegmentSize, logger: opts.Logger, noSync: opts.NoSync, retry: opts.RetryInterval, files: opts.Files}
	if l.retry == 0 {
		l.retry = DefaultRetryInterval
	}
	if l.fs == nil {
		l.fs = OSFS{}
	}
	if l.segSize == 0 {
		l.segSize = DefaultSegmentSize
	}
	if l.segSize < MinSegmentSize || l.segSize > MaxSegmentSize {
		return nil, fmt.Errorf("store: segment size %d out of range [%d, %d]", l.segSize, MinSegmentSize, MaxSegmentSize)
	}
	if l.logger == nil {
		l.logger = slog.New(slog.DiscardHandler)
	}
	l.logger = l.logger.With("log", dir)
	if err := l.fs.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	names, err := l.fs.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var nums []uint32
	for _, name := range names {
		if n, ok := parseSegName(name); ok {
			nums = append(nums, n)
		}
	}
	// ReadDir sorts names; 16-digit names sort like their numbers.
	for i, n := range nums {
		seg, err := l.recoverSegment(n, i == len(nums)-1)
		if err != nil {
			l.closeFiles()
			return nil, err
		}
		l.segs = append(l.segs, seg)
	}
	if len(l.segs) == 0 {
		if err := l.createSegment(0); err != nil {
			return nil, err
		}
	} else {
		l.flushed = l.active().end
		l.durableOff = l.flushed // recoverSegment synced the last segment
	}
	return l, nil
}

// recoverSegment opens segment n and finds the end of its valid records. The
// last segment is repaired so that appends can continue after it.
func (l *Log) recoverSegment(n uint32, last bool) (*segment, error) {
	path := filepath.Join(l.dir, segName(n))
	f, err := l.fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	f = l.pooled(path, f)
	size, err := f.Size()
	if err != nil {
		f.Close()
		return nil, err
	}
	seg := &segment{num: n, f: f, size: size}
	var hdr [segHeaderSize]byte
	m, err := f.ReadAt(hdr[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, err
	}
	if m < segHeaderSize || !validSegHeader(hdr[:]) {
		if !last {
			l.logger.Warn("store: segment has a bad header; ignoring its records", "segment", path, "size", size)
			return seg, nil // end 0: no records
		}
		if size > 0 {
			l.logger.Warn("store: last segment has a torn or bad header; resetting it", "segment", path, "bytes_cut", size)
		}
		err := f.Truncate(0)
		if err == nil {
			_, err = f.WriteAt(appendSegHeader(nil), 0)
		}
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			f.Close()
			return nil, err
		}
		seg.end, seg.size = segHeaderSize, segHeaderSize
		return seg, nil
	}
	r := segReader{f: f, limit: size, off: segHeaderSize}
	var bad string
	for {
		_, _, _, ok, why, err := r.next()
		if err != nil {
			f.Close()
			return nil, err
		}
		if ok {
			continue
		}
		if why == "" { // the end of the file
			break
		}
		// A bad record. If a valid record follows, the damage is in the
		// middle (a flipped bit on disk, or a block written back out of
		// order before a crash): skip it and keep the records after it.
		// Otherwise it is a torn or garbage tail, handled below.
		at := r.off
		next, found, err := r.resync(at)
		if err != nil {
			f.Close()
			return nil, err
		}
		if !found {
			bad = why
			break
		}
		l.logger.Warn("store: skipping a corrupt record; the records after it are kept",
			"segment", path, "offset", at, "bytes_skipped", next-at, "next_record", next, "reason", why)
		seg.holes = append(seg.holes, hole{at, next})
		r.off = next
	}
	seg.end = r.off
	if seg.end == size {
		if last {
			// After a kill -9 its tail may sit in the page cache only:
			// make what we recovered durable before appending after it.
			if err := f.Sync(); err != nil {
				f.Close()
				return nil, err
			}
		}
		return seg, nil
	}
	if !last {
		l.logger.Warn("store: corrupt record at the end of an older segment; ignoring the rest of that segment",
			"segment", path, "offset", seg.end, "bytes_ignored", size-seg.end, "reason", bad)
		return seg, nil
	}
	l.logger.Warn("store: cutting torn or corrupt tail", "segment", path, "offset", seg.end,
		"bytes_cut", size-seg.end, "reason", bad)
	if err := f.Truncate(seg.end); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	seg.size = seg.end
	return seg, nil
}

// createSegment creates segment n with its header (buffered) and makes its
// directory entry durable. Called with mu held, or before the log is shared.
func (l *Log) createSegment(n uint32) error {
	path := filepath.Join(l.dir, segName(n))
	f, err := l.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if !l.noSync {
		if err := l.fs.SyncDir(l.dir); err != nil {
			f.Close()
			l.fs.Remove(path) // holds nothing; a retry creates it again
			return err
		}
	}
	l.segs = append(l.segs, &segment{num: n, f: l.pooled(path, f), end: segHeaderSize})
	l.flushed, l.durableOff = 0, 0
	l.buf = appendSegHeader(l.buf[:0])
	return nil
}

func (l *Log) active() *segment { return l.segs[len(l.segs)-1] }

// pooled puts the file f, just opened as path, in the log's FilePool if it
// has one.
func (l *Log) pooled(path string, f File) File {
	if l.files == nil {
		return f
	}
	return l.files.adopt(l.fs, path, f, l.noSync)
}

// usable reports why the log cannot be written to, if it cannot. mu held.
func (l *Log) usable() error {
	if l.closed {
		return ErrClosed
	}
	return l.err
}

// fail records a write or sync error: the log refuses appends and syncs
// until it has repaired itself (repair), which it tries on later calls once
// writes may succeed again (a disk that was full has space again). mu held.
func (l *Log) fail(kind failKind, err error) error {
	if l.err == nil {
		l.err = fmt.Errorf("store: log %s failed: %w", l.dir, err)
		l.failKind = kind
		l.lastTry = time.Now()
		l.failed.Store(true)
		l.logger.Error("store: log failed; appends are refused until a retry succeeds", "err", err)
	} else if kind > l.failKind {
		l.failKind = kind
	}
	return l.err
}

// maybeRepair tries to repair a failed log if the retry interval has passed
// since the last try. Called without locks.
func (l *Log) maybeRepair() {
	l.syncMu.Lock() // no fsync of ours in flight while the file is repaired
	defer l.syncMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil || l.closed || l.failKind == failFatal || l.retry > 0 && time.Since(l.lastTry) < l.retry {
		return
	}
	l.lastTry = time.Now()
	if err := l.repairLocked(); err != nil {
		if l.failKind == failFatal {
			l.logger.Error("store: log cannot be repaired; it stays failed until it is reopened", "err", err)
		} else {
			l.logger.Debug("store: log still failing", "err", err)
		}
		return
	}
	l.logger.Warn("store: log repaired; appends continue", "was", l.err)
	l.err, l.failKind = nil, failNone
	l.failed.Store(false)
}

// repairLocked brings a failed log back to the state it would have had
// without the failure, losing nothing that was appended before it:
//   - after a failed write, the file holds what was written before it and
//     the buffer is intact: cut the partial write, write the buffer again;
//   - after a failed fsync, the kernel may have marked the dirty pages
//     clean without writing them (a later fsync would then succeed without
//     making them durable). So the bytes of the active segment past the last
//     good fsync are read back and verified record by record: if they are
//     all intact (the pages are still cached, as they are unless memory
//     pressure evicted them), they are written again, with the buffer, and
//     synced. If one is not, records that were appended are gone: the log
//     fails for good (failFatal) rather than continue with a hole that a
//     Sync would not report; reopening it recovers what is on disk;
//   - a roll that could not create the next segment creates it.
//
// Positions stay valid in every case. syncMu and mu held.
func (l *Log) repairLocked() error {
	a := l.active()
	switch l.failKind {
	case failWrite:
		if err := a.f.Truncate(l.flushed); err != nil {
			return err
		}
		if len(l.buf) > 0 {
			if _, err := a.f.WriteAt(l.buf, l.flushed); err != nil {
				return err
			}
			l.flushed += int64(len(l.buf))
			a.size = l.flushed
			l.buf = l.buf[:0]
		}
		return nil
	case failSync:
		from := l.durableOff
		if from < segHeaderSize {
			from = 0
		}
		data := make([]byte, l.flushed-from)
		if _, err := a.f.ReadAt(data, from); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if !validWritten(data, from == 0) {
			l.failKind = failFatal
			return fmt.Errorf("store: records written to %s since its last good fsync (offset %d) no longer read back intact", segName(a.num), from)
		}
		if err := a.f.Truncate(l.flushed); err != nil {
			return err
		}
		if _, err := a.f.WriteAt(data, from); err != nil {
			return err
		}
		if _, err := a.f.WriteAt(l.buf, l.flushed); err != nil {
			return err
		}
		if !l.noSync {
			if err := a.f.Sync(); err != nil {
				return err
			}
		}
		l.flushed += int64(len(l.buf))
		a.size = l.flushed
		l.buf = l.buf[:0]
		l.synced, l.durableOff = l.appended, l.flushed
		return nil
	case failCreate:
		return l.createSegment(a.num + 1)
	case failFatal:
		return l.err
	}
	return nil
}

// validWritten reports whether b, bytes of a segment from a record boundary
// (from its start if header), holds whole records that pass their checksums.
func validWritten(b []byte, header bool) bool {
	if header && len(b) > 0 {
		if !validSegHeader(b) {
			return false
		}
		b = b[segHeaderSize:]
	}
	for len(b) > 0 {
		if len(b) < recHeaderSize {
			return false
		}
		n := int(le32(b[0:4]))
		if n > len(b)-recHeaderSize || recordCRC(b[8:recHeaderSize+n]) != le32(b[4:8]) {
			return false
		}
		b = b[recHeaderSize+n:]
	}
	return true
}

// Append adds a record and returns its position. The record is buffered in
// memory: it is durable only once Sync (or a Syncer request made after Append
// returned) has completed. Append rolls to a new segment when the record does
// not fit in the active one; the previous segment is synced as part of the
// roll, so the durable records are always a prefix of the appended ones.
func (l *Log) Append(typ byte, payload []byte) (Pos, error) {
	if len(payload) > MaxPayload {
		return Pos{}, ErrTooLarge
	}
	if l.failed.Load() {
		l.maybeRepair()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return Pos{}, err
	}
	recLen := int64(recHeaderSize + len(payload))
	a := l.active()
	if a.end > segHeaderSize && a.end+recLen > l.segSize {
		if err := l.rollLocked(); err != nil {
			return Pos{}, err
		}
		a = l.active()
	}
	if len(l.buf)+int(recLen) > writeBufSize && len(l.buf) > 0 {
		if err := l.flushLocked(); err != nil {
			return Pos{}, err
		}
	}
	pos := Pos{Seg: a.num, Off: uint32(a.end)}
	l.buf = appendRecord(l.buf, typ, payload)
	a.end += recLen
	l.appended++
	if len(l.buf) >= writeBufSize {
		if err := l.flushLocked(); err != nil {
			return Pos{}, err
		}
	}
	return pos, nil
}

// flushLocked writes the buffer to the active file. mu held.
func (l *Log) flushLocked() error {
	if len(l.buf) == 0 {
		return nil
	}
	a := l.active()
	if _, err := a.f.WriteAt(l.buf, l.flushed); err != nil {
		return l.fail(failWrite, err)
	}
	l.flushed += int64(len(l.buf))
	a.size = l.flushed
	l.buf = l.buf[:0]
	if cap(l.buf) > 4*writeBufSize { // after a huge record
		l.buf = nil
	}
	return nil
}

// rollLocked seals the active segment (written and synced) and starts the
// next one. mu held.
func (l *Log) rollLocked() error {
	if err := l.flushLocked(); err != nil {
		return err
	}
	a := l.active()
	if !l.noSync {
		if err := a.f.Sync(); err != nil {
			return l.fail(failSync, err)
		}
	}
	l.synced = l.appended
	l.durableOff = l.flushed
	if err := l.createSegment(a.num + 1); err != nil {
		return l.fail(failCreate, err)
	}
	return nil
}

// Roll seals the active segment and starts a new one, so that all records
// appended so far can be removed with RemoveSegmentsBefore (for example when
// the owner purges everything). It is a no-op if the active segment is empty.
func (l *Log) Roll() error {
	if l.failed.Load() {
		l.maybeRepair()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return err
	}
	if l.active().end == segHeaderSize {
		return nil
	}
	return l.rollLocked()
}

// Sync makes every record appended before Sync was called durable. Appends
// may continue while it waits for the disk. Concurrent Syncs share fsyncs.
// If it fails, the log is failed: later Appends and Syncs return an error
// until the log has repaired itself (see repairLocked), which it tries at
// most once per Options.RetryInterval, on an Append, Roll or Sync. The
// repair loses no record, so a Sync after it covers the records appended
// before the failure too.
func (l *Log) Sync() error {
	_, err := l.sync()
	return err
}

// sync is Sync; fsynced reports whether it called fsync.
func (l *Log) sync() (fsynced bool, err error) {
	if l.failed.Load() {
		l.maybeRepair()
	}
	l.mu.Lock()
	if err := l.usable(); err != nil {
		l.mu.Unlock()
		return false, err
	}
	target := l.appended
	covered := l.synced >= target
	l.mu.Unlock()
	if covered {
		return false, nil
	}

	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.rmu.RLock() // keeps the active file open while we sync it
	l.mu.Lock()
	if err := l.usable(); err != nil {
		l.mu.Unlock()
		l.rmu.RUnlock()
		return false, err
	}
	if l.synced >= target { // another Sync (or a roll) covered us while we waited
		l.mu.Unlock()
		l.rmu.RUnlock()
		return false, nil
	}
	// Records up to target are in the active segment or in a sealed one,
	// which its roll synced. Write the buffer and sync the active file; the
	// fsync covers everything appended up to now.
	if err := l.flushLocked(); err != nil {
		l.mu.Unlock()
		l.rmu.RUnlock()
		return false, err
	}
	upTo := l.appended
	a := l.active()
	f, off := a.f, l.flushed
	l.mu.Unlock()

	if !l.noSync {
		err = f.Sync()
	}
	l.rmu.RUnlock()

	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		if l.active() != a {
			// A roll sealed the segment meanwhile, reporting its own
			// fsync good; the error may have been ours to see only.
			return true, l.fail(failFatal, err)
		}
		return true, l.fail(failSync, err)
	}
	l.synced = max(l.synced, upTo)
	if l.active() == a {
		l.durableOff = max(l.durableOff, off)
	}
	return true, nil
}

// ReadAt returns the record at p, verified against its checksum. The payload
// is a new slice owned by the caller. It returns an error wrapping ErrNotFound
// if p is not the position of a record in the log (including records of
// removed segments) and one wrapping ErrCorrupt if the data on disk fails its
// checksum. ReadAt may run concurrently with everything but Close; it reads
// buffered records after writing them to the file.
func (l *Log) ReadAt(p Pos) (typ byte, payload []byte, err error) {
	l.rmu.RLock()
	defer l.rmu.RUnlock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return 0, nil, ErrClosed
	}
	seg := l.findLocked(p.Seg)
	if seg == nil || int64(p.Off) < segHeaderSize || int64(p.Off)+recHeaderSize > seg.end {
		l.mu.Unlock()
		return 0, nil, fmt.Errorf("%w: %v", ErrNotFound, p)
	}
	end := seg.end
	if seg == l.active() && int64(p.Off)+recHeaderSize > l.flushed {
		if err := l.flushLocked(); err != nil {
			l.mu.Unlock()
			return 0, nil, err
		}
	}
	l.mu.Unlock()

	var h [recHeaderSize]byte
	if _, err := seg.f.ReadAt(h[:], int64(p.Off)); err != nil {
		return 0, nil, fmt.Errorf("store: reading %v: %w", p, err)
	}
	n := int64(le32(h[0:4]))
	if n > MaxPayload || int64(p.Off)+recHeaderSize+n > end {
		return 0, nil, fmt.Errorf("%w at %v: length %d runs past the end of the segment (or %v is not a record boundary)", ErrCorrupt, p, n, p)
	}
	// One buffer for type and payload, so the checksum covers them at once.
	buf := make([]byte, 1+n)
	buf[0] = h[8]
	if n > 0 {
		if _, err := seg.f.ReadAt(buf[1:], int64(p.Off)+recHeaderSize); err != nil {
			return 0, nil, fmt.Errorf("store: reading %v: %w", p, err)
		}
	}
	if recordCRC(buf) != le32(h[4:8]) {
		return 0, nil, fmt.Errorf("%w at %v: checksum mismatch", ErrCorrupt, p)
	}
	return h[8], buf[1:], nil
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// findLocked returns segment n or nil. mu held.
func (l *Log) findLocked(n uint32) *segment {
	lo, hi := 0, len(l.segs)
	for lo < hi {
		m := (lo + hi) / 2
		if l.segs[m].num < n {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(l.segs) && l.segs[lo].num == n {
		return l.segs[lo]
	}
	return nil
}

// Scan calls fn for every record of the log in order. It is ScanFrom(Pos{}).
func (l *Log) Scan(fn func(p Pos, typ byte, payload []byte) error) error {
	return l.ScanFrom(Pos{}, fn)
}

// ScanFrom calls fn, in order, for every record at or after from that was
// appended before ScanFrom was called; from must be the position of a record,
// or a position between records such as Pos{} or Pos{Seg: n}. payload is only
// valid until fn returns. If fn returns an error, ScanFrom stops and returns
// it. Records appended concurrently are not visited; segments removed
// concurrently are skipped. fn must not call Close.
//
// Records were verified when the log was opened; a record that fails its
// checksum now (the disk changed under us) stops the scan with an error
// wrapping ErrCorrupt.
func (l *Log) ScanFrom(from Pos, fn func(p Pos, typ byte, payload []byte) error) error {
	type span struct {
		num   uint32
		end   int64
		holes []hole
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	if err := l.flushLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	var spans []span
	for _, s := range l.segs {
		if s.num >= from.Seg {
			spans = append(spans, span{s.num, s.end, s.holes})
		}
	}
	l.mu.Unlock()

	var r segReader
	for _, sp := range spans {
		start := int64(segHeaderSize)
		if sp.num == from.Seg && int64(from.Off) > start {
			start = int64(from.Off)
		}
		r = segReader{f: segFileReader{l, sp.num}, buf: r.buf[:0], limit: sp.end, off: start, holes: sp.holes}
		for r.off < sp.end {
			off, typ, payload, ok, bad, err := r.next()
			if errors.Is(err, errSegRemoved) {
				break
			}
			if err != nil {
				return fmt.Errorf("store: scanning segment %d: %w", sp.num, err)
			}
			if !ok {
				return fmt.Errorf("%w at %v: %s", ErrCorrupt, Pos{sp.num, uint32(r.off)}, bad)
			}
			if err := fn(Pos{Seg: sp.num, Off: off}, typ, payload); err != nil {
				return err
			}
		}
	}
	return nil
}

var errSegRemoved = errors.New("store: segment removed")

// segFileReader reads segment num of l, holding the locks that keep its file
// open for the duration of each read.
type segFileReader struct {
	l   *Log
	num uint32
}

func (r segFileReader) ReadAt(p []byte, off int64) (int, error) {
	r.l.rmu.RLock()
	defer r.l.rmu.RUnlock()
	r.l.mu.Lock()
	seg := r.l.findLocked(r.num)
	closed := r.l.closed
	r.l.mu.Unlock()
	if closed {
		return 0, ErrClosed
	}
	if seg == nil {
		return 0, errSegRemoved
	}
	return seg.f.ReadAt(p, off)
}

// RemoveSegmentsBefore deletes the segment files numbered below seg, except
// the active segment, which is never removed (Roll it first to remove
// everything). The owner calls it once no record in those segments is needed.
// The removal is durable when it returns (the directory is synced). It waits
// for concurrent ReadAt calls; ReadAt of a removed record returns ErrNotFound.
func (l *Log) RemoveSegmentsBefore(seg uint32) error {
	l.rmu.Lock()
	defer l.rmu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	var kept []*segment
	removed := 0
	var firstErr error
	for i, s := range l.segs {
		if s.num >= seg || i == len(l.segs)-1 || firstErr != nil {
			kept = append(kept, s)
			continue
		}
		s.f.Close()
		if err := l.fs.Remove(filepath.Join(l.dir, segName(s.num))); err != nil && !errors.Is(err, os.ErrNotExist) {
			firstErr = err
		}
		removed++
	}
	l.segs = kept
	if removed > 0 && !l.noSync {
		if err := l.fs.SyncDir(l.dir); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// Segments returns the numbers of the log's segments, oldest first; the last
// one is the active segment.
func (l *Log) Segments() []uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	nums := make([]uint32, len(l.segs))
	for i, s := range l.segs {
		nums[i] = s.num
	}
	return nums
}

// Size returns the bytes the log occupies on disk, including buffered records.
func (l *Log) Size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, s := range l.segs[:len(l.segs)-1] {
		n += s.size
	}
	return n + l.flushed + int64(len(l.buf))
}

// Dir returns the log's directory.
func (l *Log) Dir() string { return l.dir }

// Close writes and syncs buffered records (unless the log has failed and
// cannot repair itself now) and closes the files. It waits for concurrent
// ReadAt calls. Close is idempotent; calls other than Close return
// ErrClosed afterwards.
func (l *Log) Close() error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.rmu.Lock()
	defer l.rmu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	var err error
	if l.err != nil && l.failKind != failFatal {
		// Space may have come back since the last try: the buffered
		// records are worth one more.
		if l.repairLocked() == nil {
			l.err, l.failKind = nil, failNone
			l.failed.Store(false)
		}
	}
	if l.err == nil {
		if err = l.flushLocked(); err == nil && l.synced < l.appended {
			if err = l.active().f.Sync(); err != nil {
				err = l.fail(failSync, err)
			}
		}
	}
	l.closed = true
	if cerr := l.closeFiles(); err == nil {
		err = cerr
	}
	return err
}

func (l *Log) closeFiles() error {
	var first error
	for _, s := range l.segs {
		if err := s.f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
