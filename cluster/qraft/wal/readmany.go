package wal

import (
	"errors"
	"fmt"
	"os"
	"slices"
)

type readItem struct {
	i        int
	p        Pos // resolved
	s        *segment
	off, end int64
	buf      []byte // the frame, if it was copied from the append buffer
}

// ReadMany reads the records at ps and calls fn(i, r) for each ps[i], in
// log order (not the order of ps). It reads runs of nearby records with one
// pread each (gaps under 64 KiB, runs up to 4 MiB): reading many records,
// such as a new leader's message bodies, costs far fewer syscalls than
// Read for each. r.Data is the callee's. It stops at the first position
// that holds no live record (ErrReleased, ErrGone, as Read) or at fn's
// first error, and returns it.
func (w *WAL) ReadMany(ps []Pos, fn func(i int, r Record) error) error {
	items := make([]readItem, len(ps))
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	for i, p := range ps {
		s, j, rp := w.resolve(p)
		switch {
		case s == nil:
			w.mu.Unlock()
			return fmt.Errorf("wal: read %v: %w", p, ErrGone)
		case j < 0 || s.offs[j]&deadBit != 0:
			w.mu.Unlock()
			return fmt.Errorf("wal: read %v: %w", p, ErrReleased)
		}
		it := readItem{i: i, p: rp, s: s, off: int64(rp.Off), end: s.end(j)}
		if s == w.head && it.off >= s.written {
			it.buf = make([]byte, it.end-it.off)
			rel := it.off - s.written
			if rel < int64(len(w.pend)) {
				copy(it.buf, w.pend[rel:])
			} else {
				copy(it.buf, w.buf[rel-int64(len(w.pend)):])
			}
		}
		items[i] = it
	}
	w.mu.Unlock()
	slices.SortFunc(items, func(a, b readItem) int {
		if a.p.key() < b.p.key() {
			return -1
		}
		if a.p.key() > b.p.key() {
			return 1
		}
		return a.i - b.i
	})
	const maxGap, maxRun = 64 << 10, 4 << 20
	var run []byte
	for j := 0; j < len(items); {
		it := items[j]
		if it.buf != nil {
			if err := w.handFrame(it.p, it.i, it.buf, fn); err != nil {
				return err
			}
			j++
			continue
		}
		// A run of nearby records of the same segment, all on file.
		k := j + 1
		end := it.end
		for k < len(items) && items[k].s == it.s && items[k].buf == nil &&
			items[k].off-end < maxGap && items[k].end-it.off <= maxRun {
			end = max(end, items[k].end)
			k++
		}
		n := end - it.off
		if int64(cap(run)) < n {
			run = make([]byte, n)
		}
		b := run[:n]
		if _, err := it.s.f.ReadAt(b, it.off); err != nil {
			if errors.Is(err, os.ErrClosed) {
				w.mu.Lock()
				closed := w.closed
				w.mu.Unlock()
				if closed {
					return ErrClosed
				}
				return fmt.Errorf("wal: read %v: %w", it.p, ErrGone)
			}
			return fmt.Errorf("wal: read %v: %w", it.p, err)
		}
		for ; j < k; j++ {
			x := items[j]
			if err := w.handFrame(x.p, x.i, b[x.off-it.off:x.end-it.off], fn); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *WAL) handFrame(p Pos, i int, f []byte, fn func(int, Record) error) error {
	if len(f) < frameHdr+minBody || !verifyFrame(f) {
		return fmt.Errorf("wal: read %v: checksum mismatch", p)
	}
	r, _, _, err := decodeBody(f[frameHdr:])
	if err != nil {
		return fmt.Errorf("wal: read %v: %w", p, err)
	}
	r.Data = append([]byte(nil), r.Data...)
	return fn(i, r)
}
