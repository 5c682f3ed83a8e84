package integration

// Browser tests of the web UI's connections, channels and exchanges pages
// (issue 15): a headless Chromium (the driver in ui_browser_test.go) drives
// each page's main actions against an in-process Warren, and every action
// is checked over AMQP or the API, not only by what the page says.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/internal/testutil"
)

// u1Logout logs out and waits for the login form.
func (b *uiBrowser) u1Logout() {
	b.t.Helper()
	b.do("log out", uiClick("#logout"), chromedp.WaitVisible(uiSel("#login-user")))
}

// jsq quotes s as a JavaScript string literal.
func jsq(s string) string {
	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // "->" in connection names stays as it is
	_ = enc.Encode(s)
	return strings.TrimSpace(buf.String())
}

// testUIConnsChannels (TestUI/ConnsChannels): issue 15, the connections and channels pages. A
// named amqp091-go connection shows in the list and on its page with its
// channel; its channel shows 3 unacknowledged messages and its consumer;
// a monitoring user's close is refused with the server's reason (error
// path) and the connection stays open; guest closes it with a reason, and
// the client gets connection.close 320 CONNECTION_FORCED with that text.
func testUIConnsChannels(t *testing.T) {
	chrome := uiChromium(t)
	tg := newMgmtWarren(t)
	base := tg.url

	const connName = "u1-orders-worker"
	conn := tg.dial(t, "/", connName)
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("u1-work", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := ch.PublishWithContext(context.Background(), "", "u1-work", false, false, amqp.Publishing{Body: []byte(fmt.Sprint("job ", i))}); err != nil {
			t.Fatal(err)
		}
	}
	deliveries, err := ch.Consume("u1-work", "u1-consumer", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case <-deliveries:
		case <-time.After(5 * time.Second):
			t.Fatal("the 3 messages were not delivered")
		}
	}
	monitor := tg.newUser(t, "u1mon", "monitoring")

	b := newUIBrowser(t, chrome)
	b.login(base, "guest", "guest")

	// The list shows the connection with its client-provided name.
	findRow := `[...document.querySelectorAll('#connections tbody tr')].find(r => r.textContent.includes(` + jsq(connName) + `))`
	b.do("connections page", uiClick(`a[data-nav="connections"]`), chromedp.WaitVisible(uiSel("#connections")))
	b.poll("the named connection listed", `!!`+findRow)
	name := b.eval(findRow + `.dataset.name`)
	row := `#connections tr[data-name=` + jsq(name) + `]`
	for col, want := range map[string]string{"user": "guest", "vhost": "/", "channels": "1", "protocol": "AMQP 0-9-1", "state": "running"} {
		if got := b.text(row + ` td[data-col="` + col + `"]`); got != want {
			t.Errorf("connection list %s = %q, want %q", col, got, want)
		}
	}
	b.shot("connections")
	b.fitsPhone("the connections list")

	// The channels page: the channel with 3 unacked, prefetch 10.
	chRow := `#channels tr[data-name^=` + jsq(name) + `]`
	b.do("channels page", uiClick(`a[data-nav="channels"]`), chromedp.WaitVisible(uiSel(chRow)))
	b.poll("3 unacked on the channel", `document.querySelector(`+jsq(chRow+` td[data-col="unacked"]`)+`).textContent === '3'`)
	if got := b.text(chRow + ` td[data-col="prefetch"]`); got != "10" {
		t.Errorf("channel prefetch = %q, want 10", got)
	}
	b.shot("channels")
	b.fitsPhone("the channels list")

	// Its page lists the consumer on u1-work and links to the connection.
	b.do("channel page", uiClick(chRow+` td[data-col="name"] a`), chromedp.WaitVisible(uiSel(`#consumers tr[data-tag="u1-consumer"]`)))
	if got := b.text(`#consumers tr[data-tag="u1-consumer"] td[data-col="queue"]`); got != "u1-work" {
		t.Errorf("channel page consumer queue = %q", got)
	}
	if got := b.text("#ch-stats"); !strings.Contains(got, "Unacked3") {
		t.Errorf("channel page stats = %q, want Unacked 3", got)
	}
	b.shot("channel")
	b.fitsPhone("the channel page")
	b.do("connection page from the channel", uiClick("#ch-connection"), chromedp.WaitVisible(uiSel("#conn-details dl")))
	if got := b.text("#conn-client-name"); !strings.Contains(got, connName) {
		t.Errorf("connection page client name = %q", got)
	}
	b.poll("its channel listed", `document.querySelectorAll('#conn-channel-list tbody tr').length === 1`)
	if got := b.text("#conn-client"); !strings.Contains(got, "connection_name") || !strings.Contains(got, connName) ||
		!strings.Contains(got, "Capabilities") || !strings.Contains(got, "publisher_confirms") || strings.Contains(got, "[object") {
		t.Errorf("client properties = %q", got)
	}
	// The data rates chart draws both directions (samples come with history).
	b.poll("data rates chart drawn", `(el => el && el.dataset.last)(document.querySelector('#conn-rate-chart'))`)
	if got := b.eval(`Object.keys(JSON.parse(document.querySelector('#conn-rate-chart').dataset.last)).join(',')`); got != "From client,To client" {
		t.Errorf("data rates chart series = %q", got)
	}
	u1ChartMoves(t, tg, b, "#conn-rate-chart", "From client", func() {
		if err := ch.PublishWithContext(context.Background(), "", "u1-nowhere", false, false, amqp.Publishing{Body: make([]byte, 2000)}); err != nil {
			t.Fatal(err)
		}
	})
	b.fitsPhone("the connection page")
	b.shot("connection")
	connHash := b.eval(`location.hash`)

	// Error path: a monitoring user sees the connection but may not close
	// it: the dialog shows the server's reason and stays open.
	b.u1Logout()
	b.login(base, monitor, monitor)
	b.goTo(base, connHash, "#conn-close")
	b.do("monitoring user closes",
		uiClick("#conn-close"),
		chromedp.WaitVisible(uiSel("#close-reason")),
		uiClick("#dialog-confirm"),
		chromedp.WaitVisible(uiSel("#dialog-error")))
	if got := b.text("#dialog-error"); !strings.Contains(got, "Not administrator user") {
		t.Errorf("refused close shows %q, want the server's reason Not administrator user", got)
	}
	b.do("cancel", uiClick(`#dialog button[value="cancel"]`), chromedp.WaitNotVisible(uiSel("#dialog")))
	if conn.IsClosed() {
		t.Fatal("the refused close closed the connection")
	}
	b.u1Logout()

	// guest closes it with a reason; the client gets 320 with that text.
	const reason = "u1: maintenance window"
	b.login(base, "guest", "guest")
	b.goTo(base, connHash, "#conn-close")
	b.do("a reason that cannot travel in a header",
		uiClick("#conn-close"),
		chromedp.WaitVisible(uiSel("#close-reason")),
		chromedp.SetValue(uiSel("#close-reason"), "café ☕"),
		uiClick("#dialog-confirm"),
		chromedp.WaitVisible(uiSel("#dialog-error")))
	if got := b.text("#dialog-error"); !strings.Contains(got, "printable ASCII") || conn.IsClosed() {
		t.Errorf("non-ASCII reason: dialog shows %q, connection closed %v", got, conn.IsClosed())
	}
	b.do("close the connection",
		chromedp.SetValue(uiSel("#close-reason"), reason),
		uiClick("#dialog-confirm"),
		chromedp.WaitVisible(uiSel("#connections")))
	if got := b.text("#status"); !strings.Contains(got, "Closed connection") {
		t.Errorf("status after close = %q", got)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp.ConnectionForced || !strings.Contains(e.Reason, reason) {
			t.Errorf("client got connection.close %v, want 320 with %q", e, reason)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the client never got connection.close")
	}
	if r := tg.do("GET", "/api/connections/"+esc(name), nil); r.status != 404 {
		t.Errorf("closed connection: GET = %s, want 404", r)
	}
	b.checkNoExceptions()
}

// testUIExchanges (TestUI/Exchanges): issue 15, the exchanges pages. Add an exchange with
// typed arguments in the UI (checked over AMQP and the API) and an
// x-delayed-message one, filter the list by vhost, bind the exchange to a
// queue, publish from its page with a routing key, headers and properties
// and get the message over AMQP, see an exchange-to-exchange binding to
// it, remove both bindings and see a publish go unroutable (mandatory
// return over AMQP), publish through the default exchange, and delete it.
// Error paths: an amq. name is refused with RabbitMQ's reason, a delayed
// exchange without x-delayed-type shows the server's reason, binding to a
// missing queue shows the 404's reason, and deleting amq.direct is refused.
func testUIExchanges(t *testing.T) {
	chrome := uiChromium(t)
	tg := newMgmtWarren(t)
	base := tg.url
	ch := tg.channel(t, "/")
	vh := tg.freshVhost(t) // for the list's vhost filter
	if _, err := ch.QueueDeclare("u1-orders", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}

	b := newUIBrowser(t, chrome)
	b.login(base, "guest", "guest")
	b.do("exchanges page", uiClick(`a[data-nav="exchanges"]`), chromedp.WaitVisible(uiSel(`#exchanges tr[data-name="amq.topic"]`)))

	// By keyboard: Enter on "Add a new exchange" opens the dialog with the
	// focus in it, Escape closes it.
	b.do("add dialog by keyboard",
		chromedp.Focus(uiSel("#x-add")),
		chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(uiSel("#x-new-name")))
	if got := b.eval(`document.activeElement.closest('dialog') ? 'in' : 'out'`); got != "in" {
		t.Errorf("focus after opening the dialog is %s of it", got)
	}
	b.do("escape closes it", chromedp.KeyEvent("\x1b"), chromedp.WaitNotVisible(uiSel("#dialog")))

	// Error path: amq. names are reserved; the dialog shows the reason.
	b.do("add amq.u1",
		uiClick("#x-add"),
		chromedp.WaitVisible(uiSel("#x-new-name")),
		chromedp.SetValue(uiSel("#x-new-name"), "amq.u1"),
		uiClick("#dialog-confirm"),
		chromedp.WaitVisible(uiSel("#dialog-error")))
	if got := b.text("#dialog-error"); !strings.Contains(got, "Access refused") {
		t.Errorf("amq. exchange: dialog shows %q, want Access refused", got)
	}
	if r := tg.do("GET", "/api/exchanges/%2F/amq.u1", nil); r.status != 404 {
		t.Errorf("refused amq.u1 exists: %s", r)
	}

	// The same dialog: an x-delayed-message exchange needs x-delayed-type;
	// without it the server's reason shows, with it ("Add: Delayed type")
	// the exchange is made.
	b.do("add u1-delayed without x-delayed-type",
		chromedp.SetValue(uiSel("#x-new-name"), "u1-delayed"),
		chromedp.SetValue(uiSel("#x-new-type"), "x-delayed-message"),
		uiClick("#dialog-confirm"),
		chromedp.Poll[chromedp.Void](`document.querySelector('#dialog-error').textContent.includes('x-delayed-type')`,
			chromedp.WithPollingTimeout(8*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	b.eval(`[...document.querySelectorAll('#x-new-args .kvarg-quick button')].find(b => b.textContent === 'Delayed type').click() || ''`)
	b.do("add u1-delayed", uiClick("#dialog-confirm"), chromedp.WaitNotVisible(uiSel("#dialog")))
	if x := tg.getJSON("/api/exchanges/%2F/u1-delayed").(map[string]any); x["type"] != "x-delayed-message" ||
		!jsonEqual(x["arguments"], map[string]any{"x-delayed-type": "direct"}) {
		t.Errorf("u1-delayed = %v", x)
	}

	// A valid topic exchange with two typed arguments.
	b.do("add u1-events",
		uiClick("#x-add"),
		chromedp.WaitVisible(uiSel("#x-new-name")),
		chromedp.SetValue(uiSel("#x-new-name"), "u1-events"),
		chromedp.SetValue(uiSel("#x-new-type"), "topic"),
		chromedp.SetValue(uiSel("#x-new-args-key-0"), "x-u1-note"),
		chromedp.SetValue(uiSel("#x-new-args-value-0"), "hello"),
		uiClick("#x-new-args-add"),
		chromedp.SetValue(uiSel("#x-new-args-key-1"), "x-u1-limit"),
		chromedp.SetValue(uiSel("#x-new-args-value-1"), "5"),
		chromedp.SetValue(uiSel("#x-new-args-type-1"), "number"),
		uiClick("#dialog-confirm"),
		chromedp.WaitNotVisible(uiSel("#dialog")),
		chromedp.WaitVisible(uiSel(`#exchanges tr[data-name="u1-events"]`)))
	if got := b.text(`#exchanges tr[data-name="u1-events"] td[data-col="type"]`); got != "topic" {
		t.Errorf("listed type = %q", got)
	}
	if err := ch.ExchangeDeclarePassive("u1-events", "topic", true, false, false, false, nil); err != nil {
		t.Fatalf("u1-events over AMQP: %v", err)
	}
	x := tg.getJSON("/api/exchanges/%2F/u1-events").(map[string]any)
	if x["type"] != "topic" || x["durable"] != true || !jsonEqual(x["arguments"], map[string]any{"x-u1-note": "hello", "x-u1-limit": 5}) {
		t.Errorf("u1-events = %v", x)
	}
	b.shot("exchanges")
	b.fitsPhone("the exchanges list")

	// The virtual host filter lists one vhost's exchanges only.
	pickVhost := func(name string) {
		t.Helper()
		b.poll("vhost option "+name, `!!document.querySelector('#exchanges-vhost option[value=`+jsq(name)+`]')`)
		b.eval(`(s => { s.value = ` + jsq(name) + `; s.dispatchEvent(new Event('change')); return '' })(document.querySelector('#exchanges-vhost'))`)
	}
	pickVhost(vh)
	b.poll("only "+vh+"'s exchanges", `(rows => rows.length > 0 && rows.every(r => r.dataset.vhost === `+jsq(vh)+`))([...document.querySelectorAll('#exchanges tbody tr[data-vhost]')])`)
	pickVhost("")
	b.poll("all exchanges again", `!!document.querySelector('#exchanges tr[data-name="u1-events"]')`)

	// Its page: bind to u1-orders.
	fromRow := `#x-from-table tr[data-destination="u1-orders"]`
	b.do("exchange page", uiClick(`#exchanges tr[data-name="u1-events"] td[data-col="name"] a`), chromedp.WaitVisible(uiSel("#x-bind")))
	b.do("bind to u1-orders",
		chromedp.SetValue(uiSel("#x-bind-dest"), "u1-orders"),
		chromedp.SetValue(uiSel("#x-bind-key"), "orders.*.created"),
		uiClick("#x-bind-submit"),
		chromedp.WaitVisible(uiSel(fromRow)))
	if got := b.text(fromRow + ` td[data-col="routing-key"]`); got != "orders.*.created" {
		t.Errorf("binding routing key shown = %q", got)
	}
	bs := tg.getJSON("/api/bindings/%2F/e/u1-events/q/u1-orders").([]any)
	if len(bs) != 1 || bs[0].(map[string]any)["routing_key"] != "orders.*.created" {
		t.Fatalf("bindings u1-events -> u1-orders = %v", bs)
	}

	// Error path: binding to a missing queue shows the 404's reason.
	b.do("bind to a missing queue",
		chromedp.SetValue(uiSel("#x-bind-dest"), "u1-nope"),
		uiClick("#x-bind-submit"),
		chromedp.WaitVisible(uiSel("#x-bind-result .result")))
	if got := b.text("#x-bind-result"); !strings.Contains(got, "no queue 'u1-nope' in vhost '/'") {
		t.Errorf("bind to a missing queue shows %q", got)
	}

	// Publish from the page: routed, and there over AMQP as sent.
	b.do("publish",
		chromedp.SetValue(uiSel("#x-publish-key"), "orders.eu.created"),
		chromedp.SetValue(uiSel("#x-publish-mode"), "2"),
		chromedp.SetValue(uiSel("#x-publish-headers-key-0"), "tenant"),
		chromedp.SetValue(uiSel("#x-publish-headers-value-0"), "acme"),
		uiClick("#x-publish-headers-add"),
		chromedp.SetValue(uiSel("#x-publish-headers-key-1"), "attempt"),
		chromedp.SetValue(uiSel("#x-publish-headers-value-1"), "3"),
		chromedp.SetValue(uiSel("#x-publish-headers-type-1"), "number"),
		chromedp.SetValue(uiSel("#x-publish-props-key-0"), "content_type"),
		chromedp.SetValue(uiSel("#x-publish-props-value-0"), "application/json"),
		chromedp.SetValue(uiSel("#x-publish-payload"), `{"order":7}`),
		uiClick("#x-publish-submit"),
		chromedp.WaitVisible(uiSel("#x-publish-result .result")))
	if got := b.eval(`document.querySelector('#x-publish-result .result').dataset.routed + ' ' + document.querySelector('#x-publish-result').textContent`); got != "true Message published." {
		t.Errorf("publish result = %q", got)
	}
	m := u1Get(t, ch, "u1-orders")
	if m.Exchange != "u1-events" || m.RoutingKey != "orders.eu.created" || string(m.Body) != `{"order":7}` ||
		m.ContentType != "application/json" || m.DeliveryMode != amqp.Persistent ||
		m.Headers["tenant"] != "acme" || fmt.Sprint(m.Headers["attempt"]) != "3" {
		t.Errorf("got exchange %q key %q body %q type %q mode %d headers %v", m.Exchange, m.RoutingKey, m.Body, m.ContentType, m.DeliveryMode, m.Headers)
	}

	u1ChartMoves(t, tg, b, "#x-rate-chart", "Publish in", func() {
		for range 5 {
			if err := ch.PublishWithContext(context.Background(), "u1-events", "u1.chart", false, false, amqp.Publishing{Body: []byte("tick")}); err != nil {
				t.Fatal(err)
			}
		}
	})

	// A binding to this exchange (from amq.topic) shows under "to".
	if err := ch.ExchangeBind("u1-events", "audit.#", "amq.topic", false, nil); err != nil {
		t.Fatal(err)
	}
	toRow := `#x-to-table tr[data-source="amq.topic"]`
	b.do("binding to the exchange shown", chromedp.WaitVisible(uiSel(toRow)))
	if got := b.text(toRow + ` td[data-col="routing-key"]`); got != "audit.#" {
		t.Errorf("binding to the exchange: routing key %q", got)
	}
	if got := b.text("nav.crumbs"); got != "Exchanges › vhost /" {
		t.Errorf("breadcrumbs = %q", got)
	}
	b.shot("exchange")
	b.fitsPhone("the exchange page")

	// Remove the binding to u1-orders: gone from the page and the API, and
	// a mandatory publish is returned unroutable.
	b.do("unbind",
		uiClick(fromRow+" button.unbind"),
		chromedp.WaitVisible(uiSel("#dialog-confirm")),
		uiClick("#dialog-confirm"),
		chromedp.WaitNotPresent(uiSel(fromRow)))
	if bs := tg.getJSON("/api/bindings/%2F/e/u1-events/q/u1-orders").([]any); len(bs) != 0 {
		t.Errorf("after unbind: bindings = %v", bs)
	}
	// And the binding to it from amq.topic.
	b.do("unbind from amq.topic",
		uiClick(toRow+" button.unbind"),
		chromedp.WaitVisible(uiSel("#dialog-confirm")),
		uiClick("#dialog-confirm"),
		chromedp.WaitNotPresent(uiSel(toRow)))
	if bs := tg.getJSON("/api/bindings/%2F/e/amq.topic/e/u1-events").([]any); len(bs) != 0 {
		t.Errorf("after unbind: bindings amq.topic -> u1-events = %v", bs)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	if err := ch.PublishWithContext(context.Background(), "u1-events", "orders.eu.created", true, false, amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-returns:
		if r.ReplyCode != amqp.NoRoute {
			t.Errorf("returned with %d %s, want 312 NO_ROUTE", r.ReplyCode, r.ReplyText)
		}
	case <-time.After(5 * time.Second):
		t.Error("a mandatory publish after the unbind was not returned")
	}
	b.do("publish again",
		uiClick("#x-publish-submit"),
		chromedp.WaitVisible(uiSel(`#x-publish-result .result[data-routed="false"]`)))
	if got := b.text("#x-publish-result"); got != "Message published, but not routed." {
		t.Errorf("unroutable publish result = %q", got)
	}

	// The default exchange routes by queue name.
	b.goTo(base, "#/exchanges/%2F/amq.default", "#x-publish")
	b.do("publish through the default exchange",
		chromedp.SetValue(uiSel("#x-publish-key"), "u1-orders"),
		chromedp.SetValue(uiSel("#x-publish-payload"), "via default"),
		uiClick("#x-publish-submit"),
		chromedp.WaitVisible(uiSel(`#x-publish-result .result[data-routed="true"]`)))
	if m := u1Get(t, ch, "u1-orders"); string(m.Body) != "via default" || m.Exchange != "" {
		t.Errorf("via the default exchange: exchange %q body %q", m.Exchange, m.Body)
	}
	if n := b.eval(`String(document.querySelectorAll('#x-delete, #x-bind').length)`); n != "0" {
		t.Errorf("the default exchange offers delete or bind (%s elements)", n)
	}

	// Error path: amq.direct may not be deleted; the dialog says why.
	b.goTo(base, "#/exchanges/%2F/amq.direct", "#x-delete")
	b.do("delete amq.direct",
		uiClick("#x-delete"),
		chromedp.WaitVisible(uiSel("#dialog-confirm")),
		uiClick("#dialog-confirm"),
		chromedp.WaitVisible(uiSel("#dialog-error")))
	if got := b.text("#dialog-error"); !strings.Contains(strings.ToLower(got), "access refused") {
		t.Errorf("deleting amq.direct shows %q, want access refused", got)
	}
	b.do("cancel", uiClick(`#dialog button[value="cancel"]`), chromedp.WaitNotVisible(uiSel("#dialog")))
	tg.must("GET", "/api/exchanges/%2F/amq.direct", nil, 200)

	// Delete u1-events after the confirmation.
	b.goTo(base, "#/exchanges/%2F/u1-events", "#x-delete")
	b.do("delete the exchange",
		uiClick("#x-delete"),
		chromedp.WaitVisible(uiSel("#dialog-confirm")),
		uiClick("#dialog-confirm"),
		chromedp.WaitVisible(uiSel("#exchanges")))
	if r := tg.do("GET", "/api/exchanges/%2F/u1-events", nil); r.status != 404 {
		t.Errorf("deleted exchange: %s", r)
	}
	b.checkNoExceptions()
}

// u1Get gets one message from queue over AMQP, polling until it is there.
func u1Get(t *testing.T, ch *amqp.Channel, queue string) amqp.Delivery {
	t.Helper()
	var m amqp.Delivery
	if !testutil.Until(5*time.Second, func() bool {
		var ok bool
		var err error
		if m, ok, err = ch.Get(queue, true); err != nil {
			t.Fatal(err)
		}
		return ok
	}) {
		t.Fatalf("no message in %s", queue)
	}
	return m
}

// u1ChartMoves: issue 15, a chart's series change after traffic: the
// chart's series ends above zero while traffic runs and the broker
// samples. Samples lie on a 5 s grid, so this takes up to two grid steps.
func u1ChartMoves(t *testing.T, tg *mgmtTarget, b *uiBrowser, chart, series string, traffic func()) {
	t.Helper()
	sample := sampleEvery(tg.w, 500*time.Millisecond)
	last := `(c => c && c.dataset.last ? String(JSON.parse(c.dataset.last)[` + jsq(series) + `]) : '')(document.querySelector(` + jsq(chart) + `))`
	var got string
	if !testutil.Until(20*time.Second, func() bool {
		traffic()
		sample()
		got = b.eval(last)
		return got != "" && got != "0" && got != "null"
	}) {
		t.Errorf("chart %s never moved: %s = %q", chart, series, got)
	}
}
