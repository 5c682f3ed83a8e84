package wal

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"math/bits"

	"github.com/warrenmq/warren/internal/wire"
)

// On-disk layout (see the package doc).
const (
	segMagic   = "WQRW" // Warren quorum raft WAL
	segVersion = 1
	hdrSize    = 8 // segment header: magic, u32 version

	frameHdr = 8 // u32 body length, u32 CRC-32C of the body

	flagMoved = 1 // the body carries the record's original key (a copy made by Compact)

	minBody = 2 + 3 // flags, kind, three one-byte uvarints

	// MaxDataSize is the largest Record.Data Append accepts.
	MaxDataSize = 256 << 20
	maxBody     = 2 + 3*binary.MaxVarintLen64 + 8 + MaxDataSize

	// MaxSegmentSize bounds Options.SegmentSize so that every offset, and
	// the end of any record, fits in 31 bits (the 32nd marks dead records).
	MaxSegmentSize = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var maxData = MaxDataSize // lowered by tests

func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// frameLen is the size on disk of r's frame.
func frameLen(r *Record, flags byte) int {
	n := frameHdr + 2 + uvarintLen(r.Group) + uvarintLen(r.Index) + uvarintLen(r.Term) + len(r.Data)
	if flags&flagMoved != 0 {
		n += 8
	}
	return n
}

// appendFrame appends r's frame to buf. orig is written only for flagMoved.
func appendFrame(buf []byte, r *Record, flags byte, orig uint64) []byte {
	start := len(buf)
	buf = append(buf, 0, 0, 0, 0, 0, 0, 0, 0, flags, r.Kind)
	buf = binary.AppendUvarint(buf, r.Group)
	buf = binary.AppendUvarint(buf, r.Index)
	buf = binary.AppendUvarint(buf, r.Term)
	if flags&flagMoved != 0 {
		buf = binary.LittleEndian.AppendUint64(buf, orig)
	}
	buf = append(buf, r.Data...)
	body := buf[start+frameHdr:]
	binary.LittleEndian.PutUint32(buf[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(buf[start+4:], crc32.Checksum(body, castagnoli))
	return buf
}

var errFrame = errors.New("bad frame")

// decodeBody parses a verified frame body. r.Data aliases body.
func decodeBody(body []byte) (r Record, flags byte, orig uint64, err error) {
	if len(body) < minBody {
		return r, 0, 0, errFrame
	}
	flags, r.Kind = body[0], body[1]
	if flags&^flagMoved != 0 {
		return r, 0, 0, errFrame
	}
	d := wire.NewReader(body[2:], errFrame)
	r.Group, r.Index, r.Term = d.Uvarint(), d.Uvarint(), d.Uvarint()
	if flags&flagMoved != 0 {
		if o := d.Next(8); o != nil {
			orig = binary.LittleEndian.Uint64(o)
		}
	}
	if d.Err() != nil {
		return r, 0, 0, errFrame
	}
	p := d.Rest()
	r.Data = p
	return r, flags, orig, nil
}

// checkFrame verifies the frame at the start of b (which must hold at least
// frameHdr bytes) and returns its body length, or errFrame.
func frameBodyLen(b []byte) (int, error) {
	n := binary.LittleEndian.Uint32(b)
	if n < minBody || n > maxBody {
		return 0, errFrame
	}
	return int(n), nil
}

func verifyFrame(f []byte) bool {
	return crc32.Checksum(f[frameHdr:], castagnoli) == binary.LittleEndian.Uint32(f[4:])
}

// frameReader reads frames from a file through a window buffer, so that a
// sequential scan costs one read per window and a sparse one (compaction)
// reads only the windows that hold the records it wants.
type frameReader struct {
	r      io.ReaderAt
	end    int64 // bytes of the file that may be read
	buf    []byte
	bufOff int64
	n      int
}

func newFrameReader(r io.ReaderAt, end int64, buf []byte) *frameReader {
	if cap(buf) < 256<<10 {
		buf = make([]byte, 1<<20)
	}
	return &frameReader{r: r, end: end, buf: buf[:cap(buf)], bufOff: -1}
}

// at returns the bytes [off, off+n) of the file; they stay valid until the
// next call. It returns io.ErrUnexpectedEOF if the file ends before off+n.
func (fr *frameReader) at(off int64, n int) ([]byte, error) {
	if off+int64(n) > fr.end {
		return nil, io.ErrUnexpectedEOF
	}
	if fr.bufOff >= 0 && off >= fr.bufOff && off+int64(n) <= fr.bufOff+int64(fr.n) {
		i := int(off - fr.bufOff)
		return fr.buf[i : i+n], nil
	}
	if n > len(fr.buf) {
		fr.buf = make([]byte, n+(256<<10))
	}
	want := min(int64(len(fr.buf)), fr.end-off)
	m, err := fr.r.ReadAt(fr.buf[:want], off)
	if int64(m) < want {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		fr.bufOff = -1
		return nil, err
	}
	fr.bufOff, fr.n = off, m
	return fr.buf[:n], nil
}

// frame returns the verified frame at off (header included), or errFrame
// if the bytes there are not a whole valid frame, or an I/O error.
func (fr *frameReader) frame(off int64) ([]byte, error) {
	h, err := fr.at(off, frameHdr)
	if err == io.ErrUnexpectedEOF {
		return nil, errFrame
	}
	if err != nil {
		return nil, err
	}
	bl, err := frameBodyLen(h)
	if err != nil {
		return nil, err
	}
	f, err := fr.at(off, frameHdr+bl)
	if err == io.ErrUnexpectedEOF {
		return nil, errFrame
	}
	if err != nil {
		return nil, err
	}
	if !verifyFrame(f) {
		return nil, errFrame
	}
	return f, nil
}
