package broker

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/warrenmq/warren/amqp"
)

// Topic permissions, as RabbitMQ's: per user, vhost and exchange, a write
// and a read regular expression. They apply to topic exchanges only: a
// publish must match write with each of its routing keys, and binding
// (or unbinding) a queue or exchange to a topic exchange must match read
// with the binding key. Without a topic permission for the exchange
// everything is allowed. "" matches only the empty key; {username} and
// {vhost} in an expression stand for the user's name and the vhost.

// TopicPermission is a user's access to the routing keys of one exchange.
type TopicPermission struct {
	Exchange string `json:"exchange"`
	Write    string `json:"write"`
	Read     string `json:"read"`
}

// DefTopicPermission is a topic permission in definitions.
type DefTopicPermission struct {
	User  string `json:"user"`
	VHost string `json:"vhost"`
	TopicPermission
}

type compiledTopic struct {
	TopicPermission
	write, read *regexp.Regexp
}

// compileTopic expands the variables of a topic permission's expression
// and compiles it, as RabbitMQ does ("" is ^$; the values are quoted).
func compileTopic(expr, user, vhost string) (*regexp.Regexp, error) {
	if expr == "" {
		expr = "^$"
	}
	expr = strings.NewReplacer("{username}", regexp.QuoteMeta(user), "{vhost}", regexp.QuoteMeta(vhost)).Replace(expr)
	return regexp.Compile(expr)
}

// SetTopicPermission sets a user's topic permission on an exchange of a
// vhost, replacing the one it had there. An invalid expression is an error.
func (b *Broker) SetTopicPermission(vhost, user string, p TopicPermission) error {
	if b.replicating() {
		if _, err := compileTopic(p.Write, user, vhost); err != nil {
			return err
		}
		if _, err := compileTopic(p.Read, user, vhost); err != nil {
			return err
		}
		return b.propose(fmt.Sprintf("topic permissions of user '%s' in vhost '%s'", user, vhost), &command{Op: opTopicSet, VHost: vhost, User: user, Topic: &p})
	}
	return b.setTopicPermissionLocal(vhost, user, p)
}

func (b *Broker) setTopicPermissionLocal(vhost, user string, p TopicPermission) error {
	ct := &compiledTopic{TopicPermission: p}
	var err error
	if ct.write, err = compileTopic(p.Write, user, vhost); err != nil {
		return err
	}
	if ct.read, err = compileTopic(p.Read, user, vhost); err != nil {
		return err
	}
	b.mu.Lock()
	u := b.users[user]
	if u == nil {
		b.mu.Unlock()
		return errNoUser
	}
	if u.topics == nil {
		u.topics = map[string]map[string]*compiledTopic{}
	}
	xs := u.topics[vhost]
	if xs == nil {
		xs = map[string]*compiledTopic{}
		u.topics[vhost] = xs
	}
	if xs[p.Exchange] == nil {
		b.topicPerms.Add(1)
	}
	xs[p.Exchange] = ct
	return b.unlockPersist(topicPermissionOp(vhost, user, p))
}

// ClearTopicPermissions removes a user's topic permissions on a vhost: the
// one on exchange, or all of them when exchange is "". It reports whether
// there was one.
func (b *Broker) ClearTopicPermissions(vhost, user, exchange string) bool {
	ok, err := b.ClearTopicPermissionsE(vhost, user, exchange)
	if err != nil {
		b.log.Error("clearing topic permissions", "vhost", vhost, "user", user, "err", err)
	}
	return ok
}

func (b *Broker) clearTopicPermissionsLocal(vhost, user, exchange string) bool {
	b.mu.Lock()
	u := b.users[user]
	var xs map[string]*compiledTopic
	if u != nil {
		xs = u.topics[vhost]
	}
	var ops []defOp
	for x := range xs {
		if exchange == "" || x == exchange {
			delete(xs, x)
			ops = append(ops, delOp(DefKindTopicPermissions, topicPermissionKey(vhost, user, x)))
		}
	}
	if len(ops) == 0 {
		b.mu.Unlock()
		return false
	}
	if len(xs) == 0 {
		delete(u.topics, vhost)
	}
	b.topicPerms.Add(-int64(len(ops)))
	b.unlockPersist(ops...) // logged
	return true
}

// TopicPermissions returns a user's topic permissions on a vhost, by
// exchange name.
func (b *Broker) TopicPermissions(vhost, user string) []TopicPermission {
	b.mu.RLock()
	defer b.mu.RUnlock()
	var out []TopicPermission
	if u := b.users[user]; u != nil {
		for _, ct := range u.topics[vhost] {
			out = append(out, ct.TopicPermission)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Exchange < out[j].Exchange })
	return out
}

// HasTopicPermissions reports whether any user has a topic permission: a
// publish checks none while there are none.
func (b *Broker) HasTopicPermissions() bool { return b.topicPerms.Load() > 0 }

// CheckTopicPublish checks a publish of m to exchange against user's
// topic permissions: on a topic exchange, its routing key and those of its
// CC and BCC headers must each match the write expression. It returns
// RabbitMQ's ACCESS_REFUSED, or nil.
func (b *Broker) CheckTopicPublish(user string, v *VHost, exchange string, m *Message) error {
	if !b.HasTopicPermissions() {
		return nil
	}
	if x := v.Exchange(exchange); x == nil || x.Kind != KindTopic {
		return nil
	}
	keys := []string{m.RoutingKey}
	if m.Props.Headers != nil {
		keys = appendKeys(keys, m.Props.Headers["CC"])
		keys = appendKeys(keys, m.Props.Headers["BCC"])
	}
	for _, k := range keys {
		if !b.CheckTopic(user, v.Name, exchange, Write, k) {
			return topicRefused(k, exchange, v.Name, user)
		}
	}
	return nil
}

// CheckTopicBind checks binding (or unbinding) with key to source, as
// the source of the binding, against user's topic permissions (read).
func (b *Broker) CheckTopicBind(user string, v *VHost, source, key string) error {
	if !b.HasTopicPermissions() {
		return nil
	}
	if x := v.Exchange(source); x == nil || x.Kind != KindTopic {
		return nil
	}
	if !b.CheckTopic(user, v.Name, source, Read, key) {
		return topicRefused(key, source, v.Name, user)
	}
	return nil
}

func topicRefused(key, exchange, vhost, user string) error {
	// RabbitMQ 3.10's wording (4.x starts it with "write" or "read").
	return amqp.Errorf(amqp.AccessRefused, "access to topic '%s' in exchange '%s' in vhost '%s' refused for user '%s'", key, exchange, vhost, user)
}

// CheckTopic reports whether user may publish (Write) with, or bind
// (Read) with, routing key key on the exchange of the vhost; call it for
// topic exchanges only.
func (b *Broker) CheckTopic(user, vhost, exchange string, a Access, key string) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	u := b.users[user]
	if u == nil {
		return false
	}
	ct := u.topics[vhost][exchange]
	if ct == nil {
		return true
	}
	if a == Write {
		return ct.write.MatchString(key)
	}
	return ct.read.MatchString(key)
}
