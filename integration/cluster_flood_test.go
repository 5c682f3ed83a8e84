package integration

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testutil"
)

// TestClusterIdleFloodRejoin: issue 22 must-show 4. With 1,000 idle
// connections held open to each of a node's AMQP, HTTP and cluster ports,
// a restarted peer that dials it rejoins within 5 s, the node's
// management API answers, and publishing with confirms through it goes
// on. (Before issue 22 about 400 idle sockets on the cluster port kept a
// restarted node out, and 256 on the HTTP port made the API answer 503.)
func TestClusterIdleFloodRejoin(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a three-process cluster and 3,000 idle sockets")
	}
	c := startProcCluster(t, 3, procClusterOpts{})
	c.waitClusterReady(t)
	_, ch := rsDial(t, c.URL(2))
	_, err := ch.QueueDeclare("flood-q", true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	rsCheck(t, "declare flood-q", err)

	// warren@n3 (node 2) is flooded: warren@n1 and warren@n2 dial it
	// (the smaller name dials), so a restarted warren@n1 must get through
	// its cluster port.
	nd := c.nodes[2]
	var held []net.Conn
	t.Cleanup(func() {
		for _, cn := range held {
			cn.Close()
		}
	})
	for _, addr := range []string{nd.amqpAddr, nd.mgmtAddr, nd.clusterAddr} {
		for i := range 1000 {
			cn, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatalf("idle connection %d to %s: %v", i, addr, err)
			}
			held = append(held, cn)
		}
	}
	c.Kill(0)
	start := time.Now()
	c.Start(0)
	rejoined := func() error {
		st, err := c.clusterStatus(2) // through the flooded HTTP port
		if err != nil {
			return err
		}
		for _, m := range st.Members {
			if !m.Running {
				return fmt.Errorf("warren@n3 sees %s not running", m.Name)
			}
		}
		return nil
	}
	if err := testutil.UntilNil(30*time.Second, rejoined); err != nil {
		t.Fatalf("the restarted node did not rejoin: %v", err)
	}
	took := time.Since(start)
	t.Logf("warren@n1 restarted and rejoined warren@n3 (3,000 idle sockets on it) in %s", took)
	if took > 5*time.Second {
		t.Fatalf("rejoining took %s, want at most 5 s", took)
	}
	// Publishing through the flooded node goes on.
	_, pch := rsDial(t, c.URL(2))
	rsCheck(t, "confirm select", pch.Confirm(false))
	for i := range 100 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		dc, err := pch.PublishWithDeferredConfirmWithContext(ctx, "", "flood-q", false, false,
			amqp.Publishing{Body: []byte(fmt.Sprint(i))})
		rsCheck(t, "publish", err)
		ok, err := dc.WaitContext(ctx)
		cancel()
		if !ok || err != nil {
			t.Fatalf("publish %d through the flooded node: %v %v", i, ok, err)
		}
	}
}
