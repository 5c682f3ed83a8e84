package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/internal/testutil"
)

// testUIOverviewCharts (TestUI/OverviewCharts): issue 15, the overview's charts follow the
// broker's history: after traffic, the message-rates chart's publish,
// deliver and dead-lettered series rise above zero and the
// queued-messages chart ends at the queues' depth; the node's memory is
// charted too. The broker samples on
// demand (SampleNow) rather than every 5 s, but the chart asks for
// RabbitMQ's default range (10 minutes at 5 s), so two samples 5 s apart
// are needed: the test takes about 10 s.
func testUIOverviewCharts(t *testing.T) {
	chrome := uiChromium(t)
	e := newEnv(t)
	w := e.warren()
	ch := e.channel()
	for _, q := range []string{"ov.dlq", "ov.work"} {
		args := amqp.Table{}
		if q == "ov.work" {
			args = amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "ov.dlq"}
		}
		if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
			t.Fatal(err)
		}
	}
	w.Mgmt().SampleNow()

	b := newUIBrowser(t, chrome)
	b.login(w.MgmtURL(), "guest", "guest")
	b.poll("charts drawn", `document.querySelector('#ov-rate-chart canvas') && document.querySelector('#ov-queued-chart canvas')`)
	// data reads a chart's data-last or data-max: the newest or the
	// highest value of each series.
	data := func(id, which string) map[string]*float64 {
		var m map[string]*float64
		if s := b.eval(fmt.Sprintf(`document.querySelector('#%s').dataset.%s || '{}'`, id, which)); json.Unmarshal([]byte(s), &m) != nil {
			t.Fatalf("%s data-%s = %q", id, which, s)
		}
		return m
	}
	positive := func(v *float64) bool { return v != nil && *v > 0 }
	if m := data("ov-rate-chart", "max"); positive(m["Publish"]) {
		t.Fatalf("publish rate before any traffic: %v", *m["Publish"])
	}

	// Traffic: 50 published, 20 consumed and acked, 5 rejected into the DLQ.
	for i := range 50 {
		if err := ch.PublishWithContext(context.Background(), "", "ov.work", false, false, amqp.Publishing{Body: fmt.Appendf(nil, "m%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	uiWaitMessages(t, ch, "ov.work", 50)
	for i := range 25 {
		d, ok, err := ch.Get("ov.work", false)
		if err != nil || !ok {
			t.Fatalf("get %d: ok=%v err=%v", i, ok, err)
		}
		if i < 20 {
			err = d.Ack(false)
		} else {
			err = d.Reject(false)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	uiWaitMessages(t, ch, "ov.dlq", 5)

	// Sample until the next 5 s slot has one, and the page has shown it.
	// A rate is the change between two slots, so the rise is in the
	// series (its highest value), not necessarily its newest point.
	var rates, queued map[string]*float64
	sample := sampleEvery(w, 500*time.Millisecond)
	if !testutil.Until(25*time.Second, func() bool {
		sample()
		rates, queued = data("ov-rate-chart", "max"), data("ov-queued-chart", "last")
		return positive(rates["Publish"]) && positive(rates["Deliver / get"]) && positive(rates["Dead-lettered"]) &&
			queued["Ready"] != nil && *queued["Ready"] == 30
	}) {
		t.Fatalf("after traffic: rates %v, queued %v; want publish, deliver/get and dead-lettered above 0, 30 ready", show(rates), show(queued))
	}
	if got := b.eval(`document.querySelector('#ov-rate-chart').dataset.points`); got == "" || got == "0" || got == "1" {
		t.Errorf("rate chart points = %q, want at least 2", got)
	}
	// The node's memory chart has the node's samples.
	b.poll("node memory charted", `(c => c && Object.values(JSON.parse(c.dataset.last || '{}')).some(v => v > 0))(document.querySelector('#ov-mem-chart'))`)
	b.shot("overview")
	b.checkNoExceptions()
}

func show(m map[string]*float64) string {
	out := "{"
	for k, v := range m {
		if v == nil {
			out += fmt.Sprintf(" %s:null", k)
		} else {
			out += fmt.Sprintf(" %s:%g", k, *v)
		}
	}
	return out + " }"
}
