package qraft

import (
	"encoding/binary"
	"errors"
	"fmt"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// The wire format of one transport message between two hosts: a batch of
// items, each addressed to one group.
//
//	batch   := version(1) item*
//	item    := kind(1) group(uvarint) body
//	kindRaft:    len(uvarint) raftpb.Message
//	kindQuiesce: term(uvarint) commit(uvarint)   the leader quiesced the group
//
// A batch never exceeds maxBatch bytes unless one item alone does.
const (
	wireVersion = 1

	itemRaft    = 1
	itemQuiesce = 2

	maxBatch = 8 << 20
)

var errBadBatch = errors.New("qraft: malformed batch")

// wireItem is one decoded item.
type wireItem struct {
	kind   byte
	group  uint64
	msg    *pb.Message // itemRaft
	term   uint64      // itemQuiesce
	commit uint64      // itemQuiesce
}

// batcher accumulates the items bound for one peer in one cycle.
type batcher struct {
	bufs   [][]byte // finished batches
	cur    []byte
	groups []uint64 // groups with a raft message in the batch (for ReportUnreachable)
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
	b.cut(len(data) + 21)
	b.cur = append(b.cur, itemRaft)
	b.cur = binary.AppendUvarint(b.cur, group)
	b.cur = binary.AppendUvarint(b.cur, uint64(len(data)))
	b.cur = append(b.cur, data...)
	return nil
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
	p := data[1:]
	var out []wireItem
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, false
		}
		p = p[n:]
		return v, true
	}
	for len(p) > 0 {
		kind := p[0]
		p = p[1:]
		g, ok := uv()
		if !ok {
			return out, errBadBatch
		}
		switch kind {
		case itemRaft:
			n, ok := uv()
			if !ok || n > uint64(len(p)) {
				return out, errBadBatch
			}
			m := &pb.Message{}
			if err := proto.Unmarshal(p[:n], m); err != nil {
				return out, fmt.Errorf("%w: %v", errBadBatch, err)
			}
			p = p[n:]
			out = append(out, wireItem{kind: kind, group: g, msg: m})
		case itemQuiesce:
			t, ok1 := uv()
			c, ok2 := uv()
			if !ok1 || !ok2 {
				return out, errBadBatch
			}
			out = append(out, wireItem{kind: kind, group: g, term: t, commit: c})
		default:
			return out, errBadBatch
		}
	}
	return out, nil
}
