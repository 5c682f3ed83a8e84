package integration

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/internal/testutil"
)

// TestSessionFuzzModelUnknownTwin is issue 11 (session fuzzer, seed
// 1796135026738269062): the fuzzer reported the durable exchange
// "hG-fz-w7-x\uFFFD" missing after a restart ("durable definitions
// differ", a "-" line and no "+" line) although a passive declare of its
// exact bytes found it. The fuzzer's tracked names "x\uFFFD", "x\xff",
// "x\xfe" and "x\xc3" all show as "x\uFFFD" in /api/definitions; a lost
// exchange.delete of "x\xff" made that JSON name unknown, which hid the
// broker's line but not the model's. Here a real Warren has the declared
// objects, the model has their invalid-byte twins unknown, and compare
// must find no difference; without the twins, a missing object must
// still be reported.
func TestSessionFuzzModelUnknownTwin(t *testing.T) {
	tg := newMgmtWarren(t)
	const pre = "hG-fz-w99-"
	xName, qName := pre+"x\uFFFD", pre+"q\uFFFD"
	xArgs := amqp.Table{"hG-ke": int32(443), strings.Repeat("k", 255): int32(0)}
	ch := tg.channel(t, "/")
	if err := ch.ExchangeDeclare(xName, "headers", true, false, false, false,
		amqp091.Table{"hG-ke": int32(443), strings.Repeat("k", 255): int32(0)}); err != nil {
		t.Fatalf("exchange.declare %q: %v", xName, err)
	}
	if _, err := ch.QueueDeclare(qName, true, false, false, false, nil); err != nil {
		t.Fatalf("queue.declare %q: %v", qName, err)
	}
	defs := func() *fzDefs {
		t.Helper()
		r := tg.must("GET", "/api/definitions", nil, 200)
		var d fzDefs
		if err := json.Unmarshal(r.body, &d); err != nil {
			t.Fatalf("GET /api/definitions: %v", err)
		}
		return &d
	}
	model := func(twins bool) *fzModel {
		m := newFzModel()
		m.exchangeDeclared(xName, "headers", false, xArgs)
		m.queueDeclared(qName, nil)
		if twins {
			m.exchangeUnknown(pre + "x\xff")
			m.queueUnknown(pre + "q\xfe")
		}
		return m
	}
	for _, twins := range []bool{false, true} {
		if diff := model(twins).compare(defs()); len(diff) > 0 {
			t.Errorf("twins unknown=%v: compare reports a difference for objects the broker has:\n  %s", twins, strings.Join(diff, "\n  "))
		}
	}
	if err := ch.ExchangeDelete(xName, false, false); err != nil {
		t.Fatalf("exchange.delete: %v", err)
	}
	if _, err := ch.QueueDelete(qName, false, false, false); err != nil {
		t.Fatalf("queue.delete: %v", err)
	}
	if diff := model(false).compare(defs()); len(diff) != 2 {
		t.Errorf("after deleting both objects, compare reports %d lines, want 2 (\"-\" for each):\n  %s", len(diff), strings.Join(diff, "\n  "))
	}
}

// TestUFFFDExchangeSurvivesSIGKILLAfterTwinOps is issue 11 (session
// fuzzer, seed 1796135026738269062), the broker side of the report: the
// sequence worker w7 ran on the name "hG-fz-w7-x\uFFFD" — a durable
// headers exchange with a 255-byte argument key, an inequivalent
// redeclare (406), then operations on its invalid-byte twins "x\xff" and
// "x\xfe" (refused) — is followed by a SIGKILL, and the restarted broker
// must have the exchange, byte for byte and with its arguments.
func TestUFFFDExchangeSurvivesSIGKILLAfterTwinOps(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the warren binary")
	}
	httpAddr := testutil.FreePort(t)
	p := startProc(t, t.TempDir(), "--http-addr", httpAddr)
	const pre = "hG-fz-w98-x"
	name := pre + "\uFFFD"
	args := amqp091.Table{"hG-ke": int32(443), strings.Repeat("k", 255): int32(0)}
	_, ch := rsDial(t, p.URL())
	if err := ch.ExchangeDeclare(name, "headers", true, false, false, false, args); err != nil {
		t.Fatalf("exchange.declare: %v", err)
	}
	err := ch.ExchangeDeclare(name, "topic", true, false, false, false,
		amqp091.Table{"alternate-exchange": "amq.fanout", "x-delayed-type": "topic"})
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != 406 {
		t.Fatalf("inequivalent redeclare: %v, want a 406", err)
	}
	for _, twin := range []string{pre + "\xff", pre + "\xfe"} {
		c, err := amqp091.Dial(p.URL())
		if err != nil {
			t.Fatal(err)
		}
		tch, err := c.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if err := tch.ExchangeDelete(twin, false, false); err == nil {
			t.Errorf("exchange.delete %+q: accepted, want refused (not UTF-8)", twin)
		}
		c.Close()
	}
	p.Kill()
	p.Start()
	_, ch = rsDial(t, p.URL())
	if err := ch.ExchangeDeclarePassive(name, "headers", true, false, false, false, nil); err != nil {
		t.Fatalf("exchange %+q lost across SIGKILL: %v", name, err)
	}
	if err := ch.ExchangeDeclare(name, "headers", true, false, false, false, args); err != nil {
		t.Fatalf("equivalent redeclare after the restart: %v (arguments not kept)", err)
	}
	res, err := http.Get("http://guest:guest@" + httpAddr + "/api/definitions")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var d fzDefs
	if err := json.NewDecoder(res.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	m := newFzModel()
	m.exchangeDeclared(name, "headers", false, amqp.Table{"hG-ke": int32(443), strings.Repeat("k", 255): int32(0)})
	if diff := m.compare(&d); len(diff) > 0 {
		t.Errorf("definitions after the restart differ:\n  %s", strings.Join(diff, "\n  "))
	}
	p.Stop()
}
