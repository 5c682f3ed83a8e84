package streamproto

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	var e Enc
	e.Start(KeyCreate, 1)
	e.U32(7)
	e.Str("s")
	e.Map([]string{"a", "b"}, map[string]string{"a": "1", "b": "2"})
	e.Strs([]string{"x", "y"})
	e.Bytes([]byte("raw"))
	e.U64(1 << 40)
	e.Finish()
	r := NewReader(bytes.NewReader(e.B), 1024)
	f, err := r.Next()
	if err != nil || f.Key != KeyCreate || f.Version != 1 {
		t.Fatalf("%+v %v", f, err)
	}
	d := NewDec(f.Body)
	if d.U32() != 7 || d.S() != "s" {
		t.Fatal("fields")
	}
	m := d.Map()
	ss := d.Strs()
	b := d.Bytes()
	if m["a"] != "1" || m["b"] != "2" || len(ss) != 2 || ss[1] != "y" || string(b) != "raw" || d.U64() != 1<<40 || d.Err() != nil || d.Len() != 0 {
		t.Fatalf("%v %v %q %v", m, ss, b, d.Err())
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the frame: %v", err)
	}
}

func TestBounds(t *testing.T) {
	// a frame above the limit is refused before its body is read
	var e Enc
	e.Start(KeyOpen, 1)
	e.B = append(e.B, make([]byte, 100)...)
	e.Finish()
	if _, err := NewReader(bytes.NewReader(e.B), 50).Next(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("%v", err)
	}
	// a count the bytes cannot hold
	d := NewDec([]byte{0, 0x10, 0, 0, 0, 1})
	if n := d.Count(2); n != 0 || d.Err() == nil {
		t.Fatalf("count %d err %v", n, d.Err())
	}
	// reads after an error return zeros
	if d.U64() != 0 || d.S() != "" || d.Bytes() != nil {
		t.Fatal("reads after an error")
	}
	// the null string
	d = NewDec([]byte{0xff, 0xff})
	if s, null := d.Str(); s != "" || !null || d.Err() != nil {
		t.Fatalf("null string: %q %v %v", s, null, d.Err())
	}
}

// FuzzFrames: no input makes the reader or the decoder panic, and no
// count makes it allocate beyond what the frame holds.
func FuzzFrames(f *testing.F) {
	var e Enc
	e.Start(KeyMetadata, 1)
	e.U32(1)
	e.Strs([]string{"a", "b"})
	e.Finish()
	f.Add(e.B)
	f.Add([]byte{0, 0, 0, 8, 0, 15, 0, 1, 0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := NewReader(bytes.NewReader(b), 4096)
		for {
			fr, err := r.Next()
			if err != nil {
				return
			}
			d := NewDec(fr.Body)
			d.U32()
			_ = d.Map()
			_ = d.Strs()
			_ = d.Bytes()
			d.Str()
			n := d.Count(1)
			if n > len(fr.Body) {
				t.Fatalf("count %d from a body of %d", n, len(fr.Body))
			}
		}
	})
}
