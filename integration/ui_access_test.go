package integration

import (
	"context"
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// testUIKeyboardAndContrast (TestUI/KeyboardAndContrast): issue 15, keyboard use and readable contrast.
// Signing in, moving between pages, sorting a list and opening and
// dismissing a dialog all work from the keyboard alone; every page of
// the top bar has its text at WCAG AA contrast in the light and the dark
// colour scheme.
func testUIKeyboardAndContrast(t *testing.T) {
	chrome := uiChromium(t)
	e := newEnv(t)
	w := e.warren()
	ch := e.channel()
	for _, q := range []string{"kb.a", "kb.b"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.PublishWithContext(context.Background(), "", "kb.a", false, false, amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	uiWaitMessages(t, ch, "kb.a", 1)

	b := newUIBrowser(t, chrome)
	// The login form takes the focus; type, Tab, type, Enter.
	b.do("log in from the keyboard",
		chromedp.Navigate(w.MgmtURL()+"/"),
		chromedp.WaitVisible(uiSel("#login-user")),
		chromedp.KeyEvent("guest\tguest\r"),
		chromedp.WaitVisible(uiSel("#ov-objects .card")))

	// Tab first reaches the skip link, then the top bar; Enter on a link
	// opens its page.
	b.do("focus the page", chromedp.Evaluate[chromedp.Void](`document.activeElement && document.activeElement.blur()`))
	b.do("tab", chromedp.KeyEvent("\t"))
	if got := b.eval(`document.activeElement.className + ':' + document.activeElement.textContent`); got != "skip:Skip to content" {
		t.Errorf("first Tab focuses %q, want the skip link", got)
	}
	tabTo := func(what, cond string) {
		t.Helper()
		for range 30 {
			if b.eval(fmt.Sprintf(`String(!!(%s))`, cond)) == "true" {
				return
			}
			b.do("tab", chromedp.KeyEvent("\t"))
		}
		t.Fatalf("Tab never reached %s; focus on %s", what, b.eval(`document.activeElement.outerHTML.slice(0, 120)`))
	}
	tabTo("the Queues link", `document.activeElement.matches('a[data-nav="queues"]')`)
	b.do("open queues", chromedp.KeyEvent("\r"), chromedp.WaitVisible(uiSel(`#queues tr[data-name="kb.a"]`)))

	// Sort by name, descending, with Enter on the column's button.
	tabTo("the Name column's sort button", `document.activeElement.matches('#queues th button.sort') && document.activeElement.textContent.startsWith('Name')`)
	b.do("sort", chromedp.KeyEvent("\r"))
	b.poll("sorted descending", `(() => { const rows = [...document.querySelectorAll('#queues tbody tr[data-name]')].map(r => r.dataset.name);
		return rows.indexOf('kb.b') >= 0 && rows.indexOf('kb.b') < rows.indexOf('kb.a'); })()`)

	// A destructive dialog opens from the keyboard and Escape dismisses
	// it without doing anything.
	b.do("open kb.a", chromedp.Navigate(w.MgmtURL()+"/#/queues/%2F/kb.a"), chromedp.WaitVisible(uiSel("#q-purge")))
	b.do("focus purge", chromedp.Focus(uiSel("#q-purge")), chromedp.KeyEvent("\r"), chromedp.WaitVisible(uiSel("#dialog-confirm")))
	if got := b.eval(`document.activeElement.closest('dialog') ? 'in dialog' : document.activeElement.outerHTML.slice(0, 80)`); got != "in dialog" {
		t.Errorf("the open dialog does not hold the focus: %s", got)
	}
	b.do("escape", chromedp.KeyEvent("\x1b"), chromedp.WaitNotVisible(uiSel("#dialog-confirm")))
	uiWaitMessages(t, ch, "kb.a", 1)

	// Contrast on every page of the top bar.
	b.do("overview", chromedp.Navigate(w.MgmtURL()+"/#/"), chromedp.WaitVisible(uiSel("#ov-objects .card")))
	var navs []string
	b.do("list the pages", func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		var err error
		navs, err = chromedp.Evaluate[[]string](`[...document.querySelectorAll('#nav a')].map(a => a.getAttribute('href'))`)(ctx, tg)
		return chromedp.Void{}, err
	})
	if len(navs) < 4 {
		t.Fatalf("top bar links: %v", navs)
	}
	// And the pages behind the lists' first rows (a connection, a
	// channel, an exchange, a user, a vhost) and a queue's.
	pages := append(navs, "#/queues/%2F/kb.a", "#/admin/policies", "#/admin/limits", "#/admin/definitions")
	for _, list := range []string{"#/connections", "#/channels", "#/exchanges", "#/admin/users", "#/admin/vhosts"} {
		table := map[string]string{"#/connections": "connections", "#/channels": "channels", "#/exchanges": "exchanges",
			"#/admin/users": "users", "#/admin/vhosts": "vhosts"}[list]
		b.do("open "+list, chromedp.Navigate(w.MgmtURL()+"/"+list), chromedp.WaitVisible(uiSel("#"+table+" tbody a")))
		pages = append(pages, b.eval(`document.querySelector('#`+table+` tbody a').getAttribute('href')`))
	}
	t.Logf("contrast checked on %v", pages)
	for _, href := range pages {
		b.do("open "+href, chromedp.Navigate(w.MgmtURL()+"/"+href),
			chromedp.WaitVisible(uiSel("main h1")))
		b.poll("loaded "+href, `!document.querySelector('main [aria-busy="true"]')`)
		b.checkContrast(href)
	}
	b.checkNoExceptions()
}
