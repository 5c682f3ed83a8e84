package integration

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testutil"
)

// BenchmarkDeepQueue is the "deep queue" measurement: N persistent
// 16-byte messages are published with confirms into one durable queue of
// a warren subprocess (built from ./cmd/warren, see proc_test.go), the
// broker is restarted on its data directory, and the queue is drained.
// It runs the whole scenario once whatever b.N is, so run it with
// -benchtime 1x (and no test timeout for large N):
//
//	WARREN_DEEP_MESSAGES=10000000 go test -run '^$' -bench DeepQueue -benchtime 1x -timeout 0 ./integration
//
// Environment:
//
//   - WARREN_DEEP_MESSAGES: N (default 1,000,000; underscores allowed);
//   - WARREN_DEEP_KILL=1: restart after SIGKILL instead of SIGTERM;
//   - WARREN_DEEP_DIR: parent directory of the data directory (default the
//     test's temporary directory), to measure another disk;
//   - WARREN_DEEP_FLAGS: extra warren flags, space-separated.
//
// Phases and what they report (b.ReportMetric; a readable summary is
// logged too):
//
//   - idle: the fresh broker for 500 ms (idle-rss-MiB);
//   - publish: deepPublishers connections, each in confirm mode with a
//     window of deepWindow unconfirmed publishes (publish-msgs/s,
//     publish-peak-rss-MiB, and after-publish-rss-MiB sampled at its end;
//     rss-B/msg is (after-publish - idle) / N); then the bytes under the
//     data directory (disk-MiB) and under msgs/ (msgs-disk-MiB,
//     disk-B/msg);
//   - restart: SIGTERM (or SIGKILL) and wait (stop-s), then start and poll
//     until a passive declare reports N messages (restart-s);
//     restart-peak-rss-MiB includes the new process's VmHWM at that point,
//     so it covers recovery; after-restart-rss-MiB is sampled then;
//   - drain: deepConsumers consumers (prefetch deepPrefetch, acking with
//     multiple every deepAckEvery) take all N (drain-msgs/s,
//     drain-peak-rss-MiB); every body must be 16 bytes and each message
//     must arrive exactly once; afterwards the queue must be empty
//     (disk-after-drain-MiB is measured then).
//
// The broker's VmRSS is sampled from /proc/<pid>/status every 100 ms
// through all phases (peak-rss-MiB is the overall peak, VmHWM included);
// hwm1-MiB and hwm2-MiB are VmHWM at the end of each process's life. No
// targets are asserted: this measures.
func BenchmarkDeepQueue(b *testing.B) {
	const (
		deepPublishers = 4
		deepWindow     = 2000
		deepConsumers  = 2
		deepPrefetch   = 2000
		deepAckEvery   = 500
		queue          = "deep-bench"
	)
	n := 1_000_000
	if s := os.Getenv("WARREN_DEEP_MESSAGES"); s != "" {
		v, err := strconv.ParseInt(s, 0, 64)
		if err != nil || v <= 0 {
			b.Fatalf("WARREN_DEEP_MESSAGES=%q: want a positive integer", s)
		}
		n = int(v)
	}
	kill := os.Getenv("WARREN_DEEP_KILL") == "1"
	if b.N != 1 {
		b.Logf("b.N = %d: the scenario runs once whatever b.N is (use -benchtime 1x)", b.N)
	}

	dataDir := b.TempDir()
	if parent := os.Getenv("WARREN_DEEP_DIR"); parent != "" {
		d, err := os.MkdirTemp(parent, "warren-deep-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(d) })
		dataDir = d
	}
	p := startProc(b, dataDir, strings.Fields(os.Getenv("WARREN_DEEP_FLAGS"))...)
	brokerFailed := func(format string, args ...any) {
		b.Helper()
		msg := fmt.Sprintf(format, args...)
		if exited, err := p.Exited(); exited {
			msg += fmt.Sprintf("\nwarren exited: %v", err)
		}
		b.Fatalf("%s\nwarren output (tail):\n%s", msg, deepTail(p.Output(), 16<<10))
	}

	rss := newRSSSampler(p.cmd.Process.Pid)
	defer rss.close()
	b.ResetTimer()

	// Idle.
	rss.setPhase("idle")
	time.Sleep(500 * time.Millisecond)
	idleKB := rss.now()

	// Publish.
	rss.setPhase("publish")
	_, ch := benchDial(b, p.URL())
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		brokerFailed("declare: %v", err)
	}
	conns := make([]*amqp.Connection, deepPublishers)
	chans := make([]*amqp.Channel, deepPublishers)
	for i := range conns {
		conns[i], chans[i] = benchDial(b, p.URL())
	}
	errs := make(chan error, deepPublishers)
	var wg sync.WaitGroup
	t0 := time.Now()
	next := 0
	for i := range chans {
		count := n / deepPublishers
		if i < n%deepPublishers {
			count++
		}
		first := next
		next += count
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := make([]byte, 16)
			msg := func(j int) amqp.Publishing {
				deepBody(body, uint64(first+j))
				return amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body}
			}
			if err := publishConfirmed(chans[i], queue, count, deepWindow, msg); err != nil {
				errs <- fmt.Errorf("publisher %d (messages %d..%d): %w", i, first, first+count-1, err)
			}
		}()
	}
	wg.Wait()
	publishSecs := time.Since(t0).Seconds()
	close(errs)
	for err := range errs {
		brokerFailed("publishing %d messages: %v", n, err)
	}
	for _, c := range conns {
		c.Close()
	}
	afterPublishKB := rss.now()
	if q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil); err != nil {
		brokerFailed("passive declare after publishing: %v", err)
	} else if q.Messages != n {
		brokerFailed("after publishing %d confirmed messages the queue has %d", n, q.Messages)
	}
	diskAll, diskMsgs := deepDiskUsage(b, dataDir), deepDiskUsage(b, filepath.Join(dataDir, "msgs"))

	// Restart.
	hwm1 := procStatusKB(p.cmd.Process.Pid, "VmHWM")
	rss.setPhase("stop") // the old process while it shuts down: overall peak only
	t0 = time.Now()
	if kill {
		p.Kill()
	} else {
		p.Stop()
	}
	stopSecs := time.Since(t0).Seconds()
	rss.setPID(0)
	rss.setPhase("restart")
	t0 = time.Now()
	p.Start()
	rss.setPID(p.cmd.Process.Pid)
	if err := deepWaitCount(p, queue, n, 30*time.Minute); err != nil {
		brokerFailed("restart: %v", err)
	}
	restartSecs := time.Since(t0).Seconds()
	rss.observe(procStatusKB(p.cmd.Process.Pid, "VmHWM")) // recovery's peak, however short
	afterRestartKB := rss.now()

	// Drain.
	rss.setPhase("drain")
	seen := make([]atomic.Uint64, (n+63)/64)
	var total atomic.Int64
	done := make(chan struct{})
	var doneOnce sync.Once
	var doneAt time.Time
	derrs := make(chan error, 2*deepConsumers)
	fail := func(err error) {
		select {
		case derrs <- err:
		default:
		}
	}
	dconns := make([]*amqp.Connection, deepConsumers)
	t0 = time.Now()
	for k := range dconns {
		c, dch := benchDial(b, p.URL())
		dconns[k] = c
		if err := dch.Qos(deepPrefetch, 0, false); err != nil {
			brokerFailed("qos: %v", err)
		}
		tag := fmt.Sprintf("deep-drain-%d", k)
		msgs, err := dch.Consume(queue, tag, false, false, false, false, nil)
		if err != nil {
			brokerFailed("consume: %v", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last, acked uint64
			mine := 0
			handle := func(d amqp.Delivery) bool {
				if err := deepCheck(d.Body, n, seen); err != nil {
					fail(fmt.Errorf("consumer %d: %w", k, err))
					return false
				}
				last = d.DeliveryTag
				mine++
				if mine%deepAckEvery == 0 {
					if err := dch.Ack(last, true); err != nil {
						fail(fmt.Errorf("consumer %d: ack: %w", k, err))
						return false
					}
					acked = last
				}
				if total.Add(1) == int64(n) {
					doneOnce.Do(func() { doneAt = time.Now(); close(done) })
				}
				return true
			}
		loop:
			for {
				select {
				case d, ok := <-msgs:
					if !ok {
						fail(fmt.Errorf("consumer %d: deliveries ended after %d messages", k, mine))
						return
					}
					if !handle(d) {
						return
					}
				case <-done:
					break loop
				}
			}
			// Take whatever is still on its way: more than N in all is a
			// failure (and a duplicate is caught by deepCheck).
			if err := dch.Cancel(tag, false); err != nil {
				fail(fmt.Errorf("consumer %d: cancel: %w", k, err))
				return
			}
			for d := range msgs {
				if !handle(d) {
					return
				}
			}
			if last != acked {
				if err := dch.Ack(last, true); err != nil {
					fail(fmt.Errorf("consumer %d: ack: %w", k, err))
				}
			}
		}()
	}
	// Wait for N deliveries, failing on an error or a minute without
	// progress.
	progress, lastMove := int64(0), time.Now()
	tick := time.NewTicker(time.Second)
wait:
	for {
		select {
		case <-done:
			break wait
		case err := <-derrs:
			brokerFailed("drain after %d of %d messages: %v", total.Load(), n, err)
		case <-tick.C:
			if got := total.Load(); got != progress {
				progress, lastMove = got, time.Now()
			} else if time.Since(lastMove) > time.Minute {
				brokerFailed("drain stalled at %d of %d messages", got, n)
			}
		}
	}
	tick.Stop()
	drainSecs := doneAt.Sub(t0).Seconds()
	wg.Wait()
	select {
	case err := <-derrs:
		brokerFailed("drain: %v", err)
	default:
	}
	if got := total.Load(); got != int64(n) {
		brokerFailed("drain: %d deliveries for %d messages", got, n)
	}
	for _, c := range dconns {
		c.Close() // after the last acks: anything unacked would be requeued
	}
	_, ch = benchDial(b, p.URL())
	if q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil); err != nil {
		brokerFailed("passive declare after drain: %v", err)
	} else if q.Messages != 0 {
		brokerFailed("queue has %d messages after all %d were consumed and acked", q.Messages, n)
	}
	hwm2 := procStatusKB(p.cmd.Process.Pid, "VmHWM")
	rss.observe(hwm2)
	diskAfterDrain := deepDiskUsage(b, dataDir)
	// Acked segments are deleted in the background: wait (at most 10 s)
	// until the store settles, and report how long that took.
	reclaimStart := time.Now()
	for settled := diskAfterDrain; time.Since(reclaimStart) < 10*time.Second; {
		time.Sleep(100 * time.Millisecond)
		now := deepDiskUsage(b, dataDir)
		if now == settled && now < 16<<20 {
			break
		}
		settled = now
	}
	reclaimSecs := time.Since(reclaimStart).Seconds()
	diskSettled := deepDiskUsage(b, dataDir)
	b.StopTimer()
	p.Stop()

	const mib = 1 << 20
	kib := func(kb int64) float64 { return float64(kb) / 1024 }
	restartVerb := "SIGTERM"
	if kill {
		restartVerb = "SIGKILL"
	}
	b.ReportMetric(float64(n)/publishSecs, "publish-msgs/s")
	b.ReportMetric(float64(n)/drainSecs, "drain-msgs/s")
	b.ReportMetric(stopSecs, "stop-s")
	b.ReportMetric(restartSecs, "restart-s")
	b.ReportMetric(float64(diskAll)/mib, "disk-MiB")
	b.ReportMetric(float64(diskMsgs)/mib, "msgs-disk-MiB")
	b.ReportMetric(float64(diskMsgs)/float64(n), "disk-B/msg")
	b.ReportMetric(float64(diskAfterDrain)/mib, "disk-after-drain-MiB")
	b.ReportMetric(float64(diskSettled)/mib, "disk-settled-MiB")
	b.ReportMetric(reclaimSecs, "reclaim-s")
	b.ReportMetric(kib(idleKB), "idle-rss-MiB")
	b.ReportMetric(kib(rss.peak("publish")), "publish-peak-rss-MiB")
	b.ReportMetric(kib(afterPublishKB), "after-publish-rss-MiB")
	b.ReportMetric(float64(afterPublishKB-idleKB)*1024/float64(n), "rss-B/msg")
	b.ReportMetric(kib(rss.peak("restart")), "restart-peak-rss-MiB")
	b.ReportMetric(kib(afterRestartKB), "after-restart-rss-MiB")
	b.ReportMetric(kib(rss.peak("drain")), "drain-peak-rss-MiB")
	b.ReportMetric(kib(rss.overall()), "peak-rss-MiB")
	b.ReportMetric(kib(hwm1), "hwm1-MiB")
	b.ReportMetric(kib(hwm2), "hwm2-MiB")
	b.Logf("deep queue, %d messages of 16 bytes: publish %.1f s (%.0f msgs/s, %d publishers, window %d); "+
		"disk %.1f MiB (msgs/ %.1f MiB, %.1f B/msg); %s stop %.2f s, restart to %d messages %.2f s; "+
		"drain %.1f s (%.0f msgs/s, %d consumers); disk after drain %.1f MiB, %.1f MiB %.1f s later",
		n, publishSecs, float64(n)/publishSecs, deepPublishers, deepWindow,
		float64(diskAll)/mib, float64(diskMsgs)/mib, float64(diskMsgs)/float64(n), restartVerb, stopSecs, n, restartSecs,
		drainSecs, float64(n)/drainSecs, deepConsumers, float64(diskAfterDrain)/mib, float64(diskSettled)/mib, reclaimSecs)
	b.Logf("RSS MiB: idle %.1f; publish peak %.1f, after publish %.1f (%.0f B/msg over idle); "+
		"restart peak %.1f, after restart %.1f (%.0f B/msg over idle); drain peak %.1f; overall peak %.1f; "+
		"VmHWM first process %.1f, second %.1f",
		kib(idleKB), kib(rss.peak("publish")), kib(afterPublishKB), float64(afterPublishKB-idleKB)*1024/float64(n),
		kib(rss.peak("restart")), kib(afterRestartKB), float64(afterRestartKB-idleKB)*1024/float64(n),
		kib(rss.peak("drain")), kib(rss.overall()), kib(hwm1), kib(hwm2))
}

// deepMagic marks the second half of a deep-queue body.
const deepMagic = 0x57617272656e4451 // "WarrenDQ"

// deepBody writes message id's 16-byte body into buf.
func deepBody(buf []byte, id uint64) {
	binary.LittleEndian.PutUint64(buf[0:8], id)
	binary.LittleEndian.PutUint64(buf[8:16], id^deepMagic)
}

// deepCheck verifies a body and marks its id in seen, failing on a
// duplicate.
func deepCheck(body []byte, n int, seen []atomic.Uint64) error {
	if len(body) != 16 {
		return fmt.Errorf("body of %d bytes, want 16", len(body))
	}
	id := binary.LittleEndian.Uint64(body[0:8])
	if binary.LittleEndian.Uint64(body[8:16]) != id^deepMagic || id >= uint64(n) {
		return fmt.Errorf("corrupt body %x", body)
	}
	mask := uint64(1) << (id % 64)
	if seen[id/64].Or(mask)&mask != 0 {
		return fmt.Errorf("message %d delivered twice", id)
	}
	return nil
}

// deepWaitCount polls a passive declare of queue until it reports n
// messages (the broker may accept connections before it has recovered).
func deepWaitCount(p *proc, queue string, n int, timeout time.Duration) error {
	var conn *amqp.Connection
	var ch *amqp.Channel
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	var final error // an answer that ends the wait early
	last := testutil.UntilNil(timeout, func() error {
		if exited, err := p.Exited(); exited {
			final = fmt.Errorf("warren exited: %v", err)
			return nil
		}
		if conn == nil {
			c, err := amqp.Dial(p.URL())
			if err != nil {
				return err
			}
			conn = c
		}
		if ch == nil {
			c, err := conn.Channel()
			if err != nil {
				conn.Close()
				conn = nil
				return err
			}
			ch = c
		}
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		switch {
		case err != nil: // the channel is closed (404 before recovery?)
			ch = nil
			return err
		case q.Messages > n:
			final = fmt.Errorf("queue reports %d messages, more than the %d published", q.Messages, n)
		case q.Messages != n:
			return fmt.Errorf("%d messages", q.Messages)
		}
		return nil
	})
	if last != nil {
		return fmt.Errorf("queue does not report %d messages within %v (last: %v)", n, timeout, last)
	}
	return final
}

// deepDiskUsage is the total size of the regular files under dir (0 when
// dir does not exist).
func deepDiskUsage(tb testing.TB, dir string) int64 {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) { // removed meanwhile
					return nil
				}
				return err
			}
			total += info.Size()
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("disk usage of %s: %v", dir, err)
	}
	return total
}

// deepTail is the end of s, at most max bytes.
func deepTail(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return "...\n" + s[len(s)-max:]
}

// procStatusKB reads a "Name:  N kB" field of /proc/<pid>/status; 0 when
// the process or the field is gone.
func procStatusKB(pid int, field string) int64 {
	if pid <= 0 {
		return 0
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, field+":")
		if !ok {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0
		}
		return v
	}
	return 0
}

// rssSampler samples a process's VmRSS every 100 ms and keeps the peak of
// each phase and overall, in kB.
type rssSampler struct {
	mu     sync.Mutex
	pid    int
	phase  string
	peaks  map[string]int64
	all    int64
	stop   chan struct{}
	exited chan struct{}
}

func newRSSSampler(pid int) *rssSampler {
	s := &rssSampler{pid: pid, peaks: map[string]int64{}, stop: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(s.exited)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.now()
			}
		}
	}()
	return s
}

// now samples VmRSS at once, records it, and returns it (0 without a
// process).
func (s *rssSampler) now() int64 {
	s.mu.Lock()
	pid := s.pid
	s.mu.Unlock()
	kb := procStatusKB(pid, "VmRSS")
	s.observe(kb)
	return kb
}

// observe records a value (a sample or a VmHWM) for the current phase.
func (s *rssSampler) observe(kb int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.peaks[s.phase] = max(s.peaks[s.phase], kb)
	s.all = max(s.all, kb)
}

// setPhase closes the current phase with a last sample and starts another.
func (s *rssSampler) setPhase(name string) {
	s.now()
	s.mu.Lock()
	s.phase = name
	s.mu.Unlock()
	s.now()
}

// setPID follows another process (0: none, between two lives).
func (s *rssSampler) setPID(pid int) {
	s.mu.Lock()
	s.pid = pid
	s.mu.Unlock()
}

func (s *rssSampler) peak(phase string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peaks[phase]
}

func (s *rssSampler) overall() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.all
}

func (s *rssSampler) close() {
	close(s.stop)
	<-s.exited
}
