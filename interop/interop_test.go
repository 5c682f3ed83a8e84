package interop

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPika runs the pika (Python) suite in pika/test_pika.py.
func TestPika(t *testing.T) {
	requirePython(t, "apt-get install python3-pika", "pika")
	url := brokerURL(t)
	out := runSuite(t, url, "pika", 2*time.Minute, python(), "test_pika.py", "-v")
	logTail(t, out, 3)
}

// TestCelery runs a Celery worker (kombu's pyamqp transport) and sends it
// tasks through the broker; see celery/run_celery.py.
func TestCelery(t *testing.T) {
	requirePython(t, "apt-get install python3-celery", "celery", "kombu", "amqp")
	url := brokerURL(t)
	out := runSuite(t, url, "celery", 3*time.Minute, python(), "run_celery.py")
	logTail(t, out, 1)
}

// TestAmqplib runs the amqplib (Node.js) suite in amqplib/test, installing
// the pinned amqplib with `npm ci` first if needed.
func TestAmqplib(t *testing.T) {
	node := requireProgram(t, "node", "apt-get install nodejs npm")
	dir, err := filepath.Abs("amqplib")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "amqplib", "package.json")); err != nil {
		npm := requireProgram(t, "npm", "apt-get install npm")
		ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout(t, 3*time.Minute))
		defer cancel()
		cmd := command(ctx, dir, nil, npm, "ci", "--no-audit", "--no-fund")
		out, err := cmd.CombinedOutput()
		if err != nil {
			missing(t, "npm ci in %s failed (npm registry unreachable?): %v\n%s", dir, err, out)
		}
	}
	url := brokerURL(t)
	out := runSuite(t, url, dir, 2*time.Minute, node, "--test", "--test-reporter=spec", "test/amqplib.test.js")
	logTail(t, out, 9)
}

// logTail logs the last n non-empty lines of a suite's output (its summary).
func logTail(t *testing.T, out string, n int) {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	t.Logf("summary:\n%s", strings.Join(lines, "\n"))
}
