package amqp

import (
	"bytes"
	"io"
	"testing"
)

// The seed corpora live in testdata/fuzz/<FuzzName>; regenerate them with
// WARREN_WRITE_SEEDS=1 go test -run 'RoundTrip|Fixtures|EachFlag|FrameSeeds' .

func FuzzMethod(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMethod(b)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %T %v is not *Error", err, err)
			}
			return
		}
		enc := m.Append(nil)
		m2, err := DecodeMethod(enc)
		if err != nil {
			t.Fatalf("re-decoding %s: %v\n% x", m.Name(), err, enc)
		}
		if enc2 := m2.Append(nil); !bytes.Equal(enc, enc2) {
			t.Fatalf("%s: decode→encode→decode changed the value:\n% x\n% x", m.Name(), enc, enc2)
		}
	})
}

func FuzzTable(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		tab, n, err := DecodeTable(b)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %T is not *Error", err)
			}
			return
		}
		if n < 4 || n > len(b) {
			t.Fatalf("consumed %d of %d", n, len(b))
		}
		enc := AppendTable(nil, tab)
		tab2, n2, err := DecodeTable(enc)
		if err != nil || n2 != len(enc) {
			t.Fatalf("re-decoding: %v (%d of %d)", err, n2, len(enc))
		}
		if enc2 := AppendTable(nil, tab2); !bytes.Equal(enc, enc2) {
			t.Fatalf("decode→encode→decode changed the table:\n% x\n% x", enc, enc2)
		}
		// The same bytes as an array must not panic either.
		_, _, _ = DecodeArray(b)
	})
}

func FuzzProperties(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Properties
		if err := DecodeProperties(b, &p); err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %T is not *Error", err)
			}
			return
		}
		enc := AppendProperties(nil, &p)
		var p2 Properties
		if err := DecodeProperties(enc, &p2); err != nil {
			t.Fatalf("re-decoding: %v\n% x", err, enc)
		}
		if p2.Flags != p.Flags {
			t.Fatalf("flags %04x became %04x", p.Flags, p2.Flags)
		}
		if enc2 := AppendProperties(nil, &p2); !bytes.Equal(enc, enc2) {
			t.Fatalf("decode→encode→decode changed the properties:\n% x\n% x", enc, enc2)
		}
	})
}

// FuzzFrame reads a stream of frames with a small limit and decodes each
// payload according to its type.
func FuzzFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		fr := NewFrameReader(bytes.NewReader(b), 0)
		fr.SetMaxFrameSize(FrameMinSize)
		for {
			fm, err := fr.ReadFrame()
			if err != nil {
				if _, ok := err.(*Error); !ok && err != io.EOF && err != io.ErrUnexpectedEOF {
					t.Fatalf("error %T %v", err, err)
				}
				return
			}
			if len(fm.Payload) > FrameMinSize {
				t.Fatalf("payload of %d bytes", len(fm.Payload))
			}
			var enc []byte
			switch fm.Type {
			case FrameMethod:
				m, err := DecodeMethod(fm.Payload)
				if err != nil {
					continue
				}
				enc = AppendMethodFrame(nil, fm.Channel, m)
			case FrameHeader:
				cid, size, p, err := DecodeHeader(fm.Payload)
				if err != nil {
					continue
				}
				enc = AppendHeaderFrame(nil, fm.Channel, cid, size, &p)
			case FrameBody:
				enc = AppendBodyFrames(nil, fm.Channel, fm.Payload, 0)
				if len(fm.Payload) == 0 {
					continue
				}
			case FrameHeartbeat:
				if fm.Channel != 0 || len(fm.Payload) != 0 {
					continue
				}
				enc = AppendHeartbeat(nil)
			}
			// Re-read the re-encoded frame: same type, channel, and a
			// payload that re-encodes identically.
			fr2 := NewFrameReader(bytes.NewReader(enc), 0)
			fr2.SetMaxFrameSize(0)
			fm2, err := fr2.ReadFrame()
			if err != nil || fm2.Type != fm.Type || fm2.Channel != fm.Channel {
				t.Fatalf("re-read: %+v %v", fm2, err)
			}
			if fm.Type == FrameBody && !bytes.Equal(fm2.Payload, fm.Payload) {
				t.Fatal("body changed")
			}
		}
	})
}

// TestFrameSeeds writes the FuzzFrame seed corpus (WARREN_WRITE_SEEDS=1).
func TestFrameSeeds(t *testing.T) {
	seeds := map[string][]byte{}
	p := fullProperties()
	var pub []byte
	pub = AppendMethodFrame(pub, 1, &BasicPublish{Exchange: "amq.direct", RoutingKey: "rk", Mandatory: true})
	pub = AppendHeaderFrame(pub, 1, ClassBasic, 5000, &p)
	pub = AppendBodyFrames(pub, 1, bytes.Repeat([]byte{'b'}, 5000), 4096)
	seeds["publish"] = pub
	seeds["heartbeat"] = AppendHeartbeat(nil)
	seeds["protocol-header-then-frames"] = append(append([]byte{}, ProtocolHeader...), AppendHeartbeat(nil)...)
	var hs []byte
	hs = AppendMethodFrame(hs, 0, &ConnectionStartOk{ClientProperties: sampleTable(), Mechanism: "PLAIN", Response: "\x00guest\x00guest", Locale: "en_US"})
	hs = AppendMethodFrame(hs, 0, &ConnectionTuneOk{ChannelMax: 2047, FrameMax: 131072, Heartbeat: 60})
	hs = AppendMethodFrame(hs, 0, &ConnectionOpen{VirtualHost: "/"})
	hs = AppendMethodFrame(hs, 1, &ChannelOpen{})
	seeds["handshake"] = hs
	seeds["bad-end"] = rawFrame(1, 1, []byte{0, 20, 0, 20, 1}, 0xAB)
	seeds["unknown-type"] = rawFrame(5, 1, []byte{1, 2, 3}, 0xCE)
	seeds["too-large"] = rawFrame(3, 1, make([]byte, 4097), 0xCE)
	var del []byte
	del = AppendMethodFrame(del, 2, &BasicDeliver{ConsumerTag: "c", DeliveryTag: 9, Exchange: "x", RoutingKey: "k"})
	del = AppendHeaderFrame(del, 2, ClassBasic, 3, nil)
	del = AppendBodyFrames(del, 2, []byte("abc"), 4096)
	del = AppendMethodFrame(del, 2, &BasicAck{DeliveryTag: 9})
	del = AppendMethodFrame(del, 2, &BasicNack{DeliveryTag: 9, Multiple: true, Requeue: true})
	seeds["deliver-ack"] = del
	writeSeeds(t, "FuzzFrame", seeds)
}
