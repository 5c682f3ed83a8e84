package integration

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
)

// everyFieldType is a field table holding every AMQP field type RabbitMQ
// knows (t b B s u I i l f d D T S x V A F) at its limits: min and max
// integers, extreme and negative-zero floats, decimals of many scales,
// empty and long strings, longstrs and keys that are not UTF-8, byte
// arrays with every byte, empty and nested tables and arrays, and a
// nesting 60 deep.
func everyFieldType() amqp.Table {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	scalars := []any{true, false, int8(math.MinInt8), int8(math.MaxInt8), uint8(0), uint8(math.MaxUint8),
		int16(math.MinInt16), int16(math.MaxInt16), uint16(math.MaxUint16), int32(math.MinInt32), int32(math.MaxInt32),
		uint32(math.MaxUint32), int64(math.MinInt64), int64(math.MaxInt64), float32(1.5), float32(math.MaxFloat32),
		float32(math.SmallestNonzeroFloat32), float32(math.Copysign(0, -1)), 2.25, math.MaxFloat64, -math.MaxFloat64,
		math.SmallestNonzeroFloat64, math.Copysign(0, -1), time.Unix(0, 0).UTC(), time.Unix(1700000000, 0).UTC(),
		time.Unix(-1, 0).UTC(), "", "plain", "not utf-8 \xff\xfe\x00\x01", all, []byte{}, nil}
	t := amqp.Table{"hd-empty-table": amqp.Table{}, "hd-empty-array": []any{}, "hd-array": scalars,
		"hd-long-string": strings.Repeat("long\xff", 2000), "hd-key-\xff\xfe\x00": "v", "": "empty key"}
	for i, v := range scalars {
		t[fmt.Sprintf("hd-%02d", i)] = v
	}
	for _, s := range []uint8{0, 1, 2, 9, 127, 255} {
		for _, v := range []int32{math.MinInt32, -1, 0, 1, math.MaxInt32} {
			t[fmt.Sprintf("hd-dec-%d-%d", s, v)] = amqp.Decimal{Scale: s, Value: v}
		}
	}
	nested := amqp.Table{}
	for k, v := range t {
		nested[k] = v
	}
	t["hd-nested"] = amqp.Table{"again": nested, "list": []any{nested, []any{nested}}}
	deep := any("bottom")
	for i := 0; i < 60; i++ {
		if i%2 == 0 {
			deep = amqp.Table{"d": deep}
		} else {
			deep = []any{deep}
		}
	}
	t["hd-deep"] = deep
	return t
}

// rtNames are names RabbitMQ 3.10 accepts over AMQP: every byte 0x00 to
// 0x7F, and multi-byte sequences its UTF-8 check passes though Go's
// rejects (surrogates, code points up to U+1FFFFF).
func rtNames() []string {
	var low []byte
	for b := 0; b < 0x80; b++ {
		low = append(low, byte(b))
	}
	return []string{"hD-rt-" + string(low), "hD-rt-\xed\xa0\x80\xed\xbf\xbf\xf4\x90\x80\x80\xf7\xbf\xbf\xbf\xef\xbf\xbe\xc2\x80\U0010ffff"}
}

// TestPersistenceRoundTrip is issue 11's "persistence round trip": durable
// queues, exchanges and bindings (queue and exchange destinations) whose
// arguments hold every field type, with names and routing keys made of
// every byte RabbitMQ allows in them, come back identical after a
// restart: passive declares find them, re-declaring with the same
// arguments is equivalent (no 406), unbinding with the same arguments
// removes the binding (the arguments match byte for byte), the broker's
// own view of the arguments re-encodes to the same bytes, and the
// management API reports the same definitions and bindings, as valid
// JSON. A message carrying every field type in its headers is
// dead-lettered through such a queue and arrives with those headers
// intact and an x-death naming the queue byte for byte.
func TestPersistenceRoundTrip(t *testing.T) {
	tg := newMgmtWarren(t)
	addr := strings.TrimPrefix(strings.TrimSuffix(tg.amqpURL, "/"), "amqp://guest:guest@")
	if _, _, err := net.SplitHostPort(addr); err != nil {
		t.Fatalf("address from %s: %v", tg.amqpURL, err)
	}
	args := everyFieldType()
	names := rtNames()
	var decls []amqp.Method
	for i, n := range names {
		x, x2 := "hD-rtx-"+n, "hD-rtx2-"+n
		decls = append(decls,
			&amqp.QueueDeclare{Queue: n, Durable: true, Arguments: args},
			&amqp.ExchangeDeclare{Exchange: x, Type: "direct", Durable: true, Arguments: args},
			&amqp.ExchangeDeclare{Exchange: x2, Type: "topic", Durable: true, Arguments: args},
			&amqp.QueueBind{Queue: n, Exchange: x, RoutingKey: n, Arguments: args},
			&amqp.QueueBind{Queue: n, Exchange: x, RoutingKey: n},
			&amqp.ExchangeBind{Destination: x2, Source: x, RoutingKey: n, Arguments: args},
			&amqp.ExchangeBind{Destination: x2, Source: "amq.direct", RoutingKey: fmt.Sprint(i), Arguments: args})
	}
	dlq := "hD-rt-dlq"
	decls = append(decls, &amqp.QueueDeclare{Queue: dlq, Durable: true},
		&amqp.QueueBind{Queue: dlq, Exchange: "amq.fanout"},
		&amqp.QueueDeclare{Queue: names[0] + "dl", Durable: true, Arguments: amqp.Table{"x-dead-letter-exchange": "amq.fanout"}})
	c := rawDial(t, addr)
	must(t, c.handshake(0, 0))
	must(t, c.openChannel(1))
	run := func(ms []amqp.Method, what string) {
		t.Helper()
		for _, m := range ms {
			must(t, c.sendMethod(1, m))
			_, r, err := c.readMethod()
			if err != nil {
				t.Fatalf("%s %s: %v", what, m.Name(), err)
			}
			if !strings.HasSuffix(r.Name(), "-ok") {
				t.Fatalf("%s %s: got %s %+v", what, m.Name(), r.Name(), r)
			}
		}
	}
	run(decls, "declare")

	type snapshot struct {
		args        map[string]string
		defs, binds any
	}
	take := func() snapshot {
		s := snapshot{args: map[string]string{}}
		v := tg.w.Broker().VHost("/")
		for _, n := range names {
			q := v.Queue(n)
			if q == nil {
				t.Fatalf("queue %q missing", n)
			}
			s.args["q "+n] = string(amqp.AppendTable(nil, q.Args))
			for _, x := range []string{"hD-rtx-" + n, "hD-rtx2-" + n} {
				if e := v.Exchange(x); e != nil {
					s.args["x "+x] = string(amqp.AppendTable(nil, e.Args))
				}
			}
		}
		for _, bi := range v.Bindings() {
			if strings.HasPrefix(bi.Destination, "hD-rt") {
				s.args[fmt.Sprintf("b %q %q %q", bi.Source, bi.Destination, bi.RoutingKey)+" "+string(amqp.AppendTable(nil, bi.Args))] = ""
			}
		}
		// Lists whose order is not defined (two bindings may differ in
		// their arguments only) are compared sorted.
		s.defs = tg.getJSON("/api/definitions")
		if m, ok := s.defs.(map[string]any); ok {
			for k, v := range m {
				if l, ok := v.([]any); ok {
					m[k] = sortedByJSON(l)
				}
			}
		}
		l, _ := tg.getJSON("/api/bindings/%2F").([]any)
		s.binds = sortedByJSON(l)
		// The API lists each queue with its arguments (as JSON has them:
		// invalid UTF-8 as U+FFFD). Warren's GET /api/queues/{vhost}/{name}
		// answers 404 for a name holding NUL (RabbitMQ 200): the list
		// is used instead.
		qs, _ := tg.getJSON("/api/queues/%2F").([]any)
		for _, n := range names {
			js, _ := json.Marshal(n)
			var jn string
			_ = json.Unmarshal(js, &jn)
			found := false
			for _, q := range qs {
				if q, _ := q.(map[string]any); q["name"] == jn {
					a, _ := q["arguments"].(map[string]any)
					found = len(a) == len(args)
				}
			}
			if !found {
				t.Errorf("/api/queues/%%2F: queue %q not listed with its %d arguments", n, len(args))
			}
		}
		return s
	}
	before := take()
	if got, want := before.args["q "+names[0]], string(amqp.AppendTable(nil, args)); got != want {
		t.Fatalf("queue arguments before a restart differ from those declared")
	}

	tg.w.Restart()
	after := take()
	for k, v := range before.args {
		if w, ok := after.args[k]; !ok || w != v {
			t.Errorf("after a restart %.80q: present %v, same bytes %v", k, ok, w == v)
		}
	}
	if len(after.args) != len(before.args) {
		t.Errorf("%d definitions after a restart, %d before", len(after.args), len(before.args))
	}
	if !reflect.DeepEqual(before.defs, after.defs) {
		b1, _ := json.Marshal(before.defs)
		b2, _ := json.Marshal(after.defs)
		t.Errorf("/api/definitions differs after a restart:\nbefore %.2000s\nafter  %.2000s", b1, b2)
	}
	if !reflect.DeepEqual(before.binds, after.binds) {
		t.Errorf("/api/bindings differs after a restart")
	}

	c = rawDial(t, addr)
	must(t, c.handshake(0, 0))
	must(t, c.openChannel(1))
	var again, passive []amqp.Method
	for _, m := range decls {
		switch m := m.(type) {
		case *amqp.QueueDeclare:
			p := *m
			p.Passive, p.Arguments = true, nil
			passive = append(passive, &p)
			again = append(again, m)
		case *amqp.ExchangeDeclare:
			p := *m
			p.Passive, p.Arguments = true, nil
			passive = append(passive, &p)
			again = append(again, m)
		}
	}
	run(passive, "passive declare after a restart")
	run(again, "re-declare with the same arguments after a restart")

	// Dead-letter a message with every field type in its headers.
	headers := everyFieldType()
	delete(headers, "hd-deep") // RabbitMQ's x-death makes the headers one level deeper
	b := amqp.AppendMethodFrame(nil, 1, &amqp.BasicPublish{RoutingKey: names[0] + "dl"})
	b = amqp.AppendHeaderFrame(b, 1, 60, 2, &amqp.Properties{Flags: amqp.FlagHeaders | amqp.FlagDeliveryMode, DeliveryMode: 2, Headers: headers})
	b = amqp.AppendBodyFrames(b, 1, []byte("dl"), 131072)
	get := func(q string) (*amqp.Properties, bool) {
		must(t, c.sendMethod(1, &amqp.BasicGet{Queue: q, NoAck: true}))
		_, m, err := c.readMethod()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := m.(*amqp.BasicGetOk); !ok {
			return nil, false
		}
		c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		f, err := c.r.ReadFrame()
		if err != nil || f.Type != amqp.FrameHeader {
			t.Fatalf("content header: %v %v", f.Type, err)
		}
		_, size, p, err := amqp.DecodeHeader(f.Payload)
		if err != nil {
			t.Fatalf("content header: %v", err)
		}
		for n := uint64(0); n < size; {
			f, err := c.r.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			n += uint64(len(f.Payload))
		}
		return &p, true
	}
	// Publish, take it (with ack) and reject it: it is dead-lettered.
	must(t, c.write(b))
	must(t, c.sendMethod(1, &amqp.BasicGet{Queue: names[0] + "dl"}))
	_, m, err := c.readMethod()
	if err != nil {
		t.Fatal(err)
	}
	gok, ok := m.(*amqp.BasicGetOk)
	if !ok {
		t.Fatalf("got %s", m.Name())
	}
	for i := 0; i < 2; i++ {
		if _, err := c.r.ReadFrame(); err != nil {
			t.Fatal(err)
		}
	}
	must(t, c.sendMethod(1, &amqp.BasicReject{DeliveryTag: gok.DeliveryTag, Requeue: false}))
	var dp *amqp.Properties
	waitFor(t, "the dead letter in "+dlq, func() bool {
		dp, ok = get(dlq)
		return ok
	})
	for k, v := range headers {
		if got := dp.Headers[k]; string(amqp.AppendTable(nil, amqp.Table{k: got})) != string(amqp.AppendTable(nil, amqp.Table{k: v})) {
			t.Errorf("dead-lettered header %q: got %#v, want %#v", k, got, v)
		}
	}
	deaths, _ := dp.Headers["x-death"].([]any)
	if len(deaths) != 1 {
		t.Fatalf("x-death: %#v", dp.Headers["x-death"])
	}
	d, _ := deaths[0].(amqp.Table)
	if d["queue"] != names[0]+"dl" || d["reason"] != "rejected" || d["exchange"] != "" || !reflect.DeepEqual(d["routing-keys"], []any{names[0] + "dl"}) {
		t.Errorf("x-death: %#v", d)
	}
	if _, ok := d["count"].(int64); !ok {
		t.Errorf("x-death count: %#v", d["count"])
	}

	// Unbinding with the same arguments removes each binding: its
	// arguments came back byte for byte.
	var unbinds []amqp.Method
	for _, m := range decls {
		switch m := m.(type) {
		case *amqp.QueueBind:
			unbinds = append(unbinds, &amqp.QueueUnbind{Queue: m.Queue, Exchange: m.Exchange, RoutingKey: m.RoutingKey, Arguments: m.Arguments})
		case *amqp.ExchangeBind:
			unbinds = append(unbinds, &amqp.ExchangeUnbind{Destination: m.Destination, Source: m.Source, RoutingKey: m.RoutingKey, Arguments: m.Arguments})
		}
	}
	run(unbinds, "unbind after a restart")
	for _, bi := range tg.w.Broker().VHost("/").Bindings() {
		if bi.Source != "" && strings.HasPrefix(bi.Destination, "hD-rt") {
			t.Errorf("binding %q -> %q %q still there after unbinding with the same arguments", bi.Source, bi.Destination, bi.RoutingKey)
		}
	}
}

// sortedByJSON returns l sorted by the JSON encoding of its elements.
func sortedByJSON(l []any) []any {
	key := func(v any) string {
		b, _ := json.Marshal(v)
		return string(b)
	}
	out := append([]any(nil), l...)
	sort.SliceStable(out, func(i, j int) bool { return key(out[i]) < key(out[j]) })
	return out
}
