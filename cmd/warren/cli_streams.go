package main

// warren streams add_replica|delete_replica|stream_status|
// add_super_stream|delete_super_stream (issue 25): rabbitmq-streams'
// commands, over the management API of any node. The replica changes are
// Warren's endpoints POST /api/streams/{vhost}/{stream}/replicas/add and
// DELETE .../replicas/delete; a super stream is what RabbitMQ's
// rabbit_stream_manager makes of one: a direct exchange with
// x-super-stream, one stream per partition and a binding to each with
// its x-stream-partition-order.

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

var streamsCommand = &cliCommand{name: "streams", summary: "streams: replicas and super streams (as rabbitmq-streams)", subs: []*cliCommand{
	{name: "add_replica", args: "STREAM NODE [--vhost V]", summary: "add a replica of stream STREAM on node NODE (as rabbitmq-streams add_replica)", run: cmdStreamAddReplica},
	{name: "delete_replica", args: "STREAM NODE [--vhost V]", summary: "remove the replica of stream STREAM on node NODE (as rabbitmq-streams delete_replica)", run: cmdStreamDeleteReplica},
	{name: "stream_status", args: "STREAM [--vhost V]", summary: "show a stream's leader, replicas and log", run: cmdStreamStatus},
	{name: "add_super_stream", args: "NAME --partitions N|--binding-keys K,... [options]",
		summary: "create a super stream: its exchange, partition streams and bindings (as rabbitmq-streams add_super_stream)",
		flags:   superStreamFlags, run: cmdAddSuperStream},
	{name: "delete_super_stream", args: "NAME [--vhost V]", summary: "delete a super stream: its partition streams and exchange", run: cmdDeleteSuperStream},
}}

// superStream are add_super_stream's options.
type superStream struct {
	partitions                            int
	bindingKeys, maxAge                   string
	maxLengthBytes, segmentBytes, initial int64
}

func superStreamFlags(fs *flag.FlagSet, c *cliCtx) {
	c.super = &superStream{}
	fs.IntVar(&c.super.partitions, "partitions", 0, "number of partitions (streams NAME-0 ... NAME-N-1, routing keys 0 ... N-1)")
	fs.StringVar(&c.super.bindingKeys, "binding-keys", "", "comma-separated routing keys (streams NAME-KEY)")
	fs.Int64Var(&c.super.maxLengthBytes, "max-length-bytes", 0, "each partition's x-max-length-bytes")
	fs.StringVar(&c.super.maxAge, "max-age", "", "each partition's x-max-age (7D, 12h ...)")
	fs.Int64Var(&c.super.segmentBytes, "stream-max-segment-size-bytes", 0, "each partition's segment size")
	fs.Int64Var(&c.super.initial, "initial-cluster-size", 0, "each partition's replicas")
}

func cmdStreamAddReplica(c *cliCtx, args []string) error {
	if err := wantArgs(args, 2, 2, "streams add_replica STREAM NODE [--vhost V]"); err != nil {
		return err
	}
	stream, node := args[0], args[1]
	if !c.json {
		fmt.Fprintf(c.stdout, "Adding a replica for stream %s on node %s...\n", stream, node)
	}
	if _, err := c.api.do(http.MethodPost, apiPath("streams", c.oneVhost(), stream, "replicas", "add"), map[string]string{"node": node}); err != nil {
		return err
	}
	if c.json {
		return printValueJSON(c.stdout, map[string]any{"vhost": c.oneVhost(), "stream": stream, "node": node, "added": true})
	}
	return nil
}

func cmdStreamDeleteReplica(c *cliCtx, args []string) error {
	if err := wantArgs(args, 2, 2, "streams delete_replica STREAM NODE [--vhost V]"); err != nil {
		return err
	}
	stream, node := args[0], args[1]
	if !c.json {
		fmt.Fprintf(c.stdout, "Removing a replica of stream %s on node %s...\n", stream, node)
	}
	if _, err := c.api.do(http.MethodDelete, apiPath("streams", c.oneVhost(), stream, "replicas", "delete"), map[string]string{"node": node}); err != nil {
		return err
	}
	if c.json {
		return printValueJSON(c.stdout, map[string]any{"vhost": c.oneVhost(), "stream": stream, "node": node, "removed": true})
	}
	return nil
}

func cmdStreamStatus(c *cliCtx, args []string) error {
	if err := wantArgs(args, 1, 1, "streams stream_status STREAM [--vhost V]"); err != nil {
		return err
	}
	raw, err := c.api.do(http.MethodGet, apiPath("queues", c.oneVhost(), args[0]), nil)
	if err != nil {
		return err
	}
	var q struct {
		Type    string   `json:"type"`
		Leader  *string  `json:"leader"`
		Members []string `json:"members"`
		Online  []string `json:"online"`
		Stream  *struct {
			FirstOffset     *uint64 `json:"first_offset"`
			LastChunkID     *uint64 `json:"last_chunk_id"`
			CommittedOffset uint64  `json:"committed_offset"`
			Bytes           int64   `json:"bytes"`
		} `json:"stream"`
		Segments int `json:"segments"`
	}
	if err := json.Unmarshal(raw, &q); err != nil {
		return err
	}
	if q.Type != "stream" {
		return fmt.Errorf("queue '%s' in vhost '%s' is not a stream", args[0], c.oneVhost())
	}
	if c.json {
		return printValueJSON(c.stdout, json.RawMessage(raw))
	}
	leader := "(none)"
	if q.Leader != nil {
		leader = *q.Leader
	}
	fmt.Fprintf(c.stdout, "Status of stream %s in vhost %s\nleader\t%s\nmembers\t%s\nonline\t%s\nsegments\t%d\n",
		args[0], c.oneVhost(), leader, strings.Join(q.Members, ", "), strings.Join(q.Online, ", "), q.Segments)
	if s := q.Stream; s != nil {
		if s.FirstOffset != nil {
			fmt.Fprintf(c.stdout, "first offset\t%d\nlast chunk id\t%d\n", *s.FirstOffset, *s.LastChunkID)
		}
		fmt.Fprintf(c.stdout, "committed offset\t%d\nbytes\t%d\n", s.CommittedOffset, s.Bytes)
	}
	return nil
}

// superPartitions are a super stream's partitions and their routing keys,
// as rabbit_stream_manager names them.
func superPartitions(name string, o *superStream) ([]string, []string, error) {
	switch {
	case o.partitions > 0 && o.bindingKeys != "":
		return nil, nil, errors.New("specify either --partitions or --binding-keys, not both")
	case o.partitions > 0:
		var ps, ks []string
		for i := range o.partitions {
			ps = append(ps, fmt.Sprintf("%s-%d", name, i))
			ks = append(ks, strconv.Itoa(i))
		}
		return ps, ks, nil
	case o.bindingKeys != "":
		var ps, ks []string
		for _, k := range strings.Split(o.bindingKeys, ",") {
			if k = strings.TrimSpace(k); k == "" {
				return nil, nil, errors.New("--binding-keys: an empty key")
			}
			ps = append(ps, name+"-"+k)
			ks = append(ks, k)
		}
		return ps, ks, nil
	}
	return nil, nil, errors.New("specify --partitions or --binding-keys")
}

func cmdAddSuperStream(c *cliCtx, args []string) error {
	if err := wantArgs(args, 1, 1, "streams add_super_stream NAME (--partitions N | --binding-keys K1,K2...)"); err != nil {
		return err
	}
	name, vh := args[0], c.oneVhost()
	o := c.super
	partitions, keys, err := superPartitions(name, o)
	if err != nil {
		return err
	}
	// Nothing of it may exist already (rabbit_stream_manager).
	if _, err := c.api.do(http.MethodGet, apiPath("exchanges", vh, name), nil); err == nil {
		return fmt.Errorf("exchange '%s' in vhost '%s' already exists", name, vh)
	} else if !isNotFound(err) {
		return err
	}
	for _, p := range partitions {
		if _, err := c.api.do(http.MethodGet, apiPath("queues", vh, p), nil); err == nil {
			return fmt.Errorf("queue '%s' in vhost '%s' already exists", p, vh)
		} else if !isNotFound(err) {
			return err
		}
	}
	qargs := map[string]any{"x-queue-type": "stream"}
	if o.maxLengthBytes > 0 {
		qargs["x-max-length-bytes"] = o.maxLengthBytes
	}
	if o.maxAge != "" {
		qargs["x-max-age"] = o.maxAge
	}
	if o.segmentBytes > 0 {
		qargs["x-stream-max-segment-size-bytes"] = o.segmentBytes
	}
	if o.initial > 0 {
		qargs["x-initial-cluster-size"] = o.initial
	}
	for _, p := range partitions {
		if _, err := c.api.do(http.MethodPut, apiPath("queues", vh, p), map[string]any{"durable": true, "auto_delete": false, "arguments": qargs}); err != nil {
			return fmt.Errorf("partition %s: %w", p, err)
		}
	}
	if _, err := c.api.do(http.MethodPut, apiPath("exchanges", vh, name), map[string]any{"type": "direct", "durable": true,
		"arguments": map[string]any{"x-super-stream": true}}); err != nil {
		return err
	}
	for i, p := range partitions {
		if _, err := c.api.do(http.MethodPost, apiPath("bindings", vh, "e", name, "q", p), map[string]any{"routing_key": keys[i],
			"arguments": map[string]any{"x-stream-partition-order": i}}); err != nil {
			return fmt.Errorf("binding %s: %w", p, err)
		}
	}
	if c.json {
		return printValueJSON(c.stdout, map[string]any{"vhost": vh, "super_stream": name, "partitions": partitions, "binding_keys": keys})
	}
	fmt.Fprintf(c.stdout, "Super stream %s created (partitions %s)\n", name, strings.Join(partitions, ", "))
	return nil
}

func cmdDeleteSuperStream(c *cliCtx, args []string) error {
	if err := wantArgs(args, 1, 1, "streams delete_super_stream NAME [--vhost V]"); err != nil {
		return err
	}
	name, vh := args[0], c.oneVhost()
	raw, err := c.api.do(http.MethodGet, apiPath("exchanges", vh, name), nil)
	if err != nil {
		return err
	}
	var x struct {
		Arguments map[string]any `json:"arguments"`
	}
	if err := json.Unmarshal(raw, &x); err != nil {
		return err
	}
	if v, _ := x.Arguments["x-super-stream"].(bool); !v {
		return fmt.Errorf("exchange '%s' in vhost '%s' is not a super stream", name, vh)
	}
	raw, err = c.api.do(http.MethodGet, apiPath("exchanges", vh, name, "bindings", "source"), nil)
	if err != nil {
		return err
	}
	var bs []struct {
		Destination     string `json:"destination"`
		DestinationType string `json:"destination_type"`
	}
	if err := json.Unmarshal(raw, &bs); err != nil {
		return err
	}
	var deleted []string
	for _, b := range bs {
		if b.DestinationType != "queue" {
			continue
		}
		if _, err := c.api.do(http.MethodDelete, apiPath("queues", vh, b.Destination), nil); err != nil && !isNotFound(err) {
			return err
		}
		deleted = append(deleted, b.Destination)
	}
	if _, err := c.api.do(http.MethodDelete, apiPath("exchanges", vh, name), nil); err != nil {
		return err
	}
	if c.json {
		return printValueJSON(c.stdout, map[string]any{"vhost": vh, "super_stream": name, "deleted": deleted})
	}
	fmt.Fprintf(c.stdout, "Super stream %s deleted (partitions %s)\n", name, strings.Join(deleted, ", "))
	return nil
}
