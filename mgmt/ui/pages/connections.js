// Connections: the list (filter, sort, paging), and a connection's page
// with its properties, client properties, channels, data rates over time,
// and closing it with a reason the client receives (connection.close 320
// CONNECTION_FORCED), as RabbitMQ's management UI does.

import {
  api, ask, badge, bytes, card, crumbs, duration, enc, field, h, items, kvTable, listView, newView, notify, num, pick, poll,
  props, timeText, yes,
} from '../core.js';
import {historyQuery, lineChart, rangeSelect, rateSeries} from '../chart.js';
import {CHANNEL_COLUMNS, channelRow, vhostFilter} from './channels.js';

export const routes = [
  [/^#\/connections\/?$/, 'connections', connectionsPage],
  [/^#\/connections\/([^/]+)$/, 'connections', connectionPage],
];

export const connectionHref = name => `#/connections/${enc(name)}`;

// byteRate shows a rate of bytes per second.
export function byteRate(n) {
  n = Number(n) || 0;
  const units = ['B/s', 'KiB/s', 'MiB/s', 'GiB/s'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  // Below 10 B/s a decimal keeps a chart's small steps apart.
  const text = i ? n.toFixed(1) : n < 10 ? String(Math.round(n * 10) / 10) : String(Math.round(n));
  return text + ' ' + units[i];
}

const octRate = (c, stat) => Number(pick(c, stat + '_details.rate')) || 0;

// clientText is the client library as it names itself.
function clientText(c) {
  const p = c.client_properties || {};
  const s = [p.product, p.version].filter(Boolean).join(' ');
  return s ? h('span', {title: p.platform || ''}, s) : h('span', {class: 'muted'}, '—');
}

const stateBadge = c => badge(c.state || '—', c.state === 'running' ? 'ok' : c.state === 'blocked' || c.state === 'blocking' ? 'danger' : 'warn');

// nameCell is the connection's name, with the name the client gave it.
const nameCell = c => [h('a', {href: connectionHref(c.name)}, c.name),
  c.user_provided_name ? h('div', {class: 'muted small', 'data-col': 'client-name'}, c.user_provided_name) : null];

const CONNECTION_COLUMNS = [
  {label: 'Name', sort: 'name', cell: nameCell, col: 'name'},
  {label: 'Virtual host', sort: 'vhost', cell: c => c.vhost, col: 'vhost'},
  {label: 'User', sort: 'user', cell: c => c.user, col: 'user'},
  {label: 'State', sort: 'state', cell: stateBadge, col: 'state'},
  {label: 'Client', sort: 'client_properties.product', cell: clientText, col: 'client'},
  {label: 'Protocol', sort: 'protocol', cell: c => c.protocol || '—', col: 'protocol'},
  {label: 'TLS', sort: 'ssl', cell: c => (c.ssl ? badge('TLS', 'ok') : h('span', {class: 'muted'}, 'no')), col: 'tls'},
  {label: 'Channels', sort: 'channels', cell: c => num(c.channels), num: true, col: 'channels'},
  {label: 'From client', sort: 'recv_oct_details.rate', cell: c => byteRate(octRate(c, 'recv_oct')), num: true, col: 'recv'},
  {label: 'To client', sort: 'send_oct_details.rate', cell: c => byteRate(octRate(c, 'send_oct')), num: true, col: 'send'},
  {label: 'Connected at', sort: 'connected_at', cell: c => timeText(c.connected_at), col: 'connected-at'},
];

const connectionsView = {...newView(), vhost: ''};

function connectionsPage(ctx) {
  const v = connectionsView;
  ctx.main.append(
    h('h1', null, 'Connections'),
    listView(ctx, {id: 'connections', columns: CONNECTION_COLUMNS, view: v, noun: 'connection',
      path: () => (v.vhost ? `/vhosts/${enc(v.vhost)}/connections` : '/connections'),
      toolbar: vhostFilter(ctx, v, 'connections'),
      row: c => ({'data-name': c.name, 'data-vhost': c.vhost, 'data-user': c.user})}));
}

// closeConnection asks for a reason, then closes the connection: the
// client gets connection.close 320 CONNECTION_FORCED with that text (the
// X-Reason header, as RabbitMQ's UI sends it). It resolves true once
// closed; errors show the server's reason in the dialog.
export async function closeConnection(name) {
  const reason = h('input', {name: 'reason', value: 'Closed via management plugin', maxlength: 255});
  const fd = await ask({
    title: 'Close connection', confirm: 'Close connection', danger: true,
    body: [h('p', null, 'Close ', h('strong', null, name), '? The client is told why, with CONNECTION_FORCED.'),
      field('close-reason', 'Reason', reason)],
    check: async () => {
      // It travels in an HTTP header (fetch refuses other than Latin-1) and
      // on to the client as AMQP text: printable ASCII is safe for both.
      if (/[^\x20-\x7e]/.test(reason.value)) return 'The reason may hold printable ASCII characters only.';
      await api(`/connections/${enc(name)}`, {method: 'DELETE', headers: {'X-Reason': reason.value.trim()}});
      return '';
    },
  });
  if (!fd) return false;
  notify(`Closed connection ${name}.`);
  return true;
}

function connectionPage(ctx, name) {
  const stats = h('div', {class: 'cards', id: 'conn-stats'});
  const details = h('div', {class: 'details', id: 'conn-details'});
  const client = h('div', {class: 'details', id: 'conn-client'});
  const channels = h('div', {id: 'conn-channels'});
  const gone = h('p', {class: 'result warn', id: 'conn-gone', role: 'status', hidden: true});
  // The axis has room for a short label: "23.5 KiB" (per second, as the title says).
  const chart = lineChart({id: 'conn-rate-chart', title: 'Bytes per second, from and to the client', format: v => byteRate(v).replace('/s', '')});
  const close = h('button', {type: 'button', class: 'danger', id: 'conn-close', onclick: async () => {
    if (await closeConnection(name)) location.hash = '#/connections';
  }}, 'Close this connection');
  const title = h('h1', null, name);
  const sub = h('p', {class: 'muted', id: 'conn-client-name', hidden: true});
  ctx.main.append(
    crumbs([['Connections', '#/connections'], ['connection']]),
    h('div', {class: 'title-row'}, title, h('span', {class: 'spacer'}), rangeSelect(() => ctx.reload()), close),
    sub, gone, stats,
    h('section', null, h('h2', null, 'Details'), details),
    h('section', null, h('h2', null, 'Data rates'), chart.el),
    h('section', null, h('h2', null, 'Channels'), channels),
    h('section', null, h('h2', null, 'Client properties'), client));

  let closed = false;
  poll(ctx, 'Loading the connection', async () => {
    if (closed) return;
    let c, chs;
    try {
      [c, chs] = await Promise.all([
        api(`/connections/${enc(name)}?` + historyQuery(['data_rates'])),
        api(`/connections/${enc(name)}/channels`),
      ]);
    } catch (err) {
      if (err.status !== 404) throw err;
      closed = true;
      close.disabled = true;
      gone.textContent = 'This connection is closed (or was never open): what is shown is its last state.';
      gone.hidden = false;
      return;
    }
    if (!ctx.live()) return;
    if (c.user_provided_name) { sub.textContent = `Client-provided name: ${c.user_provided_name}`; sub.hidden = false; }
    stats.replaceChildren(
      card('State', stateBadge(c)),
      card('Channels', num(c.channels)),
      card('From client', byteRate(octRate(c, 'recv_oct'))),
      card('To client', byteRate(octRate(c, 'send_oct'))));
    const hb = Number(c.timeout);
    details.replaceChildren(props([
      ['Virtual host', c.vhost], ['User', c.user], ['Node', c.node || '—'],
      ['Protocol', c.protocol || '—'], ['Authentication', c.auth_mechanism || '—'],
      ['TLS', c.ssl ? [badge('TLS', 'ok'), ' ', c.ssl_protocol || ''] : 'no'],
      ['Client address', c.peer_host != null ? `${c.peer_host}:${c.peer_port}` : '—'],
      ['Broker address', c.host != null ? `${c.host}:${c.port}` : '—'],
      ['Connected at', timeText(c.connected_at)],
      ['Connected for', c.connected_at ? duration(Date.now() - Number(c.connected_at)) : '—'],
      ['Heartbeat', hb ? `${hb}s` : 'off'],
      ['Frame max', c.frame_max != null ? `${num(c.frame_max)} bytes` : '—'],
      ['Channel max', c.channel_max != null ? num(c.channel_max) : '—'],
      ['Received', c.recv_oct != null ? bytes(c.recv_oct) : '—'],
      ['Sent', c.send_oct != null ? bytes(c.send_oct) : '—'],
      ['Blocked', yes(c.state === 'blocked')],
    ]));
    chart.update([
      {label: 'From client', points: rateSeries(c.recv_oct_details)},
      {label: 'To client', points: rateSeries(c.send_oct_details)},
    ]);
    const list = items(chs);
    channels.replaceChildren(list.length
      ? h('div', {class: 'table-wrap'}, h('table', {class: 'grid', id: 'conn-channel-list'},
        h('thead', null, h('tr', null, CHANNEL_COLUMNS.map(col => h('th', {scope: 'col', class: col.num ? 'num' : ''}, col.label)))),
        h('tbody', null, list.map(ch => h('tr', channelRow(ch),
          CHANNEL_COLUMNS.map(col => h('td', {class: col.num ? 'num' : '', 'data-col': col.col}, col.cell(ch))))))))
      : h('p', {class: 'muted'}, 'No channels.'));
    const cp = c.client_properties || {};
    client.replaceChildren(kvTable(cp, 'client-props', ['capabilities']),
      ...(cp.capabilities ? [h('h3', null, 'Capabilities'), kvTable(cp.capabilities, 'capabilities')] : []));
  });
}
