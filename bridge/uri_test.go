package bridge

import (
	"strings"
	"testing"
	"time"
)

// TestParseURI: issue 24. URIs as RabbitMQ's amqp_uri reads them: the
// defaults (port, guest, no vhost), the percent-decoded vhost, the
// in-node forms, the query keys, and what is refused.
func TestParseURI(t *testing.T) {
	for _, c := range []struct {
		in                      string
		local, tls, hasVHost    bool
		host, user, pass, vhost string
		port                    int
		heartbeat               time.Duration
	}{
		{in: "amqp://", local: true, port: 5672, user: "guest", pass: "guest", heartbeat: -1},
		{in: "amqp:///%2f", local: true, hasVHost: true, vhost: "/", port: 5672, user: "guest", pass: "guest", heartbeat: -1},
		{in: "amqp:///prod", local: true, hasVHost: true, vhost: "prod", port: 5672, user: "guest", pass: "guest", heartbeat: -1},
		{in: "amqp://h", host: "h", port: 5672, user: "guest", pass: "guest", heartbeat: -1},
		{in: "amqp://u%40x:p%3Aw@h:5673/v%2f1?heartbeat=7", host: "h", port: 5673, user: "u@x", pass: "p:w",
			hasVHost: true, vhost: "v/1", heartbeat: 7 * time.Second},
		{in: "amqps://h", tls: true, host: "h", port: 5671, user: "guest", pass: "guest", heartbeat: -1},
		{in: "amqp://guest@h/", host: "h", port: 5672, user: "guest", pass: "", hasVHost: true, vhost: "", heartbeat: -1},
	} {
		u, err := ParseURI(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if u.Local != c.local || u.TLS != c.tls || u.Host != c.host || u.Port != c.port || u.User != c.user ||
			u.Pass != c.pass || u.HasVHost != c.hasVHost || u.VHost != c.vhost || u.Heartbeat != c.heartbeat {
			t.Fatalf("%s: %+v", c.in, u)
		}
	}
	for _, bad := range []string{"http://h", "amqp://h:0", "amqp://h:99999", "amqp://h?heartbeat=x",
		"amqp://h?channel_max=-1", "amqp://h?auth_mechanism=kerberos", "amqp://h?auth_mechanism=external",
		"amqps://h?verify=maybe", "amqps://h?certfile=/x", "amqps://h?cacertfile=/nonexistent", "amqp://:5672"} {
		if _, err := ParseURI(bad); err == nil {
			t.Fatalf("%s accepted", bad)
		}
	}
	// An error never shows the password.
	if _, err := ParseURI("amqp://u:s3cret@h:bad/"); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error %v", err)
	}
}

// TestRedact: issue 24. A link's URI in its status and logs loses its
// credentials and query, as RabbitMQ's shovel status shows it (checked
// against 3.10.8: amqp://guest:guest@localhost -> amqp://localhost,
// amqp://localhost:5672/%2f?heartbeat=5 -> amqp://localhost:5672/%2f).
func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://guest:guest@localhost":                        "amqp://localhost",
		"amqp://localhost:5672/%2f?heartbeat=5&channel_max=9": "amqp://localhost:5672/%2f",
		"amqp:///%2f":                        "amqp:///%2f",
		"amqp://":                            "amqp://",
		"amqps://u:p@h:5671/v?cacertfile=/x": "amqps://h:5671/v",
		"amqp://u:p%40ss@h/v@x":              "amqp://h/v@x",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
