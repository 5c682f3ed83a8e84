package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestDamagedRecordLosesOnlyItself: issue 11 item 8, "one damaged record
// throws away its whole 8 MiB segment". A real broker stores 3,000
// confirmed persistent messages of 4 KiB (two segment files: a sealed one
// and the active one); it is stopped, four bytes are flipped in the body of
// one message in each segment (length intact, checksum wrong), and it is
// restarted. Every other message must come back, exactly once and intact,
// the two damaged ones must not be delivered, and the broker's log must say
// what it skipped.
func TestDamagedRecordLosesOnlyItself(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the warren binary")
	}
	const (
		q    = "hA-damaged"
		n    = 3000
		size = 4 << 10
	)
	p := startProc(t, t.TempDir())
	c, ch := rsDial(t, p.URL())
	_, err := ch.QueueDeclare(q, true, false, false, false, nil)
	rsCheck(t, "declare", err)
	rsCheck(t, "confirm.select", ch.Confirm(false))
	body := func(i int) []byte {
		b := fmt.Appendf(nil, "hA-msg-%06d|", i)
		return append(b, bytes.Repeat([]byte{byte('a' + i%26)}, size-len(b))...)
	}
	dcs := make([]*amqp.DeferredConfirmation, 0, n)
	for i := range n {
		dc, err := ch.PublishWithDeferredConfirm("", q, false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body(i)})
		rsCheck(t, "publish", err)
		dcs = append(dcs, dc)
	}
	for i, dc := range dcs {
		if ok, err := dc.WaitContext(t.Context()); !ok || err != nil {
			t.Fatalf("message %d not confirmed (ack %v): %v", i, ok, err)
		}
	}
	c.Close()
	p.Stop()

	// The queue's segments: flip four bytes in the body of one message
	// in the middle of each.
	segs, _ := filepath.Glob(filepath.Join(p.DataDir, "msgs", "*", "*.seg"))
	slices.Sort(segs)
	if len(segs) < 2 {
		t.Fatalf("want at least two segment files (a sealed one and the active one), got %q", segs)
	}
	damaged := map[int]bool{}
	for _, seg := range segs[:2] {
		b, err := os.ReadFile(seg)
		rsCheck(t, "read segment", err)
		// A message about a third into this segment.
		var victim int = -1
		for i := range n {
			if at := bytes.Index(b, fmt.Appendf(nil, "hA-msg-%06d|", i)); at > len(b)/3 {
				victim = i
				for k := range 4 {
					b[at+100+k] ^= 0x5A
				}
				break
			}
		}
		if victim < 0 {
			t.Fatalf("no message found in %s", seg)
		}
		damaged[victim] = true
		rsCheck(t, "write segment", os.WriteFile(seg, b, 0o644))
		t.Logf("flipped 4 bytes in the body of message %d in %s", victim, filepath.Base(seg))
	}

	p.Start()
	c, ch = rsDial(t, p.URL())
	defer c.Close()
	seen := map[int]int{}
	for {
		d, ok, err := ch.Get(q, true)
		rsCheck(t, "get", err)
		if !ok {
			break
		}
		var i int
		if _, err := fmt.Sscanf(string(d.Body), "hA-msg-%06d|", &i); err != nil || !bytes.Equal(d.Body, body(i)) {
			t.Fatalf("delivered a body that was not published (%d bytes, starts %q)", len(d.Body), d.Body[:min(len(d.Body), 20)])
		}
		seen[i]++
	}
	var missing, dups []int
	for i := range n {
		switch {
		case damaged[i] && seen[i] > 0:
			t.Errorf("damaged message %d delivered", i)
		case !damaged[i] && seen[i] == 0:
			missing = append(missing, i)
		case seen[i] > 1:
			dups = append(dups, i)
		}
	}
	if len(missing) > 0 || len(dups) > 0 {
		t.Errorf("%d confirmed messages with intact records lost (first %v), %d delivered twice", len(missing), missing[:min(len(missing), 10)], len(dups))
	}
	out := p.Output()
	if got := strings.Count(out, "skipping a corrupt record"); got != 2 {
		t.Errorf("broker log reports %d skipped records, want 2:\n%s", got, out)
	}
	p.Stop()
}
