package integration

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when goroutines are left running after all the
// tests (issue 12): a server, connection, timer or shovel a test did not
// close, or one the broker does not stop.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// The tests' HTTP clients share http.DefaultTransport, which keeps
		// idle connections alive, to the reference RabbitMQ's API too (it
		// stays up): those goroutines are the client's, not Warren's.
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left running after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
