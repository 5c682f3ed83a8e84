package store

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's run when a test leaves goroutines behind
// (issue 23: every package that starts goroutines checks).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
