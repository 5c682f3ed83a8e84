package integration

// TestErrorReplies drives every client-caused error through a real client
// (amqp091-go over TCP) and checks the reply code, the exact reply text
// and whether the channel or the whole connection was closed. Each
// scenario runs against Warren and, when it is reachable, against the
// RabbitMQ oracle: both must give the scenario's expected outcome, so
// they are identical. Intended differences are listed in
// rabbitDifferences with their reason.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/warrenmq/warren/amqp"
	"github.com/warrenmq/warren/broker"
)

// outcome is what a client observed.
type outcome struct {
	Level  string // "channel", "connection", or "none" (no error)
	Code   int
	Reason string
}

func (o outcome) String() string {
	if o.Level == "none" {
		return "no error"
	}
	return fmt.Sprintf("%s %d %q", o.Level, o.Code, o.Reason)
}

type errScenario struct {
	name string
	run  func(t *testing.T, tg *target) outcome
	// want is the outcome on both brokers; "{p}" in Reason stands for the
	// target's unique name prefix.
	want outcome
}

// rabbitDifferences lists intended differences from RabbitMQ, by scenario
// name: RabbitMQ's outcome (checked, so a changed oracle is noticed) and
// why Warren does not reproduce it.
var rabbitDifferences = map[string]struct {
	rabbit outcome
	reason string
}{}

func chanErr(code int, reason string) outcome { return outcome{"channel", code, reason} }
func connErr(code int, reason string) outcome { return outcome{"connection", code, reason} }

var noError = outcome{Level: "none"}

// session is one client connection with one channel whose closing is observed.
type session struct {
	t        *testing.T
	conn     *amqp091.Connection
	ch       *amqp091.Channel
	chClosed chan *amqp091.Error
}

func (tg *target) sessionAt(t *testing.T, u string, cfg *amqp091.Config) *session {
	t.Helper()
	var conn *amqp091.Connection
	var err error
	if cfg != nil {
		conn, err = amqp091.DialConfig(u, *cfg)
	} else {
		conn, err = amqp091.Dial(u)
	}
	if err != nil {
		t.Fatalf("%s: dial: %v", tg.kind, err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("%s: channel: %v", tg.kind, err)
	}
	return &session{t: t, conn: conn, ch: ch, chClosed: ch.NotifyClose(make(chan *amqp091.Error, 1))}
}

func (tg *target) session(t *testing.T) *session { return tg.sessionAt(t, tg.url, nil) }

// channel opens another channel on the session's connection.
func (s *session) channel() *amqp091.Channel {
	s.t.Helper()
	ch, err := s.conn.Channel()
	if err != nil {
		s.t.Fatalf("channel: %v", err)
	}
	return ch
}

// must fails the test on an error from a setup step.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("setup: %v", err)
	}
}

// result turns the error of a synchronous operation into an outcome.
func (s *session) result(err error) outcome {
	if err == nil {
		return noError
	}
	return s.await(5 * time.Second)
}

// barrier is the outcome of the asynchronous operations sent so far
// (publish, ack): it makes a synchronous round trip (basic.qos, which needs
// no permission) that a channel or connection close would overtake.
func (s *session) barrier() outcome {
	return s.result(s.ch.Qos(0, 0, false))
}

// await waits up to d for the channel to be closed by the server.
func (s *session) await(d time.Duration) outcome {
	select {
	case e, ok := <-s.chClosed:
		if !ok || e == nil {
			return outcome{Level: "closed without error"}
		}
		return observed(s.conn, e)
	case <-time.After(d):
		return noError
	}
}

// observed classifies e: amqp091-go marks the connection closed before it
// shuts its channels down, so a channel that sees the error of a
// connection.close finds the connection already closed.
func observed(conn *amqp091.Connection, e *amqp091.Error) outcome {
	level := "channel"
	if conn.IsClosed() {
		level = "connection"
	}
	if !e.Server {
		level += " (client-side)"
	}
	return outcome{Level: level, Code: e.Code, Reason: e.Reason}
}

// dialResult is the outcome of a dial expected to fail.
func dialResult(u string) outcome {
	conn, err := amqp091.Dial(u)
	if err == nil {
		conn.Close()
		return noError
	}
	var e *amqp091.Error
	if !errors.As(err, &e) {
		return outcome{Level: "dial error: " + err.Error()}
	}
	if !e.Server {
		return outcome{Level: "connection (client-side)", Code: e.Code, Reason: e.Reason}
	}
	return outcome{Level: "connection", Code: e.Code, Reason: e.Reason}
}

// publish publishes body to exchange/key and waits briefly for a close.
func (s *session) publish(exchange, key string, p amqp091.Publishing) outcome {
	return s.publishFlags(exchange, key, false, false, p)
}

func (s *session) publishFlags(exchange, key string, mandatory, immediate bool, p amqp091.Publishing) outcome {
	if err := s.ch.PublishWithContext(context.Background(), exchange, key, mandatory, immediate, p); err != nil {
		return s.result(err)
	}
	return s.barrier()
}

// rawOutcome is the outcome of a raw-socket scenario.
func rawOutcome(r closeResult) outcome {
	if r.Level == "dropped" {
		return outcome{Level: r.String()}
	}
	return outcome{Level: r.Level, Code: int(r.Code), Reason: r.Text}
}

// cleanup deletes, at the end of the run, queues and exchanges a scenario
// created outside auto-delete/exclusive (RabbitMQ keeps them otherwise).
func (tg *target) deleteLater(queues, exchanges []string) {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	tg.cleanups = append(tg.cleanups, func() {
		conn, err := amqp091.Dial(tg.url)
		if err != nil {
			return
		}
		defer conn.Close()
		for _, q := range queues {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(q, false, false, false)
				ch.Close()
			}
		}
		for _, x := range exchanges {
			if ch, err := conn.Channel(); err == nil {
				_ = ch.ExchangeDelete(x, false, false)
				ch.Close()
			}
		}
	})
}

// limitedUser returns a user, "{b}-limited", that may configure, write
// and read only resources named "{p}-ok-*".
func (tg *target) limitedUser(t *testing.T) string {
	user := tg.base + "-limited"
	re := "^" + tg.base + "-[0-9]+-ok-"
	tg.ensureUser(t, user, broker.Permission{Configure: re, Write: re, Read: re})
	return user
}

func (tg *target) limitedSession(t *testing.T) *session {
	user := tg.limitedUser(t)
	return tg.sessionAt(t, tg.urlFor(user, user, "/"), nil)
}

// exclusiveQueue declares an exclusive queue on a separate connection that
// stays open for the rest of the scenario.
func (tg *target) exclusiveQueue(t *testing.T, name string) {
	owner := tg.session(t)
	_, err := owner.ch.QueueDeclare(name, false, false, true, false, nil)
	must(t, err)
}

var errScenarios = []errScenario{
	// --- 404 NOT_FOUND ---
	{name: "publish/unknown-exchange", want: chanErr(404, "NOT_FOUND - no exchange '{p}-nox' in vhost '/'"),
		run: func(t *testing.T, tg *target) outcome {
			return tg.session(t).publish(tg.name("nox"), "k", amqp091.Publishing{Body: []byte("x")})
		}},
	{name: "queue.bind/unknown-exchange", want: chanErr(404, "NOT_FOUND - no exchange '{p}-nox' in vhost '/'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			q, err := s.ch.QueueDeclare("", false, true, true, false, nil)
			must(t, err)
			return s.result(s.ch.QueueBind(q.Name, "k", tg.name("nox"), false, nil))
		}},
	{name: "exchange.bind/unknown-source", want: chanErr(404, "NOT_FOUND - no exchange '{p}-nox' in vhost '/'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.result(s.ch.ExchangeBind("amq.fanout", "k", tg.name("nox"), false, nil))
		}},
	{name: "exchange.bind/unknown-destination", want: chanErr(404, "NOT_FOUND - no exchange '{p}-nox' in vhost '/'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.result(s.ch.ExchangeBind(tg.name("nox"), "k", "amq.fanout", false, nil))
		}},
	{name: "exchange.declare-passive/unknown", want: chanErr(404, "NOT_FOUND - no exchange '{p}-nox' in vhost '/'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.result(s.ch.ExchangeDeclarePassive(tg.name("nox"), "direct", false, false, false, false, nil))
		}},
	{name: "basic.consume/unknown-queue", want: chanErr(404, "NOT_FOUND - no queue '{p}-noq' in vhost '/'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.Consume(tg.name("noq"), "", false, false, false, false, nil)
			return s.result(err)
		}},
	{name: "queue.bind/unknown-queue", want: chanErr(404, "NOT_FOUND - no queue '{p}-noq' in vhost '/'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.result(s.ch.QueueBind(tg.name("noq"), "k", "amq.direct", false, nil))
		}},
	{name: "queue.unbind/unknown-queue-is-ok", want: noError,
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.result(s.ch.QueueUnbind(tg.name("noq"), "k", "amq.direct", nil))
		}},
	{name: "queue.unbind/unknown-exchange-is-ok", want: noError,
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.result(s.ch.QueueUnbind(mustQueue(t, s), "k", tg.name("nox"), nil))
		}},
	{name: "exchange.unbind/unknown-source-is-ok", want: noError,
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.result(s.ch.ExchangeUnbind("amq.fanout", "k", tg.name("nox"), false, nil))
		}},
	{name: "queue.purge/unknown-queue", want: chanErr(404, "NOT_FOUND - no queue '{p}-noq' in vhost '/'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.QueuePurge(tg.name("noq"), false)
			return s.result(err)
		}},
	{name: "basic.get/unknown-queue", want: chanErr(404, "NOT_FOUND - no queue '{p}-noq' in vhost '/'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, _, err := s.ch.Get(tg.name("noq"), false)
			return s.result(err)
		}},
	{name: "queue.declare-passive/unknown-queue", want: chanErr(404, "NOT_FOUND - no queue '{p}-noq' in vhost '/'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.QueueDeclarePassive(tg.name("noq"), false, false, false, false, nil)
			return s.result(err)
		}},
	{name: "queue.delete/unknown-queue-is-ok", want: noError,
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.QueueDelete(tg.name("noq"), false, false, false)
			return s.result(err)
		}},
	{name: "exchange.delete/unknown-exchange-is-ok", want: noError,
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.result(s.ch.ExchangeDelete(tg.name("nox"), false, false))
		}},

	// --- 405 RESOURCE_LOCKED: another connection's exclusive queue ---
	{name: "exclusive-queue/declare-from-other-connection", want: chanErr(405, lockedText("{p}-exq")),
		run: func(t *testing.T, tg *target) outcome {
			tg.exclusiveQueue(t, tg.name("exq"))
			s := tg.session(t)
			_, err := s.ch.QueueDeclare(tg.name("exq"), false, false, true, false, nil)
			return s.result(err)
		}},
	{name: "exclusive-queue/declare-passive-from-other-connection", want: chanErr(405, lockedText("{p}-exq")),
		run: func(t *testing.T, tg *target) outcome {
			tg.exclusiveQueue(t, tg.name("exq"))
			s := tg.session(t)
			_, err := s.ch.QueueDeclarePassive(tg.name("exq"), false, false, true, false, nil)
			return s.result(err)
		}},
	{name: "exclusive-queue/consume-from-other-connection", want: chanErr(405, lockedText("{p}-exq")),
		run: func(t *testing.T, tg *target) outcome {
			tg.exclusiveQueue(t, tg.name("exq"))
			s := tg.session(t)
			_, err := s.ch.Consume(tg.name("exq"), "", false, false, false, false, nil)
			return s.result(err)
		}},
	{name: "exclusive-queue/get-from-other-connection", want: chanErr(405, lockedText("{p}-exq")),
		run: func(t *testing.T, tg *target) outcome {
			tg.exclusiveQueue(t, tg.name("exq"))
			s := tg.session(t)
			_, _, err := s.ch.Get(tg.name("exq"), false)
			return s.result(err)
		}},
	{name: "exclusive-queue/purge-from-other-connection", want: chanErr(405, lockedText("{p}-exq")),
		run: func(t *testing.T, tg *target) outcome {
			tg.exclusiveQueue(t, tg.name("exq"))
			s := tg.session(t)
			_, err := s.ch.QueuePurge(tg.name("exq"), false)
			return s.result(err)
		}},
	{name: "exclusive-queue/bind-from-other-connection", want: chanErr(405, lockedText("{p}-exq")),
		run: func(t *testing.T, tg *target) outcome {
			tg.exclusiveQueue(t, tg.name("exq"))
			s := tg.session(t)
			return s.result(s.ch.QueueBind(tg.name("exq"), "k", "amq.direct", false, nil))
		}},
	{name: "exclusive-queue/delete-from-other-connection", want: chanErr(405, lockedText("{p}-exq")),
		run: func(t *testing.T, tg *target) outcome {
			tg.exclusiveQueue(t, tg.name("exq"))
			s := tg.session(t)
			_, err := s.ch.QueueDelete(tg.name("exq"), false, false, false)
			return s.result(err)
		}},
	{name: "exclusive-queue/redeclare-non-exclusive-same-connection", want: chanErr(405, lockedText("{p}-exq")),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.QueueDeclare(tg.name("exq"), false, false, true, false, nil)
			must(t, err)
			_, err = s.ch.QueueDeclare(tg.name("exq"), false, false, false, false, nil)
			return s.result(err)
		}},

	// --- 406 PRECONDITION_FAILED: inequivalent redeclaration ---
	{name: "exchange.redeclare/type", want: chanErr(406, "PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{p}-x' in vhost '/': received 'fanout' but current is 'direct'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			must(t, s.ch.ExchangeDeclare(tg.name("x"), "direct", false, true, false, false, nil))
			must(t, s.ch.QueueBind(mustQueue(t, s), "k", tg.name("x"), false, nil))
			return s.result(s.ch.ExchangeDeclare(tg.name("x"), "fanout", false, true, false, false, nil))
		}},
	{name: "exchange.redeclare/durable", want: chanErr(406, "PRECONDITION_FAILED - inequivalent arg 'durable' for exchange '{p}-x' in vhost '/': received 'true' but current is 'false'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			must(t, s.ch.ExchangeDeclare(tg.name("x"), "direct", false, false, false, false, nil))
			tg.deleteLater(nil, []string{tg.name("x")})
			return s.result(s.ch.ExchangeDeclare(tg.name("x"), "direct", true, false, false, false, nil))
		}},
	{name: "exchange.redeclare/auto_delete", want: chanErr(406, "PRECONDITION_FAILED - inequivalent arg 'auto_delete' for exchange '{p}-x' in vhost '/': received 'true' but current is 'false'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			must(t, s.ch.ExchangeDeclare(tg.name("x"), "direct", false, false, false, false, nil))
			tg.deleteLater(nil, []string{tg.name("x")})
			return s.result(s.ch.ExchangeDeclare(tg.name("x"), "direct", false, true, false, false, nil))
		}},
	{name: "exchange.redeclare/alternate-exchange", want: chanErr(406, "PRECONDITION_FAILED - inequivalent arg 'alternate-exchange' for exchange '{p}-x' in vhost '/': received 'b' but current is 'a'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			must(t, s.ch.ExchangeDeclare(tg.name("x"), "direct", false, false, false, false, amqp091.Table{"alternate-exchange": "a"}))
			tg.deleteLater(nil, []string{tg.name("x")})
			return s.result(s.ch.ExchangeDeclare(tg.name("x"), "direct", false, false, false, false, amqp091.Table{"alternate-exchange": "b"}))
		}},
	{name: "queue.redeclare/durable", want: chanErr(406, "PRECONDITION_FAILED - inequivalent arg 'durable' for queue '{p}-q' in vhost '/': received 'true' but current is 'false'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.QueueDeclare(tg.name("q"), false, false, false, false, nil)
			must(t, err)
			tg.deleteLater([]string{tg.name("q")}, nil)
			_, err = s.ch.QueueDeclare(tg.name("q"), true, false, false, false, nil)
			return s.result(err)
		}},
	{name: "queue.redeclare/auto_delete", want: chanErr(406, "PRECONDITION_FAILED - inequivalent arg 'auto_delete' for queue '{p}-q' in vhost '/': received 'true' but current is 'false'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.QueueDeclare(tg.name("q"), false, false, false, false, nil)
			must(t, err)
			tg.deleteLater([]string{tg.name("q")}, nil)
			_, err = s.ch.QueueDeclare(tg.name("q"), false, true, false, false, nil)
			return s.result(err)
		}},
	{name: "queue.redeclare/x-message-ttl-changed", want: chanErr(406, "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue '{p}-q' in vhost '/': received '2000' but current is '1000'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.QueueDeclare(tg.name("q"), false, false, false, false, amqp091.Table{"x-message-ttl": int32(1000)})
			must(t, err)
			tg.deleteLater([]string{tg.name("q")}, nil)
			_, err = s.ch.QueueDeclare(tg.name("q"), false, false, false, false, amqp091.Table{"x-message-ttl": int32(2000)})
			return s.result(err)
		}},
	{name: "queue.redeclare/x-message-ttl-type-changed", want: chanErr(406, "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue '{p}-q' in vhost '/': received 'abc' but current is '1000'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.QueueDeclare(tg.name("q"), false, false, false, false, amqp091.Table{"x-message-ttl": int32(1000)})
			must(t, err)
			tg.deleteLater([]string{tg.name("q")}, nil)
			_, err = s.ch.QueueDeclare(tg.name("q"), false, false, false, false, amqp091.Table{"x-message-ttl": "abc"})
			return s.result(err)
		}},
	{name: "queue.redeclare/x-max-length-missing", want: chanErr(406, "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue '{p}-q' in vhost '/': received none but current is the value '10' of type 'long'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.QueueDeclare(tg.name("q"), false, false, false, false, amqp091.Table{"x-max-length": int64(10)})
			must(t, err)
			tg.deleteLater([]string{tg.name("q")}, nil)
			_, err = s.ch.QueueDeclare(tg.name("q"), false, false, false, false, nil)
			return s.result(err)
		}},
	{name: "queue.redeclare/x-message-ttl-int-widths-equivalent", want: noError,
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.QueueDeclare(tg.name("q"), false, false, false, false, amqp091.Table{"x-message-ttl": int32(1000)})
			must(t, err)
			tg.deleteLater([]string{tg.name("q")}, nil)
			_, err = s.ch.QueueDeclare(tg.name("q"), false, false, false, false, amqp091.Table{"x-message-ttl": int64(1000)})
			return s.result(err)
		}},

	// --- 406: invalid queue arguments ---
	{name: "queue.declare/x-max-length-wrong-type", want: chanErr(406, "PRECONDITION_FAILED - invalid arg 'x-max-length' for queue '{p}-q' in vhost '/': \"expected integer, got longstr\""),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.QueueDeclare(tg.name("q"), false, true, false, false, amqp091.Table{"x-max-length": "ten"})
			return s.result(err)
		}},
	{name: "queue.declare/x-message-ttl-negative", want: chanErr(406, "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue '{p}-q' in vhost '/': {value_negative,-1}"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.QueueDeclare(tg.name("q"), false, true, false, false, amqp091.Table{"x-message-ttl": int32(-1)})
			return s.result(err)
		}},
	{name: "queue.declare/x-expires-zero", want: chanErr(406, "PRECONDITION_FAILED - invalid arg 'x-expires' for queue '{p}-q' in vhost '/': {value_zero,0}"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.QueueDeclare(tg.name("q"), false, true, false, false, amqp091.Table{"x-expires": int32(0)})
			return s.result(err)
		}},
	{name: "queue.declare/x-overflow-unknown", want: chanErr(406, "PRECONDITION_FAILED - invalid arg 'x-overflow' for queue '{p}-q' in vhost '/': invalid_overflow"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.QueueDeclare(tg.name("q"), false, true, false, false, amqp091.Table{"x-overflow": "sideways"})
			return s.result(err)
		}},
	{name: "basic.publish/mandatory-unroutable-returns-312", want: outcome{Level: "basic.return", Code: 312, Reason: "NO_ROUTE"},
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			returns := s.ch.NotifyReturn(make(chan amqp091.Return, 1))
			if o := s.publishFlags("amq.direct", tg.name("nowhere"), true, false, amqp091.Publishing{Body: []byte("x")}); o != noError {
				return o
			}
			select {
			case r := <-returns:
				return outcome{Level: "basic.return", Code: int(r.ReplyCode), Reason: r.ReplyText}
			case <-time.After(5 * time.Second):
				return noError
			}
		}},

	// --- 403 ACCESS_REFUSED: permissions ---
	{name: "access/exchange.declare-configure-denied", want: chanErr(403, "ACCESS_REFUSED - access to exchange '{p}-denied-x' in vhost '/' refused for user '{b}-limited'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.limitedSession(t)
			return s.result(s.ch.ExchangeDeclare(tg.name("denied-x"), "direct", false, true, false, false, nil))
		}},
	{name: "access/queue.declare-configure-denied", want: chanErr(403, "ACCESS_REFUSED - access to queue '{p}-denied-q' in vhost '/' refused for user '{b}-limited'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.limitedSession(t)
			_, err := s.ch.QueueDeclare(tg.name("denied-q"), false, true, false, false, nil)
			return s.result(err)
		}},
	{name: "access/publish-write-denied", want: chanErr(403, "ACCESS_REFUSED - access to exchange 'amq.direct' in vhost '/' refused for user '{b}-limited'"),
		run: func(t *testing.T, tg *target) outcome {
			return tg.limitedSession(t).publish("amq.direct", "k", amqp091.Publishing{Body: []byte("x")})
		}},
	{name: "access/publish-default-exchange-denied", want: chanErr(403, "ACCESS_REFUSED - access to exchange 'amq.default' in vhost '/' refused for user '{b}-limited'"),
		run: func(t *testing.T, tg *target) outcome {
			return tg.limitedSession(t).publish("", "k", amqp091.Publishing{Body: []byte("x")})
		}},
	{name: "access/consume-read-denied", want: chanErr(403, "ACCESS_REFUSED - access to queue '{p}-denied-c' in vhost '/' refused for user '{b}-limited'"),
		run: func(t *testing.T, tg *target) outcome {
			g := tg.session(t)
			_, err := g.ch.QueueDeclare(tg.name("denied-c"), false, true, false, false, nil)
			must(t, err)
			s := tg.limitedSession(t)
			_, err = s.ch.Consume(tg.name("denied-c"), "", false, false, false, false, nil)
			return s.result(err)
		}},
	{name: "access/queue.bind-read-on-exchange-denied", want: chanErr(403, "ACCESS_REFUSED - access to exchange 'amq.direct' in vhost '/' refused for user '{b}-limited'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.limitedSession(t)
			_, err := s.ch.QueueDeclare(tg.name("ok-q"), false, true, true, false, nil)
			must(t, err)
			return s.result(s.ch.QueueBind(tg.name("ok-q"), "k", "amq.direct", false, nil))
		}},
	{name: "access/allowed-resources-work", want: noError,
		run: func(t *testing.T, tg *target) outcome {
			s := tg.limitedSession(t)
			must(t, s.ch.ExchangeDeclare(tg.name("ok-x"), "fanout", false, true, false, false, nil))
			_, err := s.ch.QueueDeclare(tg.name("ok-q2"), false, true, true, false, nil)
			must(t, err)
			must(t, s.ch.QueueBind(tg.name("ok-q2"), "", tg.name("ok-x"), false, nil))
			if o := s.publish(tg.name("ok-x"), "", amqp091.Publishing{Body: []byte("x")}); o != noError {
				return o
			}
			_, err = s.ch.Consume(tg.name("ok-q2"), "", true, false, false, false, nil)
			return s.result(err)
		}},

	// --- connection-level refusals at open ---
	// amqp091-go does not advertise authentication_failure_close, so the
	// server drops the socket and the library reports ErrCredentials.
	{name: "login/bad-password", want: outcome{"connection (client-side)", 403, "username or password not allowed"},
		run: func(t *testing.T, tg *target) outcome {
			return dialResult(tg.urlFor("guest", "not-the-password", "/"))
		}},
	{name: "login/unknown-user", want: outcome{"connection (client-side)", 403, "username or password not allowed"},
		run: func(t *testing.T, tg *target) outcome {
			return dialResult(tg.urlFor(tg.name("nobody"), "x", "/"))
		}},
	{name: "login/bad-password-authentication_failure_close", want: connErr(403, "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile."),
		run: func(t *testing.T, tg *target) outcome {
			return rawLoginOutcome(t, tg, rawLogin{user: "guest", pass: "wrong", vhost: "/", authFailureClose: true})
		}},
	{name: "login/bad-password-raw-without-capability", want: outcome{Level: "dropped"},
		run: func(t *testing.T, tg *target) outcome {
			return rawLoginOutcome(t, tg, rawLogin{user: "guest", pass: "wrong", vhost: "/"})
		}},
	{name: "vhost/not-found-raw", want: connErr(530, "NOT_ALLOWED - vhost {p}-novh not found"),
		run: func(t *testing.T, tg *target) outcome {
			return rawLoginOutcome(t, tg, rawLogin{user: "guest", pass: "guest", vhost: tg.name("novh")})
		}},
	{name: "vhost/not-found", want: connErr(530, "NOT_ALLOWED - vhost {p}-novh not found"),
		run: func(t *testing.T, tg *target) outcome {
			return dialResult(tg.urlFor("guest", "guest", tg.name("novh")))
		}},
	{name: "vhost/not-allowed", want: connErr(530, "NOT_ALLOWED - access to vhost '{p}-vh' refused for user 'guest'"),
		run: func(t *testing.T, tg *target) outcome {
			tg.ensureVHost(t, tg.name("vh"))
			return dialResult(tg.urlFor("guest", "guest", tg.name("vh")))
		}},

	// --- 406: acknowledgements ---
	{name: "basic.ack/unknown-tag", want: chanErr(406, "PRECONDITION_FAILED - unknown delivery tag 42"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			must(t, s.ch.Ack(42, false))
			return s.barrier()
		}},
	{name: "basic.ack/unknown-tag-multiple", want: chanErr(406, "PRECONDITION_FAILED - unknown delivery tag 42"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			must(t, s.ch.Ack(42, true))
			return s.barrier()
		}},
	{name: "basic.nack/unknown-tag", want: chanErr(406, "PRECONDITION_FAILED - unknown delivery tag 42"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			must(t, s.ch.Nack(42, false, true))
			return s.barrier()
		}},
	{name: "basic.reject/unknown-tag", want: chanErr(406, "PRECONDITION_FAILED - unknown delivery tag 42"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			must(t, s.ch.Reject(42, false))
			return s.barrier()
		}},
	{name: "basic.ack/double-ack", want: chanErr(406, "PRECONDITION_FAILED - unknown delivery tag 1"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			q := mustQueue(t, s)
			if o := s.publish("", q, amqp091.Publishing{Body: []byte("x")}); o != noError {
				t.Fatalf("publish: %v", o)
			}
			d, ok, err := s.ch.Get(q, false)
			if err != nil || !ok {
				t.Fatalf("get: %v %v", ok, err)
			}
			must(t, d.Ack(false))
			must(t, d.Ack(false))
			return s.barrier()
		}},
	{name: "basic.ack/tag-of-autoack-delivery", want: chanErr(406, "PRECONDITION_FAILED - unknown delivery tag 1"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			q := mustQueue(t, s)
			if o := s.publish("", q, amqp091.Publishing{Body: []byte("x")}); o != noError {
				t.Fatalf("publish: %v", o)
			}
			_, ok, err := s.ch.Get(q, true)
			if err != nil || !ok {
				t.Fatalf("get: %v %v", ok, err)
			}
			must(t, s.ch.Ack(1, false))
			return s.barrier()
		}},

	// --- 403: internal exchanges, reserved names, default exchange ---
	{name: "publish/internal-exchange", want: chanErr(403, "ACCESS_REFUSED - cannot publish to internal exchange '{p}-ix' in vhost '/'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			must(t, s.ch.ExchangeDeclare(tg.name("ix"), "fanout", false, false, true, false, nil))
			tg.deleteLater(nil, []string{tg.name("ix")})
			return s.publish(tg.name("ix"), "", amqp091.Publishing{Body: []byte("x")})
		}},
	{name: "exchange.declare/reserved-amq-prefix", want: chanErr(403, "ACCESS_REFUSED - exchange name 'amq.{p}' contains reserved prefix 'amq.*'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.result(s.ch.ExchangeDeclare("amq."+tg.prefix, "direct", false, true, false, false, nil))
		}},
	{name: "queue.declare/reserved-amq-prefix", want: chanErr(403, "ACCESS_REFUSED - queue name 'amq.{p}' contains reserved prefix 'amq.*'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.QueueDeclare("amq."+tg.prefix, false, true, true, false, nil)
			return s.result(err)
		}},
	{name: "exchange.declare-passive/amq.direct-is-ok", want: noError,
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.result(s.ch.ExchangeDeclarePassive("amq.direct", "direct", true, false, false, false, nil))
		}},
	{name: "exchange.delete/default-exchange", want: chanErr(403, "ACCESS_REFUSED - operation not permitted on the default exchange"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.result(s.ch.ExchangeDelete("", false, false))
		}},
	{name: "exchange.declare/default-exchange", want: chanErr(403, "ACCESS_REFUSED - operation not permitted on the default exchange"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.result(s.ch.ExchangeDeclare("", "direct", true, false, false, false, nil))
		}},
	{name: "exchange.delete/amq.direct", want: chanErr(403, "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.result(s.ch.ExchangeDelete("amq.direct", false, false))
		}},
	{name: "queue.bind/default-exchange", want: chanErr(403, "ACCESS_REFUSED - operation not permitted on the default exchange"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.result(s.ch.QueueBind(mustQueue(t, s), "k", "", false, nil))
		}},

	// --- 503 COMMAND_INVALID ---
	{name: "exchange.declare/invalid-type", want: connErr(503, "COMMAND_INVALID - unknown exchange type 'no-such-type'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.result(s.ch.ExchangeDeclare(tg.name("badtype"), "no-such-type", false, true, false, false, nil))
		}},

	// --- 504 CHANNEL_ERROR / 530 NOT_ALLOWED on channel numbers (raw: the
	// client library never sends these) ---
	{name: "channel.open/second-open", want: connErr(504, "CHANNEL_ERROR - second 'channel.open' seen"),
		run: func(t *testing.T, tg *target) outcome {
			c := rawDial(t, tg.addr)
			must(t, c.handshake(0, 0))
			must(t, c.openChannel(1))
			must(t, c.sendMethod(1, &amqp.ChannelOpen{}))
			return rawOutcome(c.awaitClose())
		}},
	// RabbitMQ's channel_max limits how many channels are open at once,
	// not the channel numbers.
	{name: "channel.open/exceeds-channel-max", want: connErr(530, "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)"),
		run: func(t *testing.T, tg *target) outcome {
			c := rawDial(t, tg.addr)
			must(t, c.handshake(2, 0))
			must(t, c.openChannel(1))
			must(t, c.openChannel(2))
			must(t, c.sendMethod(3, &amqp.ChannelOpen{}))
			return rawOutcome(c.awaitClose())
		}},
	{name: "channel.open/number-above-channel-max-is-ok", want: noError,
		run: func(t *testing.T, tg *target) outcome {
			c := rawDial(t, tg.addr)
			must(t, c.handshake(2, 0))
			if err := c.openChannel(7); err != nil {
				return outcome{Level: err.Error()}
			}
			return noError
		}},
	{name: "channel-max/client-library-enforces-negotiated-max", want: outcome{Level: `client: Exception (504) Reason: "channel id space exhausted"`},
		run: func(t *testing.T, tg *target) outcome {
			conn, err := amqp091.DialConfig(tg.url, amqp091.Config{ChannelMax: 2})
			must(t, err)
			defer conn.Close()
			for i := 0; i < 2; i++ {
				_, err := conn.Channel()
				must(t, err)
			}
			if _, err := conn.Channel(); err != nil {
				return outcome{Level: "client: " + err.Error()}
			}
			return noError
		}},

	// --- 406: delete if-unused / if-empty ---
	{name: "queue.delete/if-unused-with-consumer", want: chanErr(406, "PRECONDITION_FAILED - queue '{p}-q' in vhost '/' in use"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.QueueDeclare(tg.name("q"), false, true, false, false, nil)
			must(t, err)
			_, err = s.channel().Consume(tg.name("q"), "", false, false, false, false, nil)
			must(t, err)
			_, err = s.ch.QueueDelete(tg.name("q"), true, false, false)
			return s.result(err)
		}},
	{name: "queue.delete/if-empty-with-message", want: chanErr(406, "PRECONDITION_FAILED - queue '{p}-q' in vhost '/' not empty"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.QueueDeclare(tg.name("q"), false, false, false, false, nil)
			must(t, err)
			tg.deleteLater([]string{tg.name("q")}, nil)
			if o := s.publish("", tg.name("q"), amqp091.Publishing{Body: []byte("x")}); o != noError {
				t.Fatalf("publish: %v", o)
			}
			_, err = s.ch.QueueDelete(tg.name("q"), false, true, false)
			return s.result(err)
		}},
	{name: "exchange.delete/if-unused-with-binding", want: chanErr(406, "PRECONDITION_FAILED - exchange '{p}-x' in vhost '/' in use"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			must(t, s.ch.ExchangeDeclare(tg.name("x"), "direct", false, false, false, false, nil))
			tg.deleteLater(nil, []string{tg.name("x")})
			must(t, s.ch.QueueBind(mustQueue(t, s), "k", tg.name("x"), false, nil))
			return s.result(s.ch.ExchangeDelete(tg.name("x"), true, false))
		}},

	// --- 403: exclusive consumers ---
	{name: "basic.consume/exclusive-when-consumer-exists", want: chanErr(403, "ACCESS_REFUSED - queue '{p}-q' in vhost '/' in exclusive use"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.QueueDeclare(tg.name("q"), false, true, false, false, nil)
			must(t, err)
			_, err = s.channel().Consume(tg.name("q"), "", false, false, false, false, nil)
			must(t, err)
			_, err = s.ch.Consume(tg.name("q"), "", false, true, false, false, nil)
			return s.result(err)
		}},
	{name: "basic.consume/when-exclusive-consumer-exists", want: chanErr(403, "ACCESS_REFUSED - queue '{p}-q' in vhost '/' in exclusive use"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.QueueDeclare(tg.name("q"), false, true, false, false, nil)
			must(t, err)
			_, err = s.channel().Consume(tg.name("q"), "", false, true, false, false, nil)
			must(t, err)
			_, err = s.ch.Consume(tg.name("q"), "", false, false, false, false, nil)
			return s.result(err)
		}},
	{name: "basic.consume/reused-consumer-tag", want: connErr(530, "NOT_ALLOWED - attempt to reuse consumer tag '{p}-tag'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			q := mustQueue(t, s)
			_, err := s.ch.Consume(q, tg.name("tag"), false, false, false, false, nil)
			must(t, err)
			_, err = s.ch.Consume(q, tg.name("tag"), false, false, false, false, nil)
			return s.result(err)
		}},

	// --- transactions and confirms ---
	{name: "tx.commit/without-tx.select", want: chanErr(406, "PRECONDITION_FAILED - channel is not transactional"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.result(s.ch.TxCommit())
		}},
	{name: "tx.rollback/without-tx.select", want: chanErr(406, "PRECONDITION_FAILED - channel is not transactional"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.result(s.ch.TxRollback())
		}},
	{name: "confirm.select/after-tx.select", want: chanErr(406, "PRECONDITION_FAILED - cannot switch from tx to confirm mode"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			must(t, s.ch.Tx())
			return s.result(s.ch.Confirm(false))
		}},
	{name: "tx.select/after-confirm.select", want: chanErr(406, "PRECONDITION_FAILED - cannot switch from confirm to tx mode"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			must(t, s.ch.Confirm(false))
			return s.result(s.ch.Tx())
		}},

	// --- 540 NOT_IMPLEMENTED ---
	{name: "basic.qos/prefetch-size", want: connErr(540, "NOT_IMPLEMENTED - prefetch_size!=0 (1)"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.result(s.ch.Qos(0, 1, false))
		}},
	{name: "basic.publish/immediate", want: connErr(540, "NOT_IMPLEMENTED - immediate=true"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.publishFlags("", mustQueue(t, s), false, true, amqp091.Publishing{Body: []byte("x")})
		}},
	{name: "basic.recover/requeue-false", want: connErr(540, "NOT_IMPLEMENTED - requeue=false"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.result(s.ch.Recover(false))
		}},

	// --- 406: message properties ---
	{name: "basic.publish/user_id-mismatch", want: chanErr(406, "PRECONDITION_FAILED - user_id property set to '{p}-nobody' but authenticated user was 'guest'"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.publish("", mustQueue(t, s), amqp091.Publishing{UserId: tg.name("nobody"), Body: []byte("x")})
		}},
	{name: "basic.publish/user_id-match-is-ok", want: noError,
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.publish("", mustQueue(t, s), amqp091.Publishing{UserId: "guest", Body: []byte("x")})
		}},

	// --- direct reply-to ---
	{name: "direct-reply-to/publish-without-consumer", want: chanErr(406, "PRECONDITION_FAILED - fast reply consumer does not exist"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			return s.publish("", mustQueue(t, s), amqp091.Publishing{ReplyTo: "amq.rabbitmq.reply-to", Body: []byte("x")})
		}},
	{name: "direct-reply-to/consume-with-acks", want: chanErr(406, "PRECONDITION_FAILED - reply consumer cannot acknowledge"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.Consume("amq.rabbitmq.reply-to", "", false, false, false, false, nil)
			return s.result(err)
		}},
	{name: "direct-reply-to/consume-twice", want: chanErr(406, "PRECONDITION_FAILED - reply consumer already set"),
		run: func(t *testing.T, tg *target) outcome {
			s := tg.session(t)
			_, err := s.ch.Consume("amq.rabbitmq.reply-to", "", true, false, false, false, nil)
			must(t, err)
			_, err = s.ch.Consume("amq.rabbitmq.reply-to", "", true, false, false, false, nil)
			return s.result(err)
		}},
}

// rawLoginOutcome runs a raw handshake expected to fail.
func rawLoginOutcome(t *testing.T, tg *target, l rawLogin) outcome {
	c := rawDial(t, tg.addr)
	err := c.handshakeWith(l)
	var um *unexpectedMethod
	switch {
	case err == nil:
		return noError
	case errors.As(err, &um):
		if cc, ok := um.m.(*amqp.ConnectionClose); ok {
			_ = c.sendMethod(0, &amqp.ConnectionCloseOk{})
			return connErr(int(cc.ReplyCode), cc.ReplyText)
		}
		return outcome{Level: err.Error()}
	}
	return rawOutcome(closeResult{Level: "dropped", Err: err})
}

func lockedText(q string) string {
	return "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '" + q + "' in vhost '/'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration."
}

// mustQueue declares a server-named exclusive queue.
func mustQueue(t *testing.T, s *session) string {
	t.Helper()
	q, err := s.ch.QueueDeclare("", false, true, true, false, nil)
	must(t, err)
	return q.Name
}

// expand replaces "{p}" with the target's scenario prefix and "{b}" with
// its run prefix.
func (o outcome) expand(tg *target) outcome {
	o.Reason = strings.NewReplacer("{p}", tg.prefix, "{b}", tg.base).Replace(o.Reason)
	return o
}

func TestErrorReplies(t *testing.T) {
	t.Parallel()
	warren := newWarrenTarget(t)
	var rabbit *target
	if u := rabbitURL(t); u != "" {
		rabbit = newRabbitTarget(t, u)
		t.Cleanup(rabbit.close)
	}
	seen := map[string]bool{}
	for i, sc := range errScenarios {
		if seen[sc.name] {
			t.Fatalf("duplicate scenario %q", sc.name)
		}
		seen[sc.name] = true
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel() // every name a scenario makes starts with its own prefix
			warren := warren.scenario(fmt.Sprintf("%s-%d", warren.base, i))
			got := sc.run(t, warren)
			if want := sc.want.expand(warren); got != want {
				t.Errorf("warren:\n got %v\nwant %v", got, want)
			}
			if rabbit == nil {
				return
			}
			rabbit := rabbit.scenario(fmt.Sprintf("%s-%d", rabbit.base, i))
			want := sc.want.expand(rabbit)
			diff, allowed := rabbitDifferences[sc.name]
			if allowed {
				want = diff.rabbit.expand(rabbit)
			}
			if got := sc.run(t, rabbit); got != want {
				t.Errorf("rabbitmq:\n got %v\nwant %v", got, want)
			} else if allowed {
				t.Logf("allowed difference from RabbitMQ: %s", diff.reason)
			}
		})
	}
	for name := range rabbitDifferences {
		if !seen[name] {
			t.Errorf("rabbitDifferences names unknown scenario %q", name)
		}
	}
}
