package integration

// The web UI's browser test: a headless Chromium drives the management UI
// of an in-process Warren through a dead-letter round trip (login, the
// dead-letter page, the message browser's x-death table, replay, the queue
// list). It needs Debian's chromium package; without it the test skips,
// except under CI=true where it fails. Set WARREN_SCREENSHOTS=<dir> to
// write screenshots of the pages there (docs/screenshots/take does).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

// uiSel selects the first element matching a CSS selector.
type uiSel = chromedp.CSS

// TestUI runs the web UI's browser tests one after another (a browser
// takes a core), together in parallel with the package's other parallel
// tests, which wait on the network. As subtests of one test they hold one
// of the package's parallel slots; as parallel tests of their own, those
// waiting for the browser held a slot each. Run one with
// -run 'TestUI/Queues$'.
func TestUI(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"Browser", testUIBrowser},
		{"BrowserClusterNodes", testUIBrowserClusterNodes},
		{"Queues", testUIQueues},
		{"DeadLetterTimelineAndPreview", testUIDeadLetterTimelineAndPreview},
		{"OverviewCharts", testUIOverviewCharts},
		{"ConnsChannels", testUIConnsChannels},
		{"Exchanges", testUIExchanges},
		{"Admin", testUIAdmin},
		{"ClusterPage", testUIClusterPage},
		{"StreamPage", testUIStreamPage},
		{"KeyboardAndContrast", testUIKeyboardAndContrast},
	} {
		t.Run(c.name, c.run)
	}
}

// uiChromium finds the browser, or skips (fails under CI=true).
func uiChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("the web UI browser test needs Chromium (apt-get install chromium); CI=true, so it may not skip")
	}
	t.Skip("Chromium not found (chromium or chromium-browser in PATH): skipping the web UI browser test; apt-get install chromium to run it")
	return ""
}

// uiBrowser drives one headless tab.
type uiBrowser struct {
	t      *testing.T
	ctx    context.Context
	shots  string
	mu     sync.Mutex
	errors []string // uncaught exceptions in the page
}

func newUIBrowser(t *testing.T, chrome string) *uiBrowser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.WindowSize(1280, 800))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	b := &uiBrowser{t: t, ctx: ctx, shots: os.Getenv("WARREN_SCREENSHOTS")}
	// The first action starts the browser and binds it to ctx, which has no
	// deadline, so that a step's timeout does not close it.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", chrome, err)
	}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.IsException() {
				b.mu.Lock()
				b.errors = append(b.errors, fmt.Sprintf("%s:%d %s", m.URL, m.Line+1, m.Text))
				b.mu.Unlock()
			}
		}
	}()
	b.do("set the viewport", chromedp.EmulateViewport(1280, 800))
	return b
}

// do runs steps with a deadline; on failure it reports what the page shows.
func (b *uiBrowser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v\npage: %s", what, err, b.pageText())
	}
}

// uiClick clicks the first element matching sel once it is shown and
// enabled. One script in the page finds the element and clicks it, so the
// page cannot change in between. chromedp.Click finds the node, measures
// it and then sends mouse events to that spot: a poll that re-renders a
// table in between loses the node ("Could not find node with given id"),
// and anything that moves the layout sends the click elsewhere.
func uiClick(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.PollFunction[chromedp.Void](`sel => {
		const e = document.querySelector(sel);
		if (!e || e.disabled || !e.checkVisibility()) return false;
		e.scrollIntoView({block: 'nearest'});
		e.click();
		return true;
	}`, chromedp.WithPollingArgs(sel), chromedp.WithPollingTimeout(8*time.Second),
		chromedp.WithPollingInterval(50*time.Millisecond))
}

func (b *uiBrowser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.TextContent(uiSel(sel)))
	if err != nil {
		b.t.Fatalf("reading %s: %v\npage: %s", sel, err, b.pageText())
	}
	return strings.TrimSpace(s)
}

// pageText is the visible text of the page, for failure messages.
func (b *uiBrowser) pageText() string {
	ctx, cancel := context.WithTimeout(b.ctx, 3*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.hash + "\n" + document.body.innerText`))
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	return s
}

// uiPhoneShots are the pages also shot at a phone's width (390 px).
var uiPhoneShots = map[string]bool{"overview": true, "queue-list": true, "queue-detail": true, "dead-letters-timeline": true, "cluster": true}

// shot writes a full-page screenshot (name.png) when WARREN_SCREENSHOTS is
// set, and for the pages in uiPhoneShots one at 390 px too
// (name-phone.png). docs/screenshots/take runs every UI test so.
func (b *uiBrowser) shot(name string) {
	b.t.Helper()
	if b.shots == "" {
		return
	}
	if err := os.MkdirAll(b.shots, 0o755); err != nil {
		b.t.Fatal(err)
	}
	b.capture(name)
	if uiPhoneShots[name] {
		b.do("phone width", chromedp.EmulateViewport(390, 844))
		b.poll("layout at 390 px", `document.documentElement.clientWidth === 390`)
		b.capture(name + "-phone")
		b.do("desktop width", chromedp.EmulateViewport(1280, 800))
		b.poll("layout at 1280 px", `document.documentElement.clientWidth === 1280`)
	}
}

func (b *uiBrowser) capture(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	// From the top (a sticky top bar would show where the page is
	// scrolled to), once charts have redrawn after a resize (they follow
	// a ResizeObserver).
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.scrollTo(0, 0), new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`, chromedp.EvalAwaitPromise)); err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

func (b *uiBrowser) checkNoExceptions() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errors {
		b.t.Errorf("uncaught exception in the page: %s", e)
	}
}

// login signs in on the UI at base as user (replacing whatever the form
// holds) and waits until the page says who is logged in.
func (b *uiBrowser) login(base, user, pass string) {
	b.t.Helper()
	b.do("log in as "+user,
		chromedp.Navigate(base+"/#/"),
		chromedp.WaitVisible(uiSel("#login-user")),
		chromedp.SetValue(uiSel("#login-user"), user),
		chromedp.SetValue(uiSel("#login-pass"), pass),
		uiClick("#login-form button[type=submit]"),
		chromedp.WaitVisible(uiSel("#whoami")))
	b.poll("logged in as "+user, fmt.Sprintf(`document.querySelector('#whoami').textContent.startsWith(%q)`, user))
}

// goTo opens a hash route and waits for sel.
func (b *uiBrowser) goTo(base, hash, sel string) {
	b.t.Helper()
	b.do("open "+hash, chromedp.Navigate(base+"/"+hash), chromedp.WaitVisible(uiSel(sel)))
}

// confirm confirms the open dialog and waits until it closed.
func (b *uiBrowser) confirm(what string) {
	b.t.Helper()
	b.do(what, uiClick("#dialog-confirm"))
	b.poll(what+": dialog closed", `!document.querySelector('#dialog').open`)
}

// waitOption waits until the select offers value.
func (b *uiBrowser) waitOption(sel, value string) {
	b.t.Helper()
	b.poll(sel+" offers "+value, fmt.Sprintf(`[...document.querySelectorAll('%s option')].some(o => o.value === %q)`, sel, value))
}

// eval returns the value of a JavaScript expression.
func (b *uiBrowser) eval(expr string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v\npage: %s", expr, err, b.pageText())
	}
	return s
}

// uiContrastJS lists the visible text on the page whose contrast with
// its background is below WCAG 2's AA level: 4.5:1, 3:1 for large text
// (24 px, or 18.66 px bold). Colours are composed through translucent
// backgrounds and opacity; disabled controls are exempt, as in WCAG.
const uiContrastJS = `(() => {
  const parse = c => { const m = /rgba?\(([^)]+)\)/.exec(c); if (!m) return null;
    const p = m[1].split(/[\s,\/]+/).filter(Boolean).map(Number); return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1}; };
  const over = (top, bot) => ({r: top.r * top.a + bot.r * (1 - top.a), g: top.g * top.a + bot.g * (1 - top.a), b: top.b * top.a + bot.b * (1 - top.a), a: 1});
  const lum = c => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
  const background = el => { const layers = [];
    for (let e = el; e; e = e.parentElement) { const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c.a > 0) { layers.push(c); if (c.a >= 1) break; } }
    let bg = {r: 255, g: 255, b: 255, a: 1};
    for (let i = layers.length - 1; i >= 0; i--) bg = over(layers[i], bg);
    return bg; };
  const bad = [], seen = new Set();
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    const t = walk.currentNode, el = t.parentElement;
    if (!t.textContent.trim() || !el || seen.has(el)) continue;
    seen.add(el);
    const box = el.getBoundingClientRect(), cs = getComputedStyle(el);
    if (box.width <= 1 || box.height <= 1 || cs.visibility === 'hidden') continue;
    if (el.closest('button:disabled, [aria-disabled="true"], [hidden], option')) continue;
    let opacity = 1;
    for (let e = el; e; e = e.parentElement) opacity *= Number(getComputedStyle(e).opacity);
    const bg = background(el), fg0 = parse(cs.color);
    const fg = over({...fg0, a: fg0.a * opacity}, bg);
    const l1 = lum(fg), l2 = lum(bg), ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    const size = parseFloat(cs.fontSize), large = size >= 24 || (Number(cs.fontWeight) >= 700 && size >= 18.66);
    if (ratio < (large ? 3 : 4.5)) bad.push(ratio.toFixed(2) + ':1 ' + el.tagName.toLowerCase() + (el.className ? '.' + String(el.className).split(' ').join('.') : '') + ' "' + t.textContent.trim().slice(0, 40) + '"');
  }
  return JSON.stringify(bad.slice(0, 15));
})()`

// checkContrast fails the test for text below WCAG AA contrast on the
// page shown, in the light and in the dark colour scheme.
func (b *uiBrowser) checkContrast(page string) {
	b.t.Helper()
	for _, scheme := range []string{"light", "dark"} {
		b.do("colour scheme "+scheme, func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
			_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
			return chromedp.Void{}, err
		})
		if got := b.eval(uiContrastJS); got != "[]" {
			b.t.Errorf("%s page, %s scheme: text below WCAG AA contrast: %s", page, scheme, got)
		}
	}
	b.do("colour scheme light", func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "light"}}})
		return chromedp.Void{}, err
	})
}

// fitsPhone checks that the page fits a 390 px wide screen (tables
// scroll inside their .table-wrap, the page itself does not), then goes
// back to 1280 px.
func (b *uiBrowser) fitsPhone(what string) {
	b.t.Helper()
	b.do("phone width", chromedp.EmulateViewport(390, 844))
	b.poll(what+" fits 390 px", `document.documentElement.scrollWidth <= 390`)
	b.do("desktop width", chromedp.EmulateViewport(1280, 800))
}

// poll waits until the JavaScript expression is truthy.
func (b *uiBrowser) poll(what, expr string) {
	b.t.Helper()
	b.do(what, func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(8*time.Second),
			chromedp.WithPollingInterval(100*time.Millisecond))(ctx, t)
		return chromedp.Void{}, err
	})
}

func testUIBrowser(t *testing.T) {
	chrome := uiChromium(t)
	w := warrentest.Start(t)
	base := w.MgmtURL()

	// A work queue that dead-letters into orders.dlq, and one rejected message.
	conn, err := amqp.Dial(w.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("orders.dlq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("orders", true, false, false, false, amqp.Table{
		"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "orders.dlq",
	}); err != nil {
		t.Fatal(err)
	}
	const body = `{"order":1042,"sku":"B-42","qty":2}`
	uiDeadLetter(t, ch, body)
	uiWaitMessages(t, ch, "orders.dlq", 1)

	b := newUIBrowser(t, chrome)

	// A wrong password shows the server's reason on the login form.
	b.do("wrong password",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(uiSel("#login-user")),
		chromedp.SendKeys(uiSel("#login-user"), "guest"),
		chromedp.SendKeys(uiSel("#login-pass"), "not-the-password"),
		uiClick("#login-form button[type=submit]"),
		chromedp.WaitVisible(uiSel("#login-error")))
	if got := b.text("#login-error"); !strings.Contains(got, "Login failed") {
		t.Errorf("login error = %q, want it to say Login failed", got)
	}

	b.do("log in",
		chromedp.SetValue(uiSel("#login-pass"), "guest"),
		uiClick("#login-form button[type=submit]"),
		chromedp.WaitVisible(uiSel("#ov-objects .card")),
		chromedp.WaitVisible(uiSel("#ov-nodes table")))
	if got := b.text("#whoami"); !strings.HasPrefix(got, "guest") {
		t.Errorf("whoami = %q", got)
	}

	// The dead-letter page lists orders.dlq: one message, rejected, from orders.
	row := `#dlqs tr[data-name="orders.dlq"]`
	b.do("dead-letter page",
		uiClick(`a[data-nav="dead-letters"]`),
		chromedp.WaitVisible(uiSel(row)))
	for col, want := range map[string]string{"messages": "1", "by-reason": "rejected: 1", "by-source": "orders: 1"} {
		if got := b.text(row + ` td[data-col="` + col + `"]`); got != want {
			t.Errorf("dead-letter page, orders.dlq %s = %q, want %q", col, got, want)
		}
	}
	b.shot("dead-letters")

	// Its messages, browsed without consuming them, with the x-death table.
	xd := `#messages article[data-position="0"] table.xdeath tbody tr:first-child`
	b.do("browse orders.dlq",
		uiClick(row+" a.browse"),
		chromedp.WaitVisible(uiSel(xd)))
	for col, want := range map[string]string{"count": "1", "reason": "rejected", "queue": "orders", "routing-keys": "orders"} {
		if got := b.text(xd + ` td[data-col="` + col + `"]`); got != want {
			t.Errorf("x-death %s = %q, want %q", col, got, want)
		}
	}
	if got := b.text(`#messages article[data-position="0"] pre.payload`); !strings.Contains(got, `"order": 1042`) {
		t.Errorf("payload = %q", got)
	}
	b.do("scroll to the messages", chromedp.ScrollIntoView(uiSel("#browser")))
	b.shot("dlq-messages")

	// Replay it, confirming in the dialog.
	b.do("replay",
		uiClick(`a[data-nav="dead-letters"]`),
		chromedp.WaitVisible(uiSel(row+" button.replay:enabled")),
		uiClick(row+" button.replay"),
		chromedp.WaitVisible(uiSel("#dialog-confirm")),
		uiClick("#dialog-confirm"),
		chromedp.WaitVisible(uiSel("#dl-result .result")))
	if got := b.text("#dl-result"); !strings.Contains(got, "1 replayed, 0 skipped, 0 failed") {
		t.Errorf("replay result = %q", got)
	}

	// The queue list shows the message back in orders.
	b.do("queue list",
		uiClick(`a[data-nav="queues"]`),
		chromedp.WaitVisible(uiSel(`#queues tr[data-name="orders"]`)))
	b.poll("orders 1 message, orders.dlq 0", `(() => {
		const n = q => { const td = document.querySelector('#queues tr[data-name="' + q + '"] td[data-col="messages"]'); return td && td.textContent; };
		return n('orders') === '1' && n('orders.dlq') === '0';
	})()`)

	// And over AMQP: the message is in orders, afresh (no x-death).
	uiWaitMessages(t, ch, "orders.dlq", 0)
	got, ok, err := ch.Get("orders", true)
	if err != nil || !ok {
		t.Fatalf("get orders after the replay: ok=%v err=%v", ok, err)
	}
	if string(got.Body) != body {
		t.Errorf("replayed body = %q, want %q", got.Body, body)
	}
	if _, has := got.Headers["x-death"]; has {
		t.Errorf("replayed message kept x-death without keep_history: %v", got.Headers)
	}

	// Move: two new dead letters go to orders through the destination dialog.
	uiDeadLetter(t, ch, `{"order":1}`, `{"order":2}`)
	uiWaitMessages(t, ch, "orders.dlq", 2)
	b.do("move",
		uiClick(`a[data-nav="dead-letters"]`),
		chromedp.WaitVisible(uiSel(row+" button.move:enabled")),
		uiClick(row+" button.move"),
		chromedp.WaitVisible(uiSel("#mv-dest")),
		chromedp.SendKeys(uiSel("#mv-dest"), "orders"),
		uiClick("#dialog-confirm"),
		chromedp.WaitVisible(uiSel("#dl-result .result")))
	if got := b.text("#dl-result"); !strings.Contains(got, "Moving messages from orders.dlq to orders") {
		t.Errorf("move result = %q", got)
	}
	uiWaitMessages(t, ch, "orders", 2)
	uiWaitMessages(t, ch, "orders.dlq", 0)
	if _, err := ch.QueuePurge("orders", false); err != nil {
		t.Fatal(err)
	}

	// Purge, after the confirmation.
	uiDeadLetter(t, ch, `{"order":3}`)
	uiWaitMessages(t, ch, "orders.dlq", 1)
	b.do("purge",
		uiClick(`a[data-nav="dead-letters"]`),
		chromedp.WaitVisible(uiSel(row+` td[data-col="ready"]`)),
		chromedp.Poll[chromedp.Void](`document.querySelector('`+row+` td[data-col="ready"]').textContent === '1'`,
			chromedp.WithPollingTimeout(8*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)),
		uiClick(row+" button.purge"),
		chromedp.WaitVisible(uiSel("#dialog-confirm")),
		uiClick("#dialog-confirm"),
		chromedp.WaitVisible(uiSel("#status")))
	uiWaitMessages(t, ch, "orders.dlq", 0)
	b.checkNoExceptions()
}

// uiDeadLetter publishes bodies to orders, then gets and rejects each one
// without requeue, so they are dead-lettered into orders.dlq.
func uiDeadLetter(t *testing.T, ch *amqp.Channel, bodies ...string) {
	t.Helper()
	for _, body := range bodies {
		if err := ch.PublishWithContext(context.Background(), "", "orders", false, false, amqp.Publishing{
			ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: "ord-1042",
			Headers: amqp.Table{"tenant": "acme"}, Body: []byte(body),
		}); err != nil {
			t.Fatal(err)
		}
	}
	for range bodies {
		var d amqp.Delivery
		if !testutil.Until(5*time.Second, func() bool {
			var ok bool
			var err error
			if d, ok, err = ch.Get("orders", false); err != nil {
				t.Fatal(err)
			}
			return ok
		}) {
			t.Fatal("a message never reached orders")
		}
		if err := d.Reject(false); err != nil {
			t.Fatal(err)
		}
	}
}

// uiWaitMessages waits until queue holds n messages.
func uiWaitMessages(t *testing.T, ch *amqp.Channel, queue string, n int) {
	t.Helper()
	var q amqp.Queue
	if !testutil.Until(5*time.Second, func() bool {
		var err error
		if q, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		return q.Messages == n
	}) {
		t.Fatalf("%s holds %d messages, want %d", queue, q.Messages, n)
	}
}

// testUIBrowserClusterNodes (TestUI/BrowserClusterNodes): issue 13, the web UI shows the cluster's
// nodes: the overview of one node lists every node with its state and
// the metadata leader, and a stopped node shows as stopped.
func testUIBrowserClusterNodes(t *testing.T) {
	chrome := uiChromium(t)
	c := warrentest.StartCluster(t, 3)
	base := c.Node(0).MgmtURL()
	b := newUIBrowser(t, chrome)
	b.do("log in",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(uiSel("#login-user")),
		chromedp.SendKeys(uiSel("#login-user"), "guest"),
		chromedp.SendKeys(uiSel("#login-pass"), "guest"),
		uiClick("#login-form button[type=submit]"),
		chromedp.WaitVisible(uiSel("#ov-nodes table")))
	for _, nd := range c.Nodes() {
		b.poll("node "+nd.Name()+" running", fmt.Sprintf(
			`(r => r && r.querySelector('[data-col="state"]').textContent === 'running')(document.querySelector('#ov-nodes tr[data-node=%q]'))`, nd.Name()))
	}
	b.poll("one leader", `document.querySelectorAll('#ov-nodes td[data-col="leader"] .badge').length === 1`)
	c.Node(2).Stop()
	b.do("reload", chromedp.Navigate(base+"/"), chromedp.WaitVisible(uiSel("#ov-nodes table")))
	b.poll("stopped node shown stopped", fmt.Sprintf(
		`(r => r && r.querySelector('[data-col="state"]').textContent === 'stopped')(document.querySelector('#ov-nodes tr[data-node=%q]'))`, c.Node(2).Name()))
	b.checkNoExceptions()
}
