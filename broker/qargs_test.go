package broker

import (
	"strings"
	"testing"
	"time"

	"github.com/warrenmq/warren/amqp"
)

func TestValidateQueueDeclare(t *testing.T) {
	const pre = "invalid arg '"
	const of = "' for queue 'q' in vhost '/': "
	inv := func(k, term string) string { return pre + k + of + term }
	qq := func(kv ...any) amqp.Table {
		t := amqp.Table{"x-queue-type": "quorum"}
		for i := 0; i < len(kv); i += 2 {
			t[kv[i].(string)] = kv[i+1]
		}
		return t
	}
	cases := []struct {
		name string
		spec QueueSpec
		want string // "" = accepted
	}{
		// R1.2 integer widths accepted, others refused.
		{"ttl int8", QueueSpec{Args: amqp.Table{"x-message-ttl": int8(1)}}, ""},
		{"ttl uint8", QueueSpec{Args: amqp.Table{"x-message-ttl": uint8(1)}}, ""},
		{"ttl int16", QueueSpec{Args: amqp.Table{"x-message-ttl": int16(1)}}, ""},
		{"ttl uint16", QueueSpec{Args: amqp.Table{"x-message-ttl": uint16(1)}}, ""},
		{"ttl int32", QueueSpec{Args: amqp.Table{"x-message-ttl": int32(1)}}, ""},
		{"ttl uint32", QueueSpec{Args: amqp.Table{"x-message-ttl": uint32(1)}}, ""},
		{"ttl int64", QueueSpec{Args: amqp.Table{"x-message-ttl": int64(1)}}, ""},
		{"ttl 0", QueueSpec{Args: amqp.Table{"x-message-ttl": int32(0)}}, ""},
		{"ttl max", QueueSpec{Args: amqp.Table{"x-message-ttl": int64(MaxExpiry)}}, ""},
		{"ttl string", QueueSpec{Args: amqp.Table{"x-message-ttl": "5"}}, inv("x-message-ttl", `"expected integer, got longstr"`)},
		{"ttl double", QueueSpec{Args: amqp.Table{"x-message-ttl": 5.0}}, inv("x-message-ttl", `"expected integer, got double"`)},
		{"ttl float", QueueSpec{Args: amqp.Table{"x-message-ttl": float32(5)}}, inv("x-message-ttl", `"expected integer, got float"`)},
		{"ttl decimal", QueueSpec{Args: amqp.Table{"x-message-ttl": amqp.Decimal{Value: 5}}}, inv("x-message-ttl", `"expected integer, got decimal"`)},
		{"ttl timestamp", QueueSpec{Args: amqp.Table{"x-message-ttl": time.Unix(5, 0)}}, inv("x-message-ttl", `"expected integer, got timestamp"`)},
		{"ttl void", QueueSpec{Args: amqp.Table{"x-message-ttl": nil}}, inv("x-message-ttl", `"expected integer, got void"`)},
		{"ttl negative", QueueSpec{Args: amqp.Table{"x-message-ttl": int32(-1)}}, inv("x-message-ttl", "{value_negative,-1}")},
		{"ttl too large", QueueSpec{Args: amqp.Table{"x-message-ttl": int64(MaxExpiry + 1)}}, inv("x-message-ttl", "{value_too_large,315360000001}")},
		{"expires 0", QueueSpec{Args: amqp.Table{"x-expires": int32(0)}}, inv("x-expires", "{value_zero,0}")},
		{"expires 1", QueueSpec{Args: amqp.Table{"x-expires": int32(1)}}, ""},
		{"expires negative", QueueSpec{Args: amqp.Table{"x-expires": int32(-2)}}, inv("x-expires", "{value_negative,-2}")},
		{"expires too large", QueueSpec{Args: amqp.Table{"x-expires": int64(MaxExpiry + 1)}}, inv("x-expires", "{value_too_large,315360000001}")},
		{"max-length 0", QueueSpec{Args: amqp.Table{"x-max-length": int32(0)}}, ""},
		{"max-length negative", QueueSpec{Args: amqp.Table{"x-max-length": int32(-1)}}, inv("x-max-length", "{value_negative,-1}")},
		{"max-length-bytes double", QueueSpec{Args: amqp.Table{"x-max-length-bytes": 1.0}}, inv("x-max-length-bytes", `"expected integer, got double"`)},
		{"max-priority 256", QueueSpec{Args: amqp.Table{"x-max-priority": int32(256)}}, inv("x-max-priority", "{max_value_exceeded,256}")},
		{"max-priority -1", QueueSpec{Args: amqp.Table{"x-max-priority": int32(-1)}}, inv("x-max-priority", "{value_negative,-1}")},
		{"sac int", QueueSpec{Args: amqp.Table{"x-single-active-consumer": int32(1)}}, inv("x-single-active-consumer", "{unacceptable_type,signedint}")},
		{"sac bool", QueueSpec{Args: amqp.Table{"x-single-active-consumer": true}}, ""},
		// R1.2: the first invalid argument in declare_args order is reported.
		{"order", QueueSpec{Args: amqp.Table{"x-max-length": int32(-1), "x-message-ttl": int32(-1)}}, inv("x-message-ttl", "{value_negative,-1}")},
		// R1.3
		{"overflow ok", QueueSpec{Args: amqp.Table{"x-overflow": "reject-publish"}}, ""},
		{"overflow bad", QueueSpec{Args: amqp.Table{"x-overflow": "x"}}, inv("x-overflow", "invalid_overflow")},
		{"overflow bytes", QueueSpec{Args: amqp.Table{"x-overflow": []byte("drop-head")}}, inv("x-overflow", "{unacceptable_type,binary}")},
		// R1.4
		{"dlx int", QueueSpec{Args: amqp.Table{"x-dead-letter-exchange": int8(1), "x-queue-type": "bogus"}},
			"invalid type 'byte' for arg 'x-dead-letter-exchange' in queue 'q' in vhost '/'"},
		{"dlx empty", QueueSpec{Args: amqp.Table{"x-dead-letter-exchange": ""}}, ""},
		// R1.5
		{"dlrk alone", QueueSpec{Args: amqp.Table{"x-dead-letter-routing-key": "k"}}, inv("x-dead-letter-routing-key", "routing_key_but_no_dlx_defined")},
		{"dlrk long", QueueSpec{Args: amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": int64(1)}}, inv("x-dead-letter-routing-key", "{unacceptable_type,long}")},
		// R1.6
		{"strategy", QueueSpec{Durable: true, Args: qq("x-dead-letter-strategy", "at-least-once")}, ""},
		{"strategy bad", QueueSpec{Durable: true, Args: qq("x-dead-letter-strategy", "x")}, inv("x-dead-letter-strategy", "invalid_dlx_strategy")},
		{"strategy classic", QueueSpec{Args: amqp.Table{"x-dead-letter-strategy": "at-most-once"}},
			"invalid arg 'x-dead-letter-strategy' for queue 'q' in vhost '/' of queue type rabbit_classic_queue"},
		// R1.7
		{"type bad", QueueSpec{Args: amqp.Table{"x-queue-type": "lazy"}}, inv("x-queue-type", `"unsupported queue type 'lazy'"`)},
		{"type quote", QueueSpec{Args: amqp.Table{"x-queue-type": `a"b`}}, inv("x-queue-type", `"unsupported queue type 'a\"b'"`)},
		{"type int", QueueSpec{Args: amqp.Table{"x-queue-type": int32(1)}}, inv("x-queue-type", "{unacceptable_type,signedint}")},
		{"type empty", QueueSpec{Args: amqp.Table{"x-queue-type": ""}}, ""},
		{"queue-version 1", QueueSpec{Args: amqp.Table{"x-queue-version": int32(1)}}, inv("x-queue-version", `"unsupported queue version '1'"`)},
		// R1.8
		{"priority on quorum", QueueSpec{Durable: true, Args: qq("x-max-priority", int32(1))},
			"invalid arg 'x-max-priority' for queue 'q' in vhost '/' of queue type rabbit_quorum_queue"},
		{"max-age on classic", QueueSpec{Args: amqp.Table{"x-max-age": "1D"}},
			"invalid arg 'x-max-age' for queue 'q' in vhost '/' of queue type rabbit_classic_queue"},
		{"unknown ignored", QueueSpec{Args: amqp.Table{"x-whatever": 1.5}}, ""},
		// Warren extension (design.md "Beyond RabbitMQ"): accepted on classic.
		{"delivery-limit classic", QueueSpec{Args: amqp.Table{"x-delivery-limit": int32(2)}}, ""},
		{"delayed-retry classic", QueueSpec{Args: amqp.Table{"x-delayed-retry-type": "all", "x-delayed-retry-min": int32(10)}}, ""},
		{"max-age stream", QueueSpec{Durable: true, Args: amqp.Table{"x-queue-type": "stream", "x-max-age": "0D"}}, inv("x-max-age", "invalid_max_age")},
		{"max-age stream ok", QueueSpec{Durable: true, Args: amqp.Table{"x-queue-type": "stream", "x-max-age": "12h"}}, ""},
		// R1.9
		{"delivery-limit string", QueueSpec{Durable: true, Args: qq("x-delivery-limit", "x")}, ""},
		{"quorum transient", QueueSpec{Args: qq()}, "invalid property 'non-durable' for queue 'q' in vhost '/'"},
		{"quorum exclusive", QueueSpec{Durable: true, Exclusive: true, Args: qq()}, "invalid property 'exclusive-owner' for queue 'q' in vhost '/'"},
		{"quorum auto-delete first", QueueSpec{Exclusive: true, AutoDelete: true, Args: qq()}, "invalid property 'auto-delete' for queue 'q' in vhost '/'"},
	}
	for _, c := range cases {
		err := ValidateQueueDeclare("q", "/", c.spec)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: got %v, want accepted", c.name, err)
		case c.want != "" && err == nil:
			t.Errorf("%s: accepted, want %q", c.name, c.want)
		case c.want != "" && (err.Code != amqp.PreconditionFailed || err.Text != "PRECONDITION_FAILED - "+c.want):
			t.Errorf("%s:\n got  %d %s\n want 406 %s", c.name, err.Code, err.Text, c.want)
		}
	}
}

// R1.10
func TestQueueArgsEquivalent(t *testing.T) {
	cases := []struct {
		name     string
		cur, got amqp.Table
		want     string
	}{
		{"widths", amqp.Table{"x-message-ttl": int8(10)}, amqp.Table{"x-message-ttl": int64(10)}, ""},
		{"unsigned", amqp.Table{"x-max-length": uint32(10)}, amqp.Table{"x-max-length": int16(10)}, ""},
		{"int vs double", amqp.Table{"x-message-ttl": int32(10)}, amqp.Table{"x-message-ttl": 10.0},
			"inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': received '10.0' but current is '10'"},
		{"other value", amqp.Table{"x-expires": int32(10)}, amqp.Table{"x-expires": int32(11)},
			"inequivalent arg 'x-expires' for queue 'q' in vhost '/': received '11' but current is '10'"},
		{"removed", amqp.Table{"x-max-length": int32(10)}, nil,
			"inequivalent arg 'x-max-length' for queue 'q' in vhost '/': received none but current is the value '10' of type 'signedint'"},
		{"added", nil, amqp.Table{"x-dead-letter-exchange": "d"},
			"inequivalent arg 'x-dead-letter-exchange' for queue 'q' in vhost '/': received the value 'd' of type 'longstr' but current is none"},
		{"added bool", nil, amqp.Table{"x-single-active-consumer": false},
			"inequivalent arg 'x-single-active-consumer' for queue 'q' in vhost '/': received the value 'false' of type 'bool' but current is none"},
		{"string vs bytes", amqp.Table{"x-dead-letter-routing-key": "k"}, amqp.Table{"x-dead-letter-routing-key": []byte("k")}, ""},
		{"type absent is classic", nil, amqp.Table{"x-queue-type": "classic"}, ""},
		{"type changed", nil, amqp.Table{"x-queue-type": "quorum"},
			"inequivalent arg 'x-queue-type' for queue 'q' in vhost '/': received 'quorum' but current is 'classic'"},
		{"unknown key", amqp.Table{"x-foo": 1}, amqp.Table{"x-foo": 2}, ""},
		{"foreign key", nil, amqp.Table{"x-max-age": "1D"}, ""},
		// Warren extension: classic queues support x-delivery-limit.
		{"delivery-limit", amqp.Table{"x-delivery-limit": int32(1)}, amqp.Table{"x-delivery-limit": int32(2)},
			"inequivalent arg 'x-delivery-limit' for queue 'q' in vhost '/': received '2' but current is '1'"},
	}
	for _, c := range cases {
		q := &Queue{Name: "q", Args: c.cur, Config: ParseQueueArgs(c.cur)}
		err := queueArgsEquivalent("queue 'q' in vhost '/'", q, c.got)
		got := ""
		if err != nil {
			ae := err.(*amqp.Error)
			if ae.Code != amqp.PreconditionFailed {
				t.Errorf("%s: code %d", c.name, ae.Code)
			}
			got = strings.TrimPrefix(ae.Text, "PRECONDITION_FAILED - ")
		}
		if got != c.want {
			t.Errorf("%s:\n got  %q\n want %q", c.name, got, c.want)
		}
	}
}

// R1.1: validation runs on creation only; passive declare compares nothing.
func TestDeclareQueueValidatesOnCreationOnly(t *testing.T) {
	v := New(Config{}).AddVHost("v")
	if _, _, _, err := v.DeclareQueue(QueueSpec{Name: "q", Args: amqp.Table{"x-expires": int32(0)}}, false); err == nil {
		t.Fatal("x-expires 0 accepted")
	}
	if v.Queue("q") != nil {
		t.Fatal("refused queue was created")
	}
	if _, _, _, err := v.DeclareQueue(QueueSpec{Name: "q", Args: amqp.Table{"x-message-ttl": int32(5)}}, false); err != nil {
		t.Fatal(err)
	}
	// Foreign keys are neither validated nor compared on redeclare.
	if _, _, _, err := v.DeclareQueue(QueueSpec{Name: "q", Args: amqp.Table{"x-message-ttl": int8(5), "x-max-age": int32(-1)}}, false); err != nil {
		t.Fatalf("redeclare: %v", err)
	}
	if _, _, _, err := v.DeclareQueue(QueueSpec{Name: "q", Durable: true, Args: amqp.Table{"x-message-ttl": int32(6)}}, true); err != nil {
		t.Fatalf("passive: %v", err)
	}
	// R1.9: a server-named quorum queue is refused.
	_, _, _, err := v.DeclareQueue(QueueSpec{Name: NewQueueName(), ServerNamed: true, Durable: true, Args: amqp.Table{"x-queue-type": "quorum"}}, false)
	if ae, ok := err.(*amqp.Error); !ok || ae.Text != "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_quorum_queue" {
		t.Fatalf("server-named quorum: %v", err)
	}
}

func TestParseQueueArgs(t *testing.T) {
	a := ParseQueueArgs(amqp.Table{
		"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "rk", "x-message-ttl": int16(100),
		"x-expires": uint32(2000), "x-max-length": int8(3), "x-max-length-bytes": int64(4096),
		"x-overflow": "reject-publish-dlx", "x-delivery-limit": int32(-1), "x-max-priority": uint8(10),
		"x-single-active-consumer": true, "x-delayed-retry-type": "failed", "x-delayed-retry-max": int32(9),
	})
	if a.Type != "classic" || *a.DLX != "dlx" || *a.DLRK != "rk" || *a.MessageTTL != 100 || *a.Expires != 2000 ||
		*a.MaxLength != 3 || *a.MaxLengthBytes != 4096 || a.Overflow != "reject-publish-dlx" || *a.DeliveryLimit != -1 ||
		a.MaxPriority != 10 || !a.SingleActive || a.DelayedRetryType != "failed" || *a.DelayedRetryMax != 9 ||
		a.DelayedRetryMin != nil || a.DeadLetterStrategy != "at-most-once" {
		t.Errorf("parsed %+v", a)
	}
	d := ParseQueueArgs(amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": "x", "x-dead-letter-strategy": "at-least-once"})
	if d.Type != "quorum" || d.DLX != nil || d.MessageTTL != nil || d.Overflow != "drop-head" || d.DeliveryLimit != nil ||
		d.DeadLetterStrategy != "at-least-once" {
		t.Errorf("parsed %+v", d)
	}
	if e := ParseQueueArgs(nil); e.Type != "classic" || e.Overflow != "drop-head" {
		t.Errorf("parsed %+v", e)
	}
}
