package amqp

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

func rawFrame(typ uint8, ch uint16, payload []byte, end byte) []byte {
	b := []byte{typ, byte(ch >> 8), byte(ch), byte(len(payload) >> 24), byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload))}
	b = append(b, payload...)
	return append(b, end)
}

func TestFrameReaderStream(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 2000) // 20000 bytes
	var in []byte
	in = AppendMethodFrame(in, 1, &BasicPublish{Exchange: "x", RoutingKey: "k"})
	in = AppendHeaderFrame(in, 1, ClassBasic, uint64(len(body)), &Properties{ContentType: "text/plain"})
	in = AppendBodyFrames(in, 1, body, 4096)
	in = AppendHeartbeat(in)
	in = AppendBodyFrames(in, 2, body, 0) // one big frame: grows the buffer

	for name, r := range map[string]io.Reader{
		"whole":    bytes.NewReader(in),
		"onebyte":  iotest.OneByteReader(bytes.NewReader(in)),
		"halfread": iotest.HalfReader(bytes.NewReader(in)),
	} {
		fr := NewFrameReader(r, 4096)
		fr.SetMaxFrameSize(0)
		var types []uint8
		var got []byte
		var big []byte
		for {
			f, err := fr.ReadFrame()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			types = append(types, f.Type)
			switch {
			case f.Type == FrameMethod:
				m, err := DecodeMethod(f.Payload)
				if err != nil || m.(*BasicPublish).RoutingKey != "k" {
					t.Fatalf("%s: %v %v", name, m, err)
				}
			case f.Type == FrameBody && f.Channel == 1:
				if len(f.Payload) > 4088 {
					t.Fatalf("%s: body frame of %d bytes", name, len(f.Payload))
				}
				got = append(got, f.Payload...)
			case f.Type == FrameBody && f.Channel == 2:
				big = append(big, f.Payload...)
			case f.Type == FrameHeartbeat:
				if f.Channel != 0 || len(f.Payload) != 0 {
					t.Fatalf("heartbeat %+v", f)
				}
			}
		}
		// method, header, 5 body frames (20000 = 4*4088 + 3648), heartbeat, big body.
		want := []uint8{1, 2, 3, 3, 3, 3, 3, 8, 3}
		if !bytes.Equal(types, want) {
			t.Fatalf("%s: frame types %v, want %v", name, types, want)
		}
		if !bytes.Equal(got, body) || !bytes.Equal(big, body) {
			t.Fatalf("%s: body mismatch", name)
		}
	}
}

func TestBodySplitting(t *testing.T) {
	for _, c := range []struct {
		size     int
		frameMax uint32
		frames   []int
	}{
		{0, 4096, nil},
		{1, 4096, []int{1}},
		{4088, 4096, []int{4088}},
		{4089, 4096, []int{4088, 1}},
		{10000, 4096, []int{4088, 4088, 1824}},
		{10000, 0, []int{10000}},
		{3, 9, []int{1, 1, 1}},
		{2, 5, []int{1, 1}}, // degenerate frame-max: still progresses
	} {
		body := make([]byte, c.size)
		b := AppendBodyFrames(nil, 3, body, c.frameMax)
		fr := NewFrameReader(bytes.NewReader(b), 0)
		fr.SetMaxFrameSize(0)
		var sizes []int
		for {
			f, err := fr.ReadFrame()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.Type != FrameBody || f.Channel != 3 {
				t.Fatalf("%+v", f)
			}
			sizes = append(sizes, len(f.Payload))
		}
		if len(sizes) != len(c.frames) {
			t.Fatalf("size %d frameMax %d: frames %v, want %v", c.size, c.frameMax, sizes, c.frames)
		}
		for i := range sizes {
			if sizes[i] != c.frames[i] {
				t.Fatalf("size %d frameMax %d: frames %v, want %v", c.size, c.frameMax, sizes, c.frames)
			}
		}
	}
}

func TestFrameReaderErrors(t *testing.T) {
	long := []byte{0, 60, 0, 40, 0, 0, 15, 101, 120, 99, 104, 97, 110, 103, 101, 45, 110, 97, 109, 101}
	for _, c := range []struct {
		name  string
		in    []byte
		max   uint32
		text  string
		valid int // frames read successfully before the error
	}{
		{"too large", rawFrame(1, 1, make([]byte, 5010), 0xCE), 4096,
			"FRAME_ERROR - type 1, all octets = <<>>: {frame_too_large,5010,4088}", 0},
		{"too large body", rawFrame(3, 1, make([]byte, 4097), 0xCE), 4096,
			"FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,4097,4088}", 0},
		{"bad end", rawFrame(1, 1, []byte{0, 20, 0, 20, 1}, 0xAB), 4096,
			"FRAME_ERROR - type 1, all octets = <<0,20,0,20,1>>: {invalid_frame_end_marker,171}", 0},
		{"bad end long", rawFrame(1, 1, long, 0), 4096,
			"FRAME_ERROR - type 1, first 16 octets = <<0,60,0,40,0,0,15,101,120,99,104,97,110,103,101,45>>: {invalid_frame_end_marker,0}", 0},
		{"unknown type", rawFrame(5, 1, []byte{1, 2, 3}, 0xCE), 4096,
			"FRAME_ERROR - type 5, all octets = <<1,2,3>>: unknown_frame", 0},
		{"unknown type printable", rawFrame(9, 1, []byte("hello"), 0xCE), 4096,
			`FRAME_ERROR - type 9, all octets = <<"hello">>: unknown_frame`, 0},
		{"unknown type long", rawFrame(4, 1, []byte("abcdefghijklmnopqrstuvwxyz"), 0xCE), 4096,
			`FRAME_ERROR - type 4, first 16 octets = <<"abcdefghijklmnop">>: unknown_frame`, 0},
		{"unknown type 0", rawFrame(0, 1, []byte{1}, 0xCE), 4096,
			"FRAME_ERROR - type 0, all octets = <<1>>: unknown_frame", 0},
		{"after good", append(AppendHeartbeat(nil), rawFrame(7, 0, nil, 0xCE)...), 4096,
			"FRAME_ERROR - type 7, all octets = <<>>: unknown_frame", 1},
	} {
		fr := NewFrameReader(bytes.NewReader(c.in), 4096)
		fr.SetMaxFrameSize(c.max)
		for i := 0; i < c.valid; i++ {
			if _, err := fr.ReadFrame(); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		_, err := fr.ReadFrame()
		e := wantCode(t, err, FrameError, true)
		if e.Text != c.text {
			t.Errorf("%s:\n got %q\nwant %q", c.name, e.Text, c.text)
		}
	}
	// Payload == frame-max is accepted (RabbitMQ's 8 bytes of slack).
	fr := NewFrameReader(bytes.NewReader(rawFrame(3, 1, make([]byte, 4096), 0xCE)), 4096)
	fr.SetMaxFrameSize(4096)
	if _, err := fr.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	// Unlimited is capped.
	fr = NewFrameReader(bytes.NewReader([]byte{3, 0, 1, 0x10, 0, 0, 0}), 4096)
	fr.SetMaxFrameSize(0)
	_, err := fr.ReadFrame()
	if e := wantCode(t, err, FrameError, true); e.Text != "FRAME_ERROR - type 3, all octets = <<>>: {frame_too_large,268435456,134217720}" {
		t.Fatal(e.Text)
	}
}

func TestFrameReaderDefaultLimit(t *testing.T) {
	fr := NewFrameReader(bytes.NewReader(rawFrame(3, 1, make([]byte, 4097), 0xCE)), 0)
	_, err := fr.ReadFrame()
	wantCode(t, err, FrameError, true)
}

func TestFrameReaderIOErrors(t *testing.T) {
	fr := NewFrameReader(bytes.NewReader(nil), 0)
	if _, err := fr.ReadFrame(); err != io.EOF {
		t.Fatalf("empty: %v", err)
	}
	f := AppendHeartbeat(nil)
	for i := 1; i < len(f); i++ {
		fr := NewFrameReader(bytes.NewReader(f[:i]), 0)
		if _, err := fr.ReadFrame(); err != io.ErrUnexpectedEOF {
			t.Fatalf("cut at %d: %v", i, err)
		}
	}
	boom := errors.New("boom")
	fr = NewFrameReader(iotest.ErrReader(boom), 0)
	if _, err := fr.ReadFrame(); err != boom {
		t.Fatalf("got %v", err)
	}
	fr = NewFrameReader(iotest.TimeoutReader(bytes.NewReader(append(f, f...))), 0)
	if _, err := fr.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	if fr.Buffered() != 8 {
		t.Fatalf("Buffered = %d", fr.Buffered())
	}
	if _, err := fr.ReadFrame(); err != nil {
		t.Fatal(err)
	}
	if _, err := fr.ReadFrame(); err != iotest.ErrTimeout {
		t.Fatalf("got %v", err)
	}
}

func TestProtocolHeader(t *testing.T) {
	in := append([]byte("AMQP\x00\x00\x09\x01"), AppendHeartbeat(nil)...)
	fr := NewFrameReader(bytes.NewReader(in), 0)
	if _, err := fr.ReadProtocolHeader(); err != nil {
		t.Fatal(err)
	}
	if f, err := fr.ReadFrame(); err != nil || f.Type != FrameHeartbeat {
		t.Fatal(f, err)
	}
	fr = NewFrameReader(bytes.NewReader([]byte("AMQP\x01\x01\x00\x0a")), 0)
	if h, err := fr.ReadProtocolHeader(); err != ErrProtocolHeader || string(h[:]) != "AMQP\x01\x01\x00\x0a" {
		t.Fatal(h, err)
	}
}
