package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/warrentest"
)

// TestFederationUpstreamExchange: issue 24. The x-federation-upstream
// exchange a RabbitMQ downstream declares on Warren routes as a fanout but
// for messages that went round already: x-received-from with x-max-hops
// entries or more, or an entry naming the downstream's cluster and vhost.
// Its declaration needs x-max-hops, as RabbitMQ's (406).
func TestFederationUpstreamExchange(t *testing.T) {
	w := warrentest.Start(t)
	c, err := amqp.Dial(w.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	args := amqp.Table{"x-max-hops": int64(2), "x-downstream-name": "rabbit@down", "x-downstream-vhost": "/",
		"x-internal-purpose": "federation"}
	if err := ch.ExchangeDeclare("fed-up", "x-federation-upstream", true, true, false, false, args); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("fed-up-q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("fed-up-q", "ignored", "fed-up", false, nil); err != nil {
		t.Fatal(err)
	}
	hop := func(cluster, vhost string) amqp.Table {
		return amqp.Table{"uri": "amqp://x", "exchange": "e", "redelivered": false, "cluster-name": cluster, "vhost": vhost}
	}
	for _, m := range []struct {
		body string
		from []any
	}{
		{"plain", nil},
		{"one hop elsewhere", []any{hop("rabbit@other", "/")}},
		{"from the downstream", []any{hop("rabbit@down", "/")}},
		{"from the downstream's other vhost", []any{hop("rabbit@down", "v2")}},
		{"max hops", []any{hop("a", "/"), hop("b", "/")}},
	} {
		p := amqp.Publishing{Body: []byte(m.body)}
		if m.from != nil {
			p.Headers = amqp.Table{"x-received-from": m.from}
		}
		if err := ch.PublishWithContext(context.Background(), "fed-up", "any.key", false, false, p); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < 3 && time.Now().Before(deadline) {
		d, ok, err := ch.Get("fed-up-q", true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got = append(got, string(d.Body))
		}
	}
	if _, ok, _ := ch.Get("fed-up-q", true); ok || len(got) != 3 || got[0] != "plain" || got[1] != "one hop elsewhere" ||
		got[2] != "from the downstream's other vhost" {
		t.Fatalf("routed %q (and more: %v)", got, ok)
	}

	for _, bad := range []struct {
		args amqp.Table
		want string
	}{
		{nil, "Argument x-max-hops missing"},
		{amqp.Table{"x-max-hops": "1"}, "Argument x-max-hops must be of type long"},
	} {
		ch2, err := c.Channel()
		if err != nil {
			t.Fatal(err)
		}
		err = ch2.ExchangeDeclare("fed-bad", "x-federation-upstream", true, true, false, false, bad.args)
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed || ae.Reason != "PRECONDITION_FAILED - "+bad.want {
			t.Fatalf("declare with %v: %v", bad.args, err)
		}
	}
}
