package amqp

import (
	"encoding/binary"
	"strconv"
	"time"
)

//go:generate go run ./gen -spec /usr/share/amqp/specs/0-9-1-rabbit/amqp0-9-1.stripped.extended.xml -out spec.go

// Method is an AMQP method: one struct per method of the spec, named
// ClassMethod (BasicPublish, ConnectionStartOk, ...), see spec.go. All
// methods have pointer receivers.
type Method interface {
	ClassID() uint16
	MethodID() uint16
	// Name is the spec name, "basic.publish", "connection.start-ok".
	Name() string
	// HasContent reports whether the method is followed by a content
	// header and body frames (basic.publish, basic.return, basic.deliver,
	// basic.get-ok).
	HasContent() bool
	// Decode sets every field from args, the method frame payload after the
	// 4-byte class and method ids. Strings and tables are copied: the
	// method does not alias args. Malformed args (truncated, trailing
	// bytes, bad table) give a hard *Error 501 FRAME_ERROR, like RabbitMQ.
	Decode(args []byte) error
	// Append appends the class id, method id and arguments to dst. A
	// shortstr longer than 255 bytes is truncated to 255 bytes.
	Append(dst []byte) []byte
}

// SplitMethod splits a method frame payload into its class id, method id
// and arguments without decoding them (and without allocating). A payload
// shorter than 4 bytes is a hard FRAME_ERROR.
func SplitMethod(payload []byte) (classID, methodID uint16, args []byte, err error) {
	if len(payload) < 4 {
		return 0, 0, nil, frameError(FrameMethod, payload, "unknown_frame")
	}
	return binary.BigEndian.Uint16(payload), binary.BigEndian.Uint16(payload[2:]), payload[4:], nil
}

// DecodeMethod decodes the payload of a method frame into a newly allocated
// method. Unknown class or method ids give a hard 540 NOT_IMPLEMENTED
// *Error (RabbitMQ 3.10 drops the connection without connection.close in
// that case; see frame.go); malformed arguments a hard 501 FRAME_ERROR.
//
// To decode without allocating the method struct, use SplitMethod and the
// Decode method of a reused struct.
func DecodeMethod(payload []byte) (Method, error) {
	return decodeMethod(payload, false)
}

func decodeMethod(payload []byte, anyShortstr bool) (Method, error) {
	cid, mid, args, err := SplitMethod(payload)
	if err != nil {
		return nil, err
	}
	m := NewMethod(cid, mid)
	if m == nil {
		return nil, ConnErrorf(NotImplemented, "{unknown_method_id,{%d,%d}}", cid, mid).WithMethod(cid, mid)
	}
	// Decode fills in every field before it reports a malformed shortstr.
	if err := m.Decode(args); err != nil {
		if e, ok := err.(*Error); !ok || !e.badUTF8 || !anyShortstr {
			return nil, err
		}
	}
	return m, nil
}

// DecodeMethod0 decodes a method frame received on channel 0. It is
// DecodeMethod, except that an error naming no method (a shortstr that is
// not UTF-8) names the frame's method: RabbitMQ's reader does that for
// the connection methods it decodes itself (observed: connection.open
// with a malformed vhost name gives 501 "FRAME_ERROR - Malformed UTF-8 in
// shortstr" naming 10/40, the same on channel 1 names 0/0).
func DecodeMethod0(payload []byte) (Method, error) {
	m, err := DecodeMethod(payload)
	if e, ok := err.(*Error); ok && e.ClassID == 0 && e.MethodID == 0 && len(payload) >= 4 {
		err = e.WithMethod(binary.BigEndian.Uint16(payload), binary.BigEndian.Uint16(payload[2:]))
	}
	return m, err
}

// DecodeServerMethod decodes a method frame that a server sent. It is
// DecodeMethod, except that shortstrs need not be UTF-8: RabbitMQ checks
// the shortstrs it receives, not those it sends (reply texts, and
// basic.return and basic.deliver carry exchange names and routing keys as
// a publisher gave them, unchecked), and clients such as amqp091-go take
// them as they are.
func DecodeServerMethod(payload []byte) (Method, error) {
	return decodeMethod(payload, true)
}

// decodeError is RabbitMQ's error for method arguments it cannot parse:
// connection.close 501 "FRAME_ERROR - cannot decode <<...>>" naming the
// method.
func decodeError(classID, methodID uint16, args []byte) error {
	return cannotDecode(args).WithMethod(classID, methodID)
}

func cannotDecode(b []byte) *Error {
	e := &Error{Code: FrameError, Hard: true}
	e.Text = truncateText("FRAME_ERROR - cannot decode " + erlBinary(b, maxReplyText))
	return e
}

// frameError is RabbitMQ's error for a malformed frame:
// "FRAME_ERROR - type T, all octets = <<...>>: reason", or "first 16
// octets" when the payload is longer than 16 bytes.
func frameError(typ uint8, payload []byte, reason string) *Error {
	what := "all"
	if len(payload) > 16 {
		what, payload = "first 16", payload[:16]
	}
	e := ConnErrorf(FrameError, "type %d, %s octets = %s: %s", typ, what, erlBinary(payload, 16), reason)
	e.Text = truncateText(e.Text)
	return e
}

// UnexpectedFrameError is RabbitMQ's connection error for a well-formed
// frame where none of its type may come (a heartbeat on a channel, content
// on channel 0): 505 "UNEXPECTED_FRAME - type T, all octets = <<...>>".
func UnexpectedFrameError(f Frame) *Error {
	what, payload := "all", f.Payload
	if len(payload) > 16 {
		what, payload = "first 16", payload[:16]
	}
	e := ConnErrorf(UnexpectedFrame, "type %d, %s octets = %s", f.Type, what, erlBinary(payload, 16))
	e.Text = truncateText(e.Text)
	return e
}

const maxReplyText = 255

// truncateText makes s fit a shortstr reply-text.
func truncateText(s string) string {
	if len(s) <= maxReplyText {
		return s
	}
	return s[:maxReplyText-3] + "..."
}

// erlBinary formats b the way Erlang's ~p prints a binary: <<"text">> when
// every byte is printable Latin-1, else <<1,2,3>>. At most max bytes are
// formatted (the rest elided with "..."). Erlang's line wrapping of long
// terms is not reproduced.
func erlBinary(b []byte, max int) string {
	elided := false
	if len(b) > max {
		b, elided = b[:max], true
	}
	printable := len(b) > 0
	for _, c := range b {
		if !(c >= 32 && c <= 126 || c >= 160 || c == '\n' || c == '\r' || c == '\t' || c == '\v' || c == '\b' || c == '\f' || c == 0x1b) {
			printable = false
			break
		}
	}
	out := make([]byte, 0, 4*len(b)+8)
	out = append(out, "<<"...)
	if printable {
		out = append(out, '"')
		for _, c := range b {
			switch c {
			case '"', '\\':
				out = append(out, '\\', c)
			case '\n':
				out = append(out, `\n`...)
			case '\r':
				out = append(out, `\r`...)
			case '\t':
				out = append(out, `\t`...)
			case '\v':
				out = append(out, `\v`...)
			case '\b':
				out = append(out, `\b`...)
			case '\f':
				out = append(out, `\f`...)
			case 0x1b:
				out = append(out, `\e`...)
			default:
				out = append(out, c)
			}
		}
		out = append(out, '"')
	} else {
		for i, c := range b {
			if i > 0 {
				out = append(out, ',')
			}
			out = strconv.AppendUint(out, uint64(c), 10)
		}
	}
	if elided {
		out = append(out, ",..."...)
	}
	out = append(out, ">>"...)
	return string(out)
}

// decoder reads AMQP method argument fields. Reading past the end sets bad
// and returns zero values; finish turns that into the error.
type decoder struct {
	b   []byte
	bad bool
	// badUTF8 is set by a shortstr that RabbitMQ refuses as malformed
	// UTF-8 (see validUTF8).
	badUTF8 bool
	// nonFinite is set (with bad) by a table holding a float or double
	// NaN or infinity, which RabbitMQ cannot parse; lenient decoders
	// (messages read back from the store) accept them.
	nonFinite bool
	lenient   bool
}

func (d *decoder) octet() uint8 {
	if len(d.b) < 1 {
		d.bad = true
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) short() uint16 {
	if len(d.b) < 2 {
		d.bad = true
		d.b = nil
		return 0
	}
	v := binary.BigEndian.Uint16(d.b)
	d.b = d.b[2:]
	return v
}

func (d *decoder) long() uint32 {
	if len(d.b) < 4 {
		d.bad = true
		d.b = nil
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) longlong() uint64 {
	if len(d.b) < 8 {
		d.bad = true
		d.b = nil
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) timestamp() time.Time {
	if len(d.b) < 8 {
		d.bad = true
		d.b = nil
		return time.Time{}
	}
	return time.Unix(int64(d.longlong()), 0).UTC()
}

func (d *decoder) shortstrBytes() []byte {
	if len(d.b) < 1 || len(d.b) < 1+int(d.b[0]) {
		d.bad = true
		d.b = nil
		return nil
	}
	n := int(d.b[0])
	v := d.b[1 : 1+n]
	d.b = d.b[1+n:]
	return v
}

func (d *decoder) shortstr() string { return string(d.shortstrBytes()) }
func (d *decoder) skipShortstr()    { d.shortstrBytes() }

// shortstrUTF8 reads a shortstr that must be UTF-8 as RabbitMQ checks it.
func (d *decoder) shortstrUTF8() string {
	b := d.shortstrBytes()
	if !validUTF8(b) {
		d.badUTF8 = true
	}
	return string(b)
}

func (d *decoder) skipShortstrUTF8() { d.shortstrUTF8() }

// validUTF8 reports whether RabbitMQ 3.10 accepts b as a UTF-8 shortstr
// (rabbit_binary_parser:assert_utf8, which decodes with xmerl_ucs): every
// sequence of one to four bytes in the shortest form is accepted,
// surrogates (U+D800-U+DFFF) and code points up to U+1FFFFF included; a
// stray continuation byte, a truncated or overlong sequence and the five
// and six byte forms (0xF8-0xFF) are refused. Go's utf8.Valid is stricter
// (no surrogates, nothing above U+10FFFF), so names that RabbitMQ accepts
// may still be invalid for Go.
func validUTF8(b []byte) bool {
	for i := 0; i < len(b); {
		c := b[i]
		var n int
		var cp, min uint32
		switch {
		case c < 0x80:
			i++
			continue
		case c&0xE0 == 0xC0:
			n, cp, min = 1, uint32(c&0x1F), 0x80
		case c&0xF0 == 0xE0:
			n, cp, min = 2, uint32(c&0x0F), 0x800
		case c&0xF8 == 0xF0:
			n, cp, min = 3, uint32(c&0x07), 0x10000
		default:
			return false
		}
		if i+n >= len(b) {
			return false // truncated
		}
		for _, cc := range b[i+1 : i+1+n] {
			if cc&0xC0 != 0x80 {
				return false
			}
			cp = cp<<6 | uint32(cc&0x3F)
		}
		if cp < min {
			return false
		}
		i += 1 + n
	}
	return true
}

func (d *decoder) longstrBytes() []byte {
	if len(d.b) < 4 {
		d.bad = true
		d.b = nil
		return nil
	}
	n := binary.BigEndian.Uint32(d.b)
	if uint64(len(d.b)-4) < uint64(n) {
		d.bad = true
		d.b = nil
		return nil
	}
	v := d.b[4 : 4+n]
	d.b = d.b[4+n:]
	return v
}

func (d *decoder) longstr() string { return string(d.longstrBytes()) }
func (d *decoder) skipLongstr()    { d.longstrBytes() }

func (d *decoder) table() Table {
	if d.bad {
		return nil
	}
	if len(d.b) >= 4 && d.b[0]|d.b[1]|d.b[2]|d.b[3] == 0 {
		// An empty table decodes as nil in method arguments and
		// properties: no map is allocated.
		d.b = d.b[4:]
		return nil
	}
	t, n, err := decodeTable(d.b, 0, !d.lenient)
	if err != nil {
		d.bad = true
		d.nonFinite = err == errNonFinite
		d.b = nil
		return nil
	}
	d.b = d.b[n:]
	return t
}

// finish reports what went wrong decoding a method's arguments: a
// malformed field (or a table with a non-finite float, where RabbitMQ's
// reader crashes and resets the socket) as 501 "cannot decode"; a
// shortstr that is not UTF-8 as RabbitMQ's 501 "Malformed UTF-8 in
// shortstr".
func (d *decoder) finish(classID, methodID uint16, args []byte) error {
	if d.bad || len(d.b) != 0 {
		return decodeError(classID, methodID, args)
	}
	if d.badUTF8 {
		return &Error{Code: FrameError, Text: "FRAME_ERROR - Malformed UTF-8 in shortstr", Hard: true, badUTF8: true}
	}
	return nil
}

func appendOctet(dst []byte, v uint8) []byte     { return append(dst, v) }
func appendShort(dst []byte, v uint16) []byte    { return binary.BigEndian.AppendUint16(dst, v) }
func appendLong(dst []byte, v uint32) []byte     { return binary.BigEndian.AppendUint32(dst, v) }
func appendLonglong(dst []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(dst, v) }

func appendTimestamp(dst []byte, t time.Time) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(t.Unix()))
}

// appendShortstr appends s as a shortstr, truncated to 255 bytes.
func appendShortstr(dst []byte, s string) []byte {
	if len(s) > 255 {
		s = s[:255]
	}
	dst = append(dst, byte(len(s)))
	return append(dst, s...)
}

func appendLongstr(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}
