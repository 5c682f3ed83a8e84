package warrentest_test

import (
	"context"
	"net/http"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/warrenmq/warren/warrentest"
)

// TestMain fails the run when goroutines are left running after all the
// tests (issue 12): the in-process broker must stop everything it started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestStartRestartClose: issue 12. A test broker that served AMQP and the
// management API, with a durable message kept across a Restart, stops
// every goroutine it started when the test ends (TestMain checks).
func TestStartRestartClose(t *testing.T) {
	b := warrentest.Start(t)
	conn, err := amqp.Dial(b.URL())
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("wt-kept", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	conf, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", "wt-kept", false, false,
		amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("m")})
	if err != nil {
		t.Fatal(err)
	}
	if !conf.Wait() {
		t.Fatal("publish nacked")
	}
	conn.Close()
	b.Restart()
	conn, err = amqp.Dial(b.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err = conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if d, ok, err := ch.Get("wt-kept", true); err != nil || !ok || string(d.Body) != "m" {
		t.Fatalf("after Restart: get %q ok=%v err=%v, want m", d.Body, ok, err)
	}
	req, _ := http.NewRequest("GET", b.MgmtURL()+"/api/overview", nil)
	req.SetBasicAuth("guest", "guest")
	cl := &http.Client{}
	defer cl.CloseIdleConnections()
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /api/overview: %d", resp.StatusCode)
	}
}
