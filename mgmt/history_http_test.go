package mgmt_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/mgmt"
	"github.com/warrenmq/warren/warrentest"
)

// samplesOf returns path's <stat>_details samples in v (newest first) as
// value/timestamp pairs.
func samplesOf(t *testing.T, v any, path ...string) [][2]float64 {
	t.Helper()
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%v: no %s in %v", path, p, v)
		}
		v = m[p]
	}
	l, ok := v.([]any)
	if !ok {
		t.Fatalf("%v: samples %v", path, v)
	}
	out := make([][2]float64, len(l))
	for i, e := range l {
		m := e.(map[string]any)
		out[i] = [2]float64{m["sample"].(float64), m["timestamp"].(float64)}
	}
	return out
}

// issue 15: after traffic, the history the API serves changes: a queue's
// publish and depth samples, its exchange's, its channel's, its
// connection's, its vhost's, the overview's and the node's, with
// RabbitMQ's range parameters, from a broker sampling every 100 ms.
func TestHistoryAPIAfterTraffic(t *testing.T) {
	w := warrentest.Start(t)
	m := mgmt.New(mgmt.Config{Server: w.Server(), Addr: "127.0.0.1:0", SampleInterval: 100 * time.Millisecond,
		HistoryRetention: 10 * time.Second})
	must(t, m.Start())
	t.Cleanup(func() { m.Close() })
	conn, err := amqp.DialConfig(w.URL(), amqp.Config{Properties: amqp.Table{"connection_name": "hist"}})
	must(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	must(t, err)
	must(t, ch.ExchangeDeclare("hist-x", "fanout", false, false, false, false, nil))
	_, err = ch.QueueDeclare("hist-q", false, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind("hist-q", "", "hist-x", false, nil))
	f := &fixture{t: t, w: w, ch: ch, api: "http://" + m.Addr().String()}

	const params = "msg_rates_age=3&msg_rates_incr=1&lengths_age=3&lengths_incr=1&data_rates_age=3&data_rates_incr=1&node_stats_age=3&node_stats_incr=1"
	for i := 0; i < 7; i++ {
		must(t, ch.PublishWithContext(context.Background(), "hist-x", "", false, false, amqp.Publishing{Body: []byte("m")}))
	}
	// The newest sample shows the 7 messages once a sample round has seen
	// them and the grid's newest point (a whole second) is past it.
	var q map[string]any
	if !testutil.Until(10*time.Second, func() bool {
		f.call("GET", "/api/queues/%2F/hist-q?"+params, nil, &q)
		s := samplesOf(t, q, "messages_details", "samples")
		p := samplesOf(t, q, "message_stats", "publish_details", "samples")
		return s[0][0] == 7 && p[0][0] == 7
	}) {
		t.Fatalf("queue history never showed the 7 messages: %v", q["messages_details"])
	}
	for _, path := range [][]string{{"messages_details"}, {"messages_ready_details"}, {"message_stats", "publish_details"}} {
		d := q[path[0]]
		if len(path) == 2 {
			d = d.(map[string]any)[path[1]]
		}
		s := samplesOf(t, d, "samples")
		if len(s) != 4 {
			t.Fatalf("%v: %d samples, want 4 (age 3 / incr 1 + 1)", path, len(s))
		}
		for i := range s {
			if int64(s[i][1])%1000 != 0 || (i > 0 && s[i][1] != s[i-1][1]-1000) {
				t.Fatalf("%v: timestamps not newest first at 1 s steps: %v", path, s)
			}
		}
		// The queue is younger than the range: its oldest sample is 0
		// (RabbitMQ's padding); so avg_rate = 7 / 3 s.
		dm := d.(map[string]any)
		if s[3][0] != 0 || dm["avg_rate"] != 7.0/3 {
			t.Fatalf("%v: oldest %v, avg_rate %v, want 0 and 7/3", path, s[3], dm["avg_rate"])
		}
	}
	// Consume them: the depth history goes back to 0, deliver_get counts.
	msgs, err := ch.Consume("hist-q", "", true, false, false, false, nil)
	must(t, err)
	for range 7 {
		<-msgs
	}
	if !testutil.Until(10*time.Second, func() bool {
		f.call("GET", "/api/queues/%2F/hist-q?"+params, nil, &q)
		s := samplesOf(t, q, "messages_details", "samples")
		d := samplesOf(t, q, "message_stats", "deliver_get_details", "samples")
		return s[0][0] == 0 && d[0][0] == 7
	}) {
		t.Fatalf("queue history never showed the queue drained: %v", q["messages_details"])
	}
	var x, o, v map[string]any
	var chans, conns, nodes []map[string]any
	f.call("GET", "/api/exchanges/%2F/hist-x?"+params, nil, &x)
	f.call("GET", "/api/overview?"+params, nil, &o)
	f.call("GET", "/api/vhosts/%2F?"+params, nil, &v)
	f.call("GET", "/api/channels?"+params, nil, &chans)
	f.call("GET", "/api/connections?"+params, nil, &conns)
	f.call("GET", "/api/nodes?"+params, nil, &nodes)
	for name, s := range map[string][][2]float64{
		"exchange publish_in":          samplesOf(t, x, "message_stats", "publish_in_details", "samples"),
		"overview publish":             samplesOf(t, o, "message_stats", "publish_details", "samples"),
		"overview queue_totals":        samplesOf(t, o, "queue_totals", "messages_details", "samples"),
		"vhost publish":                samplesOf(t, v, "message_stats", "publish_details", "samples"),
		"channel publish":              samplesOf(t, chans[0], "message_stats", "publish_details", "samples"),
		"connection recv_oct":          samplesOf(t, conns[0], "recv_oct_details", "samples"),
		"vhost recv_oct":               samplesOf(t, v, "recv_oct_details", "samples"),
		"node proc_used":               samplesOf(t, nodes[0], "proc_used_details", "samples"),
		"overview dead_lettered (ext)": samplesOf(t, o, "message_stats", "dead_lettered_details", "samples"),
	} {
		if len(s) != 4 {
			t.Errorf("%s: %d samples, want 4", name, len(s))
		}
		switch name {
		case "exchange publish_in", "overview publish", "vhost publish", "channel publish":
			if s[0][0] != 7 {
				t.Errorf("%s: newest sample %v, want 7", name, s[0])
			}
		case "connection recv_oct", "vhost recv_oct", "node proc_used":
			if s[0][0] <= 0 {
				t.Errorf("%s: newest sample %v, want > 0", name, s[0])
			}
		}
	}
	// Without the parameters: rates only, as before.
	f.call("GET", "/api/queues/%2F/hist-q", nil, &q)
	if d := q["messages_details"].(map[string]any); len(d) != 1 || d["rate"] == nil {
		t.Fatalf("messages_details without a range: %v", d)
	}
	// Invalid parameters: RabbitMQ's 400s.
	for path, want := range map[string]string{
		"/api/queues?msg_rates_age=0&msg_rates_incr=5":          `invalid_range_parameters: Invalid range parameters: age 0, incr 5`,
		"/api/queues/%2F/hist-q?lengths_age=10&lengths_incr=-1": `bad_request: Invalid range parameters: age 10, incr -1`,
		"/api/overview?data_rates_age=5000&data_rates_incr=5":   `bad_request: Invalid range parameters: age 5000, incr 5`,
	} {
		var e map[string]any
		if st := f.call("GET", path, nil, &e); st != 400 || fmt.Sprintf("%s: %s", e["error"], e["reason"]) != want {
			t.Errorf("%s: %d %v, want 400 %s", path, st, e, want)
		}
	}
}

// BenchmarkSampler10kQueues (issue 15): the sampler's whole round (rates
// and history) for a broker with 10,000 queues, 10,000 bindings and
// some traffic: the CPU per tick. Run:
//
//	go test -run x -bench BenchmarkSampler10kQueues -benchmem ./mgmt
func BenchmarkSampler10kQueues(b *testing.B) {
	w := warrentest.Start(b)
	conn, err := amqp.Dial(w.URL())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	for i := range 10000 {
		if _, err := ch.QueueDeclare(fmt.Sprintf("bq-%d", i), false, false, false, false, nil); err != nil {
			b.Fatal(err)
		}
	}
	m := w.Mgmt()
	// The sampler's retained state (rates and history) for 10,000 idle
	// queues: the heap before its first rounds and after.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m.SampleNow()
	m.SampleNow()
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// a little traffic on a tenth of the queues between rounds
		b.StopTimer()
		for q := 0; q < 1000; q += 10 {
			ch.PublishWithContext(context.Background(), "", fmt.Sprintf("bq-%d", q), false, false, amqp.Publishing{Body: []byte("m")})
		}
		b.StartTimer()
		m.SampleNow()
	}
	b.ReportMetric((float64(after.HeapAlloc)-float64(before.HeapAlloc))/10000, "sampler-B/queue")
}

// issue 15: in a cluster, any node serves the history: the overview's and
// a vhost's summed over every node's part, a queue's from its home node
// (the range parameters go along with the requests it passes on).
func TestHistoryCluster(t *testing.T) {
	n, nodes, _ := setupCluster(t)
	const p = "?msg_rates_age=2&msg_rates_incr=1&lengths_age=2&lengths_incr=1"
	newest := func(v any, path ...string) any {
		for _, k := range append(path, "samples") {
			m, _ := v.(map[string]any)
			v = m[k]
		}
		l, _ := v.([]any)
		if len(l) == 0 {
			return nil
		}
		return l[0].(map[string]any)["sample"]
	}
	a := nodes[nodeA].f
	var o, v, qb map[string]any
	var qs []map[string]any
	ok := testutil.Until(10*time.Second, func() bool {
		for _, cn := range nodes {
			cn.w.Mgmt().SampleNow()
		}
		a.call("GET", "/api/overview"+p, nil, &o)
		a.call("GET", "/api/vhosts/h5v"+p, nil, &v)
		a.call("GET", "/api/queues/h5v/h5-qb"+p, nil, &qb)
		a.call("GET", "/api/queues/h5v"+p, nil, &qs)
		ready := map[any]any{}
		for _, q := range qs {
			ready[q["name"]] = newest(q, "messages_ready_details")
		}
		// 2 + 3 + 1 (unacked) in h5v, 1 in "/"; 6 published into h5v.
		return newest(o, "queue_totals", "messages_details") == 7.0 &&
			newest(o, "queue_totals", "messages_unacknowledged_details") == 1.0 &&
			newest(v, "messages_details") == 6.0 && newest(v, "message_stats", "publish_details") == 6.0 &&
			newest(qb, "messages_details") == 3.0 &&
			ready["h5-qa"] == 2.0 && ready["h5-qb"] == 3.0 && ready["h5-qc"] == 0.0
	})
	if !ok {
		t.Fatalf("cluster history: overview %v, vhost %v, h5-qb %v, list %v", o["queue_totals"], v["messages_details"],
			qb["messages_details"], qs)
	}
	passed := false
	for _, f := range n.takeFetches() {
		if strings.Contains(f, "/api/queues/h5v/h5-qb?") && strings.Contains(f, "lengths_age=2") {
			passed = true
		}
	}
	if !passed {
		t.Fatal("the queue's home node was not asked with the range parameters")
	}
}
