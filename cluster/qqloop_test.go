package cluster_test

import (
	"runtime/debug"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	amqpc "github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/warrentest"
)

// TestQuorumConfirmOffRaftLoop: issue 23. A publish to a quorum queue led
// by the publisher's own node is confirmed off the raft loop: the
// confirm (the server's code, through the publish's Durability) runs on
// a goroutine of the broker's, never on qraft's loop, which must only
// apply and go on.
func TestQuorumConfirmOffRaftLoop(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	lead := -1
	eventually(t, 10*time.Second, func() bool {
		for i := range 3 {
			if c.Node(i).Cluster().Meta().Leader() == c.Node(i).Name() {
				lead = i
			}
		}
		return lead >= 0
	}, "a metadata leader")
	nd := c.Node(lead)
	_, ch := dial(t, nd) // client-local: the quorum queue is led by nd
	if _, err := ch.QueueDeclare("qq-loop", true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool { return c.QueueLeader("/", "qq-loop") == lead }, "the publisher's node leads the queue")
	v := nd.Broker().VHost("/")
	for i := range 20 {
		res, err := v.Publish(&broker.Router{}, "", &broker.Message{RoutingKey: "qq-loop", Body: []byte("x"),
			Props: amqpc.Properties{DeliveryMode: 2}})
		if err != nil || res.Routed != 1 || !res.Durable.Pending() {
			t.Fatalf("publish %d: %+v %v", i, res, err)
		}
		stack := make(chan string, 1)
		res.Durable.Notify(func(err error) {
			if err != nil {
				t.Errorf("confirm %d: %v", i, err)
			}
			stack <- string(debug.Stack())
		})
		select {
		case s := <-stack:
			if strings.Contains(s, "qraft.(*Host).run") {
				t.Fatalf("confirm %d ran on the raft loop:\n%s", i, s)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no confirm %d in 10s", i)
		}
	}
}
