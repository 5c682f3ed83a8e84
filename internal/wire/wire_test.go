package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

var errMine = errors.New("mine")

func TestRoundTrip(t *testing.T) {
	var b []byte
	b = binary.AppendUvarint(b, 300)
	b = binary.AppendVarint(b, -5)
	b = AppendStr(b, "héllo")
	b = AppendBytes(b, []byte{1, 2, 3})
	b = AppendBool(b, true)
	b = AppendBool(b, false)
	b = append(b, 7)
	b = binary.AppendUvarint(b, 2) // a count of 2 with 2 bytes after it
	b = append(b, 9, 9)
	r := NewReader(b, errMine)
	if v := r.Uvarint(); v != 300 {
		t.Fatalf("Uvarint = %d", v)
	}
	if v := r.Varint(); v != -5 {
		t.Fatalf("Varint = %d", v)
	}
	if v := r.Str(); v != "héllo" {
		t.Fatalf("Str = %q", v)
	}
	p := r.Bytes()
	if !bytes.Equal(p, []byte{1, 2, 3}) || cap(p) != 3 {
		t.Fatalf("Bytes = %v cap %d, want [1 2 3] cap 3", p, cap(p))
	}
	if !r.Bool() || r.Bool() {
		t.Fatal("Bool: want true then false")
	}
	if v := r.Byte(); v != 7 {
		t.Fatalf("Byte = %d", v)
	}
	if n := r.Count(); n != 2 {
		t.Fatalf("Count = %d", n)
	}
	if r.Done() == nil {
		t.Fatal("Done with two bytes left: want an error")
	}
	if !errors.Is(r.Err(), errMine) {
		t.Fatalf("Err = %v, want the reader's own", r.Err())
	}
}

// TestSticky: after the first failure every read is zero and the first
// error stays.
func TestSticky(t *testing.T) {
	r := NewReader([]byte{0x80}, nil) // a varint cut short
	if v := r.Uvarint(); v != 0 || !errors.Is(r.Err(), ErrMalformed) {
		t.Fatalf("Uvarint = %d, %v", v, r.Err())
	}
	r2 := NewReader(binary.AppendUvarint(nil, 5), errMine)
	r2.FailWith(errors.New("first"))
	r2.Fail()
	if r2.Err().Error() != "first" || r2.Uvarint() != 0 || r2.Rest() != nil {
		t.Fatalf("after FailWith: err %v", r2.Err())
	}
}

// TestBounds: a length or count beyond the bytes left fails instead of
// allocating or slicing past the end.
func TestBounds(t *testing.T) {
	for name, read := range map[string]func(*Reader){
		"Bytes":       func(r *Reader) { r.Bytes() },
		"Str":         func(r *Reader) { _ = r.Str() },
		"Count":       func(r *Reader) { r.Count() },
		"CountAtMost": func(r *Reader) { r.CountAtMost(1) },
	} {
		b := binary.AppendUvarint(nil, 2) // says 2; one byte follows
		b = append(b, 1)
		if name == "CountAtMost" {
			b = append(b, 1) // two bytes follow: within the bytes, beyond the limit
		}
		r := NewReader(b, nil)
		read(&r)
		if r.Err() == nil {
			t.Errorf("%s: read past its bound without an error", name)
		}
	}
	r := NewReader(binary.AppendUvarint(nil, 1<<32), nil)
	if r.Uint32(); r.Err() == nil {
		t.Error("Uint32 of 1<<32: no error")
	}
	r = NewReader(nil, nil)
	if r.Byte(); r.Err() == nil {
		t.Error("Byte of nothing: no error")
	}
}

// FuzzReader: no input makes a Reader panic or read past its bytes.
func FuzzReader(f *testing.F) {
	f.Add([]byte{1, 2, 3})
	f.Add(AppendStr(binary.AppendUvarint(nil, 1), "x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewReader(b, nil)
		for i := 0; r.Err() == nil && r.Len() > 0; i++ {
			switch i % 6 {
			case 0:
				r.Uvarint()
			case 1:
				r.Varint()
			case 2:
				r.Bytes()
			case 3:
				r.Count()
			case 4:
				r.Uint32()
			case 5:
				r.Byte()
			}
			if r.Len() > len(b) {
				t.Fatal("grew")
			}
		}
	})
}
