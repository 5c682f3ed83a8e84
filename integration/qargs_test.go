package integration

// Queue-argument validation and redeclare equivalence (spec
// dead-lettering.md §1, R1.1-R1.10), run over amqp091-go against Warren
// and, when it is reachable, against a real RabbitMQ, comparing the reply
// code and text of every queue.declare.
//
// The RabbitMQ oracle is WARREN_RABBITMQ_URL, else
// amqp://guest:guest@127.0.0.1:5672/. When it is not reachable the
// comparison is skipped with a log line, except under CI=true where that
// is a failure.

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/warrentest"
)

// qaDecl is one queue.declare. Names in texts are written {q}.
type qaDecl struct {
	durable, exclusive, autoDelete, passive bool
	args                                    amqp.Table
}

type qaCase struct {
	rule string // the spec rule the case proves
	name string
	// serverNamed declares with an empty name.
	serverNamed bool
	setup       []qaDecl // declared first on the same channel; must succeed
	decl        qaDecl
	code        int    // 0: the declare succeeds
	text        string // Warren's reply text (the RabbitMQ 4.x text)
	// rabbit is what RabbitMQ answers where Warren deliberately differs
	// (design.md "Beyond RabbitMQ"): a 406 text, or "ok".
	rabbit string
	// rabbit310 is an intended difference of RabbitMQ 3.10.8 from the 4.x
	// contract: a 3.x oracle must answer this (a 406 text, or "ok").
	rabbit310 string
}

const qaVhost = "in vhost '/'"

func qaCases() []qaCase {
	inv := func(key, term string) string {
		return "PRECONDITION_FAILED - invalid arg '" + key + "' for queue '{q}' " + qaVhost + ": " + term
	}
	ineq := func(key, rest string) string {
		return "PRECONDITION_FAILED - inequivalent arg '" + key + "' for queue '{q}' " + qaVhost + ": " + rest
	}
	ofType := func(key, module string) string {
		return "PRECONDITION_FAILED - invalid arg '" + key + "' for queue '{q}' " + qaVhost + " of queue type " + module
	}
	quorum := func(kv ...any) amqp.Table {
		t := amqp.Table{"x-queue-type": "quorum"}
		for i := 0; i < len(kv); i += 2 {
			t[kv[i].(string)] = kv[i+1]
		}
		return t
	}
	durable := func(args amqp.Table) qaDecl { return qaDecl{durable: true, args: args} }
	plain := func(args amqp.Table) qaDecl { return qaDecl{args: args} }
	return []qaCase{
		// R1.2 integer arguments: every integer width is accepted.
		{rule: "R1.2", name: "ttl byte", decl: plain(amqp.Table{"x-message-ttl": int8(5)})},
		{rule: "R1.2", name: "ttl unsigned byte", decl: plain(amqp.Table{"x-message-ttl": uint8(5)})},
		{rule: "R1.2", name: "ttl short", decl: plain(amqp.Table{"x-message-ttl": int16(5)})},
		{rule: "R1.2", name: "ttl int", decl: plain(amqp.Table{"x-message-ttl": int32(5)})},
		{rule: "R1.2", name: "ttl long", decl: plain(amqp.Table{"x-message-ttl": int64(5)})},
		{rule: "R1.2", name: "ttl zero", decl: plain(amqp.Table{"x-message-ttl": int32(0)})},
		{rule: "R1.2", name: "ttl ten years", decl: plain(amqp.Table{"x-message-ttl": int64(315360000000)})},
		{rule: "R1.2", name: "ttl string", decl: plain(amqp.Table{"x-message-ttl": "1000"}),
			code: 406, text: inv("x-message-ttl", `"expected integer, got longstr"`)},
		{rule: "R1.2", name: "ttl double", decl: plain(amqp.Table{"x-message-ttl": 1.5}),
			code: 406, text: inv("x-message-ttl", `"expected integer, got double"`)},
		{rule: "R1.2", name: "ttl float", decl: plain(amqp.Table{"x-message-ttl": float32(1.5)}),
			code: 406, text: inv("x-message-ttl", `"expected integer, got float"`)},
		{rule: "R1.2", name: "ttl bool", decl: plain(amqp.Table{"x-message-ttl": true}),
			code: 406, text: inv("x-message-ttl", `"expected integer, got bool"`)},
		{rule: "R1.2", name: "ttl negative", decl: plain(amqp.Table{"x-message-ttl": int32(-1)}),
			code: 406, text: inv("x-message-ttl", "{value_negative,-1}")},
		{rule: "R1.2", name: "ttl too large", decl: plain(amqp.Table{"x-message-ttl": int64(315360000001)}),
			code: 406, text: inv("x-message-ttl", "{value_too_large,315360000001}")},
		{rule: "R1.2", name: "expires zero", decl: plain(amqp.Table{"x-expires": int32(0)}),
			code: 406, text: inv("x-expires", "{value_zero,0}")},
		{rule: "R1.2", name: "expires negative", decl: plain(amqp.Table{"x-expires": int16(-3)}),
			code: 406, text: inv("x-expires", "{value_negative,-3}")},
		{rule: "R1.2", name: "expires too large", decl: plain(amqp.Table{"x-expires": int64(315360000001)}),
			code: 406, text: inv("x-expires", "{value_too_large,315360000001}")},
		{rule: "R1.2", name: "expires one", decl: plain(amqp.Table{"x-expires": int32(1)})},
		{rule: "R1.2", name: "expires string", decl: plain(amqp.Table{"x-expires": "10"}),
			code: 406, text: inv("x-expires", `"expected integer, got longstr"`)},
		{rule: "R1.2", name: "max-length zero", decl: plain(amqp.Table{"x-max-length": int32(0)})},
		{rule: "R1.2", name: "max-length negative", decl: plain(amqp.Table{"x-max-length": int32(-1)}),
			code: 406, text: inv("x-max-length", "{value_negative,-1}")},
		{rule: "R1.2", name: "max-length-bytes negative", decl: plain(amqp.Table{"x-max-length-bytes": int64(-7)}),
			code: 406, text: inv("x-max-length-bytes", "{value_negative,-7}")},
		{rule: "R1.2", name: "max-length decimal", decl: plain(amqp.Table{"x-max-length": amqp.Decimal{Scale: 1, Value: 10}}),
			code: 406, text: inv("x-max-length", `"expected integer, got decimal"`)},
		{rule: "R1.2", name: "max-priority 255", decl: plain(amqp.Table{"x-max-priority": int32(255)})},
		{rule: "R1.2", name: "max-priority 256", decl: plain(amqp.Table{"x-max-priority": int32(256)}),
			code: 406, text: inv("x-max-priority", "{max_value_exceeded,256}")},
		{rule: "R1.2", name: "max-priority negative", decl: plain(amqp.Table{"x-max-priority": int8(-1)}),
			code: 406, text: inv("x-max-priority", "{value_negative,-1}")},
		{rule: "R1.2", name: "single-active-consumer int", decl: plain(amqp.Table{"x-single-active-consumer": int32(1)}),
			code: 406, text: inv("x-single-active-consumer", "{unacceptable_type,signedint}")},
		{rule: "R1.2", name: "single-active-consumer string", decl: plain(amqp.Table{"x-single-active-consumer": "true"}),
			code: 406, text: inv("x-single-active-consumer", "{unacceptable_type,longstr}")},
		// Validators run in RabbitMQ's declare_args order, not table order.
		{rule: "R1.2", name: "x-expires checked before x-message-ttl",
			decl: plain(amqp.Table{"x-message-ttl": int32(-1), "x-expires": int32(0)}),
			code: 406, text: inv("x-expires", "{value_zero,0}")},

		// R1.3 x-overflow.
		{rule: "R1.3", name: "overflow reject-publish-dlx", decl: plain(amqp.Table{"x-overflow": "reject-publish-dlx"})},
		{rule: "R1.3", name: "overflow bogus", decl: plain(amqp.Table{"x-overflow": "drop-tail"}),
			code: 406, text: inv("x-overflow", "invalid_overflow")},
		{rule: "R1.3", name: "overflow int", decl: plain(amqp.Table{"x-overflow": int32(1)}),
			code: 406, text: inv("x-overflow", "{unacceptable_type,signedint}")},

		// R1.4 x-dead-letter-exchange: a string, checked by the channel
		// before any other argument.
		{rule: "R1.4", name: "dlx int", decl: plain(amqp.Table{"x-dead-letter-exchange": int32(1), "x-message-ttl": int32(-1)}),
			code: 406, text: "PRECONDITION_FAILED - invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue '{q}' " + qaVhost},
		{rule: "R1.4", name: "dlx bytes", decl: plain(amqp.Table{"x-dead-letter-exchange": []byte("dlx")}),
			code: 406, text: "PRECONDITION_FAILED - invalid type 'binary' for arg 'x-dead-letter-exchange' in queue '{q}' " + qaVhost},
		{rule: "R1.4", name: "dlx need not exist", decl: plain(amqp.Table{"x-dead-letter-exchange": "no-such-exchange-qargs"})},
		{rule: "R1.4", name: "dlx empty is default exchange", decl: plain(amqp.Table{"x-dead-letter-exchange": ""})},

		// R1.5 x-dead-letter-routing-key.
		{rule: "R1.5", name: "dlrk without dlx", decl: plain(amqp.Table{"x-dead-letter-routing-key": "rk"}),
			code: 406, text: inv("x-dead-letter-routing-key", "routing_key_but_no_dlx_defined")},
		{rule: "R1.5", name: "dlrk with dlx", decl: plain(amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "rk"})},
		{rule: "R1.5", name: "dlrk int", decl: plain(amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": int32(1)}),
			code: 406, text: inv("x-dead-letter-routing-key", "{unacceptable_type,signedint}")},

		// R1.6 x-dead-letter-strategy (quorum only).
		{rule: "R1.6", name: "strategy at-least-once", decl: durable(quorum("x-dead-letter-strategy", "at-least-once"))},
		{rule: "R1.6", name: "strategy bogus", decl: durable(quorum("x-dead-letter-strategy", "exactly-once")),
			code: 406, text: inv("x-dead-letter-strategy", "invalid_dlx_strategy")},
		{rule: "R1.6", name: "strategy int", decl: durable(quorum("x-dead-letter-strategy", int32(1))),
			code: 406, text: inv("x-dead-letter-strategy", "{unacceptable_type,signedint}")},
		{rule: "R1.6", name: "strategy on classic", decl: plain(amqp.Table{"x-dead-letter-strategy": "at-most-once"}),
			code: 406, text: ofType("x-dead-letter-strategy", "rabbit_classic_queue")},

		// R1.7 x-queue-type.
		{rule: "R1.7", name: "type classic", decl: plain(amqp.Table{"x-queue-type": "classic"})},
		{rule: "R1.7", name: "type bogus", decl: plain(amqp.Table{"x-queue-type": "lazy"}),
			code: 406, text: inv("x-queue-type", `"unsupported queue type 'lazy'"`)},
		{rule: "R1.7", name: "type int", decl: plain(amqp.Table{"x-queue-type": int32(1)}),
			code: 406, text: inv("x-queue-type", "{unacceptable_type,signedint}")},
		{rule: "R1.7", name: "type checked before other args", decl: plain(amqp.Table{"x-queue-type": "lazy", "x-expires": int32(0)}),
			code: 406, text: inv("x-queue-type", `"unsupported queue type 'lazy'"`)},

		{rule: "R1.7", name: "type empty is default", decl: plain(amqp.Table{"x-queue-type": ""}),
			// 4.x treats "" as absent (rabbit_amqqueue:maybe_inject_default_queue_type_shortcut_into_args).
			rabbit310: inv("x-queue-type", `"unsupported queue type ''"`)},
		{rule: "R1.7", name: "stream", decl: durable(amqp.Table{"x-queue-type": "stream", "x-max-age": "1D"})},
		{rule: "R1.7", name: "stream bad max-age", decl: durable(amqp.Table{"x-queue-type": "stream", "x-max-age": "1W"}),
			code: 406, text: inv("x-max-age", "invalid_max_age")},
		{rule: "R1.8", name: "ttl on stream", decl: durable(amqp.Table{"x-queue-type": "stream", "x-message-ttl": int32(5)}),
			code: 406, text: ofType("x-message-ttl", "rabbit_stream_queue")},
		{rule: "R1.9", name: "stream non-durable", decl: plain(amqp.Table{"x-queue-type": "stream"}),
			code: 406, text: "PRECONDITION_FAILED - invalid property 'non-durable' for queue '{q}' " + qaVhost},
		{rule: "R1.9", name: "server-named quorum", serverNamed: true, decl: durable(quorum()),
			code: 406, text: "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_quorum_queue"},
		{rule: "R1.8", name: "queue-version 2", decl: plain(amqp.Table{"x-queue-version": int32(2)})},
		{rule: "R1.8", name: "queue-version 1", decl: plain(amqp.Table{"x-queue-version": int32(1)}),
			code: 406, text: inv("x-queue-version", `"unsupported queue version '1'"`),
			// 4.0 removed classic queue version 1.
			rabbit310: "ok"},
		{rule: "R1.8", name: "queue-version 3", decl: plain(amqp.Table{"x-queue-version": int32(3)}),
			code: 406, text: inv("x-queue-version", `"unsupported queue version '3'"`)},
		{rule: "R1.8", name: "queue-mode not validated", decl: plain(amqp.Table{"x-queue-mode": "sideways"}),
			// 4.x dropped the x-queue-mode validator (lazy mode is gone).
			rabbit310: inv("x-queue-mode", `"unsupported queue mode 'sideways'"`)},

		// R1.8 keys of another queue type.
		{rule: "R1.8", name: "max-age on classic", decl: plain(amqp.Table{"x-max-age": "1D"}),
			code: 406, text: ofType("x-max-age", "rabbit_classic_queue")},
		{rule: "R1.8", name: "max-priority on quorum", decl: durable(quorum("x-max-priority", int32(5))),
			code: 406, text: ofType("x-max-priority", "rabbit_quorum_queue")},
		{rule: "R1.8", name: "invalid value reported before foreign key", decl: durable(quorum("x-max-priority", int32(5), "x-expires", int32(0))),
			code: 406, text: inv("x-expires", "{value_zero,0}")},
		{rule: "R1.8", name: "unknown key ignored", decl: plain(amqp.Table{"x-no-such-arg": "whatever"})},
		// Warren accepts x-delivery-limit and x-delayed-retry-* on classic
		// queues (design.md "Beyond RabbitMQ"); RabbitMQ refuses them.
		{rule: "R1.8", name: "delivery-limit on classic (Warren extension)", decl: plain(amqp.Table{"x-delivery-limit": int32(3)}),
			rabbit: ofType("x-delivery-limit", "rabbit_classic_queue")},
		{rule: "R1.8", name: "delayed-retry on classic (Warren extension)", decl: plain(amqp.Table{"x-delayed-retry-type": "all"}),
			rabbit: ofType("x-delayed-retry-type", "rabbit_classic_queue"),
			// 3.10 knows no x-delayed-retry-* (4.3 added them to quorum
			// queues) and ignores them as unknown keys.
			rabbit310: "ok"},

		// R1.9 x-delivery-limit is not validated; quorum queue properties.
		{rule: "R1.9", name: "delivery-limit string on quorum", decl: durable(quorum("x-delivery-limit", "lots"))},
		{rule: "R1.9", name: "delivery-limit negative on quorum", decl: durable(quorum("x-delivery-limit", int32(-1)))},
		{rule: "R1.9", name: "quorum non-durable", decl: plain(quorum()),
			code: 406, text: "PRECONDITION_FAILED - invalid property 'non-durable' for queue '{q}' " + qaVhost},
		{rule: "R1.9", name: "quorum auto-delete", decl: qaDecl{durable: true, autoDelete: true, args: quorum()},
			code: 406, text: "PRECONDITION_FAILED - invalid property 'auto-delete' for queue '{q}' " + qaVhost},
		{rule: "R1.9", name: "quorum exclusive", decl: qaDecl{durable: true, exclusive: true, args: quorum()},
			code: 406, text: "PRECONDITION_FAILED - invalid property 'exclusive-owner' for queue '{q}' " + qaVhost},

		// R1.1 / R1.10 redeclare: only equivalence is checked.
		{rule: "R1.10", name: "same ttl other width", setup: []qaDecl{plain(amqp.Table{"x-message-ttl": int32(10)})},
			decl: plain(amqp.Table{"x-message-ttl": int8(10)})},
		{rule: "R1.10", name: "other ttl", setup: []qaDecl{plain(amqp.Table{"x-message-ttl": int32(10)})},
			decl: plain(amqp.Table{"x-message-ttl": int64(11)}),
			code: 406, text: ineq("x-message-ttl", "received '11' but current is '10'")},
		{rule: "R1.10", name: "int vs double", setup: []qaDecl{plain(amqp.Table{"x-message-ttl": int32(10)})},
			decl: plain(amqp.Table{"x-message-ttl": float64(10)}),
			code: 406, text: ineq("x-message-ttl", "received '10.0' but current is '10'")},
		{rule: "R1.10", name: "ttl dropped", setup: []qaDecl{plain(amqp.Table{"x-message-ttl": int32(10)})},
			decl: plain(nil),
			code: 406, text: ineq("x-message-ttl", "received none but current is the value '10' of type 'signedint'")},
		{rule: "R1.10", name: "dlx added", setup: []qaDecl{plain(nil)},
			decl: plain(amqp.Table{"x-dead-letter-exchange": "dlx"}),
			code: 406, text: ineq("x-dead-letter-exchange", "received the value 'dlx' of type 'longstr' but current is none")},
		{rule: "R1.10", name: "dlrk changed", setup: []qaDecl{plain(amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "a"})},
			decl: plain(amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "b"}),
			code: 406, text: ineq("x-dead-letter-routing-key", "received 'b' but current is 'a'")},
		// Other type classes but identical Erlang values are equivalent
		// (rabbit_misc:assert_field_equivalence(Current, Current, ...)).
		{rule: "R1.10", name: "string vs bytes", setup: []qaDecl{plain(amqp.Table{"x-dead-letter-exchange": "dlx"})},
			decl: plain(amqp.Table{"x-dead-letter-exchange": []byte("dlx")})},
		{rule: "R1.10", name: "string vs other bytes", setup: []qaDecl{plain(amqp.Table{"x-dead-letter-exchange": "dlx"})},
			decl: plain(amqp.Table{"x-dead-letter-exchange": []byte("dlx2")}),
			code: 406, text: ineq("x-dead-letter-exchange", "received 'dlx2' but current is 'dlx'")},
		{rule: "R1.10", name: "absent type is classic", setup: []qaDecl{plain(nil)},
			decl: plain(amqp.Table{"x-queue-type": "classic"})},
		{rule: "R1.10", name: "classic redeclared as quorum", setup: []qaDecl{durable(nil)},
			decl: durable(quorum()),
			code: 406, text: ineq("x-queue-type", "received 'quorum' but current is 'classic'"),
			// 3.10 stores no x-queue-type for a queue declared without one;
			// 4.x injects the default type at declare (rabbit_amqqueue:augment_declare_args).
			rabbit310: ineq("x-queue-type", "received the value 'quorum' of type 'longstr' but current is none")},
		{rule: "R1.10", name: "durable differs", setup: []qaDecl{plain(nil)},
			decl: durable(nil),
			code: 406, text: "PRECONDITION_FAILED - inequivalent arg 'durable' for queue '{q}' " + qaVhost + ": received 'true' but current is 'false'"},
		{rule: "R1.10", name: "invalid value not validated on redeclare but compared", setup: []qaDecl{plain(nil)},
			decl: plain(amqp.Table{"x-overflow": "bogus"}),
			code: 406, text: ineq("x-overflow", "received the value 'bogus' of type 'longstr' but current is none")},
		{rule: "R1.1", name: "foreign key not validated on redeclare", setup: []qaDecl{plain(nil)},
			decl: plain(amqp.Table{"x-max-age": int32(-1), "x-dead-letter-strategy": "bogus"})},
		{rule: "R1.10", name: "unknown key not compared", setup: []qaDecl{plain(amqp.Table{"x-no-such-arg": "a"})},
			decl: plain(amqp.Table{"x-no-such-arg": "b"})},
		{rule: "R1.10", name: "passive compares nothing", setup: []qaDecl{plain(amqp.Table{"x-message-ttl": int32(10)})},
			decl: qaDecl{passive: true, durable: true, args: amqp.Table{"x-message-ttl": int32(99)}}},
		{rule: "R1.10", name: "quorum delivery-limit compared", setup: []qaDecl{durable(quorum("x-delivery-limit", int32(5)))},
			decl: durable(quorum("x-delivery-limit", int32(6))),
			code: 406, text: ineq("x-delivery-limit", "received '6' but current is '5'")},
	}
}

type qaResult struct {
	code int
	text string
}

func (r qaResult) String() string {
	if r.code == 0 {
		return "ok"
	}
	return strconv.Itoa(r.code) + " " + r.text
}

func qaExpect(text string) qaResult {
	if text == "ok" {
		return qaResult{}
	}
	return qaResult{code: 406, text: text}
}

// qaRun runs one case on its own connection and returns what the final
// declare answered; every queue it creates is deleted.
func qaRun(t *testing.T, url string, c qaCase) qaResult {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	defer conn.Close()
	name := "qargs-" + randomQAName()
	if c.serverNamed {
		name = ""
	}
	defer func() {
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		defer ch.Close()
		_, _ = ch.QueueDelete(name, false, false, false)
	}()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	declare := func(d qaDecl) error {
		if d.passive {
			_, err := ch.QueueDeclarePassive(name, d.durable, d.autoDelete, d.exclusive, false, d.args)
			return err
		}
		_, err := ch.QueueDeclare(name, d.durable, d.autoDelete, d.exclusive, false, d.args)
		return err
	}
	for _, s := range c.setup {
		if err := declare(s); err != nil {
			t.Fatalf("setup declare %+v: %v", s, err)
		}
	}
	err = declare(c.decl)
	if err == nil {
		return qaResult{}
	}
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		t.Fatalf("declare: %v", err)
	}
	text := ae.Reason
	if name != "" {
		text = strings.ReplaceAll(text, name, "{q}")
	}
	return qaResult{code: ae.Code, text: text}
}

func randomQAName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// rabbitVersion returns the oracle's server version property.
func rabbitVersion(t *testing.T, url string) string {
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("dial RabbitMQ %s: %v", url, err)
	}
	defer conn.Close()
	v, _ := conn.Properties["version"].(string)
	return v
}

func (c qaCase) want() qaResult { return qaResult{code: c.code, text: c.text} }

// wantRabbit is what the oracle must answer: the contract, except where
// Warren deliberately differs, or for a 3.x oracle the allow-listed 3.10
// answer.
func (c qaCase) wantRabbit(version string) qaResult {
	switch {
	case c.rabbit310 != "" && strings.HasPrefix(version, "3."):
		return qaExpect(c.rabbit310)
	case c.rabbit != "":
		return qaExpect(c.rabbit)
	}
	return c.want()
}

func TestQueueArgsValidation(t *testing.T) {
	w := warrentest.Start(t)
	rabbit := rabbitURL(t)
	version := ""
	if rabbit != "" {
		version = rabbitVersion(t, rabbit)
		t.Logf("comparing with RabbitMQ %s at %s", version, rabbit)
	}
	for _, c := range qaCases() {
		t.Run(c.rule+" "+c.name, func(t *testing.T) {
			if got, want := qaRun(t, w.URL(), c), c.want(); got != want {
				t.Errorf("Warren:\n got  %v\n want %v", got, want)
			}
			if rabbit == "" {
				return
			}
			if got, want := qaRun(t, rabbit, c), c.wantRabbit(version); got != want {
				t.Errorf("RabbitMQ %s:\n got  %v\n want %v", version, got, want)
			}
		})
	}
}
