package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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

// TestFederationLinkRunsOnOneNode: issue 24. In a cluster a federated
// exchange's link runs on exactly one node (/api/federation-links lists
// it once, on every node), and when that node goes another takes it over.
func TestFederationLinkRunsOnOneNode(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	up := warrentest.Start(t)
	uc, err := amqp.Dial(up.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	uch, _ := uc.Channel()
	_, ch := dial(t, c.Node(0))
	for _, x := range []*amqp.Channel{uch, ch} {
		if err := x.ExchangeDeclare("cfed.x", "direct", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ch.QueueDeclare("cfed-q", true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("cfed-q", "k", "cfed.x", false, nil); err != nil {
		t.Fatal(err)
	}
	for path, body := range map[string]string{
		"/api/parameters/federation-upstream/%2F/up": `{"value":{"uri":"amqp://guest:guest@` + up.Addr() + `","reconnect-delay":1}}`,
		"/api/policies/%2F/cfed":                     `{"pattern":"^cfed\\.","apply-to":"exchanges","definition":{"federation-upstream":"up"}}`,
	} {
		if st, b := api(t, "PUT", c.Node(0).MgmtURL()+path, body); st >= 300 {
			t.Fatalf("%s: %d %s", path, st, b)
		}
	}
	runner := func(from int) (string, string) {
		_, body := api(t, "GET", c.Node(from).MgmtURL()+"/api/federation-links", "")
		var l []mapi.FederationLink
		json.Unmarshal([]byte(body), &l)
		if len(l) != 1 {
			return "", fmt.Sprint(len(l), " links")
		}
		return l[0].Node, l[0].Status
	}
	var node string
	eventually(t, 20*time.Second, func() bool {
		n0, s0 := runner(0)
		n1, s1 := runner(1)
		node = n0
		return s0 == "running" && s1 == "running" && n0 == n1
	}, "the link running on one node, every node's list showing it once")
	pub := func(body string) {
		t.Helper()
		if err := uch.PublishWithContext(context.Background(), "cfed.x", "k", false, false, amqp.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(ch *amqp.Channel, want string) {
		t.Helper()
		eventually(t, 20*time.Second, func() bool {
			d, ok, err := ch.Get("cfed-q", true)
			if err != nil {
				t.Fatal(err)
			}
			return ok && string(d.Body) == want // (a copy in flight at the failover may come again first)
		}, "message "+want+" federated")
	}
	eventually(t, 10*time.Second, func() bool {
		_, body := api(t, "GET", up.MgmtURL()+"/api/exchanges/%2F/cfed.x/bindings/source", "")
		return strings.Contains(body, `"routing_key":"k"`)
	}, "the binding upstream")
	pub("before")
	get(ch, "before")
	gone := 0
	for i := range 3 {
		if c.Node(i).Name() == node {
			gone = i
		}
	}
	other := (gone + 1) % 3
	c.Node(gone).Stop()
	_, och := dial(t, c.Node(other))
	eventually(t, 20*time.Second, func() bool {
		n, s := runner(other)
		return s == "running" && n != node
	}, "another node running the link")
	eventually(t, 10*time.Second, func() bool {
		_, body := api(t, "GET", up.MgmtURL()+"/api/exchanges/%2F/cfed.x/bindings/source", "")
		return strings.Contains(body, `"routing_key":"k"`)
	}, "the binding upstream again")
	pub("after")
	get(och, "after")
}
