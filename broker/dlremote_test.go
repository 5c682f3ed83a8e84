package broker

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testutil"
)

// Crash states of a dead letter owed to queues on other nodes
// (dlremote.go, issue 13), built record by record and recovered.

// stageRemote writes the Y record of src's message 1 owed to targets, and
// the source's A of the original if acked.
func (f *moveFixture) stageRemote(t *testing.T, acked bool, targets ...string) {
	t.Helper()
	v := f.b.VHost("/")
	src := v.Queue("src")
	src.mu.Lock()
	defer src.mu.Unlock()
	e, _, _ := src.m.Get(0, false)
	cp := deadLetterCopy(e.Msg, "src", ReasonRejected, "dlx", nil, time.Unix(1700000000, 0))
	rd := &remoteDL{msg: cp, src: e.Seq, targets: targets}
	if !src.appendRemoteDLRecordLocked(rd) {
		t.Fatal("Y record not appended")
	}
	if acked {
		var a [8]byte
		binary.LittleEndian.PutUint64(a[:], e.Seq)
		if _, err := src.disk.append(recAck, a[:]); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRemoteDeadLetterCrashBeforeSourceAck: issue 13. The Y record is on
// disk but the source's A of the original is not: the move never
// completed, the message is back in the source and nothing is owed.
func TestRemoteDeadLetterCrashBeforeSourceAck(t *testing.T) {
	f := newMoveFixture(t)
	f.stageRemote(t, false, "t1")
	f.crash(t)
	f.open(t)
	if n := f.b.VHost("/").Queue("src").Stats().DeadLetterPending; n != 0 {
		t.Fatalf("owed after recovery: %d, want 0", n)
	}
	if got := f.contents(t, "src"); len(got) != 1 || got[0] != "payload" {
		t.Fatalf("source after recovery: %v, want the message back", got)
	}
	if got := f.contents(t, "t1"); len(got) != 0 {
		t.Fatalf("t1 after recovery: %v, want empty", got)
	}
}

// TestRemoteDeadLetterCrashResends: issue 13. The Y record and the
// source's A are on disk, no confirm came: recovery owes the dead letter
// again while its target's node cannot be reached (it survives a second
// crash), and re-sends it, the copy intact, once it can be.
func TestRemoteDeadLetterCrashResends(t *testing.T) {
	f := newMoveFixture(t)
	v := f.b.VHost("/")
	if _, _, _, err := v.DeclareQueue(QueueSpec{Name: "rq", Durable: true, Home: "warren@elsewhere"}, false); err != nil {
		t.Fatal(err)
	}
	f.stageRemote(t, true, "rq")
	for i := 0; i < 2; i++ {
		f.crash(t)
		f.open(t)
		src := f.b.VHost("/").Queue("src")
		if s := src.Stats(); s.DeadLetterPending != 1 || s.Ready != 0 {
			t.Fatalf("recovery %d: %d owed, %d ready in the source; want 1 owed, 0 ready", i+1, s.DeadLetterPending, s.Ready)
		}
	}
	// The target's home is this node now (a retry finds it local): the
	// retry delivers it and acks the Y record. Home changes between
	// rounds (no answer awaited, under the source's lock that a round
	// takes first).
	src := f.b.VHost("/").Queue("src")
	rq := f.b.VHost("/").Queue("rq")
	if !testutil.Until(5*time.Second, func() bool {
		src.mu.Lock()
		defer src.mu.Unlock()
		if len(src.rdl) == 1 && src.rdl[0].sending == 0 {
			rq.Home = ""
			return true
		}
		return false
	}) {
		t.Fatal("the owed dead letter is never between rounds")
	}
	if !testutil.Until(5*time.Second, func() bool { return src.Stats().DeadLetterPending == 0 }) {
		t.Fatal("the owed dead letter was not re-sent")
	}
	if got := f.contents(t, "rq"); len(got) != 1 || got[0] != "payload(dead:rejected)" {
		t.Fatalf("target after the re-send: %v, want the dead letter", got)
	}
	f.crash(t)
	f.open(t)
	if n := f.b.VHost("/").Queue("src").Stats().DeadLetterPending; n != 0 {
		t.Fatalf("owed after the confirm and a crash: %d, want 0", n)
	}
}
