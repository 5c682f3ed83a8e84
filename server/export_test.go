package server

// Hooks for the external tests of package server (package server_test),
// which drive a real broker through warrentest and amqp091-go.

// KillListenerForTest closes the AMQP listener under the accept loop, as
// if it had failed for good, without stopping the server.
func (s *Server) KillListenerForTest() {
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	ln.Close()
}
