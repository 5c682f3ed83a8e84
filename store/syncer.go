package store

import (
	"context"
	"sync"
	"sync/atomic"
)

// A Syncer group-commits logs: it makes records durable for many requests
// with few fsyncs. One Syncer serves all the logs of a node.
//
// Request(l, done) asks that every record appended to l before the call be
// made durable, then done be called. One goroutine works in rounds: it takes
// all requests made since the previous round, syncs each log named in them
// once (in parallel across logs), then calls their done functions. Requests
// made while a round syncs wait for the next round, so under load one fsync
// serves many requests. Stats counts requests and fsyncs.
//
// Durability order: records written, fsync (fdatasync) returned, then done
// called. A done called with a nil error therefore proves its records are on
// disk, and publisher confirms may be sent from it.
type Syncer struct {
	parallel int

	mu      sync.Mutex
	pending map[*Log][]func(error)
	order   []*Log // logs of pending, in order of first request
	closed  bool
	wake    chan struct{}
	done    chan struct{}

	requests atomic.Uint64
	fsyncs   atomic.Uint64
	rounds   atomic.Uint64
}

// SyncerStats are cumulative counters of a Syncer.
type SyncerStats struct {
	Requests uint64 // requests completed
	Fsyncs   uint64 // fsyncs done to complete them
	Rounds   uint64 // rounds (batches of requests)
}

// RequestsPerFsync returns Requests/Fsyncs, the group-commit factor (0 before
// the first fsync).
func (s SyncerStats) RequestsPerFsync() float64 {
	if s.Fsyncs == 0 {
		return 0
	}
	return float64(s.Requests) / float64(s.Fsyncs)
}

// NewSyncer starts a Syncer that syncs up to parallel logs at a time in a
// round (0 means 16). Close stops it.
func NewSyncer(parallel int) *Syncer {
	if parallel <= 0 {
		parallel = 16
	}
	s := &Syncer{
		parallel: parallel,
		pending:  map[*Log][]func(error){},
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	go s.run()
	return s
}

// Request asks the Syncer to make every record appended to l before Request
// was called durable, then call done with nil, or with the error that
// prevented it (the log's sync error, or ErrClosed if l was closed). done is
// called exactly once, on the Syncer's goroutine, after the fsync; it must
// not block for long (it delays the next round), and it may call Request.
//
// Request returns ErrClosed, and does not call done, if the Syncer is closed.
func (s *Syncer) Request(l *Log, done func(error)) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if _, ok := s.pending[l]; !ok {
		s.order = append(s.order, l)
	}
	s.pending[l] = append(s.pending[l], done)
	// The wake-up is sent under mu: Close closes the channel under mu.
	select {
	case s.wake <- struct{}{}:
	default:
	}
	s.mu.Unlock()
	return nil
}

// Wait is Request that blocks until the records are durable or ctx is done.
// If ctx ends first, Wait returns ctx.Err(); the sync still happens.
func (s *Syncer) Wait(ctx context.Context, l *Log) error {
	ch := make(chan error, 1)
	if err := s.Request(l, func(err error) { ch <- err }); err != nil {
		return err
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats returns the Syncer's counters.
func (s *Syncer) Stats() SyncerStats {
	return SyncerStats{Requests: s.requests.Load(), Fsyncs: s.fsyncs.Load(), Rounds: s.rounds.Load()}
}

// Close completes the pending requests, stops the Syncer's goroutine and waits
// for it. It is idempotent. Requests made after Close return ErrClosed.
func (s *Syncer) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.wake)
	}
	s.mu.Unlock()
	<-s.done
	return nil
}

func (s *Syncer) run() {
	defer close(s.done)
	for {
		_, open := <-s.wake
		for {
			s.mu.Lock()
			batch, order := s.pending, s.order
			if len(order) > 0 {
				s.pending, s.order = map[*Log][]func(error){}, nil
			}
			s.mu.Unlock()
			if len(order) == 0 {
				break
			}
			s.round(batch, order)
		}
		if !open {
			return
		}
	}
}

// round syncs every log of one batch, then completes its requests.
func (s *Syncer) round(batch map[*Log][]func(error), order []*Log) {
	s.rounds.Add(1)
	errs := make([]error, len(order))
	syncOne := func(i int) {
		did, err := order[i].sync()
		if did {
			s.fsyncs.Add(1)
		}
		errs[i] = err
	}
	if len(order) == 1 {
		syncOne(0)
	} else {
		var wg sync.WaitGroup
		sem := make(chan struct{}, s.parallel)
		for i := range order {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				syncOne(i)
			})
		}
		wg.Wait()
	}
	for i, l := range order {
		dones := batch[l]
		s.requests.Add(uint64(len(dones)))
		for _, done := range dones {
			done(errs[i])
		}
	}
}
