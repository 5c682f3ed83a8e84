package integration

// Restart tests for durable definitions (issue 4): what a RabbitMQ client
// declared durable is there after a restart on the same data directory,
// with the same typed arguments; transient and exclusive entities are
// gone. These tests run against the in-process broker only (they restart
// it).

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/store"
	"github.com/warrenmq/warren/warrentest"
)

func rsDial(t *testing.T, url string) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	c, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { c.Close() })
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return c, ch
}

func rsCheck(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// rsErr runs f on a fresh channel and returns the channel error it causes.
func rsErr(t *testing.T, c *amqp.Connection, f func(ch *amqp.Channel) error) *amqp.Error {
	t.Helper()
	ch, err := c.Channel()
	rsCheck(t, "channel", err)
	defer ch.Close()
	err = f(ch)
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		t.Fatalf("want an AMQP error, got %v", err)
	}
	return ae
}

func rsQueueExists(t *testing.T, c *amqp.Connection, name string) bool {
	t.Helper()
	ch, err := c.Channel()
	rsCheck(t, "channel", err)
	defer ch.Close()
	_, err = ch.QueueDeclarePassive(name, false, false, false, false, nil)
	return err == nil
}

func rsExchangeExists(t *testing.T, c *amqp.Connection, name string) bool {
	t.Helper()
	ch, err := c.Channel()
	rsCheck(t, "channel", err)
	defer ch.Close()
	return ch.ExchangeDeclarePassive(name, "direct", false, false, false, false, nil) == nil
}

func rsGet(t *testing.T, ch *amqp.Channel, queue string) []string {
	t.Helper()
	var out []string
	for {
		d, ok, err := ch.Get(queue, true)
		rsCheck(t, "get "+queue, err)
		if !ok {
			return out
		}
		out = append(out, string(d.Body))
	}
}

func rsPublish(t *testing.T, ch *amqp.Channel, exchange, key, body string) {
	t.Helper()
	rsCheck(t, "confirm", ch.Confirm(false))
	dc, err := ch.PublishWithDeferredConfirm(exchange, key, false, false, amqp.Publishing{Body: []byte(body)})
	rsCheck(t, "publish", err)
	if ok, err := dc.WaitContext(t.Context()); !ok || err != nil {
		t.Fatalf("publish %s/%s not confirmed: %v", exchange, key, err)
	}
}

func TestRestartDurableDefinitions(t *testing.T) {
	w := warrentest.Start(t)
	b := w.Broker()

	// Vhosts, users, permissions, policies through the broker API and a
	// definitions import (a plain password and a RabbitMQ hash).
	b.AddVHost("v2")
	b.PutUser("alice", "alice-pw", []string{"monitoring"})
	rsCheck(t, "perms", b.SetPermissions("v2", "alice", broker.Permission{Configure: ".*", Write: ".*", Read: ".*"}))
	defs := `{"users":[{"name":"carol","password":"carol-pw","tags":"management"},
	                    {"name":"dave","password_hash":"` + broker.HashPassword("dave-pw") + `","hashing_algorithm":"rabbit_password_hashing_sha256","tags":[]}],
	          "permissions":[{"user":"carol","vhost":"/","configure":".*","write":".*","read":".*"},
	                         {"user":"dave","vhost":"v2","configure":"","write":"","read":".*"}]}`
	rsCheck(t, "import", b.ImportDefinitions(strings.NewReader(defs)))
	rsCheck(t, "policy", b.VHost("/").SetPolicy(broker.Policy{Name: "two", Pattern: "^rs-pol$", ApplyTo: "queues",
		Definition: map[string]any{"max-length": json.Number("2")}}))
	rsCheck(t, "operator policy", b.VHost("/").SetOperatorPolicy(broker.Policy{Name: "cap", Pattern: "^rs-", ApplyTo: "queues",
		Definition: map[string]any{"max-length": json.Number("1000")}}))
	rsCheck(t, "temporary policy", b.VHost("/").SetPolicy(broker.Policy{Name: "gone", Pattern: "^nothing$",
		Definition: map[string]any{"max-length": json.Number("1")}}))
	b.VHost("/").DeletePolicy("gone")

	c, ch := rsDial(t, w.URL())
	args := amqp.Table{"x-max-length": int32(100), "x-message-ttl": int64(600000), "x-dead-letter-exchange": "rs-dlx",
		"x-overflow": "reject-publish"}
	rsCheck(t, "d-topic", ch.ExchangeDeclare("rs-d-topic", "topic", true, false, false, false, amqp.Table{"alternate-exchange": "rs-ae"}))
	rsCheck(t, "d-direct", ch.ExchangeDeclare("rs-d-direct", "direct", true, false, false, false, nil))
	rsCheck(t, "d-gone", ch.ExchangeDeclare("rs-d-gone", "direct", true, false, false, false, nil))
	rsCheck(t, "t-fanout", ch.ExchangeDeclare("rs-t-fanout", "fanout", false, false, false, false, nil))
	for _, q := range []struct {
		name                           string
		durable, autoDelete, exclusive bool
		args                           amqp.Table
	}{
		{"rs-d-q", true, false, false, args},
		{"rs-pol", true, false, false, nil},
		{"rs-ad-q", true, true, false, nil},
		{"rs-ad-used", true, true, false, nil},
		{"rs-d-gone", true, false, false, nil},
		{"rs-t-q", false, false, false, nil},
		{"rs-x-q", true, false, true, nil},
	} {
		_, err := ch.QueueDeclare(q.name, q.durable, q.autoDelete, q.exclusive, false, q.args)
		rsCheck(t, "declare "+q.name, err)
	}
	sn, err := ch.QueueDeclare("", true, false, false, false, nil)
	rsCheck(t, "server-named", err)
	rsCheck(t, "bind", ch.QueueBind("rs-d-q", "a.*", "rs-d-topic", false, nil))
	rsCheck(t, "bind e2e", ch.ExchangeBind("rs-d-direct", "b.#", "rs-d-topic", false, nil))
	rsCheck(t, "bind pol", ch.QueueBind("rs-pol", "b.x", "rs-d-direct", false, nil))
	rsCheck(t, "bind amq.direct", ch.QueueBind("rs-d-q", "direct-key", "amq.direct", false, nil))
	rsCheck(t, "bind typed args", ch.QueueBind("rs-d-q", "typed", "rs-d-direct", false, amqp.Table{"n": int16(3)}))
	rsCheck(t, "bind t-fanout", ch.QueueBind("rs-d-q", "", "rs-t-fanout", false, nil))
	rsCheck(t, "bind to t-q", ch.QueueBind("rs-t-q", "t.*", "rs-d-topic", false, nil))
	rsCheck(t, "bind to x-q", ch.QueueBind("rs-x-q", "x.*", "rs-d-topic", false, nil))
	rsCheck(t, "bind removed", ch.QueueBind("rs-d-q", "removed", "rs-d-direct", false, nil))
	rsCheck(t, "unbind", ch.QueueUnbind("rs-d-q", "removed", "rs-d-direct", nil))
	_, err = ch.QueueDelete("rs-d-gone", false, false, false)
	rsCheck(t, "delete queue", err)
	rsCheck(t, "delete exchange", ch.ExchangeDelete("rs-d-gone", false, false))
	// An auto-delete queue deleted by losing its last consumer stays deleted.
	msgs, err := ch.Consume("rs-ad-used", "c1", true, false, false, false, nil)
	rsCheck(t, "consume", err)
	_ = msgs
	rsCheck(t, "cancel", ch.Cancel("c1", false))
	waitFor(t, "rs-ad-used auto-deleted", func() bool { return b.VHost("/").Queue("rs-ad-used") == nil })

	badArgs := amqp.Table{"x-max-length": int32(5), "x-message-ttl": int64(600000), "x-dead-letter-exchange": "rs-dlx", "x-overflow": "reject-publish"}
	before := rsErr(t, c, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare("rs-d-q", true, false, false, false, badArgs)
		return err
	})
	beforeX := rsErr(t, c, func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare("rs-d-topic", "topic", true, false, false, false, nil)
	})
	c.Close()

	w.Restart()
	b = w.Broker()

	c, ch = rsDial(t, w.URL())
	for _, q := range []string{"rs-d-q", "rs-pol", "rs-ad-q", sn.Name} {
		if !rsQueueExists(t, c, q) {
			t.Errorf("durable queue %s lost", q)
		}
	}
	for _, q := range []string{"rs-t-q", "rs-x-q", "rs-d-gone", "rs-ad-used"} {
		if rsQueueExists(t, c, q) {
			t.Errorf("queue %s survived the restart", q)
		}
	}
	for _, x := range []string{"rs-d-topic", "rs-d-direct"} {
		if !rsExchangeExists(t, c, x) {
			t.Errorf("durable exchange %s lost", x)
		}
	}
	for _, x := range []string{"rs-t-fanout", "rs-d-gone"} {
		if rsExchangeExists(t, c, x) {
			t.Errorf("exchange %s survived the restart", x)
		}
	}
	// Identical typed arguments are still equivalent; different ones get
	// the same 406 text as before the restart.
	_, err = ch.QueueDeclare("rs-d-q", true, false, false, false, args)
	rsCheck(t, "redeclare with the same args", err)
	rsCheck(t, "redeclare exchange", ch.ExchangeDeclare("rs-d-topic", "topic", true, false, false, false, amqp.Table{"alternate-exchange": "rs-ae"}))
	after := rsErr(t, c, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare("rs-d-q", true, false, false, false, badArgs)
		return err
	})
	if after.Code != before.Code || after.Reason != before.Reason {
		t.Errorf("406 changed across restart:\nbefore %d %s\nafter  %d %s", before.Code, before.Reason, after.Code, after.Reason)
	}
	afterX := rsErr(t, c, func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare("rs-d-topic", "topic", true, false, false, false, nil)
	})
	if afterX.Reason != beforeX.Reason {
		t.Errorf("exchange 406 changed across restart:\nbefore %s\nafter  %s", beforeX.Reason, afterX.Reason)
	}
	if typ := b.VHost("/").Queue("rs-d-q").Args["x-max-length"]; typ != int32(100) {
		t.Errorf("x-max-length after restart is %T %v, want int32 100", typ, typ)
	}

	// Routing through recovered bindings, e2e and typed-argument ones included.
	rsPublish(t, ch, "rs-d-topic", "a.one", "via-topic")
	rsPublish(t, ch, "rs-d-topic", "b.x", "via-e2e")
	rsPublish(t, ch, "amq.direct", "direct-key", "via-amq.direct")
	rsPublish(t, ch, "rs-d-direct", "typed", "via-typed")
	rsPublish(t, ch, "rs-d-direct", "removed", "via-removed")
	if got := strings.Join(rsGet(t, ch, "rs-d-q"), ","); got != "via-topic,via-amq.direct,via-typed" {
		t.Errorf("rs-d-q got %q", got)
	}
	// The policy (max-length 2, drop-head) applies to its queue.
	for _, m := range []string{"p1", "p2", "p3"} {
		rsPublish(t, ch, "", "rs-pol", m)
	}
	if got := strings.Join(rsGet(t, ch, "rs-pol"), ","); got != "p2,p3" {
		t.Errorf("rs-pol got %q, want the policy's max-length 2 applied", got)
	}
	if p, op := b.VHost("/").QueuePolicy(b.VHost("/").Queue("rs-pol")); p != "two" || op != "cap" {
		t.Errorf("policies on rs-pol: %q, %q", p, op)
	}
	if _, ok := b.VHost("/").Policy("gone"); ok {
		t.Error("a deleted policy came back")
	}

	// Users, vhosts and permissions.
	for _, u := range []struct{ user, pass, vhost string }{
		{"alice", "alice-pw", "v2"}, {"carol", "carol-pw", ""}, {"dave", "dave-pw", "v2"}, {"guest", "guest", ""},
	} {
		uc, err := amqp.Dial("amqp://" + u.user + ":" + u.pass + "@" + w.Addr() + "/" + u.vhost)
		if err != nil {
			t.Errorf("%s cannot log in to vhost %q after restart: %v", u.user, u.vhost, err)
			continue
		}
		uc.Close()
	}
	if usr := b.User("alice"); usr == nil || !usr.HasTag("monitoring") {
		t.Error("alice's tags lost")
	}
	if p, ok := b.Permissions("v2", "dave"); !ok || p.Read != ".*" || p.Write != "" {
		t.Errorf("dave's permissions %+v %v", p, ok)
	}

	// An auto-delete durable queue recovered without consumers is
	// deleted when its first consumer goes, and stays deleted.
	ch2, err := c.Channel()
	rsCheck(t, "channel", err)
	_, err = ch2.Consume("rs-ad-q", "c2", true, false, false, false, nil)
	rsCheck(t, "consume", err)
	rsCheck(t, "cancel", ch2.Cancel("c2", false))
	waitFor(t, "rs-ad-q auto-deleted", func() bool { return b.VHost("/").Queue("rs-ad-q") == nil })
	c.Close()
	w.Restart()
	if w.Broker().VHost("/").Queue("rs-ad-q") != nil {
		t.Error("auto-deleted queue came back after a second restart")
	}
	if w.Broker().VHost("/").Queue("rs-d-q") == nil {
		t.Error("rs-d-q lost on the second restart")
	}
}

func TestRestartDefaultsOnFirstBootOnly(t *testing.T) {
	w := warrentest.Start(t)
	b := w.Broker()
	b.PutUser("admin", "admin-pw", []string{"administrator"})
	rsCheck(t, "perms", b.SetPermissions("/", "admin", broker.Permission{Configure: ".*", Write: ".*", Read: ".*"}))
	b.DeleteUser("guest")
	w.Restart()
	if _, err := amqp.Dial(w.URL()); err == nil {
		t.Fatal("guest, deleted before the restart, logged in after it")
	}
	c, err := amqp.Dial("amqp://admin:admin-pw@" + w.Addr() + "/")
	rsCheck(t, "admin login", err)
	c.Close()

	// A deleted vhost stays deleted, with everything in it.
	b = w.Broker()
	v := b.AddVHost("tmp")
	_, _, _, err = v.DeclareQueue(broker.QueueSpec{Name: "q", Durable: true}, false)
	rsCheck(t, "declare", err)
	b.DeleteVHost("tmp")
	b.AddVHost("tmp") // recreated empty
	w.Restart()
	if v := w.Broker().VHost("tmp"); v == nil || v.Queue("q") != nil {
		t.Errorf("vhost tmp after restart: %v", v)
	}
}

// TestRestartStoreFiles reads the definitions store of a stopped broker
// directly: the records are there, in the documented shape, with the
// exact argument types.
func TestRestartStoreFiles(t *testing.T) {
	w := warrentest.Start(t)
	c, ch := rsDial(t, w.URL())
	_, err := ch.QueueDeclare("rs-file-q", true, false, false, false, amqp.Table{"x-max-priority": int8(5), "x-max-length": int32(9)})
	rsCheck(t, "declare", err)
	_, err = ch.QueueDeclare("rs-file-t", false, false, false, false, nil)
	rsCheck(t, "declare", err)
	c.Close()
	w.Close()

	d, err := store.Open(w.DataDir())
	rsCheck(t, "open store", err)
	defer d.Close()
	found := map[string]string{}
	rsCheck(t, "foreach", d.ForEach(store.KindQueues, func(k, v []byte) error {
		found[string(k)] = string(v)
		return nil
	}))
	if len(found) != 1 {
		t.Fatalf("queue records %q, want rs-file-q only", found)
	}
	rec := found["/\x00rs-file-q"]
	var q struct {
		Name, VHost string
		Durable     bool
		AMQPArgs    []byte `json:"amqp_arguments"`
	}
	rsCheck(t, "decode", json.Unmarshal([]byte(rec), &q))
	if q.Name != "rs-file-q" || q.VHost != "/" || !q.Durable || len(q.AMQPArgs) == 0 {
		t.Errorf("record %s", rec)
	}
	var users, marker int
	rsCheck(t, "users", d.ForEach(store.KindUsers, func(k, _ []byte) error { users++; return nil }))
	rsCheck(t, "meta", d.ForEach(store.KindMeta, func(k, _ []byte) error { marker++; return nil }))
	if users != 1 || marker != 1 {
		t.Errorf("%d users, %d markers; want guest and the first-boot marker", users, marker)
	}
}
