package integration

// issue 15: the web UI's Admin section (users and tags, permissions, topic
// permissions, virtual hosts, policies, limits, definitions export and
// import), driven in headless Chromium against an in-process Warren. Every
// action is checked for its effect over the management API or over AMQP,
// not only on the page. Needs Chromium (see uiChromium).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

// u3Tab clicks an Admin sub-tab (from the top of the page, so that the
// sticky top bar does not cover it) and waits for sel.
func (b *uiBrowser) u3Tab(tab, sel string) {
	b.t.Helper()
	b.do("tab "+tab,
		chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`),
		uiClick(`.tabs a[data-tab="`+tab+`"]`),
		chromedp.WaitVisible(uiSel(sel)))
}

// u3AMQPError waits for the channel's close and returns its error.
func u3AMQPError(t *testing.T, closed <-chan *amqp.Error) *amqp.Error {
	t.Helper()
	select {
	case e := <-closed:
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("the channel was not closed")
		return nil
	}
}

func u3Code(err error) int {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return 0
}

// testUIAdmin (TestUI/Admin): issue 15, the Admin pages: create a user with tags and
// give it permissions and a topic permission, in the UI, then use them
// over AMQP (and be refused what they do not allow); update its tags
// keeping its password; add a vhost and a max-queues limit refused over
// AMQP; a max-length policy that caps a matching queue (a bad value is
// refused with the server's reason) and an operator policy that caps it
// further; a user connection limit; definitions upload (and a malformed
// file refused with the server's reason) and download; the pages at phone
// width; the pages as a user with only the management tag; deleting the
// user and the vhost.
func testUIAdmin(t *testing.T) {
	chrome := uiChromium(t)
	w := warrentest.Start(t)
	base := w.MgmtURL()
	tg := &mgmtTarget{t: t, kind: "warren", url: strings.TrimRight(base, "/"), amqpURL: w.URL(), user: "guest", pass: "guest", w: w}
	b := newUIBrowser(t, chrome)
	b.login(base, "guest", "guest")

	// ---- Users: add one with tags, through the dialog.
	const alice, pw = "u3-alice", "s3cret-pw"
	b.do("open Admin", uiClick(`a[data-nav="admin"]`), chromedp.WaitVisible(uiSel(`#users tr[data-name="guest"]`)))
	b.poll("guest can access /", `document.querySelector('#users tr[data-name="guest"] td[data-col="vhosts"]').textContent === '/'`)
	b.do("add user",
		uiClick("#add-user"),
		chromedp.WaitVisible(uiSel("#u-name")),
		chromedp.SendKeys(uiSel("#u-name"), alice),
		chromedp.SendKeys(uiSel("#u-password"), pw),
		chromedp.SendKeys(uiSel("#u-password2"), pw+"x"),
		uiClick(`button[data-tag="management"]`),
		uiClick(`button[data-tag="policymaker"]`),
		uiClick("#dialog-confirm"),
		chromedp.WaitVisible(uiSel("#dialog-error")))
	if got := b.text("#dialog-error"); !strings.Contains(got, "do not match") {
		t.Errorf("mismatched passwords: dialog says %q", got)
	}
	b.do("fix the confirmation", chromedp.SetValue(uiSel("#u-password2"), pw))
	b.confirm("add user")
	b.do("user listed", chromedp.WaitVisible(uiSel(`#users tr[data-name="`+alice+`"]`)))
	b.poll("alice has no access", `document.querySelector('#users tr[data-name="u3-alice"] td[data-col="vhosts"]').textContent === 'No access'`)
	if got := b.text(`#users tr[data-name="` + alice + `"] td[data-col="tags"]`); got != "managementpolicymaker" {
		t.Errorf("alice's tags cell = %q", got)
	}
	b.shot("admin-users")
	u := tg.getJSON("/api/users/" + alice).(map[string]any)
	if tags := fmt.Sprint(u["tags"]); tags != "[management policymaker]" {
		t.Errorf("API: alice's tags = %s, want [management policymaker]", tags)
	}
	// The password works, and without permissions the vhost is refused.
	if _, err := amqp.Dial(tg.amqpURLFor(alice, pw, "/")); u3Code(err) != amqp.AccessRefused && u3Code(err) != amqp.NotAllowed {
		t.Fatalf("alice without permissions: dial error %v, want access refused", err)
	}
	if _, err := amqp.Dial(tg.amqpURLFor(alice, "wrong", "/")); err == nil {
		t.Fatal("alice logged in with a wrong password")
	}

	// ---- Her page: permissions and a topic permission.
	b.do("user page", uiClick(`#users tr[data-name="`+alice+`"] a`), chromedp.WaitVisible(uiSel("#user-tags")))
	b.waitOption("#perm-vhost", "/")
	b.do("set permissions",
		chromedp.SetValue(uiSel("#perm-vhost"), "/"),
		chromedp.SetValue(uiSel("#perm-configure"), `^u3-`),
		chromedp.SetValue(uiSel("#perm-write"), `^(u3-.*|amq\.topic)$`),
		chromedp.SetValue(uiSel("#perm-read"), `^u3-`),
		uiClick("#perm-set"),
		chromedp.WaitVisible(uiSel(`#user-perm-table tr[data-vhost="/"]`)))
	b.waitOption("#tperm-vhost", "/")
	b.do("set topic permission",
		chromedp.SetValue(uiSel("#tperm-vhost"), "/"),
		chromedp.SetValue(uiSel("#tperm-exchange"), "amq.topic"),
		chromedp.SetValue(uiSel("#tperm-write"), `^allowed\.`),
		chromedp.SetValue(uiSel("#tperm-read"), `.*`),
		uiClick("#tperm-set"),
		chromedp.WaitVisible(uiSel(`#user-tperm-table tr[data-exchange="amq.topic"]`)))
	b.shot("admin-user")
	perm := tg.getJSON("/api/permissions/%2F/" + alice).(map[string]any)
	if perm["configure"] != `^u3-` || perm["write"] != `^(u3-.*|amq\.topic)$` || perm["read"] != `^u3-` {
		t.Errorf("API: alice's permissions = %v", perm)
	}
	conn, err := amqp.Dial(tg.amqpURLFor(alice, pw, "/"))
	if err != nil {
		t.Fatalf("alice with permissions: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("u3-mine", false, true, false, false, nil); err != nil {
		t.Fatalf("alice declares u3-mine: %v", err)
	}
	if _, err := ch.QueueDeclare("not-hers", false, true, false, false, nil); u3Code(err) != amqp.AccessRefused {
		t.Errorf("alice declares not-hers: %v, want 403 ACCESS_REFUSED", err)
	}
	// The topic permission: allowed.* may be published to amq.topic, other keys not.
	ch, err = conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	if c, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "amq.topic", "allowed.x", false, false, amqp.Publishing{Body: []byte("a")}); err != nil || !c.Wait() {
		t.Errorf("alice publishes allowed.x to amq.topic: err %v", err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	_ = ch.PublishWithContext(context.Background(), "amq.topic", "denied.x", false, false, amqp.Publishing{Body: []byte("d")})
	if e := u3AMQPError(t, closed); e == nil || e.Code != amqp.AccessRefused {
		t.Errorf("alice publishes denied.x to amq.topic: %v, want 403 ACCESS_REFUSED", e)
	}

	// Update her tags, keeping the password.
	b.do("update user",
		uiClick("#user-update"),
		chromedp.WaitVisible(uiSel("#u-tags")),
		uiClick(`button[data-tag="monitoring"]`),
		uiClick(`button[data-tag="policymaker"]`))
	b.confirm("update user")
	b.poll("tags updated", `document.querySelector('#user-tags').textContent === 'managementmonitoring'`)
	if tags := fmt.Sprint(tg.getJSON("/api/users/" + alice).(map[string]any)["tags"]); tags != "[management monitoring]" {
		t.Errorf("API: alice's tags after the update = %s", tags)
	}
	if c, err := amqp.Dial(tg.amqpURLFor(alice, pw, "/")); err != nil {
		t.Errorf("alice's password after a tags-only update: %v", err)
	} else {
		c.Close()
	}

	// ---- Virtual hosts: add one, then a max-queues limit on its page.
	const vh = "u3-vh"
	b.u3Tab("vhosts", `#vhosts tr[data-name="/"]`)
	b.do("add vhost",
		uiClick("#add-vhost"),
		chromedp.WaitVisible(uiSel("#vh-name")),
		chromedp.SendKeys(uiSel("#vh-name"), vh),
		chromedp.SendKeys(uiSel("#vh-description"), "UI admin test"),
		chromedp.SendKeys(uiSel("#vh-tags"), "test, ui"))
	b.confirm("add vhost")
	b.do("vhost listed", chromedp.WaitVisible(uiSel(`#vhosts tr[data-name="`+vh+`"]`)))
	b.shot("admin-vhosts")
	v := tg.getJSON("/api/vhosts/" + vh).(map[string]any)
	if v["description"] != "UI admin test" || fmt.Sprint(v["tags"]) != "[test ui]" {
		t.Errorf("API: vhost = %v", v)
	}
	b.do("vhost page", uiClick(`#vhosts tr[data-name="`+vh+`"] a`), chromedp.WaitVisible(uiSel(`#vhost-perm-table tr[data-user="guest"]`)))
	b.do("set max-queues",
		chromedp.SetValue(uiSel("#vhost-limit-name"), "max-queues"),
		chromedp.SetValue(uiSel("#vhost-limit-value"), "1"),
		uiClick("#vhost-limit-set"),
		chromedp.WaitVisible(uiSel(`#vhost-limit-table tr[data-vhost="`+vh+`"] td[data-col="max-queues"] button`)))
	if got := fmt.Sprint(tg.getJSON("/api/vhost-limits/" + vh)); got != "[map[value:map[max-queues:1] vhost:u3-vh]]" {
		t.Errorf("API: vhost limits = %s", got)
	}
	gconn, err := amqp.Dial(tg.amqpURLFor("guest", "guest", vh))
	if err != nil {
		t.Fatal(err)
	}
	defer gconn.Close()
	gch, err := gconn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gch.QueueDeclare("u3-q1", true, false, false, false, nil); err != nil {
		t.Fatalf("first queue under max-queues 1: %v", err)
	}
	if _, err := gch.QueueDeclare("u3-q2", true, false, false, false, nil); u3Code(err) != amqp.PreconditionFailed || !strings.Contains(err.Error(), "queue limit") {
		t.Errorf("second queue under max-queues 1: %v, want 406 queue limit", err)
	}

	// ---- Policies: a max-length policy caps a matching queue; a bad
	// value is refused with the server's reason, in the dialog.
	b.u3Tab("policies", "#add-policies")
	b.do("policy with a bad value",
		uiClick("#add-policies"),
		chromedp.WaitVisible(uiSel("#pol-name")))
	b.waitOption("#pol-vhost", "/")
	b.do("fill the policy",
		chromedp.SetValue(uiSel("#pol-vhost"), "/"),
		chromedp.SendKeys(uiSel("#pol-name"), "u3-maxlen"),
		chromedp.SendKeys(uiSel("#pol-pattern"), `^u3-pol\.`),
		chromedp.SetValue(uiSel("#pol-apply"), "queues"),
		chromedp.SetValue(uiSel("#pol-priority"), "5"),
		chromedp.SendKeys(uiSel(`#pol-defs [data-row="0"] .def-key`), "max-length"),
		chromedp.SendKeys(uiSel(`#pol-defs [data-row="0"] .def-value`), "two"),
		chromedp.SetValue(uiSel(`#pol-defs [data-row="0"] .def-type`), "string"),
		uiClick("#dialog-confirm"),
		chromedp.WaitVisible(uiSel("#dialog-error")))
	if got := b.text("#dialog-error"); !strings.Contains(got, `<<"two">> is not a valid maximum length`) {
		t.Errorf("bad policy value: dialog says %q, want the server's reason", got)
	}
	b.do("fix the value",
		chromedp.SetValue(uiSel(`#pol-defs [data-row="0"] .def-value`), "2"),
		chromedp.SetValue(uiSel(`#pol-defs [data-row="0"] .def-type`), "number"),
		uiClick("#pol-add-row"),
		chromedp.SendKeys(uiSel(`#pol-defs [data-row="1"] .def-key`), "overflow"),
		chromedp.SendKeys(uiSel(`#pol-defs [data-row="1"] .def-value`), "drop-head"),
		chromedp.SetValue(uiSel(`#pol-defs [data-row="1"] .def-type`), "string"))
	b.confirm("add policy")
	b.do("policy listed", chromedp.WaitVisible(uiSel(`#policies tr[data-name="u3-maxlen"]`)))
	b.shot("admin-policies")
	pol := tg.getJSON("/api/policies/%2F/u3-maxlen").(map[string]any)
	if got := jsonString(pol["definition"]); got != `{"max-length":2,"overflow":"drop-head"}` || pol["apply-to"] != "queues" || fmt.Sprint(pol["priority"]) != "5" {
		t.Errorf("API: policy = %v", pol)
	}
	qconn, err := amqp.Dial(w.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer qconn.Close()
	qch, err := qconn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qch.QueueDeclare("u3-pol.q", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := qch.PublishWithContext(context.Background(), "", "u3-pol.q", false, false, amqp.Publishing{Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	var q map[string]any
	if !testutil.Until(5*time.Second, func() bool {
		q = tg.queueInfo("/", "u3-pol.q")
		return q["policy"] == "u3-maxlen" && fmt.Sprint(q["messages"]) == "2"
	}) {
		t.Errorf("queue under the policy: policy %v, %v messages; want u3-maxlen, 2", q["policy"], q["messages"])
	}
	if d, ok, err := qch.Get("u3-pol.q", true); err != nil || !ok || string(d.Body) != "3" {
		t.Errorf("the head after drop-head: %q ok=%v err=%v, want 3", d.Body, ok, err)
	}

	// The list per vhost: u3-maxlen is in /, not in u3-vh.
	b.waitOption("#policies-vhost", vh)
	b.do("policies of u3-vh", chromedp.SetValue(uiSel("#policies-vhost"), vh),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#policies-vhost').dispatchEvent(new Event('change'))`),
		chromedp.WaitNotPresent(uiSel(`#policies tr[data-name="u3-maxlen"]`)))
	b.do("policies of /", chromedp.SetValue(uiSel("#policies-vhost"), "/"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#policies-vhost').dispatchEvent(new Event('change'))`),
		chromedp.WaitVisible(uiSel(`#policies tr[data-name="u3-maxlen"]`)))

	// An operator policy caps it further: max-length 1 wins over 2.
	b.do("add operator policy", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`),
		uiClick("#add-op-policies"), chromedp.WaitVisible(uiSel("#pol-name")))
	b.waitOption("#pol-vhost", "/")
	b.do("fill the operator policy",
		chromedp.SetValue(uiSel("#pol-vhost"), "/"),
		chromedp.SendKeys(uiSel("#pol-name"), "u3-op"),
		chromedp.SendKeys(uiSel("#pol-pattern"), `^u3-pol\.`),
		chromedp.SetValue(uiSel("#pol-apply"), "queues"),
		chromedp.SendKeys(uiSel(`#pol-defs [data-row="0"] .def-key`), "max-length"),
		chromedp.SendKeys(uiSel(`#pol-defs [data-row="0"] .def-value`), "1"),
		chromedp.SetValue(uiSel(`#pol-defs [data-row="0"] .def-type`), "number"))
	b.confirm("add operator policy")
	b.do("operator policy listed", chromedp.WaitVisible(uiSel(`#op-policies tr[data-name="u3-op"]`)))
	if !testutil.Until(5*time.Second, func() bool {
		q = tg.queueInfo("/", "u3-pol.q")
		return q["operator_policy"] == "u3-op" && jsonString(q["effective_policy_definition"]) == `{"max-length":1,"overflow":"drop-head"}`
	}) {
		t.Errorf("queue under the operator policy: operator_policy %v, effective %v", q["operator_policy"], jsonString(q["effective_policy_definition"]))
	}
	b.do("delete the operator policy",
		uiClick(`#op-policies tr[data-name="u3-op"] button.delete`),
		chromedp.WaitVisible(uiSel("#dialog-confirm")))
	b.confirm("delete the operator policy")
	b.do("operator policy gone", chromedp.WaitNotPresent(uiSel(`#op-policies tr[data-name="u3-op"]`)))
	if r := tg.do("GET", "/api/operator-policies/%2F/u3-op", nil); r.status != 404 {
		t.Errorf("API: operator policy after delete: %s", r)
	}

	// ---- Limits: a user limit of one connection for alice, then clear
	// the vhost's max-queues from the list.
	b.u3Tab("limits", `#vhost-limit-table tr[data-vhost="`+vh+`"]`)
	b.waitOption("#user-limit-target", alice)
	b.do("set max-connections",
		chromedp.SetValue(uiSel("#user-limit-target"), alice),
		chromedp.SetValue(uiSel("#user-limit-name"), "max-connections"),
		chromedp.SetValue(uiSel("#user-limit-value"), "1"),
		uiClick("#user-limit-set"),
		chromedp.WaitVisible(uiSel(`#user-limit-table tr[data-user="`+alice+`"] td[data-col="max-connections"] button`)))
	b.shot("admin-limits")
	if c, err := amqp.Dial(tg.amqpURLFor(alice, pw, "/")); u3Code(err) != amqp.NotAllowed {
		t.Errorf("alice's second connection under max-connections 1: %v, want 530 NOT_ALLOWED", err)
		if c != nil {
			c.Close()
		}
	}
	b.do("clear max-queues",
		uiClick(`#vhost-limit-table tr[data-vhost="`+vh+`"] td[data-col="max-queues"] button`),
		chromedp.WaitVisible(uiSel("#dialog-confirm")))
	b.confirm("clear max-queues")
	b.do("max-queues gone", chromedp.WaitNotPresent(uiSel(`#vhost-limit-table tr[data-vhost="`+vh+`"]`)))
	if got := fmt.Sprint(tg.getJSON("/api/vhost-limits/" + vh)); got != "[]" {
		t.Errorf("API: vhost limits after clear = %s", got)
	}

	// ---- Shovels (issue 24): one defined over the API shows running,
	// with its node and ends; deleted from the page, it goes.
	if r := tg.do("PUT", "/api/parameters/shovel/%2F/u3-shovel", map[string]any{"value": map[string]any{
		"src-uri": "amqp://", "src-queue": "u3-shovel-src", "dest-uri": "amqp://", "dest-queue": "u3-shovel-dest"}}); r.status != 201 {
		t.Fatalf("PUT shovel: %s", r)
	}
	b.u3Tab("shovels", `#shovel-table tr[data-name="u3-shovel"]`)
	b.poll("the shovel running", `(document.querySelector('#shovel-table tr[data-name="u3-shovel"]')||{}).textContent.includes('running')`)
	b.shot("admin-shovels")
	b.do("delete the shovel", uiClick(`#shovel-table tr[data-name="u3-shovel"] button.shovel-delete`),
		chromedp.WaitVisible(uiSel("#dialog-confirm")))
	b.confirm("delete the shovel")
	b.do("shovel gone", chromedp.WaitNotPresent(uiSel(`#shovel-table tr[data-name="u3-shovel"]`)))
	if r := tg.do("GET", "/api/parameters/shovel/%2F/u3-shovel", nil); r.status != 404 {
		t.Errorf("API: shovel after delete: %s", r)
	}

	// ---- Federation (issue 24): an exchange federated from this broker
	// itself (its own loop checks keep each message to one trip) shows
	// its link running, with the upstream's URI without credentials.
	tg.must("PUT", "/api/exchanges/%2F/u3-fed.x", map[string]any{"type": "fanout", "durable": true}, 201)
	tg.must("PUT", "/api/parameters/federation-upstream/%2F/u3-self", map[string]any{"value": map[string]any{
		"uri": "amqp://guest:guest@" + w.Addr()}}, 201)
	tg.must("PUT", "/api/policies/%2F/u3-fed", map[string]any{"pattern": "^u3-fed\\.", "apply-to": "exchanges",
		"definition": map[string]any{"federation-upstream": "u3-self"}}, 201)
	b.u3Tab("federation", `#federation-table tr[data-exchange="u3-fed.x"]`)
	b.poll("the link running", `(document.querySelector('#federation-table tr[data-exchange="u3-fed.x"]')||{}).textContent.includes('running')`)
	b.poll("its URI without credentials", `!document.querySelector('#federation-table').textContent.includes('guest:guest')`)
	b.shot("admin-federation")
	tg.must("DELETE", "/api/policies/%2F/u3-fed", nil, 204)
	tg.must("DELETE", "/api/parameters/federation-upstream/%2F/u3-self", nil, 204)

	// ---- Definitions: upload a file, a malformed one, then download.
	dir := t.TempDir()
	good := filepath.Join(dir, "defs.json")
	bad := filepath.Join(dir, "broken.json")
	if err := os.WriteFile(good, []byte(`{"vhosts":[{"name":"u3-imported-vh"}],
		"queues":[{"name":"u3-imported","vhost":"u3-imported-vh","durable":true,"auto_delete":false,"arguments":{"x-max-length":7}}],
		"exchanges":[{"name":"u3-x","vhost":"u3-imported-vh","type":"topic","durable":true,"auto_delete":false,"internal":false,"arguments":{}}],
		"bindings":[{"source":"u3-x","vhost":"u3-imported-vh","destination":"u3-imported","destination_type":"queue","routing_key":"k.#","arguments":{}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(`{"queues": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	b.u3Tab("definitions", "#defs-file")
	b.do("set file", chromedp.SetUploadFiles(uiSel("#defs-file"), []string{bad}))
	b.do("upload malformed",
		uiClick("#defs-upload"),
		chromedp.WaitVisible(uiSel("#defs-result .result")))
	if got := b.text("#defs-result"); !strings.Contains(got, "failed_to_parse_json") || !strings.Contains(got, "broken.json") {
		t.Errorf("malformed upload: %q, want the server's reason failed_to_parse_json", got)
	}
	b.do("upload",
		chromedp.SetUploadFiles(uiSel("#defs-file"), []string{good}),
		uiClick("#defs-upload"))
	b.poll("imported", `document.querySelector('#defs-result').textContent.startsWith('Imported defs.json')`)
	iq := tg.queueInfo("u3-imported-vh", "u3-imported")
	if jsonString(iq["arguments"]) != `{"x-max-length":7}` {
		t.Errorf("API: imported queue arguments = %v", iq["arguments"])
	}
	if bs := tg.getJSON("/api/bindings/u3-imported-vh/e/u3-x/q/u3-imported").([]any); len(bs) != 1 {
		t.Errorf("API: imported bindings = %v", bs)
	}

	dl := t.TempDir()
	if _, err := chromedp.CallBrowser(b.ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dl,
	}); err != nil {
		t.Fatal(err)
	}
	b.do("download",
		chromedp.SetValue(uiSel("#defs-filename"), "u3-defs.json"),
		uiClick("#defs-download"),
		chromedp.WaitVisible(uiSel("#defs-export-result .result")))
	b.shot("admin-definitions")
	var raw []byte
	if !testutil.Until(5*time.Second, func() bool {
		raw, err = os.ReadFile(filepath.Join(dl, "u3-defs.json"))
		return err == nil && json.Valid(raw)
	}) {
		t.Fatalf("downloaded definitions: %v (%d bytes)", err, len(raw))
	}
	var defs struct {
		Users    []struct{ Name string }
		Policies []struct{ Name, VHost string }
		Queues   []struct{ Name, VHost string }
	}
	if err := json.Unmarshal(raw, &defs); err != nil {
		t.Fatal(err)
	}
	has := func(n int, f func(i int) bool) bool {
		for i := range n {
			if f(i) {
				return true
			}
		}
		return false
	}
	if !has(len(defs.Users), func(i int) bool { return defs.Users[i].Name == alice }) ||
		!has(len(defs.Policies), func(i int) bool { return defs.Policies[i].Name == "u3-maxlen" }) ||
		!has(len(defs.Queues), func(i int) bool {
			return defs.Queues[i].Name == "u3-imported" && defs.Queues[i].VHost == "u3-imported-vh"
		}) {
		t.Errorf("downloaded definitions lack alice, u3-maxlen or u3-imported: %.600s", raw)
	}

	// ---- Phone width: the admin pages do not overflow sideways (tables
	// scroll in their own box).
	b.do("phone width", chromedp.EmulateViewport(390, 844))
	for _, hash := range []string{"#/admin/users", "#/admin/policies", "#/admin/limits", "#/admin/definitions", "#/admin/users/" + alice} {
		b.goTo(base, hash, ".tabs")
		b.poll(hash+" fits 390 px", `document.documentElement.scrollWidth <= 390`)
	}
	b.do("desktop width", chromedp.EmulateViewport(1280, 800))

	// ---- A user with only the management tag sees why, not an error.
	tg.must("PUT", "/api/users/u3-viewer", map[string]any{"password": "viewer", "tags": "management"}, 201)
	tg.must("PUT", "/api/permissions/%2F/u3-viewer", map[string]any{"configure": ".*", "write": ".*", "read": ".*"}, 201)
	b.do("log out", uiClick("#logout"), chromedp.WaitVisible(uiSel("#login-user")))
	b.login(base, "u3-viewer", "viewer")
	for _, hash := range []string{"#/admin/users", "#/admin/definitions", "#/admin/users/" + alice} {
		b.goTo(base, hash, ".admin-denied")
		if got := b.text(".admin-denied"); !strings.Contains(got, "needs the administrator tag") {
			t.Errorf("%s as a management user: %q", hash, got)
		}
		if alert, _ := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`!document.querySelector('#alert').hidden`)); alert {
			t.Errorf("%s as a management user shows an error: %s", hash, b.text("#alert"))
		}
	}
	// Policies: the list, read-only, and the reason.
	b.goTo(base, "#/admin/policies", `#policies tr[data-name="u3-maxlen"]`)
	if got := b.text("#policies-section .admin-denied"); !strings.Contains(got, "needs the policymaker or administrator tag") {
		t.Errorf("policies as a management user: %q", got)
	}
	if n, _ := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll('#add-policies, #policies button.delete').length`)); n != 0 {
		t.Errorf("a management user is offered %d policy changes", n)
	}

	// ---- Back as the administrator: delete alice from her page.
	b.do("log out", uiClick("#logout"), chromedp.WaitVisible(uiSel("#login-user")))
	b.login(base, "guest", "guest")
	b.goTo(base, "#/admin/users/"+alice, "#user-tags")
	b.do("clear her permissions in /",
		uiClick(`#user-perm-table tr[data-vhost="/"] button.clear-perm`),
		chromedp.WaitVisible(uiSel("#dialog-confirm")))
	b.confirm("clear permissions")
	b.do("permissions gone", chromedp.WaitNotPresent(uiSel(`#user-perm-table tr[data-vhost="/"]`)))
	if r := tg.do("GET", "/api/permissions/%2F/"+alice, nil); r.status != 404 {
		t.Errorf("API: alice's permissions after clear: %s", r)
	}
	b.do("delete user", uiClick("#user-delete"), chromedp.WaitVisible(uiSel("#dialog-confirm")))
	b.confirm("delete user")
	b.do("back on the list", chromedp.WaitVisible(uiSel(`#users tr[data-name="guest"]`)))
	if r := tg.do("GET", "/api/users/"+alice, nil); r.status != 404 {
		t.Errorf("API: alice after delete: %s", r)
	}
	if users := names(tg.getJSON("/api/users")); slices.Contains(users, alice) {
		t.Errorf("API: users after delete: %v", users)
	}
	// And the vhost from its page.
	b.goTo(base, "#/admin/vhosts/"+vh, `#vhost-perm-table tr[data-user="guest"]`)
	b.do("delete vhost", uiClick("#vhost-delete"), chromedp.WaitVisible(uiSel("#dialog-confirm")))
	b.confirm("delete vhost")
	b.do("back on the vhosts", chromedp.WaitVisible(uiSel(`#vhosts tr[data-name="/"]`)))
	if r := tg.do("GET", "/api/vhosts/"+vh, nil); r.status != 404 {
		t.Errorf("API: vhost after delete: %s", r)
	}
	b.checkNoExceptions()
}
