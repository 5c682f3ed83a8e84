package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

// streamDeclare declares a stream through url, waiting until the cluster's
// nodes have told each other that they replicate streams.
func streamDeclare(t *testing.T, url, name string, args amqp.Table) {
	t.Helper()
	a := amqp.Table{"x-queue-type": "stream"}
	for k, v := range args {
		a[k] = v
	}
	testutil.EventuallyNil(t, 15*time.Second, "declare "+name, func() error {
		conn, err := amqp.Dial(url)
		if err != nil {
			return err
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		_, err = ch.QueueDeclare(name, true, false, false, false, a)
		return err
	})
}

// streamStatus reads warren streams stream_status --json.
func streamStatus(t *testing.T, e *cliEnv, name string) (members []string, leader string) {
	t.Helper()
	out := e.mustCLI("streams", "stream_status", name, "--json")
	var q struct {
		Leader  *string  `json:"leader"`
		Members []string `json:"members"`
	}
	if err := json.Unmarshal([]byte(out), &q); err != nil {
		t.Fatalf("stream_status --json: %v\n%s", err, out)
	}
	if q.Leader != nil {
		leader = *q.Leader
	}
	return q.Members, leader
}

func waitStreamMembers(t *testing.T, e *cliEnv, name string, want ...string) {
	t.Helper()
	slices.Sort(want)
	var got []string
	var leader string
	if !testutil.Until(20*time.Second, func() bool {
		got, leader = streamStatus(t, e, name)
		return slices.Equal(got, want) && slices.Contains(want, leader)
	}) {
		t.Fatalf("stream %s: members %v leader %q, want %v", name, got, leader, want)
	}
}

// readStream reads n messages of stream name from first on url.
func readStream(t *testing.T, url, name string, n int) ([]string, error) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	ch.Qos(100, 0, false)
	ds, err := ch.Consume(name, "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
	if err != nil {
		return nil, err
	}
	var out []string
	for len(out) < n {
		select {
		case d := <-ds:
			out = append(out, string(d.Body))
			d.Ack(false)
		case <-time.After(10 * time.Second):
			return out, fmt.Errorf("read %d of %d", len(out), n)
		}
	}
	return out, nil
}

// TestCLIStreamReplicas: issue 25, warren streams add_replica,
// delete_replica and stream_status on a 3-node cluster: a stream on two
// nodes gets a third replica, which receives the whole log; a deleted
// replica's node refuses consumers (RabbitMQ's 406 where no member lives).
func TestCLIStreamReplicas(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	n1, n2, n3 := warrentest.NodeName(0), warrentest.NodeName(1), warrentest.NodeName(2)
	e := &cliEnv{t: t, mgmt: c.Node(1).MgmtURL(), amqpURL: c.Node(1).URL(), vhost: "/"}
	s := "h25-cli-stream"
	streamDeclare(t, c.Node(0).URL(), s, amqp.Table{"x-initial-cluster-size": 2})
	waitStreamMembers(t, e, s, n1, n2)
	{
		conn, _ := amqp.Dial(c.Node(0).URL())
		ch, _ := conn.Channel()
		ch.Confirm(false)
		for i := range 50 {
			dc, err := ch.PublishWithDeferredConfirm("", s, false, false, amqp.Publishing{Body: fmt.Appendf(nil, "m%d", i)})
			if err != nil {
				t.Fatal(err)
			}
			if !dc.Wait() {
				t.Fatalf("publish %d nacked", i)
			}
		}
		conn.Close()
	}
	// n3 is no member: a consumer there is refused as RabbitMQ refuses it
	if _, err := readStream(t, c.Node(2).URL(), s, 1); err == nil || !strings.Contains(err.Error(), "406") {
		t.Fatalf("consume where no replica lives: %v", err)
	}
	out := e.mustCLI("streams", "add_replica", s, n3)
	if want := fmt.Sprintf("Adding a replica for stream %s on node %s...\n", s, n3); out != want {
		t.Errorf("add_replica printed %q, want %q", out, want)
	}
	waitStreamMembers(t, e, s, n1, n2, n3)
	var got []string
	testutil.EventuallyNil(t, 20*time.Second, "the new replica reads the stream", func() error {
		var err error
		got, err = readStream(t, c.Node(2).URL(), s, 50)
		return err
	})
	if got[0] != "m0" || got[49] != "m49" {
		t.Fatalf("the new replica reads %v", got)
	}
	out = e.mustCLI("streams", "stream_status", s)
	if !strings.Contains(out, "Status of stream "+s) || !strings.Contains(out, "members\t"+n1+", "+n2+", "+n3) {
		t.Errorf("stream_status printed:\n%s", out)
	}
	e.mustCLI("streams", "delete_replica", s, n2)
	waitStreamMembers(t, e, s, n1, n3)
	testutil.EventuallyNil(t, 10*time.Second, "n2 refuses consumers", func() error {
		if _, err := readStream(t, c.Node(1).URL(), s, 1); err == nil || !strings.Contains(err.Error(), "406") {
			return fmt.Errorf("consume on a deleted replica's node: %v", err)
		}
		return nil
	})
	// Deleting the leader's own replica moves the leadership first.
	_, leader := streamStatus(t, e, s)
	rest := n1
	if leader == n1 {
		rest = n3
	}
	e.mustCLI("streams", "delete_replica", s, leader)
	waitStreamMembers(t, e, s, rest)
	testutil.EventuallyNil(t, 10*time.Second, "the last replica serves", func() error {
		_, err := readStream(t, c.Node(map[string]int{n1: 0, n3: 2}[rest]).URL(), s, 50)
		return err
	})
	if _, _, err := e.cliErr("streams", "delete_replica", s, rest); err == nil || !strings.Contains(err.Error(), "last_stream_member") {
		t.Errorf("delete the last replica: %v", err)
	}
	// Errors: RabbitMQ's reasons, a failing exit.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"streams", "add_replica", "h25-nosuch", n1}, "404"},
		{[]string{"streams", "add_replica", s, "warren@nosuch"}, "node_not_running"},
		{[]string{"streams", "add_replica", s}, "usage: warren streams add_replica STREAM NODE"},
	} {
		if _, _, err := e.cliErr(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("warren %s: error %v, want one containing %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
	qqDeclare(t, c.Node(0).URL(), "h25-cli-qq", nil)
	// (its group elected: the preferred leader's campaign has ended)
	if !testutil.Until(10*time.Second, func() bool { return c.QueueLeader("/", "h25-cli-qq") >= 0 }) {
		t.Fatal("the quorum queue has no leader")
	}
	if _, _, err := e.cliErr("streams", "add_replica", "h25-cli-qq", n1); err == nil || !strings.Contains(err.Error(), "quorum_queue_not_supported") {
		t.Errorf("add_replica of a quorum queue: %v", err)
	}
}

// TestCLISuperStream: warren streams add_super_stream and
// delete_super_stream make and remove what RabbitMQ's does: a direct
// exchange with x-super-stream, a stream per partition, bindings with
// x-stream-partition-order.
func TestCLISuperStream(t *testing.T) {
	e := newCLIEnv(t)
	e.warrenOnly() // RabbitMQ 3.10's rabbitmq-streams lacks add_super_stream over HTTP
	out := e.mustCLI("streams", "add_super_stream", "h25-invoices", "--partitions", "3", "--max-age", "7D")
	if !strings.Contains(out, "h25-invoices-0, h25-invoices-1, h25-invoices-2") {
		t.Errorf("add_super_stream printed %q", out)
	}
	api := mustAPI(t, e.mgmt)
	raw, err := api.do(http.MethodGet, apiPath("exchanges", "/", "h25-invoices", "bindings", "source"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var bs []struct {
		Destination string         `json:"destination"`
		RoutingKey  string         `json:"routing_key"`
		Arguments   map[string]any `json:"arguments"`
	}
	json.Unmarshal(raw, &bs)
	if len(bs) != 3 {
		t.Fatalf("bindings %s", raw)
	}
	for _, b := range bs {
		want := "h25-invoices-" + b.RoutingKey
		if b.Destination != want || fmt.Sprint(b.Arguments["x-stream-partition-order"]) != b.RoutingKey {
			t.Errorf("binding %+v", b)
		}
	}
	raw, err = api.do(http.MethodGet, apiPath("queues", "/", "h25-invoices-1"), nil)
	if err != nil || !strings.Contains(string(raw), `"type":"stream"`) || !strings.Contains(string(raw), `"x-max-age":"7D"`) {
		t.Fatalf("partition: %v %s", err, raw)
	}
	if _, _, err := e.cliErr("streams", "add_super_stream", "h25-invoices", "--partitions", "2"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("add_super_stream again: %v", err)
	}
	if _, _, err := e.cliErr("streams", "add_super_stream", "h25-x", "--partitions", "2", "--binding-keys", "a,b"); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("both --partitions and --binding-keys: %v", err)
	}
	e.mustCLI("streams", "add_super_stream", "h25-keys", "--binding-keys", "eu,us")
	if _, err := api.do(http.MethodGet, apiPath("queues", "/", "h25-keys-eu"), nil); err != nil {
		t.Errorf("partition h25-keys-eu: %v", err)
	}
	out = e.mustCLI("streams", "delete_super_stream", "h25-invoices")
	if !strings.Contains(out, "deleted") {
		t.Errorf("delete_super_stream printed %q", out)
	}
	for _, p := range []string{"h25-invoices-0", "h25-invoices-2"} {
		if _, err := api.do(http.MethodGet, apiPath("queues", "/", p), nil); !isNotFound(err) {
			t.Errorf("partition %s after delete: %v", p, err)
		}
	}
	if _, err := api.do(http.MethodGet, apiPath("exchanges", "/", "h25-invoices"), nil); !isNotFound(err) {
		t.Errorf("exchange after delete: %v", err)
	}
}
