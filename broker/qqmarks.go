package broker

import (
	"time"

	"github.com/warrenmq/warren/broker/qrepl"
)

// Dead letters of a quorum queue wait for their mark (issue 22 item 8).
//
// A leader that is deposed without knowing it (paused with SIGSTOP, cut
// off) keeps its TTL timers. When it wakes, its messages have expired, and
// in the moment before it learns of the new term it dead-lettered its
// whole backlog, which the new leader, finding the same messages expired
// in the replicated state, dead-lettered again: every dead letter twice,
// unflagged.
//
// So a quorum queue's dead letter is published only once the command
// that takes it out of the queue has committed in the log in this
// leadership: the Discard mark (at-least-once: the message stays in the
// state, marked, until every target took it, R1.14) or its Remove
// (at-most-once, the default: out of the queue, then published, so a
// failover at the wrong moment loses it, never doubles it). A leader that
// lost its leadership cannot commit them; its flusher drops those dead
// letters, and the new leader, which has the messages, dead-letters them.
//
// Each proposal gets a sequence number (qqMarks.seq) within a leadership
// (epoch, bumped at takeover, step-down and delete); the flusher waits
// until the proposals of its dead letters are known committed.

// qqMarks follows the commit of a leader's proposals (under qqState.pmu).
type qqMarks struct {
	epoch uint64
	seq   uint64        // proposals made in this epoch
	done  uint64        // the highest of them known committed
	c     chan struct{} // closed (and replaced) on any change
}

// pendCmd is a command waiting for the flusher, with the mark of the
// latest proposal merged into it.
type pendCmd struct {
	c   qrepl.Command
	seq uint64
}

// qqMarkWait bounds how long a flusher waits for a mark to commit before
// it gives the dead letters up to whichever leader has the messages.
const qqMarkWait = 30 * time.Second

// changedLocked wakes the waiters (pmu held).
func (m *qqMarks) changedLocked() {
	if m.c != nil {
		close(m.c)
		m.c = nil
	}
}

// newEpochLocked ends a leadership's marks (pmu held).
func (m *qqMarks) newEpochLocked() {
	m.epoch++
	m.seq, m.done = 0, 0
	m.changedLocked()
}

// markLocked is the mark of the proposal made last: the one that took a
// dead letter out of the queue (q.mu held).
func (s *qqState) markLocked() (epoch, seq uint64) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	return s.marks.epoch, s.marks.seq
}

// committed records the outcome of the proposal seq of epoch.
func (s *qqState) committed(epoch, seq uint64, err error) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	m := &s.marks
	if m.epoch != epoch {
		return
	}
	if err != nil {
		// Only a leadership that is over fails a proposal: its later
		// ones cannot be trusted to mean what they meant either.
		m.newEpochLocked()
		return
	}
	if seq > m.done {
		m.done = seq
	}
	m.changedLocked()
}

// newEpoch starts or ends a leadership.
func (s *qqState) newEpoch() {
	s.pmu.Lock()
	s.marks.newEpochLocked()
	s.pmu.Unlock()
}

// awaitMark waits until the proposal seq of epoch has committed (true) or
// cannot anymore (false): the leadership ended (or a proposal failed,
// which only an ended leadership's do), or qqMarkWait passed.
func (s *qqState) awaitMark(epoch, seq uint64, deadline time.Time) bool {
	for {
		if s.q.vhost.b.closed.Load() {
			return false // the node shuts down: the new leader has them
		}
		s.pmu.Lock()
		m := &s.marks
		switch {
		case m.epoch != epoch:
			s.pmu.Unlock()
			return false
		case m.done >= seq:
			s.pmu.Unlock()
			return true
		}
		if m.c == nil {
			m.c = make(chan struct{})
		}
		c := m.c
		s.pmu.Unlock()
		d := time.Until(deadline)
		if d <= 0 {
			return false
		}
		t := time.NewTimer(d)
		select {
		case <-c:
			t.Stop()
		case <-t.C:
		}
	}
}

// qqMarked keeps, of the dead letters taken from a quorum queue's outbox,
// those whose marks committed, in order; the others are another leader's
// to dead-letter. It runs on the queue's flusher without q.mu.
func (q *Queue) qqMarked(out []dlBatch) []dlBatch {
	s := q.qq
	if s == nil {
		return out
	}
	deadline := time.Now().Add(qqMarkWait)
	kept := out[:0]
	dropped := 0
	for _, b := range out {
		items := b.items[:0]
		for _, it := range b.items {
			if it.qqSeq == 0 || s.awaitMark(it.qqEpoch, it.qqSeq, deadline) {
				items = append(items, it)
			} else {
				dropped++
			}
		}
		if len(items) > 0 {
			b.items = items
			kept = append(kept, b)
		}
	}
	if dropped > 0 {
		q.vhost.b.log.Info("quorum queue: dead letters left to the new leader", "queue", q.Name, "vhost", q.vhost.Name, "messages", dropped)
	}
	return kept
}
