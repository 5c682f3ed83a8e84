package qraft

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Snapshot streams (issue 22: catch-up snapshots of a deep queue are
// streamed, not built whole in memory).
//
// A member that needs a snapshot gets it as a stream on the bulk lane
// (Config.SendBulk, which waits while the link's queue is full): the live
// entries' bodies in parts of about snapPartBytes, read back from the WAL
// a few at a time, then the MsgSnap itself, which lists them without
// bodies. The receiver writes each part to its WAL as it comes (records
// of kind recLive, which its recovery already attaches to the snapshot
// record that follows them, and releases when none does) and keeps only
// their positions; raft installs the MsgSnap, and the install keeps the
// entries it lists. So neither side holds more than a part or two of a
// long queue, where it used to hold the whole snapshot several times.
//
// The leader does not report the stream finished to raft: the member's
// answer after its install moves its progress on (raft's MsgAppResp in
// StateSnapshot), so no append overtakes the MsgSnap, which may still
// wait in the bulk queue. A stream that fails (the link went down, the
// member cannot be reached) is reported failed at once, and one whose
// member has not answered within snapAckTicks after its end is reported
// failed then: raft probes the member again, and sends a new snapshot if
// it still needs one. A live entry that is no longer in the WAL when the
// stream reads it was consumed meanwhile (its removal is in the log after
// the snapshot): it is left out, as an unreadable one was before.

const (
	snapPartBytes = 1 << 20
	snapReadBatch = 16
	// snapAckTicks: how long the leader waits for a member's answer
	// after a stream's end before it gives the stream up.
	snapAckTicks = 10 * electionTicks
)

type snapStream struct {
	id, index uint64
	cancel    context.CancelFunc
	ended     bool   // its MsgSnap went out; waiting for the member's answer
	endTick   uint64 // Host.tickN then
}

// streamSnapshot starts streaming m, a MsgSnap raft made for member to
// (on node name), in the background.
func (g *Group) streamSnapshot(to uint64, name string, m *pb.Message) {
	if st := g.streams[to]; st != nil {
		st.cancel() // raft wants this one now: the older one is given up
	}
	if g.streams == nil {
		g.streams = map[uint64]*snapStream{}
	}
	ctx, cancel := context.WithCancel(g.h.streamCtx)
	st := &snapStream{id: chunkSeq.Add(1), index: m.GetSnapshot().GetMetadata().GetIndex(), cancel: cancel}
	g.streams[to] = st
	g.h.streamWG.Add(1)
	go func() {
		defer g.h.streamWG.Done()
		err := g.sendSnapStream(ctx, name, st.id, m)
		cancel()
		_ = g.do(func() { g.snapStreamEnded(to, st, err) })
	}()
}

// sendSnapStream sends the parts and then m.
func (g *Group) sendSnapStream(ctx context.Context, name string, id uint64, m *pb.Message) error {
	sd, err := decodeSnapData(m.GetSnapshot().GetData())
	if err != nil {
		return err
	}
	live := sd.live
	sort.Slice(live, func(i, j int) bool { return live[i].index < live[j].index })
	send := func(b *batcher) error {
		for _, buf := range b.finish() {
			if err := g.h.cfg.SendBulk(ctx, name, buf); err != nil {
				return err
			}
		}
		return nil
	}
	var part []liveEnt
	size := 0
	var count uint64 // entries sent
	flush := func() error {
		if len(part) == 0 {
			return nil
		}
		var b batcher
		b.addSnapPart(g.id, id, part)
		if err := send(&b); err != nil {
			return err
		}
		count += uint64(len(part))
		clear(part)
		part, size = part[:0], 0
		return nil
	}
	for i := 0; i < len(live); i += snapReadBatch {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch := live[i:min(i+snapReadBatch, len(live))]
		idx := make([]uint64, len(batch))
		for j := range batch {
			idx[j] = batch[j].index
		}
		datas := make(map[uint64][]byte, len(batch))
		err := g.ReadEntries(idx, func(index uint64, data []byte) error { datas[index] = data; return nil })
		if errors.Is(err, ErrNotFound) {
			for _, index := range idx { // one by one, leaving the consumed ones out
				data, err := g.ReadEntry(index)
				if err == nil {
					datas[index] = data
				} else if !errors.Is(err, ErrNotFound) {
					return err
				}
			}
		} else if err != nil {
			return err
		}
		for _, l := range batch {
			data, ok := datas[l.index]
			if !ok {
				continue
			}
			if len(data) > snapPartBytes { // in fragments of its own
				if err := flush(); err != nil {
					return err
				}
				for off := 0; off < len(data); off += snapPartBytes {
					var b batcher
					b.addSnapFrag(g.id, id, l.index, l.term, uint64(len(data)), uint64(off), data[off:min(off+snapPartBytes, len(data))])
					if err := send(&b); err != nil {
						return err
					}
				}
				count++
				continue
			}
			part = append(part, liveEnt{index: l.index, term: l.term, data: data, hasData: true})
			size += len(data)
			if size >= snapPartBytes {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	// The end, then the MsgSnap (in chunks when its list of live entries
	// is large), on the same lane: they come after the last part.
	b := batcher{chunk: g.h.chunkSize}
	b.addSnapEnd(g.id, id, count)
	if err := b.addRaft(g.id, m); err != nil {
		return err
	}
	return send(&b)
}

// snapStreamEnded runs on the loop when a stream's goroutine is done.
func (g *Group) snapStreamEnded(to uint64, st *snapStream, err error) {
	if g.streams[to] != st {
		return // cancelled and replaced, or given up
	}
	if err != nil {
		delete(g.streams, to)
		g.h.log.Warn("qraft: snapshot stream failed", "group", g.id, "to", g.h.nameOf(to), "index", st.index, "err", err)
		if g.rn.BasicStatus().RaftState == raft.StateLeader {
			g.rn.ReportSnapshot(to, raft.SnapshotFailure)
		}
		return
	}
	st.ended, st.endTick = true, g.h.tickN
	g.h.st.snapsSent.Add(1)
}

// checkSnapStreams (every tick of a leader) forgets the streams whose
// member answered and reports failed those whose member did not answer
// in time.
func (g *Group) checkSnapStreams() {
	if len(g.streams) == 0 {
		return
	}
	prs := g.rn.Status().Progress
	for to, st := range g.streams {
		if !st.ended {
			continue
		}
		pr, ok := prs[to]
		if !ok || pr.State != tracker.StateSnapshot {
			delete(g.streams, to) // installed (raft moved on)
			continue
		}
		if g.h.tickN-st.endTick >= snapAckTicks {
			delete(g.streams, to)
			g.h.log.Warn("qraft: no answer to a snapshot stream; will probe again", "group", g.id, "to", g.h.nameOf(to), "index", st.index)
			g.rn.ReportSnapshot(to, raft.SnapshotFailure)
		}
	}
}

// cancelSnapStreams stops every stream (the group stopped, or this node
// no longer leads it).
func (g *Group) cancelSnapStreams() {
	for to, st := range g.streams {
		st.cancel()
		delete(g.streams, to)
	}
}

// receiveSnapEnd checks that every entry of stream id came (count): only
// then may its MsgSnap, which comes next, install.
func (g *Group) receiveSnapEnd(it *inItem) {
	key := streamKey(it.from, it.id)
	g.snapEndID, g.snapEndFrom = 0, ""
	if g.ls.incomingCount(key) == it.total && g.frag == nil {
		g.snapEndID, g.snapEndFrom = key, it.from
		return
	}
	g.h.log.Warn("qraft: a snapshot stream lost entries on the way; its snapshot is refused", "group", g.id,
		"from", it.from, "want", it.total, "got", g.ls.incomingCount(key))
}

// streamKey identifies a stream at its receiver: the sender's stream id
// (a per-process counter) mixed with the sender.
func streamKey(from string, id uint64) uint64 {
	return id*0x9E3779B97F4A7C15 ^ NodeID(from) | 1
}

// snapAllowed says whether a MsgSnap may be stepped: one whose live
// entries come without bodies (a stream's) only right after its stream's
// complete end. Otherwise the stream's entries are released and the
// leader, without an answer, streams again.
func (g *Group) snapAllowed(from string, m *pb.Message) bool {
	sd, err := decodeSnapData(m.GetSnapshot().GetData())
	if err != nil {
		return false
	}
	for _, l := range sd.live {
		if !l.hasData && (g.snapEndID == 0 || g.snapEndFrom != from) {
			for _, p := range g.ls.addIncoming(0, nil) {
				g.h.store.Release(p)
			}
			return false
		}
	}
	return true
}

// receiveSnapFrag gathers the fragments of one large live entry, then
// writes it as a part of one entry.
func (g *Group) receiveSnapFrag(it *inItem) {
	e := it.ents[0]
	key := streamKey(it.from, it.id)
	if it.fragOff == 0 {
		g.frag, g.fragID, g.fragIdx = make([]byte, 0, it.fragTotal), key, e.index
	}
	if g.fragID != key || g.fragIdx != e.index || uint64(len(g.frag)) != it.fragOff {
		g.frag = nil // a fragment lost or out of place: the entry is left out
		return
	}
	g.frag = append(g.frag, e.data...)
	if uint64(len(g.frag)) < it.fragTotal {
		return
	}
	whole := *it
	whole.ents = []liveEnt{{index: e.index, term: e.term, data: g.frag, hasData: true}}
	g.frag = nil
	g.receiveSnapPart(&whole)
}

// receiveSnapPart writes a part of a snapshot stream to the WAL and keeps
// the entries' positions until the stream's MsgSnap installs them.
func (g *Group) receiveSnapPart(it *inItem) {
	recs := make([]rec, len(it.ents))
	for i, e := range it.ents {
		recs[i] = rec{Group: g.id, Index: e.index, Term: e.term, Kind: recLive, Data: e.data}
	}
	poss, err := g.h.store.Append(recs)
	if err != nil {
		g.h.log.Error("qraft: writing a snapshot part", "group", g.id, "err", fmt.Errorf("qraft: append: %w", err))
		for _, p := range g.ls.addIncoming(0, nil) {
			g.h.store.Release(p)
		}
		return
	}
	g.h.unsynced = true
	refs := make([]liveRef, len(it.ents))
	for i, e := range it.ents {
		refs[i] = liveRef{index: e.index, term: e.term, pos: poss[i], size: uint32(len(e.data))}
	}
	for _, p := range g.ls.addIncoming(streamKey(it.from, it.id), refs) {
		g.h.store.Release(p)
	}
}
