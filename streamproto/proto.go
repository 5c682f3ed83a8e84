// Package streamproto is RabbitMQ's stream protocol on the wire (issue
// 25; rabbitmq-server's deps/rabbitmq_stream/docs/PROTOCOL.adoc): frames
// (uint32 size, uint16 key, uint16 version, body), big-endian; strings
// with an int16 length, bytes with an int32 length, arrays and maps with
// an int32 count. A response's key has the top bit set and echoes the
// request's correlation id, then a uint16 code.
//
// The decoder reads a frame whose size the reader bounded; each count is
// bounded by the bytes left, so no announced size makes it allocate more
// than the frame holds.
package streamproto

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Command keys.
const (
	KeyDeclarePublisher                uint16 = 1
	KeyPublish                         uint16 = 2
	KeyPublishConfirm                  uint16 = 3
	KeyPublishError                    uint16 = 4
	KeyQueryPublisherSequence          uint16 = 5
	KeyDeletePublisher                 uint16 = 6
	KeySubscribe                       uint16 = 7
	KeyDeliver                         uint16 = 8
	KeyCredit                          uint16 = 9
	KeyStoreOffset                     uint16 = 10
	KeyQueryOffset                     uint16 = 11
	KeyUnsubscribe                     uint16 = 12
	KeyCreate                          uint16 = 13
	KeyDelete                          uint16 = 14
	KeyMetadata                        uint16 = 15
	KeyMetadataUpdate                  uint16 = 16
	KeyPeerProperties                  uint16 = 17
	KeySaslHandshake                   uint16 = 18
	KeySaslAuthenticate                uint16 = 19
	KeyTune                            uint16 = 20
	KeyOpen                            uint16 = 21
	KeyClose                           uint16 = 22
	KeyHeartbeat                       uint16 = 23
	KeyRoute                           uint16 = 24
	KeyPartitions                      uint16 = 25
	KeyConsumerUpdate                  uint16 = 26
	KeyExchangeCommandVersions         uint16 = 27
	KeyStreamStats                     uint16 = 28
	KeyCreateSuperStream               uint16 = 29
	KeyDeleteSuperStream               uint16 = 30
	KeyResolveOffsetSpec               uint16 = 31 // 4.3
	ResponseBit                        uint16 = 0x8000
	KeyConsumerUpdateResponse                 = KeyConsumerUpdate | ResponseBit
	KeyTuneResponse                           = KeyTune | ResponseBit
	KeyCreditResponse                         = KeyCredit | ResponseBit
	KeyCloseResponse                          = KeyClose | ResponseBit
	KeyPeerPropertiesResponse                 = KeyPeerProperties | ResponseBit
	KeySaslHandshakeResponse                  = KeySaslHandshake | ResponseBit
	KeySaslAuthenticateResponse               = KeySaslAuthenticate | ResponseBit
	KeyOpenResponse                           = KeyOpen | ResponseBit
	KeyExchangeCommandVersionsResponse        = KeyExchangeCommandVersions | ResponseBit
)

// Response codes.
const (
	OK                       uint16 = 1
	StreamDoesNotExist       uint16 = 2
	SubscriptionIDExists     uint16 = 3
	SubscriptionIDNotExist   uint16 = 4
	StreamAlreadyExists      uint16 = 5
	StreamNotAvailable       uint16 = 6
	SASLMechanismUnsupported uint16 = 7
	AuthenticationFailure    uint16 = 8
	SASLError                uint16 = 9
	SASLChallenge            uint16 = 10
	AuthenticationLoopback   uint16 = 11
	VirtualHostAccessFailure uint16 = 12
	UnknownFrame             uint16 = 13
	FrameTooLarge            uint16 = 14
	InternalError            uint16 = 15
	AccessRefused            uint16 = 16
	PreconditionFailed       uint16 = 17
	PublisherDoesNotExist    uint16 = 18
	NoOffset                 uint16 = 19
)

// ErrFrameTooLarge is returned for a frame above the reader's limit.
var ErrFrameTooLarge = errors.New("streamproto: frame too large")

// ErrMalformed is returned for a frame shorter than its fields.
var ErrMalformed = errors.New("streamproto: malformed frame")

// Frame is one frame read: its key, version and body (after both).
type Frame struct {
	Key, Version uint16
	Body         []byte
}

// Reader reads frames of at most Max bytes (the size field's value).
type Reader struct {
	r   *bufio.Reader
	Max uint32
	buf []byte
}

// NewReader returns a reader of frames from r.
func NewReader(r io.Reader, max uint32) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64<<10), Max: max}
}

// Next reads the next frame. Its body is valid until the next call. A
// frame above Max returns ErrFrameTooLarge (with the frame's key when
// its first bytes arrived) without reading its body.
func (r *Reader) Next() (Frame, error) {
	var h [8]byte
	if _, err := io.ReadFull(r.r, h[:4]); err != nil {
		return Frame{}, err
	}
	size := binary.BigEndian.Uint32(h[:4])
	if size < 4 {
		return Frame{}, ErrMalformed
	}
	if size > r.Max {
		return Frame{}, ErrFrameTooLarge
	}
	if cap(r.buf) < int(size) || cap(r.buf) > 4<<20 && size < 64<<10 {
		r.buf = make([]byte, size)
	}
	b := r.buf[:size]
	if _, err := io.ReadFull(r.r, b); err != nil {
		return Frame{}, err
	}
	return Frame{Key: binary.BigEndian.Uint16(b), Version: binary.BigEndian.Uint16(b[2:]), Body: b[4:]}, nil
}

// Dec reads fields from a frame's body. The first error sticks: every
// later read returns zero values.
type Dec struct {
	b   []byte
	err error
}

// NewDec returns a decoder of b.
func NewDec(b []byte) *Dec { return &Dec{b: b} }

// Err is the first error.
func (d *Dec) Err() error { return d.err }

// Len is the bytes left.
func (d *Dec) Len() int { return len(d.b) }

// Rest returns the bytes left and consumes them.
func (d *Dec) Rest() []byte {
	b := d.b
	d.b = nil
	return b
}

func (d *Dec) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || len(d.b) < n {
		d.err = ErrMalformed
		d.b = nil
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// Take reads n bytes, without copying.
func (d *Dec) Take(n int) []byte { return d.take(n) }

// Peek returns the next byte without reading it (0 at the end).
func (d *Dec) Peek() byte {
	if d.err != nil || len(d.b) == 0 {
		return 0
	}
	return d.b[0]
}

func (d *Dec) U8() uint8 {
	if b := d.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *Dec) U16() uint16 {
	if b := d.take(2); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (d *Dec) U32() uint32 {
	if b := d.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (d *Dec) U64() uint64 {
	if b := d.take(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

// Str reads a string; the null string (-1) reads as "" and null true.
func (d *Dec) Str() (s string, null bool) {
	n := int16(d.U16())
	if n < 0 {
		return "", d.err == nil
	}
	return string(d.take(int(n))), false
}

// S reads a string, null as "".
func (d *Dec) S() string {
	s, _ := d.Str()
	return s
}

// Bytes reads bytes (int32 length; -1 is nil), without copying.
func (d *Dec) Bytes() []byte {
	n := int32(d.U32())
	if n < 0 {
		return nil
	}
	return d.take(int(n))
}

// Count reads an array's or map's count, bounded by what is left when
// each element takes at least min bytes.
func (d *Dec) Count(min int) int {
	n := int32(d.U32())
	if d.err != nil {
		return 0
	}
	if n < 0 || min > 0 && int(n) > len(d.b)/min {
		d.err = ErrMalformed
		return 0
	}
	return int(n)
}

// Map reads a map of strings.
func (d *Dec) Map() map[string]string {
	n := d.Count(4)
	m := make(map[string]string, n)
	for range n {
		k := d.S()
		v := d.S()
		if d.err != nil {
			return nil
		}
		m[k] = v
	}
	return m
}

// Strs reads an array of strings.
func (d *Dec) Strs() []string {
	n := d.Count(2)
	out := make([]string, 0, n)
	for range n {
		s := d.S()
		if d.err != nil {
			return nil
		}
		out = append(out, s)
	}
	return out
}

// Enc writes a frame: Start, the fields, then Finish sets its size.
type Enc struct {
	B     []byte
	start int
}

// Start begins a frame.
func (e *Enc) Start(key, version uint16) {
	e.start = len(e.B)
	e.B = append(e.B, 0, 0, 0, 0)
	e.U16(key)
	e.U16(version)
}

// Finish writes the frame's size.
func (e *Enc) Finish() {
	binary.BigEndian.PutUint32(e.B[e.start:], uint32(len(e.B)-e.start-4))
}

func (e *Enc) U8(v uint8)   { e.B = append(e.B, v) }
func (e *Enc) U16(v uint16) { e.B = binary.BigEndian.AppendUint16(e.B, v) }
func (e *Enc) U32(v uint32) { e.B = binary.BigEndian.AppendUint32(e.B, v) }
func (e *Enc) U64(v uint64) { e.B = binary.BigEndian.AppendUint64(e.B, v) }

// Str writes a string (at most 32,767 bytes; longer is cut).
func (e *Enc) Str(s string) {
	if len(s) > 1<<15-1 {
		s = s[:1<<15-1]
	}
	e.U16(uint16(len(s)))
	e.B = append(e.B, s...)
}

// Bytes writes bytes with an int32 length.
func (e *Enc) Bytes(b []byte) {
	e.U32(uint32(len(b)))
	e.B = append(e.B, b...)
}

// Map writes a map of strings, in keys' order.
func (e *Enc) Map(keys []string, m map[string]string) {
	e.U32(uint32(len(keys)))
	for _, k := range keys {
		e.Str(k)
		e.Str(m[k])
	}
}

// Strs writes an array of strings.
func (e *Enc) Strs(ss []string) {
	e.U32(uint32(len(ss)))
	for _, s := range ss {
		e.Str(s)
	}
}

// Response starts a response frame to key with its correlation id and
// code.
func (e *Enc) Response(key uint16, corr uint32, code uint16) {
	e.Start(key|ResponseBit, 1)
	e.U32(corr)
	e.U16(code)
}

// KeyName is a key for logs.
func KeyName(k uint16) string {
	names := [...]string{"", "declare_publisher", "publish", "publish_confirm", "publish_error", "query_publisher_sequence",
		"delete_publisher", "subscribe", "deliver", "credit", "store_offset", "query_offset", "unsubscribe", "create",
		"delete", "metadata", "metadata_update", "peer_properties", "sasl_handshake", "sasl_authenticate", "tune",
		"open", "close", "heartbeat", "route", "partitions", "consumer_update", "exchange_command_versions",
		"stream_stats", "create_super_stream", "delete_super_stream", "resolve_offset_spec"}
	r := k &^ ResponseBit
	if int(r) < len(names) && r > 0 {
		if k&ResponseBit != 0 {
			return names[r] + "_response"
		}
		return names[r]
	}
	return fmt.Sprintf("unknown(%d)", k)
}
