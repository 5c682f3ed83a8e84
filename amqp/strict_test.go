package amqp

import (
	"errors"
	"math"
	"testing"
)

// TestValidUTF8MatchesRabbitMQ pins the UTF-8 check of method shortstrs to
// what RabbitMQ 3.10.8 was seen to accept and refuse (issue 11 item 3):
// surrogates and code points up to U+1FFFFF pass, stray continuation
// bytes, truncated and overlong sequences and 5/6-byte forms do not.
func TestValidUTF8MatchesRabbitMQ(t *testing.T) {
	for _, c := range []struct {
		s  string
		ok bool
	}{
		{"", true}, {"plain", true}, {"nul\x00x", true}, {"\x01\x7f", true}, {"\u00e9", true}, {"\u0080", true},
		{"\ufffe", true}, {"\uffff", true}, {"\xed\xa0\x80", true}, {"\xed\xbf\xbf", true},
		{"\xf4\x90\x80\x80", true}, {"\xf7\xbf\xbf\xbf", true}, {"\U0010ffff", true},
		{"bad\xff", false}, {"bad\xfe", false}, {"\xc0\xaf", false}, {"\xe0\x80\xaf", false}, {"\xf0\x80\x80\x80", false},
		{"\x80", false}, {"\xe2\x82", false}, {"a\xe2\x82", false}, {"\xf8\x88\x80\x80\x80", false},
		{"\xfc\x84\x80\x80\x80\x80", false}, {"\xc2", false}, {"\xc2a", false},
	} {
		if got := validUTF8([]byte(c.s)); got != c.ok {
			t.Errorf("validUTF8(%q) = %v, want %v", c.s, got, c.ok)
		}
	}
}

// TestMethodShortstrUTF8 is issue 11 item 3: a method without content
// whose shortstr is not UTF-8 gets RabbitMQ's 501; basic.publish is not
// checked; on channel 0 the error names the method.
func TestMethodShortstrUTF8(t *testing.T) {
	bad := "bad\xff"
	for _, m := range []Method{&QueueDeclare{Queue: bad}, &ExchangeDeclare{Exchange: "x", Type: bad},
		&QueueBind{Queue: "q", Exchange: "x", RoutingKey: bad}, &BasicConsume{Queue: "q", ConsumerTag: bad},
		&ConnectionOpen{VirtualHost: bad}} {
		payload := m.Append(nil)
		_, err := DecodeMethod(payload)
		var e *Error
		if !errors.As(err, &e) || e.Code != FrameError || e.Text != "FRAME_ERROR - Malformed UTF-8 in shortstr" || !e.Hard || e.ClassID != 0 {
			t.Errorf("%s: got %v (%+v), want hard 501 Malformed UTF-8 in shortstr naming no method", m.Name(), err, e)
		}
		_, err = DecodeMethod0(payload)
		if !errors.As(err, &e) || e.ClassID != m.ClassID() || e.MethodID != m.MethodID() {
			t.Errorf("%s on channel 0: got %+v, want the method named", m.Name(), e)
		}
	}
	if _, err := DecodeMethod((&BasicPublish{Exchange: bad, RoutingKey: bad}).Append(nil)); err != nil {
		t.Errorf("basic.publish with a non-UTF-8 exchange and routing key: %v, want accepted as RabbitMQ does", err)
	}
	if _, err := DecodeMethod((&QueueDeclare{Queue: "\xed\xa0\x80", Arguments: Table{"k\xff": "v\xfe"}}).Append(nil)); err != nil {
		t.Errorf("surrogate name, non-UTF-8 table key and longstr: %v, want accepted as RabbitMQ does", err)
	}
}

// TestNonFiniteFloats is issue 11 item 1: NaN and infinities, at any
// depth, are refused in method arguments (501 cannot decode, where
// RabbitMQ resets the socket) and in a content header's headers (541, as
// RabbitMQ), and kept by the lenient decoders (messages read back from
// the store).
func TestNonFiniteFloats(t *testing.T) {
	vals := []any{math.NaN(), math.Inf(1), math.Inf(-1), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)),
		Table{"n": Table{"x": math.NaN()}}, []any{1, []any{math.Inf(1)}}}
	for _, v := range vals {
		args := Table{"x-a": v}
		m := &QueueDeclare{Queue: "q", Durable: true, Arguments: args}
		_, err := DecodeMethod(m.Append(nil))
		var e *Error
		if !errors.As(err, &e) || e.Code != FrameError || e.ClassID != 50 || e.MethodID != 10 {
			t.Errorf("queue.declare with %v: got %v, want 501 cannot decode naming 50/10", v, err)
		}
		hdr := AppendHeaderFrame(nil, 1, 60, 0, &Properties{Flags: FlagHeaders, Headers: args})
		_, _, _, err = DecodeHeader(hdr[7 : len(hdr)-1])
		if !errors.As(err, &e) || e.Code != InternalError || e.Text != "INTERNAL_ERROR" || !e.Hard || e.ClassID != 0 {
			t.Errorf("header with %v: got %v, want a bare hard 541", v, err)
		}
		var p Properties
		if err := DecodeProperties(AppendProperties(nil, &Properties{Flags: FlagHeaders, Headers: args}), &p); err != nil || p.Headers["x-a"] == nil {
			t.Errorf("DecodeProperties (lenient) with %v: %v %v", v, p.Headers, err)
		}
		if tb, _, err := DecodeTable(AppendTable(nil, args)); err != nil || tb["x-a"] == nil {
			t.Errorf("DecodeTable (lenient) with %v: %v %v", v, tb, err)
		}
	}
	// Finite extremes pass.
	for _, v := range []any{math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, float32(math.MaxFloat32), math.Copysign(0, -1)} {
		if _, err := DecodeMethod((&QueueDeclare{Queue: "q", Arguments: Table{"x": v}}).Append(nil)); err != nil {
			t.Errorf("queue.declare with %v: %v", v, err)
		}
	}
}

// A server's methods may carry shortstrs that are not UTF-8 (RabbitMQ
// puts a publisher's unchecked exchange name in its NOT_FOUND reply
// text): DecodeServerMethod takes them, DecodeMethod refuses them.
func TestDecodeServerMethodTakesAnyShortstr(t *testing.T) {
	sent := &ChannelClose{ReplyCode: NotFound, ReplyText: "NOT_FOUND - no exchange 'x\xff' in vhost '/'", FailingClassID: 60, FailingMethodID: 40}
	payload := sent.Append(nil)
	if _, err := DecodeMethod(payload); err == nil {
		t.Fatal("DecodeMethod took a reply text that is not UTF-8")
	}
	m, err := DecodeServerMethod(payload)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := m.(*ChannelClose); !ok || *got != *sent {
		t.Fatalf("got %#v, want %#v", m, sent)
	}
	if _, err := DecodeServerMethod(payload[:len(payload)-1]); err == nil {
		t.Error("DecodeServerMethod took a truncated method")
	}
}
