package erlterm

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
)

// Float formats probed against RabbitMQ 3.10.8 through the x-match error
// text (~tp of a double).
func TestAppendFloat(t *testing.T) {
	cases := map[float64]string{
		5:                     "5.0",
		1.5:                   "1.5",
		-2.5:                  "-2.5",
		0:                     "0.0",
		math.Copysign(0, -1):  "-0.0",
		0.1:                   "0.1",
		0.001:                 "0.001",
		0.0001:                "0.0001",
		1e-7:                  "1.0e-7",
		100:                   "100.0",
		1000:                  "1.0e3",
		123456789:             "123456789.0",
		123.456:               "123.456",
		1e15:                  "1.0e15",
		1e16:                  "1.0e16",
		1e20:                  "1.0e20",
		1e300:                 "1.0e300",
		5e-324:                "5.0e-324",
		float64(float32(1.1)): "1.100000023841858",
	}
	for f, want := range cases {
		if got := string(AppendFloat(nil, f)); got != want {
			t.Errorf("AppendFloat(%v) = %q, want %q", f, got, want)
		}
	}
}

// Binaries as ~tp prints them with the default latin1 printable range
// (probed against RabbitMQ 3.10.8 through the x-match error text; see
// AppendBinary).
func TestAppendBinary(t *testing.T) {
	cases := map[string]string{
		"":                    "<<>>",
		"foo":                 `<<"foo">>`,
		"ALL":                 `<<"ALL">>`,
		"h\xc3\xa9llo":        "<<\"h\xc3\xa9llo\">>",
		"日本":                  "<<230,151,165,230,156,172>>",
		"a\x1bb":              `<<"a\eb">>`,
		"a\x01b":              "<<97,1,98>>",
		"q\"b\\s\n\r\t\v\b\f": `<<"q\"b\\s\n\r\t\v\b\f">>`,
	}
	for in, want := range cases {
		if got := string(AppendBinary(nil, []byte(in))); got != want {
			t.Errorf("AppendBinary(%q) = %q, want %q", in, got, want)
		}
	}
}

// AMQP field values as RabbitMQ decodes and prints them: the probes of
// broker.validateHeadersBinding's x-match error texts.
func TestAppendField(t *testing.T) {
	cases := []struct {
		v         any
		typ, want string
	}{
		{int32(5), "signedint", "5"},
		{1e20, "double", "1.0e20"},
		{[]byte("all"), "binary", `<<"all">>`},
		{nil, "void", "undefined"},
		{amqp.Decimal{Scale: 2, Value: 150}, "decimal", "{2,150}"},
		{amqp.Decimal{Scale: 0, Value: -3}, "decimal", "{0,4294967293}"},
		{[]any{"all", int32(1)}, "array", `[{longstr,<<"all">>},{signedint,1}]`},
		{amqp.Table{"k": "v"}, "table", `[{<<"k">>,longstr,<<"v">>}]`},
		{true, "bool", "true"},
		{time.Unix(1700000000, 0), "timestamp", "1700000000"},
		{float32(1.1), "float", "1.100000023841858"},
	}
	for _, c := range cases {
		if got := FieldType(c.v); got != c.typ {
			t.Errorf("FieldType(%#v) = %q, want %q", c.v, got, c.typ)
		}
		if got := string(AppendField(nil, c.v)); got != c.want {
			t.Errorf("AppendField(%#v) = %q, want %q", c.v, got, c.want)
		}
	}
	if got := Val("text"); got != "text" {
		t.Errorf("Val of a binary = %q, want its text", got)
	}
	if got := Val(int64(7)); got != "7" {
		t.Errorf("Val(7) = %q", got)
	}
}

func TestCharlist(t *testing.T) {
	for in, want := range map[string]string{"": "[]", "unsupported queue type 'x'": `"unsupported queue type 'x'"`, "a\x01": "[97,1]"} {
		if got := Charlist(in); got != want {
			t.Errorf("Charlist(%q) = %q, want %q", in, got, want)
		}
	}
}

// JSON values as rabbit_json decodes them, printed with ~tp (the policy
// and limit error texts).
func TestJSON(t *testing.T) {
	var obj any
	if err := json.Unmarshal([]byte(`{"b":[1,2.5,null,true],"a":"x"}`), &obj); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		v    any
		want string
	}{
		{obj, `#{<<"a">> => <<"x">>,<<"b">> => [1,2.5,null,true]}`},
		{json.Number("12"), "12"},
		{json.Number("1.5e3"), "1.5e3"},
		{3.0, "3"},
		{-0.5, "-0.5"},
		{"", "<<>>"},
		{int32(4), "4"},
	}
	for _, c := range cases {
		if got := JSON(c.v); got != c.want {
			t.Errorf("JSON(%#v) = %q, want %q", c.v, got, c.want)
		}
	}
}
