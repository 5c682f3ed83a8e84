package broker

import (
	"sync"
	"sync/atomic"
	"time"
)

// The dead-letter timeline (issue 15): each queue counts the messages it
// dead-letters per minute, by reason and by where they went, in a ring of
// the last DLTimelineMinutes minutes. The count is taken once per dead
// letter, when its queue's flusher routes it (deadLetterAs): exact, and
// knowing the destination queues, or that there was none (unroutable, or
// only dead-letter cycles). A queue that never dead-letters allocates
// nothing; one that does keeps a fixed ring, dropped with the queue. A
// quorum queue counts on the node of its leader, which dead-letters.

// DLTimelineMinutes is how many minutes a queue's timeline keeps.
const DLTimelineMinutes = 60

// dlMaxTargets bounds the destination queues counted by name per minute;
// more fold into DLMinute.OtherTargets.
const dlMaxTargets = 8

// DLTarget is how many dead letters of a minute reached one queue.
type DLTarget struct {
	Queue string
	N     uint64
}

// DLMinute is one minute of a queue's dead-lettering.
type DLMinute struct {
	// Minute is the minute's start, in minutes since the Unix epoch.
	Minute int64
	// ByReason counts the dead letters by reason, in the order
	// rejected, expired, maxlen, delivery_limit (DLReasons).
	ByReason [4]uint64
	// Targets counts the dead letters each destination queue took (a
	// dead letter routed to two queues counts in both).
	Targets []DLTarget
	// OtherTargets counts deliveries to destinations beyond the first
	// dlMaxTargets of the minute.
	OtherTargets uint64
	// Unroutable counts the dead letters that reached no queue: the
	// dead-letter exchange is missing or routed them nowhere, or every
	// route was a dead-letter cycle.
	Unroutable uint64
}

// Total is the minute's count of dead letters.
func (m *DLMinute) Total() uint64 {
	return m.ByReason[0] + m.ByReason[1] + m.ByReason[2] + m.ByReason[3]
}

// DLReasons are the dead-letter reasons in DLMinute.ByReason's order.
var DLReasons = reasons

type dlRing struct {
	mu sync.Mutex
	m  [DLTimelineMinutes]DLMinute // slot minute % DLTimelineMinutes
}

// dlRingPtr is a queue's timeline, allocated at its first dead letter.
type dlRingPtr struct{ p atomic.Pointer[dlRing] }

func (r *dlRingPtr) get() *dlRing {
	if g := r.p.Load(); g != nil {
		return g
	}
	r.p.CompareAndSwap(nil, new(dlRing))
	return r.p.Load()
}

// tallyDL counts dead letter p once, at the minute deadLetterAs stamped
// it with, as routed to queues (cycles excluded, as sendDeadLetter and
// planMove skip them).
func (q *Queue) tallyDL(p *pendingDL, routed []*Queue) {
	if p.minute == 0 {
		return
	}
	minute := p.minute
	p.minute = 0
	g := q.dlTimeline.get()
	g.mu.Lock()
	defer g.mu.Unlock()
	s := &g.m[minute%DLTimelineMinutes]
	if s.Minute != minute {
		*s = DLMinute{Minute: minute, Targets: s.Targets[:0]}
	}
	s.ByReason[reasonIndex(p.reason)]++
	reached := 0
outer:
	for _, t := range routed {
		if p.reason != ReasonRejected && isCycle(p.msg.Deaths, t.Name) {
			continue
		}
		reached++
		for i := range s.Targets {
			if s.Targets[i].Queue == t.Name {
				s.Targets[i].N++
				continue outer
			}
		}
		if len(s.Targets) < dlMaxTargets {
			s.Targets = append(s.Targets, DLTarget{Queue: t.Name, N: 1})
		} else {
			s.OtherTargets++
		}
	}
	if reached == 0 {
		s.Unroutable++
	}
}

// dlStampMinute is the minute a dead letter of now counts in (never 0,
// which tallyDL takes for "counted").
func dlStampMinute(now time.Time) int64 {
	return max(now.Unix()/60, 1)
}

// DeadLetterTimeline returns q's minutes with dead letters among the
// DLTimelineMinutes up to now, oldest first (copies).
func (q *Queue) DeadLetterTimeline(now time.Time) []DLMinute {
	g := q.dlTimeline.p.Load()
	if g == nil {
		return nil
	}
	cur := dlStampMinute(now)
	var out []DLMinute
	g.mu.Lock()
	defer g.mu.Unlock()
	for m := max(cur-DLTimelineMinutes+1, 1); m <= cur; m++ {
		s := &g.m[m%DLTimelineMinutes]
		if s.Minute != m {
			continue
		}
		c := *s
		c.Targets = append([]DLTarget(nil), s.Targets...)
		out = append(out, c)
	}
	return out
}
