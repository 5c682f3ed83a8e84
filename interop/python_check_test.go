package interop

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hidingPython writes an interpreter wrapper around the real python()
// that behaves as if the given top-level modules were not installed: the
// installed copies (in dist-packages or site-packages) are invisible to
// it, while everything else stays importable. Any directory on sys.path
// (the current one, or the extra directories added to sys.path) can still
// provide a module of that name, as it could for a Python without the
// package. So it stands in for a newcomer's /usr/bin/python3 that has
// pika but not Celery, without uninstalling anything.
func hidingPython(t *testing.T, hide []string, extraPath ...string) string {
	t.Helper()
	real := python()
	if _, err := exec.LookPath(real); err != nil {
		missing(t, "%s not found", real)
	}
	dir := t.TempDir()
	site := fmt.Sprintf(`import importlib.machinery, sys
HIDE = %s
sys.path.extend(%s)

def _installed(p):
    return p.rstrip("/").endswith(("dist-packages", "site-packages"))

class _Hide:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.partition(".")[0] not in HIDE:
            return None
        where = [p for p in (sys.path if path is None else path) if not _installed(p)]
        spec = importlib.machinery.PathFinder.find_spec(name, where, target)
        if spec is None:
            raise ModuleNotFoundError("No module named %%r" %% name, name=name)
        return spec

sys.meta_path.insert(0, _Hide)
`, pyList(hide), pyList(extraPath))
	if err := os.WriteFile(filepath.Join(dir, "sitecustomize.py"), []byte(site), 0o644); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, "python3")
	script := fmt.Sprintf("#!/bin/sh\nPYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH} exec %s \"$@\"\n", shQuote(dir), shQuote(real))
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper
}

func pyList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestPythonMissing: issue 11 item 17. The dependency check of the Python
// suites reports a module that is not installed, even where a directory of
// the same name would make a plain "import" succeed: this package's own
// celery/ and pika/ folders (go test runs in this directory, and Python
// imports a bare directory as a namespace package), or one on sys.path.
func TestPythonMissing(t *testing.T) {
	if err := pythonMissing(python(), "kombu", "amqp", "pika"); err != nil {
		missing(t, "the check needs kombu, amqp and pika installed (apt-get install python3-celery python3-pika): %v", err)
	}
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(here, "celery")); err != nil {
		t.Fatalf("this test expects the celery/ folder next to it: %v", err)
	}
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{name: "installed copy hidden"},
		// This directory on sys.path: "import celery" finds celery/.
		{name: "a celery/ directory on sys.path", extra: []string{here}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			py := hidingPython(t, []string{"celery"}, tc.extra...)
			// What the old check ran, here: the stand-in interpreter
			// imports the celery/ folder and calls it Celery.
			cmd := exec.Command(py, "-c", "import celery, kombu, amqp")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("stand-in python cannot even import the celery/ folder from %s: %v\n%s", here, err, out)
			}
			err := pythonMissing(py, "celery", "kombu", "amqp")
			if err == nil || !strings.Contains(err.Error(), "celery") {
				t.Fatalf("pythonMissing with Celery hidden: %v, want an error naming celery", err)
			}
			t.Logf("reported: %v", err)
			if err := pythonMissing(py, "kombu", "amqp", "pika"); err != nil {
				t.Fatalf("pythonMissing for the modules still installed: %v", err)
			}
		})
	}
}

// TestInteropSkipsWithoutItsClient: issue 11 item 17. With a Python that
// has pika (and kombu, amqp) but not Celery, TestCelery skips with a
// message naming what to install; under CI=true it fails instead. The
// same for TestPika with pika hidden. The tests run in a child test
// binary whose python is the stand-in (WARREN_INTEROP_PYTHON).
func TestInteropSkipsWithoutItsClient(t *testing.T) {
	if err := pythonMissing(python(), "kombu", "amqp"); err != nil {
		missing(t, "the check needs kombu and amqp installed (apt-get install python3-celery): %v", err)
	}
	for _, tc := range []struct {
		test, hide, hint string
	}{
		{"TestCelery", "celery", "apt-get install python3-celery"},
		{"TestPika", "pika", "apt-get install python3-pika"},
	} {
		t.Run(tc.test, func(t *testing.T) {
			py := hidingPython(t, []string{tc.hide})
			for _, ci := range []bool{false, true} {
				out, err := runChildTest(t, tc.test, py, ci)
				skip := "--- SKIP: " + tc.test
				fail := "--- FAIL: " + tc.test
				switch {
				case !strings.Contains(out, tc.hide) || !strings.Contains(out, tc.hint):
					t.Errorf("CI=%v: the message does not name %s and %q:\n%s", ci, tc.hide, tc.hint, out)
				case !ci && (err != nil || !strings.Contains(out, skip)):
					t.Errorf("without CI: %s did not skip (err %v):\n%s", tc.test, err, out)
				case ci && (err == nil || !strings.Contains(out, fail) || !strings.Contains(out, "CI=true")):
					t.Errorf("CI=true: %s did not fail on the missing client (err %v):\n%s", tc.test, err, out)
				}
			}
		})
	}
}

// runChildTest runs one test of this package in a child test binary with
// python as the interop interpreter and CI set or unset.
func runChildTest(t *testing.T, test, python string, ci bool) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v", "-test.count=1")
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k != "CI" && k != pythonEnv && k != urlEnv {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, pythonEnv+"="+python)
	if ci {
		cmd.Env = append(cmd.Env, "CI=true")
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
