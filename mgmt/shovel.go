package mgmt

import (
	"sort"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/mgmt/api"
)

// Moving messages with the dynamic shovel parameter that RabbitMQ's UI
// uses ("Move messages"): PUT /api/parameters/shovel/{vhost}/{name}. The
// shovels are the broker's (broker/shovel.go: StartShovel, StopShovel,
// ResumeShovels); these handlers parse, authorize as the calling user,
// call it and render.

func (s *Server) shovelRoutes() {
	s.handle("GET /api/parameters/shovel", lvlPolicymaker, (*call).shovelParams)
	s.handle("GET /api/parameters/shovel/{vhost}", lvlPolicymaker, (*call).shovelParams)
	s.handle("GET /api/parameters/shovel/{vhost}/{name}", lvlPolicymaker, (*call).shovelParamGet)
	s.handle("PUT /api/parameters/shovel/{vhost}/{name}", lvlPolicymaker, (*call).shovelPut)
	s.handle("DELETE /api/parameters/shovel/{vhost}/{name}", lvlPolicymaker, (*call).shovelDelete)
	s.handle("GET /api/shovels", lvlManagement, (*call).shovelStatus)
	s.handle("GET /api/shovels/{vhost}", lvlManagement, (*call).shovelStatus)
}

func shovelParamJSON(sh broker.ShovelStatus) api.Parameter {
	return api.Parameter{VHost: sh.VHost, Component: broker.ShovelComponent, Name: sh.Spec.Name, Value: sh.Spec.Value}
}

func (c *call) shovelParams() error {
	vh, err := c.pathVHost()
	if err != nil {
		return err
	}
	list := []api.Parameter{}
	for _, sh := range c.s.b.Shovels(vh) {
		if c.canSee(sh.VHost) {
			list = append(list, shovelParamJSON(sh))
		}
	}
	return c.ok(list)
}

func (c *call) shovelParamGet() error {
	if _, err := c.vhost(); err != nil {
		return err
	}
	sh, ok := c.s.b.Shovel(c.pv("vhost"), c.pv("name"))
	if !ok {
		return errNotFound
	}
	return c.ok(shovelParamJSON(sh))
}

func (c *call) shovelStatus() error {
	vh, err := c.pathVHost()
	if err != nil {
		return err
	}
	list := []api.Shovel{}
	for _, sh := range c.s.b.Shovels(vh) {
		if !c.canSee(sh.VHost) {
			continue
		}
		m := api.Shovel{Node: c.s.node, Name: sh.Spec.Name, VHost: sh.VHost, Type: "dynamic", State: sh.State,
			Timestamp: sh.Started.Format("2006-01-02 15:04:05"), SrcProtocol: "amqp091", DestProtocol: "amqp091",
			SrcURI: sh.Spec.Value["src-uri"], DestURI: sh.Spec.Value["dest-uri"], SrcQueue: sh.Spec.SrcQueue, MessagesMoved: sh.Moved,
			DestQueue: sh.Spec.To.Queue, Reason: sh.LastError}
		if sh.Spec.To.Queue == "" {
			m.DestExchange = sh.Spec.To.Exchange
		}
		list = append(list, m)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return c.ok(list)
}

func (c *call) shovelPut() error {
	v, err := c.vhost()
	if err != nil {
		return err
	}
	var b struct {
		Value map[string]any `json:"value"`
	}
	if err := c.decode(&b); err != nil {
		return err
	}
	if b.Value == nil {
		return keyMissing("value")
	}
	sp, err := broker.ParseShovel(v, c.pv("name"), b.Value)
	if err != nil {
		return moveError(err)
	}
	// The broker checks what a client moving the messages would need:
	// read on the source queue, write on the destination exchange, and
	// each republish as this user (also after a restart).
	s := c.s
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return &apiError{Status: 503, Err: "service_unavailable", Reason: "shutting down"}
	}
	replaced, err := s.b.StartShovel(broker.AsUser(c.user.Name), v, sp)
	if err != nil {
		return moveError(err)
	}
	return c.created(!replaced)
}

func (c *call) shovelDelete() error {
	if _, err := c.vhost(); err != nil {
		return err
	}
	if !c.s.b.StopShovel(c.pv("vhost"), c.pv("name")) {
		return errNotFound
	}
	return c.noContent()
}
