// Dead letters: the queues that receive dead-lettered messages, with
// counts by reason and source queue, a timeline of dead letters per minute
// (by reason, source queue or destination), and replay (with a preview of
// where each message would go), move and purge.

import {REASONS, api, ask, badge, card, counts, enc, errText, exchangeName, field, h, num, plural, poll, purgeQueue, queueHref, refreshNow, showError} from '../core.js';
import {lineChart} from '../chart.js';
import {moveMessages} from './queues.js';

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
    timeline(ctx),
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

// replayBody is the replay's request from the dialog's filters.
function replayBody(fd) {
  const body = {keep_history: fd.get('keep_history') === 'on'};
  const count = parseInt(fd.get('count'), 10);
  if (count > 0) body.count = count;
  if (fd.get('reason')) body.reason = fd.get('reason');
  if (fd.get('source_queue')) body.source_queue = fd.get('source_queue');
  return body;
}

async function replay(d, showResult, after) {
  const reasons = [...new Set([...Object.keys(d.by_reason || {}), ...REASONS])];
  const sources = [...new Set([...Object.keys(d.by_source || {}), ...(d.sources || [])])];
  const filters = [
    field('rp-count', 'How many', h('input', {name: 'count', type: 'number', min: 1, step: 1, placeholder: `all (${num(d.messages_ready)})`})),
    field('rp-reason', 'Death reason', h('select', {name: 'reason'},
      h('option', {value: ''}, 'any reason'), reasons.map(r => h('option', {value: r}, r)))),
    field('rp-source', 'Source queue', h('select', {name: 'source_queue'},
      h('option', {value: ''}, 'any queue'), sources.map(s => h('option', {value: s}, s)))),
    h('label', {class: 'check'}, h('input', {type: 'checkbox', name: 'keep_history', id: 'rp-keep'}),
      ' Keep the x-death history (otherwise messages start afresh)'),
  ];
  // The preview step: a dry run of the replay with the filters, shown in
  // the dialog before anything moves; it runs when the dialog opens and
  // again whenever a filter changes.
  const out = h('div', {id: 'rp-preview', role: 'status', 'aria-live': 'polite'}, h('p', {class: 'muted'}, 'Previewing…'));
  const previewBtn = h('button', {type: 'button', class: 'secondary small', id: 'rp-preview-button'}, 'Preview again');
  const section = h('section', {class: 'rp-preview', 'aria-labelledby': 'rp-preview-title'},
    h('h3', {id: 'rp-preview-title'}, 'Preview: where the messages would go'), out, previewBtn);
  // A grid item of the dialog's body: without this its table's width
  // widens the dialog past a phone's screen instead of scrolling.
  section.style.minWidth = '0';
  let gen = 0;
  const runPreview = async () => {
    const form = out.closest('form');
    if (!form) return;
    const my = ++gen;
    out.setAttribute('aria-busy', 'true');
    try {
      const p = await api(`/dead-letters/${enc(d.vhost)}/${enc(d.name)}/replay`,
        {method: 'POST', body: {...replayBody(new FormData(form)), dry_run: true, list: 50}});
      if (my === gen) out.replaceChildren(...previewView(p));
      const confirm = document.getElementById('dialog-confirm');
      if (my === gen && confirm) confirm.textContent = p.would_replay > 0 ? `Replay ${plural(p.would_replay, 'message')}` : 'Replay';
    } catch (err) {
      if (my === gen) out.replaceChildren(h('p', {class: 'error'}, 'Preview failed: ' + errText(err)));
    } finally {
      if (my === gen) out.removeAttribute('aria-busy');
    }
  };
  previewBtn.addEventListener('click', runPreview);
  let timer = 0;
  for (const f of filters) {
    f.addEventListener('change', runPreview);
    f.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(runPreview, 300); });
  }
  const asked = ask({
    title: `Replay dead letters from ${d.name}`,
    body: [
      h('p', null, 'Each message is republished to the exchange and routing keys it was first dead-lettered from, then removed from ',
        h('strong', null, d.name), '. Messages that do not match the filters stay. The replay stops at the first message that cannot be republished.'),
      filters, section,
    ],
    confirm: 'Replay',
    wide: true,
  });
  runPreview();
  const fd = await asked;
  gen++;
  if (!fd) return;
  const body = replayBody(fd);
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
  const r = await moveMessages(d.vhost, d.name, d.messages_ready);
  if (r) showResult(`Moving messages from ${d.name} to ${r.dest} (shovel ${r.shovel}).`, 'ok');
  after();
}

// STATUS_TEXT explains a preview status.
const STATUS_TEXT = {
  routed: ['ok', 'would be replayed'],
  unroutable: ['danger', 'unroutable: the replay stops here'],
  no_exchange: ['danger', 'no such exchange: the replay stops here'],
  access_refused: ['danger', 'not allowed: the replay stops here'],
  blocked: ['warn', 'stays: an earlier message stops the replay'],
};

const statusBadge = s => badge((STATUS_TEXT[s] || ['', s])[1], (STATUS_TEXT[s] || [''])[0]);

// previewView renders a replay dry run: the destinations with their
// counts, then the first messages one by one.
function previewView(p) {
  const out = [];
  if (!p.matched) {
    out.push(h('p', {class: 'muted', id: 'rp-none'}, 'No message matches: nothing would be replayed.'));
    return out;
  }
  out.push(h('p', {id: 'rp-summary'},
    h('strong', null, plural(p.would_replay, 'message')), ' would be replayed',
    p.matched > p.would_replay ? `, ${num(p.matched - p.would_replay)} would stay in the queue` : '',
    p.skipped ? ` (${num(p.skipped)} not matching the filters stay too)` : '', '.',
    p.truncated ? ' Only the first 10 000 messages were read.' : ''));
  out.push(h('ul', {class: 'rp-dests', id: 'rp-dests'}, (p.destinations || []).map(dst =>
    h('li', {'data-status': dst.status, 'data-queues': (dst.queues || []).join(',')},
      h('strong', null, num(dst.count)), ' ', statusBadge(dst.status),
      dst.status === 'blocked' ? '' : [' via exchange ', exchangeName(dst.exchange)],
      dst.status === 'routed' ? [' to ', (dst.queues || []).join(', ')] : '',
      dst.error ? h('div', {class: 'muted small'}, dst.error) : null))));
  const rows = (p.messages || []).map(m => h('tr', {'data-position': m.position, 'data-status': m.status},
    h('td', {class: 'num'}, num(m.position)),
    h('td', {'data-col': 'death'}, `${m.first_death.reason} from ${m.first_death.queue}`),
    h('td', {'data-col': 'to'}, exchangeName(m.exchange), h('div', {class: 'muted small'}, (m.routing_keys || []).join(', '))),
    h('td', {'data-col': 'queues'}, m.status === 'routed' ? (m.queues || []).join(', ') : statusBadge(m.status),
      m.delayed ? h('div', {class: 'muted small'}, 'held by the delayed exchange first') : null)));
  out.push(h('div', {class: 'table-wrap'}, h('table', {class: 'grid', id: 'rp-messages'},
    h('caption', {class: 'muted small'}, p.listed < p.matched ? `The first ${num(p.listed)} of ${num(p.matched)} messages` : 'Messages, in queue order'),
    h('thead', null, h('tr', null, ['Position', 'First death', 'Exchange and keys', 'Would reach'].map((c, i) =>
      h('th', {scope: 'col', class: i ? '' : 'num'}, c)))),
    h('tbody', null, rows))));
  return out;
}

// ---- Timeline ---------------------------------------------------------------

// TL_VIEWS are the timeline's views: the series each draws from a bucket.
const TL_VIEWS = [
  ['reason', 'By reason'],
  ['source', 'By source queue'],
  ['target', 'By destination'],
];
const TL_RANGES = [[15, 'Last 15 minutes'], [60, 'Last hour']];
const TL_VIEW_KEY = 'warren.dl.view';
const TL_RANGE_KEY = 'warren.dl.minutes';
const TL_MAX_SERIES = 8;

// queueKey names a queue of a timeline entry: with its vhost when the
// timeline spans several.
const queueKey = (e, many) => (many ? `${e.name} (${e.vhost})` : e.name);

// timelineSeries turns a timeline reply into chart series for a view.
export function timelineSeries(tl, view) {
  const buckets = tl.buckets || [];
  if (view === 'reason') {
    return REASONS.map(r => ({label: r, points: buckets.map(b => [b.timestamp, Number(b.by_reason[r]) || 0])}));
  }
  const key = view === 'source' ? 'by_source' : 'by_target';
  const many = new Set((tl[key] || []).map(e => e.vhost)).size > 1;
  const top = (tl[key] || []).slice(0, TL_MAX_SERIES);
  const series = top.map(e => ({label: queueKey(e, many), points: buckets.map(b => {
    const hit = (b[key] || []).find(x => x.name === e.name && x.vhost === e.vhost);
    return [b.timestamp, hit ? Number(hit.count) : 0];
  })}));
  const rest = (tl[key] || []).slice(TL_MAX_SERIES);
  if (rest.length) {
    const others = new Set(rest.map(e => e.vhost + '\0' + e.name));
    series.push({label: 'other queues', points: buckets.map(b => [b.timestamp,
      (b[key] || []).filter(x => others.has(x.vhost + '\0' + x.name)).reduce((n, x) => n + Number(x.count), 0)])});
  }
  if (view === 'target' && Number(tl.unroutable) > 0) {
    series.push({label: 'unroutable', points: buckets.map(b => [b.timestamp, Number(b.unroutable) || 0])});
  }
  return series;
}

function timeline(ctx) {
  let view = localStorage.getItem(TL_VIEW_KEY) || 'reason';
  if (!TL_VIEWS.some(([v]) => v === view)) view = 'reason';
  let minutes = Number(localStorage.getItem(TL_RANGE_KEY)) || 60;
  if (!TL_RANGES.some(([m]) => m === minutes)) minutes = 60;
  const chart = lineChart({id: 'dl-timeline-chart', title: 'Dead letters per minute', format: v => num(v), integer: true});
  const summary = h('div', {id: 'dl-timeline-summary', class: 'muted small'});
  const viewSel = h('select', {id: 'dl-tl-view', 'aria-label': 'Timeline view'},
    TL_VIEWS.map(([v, label]) => h('option', {value: v, selected: v === view}, label)));
  const rangeSel = h('select', {id: 'dl-tl-range', 'aria-label': 'Timeline range'},
    TL_RANGES.map(([m, label]) => h('option', {value: m, selected: m === minutes}, label)));
  let last = null;
  const draw = () => {
    if (!last) return;
    const series = timelineSeries(last, view);
    chart.update(series);
    const totals = {};
    for (const s of series) totals[s.label] = s.points.reduce((n, p) => n + p[1], 0);
    chart.el.dataset.totals = JSON.stringify(totals);
    chart.el.dataset.view = view;
    const by = (list) => (list || []).map(e => `${e.name}: ${num(e.count)}`).join(', ') || '—';
    summary.replaceChildren(
      h('div', null, `${plural(last.total, 'dead letter')} in the ${minutes === 60 ? 'last hour' : `last ${minutes} minutes`}`,
        Number(last.unroutable) ? ` · ${num(last.unroutable)} reached no queue (unroutable, dropped)` : ''),
      h('div', null, 'By reason: ', REASONS.filter(r => Number(last.by_reason[r])).map(r => `${r}: ${num(last.by_reason[r])}`).join(', ') || '—'),
      h('div', null, 'From: ', by(last.by_source)),
      h('div', null, 'To: ', by(last.by_target)));
  };
  viewSel.addEventListener('change', () => { view = viewSel.value; localStorage.setItem(TL_VIEW_KEY, view); draw(); });
  rangeSel.addEventListener('change', () => {
    minutes = Number(rangeSel.value);
    localStorage.setItem(TL_RANGE_KEY, String(minutes));
    refreshNow(ctx);
  });
  poll(ctx, 'Loading the dead-letter timeline', async () => {
    const tl = await api(`/dead-letters/timeline?minutes=${minutes}`);
    if (!ctx.live()) return;
    last = tl;
    draw();
  });
  return h('section', {id: 'dl-timeline', 'aria-labelledby': 'dl-timeline-title'},
    h('div', {class: 'title-row'}, h('h2', {id: 'dl-timeline-title'}, 'Timeline'), h('span', {class: 'spacer'}), viewSel, rangeSel),
    chart.el, summary);
}
