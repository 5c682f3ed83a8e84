// Package clock abstracts time so that TTLs, expiries, heartbeats and delays
// can be driven by a fake clock in tests.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time and runs functions later.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has elapsed (Fake:
	// in the goroutine that calls Advance, before Advance returns).
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it did.
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

func (Real) Now() time.Time { return time.Now() }

func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Fake is a manually advanced clock for tests. Timers fire, in deadline
// order, from the goroutine that calls Advance, and Advance returns once
// every callback it ran has returned: a test needs no sleep after Advance
// to see what the timers did. Callbacks run without the fake's lock, so
// they may read the clock and arm or stop timers; one armed for a time
// within the advance fires in the same Advance.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

// NewFake returns a fake clock set to start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

type fakeTimer struct {
	c       *Fake
	at      time.Time
	f       func()
	stopped bool
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock forward by d and runs every timer that falls due.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *fakeTimer
		idx := -1
		for i, t := range c.timers {
			if t.stopped || t.at.After(end) {
				continue
			}
			if next == nil || t.at.Before(next.at) {
				next, idx = t, i
			}
		}
		if next == nil {
			c.now = end
			c.timers = pruneStopped(c.timers)
			c.mu.Unlock()
			return
		}
		c.timers = append(c.timers[:idx], c.timers[idx+1:]...)
		next.stopped = true
		if next.at.After(c.now) {
			c.now = next.at
		}
		c.mu.Unlock()
		next.f()
	}
}

func pruneStopped(ts []*fakeTimer) []*fakeTimer {
	out := ts[:0]
	for _, t := range ts {
		if !t.stopped {
			out = append(out, t)
		}
	}
	return out
}
