// An inference model's page (route #/model/FUNCTION): the version served and request rate over
// time, latency, the batch-size histogram and the serving instance's stats.

import { api, AuthError } from './api.js';
import { now, push } from './charts.js';
import { card, enc, fmt, h, headedCard, headedWideCard, kv, link, wideCard } from './dom.js';
import { Page, POLL_MS } from './page.js';

export const isInference = (f) => f.handler && f.handler.builtin === 'inference';
export const modelName = (f) => (f.handler.env && f.handler.env.SHOAL_INFER_MODEL) || f.name;

export class ModelPage extends Page {
  constructor(main, fn) { super(main); this.fn = fn; }
  start() {
    const n = this.fn;
    this.serving = this.chart(`Version served and request rate of ${n}`, [
      { label: 'version served', yAxisID: 'y', stepped: true },
      { label: 'req/s', yAxisID: 'y1', borderDash: [5, 3] },
    ], { yTitle: 'model version', y: { ticks: { precision: 0 } }, y1Title: 'req/s' });
    this.latency = this.chart(`Latency of ${n}`, [{ label: 'p50 ms' }, { label: 'p99 ms' }], { yTitle: 'ms' });
    this.hist = this.chart(`Batch sizes of ${n}`, [{ label: 'batches' }],
      { type: 'bar', labels: [], xTitle: 'rows per batch', yTitle: 'batches', legend: false });
    this.layout('Model served by ', n,
      this.summary = card('Serving'),
      headedCard('Batch sizes', 'Batch-size histogram', this.hist.box),
      headedWideCard('Version served', 'Version served over time, and request rate', this.serving.box),
      wideCard('Latency', this.latency.box));
    this.every(POLL_MS, () => this.refresh());
  }

  async refresh() {
    const f = await api('/v1/functions/' + enc(this.fn));
    const model = modelName(f);
    let stats = null;
    let statsError = '';
    if (f.status.ready > 0) {
      try { stats = await api('/v1/models/' + enc(model) + '/stats'); } catch (e) {
        if (e instanceof AuthError) throw e;
        statsError = e.message;
      }
    } else {
      statsError = 'no instance is ready: the stats come from a running instance';
    }
    const t = now();
    const s = f.status;
    const [version, rate] = this.serving.chart.data.datasets;
    if (stats) push(version.data, { x: t, y: Number(stats.model_version) });
    push(rate.data, { x: t, y: s.rps });
    this.serving.chart.update('none');
    const [p50, p99] = this.latency.chart.data.datasets;
    push(p50.data, { x: t, y: s.p50_ms });
    push(p99.data, { x: t, y: s.p99_ms });
    this.latency.chart.update('none');
    if (stats) {
      const hist = Object.entries(stats.batch_rows_histogram || {}).map(([k, v]) => [Number(k), v]).sort((a, b) => a[0] - b[0]);
      this.hist.chart.data.labels = hist.map(([k]) => String(k));
      this.hist.chart.data.datasets[0].data = hist.map(([, v]) => v);
      this.hist.chart.update('none');
    }
    const env = f.handler.env || {};
    this.summary.replaceChildren(h('h2', null, 'Serving'), kv([
      ['model', model, 'model'],
      ['source', env.SHOAL_INFER_FL_JOB ? link('#/job/' + enc(env.SHOAL_INFER_FL_JOB), 'FL job ' + env.SHOAL_INFER_FL_JOB) : (env.SHOAL_INFER_ONNX || '–')],
      ['version served', stats ? stats.model_version : '–', 'model_version'],
      ['requests (this instance)', stats ? fmt.num(stats.requests) : '–', 'model_requests'],
      ['batches / rows', stats ? `${fmt.num(stats.batches)} / ${fmt.num(stats.rows)}` : '–'],
      ['version swaps', stats ? stats.swaps : '–'], ['failed batches', stats ? stats.failed_batches : '–'],
      ['requests (function)', fmt.num(s.requests_total), 'requests'], ['req/s', fmt.num(s.rps, 1)],
      ['p50 / p99', `${fmt.num(s.p50_ms, 2)} / ${fmt.num(s.p99_ms, 2)} ms`],
      ['instances ready', s.ready], ['device / precision', `${env.SHOAL_INFER_DEVICE || 'auto'} / ${env.SHOAL_INFER_PRECISION || 'fp32'}`],
      ['max batch', env.SHOAL_INFER_MAX_BATCH || '–'],
      ...(statsError ? [['stats', h('span', { class: 'muted' }, statsError)]] : [])]));
  }
}
