package qraft

import (
	"encoding/binary"
	"errors"
	"sort"

	"github.com/warrenmq/warren/internal/wire"
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
	r := wire.NewReader(b[1:], errBadSnap)
	s := &snapData{names: map[uint64]string{}}
	s.sm = r.Bytes()
	nl := r.Count()
	s.live = make([]liveEnt, 0, nl)
	for range nl {
		l := liveEnt{index: r.Uvarint(), term: r.Uvarint()}
		if r.Byte() == 1 {
			l.data, l.hasData = r.Bytes(), true
		}
		if r.Err() != nil {
			return nil, r.Err()
		}
		s.live = append(s.live, l)
	}
	nn := r.Count()
	for range nn {
		id, name := r.Uvarint(), r.Bytes()
		if r.Err() != nil {
			return nil, r.Err()
		}
		s.names[id] = string(name)
	}
	if r.Err() != nil {
		return nil, r.Err()
	}
	return s, nil
}
