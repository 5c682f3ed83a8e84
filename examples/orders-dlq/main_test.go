package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/warrentest"
)

func testConfig(url string) config {
	return config{URL: url, TTL: 50 * time.Millisecond, Loop: 200, DeliveryLimit: 3, Timeout: 5 * time.Second}
}

func runExample(t *testing.T, cfg config) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, cfg, &out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	return out.String()
}

// sections splits the output on its "=== title ===" lines.
func sections(out string) map[string][]string {
	s := map[string][]string{}
	var title string
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\n")
		if strings.HasPrefix(line, "=== ") && strings.HasSuffix(line, " ===") {
			title = strings.TrimSuffix(strings.TrimPrefix(line, "=== "), " ===")
			s[title] = []string{}
			continue
		}
		if title != "" && line != "" {
			s[title] = append(s[title], line)
		}
	}
	return s
}

// expectLines checks that section title holds want, in that order (other
// lines may come between).
func expectLines(t *testing.T, s map[string][]string, title string, want ...string) {
	t.Helper()
	got, ok := s[title]
	if !ok {
		t.Errorf("no section %q in the output", title)
		return
	}
	i := 0
	for _, l := range got {
		if i < len(want) && l == want[i] {
			i++
		}
	}
	if i < len(want) {
		t.Errorf("section %q: missing line %q (in order)\ngot:\n%s", title, want[i], strings.Join(got, "\n"))
	}
}

var timeLine = regexp.MustCompile(`^time [A-Z][a-z]{2} [A-Z][a-z]{2} \d\d \d\d:\d\d:\d\d \S+ \d{4}$`)

// checkSeedFacts checks the facts of the seed chapter and of issue 3's
// examples section, which hold on Warren and on RabbitMQ alike.
func checkSeedFacts(t *testing.T, out string) map[string][]string {
	t.Helper()
	s := sections(out)

	// R3.1, R3.4, R5.2: nack(requeue=false) -> rejected, fields of the first event.
	expectLines(t, s, "x-death after basicNack(requeue=false)",
		"reason rejected", "count 1", "exchange", "routing-keys [orders.work]", "queue orders.work")
	if got := s["x-death after basicNack(requeue=false)"]; len(got) != 6 || !timeLine.MatchString(got[3]) {
		t.Errorf("nack x-death is not the seed's six lines with a time: %q", got)
	}
	// R2.2, R3.1: TTL expiry -> expired.
	expectLines(t, s, "x-death after x-message-ttl expiry",
		"reason expired", "count 1", "routing-keys [orders.ttl]", "queue orders.ttl")
	// R4.2: drop-head dead-letters the oldest, m-1.
	expectLines(t, s, "x-death after x-max-length overflow",
		"reason maxlen", "count 1", "queue orders.bounded",
		`body {"orderId":"m-1","detail":"detail for m-1"}`,
		"still in orders.bounded [m-2 m-3]")
	// R5.1: requeue=true never dead-letters.
	expectLines(t, s, "basicNack(requeue=true) loop, 200 deliveries",
		"redelivered 199 times", "dead-lettered 0", "still on queue 1")
	// The redelivered flag as a one-retry budget.
	expectLines(t, s, "one retry on the redelivered flag",
		"delivery 1 redelivered=false: basicNack(requeue=true)",
		"delivery 2 redelivered=true: basicNack(requeue=false)")
	expectLines(t, s, "x-death after one retry",
		"reason rejected", "count 1", "routing-keys [orders.work]", "queue orders.work")
	// R3.4 ordering, R3.8 (a reject in the loop keeps it delivered): the
	// delay-queue retry comes back with both entries, most recent first.
	expectLines(t, s, "retry through the delay queue orders.delay (x-message-ttl 50ms)",
		"attempt 1 failed: basicReject(requeue=false) -> orders.retry.dlx -> orders.delay")
	if !slices.ContainsFunc(s["retry through the delay queue orders.delay (x-message-ttl 50ms)"], func(l string) bool {
		return strings.HasPrefix(l, "attempt 2 after ") && strings.HasSuffix(l, "(>= ttl: true), routing key order.created: succeeded, acked")
	}) {
		t.Errorf("delay-queue retry did not come back after the TTL on order.created:\n%s", out)
	}
	expectLines(t, s, "x-death of the retried message",
		"--- x-death[0] ---", "reason expired", "count 1", "exchange orders.retry.dlx", "routing-keys [delay]", "queue orders.delay",
		"--- x-death[1] ---", "reason rejected", "count 1", "exchange orders", "routing-keys [order.created]", "queue orders.retry")
	if t.Failed() {
		t.Logf("full output:\n%s", out)
	}
	return s
}

func TestOrdersDLQOnWarren(t *testing.T) {
	b := warrentest.Start(t)
	cfg := testConfig(b.URL())
	out := runExample(t, cfg)
	s := checkSeedFacts(t, out)

	// Beyond RabbitMQ: x-delivery-limit on a classic queue stops the
	// seed's own loop, basicNack(tag, false, true), after limit+1
	// deliveries: on classic queues every return counts (issue 11 item 15,
	// Warren's extension of R5.3).
	title := fmt.Sprintf("x-delivery-limit %d, basicNack(requeue=true) loop", cfg.DeliveryLimit)
	expectLines(t, s, title,
		fmt.Sprintf("deliveries %d", cfg.DeliveryLimit+1),
		fmt.Sprintf("x-delivery-count on the last delivery %d", cfg.DeliveryLimit),
		"dead-lettered to orders.dlq")
	expectLines(t, s, "x-death after x-delivery-limit",
		"reason delivery_limit", "count 1", "routing-keys [orders.limited]", "queue orders.limited")
	if strings.Contains(out, "note:") {
		t.Errorf("Warren refused x-delivery-limit:\n%s", out)
	}

	// Everything it declared is gone, so it runs again on the same broker,
	// even with another TTL (the queues are redeclared with new arguments).
	cfg.TTL = 80 * time.Millisecond
	out = runExample(t, cfg)
	if !strings.Contains(out, "=== retry through the delay queue orders.delay (x-message-ttl 80ms) ===") ||
		!strings.Contains(out, "redelivered 199 times\ndead-lettered 0\nstill on queue 1\n") {
		t.Errorf("second run differs:\n%s", out)
	}
}

// TestOrdersDLQOnRabbitMQ runs the example against a real RabbitMQ when
// WARREN_RABBITMQ_URL names one. RabbitMQ shows the same seed facts; its
// classic queues refuse x-delivery-limit, which the example reports.
func TestOrdersDLQOnRabbitMQ(t *testing.T) {
	url := os.Getenv("WARREN_RABBITMQ_URL")
	if url == "" {
		t.Skip("WARREN_RABBITMQ_URL not set")
	}
	cfg := testConfig(url)
	out := runExample(t, cfg)
	checkSeedFacts(t, out)
	if !strings.Contains(out, "note: this broker refused x-delivery-limit on classic queue orders.limited:") {
		t.Logf("RabbitMQ accepted x-delivery-limit on a classic queue (newer than 3.10?):\n%s", out)
	}
}
