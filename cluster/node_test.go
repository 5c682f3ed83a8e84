package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func dial(t *testing.T, nd *warrentest.Node) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn := testutil.Dial(t, nd.URL())
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return conn, ch
}

// queueOn reports whether nd's broker knows queue name in vhost "/".
func queueOn(nd *warrentest.Node, name string) bool {
	b := nd.Broker()
	if b == nil {
		return false
	}
	return b.VHost("/").Queue(name) != nil
}

// issue 13: a declare answered -ok on one node is visible on every node,
// and so is a delete; routing on every node uses its own copy.
func TestDefinitionsReplicated(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	_, ch := dial(t, c.Node(0))
	if _, err := ch.QueueDeclare("repl-q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("repl-x", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("repl-q", "k", "repl-x", false, nil); err != nil {
		t.Fatal(err)
	}
	// -ok means applied on the asking node; the others apply it right
	// after (same log), so poll there.
	if !queueOn(c.Node(0), "repl-q") {
		t.Fatal("declare-ok before the queue exists on the declaring node")
	}
	for _, nd := range c.Nodes()[1:] {
		eventually(t, 5*time.Second, func() bool {
			return queueOn(nd, "repl-q") && nd.Broker().VHost("/").Exchange("repl-x") != nil
		}, "queue and exchange on "+nd.Name())
	}
	// Publish through node 3, consume through node 2: the queue lives on
	// node 1 (client-local).
	_, ch3 := dial(t, c.Node(2))
	if err := ch3.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch3.NotifyPublish(make(chan amqp.Confirmation, 1))
	if err := ch3.PublishWithContext(context.Background(), "repl-x", "k", false, false,
		amqp.Publishing{Body: []byte("through node 3"), DeliveryMode: amqp.Persistent}); err != nil {
		t.Fatal(err)
	}
	if cf := <-confirms; !cf.Ack {
		t.Fatal("publish through node 3 nacked")
	}
	_, ch2 := dial(t, c.Node(1))
	var got amqp.Delivery
	eventually(t, 5*time.Second, func() bool {
		d, ok, err := ch2.Get("repl-q", true)
		got = d
		return err == nil && ok
	}, "basic.get through node 2")
	if string(got.Body) != "through node 3" {
		t.Fatalf("got %q", got.Body)
	}
	if _, err := ch.QueueDelete("repl-q", false, false, false); err != nil {
		t.Fatal(err)
	}
	for _, nd := range c.Nodes() {
		eventually(t, 5*time.Second, func() bool { return !queueOn(nd, "repl-q") }, "queue deleted on "+nd.Name())
	}
}

// issue 13: a node that was down catches up from the log when it returns,
// and the definitions it missed are there before it serves clients.
func TestNodeCatchesUp(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	c.Node(2).Stop()
	_, ch := dial(t, c.Node(0))
	for i := 0; i < 20; i++ {
		if _, err := ch.QueueDeclare(fmt.Sprintf("catchup-%d", i), true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	c.Node(2).Start()
	eventually(t, 10*time.Second, func() bool {
		for i := 0; i < 20; i++ {
			if !queueOn(c.Node(2), fmt.Sprintf("catchup-%d", i)) {
				return false
			}
		}
		return true
	}, "node 3 has every queue declared while it was down")
}

// issue 13: without a quorum, a definition change fails with a clear error
// (541 over AMQP, 503 over HTTP) and changes nothing, while publishing to
// and consuming from an existing queue on a surviving node goes on.
func TestNoQuorum(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	_, ch := dial(t, c.Node(0))
	if _, err := ch.QueueDeclare("nq-existing", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	c.Node(1).Stop()
	c.Node(2).Stop()

	_, pub := dial(t, c.Node(0))
	if err := pub.PublishWithContext(context.Background(), "", "nq-existing", false, false, amqp.Publishing{Body: []byte("still")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() bool {
		d, ok, err := pub.Get("nq-existing", true)
		return err == nil && ok && string(d.Body) == "still"
	}, "publish and get on an existing queue without quorum")

	conn, ch2 := dial(t, c.Node(0))
	start := time.Now()
	_, err := ch2.QueueDeclare("nq-new", true, false, false, false, nil)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.InternalError || !strings.Contains(ae.Reason, "no quorum") {
		t.Fatalf("declare without quorum: %v, want 541 INTERNAL_ERROR naming the missing quorum", err)
	}
	if strings.Count(ae.Reason, "no quorum") != 1 {
		t.Fatalf("the text repeats itself: %q", ae.Reason)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("declare without quorum took %v", took)
	}
	_ = conn
	if queueOn(c.Node(0), "nq-new") {
		t.Fatal("the failed declare left a queue behind")
	}

	req, _ := http.NewRequest(http.MethodPut, c.Node(0).MgmtURL()+"/api/queues/%2F/nq-http", strings.NewReader(`{"durable":true}`))
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "no quorum") {
		t.Fatalf("PUT queue without quorum: %d %s, want 503 naming the missing quorum", resp.StatusCode, body)
	}

	c.Node(1).Start()
	c.WaitReady()
	eventually(t, 10*time.Second, func() bool {
		_, ch, err := tryDial(c.Node(0))
		if err != nil {
			return false
		}
		defer ch.Close()
		_, err = ch.QueueDeclare("nq-new", true, false, false, false, nil)
		return err == nil
	}, "declares work again once a quorum is back")
}

func tryDial(nd *warrentest.Node) (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.Dial(nd.URL())
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	go func() { <-ch.NotifyClose(make(chan *amqp.Error, 1)); conn.Close() }()
	return conn, ch, nil
}

// issue 13: /api/nodes on any node lists every node with its state.
func TestAPINodes(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	check := func(want map[string]bool) {
		t.Helper()
		eventually(t, 10*time.Second, func() bool {
			req, _ := http.NewRequest(http.MethodGet, c.Node(0).MgmtURL()+"/api/nodes", nil)
			req.SetBasicAuth("guest", "guest")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			var nodes []struct {
				Name    string `json:"name"`
				Running bool   `json:"running"`
			}
			if json.NewDecoder(resp.Body).Decode(&nodes) != nil || len(nodes) != len(want) {
				return false
			}
			for _, n := range nodes {
				if r, ok := want[n.Name]; !ok || r != n.Running {
					return false
				}
			}
			return true
		}, fmt.Sprintf("/api/nodes = %v", want))
	}
	check(map[string]bool{"warren@n1": true, "warren@n2": true, "warren@n3": true})
	c.Node(2).Stop()
	check(map[string]bool{"warren@n1": true, "warren@n2": true, "warren@n3": false})
}

func eventually(t *testing.T, d time.Duration, cond func() bool, what string) {
	t.Helper()
	testutil.Eventually(t, d, what, cond)
}

// issue 13: exclusive queues follow their owner connection: another
// node's connection gets 405 RESOURCE_LOCKED, and when the owner's node
// dies the queue goes with it once the node is back (its connections
// are gone), on every node, while the new run's exclusive queues stay.
func TestExclusiveQueueFollowsOwner(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	_, ch2 := dial(t, c.Node(1))
	if _, err := ch2.QueueDeclare("excl-old", false, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, nd := range c.Nodes() {
		eventually(t, 5*time.Second, func() bool { return queueOn(nd, "excl-old") }, "exclusive queue on "+nd.Name())
	}
	if q := c.Node(0).Broker().VHost("/").Queue("excl-old"); q.Home != c.Node(1).Name() {
		t.Fatalf("exclusive queue homed on %q, want its owner's node %s", q.Home, c.Node(1).Name())
	}
	_, ch1 := dial(t, c.Node(0))
	_, err := ch1.QueueDeclarePassive("excl-old", false, false, true, false, nil)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.ResourceLocked {
		t.Fatalf("passive declare of another node's exclusive queue: %v, want 405", err)
	}

	c.Node(1).Crash()
	// Crashed, it could not delete the queue of its lost connection.
	if !queueOn(c.Node(0), "excl-old") {
		t.Fatal("the crashed node's exclusive queue went before the node came back")
	}
	c.Node(1).Start()
	_, ch2 = dial(t, c.Node(1))
	if _, err := ch2.QueueDeclare("excl-new", false, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, nd := range c.Nodes() {
		eventually(t, 10*time.Second, func() bool { return !queueOn(nd, "excl-old") && queueOn(nd, "excl-new") },
			"the old run's exclusive queue gone and the new one kept on "+nd.Name())
	}
}

func api(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("guest", "guest")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func nodeNames(t *testing.T, nd *warrentest.Node) map[string]bool {
	t.Helper()
	st, body := api(t, http.MethodGet, nd.MgmtURL()+"/api/nodes", "")
	if st != http.StatusOK {
		t.Fatalf("/api/nodes: %d %s", st, body)
	}
	var nodes []struct {
		Name    string `json:"name"`
		Running bool   `json:"running"`
	}
	if err := json.Unmarshal([]byte(body), &nodes); err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, n := range nodes {
		m[n.Name] = n.Running
	}
	return m
}

// issue 13: a node started empty (--cluster-join) is added later (warren
// cluster join: POST /api/cluster/members), receives the definitions and
// takes part; a stopped node is forgotten (warren cluster forget) and the
// cluster goes on without it.
func TestJoinAndForget(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	_, ch := dial(t, c.Node(0))
	if _, err := ch.QueueDeclare("before-join", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	d := c.AddNode()
	if queueOn(d, "before-join") {
		t.Fatal("a node waiting to join has the cluster's definitions already")
	}
	if st, body := api(t, http.MethodPost, c.Node(0).MgmtURL()+"/api/cluster/members",
		fmt.Sprintf(`{"name":%q,"address":%q}`, d.Name(), d.ClusterAddr())); st != http.StatusNoContent {
		t.Fatalf("join: %d %s", st, body)
	}
	eventually(t, 10*time.Second, func() bool { return queueOn(d, "before-join") }, "the joined node has the definitions")
	c.WaitReady()
	_, chd := dial(t, d)
	if _, err := chd.QueueDeclare("after-join", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() bool { return queueOn(c.Node(0), "after-join") }, "a declare through the joined node on node 1")
	eventually(t, 5*time.Second, func() bool { return len(nodeNames(t, c.Node(0))) == 4 && nodeNames(t, c.Node(0))[d.Name()] },
		"/api/nodes lists the joined node, running")

	gone := c.Node(2)
	gone.Stop()
	eventually(t, 10*time.Second, func() bool {
		l := c.Node(0).Cluster().Meta().Leader()
		return l != "" && l != gone.Name()
	}, "a leader other than the stopped node")
	// As an operator would: forget it once the cluster sees it stopped
	// (a running node is refused).
	eventually(t, 10*time.Second, func() bool { return !nodeNames(t, c.Node(0))[gone.Name()] }, "node 1 sees the stopped node down")
	if st, body := api(t, http.MethodDelete, c.Node(0).MgmtURL()+"/api/cluster/members/"+gone.Name()+"?offline=true", ""); st != http.StatusNoContent {
		t.Fatalf("forget: %d %s", st, body)
	}
	eventually(t, 5*time.Second, func() bool {
		m := nodeNames(t, c.Node(0))
		_, listed := m[gone.Name()]
		return len(m) == 3 && !listed
	}, "/api/nodes without the forgotten node")
	// Three members left, one of them was n3's replacement: a majority
	// of the remaining three commits.
	if _, err := ch.QueueDeclare("after-forget", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() bool { return queueOn(d, "after-forget") }, "a declare after the forget reaches the joined node")
}

// issue 13: definitions export and import are cluster-wide: a document
// imported through one node is exported identically by every node.
func TestDefinitionsImportExportClusterWide(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	doc := `{"vhosts":[{"name":"imp"}],
	  "users":[{"name":"imp-user","password_hash":"","tags":["monitoring"]}],
	  "permissions":[{"user":"imp-user","vhost":"imp","configure":".*","write":".*","read":".*"}],
	  "policies":[{"vhost":"imp","name":"dlx","pattern":"^work","apply-to":"queues","priority":1,"definition":{"dead-letter-exchange":"dlx"}}],
	  "exchanges":[{"name":"dlx","vhost":"imp","type":"fanout","durable":true,"auto_delete":false,"internal":false,"arguments":{}}],
	  "queues":[{"name":"work","vhost":"imp","durable":true,"auto_delete":false,"arguments":{"x-max-length":10}},
	            {"name":"dead","vhost":"imp","durable":true,"auto_delete":false,"arguments":{}}],
	  "bindings":[{"source":"dlx","vhost":"imp","destination":"dead","destination_type":"queue","routing_key":"","arguments":{}}]}`
	if st, body := api(t, http.MethodPost, c.Node(1).MgmtURL()+"/api/definitions", doc); st/100 != 2 {
		t.Fatalf("import through node 2: %d %s", st, body)
	}
	export := func(nd *warrentest.Node) string {
		st, body := api(t, http.MethodGet, nd.MgmtURL()+"/api/definitions/imp", "")
		if st != http.StatusOK {
			t.Fatalf("export from %s: %d %s", nd.Name(), st, body)
		}
		return body
	}
	want := export(c.Node(1))
	for _, name := range []string{`"work"`, `"dead"`, `"dlx"`, `"x-max-length"`} {
		if !strings.Contains(want, name) {
			t.Fatalf("the importing node's export lacks %s: %s", name, want)
		}
	}
	for _, nd := range []*warrentest.Node{c.Node(0), c.Node(2)} {
		eventually(t, 5*time.Second, func() bool { return export(nd) == want }, "the same export from "+nd.Name())
	}
	for _, nd := range c.Nodes() {
		if _, ok := nodeNames(t, nd)[nd.Name()]; !ok {
			t.Fatalf("%s does not list itself", nd.Name())
		}
	}
}

// issue 13: an auto-delete queue whose last consumer goes is deleted
// before the consumer's close answers, as RabbitMQ's channel close waits
// for its queues, also when the queue lives on another node: a client
// that reconnects at once and redeclares it gets a fresh queue, never one
// about to be deleted under it (amqp091-go's ExampleConnection_reconnect).
func TestAutoDeleteGoneBeforeCloseAnswers(t *testing.T) {
	c := warrentest.StartCluster(t, 2, warrentest.PlaceQueuesOn(warrentest.NodeName(1)))
	for i := 0; i < 20; i++ {
		conn, ch := dial(t, c.Node(0))
		if _, err := ch.QueueDeclare("ad-reconnect", false, true, false, false, nil); err != nil {
			t.Fatalf("round %d: declare: %v", i, err)
		}
		if _, err := ch.Consume("ad-reconnect", "", false, true, false, false, nil); err != nil {
			t.Fatalf("round %d: consume: %v", i, err)
		}
		if err := conn.Close(); err != nil {
			t.Fatal(err)
		}
		for _, nd := range c.Nodes() {
			if queueOn(nd, "ad-reconnect") {
				t.Fatalf("round %d: the auto-delete queue is still on %s after its last consumer's connection closed", i, nd.Name())
			}
		}
	}
}

// voterNames lists the metadata group's voters as node i sees them.
func voterNames(nd *warrentest.Node) []string {
	var out []string
	for _, m := range nd.Cluster().Meta().Members() {
		if m.Voter {
			out = append(out, m.Name)
		}
	}
	return out
}

// TestMembershipChecks: issue 22 items 2 and 3. POST /api/cluster/members
// added a voter with no check: a bogus name or address became a voting
// member at once, so one typo on three nodes left a cluster that lost its
// quorum with one real node down, and a member could be re-pointed at a
// wrong address. Forgetting a running node, or the leader, answered 204.
// Now each of those is refused with a 400 that says why, the membership
// is unchanged, and the cluster keeps its quorum with one node down.
func TestMembershipChecks(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	api0 := c.Node(0).MgmtURL()
	httpPort := strings.TrimPrefix(c.Node(1).MgmtURL(), "http://")
	closed := testutil.FreePort(t)
	for _, tc := range []struct {
		what, name, addr, want string
	}{
		{"a name with a newline and a NUL", "warren@x\n\u0000", "127.0.0.1:1", "node name"},
		{"a name without @", "typo", "127.0.0.1:1", "want name@host"},
		{"not an address", "warren@typo", "not-an-address", "want HOST:PORT"},
		{"port 0", "warren@typo", "127.0.0.1:0", "port"},
		{"nothing listens", "warren@typo", closed, "did not answer"},
		{"an HTTP port", "warren@typo", httpPort, "did not answer"},
		{"another member's address", "warren@typo", c.Node(1).ClusterAddr(), "but the node there is " + c.Node(1).Name()},
		{"a member re-pointed at another member", c.Node(2).Name(), c.Node(1).ClusterAddr(), "but the node there is " + c.Node(1).Name()},
		{"a member re-pointed at nothing", c.Node(2).Name(), closed, "did not answer"},
		{"a running member under its own name (not waiting to join)", c.Node(2).Name() + "x", c.Node(2).ClusterAddr(), "but the node there is"},
	} {
		body, _ := json.Marshal(map[string]string{"name": tc.name, "address": tc.addr})
		st, resp := api(t, http.MethodPost, api0+"/api/cluster/members", string(body))
		if st != http.StatusBadRequest || !strings.Contains(resp, tc.want) {
			t.Fatalf("join %s: %d %s, want 400 saying %q", tc.what, st, resp, tc.want)
		}
	}
	for i := range 3 {
		if v := voterNames(c.Node(i)); len(v) != 3 {
			t.Fatalf("after the refused joins node %d sees voters %v", i, v)
		}
	}
	for _, m := range c.Node(0).Cluster().Meta().Members() {
		if m.Name == c.Node(2).Name() && m.Addr != c.Node(2).ClusterAddr() {
			t.Fatalf("%s was re-pointed at %s", m.Name, m.Addr)
		}
	}

	// Forgetting: never a running node, the leader among them, nor the
	// node asked.
	leader := c.Node(0).Cluster().Meta().Leader()
	for _, tc := range []struct{ name, want string }{
		{leader, "is running"},
		{c.Node(1).Name(), "is running"},
		{c.Node(0).Name(), "is the node you are asking"},
	} {
		if tc.name == c.Node(0).Name() && tc.want == "is running" {
			continue // the leader is the node asked: the next case
		}
		st, resp := api(t, http.MethodDelete, api0+"/api/cluster/members/"+tc.name+"?offline=true", "")
		if st != http.StatusBadRequest || !strings.Contains(resp, tc.want) {
			t.Fatalf("forget %s: %d %s, want 400 saying %q", tc.name, st, resp, tc.want)
		}
	}
	if st, resp := api(t, http.MethodDelete, api0+"/api/cluster/members/warren@nowhere?offline=true", ""); st != http.StatusNotFound {
		t.Fatalf("forget a name that is no member: %d %s", st, resp)
	}
	if st, resp := api(t, http.MethodDelete, api0+"/api/cluster/members/"+c.Node(1).Name()+"?offline=maybe", ""); st != http.StatusBadRequest {
		t.Fatalf("offline=maybe: %d %s", st, resp)
	}

	// Still three voters: with one node down the other two have a quorum.
	c.Node(2).Stop()
	_, ch := dial(t, c.Node(0))
	if _, err := ch.QueueDeclare("after-typos", true, false, false, false, nil); err != nil {
		t.Fatalf("a definition change with one of three nodes down: %v", err)
	}
	// Forgetting the stopped node needs --offline.
	eventually(t, 10*time.Second, func() bool { return !nodeNames(t, c.Node(0))[c.Node(2).Name()] }, "node 1 sees node 3 down")
	st, resp := api(t, http.MethodDelete, api0+"/api/cluster/members/"+c.Node(2).Name(), "")
	if st != http.StatusBadRequest || !strings.Contains(resp, "forget it with --offline") {
		t.Fatalf("forget a stopped node without offline: %d %s", st, resp)
	}
}

// TestLostDataDirectory: issue 22 item 1. A member restarted with an empty
// data directory (a replaced disk, the usual command line) panicked in
// etcd raft at every start ("tocommit(5) is out of range [lastIndex(3)]"),
// and took on the cluster id of the first peer that dialled it. Now it
// refuses to start, naming the recovery; the others refuse its links,
// and a join under its old identity is refused too; after
// `forget --offline`, it joins again as a new member and gets the
// definitions.
func TestLostDataDirectory(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	_, ch := dial(t, c.Node(0))
	for i := range 20 {
		if _, err := ch.QueueDeclare(fmt.Sprintf("before-%d", i), true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	lost := c.Node(2)
	eventually(t, 10*time.Second, func() bool { return queueOn(lost, "before-19") }, "node 3 has the definitions")
	lost.Stop()
	lost.LoseData()
	err := lost.TryStart()
	if err == nil {
		t.Fatal("a member with an empty data directory started as the member it was")
	}
	for _, want := range []string{"knows it from an earlier one", "another data directory", "warren cluster forget --offline " + lost.Name(), "--cluster-join"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("start refused with %q, want it to say %q", err, want)
		}
	}
	// The same node started to join, before it is forgotten: the members
	// refuse its links, it learns no cluster id, and a join under its
	// old name is refused.
	lost.SetJoin(true)
	if err := lost.TryStart(); err != nil {
		t.Fatalf("start to join: %v", err)
	}
	time.Sleep(500 * time.Millisecond)
	if id := lost.Cluster().Meta().ClusterID(); id != "" {
		t.Fatalf("the blank node took on cluster id %q", id)
	}
	body := fmt.Sprintf(`{"name":%q,"address":%q}`, lost.Name(), lost.ClusterAddr())
	if st, resp := api(t, http.MethodPost, c.Node(0).MgmtURL()+"/api/cluster/members", body); st != http.StatusBadRequest ||
		!strings.Contains(resp, "another data directory") {
		t.Fatalf("join of the blank node under its old identity: %d %s", st, resp)
	}
	lost.Stop()
	// The recovery the error names: forget it, then join it as new.
	eventually(t, 10*time.Second, func() bool { return !nodeNames(t, c.Node(0))[lost.Name()] }, "node 1 sees node 3 down")
	if st, resp := api(t, http.MethodDelete, c.Node(0).MgmtURL()+"/api/cluster/members/"+lost.Name()+"?offline=true", ""); st != http.StatusNoContent {
		t.Fatalf("forget --offline: %d %s", st, resp)
	}
	lost.LoseData()
	if err := lost.TryStart(); err != nil {
		t.Fatalf("start to join after the forget: %v", err)
	}
	if st, resp := api(t, http.MethodPost, c.Node(0).MgmtURL()+"/api/cluster/members", body); st != http.StatusNoContent {
		t.Fatalf("join after the forget: %d %s", st, resp)
	}
	eventually(t, 10*time.Second, func() bool { return queueOn(lost, "before-19") }, "the rejoined node has the definitions")
	c.WaitReady()
	if _, err := ch.QueueDeclare("after-rejoin", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool { return queueOn(lost, "after-rejoin") }, "a change after the rejoin reaches it")
	for i := range 3 {
		if v := voterNames(c.Node(i)); len(v) != 3 {
			t.Fatalf("node %d sees voters %v", i, v)
		}
	}
}

// TestDrainHandsOverLeaderships: issue 22, warren node drain in a cluster.
// Draining the node that leads the metadata group and a quorum queue
// hands both leaderships to running members, closes its AMQP listener and
// shows being_drained; revive opens the listener again.
func TestDrainHandsOverLeaderships(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	lead := -1
	for i := range 3 {
		if c.Node(i).Cluster().Meta().Leader() == c.Node(i).Name() {
			lead = i
		}
	}
	if lead < 0 {
		t.Fatal("no metadata leader")
	}
	nd := c.Node(lead)
	_, ch := dial(t, nd) // client-local: the quorum queue is led by nd
	if _, err := ch.QueueDeclare("drain-qq", true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool { return c.QueueLeader("/", "drain-qq") == lead }, "the drained node leads the quorum queue")
	st, body := api(t, http.MethodPost, nd.MgmtURL()+"/api/node/drain", "")
	if st != http.StatusOK {
		t.Fatalf("drain: %d %s", st, body)
	}
	var r struct {
		BeingDrained bool `json:"being_drained"`
		Moved        int  `json:"quorum_leaders_moved"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || !r.BeingDrained || r.Moved != 1 {
		t.Fatalf("drain answered %s (%v)", body, err)
	}
	if l := c.QueueLeader("/", "drain-qq"); l == lead || l < 0 {
		t.Fatalf("the quorum queue's leader is node %d after draining node %d", l, lead)
	}
	eventually(t, 5*time.Second, func() bool {
		l := c.Node((lead + 1) % 3).Cluster().Meta().Leader()
		return l != "" && l != nd.Name()
	}, "another node leads the metadata group")
	if _, err := amqp.Dial(nd.URL()); err == nil {
		t.Fatal("a drained node takes AMQP connections")
	}
	st, body = api(t, http.MethodGet, nd.MgmtURL()+"/api/nodes/"+nd.Name(), "")
	if st != http.StatusOK || !strings.Contains(body, `"being_drained":true`) {
		t.Fatalf("/api/nodes of the drained node: %d %s", st, body)
	}
	// Definition changes go on through the others.
	_, ch2 := dial(t, c.Node((lead+1)%3))
	if _, err := ch2.QueueDeclare("after-drain", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if st, body := api(t, http.MethodPost, nd.MgmtURL()+"/api/node/revive", ""); st != http.StatusOK || !strings.Contains(body, `"being_drained":false`) {
		t.Fatalf("revive: %d %s", st, body)
	}
	conn, err := amqp.Dial(nd.URL())
	if err != nil {
		t.Fatalf("dial after revive: %v", err)
	}
	conn.Close()
}
