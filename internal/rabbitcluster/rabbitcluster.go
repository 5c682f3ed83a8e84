// Package rabbitcluster starts a RabbitMQ cluster of N nodes on this
// machine, for the bench and for tests that compare Warren's cluster with
// RabbitMQ's (issue 14). Every node has its own name (rabbit-b1@localhost,
// rabbit-b2@localhost, ...), AMQP, distribution, management and
// Prometheus ports, and its own mnesia and log directories under one
// temporary directory; the nodes share an Erlang cookie (a file in that
// directory, which is the nodes' and rabbitmqctl's HOME). Nodes 2..N join
// node 1 with rabbitmqctl stop_app, reset, join_cluster, start_app.
//
// It never touches the system RabbitMQ (rabbit@<host> on 5672, 15672,
// 15692, 25672): every port is picked free at start, and
// /etc/rabbitmq/rabbitmq-env.conf, rabbitmq.conf, advanced.config and
// enabled_plugins are replaced by files in the temporary directory.
//
// Processes: each node runs rabbitmq-server in the foreground as a child
// of this process, in its own process group, with SIGTERM as its
// parent-death signal (the script stops the VM on SIGTERM), so that nodes
// do not outlive a killed test. Close kills every node (kill -9 of the
// Erlang VM, then of whatever is left in the node's process group) and
// removes the directory. Erlang's epmd, shared with the system RabbitMQ,
// is left alone.
//
//	c, err := rabbitcluster.Start(rabbitcluster.Options{Nodes: 3})
//	defer c.Close()
//	c.Node(0).AMQPURL()   // amqp://guest:guest@127.0.0.1:PORT/
//	c.Kill(1); c.StartNode(1) // kill -9 node 2's VM, start it again
package rabbitcluster

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/warrenmq/warren/internal/freeport"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultScriptsDir is where Debian's rabbitmq-server package puts the
// rabbitmq-server and rabbitmqctl scripts.
const DefaultScriptsDir = "/usr/lib/rabbitmq/bin"

// Options configure a cluster. The zero value is a 3-node cluster with
// the management and Prometheus plugins.
type Options struct {
	Nodes      int      // default 3
	NamePrefix string   // node i (from 1) is <NamePrefix><i>@localhost; default "rabbit-b"
	ScriptsDir string   // default $RABBITMQ_SCRIPTS_DIR, else DefaultScriptsDir
	Plugins    []string // default rabbitmq_management, rabbitmq_prometheus
	// Config is appended to every node's rabbitmq.conf (sysctl format).
	Config string
	// Dir holds every node's files; default a new temporary directory,
	// removed by Close (a given Dir is left in place).
	Dir string
	// StartTimeout bounds the start of the cluster, and of a node by
	// StartNode (default 3 minutes: a loaded 2-core machine is slow).
	StartTimeout time.Duration
	// Log, if set, receives progress lines.
	Log io.Writer
}

// Available reports whether RabbitMQ's scripts are installed, with an
// error saying what is missing.
func Available(scriptsDir string) error {
	dir := scriptsDirOf(scriptsDir)
	for _, s := range []string{"rabbitmq-server", "rabbitmqctl"} {
		if _, err := os.Stat(filepath.Join(dir, s)); err != nil {
			return fmt.Errorf("rabbitmq-server not installed: %v (apt-get install rabbitmq-server, or set RABBITMQ_SCRIPTS_DIR)", err)
		}
	}
	return nil
}

func scriptsDirOf(d string) string {
	if d != "" {
		return d
	}
	if d := os.Getenv("RABBITMQ_SCRIPTS_DIR"); d != "" {
		return d
	}
	return DefaultScriptsDir
}

// Cluster is a running RabbitMQ cluster.
type Cluster struct {
	o       Options
	dir     string
	ownDir  bool
	scripts string
	nodes   []*Node
	closed  bool
	mu      sync.Mutex
}

// Node is one node of the cluster.
type Node struct {
	c    *Cluster
	idx  int
	Name string // rabbit-bN@localhost
	Dir  string // the node's directory (mnesia, log, config)
	// Ports on 127.0.0.1.
	AMQPPort, DistPort, MgmtPort, PromPort int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	beam int           // the Erlang VM's PID, 0 when not running
}

// AMQPURL is the node's AMQP URI (guest/guest, vhost /).
func (n *Node) AMQPURL() string {
	return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.AMQPPort)
}

// MgmtURL is the node's management API base URL (no trailing slash).
func (n *Node) MgmtURL() string { return fmt.Sprintf("http://127.0.0.1:%d", n.MgmtPort) }

// PromURL is the node's Prometheus endpoint.
func (n *Node) PromURL() string { return fmt.Sprintf("http://127.0.0.1:%d/metrics", n.PromPort) }

// PID is the PID of the node's Erlang VM (beam.smp), 0 when it is not
// running.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.beam
}

// Running reports whether the node's process is alive.
func (n *Node) Running() bool {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

func (c *Cluster) logf(format string, args ...any) {
	if c.o.Log != nil {
		fmt.Fprintf(c.o.Log, "rabbitcluster: "+format+"\n", args...)
	}
}

// Start starts an Options.Nodes-node cluster and returns once every node
// runs and node 1's management API lists every node as running. On error
// everything started is cleaned up.
func Start(o Options) (*Cluster, error) {
	if o.Nodes <= 0 {
		o.Nodes = 3
	}
	if o.NamePrefix == "" {
		o.NamePrefix = "rabbit-b"
	}
	if o.Plugins == nil {
		o.Plugins = []string{"rabbitmq_management", "rabbitmq_prometheus"}
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 3 * time.Minute
	}
	c := &Cluster{o: o, scripts: scriptsDirOf(o.ScriptsDir), dir: o.Dir}
	if err := Available(c.scripts); err != nil {
		return nil, err
	}
	if c.dir == "" {
		d, err := os.MkdirTemp("", "rabbitcluster-")
		if err != nil {
			return nil, err
		}
		c.dir, c.ownDir = d, true
	}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	if err := c.writeShared(); err != nil {
		return nil, err
	}
	ports, err := freePorts(4 * o.Nodes)
	if err != nil {
		return nil, err
	}
	for i := 0; i < o.Nodes; i++ {
		n := &Node{c: c, idx: i, Name: fmt.Sprintf("%s%d@localhost", o.NamePrefix, i+1),
			Dir:      filepath.Join(c.dir, fmt.Sprintf("node%d", i+1)),
			AMQPPort: ports[4*i], DistPort: ports[4*i+1], MgmtPort: ports[4*i+2], PromPort: ports[4*i+3]}
		if err := n.writeConfig(); err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}
	deadline := time.Now().Add(o.StartTimeout)
	// Boot every node at once (the slow part), then join them one by one.
	for _, n := range c.nodes {
		if err := n.spawn(); err != nil {
			return nil, err
		}
	}
	for _, n := range c.nodes {
		if err := n.waitBooted(deadline); err != nil {
			return nil, err
		}
	}
	first := c.nodes[0].Name
	for _, n := range c.nodes[1:] {
		for _, args := range [][]string{{"stop_app"}, {"reset"}, {"join_cluster", first}, {"start_app"}} {
			if out, err := c.Ctl(n.idx, args...); err != nil {
				return nil, fmt.Errorf("rabbitmqctl -n %s %s: %v\n%s", n.Name, strings.Join(args, " "), err, out)
			}
		}
		c.logf("%s joined %s", n.Name, first)
	}
	if err := c.WaitClustered(time.Until(deadline)); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// Dir is the directory holding the nodes' files.
func (c *Cluster) Dir() string { return c.dir }

// Nodes is the cluster's nodes, node 1 first.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// Node is node i (from 0).
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// NodeByName finds a node by its Erlang name, nil if none.
func (c *Cluster) NodeByName(name string) *Node {
	for _, n := range c.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// PIDs is the running nodes' Erlang VM PIDs.
func (c *Cluster) PIDs() []int {
	var pids []int
	for _, n := range c.nodes {
		if p := n.PID(); p != 0 {
			pids = append(pids, p)
		}
	}
	return pids
}

func (c *Cluster) writeShared() error {
	cookie := make([]byte, 16)
	if _, err := rand.Read(cookie); err != nil {
		return err
	}
	// The cookie file must be readable by its owner only, or Erlang
	// refuses it.
	if err := os.WriteFile(filepath.Join(c.dir, ".erlang.cookie"), []byte(strings.ToUpper(hex.EncodeToString(cookie))), 0o400); err != nil {
		return err
	}
	plugins := "[" + strings.Join(c.o.Plugins, ",") + "].\n"
	if err := os.WriteFile(filepath.Join(c.dir, "enabled_plugins"), []byte(plugins), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.dir, "rabbitmq-env.conf"), nil, 0o644)
}

func (n *Node) writeConfig() error {
	for _, d := range []string{"mnesia", "log"} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return err
		}
	}
	conf := fmt.Sprintf(`listeners.tcp.default = 127.0.0.1:%d
management.tcp.ip = 127.0.0.1
management.tcp.port = %d
prometheus.tcp.ip = 127.0.0.1
prometheus.tcp.port = %d
log.file.level = warning
`, n.AMQPPort, n.MgmtPort, n.PromPort) + n.c.o.Config
	return os.WriteFile(filepath.Join(n.Dir, "rabbitmq.conf"), []byte(conf), 0o644)
}

// env is the environment of the node's scripts (rabbitmq-server and
// rabbitmqctl): the caller's without any RABBITMQ_ variable or systemd's
// NOTIFY_SOCKET, plus the node's.
func (n *Node) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "RABBITMQ_") || strings.HasPrefix(kv, "NOTIFY_SOCKET=") || strings.HasPrefix(kv, "HOME=") ||
			strings.HasPrefix(kv, "ERL_") {
			continue
		}
		env = append(env, kv)
	}
	c := n.c
	return append(env,
		"HOME="+c.dir,
		"RABBITMQ_NODENAME="+n.Name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(n.AMQPPort),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(n.DistPort),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(c.dir, "rabbitmq-env.conf"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(n.Dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(n.Dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(c.dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(n.Dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(n.Dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(n.Dir, "node.pid"),
	)
}

// spawn starts the node's rabbitmq-server (foreground) and finds its VM.
func (n *Node) spawn() error {
	n.mu.Lock()
	if n.done != nil {
		select {
		case <-n.done:
		default:
			n.mu.Unlock()
			return fmt.Errorf("%s is running", n.Name)
		}
	}
	out, err := os.OpenFile(filepath.Join(n.Dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		n.mu.Unlock()
		return err
	}
	cmd := exec.Command(filepath.Join(n.c.scripts, "rabbitmq-server"))
	cmd.Env = n.env()
	cmd.Dir = n.Dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		n.mu.Unlock()
		out.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		out.Close()
		close(done)
	}()
	n.cmd, n.done, n.beam = cmd, done, 0
	n.mu.Unlock()
	// The script runs the VM as its child (erl execs erlexec, which execs
	// beam.smp).
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if pid := childNamed(cmd.Process.Pid, "beam.smp"); pid != 0 {
			n.mu.Lock()
			n.beam = pid
			n.mu.Unlock()
			break
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited at start:\n%s", n.Name, n.tail())
		default:
		}
		if time.Now().After(end) {
			return fmt.Errorf("%s: no beam.smp child of rabbitmq-server (pid %d) after 30s", n.Name, cmd.Process.Pid)
		}
	}
	n.c.logf("%s started (beam.smp %d, amqp %d, mgmt %d)", n.Name, n.PID(), n.AMQPPort, n.MgmtPort)
	return nil
}

// tail is the end of the node's stdout and log, for errors.
func (n *Node) tail() string {
	var b strings.Builder
	for _, f := range []string{filepath.Join(n.Dir, "stdout.log"), filepath.Join(n.Dir, "log", n.Name+".log")} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 30 {
			lines = lines[len(lines)-30:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", f, strings.Join(lines, "\n"))
	}
	return b.String()
}

// waitBooted waits until the node accepts AMQP connections (the listener
// opens at the end of the boot).
func (n *Node) waitBooted(deadline time.Time) error {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	addr := fmt.Sprintf("127.0.0.1:%d", n.AMQPPort)
	for {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited while booting:\n%s", n.Name, n.tail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not accept AMQP on %s in time:\n%s", n.Name, addr, n.tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Ctl runs rabbitmqctl against node i and returns its combined output.
func (c *Cluster) Ctl(i int, args ...string) (string, error) {
	return c.script(i, "rabbitmqctl", args...)
}

// Queues runs rabbitmq-queues against node i (add_member, delete_member,
// grow, shrink, rebalance...).
func (c *Cluster) Queues(i int, args ...string) (string, error) {
	return c.script(i, "rabbitmq-queues", args...)
}

func (c *Cluster) script(i int, name string, args ...string) (string, error) {
	n := c.nodes[i]
	cmd := exec.Command(filepath.Join(c.scripts, name), append([]string{"-n", n.Name}, args...)...)
	cmd.Env = n.env()
	cmd.Dir = c.dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// WaitClustered waits until some running node's management API lists
// every node of the cluster as running.
func (c *Cluster) WaitClustered(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		for _, n := range c.nodes {
			if !n.Running() {
				continue
			}
			running, err := c.RunningNodes(n.idx)
			if err != nil {
				last = err
				continue
			}
			if len(running) == len(c.nodes) {
				return nil
			}
			last = fmt.Errorf("running nodes %v, want %d", running, len(c.nodes))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not formed: %v", last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// RunningNodes is the names of the nodes node i's /api/nodes lists as
// running.
func (c *Cluster) RunningNodes(i int) ([]string, error) {
	var nodes []struct {
		Name    string `json:"name"`
		Running bool   `json:"running"`
	}
	if err := c.GetJSON(i, "/api/nodes", &nodes); err != nil {
		return nil, err
	}
	var running []string
	for _, n := range nodes {
		if n.Running {
			running = append(running, n.Name)
		}
	}
	return running, nil
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// GetJSON GETs path (e.g. /api/queues/%2F/q) from node i's management API
// as guest and decodes the JSON answer into v.
func (c *Cluster) GetJSON(i int, path string, v any) error {
	_, err := c.Do(i, "GET", path, nil, v)
	return err
}

// Do sends a management API request to node i (body marshalled as JSON
// when not nil) and decodes a JSON answer into v (when not nil). Statuses
// other than 2xx are errors.
func (c *Cluster) Do(i int, method, path string, body, v any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.nodes[i].MgmtURL()+path, rd)
	if err != nil {
		return 0, err
	}
	req.SetBasicAuth("guest", "guest")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	if v != nil && len(data) > 0 {
		return resp.StatusCode, json.Unmarshal(data, v)
	}
	return resp.StatusCode, nil
}

// Kill kills node i's Erlang VM with SIGKILL (kill -9) and waits until
// its processes are gone.
func (c *Cluster) Kill(i int) error {
	n := c.nodes[i]
	n.mu.Lock()
	cmd, done, beam := n.cmd, n.done, n.beam
	n.mu.Unlock()
	if done == nil {
		return fmt.Errorf("%s was never started", n.Name)
	}
	if beam != 0 {
		syscall.Kill(beam, syscall.SIGKILL)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
	n.reap()
	c.logf("%s killed", n.Name)
	return nil
}

// Stop stops node i gracefully (SIGTERM to its VM, as rabbitmqctl stop)
// and waits (at most a minute, then kills it).
func (c *Cluster) Stop(i int) error {
	n := c.nodes[i]
	n.mu.Lock()
	done, beam := n.done, n.beam
	n.mu.Unlock()
	if done == nil {
		return fmt.Errorf("%s was never started", n.Name)
	}
	if beam != 0 {
		syscall.Kill(beam, syscall.SIGTERM)
	}
	select {
	case <-done:
		n.reap()
		c.logf("%s stopped", n.Name)
		return nil
	case <-time.After(time.Minute):
		c.Kill(i)
		return fmt.Errorf("%s did not stop within a minute: killed", n.Name)
	}
}

// StartNode starts node i again (after Kill or Stop) and waits until it
// runs and the cluster lists every node as running.
func (c *Cluster) StartNode(i int) error {
	n := c.nodes[i]
	if err := n.spawn(); err != nil {
		return err
	}
	deadline := time.Now().Add(c.o.StartTimeout)
	if err := n.waitBooted(deadline); err != nil {
		return err
	}
	return c.WaitClustered(time.Until(deadline))
}

// reap kills whatever is left of the node's process group (the VM's
// helper programs), never epmd (shared by every node on the machine).
func (n *Node) reap() {
	n.mu.Lock()
	cmd := n.cmd
	n.beam = 0
	n.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	pgid := cmd.Process.Pid
	for _, p := range procs() {
		if p.pgrp == pgid && p.comm != "epmd" {
			syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
}

// Close kills every node (the data is thrown away, so there is no point
// in a graceful stop) and removes the directory if Start created it.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	for i, n := range c.nodes {
		if n.Running() {
			c.Kill(i)
		} else {
			n.reap()
		}
	}
	if c.ownDir {
		return os.RemoveAll(c.dir)
	}
	return nil
}

// freePorts picks n ports below the kernel's ephemeral range (freeport):
// a port picked from a bind to port 0 could be handed to another bind to
// port 0 or an outgoing connection before the node took it (CI saw
// dist_port_already_used).
func freePorts(n int) ([]int, error) { return freeport.Ports(n) }

type procInfo struct {
	pid, ppid, pgrp int
	comm, state     string
}

// procs lists the machine's processes from /proc.
func procs() []procInfo {
	ents, _ := os.ReadDir("/proc")
	var ps []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, err := readStat(pid)
		if err != nil {
			continue
		}
		ps = append(ps, p)
	}
	return ps
}

func readStat(pid int) (procInfo, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procInfo{}, err
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procInfo{}, errors.New("bad stat")
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 3 {
		return procInfo{}, errors.New("bad stat")
	}
	ppid, _ := strconv.Atoi(f[1])
	pgrp, _ := strconv.Atoi(f[2])
	return procInfo{pid: pid, ppid: ppid, pgrp: pgrp, comm: s[open+1 : end], state: f[0]}, nil
}

// childNamed is the PID of parent's child whose command is comm, 0 if
// none.
func childNamed(parent int, comm string) int {
	for _, p := range procs() {
		if p.ppid == parent && p.comm == comm {
			return p.pid
		}
	}
	return 0
}
