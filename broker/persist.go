package broker

// Durable definitions: what the broker writes to its DefinitionStore, when,
// and how Recover reads it back.
//
// What is written (as RabbitMQ keeps it across a restart):
//   - vhosts, users (with their password hash), permissions, policies and
//     operator policies: always;
//   - exchanges declared durable (the default and amq.* exchanges are
//     predeclared in every vhost and never written);
//   - queues declared durable and not exclusive; durable auto-delete
//     queues are kept, as RabbitMQ keeps them (they are deleted when
//     their last consumer goes, not by a restart); exclusive queues never
//     survive a restart;
//   - bindings whose source exchange and destination are both written
//     (a binding to a transient queue dies with the queue).
//
// Deleting an entity deletes its record, whatever deleted it (a client,
// x-expires, auto-delete, a cascade from a deleted queue or exchange, a
// deleted vhost or user).
//
// Records are JSON, in the shapes of RabbitMQ's definitions document
// (DefVHost, DefUser, ...), so that they can be read by eye. JSON strings
// are UTF-8, and Go's encoder replaces what is not (issue 11 item 3: two
// durable queues "bad\xff" and "bad\xfe", created over HTTP, came back as
// one "bad\uFFFD"; RabbitMQ also accepts names it cannot print, over AMQP
// those with surrogates or code points above U+10FFFF, see amqp's
// validUTF8). So a record whose top-level string fields (name, vhost,
// user, source, destination, routing_key, ...) are not valid UTF-8 also
// holds them byte for byte under "exact" (JSON name -> base64 bytes),
// and reading the record puts them back. Arguments
// are kept twice: as JSON for the eye, and as the AMQP field-table
// encoding (AMQPArgs, base64 in the JSON) from which they are restored,
// so that their types survive exactly (a long-int x-max-length stays
// long, not a long-long), a redeclaration after a restart with the same
// arguments is still equivalent, and one with different arguments gets
// the same 406 text as before the restart.
//
// Keys: name for vhosts and users; vhost + "\x00" + name for vhost-scoped
// kinds (permissions: vhost + "\x00" + user); bindings add the
// destination kind, destination, routing key and the hex of their
// encoded arguments (of their SHA-256 past 256 bytes). Names may hold
// any byte, NUL included (RabbitMQ accepts "a\x00b" as a queue name),
// so each part of a key is escaped
// (keyPart: \x01 -> \x01\x01, \x00 -> \x01\x02) and "\x00" only ever
// separates parts: vhost "a" and vhost "a\x00b" do not share a prefix,
// and two bindings cannot share a key. A part without those bytes is
// unchanged, so stores written before keep their keys; Recover moves a
// record found under a key of the old form to its new key.
//
// Writing a record never panics: a record that cannot be encoded (a
// non-finite float from a caller of the Go API; AMQP and HTTP cannot
// carry one) is not written, and the change returns a 541 internal
// error.
//
// Ordering and locks: a change is applied in memory first, then written,
// and the call that made it returns only after the write (so a
// queue.declare-ok is sent once the queue's record is on disk). Changes
// under a lock (Broker.mu, VHost.mu) are queued while it is held; the
// writer takes Broker.persistMu before releasing that lock and writes
// after releasing it, so records reach the store in the order the changes
// were made, and publishers, which only need VHost.mu, are not stalled by
// an fsync unless two definition changes race. Lock order:
// Broker.mu -> VHost.policies.mu -> VHost.mu -> Broker.persistMu.
//
// A failed write is logged and returned where the API returns errors (as
// a 541 internal error for AMQP callers); the change stays in memory and
// is lost at the next restart.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/warrenmq/warren/amqp"
)

// DefinitionStore persists durable definitions (package store implements
// it). Put and Delete return once the change is durable. The broker calls
// them after a change is applied in memory, with no VHost or Broker lock
// held, in the order the changes were made (see persist.go). ForEach is
// only used by Recover and must not be called concurrently with writes
// to the same kind from its callback.
type DefinitionStore interface {
	Put(kind, key string, value []byte) error
	Delete(kind, key string) error
	ForEach(kind string, fn func(key, value []byte) error) error
}

// Definition kinds, the buckets of the store.
const (
	DefKindVHosts           = "vhosts"
	DefKindUsers            = "users"
	DefKindPermissions      = "permissions"
	DefKindExchanges        = "exchanges"
	DefKindQueues           = "queues"
	DefKindBindings         = "bindings"
	DefKindPolicies         = "policies"
	DefKindOperatorPolicies = "operator_policies"
	DefKindTopicPermissions = "topic_permissions"
	DefKindParameters       = "parameters"
	DefKindMeta             = "meta"
)

// vhostScopedKinds are the kinds whose keys start with vhost + "\x00".
var vhostScopedKinds = []string{DefKindPermissions, DefKindExchanges, DefKindQueues, DefKindBindings,
	DefKindPolicies, DefKindOperatorPolicies, DefKindTopicPermissions, DefKindParameters}

// metaInitialized marks a store whose defaults (vhost "/", user guest)
// were created: RabbitMQ creates them on first boot only, so a deleted
// guest stays deleted.
const metaInitialized = "initialized"

// defOp is one store change; del deletes key. err is why the record
// could not be encoded (then nothing is written).
type defOp struct {
	kind, key string
	value     []byte
	del       bool
	err       error
}

// queueRecord, exchangeRecord and bindingRecord add the exact encoded
// arguments to RabbitMQ's definition shapes.
type queueRecord struct {
	DefQueue
	AMQPArgs []byte `json:"amqp_arguments,omitempty"`
	// Node is the queue's home node in a cluster (Queue.Home; "" on a
	// single node). Exclusive and Owner are kept in a cluster only,
	// where every queue's record is (Queue.recorded).
	Node      string `json:"node,omitempty"`
	Exclusive bool   `json:"exclusive,omitempty"`
	Owner     uint64 `json:"owner,omitempty"`
	// Members and Group: a replicated quorum queue's Raft group (issue
	// 14), whose log keeps its messages.
	Members []string `json:"members,omitempty"`
	Group   uint64   `json:"group,omitempty"`
}

type exchangeRecord struct {
	DefExchange
	AMQPArgs []byte `json:"amqp_arguments,omitempty"`
}

type bindingRecord struct {
	DefBinding
	AMQPArgs []byte `json:"amqp_arguments,omitempty"`
}

func scopedKey(vhost, name string) string { return defKey(vhost, name) }

// defKey joins the escaped parts of a store key with "\x00".
func defKey(parts ...string) string {
	n := len(parts)
	for _, p := range parts {
		n += len(p)
	}
	var b strings.Builder
	b.Grow(n)
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(0)
		}
		b.WriteString(keyPart(p))
	}
	return b.String()
}

// delayedKey is the message store's key for a delayed exchange's log:
// three parts, so that no queue name (one part, NUL escaped) can equal it
// (a durable queue "exchange\x00d" took the log of delayed exchange "d"
// at a restart and removed it as its own older incarnation).
func delayedKey(vhost, exchange string) string { return defKey(vhost, "exchange", exchange) }

// keyPart escapes one part of a store key so that it holds no "\x00".
func keyPart(s string) string {
	if strings.IndexByte(s, 0) < 0 && strings.IndexByte(s, 1) < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case 0:
			b.WriteString("\x01\x02")
		case 1:
			b.WriteString("\x01\x01")
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func encodeArgs(t amqp.Table) []byte {
	if len(t) == 0 {
		return nil
	}
	return amqp.AppendTable(nil, t)
}

func decodeArgs(b []byte) (amqp.Table, error) {
	if len(b) == 0 {
		return nil, nil
	}
	t, _, err := amqp.DecodeTable(b)
	return t, err
}

// putOp encodes rec (a record struct) as the value of key.
func putOp(kind, key string, rec any) defOp {
	v, err := encodeRecord(rec)
	if err != nil {
		return defOp{kind: kind, key: key, err: err}
	}
	return defOp{kind: kind, key: key, value: v}
}

// encodeRecord encodes rec (a struct) as JSON, with its top-level strings
// that are not valid UTF-8 kept byte for byte under "exact"; decodeRecord
// reads it back. The message store's queue meta files use it too.
func encodeRecord(rec any) ([]byte, error) {
	v, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	exact := map[string][]byte{}
	if rv := reflect.Indirect(reflect.ValueOf(rec)); rv.Kind() == reflect.Struct {
		stringFields(rv, func(name string, f reflect.Value) {
			if s := f.String(); !utf8.ValidString(s) {
				exact[name] = []byte(s)
			}
		})
	}
	if len(exact) > 0 && len(v) >= 2 && v[len(v)-1] == '}' {
		e, err := json.Marshal(exact)
		if err != nil {
			return nil, err
		}
		v = v[:len(v)-1]
		if v[len(v)-1] != '{' {
			v = append(v, ',')
		}
		v = append(append(append(v, `"exact":`...), e...), '}')
	}
	return v, nil
}

// stringFields calls fn with the JSON name and value of each exported
// string field of the struct v, those of embedded structs included.
func stringFields(v reflect.Value, fn func(name string, f reflect.Value)) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
			stringFields(v.Field(i), fn)
			continue
		}
		if !sf.IsExported() || sf.Type.Kind() != reflect.String {
			continue
		}
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		fn(name, v.Field(i))
	}
}

// decodeRecord reads a record written by putOp into rec (a pointer to
// its struct), its exact strings included. useNumber keeps JSON numbers
// as json.Number.
func decodeRecord(data []byte, rec any, useNumber bool) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if useNumber {
		dec.UseNumber()
	}
	if err := dec.Decode(rec); err != nil {
		return err
	}
	var ex struct {
		Exact map[string][]byte `json:"exact"`
	}
	if err := json.Unmarshal(data, &ex); err != nil {
		return err
	}
	if len(ex.Exact) > 0 {
		stringFields(reflect.ValueOf(rec).Elem(), func(name string, f reflect.Value) {
			if b, ok := ex.Exact[name]; ok {
				f.SetString(string(b))
			}
		})
	}
	return nil
}

func delOp(kind, key string) defOp { return defOp{kind: kind, key: key, del: true} }

// persisted reports whether q is written to the store.
func (q *Queue) persisted() bool { return q.Durable && !q.Exclusive }

// recorded reports whether q's definition is written to the store: a
// durable queue's; in a cluster every queue's, since the store keeps the
// applied replicated state that a restarted node resumes from (issue 13).
// Its messages are kept by persisted only.
func (q *Queue) recorded() bool { return q.persisted() || q.vhost.b.node != "" }

// recorded is Queue.recorded for exchanges (the built-in ones never).
func (x *Exchange) recorded() bool {
	return x.persisted() || x.vhost.b.node != "" && x.Name != "" && !strings.HasPrefix(x.Name, "amq.")
}

// recorded is Queue.recorded for bindings.
func (bd *Binding) recorded() bool {
	if bd.Source.vhost.b.node != "" {
		return bd.Source.Name != ""
	}
	return bd.persisted()
}

// persisted reports whether x is written to the store.
func (x *Exchange) persisted() bool {
	return x.Durable && x.Name != "" && !strings.HasPrefix(x.Name, "amq.")
}

// persisted reports whether the binding is written to the store: both
// ends survive a restart (amq.* sources included).
func (bd *Binding) persisted() bool {
	if !bd.Source.Durable || bd.Source.Name == "" {
		return false
	}
	if bd.dest.q != nil {
		return bd.dest.q.persisted()
	}
	return bd.dest.x.persisted()
}

func bindingKey(vhost string, bd *Binding) string {
	dt := "q"
	if bd.dest.q == nil {
		dt = "e"
	}
	return bindingKeyOf(vhost, bd.Source.Name, dt, bd.dest.name(), bd.RoutingKey, bd.id.args)
}

// bindingKeyOf is a binding's key. Its arguments are in it as hex, or,
// past maxArgsInKey bytes, as the hex of their SHA-256: arguments can be
// as large as a frame, and bbolt keys cannot exceed 32 KiB (a binding
// with 16 KiB of arguments could not be stored, a 541 for the client).
func bindingKeyOf(vhost, source, destType, dest, key, args string) string {
	a := hex.EncodeToString([]byte(args))
	if len(args) > maxArgsInKey {
		sum := sha256.Sum256([]byte(args))
		a = "sha256-" + hex.EncodeToString(sum[:])
	}
	return defKey(vhost, source, destType, dest, key, a)
}

const maxArgsInKey = 256

func queueOp(v *VHost, q *Queue) defOp {
	durable := q.Durable
	typ := q.Config.Type
	if typ == "" {
		typ = QueueTypeClassic
	}
	rec := queueRecord{
		DefQueue: DefQueue{Name: q.Name, VHost: v.Name, Type: typ, Durable: &durable, AutoDelete: q.AutoDelete,
			Arguments: tableToJSON(q.Args)},
		AMQPArgs: encodeArgs(q.Args), Node: q.Home, Exclusive: q.Exclusive, Owner: q.Owner}
	rec.Members, rec.Group = q.typ().replicas()
	return putOp(DefKindQueues, scopedKey(v.Name, q.Name), rec)
}

func exchangeOp(v *VHost, x *Exchange) defOp {
	durable := x.Durable
	return putOp(DefKindExchanges, scopedKey(v.Name, x.Name), exchangeRecord{
		DefExchange: DefExchange{Name: x.Name, VHost: v.Name, Type: x.Kind, Durable: &durable, AutoDelete: x.AutoDelete,
			Internal: x.Internal, Arguments: tableToJSON(x.Args)},
		AMQPArgs: encodeArgs(x.Args)})
}

func bindingOp(v *VHost, bd *Binding) defOp {
	dt := "queue"
	if bd.dest.q == nil {
		dt = "exchange"
	}
	return putOp(DefKindBindings, bindingKey(v.Name, bd), bindingRecord{
		DefBinding: DefBinding{Source: bd.Source.Name, VHost: v.Name, Destination: bd.dest.name(), DestinationType: dt,
			RoutingKey: bd.RoutingKey, Arguments: tableToJSON(bd.Args)},
		AMQPArgs: encodeArgs(bd.Args)})
}

func policyOp(vhost string, p Policy, operator bool) defOp {
	kind := DefKindPolicies
	if operator {
		kind = DefKindOperatorPolicies
	}
	return putOp(kind, scopedKey(vhost, p.Name), DefPolicy{VHost: vhost, Name: p.Name, Pattern: p.Pattern,
		ApplyTo: p.ApplyTo, Priority: json.Number(strconv.Itoa(p.Priority)), Definition: p.Definition})
}

func userOp(u *User) defOp {
	return putOp(DefKindUsers, u.Name, DefUser{Name: u.Name, PasswordHash: u.PasswordHash,
		HashingAlgorithm: HashingSHA256, Tags: DefTags(append([]string{}, u.Tags...)), Limits: limitsJSON(u.Limits)})
}

// limitsJSON is limits as definitions hold them: an object, empty for none.
func limitsJSON(l map[string]int64) map[string]any {
	out := make(map[string]any, len(l))
	for k, n := range l {
		out[k] = n
	}
	return out
}

func permissionOp(vhost, user string, p Permission) defOp {
	return putOp(DefKindPermissions, scopedKey(vhost, user), DefPermission{User: user, VHost: vhost,
		Configure: p.Configure, Write: p.Write, Read: p.Read})
}

func topicPermissionOp(vhost, user string, p TopicPermission) defOp {
	return putOp(DefKindTopicPermissions, topicPermissionKey(vhost, user, p.Exchange), DefTopicPermission{User: user, VHost: vhost, TopicPermission: p})
}

func topicPermissionKey(vhost, user, exchange string) string {
	return defKey(vhost, user, exchange)
}

// persisting reports whether changes are written now: there is a store
// and Recover is not loading it.
func (b *Broker) persisting() bool { return b.store != nil && !b.loading.Load() }

// writeOpsLocked writes ops in order; the caller holds b.persistMu. It
// goes on after a failure (later ops may be deletions that must not be
// lost) and returns the first failure as a 541 internal error.
func (b *Broker) writeOpsLocked(ops []defOp) error {
	var first error
	for _, op := range ops {
		var err error
		if op.err != nil {
			err = fmt.Errorf("encoding the record: %w", op.err)
		} else if op.del {
			err = b.store.Delete(op.kind, op.key)
		} else {
			err = b.store.Put(op.kind, op.key, op.value)
		}
		if err != nil {
			b.log.Error("definition store: write failed; the change holds until restart only",
				"kind", op.kind, "key", strings.ReplaceAll(op.key, "\x00", "/"), "delete", op.del, "err", err)
			if first == nil {
				first = amqp.ConnErrorf(amqp.InternalError, "cannot store %s definition: %v", strings.TrimSuffix(op.kind, "s"), err)
			}
		}
	}
	return first
}

// persist writes ops now. The caller holds no broker or vhost lock, or
// holds a lock that orders these changes (VHost.policies.mu).
func (b *Broker) persist(ops ...defOp) error {
	if !b.persisting() || len(ops) == 0 {
		return nil
	}
	b.persistMu.Lock()
	defer b.persistMu.Unlock()
	return b.writeOpsLocked(ops)
}

// unlockPersist releases b.mu (held by the caller) and writes ops, keeping
// their order with other changes (see the comment at the top).
func (b *Broker) unlockPersist(ops ...defOp) error {
	if !b.persisting() || len(ops) == 0 {
		b.mu.Unlock()
		return nil
	}
	b.persistMu.Lock()
	b.mu.Unlock()
	defer b.persistMu.Unlock()
	return b.writeOpsLocked(ops)
}

// recordLocked queues a store change made under v.mu; unlockPersist
// writes it. Changes to a deleted vhost are not recorded: DeleteVHost
// has already removed everything under its name.
func (v *VHost) recordLocked(op defOp) {
	if v.b.persisting() && !v.closed {
		v.pending = append(v.pending, op)
	}
}

// unlockPersist releases v.mu (held by the caller) and writes the changes
// recorded under it. It returns err, or if err is nil the write's error.
func (v *VHost) unlockPersist(err error) error {
	ops := v.pending
	v.pending = nil
	if len(ops) == 0 {
		v.mu.Unlock()
		return err
	}
	v.b.persistMu.Lock()
	v.mu.Unlock()
	werr := v.b.writeOpsLocked(ops)
	v.b.persistMu.Unlock()
	if err == nil {
		err = werr
	}
	return err
}

// dropVHostLocked deletes every record of a deleted vhost. The caller
// holds b.mu (so a vhost of the same name cannot be created meanwhile).
func (b *Broker) dropVHostLocked(name string) error {
	if !b.persisting() {
		return nil
	}
	b.persistMu.Lock()
	defer b.persistMu.Unlock()
	ops := []defOp{delOp(DefKindVHosts, name)}
	prefix := keyPart(name) + "\x00"
	for _, kind := range vhostScopedKinds {
		err := b.store.ForEach(kind, func(k, _ []byte) error {
			if strings.HasPrefix(string(k), prefix) {
				ops = append(ops, delOp(kind, string(k)))
			}
			return nil
		})
		if err != nil {
			b.log.Error("definition store: listing failed", "kind", kind, "err", err)
			return amqp.ConnErrorf(amqp.InternalError, "cannot delete the definitions of vhost '%s': %v", name, err)
		}
	}
	return b.writeOpsLocked(ops)
}

// FirstBoot reports whether this broker started from nothing and created
// the default vhost "/" and user guest: always without a store; with a
// store, when Recover found it uninitialised. Start-up code that replaces
// the default user (RabbitMQ's default_user) does so on first boot only.
func (b *Broker) FirstBoot() bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.firstBoot
}

// createDefaults creates vhost "/" and guest/guest, an administrator with
// full permissions on "/", as RabbitMQ does on first boot.
func (b *Broker) createDefaults() {
	b.AddVHost("/")
	if b.node != "" {
		// Every node of a cluster starts with the same state, so the
		// default user's salt is fixed there (its password is no secret).
		b.PutUserHash("guest", hashWithSalt(make([]byte, 4), "guest"), []string{"administrator"})
	} else {
		b.PutUser("guest", "guest", []string{"administrator"})
	}
	b.SetPermissions("/", "guest", Permission{Configure: ".*", Write: ".*", Read: ".*"})
	b.mu.Lock()
	b.firstBoot = true
	b.mu.Unlock()
}

type storedRecord struct {
	key   string
	value []byte
}

func (b *Broker) readKind(kind string) ([]storedRecord, error) {
	var out []storedRecord
	err := b.store.ForEach(kind, func(k, v []byte) error {
		out = append(out, storedRecord{string(k), append([]byte(nil), v...)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("definition store: reading %s: %w", kind, err)
	}
	return out, nil
}

// Recover loads the durable definitions from the store, in dependency
// order (vhosts, users, permissions, policies, operator policies,
// exchanges, queues, bindings), without writing them again. On a store
// never initialised it creates the defaults (vhost "/", guest) and marks
// the store, so that they are not recreated once deleted. Call it once,
// before serving; without a store it does nothing.
//
// A record that cannot be applied (unreadable, or refused by today's
// validation) is logged and skipped, and records left behind by a vhost
// deleted during a crash are removed: a bad record does not stop the
// broker from starting. Only a failure to read the store is returned.
func (b *Broker) Recover() error {
	if b.store == nil {
		return nil
	}
	b.mu.Lock()
	if b.recovered {
		b.mu.Unlock()
		return nil
	}
	b.recovered = true
	b.mu.Unlock()

	recs := map[string][]storedRecord{}
	for _, kind := range append([]string{DefKindMeta, DefKindVHosts, DefKindUsers}, vhostScopedKinds...) {
		r, err := b.readKind(kind)
		if err != nil {
			return err
		}
		recs[kind] = r
	}
	initialized := false
	for _, r := range recs[DefKindMeta] {
		if r.key == metaInitialized {
			initialized = true
		}
		if r.key == metaApplied {
			n, err := strconv.ParseUint(string(r.value), 10, 64)
			if err != nil {
				return fmt.Errorf("definition store: applied index %q: %w", r.value, err)
			}
			b.applied.Store(n)
		}
	}

	b.loading.Store(true)
	var orphans, moves []defOp
	b.applyRecords(recs, &orphans, &moves)
	b.loading.Store(false)
	if b.msgs != nil {
		if err := b.msgs.recover(b); err != nil {
			return err
		}
	}

	if len(orphans) > 0 {
		b.log.Warn("definition store: removing records whose vhost, source or destination no longer exists", "count", len(orphans))
		if err := b.persist(orphans...); err != nil {
			return err
		}
	}
	if len(moves) > 0 {
		b.log.Info("definition store: moving records to escaped keys", "count", len(moves)/2)
		if err := b.persist(moves...); err != nil {
			return err
		}
	}
	if !initialized {
		b.createDefaults()
		if err := b.persist(defOp{kind: DefKindMeta, key: metaInitialized, value: []byte("1")}); err != nil {
			return err
		}
	}
	n := 0
	for _, r := range recs {
		n += len(r)
	}
	b.log.Info("definitions recovered", "records", n, "first_boot", !initialized)
	return nil
}

func (b *Broker) applyRecords(recs map[string][]storedRecord, orphans, moves *[]defOp) {
	skip := func(kind, key string, err error) {
		b.log.Error("definition store: record skipped", "kind", kind, "key", strings.ReplaceAll(key, "\x00", "/"), "err", err)
	}
	// rekey notes a record stored under a key of the old form (a name
	// with NUL or \x01 bytes; see keyPart) to be moved to want.
	rekey := func(kind string, r storedRecord, want string) {
		if want != r.key {
			*moves = append(*moves, defOp{kind: kind, key: want, value: r.value}, delOp(kind, r.key))
		}
	}
	// vhostOf returns the record's vhost, or nil (and notes an orphan).
	vhostOf := func(kind, key, name string) *VHost {
		v := b.VHost(name)
		if v == nil {
			*orphans = append(*orphans, delOp(kind, key))
		}
		return v
	}
	for _, r := range recs[DefKindVHosts] {
		var d DefVHost
		if err := decodeRecord(r.value, &d, false); err != nil || d.Name == "" {
			skip(DefKindVHosts, r.key, err)
			continue
		}
		v := b.AddVHost(d.Name)
		b.mu.Lock()
		v.meta = metaOf(d)
		v.limitMap = limitsOf(d.Limits)
		v.limits.set(v.limitMap)
		b.mu.Unlock()
	}
	for _, r := range recs[DefKindUsers] {
		var d DefUser
		if err := decodeRecord(r.value, &d, false); err != nil || d.Name == "" {
			skip(DefKindUsers, r.key, err)
			continue
		}
		b.PutUserHash(d.Name, d.PasswordHash, d.Tags)
		if l := limitsOf(map[string]any(d.Limits)); len(l) > 0 {
			b.mu.Lock()
			b.users[d.Name].Limits = l
			b.mu.Unlock()
		}
	}
	for _, r := range recs[DefKindPermissions] {
		var d DefPermission
		if err := decodeRecord(r.value, &d, false); err != nil {
			skip(DefKindPermissions, r.key, err)
			continue
		}
		if vhostOf(DefKindPermissions, r.key, d.VHost) == nil {
			continue
		}
		rekey(DefKindPermissions, r, scopedKey(d.VHost, d.User))
		if err := b.SetPermissions(d.VHost, d.User, Permission{Configure: d.Configure, Write: d.Write, Read: d.Read}); err != nil {
			skip(DefKindPermissions, r.key, err)
		}
	}
	for _, r := range recs[DefKindParameters] {
		var d DefParameter
		if err := decodeRecord(r.value, &d, false); err != nil {
			skip(DefKindParameters, r.key, err)
			continue
		}
		if vhostOf(DefKindParameters, r.key, d.VHost) == nil {
			continue
		}
		rekey(DefKindParameters, r, paramKey(d.VHost, d.Component, d.Name))
		if err := b.setParameter(d.VHost, d.Component, d.Name, d.Value, d.User); err != nil {
			skip(DefKindParameters, r.key, err)
		}
	}
	for _, r := range recs[DefKindTopicPermissions] {
		var d DefTopicPermission
		if err := decodeRecord(r.value, &d, false); err != nil {
			skip(DefKindTopicPermissions, r.key, err)
			continue
		}
		if vhostOf(DefKindTopicPermissions, r.key, d.VHost) == nil {
			continue
		}
		rekey(DefKindTopicPermissions, r, topicPermissionKey(d.VHost, d.User, d.Exchange))
		if err := b.SetTopicPermission(d.VHost, d.User, d.TopicPermission); err != nil {
			skip(DefKindTopicPermissions, r.key, err)
		}
	}
	for _, kind := range []string{DefKindPolicies, DefKindOperatorPolicies} {
		for _, r := range recs[kind] {
			var d DefPolicy
			if err := decodeRecord(r.value, &d, true); err != nil {
				skip(kind, r.key, err)
				continue
			}
			v := vhostOf(kind, r.key, d.VHost)
			if v == nil {
				continue
			}
			rekey(kind, r, scopedKey(d.VHost, d.Name))
			prio, err := defPriority(d.Priority)
			if err == nil {
				p := Policy{Name: d.Name, Pattern: d.Pattern, ApplyTo: d.ApplyTo, Priority: prio, Definition: d.Definition}
				if kind == DefKindOperatorPolicies {
					err = v.SetOperatorPolicy(p)
				} else {
					err = v.SetPolicy(p)
				}
			}
			if err != nil {
				skip(kind, r.key, err)
			}
		}
	}
	// stored holds the exchanges ("e") and queues ("q") that have a record,
	// applied or not, by vhost and name.
	stored := map[[3]string]bool{}
	for _, r := range recs[DefKindExchanges] {
		var d exchangeRecord
		if err := decodeRecord(r.value, &d, false); err != nil {
			skip(DefKindExchanges, r.key, err)
			continue
		}
		v := vhostOf(DefKindExchanges, r.key, d.VHost)
		if v == nil {
			continue
		}
		rekey(DefKindExchanges, r, scopedKey(d.VHost, d.Name))
		stored[[3]string{"e", d.VHost, d.Name}] = true
		args, err := decodeArgs(d.AMQPArgs)
		if err == nil {
			err = v.DeclareExchange(ExchangeSpec{Name: d.Name, Kind: d.Type, Durable: boolOr(d.Durable, true),
				AutoDelete: d.AutoDelete, Internal: d.Internal, Args: args}, false)
		}
		if err != nil {
			skip(DefKindExchanges, r.key, err)
		}
	}
	for _, r := range recs[DefKindQueues] {
		var d queueRecord
		if err := decodeRecord(r.value, &d, false); err != nil {
			skip(DefKindQueues, r.key, err)
			continue
		}
		v := vhostOf(DefKindQueues, r.key, d.VHost)
		if v == nil {
			continue
		}
		rekey(DefKindQueues, r, scopedKey(d.VHost, d.Name))
		stored[[3]string{"q", d.VHost, d.Name}] = true
		args, err := decodeArgs(d.AMQPArgs)
		if err == nil {
			_, _, _, err = v.DeclareQueue(QueueSpec{Name: d.Name, Durable: boolOr(d.Durable, true), AutoDelete: d.AutoDelete,
				Args: args, ServerNamed: strings.HasPrefix(d.Name, "amq."), Home: d.Node, Exclusive: d.Exclusive, Owner: d.Owner,
				Members: d.Members, Group: d.Group}, false)
		}
		if err != nil {
			skip(DefKindQueues, r.key, err)
		}
	}
	for _, r := range recs[DefKindBindings] {
		var d bindingRecord
		if err := decodeRecord(r.value, &d, false); err != nil {
			skip(DefKindBindings, r.key, err)
			continue
		}
		v := vhostOf(DefKindBindings, r.key, d.VHost)
		if v == nil {
			continue
		}
		dt := "q"
		if d.DestinationType == "exchange" {
			dt = "e"
		}
		// A binding whose source or destination has neither a record nor a
		// built-in exchange was left by a crash between the deletion's
		// writes (each record is its own transaction): it is removed, as
		// RabbitMQ drops bindings to missing objects at recovery, and
		// must not come back when an object of that name is declared
		// again. An object whose record exists but was refused keeps its
		// bindings' records.
		if d.Source != "" && v.Exchange(d.Source) == nil && !stored[[3]string{"e", d.VHost, d.Source}] ||
			dt == "e" && v.Exchange(d.Destination) == nil && !stored[[3]string{"e", d.VHost, d.Destination}] ||
			dt == "q" && v.Queue(d.Destination) == nil && !stored[[3]string{"q", d.VHost, d.Destination}] {
			b.log.Warn("definition store: removing a binding whose source or destination is gone",
				"vhost", d.VHost, "source", d.Source, "destination", d.Destination, "destination_type", d.DestinationType)
			*orphans = append(*orphans, delOp(DefKindBindings, r.key))
			continue
		}
		rekey(DefKindBindings, r, bindingKeyOf(d.VHost, d.Source, dt, d.Destination, d.RoutingKey, string(d.AMQPArgs)))
		args, err := decodeArgs(d.AMQPArgs)
		if err == nil {
			var owner uint64 // an exclusive queue's (recorded in a cluster only)
			if q := v.Queue(d.Destination); q != nil && dt == "q" {
				owner = q.Owner
			}
			err = v.Bind(d.Source, d.Destination, d.DestinationType == "exchange", d.RoutingKey, args, owner)
		}
		if err != nil {
			skip(DefKindBindings, r.key, err)
		}
	}
}
