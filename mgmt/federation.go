package mgmt

import (
	"sort"

	"github.com/warrenmq/warren/bridge"
	"github.com/warrenmq/warren/mgmt/api"
)

// Federation (RabbitMQ's federation plugin, issue 24): upstreams and
// upstream sets are parameters kept with the user who defined them; the
// links manager (bridge) runs the links the policies ask for, on this
// node. /api/federation-links shows them as RabbitMQ 3.10 does.

func (s *Server) federationRoutes() {
	for _, comp := range []string{bridge.UpstreamComponent, bridge.UpstreamSetComponent} {
		s.linkParamRoutes(comp, func(c *call) error { return c.fedParamPut(comp) })
	}
	s.handle("GET /api/federation-links", lvlManagement, func(c *call) error { return c.federationLinks(false) })
	s.handle("GET /api/federation-links/{vhost}", lvlManagement, func(c *call) error { return c.federationLinks(false) })
	s.handle("GET /api/federation-links/state/down", lvlManagement, func(c *call) error { return c.federationLinks(true) })
	s.handle("GET /api/federation-links/{vhost}/state/down", lvlManagement, func(c *call) error { return c.federationLinks(true) })
	s.handle("DELETE /api/federation-links/vhost/{vhost}/{id}/{node}/restart", lvlPolicymaker, (*call).federationRestart)
}

// linkParamRoutes serves the parameters of a links component (shovel,
// federation-upstream, federation-upstream-set): list, get and delete
// alike, put by the component's own handler (its validation).
func (s *Server) linkParamRoutes(comp string, put func(*call) error) {
	base := "/api/parameters/" + comp
	s.handle("GET "+base, lvlPolicymaker, func(c *call) error { return c.linkParams(comp) })
	s.handle("GET "+base+"/{vhost}", lvlPolicymaker, func(c *call) error { return c.linkParams(comp) })
	s.handle("GET "+base+"/{vhost}/{name}", lvlPolicymaker, func(c *call) error { return c.linkParamGet(comp) })
	s.handle("PUT "+base+"/{vhost}/{name}", lvlPolicymaker, put)
	s.handle("DELETE "+base+"/{vhost}/{name}", lvlPolicymaker, func(c *call) error { return c.linkParamDelete(comp) })
}

func (c *call) linkParams(comp string) error {
	vh, err := c.pathVHost()
	if err != nil {
		return err
	}
	list := []api.Parameter{}
	for _, p := range c.s.links.Params(comp, vh) {
		if c.canSee(p.VHost) {
			list = append(list, api.Parameter{VHost: p.VHost, Component: comp, Name: p.Name, Value: p.Value})
		}
	}
	return c.ok(list)
}

func (c *call) linkParamGet(comp string) error {
	if _, err := c.vhost(); err != nil {
		return err
	}
	p, ok := c.s.links.Param(comp, c.pv("vhost"), c.pv("name"))
	if !ok {
		return errNotFound
	}
	return c.ok(api.Parameter{VHost: p.VHost, Component: comp, Name: p.Name, Value: p.Value})
}

func (c *call) fedParamPut(comp string) error {
	v, err := c.vhost()
	if err != nil {
		return err
	}
	var b struct {
		Value any `json:"value"`
	}
	if err := c.decode(&b); err != nil {
		return err
	}
	if b.Value == nil {
		return keyMissing("value")
	}
	created, err := c.s.links.PutUpstream(comp, c.user.Name, v.Name, c.pv("name"), b.Value)
	if err != nil {
		return linkError(err)
	}
	return c.created(created)
}

func (c *call) linkParamDelete(comp string) error {
	if _, err := c.vhost(); err != nil {
		return err
	}
	ok, err := c.s.links.DeleteParam(comp, c.pv("vhost"), c.pv("name"))
	if err != nil {
		return amqpError(err)
	}
	if !ok {
		return errNotFound
	}
	return c.noContent()
}

// federationLinks lists the links; down: only those neither starting
// nor running (RabbitMQ's /state/down).
func (c *call) federationLinks(down bool) error {
	vh, err := c.pathVHost()
	if err != nil {
		return err
	}
	list := []api.FederationLink{}
	for _, l := range c.s.links.FederationLinks(vh) {
		if !c.canSee(l.VHost) {
			continue
		}
		m := api.FederationLink{Node: l.Node, Exchange: l.Exchange, UpstreamExchange: l.UpstreamExchange, Type: l.Type,
			Queue: l.Queue, UpstreamQueue: l.UpstreamQueue, ConsumerTag: l.ConsumerTag,
			VHost: l.VHost, Upstream: l.Upstream, ID: l.ID, Status: l.Status, URI: l.URI, Timestamp: erlDateTime(l.Since)}
		if l.Status == "running" {
			m.LocalConnection = l.LocalConnection
		}
		if l.Status == "error" {
			m.Error = l.Error
		}
		list = append(list, m)
	}
	if c.clustered() {
		list = append(list, remoteVisible(c, func(m api.FederationLink) bool { return c.canSee(m.VHost) })...)
	}
	if down {
		up := list[:0]
		for _, l := range list {
			if l.Status != "starting" && l.Status != "running" {
				up = append(up, l)
			}
		}
		list = up
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].VHost < list[j].VHost })
	return c.ok(list)
}

// federationRestart restarts a link (RabbitMQ's DELETE
// /api/federation-links/vhost/{vhost}/{id}/{node}/restart): here, or on
// the node that runs it.
func (c *call) federationRestart() error {
	v, err := c.vhost()
	if err != nil {
		return err
	}
	if node := c.pv("node"); node != c.s.node {
		if !c.clustered() {
			return errNotFound
		}
		for _, r := range c.fanOut("DELETE", c.escapedPath(), nil) {
			if r.node == node && r.err == nil && r.status == 204 {
				return c.noContent()
			}
		}
		return errNotFound
	}
	if !c.s.links.RestartLink(v.Name, c.pv("id")) {
		return errNotFound
	}
	return c.noContent()
}
