package server_test

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

// TestDeadListenerFailsHealthCheck: issue 11 item 4. When the AMQP
// listener stops accepting for good while the broker runs, the management
// API's port-listener and protocol-listener health checks fail (they used
// to answer 200 while no connection could be accepted).
func TestDeadListenerFailsHealthCheck(t *testing.T) {
	b := warrentest.Start(t)
	_, port, _ := net.SplitHostPort(b.Addr())
	check := func(path string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", b.MgmtURL()+path, nil)
		req.SetBasicAuth("guest", "guest")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	paths := []string{"/api/health/checks/port-listener/" + port, "/api/health/checks/protocol-listener/amqp"}
	for _, p := range paths {
		if got := check(p); got != http.StatusOK {
			t.Fatalf("GET %s with the listener up: %d, want 200", p, got)
		}
	}
	b.Server().KillListenerForTest()
	if !testutil.Until(5*time.Second, func() bool { return b.Server().Addr() == nil }) {
		t.Fatal("Addr still reports the dead listener")
	}
	for _, p := range paths {
		if got := check(p); got != http.StatusServiceUnavailable {
			t.Errorf("GET %s with the listener dead: %d, want 503", p, got)
		}
	}
}
