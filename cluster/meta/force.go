package meta

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	pb "go.etcd.io/raft/v3/raftpb"
)

// Recovery from a lost majority (issue 22), as etcd's --force-new-cluster:
// before the group starts, the node appends to its own log one removal
// of every other member, in a term above any it has seen, and marks
// everything up to them committed. Raft then applies its whole log (the
// tail it had not known committed included) and the removals, and the
// node is the only voter: it elects itself.
//
// What it may lose: entries that only the lost members had (changes they
// committed that never reached this node). What it keeps: every entry
// this node has, whether it knew it committed or not, so a change some
// proposer saw succeed is kept whenever this node had it.

// ForceNewCluster makes the node self, whose group's storage is in dir,
// the only member of its cluster: call it while the node is stopped,
// before Open. It returns the members removed (none when the node was
// alone already: calling it again changes nothing).
func ForceNewCluster(dir, self string) ([]string, error) {
	if _, err := os.Stat(filepath.Join(dir, FileName)); err != nil {
		return nil, fmt.Errorf("meta: nothing to recover: %w", err)
	}
	d, l, err := openDisk(dir)
	if err != nil {
		return nil, err
	}
	removed, err := d.forceNewCluster(l, NodeID(self))
	if cerr := d.close(); err == nil && cerr != nil {
		err = cerr
	}
	return removed, err
}

// ErrNotMember is a forced start of a node that is not a member of the
// last configuration in its own log.
var ErrNotMember = errors.New("meta: this node is not a member of the configuration in its log")

// forceNewCluster appends the removals to l and to disk. It returns the
// names of the members removed (none when the node was alone already).
func (d *disk) forceNewCluster(l *loaded, self uint64) ([]string, error) {
	if l.hs == nil && len(l.entries) == 0 && l.snap.GetMetadata().GetIndex() == 0 {
		return nil, errors.New("meta: nothing to recover: the data directory has no cluster state")
	}
	// The configuration as of the last entry: the one as of the applied
	// index (or the snapshot's), then the conf changes after it.
	cs, from := l.confState, l.applied
	if cs == nil {
		cs, from = l.snap.GetMetadata().GetConfState(), l.snap.GetMetadata().GetIndex()
	}
	conf := NewForcedConfig(cs)
	conf.Term(max(l.hs.GetTerm(), l.snap.GetMetadata().GetTerm()))
	for id, m := range l.members {
		conf.Name(id, m.Name)
	}
	contextName := func(ctx []byte) string {
		var info memberInfo
		if json.Unmarshal(ctx, &info) != nil {
			return ""
		}
		return info.Name
	}
	for _, e := range l.entries {
		if e.GetIndex() <= from {
			conf.Term(e.GetTerm())
			continue
		}
		if e.GetType() == pb.EntryConfChangeV2 {
			return nil, fmt.Errorf("meta: entry %d is a joint configuration change, which a forced start does not handle", e.GetIndex())
		}
		if err := conf.Apply(e, contextName); err != nil {
			return nil, fmt.Errorf("meta: %w", err)
		}
	}
	last := l.snap.GetMetadata().GetIndex()
	if n := len(l.entries); n > 0 {
		last = l.entries[n-1].GetIndex()
	}
	ents, hs, removed, err := conf.Removals(self, last, func(id uint64) string { return fmt.Sprintf("%x", id) },
		func(name string) []byte { return memberInfo{Name: name}.context() })
	if err != nil || len(ents) == 0 {
		return nil, err
	}
	if err := d.saveReady(hs, ents, nil); err != nil {
		return nil, fmt.Errorf("meta: forced start: %w", err)
	}
	l.hs = hs
	l.entries = append(l.entries, ents...)
	return removed, nil
}
