// Package qraft is the raft host of a node: it drives every quorum queue's
// raft group (etcd raft RawNodes) on this node from one loop.
//
// # The loop
//
// One goroutine per Host. Each pass takes what arrived (raft messages
// from peers, proposals, operations), ticks the active groups when the
// tick timer fired, then collects the Ready of every group that has one
// and handles them together: first the messages that vouch for nothing
// persisted (a leader's appends and heartbeats, vote requests) go out, so
// that a leader writes in parallel with its followers; committed entries
// already in the stored log (a leader's always are) are applied to each
// group's StateMachine; then every group's entries, hard state and
// installed snapshot go to the node-wide log store in one append and one
// sync (none when no Ready needs one: raft's MustSync, a commit index
// moving does not; the next sync, or tick, covers it); then the
// responses (MsgAppResp, votes) go out, the remaining committed entries
// are applied and the groups are advanced. Messages go batched per peer
// (one transport message per peer per send, carrying many groups' raft
// messages, see wire.go). It repeats while a group has a Ready (a
// leader's commit follows its own append). Nothing in the loop waits on
// the network: Config.Send must not block (transport.Send queues or
// fails).
//
// # Callbacks
//
// StateMachine methods and Propose's done callbacks run on the loop
// goroutine: they must not block, and must not call the ctx-taking Group
// methods (AddMember, RemoveMember, TransferLeader), which wait for the
// loop. Propose, Campaign, ReadEntry, Leader, Status, StopGroup and
// DeleteGroup may be called from anywhere, callbacks included.
//
// # Proposals
//
// Only the leader takes proposals (no forwarding): on another member,
// done gets ErrNotLeader. An accepted proposal's done runs after the
// entry is committed and applied here, or with ErrDropped when the term
// or leader changed before it was seen committed (it may still commit:
// the caller resends, deduplicating at the state machine).
//
// # Leadership
//
// LeaderChanged(leader, term, false) is signalled on every change of the
// leader or term seen here ("" while none is known). On the leader
// itself, LeaderChanged(self, term, true) comes only after the Apply of
// the first entry of its term (raft's empty entry), so every entry of
// earlier terms is applied: the state machine is complete.
//
// # Quiescence
//
// A leader whose group is idle (nothing pending, every reachable member
// caught up and recently active, commit stable for Config.QuiesceTicks
// ticks) quiesces it: it stops ticking (no heartbeats) and tells the
// followers, which quiesce when their log and commit match. A quiesced
// group wakes on a proposal, an operation or a raft message (a heartbeat
// response excepted). A follower (quiesced or not) whose leader's node
// PeerState reports down forgets that leader and campaigns after a short
// delay spread by node (raftpeer.CampaignDelay), not after the election timeout:
// failover takes a round trip, not 1-2 s. PreVote and CheckQuorum stay on,
// so a follower merely cut off from a healthy leader only pre-votes,
// which the members still hearing from the leader refuse: no term moves
// (Group.leaderDown). A leader wakes when a member's node comes back
// up, to catch it up, or goes down, so that CheckQuorum makes a leader cut
// off from its quorum step down. A woken follower keeps its election clock: its
// leader lease (CheckQuorum) still protects a live leader from a member
// that restarted and campaigns; that member's vote request wakes the
// leader, whose heartbeats settle it.
//
// # Snapshots and compaction by live entries
//
// A snapshot is due after Config.SnapshotEntries entries or
// Config.SnapshotBytes bytes applied since the last one, once the log since
// then also weighs as much as that snapshot did (entries counted 64 bytes
// each), so a long queue's state is not rewritten for every few thousand
// small entries; a configuration change snapshots at once (raft refuses a
// snapshot whose configuration lacks its receiver). The StateMachine's
// Snapshot gives its small state plus the indices of the entries it still
// needs (live message bodies). The raft log is compacted up to the
// snapshot (less a margin of Config.KeepEntries); the dead entries' WAL
// records are released, the live ones stay and ReadEntry keeps reading
// them. A lagging follower gets the snapshot as a stream on the bulk lane
// (snapstream.go): the live entries' bodies in parts of about 1 MiB, read
// back from the WAL a few at a time and written to the follower's WAL as
// they come, then the snapshot itself, which installs them; neither side
// holds the whole queue in memory. The leader's uncommitted log is bounded
// (MaxUncommitted): a proposal beyond fails with ErrBusy.
//
// # Storage and recovery
//
// One WAL per node (cluster/qraft/wal, in Config.Dir) holds every group's
// records: entries, hard states, snapshot metadata, live entries received
// with a snapshot, and a tombstone per deleted group. Each group's
// raft.Storage (storage.go) keeps only metadata in memory (term, record
// position, size) and an entry's body until it is applied; older bodies
// are read back from the WAL. Every record has one owner and is released
// when superseded (a hard state by the next, a truncated tail by the new
// entries, compacted dead entries and the previous snapshot once the new
// snapshot record is synced, everything of a deleted group once its
// tombstone is synced); the loop runs a bounded WAL compaction (8 MiB)
// when segments are mostly dead and updates the moved positions.
//
// Open replays the WAL following its contract (records released before a
// crash may or may not come back): last hard state wins, an entry replaces
// the entries at and above its index, an entry after a gap starts a new
// run and the entries before it wait as orphans for a snapshot record that
// may list them live, a snapshot record compacts (or, when the entries it
// covers are gone, replaces) the log; everything no group keeps is
// released. Each group's state is kept until StartGroup asks for it: the
// StateMachine is then Restored from the snapshot and the committed
// entries above it are applied again. StopGroup keeps the log (a later
// StartGroup resumes); DeleteGroup drops it.
//
// Membership: AddMember/RemoveMember propose a ConfChange (the node's
// name travels in its context); a new member starts with join=true and
// empty storage. Node ids are NodeID(name), as in cluster/meta.
package qraft
