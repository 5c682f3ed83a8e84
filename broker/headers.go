package broker

import (
	"math"
	"strings"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/erlterm"
)

// Headers exchange matching, following RabbitMQ's
// rabbit_exchange_type_headers. Behaviours below marked "probed" were
// checked against RabbitMQ 3.10.8 by binding a queue to a headers exchange,
// publishing under publisher confirms and calling basic.get.
//
// x-match selects the kind: "all" (also when x-match is absent, and, for
// bindings that predate validation, for any unrecognised value), "any",
// "all-with-x" and "any-with-x". The x-match argument itself is never
// compared. Other arguments whose key starts with "x-" are ignored by
// "all"/"any" and compared by the -with-x kinds.
//
// "all" matches when every compared argument matches, so with no compared
// arguments it matches every message, with or without headers (probed:
// {} and {x-match: all} and {x-match: all, x-foo: 1} route a message with
// no headers; {x-match: all-with-x} does too). "any" matches when at least
// one compared argument matches, so with none it matches nothing (probed:
// {x-match: any} and {x-match: any, x-foo: 1} drop a message with headers
// {a: 1} or {x-foo: 1}).
//
// An argument with a void value (nil) matches when the header is present,
// whatever its value (probed: void matches "x" and void, not an absent
// header). Otherwise the values are compared with Erlang's == on the values
// RabbitMQ decodes, which drops the AMQP type at the top level:
//
//   - all integer types, floats and timestamps are numbers, compared exactly
//     (probed: int32 5 = int64 5 = int8 5 = uint16 5 = float64 5.0 =
//     float32 5.0; timestamp 5 = int64 5 = float64 5.0; uint32 4e9 = int64
//     4e9; but int64 2^53+1 != float64 2^53, and float32 1.1 != float64 1.1
//     because float32 1.1 widens to 1.100000023841858);
//   - longstr and byte array are both binaries (probed: "abc" = []byte
//     "abc"), but never equal a number or bool ("5" != 5, true != 1,
//     true != "true");
//   - a decimal is the pair {Scale, Value} (probed: {1,50} = {1,50},
//     {1,50} != {2,500}, {0,5} != 5);
//   - arrays and tables are both Erlang lists, so an empty array equals an
//     empty table (probed); their elements keep their AMQP types, so inside
//     them int32 1 != int64 1, float32 1 != float64 1 and longstr "a" !=
//     binary "a" (probed);
//   - a void header matches only a void argument's presence test.
//
// One deliberate difference: RabbitMQ compares nested tables as ordered
// lists of fields in wire order (probed: two 4-field tables with equal
// contents but different field order do not match), while amqp.Table is a
// map with no order, so Warren compares nested tables as unordered sets of
// typed fields.

type headersMatchKind uint8

const (
	headersAll headersMatchKind = iota
	headersAny
	headersAllWithX
	headersAnyWithX
)

// headersXMatch returns the match kind of a binding: RabbitMQ's
// parse_x_match, where anything but the four known longstr values is "all".
func headersXMatch(args amqp.Table) headersMatchKind {
	s, _ := args["x-match"].(string)
	switch s {
	case "any":
		return headersAny
	case "all-with-x":
		return headersAllWithX
	case "any-with-x":
		return headersAnyWithX
	}
	return headersAll
}

// headersMatch reports whether a message's headers match a binding's arguments.
func headersMatch(bindingArgs, headers amqp.Table) bool {
	kind := headersXMatch(bindingArgs)
	withX := kind == headersAllWithX || kind == headersAnyWithX
	any := kind == headersAny || kind == headersAnyWithX
	for k, want := range bindingArgs {
		if k == "x-match" || !withX && strings.HasPrefix(k, "x-") {
			continue
		}
		got, present := headers[k]
		ok := present && (want == nil || headerValueEqual(want, got))
		if any && ok {
			return true
		}
		if !any && !ok {
			return false
		}
	}
	return !any
}

// headerValueEqual compares two top-level field values the way Erlang's ==
// compares the untagged values RabbitMQ decodes.
func headerValueEqual(a, b any) bool {
	ca, cb := erlClass(a), erlClass(b)
	if ca != cb {
		return false
	}
	switch ca {
	case erlNumber:
		return erlNumberEqual(a, b)
	case erlBinary:
		return erlBinaryEqual(a, b)
	case erlList:
		return erlListEqual(a, b)
	case erlBool:
		return a.(bool) == b.(bool)
	case erlDecimal:
		return a.(amqp.Decimal) == b.(amqp.Decimal)
	case erlUndefined:
		return true
	}
	return false
}

// typedValueEqual compares two field values nested in an array or table,
// where RabbitMQ keeps the type tag: {signedint, 1} != {long, 1}.
func typedValueEqual(a, b any) bool {
	ta, tb := erlterm.FieldType(a), erlterm.FieldType(b)
	return ta != "" && ta == tb && headerValueEqual(a, b)
}

type erlTermClass uint8

const (
	erlOther erlTermClass = iota
	erlNumber
	erlBinary
	erlList
	erlBool
	erlDecimal
	erlUndefined
)

func erlClass(v any) erlTermClass {
	switch v.(type) {
	case int8, uint8, int16, uint16, int32, uint32, int64, int, float32, float64, time.Time:
		return erlNumber
	case string, []byte:
		return erlBinary
	case []any, amqp.Table, map[string]any:
		return erlList
	case bool:
		return erlBool
	case amqp.Decimal:
		return erlDecimal
	case nil:
		return erlUndefined
	}
	return erlOther
}

// fieldTypeName is erlterm.FieldType.
func fieldTypeName(v any) string { return erlterm.FieldType(v) }

// erlNumberOf returns v as an integer (isInt) or a float.
func erlNumberOf(v any) (i int64, f float64, isInt bool) {
	i, f, isInt, _ = erlterm.Number(v)
	return i, f, isInt
}

// erlNumberEqual compares numbers exactly, as Erlang's == does: an integer
// equals a float only if the float is that exact integer.
func erlNumberEqual(a, b any) bool {
	ia, fa, aInt := erlNumberOf(a)
	ib, fb, bInt := erlNumberOf(b)
	switch {
	case aInt && bInt:
		return ia == ib
	case !aInt && !bInt:
		return fa == fb
	case aInt:
		return intEqualsFloat(ia, fb)
	default:
		return intEqualsFloat(ib, fa)
	}
}

func intEqualsFloat(i int64, f float64) bool {
	// -2^63 <= f < 2^63 so that the conversion is exact.
	if f != math.Trunc(f) || f < -(1<<63) || f >= 1<<63 {
		return false
	}
	return int64(f) == i
}

// erlBinaryEqual compares two binaries (string or []byte) without copying.
func erlBinaryEqual(a, b any) bool {
	switch x := a.(type) {
	case string:
		switch y := b.(type) {
		case string:
			return x == y
		case []byte:
			return x == string(y)
		}
	case []byte:
		switch y := b.(type) {
		case string:
			return string(x) == y
		case []byte:
			return string(x) == string(y)
		}
	}
	return false
}

func erlListEqual(a, b any) bool {
	la, lb := erlListLen(a), erlListLen(b)
	if la != lb {
		return false
	}
	if la == 0 {
		return true // [] == []: an empty array equals an empty table
	}
	switch x := a.(type) {
	case []any:
		y, ok := b.([]any)
		if !ok {
			return false // [{T,V}|_] never equals [{K,T,V}|_]
		}
		for i := range x {
			if !typedValueEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	default:
		ta, tb := asTable(a), asTable(b)
		if ta == nil || tb == nil {
			return false
		}
		for k, av := range ta {
			bv, ok := tb[k]
			if !ok || !typedValueEqual(av, bv) {
				return false
			}
		}
		return true
	}
}

func erlListLen(v any) int {
	switch x := v.(type) {
	case []any:
		return len(x)
	case amqp.Table:
		return len(x)
	case map[string]any:
		return len(x)
	}
	return 0
}

func asTable(v any) amqp.Table {
	switch x := v.(type) {
	case amqp.Table:
		return x
	case map[string]any:
		return x
	}
	return nil
}

// validateHeadersBinding returns the 406 PRECONDITION_FAILED error RabbitMQ gives for an invalid x-match value, or nil.
//
// The texts are RabbitMQ's validate_binding, formatted with ~tp. Probed
// against RabbitMQ 3.10.8 (queue.bind to a headers exchange):
//
//	x-match "foo"     PRECONDITION_FAILED - Invalid x-match field value <<"foo">>; expected all, any, all-with-x, or any-with-x
//	x-match ""        ... value <<>>; ...
//	x-match "ALL"     ... value <<"ALL">>; ... (case-sensitive)
//	x-match int32 5   PRECONDITION_FAILED - Invalid x-match field type signedint (value 5); expected longstr
//	x-match 1.0e20    ... type double (value 1.0e20); ...
//	x-match []byte    ... type binary (value <<"all">>); ...
//	x-match void      ... type void (value undefined); ...
//	x-match decimal   ... type decimal (value {2,150}); ...
//	x-match array     ... type array (value [{longstr,<<"all">>},{signedint,1}]); ...
//	x-match table     ... type table (value [{<<"k">>,longstr,<<"v">>}]); ...
//
// Two differences remain. RabbitMQ's ~tp breaks an array or table value
// that does not fit in 80 columns over several indented lines; Warren
// always prints it on one line. And table fields are printed sorted by key
// rather than in wire order, which amqp.Table does not keep. RabbitMQ also
// cuts any reply text to 255 bytes, ending it with "..."; that limit of the
// shortstr reply-text is left to the code that sends channel.close.
func validateHeadersBinding(args amqp.Table) *amqp.Error {
	v, ok := args["x-match"]
	if !ok {
		return nil // absent x-match means "all"
	}
	if s, isStr := v.(string); isStr {
		switch s {
		case "all", "any", "all-with-x", "any-with-x":
			return nil
		}
		return amqp.Errorf(amqp.PreconditionFailed,
			"Invalid x-match field value %s; expected all, any, all-with-x, or any-with-x",
			erlterm.AppendBinary(nil, []byte(s)))
	}
	typ := erlterm.FieldType(v)
	if typ == "" {
		typ = "unknown" // not a field value; cannot come off the wire
	}
	return amqp.Errorf(amqp.PreconditionFailed,
		"Invalid x-match field type %s (value %s); expected longstr",
		typ, erlterm.AppendField(nil, v))
}
