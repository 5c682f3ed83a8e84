package mgmt_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/server"
	"github.com/warrenmq/warren/warrentest"
)

// An exchange's message_stats count what was published to it (publish_in)
// and what it routed on (publish_out), from clients and from the API.
func TestExchangeMessageStats(t *testing.T) {
	f := newFixture(t)
	f.topology()
	var x map[string]any
	f.call("GET", "/api/exchanges/%2F/orders-x", nil, &x)
	if _, has := x["message_stats"]; has {
		t.Fatalf("message_stats before any publish: %v", x["message_stats"])
	}
	for _, key := range []string{"new", "new", "nowhere"} {
		must(t, f.ch.PublishWithContext(context.Background(), "orders-x", key, false, false, amqp.Publishing{Body: []byte("m")}))
	}
	f.waitCount("orders", 2)
	var routed map[string]any
	if st := f.call("POST", "/api/exchanges/%2F/orders-x/publish", map[string]any{"properties": map[string]any{},
		"routing_key": "new", "payload": "api", "payload_encoding": "string"}, &routed); st != 200 || routed["routed"] != true {
		t.Fatalf("API publish: %d %v", st, routed)
	}
	f.call("GET", "/api/exchanges/%2F/orders-x", nil, &x)
	ms, _ := x["message_stats"].(map[string]any)
	if ms["publish_in"] != float64(4) || ms["publish_out"] != float64(3) {
		t.Fatalf("orders-x message_stats = %v, want publish_in 4, publish_out 3", ms)
	}
	if _, ok := ms["publish_in_details"].(map[string]any)["rate"]; !ok {
		t.Fatalf("no publish_in_details.rate: %v", ms)
	}
	// The channel's counts outlive it.
	must(t, f.ch.Close())
	f.call("GET", "/api/exchanges/%2F/orders-x", nil, &x)
	if ms, _ := x["message_stats"].(map[string]any); ms["publish_in"] != float64(4) {
		t.Fatalf("after the channel closed: %v", x["message_stats"])
	}
}

// A deep durable queue reports its persistent and paged-out messages.
func TestQueueMessagesPagedOut(t *testing.T) {
	w := warrentest.Start(t, warrentest.WithConfig(func(c *server.Config) { c.QueueWindow = 4 }))
	conn, err := amqp.Dial(w.URL())
	must(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("deep", true, false, false, false, nil)
	must(t, err)
	must(t, ch.Confirm(false))
	for i := 0; i < 20; i++ {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", "deep", false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("0123456789")})
		must(t, err)
		if !dc.Wait() {
			t.Fatal("nacked")
		}
	}
	f := &fixture{t: t, w: w, ch: ch, api: w.MgmtURL()}
	// The overview counts the records written (20) and, once the queue
	// pages messages back in, read.
	var o map[string]any
	f.call("GET", "/api/overview", nil, &o)
	if ms, _ := o["message_stats"].(map[string]any); ms["disk_writes"] != float64(20) {
		t.Fatalf("overview disk_writes = %v, want 20", ms["disk_writes"])
	}
	var q map[string]any
	f.call("GET", "/api/queues/%2F/deep", nil, &q)
	num := func(k string) float64 { v, _ := q[k].(float64); return v }
	if num("messages") != 20 || num("messages_persistent") != 20 {
		t.Fatalf("messages %v, persistent %v; want 20 and 20", q["messages"], q["messages_persistent"])
	}
	if num("messages_paged_out") == 0 || num("messages_ready_ram")+num("messages_paged_out") != 20 ||
		num("message_bytes_paged_out") != 10*num("messages_paged_out") {
		t.Fatalf("paged out %v (%v bytes), in memory %v; want some paged out, 20 in all, 10 bytes each",
			q["messages_paged_out"], q["message_bytes_paged_out"], q["messages_ready_ram"])
	}
	for range 20 {
		d, ok, err := ch.Get("deep", true)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		_ = d
	}
	f.call("GET", "/api/overview", nil, &o)
	if ms, _ := o["message_stats"].(map[string]any); ms["disk_reads"] != q["messages_paged_out"] {
		t.Fatalf("overview disk_reads = %v after draining, want the %v paged out", ms["disk_reads"], q["messages_paged_out"])
	}
}

// A transactional channel shows what its open transaction holds.
func TestChannelUncommitted(t *testing.T) {
	f := newFixture(t)
	f.topology()
	must(t, f.ch.PublishWithContext(context.Background(), "", "orders", false, false, amqp.Publishing{Body: []byte("a")}))
	f.waitCount("orders", 1)
	d := f.get("orders")
	must(t, f.ch.Tx())
	for range 2 {
		must(t, f.ch.PublishWithContext(context.Background(), "orders-x", "new", false, false, amqp.Publishing{Body: []byte("t")}))
	}
	must(t, d.Ack(false))
	var chans []map[string]any
	if !testutil.Until(5*time.Second, func() bool {
		f.call("GET", "/api/channels", nil, &chans)
		return len(chans) == 1 && chans[0]["messages_uncommitted"] == float64(2) && chans[0]["acks_uncommitted"] == float64(1)
	}) {
		t.Fatalf("channels: %v, want one with 2 publishes and 1 ack uncommitted", chans)
	}
	if chans[0]["transactional"] != true {
		t.Fatalf("transactional = %v", chans[0]["transactional"])
	}
	must(t, f.ch.TxCommit())
	f.call("GET", "/api/channels", nil, &chans)
	if chans[0]["messages_uncommitted"] != float64(0) || chans[0]["acks_uncommitted"] != float64(0) {
		t.Fatalf("after commit: %v", chans[0])
	}
}

// A queue's byte counts split ready from unacked and count the persistent
// messages of a durable queue (all messages of a quorum queue); its
// message_stats split consumer deliveries from basic.get, with and without
// acks, and count only basic.ack as ack, as RabbitMQ's do.
func TestQueueBytesAndDeliveryStats(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, q := range []struct {
		name string
		args amqp.Table
	}{{"counts", nil}, {"counts-qq", amqp.Table{"x-queue-type": "quorum"}}} {
		_, err := f.ch.QueueDeclare(q.name, true, false, false, false, q.args)
		must(t, err)
	}
	must(t, f.ch.Confirm(false))
	pub := func(q, body string, mode uint8) {
		dc, err := f.ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, amqp.Publishing{Body: []byte(body), DeliveryMode: mode})
		must(t, err)
		if !dc.Wait() {
			t.Fatal("nacked")
		}
	}
	for _, q := range []string{"counts", "counts-qq"} {
		pub(q, "aa", amqp.Persistent)
		pub(q, "bbb", amqp.Persistent)
		pub(q, "cccc", amqp.Transient)
		pub(q, "ddddd", amqp.Transient)
	}
	queue := func(name string) map[string]any {
		var q map[string]any
		f.call("GET", "/api/queues/%2F/"+name, nil, &q)
		return q
	}
	check := func(q map[string]any, want map[string]float64) {
		t.Helper()
		ms, _ := q["message_stats"].(map[string]any)
		for k, v := range want {
			got, ok := q[k]
			if !ok {
				got = ms[k]
			}
			if got != v {
				t.Errorf("%s: %s = %v, want %v", q["name"], k, got, v)
			}
		}
	}

	got := f.get("counts") // "aa", unacked
	msgs, err := f.ch.Consume("counts", "c", false, false, false, false, nil)
	must(t, err)
	deliveredBBB := <-msgs // "bbb", unacked; the qos default is unlimited
	if deliveredBBB.DeliveryTag == 0 {
		t.Fatal("no delivery")
	}
	must(t, f.ch.Cancel("c", false))
	// The consumer may have taken "cccc" and "ddddd" too before the
	// cancel; put them back.
	for d := range msgs {
		must(t, d.Nack(false, true))
	}
	f.waitCount("counts", 2)
	check(queue("counts"), map[string]float64{
		"messages_ready": 2, "messages_unacknowledged": 2,
		"message_bytes": 14, "message_bytes_ready": 9, "message_bytes_unacknowledged": 5, "message_bytes_ram": 14,
		"messages_persistent": 2, "message_bytes_persistent": 5,
		"get": 1, "get_no_ack": 0, "ack": 0,
	})
	// The transient and the persistent quorum messages all count as
	// persistent there.
	check(queue("counts-qq"), map[string]float64{"messages_persistent": 4, "message_bytes_persistent": 14, "message_bytes": 14})

	must(t, got.Ack(false))
	must(t, deliveredBBB.Reject(false)) // no DLX: dropped
	for range 2 {
		if _, ok, err := f.ch.Get("counts", true); !ok || err != nil {
			t.Fatalf("get no-ack: %v %v", ok, err)
		}
	}
	if _, ok, err := f.ch.Get("counts", false); ok || err != nil {
		t.Fatalf("get on an empty queue: %v %v", ok, err)
	}
	q := queue("counts")
	check(q, map[string]float64{
		"messages": 0, "message_bytes": 0, "message_bytes_unacknowledged": 0, "message_bytes_ram": 0,
		"messages_persistent": 0, "message_bytes_persistent": 0,
		"get": 1, "get_no_ack": 2, "get_empty": 1, "ack": 1,
	})
	ms := q["message_stats"].(map[string]any)
	// deliver counts "bbb" and every redelivery of the nacked ones.
	if ms["deliver"].(float64) < 1 || ms["deliver_no_ack"] != float64(0) ||
		ms["deliver_get"] != ms["deliver"].(float64)+3 {
		t.Fatalf("message_stats %v: want deliver >= 1, deliver_no_ack 0, deliver_get = deliver + 3", ms)
	}
}

// A user's connections: a management user lists and closes its own only,
// a monitoring user lists anyone's, an administrator closes anyone's.
func TestConnectionsByUser(t *testing.T) {
	f := newFixture(t)
	for _, u := range []struct{ name, tags string }{{"app", "management"}, {"mon", "monitoring"}} {
		if st := f.call("PUT", "/api/users/"+u.name, map[string]any{"password": "pw", "tags": u.tags}, nil); st != 201 {
			t.Fatalf("PUT user %s: %d", u.name, st)
		}
		if st := f.call("PUT", "/api/permissions/%2F/"+u.name, map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, nil); st != 201 {
			t.Fatalf("PUT permissions %s: %d", u.name, st)
		}
	}
	conn, err := amqp.Dial(strings.Replace(f.w.URL(), "guest:guest", "app:pw", 1))
	must(t, err)
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	var list []map[string]any
	testutil.Until(5*time.Second, func() bool {
		f.callAs("app", "pw", "GET", "/api/connections/username/app", nil, &list)
		return len(list) == 1
	})
	if len(list) != 1 || list[0]["user"] != "app" || list[0]["vhost"] != "/" {
		t.Fatalf("app's own connections: %v", list)
	}
	for _, c := range []struct {
		user, method, path string
		want               int
	}{
		{"app", "GET", "/api/connections/username/guest", 401},
		{"app", "DELETE", "/api/connections/username/guest", 401},
		{"mon", "GET", "/api/connections/username/app", 200},
		{"mon", "DELETE", "/api/connections/username/app", 401},
		{"mon", "GET", "/api/connections/username/channels", 200}, // a user named like the channels path
		{"guest", "GET", "/api/connections/nope/channels", 404},
		{"guest", "GET", "/api/connections/nope/other", 404},
	} {
		pass := "pw"
		if c.user == "guest" {
			pass = "guest"
		}
		if st := f.callAs(c.user, pass, c.method, c.path, nil, nil); st != c.want {
			t.Errorf("%s %s as %s: %d, want %d", c.method, c.path, c.user, st, c.want)
		}
	}
	select {
	case err := <-closed:
		t.Fatalf("connection closed by a refused DELETE: %v", err)
	default:
	}
	if st := f.callAs("app", "pw", "DELETE", "/api/connections/username/app", nil, nil); st != 204 {
		t.Fatalf("app closes its own connections: %d", st)
	}
	select {
	case err := <-closed:
		if err == nil || err.Code != 320 {
			t.Fatalf("closed with %v, want 320 CONNECTION_FORCED", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("connection still open")
	}
}

// After a restart, a deep durable queue still counts its persistent
// messages, paged out or not, and counts them down to zero as they go.
func TestQueuePersistentCountsAcrossRestart(t *testing.T) {
	w := warrentest.Start(t, warrentest.WithConfig(func(c *server.Config) { c.QueueWindow = 4 }))
	publish := func() *amqp.Channel {
		conn, err := amqp.Dial(w.URL())
		must(t, err)
		t.Cleanup(func() { conn.Close() })
		ch, err := conn.Channel()
		must(t, err)
		return ch
	}
	ch := publish()
	_, err := ch.QueueDeclare("deep", true, false, false, false, nil)
	must(t, err)
	must(t, ch.Confirm(false))
	for i := range 16 {
		mode := amqp.Persistent
		if i%4 == 3 {
			mode = amqp.Transient // dropped by the restart
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", "deep", false, false,
			amqp.Publishing{DeliveryMode: mode, Body: []byte("0123456789")})
		must(t, err)
		if !dc.Wait() {
			t.Fatal("nacked")
		}
	}
	w.Restart()
	f := &fixture{t: t, w: w, api: w.MgmtURL()}
	var q map[string]any
	f.call("GET", "/api/queues/%2F/deep", nil, &q)
	if q["messages"] != float64(12) || q["messages_persistent"] != float64(12) || q["message_bytes_persistent"] != float64(120) ||
		q["messages_paged_out"] == float64(0) {
		t.Fatalf("after the restart: messages %v, persistent %v (%v bytes), paged out %v; want 12, 12 (120 bytes), some paged out",
			q["messages"], q["messages_persistent"], q["message_bytes_persistent"], q["messages_paged_out"])
	}
	ch = publish()
	for range 12 {
		if _, ok, err := ch.Get("deep", true); err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
	}
	f.call("GET", "/api/queues/%2F/deep", nil, &q)
	if q["messages_persistent"] != float64(0) || q["message_bytes_persistent"] != float64(0) {
		t.Fatalf("drained: persistent %v (%v bytes), want 0", q["messages_persistent"], q["message_bytes_persistent"])
	}
}

// A move (shovel parameter) resumes after a restart, as RabbitMQ's dynamic
// shovels do; one that finished, or was deleted, does not come back.
func TestShovelResumesAfterRestart(t *testing.T) {
	f := newFixture(t)
	for _, q := range []string{"from", "to", "gone"} {
		_, err := f.ch.QueueDeclare(q, true, false, false, false, nil)
		must(t, err)
	}
	put := func(name, src, deleteAfter string) {
		t.Helper()
		if st := f.call("PUT", "/api/parameters/shovel/%2F/"+name, map[string]any{"value": map[string]any{
			"src-uri": "amqp://", "src-queue": src, "dest-uri": "amqp://", "dest-queue": "to", "src-delete-after": deleteAfter}}, nil); st != 201 {
			t.Fatalf("PUT shovel %s: %d", name, st)
		}
	}
	put("keep", "from", "never")        // runs until deleted
	put("done", "from", "queue-length") // nothing to move: finishes at once
	put("deleted", "gone", "never")
	if st := f.call("DELETE", "/api/parameters/shovel/%2F/deleted", nil, nil); st != 204 {
		t.Fatalf("DELETE shovel: %d", st)
	}
	shovels := func() []string {
		var ps []map[string]any
		f.call("GET", "/api/parameters/shovel", nil, &ps)
		var names []string
		for _, p := range ps {
			names = append(names, p["name"].(string))
		}
		slices.Sort(names)
		return names
	}
	testutil.Until(5*time.Second, func() bool { return fmt.Sprint(shovels()) == "[keep]" })
	if got := shovels(); fmt.Sprint(got) != "[keep]" {
		t.Fatalf("shovels before the restart: %v, want [keep]", got)
	}
	f.w.Restart()
	if got := shovels(); fmt.Sprint(got) != "[keep]" {
		t.Fatalf("shovels after the restart: %v, want [keep]", got)
	}
	conn, err := amqp.Dial(f.w.URL())
	must(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	must(t, err)
	must(t, ch.PublishWithContext(context.Background(), "", "from", false, false, amqp.Publishing{Body: []byte("moved")}))
	if !testutil.Until(5*time.Second, func() bool {
		d, ok, err := ch.Get("to", true)
		must(t, err)
		if ok && string(d.Body) != "moved" {
			t.Fatalf("to: %q", d.Body)
		}
		return ok
	}) {
		var st any
		f.call("GET", "/api/shovels", nil, &st)
		t.Fatalf("the resumed shovel did not move the message: %v", st)
	}
}

// issue 12: the publishes of a replay (made by the broker's
// ReplayDeadLetters, told to the server through broker.OnRepublish) count
// in the exchange's message_stats as the API's own publish does.
func TestReplayCountsInExchangeStats(t *testing.T) {
	f := newFixture(t)
	f.topology()
	f.deadLetter("a", "b")
	var r replayReply
	if st := f.call("POST", "/api/dead-letters/%2F/orders.dlq/replay", map[string]any{}, &r); st != 200 || r.Replayed != 2 {
		t.Fatalf("replay: %d %+v", st, r)
	}
	var x map[string]any
	f.call("GET", "/api/exchanges/%2F/orders-x", nil, &x)
	if ms, _ := x["message_stats"].(map[string]any); ms["publish_in"] != float64(4) || ms["publish_out"] != float64(4) {
		t.Fatalf("orders-x message_stats after the replay = %v, want publish_in 4 (2 published, 2 replayed), publish_out 4", ms)
	}
}
