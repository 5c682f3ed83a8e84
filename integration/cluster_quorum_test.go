package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/cluster/qraft"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

// Replicated quorum queues on an in-process cluster (issue 14): every
// node a broker, an AMQP server, a management API and a cluster node with
// the metadata group and the quorum queues' raft host, over loopback TCP.

// qqDeclare declares the quorum queue name through node i.
func qqDeclare(t *testing.T, c *warrentest.Cluster, i int, name string, args amqp.Table) {
	t.Helper()
	conn, ch := qqChannel(t, c, i)
	defer conn.Close()
	a := amqp.Table{"x-queue-type": "quorum"}
	for k, v := range args {
		a[k] = v
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, a); err != nil {
		t.Fatal(err)
	}
}

// qqInfo is node i's view of quorum queue name's group (ok false while
// the node is down or does not know the queue as a replicated one).
func qqInfo(c *warrentest.Cluster, i int, name string) (broker.QuorumInfo, bool) {
	b := c.Node(i).Broker()
	if b == nil {
		return broker.QuorumInfo{}, false
	}
	q := b.VHost("/").Queue(name)
	if q == nil {
		return broker.QuorumInfo{}, false
	}
	return q.QuorumInfo(nil)
}

// qqLeader waits until every running node knows the same leader of
// quorum queue name, other than not, and returns its index.
func qqLeader(t *testing.T, c *warrentest.Cluster, name, not string) int {
	t.Helper()
	l := -1
	if !testutil.Until(15*time.Second, func() bool {
		l = c.QueueLeader("/", name)
		return l >= 0 && c.Node(l).Name() != not
	}) {
		t.Fatalf("no leader every running node knows, of %s, in 15s: %s", name, qqViews(c, name))
	}
	return l
}

// qqChannel opens a connection to node i and a channel on it.
func qqChannel(t *testing.T, c *warrentest.Cluster, i int) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial(c.Node(i).URL())
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	return conn, ch
}

// qqPublish publishes n persistent messages with confirms through node
// i, bodies prefix-0... and returns the bodies confirmed (acked).
func qqPublish(t *testing.T, c *warrentest.Cluster, i int, queue, prefix string, n int) []string {
	t.Helper()
	conn, ch := qqChannel(t, c, i)
	defer conn.Close()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confs := ch.NotifyPublish(make(chan amqp.Confirmation, n))
	for k := 0; k < n; k++ {
		body := fmt.Sprintf("%s-%d", prefix, k)
		if err := ch.Publish("", queue, false, false, amqp.Publishing{DeliveryMode: 2, Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	var acked []string
	for k := 0; k < n; k++ {
		select {
		case cf := <-confs:
			if cf.Ack {
				acked = append(acked, fmt.Sprintf("%s-%d", prefix, cf.DeliveryTag-1))
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("node %d: confirm %d of %d: timed out", i+1, k+1, n)
		}
	}
	return acked
}

// qqConsumer consumes queue through node i with manual acks, recording
// every delivery.
type qqConsumer struct {
	mu    sync.Mutex
	conn  *amqp.Connection
	ch    *amqp.Channel
	got   map[string]int  // deliveries by body
	redel map[string]bool // some delivery of the body was redelivered
	held  []amqp.Delivery // not acked (hold mode)
	hold  bool
	first map[string]bool // the body's first delivery was redelivered
}

// waitAll waits until every body of bodies was delivered to qc.
func (qc *qqConsumer) waitAll(t *testing.T, what string, bodies []string) {
	t.Helper()
	var missing []string
	if !testutil.Until(waitTimeout, func() bool {
		qc.mu.Lock()
		defer qc.mu.Unlock()
		missing = missing[:0]
		for _, b := range bodies {
			if qc.got[b] == 0 {
				missing = append(missing, b)
			}
		}
		return len(missing) == 0
	}) {
		t.Fatalf("timed out after %v waiting for %s: %d of %d not consumed, first %v", waitTimeout, what,
			len(missing), len(bodies), missing[:min(len(missing), 10)])
	}
}

func qqConsume(t *testing.T, c *warrentest.Cluster, i int, queue string, prefetch int, hold bool) *qqConsumer {
	t.Helper()
	conn, err := amqp.Dial(c.Node(i).URL())
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	qc := &qqConsumer{conn: conn, ch: ch, got: map[string]int{}, redel: map[string]bool{}, first: map[string]bool{}, hold: hold}
	go func() {
		for d := range ds {
			b := string(d.Body)
			qc.mu.Lock()
			if qc.got[b] == 0 {
				qc.first[b] = d.Redelivered
			}
			qc.got[b]++
			if d.Redelivered {
				qc.redel[b] = true
			}
			if qc.hold {
				qc.held = append(qc.held, d)
				qc.mu.Unlock()
				continue
			}
			qc.mu.Unlock()
			_ = d.Ack(false)
		}
	}()
	return qc
}

// qqTransfer moves the queue's leadership from its leader of the moment
// to node to(leader) and returns the leader it moved it from. On a
// loaded machine an election may move the leadership just before (the
// transfer then fails with ErrNotLeader) or the transfer may time out:
// it tries again.
func qqTransfer(t *testing.T, c *warrentest.Cluster, name string, to func(leader int) int) int {
	t.Helper()
	for try := 0; ; try++ {
		l := qqLeader(t, c, name, "")
		info, _ := qqInfo(c, l, name)
		dest := c.Node(to(l)).Name()
		g := c.Node(l).Cluster().QuorumHost().Group(info.Group)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := g.TransferLeader(ctx, dest)
		cancel()
		if err == nil {
			return l
		}
		if !errors.Is(err, qraft.ErrNotLeader) && !errors.Is(err, context.DeadlineExceeded) || try == 5 {
			t.Fatalf("transfer of %s from node %d to %s: %v", name, l+1, dest, err)
		}
		t.Logf("transfer of %s from node %d: %v; again", name, l+1, err)
	}
}

// qqViews describes every node's view of the queue's group, for a
// failure's message.
func qqViews(c *warrentest.Cluster, name string) string {
	if os.Getenv("WARREN_TEST_STACKS") != "" { // where every goroutine is, to stderr
		_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
	}
	var out []string
	for i, nd := range c.Nodes() {
		b := nd.Broker()
		if b == nil {
			out = append(out, fmt.Sprintf("node %d down", i+1))
			continue
		}
		q := b.VHost("/").Queue(name)
		if q == nil {
			out = append(out, fmt.Sprintf("node %d: no queue", i+1))
			continue
		}
		info, _ := q.QuorumInfo(nil)
		st := info.Status
		live, _ := q.QuorumMessages()
		qs := q.Stats()
		out = append(out, fmt.Sprintf("node %d: leader %q; raft %s term %d leader %q commit %d applied %d last %d quiesced %v online %v; replicated %d; machine ready %d (paged %d) unacked %d consumers %d",
			i+1, info.Leader, st.Role, st.Term, st.Leader, st.Commit, st.Applied, st.LastIndex, st.Quiesced, st.Online,
			live, qs.Ready, qs.PagedOut, qs.Unacked, qs.Consumers)+"; "+q.QuorumDebug())
	}
	return strings.Join(out, "; ")
}

func (qc *qqConsumer) count() int {
	qc.mu.Lock()
	defer qc.mu.Unlock()
	return len(qc.got)
}

// heldDeliveries returns the deliveries held (hold mode) so far.
func (qc *qqConsumer) heldDeliveries() []amqp.Delivery {
	qc.mu.Lock()
	defer qc.mu.Unlock()
	return slices.Clone(qc.held)
}

func (qc *qqConsumer) heldBodies() []string {
	qc.mu.Lock()
	defer qc.mu.Unlock()
	var out []string
	for _, d := range qc.held {
		out = append(out, string(d.Body))
	}
	return out
}

func (qc *qqConsumer) close() { qc.conn.Close() }

// mgmtQueue reads /api/queues/%2F/name from node i's management API.
func mgmtQueue(t *testing.T, c *warrentest.Cluster, i int, name string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, c.Node(i).MgmtURL()+"/api/queues/%2F/"+url.PathEscape(name), nil)
	req.SetBasicAuth("guest", "guest")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET queue %s on node %d: %d %s", name, i+1, resp.StatusCode, body)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func strList(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// issue 14: a quorum queue declared through node 1 of three is a Raft
// group with members on the three nodes and a leader every node knows;
// the management API of every node shows RabbitMQ's leader, members and
// online fields for it.
func TestQuorumClusterDeclare(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	qqDeclare(t, c, 0, "h4-qq-decl", nil)
	all := []string{c.Node(0).Name(), c.Node(1).Name(), c.Node(2).Name()}
	for i := range c.Nodes() {
		waitFor(t, fmt.Sprintf("node %d knows the group", i+1), func() bool {
			info, ok := qqInfo(c, i, "h4-qq-decl")
			return ok && slices.Equal(info.Members, all)
		})
	}
	for i := range c.Nodes() {
		if info, _ := qqInfo(c, i, "h4-qq-decl"); !info.Member {
			t.Fatalf("node %d: not running a member of the group", i+1)
		}
	}
	l := qqLeader(t, c, "h4-qq-decl", "")
	if l != 0 { // client-local: the declaring node leads first
		t.Fatalf("leader: node %d, want node 1 (x-queue-leader-locator client-local)", l+1)
	}
	for i := range c.Nodes() {
		var m map[string]any
		waitFor(t, "management fields", func() bool {
			m = mgmtQueue(t, c, i, "h4-qq-decl")
			return m["leader"] == c.Node(l).Name() && len(strList(m["online"])) == 3
		})
		if got := strList(m["members"]); !slices.Equal(got, all) {
			t.Fatalf("node %d: members %v, want %v", i+1, got, all)
		}
		if m["type"] != "quorum" || m["node"] != c.Node(l).Name() {
			t.Fatalf("node %d: type %v node %v", i+1, m["type"], m["node"])
		}
		// Warren's raft: every member's metrics.
		r, _ := m["raft"].(map[string]any)
		for _, n := range all {
			mr, _ := r[n].(map[string]any)
			if mr == nil || mr["term"] == nil || mr["commit_index"] == nil || mr["log_entries"] == nil {
				t.Fatalf("node %d: raft of %s: %v", i+1, n, m["raft"])
			}
		}
	}
	// /api/nodes: every node's raft host counters.
	if got := qqPublish(t, c, 1, "h4-qq-decl", "x", 10); len(got) != 10 {
		t.Fatalf("%d of 10 confirmed", len(got))
	}
	req, _ := http.NewRequest(http.MethodGet, c.Node(2).MgmtURL()+"/api/nodes", nil)
	req.SetBasicAuth("guest", "guest")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []map[string]any
	err = json.NewDecoder(resp.Body).Decode(&nodes)
	resp.Body.Close()
	if err != nil || len(nodes) != 3 {
		t.Fatalf("/api/nodes: %v %v", nodes, err)
	}
	for _, n := range nodes {
		r, _ := n["quorum_queues_raft"].(map[string]any)
		if r == nil || r["groups"] != float64(1) || r["fsyncs"] == float64(0) {
			t.Fatalf("/api/nodes: %v's quorum_queues_raft: %v (%v)", n["name"], n["quorum_queues_raft"], n)
		}
	}
	// The deletion deletes every member.
	conn, ch := qqChannel(t, c, 2)
	defer conn.Close()
	if _, err := ch.QueueDelete("h4-qq-decl", false, false, false); err != nil {
		t.Fatal(err)
	}
	for i, nd := range c.Nodes() {
		waitFor(t, fmt.Sprintf("node %d's member deleted", i+1), func() bool {
			return len(nd.Cluster().QuorumHost().Groups()) == 0
		})
	}
}

// issue 14: publishes with confirms through every node reach the quorum
// queue's leader and are consumed through every node, each message once.
func TestQuorumClusterPublishConsumeEveryNode(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	qqDeclare(t, c, 1, "h4-qq-any", nil)
	qqLeader(t, c, "h4-qq-any", "")
	var cons []*qqConsumer
	for i := range c.Nodes() {
		qc := qqConsume(t, c, i, "h4-qq-any", 10, false)
		defer qc.close()
		cons = append(cons, qc)
	}
	var want []string
	for i := range c.Nodes() {
		acked := qqPublish(t, c, i, "h4-qq-any", fmt.Sprintf("n%d", i+1), 100)
		if len(acked) != 100 {
			t.Fatalf("node %d: %d of 100 confirmed", i+1, len(acked))
		}
		want = append(want, acked...)
	}
	waitFor(t, "every message consumed", func() bool {
		n := 0
		for _, qc := range cons {
			n += qc.count()
		}
		return n >= len(want)
	})
	seen := map[string]int{}
	for i, qc := range cons {
		qc.mu.Lock()
		if len(qc.got) == 0 {
			t.Errorf("node %d's consumer got nothing", i+1)
		}
		for b, n := range qc.got {
			seen[b] += n
		}
		qc.mu.Unlock()
	}
	for _, b := range want {
		if seen[b] != 1 {
			t.Fatalf("%s delivered %d times, want once", b, seen[b])
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("%d bodies consumed, %d published", len(seen), len(want))
	}
}

// issue 14: the crash of a quorum queue's leader's node: another member
// leads within seconds; every confirmed message is consumed, those that
// were out to a consumer come back redelivered; the crashed node, started
// again, catches up with the group's log.
func TestQuorumClusterLeaderCrash(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	qqDeclare(t, c, 0, "h4-qq-crash", nil)
	l := qqLeader(t, c, "h4-qq-crash", "")
	others := []int{}
	for i := range c.Nodes() {
		if i != l {
			others = append(others, i)
		}
	}
	var want []string
	for _, i := range append([]int{l}, others...) {
		want = append(want, qqPublish(t, c, i, "h4-qq-crash", fmt.Sprintf("n%d", i+1), 150)...)
	}
	if len(want) != 450 {
		t.Fatalf("%d of 450 confirmed", len(want))
	}
	// A consumer on a surviving node holds 40 unacked at the crash.
	holder := qqConsume(t, c, others[0], "h4-qq-crash", 40, true)
	defer holder.close()
	waitFor(t, "40 deliveries held", func() bool { return holder.count() == 40 })
	out := holder.heldBodies()

	leaderName := c.Node(l).Name()
	crashed := time.Now()
	c.Node(l).Crash()
	nl := qqLeader(t, c, "h4-qq-crash", leaderName)
	t.Logf("node %d leads %v after the crash of node %d", nl+1, time.Since(crashed).Round(time.Millisecond), l+1)
	if d := time.Since(crashed); d > 10*time.Second {
		t.Fatalf("failover took %v", d)
	}
	holder.close()

	qc := qqConsume(t, c, others[1], "h4-qq-crash", 50, false)
	defer qc.close()
	qc.waitAll(t, "every confirmed message consumed after the failover", want)
	qc.mu.Lock()
	for _, b := range out {
		if !qc.redel[b] {
			t.Errorf("%s was out to a consumer at the crash; delivered again without redelivered", b)
		}
	}
	qc.mu.Unlock()

	// The crashed node comes back and catches up: its member applies
	// what the group committed while it was down, including new
	// messages.
	more := qqPublish(t, c, nl, "h4-qq-crash", "after", 50)
	if len(more) != 50 {
		t.Fatalf("%d of 50 confirmed after the failover", len(more))
	}
	c.Node(l).Start()
	waitFor(t, "the restarted node's member catches up", func() bool {
		li, ok1 := qqInfo(c, nl, "h4-qq-crash")
		ri, ok2 := qqInfo(c, l, "h4-qq-crash")
		return ok1 && ok2 && ri.Member && ri.Status.Applied >= li.Status.Commit && li.Status.Commit > 0 &&
			ri.Leader == c.Node(nl).Name()
	})
	qc.waitAll(t, "the messages published after the failover consumed", more)
}

// issue 14: a quorum queue with x-quorum-initial-group-size 2 on three
// nodes: the third node is no member and learns the leader from its
// announcements; publishing and consuming through it works, and after
// the leader's node crashes and comes back it learns the leader again.
func TestQuorumClusterNonMember(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	qqDeclare(t, c, 0, "h4-qq-two", amqp.Table{"x-quorum-initial-group-size": int32(2)})
	var info broker.QuorumInfo
	waitFor(t, "node 1 knows the group", func() bool {
		var ok bool
		info, ok = qqInfo(c, 0, "h4-qq-two")
		return ok
	})
	if len(info.Members) != 2 || !slices.Contains(info.Members, c.Node(0).Name()) {
		t.Fatalf("members %v: want 2, node 1 among them", info.Members)
	}
	outside := -1
	for i, nd := range c.Nodes() {
		if !slices.Contains(info.Members, nd.Name()) {
			outside = i
		}
	}
	l := qqLeader(t, c, "h4-qq-two", "")
	if in, _ := qqInfo(c, outside, "h4-qq-two"); in.Member {
		t.Fatalf("node %d runs a member of a group it is not in", outside+1)
	}
	acked := qqPublish(t, c, outside, "h4-qq-two", "out", 100)
	if len(acked) != 100 {
		t.Fatalf("%d of 100 confirmed through the non-member", len(acked))
	}
	qc := qqConsume(t, c, outside, "h4-qq-two", 20, false)
	defer qc.close()
	waitFor(t, "the non-member's consumer gets every message", func() bool { return qc.count() == 100 })
	qc.close()

	// The leader's node crashes (the group of two has no quorum) and
	// comes back: a leader is elected again and the non-member hears of
	// it.
	acked = qqPublish(t, c, outside, "h4-qq-two", "before", 50)
	c.Node(l).Crash()
	waitFor(t, "the non-member forgets the crashed leader", func() bool {
		in, _ := qqInfo(c, outside, "h4-qq-two")
		return in.Leader == ""
	})
	c.Node(l).Start()
	qqLeader(t, c, "h4-qq-two", "")
	qc2 := qqConsume(t, c, outside, "h4-qq-two", 20, false)
	defer qc2.close()
	qc2.waitAll(t, "the messages confirmed before the crash consumed through the non-member", acked)
}

// issue 14: every node of the cluster stops and starts again: the quorum
// queue's members recover their logs, elect a leader, and every message
// confirmed before is there.
func TestQuorumClusterFullRestart(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	qqDeclare(t, c, 2, "h4-qq-full", nil)
	qqLeader(t, c, "h4-qq-full", "")
	var want []string
	for i := range c.Nodes() {
		want = append(want, qqPublish(t, c, i, "h4-qq-full", fmt.Sprintf("n%d", i+1), 100)...)
	}
	// Some consumed and acked first: they must not come back.
	qc := qqConsume(t, c, 0, "h4-qq-full", 10, false)
	waitFor(t, "50 consumed", func() bool { return qc.count() >= 50 })
	qc.close()
	waitFor(t, "the acks applied", func() bool {
		l := qqLeader(t, c, "h4-qq-full", "")
		st := c.Node(l).Broker().VHost("/").Queue("h4-qq-full").Stats()
		return st.Unacked == 0
	})
	qc.mu.Lock()
	consumed := map[string]bool{}
	for b := range qc.got {
		consumed[b] = true
	}
	qc.mu.Unlock()
	for i := range c.Nodes() {
		c.Node(i).Crash()
	}
	var wg sync.WaitGroup
	for i := range c.Nodes() {
		wg.Add(1)
		go func() { defer wg.Done(); c.Node(i).Start() }()
	}
	wg.Wait()
	c.WaitReady()
	qqLeader(t, c, "h4-qq-full", "")
	qc2 := qqConsume(t, c, 1, "h4-qq-full", 50, false)
	defer qc2.close()
	waitFor(t, "every confirmed message not acked before consumed after the restart", func() bool {
		qc2.mu.Lock()
		defer qc2.mu.Unlock()
		n := 0
		for _, b := range want {
			if !consumed[b] && qc2.got[b] == 0 {
				return false
			}
			n++
		}
		return true
	})
}

// qqLoad publishes with confirms through node i until stop is closed,
// recording the bodies confirmed (acks) and nacked.
type qqLoad struct {
	mu      sync.Mutex
	acked   []string
	nacked  int
	err     error
	stopped chan struct{}
}

func qqStartLoad(t *testing.T, c *warrentest.Cluster, i int, queue, prefix string, stop chan struct{}) *qqLoad {
	t.Helper()
	conn, err := amqp.Dial(c.Node(i).URL())
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	l := &qqLoad{stopped: make(chan struct{})}
	confs := ch.NotifyPublish(make(chan amqp.Confirmation, 1024))
	var sent sync.Map // tag -> body
	go func() {
		for cf := range confs {
			b, _ := sent.LoadAndDelete(cf.DeliveryTag)
			l.mu.Lock()
			if cf.Ack {
				l.acked = append(l.acked, b.(string))
			} else {
				l.nacked++
			}
			l.mu.Unlock()
		}
	}()
	go func() {
		defer close(l.stopped)
		defer conn.Close()
		for k := 0; ; k++ {
			select {
			case <-stop:
				// Wait for the outstanding confirms (bounded).
				for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
					n := 0
					sent.Range(func(any, any) bool { n++; return true })
					if n == 0 {
						return
					}
				}
				l.mu.Lock()
				l.err = fmt.Errorf("confirms outstanding 20s after the end")
				l.mu.Unlock()
				return
			default:
			}
			body := fmt.Sprintf("%s-%d", prefix, k)
			sent.Store(uint64(k+1), body)
			if err := ch.Publish("", queue, false, false, amqp.Publishing{DeliveryMode: 2, Body: []byte(body)}); err != nil {
				l.mu.Lock()
				l.err = err
				l.mu.Unlock()
				return
			}
			if k%50 == 49 {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	return l
}

func (l *qqLoad) ackedN() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// issue 14: publishers with confirms through the two other nodes and a
// consumer keep going while the leader's node crashes: no confirmed
// message is lost (each is consumed), and a message delivered twice was
// redelivered the second time.
func TestQuorumClusterCrashUnderLoad(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	qqDeclare(t, c, 0, "h4-qq-load", nil)
	l := qqLeader(t, c, "h4-qq-load", "")
	var others []int
	for i := range c.Nodes() {
		if i != l {
			others = append(others, i)
		}
	}
	cons := qqConsume(t, c, others[0], "h4-qq-load", 50, false)
	defer cons.close()
	stop := make(chan struct{})
	loads := []*qqLoad{
		qqStartLoad(t, c, others[0], "h4-qq-load", "a", stop),
		qqStartLoad(t, c, others[1], "h4-qq-load", "b", stop),
	}
	waitFor(t, "confirms before the crash", func() bool { return loads[0].ackedN() > 200 && loads[1].ackedN() > 200 })
	before := loads[0].ackedN() + loads[1].ackedN()
	c.Node(l).Crash()
	qqLeader(t, c, "h4-qq-load", c.Node(l).Name())
	waitFor(t, "confirms after the failover", func() bool { return loads[0].ackedN()+loads[1].ackedN() > before+400 })
	close(stop)
	var want []string
	for _, ld := range loads {
		<-ld.stopped
		ld.mu.Lock()
		if ld.err != nil {
			t.Errorf("publisher: %v", ld.err)
		}
		want = append(want, ld.acked...)
		t.Logf("publisher: %d confirmed, %d nacked", len(ld.acked), ld.nacked)
		ld.mu.Unlock()
	}
	missing := func() (n int, first string) {
		cons.mu.Lock()
		defer cons.mu.Unlock()
		for _, b := range want {
			if cons.got[b] == 0 {
				if n == 0 {
					first = b
				}
				n++
			}
		}
		return n, first
	}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		n, first := missing()
		if n == 0 {
			break
		}
		if time.Now().After(end) {
			ldr := c.QueueLeader("/", "h4-qq-load")
			var st broker.QueueStats
			if ldr >= 0 {
				st = c.Node(ldr).Broker().VHost("/").Queue("h4-qq-load").Stats()
			}
			t.Fatalf("%d confirmed messages not consumed after 30s (the first: %s); consumed %d; leader node %d: %+v",
				n, first, cons.count(), ldr+1, st)
		}
	}
	cons.mu.Lock()
	defer cons.mu.Unlock()
	dups := 0
	for b, n := range cons.got {
		if n > 1 {
			dups++
			if !cons.redel[b] {
				t.Errorf("%s delivered %d times, never redelivered", b, n)
			}
		}
	}
	t.Logf("%d confirmed, %d consumed, %d delivered more than once", len(want), len(cons.got), dups)
}

// issue 14: the leadership moves (a transfer: the old leader steps down
// while its node stays up) under publishers and consumers on every node:
// no confirmed message is lost, consumers on every node (the old
// leader's included) keep consuming, duplicates are redelivered.
func TestQuorumClusterLeaderTransfer(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	qqDeclare(t, c, 0, "h4-qq-move", nil)
	l := qqLeader(t, c, "h4-qq-move", "")
	var cons []*qqConsumer
	for i := range c.Nodes() {
		qc := qqConsume(t, c, i, "h4-qq-move", 20, false)
		defer qc.close()
		cons = append(cons, qc)
	}
	stop := make(chan struct{})
	var loads []*qqLoad
	for i := range c.Nodes() {
		loads = append(loads, qqStartLoad(t, c, i, "h4-qq-move", fmt.Sprintf("p%d", i+1), stop))
	}
	total := func() int {
		n := 0
		for _, ld := range loads {
			n += ld.ackedN()
		}
		return n
	}
	waitFor(t, "confirms before the transfer", func() bool { return total() > 600 })
	l = qqTransfer(t, c, "h4-qq-move", func(l int) int { return (l + 1) % 3 })
	nl := qqLeader(t, c, "h4-qq-move", c.Node(l).Name())
	before := total()
	// A loaded machine (-race, 2 cores) may take a while: a stall is what
	// this catches.
	testutil.Eventually(t, 30*time.Second, "confirms after the transfer", func() bool { return total() > before+600 })
	close(stop)
	var want []string
	for _, ld := range loads {
		<-ld.stopped
		ld.mu.Lock()
		if ld.err != nil {
			t.Errorf("publisher: %v; %s", ld.err, qqViews(c, "h4-qq-move"))
		}
		want = append(want, ld.acked...)
		ld.mu.Unlock()
	}
	seen := func() (map[string]int, map[string]bool) {
		got, redel := map[string]int{}, map[string]bool{}
		for _, qc := range cons {
			qc.mu.Lock()
			for b, n := range qc.got {
				got[b] += n
				redel[b] = redel[b] || qc.redel[b]
			}
			qc.mu.Unlock()
		}
		return got, redel
	}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, _ := seen()
		missing := 0
		for _, b := range want {
			if got[b] == 0 {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(end) {
			var first string
			var miss []string
			for _, b := range want {
				if got[b] == 0 {
					if first == "" {
						first = b
					}
					miss = append(miss, b)
				}
			}
			t.Logf("missing: %s", qqRanges(miss))
			ldr := c.QueueLeader("/", "h4-qq-move")
			var st broker.QueueStats
			if ldr >= 0 {
				st = c.Node(ldr).Broker().VHost("/").Queue("h4-qq-move").Stats()
			}
			var counts []int
			for _, qc := range cons {
				counts = append(counts, qc.count())
			}
			t.Fatalf("%d of %d confirmed messages not consumed 30s after the transfer to node %d (the first: %s); consumed per node %v; leader node %d: ready %d unacked %d consumers %d; %s",
				missing, len(want), nl+1, first, counts, ldr+1, st.Ready, st.Unacked, st.Consumers, qqViews(c, "h4-qq-move"))
		}
	}
	got, redel := seen()
	dups := 0
	for b, n := range got {
		if n > 1 {
			dups++
			if !redel[b] {
				t.Errorf("%s delivered %d times, never redelivered", b, n)
			}
		}
	}
	for i, qc := range cons {
		if qc.count() == 0 {
			t.Errorf("node %d's consumer got nothing", i+1)
		}
	}
	t.Logf("leader node %d -> node %d; %d confirmed, %d consumed, %d delivered more than once", l+1, nl+1, len(want), len(got), dups)
}

// issue 14: x-queue-leader-locator balanced places the leaders of new
// quorum queues declared through one node on the nodes with the fewest
// queues: three queues, three leaders.
func TestQuorumClusterLeaderLocatorBalanced(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	leaders := map[int]bool{}
	for k := 0; k < 3; k++ {
		name := fmt.Sprintf("h4-qq-bal-%d", k)
		qqDeclare(t, c, 0, name, amqp.Table{"x-queue-leader-locator": "balanced"})
		leaders[qqLeader(t, c, name, "")] = true
	}
	if len(leaders) != 3 {
		t.Fatalf("leaders on nodes %v, want one on each of the three", leaders)
	}
}

// issue 14: a quorum queue created by a definitions import in a cluster
// is a replicated one too: members on the three nodes, a leader, and its
// messages survive the crash of the leader's node.
func TestQuorumClusterImport(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	defs := `{"queues":[{"name":"h4-qq-imp","vhost":"/","durable":true,"auto_delete":false,"type":"quorum","arguments":{"x-queue-type":"quorum"}}]}`
	req, _ := http.NewRequest(http.MethodPost, c.Node(1).MgmtURL()+"/api/definitions", strings.NewReader(defs))
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("import: %d %s", resp.StatusCode, body)
	}
	for i := range c.Nodes() {
		waitFor(t, fmt.Sprintf("node %d runs a member", i+1), func() bool {
			info, ok := qqInfo(c, i, "h4-qq-imp")
			return ok && info.Member && len(info.Members) == 3
		})
	}
	l := qqLeader(t, c, "h4-qq-imp", "")
	acked := qqPublish(t, c, (l+1)%3, "h4-qq-imp", "imp", 50)
	c.Node(l).Crash()
	qqLeader(t, c, "h4-qq-imp", c.Node(l).Name())
	qc := qqConsume(t, c, (l+2)%3, "h4-qq-imp", 10, false)
	defer qc.close()
	qc.waitAll(t, "the imported queue's confirmed messages consumed after the crash", acked)
}

// issue 14 (R1.14): a quorum queue dead-letters at least once into a
// quorum DLQ in the cluster: every rejected message reaches the DLQ, also
// when the source's leader's node crashes on the way.
func TestQuorumClusterDeadLetterAtLeastOnce(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	qqDeclare(t, c, 0, "h4-qq-dlq", nil)
	qqDeclare(t, c, 0, "h4-qq-src", amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "h4-qq-dlq",
		"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"})
	l := qqLeader(t, c, "h4-qq-src", "")
	qqLeader(t, c, "h4-qq-dlq", "")
	pub := (l + 1) % 3
	acked := qqPublish(t, c, pub, "h4-qq-src", "dl", 200)
	if len(acked) != 200 {
		t.Fatalf("%d of 200 confirmed", len(acked))
	}
	conn, ch := qqChannel(t, c, pub)
	defer conn.Close()
	if err := ch.Qos(20, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume("h4-qq-src", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	rejected := map[string]string{} // body -> how it was rejected, for the failure's report
	var rmu sync.Mutex
	for k := 0; k < 100; k++ {
		d := recv(t, ds)
		if err := d.Reject(false); err != nil {
			t.Fatal(err)
		}
		rejected[string(d.Body)] = "before the crash"
	}
	c.Node(l).Crash()
	qqLeader(t, c, "h4-qq-src", c.Node(l).Name())
	go func() {
		for d := range ds {
			rmu.Lock()
			rejected[string(d.Body)] += fmt.Sprintf(" after (redelivered %v)", d.Redelivered)
			rmu.Unlock()
			_ = d.Reject(false)
		}
	}()
	dlq := qqConsume(t, c, (l+2)%3, "h4-qq-dlq", 50, false)
	defer dlq.close()
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		dlq.mu.Lock()
		missing := 0
		for _, b := range acked {
			if dlq.got[b] == 0 {
				missing++
			}
		}
		dlq.mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(end) {
			// Say which, and where they are, for a failure seen once in CI.
			dlq.mu.Lock()
			rmu.Lock()
			var which []string
			for _, b := range acked {
				if dlq.got[b] == 0 {
					which = append(which, b+": "+rejected[b])
				}
			}
			rmu.Unlock()
			dlq.mu.Unlock()
			for i := range 3 {
				for _, name := range []string{"h4-qq-src", "h4-qq-dlq"} {
					if in, ok := qqInfo(c, i, name); ok {
						t.Logf("node %d %s: %+v", i, name, in)
					}
				}
			}
			t.Fatalf("%d of 200 rejected messages not in the DLQ 30s after the crash: %v", missing, which)
		}
	}
}

// issue 14: the crash of a consumer's node (not the leader's) returns the
// messages it held to the quorum queue, redelivered to a consumer on
// another node.
func TestQuorumClusterConsumerNodeCrash(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	qqDeclare(t, c, 0, "h4-qq-cnode", nil)
	l := qqLeader(t, c, "h4-qq-cnode", "")
	acked := qqPublish(t, c, l, "h4-qq-cnode", "c", 100)
	if len(acked) != 100 {
		t.Fatalf("%d of 100 confirmed", len(acked))
	}
	holder := qqConsume(t, c, (l+1)%3, "h4-qq-cnode", 30, true)
	defer holder.close()
	waitFor(t, "30 held", func() bool { return holder.count() == 30 })
	held := holder.heldBodies()
	c.Node((l + 1) % 3).Crash()
	qc := qqConsume(t, c, (l+2)%3, "h4-qq-cnode", 20, false)
	defer qc.close()
	qc.waitAll(t, "every message consumed on the other node", acked)
	qc.mu.Lock()
	defer qc.mu.Unlock()
	for _, b := range held {
		if !qc.redel[b] {
			t.Errorf("%s, held by the crashed node's consumer, came back without redelivered", b)
		}
	}
}

// issue 14 (consuming through any node, failover): a settle of a
// delivery made by an earlier leadership's machine touches nothing of the
// machine that runs now, even on the same node: the leadership leaves the
// consumer's node and comes back (each machine delivers the messages
// again, redelivered), and the consumer there nacks (requeue) the first
// machine's deliveries. Were the nacks applied to the machine that runs
// now, it would put the messages back once more and deliver them again.
func TestQuorumClusterStaleSettleNewMachine(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	const name = "h4-qq-gen"
	qqDeclare(t, c, 0, name, nil)
	l := qqLeader(t, c, name, "")
	bodies := qqPublish(t, c, l, name, "g", 5)
	cons := qqConsume(t, c, l, name, 100, true)
	defer cons.close()
	cons.waitAll(t, "the first deliveries", bodies)
	old := cons.heldDeliveries()
	each := func(n int) func() bool {
		return func() bool {
			cons.mu.Lock()
			defer cons.mu.Unlock()
			for _, b := range bodies {
				if cons.got[b] < n {
					return false
				}
			}
			return true
		}
	}
	qqTransfer(t, c, name, func(l int) int { return (l + 1) % 3 })
	qqLeader(t, c, name, c.Node(l).Name())
	waitFor(t, "the second machine's redeliveries", each(2))
	qqTransfer(t, c, name, func(int) int { return l })
	waitFor(t, "the leadership back on node "+c.Node(l).Name(), func() bool { return c.QueueLeader("/", name) == l })
	waitFor(t, "the third machine's redeliveries", each(3))
	info, _ := qqInfo(c, l, name)
	cons.mu.Lock()
	before := maps.Clone(cons.got)
	cons.mu.Unlock()
	for _, d := range old {
		if err := d.Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}
	// The channel handles its frames in order: the marker is routed after
	// the nacks were, and a message they put back would be delivered
	// before it.
	if err := cons.ch.Publish("", name, false, false, amqp.Publishing{DeliveryMode: 2, Body: []byte("marker")}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the marker delivered", func() bool {
		cons.mu.Lock()
		defer cons.mu.Unlock()
		return cons.got["marker"] > 0
	})
	if now, _ := qqInfo(c, l, name); now.Status.Term != info.Status.Term {
		t.Skipf("an election (term %d -> %d) redelivered everything again; nothing to tell", info.Status.Term, now.Status.Term)
	}
	cons.mu.Lock()
	defer cons.mu.Unlock()
	for _, b := range bodies {
		if n := cons.got[b]; n != before[b] {
			t.Errorf("%s delivered %d times after the nacks, %d before", b, n, before[b])
		}
	}
}

// qqRanges describes bodies prefix-n as ranges per prefix (p1-3..7 p2-9).
func qqRanges(bodies []string) string {
	by := map[string][]int{}
	for _, b := range bodies {
		i := strings.LastIndexByte(b, '-')
		var n int
		fmt.Sscan(b[i+1:], &n)
		by[b[:i]] = append(by[b[:i]], n)
	}
	var out []string
	for _, p := range slices.Sorted(maps.Keys(by)) {
		ns := by[p]
		slices.Sort(ns)
		for i := 0; i < len(ns); {
			j := i
			for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
				j++
			}
			if i == j {
				out = append(out, fmt.Sprintf("%s-%d", p, ns[i]))
			} else {
				out = append(out, fmt.Sprintf("%s-%d..%d", p, ns[i], ns[j]))
			}
			i = j + 1
		}
	}
	return strings.Join(out, " ")
}
