package amqp10

import (
	"bytes"
	"reflect"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 300)
	vals := []any{nil, true, false, uint8(7), int8(-3), uint16(9), int16(-9), uint32(0), uint32(200), uint32(1 << 20),
		int32(-5), int32(1 << 20), uint64(0), uint64(9), uint64(1 << 40), int64(-100), int64(1 << 40), float32(1.5), 2.25,
		Timestamp(1700000000123), "s", string(big), Symbol("sym"), []byte("b"), big, UUID{1, 2, 3},
		[]any{}, []any{"a", int64(1), []any{true}},
		Map{{Key: "k", Value: "v"}, {Key: Symbol("n"), Value: Map{{Key: "deep", Value: []any{nil}}}}},
		Described{Descriptor: uint64(0x73), Value: []any{"mid"}},
	}
	for _, v := range vals {
		b := Append(nil, v)
		got, rest, err := Decode(b)
		if err != nil || len(rest) != 0 {
			t.Fatalf("%#v: %v, %d left", v, err, len(rest))
		}
		if !reflect.DeepEqual(got, v) {
			t.Fatalf("%#v decoded as %#v", v, got)
		}
	}
}

// An array (one constructor for every element) decodes as a list.
func TestArray(t *testing.T) {
	b := []byte{0xe0, 5, 3, 0x54, 1, 2, 3, 0xff, 0xfe}
	v, rest, err := Decode(b[:7])
	if err != nil || len(rest) != 0 || !reflect.DeepEqual(v, []any{int32(1), int32(2), int32(3)}) {
		t.Fatalf("%#v %v %d", v, err, len(rest))
	}
}

func TestMalformed(t *testing.T) {
	for _, b := range [][]byte{{}, {0xa1, 5, 'a'}, {0xd0, 0, 0, 0, 9, 0, 0, 0, 1}, {0xc1, 2, 1, 0x40}, {0x71, 1}, {0xff}} {
		if _, _, err := Decode(b); err == nil {
			t.Errorf("% x decoded", b)
		}
	}
	// nesting is bounded
	deep := bytes.Repeat([]byte{0xc0, 0x02, 0x01}, 200)
	if _, _, err := Decode(deep); err == nil {
		t.Error("200 nested lists decoded")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Append(nil, Map{{Key: "k", Value: []any{int64(1), "x"}}}))
	f.Add([]byte{0xe0, 5, 3, 0x54, 1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, _, err := Decode(b)
		if err != nil {
			return
		}
		// what decodes encodes and decodes to the same value
		enc := Append(nil, v)
		v2, _, err := Decode(enc)
		if err != nil || !bytes.Equal(Append(nil, v2), enc) {
			t.Fatalf("%#v re-decoded as %#v (%v)", v, v2, err)
		}
	})
}
