// Package amqp is Warren's AMQP 0-9-1 codec: frames, field tables, content
// headers with the 14 basic properties, and the methods of the protocol
// (generated from RabbitMQ's extended spec XML by ./gen, see spec.go).
//
// The package has no goroutines and no network code, and knows nothing of
// queues or exchanges. Decoders never panic on any input: malformed input
// yields an *Error carrying the reply code RabbitMQ would send.
//
// Guarantees:
//
//   - No goroutines, no global mutable state; a FrameReader is for one
//     goroutine at a time, everything else is safe for concurrent use.
//   - DecodeMethod, Method.Decode, DecodeTable, DecodeArray, DecodeHeader,
//     DecodeProperties and FrameReader.ReadFrame never panic, whatever the
//     bytes (fuzzed). Table nesting is bounded by MaxTableDepth, and a
//     FrameReader never buffers more than the frame size limit plus 8.
//   - Decoded values never alias their input: strings, byte arrays and
//     tables are copied. Frame.Payload is the one exception: it aliases
//     the FrameReader's buffer and is valid until the next ReadFrame.
//   - Append functions only append to dst; with enough capacity the
//     basic.publish/deliver/ack/nack methods, frame headers and properties
//     without headers encode without allocating.
//   - Decoding then encoding yields bytes that decode to the same value
//     (tables are re-encoded with sorted keys).
//
// Errors follow RabbitMQ 3.10 as observed on the wire; frame.go lists the
// exact reply codes and texts.
package amqp

import (
	"fmt"
	"time"
)

// Table is an AMQP field table. Values have these Go types, one per AMQP
// field type as RabbitMQ uses them:
//
//	t bool        b int8       B uint8     s int16    u uint16
//	I int32       i uint32     l int64     f float32  d float64
//	D Decimal     S string     A []any     T time.Time (UTC, seconds)
//	F Table       V nil        x []byte
//
// Encoding also accepts int (as l) and map[string]any (as F).
type Table map[string]any

// RawValue is a field value already encoded (type octet included), which
// AppendTable and AppendArray write verbatim. The broker builds x-death
// headers this way, in one allocation. It decodes as the value it holds.
type RawValue []byte

// Decimal is the AMQP decimal-value (type D): Value * 10^-Scale.
type Decimal struct {
	Scale uint8
	Value int32
}

// Property flags of the basic class content header, in wire order.
const (
	FlagContentType     uint16 = 0x8000
	FlagContentEncoding uint16 = 0x4000
	FlagHeaders         uint16 = 0x2000
	FlagDeliveryMode    uint16 = 0x1000
	FlagPriority        uint16 = 0x0800
	FlagCorrelationID   uint16 = 0x0400
	FlagReplyTo         uint16 = 0x0200
	FlagExpiration      uint16 = 0x0100
	FlagMessageID       uint16 = 0x0080
	FlagTimestamp       uint16 = 0x0040
	FlagType            uint16 = 0x0020
	FlagUserID          uint16 = 0x0010
	FlagAppID           uint16 = 0x0008
	FlagClusterID       uint16 = 0x0004
)

// Properties are the 14 properties of the basic class. Flags records which
// are present: decoding sets it, and encoding writes a property when its
// flag is set or its value is not the zero value. To remove a property,
// clear both the value and the flag.
type Properties struct {
	Flags           uint16
	ContentType     string
	ContentEncoding string
	Headers         Table
	DeliveryMode    uint8
	Priority        uint8
	CorrelationID   string
	ReplyTo         string
	Expiration      string
	MessageID       string
	Timestamp       time.Time
	Type            string
	UserID          string
	AppID           string
	ClusterID       string
}

// Frame types.
const (
	FrameMethod    = 1
	FrameHeader    = 2
	FrameBody      = 3
	FrameHeartbeat = 8
	FrameEnd       = 0xCE
	FrameMinSize   = 4096
)

// Reply codes (spec constants; RabbitMQ adds none).
const (
	ReplySuccess       = 200
	ContentTooLarge    = 311
	NoRoute            = 312
	NoConsumers        = 313
	ConnectionForced   = 320
	InvalidPath        = 402
	AccessRefused      = 403
	NotFound           = 404
	ResourceLocked     = 405
	PreconditionFailed = 406
	FrameError         = 501
	SyntaxError        = 502
	CommandInvalid     = 503
	ChannelError       = 504
	UnexpectedFrame    = 505
	ResourceError      = 506
	NotAllowed         = 530
	NotImplemented     = 540
	InternalError      = 541
)

// ReplyName returns the spec name of a reply code in RabbitMQ's spelling
// (NOT_FOUND, PRECONDITION_FAILED, ...), or "" for unknown codes.
func ReplyName(code uint16) string {
	switch code {
	case ReplySuccess:
		return "OK"
	case ContentTooLarge:
		return "CONTENT_TOO_LARGE"
	case NoRoute:
		return "NO_ROUTE"
	case NoConsumers:
		return "NO_CONSUMERS"
	case ConnectionForced:
		return "CONNECTION_FORCED"
	case InvalidPath:
		return "INVALID_PATH"
	case AccessRefused:
		return "ACCESS_REFUSED"
	case NotFound:
		return "NOT_FOUND"
	case ResourceLocked:
		return "RESOURCE_LOCKED"
	case PreconditionFailed:
		return "PRECONDITION_FAILED"
	case FrameError:
		return "FRAME_ERROR"
	case SyntaxError:
		return "SYNTAX_ERROR"
	case CommandInvalid:
		return "COMMAND_INVALID"
	case ChannelError:
		return "CHANNEL_ERROR"
	case UnexpectedFrame:
		return "UNEXPECTED_FRAME"
	case ResourceError:
		return "RESOURCE_ERROR"
	case NotAllowed:
		return "NOT_ALLOWED"
	case NotImplemented:
		return "NOT_IMPLEMENTED"
	case InternalError:
		return "INTERNAL_ERROR"
	}
	return ""
}

// Error is an AMQP protocol error: what the broker answers with
// channel.close (soft errors) or connection.close (hard errors). Text is the
// full reply-text in RabbitMQ's shape, "NOT_FOUND - no queue 'q' in vhost '/'".
// ClassID and MethodID name the method that failed (0 when none).
type Error struct {
	Code     uint16
	Text     string
	ClassID  uint16
	MethodID uint16
	// Hard is true for connection errors, false for channel errors.
	Hard bool

	badUTF8 bool // a shortstr was not UTF-8 (see DecodeServerMethod)
}

func (e *Error) Error() string { return fmt.Sprintf("amqp %d: %s", e.Code, e.Text) }

// Errorf returns a channel error (soft) with RabbitMQ's text shape:
// "<REPLY_NAME> - <message>".
func Errorf(code uint16, format string, args ...any) *Error {
	return &Error{Code: code, Text: ReplyName(code) + " - " + fmt.Sprintf(format, args...)}
}

// ConnErrorf returns a connection error (hard) with RabbitMQ's text shape.
func ConnErrorf(code uint16, format string, args ...any) *Error {
	e := Errorf(code, format, args...)
	e.Hard = true
	return e
}

// WithMethod returns e naming the failing method's class and method id.
func (e *Error) WithMethod(classID, methodID uint16) *Error {
	c := *e
	c.ClassID, c.MethodID = classID, methodID
	return &c
}
