'use strict';
// Interop tests for the amqplib (Node.js) AMQP 0-9-1 client.
//
//   cd interop/amqplib && npm ci
//   AMQP_URL=amqp://guest:guest@127.0.0.1:5672/ node --test test/
//
// Every test names its own queues/exchanges with a random suffix and deletes
// them afterwards, so the suite can run against a shared broker.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const { once } = require('node:events');
const amqp = require('amqplib');

const URL = process.env.AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672/';
const WAIT_MS = 10000;

let conn;
const cleanupQueues = [];
const cleanupExchanges = [];

function uniq(prefix) {
  return `interop.amqplib.${prefix}.${crypto.randomBytes(6).toString('hex')}`;
}

function withTimeout(promise, what, ms = WAIT_MS) {
  let timer;
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timeout waiting for ${what}`)), ms);
  });
  return Promise.race([promise, t]).finally(() => clearTimeout(timer));
}

async function declareQueue(ch, options = {}) {
  const name = uniq('q');
  const ok = await ch.assertQueue(name, options);
  assert.equal(ok.queue, name);
  cleanupQueues.push(name);
  return name;
}

async function declareExchange(ch, type) {
  const name = uniq(`x.${type}`);
  await ch.assertExchange(name, type, { durable: false });
  cleanupExchanges.push(name);
  return name;
}

// basic.get every message (auto-ack) and return the bodies as strings.
async function drain(ch, queue) {
  const out = [];
  for (;;) {
    const msg = await ch.get(queue, { noAck: true });
    if (msg === false) return out;
    out.push(msg.content.toString());
  }
}

// Collects channel 'error' events so that an expected channel close does not
// surface as an unhandled 'error' event.
// (events.once would reject on the 'error' event, so use a plain listener.)
function closedPromise(ch) {
  return new Promise((resolve) => ch.once('close', resolve));
}

function trackErrors(ch) {
  const errors = [];
  ch.on('error', (err) => errors.push(err));
  return errors;
}

before(async () => {
  conn = await withTimeout(
    amqp.connect(URL, { clientProperties: { connection_name: 'warren-interop-amqplib' } }),
    'connect',
  );
  conn.on('error', (err) => {
    console.error('connection error:', err);
  });
});

after(async () => {
  if (!conn) return;
  const ch = await conn.createChannel();
  for (const q of cleanupQueues) await ch.deleteQueue(q);
  for (const x of cleanupExchanges) await ch.deleteExchange(x);
  await ch.close();
  await conn.close();
});

test('server properties and queue declare', async () => {
  const props = conn.connection.serverProperties;
  assert.equal(typeof props.product, 'string');
  const ch = await conn.createChannel();
  const q = await declareQueue(ch, { durable: true });
  const ok = await ch.checkQueue(q);
  assert.deepEqual(ok, { queue: q, messageCount: 0, consumerCount: 0 });
  const gen = await ch.assertQueue('', { exclusive: true });
  assert.match(gen.queue, /^amq\.gen-/);
  await ch.close();
});

test('publisher confirms', async () => {
  const ch = await conn.createConfirmChannel();
  const q = await declareQueue(ch);
  const acks = [];
  ch.on('ack', (f) => acks.push(f));
  const n = 100;
  const confirmed = [];
  for (let i = 0; i < n; i++) {
    confirmed.push(
      new Promise((resolve, reject) => {
        ch.sendToQueue(
          q,
          Buffer.from(`msg-${i}`),
          { persistent: true, contentType: 'text/plain', headers: { i }, messageId: String(i) },
          (err) => (err ? reject(err) : resolve()),
        );
      }),
    );
  }
  await withTimeout(Promise.all(confirmed), 'publisher confirms');
  await withTimeout(ch.waitForConfirms(), 'waitForConfirms');
  assert.ok(acks.length > 0 && acks.length <= n, `got ${acks.length} basic.ack frames`);
  // Acks carry increasing delivery tags, the last one covering message n.
  assert.equal(acks[acks.length - 1].deliveryTag, n);
  const ok = await ch.checkQueue(q);
  assert.equal(ok.messageCount, n);
  const msg = await ch.get(q, { noAck: true });
  assert.equal(msg.content.toString(), 'msg-0');
  assert.equal(msg.properties.contentType, 'text/plain');
  assert.equal(msg.properties.deliveryMode, 2);
  assert.deepEqual(msg.properties.headers, { i: 0 });
  assert.equal(msg.properties.messageId, '0');
  assert.equal(msg.fields.messageCount, n - 1);
  await ch.close();
});

test('consume with manual acks and prefetch 10', async () => {
  const ch = await conn.createConfirmChannel();
  const q = await declareQueue(ch);
  const total = 35;
  for (let i = 0; i < total; i++) ch.sendToQueue(q, Buffer.from(String(i)));
  await withTimeout(ch.waitForConfirms(), 'confirms');

  await ch.prefetch(10);
  let unacked = [];
  const received = [];
  let maxInFlight = 0;
  let wake = null;
  const { consumerTag } = await ch.consume(
    q,
    (msg) => {
      assert.ok(msg, 'consumer cancelled unexpectedly');
      assert.equal(msg.fields.redelivered, false);
      unacked.push(msg);
      received.push(Number(msg.content.toString()));
      maxInFlight = Math.max(maxInFlight, unacked.length);
      if (wake) wake();
    },
    { noAck: false },
  );

  const deadline = Date.now() + 3 * WAIT_MS;
  while (received.length < total || unacked.length > 0) {
    assert.ok(Date.now() < deadline, 'consume took too long');
    // Wait until deliveries stop arriving for 300ms: the window is full.
    await new Promise((resolve) => {
      let timer = setTimeout(resolve, 300);
      wake = () => {
        clearTimeout(timer);
        timer = setTimeout(resolve, 300);
      };
    });
    wake = null;
    assert.ok(unacked.length <= 10, `${unacked.length} unacked deliveries in flight`);
    const consumedSoFar = received.length - unacked.length;
    assert.equal(unacked.length, Math.min(10, total - consumedSoFar), 'prefetch window not full');
    if (unacked.length > 0) {
      ch.ack(unacked[unacked.length - 1], true); // multiple
      unacked = [];
    }
  }
  await ch.cancel(consumerTag);
  assert.equal(maxInFlight, 10);
  assert.deepEqual(
    received,
    Array.from({ length: total }, (_, i) => i),
  );
  assert.equal((await ch.checkQueue(q)).messageCount, 0);
  await ch.close();
});

test('channel error 404 and recovery on a new channel', async () => {
  const ch = await conn.createChannel();
  const errors = trackErrors(ch);
  const closed = closedPromise(ch);
  const missing = uniq('missing');
  await assert.rejects(ch.checkQueue(missing), (err) => {
    assert.equal(err.code, 404);
    assert.match(err.message, /with message "NOT_FOUND - no queue /);
    assert.ok(err.message.includes(missing), err.message);
    return true;
  });
  await withTimeout(closed, 'channel close');
  assert.equal(errors.length, 1);
  assert.equal(errors[0].code, 404);
  // The channel is unusable, the connection is not.
  await assert.rejects(ch.checkQueue('x'));

  const ch2 = await conn.createConfirmChannel();
  const q = await declareQueue(ch2);
  ch2.sendToQueue(q, Buffer.from('after-error'));
  await ch2.waitForConfirms();
  assert.deepEqual(await drain(ch2, q), ['after-error']);

  // Another error: publish to a missing exchange closes only that channel.
  const ch3 = await conn.createChannel();
  const errors3 = trackErrors(ch3);
  const closed3 = closedPromise(ch3);
  ch3.publish(uniq('nox'), 'k', Buffer.from('x'));
  await withTimeout(closed3, 'channel close after publish to missing exchange');
  assert.equal(errors3.length, 1);
  assert.equal(errors3[0].code, 404);
  assert.match(errors3[0].message, /NOT_FOUND - no exchange /);

  ch2.sendToQueue(q, Buffer.from('still-open'));
  await ch2.waitForConfirms();
  assert.deepEqual(await drain(ch2, q), ['still-open']);
  await ch2.close();
});

test('precondition failed 406', async () => {
  const ch = await conn.createChannel();
  const errors = trackErrors(ch);
  const q = await declareQueue(ch, { durable: false });
  await assert.rejects(ch.assertQueue(q, { durable: true }), (err) => {
    assert.equal(err.code, 406);
    assert.match(err.message, /PRECONDITION_FAILED/);
    return true;
  });
  assert.equal(errors.length, 1);
});

test('basic.get, nack with requeue and the redelivered flag', async () => {
  const ch = await conn.createConfirmChannel();
  const q = await declareQueue(ch);
  ch.sendToQueue(q, Buffer.from('one'));
  ch.sendToQueue(q, Buffer.from('two'));
  await ch.waitForConfirms();

  let m = await ch.get(q, { noAck: false });
  assert.equal(m.content.toString(), 'one');
  assert.equal(m.fields.redelivered, false);
  assert.equal(m.fields.messageCount, 1);
  ch.nack(m, false, true);

  m = await ch.get(q, { noAck: false });
  assert.equal(m.content.toString(), 'one');
  assert.equal(m.fields.redelivered, true);
  ch.ack(m);

  m = await ch.get(q, { noAck: false });
  assert.equal(m.content.toString(), 'two');
  assert.equal(m.fields.redelivered, false);
  ch.reject(m, false); // dropped

  assert.equal(await ch.get(q), false); // basic.get-empty
  assert.equal((await ch.checkQueue(q)).messageCount, 0);

  // Unacked messages are requeued (redelivered) when their channel closes.
  ch.sendToQueue(q, Buffer.from('three'));
  await ch.waitForConfirms();
  m = await ch.get(q, { noAck: false });
  assert.equal(m.fields.redelivered, false);
  await ch.close();
  const ch2 = await conn.createChannel();
  m = await ch2.get(q, { noAck: true });
  assert.equal(m.content.toString(), 'three');
  assert.equal(m.fields.redelivered, true);
  await ch2.close();
});

test('direct exchange', async () => {
  const ch = await conn.createConfirmChannel();
  const x = await declareExchange(ch, 'direct');
  const qa = await declareQueue(ch);
  const qb = await declareQueue(ch);
  await ch.bindQueue(qa, x, 'a');
  await ch.bindQueue(qb, x, 'b');
  await ch.bindQueue(qa, x, 'both');
  await ch.bindQueue(qb, x, 'both');
  for (const k of ['a', 'b', 'both', 'none']) ch.publish(x, k, Buffer.from(k));
  await ch.waitForConfirms();
  assert.deepEqual(await drain(ch, qa), ['a', 'both']);
  assert.deepEqual(await drain(ch, qb), ['b', 'both']);
  await ch.unbindQueue(qa, x, 'a');
  ch.publish(x, 'a', Buffer.from('a2'));
  await ch.waitForConfirms();
  assert.deepEqual(await drain(ch, qa), []);
  await ch.close();
});

test('fanout exchange', async () => {
  const ch = await conn.createConfirmChannel();
  const x = await declareExchange(ch, 'fanout');
  const qs = [await declareQueue(ch), await declareQueue(ch), await declareQueue(ch)];
  for (const q of qs) await ch.bindQueue(q, x, 'ignored');
  ch.publish(x, 'whatever', Buffer.from('f1'));
  ch.publish(x, '', Buffer.from('f2'));
  await ch.waitForConfirms();
  for (const q of qs) assert.deepEqual(await drain(ch, q), ['f1', 'f2']);
  await ch.close();
});

test('topic exchange', async () => {
  const ch = await conn.createConfirmChannel();
  const x = await declareExchange(ch, 'topic');
  const [qStar, qHash, qMid, qAll] = [
    await declareQueue(ch),
    await declareQueue(ch),
    await declareQueue(ch),
    await declareQueue(ch),
  ];
  await ch.bindQueue(qStar, x, 'stock.*.nyse');
  await ch.bindQueue(qHash, x, 'stock.#');
  await ch.bindQueue(qMid, x, '*.eur.#');
  await ch.bindQueue(qAll, x, '#');
  const keys = ['stock.ibm.nyse', 'stock.eur', 'stock.eur.lse.x', 'fx.eur', 'stock', 'bond.usd.nyse', ''];
  for (const k of keys) ch.publish(x, k, Buffer.from(k));
  await ch.waitForConfirms();
  assert.deepEqual(await drain(ch, qStar), ['stock.ibm.nyse']);
  assert.deepEqual(await drain(ch, qHash), ['stock.ibm.nyse', 'stock.eur', 'stock.eur.lse.x', 'stock']);
  assert.deepEqual(await drain(ch, qMid), ['stock.eur', 'stock.eur.lse.x', 'fx.eur']);
  assert.deepEqual(await drain(ch, qAll), keys);
  await ch.close();
});

test('mandatory unroutable publish gets basic.return 312 NO_ROUTE', async () => {
  const ch = await conn.createConfirmChannel();
  const x = await declareExchange(ch, 'direct');
  const returned = once(ch, 'return');
  let confirmErr;
  const confirmed = new Promise((resolve) => {
    ch.publish(x, 'nobody', Buffer.from('lost'), { mandatory: true, messageId: 'm1' }, (err) => {
      confirmErr = err;
      resolve();
    });
  });
  const [msg] = await withTimeout(returned, 'basic.return');
  assert.equal(msg.fields.replyCode, 312);
  assert.equal(msg.fields.replyText, 'NO_ROUTE');
  assert.equal(msg.fields.exchange, x);
  assert.equal(msg.fields.routingKey, 'nobody');
  assert.equal(msg.properties.messageId, 'm1');
  assert.equal(msg.content.toString(), 'lost');
  // A returned message is still confirmed with basic.ack.
  await withTimeout(confirmed, 'confirm of returned message');
  assert.equal(confirmErr, null);
  await ch.close();
});

test('large message spanning many frames', async () => {
  const ch = await conn.createConfirmChannel();
  const q = await declareQueue(ch);
  const body = crypto.randomBytes(1 << 20);
  ch.sendToQueue(q, body);
  ch.sendToQueue(q, Buffer.alloc(0));
  await ch.waitForConfirms();
  const m1 = await ch.get(q, { noAck: true });
  assert.ok(body.equals(m1.content));
  const m2 = await ch.get(q, { noAck: true });
  assert.equal(m2.content.length, 0);
  await ch.close();
});
