// Command bench runs the same load scenarios against Warren and against a
// RabbitMQ on this machine, alternating A B A B over several rounds, and
// prints per scenario the median (min-max) of each broker and the ratio
// Warren/RabbitMQ against the target of issue 5. It writes the results as
// JSON, a Markdown table and an SVG chart of the ratios.
//
//	go run ./bench                       # RabbitMQ on 127.0.0.1:5672, 3 rounds
//	go run ./bench -rounds 5 -duration 15s -out docs/performance
//	go run ./bench -only transient-autoack,nack-dlq -rounds 1
//	go run ./bench -quorum -rounds 3   # quorum queues, 3-node clusters (quorum.go)
//
// Every run of a scenario on Warren starts a fresh warren process (built
// from ./cmd/warren) on a fresh data directory; RabbitMQ is the running
// server (Debian's rabbitmq-server; start it with `rabbitmq-server
// -detached`), found by its beam.smp process for RSS and CPU, and
// restarted (rabbitmqctl stop, rabbitmq-server -detached) to measure its
// start-up. The load is cmd/warren-perf (built too), the same binary and
// arguments for both brokers; the 1,000-connection scenario opens its
// connections with internal/perfclient.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/warrenmq/warren/internal/perfclient"
)

// scenario is one line of the table. The order matters for
// RabbitMQ: start-up and idle RSS restart it, so that the 1,000
// connections are measured on a fresh node, not on one still holding the
// memory of the 1,000,000-message scenario (growth would be hidden in
// memory it has freed but not returned).
type scenario struct {
	name   string
	what   string
	unit   string
	higher bool    // higher is better (throughput); else lower (latency, memory, time)
	target float64 // ratio Warren/RabbitMQ to reach: >= when higher, <= otherwise
	// perf runs warren-perf with these arguments (plus --uri, --pid,
	// --json, --duration, --warmup) and extracts the metric; nil for the
	// scenarios the runner measures itself (kind).
	args   []string
	metric func(r *perfResult) float64
	kind   string // "", "connections", "idle", "startup"
	fixed  bool   // runs by --count, not --duration
}

func scenarios() []scenario {
	consume := func(r *perfResult) float64 { return r.ConsumeRate }
	dead := func(r *perfResult) float64 { return r.DeadLetterRate }
	p99 := func(r *perfResult) float64 {
		if r.Latency == nil {
			return 0
		}
		return r.Latency.P99
	}
	rssGrowth := func(r *perfResult) float64 {
		if r.Broker == nil {
			return 0
		}
		return r.Broker.RSSPeakMiB - r.Broker.RSSStartMiB
	}
	return []scenario{
		{name: "transient-autoack", what: "transient, 16 B, 1 publisher, 1 consumer, auto-ack", unit: "msgs/s", higher: true, target: 5,
			args: []string{"--publishers", "1", "--consumers", "1", "--size", "16", "--auto-ack"}, metric: consume},
		{name: "transient-manual", what: "transient, manual ack, prefetch 1000", unit: "msgs/s", higher: true, target: 5,
			args: []string{"--publishers", "1", "--consumers", "1", "--size", "16", "--prefetch", "1000", "--multi-ack-every", "1"}, metric: consume},
		{name: "persistent-confirms", what: "persistent, confirms (1000 in flight), manual ack", unit: "msgs/s", higher: true, target: 4,
			args: []string{"--publishers", "1", "--consumers", "1", "--size", "16", "--persistent", "--durable-queue", "--confirm", "1000", "--prefetch", "1000", "--multi-ack-every", "1"}, metric: consume},
		{name: "fanout-4", what: "fanout to 4 queues (deliveries/s)", unit: "msgs/s", higher: true, target: 4,
			args: []string{"--publishers", "1", "--consumers", "4", "--fanout", "4", "--size", "16", "--auto-ack"}, metric: consume},
		{name: "nack-dlq", what: "nack(requeue=false) into a DLQ, dead-letters/s", unit: "msgs/s", higher: true, target: 8,
			args: []string{"--publishers", "1", "--consumers", "1", "--size", "16", "--nack", "--prefetch", "1000", "--dlx-queue", "bench-nack-dlq"}, metric: dead},
		{name: "ttl-dlq", what: "TTL expiry into a DLQ, dead-letters/s", unit: "msgs/s", higher: true, target: 5,
			args: []string{"--publishers", "1", "--consumers", "0", "--size", "16", "--queue-args", "x-message-ttl=0", "--dlx-queue", "bench-ttl-dlq"}, metric: dead},
		{name: "latency-transient", what: "p99 latency at a paced 10k msg/s, transient", unit: "µs", target: 0.5,
			args: []string{"--publishers", "1", "--consumers", "1", "--size", "16", "--rate", "10000", "--prefetch", "1000", "--multi-ack-every", "1"}, metric: p99},
		{name: "latency-persistent", what: "p99 latency at a paced 10k msg/s, persistent with confirms", unit: "µs", target: 0.5,
			args: []string{"--publishers", "1", "--consumers", "1", "--size", "16", "--rate", "10000", "--persistent", "--durable-queue", "--confirm", "1000", "--prefetch", "1000", "--multi-ack-every", "1"}, metric: p99},
		{name: "rss-1m-persistent", what: "RSS growth for 1,000,000 queued 16 B persistent messages", unit: "MiB", target: 0.05, fixed: true,
			args: []string{"--publishers", "1", "--consumers", "0", "--size", "16", "--persistent", "--durable-queue", "--confirm", "1000", "--count", "1000000"}, metric: rssGrowth},
		{name: "idle-rss", what: "idle RSS", unit: "MiB", target: 0.2, kind: "idle"},
		{name: "startup", what: "start-up until AMQP accepts", unit: "s", target: 0.02, kind: "startup"},
		{name: "rss-1000-connections", what: "RSS growth for 1,000 connections", unit: "MiB", target: 0.2, kind: "connections"},
	}
}

// perfResult is the part of warren-perf's JSON the runner reads.
type perfResult struct {
	PublishRate    float64 `json:"publish_rate"`
	ConfirmRate    float64 `json:"confirm_rate"`
	Confirmed      uint64  `json:"confirmed"`
	ConsumeRate    float64 `json:"consume_rate"`
	DeadLetterRate float64 `json:"dead_letter_rate"`
	Latency        *struct {
		P50  float64 `json:"p50"`
		P99  float64 `json:"p99"`
		P999 float64 `json:"p999"`
	} `json:"latency_us"`
	Broker *struct {
		RSSStartMiB float64 `json:"rss_start_mib"`
		RSSPeakMiB  float64 `json:"rss_peak_mib"`
		RSSEndMiB   float64 `json:"rss_end_mib"`
		CPUPercent  float64 `json:"cpu_percent"`
	} `json:"broker"`
	ClientCPUPercent float64  `json:"client_cpu_percent"`
	Errors           []string `json:"errors"`
}

type options struct {
	rounds     int
	duration   time.Duration
	warmup     time.Duration
	rabbitURI  string
	skipRabbit bool
	restart    bool
	only       map[string]bool
	out        string
	warrenAddr string
	verbose    bool
	remote     bool
	quorum     bool
	shovel     bool
	pprofPort  int // when set, cluster node i serves pprof on 127.0.0.1:pprofPort+i
}

type sample struct {
	Broker string  `json:"broker"`
	Round  int     `json:"round"`
	Value  float64 `json:"value"`
	Extra  string  `json:"extra,omitempty"`
}

type scenarioResult struct {
	Name     string   `json:"name"`
	What     string   `json:"what"`
	Unit     string   `json:"unit"`
	Higher   bool     `json:"higher_is_better"`
	Target   float64  `json:"target_ratio"`
	Samples  []sample `json:"samples"`
	Warren   stats    `json:"warren"`
	RabbitMQ stats    `json:"rabbitmq"`
	Ratio    float64  `json:"ratio"`
	Met      bool     `json:"met"`
}

type stats struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

func main() {
	var o options
	var only string
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; each round runs every scenario on both brokers")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "publishing time of each timed run")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "leading part of each timed run left out of the figures")
	flag.StringVar(&o.rabbitURI, "rabbitmq", "amqp://guest:guest@127.0.0.1:5672/", "the RabbitMQ to compare with")
	flag.BoolVar(&o.skipRabbit, "skip-rabbitmq", false, "run Warren only (no ratios)")
	flag.BoolVar(&o.restart, "restart-rabbitmq", true, "restart RabbitMQ (rabbitmqctl stop; rabbitmq-server -detached) to measure its start-up and idle RSS")
	flag.StringVar(&only, "only", "", "comma-separated scenario names (default: all)")
	flag.StringVar(&o.out, "out", "", "directory for results.json, results.md and ratios.svg (default: print only)")
	flag.StringVar(&o.warrenAddr, "warren-addr", "127.0.0.1:5690", "address for the Warren processes")
	flag.BoolVar(&o.verbose, "v", false, "print warren-perf's progress")
	flag.BoolVar(&o.remote, "remote", false, "measure a queue reached through another node of a 2-node Warren cluster against direct (issue 13); no RabbitMQ")
	flag.IntVar(&o.pprofPort, "warren-pprof", 0, "serve the cluster nodes' pprof on 127.0.0.1:PORT, PORT+1, ... (profiling a run; off by default)")
	flag.BoolVar(&o.quorum, "quorum", false, "quorum queues on a 3-node Warren cluster against a 3-node RabbitMQ cluster the bench starts (issue 14): scenarios qq-publish, qq-latency, qq-fsync, qq-rss, qq-idle-cpu, qq-failover, st-publish, st-idle-cpu")
	flag.BoolVar(&o.shovel, "shovel", false, "a shovel moving a queue between RabbitMQ and Warren, defined on each (issue 24): scenarios shovel-r2w, shovel-w2r")
	shovelCount := flag.Int("shovel-count", 200000, "-shovel: messages moved per run")
	streams := flag.Bool("streams", false, "streams over both protocols (issue 25): scenarios stream-publish, stream-consume, stream-publish-091, stream-consume-091")
	streamCount := flag.Int("stream-count", 2000000, "-streams: messages read per consume run")
	streamPerfCount := flag.Int("stream-perf-count", 20000000, "-streams: messages read per stream-consume-perf run (warren-perf stream reads tens of millions a second)")
	rabbitStream := flag.String("rabbit-stream", "127.0.0.1:5552", "-streams: RabbitMQ's stream protocol address")
	var q quorumOptions
	flag.IntVar(&q.nodes, "qq-nodes", 3, "-quorum: nodes per cluster")
	flag.IntVar(&q.publishers, "qq-publishers", 1, "-quorum: warren-perf publishers per node (qq-publish, qq-fsync)")
	flag.IntVar(&q.count, "qq-count", 1000000, "-quorum: messages queued for qq-rss")
	flag.IntVar(&q.queues, "qq-queues", 1000, "-quorum: idle quorum queues for qq-idle-cpu")
	flag.IntVar(&q.streams, "st-streams", 200, "-quorum: idle replicated streams for st-idle-cpu")
	flag.Float64Var(&q.rate, "qq-rate", 3000, "-quorum: total paced msg/s of qq-latency (a third of it for qq-failover)")
	flag.DurationVar(&q.idleWindow, "idle-window", 30*time.Second, "-quorum: the idle-cpu scenarios' measurement window")
	flag.DurationVar(&q.idleSettle, "idle-settle", 10*time.Second, "-quorum: pause between declaring the idle-cpu scenarios' queues and measuring")
	flag.DurationVar(&q.failTimeout, "failover-timeout", time.Minute, "-quorum: longest wait for a confirm after the kill (qq-failover)")
	flag.BoolVar(&q.freshRabbit, "fresh-rabbitmq", false, "-quorum: a new RabbitMQ cluster for every run (default: for qq-rss, the idle-cpu scenarios and after qq-failover only)")
	flag.StringVar(&q.rabbitScript, "rabbitmq-scripts", "", "-quorum: directory of rabbitmq-server and rabbitmqctl (default $RABBITMQ_SCRIPTS_DIR or /usr/lib/rabbitmq/bin)")
	flag.Parse()
	if only != "" {
		o.only = map[string]bool{}
		for _, s := range strings.Split(only, ",") {
			o.only[strings.TrimSpace(s)] = true
		}
	}
	runFn := run
	if o.remote {
		runFn = runRemote
	}
	if o.quorum {
		runFn = func(o options, log io.Writer) error { return runQuorum(o, q, log) }
	}
	if *streams {
		runFn = func(o options, log io.Writer) error {
			return runStreams(o, *streamCount, *streamPerfCount, *rabbitStream, log)
		}
	}
	if o.shovel {
		runFn = func(o options, log io.Writer) error { return runShovel(o, *shovelCount, log) }
	}
	if err := runFn(o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type runner struct {
	o       options
	log     io.Writer
	bin     string // directory of the built binaries
	results []*scenarioResult
}

func run(o options, log io.Writer) error {
	bin, err := buildBinaries()
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	r := &runner{o: o, log: log, bin: bin}
	if !o.skipRabbit {
		if _, err := rabbitPID(); err != nil {
			return fmt.Errorf("%w (start it with rabbitmq-server -detached, or pass -skip-rabbitmq)", err)
		}
	}
	fmt.Fprintf(log, "bench: %d rounds, %v per timed run (%v warm-up), %d cores, %s\n", o.rounds, o.duration, o.warmup, runtime.NumCPU(), time.Now().UTC().Format(time.RFC3339))
	var scs []scenario
	for _, s := range scenarios() {
		if o.only == nil || o.only[s.name] {
			scs = append(scs, s)
			r.results = append(r.results, &scenarioResult{Name: s.name, What: s.what, Unit: s.unit, Higher: s.higher, Target: s.target})
		}
	}
	for round := 1; round <= o.rounds; round++ {
		for i, s := range scs {
			// A B in odd rounds, B A in even ones.
			order := []string{"warren", "rabbitmq"}
			if round%2 == 0 {
				order = []string{"rabbitmq", "warren"}
			}
			for _, broker := range order {
				if broker == "rabbitmq" && o.skipRabbit {
					continue
				}
				v, extra, err := r.measure(s, broker)
				if err != nil {
					return fmt.Errorf("round %d, %s on %s: %w", round, s.name, broker, err)
				}
				fmt.Fprintf(log, "round %d  %-22s %-8s %12.1f %s %s\n", round, s.name, broker, v, s.unit, extra)
				r.results[i].Samples = append(r.results[i].Samples, sample{Broker: broker, Round: round, Value: v, Extra: extra})
			}
		}
	}
	r.summarize()
	r.printTable(log)
	if o.out != "" {
		return r.write(o.out)
	}
	return nil
}

// buildBinaries builds warren and warren-perf into a new temporary
// directory, which the caller removes.
func buildBinaries() (string, error) {
	bin, err := os.MkdirTemp("", "warren-bench-")
	if err != nil {
		return "", err
	}
	for _, p := range []string{"warren", "warren-perf"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, p), "./cmd/"+p).CombinedOutput(); err != nil {
			os.RemoveAll(bin)
			return "", fmt.Errorf("go build ./cmd/%s: %v\n%s", p, err, out)
		}
	}
	return bin, nil
}

// measure runs scenario s once on broker and returns its metric.
func (r *runner) measure(s scenario, broker string) (float64, string, error) {
	switch s.kind {
	case "startup", "idle":
		return r.startupAndIdle(s, broker)
	}
	uri, pid, stop, err := r.target(broker)
	if err != nil {
		return 0, "", err
	}
	defer stop()
	if s.kind == "connections" {
		return connectionsGrowth(uri, pid, 1000)
	}
	args := append([]string{"--uri", uri, "--pid", strconv.Itoa(pid), "--json", "--progress", "0"}, s.args...)
	if !s.fixed {
		args = append(args, "--duration", r.o.duration.String(), "--warmup", r.o.warmup.String())
	} else {
		args = append(args, "--drain", "2s")
	}
	if r.o.verbose {
		args[5] = "1s"
	}
	cmd := exec.Command(filepath.Join(r.bin, "warren-perf"), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errOut
	if r.o.verbose {
		cmd.Stderr = io.MultiWriter(&errOut, os.Stderr)
	}
	if err := cmd.Run(); err != nil {
		return 0, "", fmt.Errorf("warren-perf %s: %v\n%s", strings.Join(args, " "), err, lastLines(errOut.String(), 20))
	}
	var res perfResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return 0, "", fmt.Errorf("warren-perf output: %v\n%s", err, out.String())
	}
	if len(res.Errors) > 0 {
		return 0, "", fmt.Errorf("warren-perf reported errors: %v", res.Errors)
	}
	extra := fmt.Sprintf("(published %.0f/s", res.PublishRate)
	if res.Broker != nil {
		extra += fmt.Sprintf(", broker CPU %.0f%%, RSS %.0f-%.0f MiB", res.Broker.CPUPercent, res.Broker.RSSStartMiB, res.Broker.RSSPeakMiB)
	}
	extra += fmt.Sprintf(", tool CPU %.0f%%)", res.ClientCPUPercent)
	return s.metric(&res), extra, nil
}

// target returns the URI and PID of a broker ready for one run, and a
// function to call after it: a fresh Warren process, or the RabbitMQ.
func (r *runner) target(broker string) (uri string, pid int, stop func(), err error) {
	// Whichever broker runs, RabbitMQ must be idle first: it shares the
	// 2 cores, and after a large backlog it stays busy for a while.
	if !r.o.skipRabbit {
		if pid, err := rabbitPID(); err == nil {
			settle(pid)
		}
	}
	if broker == "rabbitmq" {
		pid, err := rabbitPID()
		return r.o.rabbitURI, pid, func() {}, err
	}
	p, err := r.startWarren()
	if err != nil {
		return "", 0, nil, err
	}
	return "amqp://guest:guest@" + r.o.warrenAddr + "/", p.cmd.Process.Pid, p.stop, nil
}

type warrenProc struct {
	cmd  *exec.Cmd
	dir  string
	done chan error
}

func (p *warrenProc) stop() {
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
	os.RemoveAll(p.dir)
}

// startWarren starts warren on a fresh data directory and waits until it
// accepts AMQP connections.
func (r *runner) startWarren() (*warrenProc, error) { return r.startWarrenWith() }

// startWarrenWith is startWarren with more flags.
func (r *runner) startWarrenWith(extra ...string) (*warrenProc, error) {
	dir, err := os.MkdirTemp("", "warren-bench-data-")
	if err != nil {
		return nil, err
	}
	args := append([]string{"--amqp-addr", r.o.warrenAddr, "--http-addr", "127.0.0.1:0", "--data-dir", dir, "--log-level", "warn",
		"--stream-addr", "off"}, extra...)
	cmd := exec.Command(filepath.Join(r.bin, "warren"), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &warrenProc{cmd: cmd, dir: dir, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	if err := waitPort(r.o.warrenAddr, 30*time.Second, p.done); err != nil {
		p.stop()
		return nil, fmt.Errorf("warren did not start: %v\n%s", err, out.String())
	}
	return p, nil
}

func waitPort(addr string, limit time.Duration, exited <-chan error) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// startupAndIdle measures the time from start until the AMQP port accepts,
// or the RSS after 3 s idle.
func (r *runner) startupAndIdle(s scenario, broker string) (float64, string, error) {
	if broker == "warren" {
		start := time.Now()
		p, err := r.startWarren()
		if err != nil {
			return 0, "", err
		}
		defer p.stop()
		took := time.Since(start).Seconds()
		if s.kind == "startup" {
			return took, "", nil
		}
		time.Sleep(3 * time.Second)
		rss, err := rssMiB(p.cmd.Process.Pid)
		return rss, "", err
	}
	if s.kind == "idle" && !r.o.restart {
		pid, err := rabbitPID()
		if err != nil {
			return 0, "", err
		}
		rss, err := rssMiB(pid)
		return rss, "(not restarted)", err
	}
	if !r.o.restart {
		return 0, "", errors.New("start-up needs -restart-rabbitmq")
	}
	if out, err := exec.Command("rabbitmqctl", "stop").CombinedOutput(); err != nil {
		return 0, "", fmt.Errorf("rabbitmqctl stop: %v\n%s", err, out)
	}
	host := strings.TrimPrefix(r.o.rabbitURI, "amqp://")
	if i := strings.LastIndex(host, "@"); i >= 0 {
		host = host[i+1:]
	}
	host = strings.TrimSuffix(host, "/")
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", host, 200*time.Millisecond); err != nil {
			break
		} else {
			c.Close()
		}
	}
	start := time.Now()
	// A file-descriptor limit high enough for the 1,000-connection
	// scenario (the default 1024 stops RabbitMQ at ~830 connections).
	cmd := exec.Command("su", "rabbitmq", "-s", "/bin/sh", "-c", `ulimit -n "$(ulimit -Hn)"; exec /usr/lib/rabbitmq/bin/rabbitmq-server -detached`)
	cmd.Dir = "/var/lib/rabbitmq" // as Debian's wrapper script starts it
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, "", fmt.Errorf("rabbitmq-server -detached: %v\n%s", err, out)
	}
	if err := waitPort(host, 60*time.Second, nil); err != nil {
		return 0, "", fmt.Errorf("RabbitMQ did not come back: %v", err)
	}
	took := time.Since(start).Seconds()
	if s.kind == "startup" {
		return took, "", nil
	}
	time.Sleep(3 * time.Second)
	pid, err := rabbitPID()
	if err != nil {
		return 0, "", err
	}
	rss, err := rssMiB(pid)
	return rss, "", err
}

// connectionsGrowth opens n connections (a channel each) and returns the
// broker's RSS growth in MiB.
func connectionsGrowth(uri string, pid, n int) (float64, string, error) {
	time.Sleep(3 * time.Second) // let the broker settle after the previous scenario
	before, err := rssMiB(pid)
	if err != nil {
		return 0, "", err
	}
	conns := make([]*perfclient.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := perfclient.Dial(uri, perfclient.Config{DialTimeout: time.Minute, ReadBufferSize: 16 << 10})
		if err != nil {
			return 0, "", fmt.Errorf("connection %d: %w", len(conns)+1, err)
		}
		conns = append(conns, c)
		if _, err := c.Channel(); err != nil {
			return 0, "", err
		}
	}
	time.Sleep(3 * time.Second)
	after, err := rssMiB(pid)
	if err != nil {
		return 0, "", err
	}
	return after - before, fmt.Sprintf("(RSS %.0f -> %.0f MiB)", before, after), nil
}

// settle waits (at most a minute) until the process uses less than 10% of
// a core, so that a run does not start while RabbitMQ still digests the
// backlog of the previous one (a large dead-letter backlog keeps it busy
// for tens of seconds after the load stops).
func settle(pid int) {
	for end := time.Now().Add(time.Minute); time.Now().Before(end); {
		a := cpuTicks(pid)
		time.Sleep(time.Second)
		if b := cpuTicks(pid); a >= 0 && b >= 0 && b-a < 10 { // 100 ticks/s: under 10%
			return
		}
	}
}

// cpuTicks is utime+stime of a process in clock ticks, -1 if unknown.
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return -1
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	k, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return u + k
}

// rabbitPID finds the RabbitMQ node's Erlang VM.
func rabbitPID() (int, error) {
	out, err := exec.Command("pgrep", "-o", "beam.smp").Output()
	if err != nil {
		return 0, errors.New("no RabbitMQ running (no beam.smp process)")
	}
	return strconv.Atoi(strings.TrimSpace(string(out)))
}

func rssMiB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, errors.New("no VmRSS")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (r *runner) summarize() {
	for _, res := range r.results {
		var w, b []float64
		for _, s := range res.Samples {
			if s.Broker == "warren" {
				w = append(w, s.Value)
			} else {
				b = append(b, s.Value)
			}
		}
		res.Warren, res.RabbitMQ = summary(w), summary(b)
		if res.RabbitMQ.N > 0 && res.RabbitMQ.Median != 0 {
			res.Ratio = res.Warren.Median / res.RabbitMQ.Median
			if res.Higher {
				res.Met = res.Ratio >= res.Target
			} else {
				res.Met = res.Ratio <= res.Target
			}
		}
	}
}

func summary(v []float64) stats {
	if len(v) == 0 {
		return stats{}
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stats{N: len(s), Median: med, Min: s[0], Max: s[len(s)-1]}
}

func fmtVal(v float64, unit string) string {
	switch {
	case unit == "msgs/s":
		return fmt.Sprintf("%.0f", v)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func (r *runner) markdown() string {
	var b strings.Builder
	b.WriteString("| scenario | unit | Warren median (min-max) | RabbitMQ median (min-max) | ratio W/R | target | met |\n|---|---|---|---|---|---|---|\n")
	for _, res := range r.results {
		cmp := "<="
		if res.Higher {
			cmp = ">="
		}
		met := "no"
		if res.Met {
			met = "yes"
		}
		ratio := "-"
		if res.Ratio != 0 {
			ratio = fmt.Sprintf("%.3g", res.Ratio)
		}
		fmt.Fprintf(&b, "| %s | %s | %s (%s-%s) | %s (%s-%s) | %s | %s %gx | %s |\n", res.What, res.Unit,
			fmtVal(res.Warren.Median, res.Unit), fmtVal(res.Warren.Min, res.Unit), fmtVal(res.Warren.Max, res.Unit),
			fmtVal(res.RabbitMQ.Median, res.Unit), fmtVal(res.RabbitMQ.Min, res.Unit), fmtVal(res.RabbitMQ.Max, res.Unit),
			ratio, cmp, res.Target, met)
	}
	return b.String()
}

func (r *runner) printTable(w io.Writer) {
	fmt.Fprintln(w)
	fmt.Fprint(w, r.markdown())
}

func (r *runner) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	j, err := json.MarshalIndent(struct {
		Date      string            `json:"date"`
		Cores     int               `json:"cores"`
		Rounds    int               `json:"rounds"`
		Duration  string            `json:"duration"`
		Scenarios []*scenarioResult `json:"scenarios"`
	}{time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), r.o.rounds, r.o.duration.String(), r.results}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(r.markdown()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "ratios.svg"), []byte(r.svg()), 0o644)
}
