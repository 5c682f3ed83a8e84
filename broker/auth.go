package broker

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"regexp"
	"sort"

	"github.com/warrenmq/warren/amqp"
)

// User is a broker user. Passwords are kept as RabbitMQ keeps them: a
// base64 string of a 4-byte salt followed by SHA-256(salt || password), so
// that hashes exported from RabbitMQ definitions can be imported as they are.
type User struct {
	Name         string
	PasswordHash string
	Tags         []string
	Limits       map[string]int64                     // max-connections, max-channels (limits.go); copied on write
	perms        map[string]*compiledPerm             // by vhost
	topics       map[string]map[string]*compiledTopic // by vhost, then exchange (topicperm.go)
}

// Permission is a user's access to one vhost, as three regular expressions
// matched against resource names (RabbitMQ semantics: "" matches nothing).
type Permission struct {
	Configure, Write, Read string
}

type compiledPerm struct {
	Permission
	configure, write, read *regexp.Regexp
}

// Access kinds.
type Access int

const (
	Configure Access = iota
	Write
	Read
)

func (a Access) String() string {
	switch a {
	case Configure:
		return "configure"
	case Write:
		return "write"
	}
	return "read"
}

// HashPassword returns a RabbitMQ-compatible rabbit_password_hashing_sha256 hash.
func HashPassword(password string) string {
	salt := make([]byte, 4)
	_, _ = rand.Read(salt)
	return hashWithSalt(salt, password)
}

func hashWithSalt(salt []byte, password string) string {
	h := sha256.New()
	h.Write(salt)
	h.Write([]byte(password))
	return base64.StdEncoding.EncodeToString(append(append([]byte{}, salt...), h.Sum(nil)...))
}

// CheckPassword reports whether password matches the stored hash.
func (u *User) CheckPassword(password string) bool {
	raw, err := base64.StdEncoding.DecodeString(u.PasswordHash)
	if err != nil || len(raw) != 4+sha256.Size {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(hashWithSalt(raw[:4], password)), []byte(u.PasswordHash)) == 1
}

// HasTag reports whether the user has the tag.
func (u *User) HasTag(tag string) bool {
	for _, t := range u.Tags {
		if t == tag {
			return true
		}
	}
	return false
}

// PutUser creates or updates a user with a password.
func (b *Broker) PutUser(name, password string, tags []string) error {
	return b.PutUserHash(name, HashPassword(password), tags)
}

// PutUserHash creates or updates a user with an already hashed password.
func (b *Broker) PutUserHash(name, hash string, tags []string) error {
	if b.replicating() {
		return b.propose(fmt.Sprintf("change of user '%s'", name), &command{Op: opUserPut, Name: name, Hash: hash, Tags: tags})
	}
	b.putUserHashLocal(name, hash, tags)
	return nil
}

func (b *Broker) putUserHashLocal(name, hash string, tags []string) {
	b.mu.Lock()
	u := b.users[name]
	if u != nil {
		u.PasswordHash, u.Tags = hash, append([]string(nil), tags...)
	} else {
		u = &User{Name: name, PasswordHash: hash, Tags: append([]string(nil), tags...), perms: map[string]*compiledPerm{}}
		b.users[name] = u
	}
	b.unlockPersist(userOp(u)) // logged
}

// DeleteUser removes a user.
func (b *Broker) DeleteUser(name string) bool {
	ok, err := b.DeleteUserE(name)
	if err != nil {
		b.log.Error("deleting a user", "user", name, "err", err)
	}
	return ok
}

func (b *Broker) deleteUserLocal(name string) bool {
	b.mu.Lock()
	u, ok := b.users[name]
	delete(b.users, name)
	if !ok {
		b.mu.Unlock()
		return false
	}
	ops := []defOp{delOp(DefKindUsers, name)}
	for vhost := range u.perms {
		ops = append(ops, delOp(DefKindPermissions, scopedKey(vhost, name)))
	}
	for vhost, xs := range u.topics {
		for x := range xs {
			ops = append(ops, delOp(DefKindTopicPermissions, topicPermissionKey(vhost, name, x)))
		}
		b.topicPerms.Add(-int64(len(xs)))
	}
	b.unlockPersist(ops...) // logged
	return true
}

// User returns a copy of the named user, or nil.
func (b *Broker) User(name string) *User {
	b.mu.RLock()
	defer b.mu.RUnlock()
	u := b.users[name]
	if u == nil {
		return nil
	}
	c := *u
	return &c
}

// Users returns the user names, sorted.
func (b *Broker) Users() []string {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]string, 0, len(b.users))
	for n := range b.users {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Authenticate checks a user's password and returns the user.
func (b *Broker) Authenticate(name, password string) (*User, bool) {
	u := b.User(name)
	if u == nil || !u.CheckPassword(password) {
		return nil, false
	}
	return u, true
}

// SetPermissions sets a user's permissions on a vhost. The expressions are
// compiled now; an invalid one is an error.
func (b *Broker) SetPermissions(vhost, user string, p Permission) error {
	if b.replicating() {
		if _, err := compilePerm(p); err != nil {
			return err
		}
		return b.propose(fmt.Sprintf("permissions of user '%s' in vhost '%s'", user, vhost), &command{Op: opPermSet, VHost: vhost, User: user, Perm: &p})
	}
	return b.setPermissionsLocal(vhost, user, p)
}

func compilePerm(p Permission) (*compiledPerm, error) {
	cp := &compiledPerm{Permission: p}
	var err error
	for _, f := range []struct {
		src string
		dst **regexp.Regexp
	}{{p.Configure, &cp.configure}, {p.Write, &cp.write}, {p.Read, &cp.read}} {
		if f.src == "" {
			continue
		}
		if *f.dst, err = regexp.Compile(f.src); err != nil {
			return nil, err
		}
	}
	return cp, nil
}

func (b *Broker) setPermissionsLocal(vhost, user string, p Permission) error {
	cp, err := compilePerm(p)
	if err != nil {
		return err
	}
	b.mu.Lock()
	u := b.users[user]
	if u == nil {
		b.mu.Unlock()
		return errNoUser
	}
	u.perms[vhost] = cp
	return b.unlockPersist(permissionOp(vhost, user, p))
}

// ClearPermissions removes a user's permissions on a vhost.
func (b *Broker) ClearPermissions(vhost, user string) error {
	if b.replicating() {
		return b.propose(fmt.Sprintf("permissions of user '%s' in vhost '%s'", user, vhost), &command{Op: opPermClear, VHost: vhost, User: user})
	}
	b.clearPermissionsLocal(vhost, user)
	return nil
}

func (b *Broker) clearPermissionsLocal(vhost, user string) {
	b.mu.Lock()
	u := b.users[user]
	if u == nil || u.perms[vhost] == nil {
		b.mu.Unlock()
		return
	}
	delete(u.perms, vhost)
	b.unlockPersist(delOp(DefKindPermissions, scopedKey(vhost, user))) // logged
}

// Permissions returns a user's permissions on a vhost.
func (b *Broker) Permissions(vhost, user string) (Permission, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if u := b.users[user]; u != nil {
		if p := u.perms[vhost]; p != nil {
			return p.Permission, true
		}
	}
	return Permission{}, false
}

// CanAccessVHost reports whether the user has any permissions on the vhost.
func (b *Broker) CanAccessVHost(user, vhost string) bool {
	_, ok := b.Permissions(vhost, user)
	return ok
}

// Check reports whether user may access the named resource. Names are
// matched as RabbitMQ does: an unanchored search (re:run), so a permission
// meant for one name must be written "^name$"; "" grants nothing.
func (b *Broker) Check(user, vhost string, a Access, name string) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	u := b.users[user]
	if u == nil {
		return false
	}
	p := u.perms[vhost]
	if p == nil {
		return false
	}
	var re *regexp.Regexp
	switch a {
	case Configure:
		re = p.configure
	case Write:
		re = p.write
	default:
		re = p.read
	}
	return re != nil && re.MatchString(name)
}

// Denied names a refused permission: the access, and the resource's kind
// ("queue" or "exchange") and name as RabbitMQ names them in its error
// (the default exchange as "amq.default").
type Denied struct {
	Access     Access
	Kind, Name string
}

// CheckCreateArgs is RabbitMQ's check of the arguments that make a new
// queue or exchange send messages somewhere else (rabbit_channel's
// queue.declare and exchange.declare): a queue with x-dead-letter-exchange
// needs read on the queue and write on that exchange; an exchange with
// alternate-exchange needs read on the exchange and write on the alternate
// one. Without it, configure on a name would be enough to route messages
// into any queue through the default exchange. kind is "queue" or
// "exchange"; call it only for a resource that does not exist yet, as
// RabbitMQ (a redeclare must be equivalent anyway). It returns nil when
// allowed, or the first permission refused, in RabbitMQ's order.
func (b *Broker) CheckCreateArgs(user, vhost, kind, name string, args amqp.Table) *Denied {
	key := "alternate-exchange"
	if kind == "queue" {
		key = "x-dead-letter-exchange"
	}
	target, ok := args[key].(string) // only a longstr names an exchange
	if !ok {
		return nil
	}
	if target == "" {
		target = "amq.default"
	}
	if !b.Check(user, vhost, Read, name) {
		return &Denied{Read, kind, name}
	}
	if !b.Check(user, vhost, Write, target) {
		return &Denied{Write, "exchange", target}
	}
	return nil
}

type brokerError string

func (e brokerError) Error() string { return string(e) }

const errNoUser = brokerError("no such user")
