package integration

// Generators of the session fuzzer (sessionfuzz_test.go): field values of
// every AMQP type, names, and the raw frames of invalid sequences.

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/warrenmq/warren/amqp"
)

// Generator tags for WARREN_FUZZ_SKIP. Each switches off inputs that hit a
// known bug, so that a run can look past it for new ones; the default (and
// CI) runs all of them.
const (
	fzTagNaN        = "nan"        // NaN and ±Inf floats and doubles in arguments of durable declarations and bindings (issue 11 item 1)
	fzTagNaNElse    = "nan-else"   // NaN and ±Inf elsewhere: client properties, transient queues, headers, consume arguments (item 2)
	fzTagUTF8       = "utf8"       // invalid UTF-8 in names, keys and strings (item 3)
	fzTagHugeBody   = "hugebody"   // content headers announcing huge bodies that never come (item 5)
	fzTagE2E        = "e2e"        // the same key bound from two sources into one exchange (item 7)
	fzTagNoRead     = "noread"     // a client publishing mandatory unroutable messages without reading (item 9)
	fzTagCleanClose = "cleanclose" // NotifyClose after a deliberate Close must report no error (item 13)
	fzTagHdr09      = "hdr09"      // the AMQP 0-9 protocol header "AMQP 1 1 0 9" (item 14)
	fzTagNUL        = "nul"        // NUL bytes in durable names (store keys use NUL as a separator)
	fzTagDeep       = "deep"       // field tables nested up to and past the decoder's depth limit
	fzTagLong       = "long"       // long strings (1 to 30 KB) in field tables, binding arguments included
)

var fzAllTags = []string{fzTagNaN, fzTagNaNElse, fzTagUTF8, fzTagHugeBody, fzTagE2E, fzTagNoRead, fzTagCleanClose, fzTagHdr09, fzTagNUL, fzTagDeep, fzTagLong}

// fzGen draws inputs from one worker's random stream.
type fzGen struct {
	rng     *rand.Rand
	skip    map[string]bool
	durable bool // values are for a durable declaration or a binding
}

func (g *fzGen) on(tag string) bool { return !g.skip[tag] }

func (g *fzGen) chance(n int) bool { return g.rng.IntN(n) == 0 }

// nan reports whether a float may be NaN or ±Inf here.
func (g *fzGen) nan() bool {
	if g.durable {
		return g.on(fzTagNaN)
	}
	return g.on(fzTagNaNElse)
}

func (g *fzGen) float64() float64 {
	if g.nan() && g.chance(3) {
		return []float64{math.NaN(), math.Inf(1), math.Inf(-1)}[g.rng.IntN(3)]
	}
	return []float64{0, math.Copysign(0, -1), 1.5, -2.25, math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64,
		1e21, g.rng.NormFloat64() * 1e6}[g.rng.IntN(9)]
}

func (g *fzGen) float32() float32 {
	if g.nan() && g.chance(3) {
		return []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}[g.rng.IntN(3)]
	}
	return []float32{0, float32(math.Copysign(0, -1)), 0.5, math.MaxFloat32, math.SmallestNonzeroFloat32, float32(g.rng.NormFloat64())}[g.rng.IntN(6)]
}

func (g *fzGen) int64() int64 {
	return []int64{0, -1, 1, math.MinInt64, math.MaxInt64, math.MinInt32, int64(g.rng.Uint64()), g.rng.Int64N(1000)}[g.rng.IntN(8)]
}

// str is a long string value: empty, ASCII, Unicode, NUL bytes, invalid
// UTF-8, or long.
func (g *fzGen) str() string {
	switch g.rng.IntN(8) {
	case 0:
		return ""
	case 1:
		return "héllo ☃ 🐇 \u2028"
	case 2:
		return "nul\x00in\x00side"
	case 3:
		if g.on(fzTagUTF8) {
			return []string{"bad\xff", "\xfe\xfe", "trunc\xe2\x82", "\xc0\xaf", "\xed\xa0\x80"}[g.rng.IntN(5)]
		}
		return "ok"
	case 4:
		if g.on(fzTagLong) {
			return strings.Repeat("L", 1000+g.rng.IntN(30000))
		}
		return strings.Repeat("l", 200)
	default:
		b := make([]byte, 1+g.rng.IntN(20))
		for i := range b {
			b[i] = byte(' ' + g.rng.IntN(95))
		}
		return string(b)
	}
}

// key is a field-table key (a shortstr).
func (g *fzGen) key() string {
	switch g.rng.IntN(8) {
	case 0:
		return ""
	case 1:
		return strings.Repeat("k", 255)
	case 2:
		if g.on(fzTagUTF8) {
			return "k\xff"
		}
	case 3:
		return "k\u00e9\u2603"
	}
	return "hG-k" + string(rune('a'+g.rng.IntN(6)))
}

func (g *fzGen) timestamp() time.Time {
	return time.Unix([]int64{0, -1, 1 << 40, math.MaxInt64, math.MinInt64, g.rng.Int64N(4e9)}[g.rng.IntN(6)], 0).UTC()
}

// value is a field value of any AMQP type; containers nest up to depth 4.
func (g *fzGen) value(depth int) any {
	k := g.rng.IntN(17)
	if depth >= 4 && k >= 15 {
		k = g.rng.IntN(15)
	}
	switch k {
	case 0:
		return g.rng.IntN(2) == 0
	case 1:
		return int8(g.rng.Uint32())
	case 2:
		return uint8(g.rng.Uint32())
	case 3:
		return int16(g.rng.Uint32())
	case 4:
		return uint16(g.rng.Uint32())
	case 5:
		return int32(g.int64())
	case 6:
		return uint32(g.int64())
	case 7:
		return g.int64()
	case 8:
		return g.float32()
	case 9:
		return g.float64()
	case 10:
		return amqp.Decimal{Scale: uint8(g.rng.Uint32()), Value: int32(g.int64())}
	case 11:
		return g.str()
	case 12:
		return []byte(g.str())
	case 13:
		return g.timestamp()
	case 14:
		return nil
	case 15:
		a := make([]any, g.rng.IntN(5))
		for i := range a {
			a[i] = g.value(depth + 1)
		}
		return a
	default:
		return g.table(depth+1, 4)
	}
}

func (g *fzGen) table(depth, max int) amqp.Table {
	t := amqp.Table{}
	for n := g.rng.IntN(max + 1); n > 0; n-- {
		t[g.key()] = g.value(depth)
	}
	return t
}

// deep is a field value nested d tables deep, encoded by hand because
// amqp.AppendTable stops nesting at amqp.MaxTableDepth. The decoder
// accepts fewer than amqp.MaxTableDepth levels.
func (g *fzGen) deep(d int) amqp.RawValue {
	v := []byte{'S', 0, 0, 0, 4, 'l', 'e', 'a', 'f'}
	for i := 0; i < d; i++ {
		if i%2 == 0 { // a table {"d": v}
			inner := append([]byte{1, 'd'}, v...)
			v = binary.BigEndian.AppendUint32([]byte{'F'}, uint32(len(inner)))
			v = append(v, inner...)
		} else { // an array [v]
			inner := v
			v = binary.BigEndian.AppendUint32([]byte{'A'}, uint32(len(inner)))
			v = append(v, inner...)
		}
	}
	return amqp.RawValue(v)
}

// queueArgs are declaration arguments: RabbitMQ's x- arguments with right
// and wrong types, and arbitrary keys with values of every type. Tracked
// (durable) queues never get x-expires, which would delete them behind
// the model's back. durable: the queue is stored (durable, not exclusive).
func (g *fzGen) queueArgs(tracked, durable bool) amqp.Table {
	g.durable = durable
	defer func() { g.durable = false }()
	t := amqp.Table{}
	if g.chance(3) {
		return nil
	}
	for n := g.rng.IntN(4); n > 0; n-- {
		switch g.rng.IntN(10) {
		case 0:
			t["x-message-ttl"] = []any{int32(100 + g.rng.IntN(5000)), g.value(0)}[g.rng.IntN(2)]
		case 1:
			t["x-max-length"] = []any{int64(g.rng.IntN(1000)), g.value(0)}[g.rng.IntN(2)]
		case 2:
			t["x-dead-letter-exchange"] = []any{"amq.fanout", "", g.value(0)}[g.rng.IntN(3)]
		case 3:
			t["x-dead-letter-routing-key"] = g.value(0)
		case 4:
			t["x-overflow"] = []any{"drop-head", "reject-publish", "reject-publish-dlx", g.value(0)}[g.rng.IntN(4)]
		case 5:
			t["x-queue-type"] = []any{"classic", "quorum", g.value(0)}[g.rng.IntN(3)]
		case 6:
			t["x-delivery-limit"] = g.value(0)
		case 7:
			if !tracked {
				t["x-expires"] = []any{int32(1000 + g.rng.IntN(5000)), g.value(0)}[g.rng.IntN(2)]
				break
			}
			fallthrough
		default:
			t[g.key()] = g.value(0)
		}
	}
	if g.on(fzTagDeep) && g.chance(20) {
		t["hG-deep"] = g.deep(amqp.MaxTableDepth - 4 + g.rng.IntN(8))
	}
	return t
}

func (g *fzGen) exchangeType() string {
	return []string{"direct", "fanout", "topic", "headers", "direct", "x-delayed-message", "x-bogus", ""}[g.rng.IntN(8)]
}

// exchangeArgs: alternate-exchange, x-delayed-type and arbitrary keys.
func (g *fzGen) exchangeArgs(durable bool) amqp.Table {
	g.durable = durable
	defer func() { g.durable = false }()
	if g.chance(3) {
		return nil
	}
	t := amqp.Table{}
	for n := g.rng.IntN(3); n > 0; n-- {
		switch g.rng.IntN(4) {
		case 0:
			t["alternate-exchange"] = []any{"amq.fanout", g.value(0)}[g.rng.IntN(2)]
		case 1:
			t["x-delayed-type"] = []any{"direct", "topic", g.value(0)}[g.rng.IntN(3)]
		default:
			t[g.key()] = g.value(0)
		}
	}
	return t
}

// bindArgs: x-match for headers exchanges and arbitrary keys. Bindings
// to tracked objects are durable.
func (g *fzGen) bindArgs() amqp.Table {
	if g.chance(2) {
		return nil
	}
	g.durable = true
	defer func() { g.durable = false }()
	t := g.table(1, 3)
	if g.on(fzTagLong) && g.chance(8) {
		t["hG-long"] = strings.Repeat("B", 10000+g.rng.IntN(20000))
	}
	if g.chance(3) {
		t["x-match"] = []any{"all", "any", "all-with-x", g.value(0)}[g.rng.IntN(4)]
	}
	return t
}

// shortName is a routing key or consumer tag.
func (g *fzGen) shortName() string {
	switch g.rng.IntN(6) {
	case 0:
		return ""
	case 1:
		return "a.b.#"
	case 2:
		if g.on(fzTagUTF8) {
			return "rk\xff"
		}
	case 3:
		return strings.Repeat("r", 255)
	}
	return "rk" + string(rune('0'+g.rng.IntN(4)))
}

// properties are random basic properties with headers of every type.
func (g *fzGen) properties() *amqp.Properties {
	p := &amqp.Properties{}
	if g.chance(2) {
		p.Headers = g.table(1, 5)
	}
	if g.chance(3) {
		p.DeliveryMode = uint8(g.rng.IntN(4))
	}
	if g.chance(4) {
		p.Priority = uint8(g.rng.Uint32())
	}
	if g.chance(4) {
		p.Expiration = []string{"0", "100", "-1", "abc", "99999999999999999999", ""}[g.rng.IntN(6)]
	}
	if g.chance(4) {
		p.ContentType = g.shortName()
	}
	if g.chance(5) {
		p.Timestamp = g.timestamp()
	}
	if g.chance(5) {
		p.UserID = []string{"guest", "someone-else", ""}[g.rng.IntN(3)]
	}
	if g.chance(6) {
		p.MessageID, p.CorrelationID, p.ReplyTo, p.Type, p.AppID = g.shortName(), g.shortName(), g.shortName(), g.shortName(), g.shortName()
	}
	if g.chance(8) {
		p.Flags = uint16(g.rng.Uint32()) & 0xFFFC
	}
	return p
}

// publish is a basic.publish with its content on channel ch; the body is
// split into frames of at most frameMax octets. refused says the content
// header is one RabbitMQ answers with its bare connection.close 541
// INTERNAL_ERROR (headers with NaN or ±Inf, flags without their fields):
// a close the broker owes, not a crash.
func (g *fzGen) publish(ch uint16, exchange, key string, frameMax uint32) (b []byte, refused bool) {
	m := &amqp.BasicPublish{Exchange: exchange, RoutingKey: key, Mandatory: g.chance(3)}
	body := make([]byte, []int{0, 1, 100, 5000, 200_000}[g.rng.IntN(5)])
	for i := range body {
		body[i] = byte(i)
	}
	b = amqp.AppendMethodFrame(nil, ch, m)
	n := len(b)
	b = amqp.AppendHeaderFrame(b, ch, 60, uint64(len(body)), g.properties())
	var e *amqp.Error
	if _, _, _, err := amqp.DecodeHeader(b[n+7 : len(b)-1]); errors.As(err, &e) && e.Code == amqp.InternalError {
		refused = true
	}
	return amqp.AppendBodyFrames(b, ch, body, frameMax), refused
}

// fzRawFrame writes a frame with the given type, channel and payload.
func fzRawFrame(typ uint8, ch uint16, payload []byte) []byte {
	return frame(typ, ch, payload, amqp.FrameEnd)
}

// invalid is one sequence of frames no correct client sends, and its
// name. open is a channel that is open, unused one that is not.
func (g *fzGen) invalid(open, unused uint16, frameMax uint32) (string, []byte) {
	switch g.rng.IntN(12) {
	case 0:
		return "method-on-unopened-channel", amqp.AppendMethodFrame(nil, unused, &amqp.QueueDeclare{Queue: "hG-x"})
	case 1:
		return "content-header-without-publish", amqp.AppendHeaderFrame(nil, open, 60, 3, &amqp.Properties{})
	case 2:
		return "content-body-without-publish", fzRawFrame(amqp.FrameBody, open, []byte("abc"))
	case 3:
		return "wrong-frame-type", fzRawFrame(uint8(4+g.rng.IntN(4)), open, []byte{1, 2, 3})
	case 4:
		return "frame-over-frame-max", fzRawFrame(amqp.FrameMethod, open, make([]byte, frameMax+1+uint32(g.rng.IntN(100))))
	case 5: // the size field says more than is sent, then the socket stays open
		f := amqp.AppendMethodFrame(nil, open, &amqp.BasicQos{PrefetchCount: 1})
		binary.BigEndian.PutUint32(f[3:], 1000)
		return "size-larger-than-frame", f
	case 6:
		f := amqp.AppendMethodFrame(nil, open, &amqp.QueueDeclare{Queue: "hG-trunc", Arguments: amqp.Table{"a": "b"}})
		return "truncated-frame", f[:len(f)-1-g.rng.IntN(len(f)-1)]
	case 7: // a body before the announced one is complete, then a method
		b := amqp.AppendMethodFrame(nil, open, &amqp.BasicPublish{RoutingKey: "hG-none"})
		b = amqp.AppendHeaderFrame(b, open, 60, 10, &amqp.Properties{})
		b = append(b, fzRawFrame(amqp.FrameBody, open, []byte("abc"))...)
		return "method-inside-content", append(b, amqp.AppendMethodFrame(nil, open, &amqp.BasicQos{})...)
	case 8:
		return "heartbeat-on-channel", fzRawFrame(amqp.FrameHeartbeat, open, nil)
	case 9: // a field table with an unknown type octet
		p := methodPayload(&amqp.QueueDeclare{Queue: "hG-bad", Arguments: amqp.Table{"k": int8(1)}})
		p[len(p)-2] = byte("ZzYy\x00\xff"[g.rng.IntN(6)])
		return "bad-field-type", fzRawFrame(amqp.FrameMethod, open, p)
	case 10: // a table nested past the decoder's limit
		if g.on(fzTagDeep) {
			return "too-deep-table", amqp.AppendMethodFrame(nil, open, &amqp.QueueDeclare{Queue: "hG-deep", AutoDelete: true,
				Arguments: amqp.Table{"d": g.deep(amqp.MaxTableDepth + g.rng.IntN(4))}})
		}
		fallthrough
	default: // a mutated valid frame (badinput_test.go's mutator)
		f := amqp.AppendMethodFrame(nil, open, &amqp.QueueBind{Queue: "hG-m", Exchange: "amq.direct", RoutingKey: "k", Arguments: g.table(1, 3)})
		return "mutated", mutate(g.rng, f)
	}
}
