// Package qrepl is the replicated state of a quorum queue (issue 14):
// the commands a queue's leader proposes to its Raft log, their codec,
// and the deterministic state every member builds by applying them.
//
// The state is small: the live messages' headers in queue order (no
// bodies: a message's id names the log entry that keeps its body, the
// index of its Enqueue, or BatchID(index, j) for item j of an
// EnqueueBatch; EntryOf gives the index back), publisher deduplication, the delivery lease and
// the dead-letter marks. It does no I/O, reads no clock, draws no random
// number and starts no goroutine; the time travels in the commands. The
// same entries applied in the same order give Equal states on every
// member, and Restore(Snapshot()) plus the entries after it gives the
// same state as the whole log.
//
// Queue order: an Enqueue at index i places its message at the back,
// and a Return with Back places its messages at the back in item order;
// a Return without Back leaves the message where it was. This is the
// order a queue machine holds its ready messages in (one priority level;
// with several, each level's subsequence), provided the leader's machine
// takes enqueues and returns in the order they are applied. Messages
// walks the live messages in that order; Msg.Order is the sort key
// (index<<16 for an enqueue, index<<16 | i for the i'th item of an
// EnqueueBatch or a Return), usable as the machine's sequence number.
//
// Memory: a live message costs one 48-byte record in a ring buffer
// (plus a quarter of growth room and tombstones, compacted lazily: about
// 50 heap bytes per message at 1,000,000, TestMemory1M), and an entry in
// a map only while it has been returned to the back (about 40 more) or
// waits out a delayed retry. The head pops and back pushes of a busy
// queue reuse the ring's slots without copying. Removal by id is a
// binary search (the head is tried first): ids are order keys for
// messages never moved, a map lookup gives a moved one's key.
//
// # For the leader (broker side)
//
// Proposing: Enqueue{Pub, Time: now ms, ExpiresAt, Priority, Persistent,
// Size, Body: the encoded message}; the message's id is the index the
// entry commits at (Apply's index; Result.Duplicate when its publisher's
// seq was seen: the message is in the queue already, answer ok). Several
// publishes at once: EnqueueBatch{Items}, item j's id BatchID(index, j)
// and its outcome Result.Batch[j] (once every member decodes it: an
// older node would skip the entry). Acks,
// drops, expiries and finished dead letters: Remove{IDs} in batches.
// Requeues: Return{Items} with the machine's new counts, Back when the
// machine gave the message a new sequence number (Requeued(e, seq, _)
// with seq != e.Seq), DelayUntil for a delayed retry. At-least-once dead
// letters: Discard{IDs, Reason} before publishing them, Remove after.
// Lease{UpTo} ahead of deliveries. Purge{IDs} of the ready messages.
// Prune{Now} now and then on an idle queue (enqueues prune by themselves
// every minute of leader time; publishers unseen for PubTTL are dropped).
//
// The queue order stays the machine's only if the machine takes
// enqueues and returns in apply order (not at proposal time): an enqueue
// committed between a return's proposal and its commit is ahead of the
// returned message here.
//
// Taking over: Messages in order; for each, the body from the log
// (DecodeMessage(ReadEntry(EntryOf(m.ID)), m.ID).Body); Order as the machine's sequence
// number (Restore with lastSeq LastOrder()); DelayUntil != 0 goes to the
// delayed retries; DLX marks are dead-lettered again (Reason); messages
// with EntryOf(ID) <= Lease() may have been delivered: mark them
// redelivered.
//
// Snapshots (the raft host's StateMachine): Snapshot() and Live() (the
// entries whose bodies must stay), Restore(data) for one received or
// recovered; entries at or below Applied() are ignored (ErrStale).
package qrepl
