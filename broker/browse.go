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
	return q.typ().browse(offset, fn)
}

// browseHere is Browse where the queue's machine runs.
func (q *Queue) browseHere(offset int, fn func(Browsed) bool) (total int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	total = q.readyLocked()
	i := 0
	stop := false
	for l := q.m.Levels() - 1; l >= 0 && !stop; l-- {
		q.m.Walk(l, 0, func(e *qentry) bool {
			if i >= offset && !fn(Browsed{Msg: e.Msg, Redelivered: e.Redelivered || e.Acquired > 0, ExpiresAt: e.ExpiresAt}) {
				stop = true
				return false
			}
			i++
			return true
		})
	}
	if !stop {
		q.backing().browsePaged(&i, offset, fn)
	}
	return total
}

// browseSpilledLocked is browsePaged for a classic queue: the spilled
// messages, from its log (spill.go).
func (q *Queue) browseSpilledLocked(ip *int, offset int, fn func(Browsed) bool) {
	i := *ip
	defer func() { *ip = i }()
	s := &q.spill
	if !s.active || q.disk == nil || q.disk.log == nil {
		return
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
}

// Return puts messages taken with Get(false) or Take back exactly as they
// were: same position, redelivered flag and counts, as if they had never
// been taken, or, when redelivered, marked redelivered (a republish that
// was not confirmed may have gone through). Nothing was written to disk
// for the take, so nothing is written for the return.
func (q *Queue) Return(ds []Delivery, redelivered bool) {
	q.mu.Lock()
	defer q.unlock()
	for i := range ds {
		inSpill := len(q.taken) > 0 && q.untakeLocked(&ds[i], redelivered) ||
			q.backing().untakePaged(&ds[i], redelivered)
		if h := ds[i].holder; h != nil {
			q.m.Untake(h, ds[i].Seq, ds[i].ck, redelivered, inSpill)
		}
	}
	q.settledLocked(ds)
	q.m.Dispatch(q.clockMs(nil))
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

// TakeCursor is where Take stopped; the zero value starts at the head.
type TakeCursor struct {
	level int // priority level being walked, highest first
	// seq is the last message examined in that level; at level 0 the
	// highest examined in memory or in the log, so that what the queue
	// reads from its log into memory between calls is walked there.
	seq     uint64
	pos     store.Pos // the last spilled record examined, when havePos
	havePos bool
	started bool
	// Skipped counts the messages examined and left: not matching, or
	// expired.
	Skipped int
}

// Take takes, as Get(false) does, the ready messages that match (up to
// limit, 0 for no bound) in delivery order from cur, and leaves the others
// where they are: not taken, not read into memory, not marked. Messages
// whose seq is above upto (see LastSeq) are left too, and so are expired
// ones (their timer deals with them). Spilled messages are taken where
// they sit in the queue's log. Take examines at most budget messages per
// call, so that the queue is not held long; done reports that the walk
// reached the end. The replay's filter and moves use it; Return undoes it.
func (q *Queue) Take(cur *TakeCursor, limit, budget int, upto uint64, match func(*Message) bool) (ds []Delivery, done bool) {
	q.mu.Lock()
	defer q.unlock()
	if q.deleted {
		return nil, true
	}
	now := q.nowMs()
	if !cur.started {
		cur.started, cur.level = true, q.m.Levels()-1
	}
	examined := 0
	full := func() bool { return limit > 0 && len(ds) >= limit }
	for ; cur.level >= 0; cur.level, cur.seq = cur.level-1, 0 {
		stopped := false
		q.m.Walk(cur.level, cur.seq, func(e *qentry) bool {
			if full() || examined >= budget {
				stopped = true
				return false
			}
			cur.seq = e.Seq
			if e.Seq > upto {
				return true
			}
			examined++
			if e.ExpiresAt != 0 && e.ExpiresAt <= now || !match(e.Msg) {
				cur.Skipped++
				return true
			}
			x := q.m.TakeEntry(e)
			ds = append(ds, q.delivery(&x, "", q.m.Holder(), q.m.Holder().Next()-1))
			return true
		})
		if stopped {
			return ds, false
		}
		if cur.level == 0 {
			break // level 0 is walked again on every call, from cur.seq
		}
	}
	return q.backing().takePaged(cur, now, limit, budget, &examined, upto, match, ds)
}

// takeSpilledLocked is takePaged for a classic queue: Take's walk
// through the spilled messages, where they sit in its log (spill.go).
func (q *Queue) takeSpilledLocked(cur *TakeCursor, now int64, limit, budget int, examinedp *int, upto uint64,
	match func(*Message) bool, ds []Delivery) (_ []Delivery, done bool) {
	examined := *examinedp
	defer func() { *examinedp = examined }()
	full := func() bool { return limit > 0 && len(ds) >= limit }
	s := &q.spill
	if !s.active || q.disk == nil || q.disk.log == nil {
		return ds, true
	}
	// Resume after the last record examined, unless the queue has read
	// past it into memory since (the in-memory walk saw those).
	from := s.cursor
	if cur.havePos && !cur.pos.Less(s.cursor) {
		from = cur.pos
	} else {
		cur.havePos = false
	}
	done = true
	err := q.disk.log.ScanFrom(from, func(p store.Pos, typ byte, pl []byte) error {
		if cur.havePos && p == cur.pos || typ != recMessage && typ != recMovedIn {
			return nil
		}
		if !s.active {
			return errStopScan
		}
		if full() || examined >= budget {
			done = false
			return errStopScan
		}
		cur.pos, cur.havePos = p, true
		h, rest, ok := msgRecord(typ, pl)
		if !ok || q.held[h.seq] || s.skip.has(h.seq) || h.seq > upto {
			return nil
		}
		cur.seq = max(cur.seq, h.seq)
		examined++
		if h.expiresAt != 0 && h.expiresAt <= now {
			cur.Skipped++
			return nil
		}
		m, err := decodeMessage(rest)
		q.disk.ms.reads.Add(1)
		if err != nil || !match(m) {
			cur.Skipped++
			return nil
		}
		e := qentry{Seq: h.seq, Msg: m, ExpiresAt: h.expiresAt, DeliveryCount: h.deliveryCount, Acquired: h.acquired,
			Redelivered: h.redelivered || !q.disk.dirtyUpTo.Less(p), OnDisk: true, Seg: p.Seg,
			Size: uint32(m.Size()), Persistent: m.persistent()}
		if c, ok := s.counts[h.seq]; ok {
			e.DeliveryCount, e.Acquired, e.Redelivered = c.dc, c.acq, true
			delete(s.counts, h.seq) // untakeLocked puts them back
		}
		s.skip.add(h.seq)
		if q.taken == nil {
			q.taken = map[uint64]uint64{}
		}
		q.taken[h.seq] = p.Uint64()
		q.m.TakePaged(e)
		q.unspilledLocked(p.Seg)
		ds = append(ds, q.delivery(&e, "", q.m.Holder(), q.m.Holder().Next()-1))
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		q.vhost.b.log.Error("message store: taking spilled messages", "queue", q.Name, "err", err)
	}
	return ds, done
}

// LastSeq is the sequence number of the newest message the queue took
// in: Take's upto for "what the queue holds now".
func (q *Queue) LastSeq() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.m.LastSeq()
}

// untakeLocked puts a spilled message that Take took back on disk only,
// where it sits in the log, when the queue has not read past it since;
// it reports whether it did (otherwise the caller puts it back in
// memory, where everything older now is).
func (q *Queue) untakeLocked(d *Delivery, redelivered bool) bool {
	pos, ok := q.taken[d.Seq]
	if !ok {
		return false
	}
	s := &q.spill
	if q.deleted || !s.active || store.PosFromUint64(pos).Less(s.cursor) {
		q.memTop = max(q.memTop, pos) // its record is behind a message in memory now
		return false
	}
	s.skip.remove(d.Seq)
	s.segs.add(d.seg, 1) // the machine counts it back (Untake)
	if redelivered || d.Redelivered || d.AcquiredCount > 0 || d.DeliveryCount > 0 {
		// Marked redelivered (counts in s.counts are) when read back.
		if s.counts == nil {
			s.counts = map[uint64]reqInfo{}
		}
		s.counts[d.Seq] = reqInfo{dc: d.DeliveryCount, acq: d.AcquiredCount}
	}
	return true
}
