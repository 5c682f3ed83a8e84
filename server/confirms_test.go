package server_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
	"github.com/warrenmq/warren/server"
	"github.com/warrenmq/warren/store"
)

// Tests of the publisher-confirm tracker (confirms.go) over raw frames,
// where the exact basic.ack / basic.nack frames are visible.

// confirm is one basic.ack or basic.nack the server sent.
type confirm struct {
	tag      uint64
	multiple bool
	nack     bool
}

// readConfirms reads confirms on channel 1 until publish n is covered
// (continuing from where the last call stopped). It fails the test on
// anything out of order: tags must increase, and an ack covering more
// than one publish must say multiple.
func readConfirms(c *rawConn, n uint64) []confirm {
	c.t.Helper()
	var got []confirm
	upto := c.confirmed
	defer func() { c.confirmed = upto }()
	for upto < n {
		ch, m := c.method()
		var cf confirm
		switch m := m.(type) {
		case *amqp.BasicAck:
			cf = confirm{tag: m.DeliveryTag, multiple: m.Multiple}
		case *amqp.BasicNack:
			cf = confirm{tag: m.DeliveryTag, multiple: m.Multiple, nack: true}
		default:
			c.t.Fatalf("got %s %+v while waiting for confirms", m.Name(), m)
		}
		if ch != 1 {
			c.t.Fatalf("confirm on channel %d", ch)
		}
		if cf.tag <= upto {
			c.t.Fatalf("confirm %+v after publishes up to %d were confirmed: out of order", cf, upto)
		}
		if cf.multiple != (cf.tag > upto+1) {
			c.t.Fatalf("confirm %+v after %d: multiple must be set exactly when it covers several publishes", cf, upto)
		}
		upto = cf.tag
		got = append(got, cf)
	}
	return got
}

// confirmChannel opens a raw connection with channel 1 in confirm mode
// and the queues declared (a name starting "hB-dur" durable).
func confirmChannel(t *testing.T, s *server.Server, queues ...string) *rawConn {
	t.Helper()
	c := dialRaw(t, s)
	c.open(amqp.ConnectionTuneOk{})
	for _, q := range queues {
		c.send(1, &amqp.QueueDeclare{Queue: q, Durable: len(q) >= 6 && q[:6] == "hB-dur"})
		expect[*amqp.QueueDeclareOk](c)
	}
	c.send(1, &amqp.ConfirmSelect{})
	expect[*amqp.ConfirmSelectOk](c)
	return c
}

var persistent = amqp.Properties{DeliveryMode: 2}

// TestConfirmsCoalesce: issue 12, server package tests (the confirm
// tracker: multiple-ack coalescing, ordering). A burst of publishes sent in
// one write is confirmed by fewer basic.acks than publishes, with
// multiple set, in order; persistent messages to a durable queue wait for
// the disk, and a transient publish after them is not confirmed before
// them.
func TestConfirmsCoalesce(t *testing.T) {
	s := startServer(t, server.Config{DataDir: t.TempDir()})
	for _, tc := range []struct {
		name  string
		queue func(i int) string
	}{
		{"transient", func(int) string { return "hB-tq" }},
		{"durable", func(int) string { return "hB-dur-q" }},
		{"mixed", func(i int) string {
			if i%3 == 0 {
				return "hB-tq"
			}
			return "hB-dur-q"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := confirmChannel(t, s, "hB-tq", "hB-dur-q")
			const n = 200
			var b []byte
			for i := range n {
				b = appendPublish(b, 1, &amqp.BasicPublish{RoutingKey: tc.queue(i)}, persistent, []byte("hello"))
			}
			c.write(b)
			got := readConfirms(c, n)
			for _, cf := range got {
				if cf.nack {
					t.Fatalf("nack %+v", cf)
				}
			}
			if len(got) >= n {
				t.Fatalf("%d publishes sent in one write got %d acks: not coalesced", n, len(got))
			}
		})
	}
}

// TestConfirmsBoundedCoalescing: issue 12, server package tests. A
// publisher that never pauses still hears back: no ack covers more than
// 256 publishes (maxUnflushedConfirms), even when the reader always has
// input buffered.
func TestConfirmsBoundedCoalescing(t *testing.T) {
	s := startServer(t, server.Config{})
	c := confirmChannel(t, s, "hB-tq")
	const n = 700
	var b []byte
	for range n {
		b = appendPublish(b, 1, &amqp.BasicPublish{RoutingKey: "hB-tq"}, amqp.Properties{}, []byte("x"))
	}
	c.write(b)
	var prev uint64
	for _, cf := range readConfirms(c, n) {
		if cf.tag-prev > 256 {
			t.Fatalf("ack %+v covers %d publishes, more than 256", cf, cf.tag-prev)
		}
		prev = cf.tag
	}
}

// TestConfirmsNackOrder: issue 12, server package tests (nack on failure,
// ordering). A queue refusing publishes (x-overflow reject-publish) nacks
// them; the ack of the publish before goes out first, unmerged with the
// nacks, and the confirms stay in publish order.
func TestConfirmsNackOrder(t *testing.T) {
	s := startServer(t, server.Config{})
	c := dialRaw(t, s)
	c.open(amqp.ConnectionTuneOk{})
	c.send(1, &amqp.QueueDeclare{Queue: "hB-full", Arguments: amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"}})
	expect[*amqp.QueueDeclareOk](c)
	c.send(1, &amqp.ConfirmSelect{})
	expect[*amqp.ConfirmSelectOk](c)
	var b []byte
	for range 3 {
		b = appendPublish(b, 1, &amqp.BasicPublish{RoutingKey: "hB-full"}, amqp.Properties{}, []byte("x"))
	}
	// The fourth goes nowhere (unroutable is still an ack).
	b = appendPublish(b, 1, &amqp.BasicPublish{RoutingKey: "hB-nowhere"}, amqp.Properties{}, []byte("x"))
	c.write(b)
	got := readConfirms(c, 4)
	want := []confirm{{tag: 1}, {tag: 2, nack: true}, {tag: 3, nack: true}, {tag: 4}}
	if len(got) != len(want) {
		t.Fatalf("confirms %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("confirms %+v, want %+v", got, want)
		}
	}
}

// failSyncFS is the real file system whose segment files fail Sync while
// failing is set, as a disk that stopped taking writes; with only set,
// only the segment files of that queue fail (the queue named in the meta
// file of their directory).
type failSyncFS struct {
	store.OSFS
	failing atomic.Bool
	only    atomic.Pointer[string]
}

func (f *failSyncFS) OpenFile(name string, flag int, perm os.FileMode) (store.File, error) {
	file, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &failSyncFile{File: file, fs: f, dir: filepath.Dir(name)}, nil
}

type failSyncFile struct {
	store.File
	fs  *failSyncFS
	dir string
}

func (f *failSyncFile) Sync() error {
	if f.fs.failing.Load() {
		if q := f.fs.only.Load(); q == nil || bytes.Contains(readMeta(f.dir), []byte(`"queue":"`+*q+`"`)) {
			return &fs.PathError{Op: "fdatasync", Path: "segment", Err: syscall.EIO}
		}
	}
	return f.File.Sync()
}

func readMeta(dir string) []byte {
	b, _ := os.ReadFile(filepath.Join(dir, "meta"))
	return b
}

// TestConfirmsNackOnSyncFailure: issue 12, server package tests (nack on
// failure). A persistent message whose queue log cannot be synced is
// nacked, never acked; a transient publish right after it waits behind it
// and is acked after the nack. A transaction whose messages cannot be
// synced fails its tx.commit (541), never answers commit-ok.
func TestConfirmsNackOnSyncFailure(t *testing.T) {
	ffs := &failSyncFS{}
	s := startServer(t, server.Config{DataDir: t.TempDir(), MessageStore: broker.MsgStoreOptions{FS: ffs}})

	t.Run("confirm", func(t *testing.T) {
		c := confirmChannel(t, s, "hB-tq", "hB-dur-q")
		ffs.failing.Store(true)
		defer ffs.failing.Store(false)
		b := appendPublish(nil, 1, &amqp.BasicPublish{RoutingKey: "hB-dur-q"}, persistent, []byte("lost?"))
		b = appendPublish(b, 1, &amqp.BasicPublish{RoutingKey: "hB-tq"}, persistent, []byte("fine"))
		c.write(b)
		got := readConfirms(c, 2)
		want := []confirm{{tag: 1, nack: true}, {tag: 2}}
		if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("confirms %+v, want %+v", got, want)
		}
	})

	t.Run("ack-then-nack", func(t *testing.T) {
		// Two publishes waiting for two queue logs, the second of which
		// cannot sync: the first is acked, alone, before the nack.
		c := confirmChannel(t, s, "hB-dur-ok", "hB-dur-bad")
		// Both logs exist before the fault (the meta file names them).
		c.write(appendPublish(appendPublish(nil, 1, &amqp.BasicPublish{RoutingKey: "hB-dur-ok"}, persistent, []byte("a")),
			1, &amqp.BasicPublish{RoutingKey: "hB-dur-bad"}, persistent, []byte("b")))
		readConfirms(c, 2)
		bad := "hB-dur-bad"
		ffs.only.Store(&bad)
		ffs.failing.Store(true)
		defer func() { ffs.failing.Store(false); ffs.only.Store(nil) }()
		for round := uint64(0); round < 5; round++ {
			b := appendPublish(nil, 1, &amqp.BasicPublish{RoutingKey: "hB-dur-ok"}, persistent, []byte("ok"))
			b = appendPublish(b, 1, &amqp.BasicPublish{RoutingKey: "hB-dur-bad"}, persistent, []byte("bad"))
			c.write(b)
			got := readConfirms(c, 4+2*round)
			want := []confirm{{tag: 3 + 2*round}, {tag: 4 + 2*round, nack: true}}
			if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
				t.Fatalf("round %d: confirms %+v, want %+v", round, got, want)
			}
		}
	})

	t.Run("tx", func(t *testing.T) {
		c := dialRaw(t, s)
		c.open(amqp.ConnectionTuneOk{})
		c.send(1, &amqp.QueueDeclare{Queue: "hB-dur-tx", Durable: true})
		expect[*amqp.QueueDeclareOk](c)
		c.send(1, &amqp.TxSelect{})
		expect[*amqp.TxSelectOk](c)
		c.write(appendPublish(nil, 1, &amqp.BasicPublish{RoutingKey: "hB-dur-tx"}, persistent, []byte("tx")))
		ffs.failing.Store(true)
		defer ffs.failing.Store(false)
		c.send(1, &amqp.TxCommit{})
		cl := expect[*amqp.ConnectionClose](c)
		if cl.ReplyCode != amqp.InternalError {
			t.Fatalf("tx.commit with a failing disk: connection.close %d %q, want 541", cl.ReplyCode, cl.ReplyText)
		}
	})

	t.Run("tx-commit-ok", func(t *testing.T) {
		// The same with a healthy disk: commit-ok, and the message is in
		// the queue.
		c := dialRaw(t, s)
		c.open(amqp.ConnectionTuneOk{})
		c.send(1, &amqp.QueueDeclare{Queue: "hB-dur-tx2", Durable: true})
		expect[*amqp.QueueDeclareOk](c)
		c.send(1, &amqp.TxSelect{})
		expect[*amqp.TxSelectOk](c)
		c.write(appendPublish(nil, 1, &amqp.BasicPublish{RoutingKey: "hB-dur-tx2"}, persistent, []byte("tx")))
		c.write(appendPublish(nil, 1, &amqp.BasicPublish{RoutingKey: "hB-dur-tx"}, persistent, []byte("tx")))
		c.send(1, &amqp.TxCommit{})
		expect[*amqp.TxCommitOk](c)
		c.send(1, &amqp.QueueDeclare{Queue: "hB-dur-tx2", Passive: true})
		if ok := expect[*amqp.QueueDeclareOk](c); ok.MessageCount != 1 {
			t.Fatalf("queue holds %d messages after the commit, want 1", ok.MessageCount)
		}
	})
}
