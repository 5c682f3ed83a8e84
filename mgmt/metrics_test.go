package mgmt_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

// scrape is a parsed /metrics body.
type scrape struct {
	types  map[string]string  // family -> type
	values map[string]float64 // series key (see seriesKey) -> value
}

func seriesKey(name string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(name)
	for _, k := range keys {
		fmt.Fprintf(&b, "\x00%s\x00%s", k, labels[k])
	}
	return b.String()
}

var (
	metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`)
	labelName  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*`)
	validTypes = map[string]bool{"counter": true, "gauge": true, "untyped": true, "summary": true, "histogram": true}
)

// parseMetrics parses the text exposition format strictly: every family
// has exactly one HELP and one TYPE line before its samples, a family's
// lines are contiguous, every sample is `name{labels} value` with
// correctly escaped label values, and no series appears twice.
func parseMetrics(body string) (*scrape, error) {
	sc := &scrape{types: map[string]string{}, values: map[string]float64{}}
	helps := map[string]int{}
	done := map[string]bool{} // families whose lines have ended
	cur := ""
	if !strings.HasSuffix(body, "\n") {
		return nil, fmt.Errorf("body does not end with a newline")
	}
	for n, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		fail := func(format string, a ...any) error {
			return fmt.Errorf("line %d %q: %s", n+1, line, fmt.Sprintf(format, a...))
		}
		if strings.HasPrefix(line, "#") {
			f := strings.SplitN(line, " ", 4)
			if len(f) < 4 || f[0] != "#" {
				return nil, fail("malformed comment")
			}
			name := f[2]
			if metricName.FindString(name) != name {
				return nil, fail("bad metric name")
			}
			if name != cur {
				if done[name] {
					return nil, fail("family %s reopened", name)
				}
				if cur != "" {
					done[cur] = true
				}
				cur = name
			}
			switch f[1] {
			case "HELP":
				if helps[name]++; helps[name] > 1 {
					return nil, fail("second HELP for %s", name)
				}
			case "TYPE":
				if _, dup := sc.types[name]; dup {
					return nil, fail("second TYPE for %s", name)
				}
				if !validTypes[f[3]] {
					return nil, fail("bad type %q", f[3])
				}
				sc.types[name] = f[3]
			default:
				return nil, fail("unknown comment")
			}
			continue
		}
		name := metricName.FindString(line)
		if name == "" {
			return nil, fail("no metric name")
		}
		if name != cur {
			return nil, fail("sample outside its family (current family %q)", cur)
		}
		if _, ok := sc.types[name]; !ok {
			return nil, fail("sample before TYPE")
		}
		if helps[name] != 1 {
			return nil, fail("sample before HELP")
		}
		rest := line[len(name):]
		labels := map[string]string{}
		if strings.HasPrefix(rest, "{") {
			rest = rest[1:]
			for !strings.HasPrefix(rest, "}") {
				ln := labelName.FindString(rest)
				if ln == "" {
					return nil, fail("bad label name at %q", rest)
				}
				rest = rest[len(ln):]
				if !strings.HasPrefix(rest, `="`) {
					return nil, fail("expected =\" at %q", rest)
				}
				rest = rest[2:]
				var v strings.Builder
				for {
					if rest == "" {
						return nil, fail("unterminated label value")
					}
					c := rest[0]
					rest = rest[1:]
					if c == '"' {
						break
					}
					if c == '\\' {
						if rest == "" {
							return nil, fail("dangling backslash")
						}
						switch rest[0] {
						case '\\':
							v.WriteByte('\\')
						case '"':
							v.WriteByte('"')
						case 'n':
							v.WriteByte('\n')
						default:
							return nil, fail("bad escape \\%c", rest[0])
						}
						rest = rest[1:]
						continue
					}
					v.WriteByte(c)
				}
				if _, dup := labels[ln]; dup {
					return nil, fail("label %s twice", ln)
				}
				labels[ln] = v.String()
				if strings.HasPrefix(rest, ",") {
					rest = rest[1:]
				} else if !strings.HasPrefix(rest, "}") {
					return nil, fail("expected , or } at %q", rest)
				}
			}
			rest = rest[1:]
		}
		if !strings.HasPrefix(rest, " ") || strings.Contains(rest[1:], " ") {
			return nil, fail("expected one space then the value (no timestamp)")
		}
		v, err := strconv.ParseFloat(rest[1:], 64)
		if err != nil {
			return nil, fail("bad value: %v", err)
		}
		k := seriesKey(name, labels)
		if _, dup := sc.values[k]; dup {
			return nil, fail("duplicate series")
		}
		sc.values[k] = v
	}
	for name := range sc.types {
		if helps[name] != 1 {
			return nil, fmt.Errorf("family %s has %d HELP lines", name, helps[name])
		}
	}
	for name := range helps {
		if _, ok := sc.types[name]; !ok {
			return nil, fmt.Errorf("family %s has HELP but no TYPE", name)
		}
	}
	return sc, nil
}

// get returns the value of the series with exactly these labels.
func (sc *scrape) get(name string, kv ...string) (float64, bool) {
	labels := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		labels[kv[i]] = kv[i+1]
	}
	v, ok := sc.values[seriesKey(name, labels)]
	return v, ok
}

func (sc *scrape) want(t *testing.T, want float64, name string, kv ...string) {
	t.Helper()
	got, ok := sc.get(name, kv...)
	if !ok {
		t.Errorf("%s%v: missing", name, kv)
		return
	}
	if got != want {
		t.Errorf("%s%v = %v, want %v", name, kv, got, want)
	}
}

func (sc *scrape) absent(t *testing.T, name string, kv ...string) {
	t.Helper()
	if v, ok := sc.get(name, kv...); ok {
		t.Errorf("%s%v = %v, want no such series", name, kv, v)
	}
}

func getMetrics(t *testing.T, base string) *scrape {
	t.Helper()
	resp, err := http.Get(base + "/metrics") // no credentials: /metrics needs none
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
		t.Fatalf("Content-Type %q", ct)
	}
	sc, err := parseMetrics(string(body))
	if err != nil {
		t.Fatalf("GET /metrics: %v\n%s", err, body)
	}
	return sc
}

// TestMetricsParser checks that the parser TestMetrics relies on rejects
// malformed output.
func TestMetricsParser(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		bad        bool
	}{
		{"ok", "# HELP a x\n# TYPE a gauge\na{q=\"x\\\"y\\\\z\\n\"} 1\na 2\n", false},
		{"no help", "# TYPE a gauge\na 1\n", true},
		{"two helps", "# HELP a x\n# HELP a x\n# TYPE a gauge\na 1\n", true},
		{"two types", "# HELP a x\n# TYPE a gauge\n# TYPE a gauge\na 1\n", true},
		{"bad escape", "# HELP a x\n# TYPE a gauge\na{q=\"\\t\"} 1\n", true},
		{"raw quote", "# HELP a x\n# TYPE a gauge\na{q=\"a\"b\"} 1\n", true},
		{"duplicate", "# HELP a x\n# TYPE a gauge\na 1\na 1\n", true},
		{"reopened", "# HELP a x\n# TYPE a gauge\na 1\n# HELP b x\n# TYPE b gauge\nb 1\n# HELP a y\n", true},
		{"interleaved", "# HELP a x\n# TYPE a gauge\n# HELP b x\n# TYPE b gauge\na 1\n", true},
		{"bad value", "# HELP a x\n# TYPE a gauge\na one\n", true},
		{"no newline", "# HELP a x\n# TYPE a gauge\na 1", true},
	} {
		_, err := parseMetrics(tc.body)
		if (err != nil) != tc.bad {
			t.Errorf("%s: err = %v, want error %v", tc.name, err, tc.bad)
		}
	}
}

func TestMetrics(t *testing.T) {
	b := warrentest.Start(t)
	conn, err := amqp.Dial(b.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	const weird = "we\"ird\\q\nx"
	declare := func(name string, args amqp.Table) {
		t.Helper()
		if _, err := ch.QueueDeclare(name, false, false, false, false, args); err != nil {
			t.Fatalf("declare %q: %v", name, err)
		}
	}
	dlx := amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work.dlq"}
	declare("work.dlq", nil)
	declare("work", dlx)
	declare("work.ttl", amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work.dlq", "x-message-ttl": int32(20)})
	declare("nodlx", nil)
	declare(weird, nil)
	publish := func(q string, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, false, false,
				amqp.Publishing{Body: []byte(fmt.Sprintf("%s-%d", q, i))})
			if err != nil {
				t.Fatal(err)
			}
			if !dc.Wait() {
				t.Fatalf("publish to %q nacked", q)
			}
		}
	}
	get := func(q string) amqp.Delivery {
		t.Helper()
		d, ok, err := ch.Get(q, false)
		if err != nil || !ok {
			t.Fatalf("get %q: ok=%v err=%v", q, ok, err)
		}
		return d
	}
	publish("work", 10)
	// 3 rejected without requeue: dead-lettered to work.dlq.
	for i := 0; i < 3; i++ {
		if err := get("work").Reject(false); err != nil {
			t.Fatal(err)
		}
	}
	// A requeue loop: the same message nacked back 5 times.
	for i := 0; i < 5; i++ {
		if err := get("work").Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}
	// 4 expire in work.ttl and are dead-lettered to work.dlq.
	publish("work.ttl", 4)
	// No DLX: the rejected message is dropped.
	publish("nodlx", 2)
	if err := get("nodlx").Reject(false); err != nil {
		t.Fatal(err)
	}
	publish(weird, 1)
	// A consumer holding 2 unacked messages on a second channel.
	ch2, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch2.Qos(2, 0, false); err != nil {
		t.Fatal(err)
	}
	dels, err := ch2.Consume("work", "c1", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		select {
		case <-dels:
		case <-time.After(5 * time.Second):
			t.Fatal("no delivery")
		}
	}

	var sc *scrape
	testutil.Until(10*time.Second, func() bool { // on a timeout the checks below say what is wrong
		sc = getMetrics(t, b.MgmtURL())
		dlq, _ := sc.get("rabbitmq_queue_messages_ready", "vhost", "/", "queue", "work.dlq")
		unacked, _ := sc.get("rabbitmq_queue_messages_unacked", "vhost", "/", "queue", "work")
		return dlq == 7 && unacked == 2
	})
	q := func(name string) []string { return []string{"vhost", "/", "queue", name} }
	qr := func(name, reason string) []string { return append(q(name), "reason", reason) }

	// Per queue.
	sc.want(t, 5, "rabbitmq_queue_messages_ready", q("work")...)
	sc.want(t, 1, "warren_queue_dead_letter_target", q("work.dlq")...)
	sc.want(t, 0, "warren_queue_dead_letter_target", q("work")...)
	sc.want(t, 2, "rabbitmq_queue_messages_unacked", q("work")...)
	sc.want(t, 7, "rabbitmq_queue_messages", q("work")...)
	sc.want(t, 30, "rabbitmq_queue_messages_ready_bytes", q("work")...) // "work-N": 6 bytes each
	sc.want(t, 12, "rabbitmq_queue_messages_unacked_bytes", q("work")...)
	sc.want(t, 42, "rabbitmq_queue_messages_bytes", q("work")...)
	sc.want(t, 0, "rabbitmq_queue_messages_persistent", q("work")...) // published transient
	sc.want(t, 0, "rabbitmq_queue_messages_persistent_bytes", q("work")...)
	sc.want(t, 1, "rabbitmq_queue_consumers", q("work")...)
	sc.want(t, 10, "rabbitmq_queue_messages_published_total", q("work")...)
	sc.want(t, 10, "warren_queue_messages_delivered_total", q("work")...) // 3 + 5 gets, 2 consumed
	sc.want(t, 0, "warren_queue_messages_acked_total", q("work")...)
	sc.want(t, 5, "warren_queue_messages_redelivered_total", q("work")...) // 4 gets, then the consumer
	sc.want(t, 5, "warren_queue_messages_requeued_total", q("work")...)
	sc.want(t, 3, "warren_queue_messages_dead_lettered_total", qr("work", "rejected")...)
	sc.want(t, 0, "warren_queue_messages_dead_lettered_total", qr("work", "expired")...)
	sc.want(t, 0, "warren_queue_messages_dead_lettered_total", qr("work", "maxlen")...)
	sc.want(t, 0, "warren_queue_messages_dead_lettered_total", qr("work", "delivery_limit")...)
	sc.want(t, 0, "warren_queue_messages_dropped_total", qr("work", "rejected")...)
	sc.want(t, 0, "rabbitmq_queue_messages_ready", q("work.ttl")...)
	sc.want(t, 4, "rabbitmq_queue_messages_published_total", q("work.ttl")...)
	sc.want(t, 4, "warren_queue_messages_dead_lettered_total", qr("work.ttl", "expired")...)
	sc.want(t, 0, "warren_queue_messages_dead_lettered_total", qr("work.ttl", "rejected")...)
	sc.want(t, 7, "rabbitmq_queue_messages_ready", q("work.dlq")...)
	sc.want(t, 7, "rabbitmq_queue_messages_published_total", q("work.dlq")...)
	sc.want(t, 0, "rabbitmq_queue_consumers", q("work.dlq")...)
	sc.want(t, 1, "rabbitmq_queue_messages_ready", q("nodlx")...)
	sc.want(t, 1, "warren_queue_messages_dropped_total", qr("nodlx", "rejected")...)
	sc.want(t, 0, "warren_queue_messages_dead_lettered_total", qr("nodlx", "rejected")...)
	sc.want(t, 1, "rabbitmq_queue_messages_ready", q(weird)...) // label escaping round-trips

	// Global.
	dl := func(reason, qt, strategy string) string {
		// R3.12: dead-letter counters per queue_type and dead_letter_strategy, under RabbitMQ's names.
		return "rabbitmq_global_messages_dead_lettered_" + reason + "_total\x00" + qt + "\x00" + strategy
	}
	wantDL := map[string]float64{
		dl("rejected", "rabbit_classic_queue", "at_most_once"): 3,
		dl("rejected", "rabbit_classic_queue", "disabled"):     1,
		dl("expired", "rabbit_classic_queue", "at_most_once"):  4,
	}
	// Every series RabbitMQ 3.10 exposes is there; only the above are non-zero.
	for _, s := range []string{
		dl("confirmed", "rabbit_quorum_queue", "at_least_once"),
		dl("delivery_limit", "rabbit_quorum_queue", "at_least_once"),
		dl("delivery_limit", "rabbit_quorum_queue", "at_most_once"),
		dl("delivery_limit", "rabbit_quorum_queue", "disabled"),
		dl("expired", "rabbit_classic_queue", "at_most_once"),
		dl("expired", "rabbit_classic_queue", "disabled"),
		dl("expired", "rabbit_quorum_queue", "at_least_once"),
		dl("expired", "rabbit_quorum_queue", "at_most_once"),
		dl("expired", "rabbit_quorum_queue", "disabled"),
		dl("maxlen", "rabbit_classic_queue", "at_most_once"),
		dl("maxlen", "rabbit_classic_queue", "disabled"),
		dl("maxlen", "rabbit_quorum_queue", "at_most_once"),
		dl("maxlen", "rabbit_quorum_queue", "disabled"),
		dl("rejected", "rabbit_classic_queue", "at_most_once"),
		dl("rejected", "rabbit_classic_queue", "disabled"),
		dl("rejected", "rabbit_quorum_queue", "at_least_once"),
		dl("rejected", "rabbit_quorum_queue", "at_most_once"),
		dl("rejected", "rabbit_quorum_queue", "disabled"),
	} {
		f := strings.Split(s, "\x00")
		sc.want(t, wantDL[s], f[0], "queue_type", f[1], "dead_letter_strategy", f[2])
	}
	for _, f := range []string{"confirmed", "delivery_limit", "expired", "maxlen", "rejected"} {
		if typ := sc.types["rabbitmq_global_messages_dead_lettered_"+f+"_total"]; typ != "counter" {
			t.Errorf("dead_lettered_%s type %q", f, typ)
		}
	}
	amqp091 := []string{"protocol", "amqp091"}
	sc.want(t, 17, "rabbitmq_global_messages_received_total", amqp091...)
	sc.want(t, 17, "rabbitmq_global_messages_confirmed_total", amqp091...)
	sc.want(t, 0, "rabbitmq_global_messages_unroutable_returned_total", amqp091...)
	sc.want(t, 11, "rabbitmq_global_messages_delivered_total", amqp091...)
	sc.want(t, 9, "rabbitmq_global_messages_delivered_get_manual_ack_total", amqp091...)
	sc.want(t, 2, "rabbitmq_global_messages_delivered_consume_manual_ack_total", amqp091...)
	sc.want(t, 0, "rabbitmq_global_messages_delivered_consume_auto_ack_total", amqp091...)
	sc.want(t, 0, "rabbitmq_global_messages_delivered_get_auto_ack_total", amqp091...)
	sc.want(t, 5, "rabbitmq_global_messages_redelivered_total", amqp091...)
	sc.want(t, 0, "rabbitmq_global_messages_acknowledged_total", amqp091...)
	sc.want(t, 4, "warren_global_messages_rejected_total", amqp091...)
	sc.want(t, 5, "warren_global_messages_requeued_total", amqp091...)
	sc.want(t, 1, "rabbitmq_connections")
	sc.want(t, 2, "rabbitmq_channels")
	sc.want(t, 1, "rabbitmq_consumers")
	sc.want(t, 1, "rabbitmq_global_consumers", amqp091...)
	sc.want(t, 5, "rabbitmq_queues")
	sc.want(t, 0, "rabbitmq_alarms_memory_used_watermark")
	sc.want(t, 0, "rabbitmq_alarms_free_disk_space_watermark")
	sc.want(t, 0, "rabbitmq_alarms_file_descriptor_limit")
	cfg := b.Server().Config()
	sc.want(t, float64(cfg.MemoryHighWatermark), "rabbitmq_resident_memory_limit_bytes")
	sc.want(t, float64(cfg.DiskFreeLimit), "rabbitmq_disk_space_available_limit_bytes")
	for _, name := range []string{"rabbitmq_process_resident_memory_bytes", "rabbitmq_disk_space_available_bytes", "process_resident_memory_bytes"} {
		if v, ok := sc.get(name); !ok || v <= 0 {
			t.Errorf("%s = %v, %v; want > 0", name, v, ok)
		}
	}
	for name, typ := range map[string]string{"rabbitmq_queue_messages_ready": "gauge", "warren_queue_messages_requeued_total": "counter",
		"rabbitmq_global_messages_received_total": "counter", "rabbitmq_alarms_memory_used_watermark": "untyped"} {
		if sc.types[name] != typ {
			t.Errorf("TYPE %s = %q, want %s", name, sc.types[name], typ)
		}
	}
	var identity bool
	for k := range sc.values {
		if strings.HasPrefix(k, "rabbitmq_identity_info\x00") && strings.Contains(k, "\x00rabbitmq_node\x00warren@") {
			identity = true
		}
	}
	if !identity {
		t.Errorf("no rabbitmq_identity_info{rabbitmq_node=\"warren@...\"}")
	}

	// Closing the consumer's channel returns its 2 unacked messages.
	if err := ch2.Close(); err != nil {
		t.Fatal(err)
	}
	// Deleting work.ttl keeps the global dead-letter totals (they are
	// counters); its own series go.
	if _, err := ch.QueueDelete("work.ttl", false, false, false); err != nil {
		t.Fatal(err)
	}
	testutil.Until(5*time.Second, func() bool { // on a timeout the checks below say what is wrong
		sc = getMetrics(t, b.MgmtURL())
		v, _ := sc.get("rabbitmq_channels")
		return v == 1
	})
	sc.want(t, 1, "rabbitmq_channels")
	sc.want(t, 0, "rabbitmq_consumers")
	sc.want(t, 7, "rabbitmq_queue_messages_ready", q("work")...)
	sc.want(t, 0, "rabbitmq_queue_messages_unacked", q("work")...)
	sc.want(t, 7, "warren_queue_messages_requeued_total", q("work")...)
	sc.want(t, 4, "rabbitmq_queues")
	sc.absent(t, "rabbitmq_queue_messages_ready", q("work.ttl")...)
	sc.absent(t, "warren_queue_messages_dead_lettered_total", qr("work.ttl", "expired")...)
	sc.want(t, 4, "rabbitmq_global_messages_dead_lettered_expired_total", "queue_type", "rabbit_classic_queue", "dead_letter_strategy", "at_most_once")
	sc.want(t, 3, "rabbitmq_global_messages_dead_lettered_rejected_total", "queue_type", "rabbit_classic_queue", "dead_letter_strategy", "at_most_once")
	// Scraped again, the deleted queue is counted once, not twice.
	sc = getMetrics(t, b.MgmtURL())
	sc.want(t, 4, "rabbitmq_global_messages_dead_lettered_expired_total", "queue_type", "rabbit_classic_queue", "dead_letter_strategy", "at_most_once")
}
