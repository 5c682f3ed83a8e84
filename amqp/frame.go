package amqp

// Frame-level errors. The codes and texts below were observed on the wire
// from RabbitMQ 3.10 (connection.close sent on channel 0 after the
// connection was open, frame-max negotiated to 4096); Warren reproduces
// them exactly except where a row says otherwise:
//
//	input                                 RabbitMQ 3.10 connection.close
//	------------------------------------  -------------------------------------------------------------------------------
//	payload size 5010 > frame-max 4096    501 "FRAME_ERROR - type 1, all octets = <<>>: {frame_too_large,5010,4088}"
//	  (payload 4096 is still accepted: RabbitMQ allows 8 bytes of slack, but reports frame-max - 8)
//	frame-end octet 0xAB instead of 0xCE  501 "FRAME_ERROR - type 1, all octets = <<0,20,0,20,1>>: {invalid_frame_end_marker,171}"
//	unknown frame type 5                  501 "FRAME_ERROR - type 5, all octets = <<1,2,3>>: unknown_frame"
//	  payload > 16 bytes                  501 "FRAME_ERROR - type 4, first 16 octets = <<\"abcdefghijklmnop\">>: unknown_frame"
//	method payload < 4 bytes              501 "FRAME_ERROR - type 1, all octets = <<0,60,0>>: unknown_frame"
//	truncated method args (basic.publish) 501 "FRAME_ERROR - cannot decode <<0,0,5,97>>", class-id 60, method-id 40
//	  trailing bytes after args           501 "FRAME_ERROR - cannot decode <<0,0,0,0,0,0,0,0,0,9,9>>", 60/80 (basic.ack)
//	unknown method 60.99 / class 99       none: the reader process crashes ({unknown_method_id,{60,99}}) and the
//	                                      socket is reset. Warren answers 540 "NOT_IMPLEMENTED - {unknown_method_id,{60,99}}".
//	access.request 30.10, empty args      501 "FRAME_ERROR - cannot decode <<>>" (RabbitMQ's framing still knows the 0-8
//	                                      access class). Warren has no access class: 540 as for any unknown method.
//	unknown field-table type 'Z'          none: crash and reset. Warren: 501 "FRAME_ERROR - cannot decode <<...>>".
//	float/double NaN or +-Inf in method   none: crash and reset (queue.declare, exchange.declare, queue.bind,
//	  arguments, nested or not            basic.consume, ...; connection.start-ok: socket closed after 3 s).
//	                                      Warren: 501 "FRAME_ERROR - cannot decode <<...>>", as for 'Z'.
//	shortstr not UTF-8 in a method        501 "FRAME_ERROR - Malformed UTF-8 in shortstr" (class 0, method 0), for
//	  without content                     every shortstr of such a method (names, routing keys, consumer tags,
//	                                      vhost, mechanism, reply texts...); basic.publish is not checked.
//	                                      UTF-8 as xmerl_ucs reads it: surrogates and up to U+1FFFFF pass.
//	header payload < 12 bytes             501 "FRAME_ERROR - type 2, all octets = <<0,60,0>>: unknown_frame" (DecodeHeader)
//	header property flags with 0x0001     541 "INTERNAL_ERROR" (channel process crash). Warren: 501 "cannot decode".
//	header property flags with 0x0002     accepted. Warren: accepted, bit dropped.
//	truncated or missing header props     541 "INTERNAL_ERROR". Warren: 501 "FRAME_ERROR - cannot decode <<...>>".
//	float/double NaN or +-Inf in headers  541 "INTERNAL_ERROR" (channel crash, every publish decodes its headers).
//	                                      Warren: the same (DecodeHeader).
//
// Errors that depend on connection state are the broker's to produce, not
// this package's; RabbitMQ's texts for reference:
//
//	header for another class              505 "UNEXPECTED_FRAME - expected content header for class 60, got one for class 50 instead" (60/40)
//	body or header frame where a method   505 "UNEXPECTED_FRAME - expected method frame, got non method frame instead"
//	  was expected
//	heartbeat on channel 1                505 "UNEXPECTED_FRAME - type 8, all octets = <<>>"
//
// RabbitMQ never answers malformed arguments with 502 SYNTAX_ERROR: it
// uses 501 FRAME_ERROR "cannot decode", and so does Warren.
//
// Binaries are printed as Erlang's ~p does: <<"abc">> when all bytes are
// printable Latin-1, else <<0,60,0>>. Erlang's pretty printer wraps long
// terms across lines (seen in invalid_frame_end_marker texts with a 16-byte
// snippet); Warren keeps them on one line. A field-table 't' with any
// non-zero octet is accepted as true, as RabbitMQ does.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ProtocolHeader is what an AMQP 0-9-1 client sends first, and what the
// server answers with before closing when the client's header differs.
var ProtocolHeader = []byte("AMQP\x00\x00\x09\x01")

// ErrProtocolHeader is returned by ReadProtocolHeader when the 8 bytes read
// are not ProtocolHeader.
var ErrProtocolHeader = errors.New("amqp: bad protocol header")

// MaxFrameSizeCap caps the frame size a FrameReader accepts when no
// frame-max was negotiated (SetMaxFrameSize(0)).
const MaxFrameSizeCap = 128 << 20

// Frame is one AMQP frame as read by a FrameReader.
type Frame struct {
	Type    uint8
	Channel uint16
	// Payload aliases the FrameReader's buffer: it is valid only until
	// the next call to ReadFrame (or ReadProtocolHeader).
	Payload []byte
}

// FrameReader reads frames from an io.Reader through its own buffer. It is
// not safe for concurrent use.
type FrameReader struct {
	rd      io.Reader
	buf     []byte
	r, w    int
	max     uint32 // negotiated frame-max, 0 for none
	initial int
	full    bool // the last Read filled all the free space: the peer is busy
}

// initialReadBuf is the first buffer of a FrameReader: enough for a
// handshake and light traffic; a busy peer grows it.
const initialReadBuf = 1024

// NewFrameReader returns a FrameReader reading from r with a buffer that
// grows to bufSize bytes (at least 4096) once the peer sends faster than a
// small buffer holds: it starts at 1 KiB, so that idle connections cost
// little memory. A frame that does not fit grows the buffer, up to the
// frame size limit. The frame size limit starts at FrameMinSize; see
// SetMaxFrameSize.
func NewFrameReader(r io.Reader, bufSize int) *FrameReader {
	if bufSize < FrameMinSize {
		bufSize = FrameMinSize
	}
	return &FrameReader{rd: r, buf: make([]byte, initialReadBuf), initial: bufSize, max: FrameMinSize}
}

// SetMaxFrameSize sets the negotiated frame-max, which counts the 8 bytes
// of frame overhead. 0 means no limit other than MaxFrameSizeCap. Until it
// is called the limit is FrameMinSize (4096), what the spec allows before
// connection.tune-ok. Like
// RabbitMQ, the reader tolerates 8 bytes of slack: it rejects a frame
// whose payload is larger than n, reporting the limit as n-8.
func (r *FrameReader) SetMaxFrameSize(n uint32) { r.max = n }

// Buffered returns the number of bytes read from the underlying reader but
// not yet returned as frames: when it is at least 8, the next ReadFrame
// may well return without blocking, so a server can batch its replies.
func (r *FrameReader) Buffered() int { return r.w - r.r }

// fill makes at least n bytes available in buf[r:w]. The buffer grows
// (doubling, up to n) only as data arrives, so a peer announcing a large
// frame costs memory in proportion to what it actually sends.
func (r *FrameReader) fill(n int) error {
	empty := 0
	for r.w-r.r < n {
		if r.w == len(r.buf) {
			if r.full && len(r.buf) < r.initial {
				// A busy peer: read in larger chunks from now on.
				nb := make([]byte, max(r.initial, n))
				r.w = copy(nb, r.buf[r.r:r.w])
				r.r = 0
				r.buf = nb
			} else if r.r > 0 {
				r.w = copy(r.buf, r.buf[r.r:r.w])
				r.r = 0
			} else {
				nb := make([]byte, min(n, 2*len(r.buf)))
				copy(nb, r.buf[:r.w])
				r.buf = nb
			}
		}
		m, err := r.rd.Read(r.buf[r.w:])
		r.full = m > 0 && r.w+m == len(r.buf)
		r.w += m
		if r.w-r.r >= n {
			return nil
		}
		if err != nil {
			if err == io.EOF && r.w > r.r {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		if m == 0 {
			empty++
			if empty > 100 {
				return io.ErrNoProgress
			}
		} else {
			empty = 0
		}
	}
	return nil
}

// ReadProtocolHeader reads the 8-byte protocol header a client sends
// first. It returns the bytes read, and ErrProtocolHeader when they are
// not ProtocolHeader.
func (r *FrameReader) ReadProtocolHeader() ([8]byte, error) {
	var h [8]byte
	if err := r.fill(8); err != nil {
		return h, err
	}
	copy(h[:], r.buf[r.r:])
	r.r += 8
	if string(h[:]) != string(ProtocolHeader) {
		return h, ErrProtocolHeader
	}
	return h, nil
}

// ReadFrame reads the next frame. Payload aliases the reader's buffer and
// is valid until the next ReadFrame. Protocol violations (frame larger
// than the limit, bad frame-end octet, unknown frame type) are hard 501
// FRAME_ERROR *Errors with RabbitMQ's texts; after one, the stream is out
// of sync and the connection must be closed. I/O errors are returned as
// they are, except that an EOF in the middle of a frame is
// io.ErrUnexpectedEOF.
func (r *FrameReader) ReadFrame() (Frame, error) {
	if r.r == r.w {
		// Nothing buffered: restart at the front so large buffers are
		// reused from the start.
		r.r, r.w = 0, 0
		if len(r.buf) > r.initial && len(r.buf) > 1<<20 {
			r.buf = make([]byte, r.initial)
		}
	}
	if err := r.fill(7); err != nil {
		return Frame{}, err
	}
	h := r.buf[r.r : r.r+7]
	f := Frame{Type: h[0], Channel: binary.BigEndian.Uint16(h[1:])}
	size := binary.BigEndian.Uint32(h[3:])
	limit := r.max
	if limit == 0 || limit > MaxFrameSizeCap {
		limit = MaxFrameSizeCap
	}
	if size > limit {
		return Frame{}, frameError(f.Type, nil, fmt.Sprintf("{frame_too_large,%d,%d}", size, int64(limit)-8))
	}
	total := 7 + int(size) + 1
	if err := r.fill(total); err != nil {
		return Frame{}, err
	}
	f.Payload = r.buf[r.r+7 : r.r+7+int(size) : r.r+7+int(size)]
	end := r.buf[r.r+total-1]
	r.r += total
	if end != FrameEnd {
		return Frame{}, frameError(f.Type, f.Payload, fmt.Sprintf("{invalid_frame_end_marker,%d}", end))
	}
	switch f.Type {
	case FrameMethod, FrameHeader, FrameBody, FrameHeartbeat:
	default:
		return Frame{}, frameError(f.Type, f.Payload, "unknown_frame")
	}
	return f, nil
}

// AppendMethodFrame appends a method frame carrying m.
func AppendMethodFrame(dst []byte, channel uint16, m Method) []byte {
	start := len(dst)
	dst = append(dst, FrameMethod, byte(channel>>8), byte(channel), 0, 0, 0, 0)
	dst = m.Append(dst)
	binary.BigEndian.PutUint32(dst[start+3:], uint32(len(dst)-start-7))
	return append(dst, FrameEnd)
}

// AppendBodyFrames appends body as content body frames of at most
// frameMax bytes each (frame overhead included, so payloads of at most
// frameMax-8 bytes). frameMax 0 means no limit: one frame. An empty body
// appends no frame, as the protocol requires.
func AppendBodyFrames(dst []byte, channel uint16, body []byte, frameMax uint32) []byte {
	chunk := len(body)
	if frameMax != 0 {
		c := int64(frameMax) - 8
		if c < 1 {
			c = 1
		}
		if c < int64(chunk) {
			chunk = int(c)
		}
	}
	for len(body) > 0 {
		n := min(chunk, len(body))
		dst = append(dst, FrameBody, byte(channel>>8), byte(channel))
		dst = binary.BigEndian.AppendUint32(dst, uint32(n))
		dst = append(dst, body[:n]...)
		dst = append(dst, FrameEnd)
		body = body[n:]
	}
	return dst
}

// AppendHeartbeat appends a heartbeat frame (channel 0, empty payload).
func AppendHeartbeat(dst []byte) []byte {
	return append(dst, FrameHeartbeat, 0, 0, 0, 0, 0, 0, FrameEnd)
}
