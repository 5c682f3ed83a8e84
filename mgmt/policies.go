package mgmt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/warrenmq/warren/broker"
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

func policyJSON(p broker.Policy) map[string]any {
	def := p.Definition
	if def == nil {
		def = map[string]any{}
	}
	return map[string]any{"vhost": p.VHost, "name": p.Name, "pattern": p.Pattern, "apply-to": p.ApplyTo,
		"definition": def, "priority": p.Priority}
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
		list := []map[string]any{}
		for _, v := range vs {
			for _, p := range vhostPolicies(v, op) {
				list = append(list, policyJSON(p))
			}
		}
		return c.list(list)
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
			return badRequest("[{key_missing,pattern}]")
		}
		if b.Definition == nil {
			return badRequest("[{key_missing,definition}]")
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
				return badRequest("Validation failed\n\n" + pe.Reason + "\n")
			}
			return badRequest(err.Error())
		}
		return c.created(!existed)
	}
}

func policyDelete(op bool) handler {
	return func(c *call) error {
		v, err := c.vhost()
		if err != nil {
			return err
		}
		name := c.pv("name")
		var ok bool
		if op {
			ok = v.DeleteOperatorPolicy(name)
		} else {
			ok = v.DeletePolicy(name)
		}
		if !ok {
			return errNotFound
		}
		return c.noContent()
	}
}

// definitionsGet exports definitions as rabbitmqctl export_definitions
// (for one vhost: without users, vhosts and permissions, and without the
// vhost fields, as RabbitMQ).
func (c *call) definitionsGet() error {
	d := c.s.b.Definitions()
	if vh := c.pv("vhost"); vh != "" {
		if _, err := c.vhost(); err != nil {
			return err
		}
		out := map[string]any{"rabbit_version": d.RabbitVersion, "rabbitmq_version": d.RabbitMQVersion}
		var pols, qs, xs, bs, params []any
		for _, p := range d.Policies {
			if p.VHost == vh {
				p.VHost = ""
				pols = append(pols, p)
			}
		}
		for _, q := range d.Queues {
			if q.VHost == vh {
				q.VHost = ""
				qs = append(qs, q)
			}
		}
		for _, x := range d.Exchanges {
			if x.VHost == vh {
				x.VHost = ""
				xs = append(xs, x)
			}
		}
		for _, b := range d.Bindings {
			if b.VHost == vh {
				b.VHost = ""
				bs = append(bs, b)
			}
		}
		for _, p := range d.Parameters {
			if p.VHost == vh {
				params = append(params, p)
			}
		}
		orEmpty := func(s []any) []any {
			if s == nil {
				return []any{}
			}
			return s
		}
		out["policies"], out["queues"], out["exchanges"], out["bindings"], out["parameters"] = orEmpty(pols), orEmpty(qs), orEmpty(xs), orEmpty(bs), orEmpty(params)
		return c.attach(out)
	}
	return c.attach(d)
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
// The whole document is validated before anything changes.
func (c *call) definitionsPost() error {
	body, err := io.ReadAll(io.LimitReader(c.r.Body, 256<<20))
	if err != nil {
		return badRequest("not_json")
	}
	var d broker.Definitions
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		return badRequest("not_json")
	}
	if vh := c.pv("vhost"); vh != "" {
		if _, err := c.vhost(); err != nil {
			return err
		}
		d.Users, d.VHosts, d.Permissions = nil, nil, nil
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
	if err := c.s.b.ApplyDefinitions(&d); err != nil {
		return badRequest(err.Error())
	}
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}

func (c *call) parameters() error {
	list := []map[string]any{}
	for _, sh := range c.s.shovelList("") {
		list = append(list, sh.paramJSON())
	}
	return c.ok(list)
}
