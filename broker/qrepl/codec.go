package qrepl

import (
	"encoding/binary"
	"errors"

	"github.com/warrenmq/warren/broker/machine"
	"github.com/warrenmq/warren/internal/wire"
)

// PubID identifies a publish for deduplication: the publisher (a node's
// run id; 0 for none) and its sequence number, increasing per publisher
// and queue in log order.
type PubID = machine.PubID

// Kind is a command's leading byte. The high nibble is the codec version
// (1), the low nibble the command: a later format takes new kind values,
// so an entry written by an older node stays decodable.
type Kind byte

// The commands of codec version 1.
const (
	KindEnqueue Kind = 0x11
	KindRemove  Kind = 0x12
	KindReturn  Kind = 0x13
	KindDiscard Kind = 0x14
	KindLease   Kind = 0x15
	KindPurge   Kind = 0x16
	KindPrune   Kind = 0x17
	// KindEnqueueBatch is several Enqueues in one entry (EnqueueBatch). A
	// node older than it would skip the entry: a leader proposes it only
	// once every node of the cluster says it decodes it.
	KindEnqueueBatch Kind = 0x18
)

func (k Kind) String() string {
	switch k {
	case KindEnqueue:
		return "enqueue"
	case KindRemove:
		return "remove"
	case KindReturn:
		return "return"
	case KindDiscard:
		return "discard"
	case KindLease:
		return "lease"
	case KindPurge:
		return "purge"
	case KindPrune:
		return "prune"
	case KindEnqueueBatch:
		return "enqueue batch"
	}
	return "unknown"
}

// MaxReturn is the most items one Return carries: a leader splits larger
// batches. (A Return's items take order keys index<<16 | i, so the bound
// is part of the state's design.) Id lists (Remove, Discard, Purge) have
// no bound but the entry's size.
const MaxReturn = 1 << 16

// MaxBatch is MaxReturn's first name (kept for callers of the first
// version; id lists need no split).
const MaxBatch = MaxReturn

// ErrCorrupt is data that does not decode as a command.
var ErrCorrupt = errors.New("qrepl: undecodable command")

// Command is one replicated queue command. AppendTo appends its encoding
// (kind byte first) to dst.
type Command interface {
	Kind() Kind
	AppendTo(dst []byte) []byte
}

// Enqueue places a message at the back of the queue; its id is the index
// of the log entry. Body is opaque here (the broker's encoded message)
// and is not kept in the state: the log entry holds it.
type Enqueue struct {
	Pub PubID // Publisher 0: no deduplication
	// Prev is the seq of the publisher's enqueue to this queue before
	// this one (0: none known, no check): the state places the enqueue
	// only if that is the last it applied for the publisher, so that a
	// later publish never overtakes an earlier one whose proposal was
	// dropped (the earlier one's resend would be taken for a duplicate).
	Prev       uint64
	Time       int64 // the leader's clock, unix ms (publisher expiry)
	ExpiresAt  int64 // unix ms, 0 = never
	Priority   uint8
	Persistent bool
	Size       uint32 // body bytes (what x-max-length-bytes counts)
	Body       []byte
}

// Remove takes messages out of the queue: acked, dropped, expired, or
// dead-lettered and taken by every target. Ids not live are ignored.
type Remove struct{ IDs []uint64 }

// ReturnItem is one returned (requeued) message: its new counts and
// where it goes. Back puts it at the back of the queue under a new order
// key (a quorum queue's return without a delivery limit); otherwise it
// keeps its place. DelayUntil (unix ms, 0 for none) is a delayed retry's
// due time.
type ReturnItem struct {
	ID            uint64
	DeliveryCount uint32
	Acquired      uint32
	Redelivered   bool
	Back          bool
	DelayUntil    int64
}

// Return returns messages to the queue, in order (the back ones take
// order keys in item order). Items for ids not live are ignored.
type Return struct{ Items []ReturnItem }

// Discard marks messages as being dead-lettered (at-least-once, R1.14):
// a new leader dead-letters them again. Remove follows once every target
// has them.
type Discard struct {
	IDs    []uint64
	Reason machine.Reason
}

// Lease raises the delivery lease: the leader delivers only messages
// with id <= the lease, and a new leader marks those redelivered. It
// never goes down.
type Lease struct{ UpTo uint64 }

// Purge drops the listed messages (the ready ones when the leader
// purged), counted as purged rather than removed.
type Purge struct{ IDs []uint64 }

// Prune forgets the publishers last seen before Now - PubTTL (Now, like
// Enqueue.Time, is the leader's clock and advances the state's clock).
type Prune struct{ Now int64 }

// EnqueueBatch is several publishes in one entry, placed in item order
// as Enqueues at the entry's index would be: item j's id is
// BatchID(index, j). One entry for many publishes is what makes a busy
// queue's log cheap: the raft library's costs are per entry.
type EnqueueBatch struct{ Items []Enqueue }

// MaxBatchItems bounds an EnqueueBatch: an item's id keeps j in 16 bits.
const MaxBatchItems = 1 << 16

// batchBit marks the id of item j > 0 of an EnqueueBatch at index i:
// batchBit | i<<16 | j. Item 0's id is i, the id a lone Enqueue at i
// would have; every id's order key (keyOf) is i<<16 | j.
const batchBit = 1 << 63

// maxBatchIndex bounds the index of an EnqueueBatch, so that its ids
// keep clear of batchBit (2^47 entries: years at a million a second).
const maxBatchIndex = 1<<47 - 1

// BatchID is the id of item j of the EnqueueBatch at index.
func BatchID(index uint64, j int) uint64 {
	if j == 0 {
		return index
	}
	return batchBit | index<<16 | uint64(j)
}

// EntryOf is the index of the entry that holds message id's body.
func EntryOf(id uint64) uint64 {
	if id&batchBit != 0 {
		return (id &^ batchBit) >> 16
	}
	return id
}

// ItemOf is message id's item in its entry (0 for a lone Enqueue).
func ItemOf(id uint64) int {
	if id&batchBit != 0 {
		return int(id & 0xffff)
	}
	return 0
}

// keyOf is the order key of a message never moved.
func keyOf(id uint64) uint64 {
	if id&batchBit != 0 {
		return id &^ batchBit
	}
	return id << 16
}

// validID reports whether id can name a message.
func validID(id uint64) bool {
	if id&batchBit != 0 {
		return id&0xffff != 0 && (id&^batchBit)>>16 != 0 // item 0 has its lone id
	}
	return id != 0 && id <= maxIndex
}

func (Enqueue) Kind() Kind      { return KindEnqueue }
func (EnqueueBatch) Kind() Kind { return KindEnqueueBatch }
func (Remove) Kind() Kind       { return KindRemove }
func (Return) Kind() Kind       { return KindReturn }
func (Discard) Kind() Kind      { return KindDiscard }
func (Lease) Kind() Kind        { return KindLease }
func (Purge) Kind() Kind        { return KindPurge }
func (Prune) Kind() Kind        { return KindPrune }

// Encode returns c's encoding.
func Encode(c Command) []byte { return c.AppendTo(nil) }

const (
	eqPersistent = 1 << iota
	eqPub
	eqExpires
	eqPrev
)

// AppendTo encodes e: kind, flags, [publisher, seq], time, [expiry],
// priority, size, then the body to the end.
func (e Enqueue) AppendTo(b []byte) []byte {
	return append(e.appendHead(append(b, byte(KindEnqueue))), e.Body...)
}

// AppendTo encodes c: kind, the item count, then each item as an
// Enqueue's head, the body's length (u32, little-endian) and the body.
func (c EnqueueBatch) AppendTo(b []byte) []byte {
	b = AppendBatchHead(b, len(c.Items))
	for i := range c.Items {
		var at int
		b, at = AppendItemHead(b, &c.Items[i])
		b = EndItem(append(b, c.Items[i].Body...), at)
	}
	return b
}

// AppendBatchHead starts an EnqueueBatch of n items (1 to MaxBatchItems);
// each follows as AppendItemHead, its body, EndItem.
func AppendBatchHead(b []byte, n int) []byte {
	return binary.AppendUvarint(append(b, byte(KindEnqueueBatch)), uint64(n))
}

// AppendItemHead appends e's head as a batch item (e.Body is not read):
// append the body, then EndItem(b, at).
func AppendItemHead(b []byte, e *Enqueue) ([]byte, int) {
	b = append(e.appendHead(b), 0, 0, 0, 0)
	return b, len(b)
}

// EndItem writes the length of the body appended since at.
func EndItem(b []byte, at int) []byte {
	binary.LittleEndian.PutUint32(b[at-4:at], uint32(len(b)-at))
	return b
}

// appendHead appends e's fields but the kind and the body.
func (e *Enqueue) appendHead(b []byte) []byte {
	var f byte
	if e.Persistent {
		f |= eqPersistent
	}
	if e.Pub.Publisher != 0 {
		f |= eqPub
	}
	if e.ExpiresAt != 0 {
		f |= eqExpires
	}
	if e.Prev != 0 && e.Pub.Publisher != 0 {
		f |= eqPrev
	}
	b = append(b, f)
	if f&eqPub != 0 {
		b = binary.AppendUvarint(b, e.Pub.Publisher)
		b = binary.AppendUvarint(b, e.Pub.Seq)
	}
	if f&eqPrev != 0 {
		b = binary.AppendUvarint(b, e.Prev)
	}
	b = binary.AppendVarint(b, e.Time)
	if f&eqExpires != 0 {
		b = binary.AppendVarint(b, e.ExpiresAt)
	}
	b = append(b, e.Priority)
	return binary.AppendUvarint(b, uint64(e.Size))
}

// appendIDs writes a count and the ids, each as the zigzag difference
// from the one before (ids of a batch are mostly close and increasing).
func appendIDs(b []byte, ids []uint64) []byte {
	b = binary.AppendUvarint(b, uint64(len(ids)))
	prev := uint64(0)
	for _, id := range ids {
		b = binary.AppendVarint(b, int64(id-prev))
		prev = id
	}
	return b
}

func (r Remove) AppendTo(b []byte) []byte { return appendIDs(append(b, byte(KindRemove)), r.IDs) }
func (p Purge) AppendTo(b []byte) []byte  { return appendIDs(append(b, byte(KindPurge)), p.IDs) }
func (d Discard) AppendTo(b []byte) []byte {
	return appendIDs(append(b, byte(KindDiscard), byte(d.Reason)), d.IDs)
}
func (l Lease) AppendTo(b []byte) []byte {
	return binary.AppendUvarint(append(b, byte(KindLease)), l.UpTo)
}
func (p Prune) AppendTo(b []byte) []byte {
	return binary.AppendVarint(append(b, byte(KindPrune)), p.Now)
}

const (
	rtRedelivered = 1 << iota
	rtBack
	rtDelay
)

func (r Return) AppendTo(b []byte) []byte {
	b = binary.AppendUvarint(append(b, byte(KindReturn)), uint64(len(r.Items)))
	prev := uint64(0)
	for _, it := range r.Items {
		var f byte
		if it.Redelivered {
			f |= rtRedelivered
		}
		if it.Back {
			f |= rtBack
		}
		if it.DelayUntil != 0 {
			f |= rtDelay
		}
		b = binary.AppendVarint(b, int64(it.ID-prev))
		prev = it.ID
		b = append(b, f)
		b = binary.AppendUvarint(b, uint64(it.DeliveryCount))
		b = binary.AppendUvarint(b, uint64(it.Acquired))
		if f&rtDelay != 0 {
			b = binary.AppendVarint(b, it.DelayUntil)
		}
	}
	return b
}

// dec reads a command; the first error (ErrCorrupt) sticks.
type dec = wire.Reader

func newDec(b []byte) *dec {
	d := wire.NewReader(b, ErrCorrupt)
	return &d
}

func readIDs(d *dec) []uint64 {
	n := d.Count()
	if d.Err() != nil || n == 0 {
		return nil
	}
	ids := make([]uint64, n)
	prev := uint64(0)
	for i := range ids {
		prev += uint64(d.Varint())
		ids[i] = prev
	}
	return ids
}

// Decode decodes a command. An Enqueue's Body aliases data.
func Decode(data []byte) (Command, error) {
	if len(data) == 0 {
		return nil, ErrCorrupt
	}
	d := newDec(data[1:])
	switch Kind(data[0]) {
	case KindEnqueue:
		e, err := decodeEnqueue(d)
		if err != nil {
			return nil, err
		}
		return e, nil
	case KindEnqueueBatch:
		c, err := decodeBatch(d)
		if err != nil {
			return nil, err
		}
		return c, nil
	case KindRemove:
		c := Remove{IDs: readIDs(d)}
		return c, d.Done()
	case KindPurge:
		c := Purge{IDs: readIDs(d)}
		return c, d.Done()
	case KindDiscard:
		r := d.Byte()
		c := Discard{Reason: machine.Reason(r), IDs: readIDs(d)}
		if r > byte(machine.DeliveryLimit) {
			d.Fail()
		}
		return c, d.Done()
	case KindLease:
		c := Lease{UpTo: d.Uvarint()}
		return c, d.Done()
	case KindPrune:
		c := Prune{Now: d.Varint()}
		return c, d.Done()
	case KindReturn:
		n := d.CountAtMost(MaxReturn)
		var c Return
		if n > 0 {
			c.Items = make([]ReturnItem, n)
		}
		prev := uint64(0)
		for i := range c.Items {
			it := &c.Items[i]
			prev += uint64(d.Varint())
			it.ID = prev
			f := d.Byte()
			if f&^(rtRedelivered|rtBack|rtDelay) != 0 {
				d.Fail()
			}
			it.Redelivered, it.Back = f&rtRedelivered != 0, f&rtBack != 0
			it.DeliveryCount = d.Uint32()
			it.Acquired = d.Uint32()
			if f&rtDelay != 0 {
				if it.DelayUntil = d.Varint(); it.DelayUntil == 0 {
					d.Fail()
				}
			}
			if d.Err() != nil {
				break
			}
		}
		return c, d.Done()
	}
	return nil, ErrCorrupt
}

// decodeBatch reads an EnqueueBatch after its kind byte; the bodies
// alias the data.
func decodeBatch(d *dec) (EnqueueBatch, error) {
	n := d.Count()
	if d.Err() != nil || n == 0 || n > MaxBatchItems {
		return EnqueueBatch{}, ErrCorrupt
	}
	c := EnqueueBatch{Items: make([]Enqueue, n)}
	for i := range c.Items {
		if err := decodeItem(d, &c.Items[i]); err != nil {
			return EnqueueBatch{}, err
		}
	}
	if d.Done() != nil {
		return EnqueueBatch{}, ErrCorrupt
	}
	return c, nil
}

// decodeItem reads one item of an EnqueueBatch.
func decodeItem(d *dec, e *Enqueue) error {
	if err := decodeHead(d, e); err != nil {
		return err
	}
	e.Body = d.Next(uint64(d.Fixed32()))
	if d.Err() != nil {
		return ErrCorrupt
	}
	return nil
}

func decodeEnqueue(d *dec) (Enqueue, error) {
	var e Enqueue
	if err := decodeHead(d, &e); err != nil {
		return Enqueue{}, err
	}
	e.Body = d.Rest()
	return e, nil
}

// decodeHead reads an Enqueue's fields but the kind and the body.
func decodeHead(d *dec, e *Enqueue) error {
	*e = Enqueue{}
	f := d.Byte()
	if f&^(eqPersistent|eqPub|eqExpires|eqPrev) != 0 || f&eqPrev != 0 && f&eqPub == 0 {
		return ErrCorrupt
	}
	e.Persistent = f&eqPersistent != 0
	if f&eqPub != 0 {
		e.Pub.Publisher, e.Pub.Seq = d.Uvarint(), d.Uvarint()
		if e.Pub.Publisher == 0 {
			d.Fail()
		}
	}
	if f&eqPrev != 0 {
		if e.Prev = d.Uvarint(); e.Prev == 0 || e.Prev >= e.Pub.Seq {
			d.Fail()
		}
	}
	e.Time = d.Varint()
	if f&eqExpires != 0 {
		if e.ExpiresAt = d.Varint(); e.ExpiresAt == 0 {
			d.Fail()
		}
	}
	e.Priority = d.Byte()
	e.Size = d.Uint32()
	if d.Err() != nil {
		return ErrCorrupt
	}
	return nil
}

// DecodeEnqueue decodes an Enqueue entry (a body read back from the log
// when a new leader rebuilds its queue). Body aliases data.
func DecodeEnqueue(data []byte) (Enqueue, error) {
	if len(data) == 0 || Kind(data[0]) != KindEnqueue {
		return Enqueue{}, ErrCorrupt
	}
	return decodeEnqueue(newDec(data[1:]))
}

// DecodeMessage decodes message id's Enqueue from data, the entry
// EntryOf(id) read back from the log: a lone Enqueue, or the item of
// an EnqueueBatch. Body aliases data.
func DecodeMessage(data []byte, id uint64) (Enqueue, error) {
	if len(data) == 0 {
		return Enqueue{}, ErrCorrupt
	}
	switch Kind(data[0]) {
	case KindEnqueue:
		if ItemOf(id) != 0 {
			return Enqueue{}, ErrCorrupt
		}
		return decodeEnqueue(newDec(data[1:]))
	case KindEnqueueBatch:
		d := newDec(data[1:])
		n, j := d.Count(), ItemOf(id)
		if d.Err() != nil || j >= n {
			return Enqueue{}, ErrCorrupt
		}
		var e Enqueue
		for range j + 1 {
			if err := decodeItem(d, &e); err != nil {
				return Enqueue{}, err
			}
		}
		return e, nil
	}
	return Enqueue{}, ErrCorrupt
}
