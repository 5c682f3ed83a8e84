package broker

import (
	"context"
	"errors"
	"sync"
)

// Replicated quorum queues (issue 14): what the broker needs of the node's
// raft host. The broker never imports the cluster packages: cluster/node.go
// adapts its *qraft.Host to QuorumHost and installs it with SetQuorumHost.
// A single node (no host) keeps quorum queues as they were: no Raft.

// QuorumEntry is a committed entry of a quorum queue's Raft group.
type QuorumEntry struct {
	Index, Term uint64
	Data        []byte
}

// QuorumSM is a quorum queue's state machine as the raft host drives it
// (qraft.StateMachine with broker types).
type QuorumSM interface {
	// Apply gets committed entries in order, on the host's apply
	// goroutine; empty entries and configuration changes are not passed.
	Apply(ents []QuorumEntry)
	// Snapshot encodes the state at the last applied index and lists the
	// entries it still needs (the live messages' bodies).
	Snapshot() (data []byte, live []uint64)
	// Restore replaces the state (a snapshot from the leader, recovery).
	Restore(index uint64, data []byte)
	// LeaderChanged: leader ("" unknown) in term; isSelf is reported once
	// this node leads and every entry of earlier terms is applied.
	LeaderChanged(leader string, term uint64, isSelf bool)
}

// QuorumStatus is a group member's view of its group, for the management
// API.
type QuorumStatus struct {
	ID, Term, Commit, Applied, LastIndex uint64
	Leader                               string
	Role                                 string // leader, follower, candidate, precandidate, stopped
	Members, Online                      []string
	LogBytes                             int64
	LogEntries                           uint64
	SnapshotIndex                        uint64
	Quiesced                             bool
}

// QuorumGroup is this node's member of a quorum queue's Raft group.
type QuorumGroup interface {
	// Propose appends data to the group's log (async); done runs once,
	// after the entry is committed and applied here, or with an error
	// (not the leader, leadership lost before the commit: the outcome is
	// unknown and the caller resends).
	Propose(data []byte, done func(index uint64, err error))
	// ReadEntry returns an entry's data (a live message's enqueue).
	ReadEntry(index uint64) ([]byte, error)
	// ReadEntries reads many entries' data with few reads; fn gets them
	// in index order. It fails if one is missing (then read them one by
	// one to tell which).
	ReadEntries(indices []uint64, fn func(index uint64, data []byte) error) error
	Leader() (node string, term uint64)
	Status() QuorumStatus
	AddMember(ctx context.Context, node string) error
	RemoveMember(ctx context.Context, node string) error
	TransferLeader(ctx context.Context, node string) error
	// Campaign makes this member start an election now (the preferred
	// leader of a new group).
	Campaign() error
}

// QuorumHost is the node's raft host for quorum queues.
type QuorumHost interface {
	// StartGroup starts this node's member of group id: from its log if
	// the host has one, else bootstrapped with members (join: empty,
	// waiting for the leader, for a member added later).
	StartGroup(id uint64, members []string, sm QuorumSM, join bool) (QuorumGroup, error)
	// StopGroup stops driving the group (the node shuts down); its log
	// stays.
	StopGroup(id uint64)
	// DeleteGroup stops the group and drops its log (the queue is gone).
	DeleteGroup(id uint64)
	// Announce sends msg one-way to node's HandleQuorumMessage (the
	// leader's announcements to the nodes that are not members).
	Announce(node string, msg []byte) error
}

// errNoQuorumHost: a quorum queue group without a raft host.
var errNoQuorumHost = errors.New("no raft host for quorum queues")

// qqBroker is a broker's side of replicated quorum queues.
type qqBroker struct {
	mu   sync.Mutex
	host QuorumHost
}

// SetQuorumHost installs the node's raft host (cluster mode only), before
// serving and before the metadata log is replayed: it starts this node's
// member of every replicated quorum queue recovered from the store; the
// ones declared later start when their declare is applied.
func (b *Broker) SetQuorumHost(h QuorumHost) {
	b.qq.mu.Lock()
	b.qq.host = h
	b.qq.mu.Unlock()
	if h == nil {
		return
	}
	for _, q := range b.quorumQueues() {
		q.qq.start(false)
	}
}

// SetQuorumBatching says whether every node of the cluster decodes
// qrepl.EnqueueBatch (cluster mode: the node learns it from its peers).
// While on, a quorum leader proposes the publishes that arrive together
// as one entry; an older node would skip such an entry, so it stays off
// until every node has said it decodes them.
func (b *Broker) SetQuorumBatching(on bool) { b.qqBatching.Store(on) }

// quorumHost returns the raft host, nil on a single node.
func (b *Broker) quorumHost() QuorumHost {
	b.qq.mu.Lock()
	defer b.qq.mu.Unlock()
	return b.qq.host
}

// quorumQueues lists every replicated quorum queue of every vhost.
func (b *Broker) quorumQueues() []*Queue {
	var out []*Queue
	for _, name := range b.VHosts() {
		v := b.VHost(name)
		if v == nil {
			continue
		}
		v.mu.RLock()
		for _, q := range v.queues {
			if q.qq != nil {
				out = append(out, q)
			}
		}
		v.mu.RUnlock()
	}
	return out
}
