package main

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/mgmt/api"
	"github.com/warrenmq/warren/warrentest"
)

// The CLI of issue 14's membership operations (warren queues add_member,
// delete_member, grow, shrink, rebalance, quorum_status) against real
// Warren management APIs: a 3-node in-process cluster and a single node.

func qqDeclare(t *testing.T, url, name string, args amqp.Table) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	a := amqp.Table{"x-queue-type": "quorum"}
	for k, v := range args {
		a[k] = v
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, a); err != nil {
		t.Fatalf("declare %s: %v", name, err)
	}
}

// qqMembers reads a queue's members and leader through the CLI's own
// listing (GET /api/queues).
func qqMembers(t *testing.T, e *cliEnv, name string) ([]string, string) {
	t.Helper()
	c := &cliCtx{api: mustAPI(t, e.mgmt)}
	qs, err := c.quorumQueues()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Name == name {
			ms := slices.Clone(q.Members)
			sort.Strings(ms)
			return ms, q.Leader
		}
	}
	return nil, "" // not listed (yet)
}

func mustAPI(t *testing.T, base string) *apiClient {
	a, err := newAPIClient(base, "guest", "guest")
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// waitMembers polls until the queue's members are want.
func waitMembers(t *testing.T, e *cliEnv, name string, want ...string) string {
	t.Helper()
	sort.Strings(want)
	var got []string
	var leader string
	if !testutil.Until(20*time.Second, func() bool {
		got, leader = qqMembers(t, e, name)
		return slices.Equal(got, want) && slices.Contains(want, leader)
	}) {
		t.Fatalf("queue %s: members %v leader %q, want members %v", name, got, leader, want)
	}
	return leader
}

// TestCLIQueuesMembershipCluster: issue 14, warren queues add_member,
// delete_member, grow, shrink, rebalance and quorum_status on a 3-node
// cluster, through one node's API, with rabbitmq-queues' messages.
func TestCLIQueuesMembershipCluster(t *testing.T) {
	c := warrentest.StartCluster(t, 3)
	n1, n2, n3 := warrentest.NodeName(0), warrentest.NodeName(1), warrentest.NodeName(2)
	e := &cliEnv{t: t, mgmt: c.Node(1).MgmtURL(), amqpURL: c.Node(1).URL(), vhost: "/"}
	q := fmt.Sprintf("h8-cli-%d", time.Now().UnixNano())
	qqDeclare(t, c.Node(0).URL(), q, nil)
	waitMembers(t, e, q, n1, n2, n3)

	out := e.mustCLI("queues", "delete_member", q, n3)
	if want := fmt.Sprintf("Removing a replica of queue %s on node %s...\n", q, n3); out != want {
		t.Errorf("delete_member printed %q, want %q", out, want)
	}
	waitMembers(t, e, q, n1, n2)
	out = e.mustCLI("queues", "add_member", q, n3)
	if want := fmt.Sprintf("Adding a replica for queue %s on node %s...\n", q, n3); out != want {
		t.Errorf("add_member printed %q, want %q", out, want)
	}
	waitMembers(t, e, q, n1, n2, n3)

	// The new member catches up: one leader, two followers.
	var lines []string
	if !testutil.Until(20*time.Second, func() bool {
		out = e.mustCLI("queues", "quorum_status", q)
		lines = strings.Split(strings.TrimSpace(out), "\n")
		return len(lines) == 5 && strings.HasPrefix(lines[0], "Status of quorum queue "+q) &&
			strings.HasPrefix(lines[1], "Node Name") && strings.Count(out, " leader ") == 1 && strings.Count(out, " follower ") == 2
	}) {
		t.Errorf("quorum_status printed:\n%s", out)
	}
	for i, n := range []string{n1, n2, n3} {
		if !strings.HasPrefix(lines[2+i], n+" ") {
			t.Errorf("quorum_status row %d is not %s's: %q", i, n, lines[2+i])
		}
	}

	// Errors: RabbitMQ's reasons in the message, a failing exit.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"queues", "add_member", "h8-nosuch", n1}, "404"},
		{[]string{"queues", "add_member", q, "warren@nosuch"}, "node_not_running"},
		{[]string{"queues", "grow", n1, "bogus"}, "strategy 'bogus' is not recognised."},
		{[]string{"queues", "grow", "warren@nosuch", "all"}, "is not a running node"},
		{[]string{"queues", "add_member", q}, "usage: warren queues add_member QUEUE NODE"},
	} {
		if _, _, err := e.cliErr(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("warren %s: error %v, want one containing %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}

	// Shrink n3 off, grow it back (with the queue pattern), rebalance.
	out = e.mustCLI("queues", "shrink", n3)
	if !strings.Contains(out, "Shrinking quorum queues on "+n3+"...") || !regexpLine(out, `^/\s+`+q+`\s+2\s+ok$`) {
		t.Errorf("shrink printed:\n%s", out)
	}
	waitMembers(t, e, q, n1, n2)
	out = e.mustCLI("queues", "grow", n3, "all", "--queue-pattern", "^h8-cli-")
	if !strings.Contains(out, "Growing all quorum queues on "+n3+"...") || !regexpLine(out, `^/\s+`+q+`\s+3\s+ok$`) {
		t.Errorf("grow printed:\n%s", out)
	}
	waitMembers(t, e, q, n1, n2, n3)
	out = e.mustCLI("queues", "rebalance", "quorum")
	if !strings.Contains(out, "Re-balancing leaders of quorum queues...") || !strings.Contains(out, "Number of quorum queues") {
		t.Errorf("rebalance printed:\n%s", out)
	}
	for _, n := range []string{n1, n2, n3} {
		if !regexpLine(out, `^`+n+`\s+[01]$`) {
			t.Errorf("rebalance: no line for %s with 0 or 1 leaders:\n%s", n, out)
		}
	}
	// warren queues alone still lists the queues.
	if out := e.mustCLI("queues"); !strings.Contains(out, q) {
		t.Errorf("warren queues does not list %s:\n%s", q, out)
	}
}

// TestCLIQueuesMembershipSingleNode: issue 14, the membership commands
// on a single node: its quorum queues' one member is the node.
func TestCLIQueuesMembershipSingleNode(t *testing.T) {
	e := newCLIEnv(t)
	e.warrenOnly() // RabbitMQ 3.10 has no replica endpoints
	q := fmt.Sprintf("h8-cli1-%d", time.Now().UnixNano())
	qqDeclare(t, e.amqpURL, q, nil)
	var overview struct {
		Node string `json:"node"`
	}
	if _, err := mustAPI(t, e.mgmt).getJSON(apiPath("overview"), &overview); err != nil {
		t.Fatal(err)
	}
	e.mustCLI("queues", "add_member", q, overview.Node)
	if _, _, err := e.cliErr("queues", "delete_member", q, overview.Node); err == nil || !strings.Contains(err.Error(), "last_node") {
		t.Errorf("delete_member of the only member: %v, want last_node", err)
	}
	out := e.mustCLI("queues", "quorum_status", q)
	if !regexpLine(out, `^`+overview.Node+`\s+leader\s`) {
		t.Errorf("quorum_status:\n%s", out)
	}
	out = e.mustCLI("queues", "shrink", overview.Node)
	if !regexpLine(out, `^/\s+`+q+`\s+1\s+error: the last node cannot be removed$`) {
		t.Errorf("shrink:\n%s", out)
	}
}

// regexpLine reports whether some line of out matches re.
func regexpLine(out, re string) bool {
	for _, l := range strings.Split(out, "\n") {
		if ok, _ := regexpMatch(re, strings.TrimRight(l, " ")); ok {
			return true
		}
	}
	return false
}

func regexpMatch(re, s string) (bool, error) { return regexp.MatchString(re, s) }

// TestGrowResults: grow's rows are the queues it was to add the node to
// (matching, without the node, an even size for "even"), ok where the
// members read afterwards include the node; all is false while one does
// not, which is what grow waits on.
func TestGrowResults(t *testing.T) {
	q := func(name string, members ...string) qqQueue {
		return qqQueue{VHost: "/", Name: name, Members: members}
	}
	before := []qqQueue{q("a", "n1", "n2"), q("b", "n1"), q("c", "n1", "n3"), q("skip-d", "n1", "n2")}
	match := regexp.MustCompile(".*")
	noSkip := regexp.MustCompile("^[a-c]$")

	got, all := growResults(before, []qqQueue{q("a", "n1", "n2", "n3"), q("b", "n1"), q("c", "n1", "n3")}, "n3", "all", match, noSkip)
	want := []api.QueueMemberResult{{VHost: "/", Name: "a", Size: 3, Result: "ok"}, {VHost: "/", Name: "b", Size: 1, Result: "error: not added"}}
	if !slices.Equal(got, want) || all {
		t.Errorf("all: %v %v, want %v false", got, all, want)
	}
	got, all = growResults(before, []qqQueue{q("a", "n1", "n2", "n3"), q("b", "n1")}, "n3", "even", match, noSkip)
	if want := []api.QueueMemberResult{{VHost: "/", Name: "a", Size: 3, Result: "ok"}}; !slices.Equal(got, want) || !all {
		t.Errorf("even: %v %v, want %v true", got, all, want)
	}
}
