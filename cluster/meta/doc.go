// Package meta is Warren's metadata Raft group (issue 13): one Raft group
// over all nodes of a cluster whose replicated state machine is the
// broker's definitions. Every node applies the same committed commands in
// the same order into its own copy and routes locally from it.
//
// # Engine
//
// Consensus is go.etcd.io/raft/v3 (etcd, Kubernetes, CockroachDB): the
// library is only the algorithm, and this package brings the storage, the
// loop, ticking and (through Config.Send and Group.Step) the transport.
// That suits the later one-group-per-quorum-queue design (one loop, one
// fsync per batch for many groups, see docs/cluster.md and
// shared/cluster.md); for this single group it gives PreVote, CheckQuorum,
// joint-consensus-safe membership changes, snapshots and flow control
// without writing any of the algorithm here. The group drives a
// raft.RawNode from a single goroutine.
//
// Raft settings: a tick of Config.Tick (100 ms), heartbeat every tick,
// election timeout 10 ticks (randomised by raft to 10..20), PreVote (a
// node that was cut off does not disrupt the cluster when it returns) and
// CheckQuorum (a leader that cannot reach a majority steps down within an
// election timeout, so a cut-off minority has no leader), 1 MiB messages,
// 256 messages in flight, proposal forwarding from followers to the
// leader. Node ids are static: NodeID(name) = FNV-1a 64 of the node name.
//
// # Storage
//
// One bbolt file, <Dir>/meta-raft.db. Bucket "entries" maps the
// big-endian index to a marshalled raftpb.Entry. Bucket "state" holds the
// hard state, the latest snapshot (metadata and data), and, as of the
// applied index, the applied index itself, the conf state, the members
// (id -> name and cluster address) and the cluster id. raft reads a
// raft.MemoryStorage mirrored from the file (loaded at Open).
//
// # The loop
//
// One goroutine selects on the ticker, incoming messages (Step queues them
// and never blocks: a full queue drops, Raft retransmits), and proposals.
// After each event, while raft has a Ready:
//
//  1. persist the hard state, the new entries (overwriting any from the
//     same index on) and a received snapshot in ONE bbolt transaction
//     (one fsync), then mirror them into the MemoryStorage;
//  2. send the messages (marshalled raftpb.Message) through Config.Send;
//     a failed send reports the peer unreachable to raft, and every MsgSnap
//     is reported finished or failed;
//  3. restore a received snapshot (StateMachine.Restore), then apply the
//     committed entries in order (StateMachine.Apply for commands,
//     ApplyConfChange for membership changes) and persist the applied
//     index with the state that goes with it;
//  4. Advance, and take a snapshot when due.
//
// Messages are only sent after the entries and hard state of the same and
// previous batches are on disk, as etcd raft's Ready contract requires.
// Because the applied index is persisted after the batch, a crash between
// an apply and that write makes the next Open apply the last batch again:
// StateMachine.Apply must ignore an index it has already applied (a
// durable state machine keeps its own applied index with its state) or be
// idempotent. A state machine
// that keeps nothing itself sets Config.RestoreOnOpen: Open then restores
// it from the stored snapshot and raft replays the log after it.
//
// # Proposals and what an error means
//
// Propose wraps the command in an envelope: a version, a kind (command or
// cluster id), a proposal key (node id, a random incarnation chosen at
// Open so keys stay unique across restarts, a counter) and notAfter, the
// proposer's deadline in unix ms. When this node applies an entry whose
// key it is waiting for, the waiting Propose returns the error Apply gave
// (the same value, so the broker keeps its error types and AMQP codes).
// Followers forward proposals to the leader (raft's forwarding).
//
// # Re-proposals and duplicates
//
// A proposal forwarded to a leader that dies or is cut off before it
// appends and replicates it is lost without a word, as is one a leader
// appended only to its own log before losing leadership. So the group
// keeps every command it handed raft, with the leader and term it was
// handed under, until it applies here, its proposer gives up, or its
// notAfter passes; whenever this node sees a leader again under another
// leader or term, it hands raft the very same envelope again (same key,
// same notAfter), which reaches the new leader. A leader failover costs
// the proposer an election, not ProposeTimeout and an unknown outcome.
//
// The original may have survived too (it was in the new leader's log), so
// a key can be committed twice. The apply drops the later copy as a no-op
// on every node: it keeps the keys of the envelope entries at the last
// dedupWindow (10,000) log positions, each with the last position that
// carried it, and an entry whose key is in that window is a duplicate (it
// is not given to the state machine, and the proposer's answer is the
// result of the first copy's apply). The window is a function of the log
// alone (it is pruned before each lookup), so every node decides alike:
// it is part of the snapshot (snapshotData.Seen), and Open rebuilds it
// from the stored snapshot and the stored entries up to the applied
// index.
//
// Why 10,000 positions are enough: a position holding key K is only ever
// created by a leader appending K, from its own Propose (fresh, retried or
// re-proposed: all refused once K's notAfter has passed) or from a
// forwarded MsgProp (refused when notAfter is past by the leader's
// clock); replication copies entries to the same positions and creates
// none. So every position of K was created before notAfter(K) plus the
// clock skew between proposer and leader. If K commits at p1 < p2, the
// leader that created p2 had the committed prefix, K at p1 included, in
// its log: the p2-p1-1 entries between were all created after K was
// proposed (notAfter - ProposeTimeout) and before notAfter + skew. A
// duplicate escapes the window only if more than 10,000 entries are
// appended within ProposeTimeout plus skew (2,000 definition changes a
// second for 5 s), or if clocks differ by far more than a few seconds.
// Membership changes are not re-proposed (raft refuses a second pending
// one anyway).
//
// Propose fails with an error wrapping ErrNoQuorum ("cluster has no
// quorum: ...") in two ways, which callers (and the storm test of
// issue 13) must tell apart:
//
//   - definitely not applied: no leader took it within ProposeTimeout.
//     On a node that knows no leader raft drops a proposal before it
//     reaches any log; the group keeps it and retries it as soon as a
//     leader is known (an election in progress costs a short wait, not a
//     failure), and fails it when the timeout passes. The change is in no
//     log and never applies.
//   - outcome unknown (also wraps ErrOutcomeUnknown): the proposal was
//     handed to raft but not seen applied within ProposeTimeout (or ctx
//     ended, or the group closed). It may be in some node's log and may
//     still commit and apply later (a partition healing, a new leader
//     committing the old term's entries). Re-proposals make the common
//     case, a leader failover, succeed within the timeout; they stop at
//     notAfter, but a copy handed before may still commit later, so an
//     unknown outcome stays unknown. To make late applies rarer, a leader
//     drops forwarded proposals whose notAfter has passed by its clock
//     (they arrived after the proposer gave up), and no node hands raft
//     its own command past its notAfter; this assumes clocks within a
//     few seconds of each other and only ever drops, so a skewed clock
//     costs availability, never safety.
//
// No deterministic rule can turn "unknown" into "failed" without a quorum
// (a leader could have replicated the entry to a node that later commits
// it), so the group does not pretend to: the broker reports both as a
// failed change; a test checks that every change answered ok is present
// everywhere and that every definitely failed one is absent everywhere.
// On a cut-off minority node the first proposals after the cut are
// "unknown" until the node notices it has no leader (an election
// timeout, 1 to 2 s); from then on every proposal fails definitely after
// ProposeTimeout.
//
// # Cluster id
//
// The first leader proposes a cluster-id entry (Config.ClusterID if
// given, else 16 random bytes in hex) when it knows none; the first one
// applied wins. It is kept in the state bucket and in snapshots.
// ClusterID returns it ("" until known); SetClusterID records one learned
// from a peer's handshake; Open fails with ErrClusterIDMismatch when
// Config.ClusterID differs from the stored one.
//
// # Membership
//
// A new cluster bootstraps from Config.Peers (identical on every node:
// name -> cluster address, self included): raft's initial conf-change
// entries carry each member's name and address in their context. A node
// with state restarts from it and ignores Peers. A node opened with Join
// and empty storage is no member: it waits until a member's AddMember
// commits and the leader sends it the log or a snapshot. AddMember and
// RemoveMember propose a ConfChange whose context carries the name, the
// address and the proposal key; every node keeps the members' addresses
// from there (and in snapshots). OnMembers reports every change (the glue
// updates the transport's peers). A node that applies its own removal
// stops its group (Done closes; Propose returns ErrRemoved). Propose
// membership changes one at a time: raft ignores a second while one is
// pending (its caller then sees an unknown outcome).
//
// # Snapshots
//
// Every SnapshotEvery applied entries (and after a member is added, since
// etcd raft refuses a snapshot whose configuration lacks the receiving
// node) the group takes StateMachine.Snapshot at the applied index, wraps
// it with the cluster id and members, stores it and drops the log up to
// KeepEntries behind it. A follower too far behind gets the snapshot
// (MsgSnap) and restores it through StateMachine.Restore.
package meta
