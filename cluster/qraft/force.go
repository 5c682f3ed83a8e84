package qraft

import (
	"errors"
	"fmt"
	"sort"

	"github.com/warrenmq/warren/cluster/meta"
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
	conf := meta.NewForcedConfig(ls.snap.GetMetadata().GetConfState())
	conf.Term(max(ls.hs.GetTerm(), ls.snap.GetMetadata().GetTerm()))
	for nid, n := range r.names {
		conf.Name(nid, n)
	}
	last := ls.lastLocked()
	for i := ls.first + 1; i <= last; i++ {
		m := ls.ents[i-ls.first]
		conf.Term(m.term)
		if m.typ != recConf && m.typ != recConfV2 {
			continue
		}
		e, err := ls.entry(i)
		if err != nil {
			return nil, fmt.Errorf("conf change at %d: %w", i, err)
		}
		if err := conf.Apply(e, func(ctx []byte) string { return string(ctx) }); err != nil {
			return nil, err
		}
	}
	ents, hs, removed, err := conf.Removals(h.self, last, h.nameOf, func(name string) []byte { return []byte(name) })
	if errors.Is(err, meta.ErrNotMember) {
		return nil, fmt.Errorf("this node is not a member of the configuration in its log")
	}
	if err != nil || len(ents) == 0 {
		return nil, err
	}
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
	return removed, nil
}
