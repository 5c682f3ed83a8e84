package mgmt_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warrenmq/warren/warrentest"
)

// FuzzAPI sends arbitrary methods, paths and bodies to the management API
// as an administrator: whatever it gets, it answers (never a 500, never a
// panic), and the broker keeps serving. The seeds are valid requests of
// every kind, so the fuzzer starts from inside the handlers.
func FuzzAPI(f *testing.F) {
	w := warrentest.Start(f)
	h := w.Mgmt().Handler()
	methods := []string{"GET", "PUT", "POST", "DELETE"}
	seeds := []struct {
		m          uint8
		path, body string
	}{
		{1, "/api/queues/%2F/fz", `{"durable":true,"arguments":{"x-max-length":10,"x-dead-letter-exchange":""}}`},
		{1, "/api/exchanges/%2F/fzx", `{"type":"topic","arguments":{"alternate-exchange":"amq.fanout"}}`},
		{2, "/api/bindings/%2F/e/fzx/q/fz", `{"routing_key":"a.#","arguments":{"x-match":"any"}}`},
		{2, "/api/exchanges/%2F/amq.default/publish", `{"properties":{"delivery_mode":2,"headers":{"a":[1,{"b":"c"}]}},"routing_key":"fz","payload":"aGk=","payload_encoding":"base64"}`},
		{2, "/api/queues/%2F/fz/get", `{"count":5,"ackmode":"reject_requeue_false","encoding":"auto","truncate":3}`},
		{0, "/api/dead-letters/%2F/fz/messages?reason=rejected&offset=0&limit=5", ``},
		{2, "/api/dead-letters/%2F/fz/replay", `{"count":3,"reason":"expired","source_queue":"fz","keep_history":true}`},
		{1, "/api/parameters/shovel/%2F/mv", `{"value":{"src-uri":"amqp://","src-queue":"fz","dest-uri":"amqp://","dest-queue":"fz","src-delete-after":"queue-length"}}`},
		{1, "/api/policies/%2F/p", `{"pattern":"^fz","definition":{"max-length":5,"dead-letter-exchange":""},"priority":1,"apply-to":"queues"}`},
		{1, "/api/users/fu", `{"password":"x","tags":"management,monitoring"}`},
		{1, "/api/permissions/%2F/fu", `{"configure":".*","write":"^fz","read":"("}`},
		{2, "/api/definitions", `{"vhosts":[{"name":"fv"}],"queues":[{"name":"q","vhost":"fv","durable":true,"arguments":{}}]}`},
		{0, "/api/queues?page=2&page_size=1&name=f&use_regex=true&sort=messages&sort_reverse=true&columns=name,arguments.x", ``},
		{3, "/api/queues/%2F/fz/contents", ``},
		{0, "/api/overview", ``},
		{0, "/metrics", ``},
		{0, "/api/connections/127.0.0.1%3A1%20-%3E%20127.0.0.1%3A2/channels", ``},
	}
	for _, s := range seeds {
		f.Add(s.m, s.path, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, m uint8, path string, body []byte) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " \r\n\t#") {
			return
		}
		req, err := http.NewRequest(methods[int(m)%len(methods)], "http://warren"+path, bytes.NewReader(body))
		if err != nil {
			return
		}
		req.RemoteAddr = "127.0.0.1:40000"
		req.SetBasicAuth("guest", "guest")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s %s %q: %d %s", req.Method, path, body, rec.Code, rec.Body.String())
		}
	})
}
