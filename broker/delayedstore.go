package broker

import (
	"container/heap"
	"encoding/binary"
	"time"

	"github.com/warrenmq/warren/store"
)

// recHeld is a message held by a delayed exchange: seq, due time (unix
// ms), then the message; acks (recAck) remove it once it has been routed
// and the queues it went to have synced it.
const recHeld byte = 'H'

// persistLocked appends a persistent held message of a durable delayed
// exchange to the exchange's log; the publisher's confirm waits for it
// (r). d.mu held.
func (d *delayedState) persistLocked(e *heldEntry, r *Router) {
	ms := d.x.vhost.b.msgs
	if ms == nil || !e.msg.persistent() || !d.x.persisted() {
		return
	}
	if d.disk == nil {
		if d.x.vhost.b.loading.Load() {
			return
		}
		d.disk = ms.newXDisk(d.x, 0, "")
	}
	b := binary.LittleEndian.AppendUint64(d.disk.buf[:0], e.seq)
	b = binary.LittleEndian.AppendUint64(b, uint64(e.due.UnixMilli()))
	b = appendMessage(b, e.msg)
	p, err := d.disk.append(recHeld, b)
	if cap(b) <= 1<<20 {
		d.disk.buf = b[:0]
	}
	if err != nil {
		if r != nil {
			r.failed = true
		}
		return
	}
	e.ondisk, e.seg = true, p.Seg
	d.disk.addLive(p.Seg)
	if r != nil {
		r.addLog(d.disk.log)
	}
}

// released removes routed held messages from the exchange's log once the
// queue logs they were appended to are synced, so that a crash in between
// routes them again rather than losing them.
func (d *delayedState) released(done []heldEntry, dur Durability) {
	if len(done) == 0 || d.disk == nil {
		return
	}
	dur.Notify(func(error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.dropped || d.disk == nil {
			return
		}
		seqs := make([]uint64, len(done))
		segs := make([]uint32, len(done))
		for i, e := range done {
			seqs[i], segs[i] = e.seq, e.seg
		}
		d.disk.ack(seqs, segs)
	})
}

// recoverDelayed loads the held messages of a durable delayed exchange.
func (ms *MsgStore) recoverDelayed(x *Exchange, now time.Time) {
	d := x.delayed
	k := delayedKey(x.vhost.Name, x.Name)
	fds := ms.found[k]
	delete(ms.found, k)
	if len(fds) == 0 {
		return
	}
	best := fds[0]
	for _, fd := range fds[1:] {
		if fd.id > best.id {
			best = fd
		}
	}
	disk := ms.newXDisk(x, best.id, best.path)
	if err := disk.create(); err != nil {
		ms.log.Error("message store: opening a delayed exchange's log", "exchange", x.Name, "err", err)
		return
	}
	held := map[uint64]heldEntry{}
	disk.log.Scan(func(p store.Pos, typ byte, pl []byte) error {
		switch typ {
		case recHeld:
			if len(pl) < 16 {
				return nil
			}
			m, err := decodeMessage(pl[16:])
			if err != nil {
				return nil
			}
			seq := le64(pl)
			held[seq] = heldEntry{due: time.UnixMilli(int64(le64(pl[8:]))), seq: seq, msg: m, seg: p.Seg, ondisk: true}
		case recAck:
			for ; len(pl) >= 8; pl = pl[8:] {
				delete(held, le64(pl))
			}
		}
		return nil
	})
	d.mu.Lock()
	d.disk = disk
	for _, e := range held {
		d.pending = append(d.pending, e)
		d.seq = max(d.seq, e.seq)
		disk.addLive(e.seg)
	}
	heap.Init(&d.pending)
	d.armLocked(now)
	d.mu.Unlock()
}
