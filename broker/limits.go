package broker

import (
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/warrenmq/warren/amqp"
)

// Limits, as RabbitMQ's: a vhost's max-connections and max-queues, a
// user's max-connections and max-channels. A negative value is no limit.
// The server enforces the connection and channel limits (it counts those);
// the queue limit is enforced here, when a queue is created.

// Limit names.
const (
	LimitMaxConnections = "max-connections"
	LimitMaxQueues      = "max-queues"
	LimitMaxChannels    = "max-channels"
)

// VHostLimitNames and UserLimitNames are the limits each takes.
var (
	VHostLimitNames = []string{LimitMaxConnections, LimitMaxQueues}
	UserLimitNames  = []string{LimitMaxChannels, LimitMaxConnections}
)

// vhostLimits are a vhost's limits; -1 is none. Read without locks on the
// paths that enforce them.
type vhostLimits struct {
	maxConns, maxQueues atomic.Int64
}

func (l *vhostLimits) init() { l.maxConns.Store(-1); l.maxQueues.Store(-1) }

// set applies the limits of m (those it lacks are none).
func (l *vhostLimits) set(m map[string]int64) {
	l.init()
	for k, n := range m {
		switch k {
		case LimitMaxConnections:
			l.maxConns.Store(max(n, -1))
		case LimitMaxQueues:
			l.maxQueues.Store(max(n, -1))
		}
	}
}

// limitsOf reads limits from their JSON form: an object of numbers (other
// forms, such as an empty list, hold none).
func limitsOf(raw any) map[string]int64 {
	obj, ok := raw.(map[string]any)
	if !ok {
		return nil
	}
	out := map[string]int64{}
	for k, v := range obj {
		if n, ok := policyInt(v); ok {
			out[k] = n
		}
	}
	return out
}

// errUnknownLimit is the error for a limit a vhost or user does not take.
func errUnknownLimit(name string, value int64, what string) error {
	return fmt.Errorf("Unrecognised terms [{<<\"%s\">>,%d}] in %s", name, value, what)
}

// VHostLimits returns a vhost's limits; false if there is no such vhost.
func (b *Broker) VHostLimits(vhost string) (map[string]int64, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	v := b.vhosts[vhost]
	if v == nil {
		return nil, false
	}
	return maps.Clone(v.limitMap), true
}

// SetVHostLimit sets (or, with a negative value, keeps as no limit) one of
// a vhost's limits. It fails for an unknown vhost (ErrNoVHost) or limit.
func (b *Broker) SetVHostLimit(vhost, name string, value int64) error {
	if !slices.Contains(VHostLimitNames, name) {
		return errUnknownLimit(name, value, "limits")
	}
	if b.replicating() {
		return b.propose(fmt.Sprintf("limits of vhost '%s'", vhost), &command{Op: opVLimitSet, VHost: vhost, Limit: name, Value: value})
	}
	return b.updateVHostLimits(vhost, func(m map[string]int64) { m[name] = value })
}

func (b *Broker) setVHostLimitLocal(vhost, name string, value int64) error {
	if !slices.Contains(VHostLimitNames, name) {
		return errUnknownLimit(name, value, "limits")
	}
	return b.updateVHostLimits(vhost, func(m map[string]int64) { m[name] = value })
}

// ClearVHostLimit removes one of a vhost's limits.
func (b *Broker) ClearVHostLimit(vhost, name string) error {
	if b.replicating() {
		return b.propose(fmt.Sprintf("limits of vhost '%s'", vhost), &command{Op: opVLimitClear, VHost: vhost, Limit: name})
	}
	return b.updateVHostLimits(vhost, func(m map[string]int64) { delete(m, name) })
}

// ErrNoVHost is returned for a vhost that does not exist.
var ErrNoVHost = brokerError("no such vhost")

func (b *Broker) updateVHostLimits(vhost string, f func(map[string]int64)) error {
	b.mu.Lock()
	v := b.vhosts[vhost]
	if v == nil {
		b.mu.Unlock()
		return ErrNoVHost
	}
	m := maps.Clone(v.limitMap)
	if m == nil {
		m = map[string]int64{}
	}
	f(m)
	v.limitMap = m
	v.limits.set(m)
	return b.unlockPersist(putOp(DefKindVHosts, vhost, defVHost(vhost, v.meta, m)))
}

// UserLimits returns a user's limits; false if there is no such user.
func (b *Broker) UserLimits(user string) (map[string]int64, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	u := b.users[user]
	if u == nil {
		return nil, false
	}
	return maps.Clone(u.Limits), true
}

// UserLimit returns one of a user's limits; false when it has none.
func (b *Broker) UserLimit(user, name string) (int64, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if u := b.users[user]; u != nil {
		n, ok := u.Limits[name]
		return n, ok
	}
	return 0, false
}

// SetUserLimit sets one of a user's limits; it fails for an unknown user
// (errNoUser) or limit.
func (b *Broker) SetUserLimit(user, name string, value int64) error {
	if !slices.Contains(UserLimitNames, name) {
		return errUnknownLimit(name, value, "user-limits")
	}
	if b.replicating() {
		return b.propose(fmt.Sprintf("limits of user '%s'", user), &command{Op: opULimitSet, User: user, Limit: name, Value: value})
	}
	return b.updateUserLimits(user, func(m map[string]int64) { m[name] = value })
}

func (b *Broker) setUserLimitLocal(user, name string, value int64) error {
	if !slices.Contains(UserLimitNames, name) {
		return errUnknownLimit(name, value, "user-limits")
	}
	return b.updateUserLimits(user, func(m map[string]int64) { m[name] = value })
}

// ClearUserLimit removes one of a user's limits.
func (b *Broker) ClearUserLimit(user, name string) error {
	if b.replicating() {
		return b.propose(fmt.Sprintf("limits of user '%s'", user), &command{Op: opULimitClear, User: user, Limit: name})
	}
	return b.updateUserLimits(user, func(m map[string]int64) { delete(m, name) })
}

func (b *Broker) updateUserLimits(user string, f func(map[string]int64)) error {
	b.mu.Lock()
	u := b.users[user]
	if u == nil {
		b.mu.Unlock()
		return errNoUser
	}
	m := maps.Clone(u.Limits)
	if m == nil {
		m = map[string]int64{}
	}
	f(m)
	u.Limits = m // copied on write: User copies share it
	return b.unlockPersist(userOp(u))
}

// MaxConnections returns the vhost's connection limit, -1 for none.
func (v *VHost) MaxConnections() int64 { return v.limits.maxConns.Load() }

// checkQueueLimitLocked refuses a new queue over the vhost's max-queues;
// v.mu is held.
func (v *VHost) checkQueueLimitLocked(name string) error {
	if n := v.limits.maxQueues.Load(); n >= 0 && int64(len(v.queues)) >= n {
		return amqp.Errorf(amqp.PreconditionFailed, "cannot declare queue '%s': queue limit in vhost '%s' (%d) is reached", name, v.Name, n)
	}
	return nil
}
