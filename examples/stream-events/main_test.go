package main

import (
	"bytes"
	"testing"

	"github.com/warrenmq/warren/warrentest"
)

func TestStreamEvents(t *testing.T) {
	b := warrentest.Start(t)
	var out bytes.Buffer
	if err := run(b.StreamURI(), b.URL(), "events", &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want := "appended 5 events, last publishing id 5\n" +
		"auditor read [0:invoice-0 1:invoice-1 2:invoice-2]\n" +
		"auditor resumed: [3:invoice-3 4:invoice-4]\n" +
		"AMQP 0-9-1 replay from first: [0:invoice-0 1:invoice-1 2:invoice-2 3:invoice-3 4:invoice-4]\n"
	if got := out.String(); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}
