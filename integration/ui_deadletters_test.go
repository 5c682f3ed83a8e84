package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/internal/testutil"
)

// testUIDeadLetterTimelineAndPreview (TestUI/DeadLetterTimelineAndPreview): issue 15, the dead-letter page's
// timeline shows the dead letters per minute by reason, by source queue
// and by destination, and follows new traffic; the replay dialog previews
// where each message would go before anything moves (following its
// filters), and the replay then empties the DLQ as the preview said. The
// page and the dialog work from the keyboard, at 1280 px and 390 px, with
// readable contrast.
func testUIDeadLetterTimelineAndPreview(t *testing.T) {
	chrome := uiChromium(t)
	e := newEnv(t)
	w := e.warren()
	ch := e.channel()
	dl := amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "uidl.dlq"}
	for _, q := range []string{"uidl.dlq", "uidl.orders", "uidl.ttl"} {
		args := dl
		if q == "uidl.dlq" {
			args = nil
		}
		if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
			t.Fatal(err)
		}
	}
	pub := func(q, body, expiration string) {
		t.Helper()
		if err := ch.PublishWithContext(context.Background(), "", q, false, false,
			amqp.Publishing{Body: []byte(body), Expiration: expiration}); err != nil {
			t.Fatal(err)
		}
	}
	reject := func(q string) {
		t.Helper()
		var d amqp.Delivery
		if !testutil.Until(5*time.Second, func() bool {
			var ok bool
			var err error
			if d, ok, err = ch.Get(q, false); err != nil {
				t.Fatal(err)
			}
			return ok
		}) {
			t.Fatalf("nothing in %s", q)
		}
		if err := d.Reject(false); err != nil {
			t.Fatal(err)
		}
	}
	// Two rejected from uidl.orders, one expired in uidl.ttl (a 1 ms
	// per-message TTL, which the replay does not restore).
	pub("uidl.orders", "o1", "")
	pub("uidl.orders", "o2", "")
	reject("uidl.orders")
	reject("uidl.orders")
	pub("uidl.ttl", "t1", "1")
	uiWaitMessages(t, ch, "uidl.dlq", 3)

	b := newUIBrowser(t, chrome)
	b.login(w.MgmtURL(), "guest", "guest")
	// Record the page's replay requests: previews are dry runs, and only
	// the confirmation replays.
	b.eval(`(() => { const f = window.fetch; window.__replays = [];
		window.fetch = (u, o) => { if (o && o.method === 'POST' && /\/replay$/.test(u)) window.__replays.push(o.body); return f(u, o); };
		return ''; })()`)
	chart := `#dl-timeline-chart`
	waitTotals := func(what, cond string) {
		t.Helper()
		b.do(what, chromedp.Poll[chromedp.Void](`(t => `+cond+`)(JSON.parse(document.querySelector('`+chart+`').dataset.totals || '{}'))`,
			chromedp.WithPollingTimeout(9*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
	}
	b.do("dead-letter page", uiClick(`a[data-nav="dead-letters"]`), chromedp.WaitVisible(uiSel(chart)))
	waitTotals("timeline by reason", `t.rejected === 2 && t.expired === 1 && t.maxlen === 0 && t.delivery_limit === 0`)
	if n := b.eval(`document.querySelector('` + chart + `').dataset.points`); n != "60" {
		t.Errorf("the timeline draws %s minutes, want 60", n)
	}
	if got := b.text("#dl-timeline-summary"); !strings.Contains(got, "3 dead letters in the last hour") ||
		!strings.Contains(got, "uidl.orders: 2") || !strings.Contains(got, "uidl.dlq: 3") {
		t.Errorf("timeline summary = %q", got)
	}

	// The other views, chosen from the keyboard: by source queue, by
	// destination.
	b.do("view by source queue", chromedp.Focus(uiSel("#dl-tl-view")), chromedp.KeyEvent(kb.ArrowDown))
	waitTotals("timeline by source queue", `t['uidl.orders'] === 2 && t['uidl.ttl'] === 1 && Object.keys(t).length === 2`)
	b.do("view by destination", chromedp.KeyEvent(kb.ArrowDown))
	waitTotals("timeline by destination", `t['uidl.dlq'] === 3 && Object.keys(t).length === 1`)
	b.do("back to by reason", chromedp.SetValue(uiSel("#dl-tl-view"), "reason")) // SetValue fires input and change

	// New traffic shows in the series at the next refresh.
	pub("uidl.orders", "o3", "")
	reject("uidl.orders")
	uiWaitMessages(t, ch, "uidl.dlq", 4)
	waitTotals("the timeline follows traffic", `t.rejected === 3 && t.expired === 1`)
	b.shot("dead-letters-timeline")

	// The replay dialog, opened from the keyboard, previews at once:
	// three to uidl.orders, one to uidl.ttl, through the default exchange.
	row := `#dlqs tr[data-name="uidl.dlq"]`
	b.do("open replay from the keyboard",
		chromedp.WaitVisible(uiSel(row+" button.replay:enabled")),
		chromedp.Focus(uiSel(row+" button.replay")),
		chromedp.KeyEvent(kb.Enter),
		chromedp.WaitVisible(uiSel("#rp-dests")))
	dests := func() string {
		return b.eval(`[...document.querySelectorAll('#rp-dests li')].map(li => li.dataset.status + ':' + li.dataset.queues + '=' + li.querySelector('strong').textContent).join(' ')`)
	}
	if got := dests(); got != "routed:uidl.orders=3 routed:uidl.ttl=1" {
		t.Errorf("preview destinations = %q", got)
	}
	if got := b.text("#rp-dests"); !strings.Contains(got, "to uidl.orders") || !strings.Contains(got, "(AMQP default)") {
		t.Errorf("preview text = %q, want it to name the destination and the exchange", got)
	}
	if got := b.eval(`String(document.querySelectorAll('#rp-messages tbody tr[data-status="routed"]').length)`); got != "4" {
		t.Errorf("preview lists %s messages, want 4", got)
	}
	if got := b.text("#dialog-confirm"); got != "Replay 4 messages" {
		t.Errorf("confirm button = %q", got)
	}
	b.shot("replay-preview")
	// The preview follows the filters.
	b.do("filter expired", chromedp.SetValue(uiSel("#rp-reason"), "expired"))
	b.poll("preview of the expired one", `(l => l.length === 1 && l[0].dataset.queues === 'uidl.ttl')(document.querySelectorAll('#rp-dests li'))`)
	b.do("any reason again", chromedp.SetValue(uiSel("#rp-reason"), ""))
	b.poll("preview of all", `document.querySelectorAll('#rp-dests li').length === 2`)

	// Readable: the preview's text and badges, the summary and the
	// chart's caption keep a contrast ratio of at least 4.5:1.
	contrast := b.eval(`(() => {
		const rgb = c => c.match(/[\d.]+/g).slice(0, 4).map(Number);
		const lum = ([r, g, b]) => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; }; return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
		const bg = el => { for (let e = el; e; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor); if (c.length < 4 || c[3] > 0) return c; } return [255, 255, 255]; };
		const bad = [];
		for (const sel of ['#rp-summary', '#rp-dests .badge', '#rp-messages td', '#rp-messages th', '#dl-timeline-summary', '#dl-timeline-chart .chart-caption', '#dialog-confirm']) {
			for (const el of document.querySelectorAll(sel)) {
				const a = lum(rgb(getComputedStyle(el).color)), c = lum(bg(el));
				const r = (Math.max(a, c) + 0.05) / (Math.min(a, c) + 0.05);
				if (r < 4.5) bad.push(sel + ' ' + r.toFixed(2));
			}
		}
		return bad.join(', ');
	})()`)
	if contrast != "" {
		t.Errorf("low contrast: %s", contrast)
	}

	// Nothing moved yet; Escape closes the dialog and replays nothing.
	uiWaitMessages(t, ch, "uidl.dlq", 4)
	b.do("escape", chromedp.KeyEvent(kb.Escape))
	b.poll("dialog closed", `!document.querySelector('#dialog').open`)
	uiWaitMessages(t, ch, "uidl.dlq", 4)

	// At a phone's width the page and the dialog fit: no sideways scroll.
	b.do("phone width", chromedp.EmulateViewport(390, 844))
	b.poll("layout at 390 px", `document.documentElement.clientWidth === 390`)
	b.poll("timeline fits", `document.querySelector('#dl-timeline-chart').getBoundingClientRect().right <= 390`)
	b.poll("no sideways scroll at 390 px", `document.documentElement.scrollWidth === 390`)
	if b.shots != "" {
		b.capture("dead-letters-timeline-phone")
	}
	b.do("open replay at 390 px", uiClick(row+" button.replay"), chromedp.WaitVisible(uiSel("#rp-dests")))
	if got := b.eval(`(() => {
		const d = document.querySelector('#dialog').getBoundingClientRect();
		if (d.left < 0 || d.right > 390) return 'the dialog spans ' + d.left + '..' + d.right;
		// Its content stays inside it (the table scrolls within its wrapper).
		const out = [...document.querySelectorAll('#dialog p, #dialog .field, #rp-dests, #rp-preview .table-wrap, #dialog-confirm')]
			.filter(e => e.getBoundingClientRect().right > d.right + 0.5).map(e => e.id || e.className || e.tagName);
		return out.length ? 'overflowing the dialog: ' + out.join(', ') : 'fits';
	})()`); got != "fits" {
		t.Errorf("the replay dialog at 390 px: %s", got)
	}
	if b.shots != "" {
		b.capture("replay-preview-phone")
	}
	b.do("desktop width", chromedp.EmulateViewport(1280, 800))
	b.poll("layout at 1280 px", `document.documentElement.clientWidth === 1280`)

	// Confirm: the replay does what the preview said, and the DLQ empties.
	b.do("replay", uiClick("#dialog-confirm"), chromedp.WaitVisible(uiSel("#dl-result .result")))
	if got := b.text("#dl-result"); !strings.Contains(got, "4 replayed, 0 skipped, 0 failed, 0 remaining") {
		t.Errorf("replay result = %q", got)
	}
	calls := b.eval(`JSON.stringify(window.__replays)`)
	if got := b.eval(`String(window.__replays.filter(b => !JSON.parse(b).dry_run).length)`); got != "1" {
		t.Errorf("the page made %s replays, want 1: %s", got, calls)
	}
	if !strings.Contains(calls, `\"dry_run\":true`) {
		t.Errorf("the page made no preview: %s", calls)
	}
	uiWaitMessages(t, ch, "uidl.dlq", 0)
	uiWaitMessages(t, ch, "uidl.orders", 3)
	uiWaitMessages(t, ch, "uidl.ttl", 1)
	b.poll("the DLQ shows empty", fmt.Sprintf(`(td => td && td.textContent === '0')(document.querySelector('%s td[data-col="ready"]'))`, row))
	b.checkNoExceptions()
}
