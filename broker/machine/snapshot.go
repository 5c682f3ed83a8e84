package machine

import (
	"encoding/binary"
	"errors"
	"slices"

	"github.com/warrenmq/warren/internal/wire"
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
func (w *enc) bool(v bool) { w.b = wire.AppendBool(w.b, v) }

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

type dec = wire.Reader

func decEntry[M any](r *dec, decM func([]byte) (M, []byte, error)) Entry[M] {
	var e Entry[M]
	e.Seq = r.Uvarint()
	if r.Err() != nil {
		return e
	}
	m, rest, err := decM(r.Rest())
	if err != nil {
		r.FailWith(err)
		return e
	}
	e.Msg = m
	r.Next(uint64(r.Len() - len(rest)))
	e.ExpiresAt = r.Varint()
	e.DeliveryCount = uint32(r.Uvarint())
	e.Acquired = uint32(r.Uvarint())
	e.Seg = uint32(r.Uvarint())
	e.Size = uint32(r.Uvarint())
	e.Level = uint8(r.Uvarint())
	f := r.Uvarint()
	e.Persistent, e.Redelivered, e.OnDisk = f&1 != 0, f&2 != 0, f&4 != 0
	return e
}

func decCounts(r *dec) Counts {
	var c Counts
	c.All.N = int(r.Uvarint())
	c.All.Bytes = r.Varint()
	c.Persistent.N = int(r.Uvarint())
	c.Persistent.Bytes = r.Varint()
	return c
}

// Decode rebuilds a machine from a Snapshot. decM reads a message
// reference and returns the bytes after it; ref gives the shell's
// consumer for a consumer id.
func Decode[M, C any](b []byte, fx Effects[M, C], decM func([]byte) (M, []byte, error), ref func(id uint64) C) (*Machine[M, C], error) {
	if len(b) == 0 || b[0] != snapVersion {
		return nil, ErrSnapshot
	}
	d := wire.NewReader(b[1:], ErrSnapshot)
	r := &d
	var c Config
	c.Quorum = r.Bool()
	c.Levels = int(r.Uvarint())
	if c.Levels < 1 || c.Levels > 256 {
		return nil, ErrSnapshot
	}
	c.SingleActive = r.Bool()
	c.DLX = r.Bool()
	for _, p := range []*int64{&c.MessageTTL, &c.Expires, &c.MaxLength, &c.MaxLengthBytes, &c.DeliveryLimit, &c.RetryMin, &c.RetryMax} {
		*p = r.Varint()
	}
	c.Overflow = Overflow(r.Uvarint())
	c.CountDeliveries = r.Bool()
	c.RetryType = RetryType(r.Uvarint())
	c.Dedup = r.Bool()
	m := New(c, fx)
	m.nextSeq = r.Uvarint()
	m.rr = int(r.Uvarint())
	m.expiresAt = r.Varint()
	m.hadConsumer = r.Bool()
	m.deleted = r.Bool()
	m.dlxPending = int(r.Uvarint())
	s := &m.stats
	for _, p := range []*uint64{&s.Published, &s.Redelivered, &s.Deliver, &s.DeliverNoAck, &s.Get, &s.GetNoAck, &s.GetEmpty, &s.Acked, &s.Requeued, &s.Rejected} {
		*p = r.Uvarint()
	}
	for i := range s.DeadLettered {
		s.DeadLettered[i] = r.Uvarint()
		s.Dropped[i] = r.Uvarint()
	}
	m.paged = decCounts(r)
	for i := range m.ready.levels {
		n := r.Count()
		for j := 0; j < n && r.Err() == nil; j++ {
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
			r.Fail()
			return true
		}
		return false
	}
	n := r.Count()
	for j := 0; j < n && r.Err() == nil; j++ {
		t := Timed{At: r.Varint(), Seq: r.Uvarint(), Pos: r.Uvarint(), Level: uint8(r.Uvarint())}
		if !badLevel(t.Level) {
			m.expiries = append(m.expiries, t)
		}
	}
	n = r.Count()
	for j := 0; j < n && r.Err() == nil; j++ {
		at := r.Varint()
		e := decEntry(r, decM)
		if !badLevel(e.Level) {
			m.delayed = append(m.delayed, delayed[M]{at: at, e: e})
		}
	}
	holder := func(c *Consumer[M, C]) {
		n := r.Count()
		c.sorted = true
		for j := 0; j < n && r.Err() == nil; j++ {
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
		c := &Consumer[M, C]{ID: r.Uvarint(), Priority: int(r.Varint()), Exclusive: r.Bool(), NoAck: r.Bool(), Prefetch: int(r.Uvarint())}
		c.blocked = r.Bool()
		c.removed = removed
		c.Ref = ref(c.ID)
		holder(c)
		return c
	}
	n = r.Count()
	for j := 0; j < n && r.Err() == nil; j++ {
		m.consumers = append(m.consumers, consumer(false))
	}
	n = r.Count()
	for j := 0; j < n && r.Err() == nil; j++ {
		m.holders = append(m.holders, consumer(true))
	}
	holder(&m.get)
	n = r.Count()
	for j := 0; j < n && r.Err() == nil; j++ {
		if m.pubs == nil {
			m.pubs = map[uint64]uint64{}
		}
		k := r.Uvarint()
		m.pubs[k] = r.Uvarint()
	}
	if err := r.Done(); err != nil {
		return nil, err
	}
	return m, nil
}
