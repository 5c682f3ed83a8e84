package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// An empty property set is [] both ways, as RabbitMQ sends it; a set is
// an object.
func TestPropertiesJSON(t *testing.T) {
	b, _ := json.Marshal(Message{})
	if !strings.Contains(string(b), `"properties":[]`) {
		t.Fatalf("no properties: %s", b)
	}
	var m Message
	if err := json.Unmarshal([]byte(`{"properties":[]}`), &m); err != nil || m.Properties != nil {
		t.Fatalf("reading []: %v %v", err, m.Properties)
	}
	if err := json.Unmarshal([]byte(`{"properties":{"delivery_mode":2}}`), &m); err != nil || m.Properties["delivery_mode"] != 2.0 {
		t.Fatalf("reading an object: %v %v", err, m.Properties)
	}
	if err := json.Unmarshal([]byte(`{"properties":"x"}`), &m); err == nil {
		t.Fatal("reading a string: no error")
	}
}

// A queue whose node is down has its record's fields only; a quorum
// queue's group is there, with null for no leader.
func TestQueueGroups(t *testing.T) {
	b, _ := json.Marshal(Queue{Name: "q", State: "down"})
	s := string(b)
	for _, absent := range []string{`"messages"`, `"consumers"`, `"leader"`, `"members"`} {
		if strings.Contains(s, absent) {
			t.Errorf("down classic queue has %s: %s", absent, s)
		}
	}
	b, _ = json.Marshal(Queue{Name: "q", QueueLive: &QueueLive{}, QueueQuorum: &QueueQuorum{Members: []string{"a"}}})
	s = string(b)
	for _, present := range []string{`"messages":0`, `"leader":null`, `"members":["a"]`, `"policy":null`, `"single_active_consumer_ctag":null`} {
		if !strings.Contains(s, present) {
			t.Errorf("quorum queue lacks %s: %s", present, s)
		}
	}
	var back Queue
	if err := json.Unmarshal(b, &back); err != nil || back.QueueQuorum == nil || back.QueueLive == nil || back.Members[0] != "a" {
		t.Fatalf("round trip: %v %+v", err, back)
	}
}
