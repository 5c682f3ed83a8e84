// Package wire reads and writes the varint-framed records Warren's own
// binary formats are made of: the broker's message and link encodings,
// the quorum queue commands (broker/qrepl), the state machine snapshots
// (broker/machine) and the raft transport's batches (cluster/qraft).
//
// A Reader is sticky: the first malformed read marks it bad, every read
// after that returns the zero value, and the caller checks once at the
// end. Counts are bounded by the bytes left, so a corrupt length cannot
// make a large allocation.
package wire

import (
	"encoding/binary"
	"errors"
)

// ErrMalformed is what a Reader reports when the caller gave no error of
// its own.
var ErrMalformed = errors.New("wire: malformed record")

// Reader reads a record; see the package comment.
type Reader struct {
	b   []byte
	err error // the first failure; sticks
	bad error // what to report on failure
}

// NewReader reads b and reports bad (ErrMalformed if nil) on failure.
func NewReader(b []byte, bad error) Reader {
	if bad == nil {
		bad = ErrMalformed
	}
	return Reader{b: b, bad: bad}
}

// Fail marks the read bad, for a check of the caller's own.
func (r *Reader) Fail() {
	if r.err == nil {
		r.err = r.bad
	}
	r.b = nil
}

// FailWith marks the read bad with err, if it is not already.
func (r *Reader) FailWith(err error) {
	if r.err == nil {
		r.err = err
	}
	r.b = nil
}

// Err is the first failure, nil if none.
func (r *Reader) Err() error { return r.err }

// Rest is what is left unread (nil after a failure).
func (r *Reader) Rest() []byte { return r.b }

// Len is the count of bytes left.
func (r *Reader) Len() int { return len(r.b) }

// Done is Err, or the Reader's error if bytes are left over.
func (r *Reader) Done() error {
	if r.err == nil && len(r.b) != 0 {
		r.Fail()
	}
	return r.err
}

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.Fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Varint reads a signed (zig-zag) varint.
func (r *Reader) Varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.Fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Uint32 reads an unsigned varint that must fit 32 bits.
func (r *Reader) Uint32() uint32 {
	v := r.Uvarint()
	if v > 1<<32-1 {
		r.Fail()
		return 0
	}
	return uint32(v)
}

// Fixed32 reads a 32-bit little-endian integer (a length written after
// what it measures, in room kept for it).
func (r *Reader) Fixed32() uint32 {
	if len(r.b) < 4 {
		r.Fail()
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if len(r.b) == 0 {
		r.Fail()
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// Bool reads what AppendBool wrote: any byte but 0 is true.
func (r *Reader) Bool() bool { return r.Byte() != 0 }

// Next reads n raw bytes; the slice aliases the record, its capacity
// capped so that an append cannot write over what follows.
func (r *Reader) Next(n uint64) []byte {
	if n > uint64(len(r.b)) {
		r.Fail()
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

// Bytes reads what AppendBytes wrote, aliasing the record (see Next).
func (r *Reader) Bytes() []byte { return r.Next(r.Uvarint()) }

// Str reads what AppendStr wrote, as a copy.
func (r *Reader) Str() string { return string(r.Bytes()) }

// Count reads an item count, at most the bytes left (every item takes
// one byte at least).
func (r *Reader) Count() int { return r.CountAtMost(1<<63 - 1) }

// CountAtMost is Count, bounded by limit too.
func (r *Reader) CountAtMost(limit uint64) int {
	n := r.Uvarint()
	if n > limit || n > uint64(len(r.b)) {
		r.Fail()
		return 0
	}
	return int(n)
}

// AppendBytes appends p with its length ahead of it.
func AppendBytes(b, p []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(p))), p...)
}

// AppendStr appends s with its length ahead of it.
func AppendStr(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// AppendBool appends v as one byte, 1 or 0.
func AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}
