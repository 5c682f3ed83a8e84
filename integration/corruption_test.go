package integration

// Corruption test (issue 4): "truncated files, flipped bytes and torn writes
// in the store directory (at random offsets, seeded) never crash the broker
// and never deliver a corrupt message", and "a torn or corrupt tail is
// detected, cut and reported in the log; the broker starts, it does not
// refuse to start or deliver garbage".
//
// Each round runs a warren subprocess on a fresh data directory, fills three
// durable queues (one dead-letters into another) with persistent messages
// that carry their own checksum, acks, requeues and dead-letters some, stops
// it (SIGTERM) or kills it (SIGKILL), damages files under <data>/msgs/ and
// restarts it. Then:
//   - the broker starts and stays up;
//   - every message it delivers verifies (body checksum, id, properties) and
//     was published to the queue it comes from (or dead-lettered there);
//   - a message whose record is still intact on disk (in a queue directory
//     whose other files were not damaged) and that recovery can find is
//     delivered: before the damage, and after it when a valid record
//     follows the damage (issue 11 item 8: recovery skips a damaged record
//     and resynchronises, ctParseSeg); it loses the damage, not the good
//     data around it;
//   - if a segment no longer parses cleanly, the broker's log reports it;
//   - each queue still takes and delivers new messages, including across a
//     further clean restart, and SIGTERM exits 0.
//
// Messages destroyed by the damage may be missing (counted and logged), and
// acked messages may come back when the damage destroyed their ack records.
// defs.db (bbolt) is never touched.
//
//	go test ./integration -run TestCorruptStore -v
//	WARREN_CORRUPT_SEED=123 WARREN_CORRUPT_ROUNDS=5 go test ./integration -run TestCorruptStore -v

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"github.com/warrenmq/warren/internal/testutil"
	"hash/crc32"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

const (
	ctQueueA    = "corrupt-a"   // plain durable queue
	ctQueueDL   = "corrupt-dl"  // durable, dead-letters to ctDLX
	ctQueueDLQ  = "corrupt-dlq" // bound to ctDLX
	ctDLX       = "corrupt.dlx"
	ctCType     = "application/x-warren-corrupt-test"
	ctBodyMagic = "WCT1 " // every body starts with it, then the id and "\n"
)

var ctQueues = []string{ctQueueA, ctQueueDL, ctQueueDLQ}

// ctAllowed says where a message published to a queue may be delivered from.
var ctAllowed = map[string][]string{
	ctQueueA:   {ctQueueA},
	ctQueueDL:  {ctQueueDL, ctQueueDLQ},
	ctQueueDLQ: {ctQueueDLQ},
}

// ctWarnRE matches the store's recovery warnings (store/log.go: "skipping a
// corrupt record", "cutting torn or corrupt tail", "corrupt record at the end
// of an older segment", "segment has a bad header", "last segment has a torn
// or bad header") and any wording of the
// broker's own that says the same. The store logs them at Warn to
// store.Options.Logger (discarded by default), so they reach the broker's
// output (--log-level warn in the harness) only if the broker passes its
// logger to OpenLog; the issue asks for it ("reported in the log"). The test
// expects a warning only when a segment, read as OpenLog reads it, no longer
// parses cleanly to its end; it does not match a particular segment's path
// against the log, whose format is the broker's choice.
var ctWarnRE = regexp.MustCompile(`(?i)corrupt|torn|truncat|bad header`)

func TestCorruptStore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the warren binary, many restarts")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("WARREN_CORRUPT_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("WARREN_CORRUPT_SEED=%q: %v", s, err)
		}
		seed = v
	}
	rounds := 12 // 30 with WARREN_LONG=1 (CI's long step)
	if testutil.LongOn() {
		rounds = 30
	}
	if s := os.Getenv("WARREN_CORRUPT_ROUNDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("WARREN_CORRUPT_ROUNDS=%q: want a positive integer", s)
		}
		rounds = v
	}
	t.Logf("seed %d, %d rounds (rerun: WARREN_CORRUPT_SEED=%d WARREN_CORRUPT_ROUNDS=%d)", seed, rounds, seed, rounds)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("FAILED with WARREN_CORRUPT_SEED=%d (rounds are independent: round i uses PCG(seed, i))", seed)
		}
	})
	var total ctTotals
	for i := range rounds {
		if !t.Run(fmt.Sprintf("round%02d", i), func(t *testing.T) { ctRound(t, seed, i, &total) }) {
			break // the first failing round says it all; the others would repeat it
		}
	}
	t.Logf("seed %d: %d rounds, %d damage ops, %d messages expected after damage, %d delivered, %d lost, %d resurrected",
		seed, total.rounds, total.ops, total.expected, total.delivered, total.lost, total.resurrected)
}

type ctTotals struct {
	rounds, ops, expected, delivered, lost, resurrected int
}

// ctMsg is what the test remembers of a published message.
type ctMsg struct {
	queue string   // published to
	size  int      // body length
	sum   [32]byte // sha256 of the body without its last 32 bytes
}

// ctRun is the state of one round.
type ctRun struct {
	t     *testing.T
	seed  uint64
	round int
	rng   *rand.Rand
	data  *rand.ChaCha8 // payload bytes
	msgs  map[string]ctMsg
	order []string        // ids in publish order
	acked map[string]bool // acked (removed) before the restart
	dead  map[string]bool // rejected from ctQueueDL (dead-lettered) before the restart
	p     *proc
}

// failf reports an error naming the seed and round.
func (r *ctRun) failf(format string, args ...any) {
	r.t.Helper()
	r.t.Errorf("[seed %d round %d] %s", r.seed, r.round, fmt.Sprintf(format, args...))
}

func (r *ctRun) fatalf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("[seed %d round %d] %s", r.seed, r.round, fmt.Sprintf(format, args...))
}

// fatalAMQP fails on a client error, with the broker's output if it exited.
func (r *ctRun) fatalAMQP(what string, err error) {
	r.t.Helper()
	if exited, perr := r.p.Exited(); exited {
		r.fatalf("%s: %v; warren exited: %v\n%s", what, err, perr, r.p.Output())
	}
	r.fatalf("%s: %v", what, err)
}

func ctRound(t *testing.T, seed uint64, round int, total *ctTotals) {
	rng := rand.New(rand.NewPCG(seed, uint64(round)))
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], rng.Uint64())
	binary.LittleEndian.PutUint64(key[8:], rng.Uint64())
	r := &ctRun{t: t, seed: seed, round: round, rng: rng, data: rand.NewChaCha8(key),
		msgs: map[string]ctMsg{}, acked: map[string]bool{}, dead: map[string]bool{}}
	t.Logf("seed %d round %d", seed, round)

	dir := t.TempDir()
	p := startProc(t, dir)
	r.p = p
	r.populate(p)
	if rng.IntN(2) == 0 {
		t.Logf("SIGKILL")
		p.Kill()
	} else {
		t.Logf("SIGTERM")
		p.Stop()
	}

	msgsDir := filepath.Join(dir, "msgs")
	files := r.storeFiles(msgsDir)
	dmg := r.damage(msgsDir, files)
	total.ops += len(dmg.ops)
	an := r.analyze(msgsDir, dmg)

	// The broker must start on the damaged directory (Start fails the test
	// with the broker's output if it exits).
	p.Start()
	c, ch := rsDial(t, p.URL())
	got := map[string][]string{} // id -> queues it was delivered from
	delivered := 0
	for _, q := range ctQueues {
		for _, id := range r.drain(ch, q) {
			got[id] = append(got[id], q)
			delivered++
		}
	}
	r.account(got, delivered, an, total)
	if exited, err := p.Exited(); exited {
		r.fatalf("warren exited while recovered messages were drained: %v\n%s", err, p.Output())
	}

	// Recovery must report what it cut. Checked after the drain, so that a
	// broker that opens its queue logs after it starts listening has done so.
	if len(an.unclean) > 0 {
		out := p.Output()
		if !ctWarnRE.MatchString(out) {
			r.failf("segments that no longer parse cleanly, but the broker's log reports no corruption "+
				"(want a line matching %s; store recovery warnings must reach the broker's log):\n  %s\nlog:\n%s",
				ctWarnRE, strings.Join(an.unclean, "\n  "), out)
		} else {
			n := 0
			for _, line := range strings.Split(out, "\n") {
				if ctWarnRE.MatchString(line) && n < 10 {
					t.Logf("broker log: %s", line)
					n++
				}
			}
		}
	}

	// The broker keeps working: each queue takes and delivers a new message.
	r.publishConfirmed(ch, "live", 1)
	for _, q := range ctQueues {
		ids := r.drain(ch, q)
		if want := r.idsFor("live", q); !slices.Equal(ids, want) {
			r.failf("after recovery %s delivered %q, want the new message %q", q, ids, want)
		}
	}
	// And what it accepts after recovery survives a clean restart.
	r.publishConfirmed(ch, "kept", 1)
	if exited, err := p.Exited(); exited {
		r.fatalf("warren exited after recovery: %v\n%s", err, p.Output())
	}
	c.Close()
	p.Stop()
	p.Start()
	c, ch = rsDial(t, p.URL())
	for _, q := range ctQueues {
		ids := r.drain(ch, q)
		if want := r.idsFor("kept", q); !slices.Equal(ids, want) {
			r.failf("after recovery and a clean restart %s delivered %q, want exactly %q "+
				"(the messages drained after recovery were acked and must stay gone)", q, ids, want)
		}
	}
	if exited, err := p.Exited(); exited {
		r.fatalf("warren exited: %v\n%s", err, p.Output())
	}
	c.Close()
	p.Stop()
	total.rounds++
}

// --- Messages ---------------------------------------------------------------

// bodySize draws a body length: mostly small, some over 64 KiB (larger than
// the log's append buffer).
func (r *ctRun) bodySize() int {
	switch n := r.rng.IntN(100); {
	case n < 45:
		return r.rng.IntN(64)
	case n < 85:
		return 64 + r.rng.IntN(4096)
	case n < 95:
		return 4096 + r.rng.IntN(60<<10)
	default:
		return 64<<10 + r.rng.IntN(192<<10)
	}
}

// newMsg builds a message for queue q: body = magic id "\n" payload sha256,
// the checksum covering everything before it; the id is also the message-id
// and a header.
func (r *ctRun) newMsg(kind, q string, n int) (string, amqp.Publishing) {
	id := fmt.Sprintf("r%d:%s:%s:%06d", r.round, kind, q, n)
	body := make([]byte, 0, len(ctBodyMagic)+len(id)+1+64+sha256.Size)
	body = append(body, ctBodyMagic...)
	body = append(body, id...)
	body = append(body, '\n')
	payload := make([]byte, r.bodySize())
	r.data.Read(payload)
	body = append(body, payload...)
	sum := sha256.Sum256(body)
	body = append(body, sum[:]...)
	r.msgs[id] = ctMsg{queue: q, size: len(body), sum: sum}
	r.order = append(r.order, id)
	return id, amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		ContentType:  ctCType,
		MessageId:    id,
		Headers:      amqp.Table{"cid": id},
		Body:         body,
	}
}

func (r *ctRun) idsFor(kind, q string) []string {
	var ids []string
	prefix := fmt.Sprintf("r%d:%s:%s:", r.round, kind, q)
	for _, id := range r.order {
		if strings.HasPrefix(id, prefix) {
			ids = append(ids, id)
		}
	}
	return ids
}

// verify checks a delivered message and returns its id.
func (r *ctRun) verify(q string, d amqp.Delivery) (string, error) {
	b := d.Body
	if len(b) < len(ctBodyMagic)+1+sha256.Size || !bytes.HasPrefix(b, []byte(ctBodyMagic)) {
		return "", fmt.Errorf("body of %d bytes is not a test message (starts %q)", len(b), ctHead(b))
	}
	pre, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if s := sha256.Sum256(pre); !bytes.Equal(s[:], sum) {
		return "", fmt.Errorf("body of %d bytes fails its checksum (starts %q)", len(b), ctHead(b))
	}
	nl := bytes.IndexByte(pre, '\n')
	if nl < 0 {
		return "", fmt.Errorf("body without an id line (starts %q)", ctHead(b))
	}
	id := string(pre[len(ctBodyMagic):nl])
	m, ok := r.msgs[id]
	if !ok {
		return id, fmt.Errorf("message %q was never published", id)
	}
	if m.size != len(b) || m.sum != [32]byte(sum) {
		return id, fmt.Errorf("message %q: body differs from the one published", id)
	}
	if !slices.Contains(ctAllowed[m.queue], q) {
		return id, fmt.Errorf("message %q published to %s delivered from %s", id, m.queue, q)
	}
	if d.MessageId != id || d.ContentType != ctCType || d.DeliveryMode != amqp.Persistent {
		return id, fmt.Errorf("message %q: properties changed: message-id %q content-type %q delivery-mode %d",
			id, d.MessageId, d.ContentType, d.DeliveryMode)
	}
	if h, _ := d.Headers["cid"].(string); h != id {
		return id, fmt.Errorf("message %q: header cid is %v", id, d.Headers["cid"])
	}
	return id, nil
}

func ctHead(b []byte) []byte { return b[:min(len(b), 40)] }

// drain gets every message of q (auto-ack), verifies each and returns the
// ids of those that verified, in delivery order.
func (r *ctRun) drain(ch *amqp.Channel, q string) []string {
	r.t.Helper()
	var ids []string
	for {
		d, ok, err := ch.Get(q, true)
		if err != nil {
			r.fatalAMQP("basic.get "+q, err)
		}
		if !ok {
			return ids
		}
		id, err := r.verify(q, d)
		if err != nil {
			r.failf("%s delivered a corrupt message: %v", q, err)
			continue
		}
		ids = append(ids, id)
	}
}

// publishConfirmed publishes n messages of the given kind to each queue
// (through the default exchange) and waits for their confirms.
func (r *ctRun) publishConfirmed(ch *amqp.Channel, kind string, n int) {
	r.t.Helper()
	if err := ch.Confirm(false); err != nil {
		r.fatalAMQP("confirm.select", err)
	}
	var dcs []*amqp.DeferredConfirmation
	var ids []string
	for _, q := range ctQueues {
		for i := range n {
			id, pub := r.newMsg(kind, q, i)
			dc, err := ch.PublishWithDeferredConfirm("", q, false, false, pub)
			if err != nil {
				r.fatalAMQP("publish "+id, err)
			}
			dcs, ids = append(dcs, dc), append(ids, id)
		}
	}
	for i, dc := range dcs {
		if ok, err := dc.WaitContext(r.t.Context()); !ok || err != nil {
			r.fatalAMQP(fmt.Sprintf("publish %s not confirmed (ack %v)", ids[i], ok), err)
		}
	}
}

// populate declares the queues and fills them: a few hundred to about 1500
// persistent messages, confirmed; then acks, requeues and dead-letters a few,
// leaving some unacked at the stop.
func (r *ctRun) populate(p *proc) {
	t := r.t
	_, ch := rsDial(t, p.URL())
	rsCheck(t, "declare dlx", ch.ExchangeDeclare(ctDLX, "fanout", true, false, false, false, nil))
	_, err := ch.QueueDeclare(ctQueueDLQ, true, false, false, false, nil)
	rsCheck(t, "declare dlq", err)
	rsCheck(t, "bind dlq", ch.QueueBind(ctQueueDLQ, "", ctDLX, false, nil))
	_, err = ch.QueueDeclare(ctQueueDL, true, false, false, false, amqp.Table{"x-dead-letter-exchange": ctDLX})
	rsCheck(t, "declare dl", err)
	_, err = ch.QueueDeclare(ctQueueA, true, false, false, false, nil)
	rsCheck(t, "declare a", err)

	rsCheck(t, "confirm.select", ch.Confirm(false))
	n := 200 + r.rng.IntN(1300)
	dcs := make([]*amqp.DeferredConfirmation, 0, n)
	ids := make([]string, 0, n)
	bytesOut := 0
	count := map[string]int{}
	for range n {
		q := ctQueueA
		if r.rng.IntN(5) < 2 {
			q = ctQueueDL
		}
		id, pub := r.newMsg("m", q, count[q])
		count[q]++
		bytesOut += len(pub.Body)
		dc, err := ch.PublishWithDeferredConfirm("", q, false, false, pub)
		if err != nil {
			r.fatalAMQP("publish "+id, err)
		}
		dcs, ids = append(dcs, dc), append(ids, id)
	}
	for i, dc := range dcs {
		if ok, err := dc.WaitContext(t.Context()); !ok || err != nil {
			r.fatalAMQP(fmt.Sprintf("publish %s not confirmed (ack %v)", ids[i], ok), err)
		}
	}

	// Some acks (ack records), requeues and dead letters before the stop;
	// the deliveries still held are unacked when the broker goes.
	_, gch := rsDial(t, p.URL())
	var requeue []amqp.Delivery
	held, acks, dead := 0, 0, 0
	for _, q := range []string{ctQueueA, ctQueueDL} {
		k := r.rng.IntN(min(60, count[q]) + 1)
		for range k {
			d, ok, err := gch.Get(q, false)
			rsCheck(t, "get "+q, err)
			if !ok {
				break
			}
			id, err := r.verify(q, d)
			if err != nil {
				r.fatalf("before any damage, %s delivered a bad message: %v", q, err)
			}
			switch x := r.rng.IntN(10); {
			case x < 4:
				rsCheck(t, "ack", d.Ack(false))
				r.acked[id] = true
				acks++
			case x < 7 && q == ctQueueDL:
				rsCheck(t, "reject", d.Nack(false, false))
				r.dead[id] = true
				dead++
			case x < 8:
				requeue = append(requeue, d)
			default:
				held++
			}
		}
	}
	for _, d := range requeue {
		rsCheck(t, "requeue", d.Nack(false, true))
	}
	// A synchronous method on the same channel: the broker has processed
	// the acks and rejects before it.
	_, err = gch.QueueDeclarePassive(ctQueueA, true, false, false, false, nil)
	rsCheck(t, "fence", err)
	t.Logf("published %d messages (%d KiB): %d to %s, %d to %s; acked %d, dead-lettered %d, requeued %d, held unacked %d",
		n, bytesOut>>10, count[ctQueueA], ctQueueA, count[ctQueueDL], ctQueueDL, acks, dead, len(requeue), held)
}

// account compares what was delivered after the damage with what was
// published.
func (r *ctRun) account(got map[string][]string, delivered int, an ctAnalysis, total *ctTotals) {
	expected, lost, resurrected, both, dups := 0, 0, 0, 0, 0
	var missingIntact []string
	for _, id := range r.order {
		qs := got[id]
		if r.acked[id] {
			if len(qs) > 0 {
				resurrected++
			}
			continue
		}
		expected++
		if len(qs) == 0 {
			lost++
			if an.intact[id] {
				missingIntact = append(missingIntact, id)
			}
		}
		seen := map[string]bool{}
		for _, q := range qs {
			if seen[q] {
				dups++
			}
			seen[q] = true
		}
		if len(seen) > 1 {
			both++
		}
	}
	r.t.Logf("after damage: expected %d, delivered %d, lost %d, resurrected (acked before) %d, in both %s and %s %d, duplicates %d; %d had intact records",
		expected, delivered, lost, resurrected, ctQueueDL, ctQueueDLQ, both, dups, len(an.intact))
	if len(missingIntact) > 0 {
		r.failf("%d messages lost although their record was intact and recoverable (ctParseSeg): %q",
			len(missingIntact), missingIntact[:min(len(missingIntact), 10)])
	}
	total.expected += expected
	total.delivered += delivered
	total.lost += lost
	total.resurrected += resurrected
}

// --- Store files and damage ---------------------------------------------------

// ctFile is a regular file under msgs/.
type ctFile struct {
	path, rel string
	seg       bool
}

func ctIsSeg(name string) bool {
	digits, ok := strings.CutSuffix(name, ".seg")
	if !ok || len(digits) != 16 {
		return false
	}
	_, err := strconv.ParseUint(digits, 10, 32)
	return err == nil
}

// storeFiles lists the regular files under msgs/; it fails the test if
// there is no segment file.
func (r *ctRun) storeFiles(msgsDir string) []ctFile {
	var files []ctFile
	err := filepath.WalkDir(msgsDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(msgsDir, path)
			files = append(files, ctFile{path: path, rel: rel, seg: ctIsSeg(d.Name())})
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		r.fatalf("walking %s: %v", msgsDir, err)
	}
	segs := 0
	for _, f := range files {
		if f.seg {
			segs++
		}
	}
	if segs == 0 {
		r.fatalf("no message store files under msgs/ (%s; %d other files): persistent messages in durable queues "+
			"must be stored in segment logs there before this test can damage them", msgsDir, len(files))
	}
	var names []string
	for _, f := range files {
		st, err := os.Stat(f.path)
		if err != nil {
			r.fatalf("%v", err)
		}
		names = append(names, fmt.Sprintf("%s (%d B)", f.rel, st.Size()))
	}
	r.t.Logf("store files: %s", strings.Join(names, ", "))
	return files
}

type ctDamage struct {
	ops      []string
	metaDirs map[string]bool // directories in which a file other than a segment was damaged
}

// damage applies 1 to 4 seeded damage operations to the files and logs each.
func (r *ctRun) damage(msgsDir string, files []ctFile) ctDamage {
	dmg := ctDamage{metaDirs: map[string]bool{}}
	var segs, others []ctFile
	for _, f := range files {
		if f.seg {
			segs = append(segs, f)
		} else {
			others = append(others, f)
		}
	}
	deleted := map[string]bool{}
	nops := 1 + r.rng.IntN(4)
	for range nops {
		var f ctFile
		meta := len(others) > 0 && r.rng.IntN(10) == 0
		if meta {
			f = others[r.rng.IntN(len(others))]
		} else {
			f = segs[r.rng.IntN(len(segs))]
		}
		if deleted[f.path] {
			continue
		}
		op := r.rng.IntN(100)
		if op >= 90 && f.seg {
			// Delete a segment that is not the first of its log (of any
			// log: only queues past 8 MiB have two).
			var cands []ctFile
			for _, s := range segs {
				if !deleted[s.path] && !ctFirstSeg(segs, deleted, s) {
					cands = append(cands, s)
				}
			}
			if len(cands) > 0 {
				s := cands[r.rng.IntN(len(cands))]
				if err := os.Remove(s.path); err != nil {
					r.fatalf("%v", err)
				}
				deleted[s.path] = true
				dmg.ops = append(dmg.ops, "delete "+s.rel)
				continue
			}
			op = r.rng.IntN(90) // nothing to delete: another kind of damage
		}
		b, err := os.ReadFile(f.path)
		if err != nil {
			r.fatalf("%v", err)
		}
		var desc string
		switch {
		case len(b) == 0 || (op >= 60 && op < 80):
			// A torn write at the end: random bytes, or a strict prefix of a
			// valid record of the file (a record whose write was cut short).
			var tail []byte
			recs := ctRecords(b)
			if len(recs) > 0 && r.rng.IntN(2) == 0 {
				rec := recs[r.rng.IntN(len(recs))]
				cut := 1 + r.rng.IntN(int(rec[1]-rec[0])-1)
				tail = slices.Clone(b[rec[0] : rec[0]+int64(cut)])
				desc = fmt.Sprintf("append the first %d of %d bytes of the record at %d", cut, rec[1]-rec[0], rec[0])
			} else {
				tail = make([]byte, 1+r.rng.IntN(300))
				r.data.Read(tail)
				desc = fmt.Sprintf("append %d random bytes", len(tail))
			}
			desc += fmt.Sprintf(" at %d", len(b))
			b = append(b, tail...)
		case op < 25:
			// Truncate: half the time near the end (a torn tail), else anywhere.
			var off int
			if r.rng.IntN(2) == 0 {
				off = len(b) - 1 - r.rng.IntN(min(len(b), 4096))
			} else {
				off = r.rng.IntN(len(b))
			}
			desc = fmt.Sprintf("truncate from %d to %d bytes", len(b), off)
			b = b[:off]
		case op < 50:
			k := 1 + r.rng.IntN(8)
			var at []string
			for range k {
				off := r.rng.IntN(len(b))
				x := byte(1 + r.rng.IntN(255))
				b[off] ^= x
				at = append(at, fmt.Sprintf("%d^%#02x", off, x))
			}
			desc = "flip bytes " + strings.Join(at, " ")
		case op < 60:
			// Overwrite a range with random bytes (a torn write in the middle).
			off := r.rng.IntN(len(b))
			n := min(1+r.rng.IntN(4096), len(b)-off)
			r.data.Read(b[off : off+n])
			desc = fmt.Sprintf("overwrite %d bytes at %d with random bytes", n, off)
		default:
			// Zero an aligned block, as if it was lost.
			blk := 512 << r.rng.IntN(4)
			off := r.rng.IntN(len(b)) / blk * blk
			end := min(off+blk, len(b))
			clear(b[off:end])
			desc = fmt.Sprintf("zero bytes [%d, %d)", off, end)
		}
		if err := os.WriteFile(f.path, b, 0o644); err != nil {
			r.fatalf("%v", err)
		}
		if !f.seg {
			dmg.metaDirs[filepath.Dir(f.path)] = true
		}
		dmg.ops = append(dmg.ops, f.rel+": "+desc)
	}
	for _, op := range dmg.ops {
		r.t.Logf("damage: %s", op)
	}
	return dmg
}

// ctFirstSeg reports whether s is the lowest-numbered remaining segment of
// its directory.
func ctFirstSeg(segs []ctFile, deleted map[string]bool, s ctFile) bool {
	for _, o := range segs {
		if !deleted[o.path] && filepath.Dir(o.path) == filepath.Dir(s.path) && filepath.Base(o.path) < filepath.Base(s.path) {
			return false
		}
	}
	return true
}

// --- Reading segments (the format of store/doc.go) ---------------------------

var ctCastagnoli = crc32.MakeTable(crc32.Castagnoli)

const (
	ctSegHeader = 8
	ctRecHeader = 9
	ctMaxRecord = 512 << 20
)

// ctParseSeg returns the [start, end) of the records a recovery keeps in a
// segment, in order, and why the segment does not parse cleanly to the end
// of b ("" if it does). It follows the rule of store/doc.go (issue 11 item
// 8): after a bad record, recovery resynchronises at the first later offset
// where a record with a valid checksum starts and is followed by another
// valid record or by the end of the file (the bad record's length is tried
// first), skips the damaged range and keeps what follows; if there is no
// such offset, the rest is a torn tail.
func ctParseSeg(b []byte) (recs [][2]int64, bad string) {
	if len(b) < ctSegHeader || string(b[:4]) != "WRNL" || binary.LittleEndian.Uint32(b[4:8]) != 1 {
		return nil, "bad or torn segment header"
	}
	size := int64(len(b))
	// valid returns the end of the record with a good checksum at off, or
	// -1 and why not.
	valid := func(off int64) (int64, string) {
		if size-off < ctRecHeader {
			return -1, fmt.Sprintf("torn record header at %d", off)
		}
		n := int64(binary.LittleEndian.Uint32(b[off:]))
		if n > ctMaxRecord || off+ctRecHeader+n > size {
			return -1, fmt.Sprintf("record at %d: length %d runs past the end (%d)", off, n, size)
		}
		if crc32.Checksum(b[off+8:off+ctRecHeader+n], ctCastagnoli) != binary.LittleEndian.Uint32(b[off+4:]) {
			return -1, fmt.Sprintf("record at %d: checksum mismatch", off)
		}
		return off + ctRecHeader + n, ""
	}
	accept := func(c int64) bool {
		end, _ := valid(c)
		if end < 0 || end == size {
			return end == size
		}
		next, _ := valid(end)
		return next >= 0
	}
	resync := func(at int64) int64 {
		if size-at >= ctRecHeader {
			if c := at + ctRecHeader + int64(binary.LittleEndian.Uint32(b[at:])); c < size && accept(c) {
				return c
			}
		}
		for c := at + 1; c+ctRecHeader <= size; c++ {
			if accept(c) {
				return c
			}
		}
		return -1
	}
	off := int64(ctSegHeader)
	for off < size {
		end, why := valid(off)
		if end >= 0 {
			recs = append(recs, [2]int64{off, end})
			off = end
			continue
		}
		if bad == "" {
			bad = why
		}
		if off = resync(off); off < 0 {
			break
		}
	}
	return recs, bad
}

// ctRecords returns the valid records of b (none if b is not a segment).
func ctRecords(b []byte) [][2]int64 {
	recs, _ := ctParseSeg(b)
	return recs
}

type ctAnalysis struct {
	unclean []string        // segments in which recovery must find damage, with the reason
	intact  map[string]bool // ids of expected messages whose whole body is in a record recovery keeps
}

// analyze reads the damaged store as the log's recovery will: in each
// segment, the records ctParseSeg keeps (before the first bad one, and
// after each damaged range that a valid record follows). A segment that
// does not parse cleanly to its end must be reported by the broker (except
// an empty last segment, which the store resets silently). A message that
// was neither acked nor dead-lettered before the stop, and whose body lies
// whole in a kept record, must be delivered. Directories in which a file
// other than a segment was damaged are left out of both: the broker may not
// know which queue they belong to.
func (r *ctRun) analyze(msgsDir string, dmg ctDamage) ctAnalysis {
	an := ctAnalysis{intact: map[string]bool{}}
	bySeg := map[string][]string{} // dir -> segment names, sorted
	filepath.WalkDir(msgsDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && ctIsSeg(d.Name()) {
			bySeg[filepath.Dir(path)] = append(bySeg[filepath.Dir(path)], d.Name())
		}
		return nil
	})
	for dir, names := range bySeg {
		if dmg.metaDirs[dir] {
			continue
		}
		slices.Sort(names)
		for i, name := range names {
			path := filepath.Join(dir, name)
			rel, _ := filepath.Rel(msgsDir, path)
			b, err := os.ReadFile(path)
			if err != nil {
				r.fatalf("%v", err)
			}
			recs, bad := ctParseSeg(b)
			last := i == len(names)-1
			if bad != "" && !(last && len(b) == 0) {
				an.unclean = append(an.unclean, rel+": "+bad)
			}
			for _, rec := range recs {
				r.findBodies(b[rec[0]+ctRecHeader:rec[1]], an.intact)
			}
		}
	}
	slices.Sort(an.unclean)
	for _, u := range an.unclean {
		r.t.Logf("recovery must find: %s", u)
	}
	return an
}

// findBodies marks the expected messages whose whole body is in payload.
func (r *ctRun) findBodies(payload []byte, found map[string]bool) {
	magic := []byte(ctBodyMagic)
	for i := 0; ; {
		j := bytes.Index(payload[i:], magic)
		if j < 0 {
			return
		}
		start := i + j
		i = start + 1
		nl := bytes.IndexByte(payload[start:min(len(payload), start+100)], '\n')
		if nl < 0 {
			continue
		}
		id := string(payload[start+len(magic) : start+nl])
		m, ok := r.msgs[id]
		if !ok || r.acked[id] || r.dead[id] || m.queue == ctQueueDLQ || start+m.size > len(payload) {
			continue
		}
		body := payload[start : start+m.size]
		if s := sha256.Sum256(body[:m.size-sha256.Size]); s == m.sum && bytes.Equal(body[m.size-sha256.Size:], m.sum[:]) {
			found[id] = true
		}
	}
}
