package mgmt

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/mgmt/api"
)

func (s *Server) accessRoutes() {
	s.handle("GET /api/vhosts", lvlManagement, (*call).vhosts)
	s.handle("GET /api/vhosts/{vhost}", lvlManagement, (*call).vhostGet)
	s.handle("PUT /api/vhosts/{vhost}", lvlAdmin, (*call).vhostPut)
	s.handle("DELETE /api/vhosts/{vhost}", lvlAdmin, (*call).vhostDelete)
	s.handle("GET /api/vhosts/{vhost}/permissions", lvlAdmin, (*call).vhostPermissions)

	s.handle("GET /api/users", lvlAdmin, (*call).users)
	s.handle("GET /api/users/without-permissions", lvlAdmin, (*call).usersWithoutPermissions)
	s.handle("GET /api/users/{user}", lvlAdmin, (*call).userGet)
	s.handle("PUT /api/users/{user}", lvlAdmin, (*call).userPut)
	s.handle("DELETE /api/users/{user}", lvlAdmin, (*call).userDelete)
	s.handle("POST /api/users/bulk-delete", lvlAdmin, (*call).usersBulkDelete)
	s.handle("GET /api/users/{user}/permissions", lvlAdmin, (*call).userPermissions)

	s.handle("GET /api/permissions", lvlAdmin, (*call).permissions)
	s.handle("GET /api/topic-permissions", lvlAdmin, func(c *call) error { return listOf(c, c.topicPermissionsWhere("", "")) })
	s.handle("GET /api/users/{user}/topic-permissions", lvlAdmin, func(c *call) error {
		if c.s.b.User(c.pv("user")) == nil {
			return errNotFound
		}
		return c.ok(c.topicPermissionsWhere("", c.pv("user")))
	})
	s.handle("GET /api/vhosts/{vhost}/topic-permissions", lvlAdmin, func(c *call) error {
		v, err := c.vhost()
		if err != nil {
			return err
		}
		return c.ok(c.topicPermissionsWhere(v.Name, ""))
	})
	s.handle("GET /api/topic-permissions/{vhost}/{user}", lvlAdmin, (*call).topicPermissionGet)
	s.handle("PUT /api/topic-permissions/{vhost}/{user}", lvlAdmin, (*call).topicPermissionPut)
	s.handle("DELETE /api/topic-permissions/{vhost}/{user}", lvlAdmin, (*call).topicPermissionDelete)
	s.handle("GET /api/global-parameters", lvlAdmin, func(c *call) error {
		return c.ok([]any{map[string]any{"name": "cluster_name", "value": c.s.clusterName()}})
	})
	s.handle("GET /api/permissions/{vhost}/{user}", lvlAdmin, (*call).permissionGet)
	s.handle("PUT /api/permissions/{vhost}/{user}", lvlAdmin, (*call).permissionPut)
	s.handle("DELETE /api/permissions/{vhost}/{user}", lvlAdmin, (*call).permissionDelete)
}

func (c *call) vhostJSON(v *broker.VHost) api.VHost {
	var ready, unacked int
	qs := v.Queues()
	state := map[string]string{c.s.node: "running"}
	if c.clustered() {
		// Each node's counts of the queues homed on it (overviewParts);
		// a node that does not answer counts none.
		state = map[string]string{}
		for _, n := range c.s.cluster().Nodes() {
			state[n.Name] = "running"
			if !n.Running {
				state[n.Name] = "nodedown"
			}
		}
		for _, p := range c.clusterParts() {
			if ov := p.VHosts[v.Name]; ov != nil {
				ready += ov.Ready
				unacked += ov.Unacked
			}
		}
	} else {
		for _, q := range qs {
			st := q.Stats()
			ready += st.Ready
			unacked += st.Unacked
		}
	}
	meta := v.Meta()
	desc, tags := meta.Description, meta.Tags
	if desc == "" && v.Name == "/" {
		desc = "Default virtual host"
	}
	if tags == nil {
		tags = []string{}
	}
	m := api.VHost{Name: v.Name, Description: desc, Tags: tags, DefaultQueueType: "undefined",
		Metadata: api.VHostMetadata{Description: desc, Tags: tags}, ClusterState: state}
	key := vhostKey(v.Name)
	var rows [2][][]uint64 // by family: msg_rates, data_rates
	det := func(f string) api.Details {
		rate := c.s.hist.rate(key, f)
		i := kindVHost.index[f]
		fam := kindVHost.family[i]
		if !c.hasRange(fam) {
			return details(rate)
		}
		r := &rows[0]
		if fam == famDataRates {
			r = &rows[1]
		}
		if *r == nil {
			*r = c.sumRows([]string{key}, fam, len(kindVHost.fields))
		}
		return c.detSum(*r, kindVHost, f, rate)
	}
	// As RabbitMQ, whose vhost message counts are its queues' statistics:
	// a vhost without queues has none (rabbitmqadmin list vhosts shows an
	// empty cell, not 0).
	if len(qs) > 0 {
		msgs, dm, dr, du := ready+unacked, det("messages"), det("messages_ready"), det("messages_unacknowledged")
		m.Messages, m.MessagesDetails = &msgs, &dm
		m.MessagesReady, m.MessagesReadyDetails = &ready, &dr
		m.MessagesUnacknowledged, m.MessagesUnacknowledgedDetails = &unacked, &du
	}
	// message_stats once its queues saw traffic, recv_oct and send_oct
	// while it has connections, as RabbitMQ's (its message_stats are the
	// vhost's channels'; Warren's its queues': what was published to
	// them, delivered and acknowledged from them). With their history
	// when asked (issue 15).
	vc := counters{}
	for _, q := range qs {
		if q.ServedHere() {
			for f, n := range queueCounters(q.Stats()) {
				vc[f] += n
			}
		}
	}
	if c.clustered() {
		for _, p := range c.clusterParts()[1:] { // the other nodes' queues
			if ov := p.VHosts[v.Name]; ov != nil {
				for f, n := range ov.Stats {
					vc[f] += n
				}
			}
		}
	}
	if vc["publish"]+vc["deliver_get"]+vc["get_empty"] > 0 {
		ms := api.MessageStats{}
		for _, f := range kindVHost.fields {
			if kindVHost.family[kindVHost.index[f]] == famMsgRates && !strings.HasPrefix(f, "messages") {
				ms[f], ms[f+"_details"] = vc[f], det(f)
			}
		}
		m.MessageStats = ms
	}
	var recv, send uint64
	nconn := 0
	for _, ci := range c.s.srv.Connections() {
		if ci.VHost == v.Name {
			recv, send, nconn = recv+ci.RecvOct, send+ci.SendOct, nconn+1
		}
	}
	if nconn > 0 {
		dr, ds := det("recv_oct"), det("send_oct")
		m.RecvOct, m.RecvOctDetails = &recv, &dr
		m.SendOct, m.SendOctDetails = &send, &ds
	}
	return m
}

func (c *call) vhosts() error {
	if err := c.parseHistory(true, false); err != nil {
		return err
	}
	list := []api.VHost{}
	for _, v := range c.seenVHosts() {
		list = append(list, c.vhostJSON(v))
	}
	return listOf(c, list)
}

func (c *call) vhostGet() error {
	v, err := c.vhost()
	if err != nil {
		return err
	}
	if err := c.parseHistory(false, false); err != nil {
		return err
	}
	return c.ok(c.vhostJSON(v))
}

func (c *call) vhostPut() error {
	name := c.pv("vhost")
	var body struct {
		Description *string `json:"description"`
		Tags        any     `json:"tags"`
		// Tracing is checked as RabbitMQ's (not_boolean) and ignored:
		// Warren has no firehose tracer.
		Tracing rbool `json:"tracing"`
	}
	if err := c.decode(&body); err != nil {
		return err
	}
	existed := c.s.b.VHost(name) != nil
	v, err := c.s.b.AddVHostE(name)
	if err != nil {
		return changeFailed(err)
	}
	// As RabbitMQ, a PUT sets the metadata it carries, and resets what it
	// leaves out.
	var m broker.VHostMeta
	if body.Description != nil {
		m.Description = *body.Description
	}
	if body.Tags != nil {
		tags, ok := parseTags(body.Tags)
		if !ok {
			return badRequest("tags must be a string or a list of strings")
		}
		m.Tags = tags
	}
	if cur := v.Meta(); cur.Description != m.Description || !slices.Equal(cur.Tags, m.Tags) {
		if _, err := c.s.b.SetVHostMetaE(name, m); err != nil {
			return changeFailed(err)
		}
	}
	if !existed {
		// As RabbitMQ: the creating user gets full permissions.
		_ = c.s.b.SetPermissions(name, c.user.Name, broker.Permission{Configure: ".*", Write: ".*", Read: ".*"})
	}
	return c.created(!existed)
}

func (c *call) vhostDelete() error {
	name := c.pv("vhost")
	if c.s.b.VHost(name) == nil {
		return errNotFound
	}
	for _, ci := range c.s.srv.Connections() {
		if ci.VHost == name {
			c.s.srv.CloseConnection(ci.Name, fmt.Sprintf("vhost '%s' is deleted", name))
		}
	}
	if _, err := c.s.b.DeleteVHostE(name); err != nil {
		return changeFailed(err)
	}
	return c.noContent()
}

func permJSON(vhost, user string, p broker.Permission) api.Permission {
	return api.Permission{User: user, VHost: vhost, Configure: p.Configure, Write: p.Write, Read: p.Read}
}

// eachUserVHost calls fn for every user and vhost, or those of one vhost
// or user when given, users first.
func (c *call) eachUserVHost(vhost, user string, fn func(vh, u string)) {
	for _, u := range c.s.b.Users() {
		if user != "" && u != user {
			continue
		}
		for _, vh := range c.s.b.VHosts() {
			if vhost == "" || vh == vhost {
				fn(vh, u)
			}
		}
	}
}

// permissionsWhere lists permissions, optionally of one vhost or user.
func (c *call) permissionsWhere(vhost, user string) []api.Permission {
	list := []api.Permission{}
	c.eachUserVHost(vhost, user, func(vh, u string) {
		if p, ok := c.s.b.Permissions(vh, u); ok {
			list = append(list, permJSON(vh, u, p))
		}
	})
	return list
}

// topicPermissionsWhere lists topic permissions, optionally of one vhost
// or user.
func (c *call) topicPermissionsWhere(vhost, user string) []api.TopicPermission {
	list := []api.TopicPermission{}
	c.eachUserVHost(vhost, user, func(vh, u string) {
		for _, p := range c.s.b.TopicPermissions(vh, u) {
			list = append(list, api.TopicPermission{User: u, VHost: vh, Exchange: p.Exchange, Write: p.Write, Read: p.Read})
		}
	})
	return list
}

// topicPermissionGet lists the topic permissions of a user in a vhost
// (one per exchange); 404 when there are none.
func (c *call) topicPermissionGet() error {
	list := c.topicPermissionsWhere(c.pv("vhost"), c.pv("user"))
	if len(list) == 0 || c.s.b.VHost(c.pv("vhost")) == nil {
		return errNotFound
	}
	return c.ok(list)
}

// topicPermissionPut sets the topic permission of a user on one exchange
// of a vhost: 201 when the user had none there yet, as RabbitMQ.
func (c *call) topicPermissionPut() error {
	vh, u := c.pv("vhost"), c.pv("user")
	var b struct {
		Exchange *string `json:"exchange"`
		Write    *string `json:"write"`
		Read     *string `json:"read"`
	}
	if err := c.decode(&b); err != nil {
		return err
	}
	if err := firstMissing([]string{"exchange", "write", "read"}, b.Exchange, b.Write, b.Read); err != nil {
		return err
	}
	if c.s.b.VHost(vh) == nil || c.s.b.User(u) == nil {
		return badRequest("vhost_or_user_not_found")
	}
	existed := len(c.s.b.TopicPermissions(vh, u)) > 0
	if err := c.s.b.SetTopicPermission(vh, u, broker.TopicPermission{Exchange: *b.Exchange, Write: *b.Write, Read: *b.Read}); err != nil {
		return changeFailed(err)
	}
	return c.created(!existed)
}

// topicPermissionDelete removes every topic permission of a user in a
// vhost.
func (c *call) topicPermissionDelete() error {
	if c.s.b.VHost(c.pv("vhost")) == nil {
		return errNotFound
	}
	if ok, err := c.s.b.ClearTopicPermissionsE(c.pv("vhost"), c.pv("user"), ""); err != nil {
		return changeFailed(err)
	} else if !ok {
		return errNotFound
	}
	return c.noContent()
}

func (c *call) vhostPermissions() error {
	v, err := c.vhost()
	if err != nil {
		return err
	}
	return c.ok(c.permissionsWhere(v.Name, ""))
}

func userJSON(u *broker.User) api.User {
	tags := u.Tags
	if tags == nil {
		tags = []string{}
	}
	limits := map[string]int64{}
	for k, n := range u.Limits {
		limits[k] = n
	}
	return api.User{Name: u.Name, PasswordHash: u.PasswordHash, HashingAlgorithm: broker.HashingSHA256,
		Tags: tags, Limits: limits}
}

func (c *call) users() error {
	list := []api.User{}
	for _, n := range c.s.b.Users() {
		if u := c.s.b.User(n); u != nil {
			list = append(list, userJSON(u))
		}
	}
	return listOf(c, list)
}

func (c *call) usersWithoutPermissions() error {
	list := []api.User{}
	for _, n := range c.s.b.Users() {
		if u := c.s.b.User(n); u != nil && len(c.permissionsWhere("", n)) == 0 {
			list = append(list, userJSON(u))
		}
	}
	return c.ok(list)
}

func (c *call) userGet() error {
	u := c.s.b.User(c.pv("user"))
	if u == nil {
		return errNotFound
	}
	return c.ok(userJSON(u))
}

type userBody struct {
	Password         *string `json:"password"`
	PasswordHash     *string `json:"password_hash"`
	HashingAlgorithm string  `json:"hashing_algorithm"`
	Tags             any     `json:"tags"`
}

// parseTags takes RabbitMQ's tags: a comma-separated string or a list.
func parseTags(v any) ([]string, bool) {
	var out []string
	switch t := v.(type) {
	case string:
		for _, p := range strings.Split(t, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	case []any:
		for _, e := range t {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
	default:
		return nil, false
	}
	return out, true
}

func (c *call) userPut() error {
	name := c.pv("user")
	var b userBody
	if err := c.decode(&b); err != nil {
		return err
	}
	if b.Tags == nil {
		return badRequest("tags_not_present")
	}
	tags, ok := parseTags(b.Tags)
	if !ok {
		return badRequest("tags must be a string or a list of strings")
	}
	if b.PasswordHash != nil {
		if _, err := base64.StdEncoding.DecodeString(*b.PasswordHash); err != nil {
			return badRequestList("not_base64", *b.PasswordHash)
		}
	}
	existed := c.s.b.User(name) != nil
	var err error
	switch {
	case b.Password != nil:
		err = c.s.b.PutUser(name, *b.Password, tags)
	case b.PasswordHash != nil:
		if b.HashingAlgorithm != "" && b.HashingAlgorithm != broker.HashingSHA256 {
			return badRequest(fmt.Sprintf("unsupported hashing algorithm '%s'", b.HashingAlgorithm))
		}
		err = c.s.b.PutUserHash(name, *b.PasswordHash, tags)
	case existed:
		u := c.s.b.User(name)
		err = c.s.b.PutUserHash(name, u.PasswordHash, tags)
	default:
		// No password: the user can only authenticate by other means.
		err = c.s.b.PutUserHash(name, "", tags)
	}
	if err != nil {
		return changeFailed(err)
	}
	return c.created(!existed)
}

func (c *call) userDelete() error {
	if ok, err := c.s.b.DeleteUserE(c.pv("user")); err != nil {
		return changeFailed(err)
	} else if !ok {
		return errNotFound
	}
	return c.noContent()
}

func (c *call) usersBulkDelete() error {
	var b struct {
		Users []string `json:"users"`
	}
	if err := c.decode(&b); err != nil {
		return err
	}
	for _, u := range b.Users {
		if _, err := c.s.b.DeleteUserE(u); err != nil {
			return changeFailed(err)
		}
	}
	return c.noContent()
}

func (c *call) userPermissions() error {
	u := c.pv("user")
	if c.s.b.User(u) == nil {
		return errNotFound
	}
	return c.ok(c.permissionsWhere("", u))
}

func (c *call) permissions() error { return listOf(c, c.permissionsWhere("", "")) }

func (c *call) permissionGet() error {
	vh, u := c.pv("vhost"), c.pv("user")
	p, ok := c.s.b.Permissions(vh, u)
	if !ok {
		return errNotFound
	}
	return c.ok(permJSON(vh, u, p))
}

func (c *call) permissionPut() error {
	vh, u := c.pv("vhost"), c.pv("user")
	var b struct {
		Configure *string `json:"configure"`
		Write     *string `json:"write"`
		Read      *string `json:"read"`
	}
	if err := c.decode(&b); err != nil {
		return err
	}
	if c.s.b.VHost(vh) == nil || c.s.b.User(u) == nil {
		return badRequest("vhost_or_user_not_found")
	}
	if err := firstMissing([]string{"configure", "write", "read"}, b.Configure, b.Write, b.Read); err != nil {
		return err
	}
	_, existed := c.s.b.Permissions(vh, u)
	if err := c.s.b.SetPermissions(vh, u, broker.Permission{Configure: *b.Configure, Write: *b.Write, Read: *b.Read}); err != nil {
		return changeFailed(err)
	}
	return c.created(!existed)
}

func (c *call) permissionDelete() error {
	vh, u := c.pv("vhost"), c.pv("user")
	if _, ok := c.s.b.Permissions(vh, u); !ok {
		return errNotFound
	}
	if err := c.s.b.ClearPermissions(vh, u); err != nil {
		return changeFailed(err)
	}
	return c.noContent()
}
