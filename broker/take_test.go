package broker

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/clock"
)

// Take walks a queue in delivery order, in memory and on disk, budget by
// budget, takes the messages that match and leaves the others where they
// are (spilled ones stay on disk); Return puts taken messages back where
// they were, on disk too.
func TestTake(t *testing.T) {
	v := pagingVHost(t, 16)
	q, _, _, err := v.DeclareQueue(QueueSpec{Name: "take", Durable: true}, false)
	noErr(t, err)
	var r Router
	var all []string
	for i := range 100 {
		body := fmt.Sprintf("%c%02d", "ab"[i%2], i)
		all = append(all, body)
		m := &Message{RoutingKey: "take", Body: []byte(body), Props: amqp.Properties{DeliveryMode: 2}}
		_, err := v.Publish(&r, "", m)
		noErr(t, err)
	}
	spilled := func() int { q.mu.Lock(); defer q.mu.Unlock(); return q.m.PagedN() }
	if spilled() < 80 {
		t.Fatalf("%d of 100 spilled with a window of 16", spilled())
	}
	contents := func() []string {
		var out []string
		q.Browse(0, func(b Browsed) bool {
			if b.Redelivered {
				t.Fatalf("%s is marked redelivered", b.Msg.Body)
			}
			out = append(out, string(b.Msg.Body))
			return true
		})
		return out
	}
	isA := func(m *Message) bool { return m.Body[0] == 'a' }

	// Budget 7: many calls, each message examined once.
	var cur TakeCursor
	var taken []Delivery
	upto := q.LastSeq()
	for calls := 0; ; calls++ {
		ds, done := q.Take(&cur, 0, 7, upto, isA)
		taken = append(taken, ds...)
		if done {
			break
		}
		if calls > 100 {
			t.Fatal("Take does not end")
		}
	}
	var got []string
	for _, d := range taken {
		got = append(got, string(d.Msg.Body))
	}
	wantA := slices.DeleteFunc(slices.Clone(all), func(s string) bool { return s[0] != 'a' })
	wantB := slices.DeleteFunc(slices.Clone(all), func(s string) bool { return s[0] != 'b' })
	if !slices.Equal(got, wantA) || cur.Skipped != 50 {
		t.Fatalf("taken %v (skipped %d), want %v (50)", got, cur.Skipped, wantA)
	}
	if c := contents(); !slices.Equal(c, wantB) {
		t.Fatalf("left %v, want %v", c, wantB)
	}
	if n := spilled(); n < 40 {
		t.Fatalf("%d still spilled after taking: the b messages were read into memory", n)
	}
	if st := q.Stats(); st.Unacked != 50 || st.Ready != 50 {
		t.Fatalf("ready %d, unacked %d; want 50 and 50", st.Ready, st.Unacked)
	}

	// Returned, the a messages are back where they were, the spilled ones
	// on disk again; returned as redelivered, they say so.
	q.Return(taken[10:], false)
	q.Return(taken[:10], false)
	if c := contents(); !slices.Equal(c, all) {
		t.Fatalf("after Return: %v, want %v", c, all)
	}
	if n := spilled(); n < 80 {
		t.Fatalf("%d spilled after Return, want the spilled ones back on disk", n)
	}
	if st := q.Stats(); st.Unacked != 0 || st.Ready != 100 || st.Persistent != 100 || st.ReadyBytes != 300 {
		t.Fatalf("after Return: %+v", st)
	}

	// A bounded take, acked; then a take returned as redelivered.
	cur = TakeCursor{}
	ds, _ := q.Take(&cur, 3, 1000, q.LastSeq(), isA)
	q.Ack(ds)
	cur = TakeCursor{}
	ds, _ = q.Take(&cur, 0, 1000, q.LastSeq(), func(m *Message) bool { return string(m.Body) == "a90" })
	if len(ds) != 1 {
		t.Fatalf("took %d a90", len(ds))
	}
	q.Return(ds, true)
	var order []string
	for {
		d, _, ok := q.Get(true)
		if !ok {
			break
		}
		if string(d.Msg.Body) == "a90" != d.Redelivered {
			t.Fatalf("%s redelivered=%v", d.Msg.Body, d.Redelivered)
		}
		order = append(order, string(d.Msg.Body))
	}
	if want := all[6:]; !slices.Equal(order, append([]string{"b01", "b03", "b05"}, want...)) {
		t.Fatalf("drained %v", order)
	}
}

// TestTakeWhileTheQueueReadsOn: the queue reads its log into memory
// between two Take calls (a consumer drains its head); Take still examines
// every message once, wherever it is when Take gets to it.
func TestTakeWhileTheQueueReadsOn(t *testing.T) {
	v := pagingVHost(t, 16)
	q, _, _, err := v.DeclareQueue(QueueSpec{Name: "take", Durable: true}, false)
	noErr(t, err)
	var r Router
	for i := range 200 {
		m := &Message{RoutingKey: "take", Body: []byte(fmt.Sprintf("%c%03d", "ab"[i%2], i)), Props: amqp.Properties{DeliveryMode: 2}}
		_, err := v.Publish(&r, "", m)
		noErr(t, err)
	}
	isA := func(m *Message) bool { return m.Body[0] == 'a' }
	var cur TakeCursor
	upto := q.LastSeq()
	taken := 0
	for range 4 { // through memory and some way into the log
		ds, _ := q.Take(&cur, 0, 10, upto, isA)
		taken += len(ds)
	}
	if !cur.havePos {
		t.Fatal("the walk has not reached the log yet")
	}
	// A consumer takes 100 from the head: the queue reads past cur.pos.
	got := 0
	for range 100 {
		d, _, ok := q.Get(true)
		if !ok {
			t.Fatal("queue empty")
		}
		if isA(d.Msg) {
			got++
		}
	}
	for {
		ds, done := q.Take(&cur, 0, 10, upto, isA)
		taken += len(ds)
		if done {
			break
		}
	}
	q.Browse(0, func(b Browsed) bool {
		if isA(b.Msg) {
			t.Errorf("%s left behind", b.Msg.Body)
		}
		return true
	})
	if taken+got != 100 {
		t.Fatalf("taken %d, consumed %d: want 100 a messages in all", taken, got)
	}
}

// pagingVHost returns the vhost "/" of a broker with a message store and
// a queue window of window messages, closed at the end of the test.
func pagingVHost(t *testing.T, window int) *VHost {
	t.Helper()
	ms, err := OpenMsgStore(t.TempDir(), nil)
	noErr(t, err)
	t.Cleanup(func() { ms.Close(false) })
	b := New(Config{Store: newMemStore(), Messages: ms, QueueWindow: window})
	noErr(t, b.Recover())
	return b.VHost("/")
}

// TestTakeReturnExpires: a message taken in place and returned still
// expires on time, wherever it sits (issue 12: the machine's property
// tests found that its tombstone hid the returned entry from the expiry
// timer, which then left it to expire only once at the head).
func TestTakeReturnExpires(t *testing.T) {
	c := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	v := New(Config{Clock: c}).VHost("/")
	q, _, _, err := v.DeclareQueue(QueueSpec{Name: "ttl", Args: amqp.Table{"x-message-ttl": int64(1000)}}, false)
	noErr(t, err)
	var r Router
	for _, b := range []string{"a", "b", "c"} {
		_, err := v.Publish(&r, "", &Message{RoutingKey: "ttl", Body: []byte(b)})
		noErr(t, err)
	}
	var cur TakeCursor
	ds, _ := q.Take(&cur, 0, 100, q.LastSeq(), func(m *Message) bool { return string(m.Body) == "b" })
	if len(ds) != 1 {
		t.Fatalf("took %d, want 1", len(ds))
	}
	q.Return(ds, false)
	c.Advance(1001 * time.Millisecond)
	s := q.Stats()
	if s.Ready != 0 || s.Dropped[ReasonExpired] != 3 {
		t.Fatalf("after the TTL: %d ready, %d expired; want 0 and 3", s.Ready, s.Dropped[ReasonExpired])
	}
}
