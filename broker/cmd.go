package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/warrenmq/warren/amqp"
)

// Definitions as replicated commands (issue 13). In a cluster every
// definition change is one command of the metadata Raft group: the public
// method builds the command (with everything random or node-specific
// chosen before: server-generated names, password hashes, queue homes),
// proposes it through the Replicator, and answers what the local apply of
// the committed command answered, so that errors keep their exact AMQP
// codes and texts. Every node applies the same commands in the same
// order with ApplyCommand, which calls the local variants of the methods
// (the bodies a single node runs): same log, same definitions. Reads
// stay local. A single node (no Replicator) runs the local variants
// directly, as before.

// Replicator proposes a command to the cluster's metadata group. Propose
// returns once the command is committed and applied on this node, with
// the error ApplyCommand returned for it here, unchanged (the same value,
// so that *amqp.Error codes survive); when the command could not be
// committed it returns an error wrapping ErrNoQuorum.
type Replicator interface {
	Propose(ctx context.Context, cmd []byte) error
}

// ErrNoQuorum is what a Replicator's error wraps when a change could not
// be committed (no leader, or not committed in time). The broker answers
// such a failure with a *QuorumError, which wraps both this and an AMQP
// 541 INTERNAL_ERROR connection error.
var ErrNoQuorum = errors.New("cluster has no quorum")

// ErrOutcomeUnknown is wrapped (with ErrNoQuorum) by a Replicator's error
// when the change was handed to the cluster but not seen applied in time:
// it may still apply later.
var ErrOutcomeUnknown = errors.New("the change may still be applied")

// QuorumError is a definition change that was not applied because the
// cluster has no quorum. errors.Is(err, ErrNoQuorum) holds, and
// errors.As(err, **amqp.Error) gives the 541 INTERNAL_ERROR connection
// error to send (RabbitMQ closes the connection with internal_error when
// its metadata store times out).
type QuorumError struct {
	What string // the change, as "declare of queue 'q' in vhost '/'"
	// Reason is the text without AMQP's reply name: "cluster has no
	// quorum: <What> not applied (<why>)", for HTTP's 503 reason.
	Reason string
	Err    error       // the Replicator's error (wraps ErrNoQuorum)
	AMQP   *amqp.Error // 541, Hard
}

func (e *QuorumError) Error() string   { return e.AMQP.Text }
func (e *QuorumError) Unwrap() []error { return []error{e.AMQP, e.Err} }

func quorumError(what string, err error) *QuorumError {
	// The Replicator's text, without the "cluster has no quorum" that
	// both it and the group's own error may begin with.
	reason := err.Error()
	for strings.HasPrefix(reason, ErrNoQuorum.Error()) {
		reason = strings.TrimLeft(strings.TrimPrefix(reason, ErrNoQuorum.Error()), ": ")
	}
	text := fmt.Sprintf("cluster has no quorum: %s not applied", what)
	if errors.Is(err, ErrOutcomeUnknown) {
		text = fmt.Sprintf("cluster has no quorum: %s not confirmed", what)
	}
	if reason != "" {
		text += " (" + reason + ")"
	}
	return &QuorumError{What: what, Reason: text, Err: err, AMQP: amqp.ConnErrorf(amqp.InternalError, "%s", text)}
}

// SetReplicator makes every later definition change a replicated command
// (call it before serving, after Open).
func (b *Broker) SetReplicator(r Replicator) { b.repl = r }

// SetNodes gives the broker the cluster's node names, for the balanced
// queue locator (queue homes).
func (b *Broker) SetNodes(nodes func() []string) { b.nodes = nodes }

// replicating reports whether changes go through the Replicator: in a
// cluster, except while Recover loads the local store.
func (b *Broker) replicating() bool { return b.repl != nil && !b.loading.Load() }

// errNothing is the apply's answer for a deletion of something that is
// not there: the public methods that report a bool turn it into false.
var errNothing = errors.New("nothing to change")

// propose encodes c, proposes it and returns the local apply's result.
func (b *Broker) propose(what string, c *command) error {
	data, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encoding the %s: %w", what, err)
	}
	if err := b.repl.Propose(context.Background(), data); err != nil {
		if errors.Is(err, ErrNoQuorum) {
			return quorumError(what, err)
		}
		return err
	}
	b.awaitAll()
	return nil
}

// proposeBool is propose for the changes that report whether there was
// something to change.
func (b *Broker) proposeBool(what string, c *command) (bool, error) {
	err := b.propose(what, c)
	if errors.Is(err, errNothing) {
		return false, nil
	}
	return err == nil, err
}

// The command ops.
const (
	opVHostAdd       = "vhost.add"
	opVHostMeta      = "vhost.meta"
	opVHostDelete    = "vhost.delete"
	opUserPut        = "user.put"
	opUserDelete     = "user.delete"
	opPermSet        = "perm.set"
	opPermClear      = "perm.clear"
	opTopicSet       = "topic.set"
	opTopicClear     = "topic.clear"
	opVLimitSet      = "vhost-limit.set"
	opVLimitClear    = "vhost-limit.clear"
	opULimitSet      = "user-limit.set"
	opULimitClear    = "user-limit.clear"
	opParamSet       = "param.set"
	opParamDelete    = "param.delete"
	opPolicySet      = "policy.set"
	opPolicyDelete   = "policy.delete"
	opExchangeDecl   = "exchange.declare"
	opExchangeDelete = "exchange.delete"
	opQueueDecl      = "queue.declare"
	opQueueDelete    = "queue.delete"
	opQueueDrop      = "queue.drop"
	opExclusiveDrop  = "exclusive.drop"
	opNodeExclusive  = "node.exclusive.drop"
	opBind           = "bind"
	opUnbind         = "unbind"
	opImport         = "import"
)

// command is one definition change: an op and its arguments. JSON: the
// rate is low and the log stays readable. AMQP tables are carried in
// their exact binary encoding (Args), so that field types survive.
type command struct {
	Op        string           `json:"op"`
	VHost     string           `json:"vhost,omitempty"`
	Name      string           `json:"name,omitempty"`
	User      string           `json:"user,omitempty"`
	Meta      *VHostMeta       `json:"meta,omitempty"`
	Hash      string           `json:"hash,omitempty"`
	Tags      []string         `json:"tags,omitempty"`
	Perm      *Permission      `json:"perm,omitempty"`
	Topic     *TopicPermission `json:"topic,omitempty"`
	Exchange  string           `json:"exchange,omitempty"`
	Limit     string           `json:"limit,omitempty"`
	Value     int64            `json:"value,omitempty"`
	Component string           `json:"component,omitempty"`
	Param     any              `json:"param,omitempty"` // a parameter's value: a table, or a list (an upstream set)
	Policy    *Policy          `json:"policy,omitempty"`
	Operator  bool             `json:"operator,omitempty"`

	Kind        string `json:"kind,omitempty"`
	Durable     bool   `json:"durable,omitempty"`
	AutoDelete  bool   `json:"auto_delete,omitempty"`
	Internal    bool   `json:"internal,omitempty"`
	Exclusive   bool   `json:"exclusive,omitempty"`
	ServerNamed bool   `json:"server_named,omitempty"`
	Args        []byte `json:"args,omitempty"`
	Owner       uint64 `json:"owner,omitempty"`
	Home        string `json:"home,omitempty"`
	// Members are a replicated quorum queue's initial group members
	// (issue 14); its group id is the declare's log index.
	Members  []string `json:"members,omitempty"`
	Conn     uint64   `json:"conn,omitempty"`
	IfUnused bool     `json:"if_unused,omitempty"`

	Source     string `json:"source,omitempty"`
	Dest       string `json:"dest,omitempty"`
	ToExchange bool   `json:"to_exchange,omitempty"`
	Key        string `json:"key,omitempty"`

	Defs  *Definitions      `json:"defs,omitempty"`
	Homes map[string]string `json:"homes,omitempty"`
	// QMembers are the group members of the replicated quorum queues an
	// import creates, by scopedKey (issue 14).
	QMembers map[string][]string `json:"qmembers,omitempty"`

	// index is the command's log index (ApplyCommand).
	index uint64
}

func exchangeCommand(vhost string, s ExchangeSpec) *command {
	return &command{Op: opExchangeDecl, VHost: vhost, Name: s.Name, Kind: s.Kind, Durable: s.Durable,
		AutoDelete: s.AutoDelete, Internal: s.Internal, Args: encodeArgs(s.Args)}
}

func bindCommand(op, vhost, source, destination string, toExchange bool, key string, args amqp.Table, conn uint64) *command {
	return &command{Op: op, VHost: vhost, Source: source, Dest: destination, ToExchange: toExchange, Key: key,
		Args: encodeArgs(args), Conn: conn}
}

// ApplyCommand applies one committed command of the metadata group (its
// StateMachine's Apply): in log order, on one goroutine. It is
// deterministic (no clock, no randomness: the proposer chose them) and
// idempotent for a re-applied entry (a declare of what exists equal is a
// no-op, a deletion of what is gone answers as such). Its error is the
// answer of the change on the node that proposed it.
//
// The broker records the index of the last command it applied with its
// definitions (AppliedIndex); a command at or below it was applied before
// a restart and is skipped, so that only the entry being applied at a
// crash can be applied twice (and that one is idempotent).
func (b *Broker) ApplyCommand(index uint64, data []byte) error {
	if index != 0 && index <= b.applied.Load() {
		return nil
	}
	defer b.setApplied(index)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var c command
	if err := dec.Decode(&c); err != nil {
		b.log.Error("cluster: undecodable definition command", "index", index, "err", err)
		return fmt.Errorf("definition command %d: %w", index, err)
	}
	c.index = index
	err := b.apply(&c)
	if err != nil && !errors.Is(err, errNothing) {
		b.log.Debug("cluster: definition command refused", "index", index, "op", c.Op, "err", err)
	}
	return err
}

func (b *Broker) apply(c *command) error {
	vhost := func() (*VHost, error) {
		if v := b.VHost(c.VHost); v != nil {
			return v, nil
		}
		return nil, ErrNoVHost
	}
	switch c.Op {
	case opVHostAdd:
		b.addVHostLocal(c.Name)
		return nil
	case opVHostMeta:
		if c.Meta == nil || !b.setVHostMetaLocal(c.Name, *c.Meta) {
			return errNothing
		}
		return nil
	case opVHostDelete:
		return nothingIf(!b.deleteVHostLocal(c.Name))
	case opUserPut:
		b.putUserHashLocal(c.Name, c.Hash, c.Tags)
		return nil
	case opUserDelete:
		return nothingIf(!b.deleteUserLocal(c.Name))
	case opPermSet:
		if c.Perm == nil {
			return errors.New("permission command without permissions")
		}
		return b.setPermissionsLocal(c.VHost, c.User, *c.Perm)
	case opPermClear:
		b.clearPermissionsLocal(c.VHost, c.User)
		return nil
	case opTopicSet:
		if c.Topic == nil {
			return errors.New("topic permission command without a permission")
		}
		return b.setTopicPermissionLocal(c.VHost, c.User, *c.Topic)
	case opTopicClear:
		return nothingIf(!b.clearTopicPermissionsLocal(c.VHost, c.User, c.Exchange))
	case opVLimitSet:
		return b.setVHostLimitLocal(c.VHost, c.Limit, c.Value)
	case opVLimitClear:
		return b.updateVHostLimits(c.VHost, func(m map[string]int64) { delete(m, c.Limit) })
	case opULimitSet:
		return b.setUserLimitLocal(c.User, c.Limit, c.Value)
	case opULimitClear:
		return b.updateUserLimits(c.User, func(m map[string]int64) { delete(m, c.Limit) })
	case opParamSet:
		return b.setParameterLocal(c.VHost, c.Component, c.Name, c.Param, c.User)
	case opParamDelete:
		b.deleteParameterLocal(c.VHost, c.Component, c.Name)
		return nil
	case opNodeExclusive:
		b.dropNodeExclusiveLocal(c.Home, c.Conn)
		return nil
	case opImport:
		if c.Defs == nil {
			return errors.New("import command without definitions")
		}
		return b.applyDefinitionsLocal(c.Defs, c.Homes, importGroups{members: c.QMembers, index: c.index})
	}
	v, err := vhost()
	if err != nil {
		return err
	}
	args, err := decodeArgs(c.Args)
	if err != nil {
		return fmt.Errorf("definition command %s: arguments: %w", c.Op, err)
	}
	switch c.Op {
	case opPolicySet:
		if c.Policy == nil {
			return errors.New("policy command without a policy")
		}
		return v.setPolicyLocal(*c.Policy, c.Operator)
	case opPolicyDelete:
		return nothingIf(!v.deletePolicyLocal(c.Name, c.Operator))
	case opExchangeDecl:
		return v.declareExchangeLocal(ExchangeSpec{Name: c.Name, Kind: c.Kind, Durable: c.Durable, AutoDelete: c.AutoDelete,
			Internal: c.Internal, Args: args}, false)
	case opExchangeDelete:
		return v.deleteExchangeLocal(c.Name, c.IfUnused)
	case opQueueDecl:
		s := QueueSpec{Name: c.Name, Durable: c.Durable, Exclusive: c.Exclusive,
			AutoDelete: c.AutoDelete, Args: args, Owner: c.Owner, ServerNamed: c.ServerNamed, Home: c.Home}
		if len(c.Members) > 0 && c.index != 0 {
			s.Members, s.Group, s.newGroup = c.Members, c.index, true
		}
		_, _, _, err := v.declareQueueLocal(s, false)
		return err
	case opQueueDelete:
		// if-unused and if-empty were checked by the proposer: consumers
		// and messages are not replicated state.
		q := v.Queue(c.Name)
		if q == nil {
			return nil
		}
		if q.Exclusive && q.Owner != c.Conn {
			return lockedQueue(c.Name, v.Name)
		}
		_, err := v.deleteQueue(q, false, false)
		return err
	case opQueueDrop:
		if q := v.Queue(c.Name); q != nil {
			_, err := v.deleteQueue(q, false, false)
			return err
		}
		return nil
	case opExclusiveDrop:
		v.deleteExclusiveLocal(c.Conn)
		return nil
	case opQueueMembers: // issue 14, qqmembers.go
		return v.applyQueueMembers(c)
	case opBind:
		return v.bindLocal(c.Source, c.Dest, c.ToExchange, c.Key, args, c.Conn)
	case opUnbind:
		return v.unbindLocal(c.Source, c.Dest, c.ToExchange, c.Key, args, c.Conn)
	}
	return fmt.Errorf("unknown definition command %q", c.Op)
}

func nothingIf(nothing bool) error {
	if nothing {
		return errNothing
	}
	return nil
}

// The error-returning forms of the changes whose public methods report a
// bool (or a vhost): in a cluster they can fail for want of a quorum
// (QuorumError), which the management API answers with 503.

// AddVHostE is AddVHost with the error of a replicated change.
func (b *Broker) AddVHostE(name string) (*VHost, error) {
	if !b.replicating() {
		return b.addVHostLocal(name), nil
	}
	if v := b.VHost(name); v != nil {
		return v, nil
	}
	if err := b.propose(fmt.Sprintf("creation of vhost '%s'", name), &command{Op: opVHostAdd, Name: name}); err != nil {
		return nil, err
	}
	if v := b.VHost(name); v != nil {
		return v, nil
	}
	return nil, ErrNoVHost // deleted again at once
}

// SetVHostMetaE is SetVHostMeta with the error of a replicated change.
func (b *Broker) SetVHostMetaE(name string, m VHostMeta) (bool, error) {
	if !b.replicating() {
		return b.setVHostMetaLocal(name, m), nil
	}
	if b.VHost(name) == nil {
		return false, nil
	}
	return b.proposeBool(fmt.Sprintf("metadata of vhost '%s'", name), &command{Op: opVHostMeta, Name: name, Meta: &m})
}

// DeleteVHostE is DeleteVHost with the error of a replicated change.
func (b *Broker) DeleteVHostE(name string) (bool, error) {
	if !b.replicating() {
		return b.deleteVHostLocal(name), nil
	}
	if b.VHost(name) == nil {
		return false, nil
	}
	return b.proposeBool(fmt.Sprintf("deletion of vhost '%s'", name), &command{Op: opVHostDelete, Name: name})
}

// DeleteUserE is DeleteUser with the error of a replicated change.
func (b *Broker) DeleteUserE(name string) (bool, error) {
	if !b.replicating() {
		return b.deleteUserLocal(name), nil
	}
	if b.User(name) == nil {
		return false, nil
	}
	return b.proposeBool(fmt.Sprintf("deletion of user '%s'", name), &command{Op: opUserDelete, Name: name})
}

// ClearTopicPermissionsE is ClearTopicPermissions with the error of a
// replicated change.
func (b *Broker) ClearTopicPermissionsE(vhost, user, exchange string) (bool, error) {
	if !b.replicating() {
		return b.clearTopicPermissionsLocal(vhost, user, exchange), nil
	}
	return b.proposeBool(fmt.Sprintf("topic permissions of user '%s' in vhost '%s'", user, vhost),
		&command{Op: opTopicClear, VHost: vhost, User: user, Exchange: exchange})
}

// DeletePolicyE is DeletePolicy with the error of a replicated change.
func (v *VHost) DeletePolicyE(name string) (bool, error) { return v.deletePolicyE(name, false) }

// DeleteOperatorPolicyE is DeleteOperatorPolicy with the error of a
// replicated change.
func (v *VHost) DeleteOperatorPolicyE(name string) (bool, error) { return v.deletePolicyE(name, true) }

func (v *VHost) deletePolicyE(name string, operator bool) (bool, error) {
	if !v.b.replicating() {
		return v.deletePolicyLocal(name, operator), nil
	}
	return v.b.proposeBool(fmt.Sprintf("policy '%s' in vhost '%s'", name, v.Name),
		&command{Op: opPolicyDelete, VHost: v.Name, Name: name, Operator: operator})
}

// proposeQueueDeclare declares a queue that does not exist here: its home
// is chosen now, then the declare is proposed; the answer is the queue as
// applied.
func (v *VHost) proposeQueueDeclare(s QueueSpec) (*Queue, int, int, error) {
	if s.Home == "" {
		s.Home = v.b.chooseHome(v.Name, v, s)
	}
	if !s.Exclusive {
		s.Owner = 0
	}
	if s.Members == nil {
		s.Members = v.b.quorumMembers(s)
		if len(s.Members) > 0 {
			s.Home = s.Members[0]
		}
	}
	c := &command{Op: opQueueDecl, VHost: v.Name, Name: s.Name, Durable: s.Durable, Exclusive: s.Exclusive,
		AutoDelete: s.AutoDelete, Args: encodeArgs(s.Args), Owner: s.Owner, ServerNamed: s.ServerNamed, Home: s.Home,
		Members: s.Members}
	if err := v.b.propose(fmt.Sprintf("declare of queue '%s' in vhost '%s'", s.Name, v.Name), c); err != nil {
		return nil, 0, 0, err
	}
	q := v.Queue(s.Name)
	if q == nil { // deleted again at once
		return nil, 0, 0, notFoundQueue(s.Name, v.Name)
	}
	if !q.typ().here() {
		return q, 0, 0, nil // new: empty, unused (and on its home: awaitAll)
	}
	m, n := q.Counts()
	return q, m, n, nil
}

// ClusterSyncer is implemented by a Replicator that can wait for the
// other running nodes to apply the metadata log up to an index.
type ClusterSyncer interface {
	AwaitAllApplied(ctx context.Context, index uint64) error
}

// awaitAllWait bounds how long a change waits for the other nodes.
const awaitAllWait = 2 * time.Second

// awaitAll waits (at most awaitAllWait) until every running node has
// applied every command this node has applied, so that a change answered
// -ok is visible on every node (as RabbitMQ's definitions are): a client
// that declares and binds through one node and publishes through another
// behind a load balancer finds its binding there. A node that does not
// confirm in time (slow, or cut off and not yet known to be down) does
// not fail the change: it applies it when it catches up.
func (b *Broker) awaitAll() {
	cs, ok := b.repl.(ClusterSyncer)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), awaitAllWait)
	defer cancel()
	if err := cs.AwaitAllApplied(ctx, b.applied.Load()); err != nil {
		b.log.Debug("cluster: a node did not confirm a definition change in time", "err", err)
	}
}

// proposeQueueDelete deletes q through the cluster. if-unused and if-empty
// are checked here: consumers and messages are the home node's, not
// replicated state.
func (v *VHost) proposeQueueDelete(q *Queue, conn uint64, ifUnused, ifEmpty bool) (int, error) {
	m, c := q.Counts()
	if ifUnused && c > 0 {
		return 0, amqp.Errorf(amqp.PreconditionFailed, "queue '%s' in vhost '%s' in use", q.Name, v.Name)
	}
	if ifEmpty && m > 0 {
		return 0, amqp.Errorf(amqp.PreconditionFailed, "queue '%s' in vhost '%s' not empty", q.Name, v.Name)
	}
	err := v.b.propose(fmt.Sprintf("delete of queue '%s' in vhost '%s'", q.Name, v.Name),
		&command{Op: opQueueDelete, VHost: v.Name, Name: q.Name, Conn: conn})
	if err != nil {
		return 0, err
	}
	return m, nil
}

// dropQueue deletes a queue the broker decided to delete by itself
// (auto-delete after its last consumer, x-expires). In a cluster the
// queue's home node decides and proposes the deletion asynchronously; the
// queue exists until the deletion is applied.
func (v *VHost) dropQueue(q *Queue, why string) {
	if !v.b.replicating() {
		v.deleteQueue(q, false, false)
		return
	}
	if !q.typ().here() {
		return
	}
	c := &command{Op: opQueueDrop, VHost: v.Name, Name: q.Name}
	drop := func() {
		if err := v.b.propose(fmt.Sprintf("%s of queue '%s' in vhost '%s'", why, q.Name, v.Name), c); err != nil {
			v.b.log.Warn("cluster: deleting a queue", "queue", q.Name, "vhost", v.Name, "why", why, "err", err)
			if why == "expiry" {
				q.Touch() // expires again later: the deletion is retried then
			}
		}
	}
	if why == "auto-delete" {
		// The last consumer's cancel (or its channel's close) returns
		// once the queue is gone everywhere, as with RabbitMQ, whose
		// channel close waits for its queues: a client that reconnects
		// and redeclares the queue gets a new one, not one about to go.
		// The caller holds no lock.
		drop()
		return
	}
	go drop()
}

// proposeExclusiveDrop deletes, through the cluster, the exclusive queues
// of a closed connection of this node (asynchronously: the connection is
// gone; the queues exist until the deletion is applied).
func (v *VHost) proposeExclusiveDrop(conn uint64) {
	any := false
	v.mu.RLock()
	for _, q := range v.queues {
		if q.Exclusive && q.Owner == conn {
			any = true
			break
		}
	}
	v.mu.RUnlock()
	if !any {
		return
	}
	c := &command{Op: opExclusiveDrop, VHost: v.Name, Conn: conn}
	go func() {
		if err := v.b.propose(fmt.Sprintf("deletion of the exclusive queues of connection %d in vhost '%s'", conn, v.Name), c); err != nil {
			v.b.log.Warn("cluster: deleting exclusive queues", "conn", conn, "vhost", v.Name, "err", err)
		}
	}()
}

// proposeImport proposes a definitions import as one command, with the
// plain passwords hashed and the new queues' homes chosen first.
func (b *Broker) proposeImport(d *Definitions) error {
	cp := *d
	cp.Users = append([]DefUser(nil), d.Users...)
	for i, u := range cp.Users {
		if u.PasswordHash == "" && u.Password != "" {
			cp.Users[i].PasswordHash, cp.Users[i].Password = HashPassword(u.Password), ""
		}
	}
	homes := map[string]string{}
	members := map[string][]string{}
	for _, q := range d.Queues {
		v := b.VHost(q.VHost) // nil when the import creates it
		if v != nil && v.Queue(q.Name) != nil {
			continue
		}
		args, err := jsonToTable(q.Arguments)
		if err != nil {
			continue // the apply reports it
		}
		if _, ok := args["x-queue-type"]; !ok && q.Type != "" {
			if args == nil {
				args = amqp.Table{}
			}
			args["x-queue-type"] = q.Type
		}
		spec := QueueSpec{Name: q.Name, Args: args}
		if h := b.chooseHome(q.VHost, v, spec); h != "" {
			homes[scopedKey(q.VHost, q.Name)] = h
			spec.Home = h
		}
		if ms := b.quorumMembers(spec); len(ms) > 0 {
			members[scopedKey(q.VHost, q.Name)] = ms
			homes[scopedKey(q.VHost, q.Name)] = ms[0]
		}
	}
	c := &command{Op: opImport, Defs: &cp, Homes: homes}
	if len(members) > 0 {
		c.QMembers = members
	}
	return b.propose("definitions import", c)
}

// DropNodeExclusive deletes the exclusive queues whose owner connections
// were on node: they died with it (a node that restarts has none of its
// old connections). In a cluster the glue calls it when a node is known
// to have lost its connections (for this node, at start before serving);
// the deletion is one replicated command.
func (b *Broker) DropNodeExclusive(node string) error {
	if !b.replicating() {
		b.dropNodeExclusiveLocal(node, 0)
		return nil
	}
	return b.propose(fmt.Sprintf("deletion of the exclusive queues of node '%s'", node), &command{Op: opNodeExclusive, Home: node})
}

// DropStaleExclusive deletes the exclusive queues of this node's earlier
// runs (their connections died with the process; RunConnIDBase tells
// this run's from theirs). The glue calls it at start, before or while
// serving: it keeps this run's.
func (b *Broker) DropStaleExclusive() error {
	if !b.HasStaleExclusive() {
		return nil
	}
	return b.propose(fmt.Sprintf("deletion of the exclusive queues of node '%s' before its restart", b.node),
		&command{Op: opNodeExclusive, Home: b.node, Conn: b.runBase})
}

// HasStaleExclusive reports whether an exclusive queue of an earlier run
// of this node exists.
func (b *Broker) HasStaleExclusive() bool {
	found := false
	b.eachNodeExclusive(b.node, b.runBase, func(*VHost, *Queue) { found = true })
	return found
}

// eachNodeExclusive calls fn for every exclusive queue owned by a
// connection of node, except those of the run whose RunConnIDBase is
// keep (0: keep none).
func (b *Broker) eachNodeExclusive(node string, keep uint64, fn func(*VHost, *Queue)) {
	base := ConnIDBase(node)
	if base == 0 {
		return
	}
	for _, name := range b.VHosts() {
		v := b.VHost(name)
		if v == nil {
			continue
		}
		var qs []*Queue
		v.mu.RLock()
		for _, q := range v.queues {
			if q.Exclusive && q.Owner>>40 == base>>40 && (keep == 0 || q.Owner>>24 != keep>>24) {
				qs = append(qs, q)
			}
		}
		v.mu.RUnlock()
		sort.Slice(qs, func(i, j int) bool { return qs[i].Name < qs[j].Name })
		for _, q := range qs {
			fn(v, q)
		}
	}
}

func (b *Broker) dropNodeExclusiveLocal(node string, keep uint64) {
	b.eachNodeExclusive(node, keep, func(v *VHost, q *Queue) { v.deleteQueue(q, false, false) })
}

// metaApplied is the meta record that keeps the index of the last
// replicated command applied (AppliedIndex).
const metaApplied = "cluster_applied"

// AppliedIndex returns the index of the last command of the metadata
// group applied to this broker's definitions (ApplyCommand,
// RestoreDefinitions), recovered from its store at a restart; 0 if none.
func (b *Broker) AppliedIndex() uint64 { return b.applied.Load() }

// setApplied records index as applied, in memory and in the store (after
// the command's own records).
func (b *Broker) setApplied(index uint64) {
	if index == 0 || index <= b.applied.Load() {
		return
	}
	b.applied.Store(index)
	if err := b.persist(defOp{kind: DefKindMeta, key: metaApplied, value: strconv.AppendUint(nil, index, 10)}); err != nil {
		b.log.Error("cluster: recording the applied index", "index", index, "err", err)
	}
}
