package loopnet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errFull = errors.New("full")

type node struct {
	mu   sync.Mutex
	got  []string
	cmds []uint64
}

func (n *node) HandlePeerCall(from string, req []byte) ([]byte, error) {
	return append([]byte(from+":"), req...), nil
}

func (n *node) HandlePeerMessage(from string, msg []byte) {
	n.mu.Lock()
	n.got = append(n.got, from+":"+string(msg))
	n.mu.Unlock()
}

func (n *node) ApplyCommand(index uint64, cmd []byte) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cmds = append(n.cmds, index)
	if string(cmd) == "bad" {
		return fmt.Errorf("refused at %d", index)
	}
	return nil
}

func (n *node) received() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.got...)
}

// Messages arrive in order; a cut link refuses calls and sends and drops
// what it held; a full link is ErrFull, and SendWait waits for room.
func TestNet(t *testing.T) {
	nw := New(errFull)
	a, b := &node{}, &node{}
	nw.Add("a", a)
	nw.Add("b", b)
	pa := nw.Peers("a")
	for i := range 100 {
		if err := pa.Send("b", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 5*time.Second, "100 messages", func() bool { return len(b.received()) == 100 })
	for i, m := range b.received() {
		if m != fmt.Sprintf("a:%d", i) {
			t.Fatalf("message %d is %q", i, m)
		}
	}
	if r, err := pa.Call(context.Background(), "b", []byte("x")); err != nil || string(r) != "a:x" {
		t.Fatalf("call: %q %v", r, err)
	}
	nw.SetCut("a", "b", true)
	if pa.Up("b") || nw.Peers("b").Up("a") {
		t.Fatal("a cut link is up")
	}
	if _, err := pa.Call(context.Background(), "b", nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("call over a cut link: %v", err)
	}
	if err := pa.Send("b", []byte("lost")); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("send over a cut link: %v", err)
	}
	nw.SetCut("a", "b", false)
	if err := pa.Send("c", nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("send to an unknown node: %v", err)
	}

	nw.SetLinkCap(1)
	slow := &blocking{release: make(chan struct{})}
	nw.Add("s", slow)
	if err := pa.Send("s", []byte("1")); err != nil { // taken by the link's goroutine, which blocks
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the first message taken", func() bool { return slow.started() })
	if err := pa.Send("s", []byte("2")); err != nil { // queued
		t.Fatal(err)
	}
	if err := pa.Send("s", []byte("3")); !errors.Is(err, errFull) {
		t.Fatalf("send on a full link: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- pa.SendWait(context.Background(), "s", []byte("3")) }()
	close(slow.release)
	if err := <-done; err != nil {
		t.Fatalf("SendWait: %v", err)
	}
	nw.Close()
	if err := pa.Send("b", nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("send after Close: %v", err)
	}
}

type blocking struct {
	mu      sync.Mutex
	n       int
	release chan struct{}
}

func (b *blocking) HandlePeerCall(string, []byte) ([]byte, error) { return nil, nil }
func (b *blocking) HandlePeerMessage(string, []byte) {
	b.mu.Lock()
	b.n++
	b.mu.Unlock()
	<-b.release
}
func (b *blocking) started() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.n > 0 }

// Every member applies every command at the same index, in order; the
// proposer hears its own apply's answer; SetFail applies nothing.
func TestRepl(t *testing.T) {
	var r Repl
	a, b := &node{}, &node{}
	ma, mb := r.Join(a), r.Join(b)
	if err := ma.Propose(context.Background(), []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if err := mb.Propose(context.Background(), []byte("bad")); err == nil || err.Error() != "refused at 2" {
		t.Fatalf("propose of a refused command: %v", err)
	}
	r.SetFail(errors.New("no quorum"))
	if err := ma.Propose(context.Background(), []byte("ok")); err == nil || r.Failures() != 1 {
		t.Fatalf("failed propose: %v, %d failures", err, r.Failures())
	}
	r.SetFail(nil)
	if fmt.Sprint(a.cmds) != "[1 2]" || fmt.Sprint(b.cmds) != "[1 2]" || r.Index() != 2 || len(r.Log()) != 2 {
		t.Fatalf("a %v b %v index %d log %d", a.cmds, b.cmds, r.Index(), len(r.Log()))
	}
}
