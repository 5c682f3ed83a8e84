package mgmt_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/mgmt"
	"github.com/warrenmq/warren/warrentest"
)

// issue 11 item 4 (HTTP part): idle keep-alive connections to the
// management port were never closed, and their number had no bound, so
// the HTTP port alone (no login needed) could take every descriptor the
// AMQP listener needs. Idle keep-alive connections and connections that
// never send a request are closed after their timeouts, a connection over
// MaxConnections gets a 503 at once, and the API keeps answering.
func TestHTTPIdleConnectionsClosed(t *testing.T) {
	w := warrentest.Start(t)
	const max = 8
	m := mgmt.New(mgmt.Config{Server: w.Server(), Addr: "127.0.0.1:0", MaxConnections: max,
		IdleTimeout: 300 * time.Millisecond, ReadHeaderTimeout: 300 * time.Millisecond})
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	addr := m.Addr().String()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	const get = "GET /api/overview HTTP/1.1\r\nHost: x\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\r\n"
	// roundTrip sends one keep-alive request on c and reads its reply.
	roundTrip := func(c net.Conn, br *bufio.Reader) int {
		t.Helper()
		if _, err := io.WriteString(c, get); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// closedByServer waits for the server to close c (EOF or reset).
	closedByServer := func(what string, c net.Conn, br *bufio.Reader) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := br.ReadByte()
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: still open (%v)", what, err)
		}
	}

	// max keep-alive connections, each after one request: all the slots.
	var conns []net.Conn
	var readers []*bufio.Reader
	for range max {
		c := dial()
		br := bufio.NewReader(c)
		if st := roundTrip(c, br); st != 200 {
			t.Fatalf("GET /api/overview: %d", st)
		}
		conns, readers = append(conns, c), append(readers, br)
	}
	// One more is served (issue 22 item 5): it takes the slot of the
	// longest-idle connection, which the server closes.
	over := dial()
	if st := roundTrip(over, bufio.NewReader(over)); st != 200 {
		t.Fatalf("connection over the cap: %d", st)
	}
	closedByServer("longest-idle connection", conns[0], readers[0])
	conns, readers = conns[1:], readers[1:]
	// The idle keep-alive connections are closed by the server...
	for i, c := range conns {
		closedByServer("idle keep-alive connection", c, readers[i])
	}
	// ...and so are connections that never send (or finish) a request.
	silent, partial := dial(), dial()
	_, _ = io.WriteString(partial, "GET /api/overview HTTP/1.1\r\nHost: x\r\n")
	closedByServer("silent connection", silent, bufio.NewReader(silent))
	closedByServer("half-sent request", partial, bufio.NewReader(partial))

	// The freed slots serve again.
	cl := &http.Client{Timeout: 5 * time.Second}
	served := 0
	var resp *http.Response
	var err error
	if !testutil.Until(5*time.Second, func() bool {
		for served < 2*max {
			req, _ := http.NewRequest("GET", m.URL()+"/api/overview", nil)
			req.SetBasicAuth("guest", "guest")
			resp, err = cl.Do(req)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			if err != nil || resp.StatusCode != 200 {
				return false
			}
			served++
		}
		return true
	}) {
		t.Fatalf("the API does not answer after the idle connections closed: %v %v", err, resp)
	}
}

// issue 22 item 5: about 256 idle sockets to the HTTP port made the API,
// the UI and /metrics answer 503 to everyone, unauthenticated. Now 1,000
// idle sockets (four times the cap) opened at once, some that never send
// a byte and some that stop halfway through their headers, leave the
// API, a health check and /metrics answering at once.
func TestHTTPIdleFloodStillServes(t *testing.T) {
	w := warrentest.Start(t)
	api := w.MgmtURL()
	addr := strings.TrimPrefix(api, "http://")
	var mu sync.Mutex
	var held []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	var wg sync.WaitGroup
	for i := range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				return
			}
			if i%2 == 1 {
				_, _ = io.WriteString(c, "GET /api/overview HTTP/1.1\r\nHost: x\r\n")
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}()
	}
	wg.Wait()
	cl := &http.Client{Timeout: 3 * time.Second}
	for _, path := range []string{"/api/overview", "/api/health/checks/alarms", "/metrics", "/api/queues"} {
		for i := range 5 {
			req, _ := http.NewRequest("GET", api+path, nil)
			req.SetBasicAuth("guest", "guest")
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatalf("GET %s (try %d) under 1,000 idle sockets: %v", path, i, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("GET %s (try %d) under 1,000 idle sockets: %d %s", path, i, resp.StatusCode, body)
			}
		}
	}
}

// issue 22 item 5: a body trickled at 2 B/s was not cut for 5 minutes.
// With the defaults a body gets 10 s of grace and must then keep arriving
// at 16 KiB/s: the trickle is cut within seconds of the grace.
func TestHTTPTrickledBodyCut(t *testing.T) {
	w := warrentest.Start(t) // the management server with its defaults
	c, err := net.Dial("tcp", strings.TrimPrefix(w.MgmtURL(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "PUT /api/vhosts/trickle HTTP/1.1\r\nHost: x\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
	start := time.Now()
	cut := make(chan time.Duration, 1)
	go func() {
		// The server answers (400, the body broke off) or just closes.
		_, _ = io.Copy(io.Discard, c)
		cut <- time.Since(start)
	}()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	limit := time.After(30 * time.Second)
	for {
		select {
		case d := <-cut:
			if d > mgmt.DefaultReadTimeout+5*time.Second {
				t.Fatalf("trickled body cut only after %s", d)
			}
			t.Logf("a body trickled at 2 B/s was cut after %s", d.Round(time.Millisecond))
			return
		case <-tick.C:
			_, _ = io.WriteString(c, " ") // 2 B/s
		case <-limit:
			t.Fatal("a body trickled at 2 B/s is still read after 30 s")
		}
	}
}

// issue 22 item 5: a reply left unread held its connection for 5
// minutes. Pipelined requests whose replies are never read get their
// connection closed once the replies stop moving.
func TestHTTPUnreadReplyCut(t *testing.T) {
	w := warrentest.Start(t)
	m := mgmt.New(mgmt.Config{Server: w.Server(), Addr: "127.0.0.1:0",
		WriteTimeout: 300 * time.Millisecond, MinRate: 1024})
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	c, err := net.Dial("tcp", m.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	const get = "GET /api/overview HTTP/1.1\r\nHost: x\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\r\n"
	const n = 4000 // replies of ~2 KiB: far more than the socket buffers hold
	go func() {
		for range n {
			if _, err := io.WriteString(c, get); err != nil {
				return
			}
		}
	}()
	time.Sleep(6 * time.Second) // past the grace and the rate of the reply that blocked
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	got := 0
	for ; got < n; got++ {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			break
		}
	}
	if got == n {
		t.Fatalf("all %d replies were held for a client that did not read them", n)
	}
	t.Logf("the connection was closed after %d of %d replies", got, n)
}

// issue 22 item 6: a management user's PUTs of 60 MiB took RSS to 1.7 GB.
// A body over MaxBodySize (RabbitMQ's management.http.max_body_size,
// 20,000,000 bytes by default) is refused with RabbitMQ's 400, whether it
// announces its length or is sent chunked, and nothing is created.
func TestHTTPBodyLimit(t *testing.T) {
	w := warrentest.Start(t)
	api := w.MgmtURL()
	put := func(name string, body io.Reader, size int64) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("PUT", api+"/api/exchanges/%2F/"+name, body)
		req.ContentLength = size
		req.SetBasicAuth("guest", "guest")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("PUT %s: %v", name, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	big := func(n int) string {
		return `{"type":"direct","arguments":{"x":"` + strings.Repeat("a", n) + `"}}`
	}
	// Just under the limit: created.
	ok := big(mgmt.DefaultMaxBodySize - 100)
	if st, b := put("under", strings.NewReader(ok), int64(len(ok))); st != 201 {
		t.Fatalf("PUT just under the limit: %d %s", st, b)
	}
	over := big(mgmt.DefaultMaxBodySize + 10)
	for _, tc := range []struct {
		name string
		size int64
	}{{"announced", int64(len(over))}, {"chunked", -1}} {
		st, b := put("over-"+tc.name, io.MultiReader(strings.NewReader(over)), tc.size)
		if st != 400 || !strings.Contains(b, `"reason":"Exceeded HTTP request body size limit"`) {
			t.Fatalf("%s body over the limit: %d %s", tc.name, st, b)
		}
		req, _ := http.NewRequest("GET", api+"/api/exchanges/%2F/over-"+tc.name, nil)
		req.SetBasicAuth("guest", "guest")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Fatalf("%s: the refused exchange exists (%d)", tc.name, resp.StatusCode)
		}
	}
}
