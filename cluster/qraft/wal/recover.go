package wal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
)

// Open opens (creating it if needed) the WAL in o.Dir and recovers it: it
// reads and verifies every segment, cuts a torn tail off the last one, and
// rebuilds the bookkeeping with every record referenced once. Call Replay
// next to learn the records.
func Open(o Options) (*WAL, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(o.Dir)
	if err != nil {
		return nil, err
	}
	var nums []uint32
	for _, e := range ents {
		if n, ok := parseSegName(e.Name()); ok && e.Type().IsRegular() {
			nums = append(nums, n)
		}
	}
	slices.Sort(nums)
	w := &WAL{o: o, log: o.Logger, segs: make(map[uint32]*segment)}
	w.prealloc = (o.Preallocate && !o.NoSync) || o.forcePrealloc
	os.Remove(filepath.Join(o.Dir, spareName)) // maybe half made
	fail := func(err error) (*WAL, error) {
		for _, s := range w.segs {
			if s.f != nil {
				s.f.Close()
			}
		}
		return nil, err
	}
	var moved []movedRec
	buf := make([]byte, 1<<20)
	for i, num := range nums {
		last := i == len(nums)-1
		s := newSegment(o.Dir, num)
		flag := os.O_RDONLY
		if last {
			flag = os.O_RDWR
		}
		if s.f, err = os.OpenFile(s.path, flag, 0); err != nil {
			return fail(err)
		}
		w.segs[num] = s
		if moved, err = w.scan(s, last, moved, buf); err != nil {
			return fail(err)
		}
		if last {
			w.head = s
		}
	}
	if w.head == nil {
		s, err := w.createSegment(1)
		if err != nil {
			return fail(err)
		}
		w.segs[1], w.head = s, s
	}
	w.moved = w.dedupMoved(moved)
	var dead []*segment
	for _, s := range w.segs {
		if s == w.head {
			continue
		}
		s.seal()
		if s.live == 0 {
			dead = w.retireLocked(s, dead)
		}
	}
	w.remove(dead)
	w.replayOK = true
	w.startSpare()
	return w, nil
}

// scan verifies segment s and records its frames. A bad frame in the last
// segment is a torn tail: the file is cut there. Anywhere else it is
// corruption: a *CorruptError.
func (w *WAL) scan(s *segment, last bool, moved []movedRec, buf []byte) ([]movedRec, error) {
	fi, err := s.f.Stat()
	if err != nil {
		return moved, err
	}
	size := fi.Size()
	var h [hdrSize]byte
	if size < hdrSize {
		if !last {
			return moved, &CorruptError{Seg: s.num, Reason: "short segment header"}
		}
	} else if _, err := s.f.ReadAt(h[:], 0); err != nil {
		return moved, err
	}
	if size < hdrSize || !bytes.Equal(h[:4], []byte(segMagic)) || h[4] != segVersion || h[5]|h[6]|h[7] != 0 {
		if !last {
			return moved, &CorruptError{Seg: s.num, Reason: "bad segment header"}
		}
		// Created, then the crash came before its header was synced: no
		// record in it was ever synced.
		w.log.Warn("wal: resetting last segment with a torn header", "file", s.path, "size", size)
		if err := s.f.Truncate(0); err != nil {
			return moved, err
		}
		if err := writeHeader(s.f); err != nil {
			return moved, err
		}
		if err := w.datasync(s.f); err != nil {
			return moved, err
		}
		s.size, s.written, s.synced = hdrSize, hdrSize, hdrSize
		return moved, nil
	}
	fr := newFrameReader(s.f, size, buf)
	off := int64(hdrSize)
	for off < size {
		f, err := fr.frame(off)
		if err == nil {
			var flags byte
			var orig uint64
			_, flags, orig, err = decodeBody(f[frameHdr:])
			if err == nil && flags&flagMoved != 0 && orig >= (Pos{s.num, uint32(off)}).key() {
				err = errFrame // a copy is always after its original
			}
			if err == nil {
				n := int64(len(f))
				s.offs = append(s.offs, uint32(off))
				s.live++
				s.liveBytes += n
				if flags&flagMoved != 0 {
					moved = append(moved, movedRec{orig: orig, cur: Pos{s.num, uint32(off)}, size: n})
					s.noteOrig(orig)
				} else {
					s.noteOrig(Pos{s.num, uint32(off)}.key())
				}
				off += n
				continue
			}
		}
		if err != errFrame {
			return moved, err
		}
		if !last {
			if w.prealloc {
				// A roll cuts a preallocated head to its frames, then
				// syncs; should the cut not have reached the disk, zeros
				// follow the frames.
				if z, err := zerosFrom(s.f, off, size); err != nil {
					return moved, err
				} else if z {
					w.log.Warn("wal: zeros after the frames of a sealed segment", "file", s.path, "offset", off)
					break
				}
			}
			return moved, &CorruptError{Seg: s.num, Off: off, Reason: "bad record (length or checksum)"}
		}
		if w.prealloc {
			// A preallocated head: zeros after the frames are its end.
			z, err := zerosFrom(s.f, off, size)
			if err != nil {
				return moved, err
			}
			if z {
				s.prealloc = true
				break
			}
		}
		w.log.Warn("wal: cutting torn tail", "file", s.path, "offset", off, "bytes", size-off)
		if err := s.f.Truncate(off); err != nil {
			return moved, err
		}
		if err := w.datasync(s.f); err != nil {
			return moved, err
		}
		break
	}
	s.size, s.written, s.synced = off, off, off
	return moved, nil
}

// dedupMoved keeps, for each original key, the last copy Compact made, and
// marks dead the older copies and the original if its segment is still
// there (a crash between a compaction's sync and its deletions).
func (w *WAL) dedupMoved(moved []movedRec) []movedRec {
	slices.SortFunc(moved, func(a, b movedRec) int {
		if a.orig != b.orig {
			if a.orig < b.orig {
				return -1
			}
			return 1
		}
		if a.cur.key() < b.cur.key() {
			return -1
		}
		return 1
	})
	out := moved[:0]
	for i := 0; i < len(moved); i++ {
		m := moved[i]
		if i+1 < len(moved) && moved[i+1].orig == m.orig {
			w.killAt(m.cur)
			continue
		}
		w.killAt(posOf(m.orig))
		out = append(out, m)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func (w *WAL) killAt(p Pos) {
	if s := w.segs[p.Seg]; s != nil {
		if i := s.find(p.Off); i >= 0 && s.offs[i]&deadBit == 0 {
			s.kill(i)
		}
	}
}

// Replay hands every record of the log to fn, in the order they were first
// appended: a record copied by Compact comes at its original place, with its
// current position. Released records that are still on disk come too (the
// WAL does not persist releases); a record is handed once even if a crash
// left two copies. r.Data is the callee's (a copy, one allocation per
// record: recovery only). Every record
// handed starts referenced once: the host Releases (during or after Replay)
// each one it no longer needs.
//
// Replay may only be called after Open and before any Append or Compact;
// fn may call Read, Retain and Release, not Append, Sync or Compact.
// An error from fn stops Replay and is returned.
func (w *WAL) Replay(fn func(p Pos, r Record) error) error {
	w.cmu.Lock()
	defer w.cmu.Unlock()
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.mu.Lock()
	if err := w.usableLocked(); err != nil {
		w.mu.Unlock()
		return err
	}
	if !w.replayOK {
		w.mu.Unlock()
		return ErrReplay
	}
	segs := make([]*segment, 0, len(w.segs))
	for _, s := range w.segs {
		segs = append(segs, s)
	}
	slices.SortFunc(segs, func(a, b *segment) int { return int(int64(a.num) - int64(b.num)) })
	moved := w.moved
	w.replay = true
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.replay = false
		dead := w.deferred
		w.deferred = nil
		w.mu.Unlock()
		w.remove(dead)
	}()

	buf := make([]byte, 1<<20)
	var mbuf []byte
	mi := 0
	handMoved := func(m movedRec) error {
		s := segOf(segs, m.cur.Seg)
		if s == nil {
			return nil // released and deleted since Open (a second Replay)
		}
		if int64(cap(mbuf)) < m.size {
			mbuf = make([]byte, m.size)
		}
		b := mbuf[:m.size]
		if _, err := s.f.ReadAt(b, int64(m.cur.Off)); err != nil {
			return fmt.Errorf("wal: replay: read %v: %w", m.cur, err)
		}
		if !verifyFrame(b) {
			return fmt.Errorf("wal: replay: %v changed on disk", m.cur)
		}
		r, _, _, err := decodeBody(b[frameHdr:])
		if err != nil {
			return err
		}
		r.Data = bytes.Clone(r.Data)
		return fn(m.cur, r)
	}
	handUpTo := func(k uint64) error {
		for mi < len(moved) && moved[mi].orig < k {
			if err := handMoved(moved[mi]); err != nil {
				return err
			}
			mi++
		}
		return nil
	}
	for _, s := range segs {
		fr := newFrameReader(s.f, s.size, buf)
		for off := int64(hdrSize); off < s.size; {
			f, err := fr.frame(off)
			if err != nil {
				if errors.Is(err, errFrame) || errors.Is(err, io.ErrUnexpectedEOF) {
					return fmt.Errorf("wal: replay: %s offset %d changed on disk", s.path, off)
				}
				return err
			}
			off += int64(len(f))
			r, flags, _, err := decodeBody(f[frameHdr:])
			if err != nil {
				return err
			}
			if flags&flagMoved != 0 {
				continue // handed at its original place
			}
			p := Pos{s.num, uint32(off - int64(len(f)))}
			k := p.key()
			if err := handUpTo(k); err != nil {
				return err
			}
			if mi < len(moved) && moved[mi].orig == k {
				// A crash left the original and its copy: hand the copy.
				if err := handMoved(moved[mi]); err != nil {
					return err
				}
				mi++
				continue
			}
			r.Data = bytes.Clone(r.Data)
			if err := fn(p, r); err != nil {
				return err
			}
		}
	}
	return handUpTo(math.MaxUint64)
}

func segOf(segs []*segment, num uint32) *segment {
	i, ok := slices.BinarySearchFunc(segs, num, func(s *segment, n uint32) int { return int(int64(s.num) - int64(n)) })
	if !ok {
		return nil
	}
	return segs[i]
}
