package testutil

import (
	"net/url"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Dial opens an AMQP connection to u for the test (amqp091-go's Dial, or
// DialConfig with cfg if given) and closes it when the test ends; it fails the test, naming
// the address without the password, if the dial fails.
func Dial(t testing.TB, u string, cfg ...amqp.Config) *amqp.Connection {
	t.Helper()
	var conn *amqp.Connection
	var err error
	if len(cfg) > 0 {
		conn, err = amqp.DialConfig(u, cfg[0])
	} else {
		conn, err = amqp.Dial(u)
	}
	if err != nil {
		t.Fatalf("dial %s: %v", redact(u), err)
	}
	t.Cleanup(func() { _ = conn.CloseDeadline(time.Now().Add(5 * time.Second)) })
	return conn
}

// Named is a dial config that names the connection (connection_name,
// as the management API shows it).
func Named(name string) amqp.Config {
	return amqp.Config{Properties: amqp.Table{"connection_name": name}}
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(an unparsable URL)"
	}
	return p.Redacted()
}
