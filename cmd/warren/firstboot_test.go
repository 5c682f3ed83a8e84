package main

import (
	"path/filepath"
	"testing"

	"github.com/warrenmq/warren/broker"
)

// The default user replaces guest on first boot only, as RabbitMQ's
// default_user: on later boots the stored users stand.
func TestDefaultUserOnFirstBootOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	o := options{DefaultUser: "admin", DefaultPass: "pw1"}
	// As run does: the broker opens (and recovers) its stores in the
	// data directory, setUp runs on it, Close closes the stores.
	boot := func(o options) *broker.Broker {
		t.Helper()
		b, err := broker.Open(broker.Config{DataDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if err := setUp(b, o); err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := boot(o)
	if b.User("guest") != nil {
		t.Error("guest kept on first boot with --default-user")
	}
	if _, ok := b.Authenticate("admin", "pw1"); !ok || !b.CanAccessVHost("admin", "/") {
		t.Fatal("default user not created")
	}
	b.PutUser("admin", "changed", []string{"administrator"})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	o.DefaultPass = "pw2"
	b = boot(o)
	defer b.Close()
	if _, ok := b.Authenticate("admin", "changed"); !ok {
		t.Error("stored password lost: the default user was re-created on a later boot")
	}
	if b.User("guest") != nil {
		t.Error("guest came back on a later boot")
	}
}
