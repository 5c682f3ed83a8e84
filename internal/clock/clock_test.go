package clock

import (
	"testing"
	"time"
)

func TestFakeRunsTimersInDeadlineOrder(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewFake(start)
	var got []int
	var at []time.Duration
	c.AfterFunc(3*time.Second, func() { got = append(got, 3); at = append(at, c.Now().Sub(start)) })
	c.AfterFunc(1*time.Second, func() { got = append(got, 1); at = append(at, c.Now().Sub(start)) })
	stopped := c.AfterFunc(2*time.Second, func() { got = append(got, 2) })
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer: got false, want true")
	}
	c.Advance(2 * time.Second)
	if len(got) != 1 || got[0] != 1 || at[0] != time.Second {
		t.Fatalf("after 2s: got %v at %v, want [1] at [1s]", got, at)
	}
	c.Advance(time.Second)
	if len(got) != 2 || got[1] != 3 || at[1] != 3*time.Second {
		t.Fatalf("after 3s: got %v at %v, want [1 3] at [1s 3s]", got, at)
	}
	if now := c.Now().Sub(start); now != 3*time.Second {
		t.Fatalf("now: got %v, want 3s", now)
	}
}

// issue 12: Advance returns only after the callbacks it fired returned, so
// tests need no sleep after it; a callback may use the clock (no deadlock)
// and a timer it arms within the advance fires in the same Advance.
func TestFakeAdvanceRunsCallbacksBeforeReturning(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewFake(start)
	var got []time.Duration
	var rearm func()
	rearm = func() {
		got = append(got, c.Now().Sub(start))
		if len(got) < 3 {
			c.AfterFunc(time.Second, rearm)
		}
	}
	c.AfterFunc(time.Second, rearm)
	late := c.AfterFunc(10*time.Second, func() { t.Error("a timer due after the advance fired") })
	c.Advance(5 * time.Second)
	if len(got) != 3 || got[0] != time.Second || got[1] != 2*time.Second || got[2] != 3*time.Second {
		t.Fatalf("after Advance(5s): callbacks at %v, want [1s 2s 3s]", got)
	}
	if !late.Stop() {
		t.Fatal("the 10s timer was not pending after Advance(5s)")
	}
	done := make(chan struct{})
	c.AfterFunc(0, func() {
		time.Sleep(10 * time.Millisecond) // a slow callback: Advance must wait for it
		close(done)
	})
	c.Advance(0)
	select {
	case <-done:
	default:
		t.Fatal("Advance returned before its callback finished")
	}
}
