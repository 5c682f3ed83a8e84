package streamserver

import (
	"testing"
	"time"

	"github.com/warrenmq/warren/broker"
	sp "github.com/warrenmq/warren/streamproto"
)

// resolve sends ResolveOffsetSpec and returns its code and offset.
func (c *raw) resolve(stream string, kind uint16, value uint64, props map[string]string) (uint16, uint64) {
	c.t.Helper()
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	corr := c.request(sp.KeyResolveOffsetSpec, func(e *sp.Enc) {
		e.Str(stream)
		e.U16(kind)
		if kind == broker.OffsetAbsolute || kind == broker.OffsetTimestamp {
			e.U64(value)
		}
		e.Map(keys, props)
	})
	f := c.next()
	if f.Key != sp.KeyResolveOffsetSpec|sp.ResponseBit {
		c.t.Fatalf("got %s, want the response to resolve_offset_spec", sp.KeyName(f.Key))
	}
	d := sp.NewDec(f.Body)
	if d.U32() != corr {
		c.t.Fatal("correlation id")
	}
	code := d.U16()
	if typ := d.U16(); typ != broker.OffsetAbsolute {
		c.t.Fatalf("resolved value type %d, want 4 (offset)", typ)
	}
	return code, d.U64()
}

// TestResolveOffsetSpec: RabbitMQ 4.3's ResolveOffsetSpec, as its
// rabbit_stream_SUITE:test_resolve_offset_spec checks it (an empty
// stream resolves first, last and next to 0; after two publishes first
// is 0, next 2, offset 0 is 0, a timestamp in the future is next; a
// missing stream is 2), with filters and the refusals besides.
func TestResolveOffsetSpec(t *testing.T) {
	_, _, addr := start(t)
	c := dialRaw(t, addr)
	c.open()
	c.request(sp.KeyCreate, func(e *sp.Enc) {
		e.Str("r")
		e.Map(nil, nil)
	})
	if code := c.code(sp.KeyCreate); code != sp.OK {
		t.Fatalf("create: %d", code)
	}
	for _, k := range []uint16{broker.OffsetFirst, broker.OffsetLast, broker.OffsetNext} {
		if code, off := c.resolve("r", k, 0, nil); code != sp.OK || off != 0 {
			t.Fatalf("empty stream, spec %d: %d %d", k, code, off)
		}
	}
	c.request(sp.KeyDeclarePublisher, func(e *sp.Enc) {
		e.U8(1)
		e.Str("")
		e.Str("r")
	})
	if code := c.code(sp.KeyDeclarePublisher); code != sp.OK {
		t.Fatalf("declare publisher: %d", code)
	}
	publish := func(id uint64, filter string) {
		t.Helper()
		v := uint16(1)
		if filter != "" {
			v = 2
		}
		c.send(sp.KeyPublish, v, func(e *sp.Enc) {
			e.U8(1)
			e.U32(1)
			e.U64(id)
			if v == 2 {
				e.Str(filter)
			}
			e.Bytes([]byte{0x00, 0x53, 0x75, 0xa0, 0x05, 'h', 'e', 'l', 'l', 'o'})
		})
		if f := c.next(); f.Key != sp.KeyPublishConfirm {
			t.Fatalf("got %s, want a confirm", sp.KeyName(f.Key))
		}
	}
	before := uint64(time.Now().UnixMilli())
	publish(1, "")
	publish(2, "")
	for _, tc := range []struct {
		kind  uint16
		value uint64
		want  uint64
	}{
		{broker.OffsetFirst, 0, 0},
		{broker.OffsetLast, 0, 1},
		{broker.OffsetNext, 0, 2},
		{broker.OffsetAbsolute, 0, 0},
		{broker.OffsetAbsolute, 1, 1},
		{broker.OffsetAbsolute, 99, 2}, // within the stream
		{broker.OffsetTimestamp, uint64(time.Now().UnixMilli() + 3600_000), 2},
		{broker.OffsetTimestamp, before - 1000, 0},
	} {
		if code, off := c.resolve("r", tc.kind, tc.value, nil); code != sp.OK || off != tc.want {
			t.Errorf("spec %d %d: code %d offset %d, want %d", tc.kind, tc.value, code, off, tc.want)
		}
	}
	// with a filter: the first chunk that may hold "eu"
	publish(3, "us")
	publish(4, "eu")
	if code, off := c.resolve("r", broker.OffsetFirst, 0, map[string]string{"filter.0": "eu"}); code != sp.OK || off != 3 {
		t.Errorf("first with filter eu: %d %d, want offset 3", code, off)
	}
	if code, off := c.resolve("r", broker.OffsetFirst, 0, map[string]string{"filter.0": "asia"}); code != sp.OK || off != 4 {
		t.Errorf("first with filter asia (none): %d %d, want next (4)", code, off)
	}
	if code, _ := c.resolve("non_existent_stream", broker.OffsetFirst, 0, nil); code != sp.StreamDoesNotExist {
		t.Errorf("missing stream: %d", code)
	}
	if code, _ := c.resolve("r", 9, 0, nil); code != sp.NoOffset {
		t.Errorf("unknown offset type: %d", code)
	}
}
