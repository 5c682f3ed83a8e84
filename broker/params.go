package broker

import (
	"fmt"
	"sort"
	"strings"
)

// Runtime parameters that the broker runs (the shovel moves of
// shovel.go): kept in the definitions store so that they resume
// after a restart, deleted with their vhost. They are not part of
// definitions exports: a move is an operation in progress, not a
// definition (and RabbitMQ without the shovel plugin refuses to import
// one).

func paramKey(vhost, component, name string) string {
	return defKey(vhost, component, name)
}

// SetParameter stores a runtime parameter, replacing one of the same
// component and name in the vhost; ErrNoVHost for an unknown vhost.
func (b *Broker) SetParameter(vhost, component, name string, value map[string]any) error {
	return b.setParameter(vhost, component, name, value, "")
}

// SetParameterAs is SetParameter kept with the user the parameter acts
// for (a shovel's, a federation upstream's: their links run as that user
// here).
func (b *Broker) SetParameterAs(vhost, component, name string, value any, user string) error {
	return b.setParameter(vhost, component, name, value, user)
}

// setParameter is SetParameter kept with the user it acts for (a
// shovel's).
func (b *Broker) setParameter(vhost, component, name string, value any, user string) error {
	if b.replicating() {
		return b.propose(fmt.Sprintf("parameter '%s' of component '%s' in vhost '%s'", name, component, vhost),
			&command{Op: opParamSet, VHost: vhost, Component: component, Name: name, Param: value, User: user})
	}
	return b.setParameterLocal(vhost, component, name, value, user)
}

func (b *Broker) setParameterLocal(vhost, component, name string, value any, user string) error {
	b.mu.Lock()
	if b.vhosts[vhost] == nil {
		b.mu.Unlock()
		return ErrNoVHost
	}
	p := DefParameter{VHost: vhost, Component: component, Name: name, Value: cloneJSON(value), User: user}
	if b.params == nil {
		b.params = map[string]DefParameter{}
	}
	k := paramKey(vhost, component, name)
	b.params[k] = p
	return b.unlockPersist(putOp(DefKindParameters, k, p))
}

// DeleteParameter removes a runtime parameter, if there is one.
func (b *Broker) DeleteParameter(vhost, component, name string) error {
	if b.replicating() {
		return b.propose(fmt.Sprintf("parameter '%s' of component '%s' in vhost '%s'", name, component, vhost),
			&command{Op: opParamDelete, VHost: vhost, Component: component, Name: name})
	}
	b.deleteParameterLocal(vhost, component, name)
	return nil
}

func (b *Broker) deleteParameterLocal(vhost, component, name string) {
	b.mu.Lock()
	k := paramKey(vhost, component, name)
	if _, ok := b.params[k]; !ok {
		b.mu.Unlock()
		return
	}
	delete(b.params, k)
	b.unlockPersist(delOp(DefKindParameters, k)) // logged
}

// Parameters returns the runtime parameters of a component, by vhost
// and name.
func (b *Broker) Parameters(component string) []DefParameter {
	b.mu.RLock()
	defer b.mu.RUnlock()
	var out []DefParameter
	for _, p := range b.params {
		if p.Component == component {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].VHost < out[j].VHost || out[i].VHost == out[j].VHost && out[i].Name < out[j].Name
	})
	return out
}

// dropParamsLocked forgets the parameters of a deleted vhost (its store
// records go with the vhost's); b.mu is held.
func (b *Broker) dropParamsLocked(vhost string) {
	for k := range b.params {
		if strings.HasPrefix(k, vhost+"\x00") {
			delete(b.params, k)
		}
	}
}

// cloneJSON copies a JSON value (maps and lists) so that the caller's
// later changes do not reach the kept parameter.
func cloneJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = cloneJSON(e)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			l[i] = cloneJSON(e)
		}
		return l
	}
	return v
}
