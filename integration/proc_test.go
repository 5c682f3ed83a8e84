package integration

// A broker in a subprocess, for tests that kill it with SIGKILL (crash
// test) or damage its data directory between runs (corruption test). The
// binary is built once per test run from ./cmd/warren.

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testutil"
)

var (
	warrenBinOnce sync.Once
	warrenBin     string
	warrenBinErr  error
)

// buildWarren builds ./cmd/warren once and returns the binary's path.
func buildWarren(t testing.TB) string {
	t.Helper()
	bin, err := buildWarrenBin()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// buildWarrenBin builds ./cmd/warren once; the error says why it could not.
func buildWarrenBin() (string, error) {
	warrenBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "warren-bin-")
		if err != nil {
			warrenBinErr = err
			return
		}
		warrenBin = filepath.Join(dir, "warren")
		out, err := exec.Command("go", "build", "-o", warrenBin, "../cmd/warren").CombinedOutput()
		if err != nil {
			warrenBinErr = fmt.Errorf("go build ./cmd/warren: %v\n%s", err, out)
		}
	})
	return warrenBin, warrenBinErr
}

// proc is a warren process on a data directory.
type proc struct {
	t       testing.TB
	bin     string
	DataDir string
	Addr    string
	args    []string
	cmd     *exec.Cmd
	out     *lockedBuffer
	exited  chan struct{}
	exitErr error
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startProc starts warren on dataDir (created if needed) on a free
// loopback port and waits until it accepts AMQP connections. Extra flags
// are appended to the defaults. The process is killed at cleanup.
func startProc(t testing.TB, dataDir string, extra ...string) *proc {
	t.Helper()
	p := &proc{t: t, bin: buildWarren(t), DataDir: dataDir, args: extra}
	t.Cleanup(func() {
		if p.cmd != nil && p.running() {
			p.Kill()
		}
	})
	p.Start()
	return p
}

// Start (re)starts the process on the same data directory, on a new port.
func (p *proc) Start() {
	p.t.Helper()
	p.Addr = testutil.FreePort(p.t)
	args := append([]string{"--amqp-addr", p.Addr, "--http-addr", "127.0.0.1:0", "--data-dir", p.DataDir,
		"--log-level", "warn", "--disk-free-limit", "-1", "--memory-high-watermark", "-1"}, p.args...)
	p.cmd = exec.Command(p.bin, args...)
	p.out = &lockedBuffer{}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func() {
		p.exitErr = p.cmd.Wait()
		close(p.exited)
	}()
	if !testutil.Until(60*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", p.Addr, time.Second)
		if err == nil {
			c.Close()
			return true
		}
		select {
		case <-p.exited:
			p.t.Fatalf("warren exited during start-up: %v\n%s", p.exitErr, p.out)
		default:
		}
		return false
	}) {
		p.t.Fatalf("warren did not accept connections within 60 s:\n%s", p.out)
	}
}

// URL is the AMQP URL of the running process.
func (p *proc) URL() string { return "amqp://guest:guest@" + p.Addr + "/" }

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL and waits for the process to go.
func (p *proc) Kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// Stop sends SIGTERM (a clean shutdown) and waits; it fails the test if
// the process does not exit within 30 s or exits with an error.
func (p *proc) Stop() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.Kill()
		p.t.Fatalf("warren did not stop on SIGTERM within 30 s:\n%s", p.out)
	}
	if p.exitErr != nil {
		p.t.Fatalf("warren exited with %v:\n%s", p.exitErr, p.out)
	}
}

// Output is everything the process has written so far.
func (p *proc) Output() string { return p.out.String() }

// Exited reports whether the process has exited on its own (a crash).
func (p *proc) Exited() (bool, error) {
	select {
	case <-p.exited:
		return true, p.exitErr
	default:
		return false, nil
	}
}

// TestProcRestartKeepsDefinitions checks the subprocess harness itself: a
// durable queue declared before SIGKILL is there after the restart.
func TestProcRestartKeepsDefinitions(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the warren binary")
	}
	p := startProc(t, t.TempDir())
	c, ch := rsDial(t, p.URL())
	if _, err := ch.QueueDeclare("proc-q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	c.Close()
	p.Kill()
	p.Start()
	c, ch = rsDial(t, p.URL())
	defer c.Close()
	if _, err := ch.QueueDeclarePassive("proc-q", true, false, false, false, nil); err != nil {
		t.Fatalf("durable queue lost across SIGKILL: %v", err)
	}
	p.Stop()
}

// TestTxCommitSurvivesSIGKILL: tx.commit-ok is sent only once the
// transaction's persistent messages are on disk, so a SIGKILL right after
// it loses none (issue 4). Twenty rounds, a kill straight after each
// commit-ok.
func TestTxCommitSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the warren binary")
	}
	p := startProc(t, t.TempDir())
	want := 0
	for round := range 20 {
		c, ch := rsDial(t, p.URL())
		if _, err := ch.QueueDeclare("tx-kill", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		rsCheck(t, "tx", ch.Tx())
		for i := range 50 {
			rsCheck(t, "publish", ch.Publish("", "tx-kill", false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: fmt.Appendf(nil, "%d-%d", round, i)}))
		}
		rsCheck(t, "commit", ch.TxCommit())
		want += 50
		p.Kill()
		c.Close()
		p.Start()
		_, ch = rsDial(t, p.URL())
		qi, err := ch.QueueDeclarePassive("tx-kill", true, false, false, false, nil)
		rsCheck(t, "passive", err)
		if qi.Messages != want {
			t.Fatalf("round %d: %d messages after SIGKILL, want %d committed", round, qi.Messages, want)
		}
	}
	p.Stop()
}

// TestSigtermAsSoonAsItListens: SIGTERM is a clean shutdown (exit status
// 0, "shutting down" logged) from the moment the AMQP port accepts
// connections, not only once the rest of start-up is done: a supervisor
// that stops a broker it has just seen come up must not kill it.
func TestSigtermAsSoonAsItListens(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the warren binary")
	}
	bin := buildWarren(t)
	for i := range 10 {
		addr := testutil.FreePort(t)
		cmd := exec.Command(bin, "--amqp-addr", addr, "--http-addr", "127.0.0.1:0", "--data-dir", t.TempDir(),
			"--disk-free-limit", "-1", "--memory-high-watermark", "-1")
		out := &lockedBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			// No pause between attempts: signal the moment it listens.
			if c, err := net.Dial("tcp", addr); err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("try %d: not listening within 30 s:\n%s", i, out)
			}
		}
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("try %d: SIGTERM right after the port opened: %v (want a clean exit)\n%s", i, err, out)
		}
	}
}
