package integration

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/warrentest"
)

// polSetup starts Warren with a DLX "dlx" (direct) bound to queues
// "dlq-a" (key a), "dlq-b" (key b) and "dlq-work" (key work).
func polSetup(t *testing.T) (*warrentest.Broker, *amqp.Channel) {
	t.Helper()
	b := warrentest.Start(t)
	conn, err := amqp.Dial(b.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []string{"dlx", "dlx2"} {
		if err := ch.ExchangeDeclare(x, "direct", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []struct{ name, x, key string }{{"dlq-a", "dlx", "a"}, {"dlq-b", "dlx", "b"}, {"dlq-work", "dlx", "work"}, {"dlq2-work", "dlx2", "work"}} {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q.name, q.key, q.x, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	return b, ch
}

func polSet(t *testing.T, b *warrentest.Broker, p broker.Policy) {
	t.Helper()
	if err := b.Broker().VHost("/").SetPolicy(p); err != nil {
		t.Fatal(err)
	}
}

func polPublish(t *testing.T, ch *amqp.Channel, queue, body string, p amqp.Publishing) {
	t.Helper()
	p.Body = []byte(body)
	if err := ch.PublishWithContext(context.Background(), "", queue, false, false, p); err != nil {
		t.Fatal(err)
	}
}

// polReject gets one message from queue and rejects it without requeue.
func polReject(t *testing.T, ch *amqp.Channel, queue string) {
	t.Helper()
	d := polGet(t, ch, queue, false)
	if err := d.Reject(false); err != nil {
		t.Fatal(err)
	}
}

func polGet(t *testing.T, ch *amqp.Channel, queue string, autoAck bool) amqp.Delivery {
	t.Helper()
	var d amqp.Delivery
	if !testutil.Until(5*time.Second, func() bool {
		var ok bool
		var err error
		if d, ok, err = ch.Get(queue, autoAck); err != nil {
			t.Fatal(err)
		}
		return ok
	}) {
		t.Fatalf("no message in %s", queue)
	}
	return d
}

func polEmpty(t *testing.T, ch *amqp.Channel, queue string) {
	t.Helper()
	// A basic.get round trip follows the reject on the same channel, so
	// a dead letter routed there has been enqueued by now.
	if d, ok, err := ch.Get(queue, true); err != nil || ok {
		t.Fatalf("%s: got %q ok=%v err=%v, want empty", queue, d.Body, ok, err)
	}
}

// R1.12: a policy dead-letter-exchange makes a queue declared without
// dead-letter arguments dead-letter rejected messages (R5.2), and the
// policy's dead-letter-routing-key is used.
func TestPolicyDeadLetterExchange(t *testing.T) {
	b, ch := polSetup(t)
	polSet(t, b, broker.Policy{Name: "dl", Pattern: "^work", ApplyTo: "queues",
		Definition: map[string]any{"dead-letter-exchange": "dlx", "dead-letter-routing-key": "a"}})
	if _, err := ch.QueueDeclare("work", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	polPublish(t, ch, "work", "m1", amqp.Publishing{})
	polReject(t, ch, "work")
	d := polGet(t, ch, "dlq-a", true)
	if string(d.Body) != "m1" || d.Exchange != "dlx" || d.RoutingKey != "a" {
		t.Fatalf("dead letter %q via %q/%q, want m1 via dlx/a", d.Body, d.Exchange, d.RoutingKey)
	}
	death, _ := d.Headers["x-death"].([]any)
	if len(death) != 1 || death[0].(amqp.Table)["reason"] != "rejected" || death[0].(amqp.Table)["queue"] != "work" {
		t.Errorf("x-death: %v", d.Headers["x-death"])
	}
}

// R1.12, T:dl dead_letter_override_policy: the argument
// x-dead-letter-exchange wins over the policy's.
func TestPolicyDeadLetterArgumentOverridesPolicy(t *testing.T) {
	b, ch := polSetup(t)
	polSet(t, b, broker.Policy{Name: "dl", Pattern: "^work$", Definition: map[string]any{"dead-letter-exchange": "dlx2"}})
	if _, err := ch.QueueDeclare("work", true, false, false, false, amqp.Table{"x-dead-letter-exchange": "dlx"}); err != nil {
		t.Fatal(err)
	}
	polPublish(t, ch, "work", "m1", amqp.Publishing{})
	polReject(t, ch, "work")
	if d := polGet(t, ch, "dlq-work", true); string(d.Body) != "m1" || d.Exchange != "dlx" {
		t.Fatalf("got %q via %q, want m1 via the argument's dlx", d.Body, d.Exchange)
	}
	polEmpty(t, ch, "dlq2-work")
}

// R1.12: the argument DLX combines with the policy's routing key (per
// key resolution).
func TestPolicyRoutingKeyCombinesWithArgumentDLX(t *testing.T) {
	b, ch := polSetup(t)
	polSet(t, b, broker.Policy{Name: "dl", Pattern: "^work$", Definition: map[string]any{"dead-letter-exchange": "dlx2", "dead-letter-routing-key": "b"}})
	if _, err := ch.QueueDeclare("work", true, false, false, false, amqp.Table{"x-dead-letter-exchange": "dlx"}); err != nil {
		t.Fatal(err)
	}
	polPublish(t, ch, "work", "m1", amqp.Publishing{})
	polReject(t, ch, "work")
	if d := polGet(t, ch, "dlq-b", true); string(d.Body) != "m1" || d.Exchange != "dlx" || d.RoutingKey != "b" {
		t.Fatalf("got %q via %q/%q, want m1 via dlx/b", d.Body, d.Exchange, d.RoutingKey)
	}
	polEmpty(t, ch, "dlq-work")
}

// R1.13, T:dl dead_letter_policy: a policy added after the queue exists
// applies to the next dead letters; once deleted, they are discarded
// again.
func TestPolicyAddedLaterApplies(t *testing.T) {
	b, ch := polSetup(t)
	if _, err := ch.QueueDeclare("work", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"m1", "m2", "m3"} {
		polPublish(t, ch, "work", m, amqp.Publishing{})
	}
	polReject(t, ch, "work") // m1: no DLX yet, discarded
	polEmpty(t, ch, "dlq-work")
	polSet(t, b, broker.Policy{Name: "dl", Pattern: "work", Definition: map[string]any{"dead-letter-exchange": "dlx"}})
	polReject(t, ch, "work") // m2
	if d := polGet(t, ch, "dlq-work", true); string(d.Body) != "m2" {
		t.Fatalf("got %q, want m2", d.Body)
	}
	if !b.Broker().VHost("/").DeletePolicy("dl") {
		t.Fatal("DeletePolicy: not found")
	}
	polReject(t, ch, "work") // m3: discarded again
	polEmpty(t, ch, "dlq-work")
}

// R1.13: a policy max-length lower than the queue's length trims the head
// at once (dead-lettering the dropped messages, reason maxlen, R4.2).
func TestPolicyMaxLengthTrimsAtOnce(t *testing.T) {
	b, ch := polSetup(t)
	if _, err := ch.QueueDeclare("work", true, false, false, false, amqp.Table{"x-dead-letter-exchange": "dlx"}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"m1", "m2", "m3", "m4"} {
		polPublish(t, ch, "work", m, amqp.Publishing{})
	}
	waitFor(t, "4 messages in work", func() bool { n, _ := b.Broker().VHost("/").Queue("work").Counts(); return n == 4 })
	polSet(t, b, broker.Policy{Name: "cap", Pattern: "^work$", Definition: map[string]any{"max-length": 1}})
	q, err := ch.QueueDeclarePassive("work", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != 1 {
		t.Fatalf("work holds %d messages after max-length 1, want 1", q.Messages)
	}
	if d := polGet(t, ch, "work", true); string(d.Body) != "m4" {
		t.Errorf("kept %q, want the newest m4", d.Body)
	}
	for _, want := range []string{"m1", "m2", "m3"} {
		d := polGet(t, ch, "dlq-work", true)
		death, _ := d.Headers["x-death"].([]any)
		if string(d.Body) != want || len(death) != 1 || death[0].(amqp.Table)["reason"] != "maxlen" {
			t.Errorf("dead letter %q x-death %v, want %s with reason maxlen", d.Body, d.Headers["x-death"], want)
		}
	}
	// An argument lower than the policy wins: min(policy, argument).
	polSet(t, b, broker.Policy{Name: "cap", Pattern: "^work$", Definition: map[string]any{"max-length": 100}})
	for _, m := range []string{"n1", "n2", "n3"} {
		polPublish(t, ch, "work", m, amqp.Publishing{})
	}
	waitFor(t, "3 messages in work", func() bool { n, _ := b.Broker().VHost("/").Queue("work").Counts(); return n == 3 })
}

// R1.13, T:pol operator_retroactive_policy_ttl: a policy message-ttl
// applies to messages published after it; messages already enqueued keep
// the expiry they had.
func TestPolicyMessageTTLNotRetroactive(t *testing.T) {
	b, ch := polSetup(t)
	if _, err := ch.QueueDeclare("work", true, false, false, false, amqp.Table{"x-dead-letter-exchange": "dlx"}); err != nil {
		t.Fatal(err)
	}
	polPublish(t, ch, "work", "old", amqp.Publishing{})
	waitFor(t, "old enqueued", func() bool { n, _ := b.Broker().VHost("/").Queue("work").Counts(); return n == 1 })
	polSet(t, b, broker.Policy{Name: "ttl", Pattern: "^work$", Definition: map[string]any{"message-ttl": 30}})
	polPublish(t, ch, "work", "new", amqp.Publishing{})
	// "new" is behind "old" (which never expires): with head-only expiry
	// (R2.4) it would wait; Warren expires it where it sits.
	d := polGet(t, ch, "dlq-work", true)
	death, _ := d.Headers["x-death"].([]any)
	if string(d.Body) != "new" || len(death) != 1 || death[0].(amqp.Table)["reason"] != "expired" {
		t.Fatalf("dead letter %q x-death %v, want new expired", d.Body, d.Headers["x-death"])
	}
	if d := polGet(t, ch, "work", true); string(d.Body) != "old" {
		t.Fatalf("work: got %q, want old (not expired by the later policy)", d.Body)
	}
}

// An operator policy caps a user policy (min), and cannot set
// dead-lettering.
func TestOperatorPolicyCaps(t *testing.T) {
	b, ch := polSetup(t)
	v := b.Broker().VHost("/")
	if err := v.SetOperatorPolicy(broker.Policy{Name: "op", Pattern: ".*", ApplyTo: "queues", Definition: map[string]any{"dead-letter-exchange": "dlx"}}); err == nil ||
		err.Error() != `[{<<"dead-letter-exchange">>,<<"dlx">>}] are not recognised policy settings` {
		t.Fatalf("operator DLX: got %v", err)
	}
	polSet(t, b, broker.Policy{Name: "user", Pattern: "^work$", Definition: map[string]any{"max-length": 5}})
	if err := v.SetOperatorPolicy(broker.Policy{Name: "op", Pattern: ".*", ApplyTo: "queues", Definition: map[string]any{"max-length": 2}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("work", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"m1", "m2", "m3"} {
		polPublish(t, ch, "work", m, amqp.Publishing{})
	}
	waitFor(t, "work capped at 2", func() bool {
		q, err := ch.QueueDeclarePassive("work", true, false, false, false, nil)
		return err == nil && q.Messages == 2
	})
	if d := polGet(t, ch, "work", true); string(d.Body) != "m2" {
		t.Errorf("head %q, want m2", d.Body)
	}
}
