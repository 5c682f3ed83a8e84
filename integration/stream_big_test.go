package integration

// A long stream (issue 25, must-show 2): WARREN_STREAM_GB gigabytes (10
// by default; CI's long run uses 2) written over the stream protocol
// into a warren process and read back from first, with the process's
// RSS sampled every 100 ms: it stays under 100 MiB however long the
// stream, since readers read the files. Then a kill -9 and a restart:
// every confirmed message is there, and a seek by offset (the index)
// answers at once.
//
//	WARREN_LONG=1 go test ./integration -run TestStreamLong -v

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/amqp"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/message"
	"github.com/rabbitmq/rabbitmq-stream-go-client/pkg/stream"
	"github.com/warrenmq/warren/internal/testutil"
)

func TestStreamLong(t *testing.T) {
	testutil.Long(t, "a stream of gigabytes")
	gb := 10.0
	if v := os.Getenv("WARREN_STREAM_GB"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("WARREN_STREAM_GB: %v", err)
		}
		gb = f
	}
	total := int64(gb * (1 << 30))
	const body = 4096
	sa := testutil.FreePort(t)
	p := startProc(t, t.TempDir(), "--stream-addr", sa)
	rss := newRSSSampler(p.cmd.Process.Pid)
	defer close(rss.stop)
	rss.setPhase("write")
	newEnv := func() *stream.Environment {
		env, err := stream.NewEnvironment(stream.NewEnvironmentOptions().SetUri("rabbitmq-stream://guest:guest@" + sa + "/%2f").
			SetWriteBuffer(1 << 20).SetReadBuffer(1 << 20))
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	env := newEnv()
	if err := env.DeclareStream("big", nil); err != nil {
		t.Fatal(err)
	}
	// write: 2 producers, batches of 100, at most 20,000 in flight each
	start := time.Now()
	var confirmed atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		prod, err := env.NewProducer("big", stream.NewProducerOptions().SetQueueSize(50000))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine atomic.Int64
			ch := prod.NotifyPublishConfirmation()
			go func() {
				for cs := range ch {
					for _, c := range cs {
						if !c.IsConfirmed() {
							t.Errorf("not confirmed: %v", c.GetError())
						}
					}
					mine.Add(int64(len(cs)))
					confirmed.Add(int64(len(cs)))
				}
			}()
			msgs := make([]message.StreamMessage, 100)
			for i := range msgs {
				msgs[i] = amqp.NewMessage(make([]byte, body))
			}
			sent := int64(0)
			for confirmed.Load()*body < total {
				for sent-mine.Load() > 20000 {
					time.Sleep(100 * time.Microsecond)
				}
				if err := prod.BatchSend(msgs); err != nil {
					t.Error(err)
					return
				}
				sent += int64(len(msgs))
			}
			for deadline := time.Now().Add(time.Minute); mine.Load() < sent && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			prod.Close()
		}()
	}
	wg.Wait()
	n := confirmed.Load()
	wrote := time.Since(start)
	t.Logf("wrote %d messages of %d B (%.1f GiB) in %s (%.0f MiB/s)", n, body, float64(n*body)/(1<<30), wrote.Round(time.Second),
		float64(n*body)/(1<<20)/wrote.Seconds())
	// read from first
	rss.setPhase("read")
	start = time.Now()
	var read, bad atomic.Int64
	done := make(chan struct{})
	c, err := env.NewConsumer("big", func(cc stream.ConsumerContext, m *amqp.Message) {
		if cc.Consumer.GetOffset() != read.Load() {
			bad.Add(1)
		}
		if read.Add(1) == n {
			close(done)
		}
	}, stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.First()).SetInitialCredits(10))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Minute):
		t.Fatalf("read %d of %d", read.Load(), n)
	}
	c.Close()
	t.Logf("read %d from first in %s; %d out of order", read.Load(), time.Since(start).Round(time.Second), bad.Load())
	if bad.Load() != 0 {
		t.Fatalf("%d messages not at the offset expected", bad.Load())
	}
	rss.setPhase("idle")
	rss.mu.Lock()
	w, r := rss.peaks["write"], rss.peaks["read"]
	rss.mu.Unlock()
	t.Logf("RSS peak: writing %.1f MiB, reading %.1f MiB", float64(w)/1024, float64(r)/1024)
	if w > 100*1024 || r > 100*1024 {
		t.Errorf("RSS over 100 MiB: writing %.1f MiB, reading %.1f MiB", float64(w)/1024, float64(r)/1024)
	}
	env.Close()

	// kill -9, restart: every confirmed message, and seeks by offset
	p.Kill()
	start = time.Now()
	p.Start()
	t.Logf("restart after kill -9: %s", time.Since(start).Round(time.Millisecond))
	env = newEnv()
	defer env.Close()
	for _, at := range []int64{n - 1, n / 2, 0} {
		got := make(chan int64, 1)
		t0 := time.Now()
		c, err := env.NewConsumer("big", func(cc stream.ConsumerContext, m *amqp.Message) {
			select {
			case got <- cc.Consumer.GetOffset():
			default:
			}
		}, stream.NewConsumerOptions().SetOffset(stream.OffsetSpecification{}.Offset(at)))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case off := <-got:
			if off != at {
				t.Errorf("after the restart, offset %d read as %d", at, off)
			}
			t.Logf("offset %d after the restart: first message in %s", at, time.Since(t0).Round(time.Millisecond))
		case <-time.After(30 * time.Second):
			t.Errorf("offset %d not readable after the restart", at)
		}
		c.Close()
	}
	stats, err := env.StreamStats("big")
	if err != nil {
		t.Fatal(err)
	}
	// the last chunk holds the last confirmed message (read above)
	last, _ := stats.LastOffset()
	if last < 0 || last > n-1 {
		t.Errorf("after kill -9: last chunk %d, %d confirmed", last, n)
	}
	fmt.Fprintln(os.Stderr) // the client logs without a newline at close
}
