package broker

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/warrenmq/warren/amqp"
)

// Topic permissions: matching, variables, defaults, and their life with
// users, vhosts, the store and definitions.
func TestTopicPermissions(t *testing.T) {
	s := newMemStore()
	b := bootT(t, s)
	b.AddVHost("v.1")
	b.PutUser("a.b", "pw", nil)
	if b.HasTopicPermissions() {
		t.Fatal("topic permissions before any was set")
	}
	if !b.CheckTopic("a.b", "v.1", "x", Write, "anything") {
		t.Fatal("no topic permission must allow everything")
	}
	if err := b.SetTopicPermission("v.1", "nobody", TopicPermission{Exchange: "x"}); err == nil {
		t.Fatal("a topic permission for an unknown user was accepted")
	}
	if err := b.SetTopicPermission("v.1", "a.b", TopicPermission{Exchange: "x", Write: "("}); err == nil {
		t.Fatal("an invalid expression was accepted")
	}
	// {username} and {vhost} are quoted: "a.b" must not match "aXb".
	noErr(t, b.SetTopicPermission("v.1", "a.b", TopicPermission{Exchange: "x", Write: "^{username}\\.{vhost}\\.", Read: ""}))
	noErr(t, b.SetTopicPermission("v.1", "a.b", TopicPermission{Exchange: "y", Write: ".*", Read: "^r"}))
	for _, c := range []struct {
		x    string
		a    Access
		key  string
		want bool
	}{
		{"x", Write, "a.b.v.1.k", true},
		{"x", Write, "aXb.v.1.k", false},
		{"x", Write, "a.b.vX1.k", false},
		{"x", Read, "", true}, // "" matches only the empty key
		{"x", Read, "k", false},
		{"y", Read, "rk", true},
		{"y", Read, "k", false},
		{"z", Write, "k", true}, // no permission for z
	} {
		if got := b.CheckTopic("a.b", "v.1", c.x, c.a, c.key); got != c.want {
			t.Errorf("CheckTopic(%s, %v, %q) = %v, want %v", c.x, c.a, c.key, got, c.want)
		}
	}

	// A topic exchange checks every routing key of a publish: CC and BCC
	// too. Other exchange types are not checked.
	v := b.VHost("v.1")
	for _, x := range []ExchangeSpec{{Name: "x", Kind: KindTopic}, {Name: "y", Kind: KindDirect}} {
		noErr(t, v.DeclareExchange(x, false))
	}
	msg := func(key string, h amqp.Table) *Message {
		return &Message{RoutingKey: key, Props: amqp.Properties{Headers: h}}
	}
	if err := b.CheckTopicPublish("a.b", v, "x", msg("a.b.v.1.ok", nil)); err != nil {
		t.Fatal(err)
	}
	for _, h := range []amqp.Table{{"CC": []any{"a.b.v.1.ok", "nope"}}, {"BCC": []any{"nope"}}} {
		err := b.CheckTopicPublish("a.b", v, "x", msg("a.b.v.1.ok", h))
		var e *amqp.Error
		if err == nil || !errors.As(err, &e) || e.Code != amqp.AccessRefused ||
			e.Text != "ACCESS_REFUSED - access to topic 'nope' in exchange 'x' in vhost 'v.1' refused for user 'a.b'" {
			t.Fatalf("publish with %v: %v", h, err)
		}
	}
	if err := b.CheckTopicPublish("a.b", v, "y", msg("nope", nil)); err != nil {
		t.Fatalf("a direct exchange was checked: %v", err)
	}
	if err := b.CheckTopicBind("a.b", v, "x", "k"); err == nil {
		t.Fatal("bind with a key read does not match was allowed")
	}

	// Export, the store, and a second boot.
	var out bytes.Buffer
	noErr(t, b.ExportDefinitions(&out))
	var exported struct {
		TopicPermissions []map[string]string `json:"topic_permissions"`
	}
	noErr(t, json.Unmarshal(out.Bytes(), &exported))
	if want := []map[string]string{
		{"user": "a.b", "vhost": "v.1", "exchange": "x", "write": "^{username}\\.{vhost}\\.", "read": ""},
		{"user": "a.b", "vhost": "v.1", "exchange": "y", "write": ".*", "read": "^r"},
	}; !reflect.DeepEqual(exported.TopicPermissions, want) {
		t.Fatalf("exported %v, want %v", exported.TopicPermissions, want)
	}
	b2 := bootT(t, s)
	if got := b2.TopicPermissions("v.1", "a.b"); len(got) != 2 || got[0].Write != "^{username}\\.{vhost}\\." || !b2.HasTopicPermissions() ||
		b2.CheckTopic("a.b", "v.1", "x", Write, "aXb.v.1.k") {
		t.Fatalf("after a reboot: %v", got)
	}
	b3 := New(Config{})
	noErr(t, b3.ImportDefinitions(&out))
	if got := b3.TopicPermissions("v.1", "a.b"); len(got) != 2 || got[1].Read != "^r" {
		t.Fatalf("imported: %v", got)
	}

	// Clearing one exchange, then deleting the vhost and the user.
	if !b.ClearTopicPermissions("v.1", "a.b", "y") || len(b.TopicPermissions("v.1", "a.b")) != 1 {
		t.Fatal("clearing one exchange")
	}
	b.DeleteVHost("v.1")
	if b.HasTopicPermissions() || len(s.keys(DefKindTopicPermissions)) != 0 {
		t.Fatalf("after the vhost was deleted: %v, stored %v", b.HasTopicPermissions(), s.keys(DefKindTopicPermissions))
	}
	b.AddVHost("v.2")
	noErr(t, b.SetTopicPermission("v.2", "a.b", TopicPermission{Exchange: "x"}))
	b.DeleteUser("a.b")
	if b.HasTopicPermissions() || len(s.keys(DefKindTopicPermissions)) != 0 {
		t.Fatalf("after the user was deleted: %v, stored %v", b.HasTopicPermissions(), s.keys(DefKindTopicPermissions))
	}
}

// noErr fails the test on an error.
func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
