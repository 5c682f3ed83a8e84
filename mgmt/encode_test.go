package mgmt

import (
	"encoding/json"
	"log/slog"
	"math"
	"net/http/httptest"
	"testing"
)

// issue 11 item 2: a reply that cannot be encoded is a 500 with
// RabbitMQ's error body, never a 200 with an empty or cut-off body; a
// non-finite float anywhere (here in a client-properties-like nested
// table) is rendered as a string and the rest of the reply kept.
func TestWriteJSONEncodeError(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler)}
	rec := httptest.NewRecorder()
	s.writeJSON(rec, 200, []any{map[string]any{"name": "a"}, map[string]any{"bad": make(chan int)}})
	var e map[string]any
	if rec.Code != 500 || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e["error"] != "internal_server_error" || e["reason"] == "" {
		t.Fatalf("unencodable reply: %d %q", rec.Code, rec.Body.String())
	}

	type conn struct {
		Name  string         `json:"name"`
		Props map[string]any `json:"client_properties"`
		Rate  float64        `json:"rate"`
	}
	props := map[string]any{"capabilities": map[string]any{"x": math.Inf(-1)}, "n": float32(math.NaN()), "ok": 1.5}
	rec = httptest.NewRecorder()
	s.writeJSON(rec, 200, []any{conn{Name: "c1", Props: props, Rate: 2}, &conn{Name: "c2"}})
	var got []map[string]any
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &got) != nil || len(got) != 2 {
		t.Fatalf("reply: %d %q", rec.Code, rec.Body.String())
	}
	p := got[0]["client_properties"].(map[string]any)
	if p["n"] != "NaN" || p["ok"] != 1.5 || p["capabilities"].(map[string]any)["x"] != "-Infinity" || got[0]["rate"] != 2.0 || got[1]["name"] != "c2" {
		t.Fatalf("reply: %s", rec.Body.String())
	}
	if f, ok := props["n"].(float32); !ok || !math.IsNaN(float64(f)) {
		t.Fatal("the rendered value was changed in place")
	}
}
