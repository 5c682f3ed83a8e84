package qraft

import (
	"encoding/binary"
	"errors"
	"sort"
)

// snapData is the Data of a raft snapshot taken by the host: the state
// machine's state, the entries it still needs (live), and the names of
// the members. A local snapshot lists the live entries without bodies
// (they stay in the log store); a snapshot sent to a lagging follower
// carries them.
type snapData struct {
	sm    []byte
	live  []liveEnt
	names map[uint64]string
}

type liveEnt struct {
	index, term uint64
	data        []byte
	hasData     bool
}

const snapVersion = 1

func (s *snapData) encode(withData bool) []byte {
	n := 16 + len(s.sm) + 20*len(s.live)
	if withData {
		for _, l := range s.live {
			n += len(l.data)
		}
	}
	b := make([]byte, 0, n)
	b = append(b, snapVersion)
	b = binary.AppendUvarint(b, uint64(len(s.sm)))
	b = append(b, s.sm...)
	b = binary.AppendUvarint(b, uint64(len(s.live)))
	for _, l := range s.live {
		b = binary.AppendUvarint(b, l.index)
		b = binary.AppendUvarint(b, l.term)
		if withData {
			b = append(b, 1)
			b = binary.AppendUvarint(b, uint64(len(l.data)))
			b = append(b, l.data...)
		} else {
			b = append(b, 0)
		}
	}
	return appendNames(b, s.names)
}

// encodeLocal is encode(false) of a local snapshot whose live entries
// are refs (no liveEnt list built: a long queue's snapshot lists every
// message).
func encodeLocal(sm []byte, refs []liveRef, names map[uint64]string) []byte {
	out := make([]byte, 0, 32+len(sm)+20*len(refs)+32*len(names))
	out = append(out, snapVersion)
	out = binary.AppendUvarint(out, uint64(len(sm)))
	out = append(out, sm...)
	out = binary.AppendUvarint(out, uint64(len(refs)))
	for _, r := range refs {
		out = binary.AppendUvarint(out, r.index)
		out = binary.AppendUvarint(out, r.term)
		out = append(out, 0)
	}
	return appendNames(out, names)
}

// appendNames appends the members' names, by id.
func appendNames(b []byte, names map[uint64]string) []byte {
	ids := make([]uint64, 0, len(names))
	for id := range names {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = binary.AppendUvarint(b, id)
		b = binary.AppendUvarint(b, uint64(len(names[id])))
		b = append(b, names[id]...)
	}
	return b
}

var errBadSnap = errors.New("qraft: malformed snapshot data")

func decodeSnapData(b []byte) (*snapData, error) {
	if len(b) == 0 {
		return &snapData{names: map[uint64]string{}}, nil
	}
	if b[0] != snapVersion {
		return nil, errBadSnap
	}
	p := b[1:]
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, false
		}
		p = p[n:]
		return v, true
	}
	bytesOf := func() ([]byte, bool) {
		n, ok := uv()
		if !ok || n > uint64(len(p)) {
			return nil, false
		}
		v := p[:n:n]
		p = p[n:]
		return v, true
	}
	s := &snapData{names: map[uint64]string{}}
	var ok bool
	if s.sm, ok = bytesOf(); !ok {
		return nil, errBadSnap
	}
	nl, ok := uv()
	if !ok || nl > uint64(len(p)) {
		return nil, errBadSnap
	}
	s.live = make([]liveEnt, 0, nl)
	for i := uint64(0); i < nl; i++ {
		var l liveEnt
		var ok1, ok2 bool
		l.index, ok1 = uv()
		l.term, ok2 = uv()
		if !ok1 || !ok2 || len(p) == 0 {
			return nil, errBadSnap
		}
		has := p[0]
		p = p[1:]
		if has == 1 {
			if l.data, ok = bytesOf(); !ok {
				return nil, errBadSnap
			}
			l.hasData = true
		}
		s.live = append(s.live, l)
	}
	nn, ok := uv()
	if !ok {
		return nil, errBadSnap
	}
	for i := uint64(0); i < nn; i++ {
		id, ok := uv()
		if !ok {
			return nil, errBadSnap
		}
		name, ok := bytesOf()
		if !ok {
			return nil, errBadSnap
		}
		s.names[id] = string(name)
	}
	return s, nil
}
