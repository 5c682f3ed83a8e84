package server

import (
	"errors"
	"net"
	"os"
	"syscall"
)

// Direct connections: how shovels and federation links running in this
// node reach it (RabbitMQ's direct connection, `amqp://` with no host).
// The link speaks AMQP 0-9-1 over one end of a socket pair and the server
// serves the other end as any client connection, for the user who
// defined the link: the credentials of its start-ok are not checked, the
// user's permissions are, every time, as for a client of theirs.

// DialDirect opens a direct connection for user. The user must exist when
// the connection starts (else 403, as a failed login).
func (s *Server) DialDirect(user string) (net.Conn, error) {
	if s.isClosed() {
		return nil, errors.New("server: closed")
	}
	client, served, err := socketPair()
	if err != nil {
		return nil, err
	}
	c := newConn(s, served)
	c.direct = user
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		client.Close()
		served.Close()
		return nil, errors.New("server: closed")
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	s.go_(c.run)
	return client, nil
}

// socketPair returns the two ends of a Unix stream socket pair (kernel
// buffers both ways, unlike net.Pipe's lockstep).
func socketPair() (net.Conn, net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		a, b := net.Pipe()
		return a, b, nil
	}
	conns := make([]net.Conn, 2)
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "warren-direct")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			for _, c := range conns[:i] {
				c.Close()
			}
			if i == 0 {
				syscall.Close(fds[1])
			}
			return nil, nil, err
		}
		conns[i] = c
	}
	return conns[0], conns[1], nil
}
