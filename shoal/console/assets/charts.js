// Line charts (Debian's Chart.js, loaded by index.html as the global Chart) and the series they
// draw, kept to the last HISTORY samples.

import { h } from './dom.js';

export const HISTORY = 600;           // samples kept per series (10 minutes at 1 s)
export const COLORS = ['#1f5fbf', '#d9480f', '#2b8a3e', '#862e9c', '#c2255c', '#0b7285', '#5c940d',
  '#e67700', '#364fc7', '#495057'];

// Times on the x axis are seconds since this page opened (Chart.js's time scale needs a date
// adapter that Debian does not package).
const t0 = performance.now();
export const now = () => (performance.now() - t0) / 1000;

export function lineChart(title, datasets, opts = {}) {
  const canvas = h('canvas', { role: 'img', 'aria-label': title });
  const scales = {
    x: { type: 'linear', title: { display: true, text: opts.xTitle || 'seconds since this page opened' },
      ticks: { precision: 0 } },
    y: { beginAtZero: true, title: { display: !!opts.yTitle, text: opts.yTitle }, ...(opts.y || {}) },
  };
  if (opts.y1Title) {
    scales.y1 = { position: 'right', beginAtZero: true, grid: { drawOnChartArea: false },
      title: { display: true, text: opts.y1Title }, ...(opts.y1 || {}) };
  }
  const chart = new Chart(canvas, {
    type: opts.type || 'line',
    data: { labels: opts.labels, datasets: datasets.map((d, i) => ({
      borderColor: COLORS[i % COLORS.length], backgroundColor: COLORS[i % COLORS.length],
      pointRadius: 0, borderWidth: 2, data: [], ...d })) },
    options: {
      animation: false, responsive: true, maintainAspectRatio: false, normalized: true,
      interaction: { mode: 'nearest', intersect: false },
      scales: opts.type === 'bar' ? { y: scales.y, x: { title: scales.x.title } } : scales,
      plugins: { legend: { position: 'bottom', display: opts.legend !== false } },
    },
  });
  return { chart, canvas, box: h('div', { class: 'chart' }, canvas) };
}

export function push(series, point) {
  series.push(point);
  if (series.length > HISTORY) series.splice(0, series.length - HISTORY);
}
