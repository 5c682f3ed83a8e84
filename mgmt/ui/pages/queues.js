// Queues: the list (filter, sort, paging) and a queue's page with its
// details, consumers and the message browser (ready messages, read
// without consuming them, with their x-death history decoded).

import {
  REASONS, api, badge, bytes, card, enc, errText, exchangeName, h, kvTable, listView, newView, num, pick,
  plural, poll, purgeQueue, queueHref, rateOf, rateText, refreshNow, timeText, yes,
} from '../core.js';

export const routes = [
  [/^#\/queues\/?$/, 'queues', queuesPage],
  [/^#\/queues\/([^/]+)\/([^/]+)$/, 'queues', queuePage],
];

const QUEUE_COLUMNS = [
  {label: 'Virtual host', sort: 'vhost', cell: q => q.vhost},
  {label: 'Name', sort: 'name', cell: q => h('a', {href: queueHref(q.vhost, q.name)}, q.name)},
  {label: 'Type', sort: 'type', cell: q => q.type || 'classic'},
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
    h('h1', null, 'Queues'),
    listView(ctx, {id: 'queues', path: '/queues', columns: QUEUE_COLUMNS, view: queuesView, noun: 'queue',
      row: q => ({'data-vhost': q.vhost, 'data-name': q.name})}));
}

// ---- Queue page and message browser ----------------------------------------

function queuePage(ctx, vhost, name) {
  const qpath = `/queues/${enc(vhost)}/${enc(name)}`;
  const stats = h('div', {class: 'cards', id: 'q-stats'});
  const details = h('div', {class: 'details', id: 'q-details'});
  const consumers = h('div');
  const purge = h('button', {type: 'button', class: 'danger', id: 'q-purge', onclick: () => purgeQueue(vhost, name, () => {
    refreshNow(ctx);
    loadMessages();
  })}, 'Purge messages');

  ctx.main.append(
    h('nav', {class: 'crumbs', 'aria-label': 'Breadcrumb'}, h('a', {href: '#/queues'}, 'Queues'), ' › vhost ', h('code', null, vhost)),
    h('div', {class: 'title-row'}, h('h1', null, name), h('span', {class: 'spacer'}), purge),
    stats,
    h('section', null, h('h2', null, 'Details'), details),
    consumers);

  poll(ctx, 'Loading the queue', async () => {
    const q = await api(qpath);
    stats.replaceChildren(
      card('Messages', num(q.messages)),
      card('Ready', num(q.messages_ready)),
      card('Unacked', num(q.messages_unacknowledged)),
      card('Consumers', num(q.consumers)),
      card('Incoming', rateText(rateOf(q, 'publish'))),
      card('Deliver / get', rateText(rateOf(q, 'deliver_get'))),
      card('Ack', rateText(rateOf(q, 'ack'))));
    const rows = [
      ['Virtual host', vhost], ['Type', q.type || 'classic'], ['State', q.state || '—'],
      ['Durable', yes(q.durable)], ['Auto-delete', yes(q.auto_delete)], ['Exclusive', yes(q.exclusive)],
      ['Policy', q.policy || '—'], ['Node', q.node || '—'],
      ['Memory', q.memory != null ? bytes(q.memory) : '—'],
      ['Message bytes', q.message_bytes != null ? bytes(q.message_bytes) : '—'],
    ];
    details.replaceChildren(
      h('dl', {class: 'props'}, rows.map(([k, val]) => h('div', null, h('dt', null, k), h('dd', null, val)))),
      h('div', null, h('h3', null, 'Arguments'), kvTable(q.arguments, 'args')));
    const cds = q.consumer_details || [];
    consumers.replaceChildren(...(cds.length ? [h('section', null, h('h2', null, 'Consumers'),
      h('table', {class: 'grid'},
        h('thead', null, h('tr', null, ['Channel', 'Consumer tag', 'Ack required', 'Exclusive', 'Prefetch'].map(c => h('th', {scope: 'col'}, c)))),
        h('tbody', null, cds.map(c => h('tr', null,
          h('td', null, pick(c, 'channel_details.name') || '—'), h('td', null, c.consumer_tag),
          h('td', null, yes(c.ack_required)), h('td', null, yes(c.exclusive)), h('td', {class: 'num'}, num(c.prefetch_count)))))))] : []));
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

