package bridge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/server"
	"github.com/warrenmq/warren/warrentest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// client keeps no idle connections (the leak check would see them).
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}

// api calls a management API as guest and returns the status and body.
func api(t *testing.T, method, base, path string, body any) (int, []byte) {
	t.Helper()
	return apiAs(t, "guest", "guest", method, base, path, body)
}

// apiAs is api as another user.
func apiAs(t *testing.T, user, pass, method, base, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(user, pass)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// rabbit returns RabbitMQ's AMQP and management URLs, or skips (fails
// under CI=true) when it does not run here.
func rabbit(t *testing.T) (amqpURL, mgmtURL string) {
	t.Helper()
	amqpURL, mgmtURL = "amqp://guest:guest@127.0.0.1:5672/", "http://127.0.0.1:15672"
	if u := os.Getenv("WARREN_RABBITMQ_AMQP_URL"); u != "" {
		amqpURL = u
	}
	if u := os.Getenv("WARREN_RABBITMQ_MGMT_URL"); u != "" {
		mgmtURL = strings.TrimRight(u, "/")
	}
	pu, _ := url.Parse(amqpURL)
	nc, err := net.DialTimeout("tcp", pu.Host, 2*time.Second)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("RabbitMQ %s not reachable under CI=true: %v", pu.Host, err)
		}
		t.Skipf("RabbitMQ %s not reachable (%v): start one to run the shovels against it", pu.Host, err)
	}
	nc.Close()
	return amqpURL, mgmtURL
}

// needPlugin skips (fails under CI=true, where CI enables them) when
// RabbitMQ's API has no path: its plugins are not enabled.
func needPlugin(t *testing.T, mgmt, path, plugins string) {
	t.Helper()
	if st, body := api(t, "GET", mgmt, path, nil); st != 200 {
		msg := fmt.Sprintf("RabbitMQ's %s answers %d %s: rabbitmq-plugins enable %s", path, st, body, plugins)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

func channel(t *testing.T, url string) *amqp.Channel {
	t.Helper()
	c, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// publish puts n persistent messages "<prefix>-<i>" into queue q.
func publish(t *testing.T, ch *amqp.Channel, q, prefix string, n int) {
	t.Helper()
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, false, false,
			amqp.Publishing{Body: fmt.Appendf(nil, "%s-%d", prefix, i), DeliveryMode: amqp.Persistent,
				Headers: amqp.Table{"i": int32(i)}, MessageId: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		if i == n-1 && !dc.Wait() {
			t.Fatal("nacked")
		}
	}
}

// drain gets every message of q (waiting up to d for n), in order.
func drain(t *testing.T, ch *amqp.Channel, q string, n int, d time.Duration) []amqp.Delivery {
	t.Helper()
	var out []amqp.Delivery
	deadline := time.Now().Add(d)
	for len(out) < n && time.Now().Before(deadline) {
		m, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		out = append(out, m)
	}
	return out
}

func checkInOrder(t *testing.T, got []amqp.Delivery, prefix string, n int) {
	t.Helper()
	if len(got) != n {
		t.Fatalf("%d messages, want %d", len(got), n)
	}
	for i, m := range got {
		if string(m.Body) != fmt.Sprintf("%s-%d", prefix, i) || m.MessageId != fmt.Sprint(i) || m.DeliveryMode != amqp.Persistent {
			t.Fatalf("message %d: %q id %q mode %d", i, m.Body, m.MessageId, m.DeliveryMode)
		}
	}
}

// TestShovelWithinWarren: issue 24. A shovel between two queues of this
// broker (amqp:// on both sides: direct connections as the user who
// defined it) moves the messages in order, finishes after queue-length
// and deletes its parameter, as RabbitMQ's.
func TestShovelWithinWarren(t *testing.T) {
	w := warrentest.Start(t)
	ch := channel(t, w.URL())
	publish(t, ch, "sw-src", "m", 200)
	st, body := api(t, "PUT", w.MgmtURL(), "/api/parameters/shovel/%2F/sw", map[string]any{"value": map[string]any{
		"src-uri": "amqp://", "src-queue": "sw-src", "dest-uri": "amqp:///%2F", "dest-queue": "sw-dest",
		"src-delete-after": "queue-length"}})
	if st != 201 {
		t.Fatalf("PUT: %d %s", st, body)
	}
	testutil.Eventually(t, 10*time.Second, "the shovel finished and its parameter went", func() bool {
		st, _ := api(t, "GET", w.MgmtURL(), "/api/parameters/shovel/%2F/sw", nil)
		return st == 404
	})
	checkInOrder(t, drain(t, ch, "sw-dest", 200, 5*time.Second), "m", 200)
	if q, err := ch.QueueDeclarePassive("sw-src", true, false, false, false, nil); err != nil || q.Messages != 0 {
		t.Fatalf("source: %+v %v", q, err)
	}
}

// TestShovelRabbitMQBothWays: issue 24 (must-show 1). Shovels defined on
// Warren move messages from a RabbitMQ queue into Warren and from Warren
// into RabbitMQ, with each ack mode and each src-delete-after mode: every
// message arrives once and in order, a bounded shovel stops where it
// should (the rest stays in the source) and deletes its parameter, an
// unbounded one keeps moving what comes later.
func TestShovelRabbitMQBothWays(t *testing.T) {
	rabbitURL, _ := rabbit(t)
	w := warrentest.Start(t)
	wch, rch := channel(t, w.URL()), channel(t, rabbitURL)
	run := 0
	for _, dir := range []string{"rabbitmq-to-warren", "warren-to-rabbitmq"} {
		for _, ack := range []string{"on-confirm", "on-publish", "no-ack"} {
			for _, del := range []any{"queue-length", 60, "never"} {
				if _, num := del.(int); num && ack == "no-ack" {
					continue // refused, as RabbitMQ refuses it
				}
				run++
				name := fmt.Sprintf("bw-%d-%d", run, time.Now().UnixNano()%1e6)
				t.Run(fmt.Sprintf("%s/%s/%v", dir, ack, del), func(t *testing.T) {
					srcCh, destCh, srcURI := rch, wch, rabbitURL
					if dir == "warren-to-rabbitmq" {
						srcCh, destCh, srcURI = wch, rch, "amqp://"
					}
					destURI := "amqp://"
					if dir == "warren-to-rabbitmq" {
						destURI = rabbitURL
					}
					const n = 100
					publish(t, srcCh, name+"-src", "m", n)
					if _, err := destCh.QueueDeclare(name+"-dest", true, false, false, false, nil); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() {
						srcCh.QueueDelete(name+"-src", false, false, false)
						destCh.QueueDelete(name+"-dest", false, false, false)
					})
					st, body := api(t, "PUT", w.MgmtURL(), "/api/parameters/shovel/%2F/"+name, map[string]any{"value": map[string]any{
						"src-uri": srcURI, "src-queue": name + "-src", "dest-uri": destURI, "dest-queue": name + "-dest",
						"ack-mode": ack, "src-delete-after": del, "src-prefetch-count": 25}})
					if st != 201 {
						t.Fatalf("PUT: %d %s", st, body)
					}
					want := n
					if k, ok := del.(int); ok {
						want = k
					}
					checkInOrder(t, drain(t, destCh, name+"-dest", want, 15*time.Second), "m", want)
					if del == "never" {
						// Still running: what comes later moves too.
						st, body := api(t, "GET", w.MgmtURL(), "/api/shovels/%2F", nil)
						if st != 200 || !strings.Contains(string(body), `"name":"`+name+`","vhost":"/","type":"dynamic","state":"running"`) {
							t.Fatalf("status: %d %s", st, body)
						}
						publish(t, srcCh, name+"-src", "later", 5)
						checkInOrder(t, drain(t, destCh, name+"-dest", 5, 10*time.Second), "later", 5)
						if st, body := api(t, "DELETE", w.MgmtURL(), "/api/parameters/shovel/%2F/"+name, nil); st != 204 {
							t.Fatalf("DELETE: %d %s", st, body)
						}
						return
					}
					testutil.Eventually(t, 10*time.Second, "the shovel finished and its parameter went", func() bool {
						st, _ := api(t, "GET", w.MgmtURL(), "/api/parameters/shovel/%2F/"+name, nil)
						return st == 404
					})
					// What it did not take stays in the source (unacked
					// prefetched ones back in the queue, in order).
					left := drain(t, srcCh, name+"-src", n-want, 10*time.Second)
					if len(left) != n-want {
						t.Fatalf("%d left in the source, want %d", len(left), n-want)
					}
					for i, m := range left {
						if string(m.Body) != fmt.Sprintf("m-%d", want+i) {
							t.Fatalf("left %d: %q", i, m.Body)
						}
					}
					if extra := drain(t, destCh, name+"-dest", 1, 300*time.Millisecond); len(extra) != 0 {
						t.Fatalf("more than %d moved: %q", want, extra[0].Body)
					}
				})
			}
		}
	}
}

// TestShovelMatchesRabbitMQ: issue 24 (must-show 1). The same shovel
// defined on RabbitMQ 3.10.8 (its shovel plugin, moving from RabbitMQ
// into Warren) and on Warren (moving from RabbitMQ into Warren): both
// deliver, the x-shovelled and x-shovelled-timestamp headers they add
// have the same shape, and /api/shovels shows the same fields (Warren
// adds RabbitMQ 4.1's "forwarded").
func TestShovelMatchesRabbitMQ(t *testing.T) {
	rabbitURL, rabbitMgmt := rabbit(t)
	needPlugin(t, rabbitMgmt, "/api/shovels", "rabbitmq_shovel rabbitmq_shovel_management")
	w := warrentest.Start(t)
	wch, rch := channel(t, w.URL()), channel(t, rabbitURL)
	id := fmt.Sprint(time.Now().UnixNano() % 1e7)
	name := "cmp-" + id
	for _, q := range []string{"r-src-" + id, "w-src-" + id} {
		if _, err := rch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		api(t, "DELETE", rabbitMgmt, "/api/parameters/shovel/%2F/"+name, nil)
		rch.QueueDelete("r-src-"+id, false, false, false)
		rch.QueueDelete("w-src-"+id, false, false, false)
	})
	common := map[string]any{"add-forward-headers": true, "add-timestamp-header": true, "src-delete-after": "never"}
	def := func(src, srcQ, dest, destQ string) map[string]any {
		v := map[string]any{"src-uri": src, "src-queue": srcQ, "dest-uri": dest, "dest-queue": destQ}
		for k, x := range common {
			v[k] = x
		}
		return map[string]any{"value": v}
	}
	warrenFromRabbit := "amqp://guest:guest@" + w.Addr() + "/%2F?heartbeat=10"
	if st, body := api(t, "PUT", rabbitMgmt, "/api/parameters/shovel/%2F/"+name,
		def("amqp://", "r-src-"+id, warrenFromRabbit, "r-dest")); st != 201 {
		t.Fatalf("PUT on RabbitMQ: %d %s", st, body)
	}
	if st, body := api(t, "PUT", w.MgmtURL(), "/api/parameters/shovel/%2F/"+name,
		def(strings.TrimSuffix(rabbitURL, "/")+"/%2F?heartbeat=10", "w-src-"+id, "amqp://", "w-dest")); st != 201 {
		t.Fatalf("PUT on Warren: %d %s", st, body)
	}
	for _, q := range []string{"r-dest", "w-dest"} { // (before a shovel declares it, a get would close the channel)
		if _, err := wch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	publish(t, rch, "r-src-"+id, "m", 3)
	publish(t, rch, "w-src-"+id, "m", 3)
	byRabbit := drain(t, wch, "r-dest", 3, 15*time.Second)
	byWarren := drain(t, wch, "w-dest", 3, 15*time.Second)
	checkInOrder(t, byRabbit, "m", 3)
	checkInOrder(t, byWarren, "m", 3)

	// The headers: same keys, same kinds of values.
	rs, ws := byRabbit[0].Headers, byWarren[0].Headers
	if _, ok := rs["x-shovelled-timestamp"].(int64); !ok {
		t.Fatalf("RabbitMQ's x-shovelled-timestamp: %T %v", rs["x-shovelled-timestamp"], rs)
	}
	if ts, ok := ws["x-shovelled-timestamp"].(int64); !ok || time.Since(time.Unix(ts, 0)) > time.Minute {
		t.Fatalf("Warren's x-shovelled-timestamp: %T %v", ws["x-shovelled-timestamp"], ws)
	}
	rl, _ := rs["x-shovelled"].([]any)
	wl, _ := ws["x-shovelled"].([]any)
	if len(rl) != 1 || len(wl) != 1 {
		t.Fatalf("x-shovelled: RabbitMQ %v, Warren %v", rs["x-shovelled"], ws["x-shovelled"])
	}
	rt, wt := rl[0].(amqp.Table), wl[0].(amqp.Table)
	t.Logf("x-shovelled keys: %s", keysOf(wt))
	if keysOf(rt) != keysOf(wt) {
		t.Fatalf("x-shovelled keys:\n RabbitMQ %s\n Warren   %s", keysOf(rt), keysOf(wt))
	}
	for _, k := range []string{"shovel-type", "shovel-name", "shovel-vhost"} {
		if rt[k] != wt[k] {
			t.Errorf("x-shovelled %s: RabbitMQ %v, Warren %v", k, rt[k], wt[k])
		}
	}
	if rt["dest-uri"] != "amqp://"+w.Addr()+"/%2F" || wt["src-uri"] != strings.TrimSuffix(strings.Replace(rabbitURL, "guest:guest@", "", 1), "/")+"/%2F" {
		t.Errorf("URIs without credentials: RabbitMQ dest %v, Warren src %v", rt["dest-uri"], wt["src-uri"])
	}

	// /api/shovels: the same fields.
	var rsts, wsts []map[string]any
	_, rb := api(t, "GET", rabbitMgmt, "/api/shovels/%2F", nil)
	_, wb := api(t, "GET", w.MgmtURL(), "/api/shovels/%2F", nil)
	json.Unmarshal(rb, &rsts)
	json.Unmarshal(wb, &wsts)
	find := func(l []map[string]any) map[string]any {
		for _, s := range l {
			if s["name"] == name {
				return s
			}
		}
		t.Fatalf("no shovel %s in %v", name, l)
		return nil
	}
	r, ww := find(rsts), find(wsts)
	delete(ww, "forwarded") // RabbitMQ 4.1's, not 3.10's
	t.Logf("/api/shovels: RabbitMQ %v\n Warren %v", r, ww)
	if keysOf(r) != keysOf(ww) {
		t.Fatalf("/api/shovels fields:\n RabbitMQ %s\n Warren   %s", keysOf(r), keysOf(ww))
	}
	for _, k := range []string{"vhost", "type", "state", "src_protocol", "dest_protocol"} {
		if r[k] != ww[k] {
			t.Errorf("%s: RabbitMQ %v, Warren %v", k, r[k], ww[k])
		}
	}
	// "2026-12-04 0:13:56": Erlang's, the hour not zero-padded.
	tsShape := regexp.MustCompile(`^\d{4}-\d\d-\d\d ([0-9]|1[0-9]|2[0-3]):\d\d:\d\d$`)
	for who, ts := range map[string]any{"RabbitMQ": r["timestamp"], "Warren": ww["timestamp"]} {
		if s, _ := ts.(string); !tsShape.MatchString(s) {
			t.Errorf("%s's timestamp %v", who, ts)
		}
	}
}

func keysOf[V any](m map[string]V) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sortStrings(ks)
	return strings.Join(ks, ",")
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// TestShovelRunsAsItsUser: issues 11 and 24. A shovel on this broker acts
// as the user who defined it: one that user could not run is refused at
// once (401, nothing kept); a permission revoked while it runs stops it
// within a second (terminated, the reason shown) and keeps it from moving
// anything more; restored, the shovel moves what waited after its
// reconnect-delay.
// Deleted, it stops and its parameter goes.
func TestShovelRunsAsItsUser(t *testing.T) {
	w := warrentest.Start(t)
	ch := channel(t, w.URL())
	base := w.MgmtURL()
	publish(t, ch, "from", "m", 3)
	if _, err := ch.QueueDeclare("to", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	must := func(st int, body []byte) {
		t.Helper()
		if st >= 300 {
			t.Fatalf("%d %s", st, body)
		}
	}
	must(api(t, "PUT", base, "/api/users/c-shov", map[string]any{"password": "x", "tags": "policymaker"}))
	perm := func(write string) {
		must(api(t, "PUT", base, "/api/permissions/%2F/c-shov", map[string]any{"configure": "", "write": write, "read": "^from$"}))
	}
	perm("")
	shovel := func(name, del string) (int, []byte) {
		return apiAs(t, "c-shov", "x", "PUT", base, "/api/parameters/shovel/%2F/"+name, map[string]any{"value": map[string]any{
			"src-uri": "amqp://", "src-queue": "from", "dest-uri": "amqp://", "dest-queue": "to",
			"src-delete-after": del, "reconnect-delay": 1}})
	}
	st, body := shovel("mv", "queue-length")
	if st != 401 || !strings.Contains(string(body), "access to exchange 'amq.default' in vhost '/' refused for user 'c-shov'") {
		t.Fatalf("a shovel its user may not run: %d %s", st, body)
	}
	if st, _ := api(t, "GET", base, "/api/parameters/shovel/%2F/mv", nil); st != 404 {
		t.Fatalf("the refused shovel was kept: %d", st)
	}

	perm("^amq\\.default$")
	must(shovel("mv", "queue-length"))
	testutil.Eventually(t, 10*time.Second, "the queue-length shovel finished", func() bool {
		st, _ := api(t, "GET", base, "/api/parameters/shovel/%2F/mv", nil)
		return st == 404
	})
	checkInOrder(t, drain(t, ch, "to", 3, 5*time.Second), "m", 3)

	must(shovel("keep", "never"))
	publish(t, ch, "from", "k", 1)
	checkInOrder(t, drain(t, ch, "to", 1, 10*time.Second), "k", 1)
	perm("") // revoked while it runs
	testutil.Eventually(t, 10*time.Second, "the shovel terminated by the refusal", func() bool {
		_, body := api(t, "GET", base, "/api/shovels/%2F", nil)
		return strings.Contains(string(body), `"state":"terminated"`) &&
			strings.Contains(string(body), "ACCESS_REFUSED - access to exchange 'amq.default' in vhost '/' refused for user 'c-shov'")
	})
	publish(t, ch, "from", "r", 1)
	time.Sleep(1500 * time.Millisecond) // a restart after reconnect-delay (1 s) is refused again
	if q, err := ch.QueueDeclarePassive("from", true, false, false, false, nil); err != nil || q.Messages != 1 {
		t.Fatalf("from after the refused publish: %+v %v, want the message kept", q, err)
	}
	perm("^amq\\.default$")
	checkInOrder(t, drain(t, ch, "to", 1, 10*time.Second), "r", 1)
	must(api(t, "DELETE", base, "/api/parameters/shovel/%2F/keep", nil))
	testutil.Eventually(t, 5*time.Second, "the shovel stopped", func() bool {
		_, body := api(t, "GET", base, "/api/shovels", nil)
		return strings.TrimSpace(string(body)) == "[]"
	})
}

// lockedBuf is a log sink for a test.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestShovelPasswordNeverShown: issue 24. A shovel's password is in its
// parameter (as RabbitMQ shows it to policymakers) and nowhere else: not
// in /api/shovels, not in the log lines of its failures, not in the
// x-shovelled headers it adds.
func TestShovelPasswordNeverShown(t *testing.T) {
	var logs lockedBuf
	w := warrentest.Start(t, warrentest.WithConfig(func(c *server.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}))
	const secret = "s3cret-Pa55"
	// A broker that refuses the password: this one, over TCP.
	bad := "amqp://guest:" + secret + "@" + w.Addr() + "/%2F"
	if st, body := api(t, "PUT", w.MgmtURL(), "/api/parameters/shovel/%2F/pw", map[string]any{"value": map[string]any{
		"src-uri": bad, "src-queue": "pw-src", "dest-uri": "amqp://", "dest-queue": "pw-dest", "reconnect-delay": 1}}); st != 201 {
		t.Fatalf("PUT: %d %s", st, body)
	}
	testutil.Eventually(t, 10*time.Second, "the shovel refused by the source", func() bool {
		_, body := api(t, "GET", w.MgmtURL(), "/api/shovels", nil)
		return strings.Contains(string(body), `"state":"terminated"`)
	})
	_, status := api(t, "GET", w.MgmtURL(), "/api/shovels", nil)
	_, param := api(t, "GET", w.MgmtURL(), "/api/parameters/shovel/%2F/pw", nil)
	if strings.Contains(string(status), secret) {
		t.Fatalf("/api/shovels shows the password: %s", status)
	}
	if !strings.Contains(string(param), secret) {
		t.Fatalf("the parameter, as given, should keep its URI: %s", param)
	}
	if !strings.Contains(logs.String(), "shovel terminated") || strings.Contains(logs.String(), secret) {
		t.Fatalf("the logs (a failure logged, no password):\n%s", logs.String())
	}
}

// TestShovelBoundsWhatItHolds: issue 24. A shovel whose destination does
// not take its messages (a resource alarm blocks its publishing
// connection) holds at most its prefetch of them: the rest stay ready in
// the source. Once the alarm clears, everything moves.
func TestShovelBoundsWhatItHolds(t *testing.T) {
	src, dest := warrentest.Start(t), warrentest.Start(t)
	sch, dch := channel(t, src.URL()), channel(t, dest.URL())
	publish(t, sch, "bound-src", "m", 1000)
	if _, err := dch.QueueDeclare("bound-dest", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	dest.Server().SetAlarm("memory", true)
	if st, body := api(t, "PUT", dest.MgmtURL(), "/api/parameters/shovel/%2F/bound", map[string]any{"value": map[string]any{
		"src-uri": "amqp://guest:guest@" + src.Addr() + "/%2F", "src-queue": "bound-src", "dest-uri": "amqp://",
		"dest-queue": "bound-dest", "src-prefetch-count": 10}}); st != 201 {
		t.Fatalf("PUT: %d %s", st, body)
	}
	held := func() (ready, unacked int) {
		q := src.Broker().VHost("/").Queue("bound-src")
		s := q.Stats()
		return s.Ready, s.Unacked
	}
	testutil.Eventually(t, 10*time.Second, "the shovel holding its prefetch", func() bool { _, u := held(); return u == 10 })
	time.Sleep(500 * time.Millisecond)
	if r, u := held(); u != 10 || r != 990 {
		t.Fatalf("with the destination blocked the source has %d ready and %d unacked; want 990 and 10 (the prefetch)", r, u)
	}
	dest.Server().SetAlarm("memory", false)
	checkInOrder(t, drain(t, dch, "bound-dest", 1000, 20*time.Second), "m", 1000)
}

// TestShovelURIWithoutVHost: issue 24. A shovel's URI without a path
// names the vhost "/", not the shovel's own (RabbitMQ 3.10.8: amqp://
// is "/"); amqp:///v names v.
func TestShovelURIWithoutVHost(t *testing.T) {
	w := warrentest.Start(t)
	if st, body := api(t, "PUT", w.MgmtURL(), "/api/vhosts/v2", nil); st >= 300 {
		t.Fatalf("%d %s", st, body)
	}
	if st, body := api(t, "PUT", w.MgmtURL(), "/api/permissions/v2/guest", map[string]any{"configure": ".*", "write": ".*", "read": ".*"}); st >= 300 {
		t.Fatalf("%d %s", st, body)
	}
	ch := channel(t, w.URL())
	publish(t, ch, "root-src", "m", 3)
	if st, body := api(t, "PUT", w.MgmtURL(), "/api/parameters/shovel/v2/nv", map[string]any{"value": map[string]any{
		"src-uri": "amqp://", "src-queue": "root-src", "dest-uri": "amqp:///v2", "dest-queue": "v2-dest",
		"src-delete-after": "queue-length"}}); st != 201 {
		t.Fatalf("PUT: %d %s", st, body)
	}
	v2 := channel(t, strings.TrimSuffix(w.URL(), "/")+"/v2")
	if _, err := v2.QueueDeclare("v2-dest", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	checkInOrder(t, drain(t, v2, "v2-dest", 3, 10*time.Second), "m", 3)
}
