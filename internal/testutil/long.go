package testutil

import (
	"os"
	"testing"
)

// LongEnv is the environment variable that turns on the long fault and
// soak tests: WARREN_LONG=1 go test ./... The plain go test ./... leaves
// them out so that it passes within go test's default 10-minute timeout
// on a busy 2-core machine; .ci/run runs them in a step of their own.
const LongEnv = "WARREN_LONG"

// Long skips t unless WARREN_LONG=1. Call it first in a long test (a
// Jepsen-style run, a soak, a suite run against a cluster), saying what
// makes it long. .ci/run finds the long tests by this call, so keep it on
// the line right after the test's func line.
func Long(t testing.TB, what string) {
	t.Helper()
	if !LongOn() {
		t.Skipf("long test (%s): set %s=1 to run it (CI does)", what, LongEnv)
	}
}

// LongOn reports whether the long tests run.
func LongOn() bool { return os.Getenv(LongEnv) == "1" }
