package mgmt_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
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
	// One more is refused with a 503 at once, not left waiting.
	over := dial()
	_ = over.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(over), nil)
	if err != nil {
		t.Fatalf("connection over the cap: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || !strings.Contains(string(body), "too many") {
		t.Fatalf("connection over the cap: %d %s", resp.StatusCode, body)
	}
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
