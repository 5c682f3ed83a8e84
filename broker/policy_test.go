package broker

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/warrenmq/warren/amqp"
)

func mustPolicy(t *testing.T, p Policy, operator bool) *Policy {
	t.Helper()
	cp, err := compilePolicy(p, operator)
	if err != nil {
		t.Fatalf("policy %v: %v", p.Definition, err)
	}
	return cp
}

func userPol(t *testing.T, def map[string]any) *Policy {
	return mustPolicy(t, Policy{Name: "u", Pattern: ".*", Definition: def}, false)
}

func opPol(t *testing.T, def map[string]any) *Policy {
	return mustPolicy(t, Policy{Name: "o", Pattern: ".*", Definition: def}, true)
}

func effOf(t *testing.T, args amqp.Table, user, op *Policy) QueueArgs {
	t.Helper()
	return effectiveQueueArgs(ParseQueueArgs(args), args, user, op)
}

func wantInt(t *testing.T, what string, got *int64, want any) {
	t.Helper()
	switch w := want.(type) {
	case nil:
		if got != nil {
			t.Errorf("%s: got %d, want none", what, *got)
		}
	case int:
		if got == nil || *got != int64(w) {
			t.Errorf("%s: got %v, want %d", what, fmtp(got), w)
		}
	}
}

func wantStr(t *testing.T, what string, got *string, want any) {
	t.Helper()
	switch w := want.(type) {
	case nil:
		if got != nil {
			t.Errorf("%s: got %q, want none", what, *got)
		}
	case string:
		if got == nil || *got != w {
			t.Errorf("%s: got %v, want %q", what, got, w)
		}
	}
}

func fmtp(p *int64) any {
	if p == nil {
		return "none"
	}
	return *p
}

// R1.12 rows message-ttl, expires, max-length, max-length-bytes: the lower
// of policy and argument, on classic and quorum queues alike; either alone
// is used as it is.
func TestEffectiveNumericMin(t *testing.T) {
	for _, typ := range []string{QueueTypeClassic, QueueTypeQuorum} {
		pol := userPol(t, map[string]any{"message-ttl": 500, "expires": 60000, "max-length": 10, "max-length-bytes": 1000})
		e := effOf(t, amqp.Table{"x-queue-type": typ, "x-message-ttl": int32(1000), "x-expires": int32(30000),
			"x-max-length": int32(20), "x-max-length-bytes": int32(100)}, pol, nil)
		wantInt(t, typ+" message-ttl", e.MessageTTL, 500)
		wantInt(t, typ+" expires", e.Expires, 30000)
		wantInt(t, typ+" max-length", e.MaxLength, 10)
		wantInt(t, typ+" max-length-bytes", e.MaxLengthBytes, 100)

		e = effOf(t, amqp.Table{"x-queue-type": typ}, pol, nil)
		wantInt(t, typ+" policy-only message-ttl", e.MessageTTL, 500)
		wantInt(t, typ+" policy-only max-length", e.MaxLength, 10)
		e = effOf(t, amqp.Table{"x-queue-type": typ, "x-max-length": int32(3)}, nil, nil)
		wantInt(t, typ+" arg-only max-length", e.MaxLength, 3)
		wantInt(t, typ+" no ttl", e.MessageTTL, nil)
	}
}

// R1.12 rows dead-letter-exchange, dead-letter-routing-key: the argument
// wins, per key, so an argument DLX combines with a policy DLRK
// (T:dl dead_letter_override_policy).
func TestEffectiveDeadLetterArgumentWins(t *testing.T) {
	for _, typ := range []string{QueueTypeClassic, QueueTypeQuorum} {
		pol := userPol(t, map[string]any{"dead-letter-exchange": "pol-dlx", "dead-letter-routing-key": "pol-rk"})
		e := effOf(t, amqp.Table{"x-queue-type": typ, "x-dead-letter-exchange": "arg-dlx", "x-dead-letter-routing-key": "arg-rk"}, pol, nil)
		wantStr(t, typ+" dlx", e.DLX, "arg-dlx")
		wantStr(t, typ+" dlrk", e.DLRK, "arg-rk")

		e = effOf(t, amqp.Table{"x-queue-type": typ, "x-dead-letter-exchange": "arg-dlx"}, pol, nil)
		wantStr(t, typ+" combined dlx", e.DLX, "arg-dlx")
		wantStr(t, typ+" combined dlrk", e.DLRK, "pol-rk")

		e = effOf(t, amqp.Table{"x-queue-type": typ}, pol, nil)
		wantStr(t, typ+" policy dlx", e.DLX, "pol-dlx")
		wantStr(t, typ+" policy dlrk", e.DLRK, "pol-rk")

		// An empty-string argument is the default exchange and still wins.
		e = effOf(t, amqp.Table{"x-queue-type": typ, "x-dead-letter-exchange": ""}, pol, nil)
		wantStr(t, typ+" empty-arg dlx", e.DLX, "")
	}
}

// R1.12 row dead-letter-strategy (quorum): the argument wins.
func TestEffectiveDeadLetterStrategy(t *testing.T) {
	pol := userPol(t, map[string]any{"dead-letter-exchange": "x", "dead-letter-strategy": "at-least-once"})
	if e := effOf(t, amqp.Table{"x-queue-type": "quorum"}, pol, nil); e.DeadLetterStrategy != "at-least-once" {
		t.Errorf("policy only: got %q", e.DeadLetterStrategy)
	}
	if e := effOf(t, amqp.Table{"x-queue-type": "quorum", "x-dead-letter-strategy": "at-most-once"}, pol, nil); e.DeadLetterStrategy != "at-most-once" {
		t.Errorf("argument given: got %q, want the argument's at-most-once", e.DeadLetterStrategy)
	}
}

// R1.12 row overflow: the argument wins on classic queues, the policy on
// quorum queues.
func TestEffectiveOverflow(t *testing.T) {
	pol := userPol(t, map[string]any{"overflow": "reject-publish"})
	for _, c := range []struct {
		args amqp.Table
		want string
	}{
		{amqp.Table{}, "reject-publish"},
		{amqp.Table{"x-overflow": "drop-head"}, "drop-head"},
		{amqp.Table{"x-overflow": "reject-publish-dlx"}, "reject-publish-dlx"},
		{amqp.Table{"x-queue-type": "quorum"}, "reject-publish"},
		{amqp.Table{"x-queue-type": "quorum", "x-overflow": "drop-head"}, "reject-publish"},
	} {
		if e := effOf(t, c.args, pol, nil); e.Overflow != c.want {
			t.Errorf("%v: overflow %q, want %q", c.args, e.Overflow, c.want)
		}
	}
	if e := effOf(t, amqp.Table{}, nil, nil); e.Overflow != "drop-head" {
		t.Errorf("no policy: overflow %q, want drop-head", e.Overflow)
	}
}

// R1.12 row delivery-limit: the lower value; if either is negative
// (unlimited), the higher one, so that the finite limit wins. Warren
// applies it to classic queues too.
func TestEffectiveDeliveryLimit(t *testing.T) {
	for _, typ := range []string{QueueTypeQuorum, QueueTypeClassic} {
		for _, c := range []struct {
			arg, pol any
			want     any
		}{
			{5, 3, 3}, {3, 5, 3}, {-1, 4, 4}, {4, -1, 4}, {-1, -2, -1}, {nil, 7, 7}, {7, nil, 7}, {nil, nil, nil},
		} {
			args := amqp.Table{"x-queue-type": typ}
			if c.arg != nil {
				args["x-delivery-limit"] = int32(c.arg.(int))
			}
			var pol *Policy
			if c.pol != nil {
				pol = userPol(t, map[string]any{"delivery-limit": c.pol})
			}
			e := effOf(t, args, pol, nil)
			wantInt(t, typ+" delivery-limit", e.DeliveryLimit, c.want)
		}
	}
}

// R1.12 operator vs user policy: numeric keys take the lower value,
// overflow the operator's, delivery-limit the finite one; then the merged
// value meets the argument as above.
func TestEffectiveOperatorPolicy(t *testing.T) {
	user := userPol(t, map[string]any{"message-ttl": 1000, "max-length": 5, "overflow": "drop-head",
		"delivery-limit": -1, "dead-letter-exchange": "dlx"})
	op := opPol(t, map[string]any{"message-ttl": 2000, "max-length": 3, "overflow": "reject-publish", "delivery-limit": 10, "expires": 9000})
	e := effOf(t, amqp.Table{}, user, op)
	wantInt(t, "message-ttl", e.MessageTTL, 1000)
	wantInt(t, "max-length", e.MaxLength, 3)
	wantInt(t, "expires", e.Expires, 9000)
	wantInt(t, "delivery-limit", e.DeliveryLimit, 10)
	wantStr(t, "dlx", e.DLX, "dlx")
	if e.Overflow != "reject-publish" {
		t.Errorf("overflow %q, want the operator's reject-publish", e.Overflow)
	}
	// The classic argument still wins over the merged overflow.
	if e := effOf(t, amqp.Table{"x-overflow": "drop-head"}, user, op); e.Overflow != "drop-head" {
		t.Errorf("classic with argument: overflow %q, want drop-head", e.Overflow)
	}
	// Operator alone.
	e = effOf(t, amqp.Table{"x-max-length": int32(1)}, nil, op)
	wantInt(t, "op-only max-length", e.MaxLength, 1)
	wantInt(t, "op-only ttl", e.MessageTTL, 2000)
}

// R1.11: the values RabbitMQ refuses, with the text rabbitmqctl set_policy
// prints after "Validation failed" (confirmed on 3.10.8 unless noted).
func TestPolicyValidation(t *testing.T) {
	for _, c := range []struct {
		def      string
		operator bool
		want     string
	}{
		{`{"message-ttl":-1}`, false, "-1 is not a valid message TTL"},
		{`{"message-ttl":1.5}`, false, "1.5 is not a valid message TTL"},
		{`{"expires":0}`, false, "0 is not a valid queue expiry"},
		{`{"max-length":-1}`, false, "-1 is not a valid maximum length"},
		{`{"max-length-bytes":"x"}`, false, `<<"x">> is not a valid maximum length in bytes`},
		{`{"overflow":"foo"}`, false, `<<"foo">> is not a valid overflow value`},
		{`{"dead-letter-exchange":1}`, false, "1 is not a valid dead letter exchange name"},
		{`{"dead-letter-routing-key":2}`, false, "2 is not a valid dead letter routing key"},
		{`{"dead-letter-strategy":"x"}`, false, `<<"x">> is not a valid dead letter strategy`},
		{`{"delivery-limit":"a"}`, false, `<<"a">> is not a valid delivery limit`},
		{`{"alternate-exchange":3}`, false, "3 is not a valid alternate exchange name"},
		{`{"max-priority":5}`, false, `[{<<"max-priority">>,5}] are not recognised policy settings`},
		{`{"message-ttl":1,"foo":2,"bar":3}`, false, `[{<<"bar">>,3},{<<"foo">>,2}] are not recognised policy settings`},
		{`{"message-ttl":-1,"expires":0}`, false, "0 is not a valid queue expiry"},
		{`{}`, false, "no policy provided"},
		{`{"dead-letter-exchange":"x"}`, true, `[{<<"dead-letter-exchange">>,<<"x">>}] are not recognised policy settings`},
		{`{"alternate-exchange":"x"}`, true, `[{<<"alternate-exchange">>,<<"x">>}] are not recognised policy settings`},
		// 4.x (3.10 refuses negative limits).
		{`{"delivery-limit":-5}`, false, ""},
		{`{"overflow":"reject-publish"}`, true, ""},
		{`{"message-ttl":315360000001}`, false, ""},
		{`{"queue-mode":"lazy"}`, false, ""},
		{`{"delayed-retry-type":"all"}`, false, "delayed-retry-min is required when delayed-retry-type is all"},
	} {
		var def map[string]any
		d := json.NewDecoder(strings.NewReader(c.def))
		d.UseNumber()
		if err := d.Decode(&def); err != nil {
			t.Fatal(err)
		}
		_, err := compilePolicy(Policy{Name: "p", Pattern: "^p", Definition: def}, c.operator)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%s (operator %t):\n got %q\nwant %q", c.def, c.operator, got, c.want)
		}
	}
	for _, c := range []struct {
		p    Policy
		want string
	}{
		{Policy{Pattern: "(", Definition: map[string]any{"message-ttl": -1}}, `pattern should be regular expression but is invalid: {"missing )",1}`},
		{Policy{Pattern: "(", ApplyTo: "foo", Definition: map[string]any{"message-ttl": 1}}, `pattern should be regular expression but is invalid: {"missing )",1}`},
		{Policy{Pattern: "^x", ApplyTo: "foo", Definition: map[string]any{"message-ttl": -1}}, "apply-to 'foo' unrecognised; should be one of: 'queues', 'classic_queues',  'quorum_queues', 'streams', 'exchanges', or 'all'"},
	} {
		_, err := compilePolicy(c.p, false)
		if err == nil || err.Error() != c.want {
			t.Errorf("%+v: got %v, want %q", c.p, err, c.want)
		}
	}
}

func declare(t *testing.T, v *VHost, name string, args amqp.Table) *Queue {
	t.Helper()
	s := QueueSpec{Name: name, Args: args}
	if queueTypeOf(args) != QueueTypeClassic {
		s.Durable = true
	}
	q, _, _, err := v.DeclareQueue(s, false)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func setPolicy(t *testing.T, v *VHost, p Policy) {
	t.Helper()
	if err := v.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
}

// Matching: the highest priority policy whose pattern is found anywhere
// in the name (unanchored) and whose apply-to fits; ties go to the name
// that sorts first; a policy holding a key the queue type does not
// support is skipped for that queue (rabbit_queue_type:is_policy_applicable).
func TestPolicyMatching(t *testing.T) {
	v := New(Config{}).VHost("/")
	cq := declare(t, v, "orders.work", nil)
	qq := declare(t, v, "orders.quorum", amqp.Table{"x-queue-type": "quorum"})
	setPolicy(t, v, Policy{Name: "low", Pattern: "work", Priority: 1, Definition: map[string]any{"message-ttl": 1}})
	setPolicy(t, v, Policy{Name: "high", Pattern: "^orders\\.", Priority: 5, Definition: map[string]any{"message-ttl": 2}})
	if p, _ := v.QueuePolicy(cq); p != "high" {
		t.Errorf("orders.work policy %q, want high", p)
	}
	setPolicy(t, v, Policy{Name: "b", Pattern: "orders", Priority: 9, Definition: map[string]any{"message-ttl": 3}})
	setPolicy(t, v, Policy{Name: "a", Pattern: "orders", Priority: 9, Definition: map[string]any{"message-ttl": 4}})
	if p, _ := v.QueuePolicy(cq); p != "a" {
		t.Errorf("tie: policy %q, want a", p)
	}
	wantInt(t, "tie ttl", cq.Effective().MessageTTL, 4)
	v.DeletePolicy("a")
	v.DeletePolicy("b")
	// apply-to
	setPolicy(t, v, Policy{Name: "qq-only", Pattern: "orders", Priority: 20, ApplyTo: ApplyToQuorumQueues, Definition: map[string]any{"max-length": 1}})
	setPolicy(t, v, Policy{Name: "x-only", Pattern: "orders", Priority: 30, ApplyTo: ApplyToExchanges, Definition: map[string]any{"alternate-exchange": "ae"}})
	if p, _ := v.QueuePolicy(qq); p != "qq-only" {
		t.Errorf("quorum queue policy %q, want qq-only", p)
	}
	if p, _ := v.QueuePolicy(cq); p != "high" {
		t.Errorf("classic queue policy %q, want high", p)
	}
	// A classic queue skips a policy with a quorum-only key.
	setPolicy(t, v, Policy{Name: "strategy", Pattern: "orders", Priority: 40, Definition: map[string]any{"dead-letter-strategy": "at-least-once", "dead-letter-exchange": "d"}})
	if p, _ := v.QueuePolicy(cq); p != "high" {
		t.Errorf("classic queue with dead-letter-strategy policy: %q, want high", p)
	}
	if p, _ := v.QueuePolicy(qq); p != "strategy" {
		t.Errorf("quorum queue: %q, want strategy", p)
	}
	// A quorum queue skips a policy with a classic-only key; Warren's
	// classic queues take delivery-limit.
	setPolicy(t, v, Policy{Name: "lazy", Pattern: "orders", Priority: 50, Definition: map[string]any{"queue-mode": "lazy", "delivery-limit": 3}})
	if p, _ := v.QueuePolicy(qq); p != "strategy" {
		t.Errorf("quorum queue with queue-mode policy: %q, want strategy", p)
	}
	if p, _ := v.QueuePolicy(cq); p != "lazy" {
		t.Errorf("classic queue: %q, want lazy", p)
	}
	wantInt(t, "classic delivery-limit from policy", cq.Effective().DeliveryLimit, 3)
	// apply-to all covers exchanges too, whatever the keys.
	if p, _ := v.ExchangePolicy("orders.x"); p != "lazy" {
		t.Errorf("exchange policy %q, want lazy", p)
	}
	v.DeletePolicy("lazy")
	v.DeletePolicy("strategy")
	if p, _ := v.ExchangePolicy("orders.x"); p != "x-only" {
		t.Errorf("exchange policy %q, want x-only", p)
	}
	if got := len(v.Policies()); got != 4 {
		t.Errorf("%d policies, want 4", got)
	}
}

// R1.13: setting, replacing and deleting a policy changes the settings of
// the queues in force at once; a queue declared later picks up existing
// policies.
func TestPolicyLive(t *testing.T) {
	v := New(Config{}).VHost("/")
	q := declare(t, v, "work", amqp.Table{"x-message-ttl": int32(10000)})
	if q.Effective().DLX != nil {
		t.Fatal("DLX before any policy")
	}
	setPolicy(t, v, Policy{Name: "dl", Pattern: "^work$", Definition: map[string]any{"dead-letter-exchange": "dlx", "message-ttl": 500}})
	wantStr(t, "dlx after set", q.Effective().DLX, "dlx")
	wantInt(t, "ttl after set", q.Effective().MessageTTL, 500)
	setPolicy(t, v, Policy{Name: "dl", Pattern: "^work$", Definition: map[string]any{"dead-letter-exchange": "dlx2"}})
	wantStr(t, "dlx after replace", q.Effective().DLX, "dlx2")
	wantInt(t, "ttl after replace", q.Effective().MessageTTL, 10000)
	q2 := declare(t, v, "work", amqp.Table{"x-message-ttl": int32(10000)}) // redeclare: same queue
	if q2 != q {
		t.Fatal("redeclare returned another queue")
	}
	late := declare(t, v, "work2", nil)
	if late.Effective().DLX != nil {
		t.Error("^work$ applied to work2")
	}
	setPolicy(t, v, Policy{Name: "all", Pattern: "", Priority: -1, Definition: map[string]any{"max-length": 7}})
	q3 := declare(t, v, "new", nil)
	wantInt(t, "new queue max-length", q3.Effective().MaxLength, 7)
	if !v.DeletePolicy("dl") {
		t.Fatal("DeletePolicy: not found")
	}
	if q.Effective().DLX != nil {
		t.Error("DLX still set after delete")
	}
	wantInt(t, "fallback to the lower policy", q.Effective().MaxLength, 7)
	if v.DeletePolicy("dl") {
		t.Error("second DeletePolicy reported found")
	}
	if err := v.SetOperatorPolicy(Policy{Name: "cap", Pattern: ".*", Definition: map[string]any{"max-length": 2}}); err != nil {
		t.Fatal(err)
	}
	wantInt(t, "operator cap", q.Effective().MaxLength, 2)
	if ops := v.OperatorPolicies(); len(ops) != 1 || ops[0].ApplyTo != "all" || ops[0].VHost != "/" {
		t.Errorf("operator policies: %+v", ops)
	}
	v.DeleteOperatorPolicy("cap")
	wantInt(t, "operator removed", q.Effective().MaxLength, 7)
}

// A policy alternate-exchange routes unroutable messages; an
// alternate-exchange argument wins over it.
func TestPolicyAlternateExchange(t *testing.T) {
	v := New(Config{}).VHost("/")
	for _, x := range []ExchangeSpec{{Name: "main", Kind: KindDirect}, {Name: "own-ae", Kind: KindFanout},
		{Name: "withArg", Kind: KindDirect, Args: amqp.Table{"alternate-exchange": "own-ae"}}, {Name: "pol-ae", Kind: KindFanout}} {
		if err := v.DeclareExchange(x, false); err != nil {
			t.Fatal(err)
		}
	}
	polQ, ownQ := declare(t, v, "pol-q", nil), declare(t, v, "own-q", nil)
	if err := v.Bind("pol-ae", "pol-q", false, "", nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Bind("own-ae", "own-q", false, "", nil, 0); err != nil {
		t.Fatal(err)
	}
	setPolicy(t, v, Policy{Name: "ae", Pattern: "^(main|withArg)$", ApplyTo: ApplyToExchanges, Definition: map[string]any{"alternate-exchange": "pol-ae"}})
	var r Router
	for _, x := range []string{"main", "withArg"} {
		if _, err := v.Publish(&r, x, &Message{Exchange: x, RoutingKey: "nowhere", Body: []byte(x)}); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := polQ.Counts(); n != 1 {
		t.Errorf("pol-q has %d messages, want 1 (from main)", n)
	}
	if n, _ := ownQ.Counts(); n != 1 {
		t.Errorf("own-q has %d messages, want 1 (the argument wins for withArg)", n)
	}
}
