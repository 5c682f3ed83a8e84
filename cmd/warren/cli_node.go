package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"

	"github.com/warrenmq/warren/cluster"
	"github.com/warrenmq/warren/mgmt"
)

// warren node drain|revive (issue 22), over the management API of the
// node to drain (--url), as rabbitmq-upgrade drain and revive.

var nodeCommand = &cliCommand{name: "node", summary: "maintenance of the node at --url: drain, revive; force-boot of a stopped node", subs: []*cliCommand{
	{name: "drain", args: "", summary: "put the node into maintenance mode: close its AMQP listeners, hand its quorum queue leaderships over, close its connections once their publishes are confirmed (as rabbitmq-upgrade drain)", run: cmdNodeDrain},
	{name: "revive", args: "", summary: "take the node out of maintenance mode: listen for clients again (as rabbitmq-upgrade revive)", run: cmdNodeRevive},
	{name: "force-boot", args: "[--data-dir DIR]", summary: "recover from a lost majority: the stopped node whose data directory is DIR starts next as the only member of its cluster and of its quorum queues, keeping what it has and losing what only the lost nodes had (as rabbitmqctl force_boot with force_shrink_member_to_current_member; see docs/cluster.md)",
		flags: func(fs *flag.FlagSet, c *cliCtx) {
			fs.StringVar(&c.dataDir, "data-dir", "./warren-data", "the stopped node's data directory")
		},
		run: cmdNodeForceBoot},
}}

// cmdNodeForceBoot works on the data directory, not over the API: the
// node is stopped (it has no quorum to answer with anyway).
func cmdNodeForceBoot(c *cliCtx, args []string) error {
	if err := wantArgs(args, 0, 0, "node force-boot"); err != nil {
		return err
	}
	if err := cluster.MarkForceBoot(c.dataDir); err != nil {
		return fmt.Errorf("node force-boot: %w", err)
	}
	fmt.Fprintf(c.stdout, "The node of %s will start as the only member of its cluster at its next start.\n"+
		"Do not start the lost nodes again with their old data: wipe them and join them as new members.\n", c.dataDir)
	return nil
}

func nodeMaint(c *cliCtx, args []string, what string) (mgmt.NodeMaintenance, error) {
	var r mgmt.NodeMaintenance
	if err := wantArgs(args, 0, 0, "node "+what); err != nil {
		return r, err
	}
	body, err := c.api.do(http.MethodPost, apiPath("node", what), nil)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return r, fmt.Errorf("node %s: bad reply: %v", what, err)
	}
	return r, nil
}

func cmdNodeDrain(c *cliCtx, args []string) error {
	r, err := nodeMaint(c, args, "drain")
	if err != nil {
		return err
	}
	if c.json {
		return printValueJSON(c.stdout, r)
	}
	fmt.Fprintf(c.stdout, "Node %s is in maintenance mode: %d quorum queue leaderships handed over, %d kept (no other member online), %d connections still closing.\n",
		r.Node, r.LeadersMoved, r.LeadersKept, r.ConnectionsLeft)
	return nil
}

func cmdNodeRevive(c *cliCtx, args []string) error {
	r, err := nodeMaint(c, args, "revive")
	if err != nil {
		return err
	}
	if c.json {
		return printValueJSON(c.stdout, r)
	}
	fmt.Fprintf(c.stdout, "Node %s is out of maintenance mode and takes clients again.\n", r.Node)
	return nil
}
