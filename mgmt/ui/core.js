// Shared pieces of the management UI: DOM building, formatting, the API
// client, banners and dialogs, page polling, and the list view that every
// RabbitMQ list endpoint (queues, exchanges, connections, ...) is shown with.
// Pages live in pages/*.js; app.js routes between them.

export const REFRESH_MS = 5000;
export const SESSION_KEY = 'warren.session';
export const REASONS = ['rejected', 'expired', 'maxlen', 'delivery_limit'];

// ---- DOM and formatting helpers --------------------------------------------

export const $ = (sel, root = document) => root.querySelector(sel);

// h builds an element; strings become text nodes, never HTML.
export function h(tag, props, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v == null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k === 'value' && (tag === 'input' || tag === 'textarea' || tag === 'select')) el.value = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid == null || kid === false) continue;
    el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}

export const enc = encodeURIComponent;
const nf = new Intl.NumberFormat('en-US');
const rf = new Intl.NumberFormat('en-US', {minimumFractionDigits: 1, maximumFractionDigits: 1});
export const num = n => nf.format(Number(n) || 0);
export const rateText = n => rf.format(Number(n) || 0) + '/s';
export const pick = (obj, path) => path.split('.').reduce((o, k) => (o == null ? undefined : o[k]), obj);
export const rateOf = (obj, stat) => Number(pick(obj, `message_stats.${stat}_details.rate`)) || 0;
export const plurals = word => (/[^aeiou]y$/.test(word) ? word.slice(0, -1) + 'ie' : word) + 's';
export const plural = (n, word) => `${num(n)} ${Number(n) === 1 ? word : plurals(word)}`;
export const queueHref = (vhost, name) => `#/queues/${enc(vhost)}/${enc(name)}`;
export const exchangeHref = (vhost, name) => `#/exchanges/${enc(vhost)}/${enc(name === '' ? 'amq.default' : name)}`;
export const yes = b => (b ? 'yes' : 'no');

export function bytes(n) {
  n = Number(n);
  if (!Number.isFinite(n)) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + ' ' + units[i];
}

export function duration(ms) {
  let s = Math.floor((Number(ms) || 0) / 1000);
  const d = Math.floor(s / 86400); s -= d * 86400;
  const hr = Math.floor(s / 3600); s -= hr * 3600;
  const m = Math.floor(s / 60);
  return d ? `${d}d ${hr}h` : hr ? `${hr}h ${m}m` : m ? `${m}m ${s % 60}s` : `${s}s`;
}

// AMQP timestamps arrive as seconds since the epoch (or a string).
export function timeText(t) {
  if (t == null || t === '') return '—';
  const d = typeof t === 'number' ? new Date(t < 1e12 ? t * 1000 : t) : new Date(t);
  if (Number.isNaN(d.getTime())) return String(t);
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
}

export function valueText(v) {
  if (v == null) return '—';
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

export const exchangeName = x => (x === '' ? h('span', {class: 'muted'}, '(AMQP default)') : valueText(x));
export const badge = (text, kind) => h('span', {class: 'badge ' + (kind || '')}, text);

export function kvTable(obj, cls, skip = []) {
  const keys = Object.keys(obj || {}).filter(k => !skip.includes(k)).sort();
  if (!keys.length) return h('p', {class: 'muted'}, 'None');
  return h('table', {class: 'kv ' + cls},
    h('tbody', null, keys.map(k => h('tr', null,
      h('th', {scope: 'row'}, k),
      h('td', null, k === 'timestamp' ? timeText(obj[k]) : obj[k] === '' ? h('span', {class: 'muted'}, '(empty)') : valueText(obj[k]))))));
}

export function card(label, value, extra, cls) {
  return h('div', {class: 'card ' + (cls || '')},
    h('div', {class: 'card-label'}, label),
    h('div', {class: 'card-value'}, value),
    extra);
}

export function field(id, label, input, hint) {
  input.id = id;
  return h('div', {class: 'field'}, h('label', {for: id}, label), input, hint ? h('small', {class: 'muted'}, hint) : null);
}

// props renders [label, value] pairs as a definition grid.
export const props = rows => h('dl', {class: 'props'}, rows.map(([k, v]) => h('div', null, h('dt', null, k), h('dd', null, v))));

export function counts(obj) {
  const entries = Object.entries(obj || {}).sort((a, b) => b[1] - a[1]);
  if (!entries.length) return h('span', {class: 'muted'}, '—');
  return h('ul', {class: 'chips'}, entries.map(([k, n]) => h('li', null, `${k}: ${num(n)}`)));
}

// ---- Session and API -------------------------------------------------------

// state is the UI's shared mutable state: the session, the page shown.
export const state = {session: loadSession(), page: null, gen: 0, onLogout: null};

function loadSession() {
  try { return JSON.parse(sessionStorage.getItem(SESSION_KEY)) || {}; } catch { return {}; }
}

export function saveSession(s) {
  state.session = s;
  sessionStorage.setItem(SESSION_KEY, JSON.stringify(s));
}

export function basic(user, pass) {
  let bin = '';
  for (const b of new TextEncoder().encode(user + ':' + pass)) bin += String.fromCharCode(b);
  return btoa(bin);
}

export const hasTag = (...tags) => (state.session.tags || []).some(t => tags.includes(t));
export const tagList = t => (Array.isArray(t) ? t : String(t || '').split(',')).map(s => s.trim()).filter(Boolean);

export class ApiError extends Error {
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

// api calls the management API. raw: resolve to the body text, unparsed;
// headers: more request headers (X-Reason for closing a connection).
export async function api(path, {method = 'GET', body, auth = state.session.auth, raw = false, headers: extra} = {}) {
  const headers = {Accept: 'application/json', ...extra};
  if (auth) headers.Authorization = 'Basic ' + auth;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    // credentials:'omit' keeps the browser's own basic-auth prompt away.
    res = await fetch('api' + path, {
      method, headers, credentials: 'omit', cache: 'no-store',
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(0, 'network error', 'cannot reach the server (' + e.message + ')');
  }
  const text = await res.text();
  let data = null;
  if (text && !(raw && res.ok)) { try { data = JSON.parse(text); } catch { data = text; } }
  if (!res.ok) {
    const obj = data && typeof data === 'object' ? data : {};
    const err = new ApiError(res.status, obj.error || res.statusText,
      obj.reason || (typeof data === 'string' ? data.trim() : ''));
    if (auth && auth === state.session.auth && loginFailure(err) && state.onLogout) state.onLogout(err.reason || 'Login failed');
    throw err;
  }
  return raw ? text : data;
}

// items returns the list of a list reply, paged ({items: [...]}) or not.
export const items = data => (Array.isArray(data) ? data : (data && data.items) || []);

export function errText(err) {
  if (err instanceof ApiError) {
    return err.error && err.reason && err.error !== err.reason ? `${err.error}: ${err.reason}` : err.message;
  }
  return String((err && err.message) || err);
}

// ---- Banners and dialogs ---------------------------------------------------

let statusTimer = 0;

export function notify(msg) {
  const el = $('#status');
  el.textContent = msg;
  el.hidden = false;
  clearTimeout(statusTimer);
  statusTimer = setTimeout(() => { el.hidden = true; }, 10000);
}

export function showError(err, what, kind = 'action') {
  const el = $('#alert');
  el.dataset.kind = kind;
  el.replaceChildren(
    h('span', null, h('strong', null, what + ' failed: '), errText(err)),
    h('button', {type: 'button', class: 'close', 'aria-label': 'Dismiss', onclick: () => { el.hidden = true; }}, '×'));
  el.hidden = false;
}

export function clearLoadError() {
  const el = $('#alert');
  if (el.dataset.kind === 'load') el.hidden = true;
}

// ask shows a modal dialog and resolves to its FormData on confirm, or null.
// check, when given, runs on confirm with the FormData; a string it
// returns (or throws) is shown in the dialog, which stays open.
export function ask({title, body, confirm, danger = false, wide = false, check}) {
  const dlg = $('#dialog');
  const err = h('p', {class: 'error', role: 'alert', id: 'dialog-error', hidden: true});
  const form = h('form', {method: 'dialog'},
    h('h2', {id: 'dialog-title'}, title),
    h('div', {class: 'dialog-body'}, body, err),
    h('div', {class: 'dialog-actions'},
      h('button', {type: 'submit', value: 'cancel', class: 'secondary', formnovalidate: true}, 'Cancel'),
      h('button', {type: 'submit', value: 'confirm', class: danger ? 'danger' : 'primary', id: 'dialog-confirm'}, confirm)));
  dlg.classList.toggle('wide', wide);
  dlg.replaceChildren(form);
  dlg.setAttribute('aria-labelledby', 'dialog-title');
  dlg.returnValue = '';
  if (check) {
    form.addEventListener('submit', async ev => {
      if (ev.submitter && ev.submitter.value !== 'confirm') return;
      ev.preventDefault();
      const fd = new FormData(form);
      let msg;
      try { msg = await check(fd); } catch (e) { msg = errText(e); }
      if (msg) { err.textContent = msg; err.hidden = false; return; }
      dlg.close('confirm');
    });
  }
  return new Promise(resolve => {
    dlg.addEventListener('close', () => resolve(dlg.returnValue === 'confirm' ? new FormData(form) : null), {once: true});
    dlg.showModal();
  });
}

// confirmAction asks, then runs fn; it reports the outcome and calls done.
export async function confirmAction({title, text, confirm, danger = true, ok, what}, fn, done) {
  const yes = await ask({title, body: h('p', null, text), confirm, danger});
  if (!yes) return false;
  try {
    await fn();
    if (ok) notify(ok);
  } catch (err) {
    showError(err, what || title);
    return false;
  } finally {
    if (done) done();
  }
  return true;
}

// ---- Page refresh ----------------------------------------------------------

export async function refreshNow(ctx) {
  if (!ctx || !ctx.refresh || ctx.busy) return;
  ctx.busy = true;
  try { await ctx.refresh(); } finally { ctx.busy = false; }
}

// poll makes fn the page's refresh, run now and every REFRESH_MS. A page
// may poll more than once: every function registered runs on each refresh.
export function poll(ctx, what, fn) {
  const one = async () => {
    try {
      await fn();
      if (ctx.live()) clearLoadError();
    } catch (err) {
      if (ctx.live() && state.session.auth) showError(err, what, 'load');
    }
  };
  const prev = ctx.refresh;
  ctx.refresh = prev ? async () => { await Promise.all([prev(), one()]); } : one;
  // A later poll runs at once, even while the first one's run is going.
  if (prev) one(); else refreshNow(ctx);
}

export function purgeQueue(vhost, name, done) {
  return confirmAction({
    title: 'Purge queue', confirm: 'Purge', ok: `Purged ${name}.`, what: `Purging ${name}`,
    text: [`Delete all ready messages in `, h('strong', null, name), ` (vhost ${vhost})? This cannot be undone.`],
  }, () => api(`/queues/${enc(vhost)}/${enc(name)}/contents`, {method: 'DELETE'}), done);
}

// ---- List view -------------------------------------------------------------

// listView shows a RabbitMQ list endpoint as a table with a name filter
// (plain or regular expression), sorting by any column, and paging, all
// done by the server (?page, page_size, name, use_regex, sort,
// sort_reverse, pagination=true), as RabbitMQ's own UI asks.
//
//   columns: [{label, sort, cell: obj => node, num: bool, col: 'data-col'}]
//   row: obj => attributes of the <tr> (data-* for tests)
//   view: persistent {page, pageSize, name, regex, sort, reverse}
export function listView(ctx, {id, path, columns, row, view, noun, what, toolbar, after}) {
  const v = view;
  const filter = h('input', {id: id + '-filter', type: 'search', value: v.name, placeholder: 'name contains…', 'aria-label': 'Filter by name'});
  const regex = h('input', {id: id + '-regex', type: 'checkbox', checked: v.regex});
  const size = h('select', {id: id + '-size', 'aria-label': 'Rows per page'},
    [20, 50, 100, 500].map(n => h('option', {value: n, selected: n === v.pageSize}, `${n} per page`)));
  const head = h('tr');
  const body = h('tbody');
  const pager = h('div', {class: 'pager', id: id + '-pager'});
  let timer = 0;
  const changed = () => {
    clearTimeout(timer);
    timer = setTimeout(() => { v.name = filter.value; v.regex = regex.checked; v.page = 1; refreshNow(ctx); }, 250);
  };
  filter.addEventListener('input', changed);
  regex.addEventListener('change', changed);
  size.addEventListener('change', () => { v.pageSize = Number(size.value); v.page = 1; refreshNow(ctx); });

  const drawHead = () => head.replaceChildren(...columns.map(c => {
    if (!c.sort) return h('th', {scope: 'col', class: c.num ? 'num' : ''}, c.label);
    const active = v.sort === c.sort;
    return h('th', {scope: 'col', class: c.num ? 'num' : '', 'aria-sort': active ? (v.reverse ? 'descending' : 'ascending') : null},
      h('button', {type: 'button', class: 'sort', onclick: () => {
        v.reverse = active ? !v.reverse : false;
        v.sort = c.sort;
        drawHead();
        refreshNow(ctx);
      }}, c.label, active ? (v.reverse ? ' ▼' : ' ▲') : ''));
  }));
  drawHead();

  const el = h('div', {class: 'list-view'},
    h('div', {class: 'toolbar'},
      h('label', {for: id + '-filter'}, 'Filter'), filter,
      h('label', {class: 'check'}, regex, ' Regular expression'),
      size, toolbar || null),
    h('div', {class: 'table-wrap'}, h('table', {class: 'grid', id}, h('thead', null, head), body)),
    pager);

  poll(ctx, what || `Loading ${plurals(noun)}`, async () => {
    const qs = new URLSearchParams({page: v.page, page_size: v.pageSize, name: v.name, use_regex: v.regex, pagination: true});
    if (v.sort) { qs.set('sort', v.sort); qs.set('sort_reverse', v.reverse); }
    const p = typeof path === 'function' ? path() : path;
    let data;
    try {
      data = await api(p + (p.includes('?') ? '&' : '?') + qs);
    } catch (err) {
      // The page may have gone (objects deleted): go back to the first one.
      if (err.status !== 400 || v.page === 1) throw err;
      v.page = 1;
      qs.set('page', 1);
      data = await api(p + (p.includes('?') ? '&' : '?') + qs);
    }
    if (!ctx.live()) return;
    const list = items(data);
    body.replaceChildren(...list.map(o => h('tr', row ? row(o) : null,
      columns.map(c => h('td', {class: c.num ? 'num' : c.cls || '', 'data-col': c.col || null}, c.cell(o))))));
    if (!list.length) {
      body.append(h('tr', null, h('td', {colspan: columns.length, class: 'empty'},
        v.name ? `No ${noun} matches the filter.` : `No ${plurals(noun)}.`)));
    }
    const pages = Array.isArray(data) ? 1 : Math.max(1, data.page_count || 1);
    const total = Array.isArray(data) ? list.length : data.filtered_count ?? list.length;
    pager.replaceChildren(
      h('span', null, `${plural(total, noun)} · page ${v.page} of ${pages}`),
      h('button', {type: 'button', class: 'secondary small', disabled: v.page <= 1, onclick: () => { v.page--; refreshNow(ctx); }}, 'Previous'),
      h('button', {type: 'button', class: 'secondary small', disabled: v.page >= pages, onclick: () => { v.page++; refreshNow(ctx); }}, 'Next'));
    if (after) after(list);
  });
  return el;
}

// newView is a list view's initial state.
export const newView = (sort = 'name') => ({page: 1, pageSize: 100, name: '', regex: false, sort, reverse: false});

// vhostSelect is a <select> of the vhosts the user may see.
export function vhostSelect(id, name = 'vhost', selected = '/') {
  const sel = h('select', {id, name, required: true}, h('option', {value: selected}, selected));
  api('/vhosts?columns=name').then(vs => {
    const names = items(vs).map(v => v.name).sort();
    if (names.length) sel.replaceChildren(...names.map(n => h('option', {value: n, selected: n === selected}, n)));
  }).catch(() => {});
  return sel;
}

// crumbs is a page's breadcrumb trail: [[text, href], ...].
export const crumbs = trail => h('nav', {class: 'crumbs', 'aria-label': 'Breadcrumb'},
  trail.map(([t, href], i) => [i ? ' › ' : '', href ? h('a', {href}, t) : t]));
