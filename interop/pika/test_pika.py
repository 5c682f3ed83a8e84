#!/usr/bin/python3
"""Interop tests for the pika (Python) AMQP 0-9-1 client.

The broker URL comes from the environment variable AMQP_URL, e.g.

    AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ /usr/bin/python3 interop/pika/test_pika.py -v

Only the standard library (unittest) and pika are used. Every test names its
own queues/exchanges with a random suffix and deletes them afterwards, so the
suite can run against a shared broker (e.g. a real RabbitMQ).
"""

import os
import sys
import time
import unittest
import uuid

import pika
import pika.exceptions

URL = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")

# Upper bound for any single wait on the broker.
WAIT = 10.0


def uniq(prefix):
    return "interop.pika.%s.%s" % (prefix, uuid.uuid4().hex[:12])


def connect():
    params = pika.URLParameters(URL)
    params.socket_timeout = WAIT
    params.blocked_connection_timeout = WAIT
    params.connection_attempts = 1
    params.client_properties = {"connection_name": "warren-interop-pika"}
    return pika.BlockingConnection(params)


class PikaInterop(unittest.TestCase):
    def setUp(self):
        self.conn = connect()
        self.ch = self.conn.channel()
        self.queues = []
        self.exchanges = []

    def tearDown(self):
        try:
            if self.conn.is_open:
                ch = self.conn.channel()
                for q in self.queues:
                    ch.queue_delete(q)
                for x in self.exchanges:
                    ch.exchange_delete(x)
                ch.close()
        finally:
            if self.conn.is_open:
                self.conn.close()

    # helpers -------------------------------------------------------------

    def declare_queue(self, ch=None, **kw):
        ch = ch or self.ch
        name = uniq("q")
        ok = ch.queue_declare(queue=name, **kw)
        self.assertEqual(ok.method.queue, name)
        self.queues.append(name)
        return name

    def declare_exchange(self, kind):
        name = uniq("x." + kind)
        self.ch.exchange_declare(exchange=name, exchange_type=kind)
        self.exchanges.append(name)
        return name

    def message_count(self, queue):
        ok = self.ch.queue_declare(queue=queue, passive=True)
        return ok.method.message_count

    def drain(self, queue, ch=None):
        """basic_get every message of queue (acking them); returns bodies."""
        ch = ch or self.ch
        bodies = []
        while True:
            method, _props, body = ch.basic_get(queue=queue, auto_ack=True)
            if method is None:
                return bodies
            bodies.append(body)

    # tests ---------------------------------------------------------------

    def test_queue_declare(self):
        q = self.declare_queue(durable=True)
        ok = self.ch.queue_declare(queue=q, passive=True)
        self.assertEqual(ok.method.queue, q)
        self.assertEqual(ok.method.message_count, 0)
        self.assertEqual(ok.method.consumer_count, 0)
        # Server-named queue.
        ok = self.ch.queue_declare(queue="", exclusive=True)
        self.assertTrue(ok.method.queue.startswith("amq.gen-"), ok.method.queue)

    def test_publisher_confirms(self):
        q = self.declare_queue()
        self.ch.confirm_delivery()
        n = 50
        for i in range(n):
            # With confirms enabled, BlockingChannel.basic_publish waits for
            # the broker's basic.ack and raises NackError on basic.nack.
            self.ch.basic_publish(
                exchange="",
                routing_key=q,
                body=("msg-%d" % i).encode(),
                properties=pika.BasicProperties(
                    delivery_mode=2, content_type="text/plain",
                    headers={"i": i}, message_id=str(i)),
            )
        self.assertEqual(self.message_count(q), n)
        method, props, body = self.ch.basic_get(queue=q, auto_ack=True)
        self.assertEqual(body, b"msg-0")
        self.assertEqual(props.content_type, "text/plain")
        self.assertEqual(props.delivery_mode, 2)
        self.assertEqual(props.headers, {"i": 0})
        self.assertEqual(props.message_id, "0")
        self.assertEqual(method.message_count, n - 1)

    def test_consume_manual_ack_prefetch(self):
        q = self.declare_queue()
        self.ch.confirm_delivery()
        total = 35
        for i in range(total):
            self.ch.basic_publish(exchange="", routing_key=q, body=str(i).encode())

        self.ch.basic_qos(prefetch_count=10)
        unacked = []
        received = []
        max_in_flight = 0
        deadline = time.monotonic() + 3 * WAIT
        for method, _props, body in self.ch.consume(
                q, auto_ack=False, inactivity_timeout=0.5):
            self.assertLess(time.monotonic(), deadline, "consume took too long")
            if method is None:
                # Broker stopped delivering: the prefetch window must be full
                # (or the queue empty).
                expected = min(10, total - (len(received) - len(unacked)))
                self.assertEqual(len(unacked), expected,
                                 "stalled with %d unacked" % len(unacked))
                if not unacked:
                    break
                # Ack the window with one multiple-ack.
                self.ch.basic_ack(delivery_tag=unacked[-1], multiple=True)
                unacked = []
                if len(received) == total:
                    break
                continue
            self.assertFalse(method.redelivered)
            unacked.append(method.delivery_tag)
            received.append(int(body))
            max_in_flight = max(max_in_flight, len(unacked))
            self.assertLessEqual(len(unacked), 10,
                                 "more than prefetch_count unacked deliveries")
        self.ch.cancel()
        self.assertEqual(max_in_flight, 10)
        self.assertEqual(received, list(range(total)))
        self.assertEqual(self.message_count(q), 0)

    def test_consume_callback_and_cancel(self):
        q = self.declare_queue()
        for i in range(5):
            self.ch.basic_publish(exchange="", routing_key=q, body=str(i).encode())
        got = []

        def on_message(ch, method, _props, body):
            got.append(body)
            ch.basic_ack(delivery_tag=method.delivery_tag)

        tag = self.ch.basic_consume(queue=q, on_message_callback=on_message)
        deadline = time.monotonic() + WAIT
        while len(got) < 5 and time.monotonic() < deadline:
            self.conn.process_data_events(time_limit=0.2)
        self.assertEqual(got, [b"0", b"1", b"2", b"3", b"4"])
        ok = self.ch.queue_declare(queue=q, passive=True)
        self.assertEqual(ok.method.consumer_count, 1)
        self.ch.basic_cancel(tag)
        ok = self.ch.queue_declare(queue=q, passive=True)
        self.assertEqual(ok.method.consumer_count, 0)

    def test_channel_error_and_recovery(self):
        missing = uniq("missing")
        with self.assertRaises(pika.exceptions.ChannelClosedByBroker) as cm:
            self.ch.queue_declare(queue=missing, passive=True)
        self.assertEqual(cm.exception.reply_code, 404)
        self.assertTrue(
            cm.exception.reply_text.startswith("NOT_FOUND - no queue"),
            cm.exception.reply_text)
        self.assertIn(missing, cm.exception.reply_text)
        self.assertTrue(self.ch.is_closed)
        # The connection survives a channel error.
        self.assertTrue(self.conn.is_open)

        ch2 = self.conn.channel()
        q = self.declare_queue(ch=ch2)
        ch2.confirm_delivery()
        ch2.basic_publish(exchange="", routing_key=q, body=b"after-error")
        self.assertEqual(self.drain(q, ch=ch2), [b"after-error"])

        # A second, different channel error: publish to a missing exchange.
        ch3 = self.conn.channel()
        ch3.confirm_delivery()
        with self.assertRaises(pika.exceptions.ChannelClosedByBroker) as cm:
            ch3.basic_publish(exchange=uniq("nox"), routing_key="k", body=b"x")
        self.assertEqual(cm.exception.reply_code, 404)
        self.assertTrue(
            cm.exception.reply_text.startswith("NOT_FOUND - no exchange"),
            cm.exception.reply_text)
        # ch2 is unaffected.
        self.assertTrue(ch2.is_open)
        ch2.basic_publish(exchange="", routing_key=q, body=b"still-open")
        self.assertEqual(self.drain(q, ch=ch2), [b"still-open"])
        self.ch = ch2

    def test_precondition_failed(self):
        q = self.declare_queue(durable=False)
        with self.assertRaises(pika.exceptions.ChannelClosedByBroker) as cm:
            self.ch.queue_declare(queue=q, durable=True)
        self.assertEqual(cm.exception.reply_code, 406)
        self.assertTrue(
            cm.exception.reply_text.startswith("PRECONDITION_FAILED"),
            cm.exception.reply_text)
        self.ch = self.conn.channel()

    def test_basic_get_nack_requeue_redelivered(self):
        q = self.declare_queue()
        self.ch.confirm_delivery()
        self.ch.basic_publish(exchange="", routing_key=q, body=b"one")
        self.ch.basic_publish(exchange="", routing_key=q, body=b"two")

        method, _props, body = self.ch.basic_get(queue=q, auto_ack=False)
        self.assertIsInstance(method, pika.spec.Basic.GetOk)
        self.assertEqual(body, b"one")
        self.assertFalse(method.redelivered)
        self.assertEqual(method.message_count, 1)
        self.ch.basic_nack(delivery_tag=method.delivery_tag, requeue=True)

        # Requeued at its original position, marked redelivered.
        method, _props, body = self.ch.basic_get(queue=q, auto_ack=False)
        self.assertEqual(body, b"one")
        self.assertTrue(method.redelivered)
        self.ch.basic_ack(delivery_tag=method.delivery_tag)

        method, _props, body = self.ch.basic_get(queue=q, auto_ack=False)
        self.assertEqual(body, b"two")
        self.assertFalse(method.redelivered)
        self.assertEqual(method.message_count, 0)
        # nack without requeue drops it.
        self.ch.basic_nack(delivery_tag=method.delivery_tag, requeue=False)

        method, props, body = self.ch.basic_get(queue=q, auto_ack=False)
        self.assertIsNone(method)  # basic.get-empty
        self.assertEqual(self.message_count(q), 0)

    def test_reject_and_recover(self):
        q = self.declare_queue()
        self.ch.confirm_delivery()
        self.ch.basic_publish(exchange="", routing_key=q, body=b"r")
        method, _p, _b = self.ch.basic_get(queue=q)
        self.ch.basic_reject(delivery_tag=method.delivery_tag, requeue=True)
        method, _p, body = self.ch.basic_get(queue=q)
        self.assertTrue(method.redelivered)
        self.assertEqual(body, b"r")
        # Closing the channel with an unacked message requeues it.
        self.ch.close()
        self.ch = self.conn.channel()
        method, _p, body = self.ch.basic_get(queue=q, auto_ack=True)
        self.assertEqual(body, b"r")
        self.assertTrue(method.redelivered)

    def test_exchange_direct(self):
        x = self.declare_exchange("direct")
        qa, qb = self.declare_queue(), self.declare_queue()
        self.ch.queue_bind(queue=qa, exchange=x, routing_key="a")
        self.ch.queue_bind(queue=qb, exchange=x, routing_key="b")
        self.ch.queue_bind(queue=qb, exchange=x, routing_key="both")
        self.ch.queue_bind(queue=qa, exchange=x, routing_key="both")
        self.ch.confirm_delivery()
        for key in ("a", "b", "both", "none"):
            self.ch.basic_publish(exchange=x, routing_key=key, body=key.encode())
        self.assertEqual(self.drain(qa), [b"a", b"both"])
        self.assertEqual(self.drain(qb), [b"b", b"both"])
        self.ch.queue_unbind(queue=qa, exchange=x, routing_key="a")
        self.ch.basic_publish(exchange=x, routing_key="a", body=b"a2")
        self.assertEqual(self.drain(qa), [])

    def test_exchange_fanout(self):
        x = self.declare_exchange("fanout")
        qs = [self.declare_queue() for _ in range(3)]
        for q in qs:
            self.ch.queue_bind(queue=q, exchange=x, routing_key="ignored")
        self.ch.confirm_delivery()
        self.ch.basic_publish(exchange=x, routing_key="whatever", body=b"f1")
        self.ch.basic_publish(exchange=x, routing_key="", body=b"f2")
        for q in qs:
            self.assertEqual(self.drain(q), [b"f1", b"f2"])

    def test_exchange_topic(self):
        x = self.declare_exchange("topic")
        q_star, q_hash, q_mid, q_all = (self.declare_queue() for _ in range(4))
        self.ch.queue_bind(queue=q_star, exchange=x, routing_key="stock.*.nyse")
        self.ch.queue_bind(queue=q_hash, exchange=x, routing_key="stock.#")
        self.ch.queue_bind(queue=q_mid, exchange=x, routing_key="*.eur.#")
        self.ch.queue_bind(queue=q_all, exchange=x, routing_key="#")
        self.ch.confirm_delivery()
        keys = ["stock.ibm.nyse", "stock.eur", "stock.eur.lse.x",
                "fx.eur", "stock", "bond.usd.nyse", ""]
        for k in keys:
            self.ch.basic_publish(exchange=x, routing_key=k, body=k.encode())
        self.assertEqual(self.drain(q_star), [b"stock.ibm.nyse"])
        self.assertEqual(self.drain(q_hash),
                         [b"stock.ibm.nyse", b"stock.eur", b"stock.eur.lse.x", b"stock"])
        self.assertEqual(self.drain(q_mid),
                         [b"stock.eur", b"stock.eur.lse.x", b"fx.eur"])
        self.assertEqual(self.drain(q_all), [k.encode() for k in keys])

    def test_mandatory_unroutable_basic_return(self):
        x = self.declare_exchange("direct")
        returned = []

        def on_return(_ch, method, props, body):
            returned.append((method, props, body))

        self.ch.add_on_return_callback(on_return)
        self.ch.basic_publish(exchange=x, routing_key="nobody", body=b"lost",
                              properties=pika.BasicProperties(message_id="m1"),
                              mandatory=True)
        deadline = time.monotonic() + WAIT
        while not returned and time.monotonic() < deadline:
            self.conn.process_data_events(time_limit=0.2)
        self.assertEqual(len(returned), 1)
        method, props, body = returned[0]
        self.assertEqual(method.reply_code, 312)
        self.assertEqual(method.reply_text, "NO_ROUTE")
        self.assertEqual(method.exchange, x)
        self.assertEqual(method.routing_key, "nobody")
        self.assertEqual(props.message_id, "m1")
        self.assertEqual(body, b"lost")

    def test_mandatory_unroutable_with_confirms(self):
        x = self.declare_exchange("fanout")
        self.ch.confirm_delivery()
        # With confirms, pika raises UnroutableError for a returned message
        # (basic.return followed by basic.ack).
        with self.assertRaises(pika.exceptions.UnroutableError) as cm:
            self.ch.basic_publish(exchange=x, routing_key="k", body=b"u",
                                  mandatory=True)
        msgs = cm.exception.messages
        self.assertEqual(len(msgs), 1)
        self.assertEqual(msgs[0].method.reply_code, 312)
        self.assertEqual(msgs[0].method.reply_text, "NO_ROUTE")
        self.assertEqual(msgs[0].body, b"u")
        # Non-mandatory unroutable publish is silently dropped and acked.
        self.ch.basic_publish(exchange=x, routing_key="k", body=b"u2")
        self.assertTrue(self.ch.is_open)

    def test_large_message(self):
        q = self.declare_queue()
        self.ch.confirm_delivery()
        body = os.urandom(1 << 20)  # spans many frames
        self.ch.basic_publish(exchange="", routing_key=q, body=body)
        self.ch.basic_publish(exchange="", routing_key=q, body=b"")
        self.assertEqual(self.drain(q), [body, b""])


if __name__ == "__main__":
    if "AMQP_URL" not in os.environ:
        print("AMQP_URL not set; using %s" % URL, file=sys.stderr)
    unittest.main(verbosity=2)
