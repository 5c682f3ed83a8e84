package integration

// The client programs of the differential dead-letter tests
// (dlx_diff_test.go). Names follow the upstream tests where one exists
// (spec §7: T:dl = dead_lettering_SUITE, T:len = queue_length_limits_SUITE,
// J = the Java client's broker tests).

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// dlArgs are the arguments of a queue dead-lettering to dlx, with a
// dead-letter routing key when dlrk is not "".
func dlArgs(dlx, dlrk string, more ...any) amqp.Table {
	a := amqp.Table{"x-dead-letter-exchange": dlx}
	if dlrk != "" {
		a["x-dead-letter-routing-key"] = dlrk
	}
	for i := 0; i+1 < len(more); i += 2 {
		a[more[i].(string)] = more[i+1]
	}
	return a
}

// pubN publishes bodies to the default exchange with routing key q.
func (s *ddSession) pubN(q string, bodies ...string) {
	s.t.Helper()
	for _, b := range bodies {
		s.pub("", q, b)
	}
}

// ttlWait is a bound for TTL expiries of ~100 ms to show up.
const ttlWait = 3 * time.Second

var ddScenarios = []ddScenario{
	// --- reject / nack (R5.1, R5.2, R3.1, R3.11) ---
	{name: "dead_letter_nack", rules: "R5.2 R3.1 R3.4 R3.5", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k"))
		s.pubN(q, "m1", "m2", "m3")
		ds := s.getN(q, 3, false)
		for _, d := range ds {
			s.nack(d, false, false)
		}
		s.awaitCount("", dlq, 3, ddWait)
		s.getN(dlq, 3, true)
		s.count(q)
	}},
	{name: "dead_letter_multiple_nack", rules: "R5.2 R3.11", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k"))
		s.pubN(q, "m1", "m2", "m3")
		ds := s.getN(q, 3, false)
		if len(ds) == 3 {
			s.nack(ds[2], true, false)
		}
		s.awaitCount("", dlq, 3, ddWait)
		s.getN(dlq, 3, true)
		s.count(q)
	}},
	{name: "dead_letter_nack_requeue", rules: "R5.1", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k"))
		s.pubN(q, "m1", "m2", "m3")
		ds := s.getN(q, 3, false)
		if len(ds) == 3 {
			s.nack(ds[2], true, true)
		}
		s.getN(q, 3, true)
		s.count(dlq)
	}},
	{name: "dead_letter_reject", rules: "R5.2", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k"))
		s.pubN(q, "m1", "m2")
		if d, ok := s.get(q, false); ok {
			s.reject(d, false)
		}
		s.awaitCount("", dlq, 1, ddWait)
		s.getN(dlq, 1, true)
		s.count(q)
	}},
	{name: "dead_letter_reject_many", rules: "R3.11", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k"))
		s.pubN(q, "m1", "m2", "m3", "m4", "m5")
		ds := s.recvN(q, s.consume(q), 5)
		for _, d := range ds {
			s.reject(d, false)
		}
		s.awaitCount("", dlq, 5, ddWait)
		s.getN(dlq, 5, true)
	}},
	{name: "dead_letter_reject_requeue", rules: "R5.1", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k"))
		s.pubN(q, "m1", "m2")
		if d, ok := s.get(q, false); ok {
			s.reject(d, true)
		}
		s.getN(q, 2, true)
		s.count(dlq)
	}},
	{name: "dead_letter_nack_requeue_nack_norequeue_basic_get", rules: "R5.1 R5.2 R3.11", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k"))
		s.pubN(q, "m1", "m2", "m3")
		if ds := s.getN(q, 3, false); len(ds) == 3 {
			s.nack(ds[2], true, true)
		}
		if ds := s.getN(q, 3, false); len(ds) == 3 {
			s.nack(ds[2], true, false)
		}
		s.awaitCount("", dlq, 3, ddWait)
		s.getN(dlq, 3, true)
	}},
	{name: "dead_letter_nack_requeue_nack_norequeue_basic_consume", rules: "R5.1 R5.2 R3.11", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k"))
		s.pubN(q, "m1", "m2", "m3")
		ds := s.consume(q)
		if got := s.recvN(q, ds, 3); len(got) == 3 {
			s.nack(got[2], true, true)
		}
		if got := s.recvN(q, ds, 3); len(got) == 3 {
			s.nack(got[2], true, false)
		}
		s.awaitCount("", dlq, 3, ddWait)
		s.getN(dlq, 3, true)
	}},
	{name: "deadLetterNoDeadLetterQueue", rules: "R3.2 R5.2", run: func(s *ddSession) {
		// No DLX: a rejected message is discarded.
		q := s.queue("q", nil)
		s.pubN(q, "m1")
		if d, ok := s.get(q, false); ok {
			s.reject(d, false)
		}
		s.count(q)
	}},

	// --- TTL (R2.x) ---
	{name: "dead_letter_ttl", rules: "R2.2 R2.6 R3.1", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k", "x-message-ttl", int32(100)))
		s.pubN(q, "m1", "m2")
		s.awaitCount("", dlq, 2, ttlWait)
		s.count(q)
		s.getN(dlq, 2, true)
	}},
	{name: "dead_letter_headers_reason_expired_per_message", rules: "R2.6 R3.4", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k"))
		s.publish("", q, false, amqp.Publishing{Body: []byte("m1"), Expiration: "100"})
		s.awaitCount("", dlq, 1, ttlWait)
		s.count(q)
		s.getN(dlq, 1, true)
	}},
	{name: "expired_per_message_behind_head", rules: "R2.4 (Warren improvement)", run: func(s *ddSession) {
		// The head has no TTL; m2 behind it expires. RabbitMQ keeps m2
		// until it reaches the head; Warren expires it where it is.
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k"))
		s.pub("", q, "m1")
		s.publish("", q, false, amqp.Publishing{Body: []byte("m2"), Expiration: "100"})
		s.pub("", q, "m3")
		s.awaitCount("behind-head-dlq", dlq, 1, ddQuiet)
		s.countL("behind-head-q", q)
		s.get(q, true) // m1 leaves the head
		s.awaitCount("", dlq, 1, ttlWait)
		s.getN(q, 1, true)
		s.getN(dlq, 1, true)
	}},
	{name: "deadLetterPerMessageTTLRemoved", rules: "R2.6 R3.10", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k"))
		s.publish("", q, false, amqp.Publishing{Body: []byte("m1"), Expiration: "60000"})
		if d, ok := s.get(q, false); ok {
			s.reject(d, false)
		}
		s.awaitCount("", dlq, 1, ddWait)
		s.getN(dlq, 1, true)
	}},
	{name: "smallerPerQueueExpiryWins", rules: "R2.2 R2.6", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k", "x-message-ttl", int32(100)))
		s.publish("", q, false, amqp.Publishing{Body: []byte("long"), Expiration: "60000"})
		s.publish("", q, false, amqp.Publishing{Body: []byte("short"), Expiration: "50"})
		s.awaitCount("", dlq, 2, ttlWait)
		s.getN(dlq, 2, true)
	}},
	{name: "zeroTTL", rules: "R2.5", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k", "x-message-ttl", int32(0)))
		s.publish("", q, true, amqp.Publishing{Body: []byte("nobody-waiting")})
		s.awaitCount("", dlq, 1, ttlWait)
		s.count(q)
		ds := s.consume(q)
		s.publish("", q, true, amqp.Publishing{Body: []byte("consumer-waiting")})
		if got := s.recvN(q, ds, 1); len(got) == 1 {
			s.ack(got[0], false)
		}
		s.count(dlq)
		s.getN(dlq, 1, true)
	}},
	{name: "expiryWithRequeue", rules: "R2.3", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k", "x-message-ttl", int32(150)))
		start := time.Now()
		s.pubN(q, "m1")
		d, ok := s.get(q, false)
		sleepUntil(start.Add(400 * time.Millisecond)) // past m1's deadline, while unacked
		s.count(dlq)
		if ok {
			s.nack(d, false, true)
		}
		s.awaitCount("", dlq, 1, ttlWait)
		s.count(q)
		s.getN(dlq, 1, true)
	}},
	{name: "x_expires_no_dead_letter", rules: "R2.7 R3.1", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k", "x-expires", int32(150)))
		start := time.Now()
		s.pubN(q, "m1", "m2")
		// Any queue.declare, passive too, renews the lease on RabbitMQ
		// (see x_expires_passive_declare_renews): wait without touching q.
		sleepUntil(start.Add(600 * time.Millisecond))
		s.rec(ddRec{"kind": "exists", "queue": q, "exists": s.exists(q)})
		s.count(dlq)
	}},
	{name: "x_expires_passive_declare_renews", rules: "R2.7",
		run: func(s *ddSession) {
			q := s.queue("q", amqp.Table{"x-expires": int32(200)})
			deadline := time.Now().Add(600 * time.Millisecond)
			for time.Now().Before(deadline) && s.exists(q) {
				time.Sleep(50 * time.Millisecond)
			}
			s.rec(ddRec{"kind": "exists", "queue": q, "exists": s.exists(q)})
		}},

	// --- length limits (R4.x) ---
	{name: "dead_letter_max_length_drop_head", rules: "R4.2 R3.1 R3.4", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k", "x-max-length", int32(1)))
		s.pubN(q, "m1", "m2", "m3")
		s.awaitCount("", dlq, 2, ddWait)
		s.getN(dlq, 2, true)
		s.getN(q, 1, true)
	}},
	{name: "dead_letter_max_length_reject_publish_dlx", rules: "R4.6", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k", "x-max-length", int32(1), "x-overflow", "reject-publish-dlx"))
		s.pubN(q, "m1", "m2", "m3")
		s.awaitCount("", dlq, 2, ddWait)
		s.getN(dlq, 2, true)
		s.getN(q, 1, true)
	}},
	{name: "max_length_reject_confirm", rules: "R4.5", run: func(s *ddSession) {
		q := s.queue("q", amqp.Table{"x-max-length": int32(2), "x-overflow": "reject-publish"})
		s.pubN(q, "m1", "m2", "m3")
		s.get(q, true)
		s.pubN(q, "m4")
		s.getN(q, 2, true)
	}},
	{name: "max_length_drop_publish", rules: "R4.5", run: func(s *ddSession) {
		q := s.queue("q", amqp.Table{"x-max-length": int32(2), "x-overflow": "reject-publish"})
		s.publishPlain("", q, q, "m1", "m2", "m3")
		s.count(q)
		s.getN(q, 2, true)
	}},
	{name: "max_length_bytes_drop_head", rules: "R4.1 R4.2", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k", "x-max-length-bytes", int32(10)))
		s.pubN(q, "aaaa", "bbbb", "cccc")
		s.awaitCount("", dlq, 1, ddWait)
		s.getN(dlq, 1, true)
		s.getN(q, 2, true)
	}},
	{name: "max_length_bytes_reject_publish_other_queue", rules: "R4.5", run: func(s *ddSession) {
		// The message routes to a full queue and a free one: the free one
		// takes it, the publisher still gets a nack.
		x := s.exchange("fan", "fanout")
		full := s.queue("full", amqp.Table{"x-max-length-bytes": int32(4), "x-overflow": "reject-publish"})
		free := s.queue("free", nil)
		s.bind(full, "", x, nil)
		s.bind(free, "", x, nil)
		s.pub(x, "", "aaaa")
		s.pub(x, "", "b")
		s.count(full)
		s.count(free)
	}},
	{name: "queueSizeUnacked", rules: "R4.1", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k", "x-max-length", int32(1)))
		s.pubN(q, "m1")
		s.get(q, false)
		s.pubN(q, "m2", "m3")
		s.awaitCount("", dlq, 1, ddWait)
		s.count(q)
		s.getN(dlq, 1, true)
	}},
	{name: "requeueWithDlx", rules: "R4.4", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k", "x-max-length", int32(1)))
		s.pubN(q, "m1")
		d, ok := s.get(q, false)
		s.pubN(q, "m2")
		if ok {
			s.nack(d, false, true)
		}
		s.awaitCount("", dlq, 1, ddWait)
		s.getN(dlq, 1, true)
		s.getN(q, 1, true)
	}},
	{name: "max_length_drop_publish_requeue", rules: "R4.4", run: func(s *ddSession) {
		q := s.queue("q", amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
		s.pubN(q, "m1")
		d, ok := s.get(q, false)
		s.pubN(q, "m2")
		if ok {
			s.nack(d, false, true)
		}
		// RabbitMQ answers the passive declare before it handles the
		// requeue (gen_server2 priorities): poll.
		s.awaitCount("", q, 2, ddWait)
		s.getN(q, 2, true)
	}},

	// --- targets and routing (R3.2, R3.3) ---
	{name: "dead_letter_missing_exchange", rules: "R3.2", run: func(s *ddSession) {
		q := s.queue("q", dlArgs(s.n("dlx"), "k"))
		s.pubN(q, "m1", "m2")
		if d, ok := s.get(q, false); ok {
			s.reject(d, false)
		}
		s.count(q)
		dlx, dlq := s.dlx("k")
		_ = dlx
		if d, ok := s.get(q, false); ok {
			s.reject(d, false)
		}
		s.awaitCount("", dlq, 1, ddWait)
		s.getN(dlq, 1, true)
	}},
	{name: "dead_letter_routing_key", rules: "R3.3", run: func(s *ddSession) {
		// No DLRK: the message keeps its routing key.
		x := s.exchange("x", "direct")
		dlx, dlq := s.dlx("k1")
		q := s.queue("q", dlArgs(dlx, ""))
		s.bind(q, "k1", x, nil)
		s.pub(x, "k1", "m1")
		if d, ok := s.get(q, false); ok {
			s.reject(d, false)
		}
		s.awaitCount("", dlq, 1, ddWait)
		s.getN(dlq, 1, true)
	}},
	{name: "dead_letter_routing_key_header_CC", rules: "R3.3 R3.4 R3.6", run: func(s *ddSession) {
		x := s.exchange("x", "direct")
		dlx := s.exchange("dlx", "direct")
		dlq1 := s.queue("dlq1", nil)
		dlq2 := s.queue("dlq2", nil)
		s.bind(dlq1, "k1", dlx, nil)
		s.bind(dlq2, "k2", dlx, nil)
		q := s.queue("q", dlArgs(dlx, ""))
		s.bind(q, "k1", x, nil)
		s.publish(x, "k1", false, amqp.Publishing{Body: []byte("m1"), Headers: amqp.Table{"CC": []any{"k2"}}})
		if d, ok := s.get(q, false); ok {
			s.reject(d, false)
		}
		s.awaitCount("", dlq1, 1, ddWait)
		s.awaitCount("", dlq2, 1, ddWait)
		s.getN(dlq1, 1, true)
		s.getN(dlq2, 1, true)
	}},
	{name: "dead_letter_routing_key_header_BCC", rules: "R3.3 R3.6", run: func(s *ddSession) {
		x := s.exchange("x", "direct")
		dlx := s.exchange("dlx", "direct")
		dlq1 := s.queue("dlq1", nil)
		dlq2 := s.queue("dlq2", nil)
		s.bind(dlq1, "k1", dlx, nil)
		s.bind(dlq2, "k2", dlx, nil)
		q := s.queue("q", dlArgs(dlx, ""))
		s.bind(q, "k1", x, nil)
		s.publish(x, "k1", false, amqp.Publishing{Body: []byte("m1"), Headers: amqp.Table{"BCC": []any{"k2"}}})
		if d, ok := s.get(q, false); ok {
			s.reject(d, false)
		}
		s.awaitCount("", dlq1, 1, ddWait)
		s.awaitCount("bcc-dlq2", dlq2, 1, ddQuiet)
		s.getN(dlq1, 1, true)
		s.getN(dlq2, 1, true)
	}},
	{name: "dead_letter_headers_BCC", rules: "R3.6", run: func(s *ddSession) {
		// BCC is stripped at publish: neither the first delivery nor the
		// dead-lettered copy carries it.
		x := s.exchange("x", "direct")
		dlx, dlq := s.dlx("dk")
		q := s.queue("q", dlArgs(dlx, "dk"))
		other := s.queue("other", nil)
		s.bind(q, "k1", x, nil)
		s.bind(other, "k2", x, nil)
		s.publish(x, "k1", false, amqp.Publishing{Body: []byte("m1"), Headers: amqp.Table{"BCC": []any{"k2"}, "keep": "yes"}})
		s.getN(other, 1, true)
		if d, ok := s.get(q, false); ok {
			s.reject(d, false)
		}
		s.awaitCount("", dlq, 1, ddWait)
		s.getN(dlq, 1, true)
	}},
	{name: "deadLetterNewRK", rules: "R3.3 R3.6", run: func(s *ddSession) {
		// With a DLRK only the DLRK routes: the CC key does not.
		x := s.exchange("x", "direct")
		dlx := s.exchange("dlx", "direct")
		dlqNew := s.queue("dlq-new", nil)
		dlqCC := s.queue("dlq-cc", nil)
		dlqOld := s.queue("dlq-old", nil)
		s.bind(dlqNew, "new", dlx, nil)
		s.bind(dlqCC, "cc", dlx, nil)
		s.bind(dlqOld, "old", dlx, nil)
		q := s.queue("q", dlArgs(dlx, "new"))
		s.bind(q, "old", x, nil)
		s.publish(x, "old", false, amqp.Publishing{Body: []byte("m1"), Headers: amqp.Table{"CC": []any{"cc"}}})
		if d, ok := s.get(q, false); ok {
			s.reject(d, false)
		}
		s.awaitCount("", dlqNew, 1, ddWait)
		s.count(dlqCC)
		s.count(dlqOld)
		s.getN(dlqNew, 1, true)
	}},
	{name: "dead_letter_headers_CC", rules: "R3.4 R3.6", run: func(s *ddSession) {
		// Without a DLRK the CC header stays and x-death lists both keys.
		x := s.exchange("x", "direct")
		dlx := s.exchange("dlx", "fanout")
		dlq := s.queue("dlq", nil)
		s.bind(dlq, "", dlx, nil)
		q := s.queue("q", dlArgs(dlx, ""))
		s.bind(q, "k1", x, nil)
		s.publish(x, "k1", false, amqp.Publishing{Body: []byte("m1"), Headers: amqp.Table{"CC": []any{"k2"}}})
		if d, ok := s.get(q, false); ok {
			s.reject(d, false)
		}
		s.awaitCount("", dlq, 1, ddWait)
		s.getN(dlq, 1, true)
	}},
	{name: "dead_letter_headers_CC_with_routing_key", rules: "R3.4 R3.6", run: func(s *ddSession) {
		x := s.exchange("x", "direct")
		dlx, dlq := s.dlx("dk")
		q := s.queue("q", dlArgs(dlx, "dk"))
		s.bind(q, "k1", x, nil)
		s.publish(x, "k1", false, amqp.Publishing{Body: []byte("m1"), Headers: amqp.Table{"CC": []any{"k2"}}})
		if d, ok := s.get(q, false); ok {
			s.reject(d, false)
		}
		s.awaitCount("", dlq, 1, ddWait)
		s.getN(dlq, 1, true)
	}},
	{name: "deadLetterMultipleDeadLetterQueues", rules: "R3.3", run: func(s *ddSession) {
		dlx := s.exchange("dlx", "fanout")
		dlq1 := s.queue("dlq1", nil)
		dlq2 := s.queue("dlq2", nil)
		s.bind(dlq1, "", dlx, nil)
		s.bind(dlq2, "", dlx, nil)
		q := s.queue("q", dlArgs(dlx, ""))
		s.pubN(q, "m1")
		if d, ok := s.get(q, false); ok {
			s.reject(d, false)
		}
		s.awaitCount("", dlq1, 1, ddWait)
		s.awaitCount("", dlq2, 1, ddWait)
		s.getN(dlq1, 1, true)
		s.getN(dlq2, 1, true)
	}},
	{name: "dead_letter_unroutable_dlx", rules: "R3.2", run: func(s *ddSession) {
		// The DLX exists but routes nowhere: dropped, never returned.
		dlx := s.exchange("dlx", "direct")
		q := s.queue("q", dlArgs(dlx, "nowhere"))
		s.publish("", q, true, amqp.Publishing{Body: []byte("m1")})
		if d, ok := s.get(q, false); ok {
			s.reject(d, false)
		}
		s.count(q)
		s.publish("", q, true, amqp.Publishing{Body: []byte("m2")})
		s.getN(q, 1, true)
	}},

	// --- cycles (R3.8) ---
	{name: "dead_letter_routing_key_cycle_max_length", rules: "R3.8", run: func(s *ddSession) {
		q := s.queue("q", dlArgs("", "", "x-max-length", int32(1)))
		s.pubN(q, "m1", "m2")
		s.count(q)
		s.getN(q, 1, true)
	}},
	{name: "dead_letter_routing_key_cycle_ttl", rules: "R3.8", run: func(s *ddSession) {
		q := s.queue("q", dlArgs("", "", "x-message-ttl", int32(100)))
		s.pubN(q, "m1")
		s.awaitCount("", q, 0, ttlWait)
		time.Sleep(300 * time.Millisecond) // a cycling message would be back by now
		s.count(q)
	}},
	{name: "dead_letter_routing_key_cycle_with_reject", rules: "R3.8 R3.4", run: func(s *ddSession) {
		q := s.queue("q", dlArgs("", ""))
		s.pubN(q, "m1")
		for range 3 {
			if ds := s.getN(q, 1, false); len(ds) == 1 {
				s.reject(ds[0], false)
			}
		}
		s.getN(q, 1, true)
	}},
	{name: "deadLetterSelf_ttl_queue_via_dlrk", rules: "R3.8", run: func(s *ddSession) {
		// Q1 expires to Q2, Q2 expires back to Q1: dropped at Q1 (no reject in the loop).
		q1 := s.n("q1")
		q2 := s.n("q2")
		s.declare(q1, false, dlArgs("", q2, "x-message-ttl", int32(100)))
		s.declare(q2, false, dlArgs("", q1, "x-message-ttl", int32(100)))
		s.pubN(q1, "m1")
		s.awaitCount("", q1, 0, ttlWait)
		s.awaitCount("", q2, 0, ttlWait)
		time.Sleep(300 * time.Millisecond)
		s.count(q1)
		s.count(q2)
	}},
	{name: "dead_letter_reject_expire_expire", rules: "R3.8 R3.4", run: func(s *ddSession) {
		q1 := s.n("q1")
		q2 := s.n("q2")
		q3 := s.n("q3")
		s.declare(q1, false, dlArgs("", q2))
		s.declare(q2, false, dlArgs("", q3, "x-message-ttl", int32(100)))
		s.declare(q3, false, dlArgs("", q1, "x-message-ttl", int32(100)))
		s.pubN(q1, "m1")
		if ds := s.getN(q1, 1, false); len(ds) == 1 {
			s.reject(ds[0], false)
		}
		s.awaitCount("", q1, 1, ttlWait)
		s.getN(q1, 1, true)
	}},

	// --- headers (R3.4, R3.5, R3.7) ---
	{name: "dead_letter_headers_cycle", rules: "R3.4", run: func(s *ddSession) {
		// q1 -rejected-> q2 -rejected-> q1 -rejected-> q2: count 2 for q1.
		q1 := s.n("q1")
		q2 := s.n("q2")
		s.declare(q1, false, dlArgs("", q2))
		s.declare(q2, false, dlArgs("", q1))
		s.pubN(q1, "m1")
		for _, q := range []string{q1, q2, q1} {
			if ds := s.getN(q, 1, false); len(ds) == 1 {
				s.reject(ds[0], false)
			}
		}
		s.getN(q2, 1, true)
	}},
	{name: "dead_letter_headers_should_be_appended_for_each_event", rules: "R3.4", run: func(s *ddSession) {
		// Reject chain q1 -> q2 -> q3 -> q4.
		q1, q2, q3, q4 := s.n("q1"), s.n("q2"), s.n("q3"), s.n("q4")
		s.declare(q1, false, dlArgs("", q2))
		s.declare(q2, false, dlArgs("", q3))
		s.declare(q3, false, dlArgs("", q4))
		s.declare(q4, false, nil)
		s.pubN(q1, "m1")
		for _, q := range []string{q1, q2, q3} {
			if ds := s.getN(q, 1, false); len(ds) == 1 {
				s.reject(ds[0], false)
			}
		}
		s.getN(q4, 1, true)
	}},
	{name: "deadLetterTwice", rules: "R3.4", run: func(s *ddSession) {
		// Two events, two entries: rejected at q1, expired at q2.
		q1, q2, dlq := s.n("q1"), s.n("q2"), s.n("dlq")
		s.declare(dlq, false, nil)
		s.declare(q1, false, dlArgs("", q2))
		s.declare(q2, false, dlArgs("", dlq, "x-message-ttl", int32(100)))
		s.pubN(q1, "m1")
		if ds := s.getN(q1, 1, false); len(ds) == 1 {
			s.reject(ds[0], false)
		}
		s.awaitCount("", dlq, 1, ttlWait)
		s.getN(dlq, 1, true)
	}},
	{name: "dead_letter_headers_should_not_be_appended_for_republish", rules: "R3.7", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k"))
		s.pubN(q, "m1")
		if ds := s.getN(q, 1, false); len(ds) == 1 {
			s.reject(ds[0], false)
		}
		ds := s.getN(dlq, 1, true)
		if len(ds) == 1 {
			// The client republishes the dead-lettered message as is.
			s.publish("", q, false, amqp.Publishing{Body: ds[0].Body, Headers: ds[0].Headers})
		}
		if ds := s.getN(q, 1, false); len(ds) == 1 {
			s.reject(ds[0], false)
		}
		s.getN(dlq, 1, true)
	}},
	{name: "client_forged_x_death", rules: "R3.7", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k"))
		forged := []any{amqp.Table{"queue": q, "reason": "rejected", "count": int64(5),
			"exchange": "", "routing-keys": []any{q}, "time": time.Unix(1700000000, 0)}}
		s.publish("", q, false, amqp.Publishing{Body: []byte("m1"), Headers: amqp.Table{"x-death": forged}})
		if ds := s.getN(q, 1, false); len(ds) == 1 {
			s.reject(ds[0], false)
		}
		s.getN(dlq, 1, true)
	}},
	{name: "dead_letter_headers_first_death", rules: "R3.5", run: func(s *ddSession) {
		// rejected at q1 (via exchange x), then expired at q2.
		x := s.exchange("x", "direct")
		q1, q2, dlq := s.n("q1"), s.n("q2"), s.n("dlq")
		s.declare(dlq, false, nil)
		s.declare(q1, false, dlArgs("", q2))
		s.declare(q2, false, dlArgs("", dlq, "x-message-ttl", int32(100)))
		s.bind(q1, "k", x, nil)
		s.pub(x, "k", "m1")
		if ds := s.getN(q1, 1, false); len(ds) == 1 {
			s.reject(ds[0], false)
		}
		s.awaitCount("", dlq, 1, ttlWait)
		s.getN(dlq, 1, true)
	}},
	{name: "dead_letter_headers_first_death_route", rules: "R3.5", run: func(s *ddSession) {
		hx := s.exchange("hx", "headers")
		rej := s.queue("by-rejected", nil)
		exp := s.queue("by-expired", nil)
		s.bind(rej, "", hx, amqp.Table{"x-match": "all", "x-first-death-reason": "rejected"})
		s.bind(exp, "", hx, amqp.Table{"x-match": "all", "x-first-death-reason": "expired"})
		q := s.queue("q", dlArgs(hx, ""))
		s.pubN(q, "m1")
		s.publish("", q, false, amqp.Publishing{Body: []byte("m2"), Expiration: "100"})
		if ds := s.getN(q, 1, false); len(ds) == 1 {
			s.reject(ds[0], false)
		}
		s.awaitCount("", exp, 1, ttlWait)
		s.getN(rej, 1, true)
		s.getN(exp, 1, true)
	}},
	{name: "dead_letter_headers_reason_maxlen", rules: "R3.4 R4.2", run: func(s *ddSession) {
		x := s.exchange("x", "topic")
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k", "x-max-length", int32(1)))
		s.bind(q, "a.#", x, nil)
		s.publish(x, "a.b", false, amqp.Publishing{Body: []byte("m1"), Expiration: "60000"})
		s.pub(x, "a.c", "m2")
		s.awaitCount("", dlq, 1, ddWait)
		s.getN(dlq, 1, true)
	}},

	// --- properties, confirms, returns (R3.10, R4.7) ---
	{name: "properties_kept", rules: "R3.10", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k", "x-max-priority", int32(9)))
		s.publish("", q, false, amqp.Publishing{Body: []byte("m1"), DeliveryMode: 2, Priority: 5,
			ContentType: "application/json", ContentEncoding: "gzip", CorrelationId: "c-1", ReplyTo: "r-1",
			MessageId: "id-1", Timestamp: time.Unix(1700000000, 0), Type: "t-1", UserId: "guest", AppId: "app-1",
			Headers: amqp.Table{"s": "v", "i32": int32(-7), "i64": int64(1) << 40, "b": true, "f": 1.5,
				"arr": []any{"a", int32(1)}, "tbl": amqp.Table{"n": "x"}, "ts": time.Unix(1600000000, 0)}})
		if ds := s.getN(q, 1, false); len(ds) == 1 {
			s.reject(ds[0], false)
		}
		s.awaitCount("", dlq, 1, ddWait)
		s.getN(dlq, 1, true)
	}},
	{name: "mandatory_unroutable_return", rules: "R4.7", run: func(s *ddSession) {
		x := s.exchange("x", "direct")
		s.publish(x, "nowhere", true, amqp.Publishing{Body: []byte("m1")})
		s.publish(x, "nowhere", false, amqp.Publishing{Body: []byte("m2")})
		q := s.queue("q", nil)
		s.bind(q, "k", x, nil)
		s.publish(x, "k", true, amqp.Publishing{Body: []byte("m3")})
		s.getN(q, 1, true)
	}},
	{name: "dead_letter_max_length_reject_publish_dlx_confirms", rules: "R4.6 R3.9", run: func(s *ddSession) {
		// Batch: confirms for accepted and rejected publishes in order.
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k", "x-max-length", int32(2), "x-overflow", "reject-publish-dlx"))
		var last uint64
		for _, b := range []string{"m1", "m2", "m3", "m4"} {
			last = s.publishNoWait("", q, false, amqp.Publishing{Body: []byte(b)})
		}
		s.awaitConfirm(last)
		s.awaitCount("", dlq, 2, ddWait)
		s.getN(dlq, 2, true)
	}},

	{name: "queueSize_max_length_zero", rules: "R4.3", run: func(s *ddSession) {
		// max-length 0: without a consumer every message is dead-lettered;
		// one a waiting consumer takes is never enqueued nor trimmed.
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k", "x-max-length", int32(0)))
		s.pubN(q, "m1")
		s.awaitCount("", dlq, 1, ddWait)
		ds := s.consume(q)
		s.pubN(q, "m2")
		if got := s.recvN(q, ds, 1); len(got) == 1 {
			s.ack(got[0], false)
		}
		s.count(dlq)
		s.getN(dlq, 1, true)
	}},
	{name: "unacked_requeued_on_close_then_rejected", rules: "R5.1 R5.2", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k"))
		s.pubN(q, "m1", "m2")
		ch, err := s.conn.Channel()
		if err != nil {
			s.t.Fatalf("%s: channel: %v", s.kind, err)
		}
		if _, ok, err := ch.Get(q, false); !ok || err != nil {
			s.note("side channel get failed")
		}
		ch.Close() // m1 goes back, redelivered
		s.awaitCount("", q, 2, ddWait)
		if ds := s.getN(q, 2, false); len(ds) == 2 {
			s.nack(ds[1], true, false)
		}
		s.awaitCount("", dlq, 2, ddWait)
		s.getN(dlq, 2, true)
	}},
	{name: "publishAndGetWithExpiry", rules: "R2.2", run: func(s *ddSession) {
		q := s.queue("q", amqp.Table{"x-message-ttl": int32(150)})
		start := time.Now()
		s.pubN(q, "m1", "m2")
		s.get(q, true) // well before the deadline
		sleepUntil(start.Add(450 * time.Millisecond))
		s.get(q, true) // expired: empty
		s.count(q)
	}},
	{name: "dead_letter_topic_dlx_with_dlrk", rules: "R3.3", run: func(s *ddSession) {
		dlx := s.exchange("dlx", "topic")
		hit := s.queue("hit", nil)
		miss := s.queue("miss", nil)
		s.bind(hit, "dead.#", dlx, nil)
		s.bind(miss, "alive.#", dlx, nil)
		q := s.queue("q", dlArgs(dlx, "dead.orders.eu", "x-message-ttl", int32(50)))
		s.publish("", q, false, amqp.Publishing{Body: []byte("m1"), DeliveryMode: 2, Headers: amqp.Table{"app": int32(1)}})
		s.awaitCount("", hit, 1, ttlWait)
		s.count(miss)
		s.getN(hit, 1, true)
	}},

	// --- arguments (R1.5) ---
	{name: "declareQueueWithRoutingKeyButNoDeadLetterExchange", rules: "R1.5", run: func(s *ddSession) {
		s.queue("q", amqp.Table{"x-dead-letter-routing-key": "k"})
		s.note("after")
	}},

	// --- delivery limit (R5.3) ---
	{name: "quorum_subscribe_redelivery_limit_with_dead_letter", rules: "R5.3 R3.1", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.declare(s.n("qq"), true, dlArgs(dlx, "k", "x-queue-type", "quorum", "x-delivery-limit", int32(1)))
		s.pubN(q, "m1")
		for range 2 {
			if ds := s.getN(q, 1, false); len(ds) == 1 {
				s.reject(ds[0], true)
			}
		}
		s.awaitCount("", dlq, 1, ddWait)
		s.count(q)
		s.getN(dlq, 1, true)
	}},
	{name: "classic_delivery_limit", rules: "R5.3 (Warren improvement)", run: func(s *ddSession) {
		dlx, dlq := s.dlx("k")
		q := s.queue("q", dlArgs(dlx, "k", "x-delivery-limit", int32(1)))
		s.pubN(q, "m1")
		for range 2 {
			if ds := s.getN(q, 1, false); len(ds) == 1 {
				s.reject(ds[0], true)
			}
		}
		s.awaitCount("limit-dlq", dlq, 1, ddQuiet)
		s.countL("limit-q", q)
		s.getN(dlq, 1, true)
	}},
}
