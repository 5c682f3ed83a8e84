package testutil

import (
	"fmt"
	"github.com/warrenmq/warren/internal/freeport"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
)

// FreePort returns an address on 127.0.0.1 that nothing listens on, for a
// server a test starts later on a fixed port (a node that is restarted on
// the same address, a process given --listen).
//
// Between FreePort and that server's bind, another program could take
// the port. Two things make that unlikely:
//   - The port is below the kernel's ephemeral range, where the kernel
//     never hands out ports of its own choosing: not to a bind to port 0
//     (a test server's usual address, in this process or in the test
//     binaries of other packages running at the same time) and not to an
//     outgoing connection's local port. CI saw both kinds of clash while
//     FreePort took its ports from a bind to port 0.
//   - FreePort never returns the same port twice in one process.
//
// Where the ephemeral range leaves no room below it, FreePort falls back
// to a bind to port 0.
func FreePort(t testing.TB) string {
	t.Helper()
	ln := ListenFree(t)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// ListenFree listens on a port of 127.0.0.1 chosen as FreePort chooses
// one. A server that can take a listener should: nothing can take its
// port between the choice and the bind.
func ListenFree(t testing.TB) net.Listener {
	t.Helper()
	lo, hi := fixedPortRange()
	for range 1000 {
		port := 0
		if hi > lo {
			port = lo + rand.IntN(hi-lo)
			if _, dup := handedPorts.Load(port); dup {
				continue
			}
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			if port == 0 {
				t.Fatal(err)
			}
			continue // in use
		}
		if _, dup := handedPorts.LoadOrStore(ln.Addr().(*net.TCPAddr).Port, true); dup {
			ln.Close()
			continue
		}
		return ln
	}
	t.Fatal("no free port on 127.0.0.1 that has not been handed out already")
	return nil
}

var handedPorts sync.Map // port -> true: what ListenFree returned

// fixedPortRange is where ListenFree picks ports (freeport.Range).
var fixedPortRange = freeport.Range
