package broker

import "sync"

// lazyWorker is a goroutine that runs only while there is work for it:
// the ordered sender to a node (remoteout.go), a quorum leader's
// proposer (qqleader.go), a queue's dead-letter flusher (dlflush.go),
// and the inOrder lists below.
//
// The owner's mutex guards the worker and its work. The worker's loop
// takes the work under that mutex and, when it finds none, calls
// stopLocked before releasing it, so work queued under the same mutex
// always finds a worker running or starts one.
type lazyWorker struct{ on bool }

// startingLocked marks the worker running and reports whether the caller
// must start its goroutine (go run()): false when it runs already. The
// caller writes the go statement, so that nothing is allocated for a
// worker that runs.
func (w *lazyWorker) startingLocked() bool {
	if w.on {
		return false
	}
	w.on = true
	return true
}

// stopLocked marks the worker stopped: its loop is about to return.
func (w *lazyWorker) stopLocked() { w.on = false }

// runningLocked reports whether the worker runs.
func (w *lazyWorker) runningLocked() bool { return w.on }

// inOrder hands each item added to handle, in order, on a lazyWorker of
// its own: the caller never waits for handle (a quorum queue's leader
// changes and its local leader's answers, qqleader.go). handle is set
// before the first add.
type inOrder[T any] struct {
	handle func(T)
	mu     sync.Mutex
	items  []T
	worker lazyWorker
}

func (o *inOrder[T]) add(v T) {
	o.mu.Lock()
	o.items = append(o.items, v)
	start := o.worker.startingLocked()
	o.mu.Unlock()
	if start {
		go o.run()
	}
}

func (o *inOrder[T]) run() {
	for {
		o.mu.Lock()
		items := o.items
		o.items = nil
		if len(items) == 0 {
			o.worker.stopLocked()
			o.mu.Unlock()
			return
		}
		o.mu.Unlock()
		for _, v := range items {
			o.handle(v)
		}
	}
}
