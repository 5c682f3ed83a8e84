package streamlog

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warrenmq/warren/store"
)

// Options configure a Log.
type Options struct {
	// FS is the file system (store.OSFS{} when nil).
	FS store.FS
	// MaxSegmentBytes closes a segment once it holds this much (500 MB
	// when 0, at most 3 GB), MaxSegmentChunks once it holds this many
	// chunks (256,000 when 0): osiris's limits.
	MaxSegmentBytes  int64
	MaxSegmentChunks int
	// MaxBytes and MaxAge are the retention (0: none): whole closed
	// segments go, the oldest first, while the log holds more than
	// MaxBytes or while the last chunk of the oldest is older than
	// MaxAge.
	MaxBytes int64
	MaxAge   time.Duration
	// Now is the clock of retention (time.Now when nil).
	Now func() time.Time
	// Raft makes the log a Raft log (raft.go): its chunks are the
	// entries of a stream's Raft group, numbered on from the first kept;
	// readers see only what CommitTo committed, and the retention keeps
	// what is not committed.
	Raft bool
}

const maxSegmentBytes = 3 << 30

func (o *Options) fill() {
	if o.FS == nil {
		o.FS = store.OSFS{}
	}
	if o.MaxSegmentBytes <= 0 {
		o.MaxSegmentBytes = 500_000_000
	}
	o.MaxSegmentBytes = min(o.MaxSegmentBytes, maxSegmentBytes)
	if o.MaxSegmentChunks <= 0 {
		o.MaxSegmentChunks = 256_000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// segment is what the log keeps in memory of one segment.
type segment struct {
	id              uint64 // its file name: the first offset it was opened at
	chunks          int
	firstID, lastID uint64 // the ids of its first and last chunk (chunks > 0)
	firstTS, lastTS int64
	size            int64 // bytes written
	readable        int64 // bytes committed: what readers may read
	// A Raft log's numbering: the Raft index of the segment's first
	// entry, and lead, 1 when the segment opens with a tracking snapshot
	// (the log's own chunk, not an entry).
	firstOrd uint64
	lead     int
}

// entries is how many Raft entries s holds.
func (s *segment) entries() uint64 { return uint64(s.chunks - s.lead) }

// Log is one stream's log. One goroutine appends (Append, StoreOffset,
// Sync, Commit); readers and the accessors may run on any goroutine.
type Log struct {
	dir  string
	fs   store.FS
	opts Options

	// the writer's files: the last segment and its index
	seg, idx store.File

	mu        sync.Mutex
	segs      []*segment // oldest first; the last is the one written
	next      uint64     // the offset of the next record
	committed uint64     // chunks with an id below it are committed
	tracking  Tracking
	wake      chan struct{} // closed at the next commit
	closed    bool
	damaged   uint64 // chunks found damaged and skipped
	buf       []byte

	// a Raft log's (raft.go)
	terms     []termRun
	prevTerm  uint64 // the term of the entry before the first kept
	commitOrd uint64 // the last entry committed
	base      struct{ id, ord uint64 }
	baseSeq   uint64
}

var (
	// ErrClosed is returned by a closed log's operations.
	ErrClosed = errors.New("streamlog: closed")
	// ErrNoChunk is returned by Reader.Next when it has read every
	// committed chunk.
	ErrNoChunk = errors.New("streamlog: no chunk committed yet")
)

func segName(id uint64) string { return fmt.Sprintf("%020d.segment", id) }
func idxName(id uint64) string { return fmt.Sprintf("%020d.index", id) }

// Open opens (or creates) the log in dir, recovering what a crash left.
func Open(dir string, opts Options) (*Log, error) {
	opts.fill()
	l := &Log{dir: dir, fs: opts.FS, opts: opts, tracking: newTracking(), wake: make(chan struct{})}
	if err := l.fs.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	names, err := l.fs.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []uint64
	for _, n := range names {
		s, ok := strings.CutSuffix(n, ".segment")
		if !ok || len(s) != 20 {
			continue
		}
		id, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if opts.Raft {
		if ids, err = l.readBase(ids); err != nil {
			return nil, err
		}
	}
	for i, id := range ids {
		s, err := l.recoverSegment(id, i == len(ids)-1)
		if err != nil {
			return nil, fmt.Errorf("streamlog: segment %s: %w", segName(id), err)
		}
		l.segs = append(l.segs, s)
	}
	if len(l.segs) == 0 {
		if err := l.createSegment(l.base.id); err != nil {
			return nil, err
		}
		l.next = l.base.id
	} else {
		last := l.segs[len(l.segs)-1]
		if l.seg, err = l.fs.OpenFile(filepath.Join(dir, segName(last.id)), os.O_RDWR, 0); err != nil {
			return nil, err
		}
		if l.idx, err = l.fs.OpenFile(filepath.Join(dir, idxName(last.id)), os.O_RDWR, 0); err != nil {
			l.seg.Close()
			return nil, err
		}
		l.next = last.id
		for _, s := range slices.Backward(l.segs) {
			if s.chunks > 0 {
				h, err := l.indexedHeader(s.id, s.chunks-1)
				if err != nil {
					l.seg.Close()
					l.idx.Close()
					return nil, err
				}
				l.next = max(l.next, h.Next())
				break
			}
		}
		if err := l.recoverTracking(); err != nil {
			l.seg.Close()
			l.idx.Close()
			return nil, err
		}
	}
	l.committed = l.next
	if opts.Raft {
		if err := l.number(); err != nil {
			l.seg.Close()
			l.idx.Close()
			return nil, err
		}
	}
	return l, nil
}

// indexedHeader reads the header of the chunk of index record i of
// segment id.
func (l *Log) indexedHeader(id uint64, i int) (Header, error) {
	xf, err := l.fs.OpenFile(filepath.Join(l.dir, idxName(id)), os.O_RDONLY, 0)
	if err != nil {
		return Header{}, err
	}
	r, err := readIndexRecord(xf, i)
	xf.Close()
	if err != nil {
		return Header{}, err
	}
	f, err := l.fs.OpenFile(filepath.Join(l.dir, segName(id)), os.O_RDONLY, 0)
	if err != nil {
		return Header{}, err
	}
	defer f.Close()
	var b [HeaderSize]byte
	if _, err := f.ReadAt(b[:], int64(r.pos)); err != nil {
		return Header{}, err
	}
	return ParseHeader(b[:])
}

func readIndexRecord(f store.File, i int) (indexRecord, error) {
	var b [IndexRecordSize]byte
	if _, err := f.ReadAt(b[:], fileHeaderSize+int64(i)*IndexRecordSize); err != nil {
		return indexRecord{}, err
	}
	return parseIndexRecord(b[:]), nil
}

// createSegment starts segment id and makes it the one written.
func (l *Log) createSegment(id uint64) error {
	seg, err := l.fs.OpenFile(filepath.Join(l.dir, segName(id)), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	idx, err := l.fs.OpenFile(filepath.Join(l.dir, idxName(id)), os.O_RDWR|os.O_CREATE, 0o644)
	if err == nil {
		_, err = seg.WriteAt(segMagic, 0)
	}
	if err == nil {
		_, err = idx.WriteAt(idxMagic, 0)
	}
	if err == nil {
		err = seg.Truncate(fileHeaderSize)
	}
	if err == nil {
		err = idx.Truncate(fileHeaderSize)
	}
	if err == nil {
		err = l.fs.SyncDir(l.dir)
	}
	if err != nil {
		seg.Close()
		if idx != nil {
			idx.Close()
		}
		return err
	}
	if l.seg != nil {
		l.seg.Close()
		l.idx.Close()
	}
	l.seg, l.idx = seg, idx
	l.mu.Lock()
	ns := &segment{id: id, size: fileHeaderSize, readable: fileHeaderSize, firstOrd: l.base.ord}
	if n := len(l.segs); n > 0 {
		ns.firstOrd = l.segs[n-1].firstOrd + l.segs[n-1].entries()
	}
	l.segs = append(l.segs, ns)
	l.mu.Unlock()
	return nil
}

// Batch is a chunk to append.
type Batch struct {
	Type      uint8  // ChunkUser unless tracking
	Entries   uint16 // entries in Data
	Records   uint32 // records in Data (a sub-batch holds several)
	Data      []byte // the entries (AppendEntry, AppendSubBatch)
	Bloom     []byte // the Bloom filter of the entries' filter values, if any
	Timestamp int64  // ms; the writer's clock
	Epoch     uint64
	// Writers are the publishing ids the chunk settles, by publisher
	// reference (its trailer).
	Writers map[string]uint64
}

// Append writes b as the next chunk and returns its header. It is
// neither durable (Sync) nor visible to readers (Commit) yet.
func (l *Log) Append(b *Batch) (Header, error) {
	h, trailer, err := b.header()
	if err != nil {
		return Header{}, err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return Header{}, ErrClosed
	}
	s := l.segs[len(l.segs)-1]
	roll := s.chunks > 0 && (s.size+h.Size() > l.opts.MaxSegmentBytes || s.chunks >= l.opts.MaxSegmentChunks)
	l.mu.Unlock()
	if roll {
		if err := l.roll(b.Timestamp); err != nil {
			return Header{}, err
		}
	}
	return l.writeChunk(h, b.Bloom, b.Data, trailer)
}

// header checks b and returns its chunk's header (without the id, set
// when it is written) and its trailer.
func (b *Batch) header() (Header, []byte, error) {
	var trailer []byte
	if len(b.Writers) > 0 {
		trailer = encodeWriters(b.Writers)
	}
	if b.Entries == 0 || len(b.Bloom) > 255 || len(b.Data)+len(trailer) > MaxChunkData {
		return Header{}, nil, fmt.Errorf("streamlog: bad batch (%d entries, %d bytes)", b.Entries, len(b.Data))
	}
	return Header{Type: b.Type, Entries: b.Entries, Records: b.Records, Timestamp: b.Timestamp, Epoch: b.Epoch,
		CRC: crc32.ChecksumIEEE(b.Data), DataSize: uint32(len(b.Data)), TrailerSize: uint32(len(trailer)), BloomSize: uint8(len(b.Bloom))}, trailer, nil
}

// write writes a chunk of the log's own (a tracking chunk) of one entry
// and one record.
func (l *Log) write(typ uint8, data []byte, ts int64, epoch uint64) (Header, error) {
	h := Header{Type: typ, Entries: 1, Records: 1, Timestamp: ts, Epoch: epoch, CRC: crc32.ChecksumIEEE(data), DataSize: uint32(len(data))}
	return l.writeChunk(h, nil, data, nil)
}

// writeChunk writes a chunk with header h (its id is the log's next
// offset) and its parts, and takes its tracking records.
func (l *Log) writeChunk(h Header, bloom, data, trailer []byte) (Header, error) {
	l.mu.Lock()
	s := l.segs[len(l.segs)-1]
	h.ID = l.next
	pos := s.size
	l.buf = slices.Grow(l.buf[:0], int(h.Size()))[:HeaderSize]
	h.Encode(l.buf)
	l.buf = append(append(append(l.buf, bloom...), data...), trailer...)
	buf := l.buf
	l.mu.Unlock()
	if _, err := l.seg.WriteAt(buf, pos); err != nil {
		return Header{}, err
	}
	var rec [IndexRecordSize]byte
	(&indexRecord{id: h.ID, timestamp: h.Timestamp, epoch: h.Epoch, pos: uint32(pos), typ: h.Type}).encode(rec[:])
	if _, err := l.idx.WriteAt(rec[:], fileHeaderSize+int64(s.chunks)*IndexRecordSize); err != nil {
		return Header{}, err
	}
	l.mu.Lock()
	if s.chunks == 0 {
		s.firstID, s.firstTS = h.ID, h.Timestamp
		if h.Type == ChunkTrackingSnapshot {
			s.lead = 1
		}
	}
	s.chunks++
	s.lastID, s.lastTS = h.ID, h.Timestamp
	s.size = pos + h.Size()
	l.next = h.Next()
	switch h.Type {
	case ChunkUser:
		if len(trailer) > 0 {
			_ = l.tracking.apply(trailer, h.ID, false)
		}
	case ChunkTrackingDelta:
		_ = l.tracking.apply(data, h.ID, false)
	case ChunkTrackingSnapshot:
		l.tracking = newTracking()
		_ = l.tracking.apply(data, h.ID, true)
	}
	if l.opts.Raft && s.chunks > s.lead {
		l.noteTerm(s.firstOrd+s.entries()-1, h.Epoch)
	}
	l.mu.Unlock()
	return h, nil
}

// StoreOffset records a consumer reference's offset in a tracking chunk.
func (l *Log) StoreOffset(ref string, offset uint64, ts int64, epoch uint64) error {
	if len(ref) == 0 || len(ref) > MaxReference {
		return fmt.Errorf("streamlog: bad reference %q", ref)
	}
	data := appendTrack(nil, trackOffset, ref, offset)
	_, err := l.write(ChunkTrackingDelta, data, ts, epoch)
	return err
}

// roll closes the segment written and opens the next, which starts with
// a snapshot of the tracking state (stamped ts, the time of the chunk that
// rolls it: replicas of a Raft log write the same bytes); then the
// retention runs.
func (l *Log) roll(ts int64) error {
	if err := l.Sync(); err != nil {
		return err
	}
	l.mu.Lock()
	next, snap := l.next, l.tracking.clone()
	l.mu.Unlock()
	if err := l.createSegment(next); err != nil {
		return err
	}
	if len(snap.Writers) > 0 || len(snap.Offsets) > 0 {
		if _, err := l.write(ChunkTrackingSnapshot, snap.encodeSnapshot(), ts, 0); err != nil {
			return err
		}
	}
	_, err := l.Retain()
	return err
}

// Retain deletes the closed segments beyond the retention and returns how
// many went.
func (l *Log) Retain() (int, error) {
	now := l.opts.Now().UnixMilli()
	n := 0
	for {
		l.mu.Lock()
		if l.closed || len(l.segs) < 2 {
			l.mu.Unlock()
			return n, nil
		}
		var total int64
		for _, s := range l.segs {
			total += s.size
		}
		s := l.segs[0]
		drop := l.opts.MaxBytes > 0 && total > l.opts.MaxBytes ||
			l.opts.MaxAge > 0 && s.chunks > 0 && s.lastTS < now-l.opts.MaxAge.Milliseconds() ||
			s.chunks == 0
		if l.opts.Raft && s.firstOrd+s.entries()-1 > l.commitOrd {
			drop = false // a Raft log keeps what is not committed
		}
		if !drop {
			l.mu.Unlock()
			return n, nil
		}
		if l.opts.Raft {
			nx := l.segs[1]
			prev := l.prevTerm
			if k := sort.Search(len(l.terms), func(k int) bool { return l.terms[k].ord >= nx.firstOrd }); k > 0 {
				prev = l.terms[k-1].term
			}
			l.mu.Unlock()
			// the numbering of the segment kept first, before the segment goes
			if err := l.writeBase(nx.id, nx.firstOrd, prev); err != nil {
				return n, err
			}
			l.mu.Lock()
			l.prevTerm = prev
			if k := sort.Search(len(l.terms), func(k int) bool { return l.terms[k].ord > nx.firstOrd }); k > 1 {
				l.terms = l.terms[k-1:]
			}
		}
		l.segs = l.segs[1:]
		l.mu.Unlock()
		// Readers of the segment keep their open file (removed, still
		// readable) and go to the first segment after it.
		err := l.fs.Remove(filepath.Join(l.dir, segName(s.id)))
		if err == nil || errors.Is(err, os.ErrNotExist) {
			err = l.fs.Remove(filepath.Join(l.dir, idxName(s.id)))
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return n, err
		}
		n++
		if err := l.fs.SyncDir(l.dir); err != nil {
			return n, err
		}
	}
}

// Sync makes what was appended durable.
func (l *Log) Sync() error {
	if err := l.seg.Sync(); err != nil {
		return err
	}
	return l.idx.Sync()
}

// Commit makes every chunk appended so far visible to readers.
func (l *Log) Commit() {
	l.mu.Lock()
	if l.next <= l.committed {
		l.mu.Unlock()
		return
	}
	l.committed = l.next
	for _, s := range l.segs {
		s.readable = s.size
	}
	w := l.wake
	l.wake = make(chan struct{})
	l.mu.Unlock()
	close(w)
}

// Wait returns a channel closed at the next commit (or Close).
func (l *Log) Wait() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.wake
}

// Close closes the log's files; readers get ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	w := l.wake
	l.mu.Unlock()
	close(w)
	err := l.Sync()
	l.seg.Close()
	l.idx.Close()
	return err
}

// Delete closes the log and removes its directory.
func (l *Log) Delete() error {
	l.Close()
	names, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := l.fs.Remove(filepath.Join(l.dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return l.fs.Remove(l.dir)
}

// Info is what the log says of itself.
type Info struct {
	Segments       int
	Bytes          int64
	FirstOffset    uint64 // the first chunk's id (Next when empty)
	FirstTimestamp int64  // ms, 0 when empty
	LastChunkID    uint64 // the last chunk's id (valid when Chunks > 0)
	LastTimestamp  int64
	Next           uint64 // the offset of the next record
	Committed      uint64 // chunks below it are committed
	Chunks         int
	Damaged        uint64 // damaged chunks skipped by recovery and readers
}

// Info returns the log's numbers.
func (l *Log) Info() Info {
	l.mu.Lock()
	defer l.mu.Unlock()
	in := Info{Segments: len(l.segs), Next: l.next, Committed: l.committed, FirstOffset: l.next, Damaged: l.damaged}
	first := true
	for _, s := range l.segs {
		in.Bytes += s.size
		in.Chunks += s.chunks
		if s.chunks == 0 {
			continue
		}
		if first {
			in.FirstOffset, in.FirstTimestamp, first = s.firstID, s.firstTS, false
		}
		in.LastChunkID, in.LastTimestamp = s.lastID, s.lastTS
	}
	return in
}

// Tracking returns a copy of the tracking state.
func (l *Log) Tracking() Tracking {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tracking.clone()
}

// WriterSeq returns the last publishing id of publisher reference ref.
func (l *Log) WriterSeq(ref string) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.tracking.Writers[ref]
	return w.Seq, ok
}

// Offset returns the offset stored for consumer reference ref.
func (l *Log) Offset(ref string) (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	o, ok := l.tracking.Offsets[ref]
	return o, ok
}

// recoverSegment reads what the log keeps of segment id. The last
// segment (the one written before the crash) is checked chunk by chunk:
// a torn tail is cut off, a damaged chunk skipped, and its index is
// rewritten from what it holds.
func (l *Log) recoverSegment(id uint64, last bool) (*segment, error) {
	s := &segment{id: id}
	sf, err := l.fs.OpenFile(filepath.Join(l.dir, segName(id)), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer sf.Close()
	size, err := sf.Size()
	if err != nil {
		return nil, err
	}
	xf, err := l.fs.OpenFile(filepath.Join(l.dir, idxName(id)), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	defer xf.Close()
	xsize, err := xf.Size()
	if err != nil {
		return nil, err
	}
	if size < fileHeaderSize {
		if _, err := sf.WriteAt(segMagic, 0); err != nil {
			return nil, err
		}
		if err := sf.Truncate(fileHeaderSize); err != nil {
			return nil, err
		}
		size = fileHeaderSize
	}
	if !last && xsize >= fileHeaderSize+IndexRecordSize {
		// A closed segment was synced before the next one was made:
		// trust its index, checking its ends.
		n := int((xsize - fileHeaderSize) / IndexRecordSize)
		first, err1 := readIndexRecord(xf, 0)
		lastR, err2 := readIndexRecord(xf, n-1)
		if err1 == nil && err2 == nil {
			var b [HeaderSize]byte
			if _, err := sf.ReadAt(b[:], int64(lastR.pos)); err == nil {
				if h, err := ParseHeader(b[:]); err == nil && h.ID == lastR.id && int64(lastR.pos)+h.Size() <= size {
					s.chunks, s.firstID, s.firstTS, s.lastID, s.lastTS = n, first.id, first.timestamp, lastR.id, lastR.timestamp
					if first.typ == ChunkTrackingSnapshot {
						s.lead = 1
					}
					s.size = int64(lastR.pos) + h.Size()
					s.readable = s.size
					return s, nil
				}
			}
		}
	}
	// Scan the segment and rewrite its index.
	recs, end, damaged, err := scanSegment(sf, size)
	if err != nil {
		return nil, err
	}
	l.damaged += uint64(damaged)
	buf := make([]byte, 0, fileHeaderSize+len(recs)*IndexRecordSize)
	buf = append(buf, idxMagic...)
	for _, r := range recs {
		var b [IndexRecordSize]byte
		r.encode(b[:])
		buf = append(buf, b[:]...)
	}
	if _, err := xf.WriteAt(buf, 0); err != nil {
		return nil, err
	}
	if err := xf.Truncate(int64(len(buf))); err != nil {
		return nil, err
	}
	if end < size {
		if err := sf.Truncate(end); err != nil {
			return nil, err
		}
	}
	if err := sf.Sync(); err != nil {
		return nil, err
	}
	if err := xf.Sync(); err != nil {
		return nil, err
	}
	s.size, s.readable, s.chunks = end, end, len(recs)
	if len(recs) > 0 {
		s.firstID, s.firstTS = recs[0].id, recs[0].timestamp
		if recs[0].typ == ChunkTrackingSnapshot {
			s.lead = 1
		}
		s.lastID, s.lastTS = recs[len(recs)-1].id, recs[len(recs)-1].timestamp
	}
	return s, nil
}

// scanSegment reads a segment's chunks and checks each: it returns their
// index records, where the last good chunk ends, and how many damaged
// chunks it skipped. A damaged chunk whose header still says how long it
// is is stepped over; otherwise the scan looks for the next good chunk.
func scanSegment(f store.File, size int64) (recs []indexRecord, end int64, damaged int, err error) {
	pos := int64(fileHeaderSize)
	end = pos
	var hb [HeaderSize]byte
	var data []byte
	var lastID uint64
	have := false
	good := func(p int64) (Header, bool) {
		if p+HeaderSize > size {
			return Header{}, false
		}
		if _, err := f.ReadAt(hb[:], p); err != nil {
			return Header{}, false
		}
		h, err := ParseHeader(hb[:])
		if err != nil || p+h.Size() > size || have && h.ID <= lastID {
			return h, false
		}
		data = slices.Grow(data[:0], int(h.DataSize))[:h.DataSize]
		if _, err := f.ReadAt(data, p+HeaderSize+int64(h.BloomSize)); err != nil && !errors.Is(err, io.EOF) {
			return h, false
		}
		return h, crc32.ChecksumIEEE(data) == h.CRC
	}
	for pos+HeaderSize <= size {
		h, ok := good(pos)
		if ok {
			recs = append(recs, indexRecord{id: h.ID, timestamp: h.Timestamp, epoch: h.Epoch, pos: uint32(pos), typ: h.Type})
			lastID, have = h.ID, true
			pos += h.Size()
			end = pos
			continue
		}
		// Damaged, or the torn end of the writes a crash cut short:
		// look for a good chunk after it.
		next := int64(-1)
		if h.DataSize > 0 && pos+h.Size() <= size {
			if _, ok := good(pos + h.Size()); ok {
				next = pos + h.Size()
			}
		}
		for p := pos + 1; next < 0 && p+HeaderSize <= size; p++ {
			var one [1]byte
			if _, err := f.ReadAt(one[:], p); err != nil {
				break
			}
			if one[0] != magicVersion {
				continue
			}
			if _, ok := good(p); ok {
				next = p
			}
		}
		if next < 0 {
			break // a torn tail: cut at end
		}
		damaged++
		pos = next
	}
	return recs, end, damaged, nil
}

// recoverTracking rebuilds the tracking state from the last segment that
// opens with a snapshot (or the first), reading the tracking chunks and
// the trailers after it.
func (l *Log) recoverTracking() error {
	from := 0
	for i := len(l.segs) - 1; i >= 0; i-- {
		s := l.segs[i]
		if s.chunks == 0 {
			continue
		}
		h, err := l.indexedHeader(s.id, 0)
		if err == nil && h.Type == ChunkTrackingSnapshot {
			from = i
			break
		}
	}
	for _, s := range l.segs[from:] {
		if err := l.readTracking(s); err != nil {
			return err
		}
	}
	return nil
}

func (l *Log) readTracking(s *segment) error {
	if s.chunks == 0 {
		return nil
	}
	sf, err := l.fs.OpenFile(filepath.Join(l.dir, segName(s.id)), os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer sf.Close()
	xf, err := l.fs.OpenFile(filepath.Join(l.dir, idxName(s.id)), os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer xf.Close()
	xb := make([]byte, s.chunks*IndexRecordSize)
	if _, err := xf.ReadAt(xb, fileHeaderSize); err != nil {
		return err
	}
	var hb [HeaderSize]byte
	var buf []byte
	for i := range s.chunks {
		r := parseIndexRecord(xb[i*IndexRecordSize:])
		if _, err := sf.ReadAt(hb[:], int64(r.pos)); err != nil {
			return err
		}
		h, err := ParseHeader(hb[:])
		if err != nil {
			continue // damaged: its reader skips it too
		}
		var part []byte
		var off int64
		switch {
		case h.Type == ChunkUser && h.TrailerSize > 0:
			part, off = buf[:0], int64(r.pos)+HeaderSize+int64(h.BloomSize)+int64(h.DataSize)
			part = slices.Grow(part, int(h.TrailerSize))[:h.TrailerSize]
		case h.Type != ChunkUser:
			part, off = buf[:0], int64(r.pos)+HeaderSize+int64(h.BloomSize)
			part = slices.Grow(part, int(h.DataSize))[:h.DataSize]
		default:
			continue
		}
		if _, err := sf.ReadAt(part, off); err != nil {
			return err
		}
		buf = part
		if h.Type != ChunkUser && crc32.ChecksumIEEE(part) != h.CRC {
			continue
		}
		if h.Type == ChunkTrackingSnapshot {
			l.tracking = newTracking()
		}
		if err := l.tracking.apply(part, h.ID, h.Type == ChunkTrackingSnapshot); err != nil {
			continue
		}
	}
	return nil
}
