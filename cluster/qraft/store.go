package qraft

import "github.com/warrenmq/warren/cluster/qraft/wal"

// Record kinds the host writes to its log store.
const (
	recEntry       = 1 // a normal raft entry: Index, Term, Data = the entry's data
	recHardState   = 2 // Data = marshaled raftpb.HardState
	recSnapshot    = 3 // a local snapshot's meta: Data = marshaled raftpb.Snapshot (no bodies)
	recLive        = 4 // a live (normal) entry received with a snapshot: Index, Term, Data
	recDelete      = 5 // the group was deleted: drop everything before
	recConf        = 6 // a ConfChange entry: Index, Term, Data
	recConfV2      = 7 // a ConfChangeV2 entry
	recSnapInstall = 8 // a snapshot installed from the leader (replaces the log): as recSnapshot
)

// rec is one record of the node-wide log; recPos locates it.
type (
	rec    = wal.Record
	recPos = wal.Pos
)

// logStore is the node-wide log every group's records go to: the shared
// WAL (an interface so tests could substitute a fault-injecting one).
type logStore interface {
	Append(recs []rec) ([]recPos, error) // buffered, no sync
	Sync() error                         // one fdatasync for everything appended
	Read(p recPos) (rec, error)
	ReadMany(ps []recPos, fn func(i int, r rec) error) error
	Replay(fn func(p recPos, r rec) error) error
	Release(p recPos)
	Compact(move func(old, new recPos, r rec)) (wal.CompactStats, error)
	Stats() wal.Stats
	Close() error
	CrashForTest() error // tests: close without writing what was not synced
}

var _ logStore = (*wal.WAL)(nil)
