// Package store is Warren's durable storage.
//
// Definitions (this file): the durable definitions of the broker (vhosts,
// users, permissions, policies, operator policies, durable exchanges,
// durable queues and the bindings between durable ends) are kept in one
// bbolt database, dir/defs.db, one bucket per kind. Keys and values are
// opaque bytes to the store; package broker chooses them (JSON records,
// keys of the form vhost + "\x00" + name) and owns their meaning.
//
// Durability: every Put and Delete is its own bbolt read-write
// transaction, committed with an fsync before the call returns, so a
// change reported as done survives a crash or a power cut. Definitions
// change rarely (a queue.declare of a durable queue, a policy change), so
// one fsync per change is the right price; the message log, which must
// group commits, lives elsewhere.
//
// Concurrency: a Defs is safe for concurrent use. bbolt runs one writer
// at a time (concurrent Put and Delete calls queue up, each with its own
// fsync) and any number of readers; ForEach reads one consistent
// snapshot. Its callback must not call Put or Delete: a write that needs
// to grow the file waits for open read transactions, so writing from
// inside ForEach can deadlock (bbolt's documented rule). Collect keys
// first, then write.
//
// Only one process may have the database open: Open takes bbolt's file
// lock and gives up after a few seconds if another process holds it.
package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Definition kinds: the buckets of defs.db.
const (
	KindVHosts           = "vhosts"
	KindUsers            = "users"
	KindPermissions      = "permissions"
	KindExchanges        = "exchanges"
	KindQueues           = "queues"
	KindBindings         = "bindings"
	KindPolicies         = "policies"
	KindOperatorPolicies = "operator_policies"
	KindTopicPermissions = "topic_permissions"
	KindParameters       = "parameters"
	// KindMeta holds the store's own markers (such as "the defaults were
	// created on first boot").
	KindMeta = "meta"
)

// Kinds lists every bucket of defs.db.
var Kinds = []string{KindVHosts, KindUsers, KindPermissions, KindExchanges, KindQueues, KindBindings,
	KindPolicies, KindOperatorPolicies, KindTopicPermissions, KindParameters, KindMeta}

// DefsFile is the name of the definitions database inside the data directory.
const DefsFile = "defs.db"

// ErrUnknownKind is returned for a kind not in Kinds.
var ErrUnknownKind = errors.New("store: unknown definition kind")

// Defs is the definitions store.
type Defs struct {
	db *bolt.DB
}

// Open opens (creating if needed) dir/defs.db and its buckets. dir is
// created if it does not exist.
func Open(dir string) (*Defs, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	path := filepath.Join(dir, DefsFile)
	db, err := bolt.Open(path, 0o644, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, k := range Kinds {
			if _, err := tx.CreateBucketIfNotExists([]byte(k)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	return &Defs{db: db}, nil
}

// Path is the database file's path.
func (d *Defs) Path() string { return d.db.Path() }

func checkKind(kind string) error {
	if !slices.Contains(Kinds, kind) {
		return fmt.Errorf("%w %q", ErrUnknownKind, kind)
	}
	return nil
}

// Put stores value under key in the kind's bucket, replacing any previous
// value, and returns once it is on disk.
func (d *Defs) Put(kind, key string, value []byte) error {
	if err := checkKind(kind); err != nil {
		return err
	}
	return d.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(kind)).Put([]byte(key), value)
	})
}

// Delete removes key from the kind's bucket (a missing key is not an
// error) and returns once the deletion is on disk.
func (d *Defs) Delete(kind, key string) error {
	if err := checkKind(kind); err != nil {
		return err
	}
	return d.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(kind)).Delete([]byte(key))
	})
}

// ForEach calls fn for every key of the kind in key order, from one
// consistent snapshot. key and value are only valid during the call (copy
// them to keep them). An error from fn stops the iteration and is
// returned.
func (d *Defs) ForEach(kind string, fn func(key, value []byte) error) error {
	if err := checkKind(kind); err != nil {
		return err
	}
	return d.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(kind)).ForEach(fn)
	})
}

// Close closes the database. Calls after Close fail.
func (d *Defs) Close() error { return d.db.Close() }
