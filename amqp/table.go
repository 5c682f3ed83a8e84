package amqp

import (
	"encoding/binary"
	"math"
	"slices"
	"time"
)

// MaxTableDepth bounds the nesting of tables and arrays in decoded input
// (a table at top level has depth 1). Deeper input is rejected as
// malformed, so hostile input cannot exhaust the stack. 100 levels, as
// many as RabbitMQ keeps of a queue's or exchange's arguments; the
// management API refuses deeper arguments rather than cut them.
const MaxTableDepth = 100

// AppendTable appends t as a field table: a uint32 byte length followed by
// the entries, keys sorted so the output is deterministic. Value types are
// those documented on Table, plus int (as 'l') and map[string]any (as
// 'F'); values of any other Go type are written as void 'V'. Keys longer
// than 255 bytes are truncated.
func AppendTable(dst []byte, t Table) []byte {
	return appendTableDepth(dst, t, 0)
}

func appendTable(dst []byte, t Table) []byte { return appendTableDepth(dst, t, 0) }

func appendTableDepth(dst []byte, t Table, depth int) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	switch len(t) {
	case 0:
	case 1:
		for k, v := range t {
			dst = appendShortstr(dst, k)
			dst = appendValue(dst, v, depth)
		}
	default:
		var buf [16]string
		keys := buf[:0]
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			dst = appendShortstr(dst, k)
			dst = appendValue(dst, t[k], depth)
		}
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// AppendArray appends a as a field array (type 'A' without the type
// octet): a uint32 byte length followed by the typed values.
func AppendArray(dst []byte, a []any) []byte {
	return appendArrayDepth(dst, a, 0)
}

func appendArrayDepth(dst []byte, a []any, depth int) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	for _, v := range a {
		dst = appendValue(dst, v, depth)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// appendValue appends a type octet and the value. Encoding stops nesting
// at MaxTableDepth (deeper values are written as void) so that a cyclic
// structure cannot recurse forever and the output always decodes.
func appendValue(dst []byte, v any, depth int) []byte {
	switch v := v.(type) {
	case bool:
		b := byte(0)
		if v {
			b = 1
		}
		return append(dst, 't', b)
	case int8:
		return append(dst, 'b', byte(v))
	case uint8:
		return append(dst, 'B', v)
	case int16:
		return binary.BigEndian.AppendUint16(append(dst, 's'), uint16(v))
	case uint16:
		return binary.BigEndian.AppendUint16(append(dst, 'u'), v)
	case int32:
		return binary.BigEndian.AppendUint32(append(dst, 'I'), uint32(v))
	case uint32:
		return binary.BigEndian.AppendUint32(append(dst, 'i'), v)
	case int64:
		return binary.BigEndian.AppendUint64(append(dst, 'l'), uint64(v))
	case int:
		return binary.BigEndian.AppendUint64(append(dst, 'l'), uint64(v))
	case float32:
		return binary.BigEndian.AppendUint32(append(dst, 'f'), math.Float32bits(v))
	case float64:
		return binary.BigEndian.AppendUint64(append(dst, 'd'), math.Float64bits(v))
	case Decimal:
		return binary.BigEndian.AppendUint32(append(dst, 'D', v.Scale), uint32(v.Value))
	case string:
		return appendLongstr(append(dst, 'S'), v)
	case []byte:
		dst = binary.BigEndian.AppendUint32(append(dst, 'x'), uint32(len(v)))
		return append(dst, v...)
	case RawValue:
		if len(v) == 0 {
			return append(dst, 'V')
		}
		return append(dst, v...)
	case time.Time:
		return binary.BigEndian.AppendUint64(append(dst, 'T'), uint64(v.Unix()))
	case []any:
		if depth+1 >= MaxTableDepth {
			return append(dst, 'V')
		}
		return appendArrayDepth(append(dst, 'A'), v, depth+1)
	case Table:
		if depth+1 >= MaxTableDepth {
			return append(dst, 'V')
		}
		return appendTableDepth(append(dst, 'F'), v, depth+1)
	case map[string]any:
		if depth+1 >= MaxTableDepth {
			return append(dst, 'V')
		}
		return appendTableDepth(append(dst, 'F'), Table(v), depth+1)
	}
	return append(dst, 'V')
}

// DecodeTable decodes a field table at the start of b (the uint32 length
// included) and returns it with the number of bytes consumed. Strings and
// byte arrays are copied. Malformed input gives a hard 501 FRAME_ERROR
// *Error. An empty table decodes as an empty, non-nil Table. A key that
// occurs twice keeps its last value. Floats and doubles are taken as they
// come, NaN and infinities included (method arguments and content headers
// read from a client are stricter, see errNonFinite).
func DecodeTable(b []byte) (Table, int, error) {
	return decodeTable(b, 0, false)
}

// DecodeArray decodes a field array at the start of b (the uint32 length
// included, no type octet) and returns it with the bytes consumed.
func DecodeArray(b []byte) ([]any, int, error) {
	return decodeArray(b, 0, false)
}

// errNonFinite is what a strict decode of a table returns for a float
// ('f') or double ('d') that is NaN or an infinity, anywhere in it.
// RabbitMQ 3.10 cannot parse those (Erlang has no such floats): in method
// arguments (queue.declare, exchange.declare, queue.bind, basic.consume,
// connection.start-ok, ...) its reader process crashes and the socket is
// reset, where Warren answers 501 "FRAME_ERROR - cannot decode" as for
// any table it cannot parse; in a published message's headers its channel
// crashes and the connection is closed with 541 INTERNAL_ERROR, which
// Warren sends too (DecodeHeader). Nothing else reaches the broker, so no
// definition, message or client property ever holds such a value.
var errNonFinite = &Error{Code: FrameError, Text: "FRAME_ERROR - non-finite float in a field table", Hard: true}

func decodeTable(b []byte, depth int, strict bool) (Table, int, error) {
	if depth >= MaxTableDepth || len(b) < 4 {
		return nil, 0, cannotDecode(b)
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return nil, 0, cannotDecode(b)
	}
	body := b[4 : 4+n]
	t := make(Table)
	for len(body) > 0 {
		kl := int(body[0])
		if len(body) < 1+kl {
			return nil, 0, cannotDecode(b)
		}
		key := string(body[1 : 1+kl])
		body = body[1+kl:]
		v, used, st := decodeValue(body, depth, strict)
		if st != valueOK {
			return nil, 0, st.err(b)
		}
		body = body[used:]
		t[key] = v
	}
	return t, 4 + int(n), nil
}

func decodeArray(b []byte, depth int, strict bool) ([]any, int, error) {
	if depth >= MaxTableDepth || len(b) < 4 {
		return nil, 0, cannotDecode(b)
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return nil, 0, cannotDecode(b)
	}
	body := b[4 : 4+n]
	a := []any{}
	for len(body) > 0 {
		v, used, st := decodeValue(body, depth, strict)
		if st != valueOK {
			return nil, 0, st.err(b)
		}
		body = body[used:]
		a = append(a, v)
	}
	return a, 4 + int(n), nil
}

// decodeValue decodes a type octet and value from b.
// Decode returns the value a RawValue encodes (tables and arrays
// included); ok is false when it is malformed.
func (r RawValue) Decode() (v any, ok bool) {
	v, n, st := decodeValue(r, 0, false)
	return v, st == valueOK && n == len(r)
}

// valueStatus is the outcome of decoding one field value.
type valueStatus uint8

const (
	valueOK        valueStatus = iota
	valueMalformed             // truncated, unknown type, too deep
	valueNonFinite             // NaN or infinity, in a strict decode
)

// err is the error a table or array holding the value b gives.
func (st valueStatus) err(b []byte) error {
	if st == valueNonFinite {
		return errNonFinite
	}
	return cannotDecode(b)
}

func decodeValue(b []byte, depth int, strict bool) (v any, n int, st valueStatus) {
	v, n, st = decodeValue1(b, depth, strict)
	if strict && st == valueOK {
		switch f := v.(type) {
		case float32:
			if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				return nil, 0, valueNonFinite
			}
		case float64:
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return nil, 0, valueNonFinite
			}
		}
	}
	return v, n, st
}

func decodeValue1(b []byte, depth int, strict bool) (v any, n int, st valueStatus) {
	if len(b) < 1 {
		return nil, 0, valueMalformed
	}
	typ, p := b[0], b[1:]
	need := 0
	switch typ {
	case 't', 'b', 'B':
		need = 1
	case 's', 'u':
		need = 2
	case 'I', 'i', 'f', 'S', 'x', 'A', 'F':
		need = 4
	case 'D':
		need = 5
	case 'l', 'd', 'T':
		need = 8
	case 'V':
		return nil, 1, valueOK
	default:
		return nil, 0, valueMalformed
	}
	if len(p) < need {
		return nil, 0, valueMalformed
	}
	switch typ {
	case 't':
		return p[0] != 0, 2, valueOK
	case 'b':
		return int8(p[0]), 2, valueOK
	case 'B':
		return p[0], 2, valueOK
	case 's':
		return int16(binary.BigEndian.Uint16(p)), 3, valueOK
	case 'u':
		return binary.BigEndian.Uint16(p), 3, valueOK
	case 'I':
		return int32(binary.BigEndian.Uint32(p)), 5, valueOK
	case 'i':
		return binary.BigEndian.Uint32(p), 5, valueOK
	case 'f':
		return math.Float32frombits(binary.BigEndian.Uint32(p)), 5, valueOK
	case 'D':
		return Decimal{Scale: p[0], Value: int32(binary.BigEndian.Uint32(p[1:]))}, 6, valueOK
	case 'l':
		return int64(binary.BigEndian.Uint64(p)), 9, valueOK
	case 'd':
		return math.Float64frombits(binary.BigEndian.Uint64(p)), 9, valueOK
	case 'T':
		return time.Unix(int64(binary.BigEndian.Uint64(p)), 0).UTC(), 9, valueOK
	case 'S', 'x':
		l := binary.BigEndian.Uint32(p)
		if uint64(l) > uint64(len(p)-4) {
			return nil, 0, valueMalformed
		}
		if typ == 'S' {
			return string(p[4 : 4+l]), 5 + int(l), valueOK
		}
		return append([]byte{}, p[4:4+l]...), 5 + int(l), valueOK
	case 'A':
		a, used, err := decodeArray(p, depth+1, strict)
		if err != nil {
			return nil, 0, statusOf(err)
		}
		return a, 1 + used, valueOK
	case 'F':
		t, used, err := decodeTable(p, depth+1, strict)
		if err != nil {
			return nil, 0, statusOf(err)
		}
		return t, 1 + used, valueOK
	}
	return nil, 0, valueMalformed
}

func statusOf(err error) valueStatus {
	if err == errNonFinite {
		return valueNonFinite
	}
	return valueMalformed
}
