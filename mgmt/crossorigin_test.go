package mgmt_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// issue 11 item 12: a page on another site could change state through
// the API with the browser's cached basic-auth credentials (JSON sent as
// text/plain or form-encoded needs no CORS preflight). A PUT, POST or
// DELETE that the browser marks cross-site (Sec-Fetch-Site) or that
// carries a foreign Origin is refused with 403 and changes nothing;
// same-origin requests (the web UI's) and requests without those headers
// (curl, rabbitmqadmin) still work.
func TestCrossOriginStateChangesRefused(t *testing.T) {
	f := newFixture(t)
	host := strings.TrimPrefix(f.api, "http://")
	send := func(method, path, body string, hdr map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, f.api+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth("guest", "guest")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	exists := func(q string) bool {
		t.Helper()
		st, _ := send("GET", "/api/queues/%2F/"+q, "", nil)
		return st == 200
	}
	hostile := map[string]map[string]string{
		"sec-fetch-site cross-site": {"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"},
		"sec-fetch-site same-site":  {"Sec-Fetch-Site": "same-site", "Content-Type": "application/x-www-form-urlencoded"},
		"foreign origin":            {"Origin": "http://evil.example", "Content-Type": "text/plain"},
	}
	if st, _ := send("PUT", "/api/queues/%2F/hC-keep", `{"durable":true}`, nil); st != 201 {
		t.Fatalf("setup: %d", st)
	}
	for name, hdr := range hostile {
		for _, r := range []struct{ method, path, body string }{
			{"PUT", "/api/queues/%2F/hC-evil", `{"durable":true}`},
			{"PUT", "/api/users/hC-evil", `{"password":"x","tags":"administrator"}`},
			{"POST", "/api/exchanges/%2F/amq.default/publish", `{"properties":{},"routing_key":"hC-keep","payload":"evil","payload_encoding":"string"}`},
			{"DELETE", "/api/queues/%2F/hC-keep", ``},
		} {
			st, body := send(r.method, r.path, r.body, hdr)
			if st != http.StatusForbidden || !strings.Contains(body, `"error":"forbidden"`) {
				t.Errorf("%s: %s %s = %d %s, want 403", name, r.method, r.path, st, body)
			}
		}
		// Reads are not state changes (and the browser does not let the
		// page read the reply).
		if st, _ := send("GET", "/api/overview", "", hdr); st != 200 {
			t.Errorf("%s: GET /api/overview = %d", name, st)
		}
	}
	if exists("hC-evil") || !exists("hC-keep") {
		t.Fatalf("a refused request changed queues: hC-evil %v, hC-keep %v", exists("hC-evil"), exists("hC-keep"))
	}
	if st, _ := send("GET", "/api/users/hC-evil", "", nil); st != 404 {
		t.Fatalf("a refused request created a user: %d", st)
	}
	if st, body := send("GET", "/api/queues/%2F/hC-keep", "", nil); st != 200 || !strings.Contains(body, `"messages_ready":0`) && !strings.Contains(body, `"messages":0`) {
		t.Fatalf("a refused publish arrived: %s", body)
	}

	// Same origin (the web UI), and no browser headers at all (curl,
	// rabbitmqadmin, with any or no content type), still work.
	for name, hdr := range map[string]map[string]string{
		"same-origin":  {"Sec-Fetch-Site": "same-origin", "Origin": "http://" + host, "Content-Type": "application/json"},
		"typed origin": {"Sec-Fetch-Site": "none"},
		"origin only":  {"Origin": "http://" + host},
		"curl":         nil,
		"text/plain":   {"Content-Type": "text/plain"},
	} {
		if st, body := send("PUT", "/api/queues/%2F/hC-ok", `{"durable":true}`, hdr); st != 201 {
			t.Errorf("%s: PUT = %d %s", name, st, body)
		}
		if st, body := send("DELETE", "/api/queues/%2F/hC-ok", ``, hdr); st != 204 {
			t.Errorf("%s: DELETE = %d %s", name, st, body)
		}
	}
}
