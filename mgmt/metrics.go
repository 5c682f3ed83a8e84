package mgmt

import (
	"bytes"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/mgmt/api"
	"github.com/warrenmq/warren/server"
)

// Prometheus metrics at GET /metrics, in the text exposition format 0.0.4,
// without auth (as RabbitMQ's rabbitmq_prometheus plugin on port 15692).
//
// Names are rabbitmq_prometheus's (3.10) where RabbitMQ has the metric, so
// that its dashboards and alerts work; Warren's own (warren_*) otherwise.
// Queue metrics are per object (RabbitMQ's /metrics/per-object): labels
// vhost and queue. Output order is fixed: families in the order below,
// queues by vhost then name.
//
// The global message counters come from the server's channel counters
// (monotonic over the server's life). RabbitMQ splits some of them by
// queue_type; Warren counts them per channel, not per queue type, so they
// carry only protocol="amqp091" (sum() over them is the same value).
//
// The global dead-letter counters (rabbitmq_global_messages_dead_lettered_*)
// are the sums of the queues' counters, by queue type and dead-letter
// strategy. A deleted queue takes its counters with it; to keep the sums
// from going down, each scrape remembers the queues' counts and adds those
// of queues gone since the previous scrape to a per-Server total (what a
// queue counted between the last scrape and its deletion is lost).

const metricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// Queue types and dead-letter strategies as RabbitMQ labels them.
const (
	qtClassic = "rabbit_classic_queue"
	qtQuorum  = "rabbit_quorum_queue"
	qtStream  = "rabbit_stream_queue"

	dlsAtLeastOnce = "at_least_once"
	dlsAtMostOnce  = "at_most_once"
	dlsDisabled    = "disabled" // no dead-letter exchange: the message is dropped

	reasonConfirmed = "confirmed" // rabbitmq_global_messages_dead_lettered_confirmed_total
)

func queueTypeLabel(t string) string {
	switch t {
	case broker.QueueTypeQuorum:
		return qtQuorum
	case broker.QueueTypeStream:
		return qtStream
	}
	return qtClassic
}

// dlKey is one series of the global dead-letter families.
type dlKey struct{ reason, queueType, strategy string }

// dlFamilies are rabbitmq_prometheus's global dead-letter families, by
// reason, with the series RabbitMQ 3.10 always exposes (zero or not).
// Warren honours delivery limits on classic queues too, so other
// combinations appear once they count something.
var dlFamilies = []struct {
	reason, name, help string
	base               [][2]string // queue type, strategy
}{
	{reasonConfirmed, "rabbitmq_global_messages_dead_lettered_confirmed_total",
		"Total number of messages dead-lettered and confirmed by target queues",
		[][2]string{{qtQuorum, dlsAtLeastOnce}}},
	{broker.ReasonDeliveryLimit, "rabbitmq_global_messages_dead_lettered_delivery_limit_total",
		"Total number of messages dead-lettered due to delivery-limit exceeded",
		[][2]string{{qtQuorum, dlsAtLeastOnce}, {qtQuorum, dlsAtMostOnce}, {qtQuorum, dlsDisabled}}},
	{broker.ReasonExpired, "rabbitmq_global_messages_dead_lettered_expired_total",
		"Total number of messages dead-lettered due to message TTL exceeded",
		[][2]string{{qtClassic, dlsAtMostOnce}, {qtClassic, dlsDisabled}, {qtQuorum, dlsAtLeastOnce}, {qtQuorum, dlsAtMostOnce}, {qtQuorum, dlsDisabled}}},
	{broker.ReasonMaxLen, "rabbitmq_global_messages_dead_lettered_maxlen_total",
		"Total number of messages dead-lettered due to overflow drop-head or reject-publish-dlx",
		[][2]string{{qtClassic, dlsAtMostOnce}, {qtClassic, dlsDisabled}, {qtQuorum, dlsAtMostOnce}, {qtQuorum, dlsDisabled}}},
	{broker.ReasonRejected, "rabbitmq_global_messages_dead_lettered_rejected_total",
		"Total number of messages dead-lettered due to basic.reject or basic.nack",
		[][2]string{{qtClassic, dlsAtMostOnce}, {qtClassic, dlsDisabled}, {qtQuorum, dlsAtLeastOnce}, {qtQuorum, dlsAtMostOnce}, {qtQuorum, dlsDisabled}}},
}

// deadReasons are the per-queue reason label values, in output order.
var deadReasons = []string{broker.ReasonRejected, broker.ReasonExpired, broker.ReasonMaxLen, broker.ReasonDeliveryLimit}

// metricsState is what a Server's scrapes remember (see the package
// comment above): the last dead-letter counts of each live queue, and the
// total of queues deleted since.
type metricsState struct {
	mu   sync.Mutex
	seen map[*broker.Queue]map[dlKey]uint64 // the queues of the last scrape
	gone map[dlKey]uint64
}

// queueRow is one queue's snapshot.
type queueRow struct {
	vhost, name string
	q           *broker.Queue
	st          broker.QueueStats
}

// contributions returns what a queue adds to the global dead-letter
// families. Drops (no DLX) count as strategy "disabled", as RabbitMQ
// counts them. Confirmed at-least-once dead letters are those no longer
// owed (dead-lettered minus pending), never less than prev's.
func contributions(r *queueRow, prev map[dlKey]uint64) map[dlKey]uint64 {
	qt := queueTypeLabel(r.q.Config.Type)
	strategy := dlsAtMostOnce
	if r.q.DeadLettersAtLeastOnce() {
		strategy = dlsAtLeastOnce
	}
	c := make(map[dlKey]uint64, 2*len(deadReasons)+1)
	var dead uint64
	for _, reason := range deadReasons {
		if n := r.st.DeadLettered[reason]; n > 0 {
			c[dlKey{reason, qt, strategy}] += n
			dead += n
		}
		if n := r.st.Dropped[reason]; n > 0 {
			c[dlKey{reason, qt, dlsDisabled}] += n
		}
	}
	k := dlKey{reasonConfirmed, qt, dlsAtLeastOnce}
	if strategy == dlsAtLeastOnce {
		var confirmed uint64
		if p := uint64(r.st.DeadLetterPending); dead > p {
			confirmed = dead - p
		}
		c[k] = max(confirmed, prev[k])
	} else if n, ok := prev[k]; ok {
		c[k] = n // a policy changed the strategy: keep what was counted
	}
	return c
}

// deadLetterTotals records this scrape's queues and returns the global
// dead-letter sums, deleted queues included.
func (s *Server) deadLetterTotals(rows []queueRow) map[dlKey]uint64 {
	ms := &s.mstate
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.gone == nil {
		ms.gone = map[dlKey]uint64{}
	}
	seen := make(map[*broker.Queue]map[dlKey]uint64, len(rows))
	tot := map[dlKey]uint64{}
	for i := range rows {
		k := rows[i].q
		c := contributions(&rows[i], ms.seen[k])
		seen[k] = c
		for dk, n := range c {
			tot[dk] += n
		}
	}
	for k, c := range ms.seen {
		if _, ok := seen[k]; !ok {
			for dk, n := range c {
				ms.gone[dk] += n
			}
		}
	}
	ms.seen = seen
	for dk, n := range ms.gone {
		tot[dk] += n
	}
	return tot
}

// promWriter writes the text exposition format.
type promWriter struct{ b bytes.Buffer }

// family writes the HELP and TYPE lines of a metric family.
func (p *promWriter) family(name, typ, help string) {
	p.b.WriteString("# HELP ")
	p.b.WriteString(name)
	p.b.WriteByte(' ')
	p.b.WriteString(escapeHelp(help))
	p.b.WriteString("\n# TYPE ")
	p.b.WriteString(name)
	p.b.WriteByte(' ')
	p.b.WriteString(typ)
	p.b.WriteByte('\n')
}

// sample writes one sample; labels are name, value pairs.
func (p *promWriter) sample(name, value string, labels ...string) {
	p.b.WriteString(name)
	if len(labels) > 0 {
		p.b.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				p.b.WriteByte(',')
			}
			p.b.WriteString(labels[i])
			p.b.WriteString(`="`)
			p.b.WriteString(escapeLabel(labels[i+1]))
			p.b.WriteByte('"')
		}
		p.b.WriteByte('}')
	}
	p.b.WriteByte(' ')
	p.b.WriteString(value)
	p.b.WriteByte('\n')
}

func (p *promWriter) u(name string, v uint64, labels ...string) {
	p.sample(name, strconv.FormatUint(v, 10), labels...)
}

func (p *promWriter) i(name string, v int64, labels ...string) {
	p.sample(name, strconv.FormatInt(v, 10), labels...)
}

// one writes a family of a single sample.
func (p *promWriter) one(name, typ, help string, v int64, labels ...string) {
	p.family(name, typ, help)
	p.i(name, v, labels...)
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string { return helpEscaper.Replace(s) }

// escapeLabel escapes a label value; names that are not UTF-8 (AMQP short
// strings may be any bytes) get U+FFFD for the bad bytes.
func escapeLabel(s string) string { return labelEscaper.Replace(strings.ToValidUTF8(s, "\uFFFD")) }

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// residentMemory is the process's resident set size from /proc/self/statm.
func residentMemory() (int64, bool) {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * int64(os.Getpagesize()), true
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	var rows []queueRow
	for _, vn := range s.b.VHosts() {
		v := s.b.VHost(vn)
		if v == nil {
			continue
		}
		for _, q := range v.Queues() {
			if !q.ServedHere() {
				continue // as RabbitMQ's per-node scrape: a queue is its home node's
			}
			rows = append(rows, queueRow{vhost: vn, name: q.Name, q: q, st: q.Stats()})
		}
	}
	dl := s.deadLetterTotals(rows)
	cfg := s.srv.Config()
	ms := s.srv.MessageStats()
	var consumers int
	for i := range rows {
		consumers += rows[i].st.Consumers
	}
	var p promWriter

	// Node identity and resources.
	p.one("rabbitmq_build_info", "untyped", "RabbitMQ & Erlang/OTP version info (Warren: the RabbitMQ version it serves, Go version)", 1,
		"rabbitmq_version", Version, "prometheus_plugin_version", Version, "erlang_version", runtime.Version(), "product_name", "Warren")
	p.one("rabbitmq_identity_info", "untyped", "RabbitMQ node & cluster identity info", 1,
		"rabbitmq_node", s.node, "rabbitmq_cluster", s.clusterName())
	p.one("rabbitmq_alarms_file_descriptor_limit", "untyped", "is 1 if file descriptor limit alarm is in effect (Warren has none: always 0)", 0)
	p.one("rabbitmq_alarms_free_disk_space_watermark", "untyped", "is 1 if free disk space watermark alarm is in effect", b2i(s.srv.AlarmRaised("disk")))
	p.one("rabbitmq_alarms_memory_used_watermark", "untyped", "is 1 if VM memory watermark alarm is in effect", b2i(s.srv.AlarmRaised("memory")))
	p.one("rabbitmq_process_resident_memory_bytes", "gauge", "Memory used in bytes (what the memory alarm measures: Go heap and stacks)", server.MemoryUsed())
	if cfg.MemoryHighWatermark > 0 {
		p.one("rabbitmq_resident_memory_limit_bytes", "gauge", "Memory high watermark in bytes", cfg.MemoryHighWatermark)
	}
	if free, ok := s.srv.DiskFree(); ok {
		p.one("rabbitmq_disk_space_available_bytes", "gauge", "Disk space available in bytes", free)
	}
	if cfg.DiskFreeLimit > 0 {
		p.one("rabbitmq_disk_space_available_limit_bytes", "gauge", "Free disk space low watermark in bytes", cfg.DiskFreeLimit)
	}
	if rss, ok := residentMemory(); ok {
		p.one("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", rss)
	}

	// Object counts.
	conns := s.srv.Connections()
	var nch int
	for _, c := range conns {
		nch += c.Channels
	}
	p.one("rabbitmq_connections", "gauge", "Connections currently open", int64(len(conns)))
	p.one("rabbitmq_channels", "gauge", "Channels currently open", int64(nch))
	p.one("rabbitmq_consumers", "gauge", "Consumers currently connected", int64(consumers))
	p.one("rabbitmq_queues", "gauge", "Queues available", int64(len(rows)))
	// The stream protocol's listener's samples, protocol="stream" as
	// rabbitmq_stream's (when the listener runs).
	var sc *api.StreamCounters
	var streamPubs, streamCons int
	if l := s.cfg.Streams; l != nil {
		if c, ok := l.(interface{ Counters() api.StreamCounters }); ok {
			v := c.Counters()
			sc = &v
			streamPubs, streamCons = len(l.Publishers()), len(l.Consumers())
		}
	}
	p.family("rabbitmq_global_consumers", "gauge", "Current number of consumers")
	p.i("rabbitmq_global_consumers", int64(consumers), "protocol", "amqp091")
	if sc != nil {
		p.i("rabbitmq_global_consumers", int64(streamCons), "protocol", "stream")
		p.one("rabbitmq_global_publishers", "gauge", "Current number of publishers", int64(streamPubs), "protocol", "stream")
	}

	// Global message counters (channels', alphabetical as RabbitMQ's).
	proto := []string{"protocol", "amqp091"}
	// the stream listener's sample of a family, after the amqp091 one
	type sample struct {
		v      uint64
		labels []string
	}
	streamSample := map[string]sample{}
	if sc != nil {
		stream := []string{"protocol", "stream"}
		streamSample = map[string]sample{
			"rabbitmq_global_messages_confirmed_total": {sc.Confirmed, stream},
			"rabbitmq_global_messages_delivered_total": {sc.Delivered, []string{"protocol", "stream", "queue_type", "rabbit_stream_queue"}},
			"rabbitmq_global_messages_received_total":  {sc.Published, stream},
		}
	}
	counter := func(name, help string, v uint64) {
		p.family(name, "counter", help)
		p.u(name, v, proto...)
		if x, ok := streamSample[name]; ok {
			p.u(name, x.v, x.labels...)
		}
	}
	counter("rabbitmq_global_messages_acknowledged_total", "Total number of messages acknowledged by consumers", ms.Ack)
	counter("rabbitmq_global_messages_confirmed_total", "Total number of messages confirmed to publishers", ms.Confirm)
	for _, f := range dlFamilies {
		p.family(f.name, "counter", f.help)
		keys := map[[2]string]bool{}
		for _, b := range f.base {
			keys[b] = true
		}
		for k := range dl {
			if k.reason == f.reason {
				keys[[2]string{k.queueType, k.strategy}] = true
			}
		}
		for _, qt := range []string{qtClassic, qtQuorum, qtStream} {
			for _, st := range []string{dlsAtLeastOnce, dlsAtMostOnce, dlsDisabled} {
				if keys[[2]string{qt, st}] {
					p.u(f.name, dl[dlKey{f.reason, qt, st}], "queue_type", qt, "dead_letter_strategy", st)
				}
			}
		}
	}
	counter("rabbitmq_global_messages_delivered_consume_auto_ack_total",
		"Total number of messages delivered to consumers using basic.consume with automatic acknowledgment", ms.DeliverNoAck)
	counter("rabbitmq_global_messages_delivered_consume_manual_ack_total",
		"Total number of messages delivered to consumers using basic.consume with manual acknowledgment", ms.Deliver)
	counter("rabbitmq_global_messages_delivered_get_auto_ack_total",
		"Total number of messages delivered to consumers using basic.get with automatic acknowledgment", ms.GetNoAck)
	counter("rabbitmq_global_messages_delivered_get_manual_ack_total",
		"Total number of messages delivered to consumers using basic.get with manual acknowledgment", ms.Get)
	counter("rabbitmq_global_messages_delivered_total", "Total number of messages delivered to consumers", ms.DeliverGet())
	counter("rabbitmq_global_messages_received_total", "Total number of messages received from publishers", ms.Publish)
	counter("rabbitmq_global_messages_redelivered_total", "Total number of messages redelivered to consumers", ms.Redeliver)
	counter("rabbitmq_global_messages_unroutable_returned_total",
		"Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable", ms.ReturnUnroutable)
	counter("warren_global_messages_rejected_total",
		"Total number of messages rejected or nacked by consumers without requeue", ms.Reject)
	counter("warren_global_messages_requeued_total",
		"Total number of messages rejected or nacked by consumers with requeue", ms.Requeue)
	if sc != nil {
		p.family("warren_global_stream_publish_errors_total", "counter", "Total number of stream-protocol publishes refused (publish errors)")
		p.u("warren_global_stream_publish_errors_total", sc.Errored, "protocol", "stream")
	}

	// Per queue.
	type qfam struct {
		name, typ, help string
		v               func(*broker.QueueStats) uint64
	}
	for _, f := range []qfam{
		{"rabbitmq_queue_messages_ready", "gauge", "Messages ready to be delivered to consumers",
			func(st *broker.QueueStats) uint64 { return uint64(st.Ready) }},
		{"rabbitmq_queue_messages_unacked", "gauge", "Messages delivered to consumers but not yet acknowledged",
			func(st *broker.QueueStats) uint64 { return uint64(st.Unacked) }},
		{"rabbitmq_queue_messages", "gauge", "Sum of ready and unacknowledged messages - total queue depth",
			func(st *broker.QueueStats) uint64 { return uint64(st.Ready + st.Unacked) }},
		{"rabbitmq_queue_messages_ready_bytes", "gauge", "Size in bytes of ready messages",
			func(st *broker.QueueStats) uint64 { return uint64(st.ReadyBytes) }},
		{"rabbitmq_queue_messages_unacked_bytes", "gauge", "Size in bytes of all unacknowledged messages",
			func(st *broker.QueueStats) uint64 { return uint64(st.UnackedBytes) }},
		{"rabbitmq_queue_messages_bytes", "gauge", "Size in bytes of ready and unacknowledged messages",
			func(st *broker.QueueStats) uint64 { return uint64(st.ReadyBytes + st.UnackedBytes) }},
		{"rabbitmq_queue_messages_persistent", "gauge", "Persistent messages",
			func(st *broker.QueueStats) uint64 { return uint64(st.Persistent) }},
		{"rabbitmq_queue_messages_persistent_bytes", "gauge", "Size in bytes of persistent messages",
			func(st *broker.QueueStats) uint64 { return uint64(st.PersistentBytes) }},
		{"rabbitmq_queue_consumers", "gauge", "Consumers on a queue",
			func(st *broker.QueueStats) uint64 { return uint64(st.Consumers) }},
		{"rabbitmq_queue_messages_published_total", "counter", "Total number of messages published to queues",
			func(st *broker.QueueStats) uint64 { return st.Published }},
		{"warren_queue_messages_delayed", "gauge", "Returned messages waiting out a delayed retry before they are ready again",
			func(st *broker.QueueStats) uint64 { return uint64(st.Delayed) }},
		{"warren_queue_dead_letters_pending", "gauge", "At-least-once dead letters not yet taken by their target queues",
			func(st *broker.QueueStats) uint64 { return uint64(st.DeadLetterPending) }},
		{"warren_queue_messages_delivered_total", "counter", "Total number of messages delivered from the queue (consume and get)",
			func(st *broker.QueueStats) uint64 { return st.Delivered() }},
		{"warren_queue_messages_acked_total", "counter", "Total number of messages acknowledged from the queue",
			func(st *broker.QueueStats) uint64 { return st.Acked }},
		{"warren_queue_messages_redelivered_total", "counter", "Total number of messages redelivered from the queue",
			func(st *broker.QueueStats) uint64 { return st.Redelivered }},
		{"warren_queue_messages_requeued_total", "counter", "Total number of messages returned to the queue (nack/reject with requeue, channel or consumer closed with unacked messages)",
			func(st *broker.QueueStats) uint64 { return st.Requeued }},
		{"warren_queue_messages_overflow_rejected_total", "counter", "Total number of publishes refused by overflow reject-publish or reject-publish-dlx",
			func(st *broker.QueueStats) uint64 { return st.Rejected }},
	} {
		p.family(f.name, f.typ, f.help)
		for i := range rows {
			p.u(f.name, f.v(&rows[i].st), "vhost", rows[i].vhost, "queue", rows[i].name)
		}
	}
	// Which queues are dead-letter queues (some queue's dead-letter
	// exchange routes to them), so alerts need no naming convention.
	p.family("warren_queue_dead_letter_target", "gauge", "1 if some queue's dead-letter exchange routes to this queue, else 0")
	targets := map[string]map[string][]string{}
	for i := range rows {
		t, ok := targets[rows[i].vhost]
		if !ok {
			if v := s.b.VHost(rows[i].vhost); v != nil {
				t = v.DeadLetterTargets()
			}
			targets[rows[i].vhost] = t
		}
		_, isTarget := t[rows[i].name]
		p.u("warren_queue_dead_letter_target", map[bool]uint64{true: 1}[isTarget], "vhost", rows[i].vhost, "queue", rows[i].name)
	}
	for _, f := range []struct {
		name, help string
		m          func(*broker.QueueStats) map[string]uint64
	}{
		{"warren_queue_messages_dead_lettered_total", "Total number of messages dead-lettered from the queue (to its dead-letter exchange), by reason",
			func(st *broker.QueueStats) map[string]uint64 { return st.DeadLettered }},
		{"warren_queue_messages_dropped_total", "Total number of messages discarded by the queue without a dead-letter exchange, by reason",
			func(st *broker.QueueStats) map[string]uint64 { return st.Dropped }},
	} {
		p.family(f.name, "counter", f.help)
		for i := range rows {
			m := f.m(&rows[i].st)
			for _, reason := range deadReasons {
				p.u(f.name, m[reason], "vhost", rows[i].vhost, "queue", rows[i].name, "reason", reason)
			}
		}
	}

	s.streamMetrics(&p, rows)

	w.Header().Set("Content-Type", metricsContentType)
	w.Header().Set("Content-Length", strconv.Itoa(p.b.Len()))
	if r.Method == http.MethodHead {
		return
	}
	w.Write(p.b.Bytes())
}

// streamMetrics are Warren's per-stream samples (issue 25): each stream's
// log (segments, bytes, offsets, chunks, damaged chunks), each consumer's
// lag, and a replicated stream's Raft state on this node. RabbitMQ 3.10
// shows streams as queues only (the rabbitmq_queue_* families above).
func (s *Server) streamMetrics(p *promWriter, rows []queueRow) {
	type srow struct {
		vhost, name string
		in          broker.StreamInfo
		q           *broker.Queue
	}
	var ss []srow
	for i := range rows {
		if in, ok := rows[i].q.StreamInfo(); ok {
			ss = append(ss, srow{rows[i].vhost, rows[i].name, in, rows[i].q})
		}
	}
	if len(ss) == 0 {
		return
	}
	for _, f := range []struct {
		name, typ, help string
		v               func(*broker.StreamInfo) uint64
	}{
		{"warren_stream_segments", "gauge", "Segment files of the stream's log on this node", func(in *broker.StreamInfo) uint64 { return uint64(in.Segments) }},
		{"warren_stream_bytes", "gauge", "Bytes of the stream's log on this node", func(in *broker.StreamInfo) uint64 { return uint64(in.Bytes) }},
		{"warren_stream_chunks", "gauge", "Chunks of the stream's log on this node", func(in *broker.StreamInfo) uint64 { return uint64(in.Chunks) }},
		{"warren_stream_first_offset", "gauge", "The stream's first offset kept (after the retention)", func(in *broker.StreamInfo) uint64 { return in.FirstOffset }},
		{"warren_stream_committed_offset", "gauge", "The offset after the stream's last committed record", func(in *broker.StreamInfo) uint64 { return in.Committed }},
		{"warren_stream_damaged_chunks_total", "counter", "Damaged chunks the recovery and the readers skipped", func(in *broker.StreamInfo) uint64 { return in.Damaged }},
	} {
		p.family(f.name, f.typ, f.help)
		for i := range ss {
			p.u(f.name, f.v(&ss[i].in), "vhost", ss[i].vhost, "queue", ss[i].name)
		}
	}
	p.family("warren_stream_consumer_lag", "gauge", "Records between an AMQP 0-9-1 consumer's next offset and the stream's committed end")
	for i := range ss {
		for _, c := range ss[i].in.Consumers {
			lag := uint64(0)
			if ss[i].in.Committed > c.Offset {
				lag = ss[i].in.Committed - c.Offset
			}
			p.u("warren_stream_consumer_lag", lag, "vhost", ss[i].vhost, "queue", ss[i].name, "consumer_tag", c.Tag)
		}
	}
	p.family("warren_stream_leader", "gauge", "1 if this node leads the replicated stream, else 0")
	for i := range ss {
		if _, ok := ss[i].q.StreamReplicas(); ok {
			l, _ := ss[i].q.StreamMembers()
			p.u("warren_stream_leader", map[bool]uint64{true: 1}[l == s.node], "vhost", ss[i].vhost, "queue", ss[i].name)
		}
	}
}
