package testutil

import (
	"net"
	"sync"
	"testing"
)

// FreePort returns an address on 127.0.0.1 that nothing listens on, and
// that FreePort has not returned before in this test process: the kernel
// may hand a port it just freed to the next bind to port 0, and two nodes
// of a cluster given the same port fail at start-up ("address already in
// use", seen in CI as n2's AMQP port equal to n3's cluster port).
func FreePort(t testing.TB) string {
	t.Helper()
	for range 1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		if _, dup := handedPorts.LoadOrStore(addr, true); !dup {
			return addr
		}
	}
	t.Fatal("no port on 127.0.0.1 that FreePort has not handed out already")
	return ""
}

var handedPorts sync.Map // addr -> true: what FreePort returned
