package broker

// lazyWorker is a goroutine that runs only while there is work for it:
// the ordered sender to a node (remoteout.go), a quorum leader's
// proposer (qqleader.go), a queue's dead-letter flusher (dlflush.go).
//
// The owner's mutex guards the worker and its work. The worker's loop
// takes the work under that mutex and, when it finds none, calls
// stopLocked before releasing it, so work queued under the same mutex
// always finds a worker running or starts one.
type lazyWorker struct{ on bool }

// startLocked starts run on a goroutine of its own unless the worker
// runs; it reports whether it started one.
func (w *lazyWorker) startLocked(run func()) bool {
	if w.on {
		return false
	}
	w.on = true
	go run()
	return true
}

// stopLocked marks the worker stopped: its loop is about to return.
func (w *lazyWorker) stopLocked() { w.on = false }

// runningLocked reports whether the worker runs.
func (w *lazyWorker) runningLocked() bool { return w.on }
