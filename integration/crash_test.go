package integration

// Crash test (issue 4): a warren subprocess under load (publishers with
// confirms, consumers acking and nacking into a dead-letter queue,
// per-message TTL expiries) is killed with SIGKILL at random moments, at
// least 50 times, and restarted on the same data directory each time.
// Afterwards every confirmed message must be accounted for exactly once:
// consumed and acked in the place its fate says (acked from crash.work, or
// dead-lettered into crash.dlq as rejected or expired), never in two
// places, never with a corrupt body, and no message that was never
// published may appear. Zero lost is the only pass.
//
// Run it alone:
//
//	go test -count=1 -run TestCrashUnderLoad -v ./integration
//
// WARREN_CRASH_SEED replays a run (the seed is printed at the start and in
// every failure); WARREN_CRASH_KILLS sets the number of kills (default 50;
// 0 runs one load round and a clean drain, with no kill). Rounds 0..N-1
// end with SIGKILL, round N (the last) ends cleanly, then the queues are
// drained and warren is stopped with SIGTERM. TestCrashAccounting checks
// the checker itself on made-up histories.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/warrenmq/warren/internal/testutil"
)

const (
	crashWork = "crash.work"
	crashTTL  = "crash.ttl"
	crashDLQ  = "crash.dlq"
	crashDLX  = "dlx"

	crashMaxTTLms   = 300 // per-message expirations are 50..300 ms
	crashPrefetch   = 50
	crashWindow     = 64 // unconfirmed publishes in flight per publisher
	crashMaxReports = 20 // offending ids listed per kind of failure
)

// A message's fate is a pure function of the seed and its id.
type crashFate int

const (
	crashFateAck    crashFate = iota // to crash.work, consumer acks
	crashFateReject                  // to crash.work, consumer nacks (requeue=false) into crash.dlq
	crashFateExpire                  // to crash.ttl with an expiration, expires into crash.dlq
)

func (f crashFate) String() string {
	return [...]string{"ack", "reject", "expire"}[f]
}

// Final places a message can be accounted in.
const (
	crashPlaceAcked    = "acked from crash.work"
	crashPlaceRejected = "crash.dlq: rejected from crash.work"
	crashPlaceExpired  = "crash.dlq: expired from crash.ttl"
	crashPlaceTTLLeft  = "still in crash.ttl after its expiration"
)

func (f crashFate) place() string {
	return [...]string{crashPlaceAcked, crashPlaceRejected, crashPlaceExpired}[f]
}

func crashMix(x uint64) uint64 { // splitmix64
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

type crashMsgSpec struct {
	fate       crashFate
	expiration string // for crashFateExpire
	payloadLen int
}

func crashSpec(seed, id uint64) crashMsgSpec {
	h := crashMix(seed ^ crashMix(id))
	h2 := crashMix(h)
	var s crashMsgSpec
	switch r := h % 100; {
	case r < 20:
		s.fate = crashFateExpire
		s.expiration = strconv.Itoa(50 + int((h>>32)%(crashMaxTTLms-50+1)))
	case r < 45:
		s.fate = crashFateReject
	default:
		s.fate = crashFateAck
	}
	if h2%100 == 0 {
		s.payloadLen = 8<<10 + int((h2>>8)%(56<<10)) // a few bodies span several frames
	} else {
		s.payloadLen = int((h2 >> 8) % 1024)
	}
	return s
}

// crashBody is id (8 bytes, big endian) | payload | sha256 of the rest.
// The payload is derived from the seed and the id, so a body can be
// checked byte for byte, not only by its checksum.
func crashBody(seed, id uint64) []byte {
	n := crashSpec(seed, id).payloadLen
	b := make([]byte, 8+n, 8+n+sha256.Size)
	binary.BigEndian.PutUint64(b, id)
	var key [32]byte
	binary.LittleEndian.PutUint64(key[0:], seed)
	binary.LittleEndian.PutUint64(key[8:], id)
	binary.LittleEndian.PutUint64(key[16:], 0x63726173682d7465) // "crash-te"
	rand.NewChaCha8(key).Read(b[8:])
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// crashVerify checks a delivery's body and properties; it returns the id
// and "" or a description of what is wrong.
func crashVerify(seed uint64, d *amqp.Delivery) (uint64, string) {
	b := d.Body
	if len(b) < 8+sha256.Size {
		return 0, fmt.Sprintf("body of %d bytes is too short (message-id %q)", len(b), d.MessageId)
	}
	sum := sha256.Sum256(b[:len(b)-sha256.Size])
	if !bytes.Equal(sum[:], b[len(b)-sha256.Size:]) {
		return 0, fmt.Sprintf("checksum mismatch in a %d-byte body (message-id %q)", len(b), d.MessageId)
	}
	id := binary.BigEndian.Uint64(b)
	if id == 0 {
		return 0, "id 0 was never published"
	}
	if d.MessageId != strconv.FormatUint(id, 10) {
		return id, fmt.Sprintf("message-id %q does not match the body's id", d.MessageId)
	}
	if !bytes.Equal(b, crashBody(seed, id)) {
		return id, fmt.Sprintf("body (%d bytes) differs from the one published, though its checksum verifies", len(b))
	}
	if d.DeliveryMode != amqp.Persistent {
		return id, fmt.Sprintf("delivery-mode %d, published 2", d.DeliveryMode)
	}
	if d.ContentType != "application/octet-stream" {
		return id, fmt.Sprintf("content-type %q, published application/octet-stream", d.ContentType)
	}
	return id, ""
}

// crashFirstDeath is the reason and queue of the first x-death entry.
func crashFirstDeath(d *amqp.Delivery) (reason, queue string) {
	xs, _ := d.Headers["x-death"].([]interface{})
	if len(xs) == 0 {
		return "(no x-death)", "?"
	}
	t, ok := xs[0].(amqp.Table)
	if !ok {
		return fmt.Sprintf("(x-death[0] is %T)", xs[0]), "?"
	}
	reason, _ = t["reason"].(string)
	queue, _ = t["queue"].(string)
	return reason, queue
}

type crashDelivery struct {
	round       int // -1: the final drain
	queue       string
	redelivered bool
	settled     bool   // we sent (or tried to send) ack or nack
	place       string // the final place this ack records; "" for a nack from crash.work
}

func (d crashDelivery) String() string {
	what := d.place
	if what == "" {
		what = "nacked from " + d.queue
	}
	if !d.settled {
		what = "delivered from " + d.queue + ", not settled"
	}
	round := "drain"
	if d.round >= 0 {
		round = fmt.Sprintf("round %d", d.round)
	}
	return fmt.Sprintf("%s: %s, redelivered=%v", round, what, d.redelivered)
}

// crashLedger is what the test process knows: attempted and confirmed
// publishes and every delivery, across rounds.
type crashLedger struct {
	seed   uint64
	nextID atomic.Uint64 // last id handed out

	mu         sync.Mutex
	confirmed  map[uint64]int // id -> round its confirm arrived in
	deliveries map[uint64][]crashDelivery
	corrupt    []string
	nacked     int // publishes answered with a nack or lost with the connection
}

func (l *crashLedger) confirm(round int, id uint64, ack bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ack {
		l.confirmed[id] = round
	} else {
		l.nacked++
	}
}

// take records a delivery from queue and settles it by the id's fate:
// crash.work acks or nacks (requeue=false), crash.dlq and crash.ttl ack.
// The delivery is recorded before the ack is sent: an ack lost in a crash
// counts as sent, which only allows a redelivery (flagged redelivered).
func (l *crashLedger) take(round int, queue string, d *amqp.Delivery) error {
	id, problem := crashVerify(l.seed, d)
	if problem != "" {
		l.mu.Lock()
		l.corrupt = append(l.corrupt, fmt.Sprintf("round %d (-1: drain), %s, id %d: %s", round, queue, id, problem))
		l.mu.Unlock()
		return d.Ack(false) // out of the way; the id, if confirmed, will show as lost
	}
	rec := crashDelivery{round: round, queue: queue, redelivered: d.Redelivered, settled: true}
	nack := false
	switch queue {
	case crashWork:
		if crashSpec(l.seed, id).fate == crashFateReject {
			nack = true
		} else {
			rec.place = crashPlaceAcked
		}
	case crashDLQ:
		reason, from := crashFirstDeath(d)
		rec.place = "crash.dlq: " + reason + " from " + from
	case crashTTL:
		rec.place = crashPlaceTTLLeft
	}
	l.mu.Lock()
	l.deliveries[id] = append(l.deliveries[id], rec)
	l.mu.Unlock()
	if nack {
		return d.Nack(false, false)
	}
	return d.Ack(false)
}

// crashRound is the load against one life of the broker.
type crashRound struct {
	n      int
	url    string
	ledger *crashLedger
	stop   chan struct{}
	wg     sync.WaitGroup
	errs   chan crashErr
}

type crashErr struct {
	at  time.Time
	who string
	err error
}

func (r *crashRound) fail(who string, err error) {
	select {
	case r.errs <- crashErr{time.Now(), who, err}:
	default: // enough collected
	}
}

func (r *crashRound) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

func (r *crashRound) dial(who string) (*amqp.Connection, *amqp.Channel, bool) {
	c, err := amqp.Dial(r.url)
	if err != nil {
		r.fail(who, fmt.Errorf("dial: %w", err))
		return nil, nil, false
	}
	ch, err := c.Channel()
	if err != nil {
		c.Close()
		r.fail(who, fmt.Errorf("channel: %w", err))
		return nil, nil, false
	}
	return c, ch, true
}

// publish sends messages with confirms until stopped or the connection
// dies. An id is confirmed only when its basic.ack arrives.
func (r *crashRound) publish(who string) {
	defer r.wg.Done()
	c, ch, ok := r.dial(who)
	if !ok {
		return
	}
	defer c.Close()
	if err := ch.Confirm(false); err != nil {
		r.fail(who, fmt.Errorf("confirm.select: %w", err))
		return
	}
	type pending struct {
		id uint64
		dc *amqp.DeferredConfirmation
	}
	var inflight []pending
	settle := func(p pending) {
		r.ledger.confirm(r.n, p.id, p.dc.Acked())
	}
	// settleAll waits for every outstanding confirm: it arrives, or the
	// library nacks it when the connection closes.
	defer func() {
		timeout := time.After(30 * time.Second)
		for i, p := range inflight {
			select {
			case <-p.dc.Done():
				settle(p)
			case <-timeout:
				r.fail(who, fmt.Errorf("%d confirms still outstanding after 30 s", len(inflight)-i))
				return
			}
		}
	}()
	for !r.stopped() {
		// Settle what is confirmed at the front; wait while the window
		// is full.
	front:
		for len(inflight) > 0 {
			if len(inflight) < crashWindow {
				select {
				case <-inflight[0].dc.Done():
				default:
					break front
				}
			} else {
				select {
				case <-inflight[0].dc.Done():
				case <-r.stop:
					return
				}
			}
			settle(inflight[0])
			inflight = inflight[1:]
		}
		id := r.ledger.nextID.Add(1)
		spec := crashSpec(r.ledger.seed, id)
		key := crashWork
		if spec.fate == crashFateExpire {
			key = crashTTL
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", key, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent,
			ContentType:  "application/octet-stream",
			MessageId:    strconv.FormatUint(id, 10),
			Expiration:   spec.expiration,
			Body:         crashBody(r.ledger.seed, id),
		})
		if err != nil {
			r.fail(who, fmt.Errorf("publish %d: %w", id, err))
			return
		}
		inflight = append(inflight, pending{id, dc})
	}
}

// consume settles deliveries from queue until stopped or the connection
// dies.
func (r *crashRound) consume(who, queue string) {
	defer r.wg.Done()
	c, ch, ok := r.dial(who)
	if !ok {
		return
	}
	defer c.Close()
	if err := ch.Qos(crashPrefetch, 0, false); err != nil {
		r.fail(who, fmt.Errorf("qos: %w", err))
		return
	}
	dels, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		r.fail(who, fmt.Errorf("consume: %w", err))
		return
	}
	for {
		select {
		case <-r.stop:
			return
		case d, ok := <-dels:
			if !ok {
				r.fail(who, fmt.Errorf("deliveries closed: %v", c.IsClosed()))
				return
			}
			if err := r.ledger.take(r.n, queue, &d); err != nil {
				r.fail(who, fmt.Errorf("settle: %w", err))
				return
			}
		}
	}
}

// crashTopology declares the exchange and queues; after a restart it first
// checks that they survived.
func crashTopology(ch *amqp.Channel, restarted bool) error {
	if restarted {
		for _, q := range []string{crashWork, crashTTL, crashDLQ} {
			if _, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err != nil {
				return fmt.Errorf("durable queue %s lost across SIGKILL: %w", q, err)
			}
		}
	}
	dl := amqp.Table{"x-dead-letter-exchange": crashDLX}
	if err := ch.ExchangeDeclare(crashDLX, "fanout", true, false, false, false, nil); err != nil {
		return err
	}
	for _, q := range []struct {
		name string
		args amqp.Table
	}{{crashDLQ, nil}, {crashWork, dl}, {crashTTL, dl}} {
		if _, err := ch.QueueDeclare(q.name, true, false, false, false, q.args); err != nil {
			return fmt.Errorf("declare %s: %w", q.name, err)
		}
	}
	return ch.QueueBind(crashDLQ, "", crashDLX, false, nil)
}

func TestCrashUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: builds warren and kills it 50 times")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("WARREN_CRASH_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("WARREN_CRASH_SEED=%q: %v", s, err)
		}
		seed = v
	}
	kills := 20 // 50 with WARREN_LONG=1 (CI's long step)
	if testutil.LongOn() {
		kills = 50
	}
	if s := os.Getenv("WARREN_CRASH_KILLS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			t.Fatalf("WARREN_CRASH_KILLS=%q: want a count >= 0", s)
		}
		kills = v
	}
	replay := fmt.Sprintf("seed %d (replay: WARREN_CRASH_SEED=%d WARREN_CRASH_KILLS=%d go test -count=1 -run TestCrashUnderLoad ./integration)",
		seed, seed, kills)
	t.Logf("crash test: %s", replay)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	start := time.Now()

	goroutines := runtime.NumGoroutine()
	ledger := &crashLedger{seed: seed, confirmed: map[uint64]int{}, deliveries: map[uint64][]crashDelivery{}}
	// A small in-memory window (spill.go) puts most queued messages on disk
	// only, so that kills land in the spill, refill and expire-on-disk
	// paths too, not only in the in-memory ones.
	p := startProc(t, t.TempDir(), "--queue-window", "32")
	var unexpected []string // errors from a live broker, before any kill

	// Rounds 0..kills-1 end with SIGKILL; the last round ends cleanly.
	for round := 0; round <= kills; round++ {
		last := round == kills
		if round > 0 {
			p.Start()
		}
		c, ch := rsDial(t, p.URL())
		if err := crashTopology(ch, round > 0); err != nil {
			t.Fatalf("round %d: topology: %v\n%s", round, err, replay)
		}
		c.Close()

		r := &crashRound{n: round, url: p.URL(), ledger: ledger, stop: make(chan struct{}), errs: make(chan crashErr, 64)}
		pubs, works := 1+rng.IntN(2), 1+rng.IntN(2)
		r.wg.Add(pubs + works + 1)
		for i := range pubs {
			go r.publish(fmt.Sprintf("publisher %d", i))
		}
		for i := range works {
			go r.consume(fmt.Sprintf("consumer %d on %s", i, crashWork), crashWork)
		}
		go r.consume("consumer on "+crashDLQ, crashDLQ)

		time.Sleep(time.Duration(20+rng.IntN(381)) * time.Millisecond)

		exited, exitErr := p.Exited()
		killAt := time.Now().Add(time.Hour) // the last round is not killed
		if !exited && !last {
			killAt = time.Now()
			p.Kill()
		}
		close(r.stop)
		joined := make(chan struct{})
		go func() { r.wg.Wait(); close(joined) }()
		select {
		case <-joined:
		case <-time.After(60 * time.Second):
			t.Fatalf("round %d: load goroutines did not exit within 60 s of the round's end (harness bug)\n%s", round, replay)
		}
		close(r.errs)
		for e := range r.errs {
			if e.at.Before(killAt) {
				unexpected = append(unexpected, fmt.Sprintf("round %d, %s: %v", round, e.who, e.err))
			}
		}
		if exited {
			t.Fatalf("round %d: warren exited on its own (%v) before the kill; its output:\n%s\n%s",
				round, exitErr, p.Output(), replay)
		}
	}

	// Drain: everything still queued is consumed by the same rules.
	c, ch := rsDial(t, p.URL())
	drain := func(queue string) int {
		n := 0
		for {
			d, ok, err := ch.Get(queue, false)
			if err != nil {
				t.Fatalf("drain: get %s: %v\n%s", queue, err, replay)
			}
			if !ok {
				return n
			}
			if err := ledger.take(-1, queue, &d); err != nil {
				t.Fatalf("drain: settle from %s: %v\n%s", queue, err, replay)
			}
			n++
		}
	}
	count := func(queue string) int {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			t.Fatalf("drain: %s: %v\n%s", queue, err, replay)
		}
		return q.Messages
	}
	drainStart := time.Now()
	// crash.ttl has no consumer: its messages dead-letter by expiring. Give
	// them well beyond the longest expiration before calling one stuck.
	ttlDeadline := drainStart.Add(10 * time.Second)
	// A dead letter moving through the store (persistent, from crash.ttl
	// or crash.work to crash.dlq) is counted in neither queue until the
	// target's fsync: all queues must stay empty for a while, not once.
	var emptySince time.Time
	for {
		n := drain(crashWork)
		if time.Now().After(ttlDeadline) {
			n += drain(crashTTL)
		}
		n += drain(crashDLQ)
		if n == 0 && count(crashWork)+count(crashDLQ) == 0 && count(crashTTL) == 0 {
			if emptySince.IsZero() {
				emptySince = time.Now()
			}
			if time.Since(emptySince) > 500*time.Millisecond {
				break
			}
		} else {
			emptySince = time.Time{}
		}
		if time.Since(drainStart) > 2*time.Minute {
			t.Fatalf("drain: queues not empty after 2 minutes: %s %d, %s %d, %s %d\n%s",
				crashWork, count(crashWork), crashTTL, count(crashTTL), crashDLQ, count(crashDLQ), replay)
		}
		if n == 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	c.Close()
	p.Stop()

	// Every goroutine of the load (and of its connections) has ended.
	if !testutil.Until(10*time.Second, func() bool { return runtime.NumGoroutine() <= goroutines }) {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("goroutines leaked: %d at the start, %d after the drain (harness bug):\n%s\n%s",
			goroutines, runtime.NumGoroutine(), buf, replay)
	}

	// Accounting.
	res := crashAccount(ledger)
	t.Logf("crash test: %d kills, %d rounds in %v (final drain %v); ids handed out %d, confirmed %d, not confirmed %d (%d of those delivered anyway); "+
		"%s %d, %s %d, %s %d; deliveries flagged redelivered %d; lost %d",
		kills, kills+1, time.Since(start).Round(time.Millisecond), time.Since(drainStart).Round(time.Millisecond),
		res.maxID, len(ledger.confirmed), ledger.nacked, res.unconfirmedSeen,
		crashPlaceAcked, res.byPlace[crashPlaceAcked], crashPlaceRejected, res.byPlace[crashPlaceRejected],
		crashPlaceExpired, res.byPlace[crashPlaceExpired], res.redeliveries, len(res.lost))

	report := func(kind string, list []string, shown ...string) {
		if len(list) == 0 {
			return
		}
		if shown == nil {
			shown = list[:min(len(list), crashMaxReports)]
		}
		more := ""
		if len(list) > len(shown) {
			more = fmt.Sprintf("\n  ... and %d more", len(list)-len(shown))
		}
		t.Errorf("%s: %d\n  %s%s\n%s", kind, len(list), strings.Join(shown, "\n  "), more, replay)
	}
	report("errors from the client while the broker was up (before any kill)", unexpected)
	if len(res.lost) > 0 {
		var sample []string // the first few of each fate
		for _, l := range res.lostByFate {
			sample = append(sample, l[:min(len(l), crashMaxReports/3)]...)
		}
		report(fmt.Sprintf("confirmed messages lost (by fate: ack %d, reject %d, expire %d)", len(res.lostByFate[crashFateAck]),
			len(res.lostByFate[crashFateReject]), len(res.lostByFate[crashFateExpire])), res.lost, sample...)
	}
	report("corrupt deliveries", ledger.corrupt)
	report("messages that were never published", res.unpublished)
	report("messages accounted in more than one place", res.twice)
	report("messages in the wrong place", res.misplaced)
	report("deliveries repeated after an ack or nack without redelivered=true", res.dupNotRedelivered)
}

type crashResult struct {
	maxID                                                  uint64
	lost, misplaced, twice, dupNotRedelivered, unpublished []string
	lostByFate                                             [3][]string
	byPlace                                                map[string]int
	redeliveries, unconfirmedSeen                          int
}

// crashAccount checks the ledger once the queues are drained: every
// confirmed id in exactly one final place, the one its fate says; a second
// delivery from a queue after an ack or nack there only with
// redelivered=true; no id beyond those handed out.
func crashAccount(l *crashLedger) crashResult {
	res := crashResult{maxID: l.nextID.Load(), byPlace: map[string]int{}}
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]uint64, 0, len(l.deliveries)+len(l.confirmed))
	for id := range l.deliveries {
		ids = append(ids, id)
	}
	for id := range l.confirmed {
		if _, ok := l.deliveries[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)

	history := func(id uint64) string {
		ds := l.deliveries[id]
		if len(ds) == 0 {
			return "never delivered"
		}
		s := make([]string, len(ds))
		for i, d := range ds {
			s[i] = d.String()
		}
		return strings.Join(s, "; ")
	}
	for _, id := range ids {
		spec := crashSpec(l.seed, id)
		round, confirmed := l.confirmed[id]
		desc := func(what string) string {
			c := "not confirmed"
			if confirmed {
				c = fmt.Sprintf("confirmed in round %d", round)
			}
			return fmt.Sprintf("id %d (fate %s, %s): %s; %s", id, spec.fate, c, what, history(id))
		}
		ds := l.deliveries[id]
		if id > res.maxID {
			res.unpublished = append(res.unpublished, desc(fmt.Sprintf("delivered, but ids only went up to %d", res.maxID)))
			continue
		}
		places := map[string]int{}
		settledIn := map[string]bool{}
		for _, d := range ds {
			if d.redelivered {
				res.redeliveries++
			}
			if settledIn[d.queue] && !d.redelivered {
				res.dupNotRedelivered = append(res.dupNotRedelivered, desc(fmt.Sprintf(
					"delivered again from %s without redelivered=true after it was acked or nacked there", d.queue)))
			}
			if d.settled {
				settledIn[d.queue] = true
			}
			if d.place != "" {
				places[d.place]++
			}
		}
		if len(ds) > 0 && !confirmed {
			res.unconfirmedSeen++
		}
		switch {
		case len(places) == 0:
			if confirmed {
				res.lost = append(res.lost, desc("confirmed message lost"))
				res.lostByFate[spec.fate] = append(res.lostByFate[spec.fate], res.lost[len(res.lost)-1])
			}
		case len(places) > 1:
			res.twice = append(res.twice, desc("accounted in more than one place"))
		default:
			for pl := range places {
				res.byPlace[pl]++
				if pl != spec.fate.place() {
					res.misplaced = append(res.misplaced, desc(fmt.Sprintf("ended as %q, want %q", pl, spec.fate.place())))
				}
			}
		}
	}
	return res
}

// crashFakeAck settles deliveries made up by TestCrashAccounting.
type crashFakeAck struct{ acks, nacks int }

func (a *crashFakeAck) Ack(uint64, bool) error        { a.acks++; return nil }
func (a *crashFakeAck) Nack(uint64, bool, bool) error { a.nacks++; return nil }
func (a *crashFakeAck) Reject(uint64, bool) error     { a.nacks++; return nil }

// TestCrashAccounting checks the crash test's checker on made-up
// histories: each kind of violation is caught, and legal histories (an ack
// lost in a crash, then a redelivery) pass.
func TestCrashAccounting(t *testing.T) {
	const seed = 42
	l := &crashLedger{seed: seed, confirmed: map[uint64]int{}, deliveries: map[uint64][]crashDelivery{}}
	ack := &crashFakeAck{}
	msg := func(id uint64, redelivered bool, death ...string) *amqp.Delivery {
		d := &amqp.Delivery{Acknowledger: ack, Body: crashBody(seed, id), MessageId: strconv.FormatUint(id, 10),
			DeliveryMode: amqp.Persistent, ContentType: "application/octet-stream", Redelivered: redelivered}
		if len(death) == 2 {
			d.Headers = amqp.Table{"x-death": []interface{}{amqp.Table{"reason": death[0], "queue": death[1], "count": int64(1)}}}
		}
		return d
	}
	take := func(queue string, d *amqp.Delivery) {
		t.Helper()
		if err := l.take(0, queue, d); err != nil {
			t.Fatal(err)
		}
	}
	// Ids by fate, in order.
	byFate := map[crashFate][]uint64{}
	for id := uint64(1); len(byFate[crashFateAck]) < 8 || len(byFate[crashFateReject]) < 8 || len(byFate[crashFateExpire]) < 8; id++ {
		s := crashSpec(seed, id)
		byFate[s.fate] = append(byFate[s.fate], id)
		if s.fate == crashFateExpire {
			if ms, err := strconv.Atoi(s.expiration); err != nil || ms < 50 || ms > crashMaxTTLms {
				t.Fatalf("id %d: expiration %q", id, s.expiration)
			}
		} else if s.expiration != "" {
			t.Fatalf("id %d (fate %s) has an expiration", id, s.fate)
		}
	}
	a, r, e := byFate[crashFateAck][:8], byFate[crashFateReject][:8], byFate[crashFateExpire][:8]
	var maxID uint64
	for _, ids := range byFate {
		for i, id := range ids {
			if i < 8 {
				l.confirmed[id] = 0
			}
			maxID = max(maxID, id)
		}
	}
	l.nextID.Store(maxID)

	// Legal histories.
	take(crashWork, msg(a[0], false))
	take(crashWork, msg(a[1], false))
	take(crashWork, msg(a[1], true)) // ack lost in a crash, redelivered
	take(crashWork, msg(r[0], false))
	take(crashDLQ, msg(r[0], false, "rejected", crashWork))
	take(crashWork, msg(r[1], false))
	take(crashWork, msg(r[1], true)) // nack lost in a crash
	take(crashDLQ, msg(r[1], false, "rejected", crashWork))
	take(crashDLQ, msg(e[0], false, "expired", crashTTL))
	take(crashDLQ, msg(e[0], true, "expired", crashTTL))
	l.deliveries[a[7]] = append(l.deliveries[a[7]], crashDelivery{queue: crashWork, redelivered: false}) // delivered, not settled
	take(crashWork, msg(a[7], false))
	delete(l.confirmed, a[6]) // not confirmed, never delivered: allowed
	// Violations.
	take(crashWork, msg(r[2], false))                        // lost: nacked, never reached the DLQ
	take(crashWork, msg(a[3], false))                        // duplicate without redelivered
	take(crashWork, msg(a[3], false))                        //
	take(crashWork, msg(a[4], false))                        // two places
	take(crashDLQ, msg(a[4], false, "rejected", crashWork))  //
	take(crashDLQ, msg(e[1], false, "rejected", crashWork))  // wrong reason
	take(crashTTL, msg(e[2], false))                         // never expired
	take(crashDLQ, msg(r[3], false, "expired", crashWork))   // wrong reason
	take(crashDLQ, msg(maxID+1, false, "expired", crashTTL)) // never published
	bad := msg(a[5], false)
	bad.Body[len(bad.Body)/2] ^= 1 // corrupt body: shows as corrupt and lost
	take(crashWork, bad)
	forged := msg(a[5], false)
	forged.Body = append(forged.Body[:len(forged.Body)-sha256.Size], 'x')
	sum := sha256.Sum256(forged.Body)
	forged.Body = append(forged.Body, sum[:]...)
	take(crashWork, forged)
	nonPersistent := msg(a[5], false)
	nonPersistent.DeliveryMode = amqp.Transient
	take(crashWork, nonPersistent)
	wrongID := msg(a[5], false)
	wrongID.MessageId = "7"
	take(crashWork, wrongID)

	res := crashAccount(l)
	check := func(kind string, got []string, want ...uint64) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("%s: got %d, want %d:\n  %s", kind, len(got), len(want), strings.Join(got, "\n  "))
			return
		}
		for i, id := range want {
			if !strings.HasPrefix(got[i], fmt.Sprintf("id %d ", id)) {
				t.Errorf("%s: got %s, want id %d", kind, got[i], id)
			}
		}
	}
	lost := []uint64{a[2], a[5], r[2], r[4], r[5], r[6], r[7], e[3], e[4], e[5], e[6], e[7]}
	slices.Sort(lost)
	check("lost", res.lost, lost...)
	check("two places", res.twice, a[4])
	wrong := []uint64{e[1], e[2], r[3]}
	slices.Sort(wrong)
	check("wrong place", res.misplaced, wrong...)
	check("duplicate not redelivered", res.dupNotRedelivered, a[3])
	check("never published", res.unpublished, maxID+1)
	if len(l.corrupt) != 4 {
		t.Errorf("corrupt: got %d, want 4:\n  %s", len(l.corrupt), strings.Join(l.corrupt, "\n  "))
	}
	if want := 4; ack.nacks != want {
		t.Errorf("nacks: got %d, want %d (one per delivery of a reject-fated id from crash.work)", ack.nacks, want)
	}
	if res.byPlace[crashPlaceAcked] != 4 || res.byPlace[crashPlaceRejected] != 3 || res.byPlace[crashPlaceExpired] != 1 {
		t.Errorf("by place: %v", res.byPlace)
	}
}
