package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testutil"
)

// TestProcForceBoot: issue 22, recovery from a lost majority, as
// docs/cluster.md tells it. Two of three nodes are lost for good (kill -9);
// the survivor is stopped, marked with warren node force-boot and
// started: it is the only member of the cluster and of its quorum queue,
// keeps every definition and confirmed message it had, reports the queue
// that had no replica on it as lost, and takes changes again. A lost node
// back with its old data does not disturb it; wiped and joined, it is a
// member again and its quorum replica is grown back.
func TestProcForceBoot(t *testing.T) {
	testutil.Long(t, "loses two of three processes and recovers, about 20 s")
	if testing.Short() {
		t.Skip("runs a three-process cluster")
	}
	c := startProcCluster(t, 3, procClusterOpts{})
	c.waitClusterReady(t)
	cli := func(args ...string) (string, error) {
		out, err := exec.Command(c.bin, args...).CombinedOutput()
		return string(out), err
	}

	_, chA := rsDial(t, c.URL(0))
	_, err := chA.QueueDeclare("fb-qq", true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	rsCheck(t, "declare fb-qq", err)
	rsCheck(t, "declare fb-x", chA.ExchangeDeclare("fb-x", "direct", true, false, false, false, nil))
	rsCheck(t, "bind", chA.QueueBind("fb-qq", "k", "fb-x", false, nil))
	_, chB := rsDial(t, c.URL(1))
	_, err = chB.QueueDeclare("fb-classic-on-n2", true, false, false, false, nil) // homed on n2: lost with it
	rsCheck(t, "declare the classic queue on n2", err)
	rsCheck(t, "confirm mode", chA.Confirm(false))
	const n = 200
	for i := range n {
		dc, err := chA.PublishWithDeferredConfirm("fb-x", "k", false, false, amqp.Publishing{DeliveryMode: 2, Body: fmt.Appendf(nil, "m%d", i)})
		rsCheck(t, "publish", err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ok, err := dc.WaitContext(ctx)
		cancel()
		if err != nil || !ok {
			t.Fatalf("publish %d not confirmed: %v %v", i, ok, err)
		}
	}

	// The majority is lost for good.
	c.Kill(1)
	c.Kill(2)
	c.Stop(0)
	if out, err := cli("node", "force-boot", "--data-dir", t.TempDir()); err == nil || !strings.Contains(out, "is not the data directory of a cluster node") {
		t.Fatalf("force-boot of an empty directory: %v\n%s", err, out)
	}
	out, err := cli("node", "force-boot", "--data-dir", c.nodes[0].dataDir)
	if err != nil || !strings.Contains(out, "only member of its cluster") {
		t.Fatalf("force-boot: %v\n%s", err, out)
	}
	c.Start(0)
	c.waitMembers(t, 0)

	if err := testutil.UntilNil(30*time.Second, func() error {
		var q struct {
			Members  []string `json:"members"`
			Leader   string   `json:"leader"`
			Messages int      `json:"messages"`
		}
		if err := c.getJSON(0, "/api/queues/%2F/fb-qq", &q); err != nil {
			return err
		}
		if !slices.Equal(q.Members, []string{c.Name(0)}) || q.Leader != c.Name(0) || q.Messages != n {
			return fmt.Errorf("fb-qq: %+v", q)
		}
		return nil
	}); err != nil {
		t.Fatalf("the quorum queue after the forced start: %v", err)
	}
	if err := testutil.UntilNil(10*time.Second, func() error {
		if lg := c.Log(0); !strings.Contains(lg, "had no replica on this node") || !strings.Contains(lg, "fb-classic-on-n2") {
			return fmt.Errorf("no report of the lost classic queue in the log")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// The mark goes once the queue records are shrunk too.
	if err := testutil.UntilNil(10*time.Second, func() error {
		if _, err := os.Stat(filepath.Join(c.nodes[0].dataDir, "force-boot")); !os.IsNotExist(err) {
			return fmt.Errorf("the force-boot mark is still there: %v", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, chA = rsDial(t, c.URL(0))
	rsCheck(t, "declare after the forced start", func() error {
		_, err := chA.QueueDeclare("fb-after", true, false, false, false, nil)
		return err
	}())
	rsCheck(t, "the binding is kept", chA.Publish("fb-x", "k", false, false, amqp.Publishing{Body: []byte("after")}))
	got := map[string]bool{}
	deliveries, err := chA.Consume("fb-qq", "", false, false, false, false, nil)
	rsCheck(t, "consume", err)
	for len(got) < n+1 {
		select {
		case d := <-deliveries:
			got[string(d.Body)] = true
			d.Ack(false)
		case <-time.After(10 * time.Second):
			t.Fatalf("consumed %d of %d messages", len(got), n+1)
		}
	}
	for i := range n {
		if !got[fmt.Sprintf("m%d", i)] {
			t.Fatalf("confirmed message m%d lost", i)
		}
	}

	// A lost node back with its old data: refused, the survivor goes on.
	c.Start(1)
	time.Sleep(2 * time.Second)
	st, err := c.clusterStatus(0)
	if err != nil || st.Leader != c.Name(0) || len(st.Members) != 1 {
		t.Fatalf("the survivor with an old member back: %+v %v", st, err)
	}
	_, err = chA.QueueDeclare("fb-after-2", true, false, false, false, nil)
	rsCheck(t, "declare with an old member back", err)
	c.Stop(1)

	// Wiped and joined, it is a member again; its replica grows back.
	if err := os.RemoveAll(c.nodes[1].dataDir); err != nil {
		t.Fatal(err)
	}
	c.nodes[1].extra = []string{"--cluster-join"}
	c.Start(1)
	if out, err := cli("cluster", "join", c.Name(1), c.nodes[1].clusterAddr, "--url", c.MgmtURL(0)); err != nil || !strings.Contains(out, "Added node") {
		t.Fatalf("cluster join: %v\n%s", err, out)
	}
	c.waitMembers(t, 0, 1)
	if out, err := cli("queues", "grow", c.Name(1), "all", "--url", c.MgmtURL(0)); err != nil {
		t.Fatalf("queues grow: %v\n%s", err, out)
	}
	if err := testutil.UntilNil(30*time.Second, func() error {
		var q struct {
			Members []string `json:"members"`
		}
		if err := c.getJSON(1, "/api/queues/%2F/fb-qq", &q); err != nil {
			return err
		}
		if len(q.Members) != 2 {
			return fmt.Errorf("fb-qq members %v", q.Members)
		}
		return nil
	}); err != nil {
		t.Fatalf("grown back: %v", err)
	}
}
