package main

// warren queues add_member|delete_member|grow|shrink|rebalance|
// quorum_status (issue 14): rabbitmq-queues' quorum queue commands, over
// the management API of any node (RabbitMQ 4.x's endpoints, which Warren
// serves: POST /api/queues/quorum/{vhost}/{queue}/replicas/add, DELETE
// .../replicas/delete, POST /api/queues/quorum/replicas/on/{node}/grow,
// DELETE .../shrink, POST /api/rebalance/queues, GET
// /api/queues/quorum/{vhost}/{queue}/status). `warren queues` alone still
// lists the queues.

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/warrenmq/warren/mgmt/api"
)

var quorumSubcommands = []*cliCommand{
	{name: "add_member", args: "QUEUE NODE [--vhost V]", summary: "add a replica of quorum queue QUEUE on node NODE (as rabbitmq-queues add_member)", run: cmdQQAddMember},
	{name: "delete_member", args: "QUEUE NODE [--vhost V]", summary: "remove the replica of quorum queue QUEUE on node NODE (as rabbitmq-queues delete_member)", run: cmdQQDeleteMember},
	{name: "grow", args: "NODE all|even [--vhost-pattern P] [--queue-pattern P]",
		summary: "add a replica on NODE to every matching quorum queue (even: those with an even number of replicas)",
		flags:   patternFlags, run: cmdQQGrow},
	{name: "shrink", args: "NODE", summary: "remove the replicas on NODE of every quorum queue", run: cmdQQShrink},
	{name: "rebalance", args: "[quorum|all] [--vhost-pattern P] [--queue-pattern P]",
		summary: "even the quorum queue leaders out over the running nodes", flags: patternFlags, run: cmdQQRebalance},
	{name: "quorum_status", args: "QUEUE [--vhost V]", summary: "show the Raft state of each replica of quorum queue QUEUE", run: cmdQQStatus},
}

func patternFlags(fs *flag.FlagSet, c *cliCtx) {
	fs.StringVar(&c.vhostPattern, "vhost-pattern", ".*", "regular expression the vhost names must match")
	fs.StringVar(&c.queuePattern, "queue-pattern", ".*", "regular expression the queue names must match")
}

func qqAPIPath(vhost, queue string, rest ...string) string {
	return apiPath(append([]string{"queues", "quorum", vhost, queue}, rest...)...)
}

func cmdQQAddMember(c *cliCtx, args []string) error {
	if err := wantArgs(args, 2, 2, "queues add_member QUEUE NODE [--vhost V]"); err != nil {
		return err
	}
	queue, node := args[0], args[1]
	if !c.json {
		fmt.Fprintf(c.stdout, "Adding a replica for queue %s on node %s...\n", queue, node)
	}
	if _, err := c.api.do(http.MethodPost, qqAPIPath(c.oneVhost(), queue, "replicas", "add"), map[string]string{"node": node}); err != nil {
		return err
	}
	if c.json {
		return printValueJSON(c.stdout, map[string]any{"vhost": c.oneVhost(), "queue": queue, "node": node, "added": true})
	}
	return nil
}

func cmdQQDeleteMember(c *cliCtx, args []string) error {
	if err := wantArgs(args, 2, 2, "queues delete_member QUEUE NODE [--vhost V]"); err != nil {
		return err
	}
	queue, node := args[0], args[1]
	if !c.json {
		fmt.Fprintf(c.stdout, "Removing a replica of queue %s on node %s...\n", queue, node)
	}
	if _, err := c.api.do(http.MethodDelete, qqAPIPath(c.oneVhost(), queue, "replicas", "delete"), map[string]string{"node": node}); err != nil {
		return err
	}
	if c.json {
		return printValueJSON(c.stdout, map[string]any{"vhost": c.oneVhost(), "queue": queue, "node": node, "removed": true})
	}
	return nil
}

// qqQueue is a quorum queue of /api/queues: its names and group.
type qqQueue struct {
	VHost, Name     string
	Leader          string
	Members, Online []string
}

// quorumQueues lists the quorum queues of every vhost.
func (c *cliCtx) quorumQueues() ([]qqQueue, error) {
	var all []api.Queue
	if _, err := c.api.getJSON(apiPath("queues")+"?columns=vhost,name,type,leader,members,online", &all); err != nil {
		return nil, err
	}
	var out []qqQueue
	for _, q := range all {
		if q.Type == "quorum" && q.QueueQuorum != nil {
			g := qqQueue{VHost: q.VHost, Name: q.Name, Members: q.Members, Online: q.Online}
			if q.Leader != nil {
				g.Leader = *q.Leader
			}
			out = append(out, g)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].VHost != out[j].VHost {
			return out[i].VHost < out[j].VHost
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

func (c *cliCtx) printResults(results []api.QueueMemberResult) error {
	if c.json {
		if results == nil {
			results = []api.QueueMemberResult{}
		}
		return printValueJSON(c.stdout, results)
	}
	if len(results) == 0 {
		return nil
	}
	t := newTable(c.stdout, "vhost", "name", "size", "result")
	for _, r := range results {
		t.row(r.VHost, r.Name, fmt.Sprint(r.Size), r.Result)
	}
	return t.flush()
}

// cmdQQGrow is rabbitmq-queues grow. The API answers 204 without
// results: they are read from the queues' members before and after.
func cmdQQGrow(c *cliCtx, args []string) error {
	if err := wantArgs(args, 2, 2, "queues grow NODE all|even [--vhost-pattern P] [--queue-pattern P]"); err != nil {
		return err
	}
	node, strategy := args[0], args[1]
	if strategy != "all" && strategy != "even" {
		return fmt.Errorf("queues grow: strategy '%s' is not recognised.", strategy)
	}
	vre, err := regexp.Compile(c.vhostPattern)
	if err != nil {
		return fmt.Errorf("queues grow: --vhost-pattern: %v", err)
	}
	qre, err := regexp.Compile(c.queuePattern)
	if err != nil {
		return fmt.Errorf("queues grow: --queue-pattern: %v", err)
	}
	if !c.json {
		fmt.Fprintf(c.stdout, "Growing %s quorum queues on %s...\n", strategy, node)
	}
	before, err := c.quorumQueues()
	if err != nil {
		return err
	}
	body := map[string]string{"vhost_pattern": c.vhostPattern, "queue_pattern": c.queuePattern, "strategy": strategy}
	if _, err := c.api.do(http.MethodPost, apiPath("queues", "quorum", "replicas", "on", node, "grow"), body); err != nil {
		if isNotFound(err) {
			return fmt.Errorf("queues grow: node %s is not a running node of the cluster (%w)", node, err)
		}
		return err
	}
	// A change answers once the nodes that confirmed in time applied it
	// (broker.awaitAll), so the node asked may show it a moment later:
	// read until every queue shows the node, for at most growSettle.
	var results []api.QueueMemberResult
	for deadline := time.Now().Add(growSettle); ; time.Sleep(100 * time.Millisecond) {
		after, err := c.quorumQueues()
		if err != nil {
			return err
		}
		var added bool
		results, added = growResults(before, after, node, strategy, vre, qre)
		if added || time.Now().After(deadline) {
			break
		}
	}
	return c.printResults(results)
}

// growSettle bounds how long grow waits for its changes to show.
const growSettle = 5 * time.Second

// growResults are grow's rows: the queues of before it was to add node
// to, each ok when after shows node among its members; all reports
// whether every one is.
func growResults(before, after []qqQueue, node, strategy string, vre, qre *regexp.Regexp) (results []api.QueueMemberResult, all bool) {
	now := map[[2]string]qqQueue{}
	for _, q := range after {
		now[[2]string{q.VHost, q.Name}] = q
	}
	all = true
	for _, q := range before {
		if slices.Contains(q.Members, node) || strategy == "even" && len(q.Members)%2 != 0 ||
			!vre.MatchString(q.VHost) || !qre.MatchString(q.Name) {
			continue
		}
		r := api.QueueMemberResult{VHost: q.VHost, Name: q.Name, Size: len(q.Members), Result: "error: not added"}
		if a, ok := now[[2]string{q.VHost, q.Name}]; ok && slices.Contains(a.Members, node) {
			r.Size, r.Result = len(a.Members), "ok"
		} else {
			all = false
		}
		results = append(results, r)
	}
	return results, all
}

// cmdQQShrink is rabbitmq-queues shrink: Warren's 202 carries the results.
func cmdQQShrink(c *cliCtx, args []string) error {
	if err := wantArgs(args, 1, 1, "queues shrink NODE"); err != nil {
		return err
	}
	node := args[0]
	if !c.json {
		fmt.Fprintf(c.stdout, "Shrinking quorum queues on %s...\n", node)
	}
	raw, err := c.api.do(http.MethodDelete, apiPath("queues", "quorum", "replicas", "on", node, "shrink"), nil)
	if err != nil {
		return err
	}
	var results []api.QueueMemberResult
	if len(strings.TrimSpace(string(raw))) > 0 {
		if err := json.Unmarshal(raw, &results); err != nil {
			return fmt.Errorf("queues shrink: bad JSON reply: %w", err)
		}
	}
	return c.printResults(results)
}

// cmdQQRebalance is rabbitmq-queues rebalance: it prints the leaders per
// running node afterwards, as rabbitmq-queues does.
func cmdQQRebalance(c *cliCtx, args []string) error {
	if err := wantArgs(args, 0, 1, "queues rebalance [quorum|all] [--vhost-pattern P] [--queue-pattern P]"); err != nil {
		return err
	}
	what := "all queues"
	if len(args) == 1 {
		switch args[0] {
		case "all":
		case "quorum":
			what = "quorum queues"
		case "classic", "stream":
			// Only quorum queues have leaders to move in Warren.
			what = args[0] + " queues"
		default:
			return fmt.Errorf("queues rebalance: type '%s' is not recognised (quorum or all)", args[0])
		}
	}
	if !c.json {
		fmt.Fprintf(c.stdout, "Re-balancing leaders of %s...\n", what)
	}
	body := map[string]string{"vhost_pattern": c.vhostPattern, "queue_pattern": c.queuePattern}
	if _, err := c.api.do(http.MethodPost, apiPath("rebalance", "queues"), body); err != nil {
		return err
	}
	qs, err := c.quorumQueues()
	if err != nil {
		return err
	}
	var nodes []api.Node
	if _, err := c.api.getJSON(apiPath("nodes")+"?columns=name,running", &nodes); err != nil {
		return err
	}
	leaders := map[string]int{}
	for _, n := range nodes {
		if n.Running {
			leaders[n.Name] += 0
		}
	}
	for _, q := range qs {
		if q.Leader != "" {
			leaders[q.Leader]++
		}
	}
	if c.json {
		out := []map[string]any{}
		for _, n := range sortedKeys(leaders) {
			out = append(out, map[string]any{"node": n, "quorum_queue_leaders": leaders[n]})
		}
		return printValueJSON(c.stdout, out)
	}
	t := newTable(c.stdout, "Node name", "Number of quorum queues")
	for _, n := range sortedKeys(leaders) {
		t.row(n, fmt.Sprint(leaders[n]))
	}
	return t.flush()
}

// statusColumns are the quorum status's columns, RabbitMQ 4.x's order.
var statusColumns = []string{"Node Name", "Raft State", "Membership", "Last Log Index", "Last Written",
	"Last Applied", "Commit Index", "Snapshot Index", "Term", "Machine Version"}

func cmdQQStatus(c *cliCtx, args []string) error {
	if err := wantArgs(args, 1, 1, "queues quorum_status QUEUE [--vhost V]"); err != nil {
		return err
	}
	var rows []api.QuorumMember
	raw, err := c.api.getJSON(qqAPIPath(c.oneVhost(), args[0], "status"), &rows)
	if err != nil {
		return err
	}
	if c.json {
		return printJSON(c.stdout, raw)
	}
	fmt.Fprintf(c.stdout, "Status of quorum queue %s ...\n", args[0])
	t := newTable(c.stdout, statusColumns...)
	for _, r := range rows {
		t.row(r.Node, r.RaftState, r.Membership, fmt.Sprint(r.LastLogIndex), fmt.Sprint(r.LastWritten),
			fmt.Sprint(r.LastApplied), fmt.Sprint(r.CommitIndex), fmt.Sprint(r.SnapshotIndex), fmt.Sprint(r.Term),
			fmt.Sprint(r.MachineVersion))
	}
	return t.flush()
}
