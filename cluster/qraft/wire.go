package qraft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/warrenmq/warren/internal/wire"
)

// The wire format of one transport message between two hosts: a batch of
// items, each addressed to one group.
//
//	batch   := version(1) item*
//	item    := kind(1) group(uvarint) body
//	kindRaft:    len(uvarint) raftpb.Message
//	kindQuiesce: term(uvarint) commit(uvarint)   the leader quiesced the group
//	kindChunk:   id(uvarint) seq(uvarint) total(uvarint) len(uvarint) bytes
//	             a part of a raft message larger than chunkSize (a snapshot
//	             with its live bodies, from an older node), reassembled by
//	             the receiver
//	kindSnapPart: id(uvarint) n(uvarint) (index term len bytes)*n
//	             live entries of the snapshot stream id, in index order:
//	             the receiver writes them to its WAL as they come
//	kindSnapFrag: id(uvarint) index term total offset len(uvarint) bytes
//	             a part of one live entry too large for a part of its own
//	kindSnapEnd: id(uvarint) count(uvarint)   the stream's last part went
//	             (count entries in all): its MsgSnap (no bodies, a kindRaft
//	             item, in chunks when large) follows
//
// Snapshot streams travel on the bulk lane (Config.SendBulk), the rest on
// the Raft lane.
// A batch never exceeds maxBatch bytes unless one item alone does.
const (
	wireVersion = 1

	itemRaft     = 1
	itemQuiesce  = 2
	itemChunk    = 3
	itemSnapPart = 4
	itemSnapEnd  = 5
	itemSnapFrag = 6

	maxBatch = 8 << 20
)

// defaultChunkSize bounds one item: larger raft messages travel in chunks
// (a variable for tests: read when a host opens).
var defaultChunkSize = 4 << 20

var chunkSeq atomic.Uint64

var errBadBatch = errors.New("qraft: malformed batch")

// wireItem is one decoded item.
type wireItem struct {
	kind   byte
	group  uint64
	msg    *pb.Message // itemRaft
	term   uint64      // itemQuiesce
	commit uint64      // itemQuiesce
	// itemChunk; id also for itemSnapPart and itemSnapEnd (msg)
	id, seq, total uint64
	part           []byte
	ents           []liveEnt // itemSnapPart; one fragment for itemSnapFrag
	fragTotal      uint64    // itemSnapFrag: the entry's size
	fragOff        uint64    // itemSnapFrag: where this fragment goes
}

// batcher accumulates the items bound for one peer in one cycle.
type batcher struct {
	bufs   [][]byte // finished batches
	cur    []byte
	groups []uint64 // groups with a raft message in the batch (for ReportUnreachable)
	chunk  int      // chunk size (0: defaultChunkSize)
}

func (b *batcher) begin() {
	if len(b.cur) == 0 {
		b.cur = append(b.cur, wireVersion)
	}
}

func (b *batcher) cut(next int) {
	if len(b.cur) > 1 && len(b.cur)+next > maxBatch {
		b.bufs = append(b.bufs, b.cur)
		b.cur = nil
	}
	b.begin()
}

func (b *batcher) addRaft(group uint64, m *pb.Message) error {
	data, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	chunkSize := b.chunk
	if chunkSize <= 0 {
		chunkSize = 4 << 20
	}
	if len(data) > chunkSize {
		id := chunkSeq.Add(1)
		total := (len(data) + chunkSize - 1) / chunkSize
		for i := 0; i < total; i++ {
			b.addChunk(group, id, uint64(i), uint64(total), data[i*chunkSize:min((i+1)*chunkSize, len(data))])
		}
		return nil
	}
	b.cut(len(data) + 21)
	b.cur = append(b.cur, itemRaft)
	b.cur = binary.AppendUvarint(b.cur, group)
	b.cur = binary.AppendUvarint(b.cur, uint64(len(data)))
	b.cur = append(b.cur, data...)
	return nil
}

func (b *batcher) addChunk(group, id, seq, total uint64, part []byte) {
	b.cut(len(part) + 51)
	b.cur = append(b.cur, itemChunk)
	b.cur = binary.AppendUvarint(b.cur, group)
	b.cur = binary.AppendUvarint(b.cur, id)
	b.cur = binary.AppendUvarint(b.cur, seq)
	b.cur = binary.AppendUvarint(b.cur, total)
	b.cur = binary.AppendUvarint(b.cur, uint64(len(part)))
	b.cur = append(b.cur, part...)
}

// addSnapPart adds live entries of snapshot stream id.
func (b *batcher) addSnapPart(group, id uint64, ents []liveEnt) {
	n := 40
	for _, e := range ents {
		n += 30 + len(e.data)
	}
	b.cut(n)
	b.cur = append(b.cur, itemSnapPart)
	b.cur = binary.AppendUvarint(b.cur, group)
	b.cur = binary.AppendUvarint(b.cur, id)
	b.cur = binary.AppendUvarint(b.cur, uint64(len(ents)))
	for _, e := range ents {
		b.cur = binary.AppendUvarint(b.cur, e.index)
		b.cur = binary.AppendUvarint(b.cur, e.term)
		b.cur = binary.AppendUvarint(b.cur, uint64(len(e.data)))
		b.cur = append(b.cur, e.data...)
	}
}

// addSnapFrag adds bytes at off of a live entry of total bytes.
func (b *batcher) addSnapFrag(group, id, index, term, total, off uint64, part []byte) {
	b.cut(len(part) + 71)
	b.cur = append(b.cur, itemSnapFrag)
	for _, v := range []uint64{group, id, index, term, total, off, uint64(len(part))} {
		b.cur = binary.AppendUvarint(b.cur, v)
	}
	b.cur = append(b.cur, part...)
}

// addSnapEnd marks the end of snapshot stream id's parts, count entries.
func (b *batcher) addSnapEnd(group, id, count uint64) {
	b.cut(31)
	b.cur = append(b.cur, itemSnapEnd)
	b.cur = binary.AppendUvarint(b.cur, group)
	b.cur = binary.AppendUvarint(b.cur, id)
	b.cur = binary.AppendUvarint(b.cur, count)
}

func (b *batcher) addQuiesce(group, term, commit uint64) {
	b.cut(31)
	b.cur = append(b.cur, itemQuiesce)
	b.cur = binary.AppendUvarint(b.cur, group)
	b.cur = binary.AppendUvarint(b.cur, term)
	b.cur = binary.AppendUvarint(b.cur, commit)
}

func (b *batcher) finish() [][]byte {
	if len(b.cur) > 1 {
		b.bufs = append(b.bufs, b.cur)
	}
	b.cur = nil
	return b.bufs
}

// decodeBatch decodes a whole batch; a malformed batch yields an error
// and the items decoded before the fault.
func decodeBatch(data []byte) ([]wireItem, error) {
	if len(data) == 0 || data[0] != wireVersion {
		return nil, errBadBatch
	}
	r := wire.NewReader(data[1:], errBadBatch)
	var out []wireItem
	for r.Len() > 0 {
		kind, g := r.Byte(), r.Uvarint()
		it := wireItem{kind: kind, group: g}
		switch kind {
		case itemRaft:
			b := r.Bytes()
			if r.Err() != nil {
				return out, r.Err()
			}
			it.msg = &pb.Message{}
			if err := proto.Unmarshal(b, it.msg); err != nil {
				return out, fmt.Errorf("%w: %v", errBadBatch, err)
			}
		case itemQuiesce:
			it.term, it.commit = r.Uvarint(), r.Uvarint()
		case itemChunk:
			it.id, it.seq, it.total = r.Uvarint(), r.Uvarint(), r.Uvarint()
			it.part = r.Bytes()
			if it.seq >= it.total {
				r.Fail()
			}
		case itemSnapPart:
			it.id = r.Uvarint()
			n := r.Count()
			it.ents = make([]liveEnt, 0, n)
			for range n {
				index, term := r.Uvarint(), r.Uvarint()
				data := r.Bytes()
				if r.Err() != nil || len(it.ents) > 0 && index <= it.ents[len(it.ents)-1].index {
					return out, errBadBatch
				}
				it.ents = append(it.ents, liveEnt{index: index, term: term, data: data, hasData: true})
			}
		case itemSnapFrag:
			it.id = r.Uvarint()
			index, term := r.Uvarint(), r.Uvarint()
			it.fragTotal, it.fragOff = r.Uvarint(), r.Uvarint()
			data := r.Bytes()
			if it.fragOff > it.fragTotal || uint64(len(data)) > it.fragTotal-it.fragOff {
				r.Fail()
			}
			it.ents = []liveEnt{{index: index, term: term, data: data, hasData: true}}
		case itemSnapEnd:
			it.id, it.total = r.Uvarint(), r.Uvarint()
		default:
			r.Fail()
		}
		if r.Err() != nil {
			return out, r.Err()
		}
		out = append(out, it)
	}
	return out, nil
}

// chunkKey identifies a message being reassembled.
type chunkKey struct {
	from  string
	group uint64
}

type chunkBuf struct {
	id    uint64
	total uint64
	data  []byte
	next  uint64
}

// reassemble adds a chunk; it returns the whole message once the last
// chunk arrived. Chunks of one message arrive in order on one link; a
// chunk of another message (the sender gave up and started again) resets.
func reassemble(bufs map[chunkKey]*chunkBuf, from string, it *wireItem) (*pb.Message, error) {
	k := chunkKey{from, it.group}
	b := bufs[k]
	if b == nil || b.id != it.id {
		if it.seq != 0 {
			delete(bufs, k)
			return nil, nil // joined in the middle: drop (raft resends)
		}
		b = &chunkBuf{id: it.id, total: it.total}
		bufs[k] = b
	}
	if it.seq != b.next || it.total != b.total {
		delete(bufs, k)
		return nil, nil
	}
	b.data = append(b.data, it.part...)
	b.next++
	if b.next < b.total {
		return nil, nil
	}
	delete(bufs, k)
	m := &pb.Message{}
	if err := proto.Unmarshal(b.data, m); err != nil {
		return nil, fmt.Errorf("%w: %v", errBadBatch, err)
	}
	return m, nil
}
