// Exchanges: the list (filter, sort, paging) with "Add a new exchange",
// and an exchange's page: its properties and message rates over time,
// the bindings from it and to it, adding and removing bindings,
// publishing a message, and deleting it, as RabbitMQ's management UI.

import {
  api, ask, badge, confirmAction, crumbs, enc, errText, exchangeHref, exchangeName, field, h, items, kvTable, listView,
  newView, notify, poll, props, queueHref, rateOf, rateText, refreshNow, valueText, vhostSelect, yes,
} from '../core.js';
import {historyQuery, rangeSelect, ratesChart} from '../chart.js';
import {argsEditor, publishForm} from '../forms.js';
import {vhostFilter} from './channels.js';

export const routes = [
  [/^#\/exchanges\/?$/, 'exchanges', exchangesPage],
  [/^#\/exchanges\/([^/]+)\/([^/]+)$/, 'exchanges', exchangePage],
];

// ---- List ------------------------------------------------------------------

// FEATURE_ABBR abbreviates well-known exchange arguments in the list, as
// RabbitMQ does.
const FEATURE_ABBR = {'alternate-exchange': 'AE', 'x-delayed-type': 'DT'};

function features(x) {
  const out = [];
  if (x.durable) out.push(h('abbr', {class: 'badge', title: 'durable'}, 'D'));
  if (x.auto_delete) out.push(h('abbr', {class: 'badge', title: 'auto-delete'}, 'AD'));
  if (x.internal) out.push(h('abbr', {class: 'badge', title: 'internal'}, 'I'));
  const other = [];
  for (const [k, v] of Object.entries(x.arguments || {})) {
    if (FEATURE_ABBR[k]) out.push(h('abbr', {class: 'badge', title: `${k}: ${valueText(v)}`}, FEATURE_ABBR[k]));
    else other.push(`${k}: ${valueText(v)}`);
  }
  if (other.length) out.push(h('abbr', {class: 'badge', title: other.join('\n')}, 'Args'));
  return out.length ? out : h('span', {class: 'muted'}, '—');
}

const EXCHANGE_COLUMNS = [
  {label: 'Virtual host', sort: 'vhost', cell: x => x.vhost, col: 'vhost'},
  {label: 'Name', sort: 'name', cell: x => h('a', {href: exchangeHref(x.vhost, x.name)}, exchangeName(x.name)), col: 'name'},
  {label: 'Type', sort: 'type', cell: x => x.type, col: 'type'},
  {label: 'Features', cell: features, col: 'features'},
  {label: 'Policy', sort: 'policy', cell: x => x.policy || h('span', {class: 'muted'}, '—'), col: 'policy'},
  {label: 'Message rate in', sort: 'message_stats.publish_in_details.rate', cell: x => rateText(rateOf(x, 'publish_in')), num: true, col: 'rate-in'},
  {label: 'Message rate out', sort: 'message_stats.publish_out_details.rate', cell: x => rateText(rateOf(x, 'publish_out')), num: true, col: 'rate-out'},
];

const exchangesView = {...newView(), vhost: ''};

function exchangesPage(ctx) {
  const v = exchangesView;
  const add = h('button', {type: 'button', class: 'primary small', id: 'x-add', onclick: () => addExchange(ctx, v.vhost)}, 'Add a new exchange');
  ctx.main.append(
    h('h1', null, 'Exchanges'),
    listView(ctx, {id: 'exchanges', columns: EXCHANGE_COLUMNS, view: v, noun: 'exchange',
      path: () => (v.vhost ? `/exchanges/${enc(v.vhost)}` : '/exchanges'),
      toolbar: [vhostFilter(ctx, v, 'exchanges'), add],
      row: x => ({'data-vhost': x.vhost, 'data-name': x.name})}));
}

// exchangeTypes is the broker's exchange types (/api/overview), with the
// AMQP four when it does not say.
async function exchangeTypes() {
  try {
    const ov = await api('/overview');
    const ts = (ov.exchange_types || []).filter(t => t.enabled !== false && !t.internal_purpose).map(t => t.name); // (as RabbitMQ's UI: not a plugin's own types)
    if (ts.length) return ts;
  } catch { /* fall back */ }
  return ['direct', 'fanout', 'headers', 'topic'];
}

async function addExchange(ctx, vhostName) {
  const types = await exchangeTypes();
  const name = h('input', {name: 'name', required: true, autocomplete: 'off'});
  const type = h('select', {name: 'type', id: 'x-new-type', 'aria-describedby': 'x-new-type-hint'}, types.map(t => h('option', {value: t}, t)));
  const durable = h('select', {name: 'durable'}, h('option', {value: 'true'}, 'Durable'), h('option', {value: 'false'}, 'Transient'));
  const autoDelete = h('select', {name: 'auto_delete'}, h('option', {value: 'false'}, 'No'), h('option', {value: 'true'}, 'Yes'));
  const internal = h('select', {name: 'internal'}, h('option', {value: 'false'}, 'No'), h('option', {value: 'true'}, 'Yes'));
  const args = argsEditor('x-new-args', {quick: [['Alternate exchange', 'alternate-exchange'], ...(types.includes('x-delayed-message') ? [['Delayed type', 'x-delayed-type', 'string', 'direct']] : [])]});
  const hint = h('small', {class: 'muted', id: 'x-new-type-hint'});
  const typeHint = () => { hint.textContent = type.value === 'x-delayed-message' ? 'Needs the argument x-delayed-type (the type it routes as, e.g. direct).' : ''; };
  type.addEventListener('change', typeHint);
  const vhost = vhostSelect('x-new-vhost', 'vhost', vhostName || '/');
  const fd = await ask({
    title: 'Add a new exchange', confirm: 'Add exchange', wide: true,
    body: [h('div', {class: 'form-grid'},
      field('x-new-vhost', 'Virtual host', vhost),
      field('x-new-name', 'Name', name),
      h('div', {class: 'field'}, h('label', {for: 'x-new-type'}, 'Type'), type, hint),
      field('x-new-durable', 'Durability', durable),
      field('x-new-auto-delete', 'Auto delete', autoDelete),
      field('x-new-internal', 'Internal', internal)),
    args.el],
    check: async () => {
      if (!name.value.trim()) return 'Enter a name.';
      const body = {type: type.value, durable: durable.value === 'true', auto_delete: autoDelete.value === 'true',
        internal: internal.value === 'true', arguments: args.value()};
      await api(`/exchanges/${enc(vhost.value)}/${enc(name.value.trim())}`, {method: 'PUT', body});
      return '';
    },
  });
  if (!fd) return;
  notify(`Exchange ${name.value.trim()} added.`);
  refreshNow(ctx);
}

// ---- Exchange page ---------------------------------------------------------

function exchangePage(ctx, vhost, urlName) {
  const name = urlName === 'amq.default' ? '' : urlName;
  const xpath = `/exchanges/${enc(vhost)}/${enc(urlName)}`;
  const details = h('div', {class: 'details', id: 'x-details'});
  const chart = ratesChart('x-rate-chart', 'Messages per second published in and routed out', [['Publish in', 'publish_in'], ['Publish out', 'publish_out']]);
  const from = h('div', {id: 'x-bindings-from'});
  const to = h('div', {id: 'x-bindings-to'});
  const gone = h('p', {class: 'result warn', id: 'x-gone', role: 'status', hidden: true});
  const del = name === '' ? null : h('button', {type: 'button', class: 'danger', id: 'x-delete', onclick: () => deleteExchange(vhost, name)}, 'Delete this exchange');
  ctx.main.append(
    crumbs([['Exchanges', '#/exchanges'], [`vhost ${vhost}`]]),
    h('div', {class: 'title-row'}, h('h1', null, name === '' ? '(AMQP default)' : name), h('span', {class: 'spacer'}),
      rangeSelect(() => ctx.reload()), del),
    gone,
    h('section', null, h('h2', null, 'Details'), details),
    h('section', null, h('h2', null, 'Message rates'), chart.el));

  if (name === '') {
    ctx.main.append(h('section', {id: 'x-bindings'}, h('h2', null, 'Bindings'),
      h('p', {class: 'muted'}, 'The default exchange is implicitly bound to every queue, with a routing key equal to the queue name. ' +
        'It is not possible to explicitly bind to, or unbind from the default exchange. It also cannot be deleted.')));
  } else {
    ctx.main.append(
      h('section', {id: 'x-bindings'}, h('h2', null, 'Bindings from this exchange'), from, bindForm(ctx, vhost, name)),
      h('section', null, h('h2', null, 'Bindings to this exchange'), to));
  }
  ctx.main.append(h('section', {id: 'x-publish-section'}, h('h2', null, 'Publish message'), publishForm('x-publish', vhost, name)));

  let missing = false;
  poll(ctx, 'Loading the exchange', async () => {
    if (missing) return;
    let x, src, dst;
    try {
      [x, src, dst] = await Promise.all([
        api(xpath + '?' + historyQuery(['msg_rates'])),
        name === '' ? [] : api(xpath + '/bindings/source'),
        name === '' ? [] : api(xpath + '/bindings/destination'),
      ]);
    } catch (err) {
      if (err.status !== 404) throw err;
      missing = true;
      gone.textContent = `There is no exchange ${name} in vhost ${vhost} (any more).`;
      gone.hidden = false;
      if (del) del.disabled = true;
      return;
    }
    if (!ctx.live()) return;
    const args = x.arguments || {};
    details.replaceChildren(
      props([
        ['Type', x.type], ['Virtual host', vhost], ['Durable', yes(x.durable)], ['Auto-delete', yes(x.auto_delete)],
        ['Internal', yes(x.internal)], ['Policy', x.policy || '—'],
        ['Alternate exchange', args['alternate-exchange'] != null ? h('a', {href: exchangeHref(vhost, String(args['alternate-exchange']))}, String(args['alternate-exchange'])) : '—'],
        ['Message rate in', rateText(rateOf(x, 'publish_in'))], ['Message rate out', rateText(rateOf(x, 'publish_out'))],
      ]),
      h('div', null, h('h3', null, 'Arguments'), kvTable(args, 'args')));
    chart.update(x);
    if (name !== '') {
      from.replaceChildren(bindingsTable(ctx, items(src), 'from', 'x-from-table'));
      to.replaceChildren(bindingsTable(ctx, items(dst), 'to', 'x-to-table'));
    }
  });
}

function deleteExchange(vhost, name) {
  const ifUnused = h('input', {type: 'checkbox', id: 'x-delete-if-unused'});
  return ask({
    title: 'Delete exchange', confirm: 'Delete', danger: true,
    body: [h('p', null, 'Delete the exchange ', h('strong', null, name), ` (vhost ${vhost}) and its bindings?`),
      h('label', {class: 'check'}, ifUnused, ' Only if it has no bindings from it (if-unused)')],
    check: async () => {
      await api(`/exchanges/${enc(vhost)}/${enc(name)}${ifUnused.checked ? '?if-unused=true' : ''}`, {method: 'DELETE'});
      return '';
    },
  }).then(fd => {
    if (!fd) return;
    notify(`Exchange ${name} deleted.`);
    location.hash = '#/exchanges';
  });
}

// bindingsTable lists bindings from (dir 'from': destinations) or to
// (dir 'to': sources) the exchange, each with an Unbind button.
function bindingsTable(ctx, list, dir, id) {
  if (!list.length) return h('p', {class: 'muted', id}, dir === 'from' ? '… no bindings from this exchange.' : '… no bindings to this exchange.');
  const endHref = b => (dir === 'to' ? exchangeHref(b.vhost, b.source)
    : b.destination_type === 'queue' ? queueHref(b.vhost, b.destination) : exchangeHref(b.vhost, b.destination));
  return h('div', {class: 'table-wrap'}, h('table', {class: 'grid', id},
    h('thead', null, h('tr', null, [dir === 'from' ? 'To' : 'From', 'Routing key', 'Arguments', ''].map(c => h('th', {scope: 'col'}, c)))),
    h('tbody', null, list.map(b => {
      const end = dir === 'from' ? b.destination : b.source;
      return h('tr', {'data-destination': b.destination, 'data-destination-type': b.destination_type, 'data-source': b.source, 'data-routing-key': b.routing_key},
        h('td', {'data-col': 'end'}, dir === 'from' ? badge(b.destination_type, '') : badge('exchange', ''), ' ',
          h('a', {href: endHref(b)}, exchangeName(end))),
        h('td', {'data-col': 'routing-key'}, b.routing_key === '' ? h('span', {class: 'muted'}, '(empty)') : h('code', null, b.routing_key)),
        h('td', {'data-col': 'arguments'}, Object.keys(b.arguments || {}).length ? kvTable(b.arguments, 'args') : h('span', {class: 'muted'}, '—')),
        h('td', {class: 'actions'}, h('button', {type: 'button', class: 'secondary small unbind', onclick: () => unbind(ctx, b)}, 'Unbind')));
    }))));
}

function unbind(ctx, b) {
  const kind = b.destination_type === 'queue' ? 'q' : 'e';
  const src = b.source === '' ? 'amq.default' : b.source;
  return confirmAction({
    title: 'Remove binding', confirm: 'Unbind', ok: 'Binding removed.', what: 'Removing the binding',
    text: ['Remove the binding from ', h('strong', null, src), ` to ${b.destination_type} `, h('strong', null, b.destination),
      ' with routing key ', h('code', null, b.routing_key === '' ? '(empty)' : b.routing_key), '?'],
  }, () => api(`/bindings/${enc(b.vhost)}/e/${enc(src)}/${kind}/${enc(b.destination)}/${enc(b.properties_key)}`, {method: 'DELETE'}),
  () => refreshNow(ctx));
}

// bindForm adds a binding from this exchange to a queue or an exchange.
function bindForm(ctx, vhost, source) {
  const kind = h('select', null, h('option', {value: 'q'}, 'To queue'), h('option', {value: 'e'}, 'To exchange'));
  const dest = h('input', {required: true, autocomplete: 'off', list: 'x-bind-dests'});
  const dests = h('datalist', {id: 'x-bind-dests'});
  const key = h('input', {autocomplete: 'off'});
  const args = argsEditor('x-bind-args', {quick: [['x-match any', 'x-match', 'string', 'any'], ['x-match all', 'x-match', 'string', 'all']]});
  const result = h('div', {id: 'x-bind-result', 'aria-live': 'polite'});
  const fill = async () => {
    try {
      const path = kind.value === 'q' ? `/queues/${enc(vhost)}?columns=name` : `/exchanges/${enc(vhost)}?columns=name`;
      dests.replaceChildren(...items(await api(path)).map(o => o.name).filter(Boolean).sort().map(n => h('option', {value: n})));
    } catch { /* suggestions only */ }
  };
  kind.addEventListener('change', fill);
  fill();
  const form = h('form', {class: 'panel inline-form', id: 'x-bind', onsubmit: async ev => {
    ev.preventDefault();
    result.replaceChildren();
    const d = dest.value.trim();
    if (!d) { result.replaceChildren(h('p', {class: 'result warn', role: 'alert'}, 'Enter the destination\'s name.')); return; }
    try {
      const body = {routing_key: key.value, arguments: args.value()};
      await api(`/bindings/${enc(vhost)}/e/${enc(source)}/${kind.value}/${enc(d)}`, {method: 'POST', body});
      notify(`Bound ${source} to ${kind.value === 'q' ? 'queue' : 'exchange'} ${d}.`);
      dest.value = ''; key.value = ''; args.clear();
      refreshNow(ctx);
    } catch (e) {
      result.replaceChildren(h('p', {class: 'result error-box', role: 'alert'}, 'Binding failed: ' + errText(e)));
    }
  }},
  h('h3', null, 'Add binding from this exchange'),
  h('div', {class: 'form-grid'},
    field('x-bind-kind', 'Destination type', kind),
    field('x-bind-dest', 'Destination', dest),
    field('x-bind-key', 'Routing key', key)),
  dests, args.el,
  h('div', {class: 'form-actions'}, h('button', {type: 'submit', class: 'primary', id: 'x-bind-submit'}, 'Bind')), result);
  return form;
}
