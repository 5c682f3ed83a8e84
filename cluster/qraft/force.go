package qraft

import (
	"fmt"
	"sort"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Recovery from a lost majority (issue 22), RabbitMQ's
// force_shrink_member_to_current_member for every quorum queue of the
// node at once: before any group starts, each recovered group's log gets
// one removal of every other member, in a term above any it has seen,
// and everything up to them is marked committed. The group then applies
// its whole log (the tail it had not known committed included) and the
// removals, and this node is its only voter.
//
// What it may lose: the entries only the lost members had. It keeps
// every entry this node has, so a publish confirmed to a client is kept
// whenever this node's copy had it.

// Forced returns, for each group Config.ForceAlone changed, the members
// it removed.
func (h *Host) Forced() map[uint64][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[uint64][]string, len(h.forced))
	for id, names := range h.forced {
		out[id] = append([]string(nil), names...)
	}
	return out
}

// forceAlone makes every recovered group this node's alone (at Open,
// before the loop runs).
func (h *Host) forceAlone() error {
	ids := make([]uint64, 0, len(h.rec))
	for id := range h.rec {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		removed, err := h.forceGroupAlone(id, h.rec[id])
		if err != nil {
			return fmt.Errorf("qraft: group %d: forced start: %w", id, err)
		}
		if len(removed) > 0 {
			h.forced[id] = removed
		}
	}
	return nil
}

func (h *Host) forceGroupAlone(id uint64, r *recovered) ([]string, error) {
	ls := r.ls
	if !ls.hasHS && !ls.hasSnap && len(ls.ents) == 1 {
		return nil, nil // nothing of it was written yet
	}
	members := map[uint64]bool{}
	cs := ls.snap.GetMetadata().GetConfState()
	for _, set := range [][]uint64{cs.GetVoters(), cs.GetLearners(), cs.GetVotersOutgoing(), cs.GetLearnersNext()} {
		for _, m := range set {
			members[m] = true
		}
	}
	names := map[uint64]string{}
	for nid, n := range r.names {
		names[nid] = n
	}
	term := max(ls.hs.GetTerm(), ls.snap.GetMetadata().GetTerm())
	last := ls.lastLocked()
	for i := ls.first + 1; i <= last; i++ {
		m := ls.ents[i-ls.first]
		term = max(term, m.term)
		if m.typ != recConf && m.typ != recConfV2 {
			continue
		}
		e, err := ls.entry(i)
		if err != nil {
			return nil, fmt.Errorf("conf change at %d: %w", i, err)
		}
		var changes []*pb.ConfChangeSingle
		if m.typ == recConf {
			cc := &pb.ConfChange{}
			if err := proto.Unmarshal(e.GetData(), cc); err != nil {
				return nil, fmt.Errorf("conf change at %d: %w", i, err)
			}
			if len(cc.GetContext()) > 0 {
				names[cc.GetNodeId()] = string(cc.GetContext())
			}
			changes = append(changes, &pb.ConfChangeSingle{Type: cc.Type, NodeId: cc.NodeId})
		} else {
			cc := &pb.ConfChangeV2{}
			if err := proto.Unmarshal(e.GetData(), cc); err != nil {
				return nil, fmt.Errorf("conf change at %d: %w", i, err)
			}
			changes = cc.GetChanges()
		}
		for _, c := range changes {
			switch c.GetType() {
			case pb.ConfChangeAddNode, pb.ConfChangeAddLearnerNode:
				members[c.GetNodeId()] = true
			case pb.ConfChangeRemoveNode:
				delete(members, c.GetNodeId())
			}
		}
	}
	if !members[h.self] {
		return nil, fmt.Errorf("this node is not a member of the configuration in its log")
	}
	others := make([]uint64, 0, len(members))
	for m := range members {
		if m != h.self {
			others = append(others, m)
		}
	}
	if len(others) == 0 {
		return nil, nil
	}
	sort.Slice(others, func(i, j int) bool { return others[i] < others[j] })
	term++
	ents := make([]*pb.Entry, 0, len(others))
	removed := make([]string, 0, len(others))
	for _, m := range others {
		name := names[m]
		if name == "" {
			name = h.nameOf(m)
		}
		removed = append(removed, name)
		data, err := proto.Marshal(&pb.ConfChange{Type: pb.ConfChangeRemoveNode.Enum(), NodeId: new(m), Context: []byte(name)})
		if err != nil {
			return nil, err
		}
		last++
		ents = append(ents, &pb.Entry{Type: pb.EntryConfChange.Enum(), Term: new(term), Index: new(last), Data: data})
	}
	hs := &pb.HardState{Term: new(term), Vote: new(h.self), Commit: new(last)}
	hsData, err := proto.Marshal(hs)
	if err != nil {
		return nil, err
	}
	recs := make([]rec, 0, len(ents)+1)
	for _, e := range ents {
		recs = append(recs, recOfEntry(id, e))
	}
	recs = append(recs, rec{Group: id, Kind: recHardState, Data: hsData})
	poss, err := h.store.Append(recs)
	if err != nil {
		return nil, err
	}
	if err := h.store.Sync(); err != nil {
		return nil, err
	}
	old := ls.append(ents, poss[:len(ents)])
	old = append(old, ls.setHardState(hs, poss[len(ents)])...)
	for _, p := range old {
		h.store.Release(p)
	}
	sort.Strings(removed)
	return removed, nil
}
