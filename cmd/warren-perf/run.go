package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/perfclient"
)

// Result is what --json prints. Counts are totals over the whole run
// (warm-up and drain included); rates and latencies cover the measurement
// window only (after --warmup, up to the end of --duration, or with
// --count up to each counter's last event).
type Result struct {
	Tool          string   `json:"tool"`
	URI           string   `json:"uri"`
	ServerProduct string   `json:"server_product"`
	ServerVersion string   `json:"server_version"`
	Scenario      Scenario `json:"scenario"`
	StartedAt     string   `json:"started_at"`
	ElapsedS      float64  `json:"elapsed_s"`
	WindowS       float64  `json:"window_s"`

	Published    uint64 `json:"published"`
	Confirmed    uint64 `json:"confirmed"`
	Nacked       uint64 `json:"nacked"`
	Returned     uint64 `json:"returned"`
	Consumed     uint64 `json:"consumed"`
	DeadLettered uint64 `json:"dead_lettered"`

	PublishRate    float64 `json:"publish_rate"`
	ConfirmRate    float64 `json:"confirm_rate"`
	ConsumeRate    float64 `json:"consume_rate"`
	DeadLetterRate float64 `json:"dead_letter_rate"`

	Latency           *Latency `json:"latency_us"`
	DeadLetterLatency *Latency `json:"dead_letter_latency_us,omitempty"`

	Broker           *BrokerStats `json:"broker,omitempty"`
	ClientCPUPercent float64      `json:"client_cpu_percent"`
	BlockedEvents    uint64       `json:"blocked_events"`
	// Complete is true when everything expected arrived by the end of
	// the drain: every publish confirmed, consumers got every message
	// (times the queues they cover), and with --dlx-queue every nacked
	// (or, without consumers, every published) message was dead-lettered.
	Complete bool     `json:"complete"`
	Errors   []string `json:"errors,omitempty"`
}

// Scenario echoes the options that shape the load.
type Scenario struct {
	Publishers    int            `json:"publishers"`
	Consumers     int            `json:"consumers"`
	Size          int            `json:"size"`
	Persistent    bool           `json:"persistent"`
	Confirm       int            `json:"confirm"`
	AutoAck       bool           `json:"auto_ack"`
	MultiAckEvery int            `json:"multi_ack_every"`
	Prefetch      int            `json:"prefetch"`
	Rate          float64        `json:"rate"`
	Exchange      string         `json:"exchange"`
	ExchangeType  string         `json:"exchange_type,omitempty"`
	RoutingKey    string         `json:"routing_key"`
	Queues        []string       `json:"queues"`
	QueueArgs     map[string]any `json:"queue_args,omitempty"`
	DurableQueue  bool           `json:"durable_queue"`
	Fanout        int            `json:"fanout"`
	Nack          bool           `json:"nack"`
	DLXQueue      string         `json:"dlx_queue,omitempty"`
	Expiration    string         `json:"expiration,omitempty"`
	DurationS     float64        `json:"duration_s"`
	Count         int64          `json:"count"`
	WarmupS       float64        `json:"warmup_s"`
}

// Latency is in microseconds; Count is the number of messages measured.
type Latency struct {
	Count uint64  `json:"count"`
	Min   float64 `json:"min"`
	Mean  float64 `json:"mean"`
	P50   float64 `json:"p50"`
	P75   float64 `json:"p75"`
	P95   float64 `json:"p95"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	Max   float64 `json:"max"`
}

// BrokerStats come from /proc/<pid>: RSS in MiB (VmRSS sampled every
// 50ms), CPU in percent of one core over the measurement window.
type BrokerStats struct {
	PID         int     `json:"pid"`
	RSSStartMiB float64 `json:"rss_start_mib"`
	RSSPeakMiB  float64 `json:"rss_peak_mib"`
	RSSEndMiB   float64 `json:"rss_end_mib"`
	CPUPercent  float64 `json:"cpu_percent"`
}

type publisher struct {
	id      int
	conn    *perfclient.Conn
	ch      *perfclient.Channel
	quota   int64 // -1: unlimited
	pubEnd  atomic.Int64
	confEnd atomic.Int64
	done    chan struct{}
}

type consumerStats struct {
	conn     *perfclient.Conn
	ch       *perfclient.Channel
	queue    string
	consumed atomic.Uint64
	last     atomic.Int64
	pending  int // reader goroutine only
	hist     Histogram
}

type topology struct {
	exchange, key string
	queues        []string
	dlq           string
	delQueues     []string
	delExchanges  []string
}

type runner struct {
	o      *options
	stderr io.Writer
	cfg    perfclient.Config

	t0, wStart time.Time
	stop       chan struct{} // closed when publishing stops
	stopped    atomic.Bool
	aborting   atomic.Bool // publisher connections are being cut
	stopCtx    context.Context
	stopCancel context.CancelFunc
	userCtx    context.Context

	topo *topology
	pubs []*publisher
	cons []*consumerStats
	dlq  *consumerStats

	errMu sync.Mutex
	errs  []string
	fatal chan struct{}
	once  sync.Once
}

func (r *runner) fail(format string, args ...any) {
	r.errMu.Lock()
	msg := fmt.Sprintf(format, args...)
	for _, e := range r.errs {
		if e == msg {
			r.errMu.Unlock()
			return
		}
	}
	r.errs = append(r.errs, msg)
	r.errMu.Unlock()
	r.once.Do(func() { close(r.fatal) })
}

func randomID() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func isBuiltinExchange(name string) bool { return name == "" || strings.HasPrefix(name, "amq.") }

func (r *runner) declare(ch *perfclient.Channel) (*topology, error) {
	o := r.o
	tp := &topology{}
	if o.Predeclared {
		if o.Queue != "" {
			tp.queues = []string{o.Queue}
		}
		tp.exchange, tp.key = o.Exchange, o.Queue
		if o.Exchange != "" && o.RoutingKey != "" {
			tp.key = o.RoutingKey
		}
		return tp, nil
	}
	id := randomID()
	args := amqp.Table{}
	for k, v := range o.QueueArgs {
		args[k] = v
	}
	durable := o.DurableQueue
	if qt, _ := args["x-queue-type"].(string); qt == "quorum" || qt == "stream" {
		durable = true
	}
	exchange := func(name, kind string) error {
		if isBuiltinExchange(name) {
			return nil
		}
		if err := ch.ExchangeDeclare(name, kind, durable, false, nil); err != nil {
			return fmt.Errorf("declaring exchange %q: %w", name, err)
		}
		tp.delExchanges = append(tp.delExchanges, name)
		return nil
	}
	queue := func(name string, args amqp.Table) error {
		if _, err := ch.QueueDeclare(name, perfclient.QueueOptions{Durable: durable, Args: args}); err != nil {
			return fmt.Errorf("declaring queue %q: %w", name, err)
		}
		tp.delQueues = append(tp.delQueues, name)
		return nil
	}
	if o.DLXQueue != "" {
		dlx, _ := args["x-dead-letter-exchange"].(string)
		if dlx == "" {
			dlx = o.DLXQueue + ".dlx"
			args["x-dead-letter-exchange"] = dlx
		}
		if err := exchange(dlx, "fanout"); err != nil {
			return tp, err
		}
		var dlqArgs amqp.Table
		if qt, ok := args["x-queue-type"]; ok {
			dlqArgs = amqp.Table{"x-queue-type": qt}
		}
		if err := queue(o.DLXQueue, dlqArgs); err != nil {
			return tp, err
		}
		if err := ch.QueueBind(o.DLXQueue, dlx, "", nil); err != nil {
			return tp, fmt.Errorf("binding %q to %q: %w", o.DLXQueue, dlx, err)
		}
		tp.dlq = o.DLXQueue
	}
	if len(args) == 0 {
		args = nil
	}
	base := o.Queue
	if base == "" {
		base = "warren-perf-" + id
	}
	if o.Fanout > 0 {
		ex := o.Exchange
		if ex == "" {
			ex = "warren-perf-fanout-" + id
		}
		if err := exchange(ex, "fanout"); err != nil {
			return tp, err
		}
		for i := 1; i <= o.Fanout; i++ {
			q := fmt.Sprintf("%s-%d", base, i)
			if err := queue(q, args); err != nil {
				return tp, err
			}
			if err := ch.QueueBind(q, ex, "", nil); err != nil {
				return tp, fmt.Errorf("binding %q to %q: %w", q, ex, err)
			}
			tp.queues = append(tp.queues, q)
		}
		tp.exchange = ex
		return tp, nil
	}
	if err := queue(base, args); err != nil {
		return tp, err
	}
	tp.queues = []string{base}
	tp.key = base
	if o.Exchange != "" {
		if err := exchange(o.Exchange, o.ExchangeType); err != nil {
			return tp, err
		}
		if o.RoutingKey != "" {
			tp.key = o.RoutingKey
		}
		if err := ch.QueueBind(base, o.Exchange, tp.key, nil); err != nil {
			return tp, fmt.Errorf("binding %q to %q: %w", base, o.Exchange, err)
		}
		tp.exchange = o.Exchange
	}
	return tp, nil
}

func (r *runner) cleanup(admin *perfclient.Conn) {
	tp := r.topo
	if tp == nil || len(tp.delQueues)+len(tp.delExchanges) == 0 {
		return
	}
	c := admin
	if c == nil || c.Err() != nil {
		var err error
		if c, err = perfclient.Dial(r.o.URI, r.cfg); err != nil {
			fmt.Fprintf(r.stderr, "warren-perf: cleanup: %v\n", err)
			return
		}
		defer c.Close()
	}
	for _, q := range tp.delQueues {
		if ch, err := c.Channel(); err == nil {
			ch.QueueDelete(q)
			ch.Close()
		}
	}
	for _, x := range tp.delExchanges {
		if ch, err := c.Channel(); err == nil {
			ch.ExchangeDelete(x)
			ch.Close()
		}
	}
}

func (r *runner) dialChannel(name string) (*perfclient.Conn, *perfclient.Channel, error) {
	cfg := r.cfg
	cfg.ConnectionName = name
	c, err := perfclient.Dial(r.o.URI, cfg)
	if err != nil {
		return nil, nil, err
	}
	ch, err := c.Channel()
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, ch, nil
}

// validLatency bounds what counts as a send timestamp: messages left over
// from other runs or published by other tools are not measured.
const maxLatency = int64(time.Hour)

func (r *runner) startConsumer(name, queue string, autoAck bool, prefetch int, isDLQ bool) (*consumerStats, error) {
	o := r.o
	c, ch, err := r.dialChannel(name)
	if err != nil {
		return nil, err
	}
	cs := &consumerStats{conn: c, ch: ch, queue: queue}
	if prefetch > 0 {
		if err := ch.Qos(prefetch, false); err != nil {
			c.Close()
			return nil, err
		}
	}
	every, multiple, nack := o.MultiAckEvery, o.MultiAckEvery > 1, o.Nack
	fn := func(d *perfclient.Delivery) {
		now := time.Now().UnixNano()
		if len(d.Body) >= 8 {
			if lat := now - int64(binary.BigEndian.Uint64(d.Body)); lat > -int64(time.Second) && lat < maxLatency {
				cs.hist.Record(lat)
			}
		}
		cs.consumed.Add(1)
		cs.last.Store(now)
		if autoAck {
			return
		}
		cs.pending++
		if cs.pending >= every {
			cs.pending = 0
			if nack {
				d.Nack(multiple, false)
			} else {
				d.Ack(multiple)
			}
		}
	}
	onCancel := func() {
		if !r.stopped.Load() {
			r.fail("consumer on %q cancelled by the broker", queue)
		}
	}
	if _, err := ch.Consume(queue, perfclient.ConsumeOptions{NoAck: autoAck, OnCancel: onCancel, Args: r.o.ConsumerArgs}, fn); err != nil {
		c.Close()
		return nil, fmt.Errorf("consuming from %q: %w", queue, err)
	}
	return cs, nil
}

// pacer schedules message n of a publisher at start + n/rate. A publisher
// that falls behind sends at once to catch up, but never more than one
// second's worth in a burst.
type pacer struct {
	start    time.Time
	interval float64 // ns
	n        int64
}

func (p *pacer) next(now time.Time) time.Time {
	due := p.start.Add(time.Duration(float64(p.n) * p.interval))
	if now.Sub(due) > time.Second {
		p.start = now.Add(-time.Duration(float64(p.n) * p.interval))
		due = now
	}
	p.n++
	return due
}

// sleepUntil waits for t, precisely, unless publishing stops; it reports
// whether publishing goes on.
func (r *runner) sleepUntil(t time.Time) bool {
	d := time.Until(t)
	if d > 3*time.Millisecond {
		tm := time.NewTimer(d - 2*time.Millisecond)
		select {
		case <-tm.C:
		case <-r.stop:
			tm.Stop()
			return false
		}
		d = time.Until(t)
	}
	if d > 0 {
		shortSleep(d)
	}
	return !r.stopped.Load()
}

func (r *runner) publish(p *publisher) {
	defer close(p.done)
	o := r.o
	fail := func(err error) {
		if !r.aborting.Load() {
			r.fail("publisher %d: %v", p.id, err)
		}
	}
	if o.Rate > 0 {
		precisePacing()
		defer runtime.UnlockOSThread()
	}
	ch := p.ch
	body := make([]byte, o.Size)
	var props *amqp.Properties
	if o.Persistent || o.Expiration != "" {
		props = &amqp.Properties{Expiration: o.Expiration}
		if o.Persistent {
			props.DeliveryMode = 2
		}
	}
	var pc *pacer
	if o.Rate > 0 {
		interval := 1e9 / o.Rate
		// Publishers are spread evenly over the interval.
		pc = &pacer{start: r.t0.Add(time.Duration(interval * float64(p.id) / float64(o.Publishers))), interval: interval}
	}
	maxOut := uint64(o.Confirm)
	seq := uint64(p.id) << 48
	ex, key := r.topo.exchange, r.topo.key
	var n int64
	for !r.stopped.Load() && (p.quota < 0 || n < p.quota) {
		if pc != nil {
			// Messages due within the quantum go at once: fewer, more
			// precise wake-ups (each costs ~30µs of CPU on a VM).
			if due := pc.next(time.Now()); time.Until(due) > o.PaceQuantum {
				if err := ch.Flush(); err != nil {
					fail(err)
					break
				}
				if !r.sleepUntil(due) {
					break
				}
			}
		}
		if maxOut > 0 && ch.Outstanding() >= maxOut {
			if err := ch.WaitConfirms(r.stopCtx, maxOut); err != nil {
				if !r.stopped.Load() {
					fail(err)
				}
				break
			}
		}
		binary.BigEndian.PutUint64(body, uint64(time.Now().UnixNano()))
		binary.BigEndian.PutUint64(body[8:], seq|uint64(n))
		if err := ch.Publish(ex, key, false, props, body); err != nil {
			fail(err)
			break
		}
		n++
	}
	if err := ch.Flush(); err != nil {
		fail(err)
	}
	now := time.Now().UnixNano()
	p.pubEnd.Store(now)
	if maxOut > 0 {
		ctx, cancel := context.WithTimeout(r.userCtx, r.o.DrainMax)
		if err := ch.WaitConfirms(ctx, 1); err != nil && ch.Err() != nil {
			fail(err)
		}
		cancel()
		now = time.Now().UnixNano()
	}
	p.confEnd.Store(now)
}

// snap is a point-in-time reading of every counter.
type snap struct {
	t                              time.Time
	published, confirmed, nacked   uint64
	returned, consumed, dead       uint64
	brokerCPU, selfCPU             time.Duration
	brokerCPUOK                    bool
	lat, dlLat                     HistSnap
	hasHist                        bool
	lastPub, lastConf, lastConsume int64
	lastDead                       int64
}

func (r *runner) snapshot(withHist bool) snap {
	s := snap{t: time.Now(), selfCPU: selfCPU()}
	if r.o.PID > 0 {
		if c, err := procCPU(r.o.PID); err == nil {
			s.brokerCPU, s.brokerCPUOK = c, true
		}
	}
	for _, p := range r.pubs {
		s.published += p.ch.Published()
		s.confirmed += p.ch.Confirmed()
		s.nacked += p.ch.Nacked()
		s.returned += p.ch.Returned()
		s.lastPub = max(s.lastPub, p.pubEnd.Load())
		s.lastConf = max(s.lastConf, p.confEnd.Load())
	}
	for _, c := range r.cons {
		s.consumed += c.consumed.Load()
		s.lastConsume = max(s.lastConsume, c.last.Load())
		if withHist {
			c.hist.AddTo(&s.lat)
		}
	}
	if r.dlq != nil {
		s.dead = r.dlq.consumed.Load()
		s.lastDead = r.dlq.last.Load()
		if withHist {
			r.dlq.hist.AddTo(&s.dlLat)
		}
	}
	s.hasHist = withHist
	return s
}

func (s snap) moved(o snap) bool {
	return s.published != o.published || s.confirmed != o.confirmed || s.nacked != o.nacked ||
		s.consumed != o.consumed || s.dead != o.dead
}

func (r *runner) publishersDone() bool {
	for _, p := range r.pubs {
		select {
		case <-p.done:
		default:
			return false
		}
	}
	return true
}

// complete reports whether, publishing over, everything expected has
// arrived.
func (r *runner) complete(s snap) bool {
	o := r.o
	if !r.publishersDone() {
		return false
	}
	consumedQueues := uint64(min(o.Consumers, len(r.topo.queues)))
	if o.Consumers > 0 && o.Publishers > 0 && s.consumed < s.published*consumedQueues {
		return false
	}
	if r.dlq != nil {
		var want uint64
		switch {
		case o.Consumers == 0:
			want = s.published * uint64(len(r.topo.queues))
		case o.Nack:
			// With multiple nacks, up to every-1 deliveries per consumer
			// are never nacked.
			slack := uint64(o.Consumers * (o.MultiAckEvery - 1))
			if s.consumed > slack {
				want = s.consumed - slack
			}
		}
		if s.dead < want {
			return false
		}
	}
	return true
}

func runLoad(ctx context.Context, o *options, stderr io.Writer) (*Result, error) {
	uri, err := perfclient.ParseURI(o.URI)
	if err != nil {
		return nil, err
	}
	r := &runner{o: o, stderr: stderr, stop: make(chan struct{}), fatal: make(chan struct{}), userCtx: ctx,
		cfg: perfclient.Config{Heartbeat: o.Heartbeat}}
	r.stopCtx, r.stopCancel = context.WithCancel(ctx)
	defer r.stopCancel()

	res := &Result{Tool: "warren-perf", URI: uri.Redacted(), StartedAt: time.Now().UTC().Format(time.RFC3339)}
	cfg := r.cfg
	cfg.ConnectionName = "warren-perf-setup"
	admin, err := perfclient.Dial(o.URI, cfg)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	res.ServerProduct, _ = admin.ServerProperties["product"].(string)
	res.ServerVersion, _ = admin.ServerProperties["version"].(string)
	ach, err := admin.Channel()
	if err != nil {
		return nil, err
	}
	r.topo, err = r.declare(ach)
	if o.Cleanup {
		defer r.cleanup(admin)
	}
	if err != nil {
		return nil, err
	}
	var closers []*perfclient.Conn
	defer func() { closeAll(closers) }()
	if len(r.topo.queues) == 0 && o.Consumers > 0 {
		return nil, errors.New("consumers need a queue")
	}
	for i := 0; i < o.Consumers; i++ {
		q := r.topo.queues[i%len(r.topo.queues)]
		cs, err := r.startConsumer(fmt.Sprintf("warren-perf-consumer-%d", i), q, o.AutoAck, o.Prefetch, false)
		if err != nil {
			return nil, err
		}
		closers = append(closers, cs.conn)
		r.cons = append(r.cons, cs)
	}
	if r.topo.dlq != "" {
		cs, err := r.startConsumer("warren-perf-dlq", r.topo.dlq, true, 0, true)
		if err != nil {
			return nil, err
		}
		closers = append(closers, cs.conn)
		r.dlq = cs
	}
	for i := 0; i < o.Publishers; i++ {
		c, ch, err := r.dialChannel(fmt.Sprintf("warren-perf-publisher-%d", i))
		if err != nil {
			return nil, err
		}
		closers = append(closers, c)
		if o.Confirm > 0 {
			if err := ch.ConfirmSelect(); err != nil {
				return nil, err
			}
		}
		ch.SetFlushThreshold(o.FlushBytes)
		quota := int64(-1)
		if o.Count > 0 {
			quota = o.Count / int64(o.Publishers)
			if int64(i) < o.Count%int64(o.Publishers) {
				quota++
			}
		}
		r.pubs = append(r.pubs, &publisher{id: i, conn: c, ch: ch, quota: quota, done: make(chan struct{})})
	}

	var rssStart, rssPeak, rssEnd int64
	rssOK := false
	if o.PID > 0 {
		if v, err := procRSS(o.PID); err == nil {
			rssStart, rssPeak, rssOK = v, v, true
		} else {
			r.fail("broker pid %d: %v", o.PID, err)
		}
	}

	r.t0 = time.Now()
	r.wStart = r.t0.Add(o.Warmup)
	atT0 := r.snapshot(true)
	atT0.t = r.t0
	start := atT0
	haveStart := o.Warmup == 0
	for _, p := range r.pubs {
		go r.publish(p)
	}

	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var deadline <-chan time.Time
	if o.Duration > 0 {
		t := time.NewTimer(o.Duration)
		defer t.Stop()
		deadline = t.C
	}
	var warm <-chan time.Time
	if !haveStart {
		t := time.NewTimer(o.Warmup)
		defer t.Stop()
		warm = t.C
	}
	last := start
	nextProgress := r.t0.Add(o.Progress)
	var end, prev, lastMove snap
	running := true
	var drainStart, lastMoveAt time.Time
	interrupted := false
loop:
	for {
		endNow := false
		select {
		case <-ctx.Done():
			interrupted = true
			endNow = true
		case <-r.fatal:
			endNow = true
		case <-deadline:
			endNow = true
		case <-warm:
			if !haveStart {
				start = r.snapshot(true)
				haveStart = true
			}
			continue
		case <-tick.C:
		}
		now := time.Now()
		if rssOK {
			if v, err := procRSS(o.PID); err == nil {
				rssPeak = max(rssPeak, v)
			}
		}
		if o.Progress > 0 && !now.Before(nextProgress) {
			cur := r.snapshot(true)
			r.progress(cur, last, !haveStart, running)
			last = cur
			for !nextProgress.After(now) {
				nextProgress = nextProgress.Add(o.Progress)
			}
		}
		if running {
			for _, c := range r.cons {
				if err := c.ch.Err(); err != nil {
					r.fail("consumer on %q: %v", c.queue, err)
					endNow = true
				}
			}
			if r.dlq != nil {
				if err := r.dlq.ch.Err(); err != nil {
					r.fail("consumer on %q: %v", r.dlq.queue, err)
					endNow = true
				}
			}
			if !endNow && o.Count > 0 {
				if o.Publishers > 0 {
					endNow = r.publishersDone()
				} else {
					var consumed uint64
					for _, c := range r.cons {
						consumed += c.consumed.Load()
					}
					endNow = consumed >= uint64(o.Count)
				}
			}
			if !endNow {
				continue
			}
			running = false
			end = r.snapshot(true)
			if !haveStart {
				// The run ended within the warm-up: measure all of it.
				start, haveStart = atT0, true
			}
			r.stopped.Store(true)
			close(r.stop)
			r.stopCancel()
			drainStart, lastMoveAt, prev, lastMove = now, now, end, end
			if interrupted || isClosed(r.fatal) {
				break loop
			}
		}
		// Draining.
		if interrupted || isClosed(r.fatal) {
			break loop
		}
		cur := r.snapshot(false)
		if cur.moved(prev) {
			lastMoveAt, lastMove = now, cur
		}
		prev = cur
		if r.complete(cur) || now.Sub(lastMoveAt) >= o.Drain || now.Sub(drainStart) >= o.DrainMax {
			break
		}
	}
	// Publishers still blocked in a write or waiting for confirms get
	// another --drain, then their connections are cut.
	grace := time.After(o.Drain)
	for _, p := range r.pubs {
		select {
		case <-p.done:
		case <-grace:
		case <-ctx.Done():
		}
	}
	r.aborting.Store(true)
	for _, p := range r.pubs {
		if !isClosed(p.done) {
			p.conn.Abort()
			<-p.done
		}
	}
	final := r.snapshot(true)
	res.Complete = r.complete(final) && (o.Confirm == 0 || final.confirmed+final.nacked == final.published)
	if out := final.published - final.confirmed - final.nacked; o.Confirm > 0 && out > 0 {
		r.fail("%d publishes never confirmed", out)
	}
	if rssOK {
		if v, err := procRSS(o.PID); err == nil {
			rssEnd = v
			rssPeak = max(rssPeak, v)
		}
	}
	for _, p := range r.pubs {
		res.BlockedEvents += p.conn.BlockedCount()
	}
	closeAll(closers)
	closers = nil
	if o.Progress > 0 && !r.o.JSON {
		fmt.Fprintln(stderr)
	}

	// Rates.
	res.Published, res.Confirmed, res.Nacked, res.Returned = final.published, final.confirmed, final.nacked, final.returned
	res.Consumed, res.DeadLettered = final.consumed, final.dead
	res.ElapsedS = time.Since(r.t0).Seconds()
	activeEnd := end
	if o.Count > 0 && !interrupted {
		// With --count each rate runs to its counter's last event.
		activeEnd = lastMove
		if lastMove.t.Before(end.t) {
			activeEnd = end
		}
		rate := func(total, before uint64, lastNs int64) float64 {
			span := time.Unix(0, lastNs).Sub(start.t).Seconds()
			if total <= before || span <= 0 {
				return 0
			}
			return float64(total-before) / span
		}
		res.PublishRate = rate(final.published, start.published, final.lastPub)
		res.ConfirmRate = rate(final.confirmed, start.confirmed, final.lastConf)
		res.ConsumeRate = rate(final.consumed, start.consumed, final.lastConsume)
		res.DeadLetterRate = rate(final.dead, start.dead, final.lastDead)
		lastEv := max(final.lastPub, final.lastConf, final.lastConsume, final.lastDead)
		if lastEv > 0 {
			res.WindowS = time.Unix(0, lastEv).Sub(start.t).Seconds()
		}
	} else {
		w := end.t.Sub(start.t).Seconds()
		res.WindowS = w
		if w > 0 {
			res.PublishRate = float64(end.published-start.published) / w
			res.ConfirmRate = float64(end.confirmed-start.confirmed) / w
			res.ConsumeRate = float64(end.consumed-start.consumed) / w
			res.DeadLetterRate = float64(end.dead-start.dead) / w
		}
	}
	res.Latency = latency(final.lat.Sub(start.lat))
	if r.dlq != nil {
		res.DeadLetterLatency = latency(final.dlLat.Sub(start.dlLat))
	}
	cpuSpan := activeEnd.t.Sub(start.t)
	if cpuSpan > 0 {
		res.ClientCPUPercent = round1(100 * float64(activeEnd.selfCPU-start.selfCPU) / float64(cpuSpan))
	}
	if o.PID > 0 {
		b := &BrokerStats{PID: o.PID, RSSStartMiB: mib(rssStart), RSSPeakMiB: mib(rssPeak), RSSEndMiB: mib(rssEnd)}
		if cpuSpan > 0 && activeEnd.brokerCPUOK {
			b.CPUPercent = round1(100 * float64(activeEnd.brokerCPU-start.brokerCPU) / float64(cpuSpan))
		}
		res.Broker = b
	}
	res.PublishRate, res.ConfirmRate = round1(res.PublishRate), round1(res.ConfirmRate)
	res.ConsumeRate, res.DeadLetterRate = round1(res.ConsumeRate), round1(res.DeadLetterRate)
	res.WindowS, res.ElapsedS = round3(res.WindowS), round3(res.ElapsedS)
	res.Scenario = r.scenario()
	if interrupted {
		r.fail("interrupted")
	}
	r.errMu.Lock()
	res.Errors = append([]string(nil), r.errs...)
	r.errMu.Unlock()
	if len(res.Errors) > 0 {
		res.Complete = false
	}
	return res, nil
}

// closeAll closes connections in parallel (each may wait for its
// close-ok).
func closeAll(cs []*perfclient.Conn) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Close()
		}()
	}
	wg.Wait()
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (r *runner) scenario() Scenario {
	o := r.o
	s := Scenario{Publishers: o.Publishers, Consumers: o.Consumers, Size: o.Size, Persistent: o.Persistent,
		Confirm: o.Confirm, AutoAck: o.AutoAck, MultiAckEvery: o.MultiAckEvery, Prefetch: o.Prefetch, Rate: o.Rate,
		Exchange: r.topo.exchange, RoutingKey: r.topo.key, Queues: r.topo.queues, DurableQueue: o.DurableQueue,
		Fanout: o.Fanout, Nack: o.Nack, DLXQueue: o.DLXQueue, Expiration: o.Expiration,
		DurationS: o.Duration.Seconds(), Count: o.Count, WarmupS: o.Warmup.Seconds()}
	if o.Exchange != "" && o.Fanout == 0 {
		s.ExchangeType = o.ExchangeType
	} else if o.Fanout > 0 {
		s.ExchangeType = "fanout"
	}
	if len(o.QueueArgs) > 0 {
		s.QueueArgs = o.QueueArgs
	}
	if s.Queues == nil {
		s.Queues = []string{}
	}
	return s
}

func latency(h HistSnap) *Latency {
	l := &Latency{Count: h.N}
	if h.N == 0 {
		return l
	}
	us := func(ns float64) float64 { return round1(ns / 1e3) }
	l.Min, l.Mean, l.Max = us(h.Min()), us(h.Mean()), us(h.Max())
	l.P50, l.P75, l.P95 = us(h.Quantile(0.50)), us(h.Quantile(0.75)), us(h.Quantile(0.95))
	l.P99, l.P999 = us(h.Quantile(0.99)), us(h.Quantile(0.999))
	return l
}

func mib(b int64) float64 { return round1(float64(b) / (1 << 20)) }

func round1(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return math.Round(f*10) / 10
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

func fmtDur(ns float64) string {
	switch {
	case math.IsNaN(ns):
		return "-"
	case ns < 1e6:
		return fmt.Sprintf("%.0fµs", ns/1e3)
	case ns < 1e9:
		return fmt.Sprintf("%.2fms", ns/1e6)
	default:
		return fmt.Sprintf("%.2fs", ns/1e9)
	}
}

func (r *runner) progress(cur, last snap, warmup, running bool) {
	o := r.o
	dt := cur.t.Sub(last.t).Seconds()
	if dt <= 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%6.1fs", cur.t.Sub(r.t0).Seconds())
	fmt.Fprintf(&b, "  pub %8.0f/s", float64(cur.published-last.published)/dt)
	if o.Confirm > 0 {
		fmt.Fprintf(&b, "  conf %8.0f/s", float64(cur.confirmed-last.confirmed)/dt)
	}
	fmt.Fprintf(&b, "  cons %8.0f/s", float64(cur.consumed-last.consumed)/dt)
	if r.dlq != nil {
		fmt.Fprintf(&b, "  dl %8.0f/s", float64(cur.dead-last.dead)/dt)
	}
	lat := cur.lat.Sub(last.lat)
	if lat.N > 0 {
		fmt.Fprintf(&b, "  lat p50 %s p99 %s", fmtDur(lat.Quantile(0.5)), fmtDur(lat.Quantile(0.99)))
	}
	if o.PID > 0 {
		if v, err := procRSS(o.PID); err == nil {
			fmt.Fprintf(&b, "  broker %.1fMiB", float64(v)/(1<<20))
		}
		if cur.brokerCPUOK && last.brokerCPUOK {
			fmt.Fprintf(&b, " cpu %.0f%%", 100*float64(cur.brokerCPU-last.brokerCPU)/float64(cur.t.Sub(last.t)))
		}
	}
	fmt.Fprintf(&b, "  client cpu %.0f%%", 100*float64(cur.selfCPU-last.selfCPU)/float64(cur.t.Sub(last.t)))
	switch {
	case warmup:
		b.WriteString("  (warm-up)")
	case !running:
		b.WriteString("  (draining)")
	}
	fmt.Fprintln(r.stderr, b.String())
}

// printText prints the results for people.
func printText(w io.Writer, res *Result) {
	fmt.Fprintf(w, "broker       %s %s at %s\n", res.ServerProduct, res.ServerVersion, res.URI)
	fmt.Fprintf(w, "window       %.2fs of %.2fs\n", res.WindowS, res.ElapsedS)
	fmt.Fprintf(w, "published    %d (%.0f msg/s)\n", res.Published, res.PublishRate)
	if res.Scenario.Confirm > 0 {
		fmt.Fprintf(w, "confirmed    %d (%.0f msg/s), nacked %d\n", res.Confirmed, res.ConfirmRate, res.Nacked)
	}
	fmt.Fprintf(w, "consumed     %d (%.0f msg/s)\n", res.Consumed, res.ConsumeRate)
	if res.Scenario.DLXQueue != "" {
		fmt.Fprintf(w, "dead-letters %d (%.0f msg/s)\n", res.DeadLettered, res.DeadLetterRate)
	}
	pl := func(name string, l *Latency) {
		if l == nil || l.Count == 0 {
			return
		}
		fmt.Fprintf(w, "%-12s p50 %s  p99 %s  p99.9 %s  max %s  (min %s, mean %s, %d msgs)\n", name,
			fmtDur(l.P50*1e3), fmtDur(l.P99*1e3), fmtDur(l.P999*1e3), fmtDur(l.Max*1e3),
			fmtDur(l.Min*1e3), fmtDur(l.Mean*1e3), l.Count)
	}
	pl("latency", res.Latency)
	pl("dl latency", res.DeadLetterLatency)
	if b := res.Broker; b != nil {
		fmt.Fprintf(w, "broker pid   %d: RSS start %.1f MiB, peak %.1f MiB, end %.1f MiB; CPU %.0f%%\n",
			b.PID, b.RSSStartMiB, b.RSSPeakMiB, b.RSSEndMiB, b.CPUPercent)
	}
	fmt.Fprintf(w, "client CPU   %.0f%%\n", res.ClientCPUPercent)
	if res.BlockedEvents > 0 {
		fmt.Fprintf(w, "blocked      %d connection.blocked\n", res.BlockedEvents)
	}
	if !res.Complete {
		fmt.Fprintf(w, "incomplete   not everything expected arrived before the drain ended (see --drain)\n")
	}
	for _, e := range res.Errors {
		fmt.Fprintf(w, "error        %s\n", e)
	}
}
