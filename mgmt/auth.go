package mgmt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/server"
)

// level is the least a user's tags must grant for an endpoint, as
// RabbitMQ's management tags.
type level int

const (
	lvlManagement level = iota
	lvlPolicymaker
	lvlMonitoring
	lvlAdmin
)

// call is one API request.
type call struct {
	s    *Server
	w    http.ResponseWriter
	r    *http.Request
	user *broker.User
	// local marks a request another node runs here (ServeLocal): trusted,
	// answered with this node's own objects, never fanned out.
	local bool
	parts []*overviewParts // clusterParts
	hist  *histReq         // the range parameters (history.go)

	byQueue map[[2]string][]server.ConsumerInfo // consumers by vhost and queue; see queueConsumers
	xstats  map[[2]string]server.ExchangeCounts // see exchangeCounts
}

// exchangeCounts returns the exchanges' publish counters, read once per
// request.
func (c *call) exchangeCounts() map[[2]string]server.ExchangeCounts {
	if c.xstats == nil {
		c.xstats = c.s.srv.ExchangeStats()
	}
	return c.xstats
}

// queueConsumers returns the consumers by vhost and queue, read once per
// request (a queue list shows every queue's).
func (c *call) queueConsumers() map[[2]string][]server.ConsumerInfo {
	if c.byQueue == nil {
		c.byQueue = map[[2]string][]server.ConsumerInfo{}
		for _, cs := range c.s.srv.Consumers() {
			k := [2]string{cs.VHost, cs.Queue}
			c.byQueue[k] = append(c.byQueue[k], cs)
		}
	}
	return c.byQueue
}

func (c *call) is(tag string) bool { return c.user.HasTag(tag) }

func (c *call) admin() bool { return c.is("administrator") }

// monitor reports whether the user may read everything.
func (c *call) monitor() bool { return c.admin() || c.is("monitoring") }

// policymaker reports whether the user may change policies and parameters.
func (c *call) policymaker() bool { return c.admin() || c.is("policymaker") }

// handler is an endpoint's function: it writes its reply or returns an
// error that becomes RabbitMQ's error body.
type handler func(c *call) error

// handle registers pattern (a net/http pattern with method) for users with
// at least lvl.
func (s *Server) handle(pattern string, lvl level, h handler) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		c := &call{s: s, w: w, r: r}
		var err error
		if isLocalRequest(r) {
			c.local, c.user = true, internalUser
		} else {
			err = c.authenticate(lvl)
		}
		if err == nil {
			err = h(c)
		}
		if err != nil {
			s.writeError(w, err)
		}
	})
}

func (c *call) authenticate(lvl level) error {
	name, pass, ok := c.r.BasicAuth()
	if !ok {
		// No credentials: RabbitMQ asks for them with an empty body.
		return &apiError{Status: http.StatusUnauthorized}
	}
	u, ok := c.s.b.Authenticate(name, pass)
	if !ok {
		return &apiError{Status: http.StatusUnauthorized, Err: "not_authorized", Reason: "Login failed"}
	}
	if slices.Contains(c.s.srv.Config().LoopbackUsers, name) && !loopback(c.r.RemoteAddr) {
		return &apiError{Status: http.StatusUnauthorized, Err: "not_authorized", Reason: "User can only log in via localhost"}
	}
	c.user = u
	switch {
	case !c.admin() && !c.is("monitoring") && !c.is("policymaker") && !c.is("management"):
		return notAuthorised("Not management user")
	case lvl == lvlAdmin && !c.admin():
		return notAuthorised("Not administrator user")
	case lvl == lvlMonitoring && !c.monitor():
		return notAuthorised("Not monitor user")
	case lvl == lvlPolicymaker && !c.policymaker():
		return notAuthorised("User not authorised to access object")
	}
	return nil
}

func loopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// vhost returns the {vhost} of the path; for an unknown vhost it fails
// with 404 (RabbitMQ's not_found/vhost_not_found for a PUT into it) and
// for one the user may not see with 401, as RabbitMQ.
func (c *call) vhost() (*broker.VHost, error) {
	name := c.pv("vhost")
	v := c.s.b.VHost(name)
	if v == nil {
		if c.r.Method == http.MethodPut {
			return nil, errNoVHost
		}
		return nil, errNotFound
	}
	if !c.canSee(name) {
		return nil, notAuthorised("User not authorised to access virtual host")
	}
	return v, nil
}

// pathVHost returns the {vhost} of the path, "" when the path has none;
// a vhost that is named must exist and be visible (vhost).
func (c *call) pathVHost() (string, error) {
	name := c.pv("vhost")
	if name == "" {
		return "", nil
	}
	_, err := c.vhost()
	return name, err
}

// canSee reports whether the user may see the vhost: monitoring users and
// administrators see every vhost, others those they have permissions on.
func (c *call) canSee(vhost string) bool {
	return c.monitor() || c.s.b.CanAccessVHost(c.user.Name, vhost)
}

// visibleVHosts returns the vhosts whose objects (queues, exchanges,
// bindings, policies) the user's lists show, or just the one in the path:
// as RabbitMQ, those the user has permissions on, whatever its tags.
func (c *call) visibleVHosts() ([]*broker.VHost, error) {
	if c.pv("vhost") != "" {
		v, err := c.vhost()
		if err != nil {
			return nil, err
		}
		if !c.local && !c.s.b.CanAccessVHost(c.user.Name, v.Name) {
			return nil, nil
		}
		return []*broker.VHost{v}, nil
	}
	var vs []*broker.VHost
	for _, n := range c.s.b.VHosts() {
		if c.local || c.s.b.CanAccessVHost(c.user.Name, n) {
			if v := c.s.b.VHost(n); v != nil {
				vs = append(vs, v)
			}
		}
	}
	return vs, nil
}

// seenVHosts returns every vhost the user may see (canSee).
func (c *call) seenVHosts() []*broker.VHost {
	var vs []*broker.VHost
	for _, n := range c.s.b.VHosts() {
		if c.canSee(n) {
			if v := c.s.b.VHost(n); v != nil {
				vs = append(vs, v)
			}
		}
	}
	return vs
}

// check fails when the user lacks access a to the named resource as
// RabbitMQ's API does for what it runs as a direct call into its channel
// code (declare, delete, bind, unbind, purge): 401 "Access refused.", the
// resource unnamed. kind is "queue" or "exchange"; the default exchange is
// named "amq.default".
func (c *call) check(v *broker.VHost, a broker.Access, kind, name string) error {
	if c.s.b.Check(c.user.Name, v.Name, a, name) {
		return nil
	}
	return notAuthorised("Access refused.")
}

// checkChannel is check for what RabbitMQ's API does over an AMQP channel
// of its own (/get): 401 with the channel's error text.
func (c *call) checkChannel(v *broker.VHost, a broker.Access, kind, name string) error {
	if c.s.b.Check(c.user.Name, v.Name, a, name) {
		return nil
	}
	return notAuthorised(accessRefused(v.Name, kind, name, c.user.Name))
}

// accessRefused is RabbitMQ's AMQP 403 text.
func accessRefused(vhost, kind, name, user string) string {
	return fmt.Sprintf("ACCESS_REFUSED - access to %s '%s' in vhost '%s' refused for user '%s'", kind, name, vhost, user)
}

// checkCreateArgs is broker.CheckCreateArgs for a queue or exchange that
// does not exist yet, refused as check.
func (c *call) checkCreateArgs(v *broker.VHost, kind, name string, args map[string]any) error {
	if d := c.s.b.CheckCreateArgs(c.user.Name, v.Name, kind, name, args); d != nil {
		return c.check(v, d.Access, d.Kind, d.Name)
	}
	return nil
}

// decode reads a JSON body into v. An empty body decodes as {}.
func (c *call) decode(v any) error {
	body, err := io.ReadAll(c.r.Body)
	if isBodyTooLarge(err) {
		return badRequest(errBodyTooLarge)
	}
	if err != nil {
		return badRequest("not_json")
	}
	if len(body) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		var nb *notBoolean
		if errors.As(err, &nb) {
			return &apiError{Status: http.StatusBadRequest, Err: "bad_request", Detail: []any{"not_boolean", nb.v}}
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return badRequest(fmt.Sprintf("%s: expected %s, got %s", te.Field, te.Type, te.Value))
		}
		return badRequest("not_json")
	}
	return nil
}

func (c *call) ok(v any) error {
	c.s.writeJSON(c.w, http.StatusOK, v)
	return nil
}

// created answers a PUT that made a new object (201) or changed an existing
// one (204), as RabbitMQ.
func (c *call) created(isNew bool) error {
	if isNew {
		c.w.WriteHeader(http.StatusCreated)
	} else {
		c.w.WriteHeader(http.StatusNoContent)
	}
	return nil
}

func (c *call) noContent() error {
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}

// rbool is a boolean of a request body as RabbitMQ's parse_bool takes
// it: true or false, or the strings "true" and "false" (which
// rabbitmqadmin sends, issue 11 item 16). Anything else, null included,
// is RabbitMQ's 400 {"reason":["not_boolean",Value]}.
type rbool struct {
	set, v bool
}

func (b *rbool) UnmarshalJSON(data []byte) error {
	switch string(data) {
	case "true", `"true"`:
		*b = rbool{set: true, v: true}
	case "false", `"false"`:
		*b = rbool{set: true, v: false}
	default:
		var v any
		_ = json.Unmarshal(data, &v)
		return &notBoolean{v}
	}
	return nil
}

// or returns the value, or def when the body had none.
func (b rbool) or(def bool) bool {
	if !b.set {
		return def
	}
	return b.v
}

type notBoolean struct{ v any }

func (e *notBoolean) Error() string { return fmt.Sprintf("not_boolean: %v", e.v) }
