// Warren management UI: a single page with hash routes (#/, #/queues,
// #/queues/{vhost}/{name}, #/dead-letters) over the management HTTP API
// (RabbitMQ's, plus Warren's /api/dead-letters), authenticated with HTTP
// basic auth kept in sessionStorage. No framework, nothing external.
'use strict';
(() => {

const REFRESH_MS = 5000;
const HISTORY = 60; // overview samples kept for the sparklines: 5 minutes
const SESSION_KEY = 'warren.session';
const REASONS = ['rejected', 'expired', 'maxlen', 'delivery_limit'];
const rateHistory = []; // overview samples: {publish, deliver_get, ack, redeliver}

// ---- DOM and formatting helpers --------------------------------------------

const $ = (sel, root = document) => root.querySelector(sel);

// h builds an element; strings become text nodes, never HTML.
function h(tag, props, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v == null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid == null || kid === false) continue;
    el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}

const enc = encodeURIComponent;
const nf = new Intl.NumberFormat('en-US');
const rf = new Intl.NumberFormat('en-US', {minimumFractionDigits: 1, maximumFractionDigits: 1});
const num = n => nf.format(Number(n) || 0);
const rateText = n => rf.format(Number(n) || 0) + '/s';
const pick = (obj, path) => path.split('.').reduce((o, k) => (o == null ? undefined : o[k]), obj);
const rateOf = (obj, stat) => Number(pick(obj, `message_stats.${stat}_details.rate`)) || 0;
const plural = (n, word) => `${num(n)} ${word}${Number(n) === 1 ? '' : 's'}`;
const queueHref = (vhost, name) => `#/queues/${enc(vhost)}/${enc(name)}`;

function bytes(n) {
  n = Number(n);
  if (!Number.isFinite(n)) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + ' ' + units[i];
}

function duration(ms) {
  let s = Math.floor((Number(ms) || 0) / 1000);
  const d = Math.floor(s / 86400); s -= d * 86400;
  const hr = Math.floor(s / 3600); s -= hr * 3600;
  const m = Math.floor(s / 60);
  return d ? `${d}d ${hr}h` : hr ? `${hr}h ${m}m` : m ? `${m}m ${s % 60}s` : `${s}s`;
}

// AMQP timestamps arrive as seconds since the epoch (or a string).
function timeText(t) {
  if (t == null || t === '') return '—';
  const d = typeof t === 'number' ? new Date(t < 1e12 ? t * 1000 : t) : new Date(t);
  if (Number.isNaN(d.getTime())) return String(t);
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
}

function valueText(v) {
  if (v == null) return '—';
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

const exchangeName = x => (x === '' ? h('span', {class: 'muted'}, '(AMQP default)') : valueText(x));
const badge = (text, kind) => h('span', {class: 'badge ' + (kind || '')}, text);

function kvTable(obj, cls, skip = []) {
  const keys = Object.keys(obj || {}).filter(k => !skip.includes(k)).sort();
  if (!keys.length) return h('p', {class: 'muted'}, 'None');
  return h('table', {class: 'kv ' + cls},
    h('tbody', null, keys.map(k => h('tr', null,
      h('th', {scope: 'row'}, k),
      h('td', null, k === 'timestamp' ? timeText(obj[k]) : obj[k] === '' ? h('span', {class: 'muted'}, '(empty)') : valueText(obj[k]))))));
}

// ---- Session and API -------------------------------------------------------

let session = loadSession();

function loadSession() {
  try { return JSON.parse(sessionStorage.getItem(SESSION_KEY)) || {}; } catch { return {}; }
}

function saveSession(s) {
  session = s;
  sessionStorage.setItem(SESSION_KEY, JSON.stringify(s));
}

function basic(user, pass) {
  let bin = '';
  for (const b of new TextEncoder().encode(user + ':' + pass)) bin += String.fromCharCode(b);
  return btoa(bin);
}

const hasTag = (...tags) => (session.tags || []).some(t => tags.includes(t));
const tagList = t => (Array.isArray(t) ? t : String(t || '').split(',')).map(s => s.trim()).filter(Boolean);

class ApiError extends Error {
  constructor(status, error, reason) {
    super(reason || error || `HTTP ${status}`);
    this.status = status;
    this.error = error || '';
    this.reason = reason || '';
  }
}

// A 401 for bad credentials (or a user that lost its management tag) ends
// the session; a 401 for a missing permission is shown like any other error.
const loginFailure = err => err.status === 401 && (!err.reason || /login failed|not management user/i.test(err.reason));

async function api(path, {method = 'GET', body, auth = session.auth} = {}) {
  const headers = {Accept: 'application/json'};
  if (auth) headers.Authorization = 'Basic ' + auth;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    // credentials:'omit' keeps the browser's own basic-auth prompt away.
    res = await fetch('api' + path, {
      method, headers, credentials: 'omit', cache: 'no-store',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(0, 'network error', 'cannot reach the server (' + e.message + ')');
  }
  const text = await res.text();
  let data = null;
  if (text) { try { data = JSON.parse(text); } catch { data = text; } }
  if (!res.ok) {
    const obj = data && typeof data === 'object' ? data : {};
    const err = new ApiError(res.status, obj.error || res.statusText,
      obj.reason || (typeof data === 'string' ? data.trim() : ''));
    if (auth && auth === session.auth && loginFailure(err)) logout(err.reason || 'Login failed');
    throw err;
  }
  return data;
}

function errText(err) {
  if (err instanceof ApiError) {
    return err.error && err.reason && err.error !== err.reason ? `${err.error}: ${err.reason}` : err.message;
  }
  return String((err && err.message) || err);
}

// ---- Banners and dialogs ---------------------------------------------------

let statusTimer = 0;

function notify(msg) {
  const el = $('#status');
  el.textContent = msg;
  el.hidden = false;
  clearTimeout(statusTimer);
  statusTimer = setTimeout(() => { el.hidden = true; }, 10000);
}

function showError(err, what, kind = 'action') {
  const el = $('#alert');
  el.dataset.kind = kind;
  el.replaceChildren(
    h('span', null, h('strong', null, what + ' failed: '), errText(err)),
    h('button', {type: 'button', class: 'close', 'aria-label': 'Dismiss', onclick: () => { el.hidden = true; }}, '×'));
  el.hidden = false;
}

function clearLoadError() {
  const el = $('#alert');
  if (el.dataset.kind === 'load') el.hidden = true;
}

// ask shows a modal dialog and resolves to its FormData on confirm, or null.
function ask({title, body, confirm, danger = false}) {
  const dlg = $('#dialog');
  const form = h('form', {method: 'dialog'},
    h('h2', {id: 'dialog-title'}, title),
    h('div', {class: 'dialog-body'}, body),
    h('div', {class: 'dialog-actions'},
      h('button', {type: 'submit', value: 'cancel', class: 'secondary', formnovalidate: true}, 'Cancel'),
      h('button', {type: 'submit', value: 'confirm', class: danger ? 'danger' : 'primary', id: 'dialog-confirm'}, confirm)));
  dlg.replaceChildren(form);
  dlg.setAttribute('aria-labelledby', 'dialog-title');
  dlg.returnValue = '';
  return new Promise(resolve => {
    dlg.addEventListener('close', () => resolve(dlg.returnValue === 'confirm' ? new FormData(form) : null), {once: true});
    dlg.showModal();
  });
}

// ---- Login, logout, routing ------------------------------------------------

function showLogin(reason) {
  $('#app').hidden = true;
  $('#login').hidden = false;
  const err = $('#login-error');
  if (reason) { err.textContent = reason; err.hidden = false; }
  $('#login-user').focus();
}

function logout(reason) {
  sessionStorage.removeItem(SESSION_KEY);
  session = {};
  rateHistory.length = 0;
  $('#cluster').textContent = '';
  const dlg = $('#dialog');
  if (dlg.open) dlg.close();
  $('#login-error').hidden = true;
  route();
  if (reason) showLogin(reason);
}

async function login(ev) {
  ev.preventDefault();
  const user = $('#login-user').value.trim();
  const pass = $('#login-pass').value;
  const err = $('#login-error');
  const button = ev.target.querySelector('button[type=submit]');
  if (!user) { err.textContent = 'Enter a username.'; err.hidden = false; return; }
  err.hidden = true;
  button.disabled = true;
  const auth = basic(user, pass);
  try {
    const me = await api('/whoami', {auth});
    saveSession({auth, user: me.name || user, tags: tagList(me.tags)});
    $('#login-pass').value = '';
    route();
  } catch (e) {
    err.textContent = e instanceof ApiError && e.status === 401 ? (e.reason || 'Login failed') : errText(e);
    err.hidden = false;
  } finally {
    button.disabled = false;
  }
}

const routes = [
  [/^#?\/?$/, 'overview', overviewPage],
  [/^#\/queues\/?$/, 'queues', queuesPage],
  [/^#\/queues\/([^/]+)\/([^/]+)$/, 'queues', queuePage],
  [/^#\/dead-letters\/?$/, 'dead-letters', deadLettersPage],
];

let page = null; // the current page's context: {main, live(), refresh, busy}
let gen = 0;

function route() {
  gen++;
  page = null;
  $('#alert').hidden = true;
  if (!session.auth) { showLogin(); return; }
  $('#login').hidden = true;
  $('#login-error').hidden = true;
  $('#app').hidden = false;
  const tags = session.tags || [];
  $('#whoami').textContent = session.user + (tags.length ? ' · ' + tags.join(', ') : '');
  if (!$('#cluster').textContent) loadCluster();
  const main = $('#main');
  main.replaceChildren();
  const hash = location.hash;
  for (const [re, nav, fn] of routes) {
    const m = re.exec(hash);
    if (!m) continue;
    let args;
    try { args = m.slice(1).map(decodeURIComponent); } catch { break; }
    for (const a of document.querySelectorAll('[data-nav]')) {
      if (a.dataset.nav === nav) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
    const g = gen;
    page = {main, live: () => g === gen, refresh: null, busy: false};
    fn(page, ...args);
    return;
  }
  main.append(h('h1', null, 'Not found'),
    h('p', null, 'Nothing lives at ', h('code', null, hash), '. ', h('a', {href: '#/'}, 'Go to the overview'), '.'));
}

async function loadCluster() {
  try {
    const ov = await api('/overview');
    const name = [ov.cluster_name, [ov.product_name, ov.product_version].filter(Boolean).join(' ')].filter(Boolean);
    $('#cluster').textContent = name.join(' · ');
  } catch { /* the page shows its own errors */ }
}

async function refreshNow(ctx) {
  if (!ctx.refresh || ctx.busy) return;
  ctx.busy = true;
  try { await ctx.refresh(); } finally { ctx.busy = false; }
}

// poll makes fn the page's refresh, run now and every REFRESH_MS.
function poll(ctx, what, fn) {
  ctx.refresh = async () => {
    try {
      await fn();
      if (ctx.live()) clearLoadError();
    } catch (err) {
      if (ctx.live() && session.auth) showError(err, what, 'load');
    }
  };
  refreshNow(ctx);
}

setInterval(() => { if (page && !document.hidden) refreshNow(page); }, REFRESH_MS);

// ---- Overview --------------------------------------------------------------

function sparkline(values) {
  const NS = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(NS, 'svg');
  svg.setAttribute('viewBox', '0 0 100 24');
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('class', 'spark');
  svg.setAttribute('aria-hidden', 'true');
  if (values.length > 1) {
    const max = Math.max(...values) || 1;
    const step = 100 / (HISTORY - 1);
    const pts = values.map((v, i) =>
      `${(100 - (values.length - 1 - i) * step).toFixed(2)},${(22 - (v / max) * 20).toFixed(2)}`);
    const line = document.createElementNS(NS, 'polyline');
    line.setAttribute('points', pts.join(' '));
    svg.append(line);
  }
  return svg;
}

function card(label, value, extra, cls) {
  return h('div', {class: 'card ' + (cls || '')},
    h('div', {class: 'card-label'}, label),
    h('div', {class: 'card-value'}, value),
    extra);
}

function overviewPage(ctx) {
  const alarms = h('div');
  const rates = h('div', {class: 'cards', id: 'ov-rates'});
  const totals = h('div', {class: 'cards', id: 'ov-totals'});
  const objects = h('div', {class: 'cards', id: 'ov-objects'});
  const nodes = h('div', {id: 'ov-nodes'});
  ctx.main.append(
    h('h1', null, 'Overview'),
    alarms,
    h('section', null, h('h2', null, 'Message rates'), rates),
    h('section', null, h('h2', null, 'Queued messages'), totals),
    h('section', null, h('h2', null, 'Objects'), objects),
    h('section', null, h('h2', null, 'Nodes'), nodes));

  poll(ctx, 'Loading the overview', async () => {
    const wantNodes = hasTag('monitoring', 'administrator');
    const [ov, ns] = await Promise.all([
      api('/overview'),
      wantNodes ? api('/nodes').catch(e => e) : Promise.resolve(null),
    ]);
    const sample = {};
    for (const s of ['publish', 'deliver_get', 'ack', 'redeliver']) sample[s] = rateOf(ov, s);
    rateHistory.push(sample);
    if (rateHistory.length > HISTORY) rateHistory.shift();

    const series = s => sparkline(rateHistory.map(x => x[s]));
    rates.replaceChildren(
      card('Publish', rateText(sample.publish), series('publish')),
      card('Deliver / get', rateText(sample.deliver_get), series('deliver_get')),
      card('Acknowledge', rateText(sample.ack), series('ack')),
      card('Redeliver', rateText(sample.redeliver), series('redeliver')));
    const qt = ov.queue_totals || {};
    totals.replaceChildren(
      card('Total', num(qt.messages)),
      card('Ready', num(qt.messages_ready)),
      card('Unacknowledged', num(qt.messages_unacknowledged)));
    const ot = ov.object_totals || {};
    objects.replaceChildren(
      card('Connections', num(ot.connections)),
      card('Channels', num(ot.channels)),
      card(h('a', {href: '#/queues'}, 'Queues'), num(ot.queues)),
      card('Consumers', num(ot.consumers)),
      card('Exchanges', num(ot.exchanges)));

    alarms.replaceChildren();
    if (!wantNodes) {
      nodes.replaceChildren(h('p', {class: 'muted'}, 'Node details need the monitoring or administrator tag.'));
    } else if (ns instanceof Error) {
      nodes.replaceChildren(h('p', {class: 'error'}, 'Node details unavailable: ' + errText(ns)));
    } else {
      const list = Array.isArray(ns) ? ns : [];
      for (const n of list) {
        if (n.mem_alarm) alarms.append(h('p', {class: 'alarm', role: 'alert'}, `Memory alarm on ${n.name}: publishers are blocked.`));
        if (n.disk_free_alarm) alarms.append(h('p', {class: 'alarm', role: 'alert'}, `Disk alarm on ${n.name}: publishers are blocked.`));
      }
      nodes.replaceChildren(nodesTable(list));
    }
  });
}

function nodesTable(list) {
  if (!list.length) return h('p', {class: 'muted'}, 'No nodes reported.');
  const usage = (used, limit, fmt) => (limit ? `${fmt(used)} of ${fmt(limit)}` : fmt(used));
  // A cluster's nodes say which one leads the metadata group.
  const cluster = list.some(n => n.leader !== undefined);
  const cols = ['Node', 'State', ...(cluster ? ['Leader'] : []), 'Uptime', 'Memory used', 'Disk free', 'Disk free limit',
    'File descriptors', 'Sockets', 'Alarms'];
  return h('table', {class: 'grid'},
    h('thead', null, h('tr', null, cols.map(c => h('th', {scope: 'col'}, c)))),
    h('tbody', null, list.map(n => {
      const al = [n.mem_alarm && badge('memory', 'danger'), n.disk_free_alarm && badge('disk', 'danger')].filter(Boolean);
      return h('tr', {'data-node': n.name},
        h('td', null, n.name),
        h('td', {'data-col': 'state'}, n.running === false ? badge('stopped', 'danger') : badge('running', 'ok')),
        cluster ? h('td', {'data-col': 'leader'}, n.leader ? badge('leader', 'ok') : '') : null,
        h('td', null, n.uptime != null ? duration(n.uptime) : '—'),
        h('td', null, usage(n.mem_used, n.mem_limit, bytes)),
        h('td', null, n.disk_free != null ? bytes(n.disk_free) : '—'),
        h('td', null, n.disk_free_limit != null ? bytes(n.disk_free_limit) : '—'),
        h('td', null, n.fd_used != null ? usage(n.fd_used, n.fd_total, num) : '—'),
        h('td', null, n.sockets_used != null ? num(n.sockets_used) : '—'),
        h('td', {class: 'alarms'}, al.length ? al : badge('none', 'ok')));
    })));
}

// ---- Queues ----------------------------------------------------------------

const QUEUE_COLUMNS = [
  // [header, sort key, cell]
  ['Virtual host', 'vhost', q => q.vhost],
  ['Name', 'name', q => h('a', {href: queueHref(q.vhost, q.name)}, q.name)],
  ['Type', 'type', q => q.type || 'classic'],
  ['State', 'state', q => badge(q.state || '—', q.state === 'running' || q.state === 'idle' ? 'ok' : 'warn')],
  ['Node', 'node', q => q.node || '—'],
  ['Messages', 'messages', q => num(q.messages), 'messages'],
  ['Ready', 'messages_ready', q => num(q.messages_ready), 'ready'],
  ['Unacked', 'messages_unacknowledged', q => num(q.messages_unacknowledged), 'unacked'],
  ['Consumers', 'consumers', q => num(q.consumers), 'consumers'],
  ['Incoming', 'message_stats.publish_details.rate', q => rateText(rateOf(q, 'publish')), 'incoming'],
  ['Deliver / get', 'message_stats.deliver_get_details.rate', q => rateText(rateOf(q, 'deliver_get')), 'deliver'],
  ['Ack', 'message_stats.ack_details.rate', q => rateText(rateOf(q, 'ack')), 'ack'],
];

const queuesView = {page: 1, pageSize: 100, name: '', regex: false, sort: 'name', reverse: false};

function queuesPage(ctx) {
  const v = queuesView;
  const filter = h('input', {id: 'q-filter', type: 'search', value: v.name, placeholder: 'name contains…'});
  const regex = h('input', {id: 'q-regex', type: 'checkbox', checked: v.regex});
  const head = h('tr');
  const body = h('tbody');
  const pager = h('div', {class: 'pager'});
  let timer = 0;
  const changed = () => {
    clearTimeout(timer);
    timer = setTimeout(() => { v.name = filter.value; v.regex = regex.checked; v.page = 1; refreshNow(ctx); }, 250);
  };
  filter.addEventListener('input', changed);
  regex.addEventListener('change', changed);

  const drawHead = () => head.replaceChildren(...QUEUE_COLUMNS.map(([label, key, , numCol]) => {
    const active = v.sort === key;
    return h('th', {scope: 'col', class: numCol ? 'num' : '', 'aria-sort': active ? (v.reverse ? 'descending' : 'ascending') : null},
      h('button', {type: 'button', class: 'sort', onclick: () => {
        v.reverse = active ? !v.reverse : false;
        v.sort = key;
        drawHead();
        refreshNow(ctx);
      }}, label, active ? (v.reverse ? ' ▼' : ' ▲') : ''));
  }));
  drawHead();

  ctx.main.append(
    h('h1', null, 'Queues'),
    h('div', {class: 'toolbar'},
      h('label', {for: 'q-filter'}, 'Filter'), filter,
      h('label', {class: 'check'}, regex, ' Regular expression')),
    h('div', {class: 'table-wrap'}, h('table', {class: 'grid', id: 'queues'}, h('thead', null, head), body)),
    pager);

  poll(ctx, 'Loading queues', async () => {
    const qs = new URLSearchParams({page: v.page, page_size: v.pageSize, name: v.name, use_regex: v.regex, pagination: true});
    if (v.sort) { qs.set('sort', v.sort); qs.set('sort_reverse', v.reverse); }
    let data;
    try {
      data = await api('/queues?' + qs);
    } catch (err) {
      // The page may have gone (queues deleted): go back to the first one.
      if (err.status !== 400 || v.page === 1) throw err;
      v.page = 1;
      qs.set('page', 1);
      data = await api('/queues?' + qs);
    }
    const items = Array.isArray(data) ? data : data.items || [];
    body.replaceChildren(...items.map(q => h('tr', {'data-vhost': q.vhost, 'data-name': q.name},
      QUEUE_COLUMNS.map(([, , cell, col]) => h('td', {class: col ? 'num' : '', 'data-col': col || null}, cell(q))))));
    if (!items.length) {
      body.append(h('tr', null, h('td', {colspan: QUEUE_COLUMNS.length, class: 'empty'},
        v.name ? 'No queue matches the filter.' : 'No queues.')));
    }
    const pages = Array.isArray(data) ? 1 : Math.max(1, data.page_count || 1);
    const total = Array.isArray(data) ? items.length : data.filtered_count ?? items.length;
    pager.replaceChildren(
      h('span', null, `${plural(total, 'queue')} · page ${v.page} of ${pages}`),
      h('button', {type: 'button', class: 'secondary small', disabled: v.page <= 1, onclick: () => { v.page--; refreshNow(ctx); }}, 'Previous'),
      h('button', {type: 'button', class: 'secondary small', disabled: v.page >= pages, onclick: () => { v.page++; refreshNow(ctx); }}, 'Next'));
  });
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
    const yes = b => (b ? 'yes' : 'no');
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

function messageView(m) {
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
function payloadText(m, props) {
  const text = m.payload ?? '';
  if (m.payload_encoding === 'base64') return text;
  if (/json/i.test(props.content_type || '')) {
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch { /* not JSON after all */ }
  }
  return text.replace(/[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]/g, c => '\\x' + c.charCodeAt(0).toString(16).padStart(2, '0'));
}

function xDeathTable(deaths) {
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

async function purgeQueue(vhost, name, done) {
  const ok = await ask({
    title: 'Purge queue',
    body: h('p', null, 'Delete all ready messages in ', h('strong', null, name), ` (vhost ${vhost})? This cannot be undone.`),
    confirm: 'Purge', danger: true,
  });
  if (!ok) return;
  try {
    await api(`/queues/${enc(vhost)}/${enc(name)}/contents`, {method: 'DELETE'});
    notify(`Purged ${name}.`);
  } catch (err) {
    showError(err, `Purging ${name}`);
  }
  done();
}

// ---- Dead letters ----------------------------------------------------------

function counts(obj) {
  const entries = Object.entries(obj || {}).sort((a, b) => b[1] - a[1]);
  if (!entries.length) return h('span', {class: 'muted'}, '—');
  return h('ul', {class: 'chips'}, entries.map(([k, n]) => h('li', null, `${k}: ${num(n)}`)));
}

function deadLettersPage(ctx) {
  const cards = h('div', {class: 'cards'});
  const result = h('div', {id: 'dl-result', role: 'status'});
  const body = h('tbody');
  const cols = ['Queue', 'Messages', 'Ready', 'Unacked', 'Consumers', 'By reason', 'By source queue', 'Actions'];
  ctx.main.append(
    h('h1', null, 'Dead letters'),
    h('p', {class: 'muted'}, 'Queues that receive dead-lettered messages. Counts are of ready messages, by their most recent death.'),
    cards, result,
    h('div', {class: 'table-wrap'}, h('table', {class: 'grid', id: 'dlqs'},
      h('thead', null, h('tr', null, cols.map((c, i) => h('th', {scope: 'col', class: i >= 1 && i <= 4 ? 'num' : ''}, c)))),
      body)));

  const after = () => refreshNow(ctx);
  const showResult = (node, kind) => result.replaceChildren(h('div', {class: 'result ' + kind}, node));

  poll(ctx, 'Loading dead-letter queues', async () => {
    const dlqs = await api('/dead-letters');
    let total = 0;
    const reasons = {};
    for (const d of dlqs) {
      total += Number(d.messages) || 0;
      for (const [r, n] of Object.entries(d.by_reason || {})) reasons[r] = (reasons[r] || 0) + n;
    }
    cards.replaceChildren(
      card('DLQs', num(dlqs.length)),
      card('Dead letters', num(total), null, total ? 'warn' : ''),
      ...Object.entries(reasons).sort((a, b) => b[1] - a[1]).map(([r, n]) => card(`Reason: ${r}`, num(n))));
    body.replaceChildren(...dlqs.map(d => {
      const empty = !(Number(d.messages_ready) > 0);
      const label = `${d.name} (vhost ${d.vhost})`;
      return h('tr', {'data-vhost': d.vhost, 'data-name': d.name},
        h('td', null,
          h('a', {href: queueHref(d.vhost, d.name), class: 'qname'}, d.name),
          h('div', {class: 'muted small'}, `vhost ${d.vhost}`,
            d.sources && d.sources.length ? ` · from ${d.sources.join(', ')}` : ''),
          d.sampled ? h('div', {class: 'muted small'}, 'counts sampled from the first 10 000 messages') : null),
        h('td', {class: 'num', 'data-col': 'messages'}, num(d.messages)),
        h('td', {class: 'num', 'data-col': 'ready'}, num(d.messages_ready)),
        h('td', {class: 'num', 'data-col': 'unacked'}, num(d.messages_unacknowledged)),
        h('td', {class: 'num', 'data-col': 'consumers'}, num(d.consumers)),
        h('td', {'data-col': 'by-reason'}, counts(d.by_reason)),
        h('td', {'data-col': 'by-source'}, counts(d.by_source)),
        h('td', {class: 'actions'},
          h('a', {href: queueHref(d.vhost, d.name), class: 'button secondary small browse', 'aria-label': `Browse ${label}`}, 'Browse'),
          h('button', {type: 'button', class: 'primary small replay', disabled: empty, 'aria-label': `Replay ${label}`,
            onclick: () => replay(d, showResult, after)}, 'Replay'),
          h('button', {type: 'button', class: 'secondary small move', disabled: empty, 'aria-label': `Move ${label}`,
            onclick: () => move(d, showResult, after)}, 'Move'),
          h('button', {type: 'button', class: 'danger small purge', disabled: empty, 'aria-label': `Purge ${label}`,
            onclick: () => purgeQueue(d.vhost, d.name, after)}, 'Purge')));
    }));
    if (!dlqs.length) {
      body.append(h('tr', null, h('td', {colspan: cols.length, class: 'empty'},
        'No dead-letter queues. A queue is listed once another queue dead-letters into it (x-dead-letter-exchange) or it holds messages with an x-death history.')));
    }
  });
}

function field(id, label, input, hint) {
  input.id = id;
  return h('div', {class: 'field'}, h('label', {for: id}, label), input, hint ? h('small', {class: 'muted'}, hint) : null);
}

async function replay(d, showResult, after) {
  const reasons = [...new Set([...Object.keys(d.by_reason || {}), ...REASONS])];
  const sources = [...new Set([...Object.keys(d.by_source || {}), ...(d.sources || [])])];
  const fd = await ask({
    title: `Replay dead letters from ${d.name}`,
    body: [
      h('p', null, 'Each message is republished to the exchange and routing keys it was first dead-lettered from, then removed from ',
        h('strong', null, d.name), '. Messages that do not match the filters stay.'),
      field('rp-count', 'How many', h('input', {name: 'count', type: 'number', min: 1, step: 1, placeholder: `all (${num(d.messages_ready)})`})),
      field('rp-reason', 'Death reason', h('select', {name: 'reason'},
        h('option', {value: ''}, 'any reason'), reasons.map(r => h('option', {value: r}, r)))),
      field('rp-source', 'Source queue', h('select', {name: 'source_queue'},
        h('option', {value: ''}, 'any queue'), sources.map(s => h('option', {value: s}, s)))),
      h('label', {class: 'check'}, h('input', {type: 'checkbox', name: 'keep_history', id: 'rp-keep'}),
        ' Keep the x-death history (otherwise messages start afresh)'),
    ],
    confirm: 'Replay',
  });
  if (!fd) return;
  const body = {keep_history: fd.get('keep_history') === 'on'};
  const count = parseInt(fd.get('count'), 10);
  if (count > 0) body.count = count;
  if (fd.get('reason')) body.reason = fd.get('reason');
  if (fd.get('source_queue')) body.source_queue = fd.get('source_queue');
  try {
    const r = await api(`/dead-letters/${enc(d.vhost)}/${enc(d.name)}/replay`, {method: 'POST', body});
    const text = `Replay from ${d.name}: ${num(r.replayed)} replayed, ${num(r.skipped)} skipped, ${num(r.failed)} failed, ${num(r.remaining)} remaining.`;
    showResult(text, r.failed ? 'warn' : 'ok');
  } catch (err) {
    showError(err, `Replaying ${d.name}`);
  }
  after();
}

async function move(d, showResult, after) {
  const dest = h('input', {name: 'dest', required: true, list: 'mv-queues', autocomplete: 'off'});
  const options = h('datalist', {id: 'mv-queues'});
  dest.addEventListener('input', () => dest.setCustomValidity(dest.value === d.name ? 'Choose a queue other than the source.' : ''));
  api(`/queues/${enc(d.vhost)}?columns=name`).then(qs => {
    options.replaceChildren(...(Array.isArray(qs) ? qs : qs.items || []).filter(q => q.name !== d.name).map(q => h('option', {value: q.name})));
  }).catch(() => {});
  const fd = await ask({
    title: `Move messages from ${d.name}`,
    body: [
      h('p', null, `Move all ${plural(d.messages_ready, 'ready message')} of `, h('strong', null, d.name),
        ` to another queue in vhost ${d.vhost}. Each message leaves ${d.name} once the destination has it.`),
      field('mv-dest', 'Destination queue', dest), options,
    ],
    confirm: 'Move messages',
  });
  if (!fd) return;
  const destQ = fd.get('dest').trim();
  const name = `move-${d.name}-${Date.now().toString(36)}`;
  const uri = 'amqp:///' + enc(d.vhost);
  try {
    await api(`/parameters/shovel/${enc(d.vhost)}/${enc(name)}`, {method: 'PUT', body: {
      component: 'shovel', vhost: d.vhost, name,
      value: {'src-uri': uri, 'src-queue': d.name, 'dest-uri': uri, 'dest-queue': destQ, 'src-delete-after': 'queue-length'},
    }});
    showResult(`Moving messages from ${d.name} to ${destQ} (shovel ${name}).`, 'ok');
  } catch (err) {
    showError(err, `Moving messages from ${d.name}`);
  }
  after();
}

// ---- Start -----------------------------------------------------------------

$('#login-form').addEventListener('submit', login);
$('#logout').addEventListener('click', () => logout());
// A click on the link of the page already shown refreshes it.
for (const a of document.querySelectorAll('[data-nav]')) {
  a.addEventListener('click', () => { if (a.getAttribute('href') === (location.hash || '#/') && page) refreshNow(page); });
}
window.addEventListener('hashchange', route);
route();
})();
