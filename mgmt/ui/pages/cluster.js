// The cluster: its nodes (state, the metadata leader, memory, disk,
// descriptors, alarms), membership changes, and the quorum queues with
// their leader and members, where leadership can be moved and replicas
// added or removed.

import {
  api, ask, badge, card, confirmAction, enc, errText, field, h, hasTag, items, notify, num, poll, queueHref, refreshNow,
} from '../core.js';
import {nodesTable} from './overview.js';

export const routes = [[/^#\/cluster\/?$/, 'cluster', clusterPage]];

const QQ_PAGE = 50;

function clusterPage(ctx) {
  const summary = h('div', {class: 'cards', id: 'cl-summary'});
  const nodes = h('div', {id: 'cl-nodes'});
  const members = h('div', {id: 'cl-members'});
  const qqs = h('div', {id: 'cl-qqs'});
  const admin = hasTag('administrator');
  const addMember = h('button', {type: 'button', class: 'secondary small', id: 'cl-add-member', onclick: () => addMemberDialog(ctx)}, 'Add a member');
  ctx.main.append(
    h('h1', null, 'Cluster'),
    summary,
    h('section', null, h('h2', null, 'Nodes'), nodes),
    admin ? h('section', null, h('div', {class: 'title-row'}, h('h2', null, 'Members'), h('span', {class: 'spacer'}), addMember), members) : null,
    h('section', null, h('h2', null, 'Quorum queues'),
      h('p', {class: 'muted'}, 'Each quorum queue is its own Raft group: one leader, a majority of members to commit.'), qqs));

  const view = {page: 1};
  poll(ctx, 'Loading the cluster', async () => {
    const wantNodes = hasTag('monitoring', 'administrator');
    const [st, ns, qs] = await Promise.all([
      admin ? api('/cluster-status').catch(e => e) : Promise.resolve(null),
      wantNodes ? api('/nodes').catch(e => e) : Promise.resolve(null),
      api('/queues?columns=name,vhost,type,leader,members,online,messages,consumers,state'),
    ]);
    if (!ctx.live()) return;
    const nodeList = ns && !(ns instanceof Error) ? items(ns) : [];
    if (!wantNodes) nodes.replaceChildren(h('p', {class: 'muted'}, 'Node details need the monitoring or administrator tag.'));
    else if (ns instanceof Error) nodes.replaceChildren(h('p', {class: 'error'}, 'Node details unavailable: ' + errText(ns)));
    else nodes.replaceChildren(nodesTable(nodeList));

    const quorum = items(qs).filter(q => q.type === 'quorum');
    const running = nodeList.filter(n => n.running !== false).length;
    const leaderless = quorum.filter(q => !q.leader).length;
    summary.replaceChildren(
      card('Cluster', st && !(st instanceof Error) ? st.cluster_name : (nodeList[0] || {}).cluster_name || '—'),
      card('Nodes running', nodeList.length ? `${running} of ${nodeList.length}` : '—', null, running < nodeList.length ? 'warn' : ''),
      card('Metadata leader', st && !(st instanceof Error) ? st.leader || '—' : (nodeList.find(n => n.leader) || {}).name || '—'),
      card('Quorum queues', num(quorum.length)),
      card('Without a leader', num(leaderless), null, leaderless ? 'warn' : ''));

    if (admin) {
      if (st instanceof Error) members.replaceChildren(h('p', {class: 'error'}, 'Cluster status unavailable: ' + errText(st)));
      else members.replaceChildren(membersTable(ctx, st));
    }
    const pages = Math.max(1, Math.ceil(quorum.length / QQ_PAGE));
    view.page = Math.min(view.page, pages);
    const shown = quorum.slice((view.page - 1) * QQ_PAGE, view.page * QQ_PAGE);
    const nodeNames = nodeList.map(n => n.name);
    qqs.replaceChildren(...[
      quorumTable(ctx, shown, nodeNames, admin),
      pages > 1 ? h('div', {class: 'pager'},
        h('span', null, `page ${view.page} of ${pages}`),
        h('button', {type: 'button', class: 'secondary small', disabled: view.page <= 1, onclick: () => { view.page--; refreshNow(ctx); }}, 'Previous'),
        h('button', {type: 'button', class: 'secondary small', disabled: view.page >= pages, onclick: () => { view.page++; refreshNow(ctx); }}, 'Next')) : null].filter(Boolean));
  });
}

function membersTable(ctx, st) {
  const list = (st && st.members) || [];
  if (!list.length) return h('p', {class: 'muted'}, 'No members.');
  return h('div', {class: 'table-wrap'}, h('table', {class: 'grid', id: 'cl-members-table'},
    h('thead', null, h('tr', null, ['Member', 'Address', 'State', 'Role', 'Actions'].map(c => h('th', {scope: 'col'}, c)))),
    h('tbody', null, list.map(m => h('tr', {'data-node': m.name},
      h('td', null, m.name, m.name === st.node ? h('span', {class: 'muted small'}, ' (this node)') : null),
      h('td', null, m.address || '—'),
      h('td', {'data-col': 'state'}, m.running ? badge('running', 'ok') : badge('stopped', 'danger')),
      h('td', {'data-col': 'role'}, m.leader ? badge('leader', 'ok') : 'follower'),
      h('td', {class: 'actions'}, h('button', {type: 'button', class: 'danger small remove-member', 'aria-label': `Remove ${m.name} from the cluster`,
        onclick: () => confirmAction({
          title: 'Remove a member', confirm: 'Remove', what: `Removing ${m.name}`, ok: `Removed ${m.name} from the cluster.`,
          text: ['Remove ', h('strong', null, m.name), ' from the cluster? Its quorum queue replicas move to other members only if you grow them there.'],
        }, () => api(`/cluster/members/${enc(m.name)}`, {method: 'DELETE'}), () => refreshNow(ctx))}, 'Remove')))))));
}

async function addMemberDialog(ctx) {
  const fd = await ask({
    title: 'Add a member',
    body: [
      h('p', null, 'The node must be running with the same cluster name and no data of its own.'),
      field('cl-new-name', 'Node name', h('input', {name: 'name', required: true, placeholder: 'warren@host3'})),
      field('cl-new-addr', 'Cluster address', h('input', {name: 'address', required: true, placeholder: 'host3:25672'})),
    ],
    confirm: 'Add',
    check: fd => api('/cluster/members', {method: 'POST', body: {name: fd.get('name').trim(), address: fd.get('address').trim()}}).then(() => ''),
  });
  if (fd) { notify(`Added ${fd.get('name')} to the cluster.`); refreshNow(ctx); }
}

function quorumTable(ctx, list, nodes, admin) {
  if (!list.length) return h('p', {class: 'muted', id: 'cl-no-qqs'}, 'No quorum queues. Declare one with x-queue-type=quorum.');
  const cols = ['Virtual host', 'Queue', 'Leader', 'Members', 'Messages', 'Consumers', ...(admin ? ['Actions'] : [])];
  return h('div', {class: 'table-wrap'}, h('table', {class: 'grid', id: 'cl-qq-table'},
    h('thead', null, h('tr', null, cols.map(c => h('th', {scope: 'col'}, c)))),
    h('tbody', null, list.map(q => {
      const online = new Set(q.online || []);
      const label = `${q.name} (vhost ${q.vhost})`;
      return h('tr', {'data-vhost': q.vhost, 'data-name': q.name},
        h('td', null, q.vhost),
        h('td', null, h('a', {href: queueHref(q.vhost, q.name)}, q.name)),
        h('td', {'data-col': 'leader'}, q.leader ? q.leader : badge('no leader', 'danger')),
        h('td', {'data-col': 'members'}, h('ul', {class: 'chips'}, (q.members || []).map(m =>
          h('li', {'data-member': m, class: online.has(m) ? '' : 'offline'}, m, m === q.leader ? ' ★' : '', online.has(m) ? '' : ' (offline)')))),
        h('td', {class: 'num'}, num(q.messages)),
        h('td', {class: 'num'}, num(q.consumers)),
        admin ? h('td', {class: 'actions'},
          h('button', {type: 'button', class: 'secondary small transfer', 'aria-label': `Move the leader of ${label}`,
            disabled: (q.members || []).length < 2, onclick: () => transferDialog(ctx, q)}, 'Move leader'),
          h('button', {type: 'button', class: 'secondary small add-replica', 'aria-label': `Add a replica of ${label}`,
            disabled: nodes.every(n => (q.members || []).includes(n)), onclick: () => replicaDialog(ctx, q, nodes, true)}, 'Add replica'),
          h('button', {type: 'button', class: 'secondary small remove-replica', 'aria-label': `Remove a replica of ${label}`,
            disabled: (q.members || []).length < 2, onclick: () => replicaDialog(ctx, q, nodes, false)}, 'Remove replica')) : null);
    }))));
}

const qqPath = (q, rest) => `/queues/quorum/${enc(q.vhost)}/${enc(q.name)}/${rest}`;

async function transferDialog(ctx, q) {
  const others = (q.members || []).filter(m => m !== q.leader);
  const fd = await ask({
    title: `Move the leader of ${q.name}`,
    body: [
      h('p', null, 'The leader hands over to the chosen member once it has caught up; publishers and consumers follow.'),
      field('cl-transfer-node', 'New leader', h('select', {name: 'node'}, others.map(m => h('option', {value: m}, m)))),
    ],
    confirm: 'Move leader',
    check: fd => api(qqPath(q, 'transfer-leadership'), {method: 'POST', body: {node: fd.get('node')}}).then(() => ''),
  });
  if (fd) { notify(`Moved the leader of ${q.name} to ${fd.get('node')}.`); refreshNow(ctx); }
}

async function replicaDialog(ctx, q, nodes, add) {
  const choices = add ? nodes.filter(n => !(q.members || []).includes(n)) : (q.members || []);
  const fd = await ask({
    title: `${add ? 'Add a replica of' : 'Remove a replica of'} ${q.name}`,
    body: [
      h('p', null, add ? 'The new member catches up from the leader, then counts towards the majority.'
        : 'The member leaves the queue\'s Raft group and drops its copy.'),
      field('cl-replica-node', 'Node', h('select', {name: 'node'}, choices.map(m => h('option', {value: m}, m)))),
    ],
    confirm: add ? 'Add replica' : 'Remove replica', danger: !add,
    check: fd => api(qqPath(q, add ? 'replicas/add' : 'replicas/delete'), {method: add ? 'POST' : 'DELETE', body: {node: fd.get('node')}}).then(() => ''),
  });
  if (fd) { notify(`${add ? 'Added' : 'Removed'} the replica of ${q.name} on ${fd.get('node')}.`); refreshNow(ctx); }
}
