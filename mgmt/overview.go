package mgmt

import (
	"errors"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	amqpc "github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
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

	s.connRoutes()
	s.accessRoutes()
	s.queueRoutes()
	s.exchangeRoutes()
	s.policyRoutes()
	s.deadLetterRoutes()
	s.shovelRoutes()
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

func (c *call) clusterName() error { return c.ok(map[string]any{"name": c.s.node}) }

// statsWithRates renders counters as RabbitMQ's message_stats: each
// counter and its _details rate.
func (s *Server) statsWithRates(key string, c counters, fields ...string) map[string]any {
	m := make(map[string]any, 2*len(fields))
	for _, f := range fields {
		m[f] = c[f]
		m[f+"_details"] = details(s.rates.rate(key, f))
	}
	return m
}

var overviewStatFields = []string{"publish", "confirm", "return_unroutable", "drop_unroutable", "deliver", "deliver_no_ack",
	"get", "get_no_ack", "get_empty", "deliver_get", "redeliver", "ack", "disk_reads", "disk_writes"}

func (c *call) overview() error {
	s := c.s
	ms := serverCounters(s.srv.MessageStats())
	var ready, unacked, queues, consumers, exchanges int
	var dead uint64
	for _, v := range c.seenVHosts() {
		for _, q := range v.Queues() {
			st := q.Stats()
			ready += st.Ready
			unacked += st.Unacked
			consumers += st.Consumers
			queues++
			for _, n := range st.DeadLettered {
				dead += n
			}
		}
		exchanges += len(v.Exchanges())
	}
	conns := s.srv.Connections()
	nconn, nch := 0, 0
	for _, ci := range conns {
		if c.seesUser(ci.User) {
			nconn++
			nch += ci.Channels
		}
	}
	qt := map[string]any{
		"messages": ready + unacked, "messages_details": details(s.rates.rate("overview", "messages")),
		"messages_ready": ready, "messages_ready_details": details(s.rates.rate("overview", "messages_ready")),
		"messages_unacknowledged": unacked, "messages_unacknowledged_details": details(s.rates.rate("overview", "messages_unacknowledged")),
	}
	msgStats := s.statsWithRates("overview", ms, overviewStatFields...)
	if !c.monitor() {
		// A user who may not see everything sees the message counts of
		// the queues in its vhosts only, as RabbitMQ.
		msgStats = c.visibleQueueStats()
	}
	// Warren's own: messages dead-lettered by every queue.
	msgStats["dead_lettered"] = dead
	msgStats["dead_lettered_details"] = details(s.rates.rate("overview", "dead_lettered"))
	listeners := []any{}
	for _, l := range s.listeners() {
		listeners = append(listeners, listener(s.node, l.proto, l.addr))
	}
	return c.ok(map[string]any{
		"management_version": Version, "rates_mode": "basic",
		"sample_retention_policies": map[string]any{"global": []int{600, 3600, 28800, 86400}, "basic": []int{600, 3600}, "detailed": []int{600}},
		"exchange_types":            exchangeTypes(),
		"product_version":           server.Version, "product_name": "Warren", "rabbitmq_version": Version,
		"cluster_name": s.node, "erlang_version": runtime.Version(), "erlang_full_version": runtime.Version(),
		"release_series_support_status": "supported", "disable_stats": false, "enable_queue_totals": false,
		"message_stats":             msgStats,
		"churn_rates":               map[string]any{},
		"queue_totals":              qt,
		"object_totals":             map[string]any{"channels": nch, "connections": nconn, "consumers": consumers, "exchanges": exchanges, "queues": queues},
		"statistics_db_event_queue": 0, "node": s.node,
		"listeners": listeners,
		"contexts":  []any{map[string]any{"node": s.node, "description": "Warren Management", "path": "/", "port": portOf(s.Addr())}},
	})
}

// visibleQueueStats sums the message counters and rates of the queues in
// the vhosts the user may see.
func (c *call) visibleQueueStats() map[string]any {
	fields := []string{"publish", "deliver_get", "ack", "redeliver"}
	sum := counters{}
	rates := map[string]float64{}
	for _, v := range c.seenVHosts() {
		for _, q := range v.Queues() {
			qc := queueCounters(q.Stats())
			key := queueKey(v.Name, q.Name)
			for _, f := range fields {
				sum[f] += qc[f]
				rates[f] += c.s.rates.rate(key, f)
			}
		}
	}
	m := map[string]any{}
	for _, f := range fields {
		m[f], m[f+"_details"] = sum[f], details(rates[f])
	}
	return m
}

func listener(node, proto string, a net.Addr) map[string]any {
	host, port, _ := net.SplitHostPort(a.String())
	p, _ := strconv.Atoi(port)
	if host == "" || host == "0.0.0.0" {
		host = "::"
	}
	return map[string]any{"node": node, "protocol": proto, "ip_address": host, "port": p, "socket_opts": []any{}}
}

func portOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	_, p, _ := net.SplitHostPort(a.String())
	return p
}

func exchangeTypes() []any {
	var out []any
	for _, t := range []struct{ name, desc string }{
		{"direct", "AMQP direct exchange, as per the AMQP specification"},
		{"fanout", "AMQP fanout exchange, as per the AMQP specification"},
		{"headers", "AMQP headers exchange, as per the AMQP specification"},
		{"topic", "AMQP topic exchange, as per the AMQP specification"},
		{"x-delayed-message", "Delayed Message Exchange"},
	} {
		out = append(out, map[string]any{"name": t.name, "description": t.desc, "enabled": true})
	}
	return out
}

func (s *Server) node1() map[string]any {
	cfg := s.srv.Config()
	has := s.srv.AlarmRaised
	free, _ := s.srv.DiskFree()
	uptime := time.Since(s.started).Milliseconds()
	m := map[string]any{
		"name": s.node, "type": "disc", "running": true, "os_pid": strconv.Itoa(os.Getpid()),
		"mem_used": server.MemoryUsed(), "mem_limit": cfg.MemoryHighWatermark, "mem_alarm": has("memory"),
		"mem_calculation_strategy": "rss",
		"disk_free":                free, "disk_free_limit": cfg.DiskFreeLimit, "disk_free_alarm": has("disk"),
		"fd_used": openFDs(), "fd_total": 1048576, "sockets_used": len(s.srv.Connections()), "sockets_total": 943629,
		"proc_used": runtime.NumGoroutine(), "proc_total": 1048576, "run_queue": 0, "processors": runtime.NumCPU(),
		"uptime": uptime, "rates_mode": "basic", "net_ticktime": 60, "partitions": []any{},
		"exchange_types": exchangeTypes(), "auth_mechanisms": []any{
			map[string]any{"name": "PLAIN", "description": "SASL PLAIN authentication mechanism", "enabled": true},
			map[string]any{"name": "AMQPLAIN", "description": "QPid AMQPLAIN mechanism", "enabled": true},
		},
		"applications":    []any{map[string]any{"name": "warren", "description": "Warren message broker", "version": Version}},
		"enabled_plugins": []string{"rabbitmq_management"}, "db_dir": cfg.DataDir, "config_files": []any{}, "log_files": []any{},
		"contexts": []any{map[string]any{"description": "Warren Management", "path": "/", "port": portOf(s.Addr())}},
	}
	for _, f := range []string{"mem_used", "disk_free", "sockets_used", "proc_used", "fd_used"} {
		m[f+"_details"] = details(s.rates.rate("node", f))
	}
	return m
}

func (c *call) nodes() error { return c.ok([]any{c.s.node1()}) }

func (c *call) nodeGet() error {
	if c.pv("node") != c.s.node {
		return errNotFound
	}
	return c.ok(c.s.node1())
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
