package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/warrentest"
)

// perf runs warren-perf with args (plus --json) and decodes its output.
func perf(t *testing.T, args ...string) *Result {
	t.Helper()
	var out, errb bytes.Buffer
	args = append(args, "--json")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := run(ctx, args, &out, &errb); err != nil {
		t.Fatalf("warren-perf %s: %v\nstderr:\n%s", strings.Join(args, " "), err, errb.String())
	}
	var res Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("bad JSON: %v\n%s", err, out.String())
	}
	t.Logf("%s\n%s", strings.Join(args, " "), out.String())
	return &res
}

func checkLatency(t *testing.T, name string, l *Latency, n uint64) {
	t.Helper()
	if l == nil || l.Count == 0 {
		t.Fatalf("%s: no latency measured", name)
	}
	if n > 0 && l.Count != n {
		t.Errorf("%s: %d latencies for %d messages", name, l.Count, n)
	}
	if !(l.Min >= 0 && l.Min <= l.P50 && l.P50 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
		t.Errorf("%s: latencies out of order: %+v", name, l)
	}
	if l.Max > 60e6 {
		t.Errorf("%s: max latency %vµs", name, l.Max)
	}
}

func checkRun(t *testing.T, r *Result) {
	t.Helper()
	if r.Published == 0 || r.PublishRate <= 0 || r.WindowS <= 0 || r.ElapsedS < r.WindowS {
		t.Fatalf("nothing published: %+v", r)
	}
	if r.ServerProduct != "Warren" || len(r.Errors) > 0 || !r.Complete {
		t.Fatalf("server %q, errors %v", r.ServerProduct, r.Errors)
	}
}

func TestTransientAutoAck(t *testing.T) {
	b := warrentest.Start(t)
	r := perf(t, "--uri", b.URL(), "--duration", "1s", "--auto-ack", "--rate", "2000", "--progress", "0",
		"--pid", strconv.Itoa(os.Getpid()))
	checkRun(t, r)
	if r.Consumed != r.Published || r.ConsumeRate <= 0 {
		t.Errorf("consumed %d of %d (%v/s)", r.Consumed, r.Published, r.ConsumeRate)
	}
	if r.Confirmed != 0 || r.DeadLettered != 0 {
		t.Errorf("confirmed %d, dead-lettered %d", r.Confirmed, r.DeadLettered)
	}
	checkLatency(t, "latency", r.Latency, r.Consumed)
	if r.DeadLetterLatency != nil {
		t.Errorf("dead-letter latency without a DLQ")
	}
	if b := r.Broker; b == nil || b.PID != os.Getpid() || b.RSSStartMiB <= 0 || b.RSSPeakMiB < b.RSSStartMiB || b.RSSEndMiB <= 0 || b.CPUPercent <= 0 {
		t.Errorf("broker stats: %+v", r.Broker)
	}
	if r.ClientCPUPercent <= 0 {
		t.Errorf("client CPU %v", r.ClientCPUPercent)
	}
	// Paced at 2000/s: the schedule catches up after any stall, so only
	// a gross error in pacing lands outside this range.
	if r.PublishRate < 1000 || r.PublishRate > 3000 {
		t.Errorf("publish rate %v, want ~2000", r.PublishRate)
	}
	// The generated queue was deleted.
	if q := r.Scenario.Queues; len(q) != 1 || b.Broker().VHost("/").Queue(q[0]) != nil {
		t.Errorf("queue %v left behind", q)
	}
}

func TestPersistentConfirmsMultiAck(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	b := warrentest.Start(t)
	r := perf(t, "--uri", b.URL(), "--duration", "1s", "--persistent", "--durable-queue", "--confirm", "50",
		"--multi-ack-every", "10", "--prefetch", "100", "--publishers", "2", "--consumers", "2", "--progress", "0",
		"--warmup", "200ms")
	checkRun(t, r)
	if r.Confirmed != r.Published || r.Nacked != 0 || r.ConfirmRate <= 0 {
		t.Errorf("confirmed %d (%v/s), nacked %d, of %d", r.Confirmed, r.ConfirmRate, r.Nacked, r.Published)
	}
	if r.Consumed != r.Published {
		t.Errorf("consumed %d of %d", r.Consumed, r.Published)
	}
	checkLatency(t, "latency", r.Latency, 0)
	if r.Latency.Count >= r.Consumed {
		t.Errorf("warm-up not excluded: %d latencies for %d messages", r.Latency.Count, r.Consumed)
	}
	if !r.Scenario.Persistent || r.Scenario.Confirm != 50 || r.Scenario.MultiAckEvery != 10 || r.Scenario.WarmupS != 0.2 {
		t.Errorf("scenario %+v", r.Scenario)
	}
}

func TestFanout(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	b := warrentest.Start(t)
	r := perf(t, "--uri", b.URL(), "--duration", "1s", "--fanout", "2", "--consumers", "2", "--rate", "3000",
		"--prefetch", "200", "--progress", "0")
	checkRun(t, r)
	if len(r.Scenario.Queues) != 2 || r.Scenario.Exchange == "" || r.Scenario.ExchangeType != "fanout" {
		t.Errorf("scenario %+v", r.Scenario)
	}
	if r.Consumed != 2*r.Published {
		t.Errorf("consumed %d, want 2 x %d", r.Consumed, r.Published)
	}
	checkLatency(t, "latency", r.Latency, r.Consumed)
}

func TestNackIntoDLQ(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	b := warrentest.Start(t)
	r := perf(t, "--uri", b.URL(), "--duration", "1s", "--nack", "--dlx-queue", "perf-dlq", "--prefetch", "100",
		"--rate", "3000", "--progress", "0")
	checkRun(t, r)
	if r.Consumed != r.Published || r.DeadLettered != r.Published || r.DeadLetterRate <= 0 {
		t.Errorf("published %d, consumed %d, dead-lettered %d (%v/s)", r.Published, r.Consumed, r.DeadLettered, r.DeadLetterRate)
	}
	checkLatency(t, "dead-letter latency", r.DeadLetterLatency, r.DeadLettered)
	if v := b.Broker().VHost("/"); v.Queue("perf-dlq") != nil {
		t.Error("DLQ left behind")
	}
}

func TestTTLIntoDLQWithCount(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	b := warrentest.Start(t)
	r := perf(t, "--uri", b.URL(), "--count", "3000", "--publishers", "2", "--consumers", "0", "--confirm", "100",
		"--queue-args", `{"x-message-ttl": 20}`, "--dlx-queue", "perf-ttl-dlq", "--progress", "0")
	checkRun(t, r)
	if r.Published != 3000 || r.Confirmed != 3000 || r.DeadLettered != 3000 || r.Consumed != 0 {
		t.Errorf("published %d, confirmed %d, dead-lettered %d, consumed %d", r.Published, r.Confirmed, r.DeadLettered, r.Consumed)
	}
	checkLatency(t, "dead-letter latency", r.DeadLetterLatency, 3000)
	if r.DeadLetterLatency.P50 < 20e3 {
		t.Errorf("dead-lettered before the TTL: %+v", r.DeadLetterLatency)
	}
	if r.Latency == nil || r.Latency.Count != 0 {
		t.Errorf("latency without consumers: %+v", r.Latency)
	}
}

// TestSink runs warren-perf against its own sink: publish-only with
// confirms, then consume-only with manual acks and a prefetch.
func TestSink(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &sink{size: 100, frameMax: 131072}
	done := make(chan error, 1)
	go func() { done <- s.serve(ctx, ln, &bytes.Buffer{}, 0) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	u := "amqp://guest:guest@" + ln.Addr().String() + "/"
	r := perf(t, "--uri", u, "--duration", "500ms", "--consumers", "0", "--confirm", "1000", "--progress", "0")
	if r.Published == 0 || r.Confirmed != r.Published || r.ServerProduct != "warren-perf sink" {
		t.Errorf("sink publish: %+v", r)
	}
	r = perf(t, "--uri", u, "--duration", "500ms", "--publishers", "0", "--prefetch", "500", "--multi-ack-every", "100",
		"--progress", "0", "--size", "100")
	if r.Consumed == 0 || r.ConsumeRate <= 0 {
		t.Errorf("sink consume: %+v", r)
	}
	checkLatency(t, "sink latency", r.Latency, 0)
	r = perf(t, "--uri", u, "--count", "5000", "--publishers", "0", "--auto-ack", "--progress", "0")
	if r.Consumed < 5000 {
		t.Errorf("sink consume --count 5000: consumed %d", r.Consumed)
	}
}

func TestBadOptions(t *testing.T) {
	for _, args := range [][]string{
		{"--size", "8"},
		{"--publishers", "0", "--consumers", "0"},
		{"--prefetch", "10", "--multi-ack-every", "20"},
		{"--warmup", "10s", "--duration", "5s"},
		{"--queue-args", "x-max-length"},
		{"--queue-args", "{bad json"},
		{"--expiration", "soon"},
		{"extra"},
	} {
		var out, errb bytes.Buffer
		if err := run(context.Background(), args, &out, &errb); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

func TestParseQueueArgs(t *testing.T) {
	got, err := parseQueueArgs("x-max-length=10, x-queue-type=quorum,x-single-active-consumer=true,x-dead-letter-exchange=")
	if err != nil {
		t.Fatal(err)
	}
	want := amqp.Table{"x-max-length": int64(10), "x-queue-type": "quorum", "x-single-active-consumer": true, "x-dead-letter-exchange": ""}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %#v, want %#v", k, got[k], v)
		}
	}
	got, err = parseQueueArgs(`{"x-message-ttl": 500, "x-ratio": 0.5, "x-queue-type": "classic", "x-nested": {"a": [1, "b"]}}`)
	if err != nil {
		t.Fatal(err)
	}
	if got["x-message-ttl"] != int64(500) || got["x-ratio"] != 0.5 || got["x-queue-type"] != "classic" {
		t.Errorf("got %#v", got)
	}
	if n, ok := got["x-nested"].(amqp.Table); !ok || len(n["a"].([]any)) != 2 || n["a"].([]any)[0] != int64(1) {
		t.Errorf("nested: %#v", got["x-nested"])
	}
}

func TestHistogram(t *testing.T) {
	// Every value lands in a bucket whose reported value is within 0.4%.
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		v := uint64(r.Int64N(1 << uint(1+r.IntN(62))))
		b := bucketOf(v)
		low, w := bucketRange(b)
		if v < low || v >= low+w {
			t.Fatalf("value %d in bucket %d [%d, %d)", v, b, low, low+w)
		}
		if v > 0 {
			if e := math.Abs(bucketValue(b)-float64(v)) / float64(v); e > 0.004 {
				t.Fatalf("value %d reported as %v (error %.4f)", v, bucketValue(b), e)
			}
		}
	}
	if bucketOf(math.MaxUint64) != histBuckets-1 {
		t.Fatalf("max value in bucket %d of %d", bucketOf(math.MaxUint64), histBuckets)
	}
	// Quantiles of 1..100000 (µs-like values).
	var h Histogram
	for v := int64(1); v <= 100000; v++ {
		h.Record(v * 1000)
	}
	h.Record(-5)
	var s HistSnap
	h.AddTo(&s)
	if s.N != 100001 {
		t.Fatalf("n = %d", s.N)
	}
	for _, q := range []float64{0.5, 0.99, 0.999} {
		want := q * 100000 * 1000
		if got := s.Quantile(q); math.Abs(got-want)/want > 0.01 {
			t.Errorf("q%v = %v, want %v ±1%%", q, got, want)
		}
	}
	if s.Min() != 0 || math.Abs(s.Max()-1e8)/1e8 > 0.004 {
		t.Errorf("min %v max %v", s.Min(), s.Max())
	}
	d := s.Sub(s)
	if d.N != 0 || !math.IsNaN(d.Quantile(0.5)) {
		t.Errorf("empty diff: %+v", d.N)
	}
	if n := testing.AllocsPerRun(1000, func() { h.Record(12345) }); n != 0 {
		t.Errorf("Record allocates %v", n)
	}
}

func TestPacer(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := &pacer{start: t0, interval: 100e3} // 10k/s
	for i := 0; i < 10; i++ {
		if due := p.next(t0); !due.Equal(t0.Add(time.Duration(i) * 100 * time.Microsecond)) {
			t.Fatalf("message %d due %v", i, due.Sub(t0))
		}
	}
	// Far behind: no burst of more than a second's worth.
	now := t0.Add(10 * time.Second)
	if due := p.next(now); !due.Equal(now) {
		t.Fatalf("after a stall, due %v", due.Sub(now))
	}
	if due := p.next(now); !due.Equal(now.Add(100 * time.Microsecond)) {
		t.Fatalf("then due %v", due.Sub(now))
	}
}
