package mgmt_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	amqpc "github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/warrentest"
)

// issue 22 item 7: arguments nested deeper than 64 levels were accepted
// over HTTP and then silently cut to 63 (at restart, or at once in a
// cluster). Now arguments as deep as amqp.MaxTableDepth (100 levels, as
// RabbitMQ keeps) come back whole, after a restart too, and one level
// more is refused with a 400 and creates nothing.
func TestArgumentsDepthKeptOrRefused(t *testing.T) {
	w := warrentest.Start(t)
	nested := func(levels int) map[string]any {
		var v any = "bottom"
		for i := 1; i < levels; i++ {
			v = map[string]any{"t": v}
		}
		return map[string]any{"t": v} // the arguments table is level 1
	}
	depthOf := func(args map[string]any) int {
		n := 0
		var v any = args
		for {
			m, ok := v.(map[string]any)
			if !ok {
				if v != "bottom" {
					return -n
				}
				return n
			}
			n++
			v = m["t"]
		}
	}
	do := func(method, path string, body any) (int, []byte) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, w.MgmtURL()+path, rd)
		req.SetBasicAuth("guest", "guest")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	max := amqpc.MaxTableDepth
	if st, b := do("PUT", "/api/exchanges/%2F/deep", map[string]any{"type": "direct", "durable": true, "arguments": nested(max)}); st != 201 {
		t.Fatalf("exchange with arguments %d deep: %d %s", max, st, b)
	}
	if st, b := do("PUT", "/api/queues/%2F/deep", map[string]any{"durable": true, "arguments": nested(max)}); st != 201 {
		t.Fatalf("queue with arguments %d deep: %d %s", max, st, b)
	}
	check := func(when string) {
		t.Helper()
		for _, path := range []string{"/api/exchanges/%2F/deep", "/api/queues/%2F/deep"} {
			var got struct {
				Arguments map[string]any `json:"arguments"`
			}
			st, b := do("GET", path, nil)
			if st != 200 {
				t.Fatalf("%s: GET %s: %d %s", when, path, st, b)
			}
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if d := depthOf(got.Arguments); d != max {
				t.Fatalf("%s: %s arguments are %d deep, want %d (negative: cut there)", when, path, d, max)
			}
		}
	}
	check("as declared")
	w.Restart()
	check("after a restart")

	for _, kind := range []string{"exchanges", "queues"} {
		body := map[string]any{"durable": true, "arguments": nested(max + 1)}
		if kind == "exchanges" {
			body["type"] = "direct"
		}
		st, b := do("PUT", "/api/"+kind+"/%2F/deeper", body)
		if st != 400 || !strings.Contains(string(b), "nested deeper than 100 levels") {
			t.Fatalf("%s with arguments %d deep: %d %s", kind, max+1, st, b)
		}
		if st, _ := do("GET", "/api/"+kind+"/%2F/deeper", nil); st != 404 {
			t.Fatalf("the refused %s exists: %d", kind, st)
		}
	}
	// A list counts as a level too.
	deepList := nested(max)
	var v any = deepList
	for i := 1; i < max; i++ {
		v = v.(map[string]any)["t"]
	}
	v.(map[string]any)["t"] = []any{"x"}
	if st, b := do("PUT", "/api/queues/%2F/deeplist", map[string]any{"durable": true, "arguments": deepList}); st != 400 {
		t.Fatalf("a list at level %d: %d %s", max+1, st, b)
	}
}
