package server

import (
	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

// Publisher confirms. A confirm for a persistent message routed to durable
// queues waits until each queue's log is synced (the message store's group
// commit); other confirms are answerable at once. Confirms go out in
// publish order: basic.ack with multiple covers everything up to the
// lowest publish still waiting for the disk. The state is guarded by
// confMu because sync completions arrive on the store's goroutine.

// confirmWait is a publish answered only once it is on disk.
type confirmWait struct {
	seq  uint64
	left int32 // syncs still awaited: 1 until its Durability is done, then 0
	nack bool
}

// confirmPublish records the outcome of publish number seq (reader
// goroutine).
func (ch *channel) confirmPublish(res broker.PublishResult) {
	seq, wait := ch.recordPublish(res)
	if !wait {
		return
	}
	res.Durable.Notify(func(err error) { ch.diskDone(seq, err) })
}

// recordPublish numbers a publish and confirms it at once when it need
// not wait for the disk (confMu released by a defer). It returns the
// publish's number and whether it waits for a sync.
func (ch *channel) recordPublish(res broker.PublishResult) (uint64, bool) {
	ch.confMu.Lock()
	defer ch.confMu.Unlock()
	ch.publishSeq++
	seq := ch.publishSeq
	nack := res.Rejected || res.Failed
	wait := res.Durable.Pending()
	if len(ch.waits) == ch.whead && !wait {
		if nack {
			// R4.5: acks before it go out first so confirms stay in order.
			ch.flushConfirmsLocked()
			ch.ackedUpTo, ch.pendingAck = seq, seq
			ch.c.sendMethod(ch.id, &amqp.BasicNack{DeliveryTag: seq})
		} else {
			ch.pendingAck = seq
			if ch.pendingAck-ch.ackedUpTo >= maxUnflushedConfirms {
				ch.flushConfirmsLocked()
			}
		}
		return seq, false
	}
	w := confirmWait{seq: seq, nack: nack}
	if wait {
		w.left = 1
	}
	ch.waits = append(ch.waits, w)
	return seq, wait
}

// diskDone is a sync completion for publish seq (store goroutine). The
// confirms it makes answerable are sent by the connection's writer, once
// per write, so that a group commit of many publishes costs one ack.
func (ch *channel) diskDone(seq uint64, err error) {
	// This runs on the message store's goroutine: a panic closes the
	// channel's connection, not the broker (panics.go).
	defer func() {
		if r := recover(); r != nil {
			ch.c.sinkPanic("confirming a synced publish", r)
		}
	}()
	if ch.syncedFront(seq, err) {
		ch.c.queueConfirmFlush(ch)
	}
}

// syncedFront counts one sync done for publish seq and reports whether the
// oldest waiting publish is now answerable (confMu released by a defer).
func (ch *channel) syncedFront(seq uint64, err error) bool {
	ch.confMu.Lock()
	defer ch.confMu.Unlock()
	if ch.confClosed || len(ch.waits) == ch.whead {
		return false
	}
	i := ch.whead + int(seq-ch.waits[ch.whead].seq)
	if i < ch.whead || i >= len(ch.waits) {
		return false
	}
	w := &ch.waits[i]
	w.left--
	if err != nil {
		w.nack = true
	}
	return i == ch.whead && w.left == 0
}

// flushConfirms sends the answerable publisher confirms as one basic.ack
// (multiple when it covers several messages), with a basic.nack for each
// refused publish in order. The reader calls it when it has no more input
// buffered, so a burst of publishes shares one ack; the writer calls it
// after sync completions.
func (ch *channel) flushConfirms() {
	ch.confMu.Lock()
	defer ch.confMu.Unlock()
	ch.flushConfirmsLocked()
}

func (ch *channel) flushConfirmsLocked() {
	if ch.confClosed {
		return
	}
	for ch.whead < len(ch.waits) && ch.waits[ch.whead].left <= 0 {
		w := ch.waits[ch.whead]
		ch.whead++
		if w.nack {
			ch.sendAckLocked()
			ch.ackedUpTo, ch.pendingAck = w.seq, w.seq
			ch.c.sendMethod(ch.id, &amqp.BasicNack{DeliveryTag: w.seq})
		} else {
			ch.pendingAck = w.seq
		}
	}
	if ch.whead == len(ch.waits) {
		ch.waits, ch.whead = ch.waits[:0], 0
	}
	ch.sendAckLocked()
}

func (ch *channel) sendAckLocked() {
	if ch.pendingAck <= ch.ackedUpTo {
		return
	}
	tag, multiple := ch.pendingAck, ch.pendingAck-ch.ackedUpTo > 1
	ch.ackedUpTo = ch.pendingAck
	ch.c.sendMethod(ch.id, &amqp.BasicAck{DeliveryTag: tag, Multiple: multiple})
}

// closeConfirms drops confirms still waiting: the channel is closing.
func (ch *channel) closeConfirms() {
	ch.confMu.Lock()
	ch.confClosed = true
	ch.waits, ch.whead = nil, 0
	ch.confMu.Unlock()
}

// queueConfirmFlush asks the writer to flush ch's confirms before its next
// write.
func (c *conn) queueConfirmFlush(ch *channel) {
	c.outMu.Lock()
	if !ch.flushQueued {
		ch.flushQueued = true
		c.confirmDirty = append(c.confirmDirty, ch)
	}
	c.outMu.Unlock()
	c.wake()
}

// flushQueuedConfirms runs on the writer before it takes the output.
func (c *conn) flushQueuedConfirms() {
	c.outMu.Lock()
	dirty := c.confirmDirty
	c.confirmDirty = nil
	for _, ch := range dirty {
		ch.flushQueued = false
	}
	c.outMu.Unlock()
	for _, ch := range dirty {
		ch.flushConfirms()
	}
}
