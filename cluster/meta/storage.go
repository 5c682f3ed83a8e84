package meta

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// FileName is the bbolt file of the group inside Config.Dir.
const FileName = "meta-raft.db"

var (
	bucketState   = []byte("state")
	bucketEntries = []byte("entries")

	keyHardState = []byte("hardstate")
	keySnapshot  = []byte("snapshot")
	keyApplied   = []byte("applied")
	keyConfState = []byte("confstate")
	keyClusterID = []byte("clusterid")
	keyMembers   = []byte("members")
)

// disk is the durable side of the group's storage: one bbolt file. The
// in-memory raft.MemoryStorage (mem) mirrors it for raft's reads.
type disk struct {
	db *bolt.DB
}

// loaded is what a restart reads back.
type loaded struct {
	hs        *pb.HardState
	snap      *pb.Snapshot
	entries   []*pb.Entry
	applied   uint64
	confState *pb.ConfState // as of applied (nil: none persisted)
	clusterID string
	members   map[uint64]memberInfo
}

func openDisk(dir string) (*disk, *loaded, error) {
	db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, nil, fmt.Errorf("meta: open %s: %w", filepath.Join(dir, FileName), err)
	}
	d := &disk{db: db}
	l := &loaded{members: map[uint64]memberInfo{}}
	err = db.Update(func(tx *bolt.Tx) error {
		st, err := tx.CreateBucketIfNotExists(bucketState)
		if err != nil {
			return err
		}
		ents, err := tx.CreateBucketIfNotExists(bucketEntries)
		if err != nil {
			return err
		}
		if v := st.Get(keyHardState); v != nil {
			l.hs = &pb.HardState{}
			if err := proto.Unmarshal(v, l.hs); err != nil {
				return fmt.Errorf("hard state: %w", err)
			}
		}
		if v := st.Get(keySnapshot); v != nil {
			l.snap = &pb.Snapshot{}
			if err := proto.Unmarshal(v, l.snap); err != nil {
				return fmt.Errorf("snapshot: %w", err)
			}
		}
		if v := st.Get(keyApplied); len(v) == 8 {
			l.applied = binary.BigEndian.Uint64(v)
		}
		if v := st.Get(keyConfState); v != nil {
			l.confState = &pb.ConfState{}
			if err := proto.Unmarshal(v, l.confState); err != nil {
				return fmt.Errorf("conf state: %w", err)
			}
		}
		l.clusterID = string(st.Get(keyClusterID))
		if v := st.Get(keyMembers); v != nil {
			if err := json.Unmarshal(v, &l.members); err != nil {
				return fmt.Errorf("members: %w", err)
			}
		}
		snapIndex := l.snap.GetMetadata().GetIndex()
		c := ents.Cursor()
		for k, v := c.Seek(u64(snapIndex + 1)); k != nil; k, v = c.Next() {
			e := &pb.Entry{}
			if err := proto.Unmarshal(v, e); err != nil {
				return fmt.Errorf("entry %d: %w", binary.BigEndian.Uint64(k), err)
			}
			l.entries = append(l.entries, e)
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("meta: read %s: %w", FileName, err)
	}
	return d, l, nil
}

func u64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

// saveReady persists one Ready's hard state, entries and snapshot in one
// transaction (one fsync). A received snapshot replaces the whole log.
func (d *disk) saveReady(hs *pb.HardState, ents []*pb.Entry, snap *pb.Snapshot) error {
	return d.db.Update(func(tx *bolt.Tx) error {
		st := tx.Bucket(bucketState)
		eb := tx.Bucket(bucketEntries)
		if snap != nil && !raft.IsEmptySnap(snap) {
			b, err := proto.Marshal(snap)
			if err != nil {
				return err
			}
			if err := st.Put(keySnapshot, b); err != nil {
				return err
			}
			if err := deleteFrom(eb, 0); err != nil {
				return err
			}
		}
		if len(ents) > 0 {
			if err := deleteFrom(eb, ents[0].GetIndex()); err != nil {
				return err
			}
			for _, e := range ents {
				b, err := proto.Marshal(e)
				if err != nil {
					return err
				}
				if err := eb.Put(u64(e.GetIndex()), b); err != nil {
					return err
				}
			}
		}
		if hs != nil && !raft.IsEmptyHardState(hs) {
			b, err := proto.Marshal(hs)
			if err != nil {
				return err
			}
			if err := st.Put(keyHardState, b); err != nil {
				return err
			}
		}
		return nil
	})
}

// deleteFrom deletes every entry with index >= from.
func deleteFrom(eb *bolt.Bucket, from uint64) error {
	c := eb.Cursor()
	for k, _ := c.Seek(u64(from)); k != nil; k, _ = c.Seek(u64(from)) {
		if err := eb.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// saveApplied records the applied index with the state that goes with it
// (conf state, members, cluster id) after an applied batch.
func (d *disk) saveApplied(applied uint64, cs *pb.ConfState, members map[uint64]memberInfo, clusterID string) error {
	return d.db.Update(func(tx *bolt.Tx) error {
		st := tx.Bucket(bucketState)
		if err := st.Put(keyApplied, u64(applied)); err != nil {
			return err
		}
		if cs != nil {
			b, err := proto.Marshal(cs)
			if err != nil {
				return err
			}
			if err := st.Put(keyConfState, b); err != nil {
				return err
			}
		}
		b, err := json.Marshal(members)
		if err != nil {
			return err
		}
		if err := st.Put(keyMembers, b); err != nil {
			return err
		}
		if clusterID != "" {
			return st.Put(keyClusterID, []byte(clusterID))
		}
		return nil
	})
}

// saveClusterID records an id learned outside the log (the transport's
// handshake) or given by the configuration.
func (d *disk) saveClusterID(id string) error {
	return d.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketState).Put(keyClusterID, []byte(id))
	})
}

// saveSnapshot stores a snapshot this node took and drops the entries up
// to compactTo (kept entries let slow followers catch up from the log).
func (d *disk) saveSnapshot(snap *pb.Snapshot, compactTo uint64) error {
	return d.db.Update(func(tx *bolt.Tx) error {
		b, err := proto.Marshal(snap)
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketState).Put(keySnapshot, b); err != nil {
			return err
		}
		eb := tx.Bucket(bucketEntries)
		c := eb.Cursor()
		for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k) <= compactTo; k, _ = c.First() {
			if err := eb.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

func (d *disk) close() error { return d.db.Close() }

// memStorage is raft's view: a MemoryStorage whose InitialState reports
// the conf state as of the applied index raft restarts from (a
// MemoryStorage only knows the snapshot's).
type memStorage struct {
	*raft.MemoryStorage
	cs *pb.ConfState
}

func (m *memStorage) InitialState() (*pb.HardState, *pb.ConfState, error) {
	hs, cs, err := m.MemoryStorage.InitialState()
	if m.cs != nil {
		cs = m.cs
	}
	return hs, cs, err
}
