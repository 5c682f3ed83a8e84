package mgmt

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	amqpc "github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/mgmt/api"
	"github.com/warrenmq/warren/server"
)

// Version is the RabbitMQ version whose behaviour (and management API)
// Warren implements, as its definitions exports say.
const Version = broker.Version

// routes registers every endpoint.
func (s *Server) routes() {
	s.handle("GET /api/overview", lvlManagement, (*call).overview)
	s.handle("GET /api/whoami", lvlManagement, (*call).whoami)
	s.handle("GET /api/cluster-name", lvlManagement, (*call).clusterName)
	s.handle("GET /api/extensions", lvlManagement, func(c *call) error { return c.ok([]any{}) })
	s.handle("GET /api/nodes", lvlMonitoring, (*call).nodes)
	s.handle("GET /api/nodes/{node}", lvlMonitoring, (*call).nodeGet)
	s.healthRoutes()
	s.clusterRoutes()
	s.maintenanceRoutes()
	s.quorumRoutes()
	s.streamReplicaRoutes()

	s.connRoutes()
	s.accessRoutes()
	s.queueRoutes()
	s.exchangeRoutes()
	s.policyRoutes()
	s.deadLetterRoutes()
	s.shovelRoutes()
	s.federationRoutes()
	s.streamRoutes()
	s.limitRoutes()

	s.mux.HandleFunc("GET /metrics", s.metrics)
	s.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, errNotFound)
	})
	if s.cfg.UI != nil {
		s.mux.Handle("/", s.cfg.UI)
	}
}

func (c *call) whoami() error {
	tags := c.user.Tags
	if tags == nil {
		tags = []string{}
	}
	return c.ok(map[string]any{"name": c.user.Name, "tags": tags})
}

func (c *call) clusterName() error { return c.ok(map[string]any{"name": c.s.clusterName()}) }

// statsWithRates renders counters as RabbitMQ's message_stats: each
// counter and its _details rate, and history when asked (issue 15).
func (c *call) statsWithRates(key string, k *histKind, cs counters, fields ...string) api.MessageStats {
	m := make(api.MessageStats, 2*len(fields))
	for _, f := range fields {
		m[f] = cs[f]
		m[f+"_details"] = c.det(key, k, f)
	}
	return m
}

var overviewStatFields = []string{"publish", "confirm", "return_unroutable", "drop_unroutable", "deliver", "deliver_no_ack",
	"get", "get_no_ack", "get_empty", "deliver_get", "redeliver", "ack", "disk_reads", "disk_writes"}

// overviewParts is what a node contributes to the overview: its own
// message counters, its own queues' counts by vhost (the queues homed on
// it) and its connections by user. The node asked sums the parts of every
// node over what the user may see (ServeLocal answers /api/overview with
// its parts).
type overviewParts struct {
	Stats  counters                  `json:"stats"`  // the node's channel counters (overviewStatFields)
	Rates  map[string]float64        `json:"rates"`  // their rates, and the queue totals' (messages...)
	VHosts map[string]*overviewVHost `json:"vhosts"` // by vhost
	Users  map[string]*overviewUser  `json:"users"`  // by user
	// Listeners are the node's, as the overview lists them (every node's
	// in a cluster, as RabbitMQ's).
	Listeners []api.Listener `json:"listeners"`
	// Hist is the node's overview and vhost history on the request's
	// grids, by object key and family (see histPart), when asked.
	Hist map[string][][]uint64 `json:"hist,omitempty"`
}

type overviewVHost struct {
	Ready     int                `json:"ready"`
	Unacked   int                `json:"unacked"`
	Consumers int                `json:"consumers"`
	Dead      uint64             `json:"dead"`
	Stats     counters           `json:"stats"` // the queues' publish, deliver_get, ack, redeliver
	Rates     map[string]float64 `json:"rates"`
}

type overviewUser struct {
	Connections int `json:"connections"`
	Channels    int `json:"channels"`
}

var visibleQueueStatFields = []string{"publish", "deliver_get", "ack", "redeliver"}

// overviewParts gathers this node's part of the overview.
func (s *Server) overviewParts() *overviewParts {
	p := &overviewParts{Stats: serverCounters(s.srv.MessageStats()), Rates: map[string]float64{},
		VHosts: map[string]*overviewVHost{}, Users: map[string]*overviewUser{}, Listeners: []api.Listener{}}
	for _, l := range s.listeners() {
		p.Listeners = append(p.Listeners, listener(s.node, l.proto, l.addr))
	}
	for _, f := range overviewStatFields {
		p.Rates[f] = s.hist.rate("overview", f)
	}
	for _, f := range []string{"messages", "messages_ready", "messages_unacknowledged", "dead_lettered"} {
		p.Rates["queue."+f] = s.hist.rate("overview", f)
	}
	for _, vn := range s.b.VHosts() {
		v := s.b.VHost(vn)
		if v == nil {
			continue
		}
		ov := &overviewVHost{Stats: counters{}, Rates: map[string]float64{}}
		p.VHosts[vn] = ov
		for _, q := range v.Queues() {
			if !q.ServedHere() {
				continue
			}
			st := q.Stats()
			ov.Ready += st.Ready
			ov.Unacked += st.Unacked
			ov.Consumers += st.Consumers
			for _, n := range st.DeadLettered {
				ov.Dead += n
			}
			qc := queueCounters(st)
			key := queueKey(vn, q.Name)
			for _, f := range visibleQueueStatFields {
				ov.Stats[f] += qc[f]
				ov.Rates[f] += s.hist.rate(key, f)
			}
		}
	}
	for _, ci := range s.srv.Connections() {
		u := p.Users[ci.User]
		if u == nil {
			u = &overviewUser{}
			p.Users[ci.User] = u
		}
		u.Connections++
		u.Channels += ci.Channels
	}
	return p
}

// clusterParts returns every node's overview parts, this node's first
// (only this node's on a single node), read once per request.
func (c *call) clusterParts() []*overviewParts {
	if c.parts != nil {
		return c.parts
	}
	c.parts = []*overviewParts{c.s.overviewParts()}
	c.histPart(c.parts[0])
	if c.clustered() {
		for _, r := range c.fanOut(http.MethodGet, "/api/overview"+c.rangeQuery(), nil) {
			var p overviewParts
			if r.ok200() && json.Unmarshal(r.body, &p) == nil {
				c.parts = append(c.parts, &p)
			}
		}
	}
	return c.parts
}

func (c *call) overview() error {
	s := c.s
	if err := c.parseHistory(false, false); err != nil {
		return err
	}
	if c.local {
		p := s.overviewParts()
		c.histPart(p)
		return c.ok(p)
	}
	parts := c.clusterParts()
	var ready, unacked, queues, consumers, exchanges int
	var dead uint64
	seen := c.seenVHosts()
	for _, v := range seen {
		queues += len(v.Queues())
		exchanges += len(v.Exchanges())
	}
	nconn, nch := 0, 0
	stats, rates := counters{}, map[string]float64{}
	vstats, vrates := counters{}, map[string]float64{}
	for _, p := range parts {
		for _, v := range seen {
			if ov := p.VHosts[v.Name]; ov != nil {
				ready += ov.Ready
				unacked += ov.Unacked
				consumers += ov.Consumers
				dead += ov.Dead
				for _, f := range visibleQueueStatFields {
					vstats[f] += ov.Stats[f]
					vrates[f] += ov.Rates[f]
				}
			}
		}
		for name, u := range p.Users {
			if c.seesUser(name) {
				nconn += u.Connections
				nch += u.Channels
			}
		}
		for f, n := range p.Stats {
			stats[f] += n
		}
		for f, r := range p.Rates {
			rates[f] += r
		}
	}
	// The history, when asked (issue 15): the queue totals and, for a
	// user who may not see everything, the message counts of the queues
	// in its vhosts; the node's message counters otherwise.
	var vkeys []string
	for _, v := range seen {
		vkeys = append(vkeys, vhostKey(v.Name))
	}
	det := func(rows *[][]uint64, keys []string, k *histKind, f string, rate float64) api.Details {
		i, ok := k.index[f]
		if !ok || !c.hasRange(k.family[i]) {
			return details(rate)
		}
		if *rows == nil {
			*rows = c.sumRows(keys, k.family[i], len(k.fields))
		}
		return c.detSum(*rows, k, f, rate)
	}
	var qrows, orows, vrows [][]uint64
	qdet := func(f string) api.Details {
		if !c.hasRange(famLengths) {
			return details(rates["queue."+f])
		}
		if qrows == nil {
			qrows = c.sumRows(vkeys, famLengths, len(kindVHost.fields))
		}
		i := kindVHost.index[f]
		return c.detFromRows(famLengths, func(j int) uint64 { return qrows[j][i] })
	}
	qt := api.QueueTotals{
		Messages: ready + unacked, MessagesDetails: qdet("messages"),
		MessagesReady: ready, MessagesReadyDetails: qdet("messages_ready"),
		MessagesUnacknowledged: unacked, MessagesUnacknowledgedDetails: qdet("messages_unacknowledged"),
	}
	msgStats := make(api.MessageStats, 2*len(overviewStatFields))
	for _, f := range overviewStatFields {
		msgStats[f], msgStats[f+"_details"] = stats[f], det(&orows, []string{"overview"}, kindOverview, f, rates[f])
	}
	if !c.monitor() {
		// A user who may not see everything sees the message counts of
		// the queues in its vhosts only, as RabbitMQ.
		msgStats = api.MessageStats{}
		for _, f := range visibleQueueStatFields {
			msgStats[f], msgStats[f+"_details"] = vstats[f], det(&vrows, vkeys, kindVHost, f, vrates[f])
		}
	}
	// Warren's own: messages dead-lettered by every queue.
	msgStats["dead_lettered"] = dead
	msgStats["dead_lettered_details"] = det(&orows, []string{"overview"}, kindOverview, "dead_lettered", rates["queue.dead_lettered"])
	listeners := []api.Listener{}
	for _, p := range parts {
		listeners = append(listeners, p.Listeners...)
	}
	return c.ok(api.Overview{
		ManagementVersion: Version, RatesMode: "basic",
		SampleRetentionPolicies: map[string][]int{"global": {600, 3600, 28800, 86400}, "basic": {600, 3600}, "detailed": {600}},
		ExchangeTypes:           exchangeTypes(),
		ProductVersion:          server.Version, ProductName: "Warren", RabbitMQVersion: Version,
		ClusterName: s.clusterName(), ErlangVersion: runtime.Version(), ErlangFullVersion: runtime.Version(),
		ReleaseSeriesSupportStatus: "supported",
		MessageStats:               msgStats,
		ChurnRates:                 map[string]any{},
		QueueTotals:                qt,
		ObjectTotals:               api.ObjectTotals{Channels: nch, Connections: nconn, Consumers: consumers, Exchanges: exchanges, Queues: queues},
		Node:                       s.node,
		Listeners:                  listeners,
		Contexts:                   []api.Context{{Node: s.node, Description: "Warren Management", Path: "/", Port: portOf(s.Addr())}},
	})
}

func listener(node, proto string, a net.Addr) api.Listener {
	host, port, _ := net.SplitHostPort(a.String())
	p, _ := strconv.Atoi(port)
	if host == "" || host == "0.0.0.0" {
		host = "::"
	}
	return api.Listener{Node: node, Protocol: proto, IPAddress: host, Port: p, SocketOpts: []any{}}
}

func portOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	_, p, _ := net.SplitHostPort(a.String())
	return p
}

func exchangeTypes() []api.Plugin {
	var out []api.Plugin
	for _, t := range []struct{ name, desc string }{
		{"direct", "AMQP direct exchange, as per the AMQP specification"},
		{"fanout", "AMQP fanout exchange, as per the AMQP specification"},
		{"headers", "AMQP headers exchange, as per the AMQP specification"},
		{"topic", "AMQP topic exchange, as per the AMQP specification"},
		{"x-delayed-message", "Delayed Message Exchange"},
		{"x-federation-upstream", "Federation upstream helper exchange"},
	} {
		p := api.Plugin{Name: t.name, Description: t.desc, Enabled: true}
		if t.name == "x-federation-upstream" {
			p.InternalPurpose = "federation" // (as RabbitMQ's federation plugin lists it)
		}
		out = append(out, p)
	}
	return out
}

func (s *Server) node1() api.Node {
	cfg := s.srv.Config()
	has := s.srv.AlarmRaised
	free, _ := s.srv.DiskFree()
	rate := func(f string) api.Details { return details(s.hist.rate("node", f)) }
	return api.Node{Name: s.node, Type: "disc", Running: true, Partitions: []any{}, BeingDrained: s.srv.Suspended(),
		NodeLive: &api.NodeLive{
			OSPid:   strconv.Itoa(os.Getpid()),
			MemUsed: server.MemoryUsed(), MemUsedDetails: rate("mem_used"), MemLimit: cfg.MemoryHighWatermark, MemAlarm: has("memory"),
			MemCalculationStrategy: "rss",
			DiskFree:               free, DiskFreeDetails: rate("disk_free"), DiskFreeLimit: cfg.DiskFreeLimit, DiskFreeAlarm: has("disk"),
			FDUsed: openFDs(), FDUsedDetails: rate("fd_used"), FDTotal: 1048576,
			SocketsUsed: len(s.srv.Connections()), SocketsUsedDetails: rate("sockets_used"), SocketsTotal: 943629,
			ProcUsed: runtime.NumGoroutine(), ProcUsedDetails: rate("proc_used"), ProcTotal: 1048576, Processors: runtime.NumCPU(),
			Uptime: time.Since(s.started).Milliseconds(), RatesMode: "basic", NetTicktime: 60,
			ExchangeTypes: exchangeTypes(), AuthMechanisms: []api.Plugin{
				{Name: "PLAIN", Description: "SASL PLAIN authentication mechanism", Enabled: true},
				{Name: "AMQPLAIN", Description: "QPid AMQPLAIN mechanism", Enabled: true},
			},
			Applications:   []api.App{{Name: "warren", Description: "Warren message broker", Version: Version}},
			EnabledPlugins: []string{"rabbitmq_management"}, DBDir: cfg.DataDir, ConfigFiles: []string{}, LogFiles: []string{},
			Contexts: []api.Context{{Description: "Warren Management", Path: "/", Port: portOf(s.Addr())}},
		}}
}

// nodeHist sets this node's <stat>_details with their history, when
// asked (node_stats_age and node_stats_incr, issue 15).
func (c *call) nodeHist(n api.Node) api.Node {
	if c.hasRange(famNodeStats) && n.NodeLive != nil {
		l := n.NodeLive
		for f, d := range map[string]*api.Details{"mem_used": &l.MemUsedDetails, "disk_free": &l.DiskFreeDetails,
			"sockets_used": &l.SocketsUsedDetails, "proc_used": &l.ProcUsedDetails, "fd_used": &l.FDUsedDetails} {
			*d = c.det("node", kindNode, f)
		}
	}
	return n
}

func (c *call) nodes() error {
	if err := c.parseHistory(false, true); err != nil {
		return err
	}
	if !c.clustered() {
		return c.ok([]api.Node{c.nodeHist(c.s.node1())})
	}
	nodes := c.s.cluster().Nodes()
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	out := make([]api.Node, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = c.clusterNode(n)
		}()
	}
	wg.Wait()
	return c.ok(out)
}

func (c *call) nodeGet() error {
	// RabbitMQ 3.10.8 fails here with a 500 on invalid range parameters;
	// Warren answers the 400 of its other endpoints.
	if err := c.parseHistory(false, true); err != nil {
		return err
	}
	name := c.pv("node")
	if !c.clustered() {
		if name != c.s.node {
			return errNotFound
		}
		return c.ok(c.nodeHist(c.s.nodeSelf()))
	}
	for _, n := range c.s.cluster().Nodes() {
		if n.Name == name {
			return c.ok(c.clusterNode(n))
		}
	}
	return errNotFound
}

// nodeSelf is this node as /api/nodes shows it: node1, and in a cluster
// the quorum queues' raft host counters (issue 14).
func (s *Server) nodeSelf() api.Node {
	m := s.node1()
	if qs, ok := s.cluster().(QuorumStatser); ok {
		m.QuorumQueuesRaft = qs.QuorumStats()
	}
	return m
}

// clusterNode is a member as /api/nodes shows it: what the node reports
// about itself, or, when it does not answer, its name with running false.
// Warren adds "leader" (it leads the metadata group) and "address".
func (c *call) clusterNode(n NodeInfo) api.Node {
	var m api.Node
	ok := false
	if n.Name == c.s.node {
		m, ok = c.nodeHist(c.s.nodeSelf()), true
	} else if n.Running {
		ctx, cancel := context.WithTimeout(c.r.Context(), fetchTimeout)
		st, body, err := c.s.cluster().Fetch(ctx, n.Name, http.MethodGet, "/api/nodes/"+url.PathEscape(n.Name)+c.rangeQuery(), nil)
		cancel()
		ok = err == nil && st == http.StatusOK && json.Unmarshal(body, &m) == nil
	}
	if !ok {
		m = api.Node{Name: n.Name, Type: "disc", Partitions: []any{}}
	}
	m.Leader, m.Address = &n.Leader, n.Address
	return m
}

func (c *call) failed(err error) error {
	c.s.writeJSON(c.w, http.StatusServiceUnavailable, map[string]any{"status": "failed", "reason": err.Error()})
	return nil
}

// amqpError maps a broker (AMQP) error to RabbitMQ's HTTP reply: 404 for
// NOT_FOUND, 401 for ACCESS_REFUSED, 400 with the reply text otherwise.
func amqpError(err error) error {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	if isNoQuorum(err) {
		return noQuorum(err)
	}
	var e *amqpc.Error
	if !errors.As(err, &e) {
		return badRequest(err.Error())
	}
	switch e.Code {
	case amqpc.NotFound:
		return errNotFound
	case amqpc.AccessRefused:
		return notAuthorised("Access refused.")
	}
	return badRequest(strings.TrimPrefix(e.Text, amqpc.ReplyName(e.Code)+" - "))
}
