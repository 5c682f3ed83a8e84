package main

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/warrenmq/warren/mgmt"
)

// warren node drain|revive (issue 22), over the management API of the
// node to drain (--url), as rabbitmq-upgrade drain and revive.

var nodeCommand = &cliCommand{name: "node", summary: "maintenance of the node at --url: drain, revive", subs: []*cliCommand{
	{name: "drain", args: "", summary: "put the node into maintenance mode: close its AMQP listeners, hand its quorum queue leaderships over, close its connections once their publishes are confirmed (as rabbitmq-upgrade drain)", run: cmdNodeDrain},
	{name: "revive", args: "", summary: "take the node out of maintenance mode: listen for clients again (as rabbitmq-upgrade revive)", run: cmdNodeRevive},
}}

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
