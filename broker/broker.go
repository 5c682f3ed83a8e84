// Package broker holds Warren's model: virtual hosts, exchanges, bindings,
// routing, queues and consumers, users and permissions. It knows nothing of
// sockets or frames: the server package drives it and implements Sink to
// receive deliveries.
//
// Lock order (a goroutine holding a lock may only take locks further down):
//
//	Broker.mu  ->  VHost.mu  ->  Queue.mu  ->  (Sink internals: channel, then connection output)
//
// Exchanges and bindings are guarded by their VHost's mu. Sink methods are
// called with the queue's lock held and must never call back into a Queue;
// code that holds channel state (acks, cancels) releases it before calling
// a Queue.
package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/clock"
	"github.com/warrenmq/warren/store"
)

// Config configures a Broker.
type Config struct {
	Logger *slog.Logger
	Clock  clock.Clock
	// Store, if set, keeps durable definitions across restarts (see
	// persist.go). A broker with a store starts empty: call Recover
	// before use, which loads the store and, on first boot only, creates
	// the default vhost and user.
	Store DefinitionStore
	// Messages, if set, keeps the persistent messages of durable queues
	// (msgstore.go); Recover loads them.
	Messages *MsgStore
	// QueueWindow is how many ready messages a queue keeps in memory
	// before the rest go to disk only (spill.go); 0 means
	// DefaultQueueWindow. It takes effect with Messages.
	QueueWindow int

	// DataDir is where Open keeps durable state: the definitions store in
	// it, the message store in its "msgs" directory. Empty means a broker
	// in memory only. New ignores it (it takes Store and Messages).
	DataDir string
	// MessageStore configures the message store Open opens in DataDir
	// (its Logger defaults to Logger): the bound on open segment files,
	// the sync retry interval, a file system for tests to inject faults.
	MessageStore MsgStoreOptions

	// Node is this node's name in a cluster ("warren@host"); "" for a
	// single node (cluster.go).
	Node string
	// PlaceQueue, if set, chooses the home node of every new queue in a
	// cluster (a Go-only override for tests, cmd.go); "" from it means
	// the usual choice.
	PlaceQueue func(vhost, name string) string
}

// Broker is the set of virtual hosts and users of one Warren node.
type Broker struct {
	log   *slog.Logger
	clock clock.Clock
	node  string // Config.Node
	// runBase is this run's connection id base (RunConnIDBase).
	runBase uint64

	// repl, nodes and placeQueue make definition changes replicated
	// commands in a cluster (cmd.go); repl is set before serving.
	repl       Replicator
	nodes      func() []string
	placeQueue func(vhost, name string) string
	applied    atomic.Uint64 // the last replicated command applied (cmd.go)
	remote     remoteState   // remote queues (remote.go)
	qq         qqBroker      // replicated quorum queues (qqhost.go)
	// qqBatching: every node of the cluster decodes qrepl.EnqueueBatch,
	// so quorum leaders propose the publishes that arrive together as
	// one entry (SetQuorumBatching).
	qqBatching atomic.Bool

	mu     sync.RWMutex
	vhosts map[string]*VHost
	users  map[string]*User
	// topicPerms counts the topic permissions of all users, so that
	// publishes skip the topic check while there are none (topicperm.go).
	topicPerms atomic.Int64
	params     map[string]DefParameter // runtime parameters by vhost, component, name (params.go)
	moves      moveState               // replays and moves (replay.go, moves.go)

	store DefinitionStore
	msgs  *MsgStore

	queueWindow    int
	memoryPressure atomic.Bool
	persistMu      sync.Mutex  // orders writes to store (persist.go)
	loading        atomic.Bool // Recover is applying stored records
	// streamDir is where streams keep their logs (stream.go); without a
	// data directory they live in streamMem.
	streamDir  string
	streamOnce sync.Once
	streamMem  *store.MemFS
	sn         streamNets // replicated streams (streamrepl.go)
	recovered  bool       // guarded by mu
	firstBoot  bool       // guarded by mu

	// defs is the definitions store Open opened (nil otherwise); ownsMsgs
	// says Open opened msgs too. Close closes them, once.
	defs      *store.Defs
	ownsMsgs  bool
	closeOnce sync.Once
	closed    atomic.Bool // close began (stops dead-letter retries)
	closeErr  error
}

// Open returns a broker that owns its storage: with cfg.DataDir, it opens
// (creating them if needed) the definitions store in the directory and the
// message store in its "msgs" directory, and recovers the durable
// definitions and messages before it returns; without, the broker lives in
// memory with the default vhost and user, as New. cfg.Store and
// cfg.Messages must be nil. Close closes what Open opened.
func Open(cfg Config) (*Broker, error) {
	if cfg.Store != nil || cfg.Messages != nil {
		return nil, errors.New("broker: Open opens its own stores; Config.Store and Config.Messages are for New")
	}
	if cfg.DataDir == "" {
		return New(cfg), nil
	}
	defs, err := store.Open(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	mo := cfg.MessageStore
	if mo.Logger == nil {
		mo.Logger = cfg.Logger
	}
	msgs, err := OpenMsgStoreWith(filepath.Join(cfg.DataDir, "msgs"), mo)
	if err != nil {
		defs.Close()
		return nil, fmt.Errorf("broker: %w", err)
	}
	cfg.Store, cfg.Messages = defs, msgs
	b := New(cfg)
	b.defs, b.ownsMsgs = defs, true
	if err := b.Recover(); err != nil {
		// Not clean: nothing was served, but the messages were not all
		// recovered either; the next start reads them as after a crash.
		b.close(false)
		return nil, fmt.Errorf("broker: recovering definitions: %w", err)
	}
	return b, nil
}

// Close stops the running shovels (their parameters are kept, so they
// resume at the next start) and closes the stores Open opened, the message store first (its
// pending syncs complete, every queue log is synced), then the
// definitions store, and marks the shutdown clean: the next start trusts
// the redelivered flags on disk. Call it once no consumer is left whose
// unacked messages were not returned (for a Server: after its Shutdown
// returned nil). It is idempotent, and a no-op for a broker from New.
func (b *Broker) Close() error { return b.close(true) }

// CloseUnclean is Close without marking the shutdown clean, for when
// consumers may still hold unacked messages (a Server whose Shutdown timed
// out): the next start marks every recovered message redelivered, as
// after a crash.
func (b *Broker) CloseUnclean() error { return b.close(false) }

func (b *Broker) close(clean bool) error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		for _, vn := range b.VHosts() {
			if v := b.VHost(vn); v != nil {
				v.dlq.release() // clients waiting on dead letters owed to other nodes
				for _, q := range v.Queues() {
					q.typ().closing()
				}
			}
		}
		if b.ownsMsgs {
			if err := b.msgs.Close(clean); err != nil {
				b.log.Error("closing the message store", "err", err)
				b.closeErr = err
			}
		}
		if b.defs != nil {
			if err := b.defs.Close(); err != nil {
				b.log.Error("closing the definitions store", "err", err)
				if b.closeErr == nil {
					b.closeErr = err
				}
			}
		}
	})
	return b.closeErr
}

// New returns a broker with the default vhost "/" and the user guest/guest
// (an administrator with full permissions on "/"), as RabbitMQ starts.
// With cfg.Store, Recover creates them instead (on first boot only).
func New(cfg Config) *Broker {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	b := &Broker{log: cfg.Logger, clock: cfg.Clock, vhosts: map[string]*VHost{}, users: map[string]*User{}, store: cfg.Store, msgs: cfg.Messages,
		queueWindow: cfg.QueueWindow, node: cfg.Node, placeQueue: cfg.PlaceQueue, runBase: newRunBase(cfg.Node)}
	if cfg.DataDir != "" {
		b.streamDir = filepath.Join(cfg.DataDir, "streams")
	}
	if b.queueWindow <= 0 {
		b.queueWindow = DefaultQueueWindow
	}
	if b.store == nil {
		b.createDefaults()
	}
	return b
}

// Clock returns the broker's clock.
func (b *Broker) Clock() clock.Clock { return b.clock }

// Logger returns the broker's logger.
func (b *Broker) Logger() *slog.Logger { return b.log }

// Closed reports whether the broker is closing or closed.
func (b *Broker) Closed() bool { return b.closed.Load() }

// VHost returns the named vhost or nil.
func (b *Broker) VHost(name string) *VHost {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.vhosts[name]
}

// VHosts returns the vhost names, sorted.
func (b *Broker) VHosts() []string {
	b.mu.RLock()
	defer b.mu.RUnlock()
	names := make([]string, 0, len(b.vhosts))
	for n := range b.vhosts {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// AddVHost creates a vhost with the predeclared exchanges; it returns the
// existing one if it exists.
func (b *Broker) AddVHost(name string) *VHost {
	v, err := b.AddVHostE(name)
	if err != nil {
		b.log.Error("adding a vhost", "vhost", name, "err", err)
	}
	return v
}

func (b *Broker) addVHostLocal(name string) *VHost {
	b.mu.Lock()
	if v := b.vhosts[name]; v != nil {
		b.mu.Unlock()
		return v
	}
	v := newVHost(b, name)
	b.vhosts[name] = v
	b.unlockPersist(putOp(DefKindVHosts, name, DefVHost{Name: name}))
	return v
}

// VHostMeta is a vhost's description and tags (RabbitMQ's metadata).
type VHostMeta struct {
	Description string
	Tags        []string
}

// SetVHostMeta sets a vhost's description and tags; false if there is no
// such vhost.
func (b *Broker) SetVHostMeta(name string, m VHostMeta) bool {
	ok, err := b.SetVHostMetaE(name, m)
	if err != nil {
		b.log.Error("setting a vhost's metadata", "vhost", name, "err", err)
	}
	return ok
}

func (b *Broker) setVHostMetaLocal(name string, m VHostMeta) bool {
	b.mu.Lock()
	v := b.vhosts[name]
	if v == nil {
		b.mu.Unlock()
		return false
	}
	m.Tags = append([]string{}, m.Tags...)
	v.meta = m
	b.unlockPersist(putOp(DefKindVHosts, name, defVHost(name, m, v.limitMap)))
	return true
}

// Meta returns the vhost's description and tags.
func (v *VHost) Meta() VHostMeta {
	v.b.mu.RLock()
	defer v.b.mu.RUnlock()
	m := v.meta
	m.Tags = append([]string{}, m.Tags...)
	return m
}

// defVHost is a vhost's record: its metadata, and its limits if it has
// any.
func defVHost(name string, m VHostMeta, limits map[string]int64) DefVHost {
	tags := m.Tags
	if tags == nil {
		tags = []string{}
	}
	d := DefVHost{Name: name, Metadata: map[string]any{"description": m.Description, "tags": tags}}
	if len(limits) > 0 {
		d.Limits = limits
	}
	return d
}

// metaOf reads a definitions vhost's metadata (or its older top-level
// description and tags).
func metaOf(d DefVHost) VHostMeta {
	var m VHostMeta
	m.Description, _ = d.Metadata["description"].(string)
	if m.Description == "" {
		m.Description = d.Description
	}
	tags := d.Metadata["tags"]
	if tags == nil {
		tags = d.Tags
	}
	switch t := tags.(type) {
	case []any:
		for _, x := range t {
			if s, ok := x.(string); ok {
				m.Tags = append(m.Tags, s)
			}
		}
	case []string:
		m.Tags = t
	case string:
		for _, s := range strings.Split(t, ",") {
			if s = strings.TrimSpace(s); s != "" {
				m.Tags = append(m.Tags, s)
			}
		}
	}
	return m
}

// DeleteVHost removes a vhost, deleting its queues (consumers are cancelled).
func (b *Broker) DeleteVHost(name string) bool {
	ok, err := b.DeleteVHostE(name)
	if err != nil {
		b.log.Error("deleting a vhost", "vhost", name, "err", err)
	}
	return ok
}

func (b *Broker) deleteVHostLocal(name string) bool {
	b.mu.Lock()
	v := b.vhosts[name]
	delete(b.vhosts, name)
	for _, u := range b.users {
		delete(u.perms, name)
		b.topicPerms.Add(-int64(len(u.topics[name])))
		delete(u.topics, name)
	}
	b.dropParamsLocked(name)
	if v != nil {
		// Everything under the name goes, permissions of any user too.
		b.dropVHostLocked(name) // logged; DeleteVHost reports no errors
	}
	b.mu.Unlock()
	if v == nil {
		return false
	}
	v.close()
	return true
}

// ErrNotFound etc. are built with amqp.Errorf at the call sites; this helper
// formats the common "no queue" text.
func notFoundQueue(name, vhost string) *amqp.Error {
	return amqp.Errorf(amqp.NotFound, "no queue '%s' in vhost '%s'", name, vhost)
}

func notFoundExchange(name, vhost string) *amqp.Error {
	return amqp.Errorf(amqp.NotFound, "no exchange '%s' in vhost '%s'", name, vhost)
}
