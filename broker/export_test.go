package broker

import "time"

// SetQQLeaseDelay holds a quorum leader's Lease proposals back by d (a
// slow commit) until the returned func restores it.
func SetQQLeaseDelay(d time.Duration) (restore func()) {
	old := qqLeaseDelay.Swap(int64(d))
	return func() { qqLeaseDelay.Store(old) }
}
