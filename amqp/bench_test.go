package amqp

import (
	"bytes"
	"testing"
)

type loopReader struct {
	data []byte
	off  int
}

func (r *loopReader) Read(p []byte) (int, error) {
	if r.off == len(r.data) {
		r.off = 0
	}
	n := copy(p, r.data[r.off:])
	r.off += n
	return n, nil
}

// BenchmarkDecodePublish reads and decodes basic.publish + content header +
// one body frame (1 KiB body), as a broker's connection reader does, reusing
// the method and properties structs.
func BenchmarkDecodePublish(b *testing.B) {
	body := bytes.Repeat([]byte{'x'}, 1024)
	props := Properties{ContentType: "application/json", DeliveryMode: 2, MessageID: "0123456789", Timestamp: fullProperties().Timestamp}
	var msg []byte
	msg = AppendMethodFrame(msg, 1, &BasicPublish{Exchange: "amq.topic", RoutingKey: "orders.eu.created"})
	msg = AppendHeaderFrame(msg, 1, ClassBasic, uint64(len(body)), &props)
	msg = AppendBodyFrames(msg, 1, body, 131072)
	fr := NewFrameReader(&loopReader{data: bytes.Repeat(msg, 64)}, 64<<10)
	fr.SetMaxFrameSize(131072)
	var pub BasicPublish
	var p Properties
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f, err := fr.ReadFrame()
		if err != nil {
			b.Fatal(err)
		}
		_, _, args, err := SplitMethod(f.Payload)
		if err != nil {
			b.Fatal(err)
		}
		if err := pub.Decode(args); err != nil {
			b.Fatal(err)
		}
		if f, err = fr.ReadFrame(); err != nil {
			b.Fatal(err)
		}
		if err := DecodeProperties(f.Payload[12:], &p); err != nil {
			b.Fatal(err)
		}
		if f, err = fr.ReadFrame(); err != nil || len(f.Payload) != len(body) {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeMethodPublish is the allocating convenience path.
func BenchmarkDecodeMethodPublish(b *testing.B) {
	payload := (&BasicPublish{Exchange: "amq.topic", RoutingKey: "orders.eu.created"}).Append(nil)
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := DecodeMethod(payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeDeliver encodes basic.deliver + content header + 1 KiB
// body into a reused buffer.
func BenchmarkEncodeDeliver(b *testing.B) {
	body := bytes.Repeat([]byte{'x'}, 1024)
	props := Properties{ContentType: "application/json", DeliveryMode: 2, MessageID: "0123456789", Timestamp: fullProperties().Timestamp}
	del := BasicDeliver{ConsumerTag: "amq.ctag-Xz3kq", Exchange: "amq.topic", RoutingKey: "orders.eu.created"}
	buf := make([]byte, 0, 4096)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		del.DeliveryTag = uint64(i)
		buf = AppendMethodFrame(buf[:0], 1, &del)
		buf = AppendHeaderFrame(buf, 1, ClassBasic, uint64(len(body)), &props)
		buf = AppendBodyFrames(buf, 1, body, 131072)
	}
}

// BenchmarkEncodeDeliverHeaders is the same with a 3-entry headers table.
func BenchmarkEncodeDeliverHeaders(b *testing.B) {
	body := bytes.Repeat([]byte{'x'}, 1024)
	props := Properties{ContentType: "application/json", DeliveryMode: 2,
		Headers: Table{"x-death-count": int64(1), "trace": "abc", "x-first-death-queue": "q"}}
	del := BasicDeliver{ConsumerTag: "amq.ctag-Xz3kq", Exchange: "amq.topic", RoutingKey: "orders.eu.created"}
	buf := make([]byte, 0, 4096)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = AppendMethodFrame(buf[:0], 1, &del)
		buf = AppendHeaderFrame(buf, 1, ClassBasic, uint64(len(body)), &props)
		buf = AppendBodyFrames(buf, 1, body, 131072)
	}
}

func BenchmarkTableEncode(b *testing.B) {
	t := sampleTable()
	buf := make([]byte, 0, 4096)
	buf = AppendTable(buf, t)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = AppendTable(buf[:0], t)
	}
}

func BenchmarkTableDecode(b *testing.B) {
	enc := AppendTable(nil, sampleTable())
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, _, err := DecodeTable(enc); err != nil {
			b.Fatal(err)
		}
	}
}
