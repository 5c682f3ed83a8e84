package mgmt

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/warrenmq/warren/broker"
)

// issue 15: the history ring gives, at every retained tick, the values
// recorded at or before it: checked against a plain model over many
// random rounds, with objects born late, idle stretches, values going
// down, and eviction past the retention.
func TestHistoryRingModel(t *testing.T) {
	const n = 13
	rng := rand.New(rand.NewPCG(1, 2))
	h := newHistory(n)
	k := newKind(famMsgRates, "a", "b", famLengths, "c")
	type rec struct {
		tick uint64
		vals []uint64
	}
	model := map[string][]rec{}
	keys := []string{"idle", "busy", "late", "down"}
	cur := map[string][]uint64{"idle": {5, 5, 5}, "busy": {0, 0, 0}, "late": {0, 0, 0}, "down": {1 << 40, 7, 100}}
	for round := 1; round <= 200; round++ {
		now := int64(round) * 5000
		h.tick(now)
		for _, key := range keys {
			if key == "late" && round < 40 {
				continue
			}
			v := append([]uint64(nil), cur[key]...)
			switch key {
			case "busy":
				v[0] += uint64(rng.IntN(1000))
				if rng.IntN(3) == 0 {
					v[2] = uint64(rng.IntN(50))
				}
			case "late":
				v[1] += uint64(rng.IntN(2))
			case "down":
				v[0] -= uint64(rng.IntN(1 << 20))
				v[2] = uint64(rng.IntN(3))
			}
			cur[key] = v
			h.record(key, k, v)
			model[key] = append(model[key], rec{h.seq, v})
		}
		h.sweep()
		if round%7 != 0 && round > 20 {
			continue
		}
		// Every retained tick's time, and times between and before.
		var grid []int64
		for tk := h.oldest(); tk <= h.seq; tk++ {
			grid = append(grid, h.times[tk%h.n]-1, h.times[tk%h.n], h.times[tk%h.n]+1)
		}
		for _, key := range keys {
			if key == "late" && round < 40 {
				if h.values(key, grid) != nil {
					t.Fatalf("round %d: values for an object never sampled", round)
				}
				continue
			}
			got := h.values(key, grid)
			for i, at := range grid {
				want := []uint64{0, 0, 0}
				oldest := h.times[h.oldest()%h.n]
				for _, r := range model[key] {
					// the last record at or before at; before the
					// retention: the value at the tick before it.
					rt := int64(r.tick) * 5000
					if (at >= oldest && rt <= at) || (at < oldest && r.tick < h.oldest()) {
						want = r.vals
					}
				}
				if at < int64(model[key][0].tick)*5000 && model[key][0].tick >= h.oldest() {
					want = []uint64{0, 0, 0} // before it existed
				}
				if fmt.Sprint(got[i]) != fmt.Sprint(want) {
					t.Fatalf("round %d, %s at %d: got %v, want %v", round, key, at, got[i], want)
				}
			}
		}
	}
	if o := h.objs["idle"]; len(o.buf) != 0 {
		t.Fatalf("an idle object keeps %d bytes of changes", len(o.buf))
	}
	if o := h.objs["busy"]; cap(o.buf) > 2*(len(o.buf)-o.off)+64 {
		t.Fatalf("a busy object's log is %d bytes for %d live", cap(o.buf), len(o.buf)-o.off)
	}
	// An object no longer sampled is forgotten.
	h.tick(201 * 5000)
	h.record("busy", k, cur["busy"])
	h.sweep()
	if _, ok := h.objs["idle"]; ok || len(h.objs) != 1 {
		t.Fatalf("sweep kept %d objects", len(h.objs))
	}
}

// issue 15: the range parameters as RabbitMQ 3.10.8's
// rabbit_mgmt_util:range: both of a pair or none; integers; > 0; at most
// 500 samples; the grid's end rounded down to a multiple of incr (up
// for lengths where RabbitMQ uses range_ceil).
func TestHistoryParseRanges(t *testing.T) {
	const now = 1796181934837
	for _, tc := range []struct {
		q       string
		ceil    bool
		err     string
		fam     histFamily
		first   int64
		last    int64
		samples int
	}{
		{q: "msg_rates_age=60&msg_rates_incr=5", fam: famMsgRates, first: 1796181870000, last: 1796181930000, samples: 13},
		{q: "msg_rates_age=60&msg_rates_incr=7", fam: famMsgRates, first: 1796181873000, last: 1796181933000, samples: 9},
		{q: "lengths_age=60&lengths_incr=5", fam: famLengths, first: 1796181870000, last: 1796181930000, samples: 13},
		{q: "lengths_age=60&lengths_incr=5", ceil: true, fam: famLengths, first: 1796181875000, last: 1796181935000, samples: 13},
		{q: "msg_rates_age=60&msg_rates_incr=5", ceil: true, fam: famMsgRates, first: 1796181870000, last: 1796181930000, samples: 13},
		{q: "data_rates_age=5&data_rates_incr=60", fam: famDataRates, first: 1796181895000, last: 1796181900000, samples: 1},
		{q: "node_stats_age=%2B10&node_stats_incr=5", fam: famNodeStats, first: 1796181920000, last: 1796181930000, samples: 3},
		{q: "msg_rates_age=2500&msg_rates_incr=5", fam: famMsgRates, first: 1796179430000, last: 1796181930000, samples: 501},
		{q: "msg_rates_age=60", fam: famMsgRates},
		{q: "msg_rates_incr=60", fam: famMsgRates},
		{q: "msg_rates_age=abc&msg_rates_incr=5", fam: famMsgRates},
		{q: "msg_rates_age=1.5&msg_rates_incr=1", fam: famMsgRates},
		{q: "msg_rates_age=&msg_rates_incr=1", fam: famMsgRates},
		{q: "msg_rates_age=60&msg_rates_incr=0", err: "Invalid range parameters: age 60, incr 0"},
		{q: "msg_rates_age=-5&msg_rates_incr=5", err: "Invalid range parameters: age -5, incr 5"},
		{q: "msg_rates_age=2505&msg_rates_incr=5", err: "Invalid range parameters: age 2505, incr 5"},
		{q: "data_rates_age=1&data_rates_incr=-1", err: "Invalid range parameters: age 1, incr -1"},
		// The first invalid family in RabbitMQ's order is the one named.
		{q: "msg_rates_age=-1&msg_rates_incr=1&lengths_age=0&lengths_incr=1", err: "Invalid range parameters: age 0, incr 1"},
		{q: "node_stats_age=0&node_stats_incr=1&data_rates_age=0&data_rates_incr=2", err: "Invalid range parameters: age 0, incr 2"},
	} {
		q, _ := url.ParseQuery(tc.q)
		r, err := parseRanges(q, now, tc.ceil)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%s: error %v, want %q", tc.q, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.q, err)
			continue
		}
		for f := range numFamilies {
			if f != tc.fam && r[f] != nil {
				t.Errorf("%s: a range for %s", tc.q, famPrefix[f])
			}
		}
		got := r[tc.fam]
		if tc.samples == 0 {
			if got != nil {
				t.Errorf("%s: a range %+v, want none", tc.q, got)
			}
			continue
		}
		if got == nil || got.first != tc.first || got.last != tc.last || len(got.grid()) != tc.samples {
			t.Errorf("%s: range %+v, want first %d last %d and %d samples", tc.q, got, tc.first, tc.last, tc.samples)
			continue
		}
		g := got.grid()
		if g[0] != tc.first || g[len(g)-1] > tc.last || g[len(g)-1]+got.incr <= tc.last {
			t.Errorf("%s: grid %v", tc.q, g)
		}
	}
}

// issue 15: <stat>_details as RabbitMQ's format_range: samples newest
// first; rate from the two newest; avg_rate over the range; avg of the
// samples; no averages for one sample; rate 0 when the newest sample is
// older than the range's end by more than the sample interval.
func TestHistoryDetails(t *testing.T) {
	r := &histRange{first: 10000, last: 30000, incr: 5000}
	vals := []uint64{0, 10, 10, 40, 65}
	d := asJSON(t, histDetails(r, r.grid(), func(i int) uint64 { return vals[i] }, 5000))
	if got := fmt.Sprint(d["samples"]); got != "[map[sample:65 timestamp:30000] map[sample:40 timestamp:25000] map[sample:10 timestamp:20000] map[sample:10 timestamp:15000] map[sample:0 timestamp:10000]]" {
		t.Fatalf("samples %s", got)
	}
	if d["rate"] != 5.0 || d["avg_rate"] != 3.25 || d["avg"] != 25.0 {
		t.Fatalf("rate %v avg_rate %v avg %v, want 5 3.25 25", d["rate"], d["avg_rate"], d["avg"])
	}
	down := []uint64{9, 3}
	r2 := &histRange{first: 0, last: 2000, incr: 2000}
	d = asJSON(t, histDetails(r2, r2.grid(), func(i int) uint64 { return down[i] }, 5000))
	if d["rate"] != -3.0 || d["avg_rate"] != -3.0 || d["avg"] != 6.0 {
		t.Fatalf("falling: %v", d)
	}
	one := &histRange{first: 25000, last: 30000, incr: 60000}
	d = asJSON(t, histDetails(one, one.grid(), func(int) uint64 { return 7 }, 5000))
	if _, ok := d["avg"]; ok || d["rate"] != 0.0 || len(d["samples"].([]any)) != 1 {
		t.Fatalf("one sample: %v", d)
	}
	// age 60, incr 7: the newest grid point is 4 s before the end, within
	// the 5 s interval: a rate; with a 3 s interval, none.
	odd := &histRange{first: 0, last: 60000, incr: 7000}
	g := odd.grid()
	if d := asJSON(t, histDetails(odd, g, func(i int) uint64 { return uint64(i * 7) }, 5000)); d["rate"] != 1.0 {
		t.Fatalf("rate %v, want 1", d["rate"])
	}
	if d := asJSON(t, histDetails(odd, g, func(i int) uint64 { return uint64(i * 7) }, 3000)); d["rate"] != 0.0 {
		t.Fatalf("rate %v, want 0", d["rate"])
	}
}

// asJSON is v as the API sends it, decoded.
func asJSON(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// historyOf10kQueues fills a history with the default retention (121
// ticks) for 10,000 queues, busy of them with traffic every tick.
func historyOf10kQueues(busy int) *history {
	h := newHistory(int(DefaultHistoryRetention / (5 * time.Second)))
	vals := make([][]uint64, 10000)
	for i := range vals {
		vals[i] = make([]uint64, len(kindQueue.fields))
	}
	keys := make([]string, len(vals))
	for i := range keys {
		keys[i] = queueKey("/", "q-"+strconv.Itoa(i))
	}
	for tick := range 200 { // past the retention: eviction running
		h.tick(int64(tick) * 5000)
		for i, v := range vals {
			if i < busy {
				// ~200 msg/s in and out, a wandering depth
				for _, f := range []string{"publish", "deliver", "deliver_get", "ack"} {
					v[kindQueue.index[f]] += 1000 + uint64(tick%7)
				}
				v[kindQueue.index["redeliver"]] += uint64(tick % 2)
				d := uint64(50 + tick%13)
				v[kindQueue.index["messages"]], v[kindQueue.index["messages_ready"]] = d, d-3
				v[kindQueue.index["messages_unacknowledged"]] = 3
			}
			h.record(keys[i], kindQueue, v)
		}
		h.sweep()
	}
	return h
}

// BenchmarkHistory10kQueues (issue 15): the history's memory for 10,000
// queues, all idle, 10% busy and all busy, at the default retention, and
// the sampler's history work per tick. Run:
//
//	go test -run x -bench BenchmarkHistory10kQueues -benchmem ./mgmt
func BenchmarkHistory10kQueues(b *testing.B) {
	for _, busy := range []int{0, 1000, 10000} {
		b.Run(fmt.Sprintf("busy=%d", busy), func(b *testing.B) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			h := historyOf10kQueues(busy)
			runtime.GC()
			runtime.ReadMemStats(&after)
			_, est := h.size()
			heap := float64(after.HeapAlloc) - float64(before.HeapAlloc)
			// One more sample round per iteration: the sampler's
			// history cost per tick for 10,000 queues.
			vals := make([]uint64, len(kindQueue.fields))
			keys := make([]string, 10000)
			for i := range keys {
				keys[i] = queueKey("/", "q-"+strconv.Itoa(i))
			}
			b.ResetTimer()
			for it := 0; it < b.N; it++ {
				h.tick(int64(1000+it) * 5000)
				for i, k := range keys {
					if i < busy {
						vals[0] = uint64(it)
						vals[10] = uint64(it % 9)
					}
					h.record(k, kindQueue, vals)
				}
				h.sweep()
			}
			b.StopTimer()
			b.ReportMetric(heap/(1<<20), "heap-MiB")
			b.ReportMetric(heap/10000, "heap-B/queue")
			b.ReportMetric(float64(est)/10000, "est-B/queue")
			runtime.KeepAlive(h)
		})
	}
}

// issue 15: the cost stays bounded: 10,000 queues' history at the
// default retention, every queue busy, within 64 MiB by the store's own
// count (a cap that fails if the log stopped folding old changes).
func TestHistory10kQueuesBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	h := historyOf10kQueues(10000)
	n, est := h.size()
	if n != 10000 || est > 64<<20 {
		t.Fatalf("%d objects, %d bytes", n, est)
	}
	t.Logf("10,000 busy queues: %.1f MiB, %d B/queue", float64(est)/(1<<20), est/10000)
}

// issue 15: a queue's values, by field (queueCounters) and in kindQueue's
// order (the sampler's, map-free), are its stats; a vhost's fields start
// with a queue's (the sampler sums them by index).
func TestHistoryQueueValues(t *testing.T) {
	st := broker.QueueStats{Published: 1, Deliver: 2, DeliverNoAck: 3, Get: 4, GetNoAck: 5, GetEmpty: 6, Acked: 7,
		Redelivered: 8, Ready: 9, Unacked: 10, DeadLettered: map[string]uint64{"expired": 11, "rejected": 12}}
	c := queueCounters(st)
	want := counters{"publish": 1, "deliver": 2, "deliver_no_ack": 3, "get": 4, "get_no_ack": 5, "get_empty": 6,
		"deliver_get": 2 + 3 + 4 + 5, "ack": 7, "redeliver": 8, "dead_lettered": 11 + 12,
		"messages": 9 + 10, "messages_ready": 9, "messages_unacknowledged": 10}
	if len(c) != len(want) {
		t.Errorf("queueCounters = %v, want %v", c, want)
	}
	vals := make([]uint64, len(kindQueue.fields))
	queueValues(st, vals)
	for i, f := range kindQueue.fields {
		if vals[i] != want[f] || c[f] != want[f] {
			t.Errorf("%s: queueValues %d, queueCounters %d, want %d", f, vals[i], c[f], want[f])
		}
		if kindVHost.fields[i] != f {
			t.Errorf("kindVHost field %d is %s, kindQueue's %s", i, kindVHost.fields[i], f)
		}
	}
}
