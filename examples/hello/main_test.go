package main

import (
	"bytes"
	"testing"

	"github.com/warrenmq/warren/warrentest"
)

func TestHello(t *testing.T) {
	b := warrentest.Start(t)
	var out bytes.Buffer
	if err := run(b.URL(), &out); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "hello, warren\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
