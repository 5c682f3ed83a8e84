package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
	"strings"
)

// On-disk format of a segment file (all integers little-endian):
//
//	segment = header record*
//	header  = "WRNL" u32(version=1)                       8 bytes
//	record  = u32(len) u32(crc) u8(type) payload[len]    9+len bytes
//
// crc is the CRC-32C (Castagnoli) of type and payload. A segment is named
// after its number, 16 decimal digits and ".seg" (0000000000000042.seg);
// numbers increase by one per roll.
const (
	segHeaderSize = 8
	recHeaderSize = 9
	segVersion    = 1
	segSuffix     = ".seg"

	// MaxPayload is the largest payload Append accepts (512 MiB, the largest
	// message RabbitMQ can be configured to accept).
	MaxPayload = 512 << 20

	// DefaultSegmentSize is the segment size used when Options.SegmentSize is 0.
	DefaultSegmentSize = 8 << 20
	// MinSegmentSize and MaxSegmentSize bound Options.SegmentSize. With
	// MaxPayload they keep every offset below 2^32.
	MinSegmentSize = 256
	MaxSegmentSize = 1 << 30
)

var segMagic = [4]byte{'W', 'R', 'N', 'L'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors returned by the log. Test them with errors.Is.
var (
	// ErrCorrupt marks a record that fails its checksum or framing.
	ErrCorrupt = errors.New("store: corrupt record")
	// ErrNotFound is returned by ReadAt for a position that does not hold a
	// record: its segment was removed, or it is beyond the end of the log.
	ErrNotFound = errors.New("store: no record at position")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("store: closed")
	// ErrTooLarge is returned by Append for a payload over MaxPayload.
	ErrTooLarge = errors.New("store: payload too large")
)

// Pos is the position of a record: its segment number and its byte offset in
// that segment. Positions order records: a record appended later has a greater
// Pos. The zero Pos is never a record's position.
type Pos struct {
	Seg uint32
	Off uint32
}

// Less reports whether p is before q.
func (p Pos) Less(q Pos) bool { return p.Seg < q.Seg || p.Seg == q.Seg && p.Off < q.Off }

// Uint64 packs p into one integer that orders like p (Seg in the high bits).
func (p Pos) Uint64() uint64 { return uint64(p.Seg)<<32 | uint64(p.Off) }

// PosFromUint64 is the inverse of Pos.Uint64.
func PosFromUint64(v uint64) Pos { return Pos{Seg: uint32(v >> 32), Off: uint32(v)} }

func (p Pos) String() string { return fmt.Sprintf("%d:%d", p.Seg, p.Off) }

func segName(n uint32) string { return fmt.Sprintf("%016d%s", n, segSuffix) }

// parseSegName returns the number of a segment file name and whether name is
// one.
func parseSegName(name string) (uint32, bool) {
	digits, ok := strings.CutSuffix(name, segSuffix)
	if !ok || len(digits) != 16 {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 32)
	if err != nil {
		return 0, false
	}
	return uint32(n), true
}

func appendSegHeader(b []byte) []byte {
	b = append(b, segMagic[:]...)
	return binary.LittleEndian.AppendUint32(b, segVersion)
}

func validSegHeader(h []byte) bool {
	return len(h) >= segHeaderSize && [4]byte(h[:4]) == segMagic &&
		binary.LittleEndian.Uint32(h[4:8]) == segVersion
}

// recordCRC returns the checksum of a record whose type byte and payload are
// typPayload (contiguous, as they are on disk).
func recordCRC(typPayload []byte) uint32 { return crc32.Checksum(typPayload, castagnoli) }

func appendRecord(b []byte, typ byte, payload []byte) []byte {
	start := len(b)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
	b = append(b, 0, 0, 0, 0, typ)
	b = append(b, payload...)
	binary.LittleEndian.PutUint32(b[start+4:], recordCRC(b[start+8:]))
	return b
}

// segReader reads the records of one segment in order, verifying each. It
// reads through a buffer so that a scan costs few system calls, and it never
// allocates more than the bytes that exist below limit.
type segReader struct {
	f     io.ReaderAt
	limit int64  // bytes of the file that may hold records
	off   int64  // offset of the next record
	holes []hole // damaged ranges recovery skips, in order (see resync)
	buf   []byte
	bufAt int64 // file offset of buf[0]
}

// hole is a damaged range [from, to) of a segment that recovery skipped: a
// record that failed its checksum or framing, up to the next valid record.
type hole struct{ from, to int64 }

const scanChunk = 256 << 10

// fill makes sure buf holds [off, off+n) and returns it; ok is false if the
// file ends (or limit is reached) first.
func (r *segReader) window(off int64, n int) ([]byte, bool, error) {
	if off+int64(n) > r.limit {
		return nil, false, nil
	}
	if off >= r.bufAt && off+int64(n) <= r.bufAt+int64(len(r.buf)) {
		return r.buf[off-r.bufAt : off-r.bufAt+int64(n)], true, nil
	}
	want := max(n, scanChunk)
	want = int(min(int64(want), r.limit-off))
	if cap(r.buf) < want {
		r.buf = make([]byte, want)
	}
	r.buf = r.buf[:want]
	m, err := r.f.ReadAt(r.buf, off)
	r.buf = r.buf[:m]
	r.bufAt = off
	if m < n {
		if err == nil || errors.Is(err, io.EOF) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return r.buf[:n], true, nil
}

// next returns the next record. ok is false at the end of the valid records:
// the end of the file or the first record that is torn or corrupt (bad says
// which, with a reason). err is an I/O error. payload is valid until the next
// call.
func (r *segReader) next() (p uint32, typ byte, payload []byte, ok bool, bad string, err error) {
	for len(r.holes) > 0 && r.off >= r.holes[0].from {
		if r.off == r.holes[0].from {
			r.off = r.holes[0].to
		}
		r.holes = r.holes[1:]
	}
	h, ok, err := r.window(r.off, recHeaderSize)
	if err != nil || !ok {
		if err == nil && r.off < r.limit {
			bad = "torn record header"
		}
		return 0, 0, nil, false, bad, err
	}
	n := binary.LittleEndian.Uint32(h[0:4])
	sum := binary.LittleEndian.Uint32(h[4:8])
	typ = h[8]
	if n > MaxPayload || r.off+recHeaderSize+int64(n) > r.limit {
		return 0, 0, nil, false, fmt.Sprintf("record length %d runs past the end of the segment", n), nil
	}
	rec, ok, err := r.window(r.off, recHeaderSize+int(n))
	if err != nil || !ok {
		return 0, 0, nil, false, "short record", err
	}
	payload = rec[recHeaderSize:]
	if recordCRC(rec[8:]) != sum {
		return 0, 0, nil, false, "checksum mismatch", nil
	}
	p = uint32(r.off)
	r.off += recHeaderSize + int64(n)
	return p, typ, payload, true, "", nil
}

// resyncBudget bounds the bytes resync checksums while it looks for the next
// record, so that a segment full of plausible-looking lengths (a payload of
// small integers) cannot make recovery quadratic.
const resyncBudget = 256 << 20

// resync looks for the first record after a bad one at offset at: the first
// offset c > at where a record with a valid checksum starts and is followed
// either by the end of the valid range (limit) or by another record with a
// valid checksum. Two checksummed records in a row (or one ending exactly at
// the end of the file) do not appear by chance in damaged or torn bytes, so
// the records found this way were written by the log; the damaged range
// [at, c) is what is lost. The bad record's own length field is tried first
// (the usual damage: a payload changed, the length intact). found is false if
// no such record exists (a torn tail: garbage up to the end) or the search
// ran out of budget.
func (r *segReader) resync(at int64) (c int64, found bool, err error) {
	budget := int64(resyncBudget)
	// valid reports whether a record with a good checksum starts at c and
	// returns its end.
	valid := func(c int64) (int64, bool, error) {
		h, ok, err := r.window(c, recHeaderSize)
		if err != nil || !ok {
			return 0, false, err
		}
		n, sum := int64(binary.LittleEndian.Uint32(h[0:4])), binary.LittleEndian.Uint32(h[4:8])
		if n > MaxPayload || c+recHeaderSize+n > r.limit {
			return 0, false, nil
		}
		budget -= recHeaderSize + n
		rec, ok, err := r.window(c, recHeaderSize+int(n))
		if err != nil || !ok || recordCRC(rec[8:]) != sum {
			return 0, false, err
		}
		return c + recHeaderSize + n, true, nil
	}
	// plausible reports whether a record header at c claims a length
	// that fits the valid range: a check that costs no checksum.
	plausible := func(c int64) (int64, bool, error) {
		h, ok, err := r.window(c, recHeaderSize)
		if err != nil || !ok {
			return 0, false, err
		}
		n := int64(binary.LittleEndian.Uint32(h[0:4]))
		if n > MaxPayload || c+recHeaderSize+n > r.limit {
			return 0, false, nil
		}
		return c + recHeaderSize + n, true, nil
	}
	accept := func(c int64) (bool, error) {
		// Both headers must be plausible before either record is
		// checksummed: damaged bytes rarely hold two lengths in a row
		// that fit, so the scan checksums few candidates and its
		// budget is not spent on the first plausible length it meets.
		end, ok, err := plausible(c)
		if err != nil || !ok {
			return false, err
		}
		if end != r.limit {
			if _, ok, err := plausible(end); err != nil || !ok {
				return false, err
			}
		}
		end, ok, err = valid(c)
		if err != nil || !ok || end == r.limit {
			return ok, err
		}
		_, ok, err = valid(end)
		return ok, err
	}
	if h, ok, err := r.window(at, recHeaderSize); err != nil {
		return 0, false, err
	} else if ok {
		if n := int64(binary.LittleEndian.Uint32(h[0:4])); n <= MaxPayload && at+recHeaderSize+n < r.limit {
			if ok, err := accept(at + recHeaderSize + n); err != nil || ok {
				return at + recHeaderSize + n, ok, err
			}
		}
	}
	for c := at + 1; c+recHeaderSize <= r.limit && budget > 0; c++ {
		if ok, err := accept(c); err != nil || ok {
			return c, ok, err
		}
	}
	return 0, false, nil
}
