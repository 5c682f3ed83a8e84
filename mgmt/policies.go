package mgmt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/warrenmq/warren/bridge"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/mgmt/api"
	"github.com/warrenmq/warren/server"
)

func (s *Server) policyRoutes() {
	for _, kind := range []string{"policies", "operator-policies"} {
		op := kind == "operator-policies"
		lvl := lvlPolicymaker
		if op {
			lvl = lvlAdmin
		}
		s.handle("GET /api/"+kind, lvlManagement, policyList(op))
		s.handle("GET /api/"+kind+"/{vhost}", lvlManagement, policyList(op))
		s.handle("GET /api/"+kind+"/{vhost}/{name}", lvlManagement, policyGet(op))
		s.handle("PUT /api/"+kind+"/{vhost}/{name}", lvl, policyPut(op))
		s.handle("DELETE /api/"+kind+"/{vhost}/{name}", lvl, policyDelete(op))
	}
	s.handle("GET /api/definitions", lvlAdmin, (*call).definitionsGet)
	s.handle("GET /api/definitions/{vhost}", lvlAdmin, (*call).definitionsGet)
	s.handle("POST /api/definitions", lvlAdmin, (*call).definitionsPost)
	s.handle("POST /api/definitions/{vhost}", lvlAdmin, (*call).definitionsPost)
	s.handle("GET /api/parameters", lvlPolicymaker, (*call).parameters)
}

func policyJSON(p broker.Policy) api.Policy {
	def := p.Definition
	if def == nil {
		def = map[string]any{}
	}
	return api.Policy{VHost: p.VHost, Name: p.Name,
		PolicyValue: api.PolicyValue{Pattern: p.Pattern, ApplyTo: p.ApplyTo, Definition: def, Priority: p.Priority}}
}

func vhostPolicies(v *broker.VHost, op bool) []broker.Policy {
	if op {
		return v.OperatorPolicies()
	}
	return v.Policies()
}

func policyList(op bool) handler {
	return func(c *call) error {
		vs, err := c.visibleVHosts()
		if err != nil {
			return err
		}
		list := []api.Policy{}
		for _, v := range vs {
			for _, p := range vhostPolicies(v, op) {
				list = append(list, policyJSON(p))
			}
		}
		return listOf(c, list)
	}
}

func policyGet(op bool) handler {
	return func(c *call) error {
		v, err := c.vhost()
		if err != nil {
			return err
		}
		name := c.pv("name")
		for _, p := range vhostPolicies(v, op) {
			if p.Name == name {
				return c.ok(policyJSON(p))
			}
		}
		return errNotFound
	}
}

type policyBody struct {
	Pattern    *string        `json:"pattern"`
	Definition map[string]any `json:"definition"`
	Priority   any            `json:"priority"`
	ApplyTo    string         `json:"apply-to"`
}

func policyPut(op bool) handler {
	return func(c *call) error {
		v, err := c.vhost()
		if err != nil {
			return err
		}
		var b policyBody
		if err := c.decode(&b); err != nil {
			return err
		}
		if b.Pattern == nil {
			return keyMissing("pattern")
		}
		if b.Definition == nil {
			return keyMissing("definition")
		}
		prio := int64(0)
		if b.Priority != nil {
			var ok bool
			if prio, ok = jsonInt(b.Priority); !ok {
				return badRequest("Validation failed\n\npriority must be an integer\n")
			}
		}
		if b.ApplyTo == "" {
			b.ApplyTo = "all"
		}
		name := c.pv("name")
		existed := false
		for _, p := range vhostPolicies(v, op) {
			existed = existed || p.Name == name
		}
		p := broker.Policy{VHost: v.Name, Name: name, Pattern: *b.Pattern, ApplyTo: b.ApplyTo, Priority: int(prio), Definition: b.Definition}
		if op {
			err = v.SetOperatorPolicy(p)
		} else {
			err = v.SetPolicy(p)
		}
		if err != nil {
			var pe *broker.PolicyError
			if errors.As(err, &pe) {
				// RabbitMQ's reply HTML-escapes the reason.
				return badRequest("Validation failed\n\n" + htmlEscaper.Replace(pe.Reason) + "\n")
			}
			return changeFailed(err)
		}
		return c.created(!existed)
	}
}

var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

func policyDelete(op bool) handler {
	return func(c *call) error {
		v, err := c.vhost()
		if err != nil {
			return err
		}
		name := c.pv("name")
		var ok bool
		if op {
			ok, err = v.DeleteOperatorPolicyE(name)
		} else {
			ok, err = v.DeletePolicyE(name)
		}
		if err != nil {
			return changeFailed(err)
		}
		if !ok {
			return errNotFound
		}
		return c.noContent()
	}
}

// definitionsGet exports definitions as rabbitmqctl export_definitions.
// For one vhost, as RabbitMQ: no users, vhosts or permissions, and the
// queues, exchanges and bindings without their vhost.
func (c *call) definitionsGet() error {
	d := c.s.b.Definitions()
	d.ProductVersion = server.Version
	vh := c.pv("vhost")
	if vh == "" {
		return c.attach(d)
	}
	if _, err := c.vhost(); err != nil {
		return err
	}
	// Through JSON, to drop the vhost keys of the struct encodings
	// (encodeJSON: a non-finite float must not drop the whole list).
	var encErr error
	scoped := func(items any) []any {
		raw, err := encodeJSON(items)
		if err != nil {
			encErr = err
		}
		var list []map[string]any
		_ = json.Unmarshal(raw, &list)
		out := []any{}
		for _, m := range list {
			if m["vhost"] == vh {
				delete(m, "vhost")
				out = append(out, m)
			}
		}
		return out
	}
	var pols, params []any
	for _, p := range d.Policies {
		if p.VHost == vh {
			pols = append(pols, p)
		}
	}
	for _, p := range d.Parameters {
		if p.VHost == vh {
			params = append(params, p)
		}
	}
	if pols == nil {
		pols = []any{}
	}
	if params == nil {
		params = []any{}
	}
	out := map[string]any{"rabbit_version": d.RabbitVersion, "rabbitmq_version": d.RabbitMQVersion,
		"product_name": d.ProductName, "product_version": d.ProductVersion,
		"policies": pols, "parameters": params, "queues": scoped(d.Queues), "exchanges": scoped(d.Exchanges),
		"bindings": scoped(d.Bindings)}
	if encErr != nil {
		c.s.log.Error("management API: cannot encode the definitions", "err", encErr)
		return fmt.Errorf("JSON encode error: %w", encErr)
	}
	return c.attach(out)
}

// attach writes v, with a Content-Disposition when ?download= is given
// (the UI's download link).
func (c *call) attach(v any) error {
	if name := c.r.URL.Query().Get("download"); name != "" {
		c.w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	}
	return c.ok(v)
}

// definitionsPost imports definitions (all of them, or into the {vhost}).
// A vhost that an object names must exist or be in the document; vhosts
// the import creates give the importing user full permissions, as
// RabbitMQ.
func (c *call) definitionsPost() error {
	body, err := io.ReadAll(c.r.Body)
	if isBodyTooLarge(err) {
		return badRequest(errBodyTooLarge)
	}
	if err != nil {
		return badRequest("failed_to_parse_json")
	}
	var d broker.Definitions
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		return badRequest("failed_to_parse_json")
	}
	if vh := c.pv("vhost"); vh != "" {
		if _, err := c.vhost(); err != nil {
			return err
		}
		d.Users, d.VHosts, d.Permissions, d.TopicPermissions = nil, nil, nil, nil
		for i := range d.Queues {
			d.Queues[i].VHost = vh
		}
		for i := range d.Exchanges {
			d.Exchanges[i].VHost = vh
		}
		for i := range d.Bindings {
			d.Bindings[i].VHost = vh
		}
		for i := range d.Policies {
			d.Policies[i].VHost = vh
		}
		for i := range d.Parameters {
			d.Parameters[i].VHost = vh
		}
	}
	known := map[string]bool{}
	var created []string
	for _, v := range d.VHosts {
		known[v.Name] = true
		if c.s.b.VHost(v.Name) == nil {
			created = append(created, v.Name)
		}
	}
	var named []string
	for _, q := range d.Queues {
		named = append(named, q.VHost)
	}
	for _, x := range d.Exchanges {
		named = append(named, x.VHost)
	}
	for _, b := range d.Bindings {
		named = append(named, b.VHost)
	}
	for _, p := range d.Policies {
		named = append(named, p.VHost)
	}
	for _, p := range d.Permissions {
		named = append(named, p.VHost)
	}
	for _, vh := range named {
		if !known[vh] && c.s.b.VHost(vh) == nil {
			return badRequestList("no_such_vhost", vh)
		}
	}
	if err := c.s.b.ApplyDefinitions(&d); err != nil {
		return changeFailed(err)
	}
	for _, vh := range created {
		if _, has := c.s.b.Permissions(vh, c.user.Name); !has {
			_ = c.s.b.SetPermissions(vh, c.user.Name, broker.Permission{Configure: ".*", Write: ".*", Read: ".*"})
		}
	}
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}

// parameters lists the runtime parameters, as RabbitMQ's: moves
// (shovel), and, as RabbitMQ keeps them as parameters too, each vhost's
// limits (vhost-limits "limits") and operator policies.
func (c *call) parameters() error {
	list := []api.Parameter{}
	for _, comp := range []string{bridge.ShovelComponent, bridge.UpstreamComponent, bridge.UpstreamSetComponent} {
		for _, p := range c.s.links.Params(comp, "") {
			if c.canSee(p.VHost) {
				list = append(list, api.Parameter{VHost: p.VHost, Component: comp, Name: p.Name, Value: p.Value})
			}
		}
	}
	vs, err := c.visibleVHosts()
	if err != nil {
		return err
	}
	for _, v := range vs {
		if l, _ := c.s.b.VHostLimits(v.Name); len(l) > 0 {
			list = append(list, api.Parameter{VHost: v.Name, Component: "vhost-limits", Name: "limits", Value: l})
		}
		for _, p := range v.OperatorPolicies() {
			list = append(list, api.Parameter{VHost: v.Name, Component: "operator_policy", Name: p.Name, Value: policyJSON(p).PolicyValue})
		}
	}
	return listOf(c, list)
}
