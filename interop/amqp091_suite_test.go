package interop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/warrenmq/warren/internal/testutil"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/warrentest"
)

const amqp091Module = "github.com/rabbitmq/amqp091-go"

// amqp091AllowedFailures lists amqp091-go integration tests that may fail
// against Warren, each with the reason. Keep it short: every entry is a gap.
// (The 17 TestConnectionRecovery* tests, which close their connection
// through the management HTTP API, pass since the API exists.)
var amqp091AllowedFailures = map[string]string{
	// Not a broker test: it runs the client against its own in-memory
	// mock server (newSession) and gives Connection.Close 1 ms to close
	// a NotifyClose channel, which a loaded 2-core CI machine can miss
	// (it did once, while the integration package ran alongside).
	"TestNotifyClosesAllChansAfterConnectionClose": "client-only test with a 1 ms deadline; never talks to the broker",
}

// suitePatches adapt the copied amqp091-go tests to the broker under test:
//   - the places that name the management API's port (internal/utils/http.go,
//     recovery_test.go) point at the broker's API instead of 15672;
//   - the RabbitMQ-only tests (integrationRabbitMQ, and
//     TestIntegrationRecoverNotImplemented) check the server's product
//     property; they run against Warren too. Unpatched, integrationRabbitMQ
//     returns nil for another product without closing the connection it
//     opened, which goleak reports once every test passes.
var suitePatches = []struct{ file, old, new string }{
	{"internal/utils/http.go", `"http://localhost:15672/`, `"http://localhost:%[1]s/`},
	{"recovery_test.go", `utils.DropConnection(url.PathEscape(targetConnName), "15672")`, `utils.DropConnection(url.PathEscape(targetConnName), "%[1]s")`},
	{"integration_test.go", `ok && server == "RabbitMQ" {`, `ok && (server == "RabbitMQ" || server == "Warren") {`},
	{"integration_test.go", `ok && product.(string) == "RabbitMQ" {`, `ok && (product.(string) == "RabbitMQ" || product.(string) == "Warren") {`},
}

// patchSuite applies suitePatches, with port the management API's port; it
// fails the test if a place to patch is gone (a new amqp091-go version).
func patchSuite(t *testing.T, dir, port string) {
	t.Helper()
	for _, p := range suitePatches {
		path := filepath.Join(dir, p.file)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("patching amqp091-go's tests: %v", err)
		}
		if !bytes.Contains(b, []byte(p.old)) {
			t.Fatalf("amqp091-go's %s no longer contains %s: update suitePatches", p.file, p.old)
		}
		b = bytes.ReplaceAll(b, []byte(p.old), []byte(strings.ReplaceAll(p.new, "%[1]s", port)))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAmqp091Suite runs the integration tests of the amqp091-go client (the
// module version required by go.mod, build tag "integration") against the
// broker. The module is copied out of the read-only module cache so that
// `go test` can run in it; its one dependency (goleak) comes through the
// module proxy, verified by the module's own go.sum.
//
// Its tests run in four processes at once (runSuiteShards): about 50 s,
// against 2m24s in one. -short skips it.
func TestAmqp091Suite(t *testing.T) {
	if testing.Short() {
		t.Skip("amqp091-go integration suite takes minutes; skipped with -short")
	}
	goBin, dir, env := prepareAmqp091Suite(t)

	// The suite's recovery tests close connections through the management
	// API on localhost:<port> (15672 for a broker from WARREN_INTEROP_URL).
	url, port := os.Getenv(urlEnv), "15672"
	if url == "" {
		w := warrentest.Start(t)
		url = w.URL()
		_, port, _ = net.SplitHostPort(strings.TrimPrefix(w.MgmtURL(), "http://"))
	}
	runAmqp091Suite(t, goBin, dir, env, url, port)
}

// TestAmqp091SuiteCluster is issue 13's must-show 1: the same suite with
// the client connected to one node of a two-node cluster while every
// queue it declares lives on the other (warrentest.PlaceQueuesOn), so that
// every publish, delivery, ack, get, purge and delete crosses the
// inter-node link. The recovery tests close their connections through the
// management API of the client's node.
func TestAmqp091SuiteCluster(t *testing.T) {
	testutil.Long(t, "amqp091-go's suite against a cluster, 2-3 minutes")
	if testing.Short() {
		t.Skip("amqp091-go integration suite takes minutes; skipped with -short")
	}
	goBin, dir, env := prepareAmqp091Suite(t)
	c := warrentest.StartCluster(t, 2, warrentest.PlaceQueuesOn(warrentest.NodeName(1)))
	client, home := c.Node(0), c.Node(1)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(client.MgmtURL(), "http://"))
	runAmqp091Suite(t, goBin, dir, env, client.URL(), port)
	// The suite's queues lived on the other node: the link into it must
	// have carried the suite's traffic (it publishes megabytes).
	var in uint64
	for _, l := range home.Cluster().Links() {
		if l.Name == client.Name() {
			in = l.BytesIn
		}
	}
	if in < 1<<20 {
		t.Fatalf("node %s received %d bytes from %s: the suite's queues did not live on it", home.Name(), in, client.Name())
	}
	t.Logf("queues' home node %s received %d bytes over the inter-node link", home.Name(), in)
}

// prepareAmqp091Suite copies the amqp091-go module required by go.mod
// into a temporary directory and downloads its dependencies; it returns
// the go binary, the directory and the environment to run the suite with.
func prepareAmqp091Suite(t *testing.T) (goBin, dir string, env []string) {
	t.Helper()
	goBin = requireProgram(t, "go", "install the Go toolchain")
	srcDir := amqp091ModuleDir(t, goBin)
	dir = filepath.Join(t.TempDir(), "amqp091-go")
	if err := copyTree(srcDir, dir); err != nil {
		t.Fatalf("copying %s: %v", srcDir, err)
	}

	env = suiteGoEnv()
	{
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := command(ctx, dir, env, goBin, "mod", "download")
		if out, err := cmd.CombinedOutput(); err != nil {
			missing(t, "go mod download for %s failed (module proxy unreachable?): %v\n%s", amqp091Module, err, out)
		}
	}
	return goBin, dir, env
}

// runAmqp091Suite runs the copied, downloaded suite in dir against url,
// with port the management API's port the recovery tests use.
func runAmqp091Suite(t *testing.T, goBin, dir string, env []string, url, port string) {
	t.Helper()
	patchSuite(t, dir, port)
	timeout := suiteTimeout(t, 8*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	out, res, runErr := runSuiteShards(t, ctx, dir, env, url, port, goBin, timeout-20*time.Second)
	elapsed := time.Since(start).Round(time.Second)

	var unexpected, allowed, nowPassing []string
	for _, name := range res.failed {
		if _, ok := amqp091AllowedFailures[name]; ok {
			allowed = append(allowed, name)
		} else {
			unexpected = append(unexpected, name)
		}
	}
	for _, name := range res.passed {
		if _, ok := amqp091AllowedFailures[name]; ok {
			nowPassing = append(nowPassing, name)
		}
	}
	t.Logf("amqp091-go integration suite: %d passed, %d failed (%d allowed), %d skipped in %v",
		len(res.passed), len(res.failed), len(allowed), len(res.skipped), elapsed)
	if len(res.skipped) > 0 {
		t.Logf("skipped: %s", strings.Join(res.skipped, " "))
	}
	// The recovery tests drop their connection through the management API;
	// they must have run and passed, not been skipped.
	recovery := 0
	for _, name := range res.passed {
		if strings.HasPrefix(name, "TestConnectionRecovery") {
			recovery++
		}
	}
	if recovery < 18 && res.completed {
		t.Errorf("only %d TestConnectionRecovery* tests passed, want all 18 (they close connections via the management API)", recovery)
	}
	if len(nowPassing) > 0 {
		t.Logf("allowed failures that now pass (remove them from amqp091AllowedFailures): %s",
			strings.Join(nowPassing, " "))
	}

	if t.Failed() || runErr != nil && (len(unexpected) > 0 || !res.completed) || ctx.Err() != nil {
		saveLog(t, out.Bytes())
	}
	switch {
	case ctx.Err() != nil:
		t.Fatalf("amqp091-go suite timed out after %v; last output:\n%s", timeout, tail(out.String(), 150))
	case len(unexpected) > 0:
		var b strings.Builder
		for _, name := range unexpected {
			fmt.Fprintf(&b, "\n=== %s\n%s", name, tail(res.output[name], 60))
		}
		if !res.completed {
			// A panic or crash: its trace is after the last test's output.
			fmt.Fprintf(&b, "\n=== the suite did not complete (exit status %d); last output:\n%s",
				exitCode(runErr), tail(out.String(), 100))
		}
		t.Fatalf("amqp091-go integration tests failed: %s\n%s", strings.Join(unexpected, " "), b.String())
	case runErr != nil && !res.completed:
		// Build failure, panic, -timeout, goleak, ...: no clean summary line.
		t.Fatalf("amqp091-go suite exited with status %d without completing; last output:\n%s",
			exitCode(runErr), tail(out.String(), 150))
	case runErr == nil && len(res.failed) > 0:
		t.Fatalf("go test exited 0 but reported failures: %v", res.failed)
	case len(res.passed) < 100:
		t.Fatalf("only %d amqp091-go tests passed; did the suite run? last output:\n%s",
			len(res.passed), tail(out.String(), 80))
	}
}

// saveLog keeps the suite's full output for a failure's post-mortem.
func saveLog(t *testing.T, out []byte) {
	f, err := os.CreateTemp("", "warren-amqp091-suite-*.log")
	if err != nil {
		t.Logf("cannot save the suite's output: %v", err)
		return
	}
	defer f.Close()
	if _, err := f.Write(out); err == nil {
		t.Logf("full amqp091-go suite output: %s", f.Name())
	}
}

// amqp091ModuleDir returns the module cache directory of the amqp091-go
// version that go.mod requires, downloading it if needed.
func amqp091ModuleDir(t *testing.T, goBin string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goBin, "list", "-m", "-f", "{{.Version}}", amqp091Module).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v (go.mod must require it)", amqp091Module, err)
	}
	version := strings.TrimSpace(string(out))
	cmd := exec.CommandContext(ctx, goBin, "mod", "download", "-json", amqp091Module+"@"+version)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); err != nil || jerr != nil || info.Dir == "" {
		missing(t, "go mod download %s@%s failed (module proxy unreachable?): %v %s %s",
			amqp091Module, version, err, info.Error, stderr.String())
	}
	t.Logf("%s %s from %s", amqp091Module, version, info.Dir)
	return info.Dir
}

// suiteGoEnv is the environment for the go commands run in the copied
// module, which is its own module, outside any workspace. (command drops
// RABBITMQ_RABBITMQCTL_PATH, so TestConnection_Close_WhenMemoryAlarmIsActive,
// which would drive a real RabbitMQ's rabbitmqctl, skips.)
func suiteGoEnv() []string {
	return []string{"GOWORK=off", "GOTOOLCHAIN=local"}
}

// copyTree copies the regular files of src into dst, writable.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		outf, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		if _, err := io.Copy(outf, in); err != nil {
			outf.Close()
			return err
		}
		return outf.Close()
	})
}

type goTestResult struct {
	passed, failed, skipped []string
	output                  map[string]string // top-level test -> its output
	completed               bool              // the final "ok"/"FAIL <pkg> <time>" line was seen, and no panic
}

var (
	resultLine = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (\S+) \(`)
	runLine    = regexp.MustCompile(`^=== (RUN|CONT|PAUSE|NAME)\s+(\S+)`)
	// the last line of `go test` (ok/FAIL, package, time) or of a test
	// binary run directly (PASS/FAIL alone)
	summaryLine = regexp.MustCompile(`^(ok|FAIL)\s+\S+\s+[0-9.]+s|^(PASS|FAIL)$`)
	crashLine   = regexp.MustCompile(`^(panic: |fatal error: |goleak: )`)
)

// parseGoTestOutput reads `go test -v` output of one package. Only top-level
// tests (and examples) are counted; a failing subtest fails its parent.
func parseGoTestOutput(s string) goTestResult {
	res := goTestResult{output: map[string]string{}}
	bufs := map[string]*strings.Builder{}
	cur := ""
	crashed := false
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if m := runLine.FindStringSubmatch(line); m != nil {
			cur, _, _ = strings.Cut(m[2], "/")
		}
		if cur != "" {
			b := bufs[cur]
			if b == nil {
				b = &strings.Builder{}
				bufs[cur] = b
			}
			b.WriteString(line)
			b.WriteByte('\n')
		}
		if m := resultLine.FindStringSubmatch(line); m != nil {
			switch m[1] {
			case "PASS":
				res.passed = append(res.passed, m[2])
			case "FAIL":
				res.failed = append(res.failed, m[2])
			case "SKIP":
				res.skipped = append(res.skipped, m[2])
			}
			cur = ""
		}
		if summaryLine.MatchString(line) {
			res.completed = true
		}
		if crashLine.MatchString(line) {
			crashed = true
		}
	}
	res.completed = res.completed && !crashed
	for name, b := range bufs {
		res.output[name] = b.String()
	}
	sort.Strings(res.failed)
	return res
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines omitted)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// amqp091Shards is how many processes run the suite's tests at once. Most
// of its time is client-side waiting (recovery delays, 5 s listener
// timeouts), so shards overlap their waits rather than their CPU: the
// suite took 2m24s in one process and takes under a minute in four.
const amqp091Shards = 4

// amqp091Independent is the suite's file whose tests each name their own
// connection and queues (and take 5-16 s each, 110 s of the suite): they
// are spread over the shards after the first. Every other test runs in
// the first shard, in the suite's order, since some rely on what an
// earlier one left (TestIntegrationGetEmpty gets the message an earlier
// test left in test.get-ok).
const amqp091Independent = "recovery_test.go"

// runSuiteShards compiles the suite once, lists its tests and runs them
// in amqp091Shards concurrent processes, each with a virtual host of its
// own (created and removed through the management API on port) so that
// names the tests reuse cannot meet. It returns every shard's output and
// the merged result; err is the first shard's run error.
func runSuiteShards(t *testing.T, ctx context.Context, dir string, env []string, url, port, goBin string, innerTimeout time.Duration) (*bytes.Buffer, goTestResult, error) {
	t.Helper()
	bin := filepath.Join(dir, "amqp091.test")
	if b, err := command(ctx, dir, env, goBin, "test", "-c", "-tags", "integration", "-o", bin, "./").CombinedOutput(); err != nil {
		t.Fatalf("building amqp091-go's tests: %v\n%s", err, b)
	}
	listed, err := command(ctx, dir, env, bin, "-test.list", ".").Output()
	if err != nil {
		t.Fatalf("listing amqp091-go's tests: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(dir, amqp091Independent))
	if err != nil {
		t.Fatalf("amqp091-go's %s: %v (update amqp091Independent)", amqp091Independent, err)
	}
	independent := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^func (Test\w+)\(`).FindAllSubmatch(src, -1) {
		independent[string(m[1])] = true
	}
	shards := make([][]string, amqp091Shards)
	n, spread := 0, 0
	for _, l := range strings.Split(string(listed), "\n") {
		if !strings.HasPrefix(l, "Test") && !strings.HasPrefix(l, "Example") && !strings.HasPrefix(l, "Fuzz") {
			continue
		}
		i := 0
		if independent[l] {
			i = 1 + spread%(len(shards)-1)
			spread++
		}
		shards[i] = append(shards[i], regexp.QuoteMeta(l))
		n++
	}
	if n < 100 || spread < 10 {
		t.Fatalf("amqp091-go lists %d tests, %d of them in %s; want 100 and 10 or more:\n%s", n, spread, amqp091Independent, listed)
	}
	outs := make([]bytes.Buffer, len(shards))
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	for i, shard := range shards {
		vhost := fmt.Sprintf("amqp091-go-%d", i)
		mgmtVhost(t, port, vhost)
		cmd := command(ctx, dir, append(env, "AMQP_URL="+strings.TrimSuffix(url, "/")+"/"+vhost), bin,
			"-test.count=1", "-test.v", "-test.timeout", innerTimeout.String(),
			"-test.run", "^("+strings.Join(shard, "|")+")$")
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		wg.Go(func() { errs[i] = cmd.Run() })
	}
	wg.Wait()
	all := &bytes.Buffer{}
	merged := goTestResult{output: map[string]string{}, completed: true}
	var runErr error
	for i := range shards {
		fmt.Fprintf(all, "##### shard %d of %d\n", i+1, len(shards))
		all.Write(outs[i].Bytes())
		r := parseGoTestOutput(outs[i].String())
		merged.passed = append(merged.passed, r.passed...)
		merged.failed = append(merged.failed, r.failed...)
		merged.skipped = append(merged.skipped, r.skipped...)
		maps.Copy(merged.output, r.output)
		merged.completed = merged.completed && r.completed
		if runErr == nil {
			runErr = errs[i]
		}
	}
	sort.Strings(merged.failed)
	return all, merged, runErr
}

// mgmtVhost creates vhost through the management API on localhost:port,
// gives guest every permission on it, and removes it when t ends.
func mgmtVhost(t *testing.T, port, vhost string) {
	t.Helper()
	base := "http://localhost:" + port + "/api/"
	call := func(method, path, body string) {
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth("guest", "guest")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 && !(method == "DELETE" && resp.StatusCode == 404) {
			t.Fatalf("%s %s: %s", method, path, resp.Status)
		}
	}
	call("PUT", "vhosts/"+vhost, "{}")
	call("PUT", "permissions/"+vhost+"/guest", `{"configure":".*","write":".*","read":".*"}`)
	t.Cleanup(func() { call("DELETE", "vhosts/"+vhost, "") })
}
