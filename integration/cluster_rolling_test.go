package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testutil"
)

// TestClusterRollingRestart: issue 22 must-show 2. A rolling restart of
// all three nodes, one after another (warren node drain, SIGTERM, start,
// warren node revive), under a publish-and-consume load with confirms on
// three quorum queues, each led by another node at the start. Clients
// whose node is drained reconnect to another node and resend what was not
// confirmed. Nothing confirmed is lost, nothing is delivered twice without
// redelivered, and no publish waits more than 1 s for its confirm.
func TestClusterRollingRestart(t *testing.T) {
	testutil.Long(t, "restarts a three-process cluster node by node under load, about 20 s")
	if testing.Short() {
		t.Skip("restarts a three-process cluster under load")
	}
	c := startProcCluster(t, 3, procClusterOpts{})
	c.waitClusterReady(t)
	const queues = 3
	for i := range queues {
		_, ch := rsDial(t, c.URL(i)) // client-local: node i leads rr-i
		_, err := ch.QueueDeclare(fmt.Sprintf("rr-%d", i), true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		rsCheck(t, "declare", err)
	}
	ld := &rollingLoad{c: c, confirmed: map[string]bool{}, seen: map[string]int{}}
	ctx, stop := context.WithCancel(context.Background())
	var pubs, cons sync.WaitGroup
	for i := range queues {
		pubs.Add(1)
		go func() { defer pubs.Done(); ld.publish(ctx, i) }()
		cons.Add(1)
		go func() { defer cons.Done(); ld.consume(ctx, i) }()
	}
	cli := func(i int, args ...string) string {
		t.Helper()
		out, err := exec.Command(c.bin, append(args, "--url", c.MgmtURL(i))...).CombinedOutput()
		if err != nil {
			t.Fatalf("warren %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	time.Sleep(2 * time.Second)
	for k := range 3 {
		begin := time.Now()
		out := cli(k, "node", "drain")
		if !strings.Contains(out, "is in maintenance mode") {
			t.Fatalf("drain %s: %q", c.Name(k), out)
		}
		t.Logf("%s %s", c.Name(k), strings.TrimSpace(out))
		if conn, err := net.DialTimeout("tcp", c.nodes[k].amqpAddr, time.Second); err == nil {
			conn.Close()
			t.Fatalf("drained %s still accepts AMQP connections", c.Name(k))
		}
		c.Stop(k) // SIGTERM
		c.launch(k)
		// It comes back drained: the API answers, AMQP does not.
		if err := testutil.UntilNil(60*time.Second, func() error { _, err := c.clusterStatus(k); return err }); err != nil {
			t.Fatalf("%s's API after the restart: %v", c.Name(k), err)
		}
		if conn, err := net.DialTimeout("tcp", c.nodes[k].amqpAddr, time.Second); err == nil {
			conn.Close()
			t.Fatalf("%s left maintenance mode by restarting", c.Name(k))
		}
		c.waitClusterReady(t)
		if out := cli(k, "node", "revive"); !strings.Contains(out, "out of maintenance mode") {
			t.Fatalf("revive %s: %q", c.Name(k), out)
		}
		c.waitUp(k)
		t.Logf("%s drained, restarted and revived in %s", c.Name(k), time.Since(begin).Round(time.Millisecond))
		time.Sleep(2 * time.Second)
	}
	stop()
	pubs.Wait()
	// Drain the queues: the consumers stop once they have been idle.
	ld.drained.Store(true)
	cons.Wait()

	ld.mu.Lock()
	defer ld.mu.Unlock()
	lost, unflagged, dups := 0, 0, 0
	for body := range ld.confirmed {
		if ld.seen[body] == 0 {
			lost++
		}
	}
	for _, n := range ld.seen {
		dups += max(n-1, 0)
	}
	unflagged = ld.unflagged
	t.Logf("rolling restart: %d published and confirmed, %d consumed, %d lost, %d duplicates (%d unflagged), %d reconnects; longest confirm wait %s, longest without a confirm %s",
		len(ld.confirmed), len(ld.seen), lost, dups, unflagged, ld.reconnects.Load(), ld.maxWait.Round(time.Millisecond), ld.maxGap.Round(time.Millisecond))
	if len(ld.confirmed) < 100 {
		t.Fatalf("only %d messages confirmed: the load did not run", len(ld.confirmed))
	}
	if lost > 0 || unflagged > 0 {
		t.Fatalf("%d confirmed messages lost, %d delivered twice without redelivered", lost, unflagged)
	}
	if ld.maxWait > time.Second {
		t.Fatalf("a publish waited %s for its confirm, want at most 1 s", ld.maxWait)
	}
}

// rollingLoad is TestClusterRollingRestart's clients.
type rollingLoad struct {
	c          *procCluster
	drained    atomic.Bool // publishing is over: consumers stop when idle
	reconnects atomic.Int64

	mu        sync.Mutex
	confirmed map[string]bool
	seen      map[string]int
	unflagged int
	maxWait   time.Duration // the longest a message waited for its confirm, resends included
	maxGap    time.Duration // the longest a publisher had messages out and no confirm
}

// dial connects to the first node from start on that takes clients.
func (ld *rollingLoad) dial(ctx context.Context, start int) (*amqp.Connection, *amqp.Channel, int) {
	for try := 0; ; try++ {
		i := (start + try) % len(ld.c.nodes)
		conn, err := amqp.DialConfig(ld.c.URL(i), amqp.Config{Dial: amqp.DefaultDial(time.Second)})
		if err == nil {
			ch, err := conn.Channel()
			if err == nil {
				return conn, ch, i
			}
			conn.Close()
		}
		if try > 1000 { // about 30 s with no node taking clients
			return nil, nil, -1
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// publish sends rr-q's messages in windows of 20 with confirms, from the
// node q on; when its connection closes it reconnects to the next node and
// resends what was not confirmed.
func (ld *rollingLoad) publish(ctx context.Context, q int) {
	queue := fmt.Sprintf("rr-%d", q)
	node := q
	conn, ch, node := ld.dial(ctx, node)
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	ch.Confirm(false)
	type msg struct {
		body  string
		first time.Time
	}
	var out []msg
	seq := 0
	lastConfirm := time.Now()
	for ctx.Err() == nil || len(out) > 0 {
		for ctx.Err() == nil && len(out) < 20 {
			out = append(out, msg{body: fmt.Sprintf("%s-%06d", queue, seq), first: time.Now()})
			seq++
		}
		var dcs []*amqp.DeferredConfirmation
		var err error
		for _, m := range out {
			var dc *amqp.DeferredConfirmation
			dc, err = ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, false, false,
				amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(m.body)})
			if err != nil {
				break
			}
			dcs = append(dcs, dc)
		}
		var keep []msg
		for i, m := range out {
			if i >= len(dcs) {
				keep = append(keep, m)
				continue
			}
			wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			ok, werr := dcs[i].WaitContext(wctx)
			cancel()
			if werr != nil || !ok {
				keep = append(keep, m) // closed before its confirm (or nacked): resent
				if werr != nil {
					err = werr
				}
				continue
			}
			now := time.Now()
			ld.mu.Lock()
			ld.confirmed[m.body] = true
			ld.maxWait = max(ld.maxWait, now.Sub(m.first))
			ld.maxGap = max(ld.maxGap, now.Sub(lastConfirm))
			ld.mu.Unlock()
			lastConfirm = now
		}
		out = keep
		if err != nil || conn.IsClosed() {
			conn.Close()
			ld.reconnects.Add(1)
			conn, ch, node = ld.dial(ctx, node+1)
			if conn == nil {
				return
			}
			ch.Confirm(false)
		}
	}
}

// consume takes rr-q's messages from the node after q on, acking each;
// when its connection closes it reconnects to the next node.
func (ld *rollingLoad) consume(ctx context.Context, q int) {
	queue := fmt.Sprintf("rr-%d", q)
	node := q + 1
	for {
		conn, ch, at := ld.dial(ctx, node)
		if conn == nil {
			return
		}
		node = at
		ch.Qos(50, 0, false)
		msgs, err := ch.Consume(queue, "", false, false, false, false, nil)
		if err != nil {
			conn.Close()
			node++
			continue
		}
		idle := time.NewTimer(3 * time.Second)
		closed := false
		for !closed {
			select {
			case d, ok := <-msgs:
				if !ok {
					closed = true
					break
				}
				body := string(d.Body)
				ld.mu.Lock()
				ld.seen[body]++
				if ld.seen[body] > 1 && !d.Redelivered {
					ld.unflagged++
				}
				ld.mu.Unlock()
				if err := d.Ack(false); err != nil && !errors.Is(err, amqp.ErrClosed) {
					closed = true
				}
				if !idle.Stop() {
					select {
					case <-idle.C:
					default:
					}
				}
				idle.Reset(3 * time.Second)
			case <-idle.C:
				if ld.drained.Load() {
					conn.Close()
					return
				}
				idle.Reset(3 * time.Second)
			}
		}
		conn.Close()
		ld.reconnects.Add(1)
		node++
	}
}
