package meta

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/fnv"
)

// NodeID is a node's static Raft id: FNV-1a 64 of its name, 0 mapped to 1.
func NodeID(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	if id := h.Sum64(); id != 0 {
		return id
	}
	return 1
}

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
}
