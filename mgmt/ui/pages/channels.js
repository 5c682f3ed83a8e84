// Channels: the list (filter, sort, paging), and a channel's page with
// its settings, message rates over time and consumers, as RabbitMQ's
// management UI shows them.

import {
  api, badge, card, crumbs, enc, h, items, kvTable, listView, newView, num, pick, poll, props, queueHref, rateOf,
  rateText, refreshNow, timeText, yes,
} from '../core.js';
import {historyQuery, rangeSelect, ratesChart} from '../chart.js';

export const routes = [
  [/^#\/channels\/?$/, 'channels', channelsPage],
  [/^#\/channels\/([^/]+)$/, 'channels', channelPage],
];

export const channelHref = name => `#/channels/${enc(name)}`;
const connectionHref = name => `#/connections/${enc(name)}`;

// modeBadges shows a channel's mode as RabbitMQ does: C for publisher
// confirms, T for transactional.
export function modeBadges(c) {
  const out = [];
  if (c.confirm) out.push(h('abbr', {class: 'badge', title: 'Publisher confirms'}, 'C'));
  if (c.transactional) out.push(h('abbr', {class: 'badge', title: 'Transactional'}, 'T'));
  return out.length ? out : h('span', {class: 'muted'}, '—');
}

// CHANNEL_COLUMNS are the list's columns; the connection page shows a
// connection's channels with them too.
export const CHANNEL_COLUMNS = [
  {label: 'Channel', sort: 'name', cell: c => h('a', {href: channelHref(c.name)}, c.name), col: 'name'},
  {label: 'Virtual host', sort: 'vhost', cell: c => c.vhost, col: 'vhost'},
  {label: 'User', sort: 'user', cell: c => c.user, col: 'user'},
  {label: 'Mode', sort: 'confirm', cell: modeBadges, col: 'mode'},
  {label: 'State', sort: 'state', cell: c => stateBadge(c), col: 'state'},
  {label: 'Consumers', sort: 'consumer_count', cell: c => num(c.consumer_count), num: true, col: 'consumers'},
  {label: 'Prefetch', sort: 'prefetch_count', cell: c => prefetchText(c), num: true, col: 'prefetch'},
  {label: 'Unacked', sort: 'messages_unacknowledged', cell: c => num(c.messages_unacknowledged), num: true, col: 'unacked'},
  {label: 'Unconfirmed', sort: 'messages_unconfirmed', cell: c => num(c.messages_unconfirmed), num: true, col: 'unconfirmed'},
  {label: 'Publish', sort: 'message_stats.publish_details.rate', cell: c => rateText(rateOf(c, 'publish')), num: true, col: 'publish'},
  {label: 'Confirm', sort: 'message_stats.confirm_details.rate', cell: c => rateText(rateOf(c, 'confirm')), num: true, col: 'confirm'},
  {label: 'Unroutable', sort: 'message_stats.return_unroutable_details.rate', cell: c => rateText(rateOf(c, 'return_unroutable')), num: true, col: 'unroutable'},
  {label: 'Deliver / get', sort: 'message_stats.deliver_get_details.rate', cell: c => rateText(rateOf(c, 'deliver_get')), num: true, col: 'deliver'},
  {label: 'Ack', sort: 'message_stats.ack_details.rate', cell: c => rateText(rateOf(c, 'ack')), num: true, col: 'ack'},
];

export const channelRow = c => ({'data-name': c.name, 'data-vhost': c.vhost});

const stateBadge = c => (c.idle_since ? badge('idle', '') : badge(c.state || 'running', c.state === 'running' || !c.state ? 'ok' : 'warn'));

// prefetchText is the per-consumer prefetch, and the channel-wide
// (global) one when set, as RabbitMQ's "Prefetch" column.
function prefetchText(c) {
  const p = Number(c.prefetch_count) || 0;
  const g = Number(c.global_prefetch_count) || 0;
  if (!p && !g) return h('span', {class: 'muted'}, '—');
  return [p ? num(p) : null, g ? ` (${num(g)} global)` : null].filter(Boolean).join('');
}

// vhostFilter is a list's virtual host select (all, or one): with one
// chosen, the list asks that vhost's endpoint (vhostPath), as RabbitMQ's
// UI does. view.vhost keeps the choice.
export function vhostFilter(ctx, view, id) {
  const all = () => h('option', {value: ''}, 'All virtual hosts');
  const sel = h('select', {id: id + '-vhost', 'aria-label': 'Virtual host'}, all(),
    view.vhost ? h('option', {value: view.vhost, selected: true}, view.vhost) : null);
  api('/vhosts?columns=name').then(vs => {
    const names = items(vs).map(v => v.name).sort();
    sel.replaceChildren(all(), ...names.map(n => h('option', {value: n, selected: n === view.vhost}, n)));
  }).catch(() => {});
  sel.addEventListener('change', () => { view.vhost = sel.value; view.page = 1; refreshNow(ctx); });
  return sel;
}

const channelsView = {...newView(), vhost: ''};

function channelsPage(ctx) {
  ctx.main.append(
    h('h1', null, 'Channels'),
    listView(ctx, {id: 'channels', columns: CHANNEL_COLUMNS, view: channelsView, noun: 'channel', row: channelRow,
      path: () => (channelsView.vhost ? `/vhosts/${enc(channelsView.vhost)}/channels` : '/channels'),
      toolbar: vhostFilter(ctx, channelsView, 'channels')}));
}

// CHANNEL_RATES are the channel page's charted message rates.
const CHANNEL_RATES = [['Publish', 'publish'], ['Confirm', 'confirm'], ['Unroutable', 'return_unroutable'],
  ['Deliver / get', 'deliver_get'], ['Redeliver', 'redeliver'], ['Ack', 'ack']];

function channelPage(ctx, name) {
  const stats = h('div', {class: 'cards', id: 'ch-stats'});
  const details = h('div', {class: 'details', id: 'ch-details'});
  const consumers = h('div', {id: 'ch-consumers'});
  const chart = ratesChart('ch-rate-chart', 'Messages per second on this channel', CHANNEL_RATES);
  const gone = h('p', {class: 'result warn', id: 'ch-gone', role: 'status', hidden: true});
  ctx.main.append(
    crumbs([['Channels', '#/channels'], ['channel']]),
    h('div', {class: 'title-row'}, h('h1', null, name), h('span', {class: 'spacer'}), rangeSelect(() => ctx.reload())),
    gone, stats,
    h('section', null, h('h2', null, 'Details'), details),
    h('section', null, h('h2', null, 'Message rates'), chart.el),
    h('section', null, h('h2', null, 'Consumers'), consumers));

  let closed = false;
  poll(ctx, 'Loading the channel', async () => {
    if (closed) return;
    let c;
    try {
      c = await api(`/channels/${enc(name)}?` + historyQuery(['msg_rates']));
    } catch (err) {
      if (err.status !== 404) throw err;
      closed = true;
      gone.textContent = 'This channel is closed (or was never open): what is shown is its last state.';
      gone.hidden = false;
      return;
    }
    if (!ctx.live()) return;
    stats.replaceChildren(
      card('Unacked', num(c.messages_unacknowledged), null, 'unacked'),
      card('Unconfirmed', num(c.messages_unconfirmed)),
      card('Uncommitted', num(c.messages_uncommitted)),
      card('Prefetch', prefetchText(c)),
      card('Consumers', num(c.consumer_count)),
      card('Publish', rateText(rateOf(c, 'publish'))),
      card('Deliver / get', rateText(rateOf(c, 'deliver_get'))),
      card('Ack', rateText(rateOf(c, 'ack'))));
    const conn = pick(c, 'connection_details.name');
    details.replaceChildren(props([
      ['Connection', conn ? h('a', {href: connectionHref(conn), id: 'ch-connection'}, conn) : '—'],
      ['Channel number', num(c.number)],
      ['Virtual host', c.vhost], ['User', c.user], ['Node', c.node || '—'],
      ['State', stateBadge(c)], ['Mode', modeBadges(c)],
      ['Publisher confirms', yes(c.confirm)], ['Transactional', yes(c.transactional)],
      ['Prefetch (per consumer)', num(c.prefetch_count)], ['Prefetch (global)', num(c.global_prefetch_count)],
      ['Uncommitted acks', num(c.acks_uncommitted)],
      ['Idle since', c.idle_since ? timeText(c.idle_since) : '—'],
    ]));
    chart.update(c);
    consumers.replaceChildren(consumersTable(c.consumer_details || []));
  });
}

// consumersTable lists consumers as RabbitMQ's channel page does.
export function consumersTable(list) {
  if (!list.length) return h('p', {class: 'muted'}, 'No consumers.');
  return h('div', {class: 'table-wrap'}, h('table', {class: 'grid', id: 'consumers'},
    h('thead', null, h('tr', null, ['Consumer tag', 'Queue', 'Ack required', 'Exclusive', 'Prefetch', 'Active', 'Arguments']
      .map(c => h('th', {scope: 'col'}, c)))),
    h('tbody', null, list.map(c => {
      const q = c.queue || {};
      return h('tr', {'data-tag': c.consumer_tag},
        h('td', {'data-col': 'tag'}, h('code', null, c.consumer_tag)),
        h('td', {'data-col': 'queue'}, q.name != null ? h('a', {href: queueHref(q.vhost, q.name)}, q.name) : '—'),
        h('td', null, yes(c.ack_required)),
        h('td', null, yes(c.exclusive)),
        h('td', {class: 'num'}, num(c.prefetch_count)),
        h('td', null, c.active === false ? badge('waiting', 'warn') : badge('active', 'ok')),
        h('td', null, Object.keys(c.arguments || {}).length ? kvTable(c.arguments, 'args') : h('span', {class: 'muted'}, '—')));
    }))));
}

