package amqp

import (
	"bytes"
	"reflect"
	"testing"
)

func TestAppendDeliverFrameMatchesGenerated(t *testing.T) {
	for _, m := range []BasicDeliver{
		{ConsumerTag: "ctag", DeliveryTag: 1<<40 + 7, Redelivered: true, Exchange: "x", RoutingKey: "k.k"},
		{ConsumerTag: "", DeliveryTag: 0, Exchange: "", RoutingKey: ""},
	} {
		want := AppendMethodFrame([]byte("pre"), 7, &m)
		got := AppendDeliverFrame([]byte("pre"), 7, m.ConsumerTag, m.DeliveryTag, m.Redelivered, m.Exchange, m.RoutingKey)
		if !bytes.Equal(got, want) {
			t.Fatalf("%+v:\n got %x\nwant %x", m, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		AppendDeliverFrame(make([]byte, 0, 128), 1, "c", 1, false, "e", "r")
	}); n > 1 {
		t.Fatalf("%v allocations, want only the buffer", n)
	}
}

func TestDecodeReuseMatchesDecode(t *testing.T) {
	var reused BasicPublish
	for _, m := range []BasicPublish{
		{Exchange: "ex", RoutingKey: "rk", Mandatory: true},
		{Exchange: "ex", RoutingKey: "rk"},
		{Exchange: "", RoutingKey: "other", Immediate: true},
	} {
		args := m.Append(nil)[4:]
		var fresh BasicPublish
		errFresh := fresh.Decode(args)
		errReuse := reused.DecodeReuse(args)
		if !reflect.DeepEqual(fresh, reused) || (errFresh == nil) != (errReuse == nil) {
			t.Fatalf("Decode %+v (%v), DecodeReuse %+v (%v)", fresh, errFresh, reused, errReuse)
		}
	}
	for _, bad := range [][]byte{nil, {0}, {0, 0, 5, 'a'}, {0, 0, 0, 0, 0, 9}} {
		var fresh, reused BasicPublish
		e1, e2 := fresh.Decode(bad), reused.DecodeReuse(bad)
		if e1 == nil || e2 == nil || e1.Error() != e2.Error() {
			t.Fatalf("%x: Decode %v, DecodeReuse %v", bad, e1, e2)
		}
	}
	args := (&BasicPublish{Exchange: "ex", RoutingKey: "rk"}).Append(nil)[4:]
	if n := testing.AllocsPerRun(100, func() { reused.DecodeReuse(args) }); n != 0 {
		t.Fatalf("DecodeReuse of unchanged names allocates %v times", n)
	}
}

// FuzzDecodeReuse checks DecodeReuse against Decode on any input, with a
// struct that already holds names from an earlier decode.
func FuzzDecodeReuse(f *testing.F) {
	f.Add((&BasicPublish{Exchange: "ex", RoutingKey: "rk", Mandatory: true}).Append(nil)[4:])
	f.Add([]byte{0, 0, 2, 'e', 'x', 0, 1})
	f.Fuzz(func(t *testing.T, args []byte) {
		var fresh BasicPublish
		reused := BasicPublish{Exchange: "ex", RoutingKey: "rk"}
		e1, e2 := fresh.Decode(args), reused.DecodeReuse(args)
		if (e1 == nil) != (e2 == nil) || e1 != nil && e1.Error() != e2.Error() {
			t.Fatalf("errors differ: %v vs %v", e1, e2)
		}
		if e1 == nil && !reflect.DeepEqual(fresh, reused) {
			t.Fatalf("Decode %+v, DecodeReuse %+v", fresh, reused)
		}
	})
}
