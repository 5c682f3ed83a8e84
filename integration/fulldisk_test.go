package integration

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testutil"
)

// TestRealFullDiskRecovers: issue 11 item 10 on a real file system that
// fills up. The warren binary keeps its data on a 16 MiB tmpfs; a ballast
// file fills it; persistent publishes to a durable queue are nacked; the
// ballast is removed; publishes to the same queue are confirmed again
// without a restart; after a restart every confirmed message is there.
// It needs root (to mount the tmpfs) and skips otherwise.
func TestRealFullDiskRecovers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the warren binary")
	}
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("needs root on Linux to mount a small tmpfs (the fault-injecting TestQueueLogRecoversAfterENOSPC runs everywhere)")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "hA-fulldisk", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	dir := filepath.Join(mnt, "data")
	p := startProc(t, dir)
	const q = "hA-fulldisk"
	c, ch := rsDial(t, p.URL())
	_, err := ch.QueueDeclare(q, true, false, false, false, nil)
	rsCheck(t, "declare", err)
	rsCheck(t, "confirm.select", ch.Confirm(false))
	body := bytes.Repeat([]byte("x"), 2048)
	confirmed := map[string]bool{}
	pub := func(id string) bool {
		t.Helper()
		dc, err := ch.PublishWithDeferredConfirm("", q, false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, MessageId: id, Body: body})
		rsCheck(t, "publish", err)
		ok, err := dc.WaitContext(t.Context())
		rsCheck(t, "confirm", err)
		if ok {
			confirmed[id] = true
		}
		return ok
	}
	for i := range 100 {
		if !pub(fmt.Sprintf("before-%d", i)) {
			t.Fatalf("publish %d nacked with space left", i)
		}
	}
	// Fill the file system.
	ballast, err := os.Create(filepath.Join(mnt, "ballast"))
	rsCheck(t, "ballast", err)
	chunk := make([]byte, 64<<10)
	for {
		if _, err := ballast.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			break
		}
	}
	// Fill what a smaller write still finds.
	for {
		if _, err := ballast.Write(chunk[:512]); err != nil {
			break
		}
	}
	nacked := 0
	for i := range 200 {
		if !pub(fmt.Sprintf("full-%d", i)) {
			nacked++
		}
	}
	if nacked == 0 {
		t.Fatal("no publish nacked on a full disk")
	}
	ballast.Close()
	rsCheck(t, "remove ballast", os.Remove(filepath.Join(mnt, "ballast")))
	probe := 0
	if !testutil.Until(10*time.Second, func() bool {
		probe++
		return pub(fmt.Sprintf("probe-%d", probe-1))
	}) {
		t.Fatalf("publishes still nacked 10 s after the disk has space again\n%s", p.Output())
	}
	for i := range 100 {
		if !pub(fmt.Sprintf("after-%d", i)) {
			t.Fatalf("publish after-%d nacked once the disk has space again", i)
		}
	}
	c.Close()
	p.Stop()
	p.Start()
	_, ch = rsDial(t, p.URL())
	got := map[string]int{}
	for {
		d, ok, err := ch.Get(q, true)
		rsCheck(t, "get", err)
		if !ok {
			break
		}
		got[d.MessageId]++
	}
	for id := range confirmed {
		if got[id] != 1 {
			t.Errorf("confirmed message %s delivered %d times after the restart", id, got[id])
		}
	}
	t.Logf("%d confirmed, %d nacked on the full disk; %d messages after the restart", len(confirmed), nacked, len(got))
	p.Stop()
}
