package meta

import (
	"fmt"
	"sort"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// ForcedConfig is a group's membership as of the last entry of its log,
// for a forced start (this package's and cluster/qraft's): the
// configuration of a snapshot or an applied index, then the conf changes
// after it, in log order.
type ForcedConfig struct {
	ids   map[uint64]bool
	names map[uint64]string
	term  uint64 // the highest term seen
}

// NewForcedConfig starts from cs.
func NewForcedConfig(cs *pb.ConfState) *ForcedConfig {
	c := &ForcedConfig{ids: map[uint64]bool{}, names: map[uint64]string{}}
	for _, set := range [][]uint64{cs.GetVoters(), cs.GetLearners(), cs.GetVotersOutgoing(), cs.GetLearnersNext()} {
		for _, id := range set {
			c.ids[id] = true
		}
	}
	return c
}

// Name records a member's name.
func (c *ForcedConfig) Name(id uint64, name string) {
	if name != "" {
		c.names[id] = name
	}
}

// Term records a term seen in the log (an entry's, the hard state's).
func (c *ForcedConfig) Term(t uint64) { c.term = max(c.term, t) }

// Apply applies entry e (its term counts; a conf change changes the
// members); name decodes a ConfChange's context into the member's name
// ("" when it has none).
func (c *ForcedConfig) Apply(e *pb.Entry, name func(ctx []byte) string) error {
	c.Term(e.GetTerm())
	var changes []*pb.ConfChangeSingle
	switch e.GetType() {
	case pb.EntryConfChange:
		cc := &pb.ConfChange{}
		if err := proto.Unmarshal(e.GetData(), cc); err != nil {
			return fmt.Errorf("conf change at %d: %w", e.GetIndex(), err)
		}
		if len(cc.GetContext()) > 0 {
			c.Name(cc.GetNodeId(), name(cc.GetContext()))
		}
		changes = cc.AsV2().GetChanges()
	case pb.EntryConfChangeV2:
		cc := &pb.ConfChangeV2{}
		if err := proto.Unmarshal(e.GetData(), cc); err != nil {
			return fmt.Errorf("conf change at %d: %w", e.GetIndex(), err)
		}
		changes = cc.GetChanges()
	}
	for _, ch := range changes {
		switch ch.GetType() {
		case pb.ConfChangeAddNode, pb.ConfChangeAddLearnerNode:
			c.ids[ch.GetNodeId()] = true
		case pb.ConfChangeRemoveNode:
			delete(c.ids, ch.GetNodeId())
		}
	}
	return nil
}

// Removals returns the entries that remove every member but self, after
// index last, in a term above every one seen, and the hard state that
// commits them (self's vote). fallback names a member whose name is not
// known; context is the ConfChange context of a removal. It returns no
// entries when self is alone, and ErrNotMember when self is not a member.
func (c *ForcedConfig) Removals(self, last uint64, fallback func(id uint64) string, context func(name string) []byte) (ents []*pb.Entry, hs *pb.HardState, removed []string, err error) {
	if !c.ids[self] {
		return nil, nil, nil, ErrNotMember
	}
	others := make([]uint64, 0, len(c.ids))
	for id := range c.ids {
		if id != self {
			others = append(others, id)
		}
	}
	if len(others) == 0 {
		return nil, nil, nil, nil
	}
	sort.Slice(others, func(i, j int) bool { return others[i] < others[j] })
	term := c.term + 1
	for _, id := range others {
		name := c.names[id]
		if name == "" {
			name = fallback(id)
		}
		removed = append(removed, name)
		data, err := proto.Marshal(&pb.ConfChange{Type: pb.ConfChangeRemoveNode.Enum(), NodeId: new(id), Context: context(name)})
		if err != nil {
			return nil, nil, nil, err
		}
		last++
		ents = append(ents, &pb.Entry{Type: pb.EntryConfChange.Enum(), Term: new(term), Index: new(last), Data: data})
	}
	sort.Strings(removed)
	return ents, &pb.HardState{Term: new(term), Vote: new(self), Commit: new(last)}, removed, nil
}
