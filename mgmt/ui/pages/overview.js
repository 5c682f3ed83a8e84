// The overview: message rates and queued messages over time, object
// totals, and the nodes with memory, disk, descriptors and alarms.

import {$, api, badge, bytes, card, duration, errText, h, hasTag, items, num, poll, rateOf, rateText} from '../core.js';
import {historyQuery, lengthSeries, lengthsChart, lineChart, rangeSelect, ratesChart} from '../chart.js';

export const routes = [[/^#?\/?$/, 'overview', overviewPage]];

// RATE_STATS are the overview's message rates; dead_lettered is Warren's
// (RabbitMQ has no dead-letter rate).
const RATE_STATS = [['Publish', 'publish'], ['Deliver / get', 'deliver_get'], ['Ack', 'ack'],
  ['Redeliver', 'redeliver'], ['Dead-lettered', 'dead_lettered']];

function overviewPage(ctx) {
  const alarms = h('div');
  const rates = h('div', {class: 'cards', id: 'ov-rates'});
  const totals = h('div', {class: 'cards', id: 'ov-totals'});
  const objects = h('div', {class: 'cards', id: 'ov-objects'});
  const nodes = h('div', {id: 'ov-nodes'});
  const memChart = lineChart({id: 'ov-mem-chart', title: 'Memory used by node', format: bytes});
  const fdChart = lineChart({id: 'ov-fd-chart', title: 'File descriptors and sockets by node', format: num});
  const rateChart = ratesChart('ov-rate-chart', 'Message rates', RATE_STATS);
  const queuedChart = lengthsChart('ov-queued-chart', 'Queued messages',
    [['Ready', 'messages_ready'], ['Unacked', 'messages_unacknowledged'], ['Total', 'messages']], 'queue_totals');
  ctx.main.append(
    h('div', {class: 'title-row'}, h('h1', null, 'Overview'), h('span', {class: 'spacer'}), rangeSelect(() => ctx.reload())),
    alarms,
    h('section', null, h('h2', null, 'Message rates'), rates, rateChart.el),
    h('section', null, h('h2', null, 'Queued messages'), totals, queuedChart.el),
    h('section', null, h('h2', null, 'Objects'), objects),
    h('section', null, h('h2', null, 'Nodes'), nodes, h('div', {class: 'charts', id: 'ov-node-charts', hidden: true}, memChart.el, fdChart.el)));

  poll(ctx, 'Loading the overview', async () => {
    const wantNodes = hasTag('monitoring', 'administrator');
    const [ov, ns] = await Promise.all([
      api('/overview?' + historyQuery()),
      wantNodes ? api('/nodes?' + historyQuery(['node_stats'])).catch(e => e) : Promise.resolve(null),
    ]);
    if (!ctx.live()) return;
    rates.replaceChildren(...RATE_STATS.map(([label, stat]) => card(label, rateText(rateOf(ov, stat)))));
    rateChart.update(ov);
    const qt = ov.queue_totals || {};
    totals.replaceChildren(
      card('Total', num(qt.messages)),
      card('Ready', num(qt.messages_ready)),
      card('Unacknowledged', num(qt.messages_unacknowledged)));
    queuedChart.update(ov);
    const ot = ov.object_totals || {};
    objects.replaceChildren(
      card(h('a', {href: '#/connections'}, 'Connections'), num(ot.connections)),
      card(h('a', {href: '#/channels'}, 'Channels'), num(ot.channels)),
      card(h('a', {href: '#/queues'}, 'Queues'), num(ot.queues)),
      card('Consumers', num(ot.consumers)),
      card(h('a', {href: '#/exchanges'}, 'Exchanges'), num(ot.exchanges)));

    alarms.replaceChildren();
    if (!wantNodes) {
      nodes.replaceChildren(h('p', {class: 'muted'}, 'Node details need the monitoring or administrator tag.'));
    } else if (ns instanceof Error) {
      nodes.replaceChildren(h('p', {class: 'error'}, 'Node details unavailable: ' + errText(ns)));
    } else {
      const list = items(ns);
      for (const n of list) {
        if (n.mem_alarm) alarms.append(h('p', {class: 'alarm', role: 'alert'}, `Memory alarm on ${n.name}: publishers are blocked.`));
        if (n.disk_free_alarm) alarms.append(h('p', {class: 'alarm', role: 'alert'}, `Disk alarm on ${n.name}: publishers are blocked.`));
      }
      nodes.replaceChildren(nodesTable(list));
      $('#ov-node-charts', ctx.main).hidden = !list.length;
      memChart.update(list.map(n => ({label: n.name, points: lengthSeries(n.mem_used_details)})));
      fdChart.update(list.flatMap(n => [
        {label: `${n.name} descriptors`, points: lengthSeries(n.fd_used_details)},
        {label: `${n.name} sockets`, points: lengthSeries(n.sockets_used_details)}]));
    }
  });
}

export function nodesTable(list) {
  if (!list.length) return h('p', {class: 'muted'}, 'No nodes reported.');
  const usage = (used, limit, fmt) => (limit ? `${fmt(used)} of ${fmt(limit)}` : fmt(used));
  // A cluster's nodes say which one leads the metadata group.
  const cluster = list.some(n => n.leader !== undefined);
  const cols = ['Node', 'State', ...(cluster ? ['Leader'] : []), 'Uptime', 'Memory used', 'Disk free', 'Disk free limit',
    'File descriptors', 'Sockets', 'Alarms'];
  return h('div', {class: 'table-wrap'}, h('table', {class: 'grid'},
    h('thead', null, h('tr', null, cols.map(c => h('th', {scope: 'col'}, c)))),
    h('tbody', null, list.map(n => {
      const al = [n.mem_alarm && badge('memory', 'danger'), n.disk_free_alarm && badge('disk', 'danger')].filter(Boolean);
      return h('tr', {'data-node': n.name},
        h('td', null, n.name),
        h('td', {'data-col': 'state'}, n.running === false ? badge('stopped', 'danger') : badge('running', 'ok')),
        cluster ? h('td', {'data-col': 'leader'}, n.leader ? badge('leader', 'ok') : '') : null,
        h('td', null, n.uptime != null ? duration(n.uptime) : '—'),
        h('td', {'data-col': 'memory'}, usage(n.mem_used, n.mem_limit, bytes)),
        h('td', null, n.disk_free != null ? bytes(n.disk_free) : '—'),
        h('td', null, n.disk_free_limit != null ? bytes(n.disk_free_limit) : '—'),
        h('td', null, n.fd_used != null ? usage(n.fd_used, n.fd_total, num) : '—'),
        h('td', null, n.sockets_used != null ? num(n.sockets_used) : '—'),
        h('td', {class: 'alarms'}, al.length ? al : badge('none', 'ok')));
    }))));
}
