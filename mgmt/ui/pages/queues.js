// Queues: the list (filter, sort, paging, features, add a queue) and a
// queue's page: charts of its rates and lengths, details, quorum members,
// a stream's log and replicas, consumers, bindings (add, remove), publish, get, move, purge, delete,
// and the message browser (ready messages, read without consuming them,
// with their x-death history decoded).

import {
  REASONS, api, ask, badge, bytes, card, confirmAction, crumbs, enc, errText, exchangeHref, exchangeName, field, h,
  items, kvTable, listView, newView, notify, num, pick, plural, poll, props, purgeQueue, queueHref, rateOf, rateText,
  refreshNow, showError, timeText, valueText, vhostSelect, yes,
} from '../core.js';
import {historyQuery, lengthsChart, rangeSelect, ratesChart} from '../chart.js';
import {argsEditor, publishForm} from '../forms.js';

export const routes = [
  [/^#\/queues\/?$/, 'queues', queuesPage],
  [/^#\/queues\/([^/]+)\/([^/]+)$/, 'queues', queuePage],
];

// FEATURES are the queue arguments the list abbreviates, as RabbitMQ's
// UI does: [argument, short, what it is].
const FEATURES = [
  ['x-message-ttl', 'TTL', 'message TTL'], ['x-expires', 'Exp', 'queue expiry'],
  ['x-max-length', 'Lim', 'maximum length'], ['x-max-length-bytes', 'Lim B', 'maximum length in bytes'],
  ['x-overflow', 'Ovfl', 'overflow behaviour'], ['x-delivery-limit', 'DlL', 'delivery limit'],
  ['x-dead-letter-exchange', 'DLX', 'dead-letter exchange'], ['x-dead-letter-routing-key', 'DLK', 'dead-letter routing key'],
  ['x-max-priority', 'Pri', 'maximum priority'], ['x-single-active-consumer', 'SAC', 'single active consumer'],
  ['x-queue-mode', 'Mode', 'queue mode'], ['x-max-age', 'MaxAge', 'maximum age'],
];
const FEATURE_KEYS = new Set([...FEATURES.map(f => f[0]), 'x-queue-type']);

// features are a queue's abbreviated properties: D (durable), AD
// (auto-delete), Excl, the arguments of FEATURES, Args for any other, and
// its policies. Each says in full what it is on hover and to a screen reader.
export function features(q) {
  const args = q.arguments || {};
  const f = (text, title, kind) => h('span', {class: 'badge feature ' + (kind || ''), title, 'aria-label': title}, text);
  const out = [];
  if (q.durable) out.push(f('D', 'durable'));
  if (q.auto_delete) out.push(f('AD', 'auto-delete'));
  if (q.exclusive) out.push(f('Excl', 'exclusive'));
  for (const [k, short, what] of FEATURES) {
    if (k in args) out.push(f(short, `${what} (${k}): ${valueText(args[k])}`));
  }
  const other = Object.keys(args).filter(k => !FEATURE_KEYS.has(k));
  if (other.length) out.push(f('Args', other.map(k => `${k}: ${valueText(args[k])}`).join(', ')));
  if (q.policy) out.push(f(q.policy, `policy ${q.policy}`, 'ok'));
  if (q.operator_policy) out.push(f(q.operator_policy, `operator policy ${q.operator_policy}`, 'warn'));
  return out.length ? h('span', {class: 'features'}, out) : h('span', {class: 'muted'}, '—');
}

const QUEUE_COLUMNS = [
  {label: 'Virtual host', sort: 'vhost', cell: q => q.vhost},
  {label: 'Name', sort: 'name', cell: q => h('a', {href: queueHref(q.vhost, q.name)}, q.name)},
  {label: 'Type', sort: 'type', cell: q => q.type || 'classic', col: 'type'},
  {label: 'Features', cell: features, col: 'features'},
  {label: 'State', sort: 'state', cell: q => badge(q.state || '—', q.state === 'running' || q.state === 'idle' ? 'ok' : 'warn')},
  {label: 'Node', sort: 'node', cell: q => q.node || '—'},
  {label: 'Messages', sort: 'messages', cell: q => num(q.messages), num: true, col: 'messages'},
  {label: 'Ready', sort: 'messages_ready', cell: q => num(q.messages_ready), num: true, col: 'ready'},
  {label: 'Unacked', sort: 'messages_unacknowledged', cell: q => num(q.messages_unacknowledged), num: true, col: 'unacked'},
  {label: 'Consumers', sort: 'consumers', cell: q => num(q.consumers), num: true, col: 'consumers'},
  {label: 'Incoming', sort: 'message_stats.publish_details.rate', cell: q => rateText(rateOf(q, 'publish')), num: true, col: 'incoming'},
  {label: 'Deliver / get', sort: 'message_stats.deliver_get_details.rate', cell: q => rateText(rateOf(q, 'deliver_get')), num: true, col: 'deliver'},
  {label: 'Ack', sort: 'message_stats.ack_details.rate', cell: q => rateText(rateOf(q, 'ack')), num: true, col: 'ack'},
];

const queuesView = newView();

function queuesPage(ctx) {
  ctx.main.append(
    h('div', {class: 'title-row'}, h('h1', null, 'Queues'), h('span', {class: 'spacer'}),
      h('button', {type: 'button', class: 'primary', id: 'q-add', onclick: () => addQueue(ctx)}, 'Add a new queue')),
    listView(ctx, {id: 'queues', path: '/queues', columns: QUEUE_COLUMNS, view: queuesView, noun: 'queue',
      row: q => ({'data-vhost': q.vhost, 'data-name': q.name})}));
}

// ---- Arguments editor ------------------------------------------------------

// QUEUE_ARGS are offered as shortcuts: [key, label, type] (RabbitMQ's "Add:").
const QUEUE_ARGS = [
  ['x-message-ttl', 'Message TTL', 'number'], ['x-expires', 'Auto expire', 'number'],
  ['x-max-length', 'Max length', 'number'], ['x-max-length-bytes', 'Max length bytes', 'number'],
  ['x-overflow', 'Overflow behaviour', 'string'], ['x-dead-letter-exchange', 'Dead letter exchange', 'string'],
  ['x-dead-letter-routing-key', 'Dead letter routing key', 'string'], ['x-delivery-limit', 'Delivery limit', 'number'],
  ['x-single-active-consumer', 'Single active consumer', 'boolean'], ['x-max-priority', 'Maximum priority', 'number'],
  ['x-queue-leader-locator', 'Leader locator', 'string'], ['x-max-age', 'Max age (streams)', 'string'],
];

// ---- Add a queue -------------------------------------------------------------

async function addQueue(ctx) {
  const type = h('select', {name: 'type'}, ['classic', 'quorum', 'stream'].map(t => h('option', {value: t}, t)));
  const durable = h('select', {name: 'durable'}, h('option', {value: 'true'}, 'Durable'), h('option', {value: 'false'}, 'Transient'));
  const autoDelete = h('select', {name: 'auto_delete'}, h('option', {value: 'false'}, 'No'), h('option', {value: 'true'}, 'Yes'));
  // Quorum queues and streams are durable and never auto-deleted.
  type.addEventListener('change', () => {
    const replicated = type.value !== 'classic';
    if (replicated) { durable.value = 'true'; autoDelete.value = 'false'; }
    durable.disabled = autoDelete.disabled = replicated;
  });
  const args = argsEditor('aq-args', {quick: QUEUE_ARGS.map(([key, label, type]) => [label, key, type])});
  let created = null;
  const fd = await ask({
    title: 'Add a new queue', confirm: 'Add queue', wide: true,
    body: h('div', {class: 'form-grid'},
      field('aq-vhost', 'Virtual host', vhostSelect('aq-vhost')),
      field('aq-name', 'Name', h('input', {name: 'name', required: true, autocomplete: 'off'})),
      field('aq-type', 'Type', type),
      field('aq-durable', 'Durability', durable),
      field('aq-autodelete', 'Auto delete', autoDelete),
      h('div', {class: 'span-all'}, args.el)),
    check: async f => {
      const vhost = f.get('vhost');
      const name = String(f.get('name') || '');
      if (!name.trim()) return 'Enter a name.';
      const a = args.value();
      if (!('x-queue-type' in a) && type.value !== 'classic') a['x-queue-type'] = type.value;
      const path = `/queues/${enc(vhost)}/${enc(name)}`;
      // PUT of an existing queue with the same properties succeeds
      // silently: say so rather than pretend it was made.
      const exists = await api(path + '?columns=name').then(() => true, e => { if (e.status === 404) return false; throw e; });
      if (exists) return `A queue named ${name} already exists in vhost ${vhost}.`;
      await api(path, {method: 'PUT', body: {durable: durable.value === 'true', auto_delete: autoDelete.value === 'true', arguments: a}});
      created = {vhost, name};
      return '';
    },
  });
  if (!fd || !created) return;
  notify(`Queue ${created.name} added in vhost ${created.vhost}.`);
  refreshNow(ctx);
}

// ---- Move messages -----------------------------------------------------------

// moveMessages asks for a destination queue in the same vhost and moves
// the ready messages of vhost/name there with a dynamic shovel that
// deletes itself once it has moved the queue's length at its start
// (src-delete-after queue-length), as RabbitMQ's "Move messages" does.
// A refused shovel shows its reason in the dialog, which stays open.
// Resolves to {dest, shovel} once the shovel runs, or null if cancelled.
// The queue page and the dead-letter page share it.
export async function moveMessages(vhost, name, ready) {
  const dest = h('input', {name: 'dest', required: true, list: 'mv-queues', autocomplete: 'off'});
  const options = h('datalist', {id: 'mv-queues'});
  dest.addEventListener('input', () => dest.setCustomValidity(dest.value.trim() === name ? 'Choose a queue other than the source.' : ''));
  api(`/queues/${enc(vhost)}?columns=name`).then(qs => {
    options.replaceChildren(...items(qs).filter(q => q.name !== name).map(q => h('option', {value: q.name})));
  }).catch(() => {});
  let out = null;
  const fd = await ask({
    title: `Move messages from ${name}`,
    body: [
      h('p', null, `Move all ${ready == null ? 'ready messages' : plural(ready, 'ready message')} of `, h('strong', null, name),
        ` to another queue in vhost ${vhost}. Each message leaves ${name} once the destination has it.`),
      field('mv-dest', 'Destination queue', dest), options,
    ],
    confirm: 'Move messages',
    check: async f => {
      const destQ = String(f.get('dest') || '').trim();
      if (!destQ) return 'Enter the destination queue.';
      if (destQ === name) return 'Choose a queue other than the source.';
      const shovel = `move-${name}-${Date.now().toString(36)}`;
      const uri = 'amqp:///' + enc(vhost);
      await api(`/parameters/shovel/${enc(vhost)}/${enc(shovel)}`, {method: 'PUT', body: {
        component: 'shovel', vhost, name: shovel,
        value: {'src-uri': uri, 'src-queue': name, 'dest-uri': uri, 'dest-queue': destQ, 'src-delete-after': 'queue-length'},
      }});
      out = {dest: destQ, shovel};
      return '';
    },
  });
  return fd ? out : null;
}

// ---- Queue page ----------------------------------------------------------------

// RATE_STATS are a queue's charted rates; dead_lettered is Warren's.
const RATE_STATS = [['Publish', 'publish'], ['Deliver / get', 'deliver_get'], ['Ack', 'ack'],
  ['Redeliver', 'redeliver'], ['Dead-lettered', 'dead_lettered']];
const LENGTH_STATS = [['Ready', 'messages_ready'], ['Unacked', 'messages_unacknowledged'], ['Total', 'messages']];

function queuePage(ctx, vhost, name) {
  const qpath = `/queues/${enc(vhost)}/${enc(name)}`;
  const stats = h('div', {class: 'cards', id: 'q-stats'});
  const details = h('div', {class: 'details', id: 'q-details'});
  const quorum = h('section', {id: 'q-quorum', hidden: true});
  const streamEl = h('section', {id: 'q-stream', hidden: true});
  const consumers = h('div', {id: 'q-consumers'});
  const bindings = h('div', {id: 'q-bindings'});
  const typeBadge = h('span');
  const rates = ratesChart('q-rate-chart', 'Message rates', RATE_STATS);
  const lengths = lengthsChart('q-length-chart', 'Queued messages', LENGTH_STATS);
  const gone = () => { location.hash = '#/queues'; };
  let ready = null;
  let missing = false;

  const actions = h('div', {class: 'actions page-actions'},
    h('button', {type: 'button', class: 'secondary', id: 'q-move', onclick: async () => {
      const r = await moveMessages(vhost, name, ready);
      if (r) notify(`Moving messages from ${name} to ${r.dest} (shovel ${r.shovel}).`);
      refreshNow(ctx);
    }}, 'Move messages'),
    h('button', {type: 'button', class: 'danger', id: 'q-purge', onclick: () => purgeQueue(vhost, name, () => {
      refreshNow(ctx);
      loadMessages();
    })}, 'Purge messages'),
    h('button', {type: 'button', class: 'danger', id: 'q-delete', onclick: () => deleteQueue(vhost, name, gone)}, 'Delete queue'));

  ctx.main.append(
    crumbs([['Queues', '#/queues'], [`vhost ${vhost}`]]),
    h('div', {class: 'title-row'}, h('h1', null, name), typeBadge, h('span', {class: 'spacer'}), rangeSelect(() => ctx.reload())),
    actions,
    stats,
    h('div', {class: 'charts'}, rates.el, lengths.el),
    h('section', null, h('h2', null, 'Details'), details),
    quorum,
    streamEl,
    h('section', null, h('h2', null, 'Consumers'), consumers),
    h('section', null, h('h2', null, 'Bindings'), bindings, bindForm(ctx, vhost, name)),
    publishPanel(ctx, vhost, name),
    getPanel(ctx, vhost, name, () => loadMessages()));

  // One poll for the queue and its bindings: core's poll runs a second
  // registration first only at the next tick.
  poll(ctx, 'Loading the queue', async () => {
    if (missing) return;
    let q, bs;
    try {
      [q, bs] = await Promise.all([api(qpath + '?' + historyQuery()), api(qpath + '/bindings')]);
    } catch (err) {
      if (err.status !== 404 || !ctx.live()) throw err;
      // Deleted (or never there): say so once, rather than fail every 5 s.
      missing = true;
      ctx.main.replaceChildren(crumbs([['Queues', '#/queues'], [`vhost ${vhost}`]]), h('h1', null, name),
        h('p', {class: 'error', id: 'q-missing', role: 'alert'}, `There is no queue ${name} in vhost ${vhost} (any more). `,
          h('a', {href: '#/queues'}, 'Back to the queues'), '.'));
      return;
    }
    if (!ctx.live()) return;
    bindings.replaceChildren(bindingsTable(ctx, vhost, name, bs));
    ready = q.messages_ready;
    typeBadge.replaceChildren(badge(q.type || 'classic'));
    stats.replaceChildren(
      card('Messages', num(q.messages)),
      card('Ready', num(q.messages_ready)),
      card('Unacked', num(q.messages_unacknowledged)),
      card('Consumers', num(q.consumers)),
      card('Incoming', rateText(rateOf(q, 'publish'))),
      card('Deliver / get', rateText(rateOf(q, 'deliver_get'))),
      card('Ack', rateText(rateOf(q, 'ack'))));
    rates.update(q);
    lengths.update(q);
    const dead = Object.fromEntries(Object.entries(q.messages_dead_lettered || {}).filter(([, n]) => Number(n) > 0));
    const rows = [
      ['Virtual host', vhost], ['Type', q.type || 'classic'], ['State', q.state || '—'],
      ['Features', features(q)],
      ['Durable', yes(q.durable)], ['Auto-delete', yes(q.auto_delete)], ['Exclusive', yes(q.exclusive)],
      ['Policy', q.policy || '—'], ['Operator policy', q.operator_policy || '—'], ['Node', q.node || '—'],
      ['Consumer utilisation', q.consumer_utilisation != null ? `${Math.round(Number(q.consumer_utilisation) * 100)}%` : '—'],
      ['Memory', q.memory != null ? bytes(q.memory) : '—'],
      ['Message bytes', q.message_bytes != null ? bytes(q.message_bytes) : '—'],
      ['Persistent messages', q.messages_persistent != null ? num(q.messages_persistent) : '—'],
      ['Paged out', q.messages_paged_out != null ? num(q.messages_paged_out) : '—'],
      ['Idle since', q.idle_since ? timeText(q.idle_since) : '—'],
    ];
    if (q.messages_requeued != null) rows.push(['Requeued', num(q.messages_requeued)]);
    if (Object.keys(dead).length) {
      rows.push(['Dead-lettered', Object.entries(dead).map(([r, n]) => `${r}: ${num(n)}`).join(', ')]);
    }
    const eff = q.effective_policy_definition || {};
    details.replaceChildren(
      props(rows),
      h('div', {class: 'msg-cols'},
        h('div', null, h('h3', null, 'Arguments'), kvTable(q.arguments, 'args')),
        h('div', null, h('h3', null, 'Effective policy definition'), kvTable(eff, 'policy-def'))));
    consumers.replaceChildren(consumersTable(q.consumer_details || []));
    if (q.type === 'quorum') await drawQuorum(quorum, vhost, name, q);
    if (q.type === 'stream') await drawStream(streamEl, vhost, name, q);
  });

  // The message browser reloads on demand only, so it does not jump while
  // read. offset is a queue position: with a filter, the matches skip
  // positions, so Next starts after the last match and Previous goes back
  // through the offsets seen.
  const mb = {offset: 0, limit: 20, reason: '', source: '', back: [], next: null};
  const reason = h('input', {id: 'mb-reason', name: 'reason', list: 'mb-reasons', placeholder: 'any'});
  const source = h('input', {id: 'mb-source', name: 'source', placeholder: 'any'});
  const limit = h('select', {id: 'mb-limit'}, [10, 20, 50, 100].map(n => h('option', {value: n, selected: n === mb.limit}, n)));
  const summary = h('span', {class: 'muted', id: 'mb-summary'});
  const prev = h('button', {type: 'button', class: 'secondary small', onclick: () => {
    mb.offset = mb.back.pop() ?? 0;
    loadMessages();
  }}, 'Previous');
  const next = h('button', {type: 'button', class: 'secondary small', onclick: () => {
    mb.back.push(mb.offset);
    mb.offset = mb.next;
    loadMessages();
  }}, 'Next');
  const list = h('div', {id: 'messages', 'aria-live': 'polite'});
  const form = h('form', {class: 'toolbar', onsubmit: ev => {
    ev.preventDefault();
    Object.assign(mb, {offset: 0, back: [], limit: Number(limit.value), reason: reason.value.trim(), source: source.value.trim()});
    loadMessages();
  }},
    h('label', {for: 'mb-reason'}, 'Death reason'), reason,
    h('datalist', {id: 'mb-reasons'}, REASONS.map(r => h('option', {value: r}))),
    h('label', {for: 'mb-source'}, 'Source queue'), source,
    h('label', {for: 'mb-limit'}, 'Per page'), limit,
    h('button', {type: 'submit', class: 'primary small'}, 'Show messages'));
  ctx.main.append(h('section', {id: 'browser'},
    h('h2', null, 'Messages'),
    h('p', {class: 'muted'}, 'Ready messages, browsed without consuming them.'),
    form, h('div', {class: 'pager'}, summary, prev, next), list));

  async function loadMessages() {
    const qs = new URLSearchParams({offset: mb.offset, limit: mb.limit});
    const filtered = Boolean(mb.reason || mb.source);
    if (mb.reason) qs.set('reason', mb.reason);
    if (mb.source) qs.set('source_queue', mb.source);
    list.setAttribute('aria-busy', 'true');
    try {
      const data = await api(`/dead-letters/${enc(vhost)}/${enc(name)}/messages?` + qs);
      const msgs = data.messages || [];
      const total = Number(data.total) || 0;
      const first = msgs.length ? Number(msgs[0].position) : mb.offset;
      const last = msgs.length ? Number(msgs[msgs.length - 1].position) : mb.offset - 1;
      mb.next = last + 1;
      const of = `${plural(total, 'ready message')} in the queue`;
      if (!total) summary.textContent = 'No ready messages.';
      else if (!msgs.length) summary.textContent = `No ${filtered ? 'matching ' : ''}messages from position ${num(mb.offset)} · ${of}`;
      else if (filtered) summary.textContent = `${plural(msgs.length, 'matching message')} at positions ${num(first)}–${num(last)} · ${of}`;
      else summary.textContent = `Positions ${num(first)}–${num(last)} · ${of}`;
      prev.disabled = mb.offset === 0;
      next.disabled = msgs.length < mb.limit || mb.next >= total;
      list.replaceChildren(...msgs.map(messageView));
    } catch (err) {
      if (!ctx.live()) return;
      summary.textContent = '';
      prev.disabled = next.disabled = true;
      list.replaceChildren(h('p', {class: 'error', role: 'alert'}, 'Cannot browse messages: ' + errText(err)));
    } finally {
      list.removeAttribute('aria-busy');
    }
  }
  loadMessages();
}

// deleteQueue asks (with RabbitMQ's if-empty and if-unused conditions),
// deletes, then calls done; a refusal shows the server's reason in the
// dialog, which stays open.
async function deleteQueue(vhost, name, done) {
  let deleted = false;
  const fd = await ask({
    title: 'Delete queue', confirm: 'Delete', danger: true,
    body: [
      h('p', null, 'Delete the queue ', h('strong', null, name), ` (vhost ${vhost}) and every message in it? This cannot be undone.`),
      h('label', {class: 'check'}, h('input', {type: 'checkbox', name: 'if-empty', id: 'qd-if-empty'}), ' Only if it holds no messages (if-empty)'),
      h('label', {class: 'check'}, h('input', {type: 'checkbox', name: 'if-unused', id: 'qd-if-unused'}), ' Only if it has no consumers (if-unused)'),
    ],
    check: async f => {
      const qs = new URLSearchParams();
      if (f.get('if-empty')) qs.set('if-empty', 'true');
      if (f.get('if-unused')) qs.set('if-unused', 'true');
      await api(`/queues/${enc(vhost)}/${enc(name)}${String(qs) ? '?' + qs : ''}`, {method: 'DELETE'});
      deleted = true;
      return '';
    },
  });
  if (!fd || !deleted) return;
  notify(`Deleted queue ${name} (vhost ${vhost}).`);
  done();
}

function consumersTable(cds) {
  if (!cds.length) return h('p', {class: 'muted', id: 'q-no-consumers'}, 'No consumers.');
  const cols = ['Channel', 'Consumer tag', 'Ack required', 'Exclusive', 'Prefetch', 'Active', 'Arguments'];
  return h('div', {class: 'table-wrap'}, h('table', {class: 'grid', id: 'q-consumer-table'},
    h('thead', null, h('tr', null, cols.map(c => h('th', {scope: 'col', class: c === 'Prefetch' ? 'num' : ''}, c)))),
    h('tbody', null, cds.map(c => {
      const ch = pick(c, 'channel_details.name');
      return h('tr', {'data-tag': c.consumer_tag},
        h('td', null, ch ? h('a', {href: `#/channels/${enc(ch)}`}, ch) : '—'),
        h('td', {'data-col': 'tag'}, c.consumer_tag),
        h('td', null, yes(c.ack_required)), h('td', null, yes(c.exclusive)),
        h('td', {class: 'num'}, num(c.prefetch_count)),
        h('td', null, c.active === false ? badge('waiting', 'warn') : badge('active', 'ok')),
        h('td', null, kvTable(c.arguments, 'args')));
    }))));
}

// drawStream shows a stream's log (segments, first and last offset and
// timestamp), its replicas (leader, members, online) and its consumers
// with their offsets and lag: AMQP 0-9-1 consumers from the queue's
// stream object, stream-protocol ones from /api/stream/consumers.
async function drawStream(el, vhost, name, q) {
  const s = q.stream || {};
  let protoCons = [];
  try {
    protoCons = items(await api(`/stream/consumers/${enc(vhost)}`)).filter(c => c.queue && c.queue.name === name);
  } catch (err) {
    // the stream listener may be off: its consumers are not listed
  }
  const ts = v => v != null ? timeText(Number(v)) : '—';
  const off = v => v != null ? num(v) : '—';
  const members = q.members || [];
  const online = new Set(q.online || []);
  const rows = [
    ['Segments', num(q.segments ?? 0)], ['Size on disk', bytes(s.bytes ?? 0)], ['Chunks', num(s.chunks ?? 0)],
    ['First offset', off(s.first_offset)], ['First timestamp', ts(s.first_timestamp)],
    ['Last chunk id', off(s.last_chunk_id)], ['Last timestamp', ts(s.last_timestamp)],
    ['Committed offset', num(s.committed_offset ?? 0)],
    ['Damaged chunks', s.damaged_chunks ? h('span', {class: 'error'}, num(s.damaged_chunks)) : '0'],
  ];
  const cons = [
    ...(s.consumers || []).map(c => ({tag: c.consumer_tag, protocol: 'AMQP 0-9-1', offset: c.offset, lag: c.lag})),
    ...protoCons.map(c => ({tag: `${c.connection_details?.name ?? ''} #${c.subscription_id}`, protocol: 'stream',
      offset: c.offset, lag: c.offset_lag})),
  ];
  el.hidden = false;
  el.replaceChildren(
    h('h2', null, 'Stream'),
    props(rows),
    members.length ? h('div', null, h('h3', null, 'Replicas'),
      props([['Leader', q.leader || h('span', {class: 'error'}, 'none')], ['Online', `${num(online.size)} of ${num(members.length)}`]]),
      h('div', {class: 'table-wrap'}, h('table', {class: 'grid', id: 's-replicas'},
        h('thead', null, h('tr', null, ['Node', 'Role', 'Online'].map(c => h('th', {scope: 'col'}, c)))),
        h('tbody', null, [...members].sort().map(n => h('tr', {'data-node': n},
          h('td', null, n),
          h('td', {'data-col': 'role'}, n === q.leader ? badge('leader', 'ok') : 'replica'),
          h('td', {'data-col': 'online'}, online.has(n) ? badge('online', 'ok') : badge('offline', 'danger')))))))) : null,
    h('h3', null, 'Readers'),
    cons.length ? h('div', {class: 'table-wrap'}, h('table', {class: 'grid', id: 's-consumers'},
      h('thead', null, h('tr', null, ['Consumer', 'Protocol', 'Next offset', 'Lag'].map(c => h('th', {scope: 'col'}, c)))),
      h('tbody', null, cons.map(c => h('tr', {'data-consumer': c.tag},
        h('td', null, c.tag), h('td', null, c.protocol),
        h('td', {class: 'num', 'data-col': 'offset'}, num(c.offset)),
        h('td', {class: 'num', 'data-col': 'lag'}, num(c.lag)))))))
      : h('p', {class: 'muted', id: 's-no-consumers'}, 'No consumer reads this stream.'));
}

// drawQuorum shows a quorum queue's leader and members, and each member's
// Raft state from /api/queues/quorum/{vhost}/{name}/status.
async function drawQuorum(el, vhost, name, q) {
  let status;
  try {
    status = await api(`/queues/quorum/${enc(vhost)}/${enc(name)}/status`);
  } catch (err) {
    status = err;
  }
  const members = q.members || [];
  const online = new Set(q.online || []);
  const rows = status instanceof Error ? [] : items(status);
  const byNode = new Map(rows.map(r => [r['Node Name'], r]));
  const cols = ['Node', 'Role', 'Online', 'Raft state', 'Membership', 'Term', 'Commit index', 'Last applied', 'Log entries', 'Log size'];
  el.hidden = false;
  el.replaceChildren(
    h('h2', null, 'Quorum members'),
    props([['Leader', q.leader || h('span', {class: 'error'}, 'none (no quorum)')],
      ['Members', num(members.length)], ['Online', `${num(online.size)} of ${num(members.length)}`]]),
    status instanceof Error ? h('p', {class: 'error'}, 'Member status unavailable: ' + errText(status)) : null,
    h('div', {class: 'table-wrap'}, h('table', {class: 'grid', id: 'q-members'},
      h('thead', null, h('tr', null, cols.map(c => h('th', {scope: 'col'}, c)))),
      h('tbody', null, [...new Set([...members, ...byNode.keys()])].sort().map(n => {
        const r = byNode.get(n) || {};
        return h('tr', {'data-node': n},
          h('td', null, n),
          h('td', {'data-col': 'role'}, n === q.leader ? badge('leader', 'ok') : 'follower'),
          h('td', {'data-col': 'online'}, online.has(n) ? badge('online', 'ok') : badge('offline', 'danger')),
          h('td', {'data-col': 'raft-state'}, r['Raft State'] ?? '—'),
          h('td', null, r.Membership ?? '—'),
          h('td', {class: 'num'}, r.Term != null ? num(r.Term) : '—'),
          h('td', {class: 'num'}, r['Commit Index'] != null ? num(r['Commit Index']) : '—'),
          h('td', {class: 'num'}, r['Last Applied'] != null ? num(r['Last Applied']) : '—'),
          h('td', {class: 'num'}, r['Log Entries'] != null ? num(r['Log Entries']) : '—'),
          h('td', {class: 'num'}, r['Log Bytes'] != null ? bytes(r['Log Bytes']) : '—'));
      })))));
}

// ---- Bindings ------------------------------------------------------------------

function bindingsTable(ctx, vhost, name, list) {
  const cols = ['From', 'Routing key', 'Arguments', 'Actions'];
  return h('div', {class: 'table-wrap'}, h('table', {class: 'grid', id: 'q-binding-table'},
    h('thead', null, h('tr', null, cols.map(c => h('th', {scope: 'col'}, c)))),
    h('tbody', null, items(list).map(b => {
      const implicit = b.source === '';
      return h('tr', {'data-source': b.source, 'data-key': b.routing_key},
        h('td', null, implicit ? h('span', {class: 'muted'}, '(AMQP default)') : h('a', {href: exchangeHref(vhost, b.source)}, b.source)),
        h('td', {'data-col': 'key'}, h('code', null, b.routing_key)),
        h('td', null, kvTable(b.arguments, 'args')),
        h('td', {class: 'actions'}, implicit
          ? h('span', {class: 'muted small'}, 'Default exchange binding (cannot be removed)')
          : h('button', {type: 'button', class: 'danger small unbind', 'aria-label': `Unbind from ${b.source} with key ${b.routing_key}`,
            onclick: () => confirmAction({
              title: 'Remove binding', confirm: 'Unbind', ok: `Unbound ${name} from ${b.source}.`, what: 'Removing the binding',
              text: ['Remove the binding from exchange ', h('strong', null, b.source), ' to queue ', h('strong', null, name),
                ` with routing key "${b.routing_key}"?`],
            }, () => api(`/bindings/${enc(vhost)}/e/${enc(b.source)}/q/${enc(name)}/${enc(b.properties_key)}`, {method: 'DELETE'}),
            () => refreshNow(ctx))}, 'Unbind')));
    }))));
}

function bindForm(ctx, vhost, name) {
  const source = h('input', {name: 'source', required: true, list: 'qb-exchanges', autocomplete: 'off'});
  const options = h('datalist', {id: 'qb-exchanges'});
  const key = h('input', {name: 'routing_key', autocomplete: 'off'});
  const args = argsEditor('qb-args');
  api(`/exchanges/${enc(vhost)}?columns=name,type`).then(xs => {
    options.replaceChildren(...items(xs).filter(x => x.name !== '').map(x => h('option', {value: x.name}, `${x.name} (${x.type})`)));
  }).catch(() => {});
  const form = h('form', {class: 'panel', id: 'qb-form', onsubmit: async ev => {
    ev.preventDefault();
    const src = source.value.trim();
    let a;
    try { a = args.value(); } catch (msg) { showError(msg, 'Adding the binding'); return; }
    try {
      await api(`/bindings/${enc(vhost)}/e/${enc(src)}/q/${enc(name)}`, {method: 'POST', body: {routing_key: key.value, arguments: a}});
      notify(`Bound ${name} to ${src}${key.value ? ` with routing key ${key.value}` : ''}.`);
      key.value = '';
      refreshNow(ctx);
    } catch (err) {
      showError(err, 'Adding the binding');
    }
  }},
    h('h3', null, 'Add a binding to this queue'),
    h('div', {class: 'form-grid'},
      field('qb-source', 'From exchange', source), options,
      field('qb-key', 'Routing key', key),
      h('div', {class: 'span-all'}, args.el)),
    h('div', {class: 'form-actions'}, h('button', {type: 'submit', class: 'primary', id: 'qb-bind'}, 'Bind')));
  return form;
}

// ---- Publish and get -----------------------------------------------------------

// publishPanel publishes to the queue through the default exchange.
function publishPanel(ctx, vhost, name) {
  return h('details', {class: 'panel', id: 'q-publish'}, h('summary', null, 'Publish message'),
    h('p', {class: 'muted'}, 'Published to the default exchange with the queue\'s name as routing key.'),
    publishForm('qp', vhost, '', {routingKey: name, fixedKey: true, onPublished: () => refreshNow(ctx)}));
}

// ACK_MODES are RabbitMQ's get modes with its UI's labels.
const ACK_MODES = [['ack_requeue_true', 'Nack message requeue true'], ['ack_requeue_false', 'Automatic ack'],
  ['reject_requeue_true', 'Reject requeue true'], ['reject_requeue_false', 'Reject requeue false']];

function getPanel(ctx, vhost, name, after) {
  const count = h('input', {name: 'count', type: 'number', min: 1, step: 1, value: 1, required: true});
  const mode = h('select', {name: 'ackmode'}, ACK_MODES.map(([v, label]) => h('option', {value: v}, label)));
  const encoding = h('select', {name: 'encoding'}, h('option', {value: 'auto'}, 'Automatic string/base64'), h('option', {value: 'base64'}, 'base64'));
  const truncate = h('input', {name: 'truncate', type: 'number', min: 0, step: 1, value: 50000});
  const out = h('div', {id: 'get-results', 'aria-live': 'polite'});
  const form = h('form', {id: 'qg-form', onsubmit: async ev => {
    ev.preventDefault();
    const body = {count: Number(count.value), ackmode: mode.value, encoding: encoding.value};
    if (truncate.value !== '') body.truncate = Number(truncate.value);
    try {
      const msgs = items(await api(`/queues/${enc(vhost)}/${enc(name)}/get`, {method: 'POST', body}));
      const left = msgs.length ? msgs[msgs.length - 1].message_count : null;
      out.replaceChildren(
        h('p', {id: 'get-summary', class: msgs.length ? '' : 'muted'}, msgs.length
          ? `${plural(msgs.length, 'message')} got (${ACK_MODES.find(m => m[0] === body.ackmode)[1].toLowerCase()})${left != null ? `; ${plural(left, 'message')} left ready` : ''}.`
          : 'Queue is empty.'),
        ...msgs.map((m, i) => messageView({...m, position: i + 1})));
      refreshNow(ctx);
      after();
    } catch (err) {
      out.replaceChildren();
      showError(err, 'Getting messages');
    }
  }},
    h('p', {class: 'muted'}, 'Getting messages is destructive: unless requeued, they leave the queue.'),
    h('div', {class: 'form-grid'},
      field('qg-mode', 'Ack mode', mode), field('qg-encoding', 'Encoding', encoding),
      field('qg-count', 'Messages', count), field('qg-truncate', 'Truncate payloads at (bytes)', truncate)),
    h('div', {class: 'form-actions'}, h('button', {type: 'submit', class: 'primary', id: 'qg-get'}, 'Get messages')),
    out);
  return h('details', {class: 'panel', id: 'q-get'}, h('summary', null, 'Get messages'), form);
}

export function messageView(m) {
  const props = m.properties || {};
  const headers = props.headers || {};
  const deaths = m.x_death || headers['x-death'] || [];
  const payloadNote = m.payload_encoding === 'base64' ? ' (binary, base64)' : '';
  return h('article', {class: 'msg', 'data-position': m.position},
    h('header', null,
      h('strong', null, `#${m.position}`),
      h('span', null, 'exchange ', exchangeName(m.exchange)),
      h('span', null, 'routing key ', h('code', null, m.routing_key ?? '')),
      h('span', null, bytes(m.payload_bytes ?? (m.payload || '').length)),
      m.redelivered ? badge('redelivered', 'warn') : null,
      m.first_death ? badge(`first death: ${m.first_death.reason} from ${m.first_death.queue}`, 'danger') : null),
    h('div', {class: 'msg-cols'},
      h('section', null, h('h3', null, 'Properties'), kvTable(props, 'props', ['headers'])),
      h('section', null, h('h3', null, 'Headers'), kvTable(headers, 'headers', ['x-death']))),
    deaths.length ? h('section', null, h('h3', null, 'Death history (x-death)'), xDeathTable(deaths)) : null,
    h('section', null, h('h3', null, 'Payload' + payloadNote), h('pre', {class: 'payload'}, payloadText(m, props))));
}

// payloadText pretty-prints JSON payloads and shows control characters
// as \xNN escapes; base64 payloads are shown as they are.
export function payloadText(m, props) {
  const text = m.payload ?? '';
  if (m.payload_encoding === 'base64') return text;
  if (/json/i.test(props.content_type || '')) {
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch { /* not JSON after all */ }
  }
  return text.replace(/[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]/g, c => '\\x' + c.charCodeAt(0).toString(16).padStart(2, '0'));
}

export function xDeathTable(deaths) {
  const cols = ['count', 'reason', 'queue', 'exchange', 'routing-keys', 'time', 'original-expiration'];
  return h('div', {class: 'table-wrap'}, h('table', {class: 'grid xdeath'},
    h('caption', {class: 'sr-only'}, 'x-death entries, most recent first'),
    h('thead', null, h('tr', null, cols.map(c => h('th', {scope: 'col'}, c)))),
    h('tbody', null, deaths.map(d => h('tr', null,
      h('td', {class: 'num', 'data-col': 'count'}, num(d.count)),
      h('td', {'data-col': 'reason'}, badge(d.reason || '—', 'danger')),
      h('td', {'data-col': 'queue'}, d.queue ?? '—'),
      h('td', {'data-col': 'exchange'}, exchangeName(d.exchange ?? '')),
      h('td', {'data-col': 'routing-keys'}, (d['routing-keys'] || []).join(', ')),
      h('td', {'data-col': 'time'}, timeText(d.time)),
      h('td', {'data-col': 'original-expiration'}, d['original-expiration'] ?? '—'))))));
}

