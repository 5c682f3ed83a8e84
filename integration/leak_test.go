package integration

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when goroutines are left running after all the
// tests (issue 12): a server, connection, timer or shovel a test did not
// close, or one the broker does not stop.
func TestMain(m *testing.M) {
	// The parallel tests of this package (the comparisons with the
	// reference RabbitMQ's API, a few cluster tests) wait on HTTP, timers
	// and child processes, not on the CPU: four at a time, unless
	// -parallel says otherwise (GOMAXPROCS, go test's default, is 2 on
	// the machines the README's timings are for).
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", strconv.Itoa(max(4, runtime.GOMAXPROCS(0))))
	}
	code := m.Run()
	if code == 0 {
		// The tests' HTTP clients share http.DefaultTransport, which keeps
		// idle connections alive, to the reference RabbitMQ's API too (it
		// stays up): those goroutines are the client's, not Warren's.
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		// RabbitMQ's Go stream client closes a super stream producer or
		// consumer with a goroutine that sleeps 2 s first
		// (TestStreamSuperStream): the client's, not Warren's.
		if err := goleak.Find(
			goleak.IgnoreAnyFunction("github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream.(*SuperStreamProducer).Close.func1"),
			goleak.IgnoreAnyFunction("github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream.(*SuperStreamConsumer).Close.func1"),
		); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left running after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
