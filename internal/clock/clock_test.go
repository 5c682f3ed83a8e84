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
