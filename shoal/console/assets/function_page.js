// A function's page (route #/fn/NAME): replicas, request rate and latency over time, its
// status, the autoscaler's decision, its instances and the tail of its logs.

import { api, request } from './api.js';
import { now, push } from './charts.js';
import { card, enc, fmt, h, headedWideCard, kv, table, wideCard } from './dom.js';
import { Page, POLL_MS } from './page.js';

const LOG_POLL_MS = 2000;
const LOG_TAIL_BYTES = 64 << 10;

export class FunctionPage extends Page {
  constructor(main, name) { super(main); this.name = name; this.logOffset = null; this.lastCold = null; }
  start() {
    const n = this.name;
    this.replicas = this.chart(`Replicas and request rate of ${n}`, [
      { label: 'desired', yAxisID: 'y', stepped: true },
      { label: 'actual (starting + ready)', yAxisID: 'y', stepped: true },
      { label: 'req/s', yAxisID: 'y1', borderDash: [5, 3] },
      { label: 'cold start', yAxisID: 'y', type: 'scatter', pointRadius: 6, pointStyle: 'triangle', showLine: false },
    ], { yTitle: 'replicas', y1Title: 'req/s', y: { ticks: { precision: 0 } } });
    this.latency = this.chart(`Latency of ${n}`, [{ label: 'p50 ms' }, { label: 'p99 ms' }], { yTitle: 'ms' });
    this.layout('Function ', n,
      headedWideCard('Replicas', 'Replicas desired vs actual, and request rate (▲ = cold start)', this.replicas.box),
      this.summary = card('Status'),
      this.decision = card('Autoscaler'),
      wideCard('Latency', this.latency.box),
      wideCard('Instances', this.instances = h('div')),
      headedWideCard('Logs', 'Logs (tail)',
        this.logs = h('pre', { class: 'logs', tabindex: '0', 'aria-label': `logs of ${n}` })));
    this.every(POLL_MS, () => this.refresh());
    this.every(LOG_POLL_MS, () => this.refreshLogs());
  }

  async refresh() {
    const f = await api('/v1/functions/' + enc(this.name));
    const s = f.status;
    const t = now();
    const [desired, actual, rate, cold] = this.replicas.chart.data.datasets;
    push(desired.data, { x: t, y: s.desired });
    push(actual.data, { x: t, y: s.actual });
    push(rate.data, { x: t, y: s.rps });
    if (this.lastCold !== null && s.cold_starts > this.lastCold) push(cold.data, { x: t, y: s.actual });
    this.lastCold = s.cold_starts;
    this.replicas.chart.update('none');
    const [p50, p99] = this.latency.chart.data.datasets;
    push(p50.data, { x: t, y: s.p50_ms });
    push(p99.data, { x: t, y: s.p99_ms });
    this.latency.chart.update('none');

    this.summary.replaceChildren(h('h2', null, 'Status'), kv([
      ['namespace', f.namespace], ['handler', f.handler.builtin || f.handler.library],
      ['generation', f.generation], ['concurrency', f.concurrency],
      ['scale', `${f.scale.min} … ${f.scale.max}`],
      ['ready / starting', `${s.ready} / ${s.starting}`, 'ready'],
      ['in flight / queued', `${s.inflight} / ${s.queued}`],
      ['req/s (10 s)', fmt.num(s.rps, 1), 'rps'], ['p50 / p99', `${fmt.num(s.p50_ms, 2)} / ${fmt.num(s.p99_ms, 2)} ms`],
      ['requests', fmt.num(s.requests_total), 'requests'], ['errors (5xx)', fmt.num(s.errors_total)],
      ['cold starts', s.cold_starts, 'cold_starts'], ['last cold start', fmt.num(s.last_cold_start_ms, 1) + ' ms'],
      ...(s.unschedulable ? [['cannot start', h('span', { class: 'error' }, s.unschedulable)]] : [])]));
    const d = s.decision;
    this.decision.replaceChildren(h('h2', null, 'Autoscaler'), kv([
      ['policy', s.policy, 'policy'], ['replicas decided', d.replicas, 'decision_replicas'],
      ['pre-warm', d.prewarm], ['keep-alive', fmt.secs(d.keep_alive_s)],
      ['concurrency target', fmt.num(d.concurrency_target, 2)], ['panic', d.panic ? 'yes' : 'no'],
      ['decided', d.age_s < 0 ? 'not yet' : fmt.secs(d.age_s) + ' ago'], ['why', d.reason || '–'],
      ['pre-warm starts', s.prewarm_starts], ['cold starts avoided', s.cold_starts_avoided],
      ['requests that waited for a start', s.cold_requests]]));
    this.instances.replaceChildren(table(
      [{ title: 'id', num: true }, { title: 'pid', num: true }, { title: 'state', key: 'state' },
        { title: 'in flight', num: true }, { title: 'served', num: true }, { title: 'age' },
        { title: 'cold start', num: true }, { title: 'started by' }, { title: 'restarts', num: true }],
      (s.instances || []).map((i) => [i.id, i.pid, h('span', { class: 'state-' + i.state }, i.state),
        i.inflight, fmt.num(i.served), fmt.secs(i.age_s), fmt.num(i.cold_start_ms, 1) + ' ms',
        i.start_path + (i.start_note ? ` (${i.start_note})` : ''), i.restarts])));
  }

  async refreshLogs() {
    const base = '/v1/functions/' + enc(this.name) + '/logs';
    if (this.logOffset === null) {
      // The route clamps an offset past the end to the log's size: that finds the tail.
      const end = Number((await request(`${base}?offset=${2 ** 52}&max=1`)).headers.get('X-Shoal-Next-Offset'));
      this.logOffset = Math.max(0, end - LOG_TAIL_BYTES);
    }
    const r = await request(`${base}?offset=${this.logOffset}&max=${LOG_TAIL_BYTES}`);
    const text = await r.text();
    this.logOffset = Number(r.headers.get('X-Shoal-Next-Offset'));
    if (!text) {
      if (!this.logs.textContent) this.logs.textContent = '(no output yet)';
      return;
    }
    const atBottom = this.logs.scrollTop + this.logs.clientHeight >= this.logs.scrollHeight - 4;
    const all = (this.logs.textContent === '(no output yet)' ? '' : this.logs.textContent) + text;
    this.logs.textContent = all.length > LOG_TAIL_BYTES ? all.slice(all.length - LOG_TAIL_BYTES) : all;
    if (atBottom) this.logs.scrollTop = this.logs.scrollHeight;
  }
}
