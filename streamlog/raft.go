package streamlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// A Raft log (Options.Raft) is a stream's log as its Raft group's log
// (streamraft): each entry of the group is one chunk, so the stream's data
// is written once, in its segments, and never in a second log. Entries are
// numbered from 1 across segments: a segment knows the Raft index of its
// first entry (firstOrd); the tracking snapshot that opens a segment is
// the log's own chunk, not an entry (every replica writes the same one at
// the same place, since it rolls at the same chunk). An entry's Raft term
// is its chunk's epoch, and its id is the log's next offset when it is
// appended, so replicas of the same entries hold the same bytes.
//
// Entries that carry no chunk of the stream (the leader's empty entry of
// each term, configuration changes) are ChunkRaft chunks: readers skip
// them as they skip tracking chunks. Each takes one offset, as tracking
// chunks do, so chunk ids stay strictly increasing.
//
// The retention is the log's compaction: a closed segment goes only when
// every entry in it is committed, and the numbering of the first segment
// kept (its id, first index and the term of the entry before it) is
// written to the base file first. Readers see committed entries only
// (CommitTo), after a restart too.

// ChunkRaft is a Raft entry that carries no chunk of the stream: its data
// is the entry's type then its data.
const ChunkRaft uint8 = 3

const baseFile = "raft.base"

// termRun: the entries from ord on have term (until the next run).
type termRun struct{ ord, term uint64 }

var (
	// ErrCompacted is returned for an entry before the first one kept.
	ErrCompacted = errors.New("streamlog: entry compacted")
	// ErrUnavailable is returned for an entry after the last one.
	ErrUnavailable = errors.New("streamlog: entry not in the log")
)

// EncodeChunk builds the chunk of b as AppendRaw takes it: its id and
// epoch are set when it is appended.
func EncodeChunk(b *Batch) ([]byte, error) {
	h, trailer, err := b.header()
	if err != nil {
		return nil, err
	}
	h.Epoch = 0
	raw := make([]byte, HeaderSize, h.Size())
	h.Encode(raw)
	return append(append(append(raw, b.Bloom...), b.Data...), trailer...), nil
}

// RaftChunk is the chunk of an entry that carries no chunk of the stream.
func RaftChunk(typ byte, data []byte, ts int64) []byte {
	d := append([]byte{typ}, data...)
	h := Header{Type: ChunkRaft, Entries: 1, Records: 1, Timestamp: ts, CRC: crc32.ChecksumIEEE(d), DataSize: uint32(len(d))}
	raw := make([]byte, HeaderSize, h.Size())
	h.Encode(raw)
	return append(raw, d...)
}

// ParseRaw checks a chunk as AppendRaw takes it and returns its header.
func ParseRaw(raw []byte) (Header, error) {
	h, err := ParseHeader(raw)
	if err != nil {
		return Header{}, err
	}
	if int64(len(raw)) != h.Size() {
		return Header{}, errBadHeader
	}
	c := Chunk{Header: h, Raw: raw}
	if !c.Valid() {
		return Header{}, errors.New("streamlog: chunk data does not match its CRC")
	}
	if h.Type == ChunkRaft && h.DataSize == 0 {
		return Header{}, errBadHeader
	}
	return h, nil
}

// AppendRaw appends the chunk raw (EncodeChunk, RaftChunk, or an entry
// read from another replica) as the next entry, with epoch (its term).
func (l *Log) AppendRaw(raw []byte, epoch uint64) (Header, error) {
	h, err := ParseRaw(raw)
	if err != nil {
		return Header{}, err
	}
	h.Epoch = epoch
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return Header{}, ErrClosed
	}
	s := l.segs[len(l.segs)-1]
	roll := s.chunks > 0 && (s.size+h.Size() > l.opts.MaxSegmentBytes || s.chunks >= l.opts.MaxSegmentChunks)
	l.mu.Unlock()
	if roll {
		if err := l.roll(h.Timestamp); err != nil {
			return Header{}, err
		}
	}
	b := raw[HeaderSize:]
	return l.writeChunk(h, b[:h.BloomSize], b[h.BloomSize:uint32(h.BloomSize)+h.DataSize], b[uint32(h.BloomSize)+h.DataSize:])
}

// noteTerm records that entry ord has term (l.mu held).
func (l *Log) noteTerm(ord, term uint64) {
	if n := len(l.terms); n == 0 || l.terms[n-1].term != term {
		l.terms = append(l.terms, termRun{ord, term})
	}
}

// FirstIndex is the Raft index of the first entry kept; LastIndex that of
// the last (FirstIndex-1 when there is none).
func (l *Log) FirstIndex() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.segs[0].firstOrd
}

// LastIndex is the Raft index of the last entry.
func (l *Log) LastIndex() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastOrdLocked()
}

func (l *Log) lastOrdLocked() uint64 {
	s := l.segs[len(l.segs)-1]
	return s.firstOrd + s.entries() - 1
}

// Base is the Raft index and term of the entry before the first kept
// (0, 0 when none was ever dropped).
func (l *Log) Base() (index, term uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.segs[0].firstOrd - 1, l.prevTerm
}

// Term is the term of entry ord.
func (l *Log) Term(ord uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := l.segs[0].firstOrd
	switch {
	case ord == first-1:
		return l.prevTerm, nil
	case ord < first:
		return 0, ErrCompacted
	case ord > l.lastOrdLocked():
		return 0, ErrUnavailable
	}
	i := sort.Search(len(l.terms), func(i int) bool { return l.terms[i].ord > ord })
	if i == 0 {
		return 0, fmt.Errorf("streamlog: no term known for entry %d", ord)
	}
	return l.terms[i-1].term, nil
}

// locate finds entry ord: its segment (a copy) and its chunk's number in
// it (l.mu held).
func (l *Log) locate(ord uint64) (segment, int, error) {
	first := l.segs[0].firstOrd
	if ord < first {
		return segment{}, 0, ErrCompacted
	}
	if ord > l.lastOrdLocked() {
		return segment{}, 0, ErrUnavailable
	}
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].firstOrd > ord }) - 1
	// segments without entries share their firstOrd with the next one
	for i > 0 && l.segs[i].entries() == 0 {
		i--
	}
	s := l.segs[i]
	return *s, s.lead + int(ord-s.firstOrd), nil
}

// chunkEnd is where chunk j of s ends and, when a chunk follows it in s,
// that chunk's id (more: false for s's last chunk).
func (l *Log) chunkEnd(s *segment, j int) (end int64, nextID uint64, more bool, err error) {
	if j+1 >= s.chunks {
		return s.size, 0, false, nil
	}
	xf, err := l.fs.OpenFile(filepath.Join(l.dir, idxName(s.id)), os.O_RDONLY, 0)
	if err != nil {
		return 0, 0, false, err
	}
	defer xf.Close()
	r, err := readIndexRecord(xf, j+1)
	return int64(r.pos), r.id, true, err
}

// Entries reads the entries from lo up to hi (exclusive), at least one
// and then while their size stays within maxSize; fn gets each entry's
// chunk (its bytes are fn's until it returns) and term.
func (l *Log) Entries(lo, hi uint64, maxSize uint64, fn func(ord uint64, raw []byte, term uint64) error) error {
	var buf []byte
	var total uint64
	for ord := lo; ord < hi; {
		l.mu.Lock()
		s, j, err := l.locate(ord)
		l.mu.Unlock()
		if err != nil {
			return err
		}
		xf, err := l.fs.OpenFile(filepath.Join(l.dir, idxName(s.id)), os.O_RDONLY, 0)
		if err != nil {
			return err
		}
		r, err := readIndexRecord(xf, j)
		xf.Close()
		if err != nil {
			return err
		}
		sf, err := l.fs.OpenFile(filepath.Join(l.dir, segName(s.id)), os.O_RDONLY, 0)
		if err != nil {
			return err
		}
		pos := int64(r.pos)
		for ; ord < hi && j < s.chunks; j, ord = j+1, ord+1 {
			buf = slices.Grow(buf[:0], HeaderSize)[:HeaderSize]
			if _, err = sf.ReadAt(buf, pos); err != nil {
				break
			}
			var h Header
			if h, err = ParseHeader(buf); err != nil {
				err = fmt.Errorf("streamlog: entry %d: %w", ord, err)
				break
			}
			if total > 0 && total+uint64(h.Size()) > maxSize {
				sf.Close()
				return nil
			}
			buf = slices.Grow(buf, int(h.Size()-HeaderSize))[:h.Size()]
			if _, err = sf.ReadAt(buf[HeaderSize:], pos+HeaderSize); err != nil && !errors.Is(err, io.EOF) {
				break
			}
			err = nil
			if err = fn(ord, buf, h.Epoch); err != nil {
				break
			}
			total += uint64(h.Size())
			pos += h.Size()
		}
		sf.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// TruncateFrom removes entry ord and every entry after it (a follower's
// log that differs from its leader's). Committed entries are never
// truncated (Raft does not ask).
func (l *Log) TruncateFrom(ord uint64) error {
	l.mu.Lock()
	if ord > l.lastOrdLocked() {
		l.mu.Unlock()
		return nil
	}
	if ord <= l.commitOrd {
		l.mu.Unlock()
		return fmt.Errorf("streamlog: truncating committed entry %d (committed %d)", ord, l.commitOrd)
	}
	s, j, err := l.locate(ord)
	if err != nil {
		l.mu.Unlock()
		return err
	}
	var drop []*segment
	i := slices.IndexFunc(l.segs, func(x *segment) bool { return x.id == s.id })
	if j <= s.lead && i > 0 {
		// the whole segment goes (its snapshot is written again at the
		// next roll)
		drop = slices.Clone(l.segs[i:])
		i--
		s = *l.segs[i]
		j = s.chunks
	} else {
		drop = slices.Clone(l.segs[i+1:])
	}
	l.mu.Unlock()
	for _, d := range drop {
		if err := l.fs.Remove(filepath.Join(l.dir, segName(d.id))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := l.fs.Remove(filepath.Join(l.dir, idxName(d.id))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	seg, err := l.fs.OpenFile(filepath.Join(l.dir, segName(s.id)), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	idx, err := l.fs.OpenFile(filepath.Join(l.dir, idxName(s.id)), os.O_RDWR, 0)
	if err != nil {
		seg.Close()
		return err
	}
	cut, next, nextKnown := s.size, uint64(0), false
	ls := s
	if j < s.chunks {
		r, err := readIndexRecord(idx, j)
		if err != nil {
			seg.Close()
			idx.Close()
			return err
		}
		cut, next, nextKnown = int64(r.pos), r.id, true // the cut chunk's id
		ls.chunks, ls.size, ls.readable = j, cut, min(ls.readable, cut)
		if j > 0 {
			pr, err := readIndexRecord(idx, j-1)
			if err != nil {
				seg.Close()
				idx.Close()
				return err
			}
			ls.lastID, ls.lastTS = pr.id, pr.timestamp
		}
	}
	err = seg.Truncate(cut)
	if err == nil {
		err = idx.Truncate(fileHeaderSize + int64(ls.chunks)*IndexRecordSize)
	}
	if err == nil {
		err = seg.Sync()
	}
	if err == nil {
		err = idx.Sync()
	}
	if err == nil {
		err = l.fs.SyncDir(l.dir)
	}
	if err != nil {
		seg.Close()
		idx.Close()
		return err
	}
	if l.seg != nil {
		l.seg.Close()
		l.idx.Close()
	}
	l.seg, l.idx = seg, idx
	l.mu.Lock()
	l.segs = append(l.segs[:i], &ls)
	l.mu.Unlock()
	switch {
	case nextKnown:
	case ls.chunks > 0: // the whole segment after it went: after its last chunk
		h, err := l.indexedHeader(ls.id, ls.chunks-1)
		if err != nil {
			return err
		}
		next = h.Next()
	default:
		next = ls.id
	}
	l.mu.Lock()
	l.next = next
	last := l.lastOrdLocked()
	k := sort.Search(len(l.terms), func(k int) bool { return l.terms[k].ord > last })
	l.terms = l.terms[:k]
	l.tracking = newTracking()
	l.mu.Unlock()
	return l.recoverTracking()
}

// CommitTo makes the entries up to ord visible to readers.
func (l *Log) CommitTo(ord uint64) error {
	l.mu.Lock()
	ord = min(ord, l.lastOrdLocked())
	if ord <= l.commitOrd {
		l.mu.Unlock()
		return nil
	}
	s, j, err := l.locate(ord)
	l.mu.Unlock()
	if err != nil {
		return err
	}
	// the offset after the committed chunk: the next chunk's id
	end, next, more, err := l.chunkEnd(&s, j)
	if err != nil {
		return err
	}
	l.mu.Lock()
	for i, x := range l.segs {
		switch {
		case x.id < s.id:
			x.readable = x.size
		case x.id == s.id:
			x.readable = max(x.readable, end)
			if !more {
				next = l.next // the last chunk appended...
				if i+1 < len(l.segs) {
					next = l.segs[i+1].id // ...or the first of the next segment
				}
			}
		}
	}
	l.commitOrd = ord
	l.committed = max(l.committed, next)
	w := l.wake
	l.wake = make(chan struct{})
	l.mu.Unlock()
	close(w)
	return nil
}

// CommittedIndex is the Raft index of the last entry committed.
func (l *Log) CommittedIndex() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.commitOrd
}

// Lead returns the first segment's id and the chunk that opens it when
// it is the log's own (a tracking snapshot), for a Raft snapshot: a
// replica that installs it (Reset) starts as this log starts.
func (l *Log) Lead() (firstID uint64, lead []byte, err error) {
	l.mu.Lock()
	s := *l.segs[0]
	l.mu.Unlock()
	if s.lead == 0 {
		return s.id, nil, nil
	}
	f, err := l.fs.OpenFile(filepath.Join(l.dir, segName(s.id)), os.O_RDONLY, 0)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	r := &Reader{l: l, seg: s.id, pos: fileHeaderSize, f: f}
	end, _, _, err := l.chunkEnd(&s, 0)
	if err != nil {
		return 0, nil, err
	}
	c, err := r.read(end)
	if err != nil {
		return 0, nil, err
	}
	return s.id, slices.Clone(c.Raw), nil
}

// Reset empties the log and starts it again at offset firstID with entry
// ord, after an entry of term prevTerm (a Raft snapshot from a leader
// whose retention dropped entries this log lacks); lead, when not nil, is
// the chunk that opens the leader's first segment (Lead).
func (l *Log) Reset(firstID, ord, prevTerm uint64, lead []byte) error {
	var lh Header
	if lead != nil {
		h, err := ParseRaw(lead)
		if err != nil || h.Type != ChunkTrackingSnapshot || h.ID != firstID {
			return fmt.Errorf("streamlog: bad lead chunk for a reset at %d", firstID)
		}
		lh = h
	}
	l.mu.Lock()
	segs := l.segs
	l.mu.Unlock()
	if err := l.writeBase(firstID, ord, prevTerm); err != nil {
		return err
	}
	l.base.id, l.base.ord = firstID, ord
	l.seg.Close()
	l.idx.Close()
	l.seg, l.idx = nil, nil
	for _, s := range segs {
		if s.id == firstID {
			continue // created again below
		}
		if err := l.fs.Remove(filepath.Join(l.dir, segName(s.id))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := l.fs.Remove(filepath.Join(l.dir, idxName(s.id))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	l.mu.Lock()
	l.segs = nil
	l.next = firstID
	l.tracking = newTracking()
	l.terms = nil
	l.prevTerm = prevTerm
	l.commitOrd = ord - 1
	l.committed = firstID
	l.mu.Unlock()
	if err := l.createSegment(firstID); err != nil {
		return err
	}
	if lead != nil {
		b := lead[HeaderSize:]
		if _, err := l.writeChunk(lh, nil, b[:lh.DataSize], nil); err != nil {
			return err
		}
		l.mu.Lock()
		l.segs[0].readable = l.segs[0].size
		l.mu.Unlock()
	}
	return l.Sync()
}

// writeBase records the numbering of segment id: its first entry is
// ord, after an entry of term prevTerm. The base file has two slots
// written in turn, each with a sequence number and a CRC, so that a torn
// write leaves the other.
func (l *Log) writeBase(id, ord, prevTerm uint64) error {
	l.baseSeq++
	b := make([]byte, baseSlot)
	binary.BigEndian.PutUint64(b, l.baseSeq)
	binary.BigEndian.PutUint64(b[8:], id)
	binary.BigEndian.PutUint64(b[16:], ord)
	binary.BigEndian.PutUint64(b[24:], prevTerm)
	binary.BigEndian.PutUint32(b[32:], crc32.ChecksumIEEE(b[:32]))
	f, err := l.fs.OpenFile(filepath.Join(l.dir, baseFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(b, int64(l.baseSeq%2)*baseSlot)
	if err == nil {
		err = f.Sync()
	}
	f.Close()
	if err == nil {
		err = l.fs.SyncDir(l.dir)
	}
	return err
}

const baseSlot = 36

// number gives a Raft log's segments their numbering after recovery,
// on from the base (readBase), and records the entries' terms. Nothing
// is committed until the group says so (CommitTo).
func (l *Log) number() error {
	l.segs[0].firstOrd = l.base.ord
	for i := 1; i < len(l.segs); i++ {
		l.segs[i].firstOrd = l.segs[i-1].firstOrd + l.segs[i-1].entries()
	}
	l.terms = nil
	for _, s := range l.segs {
		if s.chunks == 0 {
			continue
		}
		xf, err := l.fs.OpenFile(filepath.Join(l.dir, idxName(s.id)), os.O_RDONLY, 0)
		if err != nil {
			return err
		}
		xb := make([]byte, s.chunks*IndexRecordSize)
		_, err = xf.ReadAt(xb, fileHeaderSize)
		xf.Close()
		if err != nil {
			return err
		}
		for j := s.lead; j < s.chunks; j++ {
			r := parseIndexRecord(xb[j*IndexRecordSize:])
			l.noteTerm(s.firstOrd+uint64(j-s.lead), r.epoch)
		}
	}
	for _, s := range l.segs {
		s.readable = fileHeaderSize
	}
	l.commitOrd = l.segs[0].firstOrd - 1
	l.committed = l.segs[0].id
	return nil
}

// readBase reads a Raft log's base file (l.base, l.prevTerm) and returns
// the segments to recover: those before the base segment, which a crash
// during the retention left, are removed, and none when the base segment
// is missing (a crash during Reset: the log starts again empty there).
func (l *Log) readBase(ids []uint64) ([]uint64, error) {
	l.base.ord = 1
	f, err := l.fs.OpenFile(filepath.Join(l.dir, baseFile), os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return ids, nil
	}
	if err != nil {
		return nil, err
	}
	b := make([]byte, 2*baseSlot)
	n, err := f.ReadAt(b, 0)
	f.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	found := false
	for i := 0; (i+1)*baseSlot <= n; i++ {
		sl := b[i*baseSlot : (i+1)*baseSlot]
		if crc32.ChecksumIEEE(sl[:32]) != binary.BigEndian.Uint32(sl[32:]) {
			continue
		}
		if seq := binary.BigEndian.Uint64(sl); !found || seq > l.baseSeq {
			found = true
			l.baseSeq = seq
			l.base.id, l.base.ord, l.prevTerm = binary.BigEndian.Uint64(sl[8:]), binary.BigEndian.Uint64(sl[16:]), binary.BigEndian.Uint64(sl[24:])
		}
	}
	if !found {
		return nil, errors.New("streamlog: damaged base file")
	}
	keep := ids[:0:0]
	for _, id := range ids {
		if id >= l.base.id {
			keep = append(keep, id)
			continue
		}
		for _, n := range []string{segName(id), idxName(id)} {
			if err := l.fs.Remove(filepath.Join(l.dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
		}
	}
	if len(keep) == 0 || keep[0] != l.base.id {
		for _, id := range keep {
			for _, n := range []string{segName(id), idxName(id)} {
				if err := l.fs.Remove(filepath.Join(l.dir, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
					return nil, err
				}
			}
		}
		keep = nil
	}
	return keep, nil
}
