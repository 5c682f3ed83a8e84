package ui

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path string, hdr map[string]string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func TestHandlerServesAssets(t *testing.T) {
	h := Handler()
	for path, ctype := range map[string]string{
		"/":            "text/html; charset=utf-8",
		"/index.html":  "text/html; charset=utf-8",
		"/app.js":      "text/javascript; charset=utf-8",
		"/style.css":   "text/css; charset=utf-8",
		"/favicon.svg": "image/svg+xml",
	} {
		res := get(t, h, "GET", path, nil)
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != ctype || len(body) == 0 {
			t.Errorf("GET %s: %d %q, %d bytes", path, res.StatusCode, res.Header.Get("Content-Type"), len(body))
		}
		if res.Header.Get("Cache-Control") != "no-cache" || res.Header.Get("ETag") == "" {
			t.Errorf("GET %s: Cache-Control %q, ETag %q", path, res.Header.Get("Cache-Control"), res.Header.Get("ETag"))
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" || res.Header.Get("Content-Security-Policy") == "" {
			t.Errorf("GET %s: missing security headers", path)
		}
	}
	if body, _ := io.ReadAll(get(t, h, "GET", "/", nil).Body); !strings.Contains(string(body), `<script type="module" src="app.js"`) {
		t.Errorf("index.html does not load app.js")
	}
}

func TestHandlerRevalidates(t *testing.T) {
	h := Handler()
	etag := get(t, h, "GET", "/app.js", nil).Header.Get("ETag")
	res := get(t, h, "GET", "/app.js", map[string]string{"If-None-Match": etag})
	if res.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match %s: status %d, want 304", etag, res.StatusCode)
	}
}

func TestHandlerRefuses(t *testing.T) {
	h := Handler()
	if res := get(t, h, "GET", "/nope.js", nil); res.StatusCode != 404 {
		t.Errorf("GET /nope.js: %d, want 404", res.StatusCode)
	}
	if res := get(t, h, "GET", "/../ui.go", nil); res.StatusCode != 404 {
		t.Errorf("GET /../ui.go: %d, want 404", res.StatusCode)
	}
	if res := get(t, h, "POST", "/", nil); res.StatusCode != 405 || res.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /: %d Allow %q, want 405", res.StatusCode, res.Header.Get("Allow"))
	}
	if res := get(t, h, "HEAD", "/", nil); res.StatusCode != 200 {
		t.Errorf("HEAD /: %d", res.StatusCode)
	}
}

// The UI must work offline: no asset may load anything from another origin.
func TestNoExternalResources(t *testing.T) {
	for name, a := range files {
		s := string(a.body)
		for _, bad := range []string{"http://", "https://", "//cdn", "@import"} {
			i := strings.Index(s, bad)
			// uPlot's banner comment names its home page; SVG names its namespace.
			for i >= 0 && (strings.HasPrefix(s[i:], "http://www.w3.org/2000/svg") || strings.HasPrefix(s[i:], "https://github.com/leeoniya/uPlot (v")) {
				j := strings.Index(s[i+1:], bad)
				if j < 0 {
					i = -1
					break
				}
				i += 1 + j
			}
			if i >= 0 {
				t.Errorf("%s refers to %q: %.60s", name, bad, s[i:])
			}
		}
	}
}
