package mgmt

import (
	"encoding/json"
	"fmt"
	"github.com/warrenmq/warren/internal/erlterm"
)

// Vhost and user limits (broker/limits.go), as RabbitMQ's /api/vhost-limits
// and /api/user-limits.

func (s *Server) limitRoutes() {
	s.handle("GET /api/vhost-limits", lvlManagement, func(c *call) error {
		list := []any{}
		for _, v := range c.seenVHosts() {
			list = append(list, c.vhostLimitsJSON(v.Name)...)
		}
		return c.ok(list)
	})
	s.handle("GET /api/vhost-limits/{vhost}", lvlManagement, func(c *call) error {
		v, err := c.vhost()
		if err != nil {
			return err
		}
		return c.ok(c.vhostLimitsJSON(v.Name))
	})
	s.handle("PUT /api/vhost-limits/{vhost}/{name}", lvlAdmin, (*call).vhostLimitPut)
	s.handle("DELETE /api/vhost-limits/{vhost}/{name}", lvlAdmin, func(c *call) error {
		if err := c.s.b.ClearVHostLimit(c.pv("vhost"), c.pv("name")); err != nil {
			return errNotFound
		}
		return c.noContent()
	})
	s.handle("GET /api/user-limits", lvlManagement, func(c *call) error {
		list := []any{}
		for _, u := range c.s.b.Users() {
			list = append(list, c.userLimitsJSON(u)...)
		}
		return c.ok(list)
	})
	s.handle("GET /api/user-limits/{user}", lvlManagement, func(c *call) error {
		if c.s.b.User(c.pv("user")) == nil {
			return errNotFound
		}
		return c.ok(c.userLimitsJSON(c.pv("user")))
	})
	s.handle("PUT /api/user-limits/{user}/{name}", lvlAdmin, (*call).userLimitPut)
	s.handle("DELETE /api/user-limits/{user}/{name}", lvlAdmin, func(c *call) error {
		if err := c.s.b.ClearUserLimit(c.pv("user"), c.pv("name")); err != nil {
			return errNotFound
		}
		return c.noContent()
	})
}

// vhostLimitsJSON is a vhost's entry of /api/vhost-limits: none, or one
// with every limit it has.
func (c *call) vhostLimitsJSON(vhost string) []any {
	l, _ := c.s.b.VHostLimits(vhost)
	if len(l) == 0 {
		return []any{}
	}
	return []any{map[string]any{"vhost": vhost, "value": l}}
}

func (c *call) userLimitsJSON(user string) []any {
	l, _ := c.s.b.UserLimits(user)
	if len(l) == 0 {
		return []any{}
	}
	return []any{map[string]any{"user": user, "value": l}}
}

// limitValue reads {"value": N} of a limit PUT. RabbitMQ names a value
// that is not an integer as the Erlang term it decoded.
func (c *call) limitValue(name string) (int64, error) {
	var b struct {
		Value any `json:"value"`
	}
	if err := c.decode(&b); err != nil {
		return 0, err
	}
	if b.Value == nil {
		return 0, keyMissing("value")
	}
	if n, ok := b.Value.(json.Number); ok {
		if i, err := n.Int64(); err == nil {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%s should be a number, actually was %s", name, erlterm.JSON(b.Value))
}

func (c *call) vhostLimitPut() error {
	vh, name := c.pv("vhost"), c.pv("name")
	if c.s.b.VHost(vh) == nil {
		return errNoVHost
	}
	n, err := c.limitValue(name)
	if err != nil {
		if ae, ok := err.(*apiError); ok {
			return ae
		}
		return badRequest("Validation failed\n\n" + err.Error() + "\n")
	}
	if err := c.s.b.SetVHostLimit(vh, name, n); err != nil {
		return badRequest("Validation failed\n\n" + err.Error() + "\n")
	}
	return c.noContent()
}

func (c *call) userLimitPut() error {
	u, name := c.pv("user"), c.pv("name")
	n, err := c.limitValue(name)
	if err != nil {
		if ae, ok := err.(*apiError); ok {
			return ae
		}
		return changeFailed(err)
	}
	if c.s.b.User(u) == nil {
		return badRequestList("no_such_user", u)
	}
	if err := c.s.b.SetUserLimit(u, name, n); err != nil {
		return changeFailed(err)
	}
	return c.noContent()
}
