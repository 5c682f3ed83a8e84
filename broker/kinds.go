package broker

import (
	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker/machine"
)

// The queue-type seam. A Queue is one of three kinds on this node, and
// each of its operations goes through queueType:
//
//   - classic: a classic queue homed here; its machine, its message log
//     and its paged-out tail are here (queue.go, msgstore.go, spill.go);
//   - remote: a classic queue homed on another node; this node keeps its
//     local consumers and forwards everything else (remote.go);
//   - quorum: a replicated quorum queue, reached through its leader
//     wherever that is (qqclient.go). Where the leader is this node, the
//     operation runs on the machine here, which writes through its
//     backing (below) to the raft log (qqleader.go).
//
// Only this file chooses the kind; the callers (the channel, routing,
// dead-lettering, shovels, management, recovery) call Queue's methods,
// which ask typ().

// queueType is how a queue does its work on this node.
type queueType interface {
	// enqueue places a published message; r collects what a publisher
	// confirm waits for (nil when nobody waits).
	enqueue(m *Message, r *Router) enqueueResult
	// get takes the head message for basic.get.
	get(noAck bool) (d Delivery, remaining int, ok bool)
	// dispatch delivers ready messages to consumers that can take them.
	dispatch()
	// settle acks, rejects or requeues deliveries (settleAck...).
	settle(ds []Delivery, kind byte)
	// purge drops the ready messages and returns how many there were.
	purge() int
	// addConsumer subscribes c; added runs once c is accepted.
	addConsumer(c *Consumer, added func()) error
	// removeConsumer unsubscribes c.
	removeConsumer(c *Consumer)
	// counts is queue.declare-ok's message and consumer counts.
	counts() (messages, consumers int)
	// browse walks the ready messages from offset (Queue.Browse).
	browse(offset int, fn func(Browsed) bool) int
	// here reports whether the queue's machine runs on this node.
	here() bool
	// home is the node whose machine serves the queue ("" on a single
	// node, or while a quorum queue knows no leader).
	home() string

	// takeDeadLetter hands the dead letter rd, owed to this queue (named
	// name) by src, over; src.remoteDLAnswer hears how it went
	// (dlremote.go).
	takeDeadLetter(src *Queue, rd *remoteDL, name string)
	// answersLater reports whether a message enqueued here is the queue's
	// only once its home (a quorum queue's leader) says so: dead letters
	// to it are owed until then (dlremote.go).
	answersLater() bool
	// replicas are a replicated queue's members and raft group (nil, 0
	// for the others), as its definition records them.
	replicas() (members []string, group uint64)
	// started: the queue was created or recovered on this node; fresh
	// when its group is new.
	started(fresh bool)
	// available reports why the queue cannot be used now (a remote
	// queue's home is down, a quorum queue has no leader), or nil.
	available() error
	// deletable reports why the queue cannot be deleted now (its home is
	// down), or nil.
	deletable() error
	// declareCounts is queue.declare-ok's counts for a redeclare, which
	// is a use (x-expires, R2.7).
	declareCounts() (*Queue, int, int, error)

	// The data plane to the node whose machine serves the queue
	// (remote.go): callHome runs a call there; homeLost is the error when
	// that node cannot be reached, homeAnswer what an error it answered
	// becomes; notHere is the answer to a call that reached a node whose
	// machine does not serve the queue.
	callHome(req []byte) (*msgDecoder, error)
	homeLost() error
	homeAnswer(err error) error
	notHere() error
	// The consumer legs and proxies of the data plane (remote.go). A
	// consumer here of a queue served elsewhere is a leg to the serving
	// node, where a proxy consumer stands for it. legCanceled: the home
	// cancelled leg rc; it reports whether the kind took care of it (a
	// quorum queue's leg is attached again to its next leader).
	// legHomeDown: node went down; whether leg rc ends, and whether its
	// queue's local consumers are dropped. returnUnseen gives deliveries
	// no client saw back. proxyGen is the generation of a proxy added
	// here (a quorum leader's term), if any. heldFailed: whether a
	// proxy's deliveries returned when its node went away count as
	// failed deliveries (redelivered). countsCall asks the home for the
	// counts (touch: a declare's, a use of the queue).
	legCanceled(rc *rconsumer) bool
	legHomeDown(rc *rconsumer, node string) (ends, drop bool)
	returnUnseen(ds []Delivery)
	proxyGen() (gen uint64, ok bool)
	heldFailed() bool
	countsCall(req []byte, touch bool) (*msgDecoder, error)

	// statsLocked adds what the kind counts itself to s (a stream's
	// messages are in its log, not its machine); q.mu is held.
	statsLocked(s *QueueStats)
	// ownLog reports whether the queue keeps its messages in a log of
	// its own (a stream's), not in the message store.
	ownLog() bool
	// deleted: the queue is gone from this node.
	deleted()
	// closing: the broker is closing; what waits for the queue gives up.
	closing()
}

// typ is the kind of q on this node now. A classic queue's kind changes
// when its home moves; a quorum queue stays one.
func (q *Queue) typ() queueType {
	switch {
	case q.qq != nil:
		return quorumType{q}
	case q.sq != nil:
		return streamType{q}
	case q.Home != "" && q.Home != q.vhost.b.node:
		return remoteType{q}
	}
	return classicType{q}
}

// ServedHere reports whether q's machine (its messages and consumers)
// runs on this node: a classic queue homed here, the leader of a quorum
// queue. It is a question of where, not of what kind: the management API
// asks it to know which node reports a queue's statistics.
func (q *Queue) ServedHere() bool { return q.typ().here() }

// HomeNode is the node where q's messages and consumers are now: Home
// for a classic queue, the current leader of a replicated quorum queue
// ("" while no leader is known).
func (q *Queue) HomeNode() string { return q.typ().home() }

// classicType is a classic queue homed on this node.
type classicType struct{ q *Queue }

func (k classicType) enqueue(m *Message, r *Router) enqueueResult { return k.q.enqueueHere(m, r) }
func (k classicType) get(noAck bool) (Delivery, int, bool)        { return k.q.getHere(noAck) }
func (k classicType) dispatch()                                   { k.q.dispatchHere() }
func (k classicType) settle(ds []Delivery, kind byte)             { k.q.settleHere(ds, kind) }
func (k classicType) purge() int                                  { return k.q.purgeHere() }
func (k classicType) addConsumer(c *Consumer, added func()) error {
	return k.q.addConsumerHere(c, added)
}
func (k classicType) removeConsumer(c *Consumer)        { k.q.removeConsumerHere(c) }
func (k classicType) counts() (messages, consumers int) { return k.q.countsHere() }
func (k classicType) browse(offset int, fn func(Browsed) bool) int {
	return k.q.browseHere(offset, fn)
}
func (k classicType) here() bool   { return true }
func (k classicType) home() string { return k.q.Home }

func (k classicType) takeDeadLetter(src *Queue, rd *remoteDL, name string) {
	var err error // its home moved here: taken now
	if k.q.enqueue(rd.msg, nil) == rejectedOverflow {
		err = ErrRemoteRejected
	}
	src.remoteDLAnswer(rd, name, err)
}
func (classicType) answersLater() bool                         { return false }
func (classicType) replicas() (members []string, group uint64) { return nil, 0 }
func (classicType) started(bool)                               {}
func (classicType) available() error                           { return nil }

// The data plane is never used for a queue served here.
func (k classicType) callHome(req []byte) (*msgDecoder, error) { return k.q.callNode(k.q.Home, req) }
func (classicType) homeLost() error                            { return errRemoteNoQueue }
func (classicType) homeAnswer(err error) error                 { return err }
func (classicType) notHere() error                             { return nil }
func (classicType) deletable() error                           { return nil }
func (k classicType) declareCounts() (*Queue, int, int, error) {
	k.q.Touch()
	m, c := k.q.countsHere()
	return k.q, m, c, nil
}
func (classicType) deleted()                {}
func (classicType) ownLog() bool            { return false }
func (classicType) statsLocked(*QueueStats) {}

// A classic queue's legs are a remote queue's (its home may move).
func (k classicType) legCanceled(rc *rconsumer) bool { return remoteType(k).legCanceled(rc) }
func (k classicType) legHomeDown(rc *rconsumer, node string) (bool, bool) {
	return remoteType(k).legHomeDown(rc, node)
}
func (k classicType) returnUnseen(ds []Delivery) { remoteType(k).returnUnseen(ds) }
func (k classicType) proxyGen() (uint64, bool)   { return remoteType(k).proxyGen() }
func (k classicType) heldFailed() bool           { return remoteType(k).heldFailed() }
func (k classicType) countsCall(req []byte, touch bool) (*msgDecoder, error) {
	return remoteType(k).countsCall(req, touch)
}
func (classicType) closing() {}

// newKind sets up q's kind at its creation from its definition: a
// quorum queue with members and a group is replicated in a cluster.
func (q *Queue) newKind(s QueueSpec, node string) error {
	if q.Config.Type == QueueTypeStream {
		var members []string
		var group uint64
		if len(s.Members) > 0 && s.Group != 0 && node != "" {
			members, group = s.Members, s.Group
		}
		sq, err := newStreamState(q, !q.vhost.b.loading.Load(), members, group)
		if err != nil {
			return amqp.Errorf(amqp.InternalError, "cannot open stream '%s' in vhost '%s': %v", q.Name, q.vhost.Name, err)
		}
		q.sq = sq
		return nil
	}
	if len(s.Members) > 0 && s.Group != 0 && node != "" {
		q.qq = newQQState(q, s.Group, s.Members)
	}
	return nil
}

// backing is what the machine of a queue whose machine runs here keeps
// beyond memory, besides its own message log: where its paged-out tail
// lives, and what else each change of the queue is written to. A classic
// queue's is its own log (classicBacking: the spilled tail, spill.go); a
// quorum queue leader's is the raft log (*qqState: marks and the lease in
// qqleader.go and qqmarks.go, the paged-out tail in qqpage.go). Its
// methods run with q.mu held.
type backing interface {
	// removed: the message seq left the queue (acked, dropped, settled).
	removed(seq uint64)
	// deadLettered: seq leaves the queue to be dead-lettered; the mark is
	// what its publication waits for (0 when nothing).
	deadLettered(seq uint64, reason string, atLeastOnce bool) (epoch, mark uint64)
	// returned: a delivery came back, as seq, with new counts.
	returned(e *qentry, seq uint64, delayUntil int64)
	// leased reports whether seq may be handed out now; leaseWait waits
	// until it may (covered), or the leadership ended (gone).
	leased(seq uint64) bool
	leaseWait(seq uint64) (covered, gone bool)
	// purged and deleted: the queue's messages were purged, or it was
	// deleted.
	purged()
	deleted()

	// The paged-out tail.
	pageIn(force bool)
	expirePaged(t machine.Timed)
	isPaged(t machine.Timed) bool
	browsePaged(i *int, offset int, fn func(Browsed) bool)
	takePaged(cur *TakeCursor, now int64, limit, budget int, examined *int, upto uint64,
		match func(*Message) bool, ds []Delivery) ([]Delivery, bool)
	untakePaged(d *Delivery, redelivered bool) bool
}

// backing is q's backing (where its machine runs here).
func (q *Queue) backing() backing {
	if q.qq != nil {
		return q.qq
	}
	return classicBacking{q}
}

// classicBacking is a classic queue's backing: its own log, nothing else.
type classicBacking struct{ q *Queue }

func (classicBacking) removed(uint64)                                  {}
func (classicBacking) deadLettered(uint64, string, bool) (_, _ uint64) { return 0, 0 }
func (classicBacking) returned(*qentry, uint64, int64)                 {}
func (classicBacking) leased(uint64) bool                              { return true }
func (classicBacking) leaseWait(uint64) (covered, gone bool)           { return true, false }
func (classicBacking) purged()                                         {}
func (classicBacking) deleted()                                        {}
func (b classicBacking) pageIn(force bool)                             { b.q.refillLocked(force) }
func (b classicBacking) expirePaged(t machine.Timed) {
	if b.q.isSpilledLocked(t) {
		b.q.expireSpilledLocked(t)
	}
}
func (b classicBacking) isPaged(t machine.Timed) bool { return b.q.isSpilledLocked(t) }
func (b classicBacking) browsePaged(i *int, offset int, fn func(Browsed) bool) {
	b.q.browseSpilledLocked(i, offset, fn)
}
func (b classicBacking) takePaged(cur *TakeCursor, now int64, limit, budget int, examined *int, upto uint64,
	match func(*Message) bool, ds []Delivery) ([]Delivery, bool) {
	return b.q.takeSpilledLocked(cur, now, limit, budget, examined, upto, match, ds)
}
func (classicBacking) untakePaged(*Delivery, bool) bool { return false }

// replicated reports whether q is a replicated quorum queue.
func (q *Queue) replicated() bool { return q.qq != nil }
