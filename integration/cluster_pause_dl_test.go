package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testutil"
)

// TestQuorumPausedLeaderDeadLettersOnce: issue 22 item 8. A quorum
// queue's leader paused with SIGSTOP while its messages expired woke and
// dead-lettered its whole backlog in the moment before it learned it had
// lost the leadership, which the new leader had already dead-lettered: 1,000
// expired messages arrived about 2,000 times, unflagged. Now a dead
// letter is published only once the command that takes it out of the
// queue has committed (a Remove at most once, a Discard mark at least
// once), so the deposed leader publishes none: each arrives once, or
// flagged redelivered.
func TestQuorumPausedLeaderDeadLettersOnce(t *testing.T) {
	testutil.Long(t, "pauses a quorum leader in a three-process cluster, twice, about 40 s")
	if testing.Short() {
		t.Skip("runs a three-process cluster and pauses a leader")
	}
	for _, strategy := range []string{"at-most-once", "at-least-once"} {
		t.Run(strategy, func(t *testing.T) { pausedLeaderDeadLetters(t, strategy) })
	}
}

func pausedLeaderDeadLetters(t *testing.T, strategy string) {
	c := startProcCluster(t, 3, procClusterOpts{})
	c.waitClusterReady(t)
	_, ch := rsDial(t, c.URL(0))
	_, err := ch.QueueDeclare("dlq", true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	rsCheck(t, "declare dlq", err)
	args := amqp.Table{"x-queue-type": "quorum", "x-message-ttl": int32(4000),
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
	if strategy == "at-least-once" {
		args["x-dead-letter-strategy"] = "at-least-once"
		args["x-overflow"] = "reject-publish"
	}
	_, err = ch.QueueDeclare("src", true, false, false, false, args)
	rsCheck(t, "declare src", err)
	leaderOf := func(q string) int {
		var info struct {
			Leader string `json:"leader"`
		}
		if err := c.getJSON(0, "/api/queues/%2F/"+q, &info); err != nil {
			return -1
		}
		for i := range 3 {
			if c.Name(i) == info.Leader {
				return i
			}
		}
		return -1
	}
	var lead int
	if !testutil.Until(20*time.Second, func() bool { lead = leaderOf("src"); return lead >= 0 }) {
		t.Fatal("src has no leader")
	}
	other := (lead + 1) % 3
	_, pch := rsDial(t, c.URL(other))
	rsCheck(t, "confirm select", pch.Confirm(false))
	const n = 1000
	start := time.Now()
	var confs []*amqp.DeferredConfirmation
	for i := range n {
		dc, err := pch.PublishWithDeferredConfirmWithContext(context.Background(), "", "src", false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(fmt.Sprintf("m-%04d", i))})
		rsCheck(t, "publish", err)
		confs = append(confs, dc)
	}
	for i, dc := range confs {
		if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
			t.Fatalf("publish %d not confirmed: %v %v", i, ok, err)
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Logf("publishing took %s: the messages may expire before the pause", d)
	}
	// Pause the leader before the messages expire, past their expiry
	// and a new leader's election; then wake it.
	c.Pause(lead)
	time.Sleep(8 * time.Second)
	c.Resume(lead)

	_, cch := rsDial(t, c.URL(other))
	rsCheck(t, "qos", cch.Qos(100, 0, false))
	msgs, err := cch.Consume("dlq", "", false, false, false, false, nil)
	rsCheck(t, "consume dlq", err)
	seen := map[string]int{}
	unflagged := 0
	idle := time.NewTimer(6 * time.Second)
	for done := false; !done; {
		select {
		case d, ok := <-msgs:
			if !ok {
				t.Fatal("the dlq consumer was cancelled")
			}
			body := string(d.Body)
			if !strings.HasPrefix(body, "m-") {
				t.Fatalf("unexpected dead letter %q", body)
			}
			seen[body]++
			if seen[body] > 1 && !d.Redelivered {
				unflagged++
			}
			d.Ack(false)
			if !idle.Stop() {
				<-idle.C
			}
			idle.Reset(6 * time.Second)
		case <-idle.C:
			done = true
		}
	}
	dups := 0
	for _, k := range seen {
		dups += k - 1
	}
	t.Logf("%s: %d dead letters of %d messages, %d duplicates (%d unflagged), leader %s paused",
		strategy, len(seen), n, dups, unflagged, c.Name(lead))
	if unflagged > 0 {
		t.Fatalf("%s: %d dead letters arrived twice without redelivered (%d distinct of %d)", strategy, unflagged, len(seen), n)
	}
	if strategy == "at-least-once" && len(seen) != n {
		t.Fatalf("at-least-once: %d of %d messages dead-lettered", len(seen), n)
	}
}
