package qrepl

import (
	"encoding/binary"
	"errors"
	"slices"
)

// Snapshot encoding, version 1. No bodies: the messages' headers in
// queue order (their ids say which log entries hold the bodies). The
// bytes are a function of the state alone (publishers sorted, tombstones
// left out), so Equal states encode alike.
//
//	version 1 | applied | lease | clock | nextPrune | stats (7)
//	| npubs | (publisher delta, seq, lastSeen)*
//	| nmsgs | (flags | key>>16 delta | key&0xffff | [id if moved] | time delta
//	           | [expiresAt] | size | dc | acq | prio | [delayUntil])*
//
// A message never moved has its id in its key: key>>16 for a lone
// Enqueue (key&0xffff is 0), BatchID's item key&0xffff of the
// EnqueueBatch at key>>16 otherwise. A state without batched messages
// encodes as it did before EnqueueBatch existed.
const snapVersion = 1

// ErrSnapshot is a snapshot that cannot be decoded.
var ErrSnapshot = errors.New("qrepl: bad snapshot")

// snapshot message flags (the stored flags minus fDead, plus presence
// bits).
const (
	sfExpires = 1 << 0 // stored flags use bits 1..7 (fDead is never stored)
)

// Snapshot encodes the state (no bodies).
func (s *State) Snapshot() []byte { return s.AppendSnapshot(nil) }

// AppendSnapshot appends the state's encoding to dst.
func (s *State) AppendSnapshot(dst []byte) []byte {
	b := append(dst, snapVersion)
	b = binary.AppendUvarint(b, s.applied)
	b = binary.AppendUvarint(b, s.lease)
	b = binary.AppendVarint(b, s.clock)
	b = binary.AppendVarint(b, s.nextPrune)
	st := &s.stats
	for _, v := range [...]uint64{st.Enqueued, st.Duplicates, st.Removed, st.Purged, st.Returned, st.Discarded, st.Corrupt} {
		b = binary.AppendUvarint(b, v)
	}
	pubs := make([]uint64, 0, len(s.pubs))
	for id := range s.pubs {
		pubs = append(pubs, id)
	}
	slices.Sort(pubs)
	b = binary.AppendUvarint(b, uint64(len(pubs)))
	prev := uint64(0)
	for _, id := range pubs {
		p := s.pubs[id]
		b = binary.AppendUvarint(b, id-prev)
		prev = id
		b = binary.AppendUvarint(b, p.seq)
		b = binary.AppendVarint(b, p.lastSeen)
	}
	b = binary.AppendUvarint(b, uint64(s.live))
	prevHi, prevTime := uint64(0), int64(0)
	for i := 0; i < s.q.Len(); i++ {
		r := s.q.At(i)
		if r.flags&fDead != 0 {
			continue
		}
		f := r.flags
		if r.expiresAt != 0 {
			f |= sfExpires
		}
		b = append(b, f)
		b = binary.AppendUvarint(b, r.key>>16-prevHi)
		prevHi = r.key >> 16
		b = binary.AppendUvarint(b, r.key&0xffff)
		if f&fMoved != 0 {
			b = binary.AppendUvarint(b, r.id)
		}
		b = binary.AppendVarint(b, r.time-prevTime)
		prevTime = r.time
		if f&sfExpires != 0 {
			b = binary.AppendVarint(b, r.expiresAt)
		}
		b = binary.AppendUvarint(b, uint64(r.size))
		b = binary.AppendUvarint(b, uint64(r.dc))
		b = binary.AppendUvarint(b, uint64(r.acq))
		b = append(b, r.prio)
		if f&fDelayed != 0 {
			b = binary.AppendVarint(b, s.delays[r.id])
		}
	}
	return b
}

// Restore decodes a snapshot. It checks what a state relies on (order
// keys increasing, ids unique and below the applied index, counts
// consistent) and refuses anything else with ErrSnapshot.
func Restore(data []byte) (*State, error) {
	if len(data) == 0 || data[0] != snapVersion {
		return nil, ErrSnapshot
	}
	d := newDec(data[1:])
	s := &State{}
	s.applied = d.Uvarint()
	s.lease = d.Uvarint()
	s.clock = d.Varint()
	s.nextPrune = d.Varint()
	st := &s.stats
	for _, p := range [...]*uint64{&st.Enqueued, &st.Duplicates, &st.Removed, &st.Purged, &st.Returned, &st.Discarded, &st.Corrupt} {
		*p = d.Uvarint()
	}
	np := d.Count()
	if d.Err() != nil {
		return nil, ErrSnapshot
	}
	prev := uint64(0)
	for k := 0; k < np && d.Err() == nil; k++ {
		delta := d.Uvarint()
		id := prev + delta
		if (k > 0 && delta == 0) || id < prev || id == 0 {
			return nil, ErrSnapshot
		}
		prev = id
		if s.pubs == nil {
			s.pubs = make(map[uint64]pub, np)
		}
		s.pubs[id] = pub{seq: d.Uvarint(), lastSeen: d.Varint()}
	}
	nm := d.Uvarint()
	if d.Err() != nil || nm > uint64(d.Len())/8 || s.applied > maxIndex {
		return nil, ErrSnapshot
	}
	recs := make([]rec, 0, nm)
	prevHi, prevTime := uint64(0), int64(0)
	for k := uint64(0); k < nm && d.Err() == nil; k++ {
		var r rec
		f := d.Byte() // bit 0 (fDead, never stored) is sfExpires
		r.flags = f &^ sfExpires
		hi := prevHi + d.Uvarint()
		lo := d.Uvarint()
		if hi < prevHi || hi > maxIndex || lo > 0xffff || (k > 0 && hi == prevHi && lo <= recs[len(recs)-1].key&0xffff) {
			return nil, ErrSnapshot
		}
		prevHi = hi
		r.key = hi<<16 | lo
		if f&fMoved != 0 {
			r.id = d.Uvarint()
			if !validID(r.id) || keyOf(r.id) >= r.key {
				// A moved message's key is from a later Return.
				return nil, ErrSnapshot
			}
			if s.moved == nil {
				s.moved = map[uint64]uint64{}
			}
			if _, dup := s.moved[r.id]; dup {
				return nil, ErrSnapshot
			}
			s.moved[r.id] = r.key
		} else {
			switch {
			case hi == 0:
				return nil, ErrSnapshot
			case lo == 0:
				r.id = hi
			case hi > maxBatchIndex:
				return nil, ErrSnapshot
			default:
				r.id = batchBit | r.key // item lo of the EnqueueBatch at hi
			}
		}
		if r.key>>16 > s.applied {
			return nil, ErrSnapshot
		}
		r.time = prevTime + d.Varint()
		prevTime = r.time
		if f&sfExpires != 0 {
			if r.expiresAt = d.Varint(); r.expiresAt == 0 {
				return nil, ErrSnapshot
			}
		}
		r.size = d.Uint32()
		r.dc = d.Uint32()
		r.acq = d.Uint32()
		r.prio = d.Byte()
		if f&fDelayed != 0 {
			v := d.Varint()
			if v == 0 {
				return nil, ErrSnapshot
			}
			if s.delays == nil {
				s.delays = map[uint64]int64{}
			}
			s.delays[r.id] = v
		}
		if r.flags&fDLX == 0 && r.reason() != 0 {
			return nil, ErrSnapshot
		}
		recs = append(recs, r)
		s.live++
		s.bytes += int64(r.size)
	}
	if d.Done() != nil || uint64(s.live) != nm || st.Enqueued != uint64(s.live)+st.Removed+st.Purged {
		return nil, ErrSnapshot // (conservation: every enqueue is live, removed or purged)
	}
	s.q = ringOf(recs)
	// A moved message must not also sit under its own key.
	for id := range s.moved {
		if i, ok := s.q.search(keyOf(id)); ok && s.q.At(i).id == id {
			return nil, ErrSnapshot
		}
	}
	return s, nil
}
