package broker

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/testutil"
)

// waitFor polls cond until it holds, failing the test after five seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, what, cond)
}

// dlFixture is a queue src dead-lettering into dlq through the default
// exchange, on a broker with a message store.
func dlFixture(t *testing.T, srcArgs amqp.Table) (v *VHost, src, dlq *Queue) {
	t.Helper()
	return dlFixtureSpec(t, QueueSpec{Name: "src", Args: srcArgs})
}

func dlFixtureSpec(t *testing.T, spec QueueSpec) (v *VHost, src, dlq *Queue) {
	t.Helper()
	v = pagingVHost(t, 0)
	dlq, _, _, err := v.DeclareQueue(QueueSpec{Name: "dlq"}, false)
	noErr(t, err)
	args := amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
	for k, a := range spec.Args {
		args[k] = a
	}
	spec.Args = args
	src, _, _, err = v.DeclareQueue(spec, false)
	noErr(t, err)
	return v, src, dlq
}

// publishN publishes bodies 0..n-1 to queue and takes them unacked.
func publishN(t *testing.T, v *VHost, q *Queue, n int) []Delivery {
	t.Helper()
	var r Router
	for i := range n {
		_, err := v.Publish(&r, "", &Message{RoutingKey: q.Name, Body: []byte(fmt.Sprint(i))})
		noErr(t, err)
	}
	ds := make([]Delivery, n)
	for i := range ds {
		d, _, ok := q.Get(false)
		if !ok {
			t.Fatalf("get %d: the queue is empty", i)
		}
		ds[i] = d
	}
	return ds
}

// blockFlusher makes q's flusher stop before its first batch until
// release is called (also at cleanup, so a failing test does not leave
// it blocked); entered is closed once it stopped.
func blockFlusher(t *testing.T, q *Queue) (entered <-chan struct{}, release func()) {
	in, rel := make(chan struct{}), make(chan struct{})
	var first, once sync.Once
	q.mu.Lock()
	q.dlHook = func() {
		first.Do(func() {
			close(in)
			<-rel
		})
	}
	q.mu.Unlock()
	release = func() { once.Do(func() { close(rel) }) }
	t.Cleanup(release)
	return in, release
}

func seqBodies(from, to int) []string {
	var s []string
	for i := from; i < to; i++ {
		s = append(s, fmt.Sprint(i))
	}
	return s
}

// issue 12 (dead-letter effects off the consumer's reader): Reject
// returns while the dead-lettering it causes is held up: the copy, route
// and enqueue into the DLQ run on the queue's flusher, not on the
// goroutine that rejects (a connection's reader in the server).
func TestIssue12RejectLeavesDeadLetteringToFlusher(t *testing.T) {
	v, src, dlq := dlFixture(t, nil)
	ds := publishN(t, v, src, 1)
	entered, release := blockFlusher(t, src)
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		src.Reject(ds)
	}()
	<-entered
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("Reject waited for the dead-lettering it caused")
	}
	if n, _ := dlq.Counts(); n != 0 {
		t.Fatalf("DLQ holds %d before the flusher ran, want 0", n)
	}
	release()
	src.waitDeadLetters()
	d, _, ok := dlq.Get(true)
	if !ok || string(d.Msg.Body) != "0" || len(d.Msg.Deaths) != 1 || d.Msg.Deaths[0].Reason != ReasonRejected {
		t.Fatalf("DLQ: got %v %+v, want the rejected message", ok, d.Msg)
	}
}

// pushBack checks the bound on dead letters waiting for the flushers
// (issue 12): with src's flusher held up after taking the first dead
// letter, feed(i) making dead letter i returns until dlBacklogLimit wait,
// the call that reaches the limit waits until the flusher works the
// backlog down, and then all arrive in the DLQ in order (R3.11).
func pushBack(t *testing.T, v *VHost, src, dlq *Queue, feed func(i int)) {
	t.Helper()
	entered, release := blockFlusher(t, src)
	feed(0)
	<-entered // the flusher holds dead letter 0
	for i := 1; i < dlBacklogLimit-1; i++ {
		feed(i)
	}
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		feed(dlBacklogLimit - 1)
	}()
	waitFor(t, "the call that fills the backlog to wait", func() bool {
		v.dlq.mu.Lock()
		defer v.dlq.mu.Unlock()
		return v.dlq.waiting == 1
	})
	select {
	case <-returned:
		t.Fatal("a call returned with the backlog full")
	default:
	}
	release()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("the call still waits after the flusher took the backlog")
	}
	src.waitDeadLetters()
	if got, want := drain(dlq), seqBodies(0, dlBacklogLimit); !slices.Equal(got, want) {
		t.Fatalf("DLQ holds %d messages (first %q), want %d in order", len(got), got[:min(len(got), 5)], len(want))
	}
	if n := v.dlq.n.Load(); n != 0 {
		t.Fatalf("backlog %d after the flusher finished, want 0", n)
	}
}

// issue 12: a consumer rejecting into a held-up DLQ path is pushed back
// (the nacking reader waits) once dlBacklogLimit dead letters wait.
func TestIssue12RejectsPushedBack(t *testing.T) {
	v, src, dlq := dlFixture(t, nil)
	ds := publishN(t, v, src, dlBacklogLimit)
	pushBack(t, v, src, dlq, func(i int) { src.Reject(ds[i : i+1]) })
	if st := src.Stats(); st.Unacked != 0 {
		t.Fatalf("unacked %d, want 0", st.Unacked)
	}
}

// issue 12: a publisher whose messages dead-letter at once (x-message-ttl
// 0, no consumer) is pushed back the same way, so the dead letters it
// causes cannot pile up in memory (bench ttl-dlq: 1.5 GiB without it).
func TestIssue12ExpiringPublishesPushedBack(t *testing.T) {
	v, src, dlq := dlFixture(t, amqp.Table{"x-message-ttl": int32(0)})
	var r Router
	pushBack(t, v, src, dlq, func(i int) {
		_, err := v.Publish(&r, "", &Message{RoutingKey: "src", Body: []byte(fmt.Sprint(i))})
		noErr(t, err)
	})
}

// issue 12: dead-lettering back into the same queue does not deadlock,
// also when settling clients wait for room in its outbox: the flusher
// enqueues into its own queue without waiting for itself.
func TestIssue12DeadLetterIntoItselfUnderPushBack(t *testing.T) {
	v := pagingVHost(t, 0)
	q, _, _, err := v.DeclareQueue(QueueSpec{Name: "loop", Args: amqp.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "loop"}}, false)
	noErr(t, err)
	n := 3 * dlBacklogLimit
	ds := publishN(t, v, q, n)
	var wg sync.WaitGroup
	for g := range 2 { // two clients rejecting at once, one message at a time
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 2 {
				q.Reject(ds[i : i+1])
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		q.waitDeadLetters()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("rejecting into the same queue deadlocked")
	}
	if st := q.Stats(); st.Ready != n || st.DeadLettered[ReasonRejected] != uint64(n) {
		t.Fatalf("ready %d, dead-lettered %v; want %d back in the queue", st.Ready, st.DeadLettered, n)
	}
	d, _, _ := q.Get(true)
	if len(d.Msg.Deaths) != 1 || d.Msg.Deaths[0].Queue != "loop" || d.Msg.Deaths[0].Count != 1 {
		t.Fatalf("deaths %+v, want one rejection from loop", d.Msg.Deaths)
	}
}

// issue 12: closing the message store waits for the flushers, so a
// clean shutdown publishes the dead letters still on their way: a
// persistent message rejected from a durable queue is moved into its
// durable targets (dlmove.go) and found there after a restart, not back
// in its source.
func TestIssue12CloseDrainsDeadLetters(t *testing.T) {
	f := newMoveFixture(t)
	src := f.b.VHost("/").Queue("src")
	d, _, ok := src.Get(false)
	if !ok {
		t.Fatal("no message")
	}
	entered, release := blockFlusher(t, src)
	src.Reject([]Delivery{d})
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- f.ms.Close(true) }()
	waitFor(t, "Close to wait for the flusher", func() bool {
		f.ms.dlFlushers.mu.Lock()
		defer f.ms.dlFlushers.mu.Unlock()
		return f.ms.dlFlushers.waiting == 1
	})
	release()
	select {
	case err := <-closed:
		noErr(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return after the flusher finished")
	}
	f.open(t)
	t.Cleanup(func() { f.ms.Close(false) })
	if got := f.contents(t, "src"); len(got) != 0 {
		t.Fatalf("source after restart: %v, want empty (moved)", got)
	}
	for _, n := range []string{"t1", "t2"} {
		if got := f.contents(t, n); len(got) != 1 || got[0] != "payload(dead:rejected)" {
			t.Fatalf("%s after restart: %v, want the dead letter", n, got)
		}
	}
}

// issue 12: at least once (R1.14), a dead letter waiting for the flusher
// counts as pending (messages_dlx), so the confirmed counter that the
// management API derives from it never runs ahead.
func TestIssue12PendingCountsOutbox(t *testing.T) {
	v, src, _ := dlFixtureSpec(t, QueueSpec{Name: "src", Durable: true, Args: amqp.Table{
		"x-queue-type": "quorum", "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}})
	ds := publishN(t, v, src, 2)
	entered, release := blockFlusher(t, src)
	src.Reject(ds[:1])
	<-entered
	src.Reject(ds[1:])
	if st := src.Stats(); st.DeadLetterPending != 2 {
		t.Fatalf("pending with the flusher held up: %d, want 2", st.DeadLetterPending)
	}
	release()
	src.waitDeadLetters()
	if st := src.Stats(); st.DeadLetterPending != 0 {
		t.Fatalf("pending once published: %d, want 0", st.DeadLetterPending)
	}
}
