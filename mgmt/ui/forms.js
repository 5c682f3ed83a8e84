// Form pieces shared by the pages: the arguments editor (queue, exchange
// and binding arguments, message headers and properties) and the publish
// form (an exchange's page, and a queue's through the default exchange).

import {api, enc, errText, field, h} from './core.js';

// ---- Arguments editor ------------------------------------------------------

// ARG_TYPES are the value types an argument row may have, as RabbitMQ's UI.
export const ARG_TYPES = [['string', 'String'], ['number', 'Number'], ['boolean', 'Boolean'], ['list', 'List']];

// argValue converts a row's text to its JSON value; it throws on a value
// the type refuses. A list is a JSON array, or comma-separated strings.
export function argValue(text, type) {
  const t = text.trim();
  switch (type) {
    case 'number': {
      const n = Number(t);
      if (t === '' || !Number.isFinite(n)) throw new Error(`"${text}" is not a number`);
      return n;
    }
    case 'boolean':
      if (t !== 'true' && t !== 'false') throw new Error(`"${text}" is not true or false`);
      return t === 'true';
    case 'list':
      if (t.startsWith('[')) {
        let v;
        try { v = JSON.parse(t); } catch { throw new Error(`"${text}" is not a JSON list`); }
        if (!Array.isArray(v)) throw new Error(`"${text}" is not a JSON list`);
        return v;
      }
      return t === '' ? [] : t.split(',').map(s => s.trim());
    default:
      return text;
  }
}

// argsEditor is a list of key / value / type rows (the type select is left
// out with typed: false). keys: suggested keys (a datalist); quick: [label,
// key, type, value] buttons that add a row, as RabbitMQ's "Add:" links.
// It returns {el, value(), set(obj), clear()}: value() is the arguments
// object, throwing an Error naming a bad row; set(obj) shows an object's
// entries with their types.
export function argsEditor(id, {label = 'Arguments', keys = [], quick = [], typed = true, types = ARG_TYPES} = {}) {
  const rows = h('div', {class: 'kvargs-rows', id: id + '-rows'});
  const list = keys.length ? h('datalist', {id: id + '-keys'}, keys.map(k => h('option', {value: k}))) : null;
  let n = 0;
  function addRow(key = '', value = '', type = 'string') {
    const i = n++;
    const k = h('input', {id: `${id}-key-${i}`, class: 'kvarg-key', value: key, placeholder: 'key', 'aria-label': `${label}: key`, list: list ? list.id : null, autocomplete: 'off'});
    const shown = value == null ? '' : typeof value === 'object' ? JSON.stringify(value) : String(value);
    const v = h('input', {id: `${id}-value-${i}`, class: 'kvarg-value', value: shown, placeholder: 'value', 'aria-label': `${label}: value`});
    const t = typed ? h('select', {id: `${id}-type-${i}`, class: 'kvarg-type', 'aria-label': `${label}: type`},
      types.map(([val, text]) => h('option', {value: val, selected: val === type}, text))) : null;
    const row = h('div', {class: 'kvarg-row', 'data-row': i}, k, v, t,
      h('button', {type: 'button', class: 'secondary small kvarg-remove', 'aria-label': `Remove this ${label.toLowerCase()} row`, onclick: () => {
        row.remove();
        if (!rows.children.length) addRow();
        add.focus(); // the focus stays in the editor
      }}, '×'));
    rows.append(row);
    return k;
  }
  const add = h('button', {type: 'button', class: 'secondary small', id: id + '-add', onclick: () => addRow().focus()}, 'Add row');
  // use fills the row holding key, or the first blank one, or a new one,
  // and puts the focus on its value.
  function use(key, type = 'string', value = '') {
    const all = [...rows.children];
    let row = all.find(r => r.querySelector('.kvarg-key').value === key) ||
      all.find(r => !r.querySelector('.kvarg-key').value && !r.querySelector('.kvarg-value').value);
    if (!row) row = addRow().parentElement;
    row.querySelector('.kvarg-key').value = key;
    if (value !== '') row.querySelector('.kvarg-value').value = value;
    const sel = row.querySelector('.kvarg-type');
    if (sel) sel.value = type;
    row.querySelector('.kvarg-value').focus();
  }
  const quickBar = quick.length ? h('div', {class: 'kvarg-quick'}, h('span', {class: 'muted small'}, 'Add: '),
    quick.map(([text, key, type = 'string', value = '']) => h('button', {type: 'button', class: 'linkish small', 'data-arg': key, title: key,
      onclick: () => use(key, type, value)}, text))) : null;
  addRow();
  const el = h('fieldset', {class: 'kvargs', id}, h('legend', null, label), rows, list, h('div', {class: 'kvarg-tools'}, add, quickBar));
  return {
    el,
    value() {
      const out = {};
      for (const row of rows.children) {
        const key = row.querySelector('.kvarg-key').value.trim();
        const text = row.querySelector('.kvarg-value').value;
        const sel = row.querySelector('.kvarg-type');
        if (!key) {
          if (text.trim()) throw new Error(`${label}: the value "${text}" has no key`);
          continue;
        }
        if (Object.hasOwn(out, key)) throw new Error(`${label}: the key "${key}" is given twice`);
        try { out[key] = argValue(text, sel ? sel.value : 'string'); } catch (e) { throw new Error(`${label}: ${key}: ${e.message}`); }
      }
      return out;
    },
    set(obj) {
      rows.replaceChildren();
      for (const [k, v] of Object.entries(obj || {})) {
        addRow(k, v, typeof v === 'number' ? 'number' : typeof v === 'boolean' ? 'boolean' : Array.isArray(v) ? 'list' : 'string');
      }
      if (!rows.children.length) addRow();
    },
    clear() { rows.replaceChildren(); addRow(); },
    use,
  };
}

// ---- Publish form ----------------------------------------------------------

// MESSAGE_PROPS are the AMQP basic properties the publish form offers
// (besides delivery mode and headers); numeric ones are sent as numbers.
const MESSAGE_PROPS = ['content_type', 'content_encoding', 'priority', 'correlation_id', 'reply_to', 'expiration',
  'message_id', 'timestamp', 'type', 'user_id', 'app_id', 'cluster_id'];
const NUMERIC_PROPS = new Set(['priority', 'timestamp']);

// publishForm publishes one message to an exchange as RabbitMQ's UI does
// (POST /api/exchanges/{vhost}/{name}/publish) and shows whether it was
// routed. opts.routingKey presets the routing key (a queue's page
// publishes through the default exchange with the queue's name).
export function publishForm(id, vhost, exchange, {routingKey = '', fixedKey = false, onPublished = null} = {}) {
  const key = h('input', {value: routingKey, readonly: fixedKey, autocomplete: 'off'});
  const mode = h('select', null, h('option', {value: '1'}, '1 - Non-persistent'), h('option', {value: '2'}, '2 - Persistent'));
  const headers = argsEditor(id + '-headers', {label: 'Headers'});
  const propsEd = argsEditor(id + '-props', {label: 'Properties', keys: MESSAGE_PROPS, typed: false});
  const payload = h('textarea', {rows: 5, spellcheck: 'false'});
  const encoding = h('select', null, h('option', {value: 'string'}, 'String'), h('option', {value: 'base64'}, 'Base64'));
  const result = h('div', {id: id + '-result', 'aria-live': 'polite'});
  const button = h('button', {type: 'submit', class: 'primary', id: id + '-submit'}, 'Publish message');
  const form = h('form', {class: 'panel inline-form publish', id, onsubmit: async ev => {
    ev.preventDefault();
    result.replaceChildren();
    let body;
    try {
      const properties = {delivery_mode: Number(mode.value)};
      const hs = headers.value();
      if (Object.keys(hs).length) properties.headers = hs;
      for (const [k, v] of Object.entries(propsEd.value())) {
        if (!MESSAGE_PROPS.includes(k)) throw new Error(`Properties: "${k}" is not a message property (${MESSAGE_PROPS.join(', ')})`);
        properties[k] = NUMERIC_PROPS.has(k) ? argValue(v, 'number') : v;
      }
      body = {properties, routing_key: key.value, payload: payload.value, payload_encoding: encoding.value};
    } catch (e) {
      result.replaceChildren(h('p', {class: 'result warn', role: 'alert'}, e.message));
      return;
    }
    button.disabled = true;
    try {
      const r = await api(`/exchanges/${enc(vhost)}/${enc(exchange === '' ? 'amq.default' : exchange)}/publish`, {method: 'POST', body});
      result.replaceChildren(r && r.routed
        ? h('p', {class: 'result ok', 'data-routed': 'true'}, 'Message published.')
        : h('p', {class: 'result warn', 'data-routed': 'false'}, 'Message published, but not routed.'));
      if (onPublished) onPublished(r);
    } catch (e) {
      result.replaceChildren(h('p', {class: 'result error-box', role: 'alert'}, 'Publish failed: ' + errText(e)));
    } finally {
      button.disabled = false;
    }
  }},
  h('div', {class: 'form-grid'},
    field(id + '-key', 'Routing key', key),
    field(id + '-mode', 'Delivery mode', mode)),
  headers.el, propsEd.el,
  field(id + '-payload', 'Payload', payload),
  h('div', {class: 'form-grid'}, field(id + '-encoding', 'Payload encoding', encoding)),
  h('div', {class: 'form-actions'}, button), result);
  return form;
}

