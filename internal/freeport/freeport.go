// Package freeport picks TCP ports on 127.0.0.1 for servers a test or a
// test harness starts on a port it names (a process given --listen, a
// reference RabbitMQ node), from below the kernel's ephemeral range:
// ports there are never handed out by the kernel itself, neither to a
// bind to port 0 nor to an outgoing connection's local port, so a port
// picked here can only be taken by another program that picks the same
// way (and at random, in about 22,000 ports).
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
)

// Range is where ports are picked: from 10000 to the start of the
// ephemeral range (Linux's net.ipv4.ip_local_port_range, 32768 by
// default), or an empty range (hi <= lo) when that leaves fewer than 1000.
var Range = sync.OnceValues(func() (lo, hi int) {
	lo, hi = 10000, 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var first, last int
		if n, _ := fmt.Sscan(string(b), &first, &last); n == 2 {
			hi = first
		}
	}
	if hi-lo < 1000 {
		return 0, 0
	}
	return lo, hi
})

// Ports returns n distinct ports of 127.0.0.1 that nothing listened on
// when they were picked. Where Range is empty it falls back to binds to
// port 0.
func Ports(n int) ([]int, error) {
	lo, hi := Range()
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000*n {
			return nil, errors.New("freeport: no free port on 127.0.0.1")
		}
		port := 0
		if hi > lo {
			port = lo + rand.IntN(hi-lo)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			if port == 0 {
				return nil, err
			}
			continue // in use
		}
		lns = append(lns, l) // held until all are picked: no repeats
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
