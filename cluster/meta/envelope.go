package meta

import (
	"encoding/binary"
	"encoding/json"
	"errors"

	"github.com/warrenmq/warren/internal/raftpeer"
)

// NodeID is a node's static Raft id (raftpeer.NodeID).
func NodeID(name string) uint64 { return raftpeer.NodeID(name) }

// Entry kinds (the first byte of a normal entry's data after the version).
const (
	envVersion   byte = 1
	kindCommand  byte = 1 // a state machine command
	kindCluster  byte = 2 // the cluster id (first one applied wins)
	envHeaderLen      = 2 + 8 + 8 + 8 + 8
)

// proposalKey identifies a proposal: the proposing node, a random
// incarnation chosen at Open (so ids stay unique across restarts while old
// entries are replayed) and a counter.
type proposalKey struct {
	Node, Inc, Seq uint64
}

// envelope wraps every normal entry:
//
//	version(1) kind(1) node(8) inc(8) seq(8) notAfter(8, unix ms) payload
type envelope struct {
	kind     byte
	key      proposalKey
	notAfter int64
	payload  []byte
}

func (e envelope) marshal() []byte {
	b := make([]byte, envHeaderLen+len(e.payload))
	b[0] = envVersion
	b[1] = e.kind
	binary.BigEndian.PutUint64(b[2:], e.key.Node)
	binary.BigEndian.PutUint64(b[10:], e.key.Inc)
	binary.BigEndian.PutUint64(b[18:], e.key.Seq)
	binary.BigEndian.PutUint64(b[26:], uint64(e.notAfter))
	copy(b[envHeaderLen:], e.payload)
	return b
}

var errBadEnvelope = errors.New("meta: malformed entry")

func unmarshalEnvelope(b []byte) (envelope, error) {
	if len(b) < envHeaderLen || b[0] != envVersion {
		return envelope{}, errBadEnvelope
	}
	return envelope{
		kind: b[1],
		key: proposalKey{
			Node: binary.BigEndian.Uint64(b[2:]),
			Inc:  binary.BigEndian.Uint64(b[10:]),
			Seq:  binary.BigEndian.Uint64(b[18:]),
		},
		notAfter: int64(binary.BigEndian.Uint64(b[26:])),
		payload:  b[envHeaderLen:],
	}, nil
}

// memberInfo is what a ConfChange's Context carries, and what the group
// keeps per member.
type memberInfo struct {
	Name string       `json:"name"`
	Addr string       `json:"addr"`
	Key  *proposalKey `json:"key,omitempty"` // the proposer waiting for it
	// Inc is the incarnation (data directory) of the node added, when the
	// adder knew it (AddMemberInc): a node that joins replays the log
	// from its start, and only a removal after its own addition is its.
	Inc uint64 `json:"inc,omitempty"`
}

func (m memberInfo) context() []byte {
	b, _ := json.Marshal(m)
	return b
}

// snapshotData wraps the state machine's snapshot with the group's own
// state, which the compacted log no longer carries.
type snapshotData struct {
	ClusterID string                `json:"cluster_id,omitempty"`
	Members   map[uint64]memberInfo `json:"members"`
	SM        []byte                `json:"sm"`
	// Seen is the dedup window as of the snapshot's index
	// (seenSet.marshal); absent in snapshots of older versions.
	Seen []byte `json:"seen,omitempty"`
}

// dedupWindow is how many log positions a proposal key is remembered
// after the last entry that carried it (see seenSet and the package doc).
const dedupWindow = 10000

// seenSet is the deterministic duplicate filter of the apply: the keys of
// the envelope entries at log positions (applied-window, applied], each
// with the last position that carried it. An entry whose key is in the
// set is a duplicate (a re-proposal after a leader change whose original
// also committed) and applies as a no-op on every node. Being a function
// of the log alone, every node has the same set at the same index: it
// travels in snapshots and Open rebuilds it from the snapshot and the
// stored entries up to the applied index.
type seenSet struct {
	window uint64
	last   map[proposalKey]uint64 // key -> last position carrying it
	order  []seenAt               // positions in log order, for pruning
}

type seenAt struct {
	key   proposalKey
	index uint64
}

func newSeenSet(window uint64) *seenSet {
	return &seenSet{window: window, last: map[proposalKey]uint64{}}
}

// observe records key at index (indexes only increase) and reports
// whether an earlier entry within the window carried it (a duplicate).
//
// It prunes first, so the answer depends only on the positions in
// (index-window, index): the same on every node whenever it pruned
// before.
func (s *seenSet) observe(key proposalKey, index uint64) (dup bool) {
	s.prune(index)
	_, dup = s.last[key]
	s.last[key] = index
	s.order = append(s.order, seenAt{key, index})
	return dup
}

// prune forgets the positions at or before applied-window.
func (s *seenSet) prune(applied uint64) {
	if applied <= s.window {
		return
	}
	cut := applied - s.window
	i := 0
	for i < len(s.order) && s.order[i].index <= cut {
		if s.last[s.order[i].key] == s.order[i].index {
			delete(s.last, s.order[i].key)
		}
		i++
	}
	// Re-slicing from the front is amortised O(1): append reallocates
	// (and drops the pruned front) when the capacity runs out.
	s.order = s.order[i:]
}

// marshal encodes the positions in order: node, inc, seq, index (8 bytes
// each, big-endian) per position.
func (s *seenSet) marshal() []byte {
	b := make([]byte, 0, 32*len(s.order))
	for _, o := range s.order {
		b = binary.BigEndian.AppendUint64(b, o.key.Node)
		b = binary.BigEndian.AppendUint64(b, o.key.Inc)
		b = binary.BigEndian.AppendUint64(b, o.key.Seq)
		b = binary.BigEndian.AppendUint64(b, o.index)
	}
	return b
}

func unmarshalSeenSet(window uint64, b []byte) (*seenSet, error) {
	if len(b)%32 != 0 {
		return nil, errors.New("meta: malformed dedup set in snapshot")
	}
	s := newSeenSet(window)
	for ; len(b) > 0; b = b[32:] {
		k := proposalKey{binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:]), binary.BigEndian.Uint64(b[16:])}
		idx := binary.BigEndian.Uint64(b[24:])
		s.last[k] = idx
		s.order = append(s.order, seenAt{k, idx})
	}
	return s, nil
}
