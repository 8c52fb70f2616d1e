// The node's overview (route #/): the node, its pools, functions with a req/s chart, FL jobs and
// inference models, from the snapshots of GET /v1/events or by polling three routes.

import { api } from './api.js';
import { COLORS, now, push } from './charts.js';
import { card, enc, fmt, h, headedWideCard, kv, link, table, wideCard } from './dom.js';
import { isInference, modelName } from './model_page.js';
import { Page } from './page.js';

const latestEval = (job) => [...(job.versions || [])].reverse().find((v) => v.accuracy !== null);

export class Overview extends Page {
  start() {
    const rps = this.chart('Requests per second by function', [], { yTitle: 'req/s' });
    this.rps = rps;
    this.main.replaceChildren(
      h('h1', null, 'Overview'),
      h('div', { class: 'grid' },
        this.nodeCard = card('Node', h('p', { class: 'muted' }, 'loading')),
        this.poolCard = card('Pool per tenant', h('p', { class: 'muted' }, 'loading')),
        wideCard('Functions', this.fnBox = h('div')),
        headedWideCard('Request rate', 'Requests per second (since this page opened)', rps.box),
        wideCard('FL jobs', this.jobBox = h('div')),
        wideCard('Inference models', this.modelBox = h('div'))));
    this.live((snapshot) => this.render(snapshot), () => this.refresh());
  }

  // Polling: the same snapshot GET /v1/events sends, from three routes.
  async refresh() {
    const [node, fns, jobs] = await Promise.all([
      api('/v1/node'), api('/v1/functions'),
      api('/v1/jobs').catch((e) => (e.status === 501 || e.status === 403 ? { jobs: [], note: e.message } : Promise.reject(e))),
    ]);
    const summary = (j) => {
      const last = latestEval(j);
      return { ...j, latest: last ? { version: last.version, accuracy: last.accuracy, loss: last.loss } : null };
    };
    this.render({ node, functions: fns.functions, jobs: jobs.jobs.map(summary), jobs_note: jobs.note });
  }

  render(snapshot) {
    const { node } = snapshot;
    const fns = { functions: snapshot.functions };
    const jobs = { jobs: snapshot.jobs, note: snapshot.jobs_note };
    document.getElementById('node-name').textContent = `node ${node.node}`;
    this.nodeCard.replaceChildren(h('h2', null, 'Node'), kv([
      ['node', node.node, 'node'], ['version', node.version, 'version'],
      ['data plane', node.dataplane, 'dataplane'], ['functions', node.functions, 'functions'],
      ['FL jobs', jobs.jobs.length, 'jobs']]));
    const pools = node.pools || [];
    this.poolCard.replaceChildren(h('h2', null, 'Pool per tenant'), table(
      [{ title: 'tenant' }, { title: 'backend' }, { title: 'used', num: true, key: 'used' },
        { title: 'capacity', num: true }, { title: 'usage' }, { title: 'buffers', num: true }],
      pools.map((p) => {
        const share = p.capacity_bytes ? p.used_bytes / p.capacity_bytes : 0;
        return [p.tenant, p.backend, fmt.bytes(p.used_bytes), fmt.bytes(p.capacity_bytes),
          h('div', { class: 'bar', role: 'meter', 'aria-valuenow': (100 * share).toFixed(1), 'aria-valuemin': '0',
            'aria-valuemax': '100', 'aria-label': `${p.tenant} pool used` }, h('span', { style: `width:${Math.min(100, 100 * share)}%` })),
          fmt.num(p.live_buffers)];
      }), (i) => ({ 'data-tenant': pools[i].tenant })));

    const list = fns.functions;
    this.fnBox.replaceChildren(table(
      [{ title: 'function' }, { title: 'namespace' }, { title: 'handler' }, { title: 'policy' },
        { title: 'desired', num: true, key: 'desired' }, { title: 'ready', num: true, key: 'ready' },
        { title: 'starting', num: true, key: 'starting' }, { title: 'other', num: true, key: 'other' },
        { title: 'in flight', num: true }, { title: 'queued', num: true },
        { title: 'req/s', num: true, key: 'rps' }, { title: 'p99 ms', num: true, key: 'p99' },
        { title: 'cold starts', num: true, key: 'cold_starts' }, { title: 'errors', num: true }],
      list.map((f) => {
        const s = f.status;
        const handler = f.handler.builtin || (f.handler.library || '').split('/').pop();
        return [link('#/fn/' + enc(f.name), f.name), f.namespace,
          isInference(f) ? link('#/model/' + enc(f.name), 'inference: ' + modelName(f)) : handler,
          s.policy, s.desired, s.ready, s.starting, Math.max(0, s.instances_total - s.ready - s.starting),
          s.inflight, s.queued, fmt.num(s.rps, 1), fmt.num(s.p99_ms, 2), s.cold_starts, s.errors_total];
      }), (i) => ({ 'data-fn': list[i].name })));

    const t = now();
    const ch = this.rps.chart;
    for (const f of list) {
      let ds = ch.data.datasets.find((d) => d.label === f.name);
      if (!ds) {
        const c = COLORS[ch.data.datasets.length % COLORS.length];
        ds = { label: f.name, data: [], borderColor: c, backgroundColor: c, pointRadius: 0, borderWidth: 2 };
        ch.data.datasets.push(ds);
      }
      push(ds.data, { x: t, y: f.status.rps });
    }
    ch.update('none');

    this.jobBox.replaceChildren(jobs.note ? h('p', { class: 'muted' }, jobs.note) : '', table(
      [{ title: 'job' }, { title: 'algorithm' }, { title: 'state', key: 'state' },
        { title: 'version', num: true, key: 'version' }, { title: 'accuracy', num: true, key: 'accuracy' },
        { title: 'best', num: true }, { title: 'clients', num: true }, { title: 'updates', num: true }],
      jobs.jobs.map((j) => {
        const last = j.latest;
        return [link('#/job/' + enc(j.name), j.name), j.algorithm, h('span', { class: 'state-' + j.state }, j.state),
          j.version, last ? fmt.pct(last.accuracy) : '–', fmt.pct(j.best_accuracy),
          `${j.clients.joined}/${j.clients.expected}`, j.updates_total];
      }), (i) => ({ 'data-job': jobs.jobs[i].name })));

    const models = list.filter(isInference);
    this.modelBox.replaceChildren(table(
      [{ title: 'model' }, { title: 'function' }, { title: 'source' }, { title: 'ready', num: true },
        { title: 'req/s', num: true }, { title: 'p99 ms', num: true }],
      models.map((f) => [link('#/model/' + enc(f.name), modelName(f)), f.name,
        f.handler.env.SHOAL_INFER_FL_JOB ? 'FL job ' + f.handler.env.SHOAL_INFER_FL_JOB : (f.handler.env.SHOAL_INFER_ONNX || '–'),
        f.status.ready, fmt.num(f.status.rps, 1), fmt.num(f.status.p99_ms, 2)]),
      (i) => ({ 'data-model': models[i].name })));
  }
}
