// Charts of rates and lengths over time, drawn with the vendored uPlot
// (vendor/uPlot.iife.min.js, loaded before the modules) from the samples
// the management API returns when asked with msg_rates_age/_incr and
// lengths_age/_incr, as RabbitMQ's own UI asks.

import {h} from './core.js';

// RANGES are the chart ranges offered: [label, age s, increment s]. The
// broker keeps 10 minutes of samples at 5 s by default.
export const RANGES = [['Last minute', 60, 5], ['Last 10 minutes', 600, 5]];
const RANGE_KEY = 'warren.range';

export function range() {
  const i = localStorage.getItem(RANGE_KEY);
  return i !== null && RANGES[Number(i)] ? RANGES[Number(i)] : RANGES[1];
}

// historyQuery is the query string that asks for samples over the range.
export function historyQuery(families = ['msg_rates', 'lengths']) {
  const [, age, incr] = range();
  return families.map(f => `${f}_age=${age}&${f}_incr=${incr}`).join('&');
}

// rangeSelect lets the user pick the range; onchange reloads the page.
export function rangeSelect(onchange) {
  const cur = range();
  const sel = h('select', {id: 'chart-range', 'aria-label': 'Chart range'},
    RANGES.map(([label], i) => h('option', {value: i, selected: RANGES[i] === cur}, label)));
  sel.addEventListener('change', () => { localStorage.setItem(RANGE_KEY, sel.value); onchange(); });
  return sel;
}

// Series colours: distinguishable, and readable on light and dark panels.
const PALETTE = ['#d97706', '#2563eb', '#16a34a', '#dc2626', '#7c3aed', '#0891b2', '#db2777', '#65a30d'];

// INT_INCRS are the y-axis steps of charts of whole numbers.
const INT_INCRS = [1, 2, 5].flatMap(m => [1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8].map(p => m * p)).sort((a, b) => a - b);

// axisWidth sizes a value axis to its labels (about 7 px a character at
// the 12 px axis font, plus the ticks and a gap).
const axisWidth = (self, values) => 18 + 7 * Math.max(3, ...(values || []).map(v => String(v).length));

const cssVar = name => getComputedStyle(document.documentElement).getPropertyValue(name).trim() || '#888';

// samplesOf returns the samples of a *_details object oldest first.
function samplesOf(details) {
  const s = (details && Array.isArray(details.samples)) ? details.samples.slice() : [];
  return s.sort((a, b) => a.timestamp - b.timestamp);
}

// rateSeries turns counter samples into per-second rates at each sample's
// time (the first sample has no rate before it).
export function rateSeries(details) {
  const s = samplesOf(details);
  const out = [];
  for (let i = 1; i < s.length; i++) {
    const dt = (s[i].timestamp - s[i - 1].timestamp) / 1000;
    if (dt > 0) out.push([s[i].timestamp, Math.max(0, (s[i].sample - s[i - 1].sample) / dt)]);
  }
  return out;
}

// lengthSeries is the samples of a gauge as they are.
export const lengthSeries = details => samplesOf(details).map(x => [x.timestamp, Number(x.sample) || 0]);

// lineChart makes a chart: {el, update(series)} where series is
// [{label, points: [[ms, value], ...]}]. The element carries data-last (the
// newest value of each series, JSON), data-max (the highest) and
// data-points, so tests and screen
// readers can read what is drawn; the chart itself is aria-hidden and the
// figure's caption says what the series are now.
export function lineChart({id, title, unit = '', height = 180, format = v => String(v), integer = false}) {
  const plot = h('div', {class: 'chart-plot', 'aria-hidden': 'true'});
  const caption = h('figcaption', {class: 'chart-caption'});
  const el = h('figure', {class: 'chart', id}, h('div', {class: 'chart-title'}, title), plot, caption);
  let u = null;
  let labels = [];
  const width = () => Math.max(200, Math.floor(plot.clientWidth || el.clientWidth || 400));

  function build(series) {
    if (u) u.destroy();
    labels = series.map(s => s.label);
    const text = cssVar('--muted');
    const grid = cssVar('--line');
    const axis = {stroke: text, grid: {stroke: grid, width: 1}, ticks: {stroke: grid, width: 1}};
    u = new window.uPlot({
      width: width(), height,
      cursor: {drag: {x: false, y: false}},
      legend: {show: true, live: true},
      scales: {x: {time: true}, y: {range: (self, min, max) => [0, max > 0 ? max * 1.1 : 1]}},
      // The time axis spaces its ticks for "12/2/26 3:57am"; the value
      // axis is as wide as its longest label.
      axes: [{...axis, space: 90}, {...axis, size: axisWidth, values: (self, ticks) => ticks.map(v => format(v) + unit),
        ...(integer ? {incrs: INT_INCRS} : {})}],
      series: [{value: (self, v) => (v == null ? '—' : new Date(v * 1000).toLocaleTimeString())},
        ...series.map((s, i) => ({label: s.label, stroke: PALETTE[i % PALETTE.length], width: 2,
          value: (self, v) => (v == null ? '—' : format(v) + unit)}))],
    }, [[]], plot);
  }

  // update draws series; x values are the union of all series' times.
  function update(series) {
    if (!window.uPlot) { plot.textContent = 'Charts unavailable.'; return; }
    if (!u || series.length !== labels.length || series.some((s, i) => s.label !== labels[i])) build(series);
    const times = [...new Set(series.flatMap(s => s.points.map(p => p[0])))].sort((a, b) => a - b);
    const data = [times.map(t => t / 1000), ...series.map(s => {
      const m = new Map(s.points);
      return times.map(t => (m.has(t) ? m.get(t) : null));
    })];
    u.setData(data);
    const last = {};
    for (const s of series) last[s.label] = s.points.length ? s.points[s.points.length - 1][1] : null;
    const max = {};
    for (const s of series) max[s.label] = s.points.length ? Math.max(...s.points.map(p => p[1])) : null;
    el.dataset.last = JSON.stringify(last);
    el.dataset.max = JSON.stringify(max);
    el.dataset.points = String(times.length);
    caption.textContent = times.length
      ? series.map(s => `${s.label} ${last[s.label] == null ? '—' : format(last[s.label]) + unit}`).join(' · ')
      : 'No samples yet: they appear within a few seconds.';
  }

  new ResizeObserver(() => { if (u && width() !== u.width) u.setSize({width: width(), height}); }).observe(plot);
  return {el, update};
}

const rateFmt = new Intl.NumberFormat('en-US', {maximumFractionDigits: 1});
const intFmt = new Intl.NumberFormat('en-US', {maximumFractionDigits: 0});

// ratesChart charts message rates: stats is [[label, stat], ...] looked up
// in obj.message_stats (or obj itself with base '').
export function ratesChart(id, title, stats, base = 'message_stats') {
  const c = lineChart({id, title, unit: '/s', format: v => rateFmt.format(v)});
  return {el: c.el, update: obj => {
    const src = base ? (obj && obj[base]) || {} : obj || {};
    c.update(stats.map(([label, stat]) => ({label, points: rateSeries(src[stat + '_details'])})));
  }};
}

// lengthsChart charts gauges such as messages_ready.
export function lengthsChart(id, title, stats, base = '') {
  const c = lineChart({id, title, format: v => intFmt.format(v), integer: true});
  return {el: c.el, update: obj => {
    const src = base ? (obj && obj[base]) || {} : obj || {};
    c.update(stats.map(([label, stat]) => ({label, points: lengthSeries(src[stat + '_details'])})));
  }};
}
