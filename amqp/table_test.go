package amqp

import (
	"bytes"
	"math"
	"reflect"
	"testing"
	"time"
)

// Hand-computed wire bytes for each field type, as RabbitMQ (and
// amqp091-go) put them on the wire: key "k", type octet, value.
var valueFixtures = []struct {
	name string
	v    any
	wire []byte // type octet + value
}{
	{"t true", true, []byte{'t', 1}},
	{"t false", false, []byte{'t', 0}},
	{"b", int8(-2), []byte{'b', 0xfe}},
	{"B", uint8(254), []byte{'B', 0xfe}},
	{"s", int16(-2), []byte{'s', 0xff, 0xfe}},
	{"u", uint16(65534), []byte{'u', 0xff, 0xfe}},
	{"I", int32(-2), []byte{'I', 0xff, 0xff, 0xff, 0xfe}},
	{"i", uint32(0xfffffffe), []byte{'i', 0xff, 0xff, 0xff, 0xfe}},
	{"l", int64(-2), []byte{'l', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe}},
	{"f", float32(1.0), []byte{'f', 0x3f, 0x80, 0, 0}},
	{"d", float64(-2.0), []byte{'d', 0xc0, 0, 0, 0, 0, 0, 0, 0}},
	{"D", Decimal{Scale: 3, Value: -1}, []byte{'D', 3, 0xff, 0xff, 0xff, 0xff}},
	{"S", "ab", []byte{'S', 0, 0, 0, 2, 'a', 'b'}},
	{"S empty", "", []byte{'S', 0, 0, 0, 0}},
	{"A", []any{uint8(1), "x"}, []byte{'A', 0, 0, 0, 8, 'B', 1, 'S', 0, 0, 0, 1, 'x'}},
	{"A empty", []any{}, []byte{'A', 0, 0, 0, 0}},
	{"T", time.Unix(1700000000, 0).UTC(), []byte{'T', 0, 0, 0, 0, 0x65, 0x53, 0xf1, 0x00}},
	{"F", Table{"a": int32(1)}, []byte{'F', 0, 0, 0, 7, 1, 'a', 'I', 0, 0, 0, 1}},
	{"F empty", Table{}, []byte{'F', 0, 0, 0, 0}},
	{"V", nil, []byte{'V'}},
	{"x", []byte{1, 2}, []byte{'x', 0, 0, 0, 2, 1, 2}},
	{"x empty", []byte{}, []byte{'x', 0, 0, 0, 0}},
}

func wrapTable(entries ...[]byte) []byte {
	var body []byte
	for _, e := range entries {
		body = append(body, e...)
	}
	return append([]byte{0, 0, 0, byte(len(body))}, body...)
}

func TestTableFixtures(t *testing.T) {
	seeds := map[string][]byte{}
	for _, c := range valueFixtures {
		wire := wrapTable([]byte{1, 'k'}, c.wire)
		if got := AppendTable(nil, Table{"k": c.v}); !bytes.Equal(got, wire) {
			t.Errorf("%s: encoded % x, want % x", c.name, got, wire)
		}
		tab, n, err := DecodeTable(append(wire, 0xAA))
		if err != nil || n != len(wire) {
			t.Fatalf("%s: decode: %v (n=%d)", c.name, err, n)
		}
		if !reflect.DeepEqual(tab, Table{"k": c.v}) {
			t.Errorf("%s: decoded %#v", c.name, tab)
		}
		seeds[c.name] = wire
	}
	all := Table{}
	for _, c := range valueFixtures {
		all[c.name] = c.v
	}
	seeds["sample"] = AppendTable(nil, sampleTable())
	seeds["all"] = AppendTable(nil, all)
	for k, v := range seeds {
		delete(seeds, k)
		seeds[sanitize(k)] = v
	}
	writeSeeds(t, "FuzzTable", seeds)
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

func TestTableEncodingConversions(t *testing.T) {
	type unsupported struct{}
	got := AppendTable(nil, Table{
		"int": int(-2),
		"map": map[string]any{"a": int32(1)},
		"u":   unsupported{},
		"u64": uint64(1),
	})
	want := wrapTable(
		[]byte{3, 'i', 'n', 't', 'l', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe},
		[]byte{3, 'm', 'a', 'p', 'F', 0, 0, 0, 7, 1, 'a', 'I', 0, 0, 0, 1},
		[]byte{1, 'u', 'V'},
		[]byte{3, 'u', '6', '4', 'V'},
	)
	if !bytes.Equal(got, want) {
		t.Fatalf("got % x\nwant % x", got, want)
	}
}

func TestTableSortedKeys(t *testing.T) {
	tab := Table{}
	for _, k := range []string{"z", "a", "m", "b", "y", "c", "x", "d", "w", "e", "v", "f", "u", "g", "t", "h", "s", "i"} {
		tab[k] = nil
	}
	first := AppendTable(nil, tab)
	for i := 0; i < 20; i++ {
		if !bytes.Equal(AppendTable(nil, tab), first) {
			t.Fatal("encoding is not deterministic")
		}
	}
	if first[5] != 'a' || first[8] != 'b' {
		t.Fatalf("keys not sorted: % x", first)
	}
}

func TestTableRoundTrip(t *testing.T) {
	in := sampleTable()
	b := AppendTable(nil, in)
	out, n, err := DecodeTable(b)
	if err != nil || n != len(b) || !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip: %v n=%d\n%#v\n%#v", err, n, out, in)
	}
	a := []any{int64(1), Table{"x": []any{}}, nil}
	ab := AppendArray(nil, a)
	ao, n, err := DecodeArray(ab)
	if err != nil || n != len(ab) || !reflect.DeepEqual(a, ao) {
		t.Fatalf("array: %v %#v", err, ao)
	}
	// NaN survives at the bit level.
	nan := AppendTable(nil, Table{"n": math.NaN()})
	tn, _, _ := DecodeTable(nan)
	if !bytes.Equal(AppendTable(nil, tn), nan) {
		t.Fatal("NaN did not round trip")
	}
}

func TestTableErrors(t *testing.T) {
	for name, b := range map[string][]byte{
		"short length":      {0, 0, 0},
		"length past end":   {0, 0, 0, 5, 1, 'k', 'V'},
		"key past end":      {0, 0, 0, 2, 5, 'k'},
		"unknown type":      wrapTable([]byte{1, 'k', 'Z', 1}),
		"missing type":      wrapTable([]byte{1, 'k'}),
		"truncated value":   wrapTable([]byte{1, 'k', 'I', 0, 0}),
		"string past end":   wrapTable([]byte{1, 'k', 'S', 0, 0, 0, 9, 'a'}),
		"bytes past end":    wrapTable([]byte{1, 'k', 'x', 0xff, 0xff, 0xff, 0xff}),
		"bad nested":        wrapTable([]byte{1, 'k', 'F', 0, 0, 0, 1, 9}),
		"bad array":         wrapTable([]byte{1, 'k', 'A', 0, 0, 0, 1, 'Z'}),
		"array past length": wrapTable([]byte{1, 'k', 'A', 0, 0, 0, 9, 'V'}),
	} {
		_, _, err := DecodeTable(b)
		e := wantCode(t, err, FrameError, true)
		if e.Text[:28] != "FRAME_ERROR - cannot decode " {
			t.Errorf("%s: text %q", name, e.Text)
		}
	}
}

func TestTableDepth(t *testing.T) {
	nest := func(depth int) []byte {
		// depth tables nested inside each other under key "k".
		b := []byte{0, 0, 0, 0}
		for i := 1; i < depth; i++ {
			body := append([]byte{1, 'k', 'F'}, b...)
			b = append([]byte{0, 0, 0, byte(len(body))}, body...)
			if len(body) > 255 {
				b[2], b[3] = byte(len(body)>>8), byte(len(body))
			}
		}
		return b
	}
	if _, _, err := DecodeTable(nest(MaxTableDepth)); err != nil {
		t.Fatalf("depth %d: %v", MaxTableDepth, err)
	}
	_, _, err := DecodeTable(nest(MaxTableDepth + 1))
	wantCode(t, err, FrameError, true)

	// Encoding a cyclic or too-deep structure terminates and decodes.
	cyc := Table{}
	cyc["self"] = cyc
	b := AppendTable(nil, cyc)
	if _, _, err := DecodeTable(b); err != nil {
		t.Fatalf("cyclic table encoding does not decode: %v", err)
	}
}
