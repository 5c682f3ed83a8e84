package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/warrenmq/warren/internal/testutil"
)

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "warren.conf")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigPrecedence(t *testing.T) {
	file := writeFile(t, "# comment\namqp_addr = \"file:1\"\nlog-level = warn\nheartbeat = 5s\n\n")
	tests := []struct {
		name      string
		args      []string
		env       []string
		wantAddr  string
		wantLevel string
	}{
		{"defaults", nil, nil, ":5672", "info"},
		{"file", []string{"--config", file}, nil, "file:1", "warn"},
		{"config file from env", nil, []string{"WARREN_CONFIG=" + file}, "file:1", "warn"},
		{"env beats file", []string{"--config", file}, []string{"WARREN_AMQP_ADDR=env:2"}, "env:2", "warn"},
		{"flag beats env and file", []string{"--config", file, "--amqp-addr", "flag:3"}, []string{"WARREN_AMQP_ADDR=env:2", "WARREN_LOG_LEVEL=debug"}, "flag:3", "debug"},
		{"other env ignored", nil, []string{"AMQP_ADDR=x", "WARRENX=y"}, ":5672", "info"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var o options
			fs, cfgFile := newFlagSet(&o, io.Discard)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if err := applyConfig(fs, *cfgFile, tc.env); err != nil {
				t.Fatal(err)
			}
			if o.AMQPAddr != tc.wantAddr || o.LogLevel != tc.wantLevel {
				t.Fatalf("got amqp-addr %q log-level %q, want %q %q", o.AMQPAddr, o.LogLevel, tc.wantAddr, tc.wantLevel)
			}
			if tc.name == "file" && o.Heartbeat != 5*time.Second {
				t.Fatalf("got heartbeat %v, want 5s from the file", o.Heartbeat)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		file string
		env  []string
		want string
	}{
		{"unknown key in file", "amqp-addr = :1\nno-such-setting = 1\n", nil, "unknown setting"},
		{"line without =", "amqp-addr\n", nil, "name = value"},
		{"bad value in file", "heartbeat = soon\n", nil, "heartbeat"},
		{"bad value in env", "", []string{"WARREN_FRAME_MAX=big"}, "WARREN_FRAME_MAX"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o options
			fs, _ := newFlagSet(&o, io.Discard)
			if err := fs.Parse(nil); err != nil {
				t.Fatal(err)
			}
			err := applyConfig(fs, writeFile(t, tc.file), tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
	var o options
	fs, _ := newFlagSet(&o, io.Discard)
	fs.Parse(nil)
	if err := applyConfig(fs, filepath.Join(t.TempDir(), "missing.conf"), nil); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing config file: got %v, want a not-exist error", err)
	}
}

func TestHelp(t *testing.T) {
	var out bytes.Buffer
	err := run([]string{"--help"}, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("got %v, want flag.ErrHelp (main exits 0 on it)", err)
	}
	for _, want := range []string{"Usage: warren", "-amqp-addr", "WARREN_"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help output lacks %q:\n%s", want, out.String())
		}
	}
	if err := run([]string{"--no-such-flag"}, io.Discard); err == nil || errors.Is(err, flag.ErrHelp) {
		t.Fatalf("unknown flag: got %v, want an error", err)
	}
}

// binDir holds the binary built for this test run.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "warren-bin")
	if err != nil {
		panic(err)
	}
	binDir = dir
	// Fail the run when goroutines are left running after all the tests
	// (issue 12).
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// buildWarren builds the binary once per test run.
var buildWarren = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "warren")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", errors.New(string(out))
	}
	return bin, nil
})

func warrenBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin, err := buildWarren()
	if err != nil {
		t.Fatalf("go build: %v", err)
	}
	return bin
}

// cleanEnv is the environment without WARREN_ settings.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WARREN_") {
			env = append(env, kv)
		}
	}
	return env
}

func waitExit(t *testing.T, cmd *exec.Cmd, timeout time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		cmd.Process.Kill()
		<-done
		t.Fatalf("warren did not exit within %v", timeout)
		return nil
	}
}

// startBinary runs the warren binary on a free AMQP port with its own
// data directory and args (later flags win over these defaults), and
// dials it as user (user:password). The process is killed at cleanup;
// out collects its output for failure messages.
func startBinary(t *testing.T, user string, args ...string) (cmd *exec.Cmd, conn *amqp.Connection, out *bytes.Buffer) {
	t.Helper()
	addr := testutil.FreePort(t)
	out = new(bytes.Buffer)
	cmd = exec.Command(warrenBinary(t), append([]string{"--amqp-addr", addr, "--http-addr", "127.0.0.1:0",
		"--data-dir", filepath.Join(t.TempDir(), "data")}, args...)...)
	cmd.Env = cleanEnv()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	if err := testutil.UntilNil(10*time.Second, func() (err error) {
		conn, err = amqp.Dial("amqp://" + user + "@" + addr + "/")
		return err
	}); err != nil {
		t.Fatalf("could not connect to %s as %s: %v\n%s", addr, user, err, out.String())
	}
	return cmd, conn, out
}

func TestBinaryServesAndStopsOnSIGTERM(t *testing.T) {
	cmd, conn, out := startBinary(t, "guest:guest", "--heartbeat", "10s")
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(t.Context(), "", q.Name, false, false, amqp.Publishing{Body: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	if d, ok, err := ch.Get(q.Name, true); err != nil || !ok || string(d.Body) != "hi" {
		t.Fatalf("get: got %q ok=%v err=%v, want hi", d.Body, ok, err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(t, cmd, 15*time.Second); err != nil {
		t.Fatalf("warren exited with %v, want status 0\n%s", err, out.String())
	}
	// The client was told: connection.close 320 CONNECTION_FORCED.
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.ConnectionForced {
			t.Fatalf("got close %v, want 320 CONNECTION_FORCED", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("client not told of the shutdown")
	}
}

func TestBinaryExitCodes(t *testing.T) {
	bin := warrenBinary(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		code int
	}{
		{"help", []string{"--help"}, nil, 0},
		{"unknown flag", []string{"--bogus"}, nil, 1},
		{"unknown key in config", []string{"--config", writeFile(t, "bogus = 1\n")}, nil, 1},
		{"bad env value", nil, []string{"WARREN_LOG_LEVEL=loud"}, 1},
		{"address in use", []string{"--amqp-addr", busy.Addr().String()}, nil, 1},
		{"stats interval too short", []string{"--stats-interval", "10ms"}, nil, 1},
		{"stats retention below the interval", []string{"--stats-interval", "5s", "--stats-retention", "1s"}, nil, 1},
		{"stats retention too long", []string{"--stats-interval", "1s", "--stats-retention", "240h"}, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, append(tc.args, "--data-dir", filepath.Join(t.TempDir(), "d"))...)
			if tc.name == "help" {
				cmd = exec.Command(bin, tc.args...)
			}
			cmd.Env = append(cleanEnv(), tc.env...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitExit(t, cmd, 10*time.Second)
			if got := cmd.ProcessState.ExitCode(); got != tc.code {
				t.Fatalf("got exit code %d, want %d\n%s", got, tc.code, out.String())
			}
		})
	}
}

// TestBinaryMemoryWatermarkFlag: --memory-high-watermark 1 raises the
// memory alarm at once, so the first publish blocks the connection.
func TestBinaryMemoryWatermarkFlag(t *testing.T) {
	_, conn, out := startBinary(t, "guest:guest", "--memory-high-watermark", "1")
	blocked := conn.NotifyBlocked(make(chan amqp.Blocking, 1))
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(t.Context(), "", "nowhere", false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-blocked:
		if !b.Active || b.Reason != "low on memory" {
			t.Fatalf("got %+v, want blocked 'low on memory'", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("not blocked\n%s", out.String())
	}
}

// TestBinaryStatsFlags: issue 15, --stats-interval and --stats-retention
// set the management API's sampling and history: sampling every 200 ms,
// a publish shows in the overview's publish samples within a second, and
// the history asked for over 1 s at 1 s has 2 samples.
func TestBinaryStatsFlags(t *testing.T) {
	httpAddr := testutil.FreePort(t)
	_, conn, out := startBinary(t, "guest:guest", "--http-addr", httpAddr, "--stats-interval", "200ms", "--stats-retention", "3s")
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(t.Context(), "", "nowhere", false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	var samples []struct{ Sample float64 }
	if !testutil.Until(5*time.Second, func() bool {
		req, _ := http.NewRequest("GET", "http://"+httpAddr+"/api/overview?msg_rates_age=1&msg_rates_incr=1", nil)
		req.SetBasicAuth("guest", "guest")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer res.Body.Close()
		var ov struct {
			MessageStats struct {
				PublishDetails struct{ Samples []struct{ Sample float64 } } `json:"publish_details"`
			} `json:"message_stats"`
		}
		if json.NewDecoder(res.Body).Decode(&ov) != nil {
			return false
		}
		samples = ov.MessageStats.PublishDetails.Samples
		return len(samples) == 2 && samples[0].Sample == 1
	}) {
		t.Fatalf("overview publish samples = %+v, want 2 samples, the newest 1\n%s", samples, out.String())
	}
}
