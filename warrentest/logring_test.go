package warrentest

import (
	"fmt"
	"testing"
)

// TestLogRingKeepsTheLast: the ring keeps the last max lines, oldest
// first, before and after it wraps.
func TestLogRingKeepsTheLast(t *testing.T) {
	r := newLogRing(3)
	for i := 1; i <= 2; i++ {
		fmt.Fprintf(r, "line %d\n", i)
	}
	if got, want := r.String(), "line 1\nline 2"; got != want {
		t.Fatalf("before wrapping: %q, want %q", got, want)
	}
	for i := 3; i <= 7; i++ {
		fmt.Fprintf(r, "line %d\n", i)
	}
	if got, want := r.String(), "line 5\nline 6\nline 7"; got != want {
		t.Fatalf("after wrapping: %q, want %q", got, want)
	}
}
