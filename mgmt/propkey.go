package mgmt

import (
	"encoding/base64"
	"encoding/binary"
	"sort"
	"time"

	amqpc "github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/erlhash"
)

// argsHash is RabbitMQ's hash of a binding's arguments in its
// properties_key: base64url (unpadded) of erlang:phash2(Args, 1 bsl 32)
// over the arguments as RabbitMQ holds them, a key-sorted list of
// {Key, Type, Value} tuples.
func argsHash(args amqpc.Table) string {
	h := erlhash.Phash2(tableTerm(args))
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], h)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// tableTerm is an AMQP field table as RabbitMQ's Erlang term. Nested
// tables are sorted too (a Go map keeps no order; RabbitMQ keeps nested
// tables in the order the client sent).
func tableTerm(t amqpc.Table) erlhash.List {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(erlhash.List, 0, len(keys))
	for _, k := range keys {
		typ, v := fieldTerm(t[k])
		out = append(out, erlhash.Tuple{erlhash.Binary(k), typ, v})
	}
	return out
}

// fieldTerm is a field value's RabbitMQ type atom and Erlang value.
func fieldTerm(v any) (erlhash.Atom, any) {
	switch x := v.(type) {
	case string:
		return "longstr", erlhash.Binary(x)
	case []byte:
		return "binary", erlhash.Binary(x)
	case bool:
		if x {
			return "bool", erlhash.Atom("true")
		}
		return "bool", erlhash.Atom("false")
	case int8:
		return "byte", int64(x)
	case uint8:
		return "unsignedbyte", int64(x)
	case int16:
		return "short", int64(x)
	case uint16:
		return "unsignedshort", int64(x)
	case int32:
		return "signedint", int64(x)
	case uint32:
		return "unsignedint", int64(x)
	case int64:
		return "long", x
	case int:
		return "long", int64(x)
	case float32:
		return "float", float64(x)
	case float64:
		return "double", x
	case amqpc.Decimal:
		return "decimal", erlhash.Tuple{int64(x.Scale), int64(x.Value)}
	case time.Time:
		return "timestamp", x.Unix()
	case amqpc.Table:
		return "table", tableTerm(x)
	case map[string]any:
		return "table", tableTerm(amqpc.Table(x))
	case []any:
		out := make(erlhash.List, 0, len(x))
		for _, e := range x {
			typ, ev := fieldTerm(e)
			out = append(out, erlhash.Tuple{typ, ev})
		}
		return "array", out
	case amqpc.RawValue:
		if d, ok := x.Decode(); ok {
			return fieldTerm(d)
		}
	}
	return "void", erlhash.Atom("undefined")
}
