package streamlog

import (
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/warrenmq/warren/store"
)

// Reader reads a log's committed chunks in order, from its files.
type Reader struct {
	l   *Log
	seg uint64 // the id of the segment read
	pos int64  // where the next chunk starts in it
	f   store.File
	buf []byte
}

// Position is where a reader starts.
type Position struct {
	seg uint64
	pos int64
}

// First is the position of the log's first chunk.
func (l *Log) First() Position {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Position{l.segs[0].id, fileHeaderSize}
}

// End is the position after the last chunk appended: a reader there
// reads what is appended next.
func (l *Log) End() Position {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.segs[len(l.segs)-1]
	if l.opts.Raft {
		// after the last committed chunk: what is appended but not
		// committed yet is read once it is
		for i := len(l.segs) - 1; i > 0 && l.segs[i].readable <= fileHeaderSize; i-- {
			s = l.segs[i-1]
		}
		return Position{s.id, s.readable}
	}
	return Position{s.id, s.size}
}

// Last is the position of the last user chunk (End when there is none).
func (l *Log) Last() (Position, error) {
	l.mu.Lock()
	segs := slices.Clone(l.segs)
	l.mu.Unlock()
	for _, s := range slices.Backward(segs) {
		if s.chunks == 0 {
			continue
		}
		xf, err := l.fs.OpenFile(filepath.Join(l.dir, idxName(s.id)), os.O_RDONLY, 0)
		if err != nil {
			return Position{}, err
		}
		for i := s.chunks - 1; i >= 0; i-- {
			r, err := readIndexRecord(xf, i)
			if err != nil {
				xf.Close()
				return Position{}, err
			}
			if r.typ == ChunkUser {
				xf.Close()
				return Position{s.id, int64(r.pos)}, nil
			}
		}
		xf.Close()
	}
	return l.End(), nil
}

// AtOffset is the position of the chunk that holds offset: the last chunk
// whose id is not above it. An offset before the first chunk is the
// first chunk; one after the last is End.
func (l *Log) AtOffset(offset uint64) (Position, error) {
	l.mu.Lock()
	if offset >= l.next {
		l.mu.Unlock()
		return l.End(), nil
	}
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].id > offset })
	var s segment
	if i > 0 {
		s = *l.segs[i-1]
	} else {
		s = *l.segs[0]
	}
	l.mu.Unlock()
	if s.chunks == 0 || offset < s.firstID {
		return Position{s.id, fileHeaderSize}, nil
	}
	return l.searchIndex(&s, func(r indexRecord) bool { return r.id > offset }, true)
}

// AtTimestamp is the position of the first chunk written at or after ts
// (ms); End when there is none.
func (l *Log) AtTimestamp(ts int64) (Position, error) {
	l.mu.Lock()
	segs := make([]segment, len(l.segs))
	for i, s := range l.segs {
		segs[i] = *s
	}
	l.mu.Unlock()
	for _, s := range segs {
		if s.chunks == 0 || s.lastTS < ts {
			continue
		}
		return l.searchIndex(&s, func(r indexRecord) bool { return r.timestamp >= ts }, false)
	}
	return l.End(), nil
}

// searchIndex finds, in s's index, the first record for which above
// holds; before: the record before it instead.
func (l *Log) searchIndex(s *segment, above func(indexRecord) bool, before bool) (Position, error) {
	xf, err := l.fs.OpenFile(filepath.Join(l.dir, idxName(s.id)), os.O_RDONLY, 0)
	if err != nil {
		return Position{}, err
	}
	defer xf.Close()
	var rerr error
	i := sort.Search(s.chunks, func(i int) bool {
		r, err := readIndexRecord(xf, i)
		if err != nil {
			rerr = err
			return true
		}
		return above(r)
	})
	if rerr != nil {
		return Position{}, rerr
	}
	if before {
		i--
	}
	if i < 0 {
		return Position{s.id, fileHeaderSize}, nil
	}
	if i >= s.chunks {
		return Position{s.id, s.size}, nil
	}
	r, err := readIndexRecord(xf, i)
	if err != nil {
		return Position{}, err
	}
	return Position{s.id, int64(r.pos)}, nil
}

// NewReader returns a reader that starts at p.
func (l *Log) NewReader(p Position) *Reader {
	return &Reader{l: l, seg: p.seg, pos: p.pos}
}

// UseBuffer makes the reader read its next chunk into b (grown as
// needed): a caller that keeps each chunk's bytes gives a new buffer
// each time.
func (r *Reader) UseBuffer(b []byte) { r.buf = b[:0] }

// Close releases the reader's file.
func (r *Reader) Close() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}

// Next returns the next committed chunk, ErrNoChunk when there is none
// yet (Log.Wait says when to try again), or ErrClosed. The chunk's bytes
// are the reader's until its next call. A damaged chunk is skipped (and
// counted in Info.Damaged); a reader behind the retention goes on from
// the first chunk kept.
func (r *Reader) Next() (*Chunk, error) {
	for {
		l := r.l
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, ErrClosed
		}
		i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].id >= r.seg })
		if i == len(l.segs) || l.segs[i].id != r.seg {
			// deleted by the retention
			if i == len(l.segs) {
				i--
			}
			r.Close()
			r.seg, r.pos = l.segs[i].id, fileHeaderSize
		}
		s := l.segs[i]
		readable, size, lastSeg := s.readable, s.size, i == len(l.segs)-1
		var nextSeg uint64
		if !lastSeg {
			nextSeg = l.segs[i+1].id
		}
		l.mu.Unlock()
		if r.pos >= readable {
			if lastSeg || r.pos < size {
				return nil, ErrNoChunk
			}
			r.Close()
			r.seg, r.pos = nextSeg, fileHeaderSize
			continue
		}
		if r.f == nil {
			f, err := l.fs.OpenFile(filepath.Join(l.dir, segName(r.seg)), os.O_RDONLY, 0)
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					continue // just deleted
				}
				return nil, err
			}
			r.f = f
		}
		c, err := r.read(readable)
		if err == nil {
			r.pos += c.Size()
			return c, nil
		}
		// damaged: go on from the next chunk the index knows
		l.mu.Lock()
		l.damaged++
		l.mu.Unlock()
		next, err := r.nextIndexed(s)
		if err != nil {
			return nil, err
		}
		r.pos = next
	}
}

func (r *Reader) read(readable int64) (*Chunk, error) {
	r.buf = slices.Grow(r.buf[:0], HeaderSize)[:HeaderSize]
	if _, err := r.f.ReadAt(r.buf, r.pos); err != nil {
		return nil, err
	}
	h, err := ParseHeader(r.buf)
	if err != nil {
		return nil, err
	}
	if r.pos+h.Size() > readable {
		return nil, errBadHeader
	}
	r.buf = slices.Grow(r.buf, int(h.Size()-HeaderSize))[:h.Size()]
	if _, err := r.f.ReadAt(r.buf[HeaderSize:], r.pos+HeaderSize); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	c := &Chunk{Header: h, Raw: r.buf}
	if crc32.ChecksumIEEE(c.Data()) != h.CRC {
		return nil, errBadHeader
	}
	return c, nil
}

// nextIndexed is the position of the first chunk of s after r.pos, by
// its index (the segment's end when none).
func (r *Reader) nextIndexed(s *segment) (int64, error) {
	xf, err := r.l.fs.OpenFile(filepath.Join(r.l.dir, idxName(s.id)), os.O_RDONLY, 0)
	if err != nil {
		return 0, err
	}
	defer xf.Close()
	r.l.mu.Lock()
	n, size := s.chunks, s.readable
	r.l.mu.Unlock()
	var rerr error
	i := sort.Search(n, func(i int) bool {
		rec, err := readIndexRecord(xf, i)
		if err != nil {
			rerr = err
			return true
		}
		return int64(rec.pos) > r.pos
	})
	if rerr != nil {
		return 0, rerr
	}
	if i == n {
		return size, nil
	}
	rec, err := readIndexRecord(xf, i)
	return int64(rec.pos), err
}
