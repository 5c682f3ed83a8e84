package machine

import (
	"encoding/binary"
	"errors"
	"slices"
)

// Snapshot encoding. The bytes are a function of the state alone: heaps
// are written sorted, tombstones are left out, and so two machines that
// behave the same encode the same. Messages are written by the caller's
// encM (a reference: a log position, an id; not a body).

const snapVersion = 1

// ErrSnapshot is a snapshot that cannot be decoded.
var ErrSnapshot = errors.New("machine: bad snapshot")

type enc struct{ b []byte }

func (w *enc) u(v uint64)  { w.b = binary.AppendUvarint(w.b, v) }
func (w *enc) i(v int64)   { w.b = binary.AppendVarint(w.b, v) }
func (w *enc) bool(v bool) { w.u(map[bool]uint64{false: 0, true: 1}[v]) }

func encEntry[M any](w *enc, e *Entry[M], encM func([]byte, M) []byte) {
	w.u(e.Seq)
	w.b = encM(w.b, e.Msg)
	w.i(e.ExpiresAt)
	w.u(uint64(e.DeliveryCount))
	w.u(uint64(e.Acquired))
	w.u(uint64(e.Seg))
	w.u(uint64(e.Size))
	w.u(uint64(e.Level))
	var f uint64
	if e.Persistent {
		f |= 1
	}
	if e.Redelivered {
		f |= 2
	}
	if e.OnDisk {
		f |= 4
	}
	w.u(f)
}

func encCounts(w *enc, c Counts) {
	w.u(uint64(c.All.N))
	w.i(c.All.Bytes)
	w.u(uint64(c.Persistent.N))
	w.i(c.Persistent.Bytes)
}

// Snapshot appends the machine's state to dst.
func (m *Machine[M, C]) Snapshot(dst []byte, encM func([]byte, M) []byte) []byte {
	w := &enc{b: append(dst, snapVersion)}
	c := &m.cfg
	w.bool(c.Quorum)
	w.u(uint64(c.levels()))
	w.bool(c.SingleActive)
	w.bool(c.DLX)
	for _, v := range []int64{c.MessageTTL, c.Expires, c.MaxLength, c.MaxLengthBytes, c.DeliveryLimit, c.RetryMin, c.RetryMax} {
		w.i(v)
	}
	w.u(uint64(c.Overflow))
	w.bool(c.CountDeliveries)
	w.u(uint64(c.RetryType))
	w.bool(c.Dedup)

	w.u(m.nextSeq)
	w.u(uint64(m.rr))
	w.i(m.expiresAt)
	w.bool(m.hadConsumer)
	w.bool(m.deleted)
	w.u(uint64(m.dlxPending))
	s := &m.stats
	for _, v := range []uint64{s.Published, s.Redelivered, s.Deliver, s.DeliverNoAck, s.Get, s.GetNoAck, s.GetEmpty, s.Acked, s.Requeued, s.Rejected} {
		w.u(v)
	}
	for i := range s.DeadLettered {
		w.u(s.DeadLettered[i])
		w.u(s.Dropped[i])
	}
	encCounts(w, m.paged)

	for i := range m.ready.levels {
		d := &m.ready.levels[i]
		n := 0
		for j := 0; j < d.Len(); j++ {
			if !d.Ptr(j).Dead {
				n++
			}
		}
		w.u(uint64(n))
		for j := 0; j < d.Len(); j++ {
			if e := d.Ptr(j); !e.Dead {
				encEntry(w, e, encM)
			}
		}
	}
	ex := slices.Clone(m.expiries)
	slices.SortFunc(ex, func(a, b Timed) int { return cmpBool(timedLess(&a, &b), timedLess(&b, &a)) })
	w.u(uint64(len(ex)))
	for _, t := range ex {
		w.i(t.At)
		w.u(t.Seq)
		w.u(t.Pos)
		w.u(uint64(t.Level))
	}
	dl := slices.Clone(m.delayed)
	slices.SortFunc(dl, func(a, b delayed[M]) int { return cmpBool(delayedLess(&a, &b), delayedLess(&b, &a)) })
	w.u(uint64(len(dl)))
	for i := range dl {
		w.i(dl[i].at)
		encEntry(w, &dl[i].e, encM)
	}
	holder := func(c *Consumer[M, C]) {
		w.u(uint64(c.outN))
		for i := 0; i < c.out.Len(); i++ {
			if e := c.out.Ptr(i); !e.Dead {
				encEntry(w, e, encM)
			}
		}
	}
	consumer := func(c *Consumer[M, C]) {
		w.u(c.ID)
		w.i(int64(c.Priority))
		w.bool(c.Exclusive)
		w.bool(c.NoAck)
		w.u(uint64(c.Prefetch))
		w.bool(c.blocked)
		holder(c)
	}
	w.u(uint64(len(m.consumers)))
	for _, c := range m.consumers {
		consumer(c)
	}
	w.u(uint64(len(m.holders)))
	for _, c := range m.holders {
		consumer(c)
	}
	holder(&m.get)
	keys := make([]uint64, 0, len(m.pubs))
	for k := range m.pubs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	w.u(uint64(len(keys)))
	for _, k := range keys {
		w.u(k)
		w.u(m.pubs[k])
	}
	return w.b
}

func cmpBool(less, greater bool) int {
	switch {
	case less:
		return -1
	case greater:
		return 1
	}
	return 0
}

type dec struct {
	b   []byte
	err error
}

func (r *dec) u() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = ErrSnapshot
		r.b = nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *dec) i() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = ErrSnapshot
		r.b = nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *dec) bool() bool { return r.u() != 0 }

// n reads a count, bounded by the bytes left (each item takes one at
// least), so that a corrupt count cannot make a huge allocation.
func (r *dec) n() int {
	v := r.u()
	if v > uint64(len(r.b)) {
		r.err = ErrSnapshot
		r.b = nil
		return 0
	}
	return int(v)
}

func decEntry[M any](r *dec, decM func([]byte) (M, []byte, error)) Entry[M] {
	var e Entry[M]
	e.Seq = r.u()
	if r.err != nil {
		return e
	}
	m, rest, err := decM(r.b)
	if err != nil {
		r.err, r.b = err, nil
		return e
	}
	e.Msg, r.b = m, rest
	e.ExpiresAt = r.i()
	e.DeliveryCount = uint32(r.u())
	e.Acquired = uint32(r.u())
	e.Seg = uint32(r.u())
	e.Size = uint32(r.u())
	e.Level = uint8(r.u())
	f := r.u()
	e.Persistent, e.Redelivered, e.OnDisk = f&1 != 0, f&2 != 0, f&4 != 0
	return e
}

func decCounts(r *dec) Counts {
	var c Counts
	c.All.N = int(r.u())
	c.All.Bytes = r.i()
	c.Persistent.N = int(r.u())
	c.Persistent.Bytes = r.i()
	return c
}

// Decode rebuilds a machine from a Snapshot. decM reads a message
// reference and returns the bytes after it; ref gives the shell's
// consumer for a consumer id.
func Decode[M, C any](b []byte, fx Effects[M, C], decM func([]byte) (M, []byte, error), ref func(id uint64) C) (*Machine[M, C], error) {
	if len(b) == 0 || b[0] != snapVersion {
		return nil, ErrSnapshot
	}
	r := &dec{b: b[1:]}
	var c Config
	c.Quorum = r.bool()
	c.Levels = int(r.u())
	if c.Levels < 1 || c.Levels > 256 {
		return nil, ErrSnapshot
	}
	c.SingleActive = r.bool()
	c.DLX = r.bool()
	for _, p := range []*int64{&c.MessageTTL, &c.Expires, &c.MaxLength, &c.MaxLengthBytes, &c.DeliveryLimit, &c.RetryMin, &c.RetryMax} {
		*p = r.i()
	}
	c.Overflow = Overflow(r.u())
	c.CountDeliveries = r.bool()
	c.RetryType = RetryType(r.u())
	c.Dedup = r.bool()
	m := New(c, fx)
	m.nextSeq = r.u()
	m.rr = int(r.u())
	m.expiresAt = r.i()
	m.hadConsumer = r.bool()
	m.deleted = r.bool()
	m.dlxPending = int(r.u())
	s := &m.stats
	for _, p := range []*uint64{&s.Published, &s.Redelivered, &s.Deliver, &s.DeliverNoAck, &s.Get, &s.GetNoAck, &s.GetEmpty, &s.Acked, &s.Requeued, &s.Rejected} {
		*p = r.u()
	}
	for i := range s.DeadLettered {
		s.DeadLettered[i] = r.u()
		s.Dropped[i] = r.u()
	}
	m.paged = decCounts(r)
	for i := range m.ready.levels {
		n := r.n()
		for j := 0; j < n && r.err == nil; j++ {
			e := decEntry(r, decM)
			if int(e.Level) != i {
				return nil, ErrSnapshot
			}
			m.ready.push(e)
		}
	}
	// Levels index the ready list: one out of range is a damaged snapshot,
	// not a panic later.
	badLevel := func(l uint8) bool {
		if int(l) >= len(m.ready.levels) {
			r.err, r.b = ErrSnapshot, nil
			return true
		}
		return false
	}
	n := r.n()
	for j := 0; j < n && r.err == nil; j++ {
		t := Timed{At: r.i(), Seq: r.u(), Pos: r.u(), Level: uint8(r.u())}
		if !badLevel(t.Level) {
			m.expiries = append(m.expiries, t)
		}
	}
	n = r.n()
	for j := 0; j < n && r.err == nil; j++ {
		at := r.i()
		e := decEntry(r, decM)
		if !badLevel(e.Level) {
			m.delayed = append(m.delayed, delayed[M]{at: at, e: e})
		}
	}
	holder := func(c *Consumer[M, C]) {
		n := r.n()
		c.sorted = true
		for j := 0; j < n && r.err == nil; j++ {
			e := decEntry(r, decM)
			if badLevel(e.Level) {
				return
			}
			if c.out.Len() > 0 && c.out.Ptr(c.out.Len()-1).Seq > e.Seq {
				c.sorted = false
			}
			c.out.PushBack(e)
			c.outN++
			m.unacked.add(e.Size, e.Persistent, 1)
		}
	}
	consumer := func(removed bool) *Consumer[M, C] {
		c := &Consumer[M, C]{ID: r.u(), Priority: int(r.i()), Exclusive: r.bool(), NoAck: r.bool(), Prefetch: int(r.u())}
		c.blocked = r.bool()
		c.removed = removed
		c.Ref = ref(c.ID)
		holder(c)
		return c
	}
	n = r.n()
	for j := 0; j < n && r.err == nil; j++ {
		m.consumers = append(m.consumers, consumer(false))
	}
	n = r.n()
	for j := 0; j < n && r.err == nil; j++ {
		m.holders = append(m.holders, consumer(true))
	}
	holder(&m.get)
	n = r.n()
	for j := 0; j < n && r.err == nil; j++ {
		if m.pubs == nil {
			m.pubs = map[uint64]uint64{}
		}
		k := r.u()
		m.pubs[k] = r.u()
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, ErrSnapshot
	}
	return m, nil
}
