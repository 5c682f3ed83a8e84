package mgmt

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/warrenmq/warren/bridge"
	"github.com/warrenmq/warren/mgmt/api"
)

// Dynamic shovels (RabbitMQ's shovel plugin, issue 24): the parameter
// (PUT /api/parameters/shovel/{vhost}/{name}) is kept by the broker with
// the user who defined it; the links manager (bridge) runs it, on this
// node, as that user. The parameter shows its URIs as given (RabbitMQ
// shows them to policymakers, password included); /api/shovels shows
// them without credentials.

func (s *Server) shovelRoutes() {
	s.linkParamRoutes(bridge.ShovelComponent, (*call).shovelPut)
	s.handle("GET /api/shovels", lvlManagement, (*call).shovelStatus)
	s.handle("GET /api/shovels/{vhost}", lvlManagement, (*call).shovelStatus)
}

func (c *call) shovelStatus() error {
	vh, err := c.pathVHost()
	if err != nil {
		return err
	}
	list := []api.Shovel{}
	for _, sh := range c.s.links.Shovels(vh) {
		if c.canSee(sh.VHost) {
			list = append(list, shovelJSON(sh))
		}
	}
	if c.clustered() {
		// Each runs on one node: the cluster's list is every node's.
		list = append(list, remoteVisible(c, func(m api.Shovel) bool { return c.canSee(m.VHost) })...)
	}
	sort.Slice(list, func(i, j int) bool {
		return list[i].VHost < list[j].VHost || list[i].VHost == list[j].VHost && list[i].Name < list[j].Name
	})
	return c.ok(list)
}

// shovelJSON is a shovel as RabbitMQ 3.10's /api/shovels shows it: the
// endpoints only while it runs, the reason while it is terminated.
func shovelJSON(sh bridge.ShovelStatus) api.Shovel {
	m := api.Shovel{Node: sh.Node, Name: sh.Name, VHost: sh.VHost, Type: sh.Type, State: sh.State,
		Timestamp: erlDateTime(sh.Since), Forwarded: sh.Forwarded}
	switch sh.State {
	case "terminated":
		m.Reason = sh.Reason
	case "running":
		d := sh.Def
		m.SrcProtocol, m.DestProtocol = "amqp091", "amqp091"
		m.SrcURI, m.DestURI = sh.SrcURI, sh.DestURI
		if d.SrcExchange != "" {
			m.SrcExchange, m.SrcExchangeKey = d.SrcExchange, &d.SrcExchangeKey
		} else {
			m.SrcQueue = d.SrcQueue
		}
		switch {
		case d.DestQueue != "":
			m.DestQueue = d.DestQueue
		default:
			if d.DestExchange != nil {
				m.DestExchange = *d.DestExchange
			}
			m.DestExchangeKey = d.DestExchangeKey
		}
	}
	return m
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
	created, err := c.s.links.PutShovel(c.user.Name, v.Name, c.pv("name"), b.Value)
	if err != nil {
		return linkError(err)
	}
	return c.created(created)
}

// linkError is a refused link definition as RabbitMQ answers it.
func linkError(err error) error {
	var ve *bridge.ValidationError
	if errors.As(err, &ve) {
		return badRequest("Validation failed\n\n" + htmlEscaper.Replace(ve.Msg) + "\n")
	}
	var re *bridge.RefusedError
	if errors.As(err, &re) {
		return notAuthorised(re.Msg)
	}
	return moveError(err)
}

// erlDateTime is t as RabbitMQ's link statuses print it (local time, the
// hour not zero-padded: "2026-12-04 0:13:56").
func erlDateTime(t time.Time) string {
	t = t.Local()
	return fmt.Sprintf("%d-%02d-%02d %d:%02d:%02d", t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second())
}
