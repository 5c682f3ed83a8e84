package integration

import (
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testutil"
	"github.com/warrenmq/warren/server"
	"github.com/warrenmq/warren/store"
	"github.com/warrenmq/warren/warrentest"
)

// fullDiskFS is the real file system with a switch that makes it full:
// writes to segment files write half their bytes and fail with ENOSPC (as
// a filling disk does), or fsyncs fail with ENOSPC, while it is on.
type fullDiskFS struct {
	store.OSFS
	writes, syncs atomic.Bool
}

func (f *fullDiskFS) OpenFile(name string, flag int, perm os.FileMode) (store.File, error) {
	file, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &fullDiskFile{File: file, fs: f}, nil
}

type fullDiskFile struct {
	store.File
	fs *fullDiskFS
}

func (f *fullDiskFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fs.writes.Load() {
		n, _ := f.File.WriteAt(p[:len(p)/2], off)
		return n, &fs.PathError{Op: "write", Path: "segment", Err: syscall.ENOSPC}
	}
	return f.File.WriteAt(p, off)
}

func (f *fullDiskFile) Sync() error {
	if f.fs.syncs.Load() {
		return &fs.PathError{Op: "fdatasync", Path: "segment", Err: syscall.ENOSPC}
	}
	return f.File.Sync()
}

// TestQueueLogRecoversAfterENOSPC: issue 11 item 10, "after one no space
// left on device a queue's log stays failed until restart". Through
// amqp091-go with publisher confirms, on a broker whose message store
// writes through a file system that can be made full (writes failing with
// ENOSPC, or fsyncs failing with ENOSPC):
//   - confirmed messages go in; messages are consumed and acked;
//   - the disk fills: persistent publishes to the durable queue are nacked
//     (never confirmed), and consumers keep acking meanwhile;
//   - space returns: publishes to the same queue are confirmed again,
//     without a restart;
//   - after a restart every confirmed message that was not acked is back,
//     once; none that was acked (also during the fault) comes back; a
//     nacked message may come back (a nack promises nothing) but only once.
func TestQueueLogRecoversAfterENOSPC(t *testing.T) {
	for _, mode := range []string{"write", "fsync"} {
		t.Run(mode, func(t *testing.T) {
			ffs := &fullDiskFS{}
			full := &ffs.writes
			if mode == "fsync" {
				full = &ffs.syncs
			}
			w := warrentest.Start(t, warrentest.WithConfig(func(c *server.Config) {
				c.MessageStore.FS = ffs
				c.MessageStore.RetryInterval = 5 * time.Millisecond
			}))
			const q = "hA-enospc"
			c, err := amqp.Dial(w.URL())
			rsCheck(t, "dial", err)
			defer c.Close()
			ch, err := c.Channel()
			rsCheck(t, "channel", err)
			_, err = ch.QueueDeclare(q, true, false, false, false, nil)
			rsCheck(t, "declare", err)
			rsCheck(t, "confirm.select", ch.Confirm(false))
			cch, err := c.Channel()
			rsCheck(t, "channel", err)

			var mu sync.Mutex
			confirmed, nacked := map[string]bool{}, map[string]bool{}
			pub := func(body string) bool {
				t.Helper()
				dc, err := ch.PublishWithDeferredConfirm("", q, false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(body)})
				rsCheck(t, "publish "+body, err)
				ok, err := dc.WaitContext(t.Context())
				rsCheck(t, "confirm "+body, err)
				mu.Lock()
				defer mu.Unlock()
				if ok {
					confirmed[body] = true
				} else {
					nacked[body] = true
				}
				return ok
			}
			acked := map[string]bool{}
			ackSome := func(n int) {
				t.Helper()
				for range n {
					d, ok, err := cch.Get(q, false)
					rsCheck(t, "get", err)
					if !ok {
						t.Fatal("queue empty")
					}
					rsCheck(t, "ack", d.Ack(false))
					acked[string(d.Body)] = true
				}
				// A synchronous method after the acks: they are processed.
				_, err := cch.QueueDeclarePassive(q, true, false, false, false, nil)
				rsCheck(t, "fence", err)
			}

			for i := range 50 {
				if !pub(fmt.Sprintf("before-%03d", i)) {
					t.Fatalf("publish %d nacked on a healthy disk", i)
				}
			}
			ackSome(10)

			full.Store(true)
			for i := range 20 {
				if pub(fmt.Sprintf("full-%03d", i)) {
					t.Errorf("publish %d confirmed while the disk is full", i)
				}
			}
			ackSome(10) // acks while the log refuses writes

			full.Store(false)
			// Space is back. No restart: the queue's log takes writes again.
			probe := 0
			if !testutil.Until(10*time.Second, func() bool {
				probe++
				return pub(fmt.Sprintf("probe-%03d", probe-1))
			}) {
				t.Fatalf("persistent publishes still nacked %v after space returned", 10*time.Second)
			}
			for i := range 50 {
				if !pub(fmt.Sprintf("after-%03d", i)) {
					t.Fatalf("publish after-%03d nacked once space returned", i)
				}
			}
			ackSome(5)
			c.Close()

			w.Restart()
			_, rch := rsDial(t, w.URL())
			got := map[string]int{}
			for {
				d, ok, err := rch.Get(q, true)
				rsCheck(t, "get after restart", err)
				if !ok {
					break
				}
				got[string(d.Body)]++
			}
			var lost, back, dup, unknown []string
			for b := range confirmed {
				if !acked[b] && got[b] == 0 {
					lost = append(lost, b)
				}
			}
			for b, n := range got {
				switch {
				case acked[b]:
					back = append(back, b)
				case n > 1:
					dup = append(dup, b)
				case !confirmed[b] && !nacked[b]:
					unknown = append(unknown, b)
				}
			}
			nackedBack := 0
			for b := range nacked {
				if got[b] > 0 {
					nackedBack++
				}
			}
			t.Logf("%d confirmed, %d nacked (%d of them back after the restart), %d acked", len(confirmed), len(nacked), nackedBack, len(acked))
			if len(lost)+len(back)+len(dup)+len(unknown) > 0 {
				t.Errorf("after the restart: confirmed and lost %q; acked and back %q; duplicated %q; never published %q",
					lost, back, dup, unknown)
			}
			if len(nacked) == 0 {
				t.Error("no publish was nacked during the fault")
			}
		})
	}
}
