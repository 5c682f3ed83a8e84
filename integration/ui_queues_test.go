package integration

// The queues pages of the web UI in a headless Chromium (issue 15): add a
// queue with arguments, bindings, publish, get, purge, move, delete, a
// quorum queue's members; every action checked over AMQP or the API.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// u2Select sets a <select> (or input) to value and fires its change event,
// as a user picking the option does.
func u2Select(sel, value string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`(e => { e.value = %q; e.dispatchEvent(new Event('change', {bubbles: true})); })(document.querySelector(%q))`, value, sel))
}

// u2Confirm clicks the dialog's confirm button and waits for the dialog
// to close.
func u2Confirm() []chromedp.Action[chromedp.Void] {
	return []chromedp.Action[chromedp.Void]{
		chromedp.WaitVisible(uiSel("#dialog-confirm")),
		uiClick("#dialog-confirm"),
		chromedp.WaitNotVisible(uiSel("#dialog")),
	}
}

// u2ChartReady checks that the queue page's chart of lengths ends at
// ready messages after a history sample (issue 15). The page is reloaded
// by changing the chart range.
func u2ChartReady(t *testing.T, b *uiBrowser, tg *mgmtTarget, ready int) {
	t.Helper()
	tg.w.Mgmt().SampleNow()
	b.do("reload the charts", u2Select("#chart-range", "0"), chromedp.WaitVisible(uiSel("#q-length-chart")))
	b.poll(fmt.Sprintf("length chart ends at %d ready", ready), fmt.Sprintf(
		`(c => c && c.dataset.last && JSON.parse(c.dataset.last).Ready === %d)(document.querySelector('#q-length-chart'))`, ready))
}

// u2Passive reports whether queue exists, by a passive declare on a
// channel of its own (a failed one closes the channel); a failure other
// than 404 fails the test.
func u2Passive(t *testing.T, conn *amqp.Connection, queue string) (amqp.Queue, bool) {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	var ae *amqp.Error
	switch {
	case err == nil:
		return q, true
	case errors.As(err, &ae) && ae.Code == amqp.NotFound:
		return q, false
	}
	t.Fatalf("passive declare %s: %v", queue, err)
	return q, false
}

// testUIQueues (TestUI/Queues): issue 15, the queues pages' main actions in a browser:
// add a queue with arguments (a bad argument shows the server's reason),
// add and remove a binding, publish a message from the queue page and get
// it back, purge, move messages to another queue, delete (if-empty
// refused with the reason, then deleted), and a quorum queue's members.
func testUIQueues(t *testing.T) {
	chrome := uiChromium(t)
	tg := newMgmtWarren(t)
	conn, err := amqp.Dial(tg.amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	const qn, dest = "u2-orders", "u2-dest"
	if _, err := ch.QueueDeclare(dest, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}

	b := newUIBrowser(t, chrome)
	b.login(tg.url, "guest", "guest")

	// Add a queue with arguments; x-max-length -1 first, which the server
	// refuses: its reason shows in the dialog, which stays open.
	b.do("open the add-queue dialog",
		uiClick(`a[data-nav="queues"]`),
		chromedp.WaitVisible(uiSel("#queues")),
		uiClick("#q-add"),
		chromedp.WaitVisible(uiSel("#aq-name")),
		chromedp.SendKeys(uiSel("#aq-name"), qn),
		uiClick(`#dialog button[data-arg="x-message-ttl"]`),
		chromedp.SendKeys(uiSel("#aq-args-value-0"), "60000"),
		uiClick(`#dialog button[data-arg="x-max-length"]`),
		chromedp.SendKeys(uiSel("#aq-args-value-1"), "-1"),
		uiClick("#dialog-confirm"),
		chromedp.WaitVisible(uiSel("#dialog-error")))
	b.checkContrast("add queue dialog")
	if got := b.text("#dialog-error"); !strings.Contains(got, "invalid arg 'x-max-length'") || !strings.Contains(got, "value_negative") {
		t.Errorf("add queue with x-max-length -1: dialog error = %q, want the server's invalid arg reason", got)
	}
	if _, ok := u2Passive(t, conn, qn); ok {
		t.Fatalf("%s exists after the refused add", qn)
	}
	b.do("add the queue",
		chromedp.SetValue(uiSel("#aq-args-value-1"), "100"),
		uiClick(`#dialog button[data-arg="x-dead-letter-exchange"]`),
		uiClick(`#dialog button[data-arg="x-dead-letter-routing-key"]`),
		chromedp.SendKeys(uiSel("#aq-args-value-3"), "u2-dlq"),
		uiClick(`#dialog button[data-arg="x-overflow"]`),
		chromedp.SendKeys(uiSel("#aq-args-value-4"), "reject-publish"),
	)
	b.do("confirm", u2Confirm()...)
	if _, ok := u2Passive(t, conn, qn); !ok {
		t.Fatalf("%s not declared by the add-queue form", qn)
	}
	q := tg.queueInfo("/", qn)
	wantArgs := map[string]any{"x-message-ttl": 60000.0, "x-max-length": 100.0, "x-dead-letter-exchange": "",
		"x-dead-letter-routing-key": "u2-dlq", "x-overflow": "reject-publish"}
	if !jsonEqual(q["arguments"], wantArgs) || q["durable"] != true || q["auto_delete"] != false || q["type"] != "classic" {
		t.Errorf("queue from the form: durable %v auto_delete %v type %v arguments %v, want durable classic with %v",
			q["durable"], q["auto_delete"], q["type"], q["arguments"], wantArgs)
	}
	// The list's features column abbreviates them as RabbitMQ's.
	row := `#queues tr[data-name="` + qn + `"]`
	b.poll("queue listed", `!!document.querySelector('`+row+`')`)
	if got := b.text(row + ` td[data-col="features"]`); got != "DTTLLimOvflDLXDLK" {
		t.Errorf("features = %q, want D TTL Lim Ovfl DLX DLK", got)
	}
	b.shot("queue-list")

	// The queue page: the default exchange's implicit binding; bind from
	// amq.direct, and a message published there over AMQP reaches it.
	b.do("open the queue page",
		uiClick(row+" a"),
		chromedp.WaitVisible(uiSel(`#q-binding-table tr[data-source=""]`)),
		chromedp.WaitVisible(uiSel("#q-rate-chart")),
		chromedp.WaitVisible(uiSel("#q-length-chart")),
		chromedp.SendKeys(uiSel("#qb-source"), "amq.direct"),
		chromedp.SendKeys(uiSel("#qb-key"), "u2-key"),
		uiClick("#qb-bind"),
		chromedp.WaitVisible(uiSel(`#q-binding-table tr[data-source="amq.direct"]`)))
	if got := b.text(`#q-binding-table tr[data-source="amq.direct"] td[data-col="key"]`); got != "u2-key" {
		t.Errorf("binding routing key shown = %q", got)
	}
	if err := ch.PublishWithContext(context.Background(), "amq.direct", "u2-key", false, false, amqp.Publishing{Body: []byte("via amq.direct")}); err != nil {
		t.Fatal(err)
	}
	uiWaitMessages(t, ch, qn, 1)

	// Purge, after the confirmation.
	b.do("purge", uiClick("#q-purge"))
	b.do("confirm purge", u2Confirm()...)
	uiWaitMessages(t, ch, qn, 0)

	// Publish from the page: persistent, a header, a property.
	b.do("publish",
		uiClick("#q-publish summary"),
		chromedp.WaitVisible(uiSel("#qp-payload")),
		u2Select("#qp-mode", "2"),
		chromedp.SendKeys(uiSel("#qp-headers-key-0"), "tenant"),
		chromedp.SendKeys(uiSel("#qp-headers-value-0"), "acme"),
		chromedp.SendKeys(uiSel("#qp-props-key-0"), "content_type"),
		chromedp.SendKeys(uiSel("#qp-props-value-0"), "application/json"),
		chromedp.SendKeys(uiSel("#qp-payload"), `{"order":7}`),
		uiClick("#qp-submit"),
		chromedp.WaitVisible(uiSel("#qp-result .result")))
	if got := b.text("#qp-result"); got != "Message published." {
		t.Errorf("publish result = %q", got)
	}
	uiWaitMessages(t, ch, qn, 1)
	u2ChartReady(t, b, tg, 1)

	// Get it back, acking it (ack_requeue_false): shown with its
	// properties, headers and payload; the queue is then empty.
	b.do("get",
		uiClick("#q-get summary"),
		chromedp.WaitVisible(uiSel("#qg-mode")),
		u2Select("#qg-mode", "ack_requeue_false"),
		uiClick("#qg-get"),
		chromedp.WaitVisible(uiSel("#get-results article")))
	msg := `#get-results article[data-position="1"]`
	if got := b.text("#get-summary"); !strings.HasPrefix(got, "1 message got (automatic ack); 0 messages left ready") {
		t.Errorf("get summary = %q", got)
	}
	if got := b.text(msg + " pre.payload"); got != "{\n  \"order\": 7\n}" {
		t.Errorf("got payload %q", got)
	}
	if got := b.text(msg + " table.headers"); got != "tenantacme" {
		t.Errorf("got headers %q", got)
	}
	if got := b.text(msg + " table.props"); !strings.Contains(got, "content_typeapplication/json") || !strings.Contains(got, "delivery_mode2") {
		t.Errorf("got properties %q", got)
	}
	b.checkContrast("queue page")
	b.shot("queue-detail")
	uiWaitMessages(t, ch, qn, 0)
	u2ChartReady(t, b, tg, 0)

	// Reject without requeue (the keyboard way): the message is
	// dead-lettered to u2-dlq, whose page gets it back with its x-death
	// table (requeued: the default ack mode), and it stays there.
	if _, err := ch.QueueDeclare("u2-dlq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(context.Background(), "", qn, false, false, amqp.Publishing{Body: []byte("bad order")}); err != nil {
		t.Fatal(err)
	}
	uiWaitMessages(t, ch, qn, 1)
	b.do("reject",
		uiClick("#q-get summary"),
		chromedp.WaitVisible(uiSel("#qg-mode")),
		u2Select("#qg-mode", "reject_requeue_false"),
		chromedp.Focus(uiSel("#qg-get")),
		chromedp.KeyEvent("\r"))
	b.poll("the rejected message shown", `(e => !!e && e.textContent.startsWith('1 message got (reject requeue false)'))(document.querySelector('#get-summary'))`)
	if got := b.text(`#get-results article[data-position="1"] pre.payload`); got != "bad order" {
		t.Errorf("rejected payload = %q", got)
	}
	uiWaitMessages(t, ch, qn, 0)
	uiWaitMessages(t, ch, "u2-dlq", 1)
	b.do("get from the DLQ",
		chromedp.Navigate(tg.url+"/#/queues/%2F/u2-dlq"),
		chromedp.WaitVisible(uiSel("#q-get summary")),
		uiClick("#q-get summary"),
		uiClick("#qg-get"),
		chromedp.WaitVisible(uiSel(`#get-results table.xdeath tbody tr`)))
	xd := `#get-results table.xdeath tbody tr:first-child`
	for col, want := range map[string]string{"count": "1", "reason": "rejected", "queue": qn, "routing-keys": qn} {
		if got := b.text(xd + ` td[data-col="` + col + `"]`); got != want {
			t.Errorf("x-death %s = %q, want %q", col, got, want)
		}
	}
	uiWaitMessages(t, ch, "u2-dlq", 1)
	b.do("back to the queue",
		chromedp.Navigate(tg.url+"/#/queues/%2F/"+qn),
		chromedp.WaitVisible(uiSel(`#q-binding-table tr[data-source="amq.direct"]`)))

	// Remove the binding, confirmed; the API no longer has it.
	b.do("unbind",
		uiClick(`#q-binding-table tr[data-source="amq.direct"] button.unbind`))
	b.do("confirm unbind", u2Confirm()...)
	b.poll("binding gone", `!document.querySelector('#q-binding-table tr[data-source="amq.direct"]')`)
	if l, _ := tg.getJSON("/api/bindings/%2F/e/amq.direct/q/" + qn).([]any); len(l) != 0 {
		t.Errorf("bindings amq.direct -> %s after unbind: %v", qn, l)
	}

	// Move three messages to the other queue.
	for i := range 3 {
		if err := ch.PublishWithContext(context.Background(), "", qn, false, false, amqp.Publishing{Body: fmt.Appendf(nil, "m%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	uiWaitMessages(t, ch, qn, 3)
	b.do("move",
		uiClick("#q-move"),
		chromedp.WaitVisible(uiSel("#mv-dest")),
		chromedp.SendKeys(uiSel("#mv-dest"), dest))
	b.do("confirm move", u2Confirm()...)
	uiWaitMessages(t, ch, dest, 3)
	uiWaitMessages(t, ch, qn, 0)
	// The dialog's close event, which reports the move, may come after
	// the shovel has moved the messages.
	b.poll("move reported", fmt.Sprintf(`document.querySelector('#status').textContent.includes(%q)`, "Moving messages from "+qn+" to "+dest))

	// Delete with if-empty while a message is there: refused, with the
	// server's reason in the dialog; the queue stays. Then delete.
	if err := ch.PublishWithContext(context.Background(), "", qn, false, false, amqp.Publishing{Body: []byte("keep")}); err != nil {
		t.Fatal(err)
	}
	uiWaitMessages(t, ch, qn, 1)
	b.do("delete if empty",
		uiClick("#q-delete"),
		chromedp.WaitVisible(uiSel("#qd-if-empty")),
		uiClick("#qd-if-empty"),
		uiClick("#dialog-confirm"),
		chromedp.WaitVisible(uiSel("#dialog-error")))
	if got := b.text("#dialog-error"); !strings.Contains(got, "queue '"+qn+"' in vhost '/' not empty") {
		t.Errorf("delete if-empty of a non-empty queue: dialog error = %q", got)
	}
	if _, ok := u2Passive(t, conn, qn); !ok {
		t.Fatalf("%s deleted despite if-empty", qn)
	}
	b.do("delete", uiClick("#qd-if-empty"))
	b.do("confirm delete", u2Confirm()...)
	b.poll("back on the list", `location.hash === '#/queues' && !!document.querySelector('#queues')`)
	if _, ok := u2Passive(t, conn, qn); ok {
		t.Fatalf("%s still exists after the delete", qn)
	}
	b.do("the deleted queue's page",
		chromedp.Navigate(tg.url+"/#/queues/%2F/"+qn),
		chromedp.WaitVisible(uiSel("#q-missing")),
		chromedp.Navigate(tg.url+"/#/queues"))

	// A quorum queue added in the UI: its page shows the leader and the
	// member's Raft state.
	const qq = "u2-quorum"
	b.do("add a quorum queue",
		chromedp.WaitVisible(uiSel("#q-add")),
		uiClick("#q-add"),
		chromedp.WaitVisible(uiSel("#aq-name")),
		chromedp.SendKeys(uiSel("#aq-name"), qq),
		u2Select("#aq-type", "quorum"),
		uiClick(`#dialog button[data-arg="x-delivery-limit"]`),
		chromedp.SendKeys(uiSel("#aq-args-value-0"), "5"))
	b.do("confirm", u2Confirm()...)
	if q := tg.queueInfo("/", qq); q["type"] != "quorum" || !jsonEqual(q["arguments"], map[string]any{"x-queue-type": "quorum", "x-delivery-limit": 5.0}) {
		t.Errorf("quorum queue from the form: type %v arguments %v", q["type"], q["arguments"])
	}
	qrow := `#queues tr[data-name="` + qq + `"]`
	b.poll("quorum queue listed", `!!document.querySelector('`+qrow+`')`)
	b.do("open the quorum queue",
		uiClick(qrow+" a"),
		chromedp.WaitVisible(uiSel("#q-members tbody tr")))
	if got := b.text(`#q-members tbody tr td[data-col="role"]`); got != "leader" {
		t.Errorf("quorum member role = %q", got)
	}
	if got := b.text(`#q-members tbody tr td[data-col="raft-state"]`); got != "leader" {
		t.Errorf("quorum member raft state = %q", got)
	}
	b.checkContrast("quorum queue page")

	// At a phone's width the pages do not scroll sideways (wide tables
	// scroll inside their frame).
	b.do("phone width", chromedp.EmulateViewport(390, 844))
	b.poll("no sideways scroll at 390 px", `document.documentElement.scrollWidth <= 390`)
	b.do("the list at 390 px", uiClick(`a[data-nav="queues"]`), chromedp.WaitVisible(uiSel(qrow)))
	b.poll("no sideways scroll of the list at 390 px", `document.documentElement.scrollWidth <= 390`)
	b.do("desktop width", chromedp.EmulateViewport(1280, 800))
	b.checkNoExceptions()
}
