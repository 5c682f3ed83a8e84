// Package amqp10 encodes and decodes AMQP 1.0 messages (the bare message:
// header, annotations, properties, application properties, body), the
// form a stream keeps its messages in (issue 25), so that AMQP 0-9-1 and
// the stream protocol read each other's messages as RabbitMQ's do.
package amqp10

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// Section descriptors (smallulong codes of the message format).
const (
	SecHeader       = 0x70
	SecDeliveryAnn  = 0x71
	SecMessageAnn   = 0x72
	SecProperties   = 0x73
	SecAppProps     = 0x74
	SecData         = 0x75
	SecAMQPSequence = 0x76
	SecAMQPValue    = 0x77
	SecFooter       = 0x78
)

// Symbol is an AMQP 1.0 symbol (a string of ASCII).
type Symbol string

// Map is an AMQP 1.0 map that keeps its entries' order (keys may be
// strings, symbols or other values).
type Map []KV

// KV is one entry of a Map.
type KV struct {
	Key, Value any
}

// Get returns the value of the entry whose key is k (a string or symbol).
func (m Map) Get(k string) (any, bool) {
	for _, kv := range m {
		switch key := kv.Key.(type) {
		case string:
			if key == k {
				return kv.Value, true
			}
		case Symbol:
			if string(key) == k {
				return kv.Value, true
			}
		}
	}
	return nil, false
}

// Timestamp is an AMQP 1.0 timestamp (ms since the epoch).
type Timestamp int64

// Time is t as a time.Time.
func (t Timestamp) Time() time.Time { return time.UnixMilli(int64(t)) }

// UUID is an AMQP 1.0 uuid.
type UUID [16]byte

// Described is a described value whose descriptor this package does not
// know.
type Described struct {
	Descriptor any
	Value      any
}

// Null is the encoding of null.
const typeNull = 0x40

// Append appends v's encoding to b. Supported: nil, bool, the sized
// integers, float32/64, string, Symbol, []byte, Timestamp, time.Time
// (ms), UUID, []any (a list), Map, map[string]any (keys as strings, in no
// particular order), Described.
func Append(b []byte, v any) []byte {
	switch v := v.(type) {
	case nil:
		return append(b, typeNull)
	case bool:
		if v {
			return append(b, 0x41)
		}
		return append(b, 0x42)
	case uint8:
		return append(b, 0x50, v)
	case int8:
		return append(b, 0x51, byte(v))
	case uint16:
		return binary.BigEndian.AppendUint16(append(b, 0x60), v)
	case int16:
		return binary.BigEndian.AppendUint16(append(b, 0x61), uint16(v))
	case uint32:
		switch {
		case v == 0:
			return append(b, 0x43)
		case v < 256:
			return append(b, 0x52, byte(v))
		}
		return binary.BigEndian.AppendUint32(append(b, 0x70), v)
	case int32:
		if v >= -128 && v <= 127 {
			return append(b, 0x54, byte(v))
		}
		return binary.BigEndian.AppendUint32(append(b, 0x71), uint32(v))
	case uint64:
		switch {
		case v == 0:
			return append(b, 0x44)
		case v < 256:
			return append(b, 0x53, byte(v))
		}
		return binary.BigEndian.AppendUint64(append(b, 0x80), v)
	case int64:
		if v >= -128 && v <= 127 {
			return append(b, 0x55, byte(v))
		}
		return binary.BigEndian.AppendUint64(append(b, 0x81), uint64(v))
	case int:
		return Append(b, int64(v))
	case float32:
		return binary.BigEndian.AppendUint32(append(b, 0x72), math.Float32bits(v))
	case float64:
		return binary.BigEndian.AppendUint64(append(b, 0x82), math.Float64bits(v))
	case Timestamp:
		return binary.BigEndian.AppendUint64(append(b, 0x83), uint64(v))
	case time.Time:
		return binary.BigEndian.AppendUint64(append(b, 0x83), uint64(v.UnixMilli()))
	case UUID:
		return append(append(b, 0x98), v[:]...)
	case string:
		return appendVar(b, 0xa1, 0xb1, []byte(v))
	case Symbol:
		return appendVar(b, 0xa3, 0xb3, []byte(v))
	case []byte:
		return appendVar(b, 0xa0, 0xb0, v)
	case []any:
		return appendCompound(b, 0xc0, 0xd0, 0x45, len(v), func(b []byte) []byte {
			for _, e := range v {
				b = Append(b, e)
			}
			return b
		})
	case Map:
		return appendCompound(b, 0xc1, 0xd1, 0, 2*len(v), func(b []byte) []byte {
			for _, kv := range v {
				b = Append(Append(b, kv.Key), kv.Value)
			}
			return b
		})
	case map[string]any:
		return appendCompound(b, 0xc1, 0xd1, 0, 2*len(v), func(b []byte) []byte {
			for k, e := range v {
				b = Append(Append(b, k), e)
			}
			return b
		})
	case Described:
		return Append(Append(append(b, 0), v.Descriptor), v.Value)
	}
	return append(b, typeNull)
}

func appendVar(b []byte, small, large byte, v []byte) []byte {
	if len(v) < 256 {
		b = append(b, small, byte(len(v)))
	} else {
		b = binary.BigEndian.AppendUint32(append(b, large), uint32(len(v)))
	}
	return append(b, v...)
}

// appendCompound writes a list or map with 32-bit size and count (8-bit
// when it fits), or the empty-list code when empty is not 0.
func appendCompound(b []byte, small, large, empty byte, count int, body func([]byte) []byte) []byte {
	if count == 0 && empty != 0 {
		return append(b, empty)
	}
	start := len(b)
	b = append(b, large, 0, 0, 0, 0, 0, 0, 0, 0)
	b = body(b)
	size := len(b) - start - 5
	if size+1 < 256 && count < 256 {
		// shrink to the 8-bit form
		n := len(b) - start - 9
		copy(b[start+3:], b[start+9:])
		b = b[:start+3+n]
		b[start], b[start+1], b[start+2] = small, byte(n+1), byte(count)
		return b
	}
	binary.BigEndian.PutUint32(b[start+1:], uint32(size))
	binary.BigEndian.PutUint32(b[start+5:], uint32(count))
	return b
}

// BeginMap starts a map written entry by entry (AppendString,
// AppendSymbol, Append for the keys and values); EndMap finishes it with
// its count of keys and values (twice the entries). Its size is 32-bit.
func BeginMap(b []byte) ([]byte, int) {
	return append(b, 0xd1, 0, 0, 0, 0, 0, 0, 0, 0), len(b)
}

// EndMap finishes the map begun at start with n keys and values.
func EndMap(b []byte, start, n int) []byte {
	binary.BigEndian.PutUint32(b[start+1:], uint32(len(b)-start-5))
	binary.BigEndian.PutUint32(b[start+5:], uint32(n))
	return b
}

// BeginList and EndList are BeginMap and EndMap for a list of n values.
func BeginList(b []byte) ([]byte, int) {
	return append(b, 0xd0, 0, 0, 0, 0, 0, 0, 0, 0), len(b)
}

// EndList finishes the list begun at start with n values.
func EndList(b []byte, start, n int) []byte { return EndMap(b, start, n) }

// AppendString appends a string (no boxing).
func AppendString(b []byte, s string) []byte {
	if len(s) < 256 {
		b = append(b, 0xa1, byte(len(s)))
	} else {
		b = binary.BigEndian.AppendUint32(append(b, 0xb1), uint32(len(s)))
	}
	return append(b, s...)
}

// AppendSymbol appends a symbol (no boxing).
func AppendSymbol(b []byte, s string) []byte {
	if len(s) < 256 {
		b = append(b, 0xa3, byte(len(s)))
	} else {
		b = binary.BigEndian.AppendUint32(append(b, 0xb3), uint32(len(s)))
	}
	return append(b, s...)
}

// AppendBinary appends bytes (no boxing).
func AppendBinary(b []byte, v []byte) []byte { return appendVar(b, 0xa0, 0xb0, v) }

// AppendDescriptor appends a section's descriptor; its value follows.
func AppendDescriptor(b []byte, code byte) []byte { return append(b, 0, 0x53, code) }

// AppendSection appends a section: its descriptor, then v.
func AppendSection(b []byte, code byte, v any) []byte {
	return Append(append(b, 0, 0x53, code), v)
}

// ErrMalformed is returned for input that is not AMQP 1.0.
var ErrMalformed = errors.New("amqp10: malformed value")

// maxDepth bounds nesting, so hostile input cannot recurse deeply.
const maxDepth = 128

// Decode decodes one value at the start of b and returns it and the rest.
// Lists decode as []any, maps as Map, arrays as []any.
func Decode(b []byte) (any, []byte, error) { return decode(b, 0) }

func decode(b []byte, depth int) (any, []byte, error) {
	if len(b) == 0 {
		return nil, nil, ErrMalformed
	}
	return decodeCode(b[0], b[1:], depth)
}

// decodeCode decodes a value of type code whose bytes start b.
func decodeCode(code byte, b []byte, depth int) (any, []byte, error) {
	if depth > maxDepth {
		return nil, nil, ErrMalformed
	}
	need := func(n int) bool { return len(b) >= n }
	switch code {
	case 0x00:
		d, rest, err := decode(b, depth+1)
		if err != nil {
			return nil, nil, err
		}
		v, rest, err := decode(rest, depth+1)
		if err != nil {
			return nil, nil, err
		}
		return Described{Descriptor: d, Value: v}, rest, nil
	case 0x40:
		return nil, b, nil
	case 0x41:
		return true, b, nil
	case 0x42:
		return false, b, nil
	case 0x56:
		if !need(1) {
			return nil, nil, ErrMalformed
		}
		return b[0] != 0, b[1:], nil
	case 0x50:
		if !need(1) {
			return nil, nil, ErrMalformed
		}
		return b[0], b[1:], nil
	case 0x51:
		if !need(1) {
			return nil, nil, ErrMalformed
		}
		return int8(b[0]), b[1:], nil
	case 0x60, 0x61:
		if !need(2) {
			return nil, nil, ErrMalformed
		}
		u := binary.BigEndian.Uint16(b)
		if code == 0x61 {
			return int16(u), b[2:], nil
		}
		return u, b[2:], nil
	case 0x43:
		return uint32(0), b, nil
	case 0x52:
		if !need(1) {
			return nil, nil, ErrMalformed
		}
		return uint32(b[0]), b[1:], nil
	case 0x70:
		if !need(4) {
			return nil, nil, ErrMalformed
		}
		return binary.BigEndian.Uint32(b), b[4:], nil
	case 0x54:
		if !need(1) {
			return nil, nil, ErrMalformed
		}
		return int32(int8(b[0])), b[1:], nil
	case 0x71:
		if !need(4) {
			return nil, nil, ErrMalformed
		}
		return int32(binary.BigEndian.Uint32(b)), b[4:], nil
	case 0x72:
		if !need(4) {
			return nil, nil, ErrMalformed
		}
		return math.Float32frombits(binary.BigEndian.Uint32(b)), b[4:], nil
	case 0x73: // char: a UTF-32 code point
		if !need(4) {
			return nil, nil, ErrMalformed
		}
		return string(rune(binary.BigEndian.Uint32(b))), b[4:], nil
	case 0x44:
		return uint64(0), b, nil
	case 0x53:
		if !need(1) {
			return nil, nil, ErrMalformed
		}
		return uint64(b[0]), b[1:], nil
	case 0x80:
		if !need(8) {
			return nil, nil, ErrMalformed
		}
		return binary.BigEndian.Uint64(b), b[8:], nil
	case 0x55:
		if !need(1) {
			return nil, nil, ErrMalformed
		}
		return int64(int8(b[0])), b[1:], nil
	case 0x81:
		if !need(8) {
			return nil, nil, ErrMalformed
		}
		return int64(binary.BigEndian.Uint64(b)), b[8:], nil
	case 0x82:
		if !need(8) {
			return nil, nil, ErrMalformed
		}
		return math.Float64frombits(binary.BigEndian.Uint64(b)), b[8:], nil
	case 0x83:
		if !need(8) {
			return nil, nil, ErrMalformed
		}
		return Timestamp(int64(binary.BigEndian.Uint64(b))), b[8:], nil
	case 0x74: // decimal32: kept as its bytes
		if !need(4) {
			return nil, nil, ErrMalformed
		}
		return append([]byte(nil), b[:4]...), b[4:], nil
	case 0x84:
		if !need(8) {
			return nil, nil, ErrMalformed
		}
		return append([]byte(nil), b[:8]...), b[8:], nil
	case 0x94:
		if !need(16) {
			return nil, nil, ErrMalformed
		}
		return append([]byte(nil), b[:16]...), b[16:], nil
	case 0x98:
		if !need(16) {
			return nil, nil, ErrMalformed
		}
		var u UUID
		copy(u[:], b)
		return u, b[16:], nil
	case 0xa0, 0xa1, 0xa3, 0xb0, 0xb1, 0xb3:
		var n int
		if code < 0xb0 {
			if !need(1) {
				return nil, nil, ErrMalformed
			}
			n, b = int(b[0]), b[1:]
		} else {
			if !need(4) {
				return nil, nil, ErrMalformed
			}
			n, b = int(binary.BigEndian.Uint32(b)), b[4:]
		}
		if n < 0 || len(b) < n {
			return nil, nil, ErrMalformed
		}
		v := b[:n]
		switch code & 0x0f {
		case 0x01:
			return string(v), b[n:], nil
		case 0x03:
			return Symbol(v), b[n:], nil
		}
		return append([]byte(nil), v...), b[n:], nil
	case 0x45:
		return []any{}, b, nil
	case 0xc0, 0xc1, 0xd0, 0xd1:
		var size, count int
		if code < 0xd0 {
			if !need(2) {
				return nil, nil, ErrMalformed
			}
			size, count, b = int(b[0]), int(b[1]), b[2:]
			size--
		} else {
			if !need(8) {
				return nil, nil, ErrMalformed
			}
			size, count, b = int(binary.BigEndian.Uint32(b)), int(binary.BigEndian.Uint32(b[4:])), b[8:]
			size -= 4
		}
		if size < 0 || len(b) < size || count > size {
			return nil, nil, ErrMalformed
		}
		body, rest := b[:size], b[size:]
		if code&0x0f == 0x01 {
			if count%2 != 0 {
				return nil, nil, ErrMalformed
			}
			m := make(Map, 0, count/2)
			for range count / 2 {
				k, r, err := decode(body, depth+1)
				if err != nil {
					return nil, nil, err
				}
				v, r, err := decode(r, depth+1)
				if err != nil {
					return nil, nil, err
				}
				m = append(m, KV{k, v})
				body = r
			}
			return m, rest, nil
		}
		l := make([]any, 0, count)
		for range count {
			v, r, err := decode(body, depth+1)
			if err != nil {
				return nil, nil, err
			}
			l = append(l, v)
			body = r
		}
		return l, rest, nil
	case 0xe0, 0xf0:
		var size, count int
		if code == 0xe0 {
			if !need(2) {
				return nil, nil, ErrMalformed
			}
			size, count, b = int(b[0]), int(b[1]), b[2:]
			size--
		} else {
			if !need(8) {
				return nil, nil, ErrMalformed
			}
			size, count, b = int(binary.BigEndian.Uint32(b)), int(binary.BigEndian.Uint32(b[4:])), b[8:]
			size -= 4
		}
		if size < 1 || len(b) < size || count > size {
			return nil, nil, ErrMalformed
		}
		body, rest := b[:size], b[size:]
		// every element shares the constructor at the start
		ctor := body[0]
		body = body[1:]
		if ctor == 0 {
			return nil, nil, ErrMalformed // described arrays: not supported
		}
		l := make([]any, 0, count)
		for range count {
			v, r, err := decodeCode(ctor, body, depth+1)
			if err != nil {
				return nil, nil, err
			}
			body = r
			l = append(l, v)
		}
		return l, rest, nil
	}
	return nil, nil, fmt.Errorf("%w: type code 0x%02x", ErrMalformed, code)
}
