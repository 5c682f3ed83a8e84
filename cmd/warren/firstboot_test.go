package main

import (
	"path/filepath"
	"testing"

	"github.com/warrenmq/warren/server"
)

// The default user replaces guest on first boot only, as RabbitMQ's
// default_user: on later boots the stored users stand.
func TestDefaultUserOnFirstBootOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	o := options{DefaultUser: "admin", DefaultPass: "pw1"}
	boot := func(o options) *server.Server {
		t.Helper()
		srv, err := server.New(server.Config{AMQPAddr: "127.0.0.1:0", DataDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		if err := setUp(srv.Broker(), o); err != nil {
			t.Fatal(err)
		}
		return srv
	}
	srv := boot(o)
	b := srv.Broker()
	if b.User("guest") != nil {
		t.Error("guest kept on first boot with --default-user")
	}
	if _, ok := b.Authenticate("admin", "pw1"); !ok || !b.CanAccessVHost("admin", "/") {
		t.Fatal("default user not created")
	}
	b.PutUser("admin", "changed", []string{"administrator"})
	srv.Close()

	o.DefaultPass = "pw2"
	srv = boot(o)
	defer srv.Close()
	b = srv.Broker()
	if _, ok := b.Authenticate("admin", "changed"); !ok {
		t.Error("stored password lost: the default user was re-created on a later boot")
	}
	if b.User("guest") != nil {
		t.Error("guest came back on a later boot")
	}
}
