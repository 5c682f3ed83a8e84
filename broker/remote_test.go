package broker

import (
	"math/rand/v2"
	"testing"

	"github.com/warrenmq/warren/amqp"
)

// issue 13 (remote queues): publishing to a local queue allocates nothing
// more than before, on a single node and on a cluster node whose queue is
// homed on itself (the remote-queue check is a field compare).
func TestLocalPublishAllocs(t *testing.T) {
	for _, node := range []string{"", "warren@a"} {
		br := New(Config{Node: node})
		v := br.VHost("/")
		q, _, _, err := v.DeclareQueue(QueueSpec{Name: "q", Home: node}, false)
		if err != nil {
			t.Fatal(err)
		}
		if !q.ServedHere() {
			t.Fatalf("node %q: queue homed here is not local", node)
		}
		var r Router
		m := &Message{RoutingKey: "q", Body: make([]byte, 16), Props: amqp.Properties{DeliveryMode: 1}}
		n := testing.AllocsPerRun(1000, func() {
			res, err := v.Publish(&r, "", m)
			if err != nil || res.Routed != 1 || res.Durable.Pending() {
				t.Fatalf("publish: %+v %v", res, err)
			}
			if _, _, ok := q.Get(true); !ok {
				t.Fatal("empty")
			}
		})
		if n != 0 {
			t.Fatalf("node %q: %v allocations per publish+get to a local queue, want 0", node, n)
		}
	}
}

// issue 13 (remote queues): a publish routed to a remote queue with no
// peers installed fails its confirm rather than pretending success, and
// still counts as routed (mandatory); definitions work (a declare answers
// counts of 0), data-plane calls find nothing.
func TestRemotePublishWithoutPeersFails(t *testing.T) {
	br := New(Config{Node: "warren@a"})
	v := br.VHost("/")
	if _, _, _, err := v.DeclareQueue(QueueSpec{Name: "rq", Home: "warren@b"}, false); err != nil {
		t.Fatal(err)
	}
	var r Router
	res, err := v.Publish(&r, "", &Message{RoutingKey: "rq", Body: []byte("x")})
	if err != nil || res.Routed != 1 || !res.Failed {
		t.Fatalf("publish to a remote queue without peers: %+v %v; want routed and failed", res, err)
	}
	if _, _, _, err := v.DeclareQueue(QueueSpec{Name: "rq", Home: "warren@b"}, true); err != nil {
		t.Fatalf("passive declare of a remote queue without peers: %v", err)
	}
	if _, _, ok := v.Queue("rq").Get(true); ok {
		t.Fatal("get from a remote queue without peers found a message")
	}
}

// issue 13 (remote queues): malformed peer input never panics: random
// and truncated messages and calls are dropped or answered with an error.
func TestPeerInputGarbage(t *testing.T) {
	br := New(Config{Node: "warren@a"})
	v := br.VHost("/")
	if _, _, _, err := v.DeclareQueue(QueueSpec{Name: "q", Home: "warren@a"}, false); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ops := []byte{opEnqueue, opEnqueued, opDeliver, opSettle, opCancel, opCanceled, opBarrier, opStale}
	calls := []byte{callConsume, callGet, callPurge, callCounts, callDelete, callBrowse}
	valid := (&Queue{vhost: v, Name: "q"}).appendRef(nil, opSettle)
	for i := 0; i < 2000; i++ {
		n := rng.IntN(40)
		b := make([]byte, 1+n)
		for j := range b {
			b[j] = byte(rng.IntN(256))
		}
		b[0] = ops[rng.IntN(len(ops))]
		if i%3 == 0 { // a valid queue reference, then garbage
			b = append(append([]byte{b[0]}, valid[1:]...), b[1:]...)
		}
		br.HandlePeerMessage("warren@b", b)
		// Calls start with a barrier id: 0 has nothing to wait for.
		c := append([]byte{calls[rng.IntN(len(calls))], 0}, b[1:]...)
		_, _ = br.HandlePeerCall("warren@b", c)
	}
}
