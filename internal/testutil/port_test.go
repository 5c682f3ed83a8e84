package testutil

import "testing"

// TestFreePortNeverRepeats: FreePort's ports are distinct across many
// calls, though the kernel reuses the ports of closed listeners (2,000
// picks from ~28,000 ephemeral ports repeat dozens of times without the
// registry).
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
