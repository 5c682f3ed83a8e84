package rabbitcluster

import (
	"testing"

	"go.uber.org/goleak"
)

// Every node's waiter goroutine (Node.Start) ends once the test's
// cluster is stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
