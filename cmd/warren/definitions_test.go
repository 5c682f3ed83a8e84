package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/internal/testutil"
)

const testDefinitions = `{
  "users": [{"name": "carol", "password": "pw", "tags": ["management"]}],
  "vhosts": [{"name": "/"}],
  "permissions": [{"user": "carol", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}],
  "policies": [{"vhost": "/", "name": "cap", "pattern": "^defq$", "apply-to": "queues", "priority": 0, "definition": {"max-length": 2}}],
  "queues": [{"name": "defq", "vhost": "/", "durable": true, "auto_delete": false, "arguments": {}}]
}`

func TestLoadDefinitions(t *testing.T) {
	b := broker.New(broker.Config{})
	if err := loadDefinitions(b, ""); err != nil {
		t.Fatalf("no file: %v", err)
	}
	if err := loadDefinitions(b, filepath.Join(t.TempDir(), "missing.json")); err == nil || !strings.HasPrefix(err.Error(), "--definitions: ") {
		t.Fatalf("missing file: got %v", err)
	}
	bad := writeFile(t, `{"policies":[{"vhost":"/","name":"p","pattern":"x","definition":{"expires":0}}]}`)
	if err := loadDefinitions(b, bad); err == nil || !strings.Contains(err.Error(), "0 is not a valid queue expiry") {
		t.Fatalf("invalid policy: got %v", err)
	}
	if err := loadDefinitions(b, writeFile(t, testDefinitions)); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Authenticate("carol", "pw"); !ok {
		t.Error("carol not imported")
	}
	if q := b.VHost("/").Queue("defq"); q == nil {
		t.Error("defq not imported")
	} else if e := q.Effective(); e.MaxLength == nil || *e.MaxLength != 2 {
		t.Errorf("defq max-length from the imported policy: %v", e.MaxLength)
	}
}

// The binary imports --definitions before it serves; a bad file stops it
// with status 1.
func TestBinaryDefinitionsFlag(t *testing.T) {
	cmd, conn, out := startBinary(t, "carol:pw", "--definitions", writeFile(t, testDefinitions))
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclarePassive("defq", true, false, false, false, nil); err != nil {
		t.Fatalf("imported queue defq: %v", err)
	}
	conn.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, cmd, 15*time.Second); err != nil {
		t.Fatalf("exit: %v\n%s", err, out.String())
	}

	bad := exec.Command(warrenBinary(t), "--amqp-addr", testutil.FreePort(t), "--http-addr", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--definitions", writeFile(t, `{"queues":[{"name":"q","vhost":"nope"}]}`))
	bad.Env = cleanEnv()
	msg, err := bad.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(msg), "no vhost 'nope'") {
		t.Fatalf("bad definitions: err %v, output %s", err, msg)
	}
}
