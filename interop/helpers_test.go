package interop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// urlEnv, when set, points the interop tests at an already running broker
// (e.g. RabbitMQ) instead of an in-process Warren.
const urlEnv = "WARREN_INTEROP_URL"

// brokerURL returns the AMQP URL the client under test should connect to.
func brokerURL(t *testing.T) string {
	t.Helper()
	if u := os.Getenv(urlEnv); u != "" {
		t.Logf("using broker %s from %s", redact(u), urlEnv)
		return u
	}
	return startWarren(t)
}

// redact hides the password of an AMQP URL for logging.
func redact(u string) string {
	at := strings.LastIndex(u, "@")
	scheme := strings.Index(u, "://")
	if at < 0 || scheme < 0 {
		return u
	}
	userinfo := u[scheme+3 : at]
	if i := strings.Index(userinfo, ":"); i >= 0 {
		userinfo = userinfo[:i] + ":xxx"
	}
	return u[:scheme+3] + userinfo + u[at:]
}

// inCI reports whether we run under CI, where every client must be present.
func inCI() bool { return os.Getenv("CI") == "true" }

// missing skips t because a client or tool is unavailable, or fails it
// under CI=true, where .ci/run is expected to have installed everything.
func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if inCI() {
		t.Fatalf("%s (CI=true: required clients must be installed)", msg)
	}
	t.Skip(msg)
}

// pythonEnv names another Python interpreter for the Python suites.
const pythonEnv = "WARREN_INTEROP_PYTHON"

// python returns the interpreter the Python suites run with:
// $WARREN_INTEROP_PYTHON, else /usr/bin/python3, whose Debian packages
// (python3-pika, python3-celery) the suites use; a python3 found on PATH
// may be a different installation without them.
func python() string {
	if p := os.Getenv(pythonEnv); p != "" {
		return p
	}
	return "/usr/bin/python3"
}

// pythonImportCheck imports each module and fails unless it is a real
// module or package, not a namespace package made of a directory that
// happens to share its name (this package's pika/ and celery/ folders:
// run from here, "import celery" succeeds without Celery installed).
const pythonImportCheck = `import importlib, sys
for name in sys.argv[1:]:
    m = importlib.import_module(name)
    if getattr(m, "__file__", None) is None:
        raise ImportError("no module named %r (only a directory of that name: %s)" % (name, ", ".join(getattr(m, "__path__", []))))
`

// pythonMissing reports why python cannot import modules, or nil when it
// can. It runs in an empty directory so that nothing in the current one
// shadows an installed module or stands in for a missing one.
func pythonMissing(python string, modules ...string) error {
	if _, err := exec.LookPath(python); err != nil {
		return fmt.Errorf("%s not found: %w", python, err)
	}
	dir, err := os.MkdirTemp("", "warren-interop-python-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, append([]string{"-c", pythonImportCheck}, modules...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return fmt.Errorf("%s cannot import %s: %v: %s", python, strings.Join(modules, ", "), err, lines[len(lines)-1])
	}
	return nil
}

// requirePython skips t (or, under CI=true, fails it) unless the Python
// interpreter can import modules; hint says how to install them.
func requirePython(t *testing.T, hint string, modules ...string) {
	t.Helper()
	if err := pythonMissing(python(), modules...); err != nil {
		missing(t, "%s not installed (%s): %v", strings.Join(modules, ", "), hint, err)
	}
}

// requireProgram returns the path of a program, skipping (or failing in CI)
// when it is not on PATH.
func requireProgram(t *testing.T, name, hint string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		missing(t, "%s not installed: %s", name, hint)
	}
	return p
}

// suiteTimeout bounds a subprocess by want, but leaves a margin before the
// test binary's own -timeout so that a hang is reported with its output.
func suiteTimeout(t *testing.T, want time.Duration) time.Duration {
	if dl, ok := t.Deadline(); ok {
		if left := time.Until(dl) - 30*time.Second; left < want {
			if left < 10*time.Second {
				left = 10 * time.Second
			}
			return left
		}
	}
	return want
}

// droppedEnv are variables not passed on to suites: amqp091-go's
// TestConnection_Close_WhenMemoryAlarmIsActive runs
// `$RABBITMQ_RABBITMQCTL_PATH set_vm_memory_high_watermark ...`, which would
// act on a local RabbitMQ rather than on the broker under test.
var droppedEnv = map[string]bool{"RABBITMQ_RABBITMQCTL_PATH": true, "AMQP_URL": true}

// command builds a subprocess that is asked to stop with SIGTERM when ctx
// ends (so that drivers can clean up their own children) and killed 10s later.
func command(ctx context.Context, dir string, env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !droppedEnv[k] {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// runSuite runs a client suite with AMQP_URL set and fails t with the
// suite's output if it exits non-zero or overruns timeout.
func runSuite(t *testing.T, url, dir string, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	timeout = suiteTimeout(t, timeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := command(ctx, dir, []string{"AMQP_URL=" + url}, name, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	start := time.Now()
	err := cmd.Run()
	elapsed := time.Since(start).Round(time.Millisecond)
	if ctx.Err() != nil {
		t.Fatalf("%s %s timed out after %v; output:\n%s", name, strings.Join(args, " "), timeout, out.String())
	}
	if err != nil {
		t.Fatalf("%s %s failed after %v: %v; output:\n%s", name, strings.Join(args, " "), elapsed, err, out.String())
	}
	t.Logf("%s %s passed in %v", filepath.Base(name), strings.Join(args, " "), elapsed)
	return out.String()
}

// exitCode returns the exit status in err, or -1.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}
