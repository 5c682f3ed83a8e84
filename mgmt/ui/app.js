// Warren management UI: a single page with hash routes over the management
// HTTP API (RabbitMQ's, plus Warren's /api/dead-letters), authenticated
// with HTTP basic auth kept in sessionStorage. No framework, nothing
// external; charts with the vendored uPlot. Each page group is a module in
// pages/ exporting its routes: [[hash regex, nav key, page(ctx, ...args)]].

import {$, api, basic, errText, h, saveSession, state, tagList, refreshNow, REFRESH_MS, SESSION_KEY, ApiError} from './core.js';
import * as overview from './pages/overview.js';
import * as connections from './pages/connections.js';
import * as channels from './pages/channels.js';
import * as exchanges from './pages/exchanges.js';
import * as queues from './pages/queues.js';
import * as deadLetters from './pages/deadletters.js';
import * as admin from './pages/admin.js';
import * as cluster from './pages/cluster.js';

const PAGES = [overview, connections, channels, exchanges, queues, deadLetters, admin, cluster];
const routes = PAGES.flatMap(p => p.routes);

// NAV is the top bar: [nav key, label, href]; a link shows when a page
// module routes to it.
const NAV = [
  ['overview', 'Overview', '#/'], ['connections', 'Connections', '#/connections'], ['channels', 'Channels', '#/channels'],
  ['exchanges', 'Exchanges', '#/exchanges'], ['queues', 'Queues', '#/queues'], ['dead-letters', 'Dead letters', '#/dead-letters'],
  ['admin', 'Admin', '#/admin'], ['cluster', 'Cluster', '#/cluster'],
];

function drawNav() {
  const keys = new Set(routes.map(r => r[1]));
  $('#nav').replaceChildren(...NAV.filter(([k]) => keys.has(k)).map(([k, label, href]) => {
    const a = h('a', {href, 'data-nav': k}, label);
    // A click on the link of the page already shown refreshes it.
    a.addEventListener('click', () => { if (href === (location.hash || '#/') && state.page) refreshNow(state.page); });
    return a;
  }));
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
  state.session = {};
  $('#cluster').textContent = '';
  const dlg = $('#dialog');
  if (dlg.open) dlg.close();
  $('#login-error').hidden = true;
  route();
  if (reason) showLogin(reason);
}
state.onLogout = logout;

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

function route() {
  const g = ++state.gen;
  state.page = null;
  $('#alert').hidden = true;
  if (!state.session.auth) { showLogin(); return; }
  $('#login').hidden = true;
  $('#login-error').hidden = true;
  $('#app').hidden = false;
  const tags = state.session.tags || [];
  $('#whoami').textContent = state.session.user + (tags.length ? ' · ' + tags.join(', ') : '');
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
    state.page = {main, live: () => g === state.gen, refresh: null, busy: false, reload: route};
    fn(state.page, ...args);
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

setInterval(() => { if (state.page && !document.hidden) refreshNow(state.page); }, REFRESH_MS);

// ---- Start -----------------------------------------------------------------

drawNav();
$('#login-form').addEventListener('submit', login);
$('#logout').addEventListener('click', () => logout());
window.addEventListener('hashchange', route);
route();
