// Admin: users and their tags, virtual hosts, permissions and topic
// permissions, policies and operator policies, vhost and user limits, and
// definitions export and import; RabbitMQ's "Admin" tab. Every change goes
// through the management API and is reloaded from it, so what the page
// shows is what the broker keeps. Users without the tags a page needs get
// a notice saying which, rather than the API's 401.

import {
  api, ask, badge, confirmAction, enc, errText, field, h, hasTag, items, listView, newView, notify, num,
  poll, props, rateOf, rateText, refreshNow, showError, state, tagList, valueText, yes,
} from '../core.js';

export const routes = [
  [/^#\/admin\/?$/, 'admin', adminHome],
  [/^#\/admin\/users\/?$/, 'admin', usersPage],
  [/^#\/admin\/users\/([^/]+)$/, 'admin', userPage],
  [/^#\/admin\/vhosts\/?$/, 'admin', vhostsPage],
  [/^#\/admin\/vhosts\/([^/]+)$/, 'admin', vhostPage],
  [/^#\/admin\/policies\/?$/, 'admin', policiesPage],
  [/^#\/admin\/limits\/?$/, 'admin', limitsPage],
  [/^#\/admin\/shovels\/?$/, 'admin', shovelsPage],
  [/^#\/admin\/federation\/?$/, 'admin', federationPage],
  [/^#\/admin\/definitions\/?$/, 'admin', definitionsPage],
];

const TABS = [['users', 'Users'], ['vhosts', 'Virtual hosts'], ['policies', 'Policies'], ['limits', 'Limits'],
  ['shovels', 'Shovels'], ['federation', 'Federation'], ['definitions', 'Definitions']];

// STANDARD_TAGS are RabbitMQ's user tags, offered in the user form.
const STANDARD_TAGS = ['administrator', 'monitoring', 'policymaker', 'management', 'impersonator'];

const isAdmin = () => hasTag('administrator');
const isPolicymaker = () => hasTag('administrator', 'policymaker');
const userHref = name => `#/admin/users/${enc(name)}`;
const vhostHref = name => `#/admin/vhosts/${enc(name)}`;

// page starts an admin page: the title and the sub-tabs.
function page(ctx, tab, title) {
  append(ctx, 
    h('h1', null, title || 'Admin'),
    h('nav', {class: 'tabs', 'aria-label': 'Admin sections'}, TABS.map(([k, label]) =>
      h('a', {href: '#/admin/' + k, 'data-tab': k, 'aria-current': k === tab ? 'page' : null}, label))));
}

// append adds nodes to the page, skipping the null of a part not shown.
const append = (ctx, ...nodes) => ctx.main.append(...nodes.filter(n => n != null && n !== false));

// denied is the notice shown to a user without the tags a page needs.
function denied(what, tagText = 'administrator') {
  const tags = state.session.tags || [];
  return h('p', {class: 'result warn admin-denied', role: 'note'},
    `${what} needs the ${tagText} tag. You are logged in as ${state.session.user} with `,
    tags.length ? `the tags ${tags.join(', ')}.` : 'no tags.');
}

function adminHome(ctx) {
  if (!isAdmin() && isPolicymaker()) { location.replace('#/admin/policies'); return; }
  usersPage(ctx);
}

// ---- Small builders ---------------------------------------------------------

// table builds a grid: cols are [label, num?]; rows are <tr> elements.
function table(id, cols, rows, empty) {
  return h('div', {class: 'table-wrap'}, h('table', {class: 'grid', id},
    h('thead', null, h('tr', null, cols.map(([label, isNum]) => h('th', {scope: 'col', class: isNum ? 'num' : ''}, label)))),
    h('tbody', null, rows.length ? rows : h('tr', null, h('td', {colspan: cols.length, class: 'empty'}, empty)))));
}

const tagChips = tags => {
  const list = tagList(tags);
  return list.length ? list.map(t => badge(t, t === 'administrator' ? 'warn' : '')) : h('span', {class: 'muted'}, 'none');
};

const code = s => (s === '' ? h('span', {class: 'muted'}, '(empty)') : h('code', null, s));

// options fills a <select> with names (and a first [value, label] pair).
function fillSelect(sel, names, first) {
  const cur = sel.value;
  const opts = names.map(n => h('option', {value: n}, n));
  if (first) opts.unshift(h('option', {value: first[0]}, first[1]));
  sel.replaceChildren(...opts);
  if ([...sel.options].some(o => o.value === cur)) sel.value = cur;
}

async function vhostNames() {
  return items(await api('/vhosts?columns=name')).map(v => v.name).sort();
}

async function userNames() {
  return items(await api('/users?columns=name')).map(u => u.name).sort();
}

// select makes a <select> filled once from load() (a list of names).
function namesSelect(id, name, load, first) {
  // The first option (value '') stands for "all": not required then.
  const sel = h('select', {id, name, required: !first});
  if (first) sel.append(h('option', {value: first[0]}, first[1]));
  sel.loaded = load().then(ns => fillSelect(sel, ns, first)).catch(() => {});
  return sel;
}

// reasonText is an error's text; RabbitMQ HTML-escapes its validation
// reasons (<<"x">> comes as &lt;&lt;"x"&gt;&gt;), shown here as text.
const reasonText = err => errText(err).replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&');

// run does an API change, reports it and refreshes the page.
async function run(ctx, what, fn, ok) {
  try {
    await fn();
    if (ok) notify(ok);
    return true;
  } catch (err) {
    showError(new Error(reasonText(err)), what);
    return false;
  } finally {
    refreshNow(ctx);
  }
}

// ---- Users ------------------------------------------------------------------

const usersView = newView();

function usersPage(ctx) {
  page(ctx, 'users');
  if (!isAdmin()) { append(ctx, denied('Managing users')); return; }
  const add = h('button', {type: 'button', class: 'primary', id: 'add-user', onclick: async () => {
    const name = await userDialog(null);
    if (name) { notify(`User ${name} added.`); refreshNow(ctx); }
  }}, 'Add user');
  const cols = [
    {label: 'Name', sort: 'name', cell: u => h('a', {href: userHref(u.name)}, u.name), col: 'name'},
    {label: 'Tags', sort: 'tags', cell: u => tagChips(u.tags), col: 'tags'},
    {label: 'Can access virtual hosts', cell: u => h('span', {'data-access': u.name}, '…'), col: 'vhosts'},
    {label: 'Has password', cell: u => yes(Boolean(u.password_hash)), col: 'password'},
  ];
  append(ctx, 
    h('div', {class: 'title-row'}, h('h2', null, 'Users'), h('span', {class: 'spacer'}), add),
    listView(ctx, {id: 'users', path: '/users', columns: cols, view: usersView, noun: 'user',
      row: u => ({'data-name': u.name}),
      after: async () => {
        // RabbitMQ's list shows the vhosts each user has permissions in.
        let perms;
        try { perms = items(await api('/permissions')); } catch { return; }
        const by = {};
        for (const p of perms) (by[p.user] ||= []).push(p.vhost);
        for (const el of ctx.main.querySelectorAll('[data-access]')) {
          const vs = (by[el.dataset.access] || []).sort();
          el.replaceChildren(vs.length ? vs.join(', ') : h('span', {class: 'muted'}, 'No access'));
        }
      }}));
}

// userDialog adds a user (u null) or updates u; resolves to its name.
async function userDialog(u) {
  const tags = h('input', {name: 'tags', value: u ? tagList(u.tags).join(', ') : '', autocomplete: 'off'});
  const toggle = t => {
    if (t === 'none') { tags.value = ''; return; }
    const cur = tagList(tags.value);
    tags.value = (cur.includes(t) ? cur.filter(x => x !== t) : [...cur, t]).join(', ');
  };
  const pw = h('input', {name: 'password', type: 'password', autocomplete: 'new-password'});
  const pw2 = h('input', {name: 'password2', type: 'password', autocomplete: 'new-password'});
  const mode = h('select', {name: 'pwmode'},
    u ? h('option', {value: 'keep'}, u.password_hash ? 'Keep the current password' : 'Keep: no password') : null,
    h('option', {value: 'set'}, u ? 'Set a new password' : 'Password'),
    h('option', {value: 'none'}, 'No password (cannot log in with one)'));
  const pwFields = h('div', {class: 'dialog-body'},
    field('u-password', 'Password', pw), field('u-password2', 'Confirm the password', pw2));
  const sync = () => { pwFields.hidden = mode.value !== 'set'; };
  mode.addEventListener('change', sync);
  sync();
  let saved = u ? u.name : '';
  const ok = await ask({
    title: u ? `Update user ${u.name}` : 'Add a user',
    confirm: u ? 'Update user' : 'Add user',
    body: [
      u ? null : field('u-name', 'Username', h('input', {name: 'name', required: true, autocomplete: 'off'})),
      field('u-pwmode', 'Password', mode),
      pwFields,
      field('u-tags', 'Tags', tags, 'Comma-separated. Standard tags:'),
      h('div', {class: 'toolbar', role: 'group', 'aria-label': 'Standard tags'},
        [...STANDARD_TAGS, 'none'].map(t => h('button', {type: 'button', class: 'secondary small', 'data-tag': t,
          onclick: () => toggle(t)}, t === 'none' ? 'none (clear)' : t))),
    ],
    check: async fd => {
      const name = u ? u.name : String(fd.get('name') || '').trim();
      if (!name) return 'Enter a username.';
      const body = {tags: tagList(fd.get('tags')).join(',')};
      switch (fd.get('pwmode')) {
        case 'set': {
          const p = String(fd.get('password') || '');
          if (!p) return 'Enter a password, or choose "No password".';
          if (p !== fd.get('password2')) return 'The passwords do not match.';
          body.password = p;
          break;
        }
        case 'none':
          body.password_hash = '';
          break;
        default:
          // Keep it: RabbitMQ clears the password of a PUT without one.
          body.password_hash = u.password_hash || '';
          if (u.hashing_algorithm) body.hashing_algorithm = u.hashing_algorithm;
      }
      await api(`/users/${enc(name)}`, {method: 'PUT', body});
      saved = name;
      return '';
    },
  });
  return ok ? saved : null;
}

function userPage(ctx, name) {
  page(ctx, 'users', `User ${name}`);
  if (!isAdmin()) { append(ctx, denied('Managing users')); return; }
  const upath = `/users/${enc(name)}`;
  const info = h('div', {class: 'details', id: 'user-info'}, h('p', {class: 'muted'}, 'Loading…'));
  let user = null;
  const update = h('button', {type: 'button', class: 'secondary', id: 'user-update', onclick: async () => {
    if (!user) return;
    if (await userDialog(user)) { notify(`User ${name} updated.`); refreshNow(ctx); }
  }}, 'Update user');
  const del = h('button', {type: 'button', class: 'danger', id: 'user-delete', onclick: () => confirmAction({
    title: 'Delete user', confirm: 'Delete', what: `Deleting user ${name}`, ok: `User ${name} deleted.`,
    text: ['Delete the user ', h('strong', null, name), '? Its permissions go with it; its open connections stay until they close.'],
  }, () => api(upath, {method: 'DELETE'}), () => { location.hash = '#/admin/users'; })}, 'Delete user');

  const perms = h('div', {id: 'user-perms'});
  const tperms = h('div', {id: 'user-tperms'});
  append(ctx, 
    h('div', {class: 'title-row'}, h('a', {href: '#/admin/users'}, '‹ All users'), h('span', {class: 'spacer'}), update, del),
    h('section', null, h('h2', null, 'Overview'), info),
    h('section', null, h('h2', null, 'Permissions'), perms, permissionForm(ctx, {user: name})),
    h('section', null, h('h2', null, 'Topic permissions'), tperms, topicPermissionForm(ctx, name)));

  poll(ctx, `Loading user ${name}`, async () => {
    let u;
    try {
      u = await api(upath);
    } catch (err) {
      if (err.status !== 404) throw err;
      info.replaceChildren(h('p', {class: 'error', id: 'user-missing'}, `There is no user ${name}.`));
      perms.replaceChildren();
      tperms.replaceChildren();
      update.disabled = del.disabled = true;
      return;
    }
    const [ps, tps] = await Promise.all([api(upath + '/permissions'), api(upath + '/topic-permissions')]);
    if (!ctx.live()) return;
    user = u;
    const lim = u.limits || {};
    info.replaceChildren(props([
      ['Tags', h('span', {id: 'user-tags'}, tagChips(u.tags))],
      ['Can log in with a password', h('span', {id: 'user-has-password'}, yes(Boolean(u.password_hash)))],
      ['Limits', Object.keys(lim).length ? Object.entries(lim).map(([k, v]) => `${k}: ${v}`).join(', ') : h('span', {class: 'muted'}, 'none')],
    ]));
    perms.replaceChildren(permissionsTable(ctx, 'user-perm-table', ps, 'vhost'));
    tperms.replaceChildren(topicPermissionsTable(ctx, 'user-tperm-table', tps, true));
  });
}

// permissionsTable lists permissions; by is the column that varies
// ('vhost' on a user's page, 'user' on a vhost's).
function permissionsTable(ctx, id, list, by) {
  const rows = items(list).sort((a, b) => String(a[by]).localeCompare(String(b[by]))).map(p => h('tr', {'data-vhost': p.vhost, 'data-user': p.user},
    h('td', {'data-col': by}, by === 'vhost' ? h('a', {href: vhostHref(p.vhost)}, p.vhost) : h('a', {href: userHref(p.user)}, p.user)),
    h('td', {'data-col': 'configure'}, code(p.configure)),
    h('td', {'data-col': 'write'}, code(p.write)),
    h('td', {'data-col': 'read'}, code(p.read)),
    h('td', {class: 'actions'}, h('button', {type: 'button', class: 'danger small clear-perm',
      'aria-label': `Clear the permissions of ${p.user} in ${p.vhost}`,
      onclick: () => confirmAction({
        title: 'Clear permissions', confirm: 'Clear', what: 'Clearing permissions', ok: `Permissions of ${p.user} in ${p.vhost} cleared.`,
        text: ['Clear the permissions of ', h('strong', null, p.user), ' in the virtual host ', h('strong', null, p.vhost), '?'],
      }, () => api(`/permissions/${enc(p.vhost)}/${enc(p.user)}`, {method: 'DELETE'}), () => refreshNow(ctx))}, 'Clear'))));
  return table(id, [[by === 'vhost' ? 'Virtual host' : 'User'], ['Configure regexp'], ['Write regexp'], ['Read regexp'], ['']],
    rows, 'No permissions.');
}

// permissionForm sets a user's permissions in a vhost; one of user or
// vhost is fixed by the page, the other is chosen.
function permissionForm(ctx, {user, vhost}) {
  const who = user
    ? namesSelect('perm-vhost', 'vhost', vhostNames)
    : namesSelect('perm-user', 'user', userNames);
  const rx = (id, label) => field(id, label, h('input', {name: id, value: '.*', autocomplete: 'off', spellcheck: 'false'}));
  const form = h('form', {class: 'panel form-panel', id: 'perm-form', onsubmit: async ev => {
    ev.preventDefault();
    const fd = new FormData(form);
    const vh = vhost ?? String(fd.get('vhost'));
    const u = user ?? String(fd.get('user'));
    await run(ctx, 'Setting permissions', () => api(`/permissions/${enc(vh)}/${enc(u)}`, {method: 'PUT', body: {
      configure: fd.get('perm-configure'), write: fd.get('perm-write'), read: fd.get('perm-read'),
    }}), `Permissions of ${u} in ${vh} set.`);
  }},
    h('h3', null, 'Set permission'),
    h('div', {class: 'form-grid'},
      field(user ? 'perm-vhost' : 'perm-user', user ? 'Virtual host' : 'User', who),
      rx('perm-configure', 'Configure regexp'), rx('perm-write', 'Write regexp'), rx('perm-read', 'Read regexp'),
      h('div', null, h('button', {type: 'submit', class: 'primary', id: 'perm-set'}, 'Set permission'))));
  return form;
}

// topicPermissionsTable lists topic permissions. RabbitMQ clears all of a
// user's topic permissions in a vhost at once; clearing one row puts the
// others of that vhost back.
function topicPermissionsTable(ctx, id, list, byVhost) {
  list = items(list);
  const rows = list.map(p => h('tr', {'data-vhost': p.vhost, 'data-user': p.user, 'data-exchange': p.exchange},
    h('td', {'data-col': byVhost ? 'vhost' : 'user'}, byVhost ? h('a', {href: vhostHref(p.vhost)}, p.vhost) : h('a', {href: userHref(p.user)}, p.user)),
    h('td', {'data-col': 'exchange'}, p.exchange === '' ? h('span', {class: 'muted'}, '(AMQP default)') : p.exchange),
    h('td', {'data-col': 'write'}, code(p.write)),
    h('td', {'data-col': 'read'}, code(p.read)),
    h('td', {class: 'actions'}, h('button', {type: 'button', class: 'danger small clear-tperm',
      'aria-label': `Clear the topic permission of ${p.user} on ${p.exchange} in ${p.vhost}`,
      onclick: () => confirmAction({
        title: 'Clear topic permission', confirm: 'Clear', what: 'Clearing the topic permission',
        ok: `Topic permission of ${p.user} on ${p.exchange} cleared.`,
        text: ['Clear the topic permission of ', h('strong', null, p.user), ' on the exchange ', h('strong', null, p.exchange),
          ' in ', h('strong', null, p.vhost), '?'],
      }, async () => {
        const keep = list.filter(o => o.vhost === p.vhost && o.user === p.user && o.exchange !== p.exchange);
        const path = `/topic-permissions/${enc(p.vhost)}/${enc(p.user)}`;
        await api(path, {method: 'DELETE'});
        for (const o of keep) await api(path, {method: 'PUT', body: {exchange: o.exchange, write: o.write, read: o.read}});
      }, () => refreshNow(ctx))}, 'Clear'))));
  return table(id, [[byVhost ? 'Virtual host' : 'User'], ['Exchange'], ['Write regexp'], ['Read regexp'], ['']],
    rows, 'No topic permissions.');
}

function topicPermissionForm(ctx, user) {
  const vh = namesSelect('tperm-vhost', 'vhost', vhostNames);
  const exchanges = h('datalist', {id: 'tperm-exchanges'});
  const loadExchanges = () => api(`/exchanges/${enc(vh.value || '/')}?columns=name,type`).then(xs => {
    exchanges.replaceChildren(...items(xs).filter(x => x.type === 'topic').map(x => h('option', {value: x.name})));
  }).catch(() => {});
  vh.addEventListener('change', loadExchanges);
  vh.loaded.then(loadExchanges);
  const rx = (id, label) => field(id, label, h('input', {name: id, value: '.*', autocomplete: 'off', spellcheck: 'false'}));
  const form = h('form', {class: 'panel form-panel', id: 'tperm-form', onsubmit: async ev => {
    ev.preventDefault();
    const fd = new FormData(form);
    const v = String(fd.get('vhost'));
    const x = String(fd.get('exchange') || '');
    await run(ctx, 'Setting the topic permission', () => api(`/topic-permissions/${enc(v)}/${enc(user)}`, {method: 'PUT', body: {
      exchange: x, write: fd.get('tperm-write'), read: fd.get('tperm-read'),
    }}), `Topic permission of ${user} on ${x} in ${v} set.`);
  }},
    h('h3', null, 'Set topic permission'),
    h('div', {class: 'form-grid'},
      field('tperm-vhost', 'Virtual host', vh),
      field('tperm-exchange', 'Exchange', h('input', {name: 'exchange', list: 'tperm-exchanges', value: 'amq.topic', autocomplete: 'off'})),
      exchanges,
      rx('tperm-write', 'Write regexp'), rx('tperm-read', 'Read regexp'),
      h('div', null, h('button', {type: 'submit', class: 'primary', id: 'tperm-set'}, 'Set topic permission'))));
  return form;
}

// ---- Virtual hosts ----------------------------------------------------------

const vhostsView = newView();

const VHOST_COLUMNS = [
  {label: 'Name', sort: 'name', cell: v => h('a', {href: vhostHref(v.name)}, v.name), col: 'name'},
  {label: 'Description', sort: 'description', cell: v => v.description || h('span', {class: 'muted'}, '—'), col: 'description'},
  {label: 'Tags', sort: 'tags', cell: v => tagChips(v.tags), col: 'tags'},
  {label: 'Default queue type', sort: 'default_queue_type', cell: v => queueTypeText(v.default_queue_type), col: 'dqt'},
  {label: 'Messages', sort: 'messages', cell: v => num(v.messages), num: true, col: 'messages'},
  {label: 'Ready', sort: 'messages_ready', cell: v => num(v.messages_ready), num: true, col: 'ready'},
  {label: 'Unacked', sort: 'messages_unacknowledged', cell: v => num(v.messages_unacknowledged), num: true, col: 'unacked'},
  {label: 'Publish', sort: 'message_stats.publish_details.rate', cell: v => rateText(rateOf(v, 'publish')), num: true, col: 'publish'},
  {label: 'Deliver / get', sort: 'message_stats.deliver_get_details.rate', cell: v => rateText(rateOf(v, 'deliver_get')), num: true, col: 'deliver'},
];

const queueTypeText = t => (!t || t === 'undefined' ? h('span', {class: 'muted'}, 'server default') : t);

function vhostsPage(ctx) {
  page(ctx, 'vhosts');
  const add = isAdmin() ? h('button', {type: 'button', class: 'primary', id: 'add-vhost', onclick: async () => {
    const name = await vhostDialog();
    if (name) refreshNow(ctx);
  }}, 'Add virtual host') : null;
  append(ctx, 
    h('div', {class: 'title-row'}, h('h2', null, 'Virtual hosts'), h('span', {class: 'spacer'}), add),
    isAdmin() ? null : denied('Adding and deleting virtual hosts', 'administrator'),
    listView(ctx, {id: 'vhosts', path: '/vhosts', columns: VHOST_COLUMNS, view: vhostsView, noun: 'virtual host',
      row: v => ({'data-name': v.name})}));
}

async function vhostDialog() {
  let saved = '';
  const ok = await ask({
    title: 'Add a virtual host', confirm: 'Add virtual host',
    body: [
      field('vh-name', 'Name', h('input', {name: 'name', required: true, autocomplete: 'off'})),
      field('vh-description', 'Description', h('input', {name: 'description', autocomplete: 'off'})),
      field('vh-tags', 'Tags', h('input', {name: 'tags', autocomplete: 'off'}), 'Comma-separated.'),
      field('vh-dqt', 'Default queue type', h('select', {name: 'default_queue_type'},
        h('option', {value: ''}, 'Server default'), ['classic', 'quorum', 'stream'].map(t => h('option', {value: t}, t))),
      'The type of queues declared without x-queue-type.'),
    ],
    check: async fd => {
      const name = String(fd.get('name') || '').trim();
      if (!name) return 'Enter a name.';
      const body = {description: String(fd.get('description') || ''), tags: tagList(fd.get('tags')).join(',')};
      const dqt = String(fd.get('default_queue_type') || '');
      if (dqt) body.default_queue_type = dqt;
      await api(`/vhosts/${enc(name)}`, {method: 'PUT', body});
      saved = name;
      return '';
    },
  });
  if (!ok) return null;
  // Not every server keeps a default queue type: say so if it did not.
  const dqt = ok.get('default_queue_type');
  let note = '';
  if (dqt) {
    try {
      const v = await api(`/vhosts/${enc(saved)}`);
      if (v.default_queue_type !== dqt) note = ` The server did not keep the default queue type ${dqt} (it reports ${v.default_queue_type || 'none'}).`;
    } catch { /* the list shows it */ }
  }
  notify(`Virtual host ${saved} added.` + note);
  return saved;
}

// VHOST_LIMITS and USER_LIMITS are RabbitMQ's limits.
const VHOST_LIMITS = ['max-connections', 'max-queues'];
const USER_LIMITS = ['max-connections', 'max-channels'];

function vhostPage(ctx, name) {
  page(ctx, 'vhosts', `Virtual host ${name}`);
  const vpath = `/vhosts/${enc(name)}`;
  const info = h('div', {class: 'details', id: 'vhost-info'}, h('p', {class: 'muted'}, 'Loading…'));
  const del = isAdmin() ? h('button', {type: 'button', class: 'danger', id: 'vhost-delete', onclick: () => confirmAction({
    title: 'Delete virtual host', confirm: 'Delete', what: `Deleting virtual host ${name}`, ok: `Virtual host ${name} deleted.`,
    text: ['Delete the virtual host ', h('strong', null, name),
      '? Its queues with their messages, exchanges, bindings, policies and permissions are deleted, and its connections closed. This cannot be undone.'],
  }, () => api(vpath, {method: 'DELETE'}), () => { location.hash = '#/admin/vhosts'; })}, 'Delete virtual host') : null;
  const perms = h('div', {id: 'vhost-perms'});
  const tperms = h('div', {id: 'vhost-tperms'});
  const limits = h('div', {id: 'vhost-limits'});
  append(ctx, 
    h('div', {class: 'title-row'}, h('a', {href: '#/admin/vhosts'}, '‹ All virtual hosts'), h('span', {class: 'spacer'}), del),
    h('section', null, h('h2', null, 'Overview'), info),
    h('section', null, h('h2', null, 'Permissions'), perms, isAdmin() ? permissionForm(ctx, {vhost: name}) : null),
    h('section', null, h('h2', null, 'Topic permissions'), tperms),
    h('section', null, h('h2', null, 'Limits'), limits, isAdmin() ? limitForm(ctx, 'vhost', VHOST_LIMITS, name) : null));
  if (!isAdmin()) {
    perms.append(denied('Seeing and setting permissions', 'administrator'));
    tperms.append(h('p', {class: 'muted'}, 'Needs the administrator tag.'));
  }

  poll(ctx, `Loading virtual host ${name}`, async () => {
    let v;
    try {
      v = await api(vpath);
    } catch (err) {
      if (err.status !== 404) throw err;
      info.replaceChildren(h('p', {class: 'error', id: 'vhost-missing'}, `There is no virtual host ${name}.`));
      if (del) del.disabled = true;
      return;
    }
    const [ps, tps, lim] = await Promise.all([
      isAdmin() ? api(vpath + '/permissions') : null,
      isAdmin() ? api(vpath + '/topic-permissions') : null,
      api(`/vhost-limits/${enc(name)}`),
    ]);
    if (!ctx.live()) return;
    const states = Object.entries(v.cluster_state || {});
    info.replaceChildren(props([
      ['Description', v.description || h('span', {class: 'muted'}, '—')],
      ['Tags', tagChips(v.tags)],
      ['Default queue type', queueTypeText(v.default_queue_type)],
      ['Messages', h('span', {id: 'vhost-messages'}, num(v.messages))],
      ['Ready', num(v.messages_ready)],
      ['Unacked', num(v.messages_unacknowledged)],
      ['Publish', rateText(rateOf(v, 'publish'))],
      ['Deliver / get', rateText(rateOf(v, 'deliver_get'))],
      ['State', states.length ? states.map(([n, s]) => badge(`${n}: ${s}`, s === 'running' ? 'ok' : 'danger')) : '—'],
    ]));
    if (ps) perms.replaceChildren(permissionsTable(ctx, 'vhost-perm-table', ps, 'user'));
    if (tps) tperms.replaceChildren(topicPermissionsTable(ctx, 'vhost-tperm-table', tps, false));
    limits.replaceChildren(limitsTable(ctx, 'vhost-limit-table', 'vhost', VHOST_LIMITS, items(lim)));
  });
}

// ---- Limits -----------------------------------------------------------------

// limitsTable shows entries of /api/vhost-limits or /api/user-limits
// ({vhost|user, value: {limit: n}}) as one row per object.
function limitsTable(ctx, id, kind, names, list) {
  const base = kind === 'vhost' ? '/vhost-limits/' : '/user-limits/';
  const rows = list.map(e => {
    const who = e[kind];
    const val = e.value || {};
    const extra = Object.keys(val).filter(k => !names.includes(k));
    return h('tr', {[`data-${kind}`]: who},
      h('td', {'data-col': kind}, h('a', {href: kind === 'vhost' ? vhostHref(who) : userHref(who)}, who)),
      [...names, ...extra].map(k => h('td', {class: 'num', 'data-col': k}, val[k] == null ? h('span', {class: 'muted'}, '—') :
        [String(val[k]), ' ', isAdmin() ? h('button', {type: 'button', class: 'secondary small clear-limit', 'data-limit': k,
          'aria-label': `Clear ${k} of ${who}`,
          onclick: () => confirmAction({
            title: 'Clear limit', confirm: 'Clear', danger: false, what: `Clearing ${k}`, ok: `${k} of ${who} cleared.`,
            text: ['Clear the limit ', h('strong', null, k), ' of ', h('strong', null, who), '?'],
          }, () => api(base + enc(who) + '/' + enc(k), {method: 'DELETE'}), () => refreshNow(ctx))}, 'Clear') : null])));
  });
  const cols = [[kind === 'vhost' ? 'Virtual host' : 'User'], ...names.map(n => [n, true])];
  const extraCols = [...new Set(list.flatMap(e => Object.keys(e.value || {}).filter(k => !names.includes(k))))];
  return table(id, [...cols, ...extraCols.map(n => [n, true])], rows, `No ${kind} limits.`);
}

// limitForm sets a limit; who fixes the vhost or user, or a select offers
// them all.
function limitForm(ctx, kind, names, who) {
  const p = kind + '-limit';
  const target = who ? null : namesSelect(p + '-target', 'target', kind === 'vhost' ? vhostNames : userNames);
  const form = h('form', {class: 'panel form-panel', id: p + '-form', onsubmit: async ev => {
    ev.preventDefault();
    const fd = new FormData(form);
    const t = who ?? String(fd.get('target'));
    const name = String(fd.get('limit'));
    const raw = String(fd.get('value')).trim();
    const n = Number(raw);
    if (raw === '' || !Number.isInteger(n)) { showError(new Error('the value must be a whole number (negative: no limit)'), `Setting ${name}`); return; }
    await run(ctx, `Setting ${name}`, () => api(`/${kind}-limits/${enc(t)}/${enc(name)}`, {method: 'PUT', body: {value: n}}),
      `${name} of ${t} set to ${n}.`);
  }},
    h('h3', null, kind === 'vhost' ? 'Set a virtual host limit' : 'Set a user limit'),
    h('div', {class: 'form-grid'},
      target ? field(p + '-target', kind === 'vhost' ? 'Virtual host' : 'User', target) : null,
      field(p + '-name', 'Limit', h('select', {name: 'limit'}, names.map(n => h('option', {value: n}, n)))),
      field(p + '-value', 'Value', h('input', {name: 'value', type: 'number', step: 1, required: true, inputmode: 'numeric'}),
        'Negative: no limit; 0 refuses all.'),
      h('div', null, h('button', {type: 'submit', class: 'primary', id: p + '-set'}, 'Set limit'))));
  return form;
}

function limitsPage(ctx) {
  page(ctx, 'limits');
  const vl = h('div', {id: 'vhost-limits'});
  const ul = h('div', {id: 'user-limits'});
  append(ctx, 
    isAdmin() ? null : denied('Setting limits', 'administrator'),
    h('section', null, h('h2', null, 'Virtual host limits'),
      h('p', {class: 'muted'}, 'The most connections and queues a virtual host may have.'),
      vl, isAdmin() ? limitForm(ctx, 'vhost', VHOST_LIMITS) : null),
    h('section', null, h('h2', null, 'User limits'),
      h('p', {class: 'muted'}, 'The most connections and channels a user may open.'),
      ul, isAdmin() ? limitForm(ctx, 'user', USER_LIMITS) : null));
  poll(ctx, 'Loading limits', async () => {
    const [v, u] = await Promise.all([api('/vhost-limits'), api('/user-limits')]);
    if (!ctx.live()) return;
    vl.replaceChildren(limitsTable(ctx, 'vhost-limit-table', 'vhost', VHOST_LIMITS, items(v)));
    ul.replaceChildren(limitsTable(ctx, 'user-limit-table', 'user', USER_LIMITS, items(u)));
  });
}

// ---- Shovels ----------------------------------------------------------------

// shovelsPage is RabbitMQ's "Shovel Status": every shovel of the cluster,
// the node running it and its state; its ends (without credentials) while
// it runs, the reason once it terminated. A policymaker may delete one.
function shovelsPage(ctx) {
  page(ctx, 'shovels');
  const list = h('div', {id: 'shovels'});
  append(ctx, h('section', null, h('h2', null, 'Shovel status'),
    h('p', {class: 'muted'}, 'Dynamic shovels move messages between queues and exchanges of this broker and others. ' +
      'Define one with PUT /api/parameters/shovel/{vhost}/{name}.'), list));
  poll(ctx, 'Loading shovels', async () => {
    const rows = items(await api('/shovels'));
    if (!ctx.live()) return;
    const end = (uri, q, x) => uri ? [h('code', null, uri), ' ', q ? `queue ${q}` : `exchange ${x || '(the message\'s)'}`] : '';
    list.replaceChildren(table('shovel-table',
      [['Name'], ['Virtual host'], ['Node'], ['State'], ['Source'], ['Destination'], ['Forwarded', true], ['']],
      rows.map(s => h('tr', {'data-name': s.name, 'data-vhost': s.vhost},
        h('td', null, s.name), h('td', null, s.vhost), h('td', null, s.node),
        h('td', null, badge(s.state, s.state === 'running' ? 'ok' : s.state === 'terminated' ? 'warn' : ''),
          s.reason ? h('div', {class: 'muted'}, s.reason) : null),
        h('td', null, end(s.src_uri, s.src_queue, s.src_exchange)),
        h('td', null, end(s.dest_uri, s.dest_queue, s.dest_exchange)),
        h('td', {class: 'num'}, num(s.forwarded || 0)),
        h('td', null, isPolicymaker() ? h('button', {type: 'button', class: 'danger small shovel-delete', onclick: () => confirmAction({
          title: `Delete shovel ${s.name}?`, confirm: 'Delete',
          text: 'Its parameter goes; what it has not settled returns to its source.', ok: `Shovel ${s.name} deleted.`,
        }, () => api(`/parameters/shovel/${enc(s.vhost)}/${enc(s.name)}`, {method: 'DELETE'}), () => refreshNow(ctx))}, 'Delete') : null))),
      'No shovels.'));
  });
}

// federationPage is RabbitMQ's "Federation Status": every link of the
// cluster (a federated exchange and one of its upstreams), the node
// running it, its status, the upstream's URI without credentials, and the
// error of a failed one. Upstreams and the policies naming them are
// defined over the API (federation-upstream parameters, policies).
function federationPage(ctx) {
  page(ctx, 'federation');
  const list = h('div', {id: 'federation'});
  append(ctx, h('section', null, h('h2', null, 'Federation status'),
    h('p', {class: 'muted'}, 'A link runs for each federated exchange and each of its upstreams: ' +
      'PUT /api/parameters/federation-upstream/{vhost}/{name}, and a policy with federation-upstream-set.'), list));
  poll(ctx, 'Loading federation links', async () => {
    const rows = items(await api('/federation-links'));
    if (!ctx.live()) return;
    list.replaceChildren(table('federation-table',
      [['Exchange'], ['Virtual host'], ['Upstream'], ['Node'], ['Status'], ['URI']],
      rows.map(l => h('tr', {'data-exchange': l.exchange || l.queue, 'data-upstream': l.upstream},
        h('td', null, l.exchange || l.queue), h('td', null, l.vhost), h('td', null, l.upstream), h('td', null, l.node),
        h('td', null, badge(l.status, l.status === 'running' ? 'ok' : l.status === 'error' ? 'warn' : ''),
          l.error ? h('div', {class: 'muted'}, l.error) : null),
        h('td', null, l.uri ? h('code', null, l.uri) : ''))),
      'No federation links.'));
  });
}

// ---- Policies ---------------------------------------------------------------

// POLICY_KEYS are the definition keys offered, with their value type.
const POLICY_KEYS = [
  ['max-length', 'number'], ['max-length-bytes', 'number'], ['overflow', 'string'], ['message-ttl', 'number'],
  ['expires', 'number'], ['dead-letter-exchange', 'string'], ['dead-letter-routing-key', 'string'],
  ['dead-letter-strategy', 'string'], ['delivery-limit', 'number'], ['alternate-exchange', 'string'],
  ['consumer-timeout', 'number'], ['queue-mode', 'string'], ['queue-version', 'number'], ['queue-leader-locator', 'string'],
  ['initial-cluster-size', 'number'], ['max-age', 'string'], ['stream-max-segment-size-bytes', 'number'],
  ['max-in-memory-length', 'number'], ['max-in-memory-bytes', 'number'], ['ha-mode', 'string'], ['ha-params', 'number'],
  ['ha-sync-mode', 'string'], ['federation-upstream-set', 'string'],
];
const KEY_TYPE = new Map(POLICY_KEYS);
const VALUE_TYPES = [['number', 'Number'], ['string', 'String'], ['boolean', 'Boolean'], ['list', 'List']];
const APPLY_TO = [['all', 'Exchanges and queues'], ['queues', 'Queues (all types)'], ['classic_queues', 'Classic queues'],
  ['quorum_queues', 'Quorum queues'], ['streams', 'Streams'], ['exchanges', 'Exchanges']];

const typeOf = v => (typeof v === 'number' ? 'number' : typeof v === 'boolean' ? 'boolean' : Array.isArray(v) ? 'list' : 'string');
const valueInput = v => (Array.isArray(v) ? v.join(', ') : typeof v === 'object' && v !== null ? JSON.stringify(v) : String(v ?? ''));

// parseValue turns a definition row into its JSON value, or throws.
function parseValue(key, type, text) {
  const s = text.trim();
  switch (type) {
    case 'number': {
      const n = Number(s);
      if (s === '' || !Number.isFinite(n)) throw new Error(`${key}: "${text}" is not a number`);
      return n;
    }
    case 'boolean':
      if (!/^(true|false)$/i.test(s)) throw new Error(`${key}: enter true or false`);
      return s.toLowerCase() === 'true';
    case 'list':
      return s === '' ? [] : s.split(',').map(x => x.trim());
    default:
      return text;
  }
}

const definitionText = def => {
  const entries = Object.entries(def || {}).sort(([a], [b]) => a.localeCompare(b));
  return entries.length ? h('ul', {class: 'chips'}, entries.map(([k, v]) => h('li', {'data-key': k}, `${k}: ${valueText(v)}`)))
    : h('span', {class: 'muted'}, 'empty');
};

const policiesView = newView();
const opPoliciesView = newView();

function policiesPage(ctx) {
  page(ctx, 'policies');
  append(ctx, 
    h('p', {class: 'muted'}, 'Policies set queue and exchange arguments by name pattern; operator policies cap what users\' policies and arguments may set.'));
  policySection(ctx, false);
  policySection(ctx, true);
}

function policySection(ctx, op) {
  const kind = op ? 'operator-policies' : 'policies';
  const id = op ? 'op-policies' : 'policies';
  const may = op ? isAdmin() : isPolicymaker();
  const add = may ? h('button', {type: 'button', class: 'primary', id: `add-${id}`,
    onclick: () => policyDialog(ctx, op, null)}, op ? 'Add operator policy' : 'Add policy') : null;
  const cols = [
    {label: 'Virtual host', sort: 'vhost', cell: p => p.vhost, col: 'vhost'},
    {label: 'Name', sort: 'name', cell: p => h('strong', null, p.name), col: 'name'},
    {label: 'Pattern', sort: 'pattern', cell: p => code(p.pattern), col: 'pattern'},
    {label: 'Apply to', sort: 'apply-to', cell: p => p['apply-to'], col: 'apply-to'},
    {label: 'Definition', cell: p => definitionText(p.definition), col: 'definition'},
    {label: 'Priority', sort: 'priority', cell: p => num(p.priority), num: true, col: 'priority'},
  ];
  if (may) {
    cols.push({label: '', cell: p => h('span', {class: 'actions'},
      h('button', {type: 'button', class: 'secondary small edit', 'aria-label': `Edit ${p.name} in ${p.vhost}`,
        onclick: () => policyDialog(ctx, op, p)}, 'Edit'),
      h('button', {type: 'button', class: 'danger small delete', 'aria-label': `Delete ${p.name} in ${p.vhost}`,
        onclick: () => confirmAction({
          title: op ? 'Delete operator policy' : 'Delete policy', confirm: 'Delete', what: `Deleting ${p.name}`, ok: `Policy ${p.name} deleted.`,
          text: ['Delete the ', op ? 'operator policy ' : 'policy ', h('strong', null, p.name), ` in ${p.vhost}?`],
        }, () => api(`/${kind}/${enc(p.vhost)}/${enc(p.name)}`, {method: 'DELETE'}), () => refreshNow(ctx))}, 'Delete'))});
  }
  // The list is of every vhost, or of the one chosen.
  const vhostFilter = namesSelect(id + '-vhost', 'vhost', vhostNames, ['', 'All virtual hosts']);
  vhostFilter.setAttribute('aria-label', 'Virtual host');
  const view = op ? opPoliciesView : policiesView;
  vhostFilter.loaded.then(() => { vhostFilter.value = view.vhost || ''; });
  vhostFilter.addEventListener('change', () => { view.vhost = vhostFilter.value; view.page = 1; refreshNow(ctx); });
  append(ctx, h('section', {id: id + '-section'},
    h('div', {class: 'title-row'}, h('h2', null, op ? 'Operator policies' : 'User policies'), h('span', {class: 'spacer'}), add),
    may ? null : denied(op ? 'Changing operator policies' : 'Changing policies', op ? 'administrator' : 'policymaker or administrator'),
    listView(ctx, {id, path: () => '/' + kind + (view.vhost ? '/' + enc(view.vhost) : ''), columns: cols,
      view, noun: op ? 'operator policy' : 'policy', toolbar: vhostFilter,
      row: p => ({'data-vhost': p.vhost, 'data-name': p.name})})));
}

// policyDialog adds (p null) or updates a policy, with the definition as
// key, value and type rows.
async function policyDialog(ctx, op, p) {
  const kind = op ? 'operator-policies' : 'policies';
  const rows = h('div', {id: 'pol-defs', class: 'dialog-body'});
  let n = 0;
  const addRow = (key = '', value = '', type = 'string') => {
    const i = n++;
    const k = h('input', {name: 'def-key', class: 'def-key', value: key, list: 'pol-keys', autocomplete: 'off',
      'aria-label': `Definition key ${i + 1}`});
    const t = h('select', {name: 'def-type', class: 'def-type', 'aria-label': `Value type ${i + 1}`},
      VALUE_TYPES.map(([v, label]) => h('option', {value: v, selected: v === type}, label)));
    const v = h('input', {name: 'def-value', class: 'def-value', value, autocomplete: 'off', 'aria-label': `Value ${i + 1}`});
    k.addEventListener('change', () => { if (KEY_TYPE.has(k.value.trim())) t.value = KEY_TYPE.get(k.value.trim()); });
    const row = h('div', {class: 'toolbar def-row', 'data-row': i}, k, h('span', null, '='), v, t,
      h('button', {type: 'button', class: 'secondary small', 'aria-label': `Remove row ${i + 1}`, onclick: () => row.remove()}, 'Remove'));
    rows.append(row);
    return k;
  };
  const def = p ? p.definition || {} : {};
  for (const [k, v] of Object.entries(def)) addRow(k, valueInput(v), typeOf(v));
  addRow();
  const vhost = p ? h('input', {name: 'vhost', value: p.vhost, readonly: true}) : namesSelect('pol-vhost', 'vhost', vhostNames);
  let saved = '';
  const ok = await ask({
    title: p ? `Update ${op ? 'operator policy' : 'policy'} ${p.name}` : op ? 'Add an operator policy' : 'Add a policy',
    confirm: p ? 'Update policy' : 'Add policy', wide: true,
    body: [
      h('div', {class: 'form-grid'},
        field('pol-vhost', 'Virtual host', vhost),
        field('pol-name', 'Name', h('input', {name: 'name', required: true, value: p ? p.name : '', readonly: Boolean(p), autocomplete: 'off'})),
        field('pol-pattern', 'Pattern', h('input', {name: 'pattern', required: true, value: p ? p.pattern : '', autocomplete: 'off', spellcheck: 'false'}),
          'A regular expression on names, e.g. ^orders\\.'),
        field('pol-apply', 'Apply to', h('select', {name: 'apply-to'}, APPLY_TO.map(([v, label]) =>
          h('option', {value: v, selected: p ? p['apply-to'] === v : v === 'all'}, label)))),
        field('pol-priority', 'Priority', h('input', {name: 'priority', type: 'number', step: 1, value: p ? p.priority : 0}))),
      h('h3', null, 'Definition'),
      h('datalist', {id: 'pol-keys'}, POLICY_KEYS.map(([k]) => h('option', {value: k}))),
      rows,
      h('div', null, h('button', {type: 'button', class: 'secondary small', id: 'pol-add-row', onclick: () => addRow().focus()}, 'Add a row')),
    ],
    check: async fd => {
      const name = String(fd.get('name') || '').trim();
      if (!name) return 'Enter a name.';
      const keys = fd.getAll('def-key');
      const values = fd.getAll('def-value');
      const types = fd.getAll('def-type');
      const definition = {};
      for (let i = 0; i < keys.length; i++) {
        const k = String(keys[i]).trim();
        if (!k) continue;
        definition[k] = parseValue(k, String(types[i]), String(values[i]));
      }
      if (!Object.keys(definition).length) return 'Add at least one definition key.';
      const prio = String(fd.get('priority') || '0').trim();
      const vh = String(fd.get('vhost'));
      try {
        await api(`/${kind}/${enc(vh)}/${enc(name)}`, {method: 'PUT', body: {
          pattern: String(fd.get('pattern')), 'apply-to': String(fd.get('apply-to')),
          priority: prio === '' ? 0 : Number(prio), definition,
        }});
      } catch (err) {
        return reasonText(err);
      }
      saved = `${name} (vhost ${vh})`;
      return '';
    },
  });
  if (ok) {
    notify(`${op ? 'Operator policy' : 'Policy'} ${saved} ${p ? 'updated' : 'added'}.`);
    refreshNow(ctx);
  }
}

// ---- Definitions ------------------------------------------------------------

function definitionsPage(ctx) {
  page(ctx, 'definitions');
  if (!isAdmin()) { append(ctx, denied('Exporting and importing definitions')); return; }
  const all = ['', 'All (the whole broker)'];
  const exportVh = namesSelect('defs-export-vhost', 'vhost', vhostNames, all);
  const importVh = namesSelect('defs-import-vhost', 'vhost', vhostNames, all);
  const filename = h('input', {name: 'filename', value: defaultFilename(''), autocomplete: 'off'});
  let touched = false;
  filename.addEventListener('input', () => { touched = true; });
  exportVh.addEventListener('change', () => { if (!touched) filename.value = defaultFilename(exportVh.value); });
  const exportResult = h('div', {id: 'defs-export-result', role: 'status'});
  const importResult = h('div', {id: 'defs-result', role: 'status', 'aria-live': 'polite'});
  const file = h('input', {type: 'file', name: 'file', accept: '.json,application/json', required: true});

  const exportForm = h('form', {class: 'panel form-panel', id: 'defs-export', onsubmit: async ev => {
    ev.preventDefault();
    const vh = exportVh.value;
    try {
      const text = await api(vh ? `/definitions/${enc(vh)}` : '/definitions', {raw: true});
      download(filename.value.trim() || defaultFilename(vh), text);
      exportResult.replaceChildren(h('p', {class: 'result ok'},
        `Downloaded the definitions of ${vh ? 'the virtual host ' + vh : 'the whole broker'} (${num(text.length)} bytes).`));
    } catch (err) {
      exportResult.replaceChildren(h('p', {class: 'result warn', role: 'alert'}, 'Export failed: ' + errText(err)));
    }
  }},
    h('h3', null, 'Export definitions'),
    h('p', {class: 'muted'}, 'Users, virtual hosts, permissions, policies, limits, queues, exchanges and bindings as JSON. ' +
      'For one virtual host: its policies, queues, exchanges and bindings only.'),
    h('div', {class: 'form-grid'},
      field('defs-export-vhost', 'Virtual host', exportVh),
      field('defs-filename', 'File name', filename),
      h('div', null, h('button', {type: 'submit', class: 'primary', id: 'defs-download'}, 'Download definitions'))),
    exportResult);

  const importForm = h('form', {class: 'panel form-panel', id: 'defs-import', onsubmit: async ev => {
    ev.preventDefault();
    const f = file.files && file.files[0];
    if (!f) { importResult.replaceChildren(h('p', {class: 'result warn', role: 'alert'}, 'Choose a definitions file first.')); return; }
    const vh = importVh.value;
    const btn = importForm.querySelector('button[type=submit]');
    btn.disabled = true;
    try {
      const text = await readFile(f);
      await api(vh ? `/definitions/${enc(vh)}` : '/definitions', {method: 'POST', body: text});
      importResult.replaceChildren(h('p', {class: 'result ok'},
        `Imported ${f.name} into ${vh ? 'the virtual host ' + vh : 'the broker'}.`));
      notify(`Definitions imported from ${f.name}.`);
    } catch (err) {
      importResult.replaceChildren(h('p', {class: 'result warn', role: 'alert'}, `Import of ${f.name} refused: ` + errText(err)));
    } finally {
      btn.disabled = false;
    }
  }},
    h('h3', null, 'Import definitions'),
    h('p', {class: 'muted'}, 'A file exported from Warren or RabbitMQ. Objects in it are created or updated; nothing is deleted.'),
    h('div', {class: 'form-grid'},
      field('defs-file', 'Definitions file', file),
      field('defs-import-vhost', 'Into', importVh, 'One virtual host: the file\'s vhost names are ignored.'),
      h('div', null, h('button', {type: 'submit', class: 'primary', id: 'defs-upload'}, 'Upload definitions'))),
    importResult);

  append(ctx, exportForm, importForm);
}

function defaultFilename(vhost) {
  const day = new Date().toISOString().slice(0, 10);
  const host = (location.hostname || 'warren').replace(/[^\w.-]+/g, '_');
  const scope = vhost ? '_' + vhost.replace(/[^\w.-]+/g, '_') : '';
  return `warren_${host}${scope}_${day}.json`;
}

// download saves text as a file through a Blob URL and <a download>.
function download(name, text) {
  const url = URL.createObjectURL(new Blob([text], {type: 'application/json'}));
  const a = h('a', {href: url, download: name, hidden: true});
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}

function readFile(f) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(String(r.result));
    r.onerror = () => reject(new Error(`cannot read ${f.name}: ${r.error && r.error.message}`));
    r.readAsText(f);
  });
}
