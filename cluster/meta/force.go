package meta

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
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
	ids := map[uint64]bool{}
	for _, set := range [][]uint64{cs.GetVoters(), cs.GetLearners(), cs.GetVotersOutgoing(), cs.GetLearnersNext()} {
		for _, id := range set {
			ids[id] = true
		}
	}
	names := map[uint64]string{}
	for id, m := range l.members {
		names[id] = m.Name
	}
	for _, e := range l.entries {
		if e.GetIndex() <= from {
			continue
		}
		switch e.GetType() {
		case pb.EntryConfChange:
			cc := &pb.ConfChange{}
			if err := proto.Unmarshal(e.GetData(), cc); err != nil {
				return nil, fmt.Errorf("meta: conf change at %d: %w", e.GetIndex(), err)
			}
			var info memberInfo
			if len(cc.GetContext()) > 0 && json.Unmarshal(cc.GetContext(), &info) == nil && info.Name != "" {
				names[cc.GetNodeId()] = info.Name
			}
			switch cc.GetType() {
			case pb.ConfChangeAddNode, pb.ConfChangeAddLearnerNode:
				ids[cc.GetNodeId()] = true
			case pb.ConfChangeRemoveNode:
				delete(ids, cc.GetNodeId())
			}
		case pb.EntryConfChangeV2:
			return nil, fmt.Errorf("meta: entry %d is a joint configuration change, which a forced start does not handle", e.GetIndex())
		}
	}
	if !ids[self] {
		return nil, ErrNotMember
	}
	others := make([]uint64, 0, len(ids))
	for id := range ids {
		if id != self {
			others = append(others, id)
		}
	}
	if len(others) == 0 {
		return nil, nil
	}
	sort.Slice(others, func(i, j int) bool { return others[i] < others[j] })

	hs := &pb.HardState{}
	if l.hs != nil {
		hs = proto.Clone(l.hs).(*pb.HardState)
	}
	last := l.snap.GetMetadata().GetIndex()
	if n := len(l.entries); n > 0 {
		last = l.entries[n-1].GetIndex()
	}
	term := max(hs.GetTerm(), l.snap.GetMetadata().GetTerm())
	for _, e := range l.entries {
		term = max(term, e.GetTerm())
	}
	term++
	var ents []*pb.Entry
	removed := make([]string, 0, len(others))
	for _, id := range others {
		name := names[id]
		if name == "" {
			name = fmt.Sprintf("%x", id)
		}
		removed = append(removed, name)
		cc := &pb.ConfChange{Type: pb.ConfChangeRemoveNode.Enum(), NodeId: new(id), Context: memberInfo{Name: name}.context()}
		data, err := proto.Marshal(cc)
		if err != nil {
			return nil, err
		}
		last++
		ents = append(ents, &pb.Entry{Type: pb.EntryConfChange.Enum(), Term: new(term), Index: new(last), Data: data})
	}
	hs.Term, hs.Vote, hs.Commit = new(term), new(self), new(last)
	if err := d.saveReady(hs, ents, nil); err != nil {
		return nil, fmt.Errorf("meta: forced start: %w", err)
	}
	l.hs = hs
	l.entries = append(l.entries, ents...)
	sort.Strings(removed)
	return removed, nil
}
