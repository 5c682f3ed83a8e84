package testutil

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortNeverRepeats: FreePort's ports are distinct across many
// calls (2,000 random picks from ~22,000 ports would repeat about 90 times
// without the registry).
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[string]bool{}
	for range 2000 {
		a := FreePort(t)
		if seen[a] {
			t.Fatalf("FreePort returned %s twice", a)
		}
		seen[a] = true
	}
}

// TestFreePortBelowEphemeralRange: the ports are outside the range the
// kernel picks from for a bind to port 0 and for outgoing connections.
func TestFreePortBelowEphemeralRange(t *testing.T) {
	lo, hi := fixedPortRange()
	if hi <= lo {
		t.Skip("the ephemeral port range leaves no room below it on this machine")
	}
	for range 200 {
		_, p, err := net.SplitHostPort(FreePort(t))
		if err != nil {
			t.Fatal(err)
		}
		if port, _ := strconv.Atoi(p); port < lo || port >= hi {
			t.Fatalf("FreePort gave port %d, outside [%d, %d)", port, lo, hi)
		}
	}
	ln := ListenFree(t)
	defer ln.Close()
	if port := ln.Addr().(*net.TCPAddr).Port; port < lo || port >= hi {
		t.Fatalf("ListenFree listens on port %d, outside [%d, %d)", port, lo, hi)
	}
}
