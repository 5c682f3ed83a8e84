package broker

import "time"

// SetQQLeaseDelay holds a quorum leader's Lease proposals back by d (a
// slow commit) until the returned func restores it.
func SetQQLeaseDelay(d time.Duration) (restore func()) {
	old := qqLeaseDelay.Swap(int64(d))
	return func() { qqLeaseDelay.Store(old) }
}

// SetQQDropAnswers makes quorum leaders drop (or send again) their
// answers to other nodes' publishes.
func SetQQDropAnswers(drop bool) { qqDropAnswers.Store(drop) }

// MessageDecodes is how many messages this process decoded from their
// encoding (a log record, a peer's frame, a raft entry).
func MessageDecodes() uint64 { return messageDecodes.Load() }

// QQPublishFigures are a node's enqueues received from other nodes for
// quorum queues it leads, and its pending publishes that a new leader's
// applied mark confirmed without a resend.
func QQPublishFigures(b *Broker) (enqueuesIn, settledByMark uint64) {
	return b.remote.qqEnqIn.Load(), b.remote.qqSettledByMark.Load()
}

// QuorumBatching reports whether b's quorum leaders batch publishes
// (every node of the cluster decodes qrepl.EnqueueBatch).
func QuorumBatching(b *Broker) bool { return b.qqBatching.Load() }
