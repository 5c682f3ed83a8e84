// Dead letters: the queues that receive dead-lettered messages, with
// counts by reason and source queue, and replay, move and purge.

import {REASONS, api, ask, card, counts, enc, field, h, num, plural, poll, purgeQueue, queueHref, refreshNow, showError} from '../core.js';

export const routes = [[/^#\/dead-letters\/?$/, 'dead-letters', deadLettersPage]];

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

