package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/warrenmq/warren/mgmt/api"
)

func (c *cliCtx) definitionsPath() string {
	if c.vhost == "" {
		return apiPath("definitions")
	}
	return apiPath("definitions", c.vhost)
}

func cmdDefsExport(c *cliCtx, args []string) error {
	if err := wantArgs(args, 0, 1, "definitions export [FILE] [--vhost V]"); err != nil {
		return err
	}
	raw, err := c.api.getJSON(c.definitionsPath(), nil)
	if err != nil {
		return err
	}
	if len(args) == 0 || args[0] == "-" {
		return printJSON(c.stdout, raw)
	}
	var buf bytes.Buffer
	if err := printJSON(&buf, raw); err != nil {
		return err
	}
	if err := os.WriteFile(args[0], buf.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "Exported definitions to %s.\n", args[0])
	return nil
}

func cmdDefsImport(c *cliCtx, args []string) error {
	if err := wantArgs(args, 1, 1, "definitions import FILE [--vhost V]"); err != nil {
		return err
	}
	var data []byte
	var err error
	if args[0] == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(args[0])
	}
	if err != nil {
		return err
	}
	if !json.Valid(data) {
		return fmt.Errorf("definitions import: %s is not valid JSON", args[0])
	}
	raw, err := c.api.do(http.MethodPost, c.definitionsPath(), data)
	if err != nil {
		return err
	}
	if c.json && len(bytes.TrimSpace(raw)) > 0 {
		return printJSON(c.stdout, raw)
	}
	fmt.Fprintf(c.stdout, "Imported definitions from %s.\n", args[0])
	return nil
}

func cmdPoliciesList(c *cliCtx, args []string) error {
	return listTable(c, "policies", "policies list [--vhost V]", args,
		[]string{"NAME", "PATTERN", "APPLY-TO", "PRIORITY", "DEFINITION"},
		func(p api.Policy) string { return p.VHost },
		func(p api.Policy) []string {
			return []string{p.Name, p.Pattern, p.ApplyTo, fmt.Sprint(p.Priority), compactJSON(p.Definition)}
		})
}

func cmdPoliciesSet(c *cliCtx, args []string) error {
	if err := wantArgs(args, 3, 3, "policies set NAME PATTERN DEFINITION_JSON [--apply-to queues|exchanges|all] [--priority N]"); err != nil {
		return err
	}
	switch c.applyTo {
	case "queues", "exchanges", "all", "classic_queues", "quorum_queues", "streams":
	default:
		return fmt.Errorf("policies set: --apply-to %q: want queues, exchanges or all", c.applyTo)
	}
	var def map[string]any
	if err := json.Unmarshal([]byte(args[2]), &def); err != nil {
		return fmt.Errorf(`policies set: the definition must be a JSON object such as '{"max-length":1000}': %v`, err)
	}
	name := args[0]
	body := map[string]any{"pattern": args[1], "definition": def, "priority": c.priority, "apply-to": c.applyTo}
	if _, err := c.api.do(http.MethodPut, apiPath("policies", c.oneVhost(), name), body); err != nil {
		return err
	}
	if c.json {
		return printValueJSON(c.stdout, map[string]any{"vhost": c.oneVhost(), "name": name, "pattern": args[1],
			"apply-to": c.applyTo, "priority": c.priority, "definition": def})
	}
	fmt.Fprintf(c.stdout, "Set policy %q in vhost %q: pattern %s, apply-to %s, priority %s, %s.\n",
		name, c.oneVhost(), strconv.Quote(args[1]), c.applyTo, strconv.Itoa(c.priority), compactJSON(def))
	return nil
}

func cmdPoliciesDelete(c *cliCtx, args []string) error {
	if err := wantArgs(args, 1, 1, "policies delete NAME"); err != nil {
		return err
	}
	if _, err := c.api.do(http.MethodDelete, apiPath("policies", c.oneVhost(), args[0]), nil); err != nil {
		return err
	}
	if c.json {
		return printValueJSON(c.stdout, map[string]any{"vhost": c.oneVhost(), "name": args[0], "deleted": true})
	}
	fmt.Fprintf(c.stdout, "Deleted policy %q in vhost %q.\n", args[0], c.oneVhost())
	return nil
}

// cmdParamsList lists /api/parameters[/COMPONENT[/VHOST]].
func cmdParamsList(c *cliCtx, args []string) error {
	if err := wantArgs(args, 0, 1, "parameters list [COMPONENT] [--vhost V]"); err != nil {
		return err
	}
	path := apiPath("parameters")
	if len(args) == 1 {
		path = apiPath("parameters", args[0])
		if c.vhost != "" {
			path = apiPath("parameters", args[0], c.vhost)
		}
	}
	var rows []api.Parameter
	raw, err := c.api.getJSON(path, &rows)
	if err != nil {
		return err
	}
	if c.json {
		return printJSON(c.stdout, raw)
	}
	t := newTable(c.stdout, "VHOST", "COMPONENT", "NAME", "VALUE")
	for _, p := range rows {
		if c.vhost != "" && p.VHost != c.vhost {
			continue
		}
		t.row(p.VHost, p.Component, p.Name, compactJSON(p.Value))
	}
	return t.flush()
}

// cmdParamsSet is rabbitmqctl set_parameter: PUT
// /api/parameters/COMPONENT/VHOST/NAME with the value.
func cmdParamsSet(c *cliCtx, args []string) error {
	if err := wantArgs(args, 3, 3, "parameters set COMPONENT NAME VALUE_JSON [--vhost V]"); err != nil {
		return err
	}
	var value any
	if err := json.Unmarshal([]byte(args[2]), &value); err != nil {
		return fmt.Errorf(`parameters set: the value must be JSON, such as '{"src-uri":"amqp://",...}': %v`, err)
	}
	body := map[string]any{"vhost": c.oneVhost(), "component": args[0], "name": args[1], "value": value}
	if _, err := c.api.do(http.MethodPut, apiPath("parameters", args[0], c.oneVhost(), args[1]), body); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "Set %s parameter %q in vhost %q.\n", args[0], args[1], c.oneVhost())
	return nil
}

// cmdParamsDelete is rabbitmqctl clear_parameter.
func cmdParamsDelete(c *cliCtx, args []string) error {
	if err := wantArgs(args, 2, 2, "parameters delete COMPONENT NAME [--vhost V]"); err != nil {
		return err
	}
	if _, err := c.api.do(http.MethodDelete, apiPath("parameters", args[0], c.oneVhost(), args[1]), nil); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "Deleted %s parameter %q in vhost %q.\n", args[0], args[1], c.oneVhost())
	return nil
}
