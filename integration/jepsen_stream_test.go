package integration

// The Jepsen-style test of replicated streams (issue 25, must-show 3), on
// the process cluster of the quorum queues' run (jepsen_test.go): three
// warren processes, a fault proxy on every inter-node link, the same
// seeded schedule of faults (kill -9 of the stream's leader, SIGSTOP of
// it, partitions, full cluster restarts). Publishers with confirms go
// through every node; consumers on every node read the stream from where
// they stopped (the offset after the last delivery they saw) whenever
// their connection is lost. Then everything is healed and the checks:
//
//   - every node's stream holds the same messages at the same offsets,
//     and the same bytes in its segment and index files;
//   - no confirmed message is missing, none is there twice;
//   - each consumer resumed at the right offset: what it read is, offset
//     for offset, a run of the stream with nothing skipped.
//
// WARREN_LONG=1 runs it (as the quorum queues' runs); the WARREN_JEPSEN_*
// variables set its duration, seed and rate.

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testutil"
)

// jStreamRead is a delivery a stream consumer saw.
type jStreamRead struct {
	off int64
	id  string
}

// streamConsumer reads the stream through node from "first", resuming
// after its last delivery whenever the connection is lost, until stop.
func (r *jepsenRun) streamConsumer(node int, mu *sync.Mutex, out *[]jStreamRead) {
	defer r.conWG.Done()
	next := any("first")
	for !r.stopped(r.stopCon) {
		conn := r.dial(node, r.stopCon)
		if conn == nil {
			return
		}
		func() {
			defer jClose(conn)
			ch, err := conn.Channel()
			if err != nil {
				return
			}
			if err := ch.Qos(jPrefetch, 0, false); err != nil {
				return
			}
			dels, err := ch.Consume(r.source, "", false, false, false, false, amqp.Table{"x-stream-offset": next})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				return
			}
			for {
				select {
				case <-r.stopCon:
					return
				case d, ok := <-dels:
					if !ok {
						return
					}
					off, _ := d.Headers["x-stream-offset"].(int64)
					mu.Lock()
					*out = append(*out, jStreamRead{off, string(d.Body)})
					mu.Unlock()
					next = off + 1
					_ = d.Ack(false)
				}
			}
		}()
		if r.stopped(r.stopCon) {
			return
		}
		r.rec.count(&r.rec.conReconnects)
		time.Sleep(200 * time.Millisecond)
	}
}

// readWholeStream reads every message of the stream through node, from
// first, until none came for 3 s.
func (r *jepsenRun) readWholeStream(node int) ([]jStreamRead, error) {
	conn, err := amqp.Dial(r.c.URL(node))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	ch.Qos(500, 0, false)
	dels, err := ch.Consume(r.source, "", false, false, false, false, amqp.Table{"x-stream-offset": "first"})
	if err != nil {
		return nil, err
	}
	var out []jStreamRead
	for {
		select {
		case d := <-dels:
			off, _ := d.Headers["x-stream-offset"].(int64)
			out = append(out, jStreamRead{off, string(d.Body)})
			d.Ack(false)
		case <-time.After(3 * time.Second):
			return out, nil
		}
	}
}

// streamDirFiles reads node i's segment and index files of the stream.
func (r *jepsenRun) streamDirFiles(i int) (map[string][]byte, error) {
	return streamFilesIn(r.c.nodes[i].dataDir, r.source)
}

// TestJepsenStream: issue 25, must-show 3.
func TestJepsenStream(t *testing.T) {
	testutil.Long(t, "a three-process cluster under faults for 90 s")
	cfg := jepsenConfig(t)
	c := startProcCluster(t, 3, procClusterOpts{Extra: []string{"--stream-addr", "off"}})
	c.waitClusterReady(t)
	r := &jepsenRun{t: t, cfg: cfg, c: c, rec: newJRecorder(), rng: rand.New(rand.NewPCG(cfg.seed, 25)),
		prefix: "h7j-st", stopPub: make(chan struct{}), stopCon: make(chan struct{}), applied: map[string]int{}}
	r.source = r.prefix + "-s"
	testutil.EventuallyNil(t, 30*time.Second, "declare the stream", func() error {
		conn, err := amqp.Dial(c.URL(0))
		if err != nil {
			return err
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		_, err = ch.QueueDeclare(r.source, true, false, false, false, amqp.Table{"x-queue-type": "stream",
			"x-stream-max-segment-size-bytes": int64(1 << 20)})
		return err
	})
	for i := range 3 {
		testutil.EventuallyNil(t, 30*time.Second, fmt.Sprintf("the stream on %s", c.Name(i)), func() error {
			_, err := r.queueInfo(i, r.source)
			return err
		})
	}
	var rmu [3]sync.Mutex
	var reads [3][]jStreamRead
	stopPubs := func() {
		if !r.stopped(r.stopPub) {
			close(r.stopPub)
		}
		r.pubWG.Wait()
	}
	stopCons := func() {
		if !r.stopped(r.stopCon) {
			close(r.stopCon)
		}
		r.conWG.Wait()
	}
	t.Cleanup(func() { stopPubs(); stopCons() })
	for i := range 3 {
		r.pubWG.Add(1)
		go r.publisher(i, i)
		r.conWG.Add(1)
		go r.streamConsumer(i, &rmu[i], &reads[i])
	}
	time.Sleep(3 * time.Second)

	kinds := []string{"kill", "pause", "halves", "ring", "alone", "restart-all"}
	faultsFrom := time.Now()
	for round := 0; round == 0 || time.Since(faultsFrom) < cfg.dur; round++ {
		r.rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
		for _, k := range kinds {
			if round > 0 && time.Since(faultsFrom) >= cfg.dur {
				break
			}
			c.waitClusterReady(t)
			time.Sleep(r.hold(time.Second, 3*time.Second))
			r.fault(k)
		}
	}
	r.healAll()
	t.Logf("%s: faults over, cluster whole", r.at())
	mark := r.rec.pubMark()
	if !testutil.Until(jLivenessTimeout, func() bool { _, ok := r.rec.confirmedSince(mark, -1); return ok }) {
		t.Errorf("no publish confirmed within %v of the faults' end", jLivenessTimeout)
	}
	stopPubs()
	time.Sleep(3 * time.Second) // the consumers catch up
	stopCons()

	// Every node holds the same stream.
	var whole [3][]jStreamRead
	for i := range 3 {
		var err error
		if whole[i], err = r.readWholeStream(i); err != nil {
			t.Fatalf("reading the stream on %s: %v", c.Name(i), err)
		}
	}
	for i := 1; i < 3; i++ {
		if !slices.Equal(whole[i], whole[0]) {
			t.Errorf("%s reads %d messages, %s %d: not the same stream", c.Name(i), len(whole[i]), c.Name(0), len(whole[0]))
		}
	}
	testutil.EventuallyNil(t, 30*time.Second, "the replicas hold the same bytes", func() error {
		ref, err := r.streamDirFiles(0)
		if err != nil {
			return err
		}
		for i := 1; i < 3; i++ {
			got, err := r.streamDirFiles(i)
			if err != nil {
				return err
			}
			if len(got) != len(ref) {
				return fmt.Errorf("%s has %d files, %s %d", c.Name(i), len(got), c.Name(0), len(ref))
			}
			for f, b := range ref {
				if !bytes.Equal(got[f], b) {
					return fmt.Errorf("%s differs between %s and %s", f, c.Name(0), c.Name(i))
				}
			}
		}
		return nil
	})

	// No confirmed message lost, none twice.
	at := map[string]int64{}
	dups := 0
	for _, m := range whole[0] {
		if _, ok := at[m.id]; ok {
			dups++
		}
		at[m.id] = m.off
	}
	h := r.rec.history(r.source, "", nil)
	confirmed, lost, unknownIn, nackedIn := 0, 0, 0, 0
	var lostIDs []string
	for _, p := range h.Pubs {
		_, in := at[p.ID]
		switch p.Outcome {
		case jConfirmed:
			confirmed++
			if !in {
				lost++
				lostIDs = append(lostIDs, p.ID)
			}
		case jNacked:
			if in {
				nackedIn++
			}
		default:
			if in {
				unknownIn++
			}
		}
	}
	// Each consumer resumed where it stopped: its reads are runs of the
	// stream, offset after offset.
	index := map[int64]int{}
	for i, m := range whole[0] {
		index[m.off] = i
	}
	skips, wrong := 0, 0
	for n := range 3 {
		rs := reads[n]
		for k, m := range rs {
			i, ok := index[m.off]
			if !ok || whole[0][i].id != m.id {
				wrong++
				continue
			}
			if k > 0 {
				if j, ok := index[rs[k-1].off]; ok && i != j+1 {
					skips++
					if skips <= 5 {
						t.Logf("%s's consumer read offset %d after %d: %d messages skipped or read again", c.Name(n), m.off, rs[k-1].off, i-j-1)
					}
				}
			}
		}
		if len(rs) == 0 {
			t.Errorf("the consumer on %s read nothing", c.Name(n))
		}
	}
	r.rec.mu.Lock()
	trouble := fmt.Sprintf("publisher reconnects %d, confirm timeouts %d, consumer reconnects %d",
		r.rec.pubReconnects, r.rec.confirmTimeouts, r.rec.conReconnects)
	r.rec.mu.Unlock()
	t.Logf("issue 25 Jepsen-style run of a stream, WARREN_JEPSEN_SEED=%d, faults for %v:\n"+
		"published %d, confirmed %d, lost %d, in the stream %d (duplicates %d; of unknown outcome %d, nacked %d)\n"+
		"consumers read %d, %d, %d (resumed wrongly %d, not in the stream %d)\n%s",
		cfg.seed, cfg.dur, len(h.Pubs), confirmed, lost, len(whole[0]), dups, unknownIn, nackedIn,
		len(reads[0]), len(reads[1]), len(reads[2]), skips, wrong, trouble)
	for _, k := range kinds {
		if r.applied[k] == 0 {
			t.Errorf("fault %s never applied", k)
		}
	}
	if confirmed == 0 {
		t.Error("nothing confirmed: the run checked nothing")
	}
	if lost > 0 {
		t.Errorf("%d confirmed messages lost (WARREN_JEPSEN_SEED=%d), first %v", lost, cfg.seed, lostIDs[:min(10, len(lostIDs))])
	}
	if dups > 0 {
		t.Errorf("%d messages are in the stream twice", dups)
	}
	if skips > 0 || wrong > 0 {
		t.Errorf("consumers resumed at the wrong offset %d times, read %d messages the stream does not hold there", skips, wrong)
	}
	for _, l := range r.liveness {
		t.Errorf("liveness: %s", l)
	}
}
