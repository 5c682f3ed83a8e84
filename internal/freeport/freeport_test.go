package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestPortsBelowEphemeralRange: the reference RabbitMQ cluster's ports
// (rabbitcluster) come from below the ephemeral range, distinct, and
// free: a node can listen on each.
func TestPortsBelowEphemeralRange(t *testing.T) {
	lo, hi := Range()
	ports, err := Ports(200)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if hi > lo && (p < lo || p >= hi) {
			t.Fatalf("port %d outside [%d, %d)", p, lo, hi)
		}
		if seen[p] {
			t.Fatalf("port %d picked twice", p)
		}
		seen[p] = true
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ports[0]))
	if err != nil {
		t.Fatalf("the picked port is not free: %v", err)
	}
	l.Close()
}
