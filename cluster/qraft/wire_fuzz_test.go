package qraft

import (
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
)

// FuzzDecodeBatch: a batch from a peer never panics the decoder, and the
// items of every batch the batcher writes (snapshot streams' included)
// decode back.
func FuzzDecodeBatch(f *testing.F) {
	var b batcher
	b.addRaft(1, &pb.Message{Type: pb.MsgSnap.Enum(), From: new(uint64(2)), To: new(uint64(3))})
	b.addQuiesce(1, 2, 3)
	b.addChunk(1, 7, 0, 2, []byte("abc"))
	b.addSnapPart(4, 9, []liveEnt{{index: 5, term: 1, data: []byte("x")}, {index: 6, term: 1, data: []byte("yz")}})
	b.addSnapFrag(4, 9, 7, 1, 10, 4, []byte("frag"))
	b.addSnapEnd(4, 9, 3)
	for _, buf := range b.finish() {
		f.Add(buf)
	}
	f.Add([]byte{wireVersion, itemSnapPart, 1, 1, 200})
	f.Add([]byte{wireVersion, itemSnapFrag, 1, 1, 1, 1, 5, 9, 1, 'a'})
	f.Fuzz(func(t *testing.T, data []byte) {
		items, err := decodeBatch(data)
		if err != nil {
			return
		}
		var out batcher
		for i := range items {
			it := &items[i]
			switch it.kind {
			case itemRaft:
				if err := out.addRaft(it.group, it.msg); err != nil {
					t.Fatal(err)
				}
			case itemQuiesce:
				out.addQuiesce(it.group, it.term, it.commit)
			case itemChunk:
				out.addChunk(it.group, it.id, it.seq, it.total, it.part)
			case itemSnapPart:
				for j := 1; j < len(it.ents); j++ {
					if it.ents[j].index <= it.ents[j-1].index {
						t.Fatalf("part entries out of order: %+v", it.ents)
					}
				}
				out.addSnapPart(it.group, it.id, it.ents)
			case itemSnapFrag:
				e := it.ents[0]
				if it.fragOff+uint64(len(e.data)) > it.fragTotal {
					t.Fatalf("fragment past its entry: %d+%d > %d", it.fragOff, len(e.data), it.fragTotal)
				}
				out.addSnapFrag(it.group, it.id, e.index, e.term, it.fragTotal, it.fragOff, e.data)
			case itemSnapEnd:
				out.addSnapEnd(it.group, it.id, it.total)
			}
		}
		var again []wireItem
		for _, buf := range out.finish() {
			its, err := decodeBatch(buf)
			if err != nil {
				t.Fatalf("a re-encoded batch does not decode: %v", err)
			}
			again = append(again, its...)
		}
		if len(again) != len(items) {
			t.Fatalf("%d items re-decoded, want %d", len(again), len(items))
		}
	})
}
