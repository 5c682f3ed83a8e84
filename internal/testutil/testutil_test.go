package testutil

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeT records a Fatalf instead of stopping the test.
type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
}

// issue 12: the shared poll returns as soon as the condition holds.
func TestUntilHolds(t *testing.T) {
	n := 0
	if !Until(5*time.Second, func() bool { n++; return n == 3 }) {
		t.Fatal("Until reported false for a condition that held on the third call")
	}
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}

// issue 12: a condition that never holds times out after the timeout, having
// been polled more than once, and the failure says what was awaited.
func TestEventuallyTimesOut(t *testing.T) {
	n := 0
	start := time.Now()
	ft := &fakeT{}
	Eventually(ft, 30*time.Millisecond, "the moon", func() bool { n++; return false })
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Fatalf("gave up after %v, before the 30ms timeout", took)
	}
	if n < 2 {
		t.Fatalf("cond called %d times, want several", n)
	}
	if !strings.Contains(ft.msg, "the moon") {
		t.Fatalf("failure %q does not name what was awaited", ft.msg)
	}
}

// issue 12: EventuallyNil reports the last error.
func TestEventuallyNilLastError(t *testing.T) {
	n := 0
	ft := &fakeT{}
	EventuallyNil(ft, 20*time.Millisecond, "x", func() error { n++; return fmt.Errorf("attempt %d", n) })
	if want := fmt.Sprintf("attempt %d", n); !strings.HasSuffix(ft.msg, want) {
		t.Fatalf("failure %q, want it to end with the last error %q", ft.msg, want)
	}
	if err := UntilNil(time.Second, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := UntilNil(0, func() error { return boom }); err != boom {
		t.Fatalf("UntilNil(0) = %v, want the error of its one call", err)
	}
}

// issue 23: EventuallyEvery polls at its fixed interval (no backoff: 100 ms
// at 5 ms is about 20 calls, where the backoff makes about 8) and fails
// naming what was awaited.
func TestEventuallyEveryFixedPace(t *testing.T) {
	n := 0
	ft := &fakeT{}
	EventuallyEvery(ft, 5*time.Millisecond, 100*time.Millisecond, "the tide", func() bool { n++; return false })
	if n < 12 {
		t.Fatalf("cond called %d times in 100 ms at a 5 ms pace, want about 20", n)
	}
	if !strings.Contains(ft.msg, "the tide") {
		t.Fatalf("failure %q does not name what was awaited", ft.msg)
	}
	n = 0
	EventuallyEvery(t, time.Millisecond, time.Second, "the third call", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("cond called %d times, want 3: it held at the third", n)
	}
}
