// Package testutil holds the helpers every package's tests share: one
// polling loop for "wait until this holds" (issue 12: instead of a
// hand-written deadline loop per test) and the goroutine-leak check run by
// the TestMain of packages that start brokers and servers.
package testutil

import (
	"testing"
	"time"
)

// Backoff bounds: a poll sleeps 1 ms after the first miss, doubling up to 50 ms.
const (
	firstPause = time.Millisecond
	maxPause   = 50 * time.Millisecond
)

// Until calls cond until it returns true or timeout passes, sleeping between
// calls with a backoff from 1 ms up to 50 ms. cond is called at least once,
// and once more at the deadline. It reports whether cond held.
func Until(timeout time.Duration, cond func() bool) bool {
	return UntilNil(timeout, holds(cond)) == nil
}

// holds is cond as a poll's f: nil once cond holds.
func holds(cond func() bool) func() error {
	return func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}
}

// UntilNil calls f until it returns nil or timeout passes, with Until's
// backoff, and returns nil or the last error f returned.
func UntilNil(timeout time.Duration, f func() error) error {
	return poll(timeout, firstPause, maxPause, f)
}

// poll calls f until it returns nil or timeout passes, pausing first
// between calls, doubling up to most; it returns nil or f's last error.
func poll(timeout, first, most time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	pause := first
	for {
		err := f()
		if err == nil {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return err
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, most)
	}
}

// Eventually fails the test unless cond holds within timeout; the failure
// names what was awaited.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// EventuallyNil fails the test unless f returns nil within timeout; the
// failure names what was awaited and the last error f returned.
func EventuallyNil(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	if err := UntilNil(timeout, f); err != nil {
		t.Fatalf("timed out after %v waiting for %s: %v", timeout, what, err)
	}
}

type notYet struct{}

func (notYet) Error() string { return "condition not met" }

var errNotYet error = notYet{}

// EventuallyEvery is Eventually polling at a fixed interval rather than
// with a backoff: for tests whose cond also drives what it waits for (a
// manual raft tick per poll, cluster/qraft and cluster/meta), where a
// growing pause would slow that down.
func EventuallyEvery(t testing.TB, interval, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if poll(timeout, interval, interval, holds(cond)) != nil {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}
