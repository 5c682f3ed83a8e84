package broker

import (
	"errors"
	"slices"
	"sort"

	"github.com/warrenmq/warren/store"
)

// Browsing and returning messages, for the management API's dead-letter
// pages and replay (package mgmt).

// Browsed is a ready message seen without taking it.
type Browsed struct {
	Msg         *Message
	Redelivered bool
	ExpiresAt   int64 // unix ms, 0 = never
}

// Browse calls fn for the ready messages in delivery order, from the
// offset-th on, until fn returns false; it returns how many messages are
// ready. Nothing is taken or marked redelivered. Messages that live on
// disk only (spill.go) are read from the queue's log, so the queue is
// locked while fn runs: keep fn cheap and stop early.
func (q *Queue) Browse(offset int, fn func(Browsed) bool) (total int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	total = q.ready.n + q.spill.n
	i := 0
	for l := len(q.ready.levels) - 1; l >= 0; l-- {
		d := &q.ready.levels[l]
		for j := 0; j < d.Len(); j++ {
			e := d.Ptr(j)
			if e.dead {
				continue
			}
			if i >= offset && !fn(Browsed{Msg: e.msg, Redelivered: e.redelivered || e.acquired > 0, ExpiresAt: e.expiresAt}) {
				return total
			}
			i++
		}
	}
	s := &q.spill
	if !s.active || q.disk == nil || q.disk.log == nil {
		return total
	}
	err := q.disk.log.ScanFrom(s.cursor, func(p store.Pos, typ byte, pl []byte) error {
		if typ != recMessage && typ != recMovedIn {
			return nil
		}
		h, rest, ok := msgRecord(typ, pl)
		if !ok || q.held[h.seq] || s.skip.has(h.seq) {
			return nil
		}
		if i < offset {
			i++
			return nil
		}
		m, err := decodeMessage(rest)
		q.disk.ms.reads.Add(1)
		if err != nil {
			return nil
		}
		_, requeued := s.counts[h.seq]
		if !fn(Browsed{Msg: m, Redelivered: h.redelivered || requeued || !q.disk.dirtyUpTo.Less(p), ExpiresAt: h.expiresAt}) {
			return errStopScan
		}
		i++
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		q.vhost.b.log.Error("message store: browsing spilled messages", "queue", q.Name, "err", err)
	}
	return total
}

// Return puts messages taken with Get(false) back exactly as they were:
// same position, redelivered flag and counts, as if they had never been
// taken (the replay's filter uses it for the messages it skips). Nothing
// was written to disk for the take, so nothing is written for the return.
func (q *Queue) Return(ds []Delivery) {
	q.mu.Lock()
	defer q.unlock()
	q.settledLocked(ds)
	if q.deleted {
		return
	}
	for i := range ds {
		e := ds[i].entry()
		e.redelivered = ds[i].Redelivered && e.acquired == 0
		if q.stats.Get > 0 {
			q.stats.Get--
		}
		q.ready.putBack(e)
		if e.expiresAt != 0 {
			q.expiries.add(timed{at: e.expiresAt, seq: e.seq, level: q.ready.level(e.msg)})
		}
	}
	q.dispatchLocked()
	q.armLocked()
}

// DeadLetterTargets maps each queue of the vhost that some queue's
// dead-letter exchange (argument or policy) routes to, to the names of
// those source queues, sorted. With a dead-letter routing key the route
// is exact; without one the message's own keys decide, unknown here, so
// every queue bound to the dead-letter exchange counts.
func (v *VHost) DeadLetterTargets() map[string][]string {
	out := map[string][]string{}
	for _, q := range v.Queues() {
		eff := q.Effective()
		if eff.DLX == nil {
			continue
		}
		v.mu.RLock()
		x := v.exchanges[*eff.DLX]
		var targets []string
		if x != nil {
			switch {
			case x.Name == "" && eff.DLRK != nil:
				if _, ok := v.queues[*eff.DLRK]; ok {
					targets = append(targets, *eff.DLRK)
				}
			case eff.DLRK != nil:
				x.match([]string{*eff.DLRK}, nil, func(d dest) {
					if d.q != nil {
						targets = append(targets, d.q.Name)
					}
				})
			default:
				for _, b := range x.bindings {
					if b.dest.q != nil {
						targets = append(targets, b.dest.q.Name)
					}
				}
			}
		}
		v.mu.RUnlock()
		for _, t := range targets {
			if !slices.Contains(out[t], q.Name) {
				out[t] = append(out[t], q.Name)
			}
		}
	}
	for _, srcs := range out {
		sort.Strings(srcs)
	}
	return out
}
