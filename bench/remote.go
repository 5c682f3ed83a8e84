package main

// The cost of reaching a queue through another node (issue 13): a
// two-node Warren cluster (two processes on this machine), the queue homed
// on node 2, and the same warren-perf load run against node 2 (direct)
// and against node 1 (every publish, delivery and ack crosses the
// inter-node link). RabbitMQ is not involved: the ratio is Warren against
// itself.
//
//	go run ./bench -remote -rounds 3 -out docs/performance/issue13

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// remoteScenarios are the timed scenarios measured direct and remote.
var remoteScenarios = map[string]bool{
	"transient-manual": true, "persistent-confirms": true, "latency-transient": true, "latency-persistent": true,
}

const remoteQueue = "bench-remote"

type clusterProcs struct {
	procs []*warrenProc
	amqp  []string // AMQP URIs, by node
	mgmt  []string // management API base URLs, by node
	names []string // node names, by node
}

func (c *clusterProcs) stop() {
	for _, p := range c.procs {
		p.stop()
	}
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startCluster starts n clustered warren processes on fresh data
// directories and waits until every one accepts AMQP.
func (r *runner) startCluster(n int) (*clusterProcs, error) {
	c := &clusterProcs{}
	var caddrs, peers []string
	for i := 0; i < n; i++ {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		caddrs = append(caddrs, a)
		c.names = append(c.names, fmt.Sprintf("warren@bench%d", i+1))
		peers = append(peers, c.names[i]+"="+a)
	}
	for i := 0; i < n; i++ {
		dir, err := os.MkdirTemp("", "warren-bench-data-")
		if err != nil {
			c.stop()
			return nil, err
		}
		addr, err := freeAddr()
		if err == nil {
			var haddr string
			haddr, err = freeAddr()
			c.mgmt = append(c.mgmt, "http://"+haddr)
		}
		if err != nil {
			c.stop()
			return nil, err
		}
		cmd := exec.Command(filepath.Join(r.bin, "warren"), "--amqp-addr", addr, "--http-addr", strings.TrimPrefix(c.mgmt[i], "http://"),
			"--data-dir", dir, "--log-level", "warn", "--node-name", c.names[i], "--cluster-listen", caddrs[i],
			"--cluster-peers", strings.Join(peers, ","), "--cluster-secret", "bench-secret")
		if r.o.pprofPort > 0 {
			cmd.Args = append(cmd.Args, "--pprof-addr", fmt.Sprintf("127.0.0.1:%d", r.o.pprofPort+i))
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			c.stop()
			return nil, err
		}
		p := &warrenProc{cmd: cmd, dir: dir, done: make(chan error, 1)}
		go func() { p.done <- cmd.Wait() }()
		c.procs = append(c.procs, p)
		c.amqp = append(c.amqp, "amqp://guest:guest@"+addr+"/")
		if err := waitPort(addr, 30*time.Second, p.done); err != nil {
			c.stop()
			return nil, fmt.Errorf("warren node %d did not start: %v\n%s", i+1, err, out.String())
		}
	}
	return c, nil
}

// declareOn declares the benchmark's queue through uri (so it is homed on
// that node: client-local), retrying while the cluster elects its leader.
func declareOn(uri string, durable bool) error {
	var last error
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		conn, err := amqp.Dial(uri)
		if err != nil {
			last = err
			continue
		}
		ch, err := conn.Channel()
		if err == nil {
			_, err = ch.QueueDeclare(remoteQueue, durable, false, false, false, nil)
		}
		conn.Close()
		if err == nil {
			return nil
		}
		last = err
	}
	return last
}

// runRemote measures every remote scenario direct and through the other
// node, alternating the order by round.
func runRemote(o options, log io.Writer) error {
	bin, err := buildBinaries()
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	r := &runner{o: o, log: log, bin: bin}
	fmt.Fprintf(log, "bench -remote: %d rounds, %v per run (%v warm-up), %d cores, %s\n", o.rounds, o.duration, o.warmup, runtime.NumCPU(), time.Now().UTC().Format(time.RFC3339))
	var scs []scenario
	for _, s := range scenarios() {
		if remoteScenarios[s.name] && (o.only == nil || o.only[s.name]) {
			scs = append(scs, s)
			r.results = append(r.results, &scenarioResult{Name: s.name, What: s.what, Unit: s.unit, Higher: s.higher, Target: 0})
		}
	}
	for round := 1; round <= o.rounds; round++ {
		for i, s := range scs {
			order := []string{"direct", "remote"}
			if round%2 == 0 {
				order = []string{"remote", "direct"}
			}
			for _, via := range order {
				v, extra, err := r.measureRemote(s, via)
				if err != nil {
					return fmt.Errorf("round %d, %s %s: %w", round, s.name, via, err)
				}
				fmt.Fprintf(log, "round %d  %-22s %-8s %12.1f %s %s\n", round, s.name, via, v, s.unit, extra)
				// "warren" holds the remote samples, "rabbitmq" the direct
				// ones, so that summarize's ratio is remote / direct.
				b := "warren"
				if via == "direct" {
					b = "rabbitmq"
				}
				r.results[i].Samples = append(r.results[i].Samples, sample{Broker: b, Round: round, Value: v, Extra: via + " " + extra})
			}
		}
	}
	r.summarize()
	md := r.remoteMarkdown()
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
		Note      string            `json:"note"`
		Scenarios []*scenarioResult `json:"scenarios"`
	}{time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), o.rounds, o.duration.String(),
		`"warren" = through another node (remote), "rabbitmq" = direct to the queue's home node; ratio = remote / direct`, r.results}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "remote.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(o.out, "remote.md"), []byte(md), 0o644)
}

func (r *runner) measureRemote(s scenario, via string) (float64, string, error) {
	c, err := r.startCluster(2)
	if err != nil {
		return 0, "", err
	}
	defer c.stop()
	durable := slicesContains(s.args, "--durable-queue")
	if err := declareOn(c.amqp[1], durable); err != nil {
		return 0, "", fmt.Errorf("declaring the queue on node 2: %w", err)
	}
	uri, pid := c.amqp[1], c.procs[1].cmd.Process.Pid
	if via == "remote" {
		uri = c.amqp[0]
	}
	args := append([]string{"--uri", uri, "--pid", strconv.Itoa(pid), "--json", "--progress", "0",
		"--queue", remoteQueue, "--predeclared", "--cleanup=false"}, s.args...)
	args = append(args, "--duration", r.o.duration.String(), "--warmup", r.o.warmup.String())
	cmd := exec.Command(filepath.Join(r.bin, "warren-perf"), args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
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
	return s.metric(&res), fmt.Sprintf("(published %.0f/s)", res.PublishRate), nil
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func (r *runner) remoteMarkdown() string {
	var b strings.Builder
	b.WriteString("| scenario | unit | direct (home node) | through another node | remote / direct |\n|---|---|---|---|---|\n")
	for _, res := range r.results {
		fmt.Fprintf(&b, "| %s | %s | %.0f (%.0f-%.0f) | %.0f (%.0f-%.0f) | %.2f |\n", res.What, res.Unit,
			res.RabbitMQ.Median, res.RabbitMQ.Min, res.RabbitMQ.Max, res.Warren.Median, res.Warren.Min, res.Warren.Max, res.Ratio)
	}
	return b.String()
}
