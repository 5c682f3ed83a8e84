package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/server"
	"github.com/warrenmq/warren/warrentest"
)

// Quorum queue bodies beyond the window stay on disk (issue 14, "Bounded
// resources"): the leader keeps the classic queues' in-memory window and
// pages the rest out; their bodies stay in the raft log only.

// pageWindow is the queue window of the paging tests' clusters.
const pageWindow = 16

func startPageCluster(t *testing.T) *warrentest.Cluster {
	return warrentest.StartCluster(t, 3, warrentest.WithServerConfig(func(c *server.Config) { c.QueueWindow = pageWindow }))
}

// qqStats is the quorum queue name's stats on node i (its leader's are
// the real ones).
func qqStats(t *testing.T, c *warrentest.Cluster, i int, name string) broker.QueueStats {
	t.Helper()
	q := c.Node(i).Broker().VHost("/").Queue(name)
	if q == nil {
		t.Fatalf("node %d: no queue %s", i+1, name)
	}
	return q.Stats()
}

// checkWindow fails unless the leader holds at most the window of ready
// bodies in memory and pages out the rest of total ready messages.
func checkWindow(t *testing.T, c *warrentest.Cluster, l int, name string, total int) {
	t.Helper()
	checkWindowPlus(t, c, l, name, total, 0)
}

// checkWindowPlus is checkWindow allowing extra messages in memory
// beyond the window: returns go back to their place in memory, as in a
// classic queue (a consumer's unacked messages when it goes).
func checkWindowPlus(t *testing.T, c *warrentest.Cluster, l int, name string, total, extra int) {
	t.Helper()
	var st broker.QueueStats
	waitFor(t, fmt.Sprintf("%d ready on the leader", total), func() bool {
		st = qqStats(t, c, l, name)
		return st.Ready == total
	})
	if inMem := st.Ready - st.PagedOut; inMem > pageWindow+extra {
		t.Fatalf("leader node %d holds %d ready messages in memory (window %d + %d): %+v", l+1, inMem, pageWindow, extra, st)
	}
	if st.PagedOut < total-pageWindow-extra {
		t.Fatalf("leader node %d: %d paged out of %d ready, want at least %d", l+1, st.PagedOut, total, total-pageWindow-extra)
	}
}

// waitReplicated waits until every running member's replicated state of
// quorum queue name holds n messages (the leader's acks, purges... are
// applied everywhere).
func waitReplicated(t *testing.T, c *warrentest.Cluster, name string, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d messages in every member's state of %s", n, name), func() bool {
		for _, nd := range c.Nodes() {
			b := nd.Broker()
			if b == nil {
				continue
			}
			if k, ok := b.VHost("/").Queue(name).QuorumMessages(); !ok || k != n {
				return false
			}
		}
		return true
	})
}

// drainOrdered consumes n messages of queue through node i (manual acks,
// prefetch 10) and returns them in delivery order.
func drainOrdered(t *testing.T, c *warrentest.Cluster, i int, queue string, n int) []amqp.Delivery {
	t.Helper()
	conn, ch := qqChannel(t, c, i)
	defer conn.Close()
	if err := ch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []amqp.Delivery
	for len(out) < n {
		d := recv(t, ds)
		out = append(out, d)
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// checkOrder fails unless ds carry exactly want, in order.
func checkOrder(t *testing.T, ds []amqp.Delivery, want []string) {
	t.Helper()
	if len(ds) != len(want) {
		t.Fatalf("%d delivered, want %d", len(ds), len(want))
	}
	for k, d := range ds {
		if string(d.Body) != want[k] {
			t.Fatalf("delivery %d is %q, want %q (queue order lost)", k, d.Body, want[k])
		}
	}
}

// issue 14 (bounded resources): a quorum queue with many more messages
// than the window keeps only the window in the leader's memory, the rest
// paged out (their bodies in the raft log), while publishing and after;
// every message is consumed in publish order with its body; a message
// returned to the back (no delivery limit) while others are paged out
// goes behind them.
func TestQuorumPageOutWindow(t *testing.T) {
	c := startPageCluster(t)
	// No delivery limit: a return goes to the back (R5.4).
	qqDeclare(t, c, 0, "page-qq-win", amqp.Table{"x-delivery-limit": -1})
	l := qqLeader(t, c, "page-qq-win", "")
	pub := (l + 1) % 3
	var want []string
	for round := 0; round < 5; round++ {
		acked := qqPublish(t, c, pub, "page-qq-win", fmt.Sprintf("w%d", round), 100)
		if len(acked) != 100 {
			t.Fatalf("%d of 100 confirmed", len(acked))
		}
		want = append(want, acked...)
		checkWindow(t, c, l, "page-qq-win", len(want))
	}
	// A return to the back while 484 are paged out: behind them.
	conn, err := amqp.Dial(c.Node((l + 2) % 3).URL())
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	d, ok, err := ch.Get("page-qq-win", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if string(d.Body) != want[0] {
		t.Fatalf("head is %q, want %q", d.Body, want[0])
	}
	if err := d.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	want = append(want[1:], want[0])
	checkWindow(t, c, l, "page-qq-win", len(want))
	ds := drainOrdered(t, c, (l+2)%3, "page-qq-win", len(want))
	checkOrder(t, ds, want)
	if !ds[len(ds)-1].Redelivered {
		t.Errorf("the returned message came back without the redelivered flag")
	}
	waitFor(t, "the queue empty on the leader", func() bool {
		st := qqStats(t, c, l, "page-qq-win")
		return st.Ready == 0 && st.Unacked == 0 && st.PagedOut == 0
	})
}

// issue 14 (bounded resources): a new leader, after a leader transfer and
// after the leader's node crashes, builds only the window from the
// replicated state and pages the rest out, reading the bodies from its
// own log (compacted by live entries meanwhile: a snapshot is taken every
// 4096 entries): nothing is lost and the queue order is kept.
func TestQuorumPageOutFailover(t *testing.T) {
	c := startPageCluster(t)
	qqDeclare(t, c, 0, "page-qq-fail", nil)
	l := qqLeader(t, c, "page-qq-fail", "")
	pub := (l + 1) % 3
	var want []string
	for round := 0; round < 5; round++ {
		acked := qqPublish(t, c, pub, "page-qq-fail", fmt.Sprintf("a%d", round), 1000)
		if len(acked) != 1000 {
			t.Fatalf("%d of 1000 confirmed", len(acked))
		}
		want = append(want, acked...)
	}
	checkWindow(t, c, l, "page-qq-fail", len(want))
	// Take some, so that the log's head entries are gone.
	ds := drainOrdered(t, c, pub, "page-qq-fail", 100)
	checkOrder(t, ds, want[:100])
	want = want[100:]
	checkWindowPlus(t, c, l, "page-qq-fail", len(want), 10) // its prefetch, returned
	waitReplicated(t, c, "page-qq-fail", len(want))

	info, _ := qqInfo(c, l, "page-qq-fail")
	to := (l + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := c.Node(l).Cluster().QuorumHost().Group(info.Group).TransferLeader(ctx, c.Node(to).Name())
	cancel()
	if err != nil {
		t.Fatalf("transfer to node %d: %v", to+1, err)
	}
	l = qqLeader(t, c, "page-qq-fail", c.Node(l).Name())
	checkWindow(t, c, l, "page-qq-fail", len(want))
	acked := qqPublish(t, c, (l+1)%3, "page-qq-fail", "b", 500)
	if len(acked) != 500 {
		t.Fatalf("%d of 500 confirmed", len(acked))
	}
	want = append(want, acked...)
	checkWindow(t, c, l, "page-qq-fail", len(want))
	waitReplicated(t, c, "page-qq-fail", len(want))
	if g := c.Node(l).Cluster().QuorumHost().Group(info.Group); g.Status().SnapshotIndex == 0 {
		t.Errorf("no snapshot on the leader after %d entries: compaction not exercised", len(want))
	}

	c.Node(l).Crash()
	nl := qqLeader(t, c, "page-qq-fail", c.Node(l).Name())
	checkWindow(t, c, nl, "page-qq-fail", len(want))
	ds = drainOrdered(t, c, nl, "page-qq-fail", len(want))
	checkOrder(t, ds, want)
}

// issue 14 (bounded resources): a message TTL expires paged-out messages
// on time, wherever they sit behind messages without one, dead-lettering
// them into the DLQ (R2.x: reason expired) while the others stay, in
// order.
func TestQuorumPageOutTTL(t *testing.T) {
	c := startPageCluster(t)
	qqDeclare(t, c, 0, "page-qq-dlq", nil)
	qqDeclare(t, c, 0, "page-qq-ttl", amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "page-qq-dlq"})
	l := qqLeader(t, c, "page-qq-ttl", "")
	qqLeader(t, c, "page-qq-dlq", "")
	pub := (l + 1) % 3
	conn, ch := qqChannel(t, c, pub)
	defer conn.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	const n, ttl = 200, 2000
	confs := ch.NotifyPublish(make(chan amqp.Confirmation, n))
	var keep, expire []string
	start := time.Now()
	for k := 0; k < n; k++ {
		p := amqp.Publishing{DeliveryMode: 2, Body: []byte(fmt.Sprintf("t-%d", k))}
		if k%3 == 2 {
			p.Expiration = fmt.Sprint(ttl)
			expire = append(expire, string(p.Body))
		} else {
			keep = append(keep, string(p.Body))
		}
		if err := ch.Publish("", "page-qq-ttl", false, false, p); err != nil {
			t.Fatal(err)
		}
	}
	for k := 0; k < n; k++ {
		if cf := <-confs; !cf.Ack {
			t.Fatalf("publish %d nacked", cf.DeliveryTag)
		}
	}
	st := qqStats(t, c, l, "page-qq-ttl")
	if time.Since(start) < ttl*time.Millisecond {
		if st.Ready != n || st.PagedOut < n-pageWindow {
			t.Fatalf("before the TTL: %d ready, %d paged out, want %d and at least %d", st.Ready, st.PagedOut, n, n-pageWindow)
		}
		if dl := qqStats(t, c, qqLeader(t, c, "page-qq-dlq", ""), "page-qq-dlq"); dl.Ready != 0 {
			t.Fatalf("%d dead-lettered before the TTL passed", dl.Ready)
		}
	}
	testutil.Eventually(t, 15*time.Second, "the expired messages in the DLQ", func() bool {
		return qqStats(t, c, qqLeader(t, c, "page-qq-dlq", ""), "page-qq-dlq").Ready == len(expire)
	})
	if since := time.Since(start); since < ttl*time.Millisecond {
		t.Fatalf("dead-lettered after %v, before the TTL of %dms", since, ttl)
	}
	st = qqStats(t, c, l, "page-qq-ttl")
	if st.Ready != len(keep) {
		t.Fatalf("%d left in the source, want %d", st.Ready, len(keep))
	}
	if st.DeadLettered["expired"] != uint64(len(expire)) {
		t.Errorf("dead-lettered expired: %d, want %d", st.DeadLettered["expired"], len(expire))
	}
	dls := drainOrdered(t, c, pub, "page-qq-dlq", len(expire))
	checkOrder(t, dls, expire)
	for _, d := range dls {
		xd, _ := d.Headers["x-death"].([]any)
		if len(xd) == 0 || xd[0].(amqp.Table)["reason"] != "expired" || xd[0].(amqp.Table)["queue"] != "page-qq-ttl" {
			t.Fatalf("%s: x-death %v", d.Body, d.Headers["x-death"])
		}
	}
	checkOrder(t, drainOrdered(t, c, pub, "page-qq-ttl", len(keep)), keep)
}

// issue 14 (bounded resources): a purge drops the paged-out messages too,
// in the replicated state as well: a new leader does not bring them back.
func TestQuorumPageOutPurge(t *testing.T) {
	c := startPageCluster(t)
	qqDeclare(t, c, 0, "page-qq-purge", nil)
	l := qqLeader(t, c, "page-qq-purge", "")
	pub := (l + 1) % 3
	if acked := qqPublish(t, c, pub, "page-qq-purge", "old", 300); len(acked) != 300 {
		t.Fatalf("%d of 300 confirmed", len(acked))
	}
	checkWindow(t, c, l, "page-qq-purge", 300)
	conn, ch := qqChannel(t, c, pub)
	defer conn.Close()
	n, err := ch.QueuePurge("page-qq-purge", false)
	if err != nil {
		t.Fatal(err)
	}
	if n != 300 {
		t.Fatalf("purge: %d, want 300", n)
	}
	if st := qqStats(t, c, l, "page-qq-purge"); st.Ready != 0 || st.PagedOut != 0 {
		t.Fatalf("after the purge: %+v", st)
	}
	acked := qqPublish(t, c, pub, "page-qq-purge", "new", 40)
	if len(acked) != 40 {
		t.Fatalf("%d of 40 confirmed", len(acked))
	}
	checkWindow(t, c, l, "page-qq-purge", 40)
	waitReplicated(t, c, "page-qq-purge", 40)
	c.Node(l).Crash()
	nl := qqLeader(t, c, "page-qq-purge", c.Node(l).Name())
	checkWindow(t, c, nl, "page-qq-purge", 40)
	checkOrder(t, drainOrdered(t, c, nl, "page-qq-purge", 40), acked)
}

// issue 14 (bounded resources): a quorum dead-letter queue whose messages
// are mostly paged out is browsed (the management API's dead letters,
// read from the raft log where they sit) and replayed (Take over the
// paged-out tail) in order, every message.
func TestQuorumPageOutBrowseReplay(t *testing.T) {
	c := startPageCluster(t)
	qqDeclare(t, c, 0, "page-qq-rdlq", nil)
	qqDeclare(t, c, 0, "page-qq-rsrc", amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "page-qq-rdlq"})
	ls := qqLeader(t, c, "page-qq-rsrc", "")
	const n = 120
	acked := qqPublish(t, c, (ls+1)%3, "page-qq-rsrc", "r", n)
	if len(acked) != n {
		t.Fatalf("%d of %d confirmed", len(acked), n)
	}
	// Reject all, in order: into the DLQ, mostly paged out there.
	conn, ch := qqChannel(t, c, ls)
	defer conn.Close()
	for k := 0; k < n; k++ {
		d, ok, err := ch.Get("page-qq-rsrc", false)
		if err != nil || !ok {
			t.Fatalf("get %d: %v %v", k, ok, err)
		}
		if err := d.Reject(false); err != nil {
			t.Fatal(err)
		}
	}
	ld := qqLeader(t, c, "page-qq-rdlq", "")
	checkWindow(t, c, ld, "page-qq-rdlq", n)

	tg := &mgmtTarget{t: t, kind: "warren", url: c.Node(ld).MgmtURL(), user: "guest", pass: "guest"}
	var br struct {
		Total    int
		Messages []struct{ Payload string }
	}
	r := tg.must("GET", "/api/dead-letters/%2F/page-qq-rdlq/messages?limit=1000", nil, 200)
	if err := json.Unmarshal(r.body, &br); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range br.Messages {
		got = append(got, m.Payload)
	}
	if br.Total != n || fmt.Sprint(got) != fmt.Sprint(acked) {
		t.Fatalf("browsed %d of total %d: %v, want the %d dead letters in order", len(got), br.Total, got, n)
	}
	// From the 100th on only: the browse skips paged-out ones too.
	r = tg.must("GET", "/api/dead-letters/%2F/page-qq-rdlq/messages?offset=100&limit=5", nil, 200)
	br.Messages = nil
	if err := json.Unmarshal(r.body, &br); err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, m := range br.Messages {
		got = append(got, m.Payload)
	}
	if fmt.Sprint(got) != fmt.Sprint(acked[100:105]) {
		t.Fatalf("browsed from 100: %v, want %v", got, acked[100:105])
	}

	var rr struct{ Replayed, Failed, Remaining int }
	r = tg.must("POST", "/api/dead-letters/%2F/page-qq-rdlq/replay", map[string]any{}, 200)
	if err := json.Unmarshal(r.body, &rr); err != nil {
		t.Fatal(err)
	}
	if rr.Replayed != n || rr.Failed != 0 || rr.Remaining != 0 {
		t.Fatalf("replay: %+v, want %d replayed", rr, n)
	}
	waitFor(t, "the DLQ empty", func() bool {
		st := qqStats(t, c, ld, "page-qq-rdlq")
		return st.Ready == 0 && st.Unacked == 0 && st.PagedOut == 0
	})
	checkOrder(t, drainOrdered(t, c, ls, "page-qq-rsrc", n), acked)
}

// issue 14 (bounded resources): a new leader pages out the messages
// beyond the window with their deadlines: paged-out messages whose TTL
// passes after the failover are dead-lettered by the new leader, every
// one, in order.
func TestQuorumPageOutTTLFailover(t *testing.T) {
	c := startPageCluster(t)
	qqDeclare(t, c, 0, "page-qq-fdlq", nil)
	qqDeclare(t, c, 0, "page-qq-fttl", amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "page-qq-fdlq",
		"x-message-ttl": 3000})
	l := qqLeader(t, c, "page-qq-fttl", "")
	pub := (l + 1) % 3
	start := time.Now()
	acked := qqPublish(t, c, pub, "page-qq-fttl", "f", 100)
	if len(acked) != 100 {
		t.Fatalf("%d of 100 confirmed", len(acked))
	}
	waitReplicated(t, c, "page-qq-fttl", 100)
	c.Node(l).Crash()
	nl := qqLeader(t, c, "page-qq-fttl", c.Node(l).Name())
	if time.Since(start) < 3*time.Second {
		st := qqStats(t, c, nl, "page-qq-fttl")
		if st.Ready+int(st.DeadLettered["expired"]) != 100 {
			t.Fatalf("new leader: %+v", st)
		}
		if time.Since(start) < 2*time.Second && st.PagedOut < 100-pageWindow {
			t.Fatalf("new leader pages out %d of 100 (window %d)", st.PagedOut, pageWindow)
		}
	}
	testutil.Eventually(t, 15*time.Second, "the expired messages in the DLQ", func() bool {
		return qqStats(t, c, qqLeader(t, c, "page-qq-fdlq", ""), "page-qq-fdlq").Ready == 100
	})
	if since := time.Since(start); since < 3*time.Second {
		t.Fatalf("dead-lettered after %v, before the TTL of 3s", since)
	}
	checkOrder(t, drainOrdered(t, c, nl, "page-qq-fdlq", 100), acked)
}
