package broker

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
)

// BenchmarkDeadLetterReject measures reject(requeue=false) -> dead-letter
// -> DLQ consumer, without sockets: the broker's share of the nack-to-DLQ
// path.
func BenchmarkDeadLetterReject(b *testing.B) {
	br := New(Config{})
	v := br.VHost("/")
	if err := v.DeclareExchange(ExchangeSpec{Name: "dlx", Kind: KindDirect}, false); err != nil {
		b.Fatal(err)
	}
	dlq, _, _, _ := v.DeclareQueue(QueueSpec{Name: "dlq"}, false)
	if err := v.Bind("dlx", "dlq", false, "failed", nil, 0); err != nil {
		b.Fatal(err)
	}
	q, _, _, err := v.DeclareQueue(QueueSpec{Name: "work", Args: amqp.Table{
		"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "failed"}}, false)
	if err != nil {
		b.Fatal(err)
	}
	sink := &countingSink{}
	if err := dlq.AddConsumer(&Consumer{Tag: "c", NoAck: true, Sink: sink}); err != nil {
		b.Fatal(err)
	}
	var r Router
	body := make([]byte, 16)
	ds := make([]Delivery, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := v.Publish(&r, "", &Message{RoutingKey: "work", Body: body}); err != nil {
			b.Fatal(err)
		}
		d, _, ok := q.Get(false)
		if !ok {
			b.Fatal("empty")
		}
		ds[0] = d
		q.Reject(ds)
	}
	q.waitDeadLetters()
	b.StopTimer()
	if sink.n != b.N {
		b.Fatalf("dead letters delivered: %d, want %d", sink.n, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deadletters/s")
}

// latenessSink records how late each dead-lettered message arrived after
// the deadline written in its body.
type latenessSink struct {
	mu   sync.Mutex
	late []time.Duration
	done chan struct{}
	want int
}

func (s *latenessSink) Deliver(c *Consumer, d Delivery) bool {
	deadline := int64(binary.BigEndian.Uint64(d.Msg.Body))
	late := time.Duration(time.Now().UnixNano() - deadline)
	s.mu.Lock()
	s.late = append(s.late, late)
	if len(s.late) == s.want {
		close(s.done)
	}
	s.mu.Unlock()
	return true
}
func (s *latenessSink) Cancelled(c *Consumer) {}

// BenchmarkTTLExpiry1M publishes 1,000,000 messages with per-message TTLs
// spread over 5 s to 15 s, in random order (publishing takes a few
// seconds, so expiries mostly start once it is done and the figures show
// the expiry path, not a CPU saturated by publishers), into one queue whose expired
// messages dead-letter into a consumed DLQ, and reports how late the
// expiries were (p50, p99, max) and the heap the queued messages took.
// Run it alone: go test -run '^$' -bench TTLExpiry1M -benchtime 1x ./broker
func BenchmarkTTLExpiry1M(b *testing.B) {
	n := 1_000_000
	if s := os.Getenv("WARREN_BENCH_TTL_N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	for i := 0; i < b.N; i++ {
		br := New(Config{})
		v := br.VHost("/")
		v.DeclareExchange(ExchangeSpec{Name: "dlx", Kind: KindFanout}, false)
		dlq, _, _, _ := v.DeclareQueue(QueueSpec{Name: "dlq"}, false)
		v.Bind("dlx", "dlq", false, "", nil, 0)
		v.DeclareQueue(QueueSpec{Name: "ttl", Args: amqp.Table{"x-dead-letter-exchange": "dlx"}}, false)
		sink := &latenessSink{done: make(chan struct{}), want: n}
		dlq.AddConsumer(&Consumer{Tag: "c", NoAck: true, Sink: sink})
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		var r Router
		rng := rand.New(rand.NewPCG(1, 2))
		start := time.Now()
		for j := 0; j < n; j++ {
			ttl := 5000 + rng.Int64N(10000)
			body := make([]byte, 16)
			now := time.Now()
			binary.BigEndian.PutUint64(body, uint64(now.Add(time.Duration(ttl)*time.Millisecond).UnixNano()))
			if _, err := v.Publish(&r, "", &Message{RoutingKey: "ttl", Body: body, TTL: ttl, HasTTL: true}); err != nil {
				b.Fatal(err)
			}
		}
		publishTime := time.Since(start)
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		select {
		case <-sink.done:
		case <-time.After(90 * time.Second):
			b.Fatalf("only %d of %d expired within 90 s", len(sink.late), n)
		}
		sink.mu.Lock()
		late := sink.late
		sink.mu.Unlock()
		sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
		b.ReportMetric(float64(n)/publishTime.Seconds(), "publish-msgs/s")
		b.ReportMetric(float64(late[n/2])/1e6, "late-p50-ms")
		b.ReportMetric(float64(late[n*99/100])/1e6, "late-p99-ms")
		b.ReportMetric(float64(late[n-1])/1e6, "late-max-ms")
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/(1<<20), "heap-MiB")
	}
}
