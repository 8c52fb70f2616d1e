// Building the page: elements (text always set as text, never as HTML), number formats, the
// key-value lists, tables and cards every page is made of, and the status line.

// h('td', {class: 'num'}, 'text', node, ...): text is always set as text, never as HTML.
export function h(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

export const fmt = {
  num(v, digits = 0) {
    if (v === null || v === undefined || Number.isNaN(v)) return '–';
    return Number(v).toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
  },
  pct(v) { return v === null || v === undefined ? '–' : (100 * v).toFixed(2) + ' %'; },
  bytes(v) {
    if (v === null || v === undefined) return '–';
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return (i === 0 ? v : v.toFixed(1)) + ' ' + u[i];
  },
  secs(v) {
    if (v === null || v === undefined || v < 0) return '–';
    if (v < 120) return v.toFixed(1) + ' s';
    if (v < 7200) return (v / 60).toFixed(1) + ' min';
    return (v / 3600).toFixed(1) + ' h';
  },
};

export const kv = (pairs) => h('dl', { class: 'kv' },
  pairs.map(([k, v, key]) => [h('dt', null, k), h('dd', { 'data-k': key }, v)]));

export function table(columns, rows, rowAttrs) {
  // columns: [{title, num?, key?}], rows: arrays of cell contents.
  return h('div', { class: 'table', tabindex: '0', role: 'region', 'aria-label': 'table' },
    h('table', null,
      h('thead', null, h('tr', null, columns.map((c) => h('th', { class: c.num ? 'num' : null, scope: 'col' }, c.title)))),
      h('tbody', null, rows.length === 0
        ? h('tr', null, h('td', { colspan: columns.length, class: 'muted' }, 'none'))
        : rows.map((cells, i) => h('tr', rowAttrs ? rowAttrs(i) : null,
          cells.map((c, j) => h('td', { class: columns[j].num ? 'num' : null, 'data-k': columns[j].key }, c)))))));
}

// A card: a section headed by its title, which names it for screen readers and the tests;
// headedCard where the heading says more than that name; the wide ones span the grid's row.
const section = (cls, label, heading, body) =>
  h('section', { class: cls, 'aria-label': label }, h('h2', null, heading), ...body);
export const card = (title, ...body) => section('card', title, title, body);
export const wideCard = (title, ...body) => section('card wide', title, title, body);
export const headedCard = (label, heading, ...body) => section('card', label, heading, body);
export const headedWideCard = (label, heading, ...body) => section('card wide', label, heading, body);
export const link = (href, text) => h('a', { href }, text);
export const enc = encodeURIComponent;

export function setStatus(text, isError) {
  const s = document.getElementById('status');
  s.textContent = text;
  s.className = isError ? 'error' : '';
}
