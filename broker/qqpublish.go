package broker

import "github.com/warrenmq/warren/broker/machine"

// qqPublish is the publish path of a replicated quorum queue (issue 14):
// on the leader's node an Enqueue proposal whose commit the publisher's
// confirm waits for (Router.rw); elsewhere a forward to the leader.
//
// This is the leader side's minimal path, without publish ids (no
// deduplication) and without resends on a leader change: the client
// side (qqclient.go) replaces it with the full one.
func (q *Queue) qqPublish(m *Message, r *Router) enqueueResult {
	if !q.IsLocal() {
		return q.forward(m, r)
	}
	var w *rwait
	if r != nil && !r.NoWait {
		if r.rw == nil {
			r.rw = &rwait{}
		}
		w = r.rw
		w.add(1)
	}
	q.qqEnqueueAtLeader(machine.PubID{}, m, func(st byte) {
		if w == nil {
			return
		}
		switch st {
		case enqOK:
			w.done(nil)
		case enqRejected:
			w.done(ErrRemoteRejected)
		default:
			w.done(errRemoteFailed)
		}
	})
	return enqueued
}
