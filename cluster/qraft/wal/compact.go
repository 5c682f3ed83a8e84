package wal

import (
	"fmt"
	"slices"
)

type copyRec struct {
	old, new Pos
	hdr      Record // Data nil
}

// Compact frees the disk held by segments that are mostly dead: for each
// sealed segment whose live records take less than Options.CompactRatio of
// its bytes (oldest first, up to Options.CompactMaxBytes of live bytes per
// call, at least one segment), it copies the live records to the head,
// syncs them, calls move(old, new, r) for each (r carries the record's
// Group, Index, Term and Kind; r.Data is nil), and deletes the segment.
//
// A copy keeps its record's place in Replay's order and its references
// (Retain counts move too). Until the next Compact, Read, Retain and
// Release of an old position act on its copy, so a position looked up
// before move ran still works; after that, old positions are gone (ErrGone).
// move runs on the caller's goroutine without the WAL's locks; it may call
// Read, Retain and Release, not Append, Sync, Compact or Close. Appends
// may run concurrently with a Compact (they interleave with the copies).
func (w *WAL) Compact(move func(old, new Pos, r Record)) (CompactStats, error) {
	var st CompactStats
	w.cmu.Lock()
	defer w.cmu.Unlock()

	w.mu.Lock()
	if err := w.usableLocked(); err != nil {
		w.mu.Unlock()
		return st, err
	}
	w.replayOK, w.moved = false, nil
	w.fwd = nil
	var cands []*segment
	var dead []*segment
	for _, s := range w.segs {
		if !s.sealed || s.compacting {
			continue
		}
		if s.live == 0 {
			dead = w.retireLocked(s, dead)
			continue
		}
		if w.compactable(s) {
			cands = append(cands, s)
		}
	}
	slices.SortFunc(cands, func(a, b *segment) int { return int(int64(a.num) - int64(b.num)) })
	var budget int64
	for i, s := range cands {
		if i > 0 && budget+s.liveBytes > w.o.CompactMaxBytes {
			cands = cands[:i]
			break
		}
		budget += s.liveBytes
	}
	lives := make([][][2]int64, len(cands))
	for i, s := range cands {
		s.compacting = true
		lives[i] = s.liveRecs()
	}
	w.mu.Unlock()
	w.remove(dead)
	if len(cands) == 0 {
		return st, nil
	}

	// Copy. The old segments are sealed: their files do not change.
	var copies []copyRec
	abort := func(err error) (CompactStats, error) {
		w.mu.Lock()
		var dead []*segment
		for _, c := range copies {
			dead = w.releaseLocked(c.new, dead)
		}
		for _, s := range cands {
			s.compacting = false
			if s.live == 0 {
				dead = w.retireLocked(s, dead)
			}
		}
		w.mu.Unlock()
		w.remove(dead)
		return CompactStats{}, err
	}
	var (
		batch []Record
		origs []uint64
		olds  []Pos
		arena []byte
		pos   []Pos
	)
	appendBatch := func() error {
		if len(batch) == 0 {
			return nil
		}
		// Data slices the arena; re-slice now that it no longer grows.
		off := 0
		for i := range batch {
			n := len(batch[i].Data)
			batch[i].Data = arena[off : off+n]
			off += n
		}
		pos = slices.Grow(pos[:0], len(batch))[:len(batch)]
		w.wmu.Lock()
		err := w.appendLocked(batch, pos, origs)
		w.wmu.Unlock()
		if err != nil {
			return err
		}
		for i := range batch {
			h := batch[i]
			h.Data = nil
			copies = append(copies, copyRec{old: olds[i], new: pos[i], hdr: h})
		}
		batch, origs, olds, arena = batch[:0], origs[:0], olds[:0], arena[:0]
		return nil
	}
	buf := make([]byte, 1<<20)
	for ci, s := range cands {
		fr := newFrameReader(s.f, s.size, buf)
		for _, lr := range lives[ci] {
			f, err := fr.frame(lr[0])
			if err != nil {
				return abort(fmt.Errorf("wal: compact: %s offset %d: %w", s.path, lr[0], err))
			}
			r, flags, orig, err := decodeBody(f[frameHdr:])
			if err != nil {
				return abort(err)
			}
			old := Pos{s.num, uint32(lr[0])}
			if flags&flagMoved == 0 {
				orig = old.key()
			}
			arena = append(arena, r.Data...)
			batch = append(batch, r)
			origs = append(origs, orig)
			olds = append(olds, old)
			if len(arena) >= 1<<20 || len(batch) >= 4096 {
				if err := appendBatch(); err != nil {
					return abort(err)
				}
			}
		}
	}
	if err := appendBatch(); err != nil {
		return abort(err)
	}
	// The copies must be durable before the originals go.
	if err := w.Sync(); err != nil {
		return abort(err)
	}

	// Keep the copies of records still referenced, install the forwarding.
	w.mu.Lock()
	dead = nil
	kept := copies[:0]
	if w.fwd == nil {
		w.fwd = make(map[uint32][]fwd, len(cands))
	}
	for _, c := range copies {
		s := w.segs[c.old.Seg]
		i := s.find(c.old.Off)
		if i < 0 || s.offs[i]&deadBit != 0 {
			dead = w.releaseLocked(c.new, dead) // released meanwhile
			continue
		}
		if n, ok := w.extra[c.old]; ok {
			delete(w.extra, c.old)
			w.extra[c.new] += n
		}
		w.fwd[c.old.Seg] = append(w.fwd[c.old.Seg], fwd{off: c.old.Off, to: c.new})
		st.Moved++
		st.MovedBytes += s.end(i) - int64(c.old.Off)
		kept = append(kept, c)
	}
	w.mu.Unlock()
	w.remove(dead)

	for _, c := range kept {
		move(c.old, c.new, c.hdr)
	}

	w.mu.Lock()
	dead = nil
	for _, s := range cands {
		st.Segments++
		st.FreedBytes += s.size
		dead = w.retireLocked(s, dead)
	}
	w.mu.Unlock()
	w.remove(dead)
	return st, nil
}

// compactable reports whether Compact would take s (mu held).
func (w *WAL) compactable(s *segment) bool {
	return s.sealed && !s.compacting && float64(s.liveBytes) < w.o.CompactRatio*float64(s.size-hdrSize)
}
