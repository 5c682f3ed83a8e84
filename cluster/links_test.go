package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	mapi "github.com/warrenmq/warren/mgmt/api"
	"github.com/warrenmq/warren/warrentest"
)

// TestShovelRunsOnOneNode: issue 24. In a cluster a shovel runs on
// exactly one node (every node's /api/shovels lists it once, with that
// node), and when that node goes, another takes it over and the messages
// keep moving.
func TestShovelRunsOnOneNode(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	_, ch := dial(t, c.Node(0))
	for _, q := range []string{"one-src", "one-dest"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
			t.Fatal(err)
		}
	}
	if st, body := api(t, "PUT", c.Node(0).MgmtURL()+"/api/parameters/shovel/%2F/one", `{"value":{"src-uri":"amqp://",
		"src-queue":"one-src","dest-uri":"amqp://","dest-queue":"one-dest"}}`); st != 201 {
		t.Fatalf("PUT: %d %s", st, body)
	}
	runner := func(from int) (string, int) {
		_, body := api(t, "GET", c.Node(from).MgmtURL()+"/api/shovels", "")
		var l []mapi.Shovel
		json.Unmarshal([]byte(body), &l)
		if len(l) != 1 {
			return fmt.Sprint(len(l), " shovels"), len(l)
		}
		return l[0].Node + " " + l[0].State, 1
	}
	var node string
	eventually(t, 15*time.Second, func() bool {
		a, n := runner(0)
		b, _ := runner(1)
		node = a
		return n == 1 && a == b && len(a) > 8 && a[len(a)-7:] == "running"
	}, "the shovel running on one node, every node's list showing it once")
	node = node[:len(node)-len(" running")]
	publish := func(ch *amqp.Channel, body string) {
		t.Helper()
		if err := ch.PublishWithContext(context.Background(), "", "one-src", false, false, amqp.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	// get waits for want; the ones before it may come again (the shovel
	// acks its source once the destination confirmed: one that goes
	// before its ack committed moves a message twice, never loses one).
	get := func(ch *amqp.Channel, want string, again ...string) {
		t.Helper()
		eventually(t, 20*time.Second, func() bool {
			d, ok, err := ch.Get("one-dest", true)
			if err != nil {
				t.Fatal(err)
			}
			if ok && string(d.Body) != want {
				if len(again) > 0 && string(d.Body) == again[0] {
					return false
				}
				t.Fatalf("got %q, want %q", d.Body, want)
			}
			return ok
		}, "message "+want+" moved")
	}
	publish(ch, "before")
	get(ch, "before")

	// The node running it goes: another takes it over.
	var gone, other int
	for i := range 3 {
		if c.Node(i).Name() == node {
			gone = i
		}
	}
	other = (gone + 1) % 3
	c.Node(gone).Stop()
	_, och := dial(t, c.Node(other))
	eventually(t, 20*time.Second, func() bool {
		a, n := runner(other)
		return n == 1 && a != node+" running" && a[len(a)-7:] == "running"
	}, "another node running the shovel")
	publish(och, "after")
	get(och, "after", "before")
}
