package streamlog

import (
	"encoding/binary"
	"errors"
	"maps"
	"slices"
)

// Tracking is what a stream remembers besides its messages: the last
// publishing id of each publisher reference (deduplication) and the
// offsets consumers stored. Writers' ids travel in the trailers of the
// chunks that carry their messages, stored offsets in tracking chunks; a
// snapshot of both opens each segment, so recovery reads one segment.
type Tracking struct {
	Writers map[string]WriterSeq
	Offsets map[string]uint64
}

// WriterSeq is a publisher reference's last publishing id and the chunk
// that carried it (the oldest is forgotten first beyond MaxWriters).
type WriterSeq struct {
	Seq   uint64
	Chunk uint64
}

// MaxWriters is how many publisher references a stream remembers, as
// osiris.
const MaxWriters = 255

const (
	trackWriter byte = 1
	trackOffset byte = 2
)

// MaxReference bounds a publisher or consumer reference (the stream
// protocol's limit).
const MaxReference = 255

func newTracking() Tracking {
	return Tracking{Writers: map[string]WriterSeq{}, Offsets: map[string]uint64{}}
}

func (t *Tracking) clone() Tracking {
	return Tracking{Writers: maps.Clone(t.Writers), Offsets: maps.Clone(t.Offsets)}
}

func appendTrack(b []byte, kind byte, ref string, v uint64) []byte {
	b = append(b, kind, byte(len(ref)))
	b = append(b, ref...)
	return binary.BigEndian.AppendUint64(b, v)
}

// encodeWriters is a trailer: the writers' ids of one chunk.
func encodeWriters(ws map[string]uint64) []byte {
	var b []byte
	for _, ref := range slices.Sorted(maps.Keys(ws)) {
		b = appendTrack(b, trackWriter, ref, ws[ref])
	}
	return b
}

// encodeSnapshot is a snapshot chunk's data.
func (t *Tracking) encodeSnapshot() []byte {
	// in key order: the replicas of a Raft log write the same bytes
	var b []byte
	for _, ref := range slices.Sorted(maps.Keys(t.Writers)) {
		w := t.Writers[ref]
		b = appendTrack(b, trackWriter, ref, w.Seq)
		b = binary.BigEndian.AppendUint64(b, w.Chunk)
	}
	for _, ref := range slices.Sorted(maps.Keys(t.Offsets)) {
		b = appendTrack(b, trackOffset, ref, t.Offsets[ref])
	}
	return b
}

var errBadTracking = errors.New("streamlog: malformed tracking data")

// apply reads tracking records (a trailer, a delta or a snapshot) from b
// into t; chunk is the chunk that holds them.
func (t *Tracking) apply(b []byte, chunk uint64, snapshot bool) error {
	for len(b) > 0 {
		if len(b) < 2 || len(b) < 2+int(b[1])+8 {
			return errBadTracking
		}
		kind, n := b[0], int(b[1])
		ref := string(b[2 : 2+n])
		v := binary.BigEndian.Uint64(b[2+n:])
		b = b[2+n+8:]
		switch kind {
		case trackWriter:
			c := chunk
			if snapshot {
				if len(b) < 8 {
					return errBadTracking
				}
				c, b = binary.BigEndian.Uint64(b), b[8:]
			}
			t.Writers[ref] = WriterSeq{Seq: v, Chunk: c}
		case trackOffset:
			t.Offsets[ref] = v
		default:
			return errBadTracking
		}
	}
	t.trimWriters()
	return nil
}

// trimWriters forgets the writers written longest ago beyond MaxWriters.
func (t *Tracking) trimWriters() {
	for len(t.Writers) > MaxWriters {
		var old string
		first := true
		for ref, w := range t.Writers {
			if first || w.Chunk < t.Writers[old].Chunk || w.Chunk == t.Writers[old].Chunk && ref < old {
				old, first = ref, false
			}
		}
		delete(t.Writers, old)
	}
}

// OffsetData is a tracking delta chunk's data storing consumer reference
// ref's offset (a Raft log's stored offsets are proposed as such chunks).
func OffsetData(ref string, offset uint64) []byte {
	return appendTrack(nil, trackOffset, ref, offset)
}
