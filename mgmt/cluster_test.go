package mgmt_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/mgmt"
	"github.com/warrenmq/warren/server"
	"github.com/warrenmq/warren/warrentest"
)

// Issue 13: the management API is cluster-wide from any node. These tests
// join three real nodes (each its own broker with a node name, AMQP
// listener and management server) through a fake mgmt.Cluster whose
// Fetch calls the other server's ServeLocal directly, as the cluster
// glue does over the inter-node transport. Definitions are not
// replicated here, so the tests make them on every node, as replication
// would.

// fakeNet is the cluster as the fake sees it: every node's server, which
// are down, and every Fetch made.
type fakeNet struct {
	mu      sync.Mutex
	names   []string
	servers map[string]*mgmt.Server
	down    map[string]bool
	leader  string
	fetches []string // "from->to METHOD path"

	memberErr error       // what AddMember and RemoveMember return
	added     [][2]string // AddMember calls
	removed   []string    // RemoveMember calls
}

type fakeCluster struct {
	n    *fakeNet
	self string
}

func (c *fakeCluster) Self() string { return c.self }

func (c *fakeCluster) Nodes() []mgmt.NodeInfo {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	var out []mgmt.NodeInfo
	for _, name := range c.n.names {
		out = append(out, mgmt.NodeInfo{Name: name, Address: "127.0.0.1:" + name[len(name)-1:],
			Running: !c.n.down[name], Leader: name == c.n.leader})
	}
	return out
}

func (c *fakeCluster) Status() mgmt.ClusterStatus {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	return mgmt.ClusterStatus{ID: "h5-cluster-id", Leader: c.n.leader}
}

func (c *fakeCluster) Fetch(ctx context.Context, node, method, path string, body []byte) (int, []byte, error) {
	c.n.mu.Lock()
	c.n.fetches = append(c.n.fetches, c.self+"->"+node+" "+method+" "+path)
	s, down := c.n.servers[node], c.n.down[node]
	c.n.mu.Unlock()
	if down || s == nil {
		return 0, nil, fmt.Errorf("node %s: unreachable", node)
	}
	st, resp := s.ServeLocal(method, path, body)
	return st, resp, nil
}

func (c *fakeCluster) AddMember(ctx context.Context, name, addr string) error {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	c.n.added = append(c.n.added, [2]string{name, addr})
	return c.n.memberErr
}

func (c *fakeCluster) RemoveMember(ctx context.Context, name string, offline bool) error {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	c.n.removed = append(c.n.removed, name)
	return c.n.memberErr
}

func (n *fakeNet) setDown(name string, down bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.down[name] = down
}

// takeFetches returns and forgets the fetches made so far.
func (n *fakeNet) takeFetches() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	f := n.fetches
	n.fetches = nil
	return f
}

type clusterNode struct {
	name string
	w    *warrentest.Broker
	b    *broker.Broker
	f    *fixture // API calls against this node's HTTP port
}

const (
	nodeA = "warren@h5-a"
	nodeB = "warren@h5-b"
	nodeC = "warren@h5-c"
)

// startCluster starts three nodes joined by a fakeNet.
func startCluster(t *testing.T) (*fakeNet, map[string]*clusterNode) {
	t.Helper()
	n := &fakeNet{names: []string{nodeB, nodeA, nodeC}, servers: map[string]*mgmt.Server{}, down: map[string]bool{}, leader: nodeB}
	nodes := map[string]*clusterNode{}
	for _, name := range n.names {
		b, err := broker.Open(broker.Config{Node: name, DataDir: t.TempDir()})
		must(t, err)
		t.Cleanup(func() { b.Close() }) // after the server's shutdown (cleanups run last first)
		w := warrentest.Start(t, warrentest.WithConfig(func(c *server.Config) { c.Broker = b }))
		w.Mgmt().SetCluster(&fakeCluster{n: n, self: name})
		n.servers[name] = w.Mgmt()
		nodes[name] = &clusterNode{name: name, w: w, b: b, f: &fixture{t: t, w: w, api: w.MgmtURL()}}
	}
	return n, nodes
}

// everywhere runs fn on every node's broker, as replicated definitions
// would be.
func everywhere(nodes map[string]*clusterNode, fn func(b *broker.Broker)) {
	for _, cn := range nodes {
		fn(cn.b)
	}
}

// declareHomed declares a durable queue on every node with its home.
func declareHomed(t *testing.T, nodes map[string]*clusterNode, vhost, name, home string) {
	t.Helper()
	everywhere(nodes, func(b *broker.Broker) {
		q, _, _, err := b.VHost(vhost).DeclareQueue(broker.QueueSpec{Name: name, Durable: true, Home: home}, false)
		must(t, err)
		if q.Home != home {
			t.Fatalf("%s: queue %s declared with home %q", b.Node(), name, q.Home)
		}
	})
}

// dial opens an AMQP connection to a node as user into vhost.
func dial(t *testing.T, cn *clusterNode, user, vhost string) *amqp.Connection {
	t.Helper()
	u := fmt.Sprintf("amqp://%s:%s@%s/%s", user, user, cn.w.Addr(), url.PathEscape(vhost))
	if user == "guest" {
		u = fmt.Sprintf("amqp://guest:guest@%s/%s", cn.w.Addr(), url.PathEscape(vhost))
	}
	return testutil.Dial(t, u, testutil.Named("h5-"+user+"@"+cn.name))
}

// publish sends n messages to queue q through conn.
func publish(t *testing.T, conn *amqp.Connection, q string, n int) {
	t.Helper()
	ch, err := conn.Channel()
	must(t, err)
	for range n {
		must(t, ch.PublishWithContext(context.Background(), "", q, true, false, amqp.Publishing{Body: []byte("m")}))
	}
}

// setupCluster: vhost h5v on every node, user h5-bob (management, may use
// h5v only), queues h5-qa/h5-qb/h5-qc in h5v homed on a/b/c with 2/3/1
// messages, h5-hidden in "/" homed on c with 1; guest connected to every
// node (in "/"), h5-bob to b; a consumer on c's h5-qc.
func setupCluster(t *testing.T) (*fakeNet, map[string]*clusterNode, map[string]*amqp.Connection) {
	n, nodes := startCluster(t)
	everywhere(nodes, func(b *broker.Broker) {
		b.AddVHost("h5v")
		b.PutUser("h5-bob", "h5-bob", []string{"management"})
		all := broker.Permission{Configure: ".*", Write: ".*", Read: ".*"}
		must(t, b.SetPermissions("h5v", "h5-bob", all))
		must(t, b.SetPermissions("h5v", "guest", all))
	})
	declareHomed(t, nodes, "h5v", "h5-qa", nodeA)
	declareHomed(t, nodes, "h5v", "h5-qb", nodeB)
	declareHomed(t, nodes, "h5v", "h5-qc", nodeC)
	declareHomed(t, nodes, "/", "h5-hidden", nodeC)
	conns := map[string]*amqp.Connection{}
	for name, cn := range nodes {
		conns[name] = dial(t, cn, "guest", "/")
	}
	conns["bob"] = dial(t, nodes[nodeB], "h5-bob", "h5v")
	gv := map[string]*amqp.Connection{}
	for name, cn := range nodes {
		gv[name] = dial(t, cn, "guest", "h5v")
	}
	publish(t, gv[nodeA], "h5-qa", 2)
	publish(t, gv[nodeB], "h5-qb", 3)
	publish(t, gv[nodeC], "h5-qc", 1)
	publish(t, conns[nodeC], "h5-hidden", 1)
	for name, cn := range nodes {
		cn.f.waitQueue("h5v", map[string]string{nodeA: "h5-qa", nodeB: "h5-qb", nodeC: "h5-qc"}[name],
			map[string]int{nodeA: 2, nodeB: 3, nodeC: 1}[name])
	}
	nodes[nodeC].f.waitQueue("/", "h5-hidden", 1)
	ch, err := gv[nodeC].Channel()
	must(t, err)
	must(t, ch.Qos(1, 0, false)) // the one message stays unacked: the count stays 1
	_, err = ch.Consume("h5-qc", "h5-ctag", false, false, false, false, nil)
	must(t, err)
	return n, nodes, conns
}

// waitQueue polls the node's view of a queue until it holds n messages.
func (f *fixture) waitQueue(vhost, q string, n int) {
	f.t.Helper()
	testutil.Eventually(f.t, 5*time.Second, fmt.Sprintf("queue %s holds %d messages", q, n), func() bool {
		var m map[string]any
		f.call("GET", "/api/queues/"+url.PathEscape(vhost)+"/"+q, nil, &m)
		return m["messages"] == float64(n)
	})
}

func names(items []map[string]any, key string) []string {
	var out []string
	for _, m := range items {
		out = append(out, fmt.Sprint(m[key]))
	}
	sort.Strings(out)
	return out
}

func byName(items []map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, m := range items {
		out[fmt.Sprint(m["name"])] = m
	}
	return out
}

// Issue 13: connections, channels, consumers, queues and the overview are
// cluster-wide from any node; each item names its node; a queue's counts
// come from its home node; a list request asks each other node once and
// no node asks further (no fan-out loop).
func TestClusterWideLists(t *testing.T) {
	n, nodes, _ := setupCluster(t)
	wantQueues := map[string]string{"h5-qa": nodeA, "h5-qb": nodeB, "h5-qc": nodeC, "h5-hidden": nodeC}
	wantMsgs := map[string]float64{"h5-qa": 2, "h5-qb": 3, "h5-qc": 1, "h5-hidden": 1}
	for _, name := range n.names {
		f := nodes[name].f
		var qs []map[string]any
		if st := f.call("GET", "/api/queues", nil, &qs); st != 200 {
			t.Fatalf("%s: GET /api/queues: %d", name, st)
		}
		got := byName(qs)
		if len(qs) != len(wantQueues) {
			t.Fatalf("%s: queues %v, want %v", name, names(qs, "name"), wantQueues)
		}
		for q, home := range wantQueues {
			m := got[q]
			if m["node"] != home || m["messages"] != wantMsgs[q] || m["state"] != "running" {
				t.Fatalf("%s: queue %s: node %v messages %v state %v, want %s %v running", name, q, m["node"], m["messages"], m["state"], home, wantMsgs[q])
			}
		}
		if got["h5-qc"]["consumers"] != float64(1) {
			t.Fatalf("%s: h5-qc consumers = %v", name, got["h5-qc"]["consumers"])
		}
		var one map[string]any
		if st := f.call("GET", "/api/queues/h5v/h5-qb", nil, &one); st != 200 || one["node"] != nodeB || one["messages"] != float64(3) {
			t.Fatalf("%s: GET h5-qb: %d %v %v", name, st, one["node"], one["messages"])
		}

		if st := f.call("GET", "/api/queues/%2F/h5-hidden", nil, &one); st != 200 || one["node"] != nodeC || one["messages"] != float64(1) {
			t.Fatalf("%s: GET /api/queues/%%2F/h5-hidden: %d %v %v", name, st, one["node"], one["messages"])
		}
		var inRoot []map[string]any
		if f.call("GET", "/api/queues/%2F", nil, &inRoot); len(inRoot) != 1 || inRoot[0]["name"] != "h5-hidden" {
			t.Fatalf("%s: queues in /: %v", name, summary(inRoot))
		}

		var conns []map[string]any
		f.call("GET", "/api/connections", nil, &conns)
		if len(conns) != 7 { // guest in "/" and h5v on each node, h5-bob on b
			t.Fatalf("%s: %d connections: %v", name, len(conns), names(conns, "user_provided_name"))
		}
		for _, c := range conns {
			if !strings.HasSuffix(str(c["user_provided_name"]), "@"+str(c["node"])) {
				t.Fatalf("%s: connection %v reported on node %v", name, c["user_provided_name"], c["node"])
			}
		}
		var vconns []map[string]any
		f.call("GET", "/api/vhosts/h5v/connections", nil, &vconns)
		if len(vconns) != 4 {
			t.Fatalf("%s: %d connections in h5v", name, len(vconns))
		}
		var chans []map[string]any
		f.call("GET", "/api/channels", nil, &chans)
		if len(chans) != 5 { // publishers on guest's h5v a/b/c and "/" c, the consumer's
			t.Fatalf("%s: %d channels: %v", name, len(chans), names(chans, "name"))
		}
		var cons []map[string]any
		f.call("GET", "/api/consumers", nil, &cons)
		if len(cons) != 1 || cons[0]["consumer_tag"] != "h5-ctag" || cons[0]["channel_details"].(map[string]any)["node"] != nodeC {
			t.Fatalf("%s: consumers %v", name, cons)
		}

		var ov map[string]any
		f.call("GET", "/api/overview", nil, &ov)
		ot, qt := ov["object_totals"].(map[string]any), ov["queue_totals"].(map[string]any)
		if ov["node"] != name || ov["cluster_name"] != nodeA || ot["connections"] != float64(7) || ot["channels"] != float64(5) ||
			ot["queues"] != float64(4) || ot["consumers"] != float64(1) || qt["messages"] != float64(7) {
			t.Fatalf("%s: overview node %v cluster %v object_totals %v queue_totals %v", name, ov["node"], ov["cluster_name"], ot, qt)
		}
		ls, _ := ov["listeners"].([]any)
		lnodes := map[string]bool{}
		for _, l := range ls {
			lnodes[str(l.(map[string]any)["node"])] = true
		}
		if len(lnodes) != 3 {
			t.Fatalf("%s: overview listeners %v", name, ls)
		}
		var vh map[string]any
		f.call("GET", "/api/vhosts/h5v", nil, &vh)
		if cs, _ := vh["cluster_state"].(map[string]any); vh["messages"] != float64(6) || len(cs) != 3 || cs[nodeC] != "running" {
			t.Fatalf("%s: vhost h5v: messages %v cluster_state %v", name, vh["messages"], vh["cluster_state"])
		}
		var cn map[string]any
		f.call("GET", "/api/cluster-name", nil, &cn)
		if cn["name"] != nodeA {
			t.Fatalf("%s: cluster-name %v", name, cn)
		}
	}

	// One list request: one fetch per other node, none made by them.
	n.takeFetches()
	var conns []map[string]any
	nodes[nodeA].f.call("GET", "/api/connections", nil, &conns)
	fetches := n.takeFetches()
	slices.Sort(fetches)
	want := []string{nodeA + "->" + nodeB + " GET /api/connections", nodeA + "->" + nodeC + " GET /api/connections"}
	if !slices.Equal(fetches, want) {
		t.Fatalf("fetches %q, want %q", fetches, want)
	}

	// A queue PUT with "node" is homed there.
	if st := nodes[nodeA].f.call("PUT", "/api/queues/h5v/h5-placed", map[string]any{"durable": true, "node": nodeC}, nil); st != 201 {
		t.Fatalf("PUT with node: %d", st)
	}
	if q := nodes[nodeA].b.VHost("h5v").Queue("h5-placed"); q == nil || q.Home != nodeC {
		t.Fatalf("h5-placed: %+v", q)
	}

	// Paging, sorting and columns apply to the merged list.
	var page map[string]any
	if st := nodes[nodeB].f.call("GET", "/api/queues?page=2&page_size=3&sort=name&columns=name,node", nil, &page); st != 200 {
		t.Fatalf("paged queues: %d %v", st, page)
	}
	items, _ := page["items"].([]any)
	if page["total_count"] != float64(4) || page["filtered_count"] != float64(4) || page["page_count"] != float64(2) || len(items) != 1 {
		t.Fatalf("page 2 of 3: %v", page)
	}
	if it := items[0].(map[string]any); it["name"] != "h5-qc" || it["node"] != nodeC || len(it) != 2 {
		t.Fatalf("page 2 item: %v", it)
	}
	var sorted []map[string]any
	nodes[nodeC].f.call("GET", "/api/queues?sort=messages&sort_reverse=true", nil, &sorted)
	if len(sorted) != 4 || sorted[0]["name"] != "h5-qb" || sorted[1]["name"] != "h5-qa" {
		t.Fatalf("sorted by messages desc: %v", names(sorted, "name"))
	}
}

func str(v any) string { s, _ := v.(string); return s }

// Issue 13: a user that is not a monitoring user sees, cluster-wide, only
// its own connections and channels and the queues of vhosts it may use;
// the other nodes answer with everything and the node asked filters.
func TestClusterVisibilityForNonAdmin(t *testing.T) {
	_, nodes, _ := setupCluster(t)
	for _, name := range []string{nodeA, nodeC} {
		f := nodes[name].f
		var conns []map[string]any
		if st := f.callAs("h5-bob", "h5-bob", "GET", "/api/connections", nil, &conns); st != 200 {
			t.Fatalf("%s: %d", name, st)
		}
		if len(conns) != 1 || conns[0]["user"] != "h5-bob" || conns[0]["node"] != nodeB {
			t.Fatalf("%s: h5-bob sees connections %v", name, names(conns, "user_provided_name"))
		}
		var qs []map[string]any
		f.callAs("h5-bob", "h5-bob", "GET", "/api/queues", nil, &qs)
		if got := names(qs, "name"); !slices.Equal(got, []string{"h5-qa", "h5-qb", "h5-qc"}) {
			t.Fatalf("%s: h5-bob sees queues %v", name, got)
		}
		var mine []map[string]any
		if st := f.callAs("h5-bob", "h5-bob", "GET", "/api/connections/username/h5-bob", nil, &mine); st != 200 || len(mine) != 1 || mine[0]["node"] != nodeB {
			t.Fatalf("%s: h5-bob's connections by user: %d %v", name, st, mine)
		}
		if st := f.callAs("h5-bob", "h5-bob", "GET", "/api/connections/username/guest", nil, nil); st != 401 {
			t.Fatalf("%s: h5-bob lists guest's connections: %d", name, st)
		}
		var chans []map[string]any
		f.callAs("h5-bob", "h5-bob", "GET", "/api/channels", nil, &chans)
		if len(chans) != 0 {
			t.Fatalf("%s: h5-bob sees channels %v", name, names(chans, "name"))
		}
		var ov map[string]any
		f.callAs("h5-bob", "h5-bob", "GET", "/api/overview", nil, &ov)
		ot := ov["object_totals"].(map[string]any)
		if ot["connections"] != float64(1) || ot["channels"] != float64(0) || ot["queues"] != float64(3) {
			t.Fatalf("%s: h5-bob's overview object_totals %v", name, ot)
		}
		if qt := ov["queue_totals"].(map[string]any); qt["messages"] != float64(6) {
			t.Fatalf("%s: h5-bob's queue_totals %v", name, qt)
		}
		// Another user's connection elsewhere is not found, let alone closed.
		guestOnC := connNamed(t, nodes[nodeC].f, "h5-guest@"+nodeC)
		path := "/api/connections/" + url.PathEscape(str(guestOnC["name"]))
		if st := f.callAs("h5-bob", "h5-bob", "GET", path, nil, nil); st != 404 {
			t.Fatalf("%s: h5-bob GET guest's connection: %d", name, st)
		}
		if st := f.callAs("h5-bob", "h5-bob", "DELETE", path, nil, nil); st != 404 {
			t.Fatalf("%s: h5-bob DELETE guest's connection: %d", name, st)
		}
	}
	// The HTTP port never takes the trusted, local-only path: without
	// credentials a list is refused.
	req, _ := http.NewRequest("GET", nodes[nodeA].f.api+"/api/connections", nil)
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("no credentials: %d", resp.StatusCode)
	}
}

// Issue 13: a node that does not answer is listed with running=false and
// its queues with state "down", from the records the others hold.
func TestClusterNodeDown(t *testing.T) {
	n, nodes, _ := setupCluster(t)
	f := nodes[nodeA].f
	var ns []map[string]any
	f.call("GET", "/api/nodes", nil, &ns)
	if got := names(ns, "name"); !slices.Equal(got, []string{nodeA, nodeB, nodeC}) {
		t.Fatalf("nodes %v", got)
	}
	for _, m := range ns {
		if m["running"] != true || m["type"] != "disc" || m["mem_used"] == nil || m["uptime"] == nil || m["leader"] != (m["name"] == nodeB) {
			t.Fatalf("node %v: running %v mem_used %v leader %v", m["name"], m["running"], m["mem_used"], m["leader"])
		}
	}
	// b reports its own sockets: one for each of its three connections.
	if m := byName(ns)[nodeB]; m["sockets_used"] != float64(3) {
		t.Fatalf("b's sockets_used = %v", m["sockets_used"])
	}

	n.setDown(nodeC, true)
	f.call("GET", "/api/nodes", nil, &ns)
	if c := byName(ns)[nodeC]; c["running"] != false || byName(ns)[nodeB]["running"] != true {
		t.Fatalf("with c down: %v", ns)
	}
	var one map[string]any
	if st := f.call("GET", "/api/nodes/"+url.PathEscape(nodeC), nil, &one); st != 200 || one["running"] != false {
		t.Fatalf("GET node c: %d %v", st, one)
	}
	if st := f.call("GET", "/api/nodes/warren@nowhere", nil, nil); st != 404 {
		t.Fatalf("unknown node: %d", st)
	}
	var qs []map[string]any
	f.call("GET", "/api/queues", nil, &qs)
	got := byName(qs)
	if len(qs) != 4 || got["h5-qc"]["state"] != "down" || got["h5-qc"]["node"] != nodeC || got["h5-hidden"]["state"] != "down" ||
		got["h5-qb"]["state"] != "running" || got["h5-qb"]["messages"] != float64(3) {
		t.Fatalf("queues with c down: %v", summary(qs))
	}
	if st := f.call("GET", "/api/queues/h5v/h5-qc", nil, &one); st != 200 || one["state"] != "down" || one["node"] != nodeC {
		t.Fatalf("GET h5-qc with c down: %d %v", st, one)
	}
	var conns []map[string]any
	f.call("GET", "/api/connections", nil, &conns)
	if len(conns) != 5 {
		t.Fatalf("connections with c down: %v", names(conns, "user_provided_name"))
	}
	var ov map[string]any
	f.call("GET", "/api/overview", nil, &ov)
	if qt := ov["queue_totals"].(map[string]any); qt["messages"] != float64(5) {
		t.Fatalf("queue_totals with c down: %v", qt)
	}
	var vh map[string]any
	f.call("GET", "/api/vhosts/h5v", nil, &vh)
	if cs, _ := vh["cluster_state"].(map[string]any); vh["messages"] != float64(5) || cs[nodeC] != "nodedown" || cs[nodeA] != "running" {
		t.Fatalf("vhost h5v with c down: messages %v cluster_state %v", vh["messages"], vh["cluster_state"])
	}
	n.setDown(nodeC, false)
	f.call("GET", "/api/queues/h5v/h5-qc", nil, &one)
	if one["state"] != "running" || one["messages"] != float64(1) {
		t.Fatalf("h5-qc back: %v", one)
	}
}

// Issue 13: closing a connection on another node from any node's API.
func TestClusterCloseRemoteConnection(t *testing.T) {
	_, nodes, conns := setupCluster(t)
	closed := conns["bob"].NotifyClose(make(chan *amqp.Error, 1))
	path := "/api/connections/" + url.PathEscape(str(connNamed(t, nodes[nodeA].f, "h5-h5-bob@"+nodeB)["name"]))
	var one map[string]any
	if st := nodes[nodeC].f.callAs("h5-bob", "h5-bob", "GET", path, nil, &one); st != 200 || one["node"] != nodeB {
		t.Fatalf("h5-bob GET its connection from c: %d %v", st, one)
	}
	req, _ := http.NewRequest("DELETE", nodes[nodeA].f.api+path, nil)
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("X-Reason", "h5 says bye")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Fatalf("DELETE from a: %d", resp.StatusCode)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != 320 || !strings.Contains(e.Reason, "h5 says bye") {
			t.Fatalf("closed with %v", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the connection on b was not closed")
	}
	testutil.Eventually(t, 5*time.Second, "the closed connection gone from the list", func() bool {
		return nodes[nodeA].f.call("GET", path, nil, nil) == 404
	})
	if st := nodes[nodeA].f.call("DELETE", path, nil, nil); st != 404 {
		t.Fatalf("DELETE again: %d", st)
	}
}

// Issue 13: warren cluster's endpoints: status, add and remove a member,
// administrators only; no quorum answers 503.
func TestClusterMembershipEndpoints(t *testing.T) {
	n, nodes, _ := setupCluster(t)
	f := nodes[nodeC].f
	var st map[string]any
	if code := f.call("GET", "/api/cluster-status", nil, &st); code != 200 {
		t.Fatalf("cluster-status: %d", code)
	}
	members, _ := st["members"].([]any)
	if st["node"] != nodeC || st["leader"] != nodeB || st["cluster_id"] != "h5-cluster-id" || st["cluster_name"] != nodeA || len(members) != 3 {
		t.Fatalf("cluster-status: %v", st)
	}
	if m := members[1].(map[string]any); m["name"] != nodeB || m["leader"] != true || m["running"] != true || m["address"] != "127.0.0.1:b" {
		t.Fatalf("member b: %v", m)
	}
	for _, r := range []struct{ method, path string }{
		{"GET", "/api/cluster-status"}, {"POST", "/api/cluster/members"}, {"DELETE", "/api/cluster/members/" + nodeA},
	} {
		var e map[string]any
		if code := f.callAs("h5-bob", "h5-bob", r.method, r.path, map[string]any{"name": "x", "address": "y"}, &e); code != 401 || e["error"] != "not_authorised" {
			t.Fatalf("h5-bob %s %s: %d %v", r.method, r.path, code, e)
		}
	}
	if code := f.call("POST", "/api/cluster/members", map[string]any{"name": "warren@h5-d", "address": "127.0.0.1:7004"}, nil); code != 204 {
		t.Fatalf("add: %d", code)
	}
	var e map[string]any
	if code := f.call("POST", "/api/cluster/members", map[string]any{"name": "warren@h5-d"}, &e); code != 400 || e["reason"] != "[{key_missing,address}]" {
		t.Fatalf("add without address: %d %v", code, e)
	}
	if code := f.call("DELETE", "/api/cluster/members/"+url.PathEscape(nodeA), nil, nil); code != 204 {
		t.Fatalf("remove: %d", code)
	}
	if code := f.call("DELETE", "/api/cluster/members/warren@nowhere", nil, nil); code != 404 {
		t.Fatalf("remove unknown: %d", code)
	}
	n.mu.Lock()
	added, removed := n.added, n.removed
	n.memberErr = noQuorumErr{"cluster has no quorum: member change not applied (timed out after 5s)"}
	n.mu.Unlock()
	if len(added) != 1 || added[0] != [2]string{"warren@h5-d", "127.0.0.1:7004"} || !slices.Equal(removed, []string{nodeA}) {
		t.Fatalf("calls: added %v removed %v", added, removed)
	}
	e = nil
	if code := f.call("POST", "/api/cluster/members", map[string]any{"name": "warren@h5-e", "address": "x:1"}, &e); code != 503 ||
		e["error"] != "unavailable" || e["reason"] != "cluster has no quorum: member change not applied (timed out after 5s)" {
		t.Fatalf("add without quorum: %d %v", code, e)
	}
	n.mu.Lock()
	n.memberErr = errors.New("warren@h5-e is not reachable")
	n.mu.Unlock()
	if code := f.call("DELETE", "/api/cluster/members/"+url.PathEscape(nodeB), nil, &e); code != 400 || e["reason"] != "warren@h5-e is not reachable" {
		t.Fatalf("remove failing: %d %v", code, e)
	}
}

// Issue 13: a node's /metrics is its own: its name and the cluster's in
// rabbitmq_identity_info, the queues homed on it only.
func TestClusterMetricsPerNode(t *testing.T) {
	_, nodes, _ := setupCluster(t)
	sc := getMetrics(t, nodes[nodeB].f.api)
	sc.want(t, 1, "rabbitmq_identity_info", "rabbitmq_node", nodeB, "rabbitmq_cluster", nodeA)
	sc.want(t, 3, "rabbitmq_queue_messages", "vhost", "h5v", "queue", "h5-qb")
	sc.absent(t, "rabbitmq_queue_messages", "vhost", "h5v", "queue", "h5-qa")
	sc.absent(t, "rabbitmq_queue_messages", "vhost", "/", "queue", "h5-hidden")
	sc.want(t, 1, "rabbitmq_queues")
}

// noQuorumErr is an error a cluster returns without a quorum.
type noQuorumErr struct{ text string }

func (e noQuorumErr) Error() string { return e.text }
func (e noQuorumErr) Unwrap() error { return broker.ErrNoQuorum }

// connNamed finds, through f, the connection whose client named it
// connName (cluster-wide, as guest).
func connNamed(t *testing.T, f *fixture, connName string) map[string]any {
	t.Helper()
	var list []map[string]any
	f.call("GET", "/api/connections", nil, &list)
	for _, c := range list {
		if c["user_provided_name"] == connName {
			return c
		}
	}
	t.Fatalf("no connection %q in %v", connName, names(list, "user_provided_name"))
	return nil
}

// summary is name, node, state and messages of each queue.
func summary(qs []map[string]any) []string {
	var out []string
	for _, q := range qs {
		out = append(out, fmt.Sprintf("%v@%v:%v:%v", q["name"], q["node"], q["state"], q["messages"]))
	}
	sort.Strings(out)
	return out
}

// Issue 13: a single node (no cluster) answers cluster-status as a
// cluster of itself and refuses membership changes.
func TestClusterStatusSingleNode(t *testing.T) {
	f := newFixture(t)
	var st map[string]any
	if code := f.call("GET", "/api/cluster-status", nil, &st); code != 200 {
		t.Fatalf("cluster-status: %d", code)
	}
	members, _ := st["members"].([]any)
	var ov map[string]any
	f.call("GET", "/api/overview", nil, &ov)
	if len(members) != 1 || st["node"] != ov["node"] || st["leader"] != ov["node"] || st["cluster_name"] != ov["cluster_name"] {
		t.Fatalf("cluster-status %v, overview node %v", st, ov["node"])
	}
	var ns []map[string]any
	if f.call("GET", "/api/nodes", nil, &ns); len(ns) != 1 || ns[0]["name"] != ov["node"] || ns[0]["running"] != true {
		t.Fatalf("nodes: %v", ns)
	}
	if _, has := ns[0]["leader"]; has {
		t.Fatalf("a single node's /api/nodes gained cluster fields: %v", ns[0])
	}
	var e map[string]any
	if code := f.call("POST", "/api/cluster/members", map[string]any{"name": "warren@x", "address": "x:1"}, &e); code != 400 || e["error"] != "bad_request" {
		t.Fatalf("add on a single node: %d %v", code, e)
	}
}

// noQuorumRepl is a Replicator that cannot commit anything.
type noQuorumRepl struct{}

func (noQuorumRepl) Propose(ctx context.Context, cmd []byte) error {
	return fmt.Errorf("%w: timed out after 5s", broker.ErrNoQuorum)
}

// Issue 13: a definition change through the API that the cluster cannot
// commit answers 503 unavailable with the broker's reason; reads go on.
func TestClusterNoQuorumChanges(t *testing.T) {
	b, err := broker.Open(broker.Config{Node: nodeA, DataDir: t.TempDir()})
	must(t, err)
	t.Cleanup(func() { b.Close() })
	w := warrentest.Start(t, warrentest.WithConfig(func(c *server.Config) { c.Broker = b }))
	b.SetReplicator(noQuorumRepl{})
	f := &fixture{t: t, w: w, api: w.MgmtURL()}
	for _, r := range []struct {
		method, path string
		body         any
		what         string
	}{
		{"PUT", "/api/queues/%2F/h5-nq", map[string]any{"durable": true}, "queue 'h5-nq'"},
		{"PUT", "/api/exchanges/%2F/h5-nqx", map[string]any{"type": "fanout"}, "exchange 'h5-nqx'"},
		{"PUT", "/api/vhosts/h5-nqv", nil, "h5-nqv"},
		{"PUT", "/api/users/h5-nqu", map[string]any{"password": "p", "tags": ""}, "h5-nqu"},
		{"PUT", "/api/policies/%2F/h5-nqp", map[string]any{"pattern": ".*", "definition": map[string]any{"max-length": 1}}, "h5-nqp"},
		{"DELETE", "/api/exchanges/%2F/amq.direct", nil, "amq.direct"},
		{"DELETE", "/api/users/guest", nil, "guest"},
		{"DELETE", "/api/permissions/%2F/guest", nil, "guest"},
		{"DELETE", "/api/vhosts/%2F", nil, "vhost '/'"},
		{"POST", "/api/definitions", map[string]any{"vhosts": []any{map[string]any{"name": "h5-nqd"}}}, "definitions import"},
	} {
		var e map[string]any
		code := f.call(r.method, r.path, r.body, &e)
		reason := str(e["reason"])
		if code != 503 || e["error"] != "unavailable" || !strings.HasPrefix(reason, "cluster has no quorum: ") ||
			!strings.Contains(reason, r.what) || !strings.HasSuffix(reason, "not applied (timed out after 5s)") {
			t.Errorf("%s %s without quorum: %d %v", r.method, r.path, code, e)
		}
	}
	var qs []map[string]any
	if code := f.call("GET", "/api/queues", nil, &qs); code != 200 {
		t.Fatalf("GET /api/queues without quorum: %d", code)
	}
}

// Issue 13: over a real in-process cluster (transport, Raft-replicated
// definitions, remote queues): a queue homed on n3 that n1's client
// publishes to shows, from every node, once, on n3 with its messages;
// connections are listed from any node; with n3 stopped its queue is
// "down" and cluster-status still answers.
func TestClusterRealNodes(t *testing.T) {
	c := warrentest.StartCluster(t, 3, warrentest.PlaceQueuesOn(warrentest.NodeName(2)))
	n1, n3 := c.Node(0), c.Node(2)
	conn, err := amqp.DialConfig(n1.URL(), amqp.Config{Properties: amqp.Table{"connection_name": "h5-real"}})
	must(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	must(t, err)
	_, err = ch.QueueDeclare("h5-real-q", true, false, false, false, nil)
	must(t, err)
	must(t, ch.Confirm(false))
	for range 3 {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", "h5-real-q", true, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("m")})
		must(t, err)
		if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
			t.Fatalf("publish not confirmed: %v %v", ok, err)
		}
	}
	for _, nd := range c.Nodes() {
		f := &fixture{t: t, api: nd.MgmtURL()}
		testutil.Eventually(t, 10*time.Second, nd.Name()+" lists h5-real-q on n3 with 3 messages, once", func() bool {
			var qs []map[string]any
			f.call("GET", "/api/queues/%2F", nil, &qs)
			n := 0
			for _, q := range qs {
				if q["name"] == "h5-real-q" {
					n++
					if q["node"] != n3.Name() || q["messages"] != float64(3) || q["state"] != "running" {
						return false
					}
				}
			}
			return n == 1
		})
		testutil.Eventually(t, 10*time.Second, nd.Name()+" lists h5-real on n1", func() bool {
			var cs []map[string]any
			f.call("GET", "/api/connections", nil, &cs)
			for _, c := range cs {
				if c["user_provided_name"] == "h5-real" {
					return c["node"] == n1.Name()
				}
			}
			return false
		})
	}
	n3.Stop()
	f := &fixture{t: t, api: n1.MgmtURL()}
	testutil.Eventually(t, 10*time.Second, "h5-real-q down with n3 stopped", func() bool {
		var q map[string]any
		return f.call("GET", "/api/queues/%2F/h5-real-q", nil, &q) == 200 && q["state"] == "down" && q["node"] == n3.Name()
	})
	var st map[string]any
	if code := f.call("GET", "/api/cluster-status", nil, &st); code != 200 || st["node"] != n1.Name() || len(st["members"].([]any)) != 3 || st["cluster_id"] == "" {
		t.Fatalf("cluster-status: %d %v", code, st)
	}
}
