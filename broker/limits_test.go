package broker

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/warrenmq/warren/amqp"
)

// Vhost and user limits: max-queues refuses new queues only, limits
// survive a reboot, and definitions carry them as RabbitMQ's do (vhost
// limits as a "vhost-limits" parameter, user limits on the user).
func TestLimits(t *testing.T) {
	s := newMemStore()
	b := bootT(t, s)
	b.AddVHost("lv")
	b.PutUser("lu", "pw", nil)
	if err := b.SetVHostLimit("lv", "max-nonsense", 1); err == nil {
		t.Fatal("an unknown vhost limit was accepted")
	}
	if err := b.SetVHostLimit("nope", LimitMaxQueues, 1); !errors.Is(err, ErrNoVHost) {
		t.Fatalf("a limit of an unknown vhost: %v", err)
	}
	if err := b.SetUserLimit("lu", LimitMaxQueues, 1); err == nil {
		t.Fatal("max-queues was accepted as a user limit")
	}
	noErr(t, b.SetVHostLimit("lv", LimitMaxQueues, 2))
	noErr(t, b.SetVHostLimit("lv", LimitMaxConnections, 7))
	noErr(t, b.SetUserLimit("lu", LimitMaxChannels, 3))
	// Setting the vhost's metadata keeps its limits.
	b.SetVHostMeta("lv", VHostMeta{Description: "d"})

	v := b.VHost("lv")
	declare := func(name string) error {
		_, _, _, err := v.DeclareQueue(QueueSpec{Name: name}, false)
		return err
	}
	noErr(t, declare("q1"))
	noErr(t, declare("q2"))
	noErr(t, declare("q1")) // redeclaring is not a new queue
	var e *amqp.Error
	if err := declare("q3"); !errors.As(err, &e) || e.Code != amqp.PreconditionFailed ||
		e.Text != "PRECONDITION_FAILED - cannot declare queue 'q3': queue limit in vhost 'lv' (2) is reached" {
		t.Fatalf("a third queue: %v", err)
	}
	if v.MaxConnections() != 7 {
		t.Fatalf("MaxConnections = %d", v.MaxConnections())
	}

	b2 := bootT(t, s)
	vl, _ := b2.VHostLimits("lv")
	ul, _ := b2.UserLimits("lu")
	if !reflect.DeepEqual(vl, map[string]int64{"max-queues": 2, "max-connections": 7}) || !reflect.DeepEqual(ul, map[string]int64{"max-channels": 3}) ||
		b2.VHost("lv").MaxConnections() != 7 || b2.VHost("lv").Meta().Description != "d" {
		t.Fatalf("after a reboot: vhost %v, user %v", vl, ul)
	}

	var out bytes.Buffer
	noErr(t, b.ExportDefinitions(&out))
	var d struct {
		Users      []map[string]any `json:"users"`
		Parameters []map[string]any `json:"parameters"`
	}
	noErr(t, json.Unmarshal(out.Bytes(), &d))
	var gotUser, gotParam any
	for _, u := range d.Users {
		if u["name"] == "lu" {
			gotUser = u["limits"]
		}
	}
	for _, p := range d.Parameters {
		if p["component"] == "vhost-limits" {
			gotParam = p
		}
	}
	if !reflect.DeepEqual(gotUser, map[string]any{"max-channels": float64(3)}) ||
		!reflect.DeepEqual(gotParam, map[string]any{"vhost": "lv", "component": "vhost-limits", "name": "limits",
			"value": map[string]any{"max-queues": float64(2), "max-connections": float64(7)}}) {
		t.Fatalf("export: user limits %v, parameter %v", gotUser, gotParam)
	}
	b3 := New(Config{})
	noErr(t, b3.ImportDefinitions(strings.NewReader(out.String())))
	vl, _ = b3.VHostLimits("lv")
	ul, _ = b3.UserLimits("lu")
	if len(vl) != 2 || ul[LimitMaxChannels] != 3 {
		t.Fatalf("imported: vhost %v, user %v", vl, ul)
	}

	noErr(t, b.ClearVHostLimit("lv", LimitMaxQueues))
	noErr(t, declare("q3"))
	noErr(t, b.ClearUserLimit("lu", LimitMaxChannels))
	if ul, _ := b.UserLimits("lu"); len(ul) != 0 {
		t.Fatalf("user limits after clearing: %v", ul)
	}
}
