package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestParseStraceSyncs: issue 14's qq-fsync counts the fsync and
// fdatasync calls of strace -c's summary (with and without the errors
// column), and nothing else.
func TestParseStraceSyncs(t *testing.T) {
	out := `strace: Process 14358 attached
strace: Process 14422 attached
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 60.00    0.054209         249       217           fdatasync
 40.00    0.030000         100        30         2 fsync
------ ----------- ----------- --------- --------- ----------------
100.00    0.084209         170       247         2 total
`
	if n := parseStraceSyncs(out); n != 247 {
		t.Fatalf("parseStraceSyncs = %d, want 247", n)
	}
	if n := parseStraceSyncs("strace: Process 1 attached\nstrace: Process 1 detached\n"); n != 0 {
		t.Fatalf("no summary: %d, want 0", n)
	}
}

// TestLeaderFromAPI: issue 14's qq-failover kills the node the
// management API names as the queue's leader (RabbitMQ's leader field),
// else its home (node, Warren before replication).
func TestLeaderFromAPI(t *testing.T) {
	names := []string{"rabbit-b1@localhost", "rabbit-b2@localhost", "rabbit-b3@localhost"}
	body := map[string]string{
		"/api/queues/%2F/q-leader": `{"name":"q-leader","node":"rabbit-b1@localhost","leader":"rabbit-b2@localhost","members":["rabbit-b1@localhost","rabbit-b2@localhost","rabbit-b3@localhost"]}`,
		"/api/queues/%2F/q-home":   `{"name":"q-home","node":"rabbit-b3@localhost"}`,
		"/api/queues/%2F/q-alien":  `{"name":"q-alien","leader":"other@host"}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "guest" || p != "guest" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		b, ok := body[r.URL.EscapedPath()]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(b))
	}))
	defer srv.Close()
	if i, desc, err := leaderFromAPI(srv.URL, "q-leader", names); err != nil || i != 1 || !strings.Contains(desc, "3 members") {
		t.Fatalf("q-leader: %d %q %v, want node 2 with 3 members", i, desc, err)
	}
	if i, desc, err := leaderFromAPI(srv.URL, "q-home", names); err != nil || i != 2 || !strings.HasPrefix(desc, "no leader") {
		t.Fatalf("q-home: %d %q %v, want node 3, no leader", i, desc, err)
	}
	if _, _, err := leaderFromAPI(srv.URL, "q-alien", names); err == nil {
		t.Fatal("q-alien: a leader outside the cluster was accepted")
	}
	if _, _, err := leaderFromAPI(srv.URL, "q-missing", names); err == nil {
		t.Fatal("q-missing: no error for a 404")
	}
}
