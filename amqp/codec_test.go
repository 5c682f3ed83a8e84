package amqp

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestMethodRoundTrip(t *testing.T) {
	ms := allMethods()
	if len(ms) < 50 {
		t.Fatalf("only %d methods generated", len(ms))
	}
	seeds := map[string][]byte{}
	for _, proto := range ms {
		for seed, filled := range []bool{false, true, true} {
			m := NewMethod(proto.ClassID(), proto.MethodID())
			if filled {
				fill(m, seed)
			}
			name := fmt.Sprintf("%s/%d", m.Name(), seed)
			t.Run(name, func(t *testing.T) {
				b := m.Append(nil)
				got, err := DecodeMethod(b)
				if err != nil {
					t.Fatalf("DecodeMethod(% x): %v", b, err)
				}
				if !reflect.DeepEqual(got, m) {
					t.Fatalf("round trip:\n got %#v\nwant %#v", got, m)
				}
				if got.Name() != MethodName(m.ClassID(), m.MethodID()) {
					t.Fatalf("Name %q, MethodName %q", got.Name(), MethodName(m.ClassID(), m.MethodID()))
				}
				if b2 := got.Append(nil); !bytes.Equal(b, b2) {
					t.Fatalf("re-encoding differs:\n% x\n% x", b, b2)
				}
				// Every strict prefix is a truncated method, and a trailing
				// byte is an error too.
				for i := 4; i < len(b); i++ {
					_, err := DecodeMethod(b[:i])
					e := wantCode(t, err, FrameError, true)
					if e.ClassID != m.ClassID() || e.MethodID != m.MethodID() {
						t.Fatalf("truncated at %d: error names %d.%d", i, e.ClassID, e.MethodID)
					}
				}
				_, err = DecodeMethod(append(b, 0))
				wantCode(t, err, FrameError, true)
			})
			seeds[strings.ReplaceAll(name, "/", "-")] = m.Append(nil)
		}
	}
	writeSeeds(t, "FuzzMethod", seeds)
}

func TestMethodNames(t *testing.T) {
	for _, c := range []struct {
		m    Method
		name string
		c, i uint16
		cont bool
	}{
		{&ConnectionStart{}, "connection.start", 10, 10, false},
		{&ConnectionStartOk{}, "connection.start-ok", 10, 11, false},
		{&ConnectionBlocked{}, "connection.blocked", 10, 60, false},
		{&ConnectionUnblocked{}, "connection.unblocked", 10, 61, false},
		{&ConnectionUpdateSecret{}, "connection.update-secret", 10, 70, false},
		{&ConnectionUpdateSecretOk{}, "connection.update-secret-ok", 10, 71, false},
		{&ChannelOpen{}, "channel.open", 20, 10, false},
		{&ExchangeBind{}, "exchange.bind", 40, 30, false},
		{&ExchangeUnbindOk{}, "exchange.unbind-ok", 40, 51, false},
		{&QueueDeclareOk{}, "queue.declare-ok", 50, 11, false},
		{&BasicPublish{}, "basic.publish", 60, 40, true},
		{&BasicReturn{}, "basic.return", 60, 50, true},
		{&BasicDeliver{}, "basic.deliver", 60, 60, true},
		{&BasicGetOk{}, "basic.get-ok", 60, 71, true},
		{&BasicGetEmpty{}, "basic.get-empty", 60, 72, false},
		{&BasicNack{}, "basic.nack", 60, 120, false},
		{&ConfirmSelect{}, "confirm.select", 85, 10, false},
		{&TxCommitOk{}, "tx.commit-ok", 90, 21, false},
	} {
		if c.m.Name() != c.name || c.m.ClassID() != c.c || c.m.MethodID() != c.i || c.m.HasContent() != c.cont {
			t.Errorf("%T: %q %d.%d content=%v, want %q %d.%d %v", c.m, c.m.Name(), c.m.ClassID(), c.m.MethodID(), c.m.HasContent(), c.name, c.c, c.i, c.cont)
		}
		if MethodName(c.c, c.i) != c.name {
			t.Errorf("MethodName(%d, %d) = %q", c.c, c.i, MethodName(c.c, c.i))
		}
	}
	if MethodName(60, 99) != "" || NewMethod(60, 99) != nil {
		t.Error("unknown method has a name")
	}
	content := 0
	for _, m := range allMethods() {
		if m.HasContent() {
			content++
		}
	}
	if content != 4 {
		t.Errorf("%d content methods, want 4", content)
	}
}

// Wire layouts computed by hand from the spec.
func TestMethodFixtures(t *testing.T) {
	for _, c := range []struct {
		m    Method
		wire []byte
	}{
		{&BasicPublish{Exchange: "ex", RoutingKey: "rk", Mandatory: true, Immediate: false},
			[]byte{0, 60, 0, 40, 0, 0, 2, 'e', 'x', 2, 'r', 'k', 1}},
		{&BasicPublish{Immediate: true}, []byte{0, 60, 0, 40, 0, 0, 0, 0, 2}},
		{&BasicDeliver{ConsumerTag: "c", DeliveryTag: 258, Redelivered: true, Exchange: "", RoutingKey: "q"},
			[]byte{0, 60, 0, 60, 1, 'c', 0, 0, 0, 0, 0, 0, 1, 2, 1, 0, 1, 'q'}},
		{&BasicAck{DeliveryTag: 1, Multiple: true}, []byte{0, 60, 0, 80, 0, 0, 0, 0, 0, 0, 0, 1, 1}},
		{&BasicNack{DeliveryTag: 2, Multiple: false, Requeue: true}, []byte{0, 60, 0, 120, 0, 0, 0, 0, 0, 0, 0, 2, 2}},
		{&ExchangeDeclare{Exchange: "x", Type: "topic", Passive: false, Durable: true, AutoDelete: false, Internal: true, NoWait: true},
			append([]byte{0, 40, 0, 10, 0, 0, 1, 'x', 5, 't', 'o', 'p', 'i', 'c', 2 | 8 | 16}, 0, 0, 0, 0)},
		{&QueueDeclare{Queue: "q", Exclusive: true},
			[]byte{0, 50, 0, 10, 0, 0, 1, 'q', 4, 0, 0, 0, 0}},
		{&ConnectionClose{ReplyCode: 320, ReplyText: "bye", FailingClassID: 60, FailingMethodID: 40},
			[]byte{0, 10, 0, 50, 1, 64, 3, 'b', 'y', 'e', 0, 60, 0, 40}},
		{&ConnectionOpen{VirtualHost: "/"}, []byte{0, 10, 0, 40, 1, '/', 0, 0}},
		{&ChannelOpenOk{}, []byte{0, 20, 0, 11, 0, 0, 0, 0}},
		{&ConfirmSelect{NoWait: true}, []byte{0, 85, 0, 10, 1}},
		{&ConnectionUpdateSecret{NewSecret: "s", Reason: "r"}, []byte{0, 10, 0, 70, 0, 0, 0, 1, 's', 1, 'r'}},
		{&ConnectionTune{ChannelMax: 2047, FrameMax: 131072, Heartbeat: 60},
			[]byte{0, 10, 0, 30, 0x07, 0xff, 0, 2, 0, 0, 0, 60}},
	} {
		if got := c.m.Append(nil); !bytes.Equal(got, c.wire) {
			t.Errorf("%s: encoded\n% x\nwant\n% x", c.m.Name(), got, c.wire)
		}
		got, err := DecodeMethod(c.wire)
		if err != nil || !reflect.DeepEqual(got, c.m) {
			t.Errorf("%s: decoded %#v, %v", c.m.Name(), got, err)
		}
	}
}

func TestDecodeMethodErrors(t *testing.T) {
	// Shapes observed from RabbitMQ 3.10, see frame.go.
	for _, c := range []struct {
		payload []byte
		code    uint16
		text    string
		cid     uint16
		mid     uint16
	}{
		{[]byte{0, 60, 0}, FrameError, "FRAME_ERROR - type 1, all octets = <<0,60,0>>: unknown_frame", 0, 0},
		{[]byte{0, 60, 0, 40, 0, 0, 5, 97}, FrameError, "FRAME_ERROR - cannot decode <<0,0,5,97>>", 60, 40},
		{[]byte{0, 60, 0, 80, 0, 0, 0, 1}, FrameError, "FRAME_ERROR - cannot decode <<0,0,0,1>>", 60, 80},
		{[]byte{0, 60, 0, 80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9}, FrameError, "FRAME_ERROR - cannot decode <<0,0,0,0,0,0,0,0,0,9,9>>", 60, 80},
		{[]byte{0, 60, 0, 99}, NotImplemented, "NOT_IMPLEMENTED - {unknown_method_id,{60,99}}", 60, 99},
		{[]byte{0, 99, 0, 10}, NotImplemented, "NOT_IMPLEMENTED - {unknown_method_id,{99,10}}", 99, 10},
		{[]byte{0, 30, 0, 10}, NotImplemented, "NOT_IMPLEMENTED - {unknown_method_id,{30,10}}", 30, 10},
		{[]byte{0, 90, 0, 10, 1}, FrameError, "FRAME_ERROR - cannot decode <<1>>", 90, 10},
		// Unknown field type in a table (RabbitMQ crashes here).
		{[]byte{0, 50, 0, 10, 0, 0, 2, 'q', '1', 0, 0, 0, 0, 4, 1, 'k', 'Z', 1}, FrameError,
			"FRAME_ERROR - cannot decode <<0,0,2,113,49,0,0,0,0,4,1,107,90,1>>", 50, 10},
		{[]byte{0, 60, 0, 40, 0, 0, 5, 'a', 'b'}, FrameError, "FRAME_ERROR - cannot decode <<0,0,5,97,98>>", 60, 40},
	} {
		_, err := DecodeMethod(c.payload)
		e := wantCode(t, err, c.code, true)
		if e.Text != c.text || e.ClassID != c.cid || e.MethodID != c.mid {
			t.Errorf("% x: got %q %d.%d, want %q %d.%d", c.payload, e.Text, e.ClassID, e.MethodID, c.text, c.cid, c.mid)
		}
	}
	// A long payload keeps reply-text within a shortstr.
	long := append([]byte{0, 60, 0, 40}, bytes.Repeat([]byte{200, 1}, 5000)...)
	_, err := DecodeMethod(long)
	if e := wantCode(t, err, FrameError, true); len(e.Text) > 255 {
		t.Errorf("reply text is %d bytes", len(e.Text))
	}
}

func TestErlBinary(t *testing.T) {
	for in, want := range map[string]string{
		"":                   "<<>>",
		"hello":              `<<"hello">>`,
		"a\"b\\\n":           `<<"a\"b\\\n">>`,
		"\x00\x3c":           "<<0,60>>",
		"\xff\xff":           "<<\"\xff\xff\">>",
		"abcdefghijklmnopqr": `<<"abcdefghijklmnop",...>>`,
	} {
		if got := erlBinary([]byte(in), 16); got != want {
			t.Errorf("erlBinary(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestShortstrTruncated(t *testing.T) {
	m := &BasicPublish{RoutingKey: strings.Repeat("k", 300)}
	got, err := DecodeMethod(m.Append(nil))
	if err != nil || got.(*BasicPublish).RoutingKey != strings.Repeat("k", 255) {
		t.Fatalf("got %v %v", got, err)
	}
}

func TestBitPackingBeyondEight(t *testing.T) {
	// RabbitMQ ignores the unused bits of a bit octet; so do we.
	var a BasicAck
	if err := a.Decode([]byte{0, 0, 0, 0, 0, 0, 0, 7, 0xFF}); err != nil || !a.Multiple || a.DeliveryTag != 7 {
		t.Fatalf("%+v %v", a, err)
	}
}

func TestHotPathAllocs(t *testing.T) {
	buf := make([]byte, 0, 1024)
	pub := &BasicPublish{Exchange: "amq.topic", RoutingKey: "a.b.c", Mandatory: true}
	del := &BasicDeliver{ConsumerTag: "ctag-1", DeliveryTag: 42, Exchange: "amq.topic", RoutingKey: "a.b.c"}
	ack := &BasicAck{DeliveryTag: 42, Multiple: true}
	nack := &BasicNack{DeliveryTag: 42, Requeue: true}
	props := &Properties{ContentType: "text/plain", DeliveryMode: 2, MessageID: "m1"}
	body := make([]byte, 300)
	for _, m := range []Method{pub, del, ack, nack} {
		if n := testing.AllocsPerRun(100, func() { buf = m.Append(buf[:0]) }); n != 0 {
			t.Errorf("%s Append: %v allocs", m.Name(), n)
		}
		if n := testing.AllocsPerRun(100, func() { buf = AppendMethodFrame(buf[:0], 1, m) }); n != 0 {
			t.Errorf("%s AppendMethodFrame: %v allocs", m.Name(), n)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		buf = AppendMethodFrame(buf[:0], 1, del)
		buf = AppendHeaderFrame(buf, 1, ClassBasic, uint64(len(body)), props)
		buf = AppendBodyFrames(buf, 1, body, 131072)
	}); n != 0 {
		t.Errorf("deliver+header+body: %v allocs", n)
	}
	// Decoding allocates only the strings.
	var p BasicPublish
	pb := pub.Append(nil)[4:]
	if n := testing.AllocsPerRun(100, func() { _ = p.Decode(pb) }); n != 2 {
		t.Errorf("BasicPublish.Decode: %v allocs, want 2 (exchange, routing key)", n)
	}
	var d BasicDeliver
	db := del.Append(nil)[4:]
	if n := testing.AllocsPerRun(100, func() { _ = d.Decode(db) }); n != 3 {
		t.Errorf("BasicDeliver.Decode: %v allocs, want 3", n)
	}
	var a BasicAck
	ab := ack.Append(nil)[4:]
	if n := testing.AllocsPerRun(100, func() { _ = a.Decode(ab) }); n != 0 {
		t.Errorf("BasicAck.Decode: %v allocs", n)
	}
	var na BasicNack
	nb := nack.Append(nil)[4:]
	if n := testing.AllocsPerRun(100, func() { _ = na.Decode(nb) }); n != 0 {
		t.Errorf("BasicNack.Decode: %v allocs", n)
	}
	full := pub.Append(nil)
	if n := testing.AllocsPerRun(100, func() { _, _, _, _ = SplitMethod(full) }); n != 0 {
		t.Errorf("SplitMethod: %v allocs", n)
	}
}
