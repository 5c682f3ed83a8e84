// Package ui is Warren's management web UI: a single page (index.html,
// app.js and the modules it imports, style.css, the vendored uPlot) that talks to the management HTTP API under api/ with
// the user's basic-auth credentials. The assets are embedded in the binary;
// nothing is fetched from elsewhere at runtime.
//
// The management server mounts Handler at "/" on the listener that serves
// "/api".
package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed index.html *.js style.css favicon.svg pages/*.js vendor/*.js vendor/*.css vendor/uPlot.LICENSE
var assets embed.FS

type asset struct {
	body  []byte
	ctype string
	etag  string
}

var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

// csp allows only this origin: no inline scripts, no external resources.
const csp = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

var files = load()

func load() map[string]asset {
	m := map[string]asset{}
	err := fs.WalkDir(assets, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := assets.ReadFile(name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		ctype, ok := contentTypes[path.Ext(name)]
		if !ok {
			ctype = "text/plain; charset=utf-8"
		}
		m[name] = asset{body: body, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic(err)
	}
	return m
}

// Handler serves the UI: index.html at "/", the other assets by name. Every
// response carries an ETag and "Cache-Control: no-cache", so browsers
// revalidate (and get 304 Not Modified) instead of running a stale app.js
// after an upgrade.
func Handler() http.Handler { return http.HandlerFunc(serve) }

func serve(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/")
	if name == "" {
		name = "index.html"
	}
	a, ok := files[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "405 method not allowed", http.StatusMethodNotAllowed)
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.ctype)
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", csp)
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
}
