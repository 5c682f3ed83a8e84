package main

// Quorum queues on a 3-node Warren cluster against a 3-node RabbitMQ
// cluster on the same machine (issue 14, must-show 3). The Warren cluster
// is three warren processes (like -remote); the RabbitMQ cluster is
// started by internal/rabbitcluster (rabbit-b1..3@localhost, own ports and
// directories, join_cluster). Both get the same load, alternating A B /
// B A by round:
//
//	qq-publish   persistent 16 B publishes with confirms (1000 in flight)
//	             to one quorum queue, warren-perf publishers on every node
//	             at once: confirmed msgs/s, summed
//	qq-latency   confirm latency (publish to basic.ack) at a paced rate,
//	             one publisher per node: p99 in µs
//	qq-fsync     fsync+fdatasync calls per second of the 3 nodes during
//	             the qq-publish load: strace -f -c on every node's PID
//	             for the measurement window (the same for both brokers;
//	             strace slows the brokers, so the confirms/s under strace
//	             and fsyncs per 1000 confirms are printed too)
//	qq-rss       RSS summed over the 3 nodes with 1,000,000 messages
//	             queued in one quorum queue (fresh clusters)
//	qq-idle-cpu  CPU seconds over 30 s, summed over the 3 nodes, with
//	             1,000 idle quorum queues (fresh clusters)
//	st-publish   qq-publish into a replicated stream (a member per node)
//	st-idle-cpu  qq-idle-cpu with 200 idle replicated streams
//	qq-failover  kill -9 of the queue leader's node while a publisher on
//	             another node publishes with confirms at a paced rate:
//	             seconds to the first confirm of a message published
//	             after the kill (RabbitMQ's leader from the management
//	             API's leader field; Warren's from leader, else node)
//
//	go run ./bench -quorum -rounds 3 -out docs/performance/issue14
//	go run ./bench -quorum -only qq-publish,qq-failover -rounds 1 -duration 5s -warmup 1s
//	go run ./bench -quorum -only qq-rss -qq-count 100000 -rounds 1

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/rabbitcluster"
)

// quorumOptions are the -quorum mode's own flags.
type quorumOptions struct {
	nodes        int
	publishers   int           // warren-perf publishers per node (qq-publish, qq-fsync)
	count        int           // messages queued for qq-rss
	queues       int           // idle quorum queues for qq-idle-cpu
	streams      int           // idle streams for st-idle-cpu
	rate         float64       // total paced rate (qq-latency; qq-failover uses a third)
	idleWindow   time.Duration // qq-idle-cpu's measurement window
	idleSettle   time.Duration // pause between declaring the queues and measuring
	failTimeout  time.Duration // longest wait for the confirm after the kill
	freshRabbit  bool          // a new RabbitMQ cluster for every run (else only where needed)
	rabbitScript string
}

func quorumScenarios(q quorumOptions) []scenario {
	return []scenario{
		{name: "qq-publish", what: "quorum queue, persistent 16 B, confirms (1000 in flight), publishers on every node: confirmed msgs/s", unit: "msgs/s", higher: true, target: 6},
		{name: "qq-latency", what: fmt.Sprintf("quorum queue, p99 confirm latency at a paced %.0f msg/s (publishers on every node)", q.rate), unit: "µs"},
		{name: "qq-fsync", what: fmt.Sprintf("fsyncs/s of the %d nodes during the qq-publish load (strace)", q.nodes), unit: "fsyncs/s"},
		{name: "qq-rss", what: fmt.Sprintf("RSS of the %d nodes with %d messages queued in a quorum queue", q.nodes, q.count), unit: "MiB", kind: "fresh"},
		{name: "qq-idle-cpu", what: fmt.Sprintf("CPU seconds of the %d nodes over %v with %d idle quorum queues", q.nodes, q.idleWindow, q.queues), unit: "s", kind: "fresh"},
		{name: "qq-failover", what: "kill -9 of the leader's node to the next confirm", unit: "s", kind: "dirty"},
		{name: "st-publish", what: "replicated stream (a member per node), 16 B, confirms (1000 in flight), publishers on every node: confirmed msgs/s", unit: "msgs/s", higher: true},
		{name: "st-idle-cpu", what: fmt.Sprintf("CPU seconds of the %d nodes over %v with %d idle replicated streams", q.nodes, q.idleWindow, q.streams), unit: "s", kind: "fresh"},
	}
}

const qqQueue = "bench-qq"

// qqCluster is a running 3-node cluster of either broker.
type qqCluster struct {
	broker string
	amqp   []string
	names  []string
	pids   func() []int
	// leader is the index of the node leading queue (Warren before
	// replication: the queue's home), and what the API said.
	leader func(queue string) (int, string, error)
	kill   func(i int) error
	done   func() // after the run
}

type quorumRunner struct {
	*runner
	q      quorumOptions
	rabbit *rabbitcluster.Cluster
}

func runQuorum(o options, q quorumOptions, log io.Writer) error {
	if !o.skipRabbit {
		if err := rabbitcluster.Available(q.rabbitScript); err != nil {
			return fmt.Errorf("%w (or pass -skip-rabbitmq)", err)
		}
	}
	bin, err := buildBinaries()
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	r := &quorumRunner{runner: &runner{o: o, log: log, bin: bin}, q: q}
	defer func() {
		if r.rabbit != nil {
			r.rabbit.Close()
		}
	}()
	fmt.Fprintf(log, "bench -quorum: %d rounds, %v per timed run (%v warm-up), %d-node clusters, %d cores, %s\n",
		o.rounds, o.duration, o.warmup, q.nodes, runtime.NumCPU(), time.Now().UTC().Format(time.RFC3339))
	var scs []scenario
	for _, s := range quorumScenarios(q) {
		if o.only == nil || o.only[s.name] {
			scs = append(scs, s)
			r.results = append(r.results, &scenarioResult{Name: s.name, What: s.what, Unit: s.unit, Higher: s.higher, Target: s.target})
		}
	}
	if len(scs) == 0 {
		return errors.New("no scenario selected (qq-publish, qq-latency, qq-fsync, qq-rss, qq-idle-cpu, qq-failover, st-publish, st-idle-cpu)")
	}
	for round := 1; round <= o.rounds; round++ {
		for i, s := range scs {
			order := []string{"warren", "rabbitmq"}
			if round%2 == 0 {
				order = []string{"rabbitmq", "warren"}
			}
			for _, broker := range order {
				if broker == "rabbitmq" && o.skipRabbit {
					continue
				}
				v, extra, err := r.measureQuorum(s, broker)
				if err != nil {
					return fmt.Errorf("round %d, %s on %s: %w", round, s.name, broker, err)
				}
				fmt.Fprintf(log, "round %d  %-12s %-8s %12.1f %s %s\n", round, s.name, broker, v, s.unit, extra)
				r.results[i].Samples = append(r.results[i].Samples, sample{Broker: broker, Round: round, Value: v, Extra: extra})
			}
		}
	}
	r.summarize()
	md := r.quorumMarkdown()
	fmt.Fprint(log, "\n"+md)
	if o.out == "" {
		return nil
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	j, err := json.MarshalIndent(struct {
		Date      string            `json:"date"`
		Cores     int               `json:"cores"`
		Rounds    int               `json:"rounds"`
		Duration  string            `json:"duration"`
		Nodes     int               `json:"nodes"`
		Scenarios []*scenarioResult `json:"scenarios"`
	}{time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), o.rounds, o.duration.String(), q.nodes, r.results}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "quorum.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(o.out, "quorum.md"), []byte(md), 0o644)
}

func (r *quorumRunner) quorumMarkdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| scenario | unit | Warren %d nodes median (min-max) | RabbitMQ %d nodes median (min-max) | ratio W/R | target |\n|---|---|---|---|---|---|\n", r.q.nodes, r.q.nodes)
	for _, res := range r.results {
		ratio, target := "-", "-"
		if res.Ratio != 0 && !math.IsInf(res.Ratio, 0) {
			ratio = fmt.Sprintf("%.3g", res.Ratio)
		}
		if res.Target != 0 {
			cmp := "<="
			if res.Higher {
				cmp = ">="
			}
			met := "not met"
			if res.Met {
				met = "met"
			}
			target = fmt.Sprintf("%s %gx (%s)", cmp, res.Target, met)
		}
		fmt.Fprintf(&b, "| %s | %s | %s (%s-%s) | %s (%s-%s) | %s | %s |\n", res.What, res.Unit,
			fmtVal(res.Warren.Median, res.Unit), fmtVal(res.Warren.Min, res.Unit), fmtVal(res.Warren.Max, res.Unit),
			fmtVal(res.RabbitMQ.Median, res.Unit), fmtVal(res.RabbitMQ.Min, res.Unit), fmtVal(res.RabbitMQ.Max, res.Unit),
			ratio, target)
	}
	return b.String()
}

// cluster returns a cluster ready for one run of s.
func (r *quorumRunner) cluster(s scenario, broker string) (*qqCluster, error) {
	if broker == "warren" {
		return r.warrenCluster()
	}
	// Fresh runs (RSS, idle CPU) get a new cluster and leave it with
	// their queues; dirty ones (a node killed) leave it incomplete: both
	// close it after.
	fresh := s.kind == "fresh" || r.q.freshRabbit
	return r.rabbitCluster(fresh, fresh || s.kind == "dirty")
}

func (r *quorumRunner) warrenCluster() (*qqCluster, error) {
	c, err := r.startCluster(r.q.nodes)
	if err != nil {
		return nil, err
	}
	qc := &qqCluster{broker: "warren", amqp: c.amqp, names: c.names, done: c.stop}
	qc.pids = func() []int {
		var pids []int
		for _, p := range c.procs {
			select {
			case err := <-p.done:
				p.done <- err // keep it for stop
			default:
				pids = append(pids, p.cmd.Process.Pid)
			}
		}
		return pids
	}
	qc.kill = func(i int) error {
		p := c.procs[i]
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			return err
		}
		err := <-p.done
		p.done <- err // stop reads it again
		return nil
	}
	qc.leader = func(queue string) (int, string, error) {
		var lastErr error
		for i, m := range c.mgmt {
			if qc.alive(i) {
				idx, desc, err := leaderFromAPI(m, queue, c.names)
				if err == nil {
					return idx, desc, nil
				}
				lastErr = err
			}
		}
		return 0, "", lastErr
	}
	// The cluster elects its metadata leader after the ports open: wait
	// until a definition can be made.
	if err := waitDeclarable(c.amqp[0]); err != nil {
		c.stop()
		return nil, err
	}
	return qc, nil
}

// alive reports whether node i accepts AMQP connections.
func (qc *qqCluster) alive(i int) bool {
	u, err := url.Parse(qc.amqp[i])
	if err != nil {
		return false
	}
	return waitPort(u.Host, 0, nil) == nil
}

// rabbitCluster returns the shared RabbitMQ cluster (started on first
// use), or a new one when fresh; closeAfter closes it after the run.
func (r *quorumRunner) rabbitCluster(fresh, closeAfter bool) (*qqCluster, error) {
	if r.rabbit != nil && fresh {
		r.rabbit.Close()
		r.rabbit = nil
	}
	if r.rabbit == nil {
		start := time.Now()
		c, err := rabbitcluster.Start(rabbitcluster.Options{Nodes: r.q.nodes, ScriptsDir: r.q.rabbitScript})
		if err != nil {
			return nil, err
		}
		r.rabbit = c
		fmt.Fprintf(r.log, "  (RabbitMQ %d-node cluster started in %.0fs)\n", r.q.nodes, time.Since(start).Seconds())
	}
	c := r.rabbit
	qc := &qqCluster{broker: "rabbitmq", pids: c.PIDs, kill: c.Kill}
	for _, n := range c.Nodes() {
		qc.amqp = append(qc.amqp, n.AMQPURL())
		qc.names = append(qc.names, n.Name)
	}
	qc.leader = func(queue string) (int, string, error) {
		var lastErr error
		for _, n := range c.Nodes() {
			if n.Running() {
				idx, desc, err := leaderFromAPI(n.MgmtURL(), queue, qc.names)
				if err == nil {
					return idx, desc, nil
				}
				lastErr = err
			}
		}
		return 0, "", lastErr
	}
	qc.done = func() {
		if closeAfter {
			c.Close()
			r.rabbit = nil
			return
		}
		deleteQueue(c.Node(0).AMQPURL(), qqQueue)
	}
	return qc, nil
}

// leaderFromAPI reads a queue's leader from a management API: the
// leader field (RabbitMQ; Warren once replication lands), else node (the
// home of a Warren quorum queue before replication). It returns the
// leader's index in names and a description of what the API said.
func leaderFromAPI(base, queue string, names []string) (int, string, error) {
	var q struct {
		Leader  string   `json:"leader"`
		Node    string   `json:"node"`
		Members []string `json:"members"`
	}
	req, err := http.NewRequest("GET", base+"/api/queues/%2F/"+url.PathEscape(queue), nil)
	if err != nil {
		return 0, "", err
	}
	req.SetBasicAuth("guest", "guest")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return 0, "", fmt.Errorf("GET %s: %s %s", queue, resp.Status, bytes.TrimSpace(body))
	}
	if err := json.Unmarshal(body, &q); err != nil {
		return 0, "", err
	}
	name, desc := q.Leader, fmt.Sprintf("leader %s, %d members", q.Leader, len(q.Members))
	if name == "" {
		name, desc = q.Node, fmt.Sprintf("no leader given: home %s", q.Node)
	}
	for i, n := range names {
		if n == name {
			return i, desc, nil
		}
	}
	return 0, "", fmt.Errorf("queue %s: leader %q is not a node of the cluster (%s)", queue, name, desc)
}

// waitDeclarable waits until a queue can be declared through uri.
func waitDeclarable(uri string) error {
	var last error
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		conn, err := amqp.Dial(uri)
		if err != nil {
			last = err
			continue
		}
		ch, err := conn.Channel()
		if err == nil {
			_, err = ch.QueueDeclare("bench-probe", false, true, false, false, nil)
		}
		conn.Close()
		if err == nil {
			return nil
		}
		last = err
	}
	return fmt.Errorf("cluster not ready: %v", last)
}

// declareQuorum declares quorum queues through uri.
func declareQuorum(uri string, names ...string) error {
	conn, err := amqp.Dial(uri)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	for _, n := range names {
		if _, err := ch.QueueDeclare(n, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
			return fmt.Errorf("declaring quorum queue %s: %w", n, err)
		}
	}
	return nil
}

// declareStream declares streams through uri (on every node: RabbitMQ's
// default x-initial-cluster-size), retrying while a Warren cluster's
// nodes have not yet told each other that they replicate streams.
func declareStream(uri string, names ...string) error {
	var err error
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		var conn *amqp.Connection
		if conn, err = amqp.Dial(uri); err != nil {
			continue
		}
		var ch *amqp.Channel
		if ch, err = conn.Channel(); err == nil {
			for _, n := range names {
				if _, err = ch.QueueDeclare(n, true, false, false, false, amqp.Table{"x-queue-type": "stream"}); err != nil {
					break
				}
			}
		}
		conn.Close()
		if err == nil {
			return nil
		}
	}
	return fmt.Errorf("declaring streams %v: %w", names, err)
}

// deleteQueue deletes a queue through uri, ignoring errors.
func deleteQueue(uri, name string) {
	conn, err := amqp.Dial(uri)
	if err != nil {
		return
	}
	defer conn.Close()
	if ch, err := conn.Channel(); err == nil {
		ch.QueueDelete(name, false, false, false)
	}
}

func sumRSS(pids []int) float64 {
	var sum float64
	for _, p := range pids {
		if v, err := rssMiB(p); err == nil {
			sum += v
		}
	}
	return sum
}

func sumTicks(pids []int) int64 {
	var sum int64
	for _, p := range pids {
		if t := cpuTicks(p); t > 0 {
			sum += t
		}
	}
	return sum
}

// settleAll waits (at most a minute) until the nodes together use less
// than 15% of a core.
func settleAll(pids []int) {
	for end := time.Now().Add(time.Minute); time.Now().Before(end); {
		a := sumTicks(pids)
		time.Sleep(time.Second)
		if b := sumTicks(pids); b-a < 15 {
			return
		}
	}
}

func (r *quorumRunner) measureQuorum(s scenario, broker string) (float64, string, error) {
	qc, err := r.cluster(s, broker)
	if err != nil {
		return 0, "", err
	}
	defer qc.done()
	settleAll(qc.pids())
	switch s.name {
	case "qq-publish", "qq-fsync":
		return r.publish(qc, s.name == "qq-fsync", declareQuorum)
	case "st-publish":
		return r.publish(qc, false, declareStream)
	case "qq-latency":
		return r.latency(qc)
	case "qq-rss":
		return r.rss(qc)
	case "qq-idle-cpu":
		return r.idleCPU(qc, r.q.queues, declareQuorum)
	case "st-idle-cpu":
		return r.idleCPU(qc, r.q.streams, declareStream)
	case "qq-failover":
		return r.failover(qc)
	}
	return 0, "", fmt.Errorf("unknown scenario %s", s.name)
}

// perf runs warren-perf against every node at once with args and returns
// the results, by node.
func (r *quorumRunner) perf(qc *qqCluster, args []string) ([]perfResult, error) {
	res := make([]perfResult, len(qc.amqp))
	errs := make([]error, len(qc.amqp))
	var wg sync.WaitGroup
	for i, uri := range qc.amqp {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := append([]string{"--uri", uri, "--json", "--progress", "0", "--queue", qqQueue, "--predeclared", "--cleanup=false"}, args...)
			cmd := exec.Command(filepath.Join(r.bin, "warren-perf"), a...)
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			if err := cmd.Run(); err != nil {
				errs[i] = fmt.Errorf("warren-perf %s: %v\n%s", strings.Join(a, " "), err, lastLines(errOut.String(), 20))
				return
			}
			if err := json.Unmarshal(out.Bytes(), &res[i]); err != nil {
				errs[i] = fmt.Errorf("warren-perf output: %v\n%s", err, out.String())
				return
			}
			if len(res[i].Errors) > 0 {
				errs[i] = fmt.Errorf("warren-perf on node %d reported errors: %v", i+1, res[i].Errors)
			}
		}()
	}
	wg.Wait()
	return res, errors.Join(errs...)
}

// queueDesc says what the API tells about the bench queue (leader,
// members), for the extra column.
func queueDesc(qc *qqCluster) string {
	_, desc, err := qc.leader(qqQueue)
	if err != nil {
		return "leader unknown: " + err.Error()
	}
	return desc
}

// publish is qq-publish (confirmed msgs/s summed over the per-node
// publishers) and, with fsync, qq-fsync (strace over the window).
func (r *quorumRunner) publish(qc *qqCluster, fsync bool, declare func(uri string, names ...string) error) (float64, string, error) {
	if err := declare(qc.amqp[0], qqQueue); err != nil {
		return 0, "", err
	}
	pids := qc.pids()
	args := []string{"--publishers", strconv.Itoa(r.q.publishers), "--consumers", "0", "--size", "16", "--persistent", "--confirm", "1000",
		"--duration", r.o.duration.String(), "--warmup", r.o.warmup.String()}
	type traced struct {
		calls int
		err   error
	}
	st := make(chan traced, 1)
	t0 := time.Now()
	if fsync {
		go func() {
			time.Sleep(r.o.warmup)
			n, err := straceSyncs(pids, r.o.duration-r.o.warmup)
			st <- traced{n, err}
		}()
	}
	c0 := sumTicks(pids)
	res, err := r.perf(qc, args)
	cpu := float64(sumTicks(pids)-c0) / 100 / time.Since(t0).Seconds() * 100
	if err != nil {
		return 0, "", err
	}
	desc := queueDesc(qc)
	var rate float64
	var per []string
	for _, x := range res {
		rate += x.ConfirmRate
		per = append(per, fmt.Sprintf("%.0f", x.ConfirmRate))
	}
	extra := fmt.Sprintf("(per node %s/s; nodes' CPU %.0f%%; %s)", strings.Join(per, "+"), cpu, desc)
	if !fsync {
		return rate, extra, nil
	}
	t := <-st
	if t.err != nil {
		return 0, "", t.err
	}
	window := (r.o.duration - r.o.warmup).Seconds()
	perSec := float64(t.calls) / window
	per1000 := math.Inf(1)
	if rate > 0 {
		per1000 = perSec / rate * 1000
	}
	return perSec, fmt.Sprintf("(%d fsyncs in %.0fs; %.0f confirms/s under strace, %.2f fsyncs per 1000 confirms; %s)", t.calls, window, rate, per1000, desc), nil
}

var straceRow = regexp.MustCompile(`(?m)^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(fsync|fdatasync)\s*$`)

// straceSyncs counts the fsync and fdatasync calls of every thread of
// pids over window: strace -f -c, stopped with SIGINT.
func straceSyncs(pids []int, window time.Duration) (int, error) {
	args := []string{"-f", "-c", "-e", "trace=fsync,fdatasync"}
	for _, p := range pids {
		args = append(args, "-p", strconv.Itoa(p))
	}
	cmd := exec.Command("strace", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("strace: %w (apt-get install strace)", err)
	}
	time.Sleep(window)
	cmd.Process.Signal(os.Interrupt)
	cmd.Wait()
	n := parseStraceSyncs(out.String())
	if n == 0 && !strings.Contains(out.String(), "attached") {
		return 0, fmt.Errorf("strace attached nothing:\n%s", lastLines(out.String(), 10))
	}
	return n, nil
}

// parseStraceSyncs sums the calls of the fsync and fdatasync rows of
// strace -c's summary.
func parseStraceSyncs(out string) int {
	n := 0
	for _, m := range straceRow.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}

// rss is qq-rss: q.count persistent messages published with confirms
// (split over per-node publishers), then the nodes' RSS summed.
func (r *quorumRunner) rss(qc *qqCluster) (float64, string, error) {
	if err := declareQuorum(qc.amqp[0], qqQueue); err != nil {
		return 0, "", err
	}
	pids := qc.pids()
	before := sumRSS(pids)
	per := (r.q.count + len(qc.amqp) - 1) / len(qc.amqp)
	t0 := time.Now()
	res, err := r.perf(qc, []string{"--publishers", "1", "--consumers", "0", "--size", "16", "--persistent", "--confirm", "1000",
		"--count", strconv.Itoa(per), "--duration", "30m", "--drain", "2s"})
	if err != nil {
		return 0, "", err
	}
	took := time.Since(t0)
	var confirmed uint64
	for _, x := range res {
		confirmed += x.Confirmed
	}
	settleAll(pids)
	after := sumRSS(pids)
	return after, fmt.Sprintf("(before %.0f MiB; %d confirmed in %.0fs; %s)", before, confirmed, took.Seconds(), queueDesc(qc)), nil
}

// idleCPU is qq-idle-cpu and st-idle-cpu: n queues declared through
// every node in turn, a pause, then the nodes' CPU over the window.
func (r *quorumRunner) idleCPU(qc *qqCluster, n int, declare func(uri string, names ...string) error) (float64, string, error) {
	t0 := time.Now()
	errs := make([]error, len(qc.amqp))
	var wg sync.WaitGroup
	for i, uri := range qc.amqp {
		var names []string
		for k := i; k < n; k += len(qc.amqp) {
			names = append(names, fmt.Sprintf("bench-idle-%d", k))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = declare(uri, names...)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, "", err
	}
	declared := time.Since(t0)
	time.Sleep(r.q.idleSettle)
	pids := qc.pids()
	c0 := sumTicks(pids)
	time.Sleep(r.q.idleWindow)
	secs := float64(sumTicks(pids)-c0) / 100
	return secs, fmt.Sprintf("(declared in %.0fs; RSS %.0f MiB; %.1f%% of a core)", declared.Seconds(), sumRSS(pids), secs/r.q.idleWindow.Seconds()*100), nil
}

// confirmPub is a paced publisher with confirms (amqp091-go) recording
// each confirm's latency from the message's scheduled send time. It
// publishes with mandatory set and the delivery tag in the body, so that
// an ack of a message that reached no queue (returned first) is told
// apart from a real one.
type confirmPub struct {
	conn *amqp.Connection
	ch   *amqp.Channel

	mu       sync.Mutex
	sent     map[uint64]int64 // delivery tag -> scheduled send time (ns)
	lat      []int64          // ns, of acks for messages scheduled after measureFrom
	from     int64            // measureFrom (ns)
	returned map[uint64]bool  // tags of returned (unroutable) messages
	watched  []ackAt          // acks of tags above watch, in arrival order
	acks     atomic.Uint64
	nacks    atomic.Uint64

	watch    atomic.Uint64 // acks of tags above this are kept in watched
	lastSent atomic.Uint64
}

type ackAt struct {
	tag uint64
	at  int64 // ns
}

func newConfirmPub(uri string) (*confirmPub, error) {
	conn, err := amqp.Dial(uri)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	p := &confirmPub{conn: conn, ch: ch, sent: map[uint64]int64{}, returned: map[uint64]bool{}}
	p.watch.Store(math.MaxUint64)
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1<<16))
	returns := ch.NotifyReturn(make(chan amqp.Return, 1<<14))
	go func() {
		for r := range returns {
			if len(r.Body) >= 8 {
				p.mu.Lock()
				p.returned[binary.BigEndian.Uint64(r.Body)] = true
				p.mu.Unlock()
			}
		}
	}()
	go func() {
		for c := range confirms {
			now := time.Now().UnixNano()
			p.mu.Lock()
			at, ok := p.sent[c.DeliveryTag]
			delete(p.sent, c.DeliveryTag)
			if ok && c.Ack && at >= p.from {
				p.lat = append(p.lat, now-at)
			}
			p.mu.Unlock()
			if !c.Ack {
				p.nacks.Add(1)
				continue
			}
			p.acks.Add(1)
			if c.DeliveryTag > p.watch.Load() {
				p.mu.Lock()
				p.watched = append(p.watched, ackAt{c.DeliveryTag, now})
				p.mu.Unlock()
			}
		}
	}()
	return p, nil
}

// firstRealAck is the time of the first ack of a watched tag that was not
// returned, 0 if none yet. An ack younger than grace is not decided yet:
// its message's basic.return (sent before the ack) may still be on its
// way through the other channel.
func (p *confirmPub) firstRealAck(grace time.Duration) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	limit := time.Now().Add(-grace).UnixNano()
	for _, a := range p.watched {
		if a.at > limit {
			return 0
		}
		if !p.returned[a.tag] {
			return a.at
		}
	}
	return 0
}

// returns is the number of messages returned as unroutable.
func (p *confirmPub) returns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.returned)
}

// run publishes persistent 16-byte messages to queue at rate until stop
// (or the context ends); latencies count from measureFrom.
func (p *confirmPub) run(ctx context.Context, queue string, rate float64, measureFrom, stop time.Time) error {
	p.mu.Lock()
	p.from = measureFrom.UnixNano()
	p.mu.Unlock()
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	body := make([]byte, 16)
	for k := 0; ; k++ {
		due := start.Add(time.Duration(k) * interval)
		if due.After(stop) || ctx.Err() != nil {
			return nil
		}
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		tag := p.ch.GetNextPublishSeqNo()
		p.mu.Lock()
		p.sent[tag] = due.UnixNano()
		p.mu.Unlock()
		binary.BigEndian.PutUint64(body, tag)
		if err := p.ch.PublishWithContext(ctx, "", queue, true, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body}); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		p.lastSent.Store(tag)
	}
}

// drain waits until every publish is settled (or timeout).
func (p *confirmPub) drain(timeout time.Duration) {
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if p.acks.Load()+p.nacks.Load() >= p.lastSent.Load() {
			return
		}
	}
}

func (p *confirmPub) close() { p.conn.Close() }

// latency is qq-latency: one paced publisher per node (rate/nodes each),
// p99 of publish-to-confirm.
func (r *quorumRunner) latency(qc *qqCluster) (float64, string, error) {
	if err := declareQuorum(qc.amqp[0], qqQueue); err != nil {
		return 0, "", err
	}
	var pubs []*confirmPub
	defer func() {
		for _, p := range pubs {
			p.close()
		}
	}()
	for _, uri := range qc.amqp {
		p, err := newConfirmPub(uri)
		if err != nil {
			return 0, "", err
		}
		pubs = append(pubs, p)
	}
	start := time.Now()
	from, stop := start.Add(r.o.warmup), start.Add(r.o.duration)
	errs := make([]error, len(pubs))
	var wg sync.WaitGroup
	for i, p := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.run(context.Background(), qqQueue, r.q.rate/float64(len(pubs)), from, stop)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, "", err
	}
	var lat []int64
	var nacks uint64
	var returned int
	for _, p := range pubs {
		p.drain(30 * time.Second)
		p.mu.Lock()
		lat = append(lat, p.lat...)
		p.mu.Unlock()
		nacks += p.nacks.Load()
		returned += p.returns()
	}
	if len(lat) == 0 {
		return 0, "", errors.New("no confirm measured")
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / 1e3 }
	if returned > 0 {
		return 0, "", fmt.Errorf("%d messages returned unroutable", returned)
	}
	return pct(0.99), fmt.Sprintf("(p50 %.0f µs, p99.9 %.0f µs, max %.0f µs; %d confirms measured, %d nacks; %s)",
		pct(0.5), pct(0.999), pct(1), len(lat), nacks, queueDesc(qc)), nil
}

// failover is qq-failover: a publisher on a node other than the leader's
// publishes with confirms at rate/nodes; once confirms flow, the leader's
// node is killed with SIGKILL; the result is the time from the kill to
// the first confirm of a message published after it.
func (r *quorumRunner) failover(qc *qqCluster) (float64, string, error) {
	if err := declareQuorum(qc.amqp[0], qqQueue); err != nil {
		return 0, "", err
	}
	// A replicated queue may need a moment to elect its first leader.
	var leader int
	var desc string
	err := errors.New("no answer")
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if leader, desc, err = qc.leader(qqQueue); err == nil && !strings.HasPrefix(desc, "no leader") {
			break
		}
	}
	if err != nil {
		return 0, "", err
	}
	via := (leader + 1) % len(qc.amqp)
	p, err := newConfirmPub(qc.amqp[via])
	if err != nil {
		return 0, "", err
	}
	defer p.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pubErr := make(chan error, 1)
	go func() {
		pubErr <- p.run(ctx, qqQueue, r.q.rate/float64(len(qc.amqp)), time.Now(), time.Now().Add(time.Hour))
	}()
	// Confirms flowing for a second.
	for end := time.Now().Add(30 * time.Second); p.acks.Load() < uint64(r.q.rate/float64(len(qc.amqp))); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			return 0, "", fmt.Errorf("no confirms before the kill (%d acks, %d nacks)", p.acks.Load(), p.nacks.Load())
		}
	}
	p.watch.Store(p.lastSent.Load())
	killAt := time.Now()
	if err := qc.kill(leader); err != nil {
		return 0, "", err
	}
	killed := time.Since(killAt)
	const grace = 200 * time.Millisecond
	var first int64
	for end := killAt.Add(r.q.failTimeout + grace); ; time.Sleep(5 * time.Millisecond) {
		if first = p.firstRealAck(grace); first != 0 {
			break
		}
		select {
		case err := <-pubErr:
			return r.q.failTimeout.Seconds(), fmt.Sprintf("(NO confirm: the publisher via node %d failed after the kill of node %d: %v; %s)",
				via+1, leader+1, err, desc), nil
		default:
		}
		if time.Now().After(end) {
			return r.q.failTimeout.Seconds(), fmt.Sprintf("(NO confirm within %v: %d nacks, %d returned; killed node %d, publishing via node %d; %s)",
				r.q.failTimeout, p.nacks.Load(), p.returns(), leader+1, via+1, desc), nil
		}
	}
	took := time.Duration(first - killAt.UnixNano())
	newDesc := "?"
	if _, d, err := qc.leader(qqQueue); err == nil {
		newDesc = d
	}
	return took.Seconds(), fmt.Sprintf("(killed node %d in %v, publishing via node %d, %d nacks, %d returned; before: %s; after: %s)",
		leader+1, killed.Round(time.Millisecond), via+1, p.nacks.Load(), p.returns(), desc, newDesc), nil
}
