package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testutil"
)

// TestStaticShovels: issue 24. Shovels from the configuration (--shovels,
// RabbitMQ's static shovels) run from the start, as their user, with or
// without the HTTP API; /api/shovels shows them as static and the API
// cannot delete them. A file with a bad shovel stops the start with the
// reason.
func TestStaticShovels(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the warren binary")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "shovels.json")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(file, []byte(`{"shovels": [{"name": "st", "vhost": "/", "user": "guest",
		"value": {"src-uri": "amqp://", "src-queue": "st-src", "dest-uri": "amqp://", "dest-queue": "st-dest",
		"add-forward-headers": true}}]}`), 0o644))
	httpAddr := testutil.FreePort(t)
	p := startProc(t, t.TempDir(), "--shovels", file, "--http-addr", httpAddr)
	c, err := amqp.Dial(p.URL())
	must(err)
	defer c.Close()
	ch, err := c.Channel()
	must(err)
	testutil.Eventually(t, 10*time.Second, "the static shovel's queues declared", func() bool {
		for _, q := range []string{"st-src", "st-dest"} { // (a get before would close the channel)
			if _, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err != nil {
				ch, _ = c.Channel()
				return false
			}
		}
		return true
	})
	must(ch.PublishWithContext(context.Background(), "", "st-src", false, false, amqp.Publishing{Body: []byte("x")}))
	var got amqp.Delivery
	testutil.Eventually(t, 10*time.Second, "the message moved", func() bool {
		d, ok, err := ch.Get("st-dest", true)
		got = d
		return err == nil && ok
	})
	if l, _ := got.Headers["x-shovelled"].([]any); len(l) != 1 || l[0].(amqp.Table)["shovel-type"] != "static" {
		t.Fatalf("x-shovelled: %v", got.Headers)
	}
	get := func(method, path string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+httpAddr+path, nil)
		req.SetBasicAuth("guest", "guest")
		resp, err := http.DefaultClient.Do(req)
		must(err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	_, body := get("GET", "/api/shovels")
	var sh []map[string]any
	json.Unmarshal([]byte(body), &sh)
	if len(sh) != 1 || sh[0]["type"] != "static" || sh[0]["state"] != "running" {
		t.Fatalf("/api/shovels: %s", body)
	}
	if st, _ := get("DELETE", "/api/parameters/shovel/%2F/st"); st != 404 {
		t.Fatalf("DELETE of a static shovel's parameter: %d, want 404 (it is the configuration's)", st)
	}
	p.Stop()

	// Without the HTTP API, it still runs.
	q := startProc(t, p.DataDir, "--shovels", file, "--http-addr", "off")
	c2, err := amqp.Dial(q.URL())
	must(err)
	defer c2.Close()
	ch2, err := c2.Channel()
	must(err)
	must(ch2.PublishWithContext(context.Background(), "", "st-src", false, false, amqp.Publishing{Body: []byte("y")}))
	testutil.Eventually(t, 10*time.Second, "moved with the HTTP API off", func() bool {
		d, ok, err := ch2.Get("st-dest", true)
		return err == nil && ok && string(d.Body) == "y"
	})
	q.Stop()

	// A bad definition stops the start, saying why.
	must(os.WriteFile(file, []byte(`{"shovels": [{"name": "bad", "user": "guest", "value": {"src-uri": "amqp://",
		"dest-uri": "amqp://", "dest-queue": "d"}}]}`), 0o644))
	cmd := exec.Command(buildWarren(t), "--shovels", file, "--data-dir", t.TempDir(), "--amqp-addr", testutil.FreePort(t), "--http-addr", "off")
	done := make(chan struct{})
	time.AfterFunc(30*time.Second, func() {
		select {
		case <-done:
		default:
			cmd.Process.Kill()
		}
	})
	outb, err := cmd.CombinedOutput()
	close(done)
	out := string(outb)
	if err == nil || !strings.Contains(out, "Must specify 'src-exchange' or 'src-queue'") {
		t.Fatalf("a bad static shovel: %v\n%s", err, out)
	}
}
