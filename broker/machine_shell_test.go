package broker

import (
	"testing"

	"github.com/warrenmq/warren/amqp"
)

// collectingSink keeps what it is given, up to limit (0: no limit).
type collectingSink struct {
	ds    []Delivery
	limit int
}

func (s *collectingSink) Deliver(c *Consumer, d Delivery) bool {
	if s.limit > 0 && len(s.ds) >= s.limit {
		return false
	}
	s.ds = append(s.ds, d)
	return true
}
func (s *collectingSink) Cancelled(c *Consumer) {}

// TestQueueSettlesAfterCancel: issue 12. The queue machine tracks the
// messages each consumer checked out; a cancelled consumer keeps them
// until its channel settles them (basic.cancel leaves them unacked), and
// acks, requeues and rejects after the cancel still count. A sink that
// refuses (its prefetch is full) is offered nothing more in that
// dispatch, and gets the rest once it calls Dispatch.
func TestQueueSettlesAfterCancel(t *testing.T) {
	v := New(Config{}).VHost("/")
	q, _, _, err := v.DeclareQueue(QueueSpec{Name: "q", Args: amqp.Table{"x-delivery-limit": int64(5)}}, false)
	noErr(t, err)
	var r Router
	for _, b := range []string{"a", "b", "c", "d"} {
		_, err := v.Publish(&r, "", &Message{RoutingKey: "q", Body: []byte(b)})
		noErr(t, err)
	}
	s1 := &collectingSink{limit: 3}
	c1 := &Consumer{Tag: "c1", Sink: s1}
	noErr(t, q.AddConsumer(c1))
	if st := q.Stats(); len(s1.ds) != 3 || st.Unacked != 3 || st.Ready != 1 {
		t.Fatalf("after consume: %d delivered, %d unacked, %d ready; want 3, 3, 1", len(s1.ds), st.Unacked, st.Ready)
	}
	q.RemoveConsumer(c1)
	q.Ack(s1.ds[0:1])
	q.Requeue(s1.ds[1:2], false)
	q.Reject(s1.ds[2:3])
	st := q.Stats()
	if st.Unacked != 0 || st.Ready != 2 || st.Acked != 1 || st.Dropped[ReasonRejected] != 1 {
		t.Fatalf("after settling: %d unacked, %d ready, %d acked, %d dropped; want 0, 2, 1, 1",
			st.Unacked, st.Ready, st.Acked, st.Dropped[ReasonRejected])
	}
	s2 := &collectingSink{limit: 1}
	c2 := &Consumer{Tag: "c2", Sink: s2}
	noErr(t, q.AddConsumer(c2))
	if len(s2.ds) != 1 || string(s2.ds[0].Msg.Body) != "b" || !s2.ds[0].Redelivered || s2.ds[0].DeliveryCount != 1 {
		t.Fatalf("the requeued message first, redelivered with a count of 1: got %+v", s2.ds)
	}
	s2.limit = 0
	q.Dispatch()
	if len(s2.ds) != 2 || string(s2.ds[1].Msg.Body) != "d" {
		t.Fatalf("after Dispatch: %d delivered", len(s2.ds))
	}
	q.Ack(s2.ds)
	if st := q.Stats(); st.Unacked != 0 || st.Ready != 0 || st.Acked != 3 {
		t.Fatalf("at the end: %+v", st)
	}
}
