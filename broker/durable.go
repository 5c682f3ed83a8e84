package broker

import (
	"context"
	"slices"
	"sync"

	"github.com/warrenmq/warren/store"
)

// Durability is what a publish must wait for before it is on disk: the
// queue logs the message was appended to, and the message store's group
// commit that syncs them. A publisher confirm, a tx.commit-ok or a
// replayed message's ack from its source is sent only once it is done.
//
// The zero value has nothing to wait for. A Durability is a small value,
// cheap to copy; the one in a PublishResult shares its Router's scratch
// space and is valid until the Router's next Publish (so that a confirm
// costs no allocation). To collect the Durability of several publishes,
// Add them into a Durability of one's own.
type Durability struct {
	logs  []*store.Log
	sy    *store.Syncer
	owned bool // logs (and rws) are this value's own, not a Router's scratch
	// rws are the answers awaited from the home nodes of remote queues
	// (remote.go): the message on disk there, or refused (a nack).
	rws []*rwait
}

// Pending reports whether there is anything to wait for.
func (d Durability) Pending() bool { return d.sy != nil && len(d.logs) > 0 || len(d.rws) > 0 }

// localPending reports whether there are local logs to wait for.
func (d Durability) localPending() bool { return d.sy != nil && len(d.logs) > 0 }

// Wait blocks until everything d covers is on disk, or ctx is done
// (ctx.Err(); the sync still happens). It returns the store's error if a
// log could not be synced, store.ErrClosed-like errors if the store closed.
func (d Durability) Wait(ctx context.Context) error {
	if !d.Pending() {
		return nil
	}
	if d.localPending() {
		for _, l := range d.logs {
			if err := d.sy.Wait(ctx, l); err != nil {
				return err
			}
		}
	}
	for _, w := range d.rws {
		if err := w.wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Notify calls done exactly once when everything d covers is on disk,
// with nil, or with the first error that kept a log from being synced.
// done runs on the message store's goroutine, or on the caller's when
// there is nothing to wait for or the store is closed; it must not block
// for long. A Durability with one log (a publish to one durable queue)
// costs no allocation beyond done itself.
func (d Durability) Notify(done func(error)) {
	if !d.Pending() {
		done(nil)
		return
	}
	local := d.localPending()
	if len(d.rws) == 0 && len(d.logs) == 1 {
		if err := d.sy.Request(d.logs[0], done); err != nil {
			done(err)
		}
		return
	}
	n := len(d.rws)
	if local {
		n += len(d.logs)
	}
	j := &joinWait{left: n, done: done}
	if local {
		for _, l := range d.logs {
			if err := d.sy.Request(l, j.one); err != nil {
				j.one(err)
			}
		}
	}
	for _, w := range d.rws {
		w.notify(j.one)
	}
}

// joinWait calls done once all of left requests completed.
type joinWait struct {
	mu   sync.Mutex
	left int
	err  error
	done func(error)
}

func (j *joinWait) one(err error) {
	j.mu.Lock()
	if err != nil && j.err == nil {
		j.err = err
	}
	j.left--
	last, e := j.left == 0, j.err
	j.mu.Unlock()
	if last {
		j.done(e)
	}
}

// Add makes d cover what o covers too. d keeps its own copy: o may be a
// PublishResult's, which the next Publish reuses.
func (d *Durability) Add(o Durability) {
	if !o.Pending() {
		return
	}
	if !d.owned {
		d.logs = slices.Clone(d.logs)
		d.rws = slices.Clone(d.rws)
		d.owned = true
	}
	if o.sy != nil {
		d.sy = o.sy
	}
	for _, l := range o.logs {
		if !slices.Contains(d.logs, l) {
			d.logs = append(d.logs, l)
		}
	}
	d.rws = append(d.rws, o.rws...)
}

// Reset empties d, keeping the space it owns for reuse.
func (d *Durability) Reset() {
	if !d.owned {
		*d = Durability{}
		return
	}
	clear(d.logs)
	d.logs = d.logs[:0]
	clear(d.rws)
	d.rws = d.rws[:0]
}

// WaitDurable waits until what tok covers is on disk, or ctx is done: the
// point at which a publisher confirm would be sent. It is tok.Wait; a
// broker without a message store has nothing to wait for.
func (b *Broker) WaitDurable(ctx context.Context, tok Durability) error {
	return tok.Wait(ctx)
}

// durability returns the token for logs, or the zero token when the
// broker has no message store.
func (b *Broker) durability(logs []*store.Log) Durability {
	if b.msgs == nil || len(logs) == 0 {
		return Durability{}
	}
	return Durability{logs: logs, sy: b.msgs.syncer}
}

// SyncStats are the message store's group-commit counters.
type SyncStats struct {
	Requests uint64 // sync requests completed
	Fsyncs   uint64 // fsyncs done to complete them
	Rounds   uint64 // rounds (batches of requests)
}

// RequestsPerFsync returns Requests/Fsyncs, the group-commit factor (0
// before the first fsync).
func (s SyncStats) RequestsPerFsync() float64 {
	if s.Fsyncs == 0 {
		return 0
	}
	return float64(s.Requests) / float64(s.Fsyncs)
}

// SyncStats returns the message store's group-commit counters (zero
// without a message store).
func (b *Broker) SyncStats() SyncStats {
	if b.msgs == nil {
		return SyncStats{}
	}
	st := b.msgs.syncer.Stats()
	return SyncStats{Requests: st.Requests, Fsyncs: st.Fsyncs, Rounds: st.Rounds}
}

// DiskIO returns how many message records the message store read back and
// wrote (zero without one).
func (b *Broker) DiskIO() (reads, writes uint64) { return b.msgs.DiskIO() }
