package main

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/warrentest"
)

const (
	okPhone   = "13800000001"
	failPhone = "13800000002"
)

func testConfig(t *testing.T, url string) config {
	return config{
		URL:        url,
		Delay1:     100 * time.Millisecond,
		Delay2:     200 * time.Millisecond,
		MaxRetries: 2,
		Phones:     []string{okPhone, failPhone},
		Failing:    []string{failPhone},
		DB:         filepath.Join(t.TempDir(), "dead-letters.db"),
		Timeout:    10 * time.Second,
	}
}

func runExample(t *testing.T, cfg config) (string, time.Duration) {
	t.Helper()
	var out bytes.Buffer
	start := time.Now()
	if err := run(context.Background(), cfg, &out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	return out.String(), time.Since(start)
}

type deadLetter struct {
	msgID, mobile, reason, queue string
	retries                      int
}

func readDeadLetters(t *testing.T, path string) []deadLetter {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT msg_id, mobile, retry_count, reason, source_queue FROM dead_letters ORDER BY msg_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []deadLetter
	for rows.Next() {
		var d deadLetter
		if err := rows.Scan(&d.msgID, &d.mobile, &d.retries, &d.reason, &d.queue); err != nil {
			t.Fatal(err)
		}
		got = append(got, d)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// stamp is the "[  0.12s] " prefix of every line.
var stamp = regexp.MustCompile(`^\[ *(\d+\.\d\d)s\] `)

// linesAbout returns the lines mentioning s, without their time stamps,
// and the time stamp of the last of them.
func linesAbout(out, s string) (lines []string, last float64) {
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\n")
		if !strings.Contains(line, s) {
			continue
		}
		if m := stamp.FindStringSubmatch(line); m != nil {
			last, _ = strconv.ParseFloat(m[1], 64)
			line = line[len(m[0]):]
		}
		lines = append(lines, line)
	}
	return lines, last
}

// checkRun checks one run of the example: the seed's schedule (retry after
// delay1, then delay2, then the DLQ), the alert and the SQLite row.
func checkRun(t *testing.T, cfg config, out string) {
	t.Helper()
	defer func() {
		if t.Failed() {
			t.Logf("full output:\n%s", out)
		}
	}()
	// The working number is sent at the first attempt.
	if !strings.Contains(out, "attempt 1 to "+okPhone+" (x-retry-count 0): sent\n") {
		t.Errorf("%s was not sent at the first attempt", okPhone)
	}
	if lines, _ := linesAbout(out, "attempt 2 to "+okPhone); len(lines) != 0 {
		t.Errorf("%s was retried: %q", okPhone, lines)
	}

	// The failing number: retried after delay1, then delay2, then the DLQ
	// after its third failure (the retry count is the application's header).
	const gwErr = "gateway: 503 upstream carrier unavailable"
	want := []string{
		"attempt 1 to " + failPhone + " (x-retry-count 0): " + gwErr + "; retry 1 in 100ms via sms.retry.1.queue",
		"attempt 2 to " + failPhone + " (x-retry-count 1), back from sms.retry.1.queue: " + gwErr + "; retry 2 in 200ms via sms.retry.2.queue",
		"attempt 3 to " + failPhone + " (x-retry-count 2), back from sms.retry.2.queue: " + gwErr + "; retries exhausted: basicNack(requeue=false) -> sms.dlx.exchange",
	}
	got, lastAttempt := linesAbout(out, "to "+failPhone+" (x-retry-count")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("attempts for %s:\ngot:\n%s\nwant:\n%s", failPhone, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The delays were waited for: delay1 + delay2 = 0.3s before the last attempt.
	if lastAttempt < 0.3 {
		t.Errorf("last attempt at %.2fs, before the retry delays (0.3s) had passed", lastAttempt)
	}

	// The DLQ consumer raised the alert.
	alerts, _ := linesAbout(out, "ALERT SMS_DEAD_LETTER")
	if len(alerts) != 1 || !strings.HasPrefix(alerts[0], "ALERT SMS_DEAD_LETTER: SMS to "+failPhone+" failed after 2 retries (msgId sms-") ||
		!strings.HasSuffix(alerts[0], ", x-death reason rejected from sms.normal.queue)") {
		t.Errorf("want one alert for %s after 2 retries, rejected from sms.normal.queue; got %q", failPhone, alerts)
	}
	if !strings.Contains(out, "done: 1 sent, 1 dead-lettered\n") {
		t.Errorf("missing the final count")
	}

	// And recorded the message in SQLite, read here independently.
	rows := readDeadLetters(t, cfg.DB)
	if len(rows) != 1 {
		t.Fatalf("dead_letters has %d rows, want 1: %+v", len(rows), rows)
	}
	r := rows[0]
	if r.mobile != failPhone || r.retries != 2 || r.reason != "rejected" || r.queue != "sms.normal.queue" {
		t.Errorf("dead_letters row = %+v, want mobile %s, retry_count 2, reason rejected, source_queue sms.normal.queue", r, failPhone)
	}
	if !strings.Contains(alerts[0], "(msgId "+r.msgID+",") {
		t.Errorf("the alert and the row name different messages: %q vs %s", alerts[0], r.msgID)
	}
	if !strings.Contains(out, "dead_letters msg_id="+r.msgID+" mobile="+failPhone+" retry_count=2 reason=rejected source_queue=sms.normal.queue\n") {
		t.Errorf("the run did not print its SQLite row")
	}
}

func TestSMSRetryOnWarren(t *testing.T) {
	b := warrentest.Start(t)
	cfg := testConfig(t, b.URL())
	out, took := runExample(t, cfg)
	checkRun(t, cfg, out)
	if took > 3*time.Second {
		t.Errorf("took %v; the test delays should make it about half a second", took)
	}

	// Everything was deleted: it runs again on the same broker, even with
	// other delays, and records into the same file once more.
	cfg.Delay1, cfg.Delay2 = 50*time.Millisecond, 60*time.Millisecond
	out, _ = runExample(t, cfg)
	if !strings.Contains(out, "retry 1 in 50ms via sms.retry.1.queue") ||
		!strings.Contains(out, "ALERT SMS_DEAD_LETTER: SMS to "+failPhone+" failed after 2 retries") {
		t.Errorf("second run:\n%s", out)
	}
	if rows := readDeadLetters(t, cfg.DB); len(rows) != 2 {
		t.Errorf("after two runs dead_letters has %d rows, want 2: %+v", len(rows), rows)
	}
}

func TestSMSRetryNothingFails(t *testing.T) {
	b := warrentest.Start(t)
	cfg := testConfig(t, b.URL())
	cfg.Failing = nil
	out, _ := runExample(t, cfg)
	if strings.Contains(out, "ALERT") || strings.Contains(out, "; retry ") {
		t.Errorf("nothing fails, yet:\n%s", out)
	}
	if !strings.Contains(out, "done: 2 sent, 0 dead-lettered\n") {
		t.Errorf("want 2 sent:\n%s", out)
	}
	if rows := readDeadLetters(t, cfg.DB); len(rows) != 0 {
		t.Errorf("dead_letters: %+v", rows)
	}
}

// TestSMSRetryOnRabbitMQ runs the example against a real RabbitMQ when
// WARREN_RABBITMQ_URL names one.
func TestSMSRetryOnRabbitMQ(t *testing.T) {
	url := os.Getenv("WARREN_RABBITMQ_URL")
	if url == "" {
		t.Skip("WARREN_RABBITMQ_URL not set")
	}
	cfg := testConfig(t, url)
	out, _ := runExample(t, cfg)
	checkRun(t, cfg, out)
}
