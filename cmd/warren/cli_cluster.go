package main

// warren cluster status|join|forget (issue 13), over the management API
// of any node: GET /api/cluster-status (Warren's; RabbitMQ's /api/nodes
// when a broker has no such endpoint), POST /api/cluster/members,
// DELETE /api/cluster/members/{name}.

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"sort"

	"github.com/warrenmq/warren/mgmt/api"
)

var clusterCommand = &cliCommand{name: "cluster", summary: "cluster nodes: status, join, forget", subs: []*cliCommand{
	{name: "status", args: "", summary: "show the cluster's nodes, which are running and which leads (as rabbitmqctl cluster_status)", run: cmdClusterStatus},
	{name: "join", args: "NAME HOST:PORT", summary: "add node NAME (started with --cluster-join, inter-node address HOST:PORT) to the cluster", run: cmdClusterJoin},
	{name: "forget", args: "--offline NAME", summary: "remove node NAME, stopped and gone for good, from the cluster (as rabbitmqctl forget_cluster_node); a running node is refused",
		flags: func(fs *flag.FlagSet, c *cliCtx) {
			fs.BoolVar(&c.offline, "offline", false, "NAME is stopped and will not come back (its disk or host is lost): required")
		}, run: cmdClusterForget},
}}

func cmdClusterStatus(c *cliCtx, args []string) error {
	if err := wantArgs(args, 0, 0, "cluster status"); err != nil {
		return err
	}
	var st api.ClusterStatus
	raw, err := c.api.getJSON(apiPath("cluster-status"), &st)
	if isNotFound(err) {
		// A broker without Warren's endpoint (RabbitMQ): its /api/nodes.
		return c.nodesStatus()
	}
	if err != nil {
		return err
	}
	if c.json {
		return printJSON(c.stdout, raw)
	}
	members := st.Members
	sort.Slice(members, func(i, j int) bool { return members[i].Name < members[j].Name })
	w := c.stdout
	fmt.Fprintf(w, "Cluster status of node %s ...\n\nBasics\n\n", st.Node)
	fmt.Fprintf(w, "Cluster name: %s\n", orDefault(st.ClusterName, "(none)"))
	fmt.Fprintf(w, "Cluster id: %s\n", orDefault(st.ClusterID, "(not yet known)"))
	fmt.Fprintf(w, "Leader: %s\n\nDisk Nodes\n\n", orDefault(st.Leader, "(none: no quorum)"))
	for _, m := range members {
		fmt.Fprintln(w, m.Name)
	}
	fmt.Fprintf(w, "\nRunning Nodes\n\n")
	for _, m := range members {
		if m.Running {
			fmt.Fprintln(w, m.Name)
		}
	}
	fmt.Fprintf(w, "\nMembers\n\n")
	t := newTable(w, "NAME", "ADDRESS", "RUNNING", "LEADER")
	for _, m := range members {
		t.row(m.Name, m.Address, yesNo(m.Running), yesNo(m.Leader))
	}
	return t.flush()
}

// nodesStatus prints the status from GET /api/nodes (RabbitMQ's).
func (c *cliCtx) nodesStatus() error {
	var nodes []api.Node
	raw, err := c.api.getJSON(apiPath("nodes"), &nodes)
	if err != nil {
		return err
	}
	if c.json {
		return printJSON(c.stdout, raw)
	}
	var overview api.Overview
	c.api.getJSON(apiPath("overview"), &overview)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	w := c.stdout
	fmt.Fprintf(w, "Cluster status of node %s ...\n\nBasics\n\nCluster name: %s\n\nDisk Nodes\n\n", overview.Node, orDefault(overview.ClusterName, "(none)"))
	for _, n := range nodes {
		fmt.Fprintln(w, n.Name)
	}
	fmt.Fprintf(w, "\nRunning Nodes\n\n")
	for _, n := range nodes {
		if n.Running {
			fmt.Fprintln(w, n.Name)
		}
	}
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func cmdClusterJoin(c *cliCtx, args []string) error {
	if err := wantArgs(args, 2, 2, "cluster join NAME HOST:PORT"); err != nil {
		return err
	}
	name, addr := args[0], args[1]
	if err := validNodeName(name); err != nil {
		return fmt.Errorf("cluster join: %w", err)
	}
	if err := validAddr(addr); err != nil {
		return fmt.Errorf("cluster join: address %q: %v (want the node's inter-node HOST:PORT, its --cluster-advertise)", addr, err)
	}
	if _, err := c.api.do(http.MethodPost, apiPath("cluster", "members"), map[string]string{"name": name, "address": addr}); err != nil {
		return err
	}
	if c.json {
		return printValueJSON(c.stdout, map[string]any{"name": name, "address": addr, "added": true})
	}
	fmt.Fprintf(c.stdout, "Added node %s (%s) to the cluster.\n", name, addr)
	return nil
}

func cmdClusterForget(c *cliCtx, args []string) error {
	if err := wantArgs(args, 1, 1, "cluster forget --offline NAME"); err != nil {
		return err
	}
	path := apiPath("cluster", "members", args[0])
	if c.offline {
		path += "?offline=true"
	}
	if _, err := c.api.do(http.MethodDelete, path, nil); err != nil {
		return err
	}
	// As rabbitmqctl forget_cluster_node: the node's quorum queue
	// replicas go too (rabbit_quorum_queue:shrink_all), so that no queue
	// counts a member that is gone for good.
	var shrunk []api.QueueMemberResult
	raw, err := c.api.do(http.MethodDelete, apiPath("queues", "quorum", "replicas", "on", args[0], "shrink"), nil)
	if err == nil {
		err = json.Unmarshal(raw, &shrunk)
	}
	if err != nil {
		return fmt.Errorf("removed node %s from the cluster, but shrinking its quorum queues failed (run 'warren queues shrink %s'): %w", args[0], args[0], err)
	}
	failed := 0
	for _, r := range shrunk {
		if r.Result != "ok" {
			failed++
		}
	}
	if c.json {
		return printValueJSON(c.stdout, map[string]any{"name": args[0], "removed": true, "quorum_queues_shrunk": shrunk})
	}
	fmt.Fprintf(c.stdout, "Removed node %s from the cluster.\n", args[0])
	if len(shrunk) > 0 {
		fmt.Fprintf(c.stdout, "Removed its replicas from %d quorum queues (%d failed).\n", len(shrunk)-failed, failed)
	}
	if failed > 0 {
		return fmt.Errorf("removed node %s from the cluster, but %d of its quorum queue replicas could not be removed (run 'warren queues shrink %s')", args[0], failed, args[0])
	}
	return nil
}
