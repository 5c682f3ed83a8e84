package broker

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/testutil"
)

// Crash states of a dead-letter move (dlmove.go), built record by record
// and recovered (R3.9 made atomic, issue 4): after any crash a persistent
// dead letter is in its source or in all its durable targets, never in
// none, never in both.

type moveFixture struct {
	dir  string
	defs *memStore
	b    *Broker
	ms   *MsgStore
}

func (f *moveFixture) open(t *testing.T) {
	t.Helper()
	ms, err := OpenMsgStore(f.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.ms = ms
	f.b = New(Config{Store: f.defs, Messages: ms})
	if err := f.b.Recover(); err != nil {
		t.Fatal(err)
	}
}

// crash drops the broker without a clean shutdown: logs are closed (what
// was appended is on disk, as after a crash that came after the syncs) and
// no clean marker is written.
func (f *moveFixture) crash(t *testing.T) {
	t.Helper()
	if err := f.ms.Close(false); err != nil {
		t.Fatal(err)
	}
}

func newMoveFixture(t *testing.T) *moveFixture {
	f := &moveFixture{dir: t.TempDir(), defs: newMemStore()}
	f.open(t)
	t.Cleanup(func() { f.ms.Close(false) }) // the store open at the end (issue 12: leak check)
	v := f.b.VHost("/")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(v.DeclareExchange(ExchangeSpec{Name: "dlx", Kind: "fanout", Durable: true}, false))
	for _, n := range []string{"t1", "t2"} {
		_, _, _, err := v.DeclareQueue(QueueSpec{Name: n, Durable: true}, false)
		must(err)
		must(v.Bind("dlx", n, false, "", nil, 0))
	}
	_, _, _, err := v.DeclareQueue(QueueSpec{Name: "src", Durable: true, Args: amqp.Table{"x-dead-letter-exchange": "dlx"}}, false)
	must(err)
	var r Router
	m := &Message{RoutingKey: "src", Body: []byte("payload"), Props: amqp.Properties{DeliveryMode: 2, Flags: amqp.FlagDeliveryMode}}
	if _, err := v.Publish(&r, "", m); err != nil {
		t.Fatal(err)
	}
	return f
}

// stage writes the records of a move of src's message 1 up to a crash
// point: the X intent, then D in the given targets.
func (f *moveFixture) stage(t *testing.T, dTargets ...string) {
	t.Helper()
	v := f.b.VHost("/")
	src := v.Queue("src")
	src.mu.Lock()
	e, _, _ := src.m.Get(0, false) // the message leaves the source's ready messages, as in deadLocked
	b := binary.LittleEndian.AppendUint64(nil, e.Seq)
	for _, n := range []string{"t1", "t2"} {
		b = binary.LittleEndian.AppendUint64(b, v.Queue(n).disk.id)
	}
	if _, err := src.disk.append(recMovedOut, b); err != nil {
		t.Fatal(err)
	}
	src.mu.Unlock()
	cp := deadLetterCopy(e.Msg, "src", ReasonRejected, "dlx", nil, time.Unix(1700000000, 0))
	for _, n := range dTargets {
		tq := v.Queue(n)
		tq.mu.Lock()
		seq := tq.m.Reserve()
		var pre [16]byte
		binary.LittleEndian.PutUint64(pre[:], src.disk.id)
		binary.LittleEndian.PutUint64(pre[8:], e.Seq)
		if _, err := tq.disk.appendMsg(recMovedIn, pre[:], msgHeader{seq: seq}, cp); err != nil {
			t.Fatal(err)
		}
		tq.mu.Unlock()
	}
}

func (f *moveFixture) contents(t *testing.T, q string) []string {
	t.Helper()
	var out []string
	for {
		d, _, ok := f.b.VHost("/").Queue(q).Get(true)
		if !ok {
			return out
		}
		s := string(d.Msg.Body)
		if len(d.Msg.Deaths) > 0 {
			s += "(dead:" + d.Msg.Deaths[0].Reason + ")"
		}
		out = append(out, s)
	}
}

func TestMoveCrashBeforeAnyTargetR3_9(t *testing.T) {
	f := newMoveFixture(t)
	f.stage(t) // X durable, no D anywhere: the move never happened
	f.crash(t)
	f.open(t)
	if got := f.contents(t, "src"); len(got) != 1 || got[0] != "payload" {
		t.Fatalf("source after recovery: %v, want the message back", got)
	}
	for _, n := range []string{"t1", "t2"} {
		if got := f.contents(t, n); len(got) != 0 {
			t.Fatalf("%s after recovery: %v, want empty", n, got)
		}
	}
}

func TestMoveCrashAfterOneTargetR3_9(t *testing.T) {
	f := newMoveFixture(t)
	f.stage(t, "t1") // D reached t1 only: recovery completes the move
	f.crash(t)
	f.open(t)
	if got := f.contents(t, "src"); len(got) != 0 {
		t.Fatalf("source after recovery: %v, want empty (moved)", got)
	}
	for _, n := range []string{"t1", "t2"} {
		if got := f.contents(t, n); len(got) != 1 || got[0] != "payload(dead:rejected)" {
			t.Fatalf("%s after recovery: %v, want the dead letter", n, got)
		}
	}
	// The completion is durable: a second recovery changes nothing.
	f.crash(t)
	f.open(t)
	for _, n := range []string{"src", "t1", "t2"} {
		if got := f.contents(t, n); len(got) != 0 {
			t.Fatalf("%s after a second recovery: %v, want empty (consumed before)", n, got)
		}
	}
}

func TestMoveCrashAfterAllTargetsR3_9(t *testing.T) {
	f := newMoveFixture(t)
	f.stage(t, "t1", "t2") // D everywhere, A in the source not yet written
	f.crash(t)
	f.open(t)
	if got := f.contents(t, "src"); len(got) != 0 {
		t.Fatalf("source after recovery: %v, want empty", got)
	}
	for _, n := range []string{"t1", "t2"} {
		if got := f.contents(t, n); len(got) != 1 {
			t.Fatalf("%s after recovery: %v, want exactly one dead letter", n, got)
		}
	}
}

// TestMoveEndToEndR3_9: a live nack-style dead-lettering of a persistent
// message between durable queues goes through the store and lands once.
func TestMoveEndToEndR3_9(t *testing.T) {
	f := newMoveFixture(t)
	src := f.b.VHost("/").Queue("src")
	d, _, ok := src.Get(false)
	if !ok {
		t.Fatal("no message")
	}
	src.Reject([]Delivery{d})
	if !testutil.Until(5*time.Second, func() bool {
		return f.b.VHost("/").Queue("t2").Stats().Ready == 1 && f.b.VHost("/").Queue("t1").Stats().Ready == 1
	}) {
		t.Fatal("dead letter did not arrive in both targets")
	}
	f.crash(t)
	f.open(t)
	if got := f.contents(t, "src"); len(got) != 0 {
		t.Fatalf("source: %v", got)
	}
	for _, n := range []string{"t1", "t2"} {
		if got := f.contents(t, n); len(got) != 1 || got[0] != "payload(dead:rejected)" {
			t.Fatalf("%s: %v", n, got)
		}
	}
}

// TestWindowShrinksUnderMemoryPressure: while memory is tight a queue
// keeps a sixteenth of its window in memory; the rest goes to disk and
// comes back in order.
func TestWindowShrinksUnderMemoryPressure(t *testing.T) {
	ms, err := OpenMsgStore(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close(false)
	b := New(Config{Store: newMemStore(), Messages: ms, QueueWindow: 256})
	if err := b.Recover(); err != nil {
		t.Fatal(err)
	}
	v := b.VHost("/")
	q, _, _, err := v.DeclareQueue(QueueSpec{Name: "tight"}, false)
	if err != nil {
		t.Fatal(err)
	}
	var r Router
	pub := func(i int) {
		m := &Message{RoutingKey: "tight", Body: []byte{byte(i >> 8), byte(i)}}
		if _, err := v.Publish(&r, "", m); err != nil {
			t.Fatal(err)
		}
	}
	inMemory := func() int {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.m.ReadyN()
	}
	for i := range 100 {
		pub(i)
	}
	if n := inMemory(); n != 100 {
		t.Fatalf("%d of 100 in memory under the window of 256", n)
	}
	b.SetMemoryPressure(true)
	for i := 100; i < 1000; i++ {
		pub(i)
	}
	if n := inMemory(); n != 100 {
		t.Fatalf("%d in memory under pressure, want the 100 already there (window 16)", n)
	}
	b.SetMemoryPressure(false)
	for i := range 1000 {
		d, _, ok := q.Get(true)
		if !ok || int(d.Msg.Body[0])<<8|int(d.Msg.Body[1]) != i {
			t.Fatalf("message %d: ok=%v body=%v", i, ok, d.Msg.Body)
		}
	}
}

// TestDeadLettersPageOut: a durable DLQ that only dead-lettering fills
// (persistent messages moved atomically, dlmove.go) keeps its window in
// memory and the rest on disk, like a queue that publishes fill, and gives
// them back in order.
func TestDeadLettersPageOut(t *testing.T) {
	v := pagingVHost(t, 16)
	_, _, _, err := v.DeclareQueue(QueueSpec{Name: "dlq", Durable: true}, false)
	noErr(t, err)
	src, _, _, err := v.DeclareQueue(QueueSpec{Name: "work", Durable: true,
		Args: amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}}, false)
	noErr(t, err)
	dlq := v.Queue("dlq")
	var r Router
	for i := range 200 {
		_, err := v.Publish(&r, "", &Message{RoutingKey: "work", Body: []byte(fmt.Sprint(i)), Props: amqp.Properties{DeliveryMode: 2}})
		noErr(t, err)
		d, _, ok := src.Get(false)
		if !ok {
			t.Fatal("no message in work")
		}
		src.Reject([]Delivery{d})
	}
	testutil.Until(5*time.Second, func() bool { return dlq.Stats().Ready >= 200 })
	if st := dlq.Stats(); st.Ready != 200 || st.PagedOut < 150 {
		t.Fatalf("dlq: %d ready, %d paged out; want 200, most of them paged out", st.Ready, st.PagedOut)
	}
	for i := range 200 {
		d, _, ok := dlq.Get(true)
		if !ok || string(d.Msg.Body) != fmt.Sprint(i) {
			t.Fatalf("dead letter %d: ok=%v body=%q", i, ok, d.Msg.Body)
		}
	}
}
