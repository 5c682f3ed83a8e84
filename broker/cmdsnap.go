package broker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
)

// The metadata group's snapshot of the definitions (issue 13): everything
// the commands of cmd.go change, non-durable and exclusive entities and
// queue homes included (in a cluster they are replicated too), encoded
// deterministically: the same state gives the same bytes on every node.

type snapState struct {
	VHosts    []snapVHost     `json:"vhosts"`
	Users     []snapUser      `json:"users"`
	Perms     []DefPermission `json:"permissions"`
	Topics    []snapTopic     `json:"topic_permissions"`
	Params    []DefParameter  `json:"parameters"`
	Policies  []snapPolicy    `json:"policies"`
	Exchanges []snapExchange  `json:"exchanges"`
	Queues    []snapQueue     `json:"queues"`
	Bindings  []snapBinding   `json:"bindings"`
}

type snapVHost struct {
	Name   string           `json:"name"`
	Meta   VHostMeta        `json:"meta"`
	Limits map[string]int64 `json:"limits,omitempty"`
}

type snapUser struct {
	Name   string           `json:"name"`
	Hash   string           `json:"hash"`
	Tags   []string         `json:"tags"`
	Limits map[string]int64 `json:"limits,omitempty"`
}

type snapTopic struct {
	VHost string          `json:"vhost"`
	User  string          `json:"user"`
	P     TopicPermission `json:"p"`
}

type snapPolicy struct {
	Operator bool   `json:"operator"`
	P        Policy `json:"p"`
}

type snapExchange struct {
	VHost      string `json:"vhost"`
	Name       string `json:"name"`
	Kind       string `json:"kind"`
	Durable    bool   `json:"durable"`
	AutoDelete bool   `json:"auto_delete"`
	Internal   bool   `json:"internal"`
	Args       []byte `json:"args,omitempty"`
}

type snapQueue struct {
	VHost      string `json:"vhost"`
	Name       string `json:"name"`
	Durable    bool   `json:"durable"`
	Exclusive  bool   `json:"exclusive"`
	AutoDelete bool   `json:"auto_delete"`
	Args       []byte `json:"args,omitempty"`
	Owner      uint64 `json:"owner,omitempty"`
	Home       string `json:"home,omitempty"`
	// A replicated quorum queue's group (issue 14).
	Members []string `json:"members,omitempty"`
	Group   uint64   `json:"group,omitempty"`
}

type snapBinding struct {
	VHost      string `json:"vhost"`
	Source     string `json:"source"`
	Dest       string `json:"dest"`
	ToExchange bool   `json:"to_exchange"`
	Key        string `json:"key"`
	Args       []byte `json:"args,omitempty"`
}

func (s snapBinding) id() string {
	return fmt.Sprintf("%s\x00%s\x00%s\x00%t\x00%s\x00%x", s.VHost, s.Source, s.Dest, s.ToExchange, s.Key, s.Args)
}

// builtinExchange reports whether every vhost has the exchange from its
// creation (newVHost): the default exchange and the amq.* ones, which
// clients can neither declare nor delete.
func builtinExchange(name string) bool { return name == "" || strings.HasPrefix(name, "amq.") }

// snapshot reads the replicated state.
func (b *Broker) snapshot() *snapState {
	st := &snapState{}
	b.mu.RLock()
	for _, name := range sortedKeys(b.vhosts) {
		v := b.vhosts[name]
		m := v.meta
		m.Tags = append([]string{}, m.Tags...)
		st.VHosts = append(st.VHosts, snapVHost{Name: name, Meta: m, Limits: maps.Clone(v.limitMap)})
	}
	for _, name := range sortedKeys(b.users) {
		u := b.users[name]
		st.Users = append(st.Users, snapUser{Name: name, Hash: u.PasswordHash, Tags: append([]string{}, u.Tags...), Limits: maps.Clone(u.Limits)})
		for _, vh := range sortedKeys(u.perms) {
			p := u.perms[vh].Permission
			st.Perms = append(st.Perms, DefPermission{User: name, VHost: vh, Configure: p.Configure, Write: p.Write, Read: p.Read})
		}
		for _, vh := range sortedKeys(u.topics) {
			for _, x := range sortedKeys(u.topics[vh]) {
				st.Topics = append(st.Topics, snapTopic{VHost: vh, User: name, P: u.topics[vh][x].TopicPermission})
			}
		}
	}
	for _, k := range sortedKeys(b.params) {
		st.Params = append(st.Params, b.params[k])
	}
	vhosts := make([]*VHost, 0, len(b.vhosts))
	for _, name := range sortedKeys(b.vhosts) {
		vhosts = append(vhosts, b.vhosts[name])
	}
	b.mu.RUnlock()
	for _, v := range vhosts {
		ps := v.policies.load()
		for _, set := range []struct {
			op bool
			ps []*Policy
		}{{false, ps.user}, {true, ps.op}} {
			cp := copyPolicies(set.ps)
			sort.Slice(cp, func(i, j int) bool { return cp[i].Name < cp[j].Name })
			for _, p := range cp {
				st.Policies = append(st.Policies, snapPolicy{Operator: set.op, P: p})
			}
		}
		v.mu.RLock()
		for _, name := range sortedKeys(v.exchanges) {
			x := v.exchanges[name]
			if !builtinExchange(name) {
				st.Exchanges = append(st.Exchanges, snapExchange{VHost: v.Name, Name: name, Kind: x.Kind, Durable: x.Durable,
					AutoDelete: x.AutoDelete, Internal: x.Internal, Args: encodeArgs(x.Args)})
			}
			for _, bd := range x.bindings {
				st.Bindings = append(st.Bindings, snapBinding{VHost: v.Name, Source: name, Dest: bd.dest.name(),
					ToExchange: bd.dest.x != nil, Key: bd.RoutingKey, Args: encodeArgs(bd.Args)})
			}
		}
		for _, name := range sortedKeys(v.queues) {
			q := v.queues[name]
			sq := snapQueue{VHost: v.Name, Name: name, Durable: q.Durable, Exclusive: q.Exclusive,
				AutoDelete: q.AutoDelete, Args: encodeArgs(q.Args), Owner: q.Owner, Home: q.Home}
			sq.Members, sq.Group = q.typ().replicas()
			st.Queues = append(st.Queues, sq)
		}
		v.mu.RUnlock()
	}
	sort.Slice(st.Bindings, func(i, j int) bool { return st.Bindings[i].id() < st.Bindings[j].id() })
	return st
}

func sortedKeys[M ~map[string]V, V any](m M) []string {
	return slices.Sorted(maps.Keys(m))
}

// SnapshotDefinitions encodes the replicated definitions (the metadata
// group's Snapshot): the same state gives the same bytes.
func (b *Broker) SnapshotDefinitions() ([]byte, error) {
	return json.Marshal(b.snapshot())
}

// RestoreDefinitions replaces the definitions with a snapshot's (the
// metadata group's Restore): what the snapshot lacks is deleted, what
// differs is changed, what is identical is left alone (an identical
// queue keeps its messages and consumers). A queue or exchange whose
// properties differ is deleted and declared again.
func (b *Broker) RestoreDefinitions(index uint64, data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var want snapState
	if err := dec.Decode(&want); err != nil {
		return fmt.Errorf("definitions snapshot %d: %w", index, err)
	}
	have := b.snapshot()
	defer func() {
		// A snapshot replaces the state, whatever index came before.
		b.applied.Store(0)
		b.setApplied(index)
	}()
	var errs []error
	note := func(err error, what string) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}

	// Vhosts: the absent go with everything in them.
	wantV := map[string]snapVHost{}
	for _, v := range want.VHosts {
		wantV[v.Name] = v
	}
	for _, v := range have.VHosts {
		if _, ok := wantV[v.Name]; !ok {
			b.deleteVHostLocal(v.Name)
		}
	}
	haveV := map[string]snapVHost{}
	for _, v := range have.VHosts {
		haveV[v.Name] = v
	}
	for _, v := range want.VHosts {
		h, ok := haveV[v.Name]
		if !ok {
			b.addVHostLocal(v.Name)
		}
		if !ok || !reflect.DeepEqual(h.Meta, v.Meta) {
			b.setVHostMetaLocal(v.Name, v.Meta)
		}
		if !ok || !maps.Equal(h.Limits, v.Limits) {
			lim := v.Limits
			note(b.updateVHostLimits(v.Name, func(m map[string]int64) { clear(m); maps.Copy(m, lim) }), "vhost limits")
		}
	}

	// Users, then their permissions.
	wantU := map[string]snapUser{}
	for _, u := range want.Users {
		wantU[u.Name] = u
	}
	for _, u := range have.Users {
		if _, ok := wantU[u.Name]; !ok {
			b.deleteUserLocal(u.Name)
		}
	}
	haveU := map[string]snapUser{}
	for _, u := range have.Users {
		haveU[u.Name] = u
	}
	for _, u := range want.Users {
		h, ok := haveU[u.Name]
		if !ok || h.Hash != u.Hash || !slices.Equal(h.Tags, u.Tags) {
			b.putUserHashLocal(u.Name, u.Hash, u.Tags)
		}
		if !ok || !maps.Equal(h.Limits, u.Limits) {
			lim := u.Limits
			note(b.updateUserLimits(u.Name, func(m map[string]int64) { clear(m); maps.Copy(m, lim) }), "user limits")
		}
	}
	have = b.snapshot() // user and vhost deletions took permissions with them
	wantP := map[[2]string]DefPermission{}
	for _, p := range want.Perms {
		wantP[[2]string{p.VHost, p.User}] = p
	}
	haveP := map[[2]string]DefPermission{}
	for _, p := range have.Perms {
		haveP[[2]string{p.VHost, p.User}] = p
		if _, ok := wantP[[2]string{p.VHost, p.User}]; !ok {
			b.clearPermissionsLocal(p.VHost, p.User)
		}
	}
	for k, p := range wantP {
		if h, ok := haveP[k]; !ok || h != p {
			note(b.setPermissionsLocal(p.VHost, p.User, Permission{Configure: p.Configure, Write: p.Write, Read: p.Read}), "permissions")
		}
	}
	wantT := map[[3]string]snapTopic{}
	for _, t := range want.Topics {
		wantT[[3]string{t.VHost, t.User, t.P.Exchange}] = t
	}
	haveT := map[[3]string]snapTopic{}
	for _, t := range have.Topics {
		k := [3]string{t.VHost, t.User, t.P.Exchange}
		haveT[k] = t
		if _, ok := wantT[k]; !ok {
			b.clearTopicPermissionsLocal(t.VHost, t.User, t.P.Exchange)
		}
	}
	for k, t := range wantT {
		if h, ok := haveT[k]; !ok || h != t {
			note(b.setTopicPermissionLocal(t.VHost, t.User, t.P), "topic permissions")
		}
	}

	// Parameters and policies.
	wantPar := map[string]DefParameter{}
	for _, p := range want.Params {
		wantPar[paramKey(p.VHost, p.Component, p.Name)] = p
	}
	havePar := map[string]DefParameter{}
	for _, p := range have.Params {
		k := paramKey(p.VHost, p.Component, p.Name)
		havePar[k] = p
		if _, ok := wantPar[k]; !ok {
			b.deleteParameterLocal(p.VHost, p.Component, p.Name)
		}
	}
	for k, p := range wantPar {
		if h, ok := havePar[k]; !ok || !sameJSON(h, p) {
			note(b.setParameterLocal(p.VHost, p.Component, p.Name, p.Value, p.User), "parameter")
		}
	}
	type polKey struct {
		vhost, name string
		op          bool
	}
	wantPol := map[polKey]snapPolicy{}
	for _, p := range want.Policies {
		wantPol[polKey{p.P.VHost, p.P.Name, p.Operator}] = p
	}
	havePol := map[polKey]snapPolicy{}
	for _, p := range have.Policies {
		k := polKey{p.P.VHost, p.P.Name, p.Operator}
		havePol[k] = p
		if _, ok := wantPol[k]; !ok {
			if v := b.VHost(k.vhost); v != nil {
				v.deletePolicyLocal(k.name, k.op)
			}
		}
	}
	for k, p := range wantPol {
		if h, ok := havePol[k]; !ok || !sameJSON(h, p) {
			if v := b.VHost(k.vhost); v != nil {
				note(v.setPolicyLocal(p.P, k.op), "policy")
			}
		}
	}

	// Queues and exchanges: the absent and the different go, then the
	// bindings the snapshot lacks, then what is missing is declared and
	// bound.
	wantQ := map[[2]string]snapQueue{}
	for _, q := range want.Queues {
		wantQ[[2]string{q.VHost, q.Name}] = q
	}
	for _, q := range have.Queues {
		if w, ok := wantQ[[2]string{q.VHost, q.Name}]; !ok || !sameJSON(w, q) {
			if v := b.VHost(q.VHost); v != nil {
				if qq := v.Queue(q.Name); qq != nil {
					v.deleteQueue(qq, false, false)
				}
			}
		}
	}
	wantX := map[[2]string]snapExchange{}
	for _, x := range want.Exchanges {
		wantX[[2]string{x.VHost, x.Name}] = x
	}
	for _, x := range have.Exchanges {
		if w, ok := wantX[[2]string{x.VHost, x.Name}]; !ok || !sameJSON(w, x) {
			if v := b.VHost(x.VHost); v != nil {
				v.mu.Lock()
				if xx := v.exchanges[x.Name]; xx != nil {
					v.deleteExchangeLocked(xx)
				}
				note(v.unlockPersist(nil), "exchange")
			}
		}
	}
	wantB := map[string]snapBinding{}
	for _, bd := range want.Bindings {
		wantB[bd.id()] = bd
	}
	for _, bd := range b.snapshot().Bindings {
		if _, ok := wantB[bd.id()]; !ok {
			if v := b.VHost(bd.VHost); v != nil {
				args, _ := decodeArgs(bd.Args)
				note(v.unbindLocal(bd.Source, bd.Dest, bd.ToExchange, bd.Key, args, 0), "unbind")
			}
		}
	}
	for _, x := range want.Exchanges {
		v := b.VHost(x.VHost)
		if v == nil || v.Exchange(x.Name) != nil {
			continue
		}
		args, err := decodeArgs(x.Args)
		if err == nil {
			err = v.declareExchangeLocal(ExchangeSpec{Name: x.Name, Kind: x.Kind, Durable: x.Durable, AutoDelete: x.AutoDelete,
				Internal: x.Internal, Args: args}, false)
		}
		note(err, "exchange "+x.Name)
	}
	for _, q := range want.Queues {
		v := b.VHost(q.VHost)
		if v == nil || v.Queue(q.Name) != nil {
			continue
		}
		args, err := decodeArgs(q.Args)
		if err == nil {
			_, _, _, err = v.declareQueueLocal(QueueSpec{Name: q.Name, Durable: q.Durable, Exclusive: q.Exclusive, AutoDelete: q.AutoDelete,
				Args: args, Owner: q.Owner, Home: q.Home, ServerNamed: strings.HasPrefix(q.Name, "amq."),
				Members: q.Members, Group: q.Group}, false)
		}
		note(err, "queue "+q.Name)
	}
	for _, bd := range want.Bindings {
		v := b.VHost(bd.VHost)
		if v == nil {
			continue
		}
		args, err := decodeArgs(bd.Args)
		if err == nil {
			var owner uint64
			if !bd.ToExchange {
				if q := v.Queue(bd.Dest); q != nil {
					owner = q.Owner
				}
			}
			err = v.bindLocal(bd.Source, bd.Dest, bd.ToExchange, bd.Key, args, owner)
		}
		note(err, "binding")
	}
	if len(errs) > 0 {
		b.log.Error("cluster: restoring the definitions snapshot", "index", index, "errors", len(errs), "first", errs[0])
		return fmt.Errorf("definitions snapshot %d: %d entities not restored, the first: %w", index, len(errs), errs[0])
	}
	return nil
}

// sameJSON compares two values by their JSON encoding (maps of any,
// json.Number against float64 after a round trip).
func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}
