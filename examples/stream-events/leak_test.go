package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when goroutines are left running after all the
// tests (issue 12): a broker, connection or timer a test did not close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
