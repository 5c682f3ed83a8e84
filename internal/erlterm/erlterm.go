// Package erlterm formats values as RabbitMQ prints the Erlang terms they
// decode to, so that Warren's error texts read as RabbitMQ's: binaries as
// <<"text">>, floats as ~p prints them, AMQP field values as
// rabbit_binary_parser decodes them, and JSON values as the terms that
// rabbit_json decodes (objects as maps, null as the atom null).
//
// Every format was probed against RabbitMQ 3.10.8 through its error texts
// (x-match, queue arguments, policy definitions); see the tests.
package erlterm

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warrenmq/warren/amqp"
)

// Number returns v, an AMQP numeric field value, as an integer (isInt)
// or a float; a timestamp is its integer seconds. ok is false for any
// other value.
func Number(v any) (i int64, f float64, isInt, ok bool) {
	switch x := v.(type) {
	case int8:
		return int64(x), 0, true, true
	case uint8:
		return int64(x), 0, true, true
	case int16:
		return int64(x), 0, true, true
	case uint16:
		return int64(x), 0, true, true
	case int32:
		return int64(x), 0, true, true
	case uint32:
		return int64(x), 0, true, true
	case int64:
		return x, 0, true, true
	case int:
		return int64(x), 0, true, true
	case time.Time:
		return x.Unix(), 0, true, true
	case float32:
		return 0, float64(x), false, true
	case float64:
		return 0, x, false, true
	}
	return 0, 0, false, false
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

// FieldType returns RabbitMQ's name for the AMQP field type of v
// (rabbit_binary_parser), or "" for values of no field type.
func FieldType(v any) string {
	switch v.(type) {
	case bool:
		return "bool"
	case int8:
		return "byte"
	case uint8:
		return "unsignedbyte"
	case int16:
		return "short"
	case uint16:
		return "unsignedshort"
	case int32:
		return "signedint"
	case uint32:
		return "unsignedint"
	case int64, int:
		return "long"
	case float32:
		return "float"
	case float64:
		return "double"
	case amqp.Decimal:
		return "decimal"
	case string:
		return "longstr"
	case []any:
		return "array"
	case time.Time:
		return "timestamp"
	case amqp.Table, map[string]any:
		return "table"
	case nil:
		return "void"
	case []byte:
		return "binary"
	}
	return ""
}

// AppendField appends the Erlang term RabbitMQ decodes for a field value,
// as ~tp prints it on one line.
func AppendField(b []byte, v any) []byte {
	switch x := v.(type) {
	case bool:
		return strconv.AppendBool(b, x)
	case int8, uint8, int16, uint16, int32, uint32, int64, int, time.Time:
		i, _, _, _ := Number(x)
		return strconv.AppendInt(b, i, 10)
	case float32:
		return AppendFloat(b, float64(x))
	case float64:
		return AppendFloat(b, x)
	case amqp.Decimal:
		// RabbitMQ decodes the value as unsigned: {0,4294967293} for -3.
		b = append(b, '{')
		b = strconv.AppendUint(b, uint64(x.Scale), 10)
		b = append(b, ',')
		b = strconv.AppendUint(b, uint64(uint32(x.Value)), 10)
		return append(b, '}')
	case string:
		return AppendBinary(b, []byte(x))
	case []byte:
		return AppendBinary(b, x)
	case nil:
		return append(b, "undefined"...)
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '{')
			b = append(b, FieldType(e)...)
			b = append(b, ',')
			b = AppendField(b, e)
			b = append(b, '}')
		}
		return append(b, ']')
	case amqp.Table, map[string]any:
		t := asTable(x)
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '[')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '{')
			b = AppendBinary(b, []byte(k))
			b = append(b, ',')
			b = append(b, FieldType(t[k])...)
			b = append(b, ',')
			b = AppendField(b, t[k])
			b = append(b, '}')
		}
		return append(b, ']')
	}
	return append(b, "undefined"...)
}

// AppendBinary appends a binary as ~tp prints it with Erlang's default
// latin1 printable range: <<"text">> when every byte is a printable latin1
// character (32-126, 160-255, or one of \n \r \t \v \b \f \e), with the
// bytes copied as they are and only the escapes below; otherwise the byte
// values, <<97,1,98>>. Probed: "héllo" as UTF-8 prints as the raw bytes
// <<"h\xc3\xa9llo">>; "日本" prints as <<230,151,165,230,156,172>> because
// 0x97 is not printable latin1; "a\x1bb" prints as <<"a\eb">>.
func AppendBinary(b, bin []byte) []byte {
	printable := true
	for _, c := range bin {
		if !(c >= 32 && c <= 126 || c >= 160 || strings.IndexByte("\n\r\t\v\b\f\x1b", c) >= 0) {
			printable = false
			break
		}
	}
	b = append(b, "<<"...)
	if !printable {
		for i, c := range bin {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(c), 10)
		}
		return append(b, ">>"...)
	}
	if len(bin) == 0 {
		return append(b, ">>"...)
	}
	b = append(b, '"')
	for _, c := range bin {
		switch c {
		case '"':
			b = append(b, `\"`...)
		case '\\':
			b = append(b, `\\`...)
		case '\n':
			b = append(b, `\n`...)
		case '\r':
			b = append(b, `\r`...)
		case '\t':
			b = append(b, `\t`...)
		case '\v':
			b = append(b, `\v`...)
		case '\b':
			b = append(b, `\b`...)
		case '\f':
			b = append(b, `\f`...)
		case 0x1b:
			b = append(b, `\e`...)
		default:
			b = append(b, c)
		}
	}
	return append(b, `">>`...)
}

// AppendFloat appends f as Erlang's ~p prints a float
// (io_lib_format:fwrite_g): the shortest digits that read back as f, in
// plain notation unless the exponent form is shorter. Probed: 5.0, 1.5,
// 0.1, 0.001, 0.0001, 100.0, 123456789.0, 123.456, -2.5, 0.0, -0.0, 1.0e3,
// 1.0e15, 1.0e20, 1.0e-7, 5.0e-324, and float32 1.1 as 1.100000023841858.
func AppendFloat(b []byte, f float64) []byte {
	if math.Signbit(f) {
		b = append(b, '-')
		f = -f
	}
	if f == 0 {
		return append(b, "0.0"...)
	}
	if math.IsInf(f, 0) || math.IsNaN(f) {
		// Not representable in Erlang; RabbitMQ rejects such frames.
		return strconv.AppendFloat(b, f, 'g', -1, 64)
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, exp, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	x, _ := strconv.Atoi(exp)
	place := x + 1 // digits before the decimal point
	n := len(digits)
	switch {
	case place == 0:
		return append(append(b, "0."...), digits...)
	case place > 0 && place < n:
		b = append(b, digits[:place]...)
		b = append(b, '.')
		return append(b, digits[place:]...)
	}
	expStr := strconv.Itoa(place - 1)
	expDot := 1
	if n == 1 {
		expDot = 2
	}
	expCost := len(expStr) + 1 + expDot
	if place < 0 {
		if 2-place <= expCost {
			b = append(b, "0."...)
			b = append(b, strings.Repeat("0", -place)...)
			return append(b, digits...)
		}
	} else if place-n+2 <= expCost {
		b = append(b, digits...)
		b = append(b, strings.Repeat("0", place-n)...)
		return append(b, ".0"...)
	}
	b = append(b, digits[0])
	b = append(b, '.')
	if n == 1 {
		b = append(b, '0')
	} else {
		b = append(b, digits[1:]...)
	}
	b = append(b, 'e')
	return append(b, expStr...)
}

// Charlist formats s as ~p prints a charlist: "text" when printable,
// else a list of integers.
func Charlist(s string) string {
	b := AppendBinary(nil, []byte(s)) // <<"text">> or <<1,2>>
	inner := string(b[2 : len(b)-2])
	if strings.HasPrefix(inner, `"`) {
		return inner
	}
	if inner == "" {
		return `[]`
	}
	return "[" + inner + "]"
}

// Val formats an AMQP field value as rabbit_misc:val/1 does: a binary as
// its text (~ts), anything else as ~tp prints its Erlang term.
func Val(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	return string(AppendField(nil, v))
}

// JSON formats a JSON value (as encoding/json decodes it, with or without
// UseNumber) as RabbitMQ prints the decoded term with ~tp: strings as
// binaries, integral numbers as integers, objects as maps, null as the
// atom null.
func JSON(v any) string { return string(AppendJSON(nil, v)) }

// AppendJSON appends JSON(v).
func AppendJSON(b []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...)
	case string:
		return AppendBinary(b, []byte(x))
	case bool:
		return strconv.AppendBool(b, x)
	case json.Number:
		if n, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return strconv.AppendInt(b, n, 10)
		}
		if f, err := x.Float64(); err == nil {
			return AppendFloat(b, f)
		}
		return append(b, x...)
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<63 {
			return strconv.AppendInt(b, int64(x), 10)
		}
		return AppendFloat(b, x)
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendJSON(b, e)
		}
		return append(b, ']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, "#{"...)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendBinary(b, []byte(k))
			b = append(b, " => "...)
			b = AppendJSON(b, x[k])
		}
		return append(b, '}')
	}
	if _, isTime := v.(time.Time); !isTime {
		if n, _, isInt, _ := Number(v); isInt {
			return strconv.AppendInt(b, n, 10)
		}
	}
	return fmt.Appendf(b, "%v", v)
}
