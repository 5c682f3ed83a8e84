package amqp

import "encoding/binary"

// flagsKnown are the 14 property flags of the basic class. Of the two low
// bits, 0x0001 (continuation) is rejected and 0x0002 (unused) ignored.
const flagsKnown uint16 = 0xFFFC

// flags returns the property flags that AppendProperties writes: the
// flags set in p.Flags plus those of non-zero values.
func (p *Properties) flags() uint16 {
	f := p.Flags & flagsKnown
	if p.ContentType != "" {
		f |= FlagContentType
	}
	if p.ContentEncoding != "" {
		f |= FlagContentEncoding
	}
	if p.Headers != nil {
		f |= FlagHeaders
	}
	if p.DeliveryMode != 0 {
		f |= FlagDeliveryMode
	}
	if p.Priority != 0 {
		f |= FlagPriority
	}
	if p.CorrelationID != "" {
		f |= FlagCorrelationID
	}
	if p.ReplyTo != "" {
		f |= FlagReplyTo
	}
	if p.Expiration != "" {
		f |= FlagExpiration
	}
	if p.MessageID != "" {
		f |= FlagMessageID
	}
	if !p.Timestamp.IsZero() {
		f |= FlagTimestamp
	}
	if p.Type != "" {
		f |= FlagType
	}
	if p.UserID != "" {
		f |= FlagUserID
	}
	if p.AppID != "" {
		f |= FlagAppID
	}
	if p.ClusterID != "" {
		f |= FlagClusterID
	}
	return f
}

// AppendProperties appends the property flags and the present properties
// of p (see Properties for what is present). A nil p appends empty flags.
// The flags written never include the continuation bit.
func AppendProperties(dst []byte, p *Properties) []byte {
	if p == nil {
		return append(dst, 0, 0)
	}
	f := p.flags()
	dst = binary.BigEndian.AppendUint16(dst, f)
	if f&FlagContentType != 0 {
		dst = appendShortstr(dst, p.ContentType)
	}
	if f&FlagContentEncoding != 0 {
		dst = appendShortstr(dst, p.ContentEncoding)
	}
	if f&FlagHeaders != 0 {
		dst = AppendTable(dst, p.Headers)
	}
	if f&FlagDeliveryMode != 0 {
		dst = append(dst, p.DeliveryMode)
	}
	if f&FlagPriority != 0 {
		dst = append(dst, p.Priority)
	}
	if f&FlagCorrelationID != 0 {
		dst = appendShortstr(dst, p.CorrelationID)
	}
	if f&FlagReplyTo != 0 {
		dst = appendShortstr(dst, p.ReplyTo)
	}
	if f&FlagExpiration != 0 {
		dst = appendShortstr(dst, p.Expiration)
	}
	if f&FlagMessageID != 0 {
		dst = appendShortstr(dst, p.MessageID)
	}
	if f&FlagTimestamp != 0 {
		dst = appendTimestamp(dst, p.Timestamp)
	}
	if f&FlagType != 0 {
		dst = appendShortstr(dst, p.Type)
	}
	if f&FlagUserID != 0 {
		dst = appendShortstr(dst, p.UserID)
	}
	if f&FlagAppID != 0 {
		dst = appendShortstr(dst, p.AppID)
	}
	if f&FlagClusterID != 0 {
		dst = appendShortstr(dst, p.ClusterID)
	}
	return dst
}

// AppendHeaderFrame appends a complete content header frame: class id,
// weight 0, body size and the properties of p (nil for none).
func AppendHeaderFrame(dst []byte, channel, classID uint16, bodySize uint64, p *Properties) []byte {
	start := len(dst)
	dst = append(dst, FrameHeader, byte(channel>>8), byte(channel), 0, 0, 0, 0)
	dst = binary.BigEndian.AppendUint16(dst, classID)
	dst = append(dst, 0, 0) // weight
	dst = binary.BigEndian.AppendUint64(dst, bodySize)
	dst = AppendProperties(dst, p)
	binary.BigEndian.PutUint32(dst[start+3:], uint32(len(dst)-start-7))
	return append(dst, FrameEnd)
}

// DecodeHeader decodes the payload of a content header frame. The weight
// field is ignored. A payload shorter than the 12-byte class id, weight and
// body size gives RabbitMQ's FRAME_ERROR "type 2, all octets = <<...>>:
// unknown_frame" (observed);
// malformed properties give FRAME_ERROR "cannot decode <<...>>" (both hard,
// 501); headers holding a float or double NaN or infinity give RabbitMQ's
// bare 541 "INTERNAL_ERROR" (hard, no class or method). The class id is returned as is: checking that it matches the
// method is the caller's business (RabbitMQ answers 505 UNEXPECTED_FRAME
// "expected content header for class 60, got one for class 50 instead").
func DecodeHeader(payload []byte) (classID uint16, bodySize uint64, p Properties, err error) {
	if len(payload) < 12 {
		return 0, 0, p, frameError(FrameHeader, payload, "unknown_frame")
	}
	classID = binary.BigEndian.Uint16(payload)
	bodySize = binary.BigEndian.Uint64(payload[4:])
	err = decodeProperties(payload[12:], &p, true)
	return classID, bodySize, p, err
}

// DecodeProperties decodes property flags and the properties they announce
// from b, which must hold exactly that, into p (every field of p is set;
// p.Flags records which properties were present). Strings and headers are
// copied. The continuation bit 0x0001 is rejected, the basic class having
// only 14 properties (RabbitMQ 3.10 fails such a header with 541
// INTERNAL_ERROR), as are missing flags and truncated or trailing bytes;
// the error is a hard 501 FRAME_ERROR *Error. The unused bit 0x0002 is
// ignored and not kept in p.Flags, as RabbitMQ accepts it.
//
// Headers are decoded leniently: a float or double NaN or infinity is
// kept (DecodeHeader, which reads what a client sends, refuses them).
func DecodeProperties(b []byte, p *Properties) error {
	return decodeProperties(b, p, false)
}

func decodeProperties(b []byte, p *Properties, strict bool) error {
	*p = Properties{}
	if len(b) < 2 {
		return cannotDecode(b)
	}
	f := binary.BigEndian.Uint16(b)
	if f&0x0001 != 0 {
		return cannotDecode(b)
	}
	f &= flagsKnown
	p.Flags = f
	d := decoder{b: b[2:], lenient: !strict}
	if f&FlagContentType != 0 {
		p.ContentType = d.shortstr()
	}
	if f&FlagContentEncoding != 0 {
		p.ContentEncoding = d.shortstr()
	}
	if f&FlagHeaders != 0 {
		p.Headers = d.table()
	}
	if f&FlagDeliveryMode != 0 {
		p.DeliveryMode = d.octet()
	}
	if f&FlagPriority != 0 {
		p.Priority = d.octet()
	}
	if f&FlagCorrelationID != 0 {
		p.CorrelationID = d.shortstr()
	}
	if f&FlagReplyTo != 0 {
		p.ReplyTo = d.shortstr()
	}
	if f&FlagExpiration != 0 {
		p.Expiration = d.shortstr()
	}
	if f&FlagMessageID != 0 {
		p.MessageID = d.shortstr()
	}
	if f&FlagTimestamp != 0 {
		p.Timestamp = d.timestamp()
	}
	if f&FlagType != 0 {
		p.Type = d.shortstr()
	}
	if f&FlagUserID != 0 {
		p.UserID = d.shortstr()
	}
	if f&FlagAppID != 0 {
		p.AppID = d.shortstr()
	}
	if f&FlagClusterID != 0 {
		p.ClusterID = d.shortstr()
	}
	if d.nonFinite {
		// RabbitMQ's channel crashes on such headers when it decodes
		// them (which it does for every publish) and the connection is
		// closed with a bare 541 (observed on 3.10.8).
		*p = Properties{}
		return &Error{Code: InternalError, Text: "INTERNAL_ERROR", Hard: true}
	}
	if d.bad || len(d.b) != 0 {
		*p = Properties{}
		return cannotDecode(b)
	}
	return nil
}
