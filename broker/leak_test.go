package broker

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when goroutines are left running after all the
// tests (issue 12): a server, connection, timer or shovel a test did not
// close, or one the broker does not stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
