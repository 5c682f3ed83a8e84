package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

// testUIClusterPage (TestUI/ClusterPage): issue 15, the cluster page lists the nodes and the
// quorum queues with their leader and members; moving a queue's leader
// from the page moves it (the brokers agree on the new leader), a
// refused move shows the server's reason in the dialog, and a stopped
// member shows stopped and offline.
func testUIClusterPage(t *testing.T) {
	chrome := uiChromium(t)
	c := warrentest.StartCluster(t, 3)
	conn, err := amqp.Dial(c.Node(0).URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	const qq = "ui.cluster.qq"
	if _, err := ch.QueueDeclare(qq, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	var leader int
	if !testutil.Until(10*time.Second, func() bool { leader = c.QueueLeader("/", qq); return leader >= 0 }) {
		t.Fatal("the quorum queue has no leader every node agrees on")
	}

	b := newUIBrowser(t, chrome)
	b.login(c.Node(0).MgmtURL(), "guest", "guest")
	row := fmt.Sprintf(`#cl-qq-table tr[data-name=%q]`, qq)
	b.do("cluster page", uiClick(`a[data-nav="cluster"]`), chromedp.WaitVisible(uiSel(row)))
	b.poll("leader shown", fmt.Sprintf(`document.querySelector('%s td[data-col="leader"]').textContent === %q`, row, c.Node(leader).Name()))
	if got := b.eval(fmt.Sprintf(`String(document.querySelectorAll('%s li[data-member]').length)`, row)); got != "3" {
		t.Errorf("members shown = %s, want 3", got)
	}
	for _, nd := range c.Nodes() {
		b.poll("member "+nd.Name()+" running", fmt.Sprintf(
			`(r => r && r.querySelector('[data-col="state"]').textContent === 'running')(document.querySelector('#cl-members-table tr[data-node=%q]'))`, nd.Name()))
	}
	b.shot("cluster")

	// Move the leader to the member the dialog offers first.
	b.do("open move leader", uiClick(row+" button.transfer"), chromedp.WaitVisible(uiSel("#cl-transfer-node")))
	target := b.eval(`document.querySelector('#cl-transfer-node').value`)
	if target == "" || target == c.Node(leader).Name() {
		t.Fatalf("move leader offers %q (leader %s)", target, c.Node(leader).Name())
	}
	b.do("move leader", uiClick("#dialog-confirm"), chromedp.WaitVisible(uiSel("#status")))
	if !testutil.Until(10*time.Second, func() bool { l := c.QueueLeader("/", qq); return l >= 0 && c.Node(l).Name() == target }) {
		t.Fatalf("leader did not move to %s", target)
	}
	b.poll("new leader shown", fmt.Sprintf(`document.querySelector('%s td[data-col="leader"]').textContent === %q`, row, target))

	// A stopped member: shown stopped; moving the leader there is refused
	// and the dialog shows why, staying open.
	var stopped int
	for i := range c.Nodes() {
		if c.Node(i).Name() != target && i != 0 {
			stopped = i
		}
	}
	c.Node(stopped).Stop()
	name := c.Node(stopped).Name()
	b.poll("stopped member shown", fmt.Sprintf(
		`(r => r && r.querySelector('[data-col="state"]').textContent === 'stopped')(document.querySelector('#cl-members-table tr[data-node=%q]'))`, name))
	b.poll("offline replica shown", fmt.Sprintf(`(li => li && li.textContent.includes('offline'))(document.querySelector('%s li[data-member=%q]'))`, row, name))
	b.do("open move leader again", uiClick(row+" button.transfer"), chromedp.WaitVisible(uiSel("#cl-transfer-node")),
		chromedp.SetValue(uiSel("#cl-transfer-node"), name), uiClick("#dialog-confirm"))
	b.poll("refusal shown in the dialog", `(e => e && !e.hidden && e.textContent.length > 0)(document.querySelector('#dialog-error'))`)
	if got := b.text("#dialog-error"); !strings.Contains(got, "node_not_running") {
		t.Errorf("refusal = %q, want the server's reason", got)
	}
	b.checkNoExceptions()
}
