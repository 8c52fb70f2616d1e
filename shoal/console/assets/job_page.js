// An FL job's page (route #/job/NAME): accuracy and loss per version, commits per minute, its
// status, the aggregation tree, the model download and the clients (by FedCompass group).

import { api, AuthError, request, showTokenPanel } from './api.js';
import { HISTORY } from './charts.js';
import { card, enc, fmt, h, headedWideCard, kv, table, wideCard } from './dom.js';
import { Page, POLL_MS } from './page.js';

export class JobPage extends Page {
  constructor(main, name) { super(main); this.name = name; }
  start() {
    const n = this.name;
    this.quality = this.chart(`Accuracy and loss per model version of ${n}`, [
      { label: 'accuracy', yAxisID: 'y', pointRadius: 3 },
      { label: 'loss', yAxisID: 'y1', pointRadius: 3 },
    ], { xTitle: 'model version', yTitle: 'accuracy', y: { max: 1 }, y1Title: 'loss' });
    this.commits = this.chart(`Commits per minute of ${n}`, [{ label: 'versions committed per minute', stepped: true }],
      { xTitle: 'job time (s)', yTitle: 'commits/min' });
    this.layout('FL job ', n,
      headedWideCard('Accuracy and loss', 'Accuracy and loss per model version', this.quality.box),
      this.summary = card('Status'),
      this.tree = card('Aggregation tree'),
      card('Model', this.modelInfo = h('div'),
        h('div', { class: 'actions' },
          h('button', { type: 'button', class: 'primary', 'data-k': 'download-safetensors', onclick: () => this.download('safetensors') }, 'Download safetensors'),
          h('button', { type: 'button', 'data-k': 'download-onnx', onclick: () => this.download('onnx') }, 'Download ONNX')),
        this.downloadMsg = h('p', { class: 'muted', role: 'status' })),
      card('Commits per minute', this.commits.box),
      wideCard('Clients', this.clients = h('div')));
    this.every(POLL_MS, () => this.refresh());
  }

  // spec.privacy.dp: the (ε, δ) spent up to the latest version, the budget, the clip norm and
  // why the job stopped, if the budget stopped it.
  privacyRows(j) {
    const dp = j.privacy && j.privacy.dp;
    if (!dp) return [];
    const eps = (e) => (typeof e === 'number' ? fmt.num(e, 3) : '∞');
    const rows = [
      ['privacy spent (ε, δ)', `ε = ${eps(dp.epsilon)}, δ = ${dp.delta}`, 'dp-epsilon'],
      ['privacy budget', dp.budget === null ? '–' : `ε ≤ ${dp.budget}`, 'dp-budget'],
      ['DP noise, clip', `σ = ${dp.noise_multiplier}, C = ${fmt.num(dp.clip.current, 4)} (${dp.clip.mode})`, 'dp-clip'],
    ];
    if (j.reason) rows.push(['stopped', j.reason, 'reason']);
    return rows;
  }

  async refresh() {
    const j = await api('/v1/jobs/' + enc(this.name));
    this.job = j;
    const evals = j.versions.filter((v) => v.accuracy !== null);
    const [acc, loss] = this.quality.chart.data.datasets;
    acc.data = evals.map((v) => ({ x: v.version, y: v.accuracy }));
    loss.data = evals.map((v) => ({ x: v.version, y: v.loss }));
    this.quality.chart.update('none');
    // Commits per minute: versions whose commit fell in each minute-long window, sampled
    // every 5 s of job time (the status lists every version's commit time).
    const times = j.versions.filter((v) => v.version > 0).map((v) => v.elapsed_s);
    const cpm = [];
    for (let t = 0; t <= j.elapsed_s; t += 5) {
      cpm.push({ x: t, y: times.filter((e) => e > t - 60 && e <= t).length });
    }
    this.commits.chart.data.datasets[0].data = cpm.slice(-HISTORY);
    this.commits.chart.update('none');
    const last = evals[evals.length - 1];
    const recent = times.filter((e) => e > j.elapsed_s - 60).length;
    this.summary.replaceChildren(h('h2', null, 'Status'), kv([
      ['state', h('span', { class: 'state-' + j.state }, j.state), 'state'], ['algorithm', j.algorithm, 'algorithm'],
      ['model version', j.version, 'version'], ['round', j.round],
      ['latest accuracy', last ? `${fmt.pct(last.accuracy)} (version ${last.version})` : '–', 'accuracy'],
      ['latest loss', last ? fmt.num(last.loss, 4) : '–', 'loss'],
      ['best accuracy', fmt.pct(j.best_accuracy), 'best'],
      ['target accuracy', j.target_accuracy > 0 ? fmt.pct(j.target_accuracy) : '–'],
      ['clients joined / expected', `${j.clients.joined} / ${j.clients.expected}`, 'clients'],
      ['updates', fmt.num(j.updates_total), 'updates'], ['commits in the last minute', recent, 'cpm'],
      ['running for', fmt.secs(j.elapsed_s)], ['GPU fold fallbacks', j.gpu_fallbacks],
      ...this.privacyRows(j)]));
    this.modelInfo.replaceChildren(kv([
      ['architecture', j.model.architecture], ['hidden', j.model.hidden], ['parameters', fmt.num(j.model.params)]]));
    let leaf = null;
    try { leaf = await api('/v1/functions/' + enc(j.leaf_function)); } catch (e) {
      if (e instanceof AuthError || e.status !== 404) throw e;
    }
    const leaves = leaf ? (leaf.status.instances || []) : [];
    this.tree.replaceChildren(h('h2', null, 'Aggregation tree'), h('div', { class: 'tree' }, h('ul', null,
      h('li', null, h('strong', null, 'top: the coordinator'), ` (${j.algorithm}) commits version ${j.version}`,
        h('ul', null, leaves.length === 0
          ? h('li', { class: 'muted' }, `no leaf running (${j.leaf_function} starts on the next update)`)
          : leaves.map((i) => h('li', { 'data-leaf': i.id }, h('strong', null, `leaf ${i.id}`),
            ` (${i.state}, pid ${i.pid}): ${i.inflight} updates folding now (fan-in), ${fmt.num(i.served)} folded`)))))),
    h('p', { class: 'muted' }, `leaves: the instances of ${j.leaf_function} (up to the job's maxLeaves, ` +
      'each folding up to maxFanIn updates at once); the top adds their partial sums when it commits.'));
    // Every client with its staleness; FedCompass jobs group them by the scheduler's arrival
    // group, other jobs (every client trains the job's local steps) list them in one table.
    const compass = !!j.compass;
    const cs = j.clients.list || [];
    const dash = (v) => (v === null || v === undefined ? '–' : v);
    const groupOf = (c) => {
      if (!c.group) return 'not grouped yet (first round)';
      if (!c.group.open) return `group ${c.group.id} (closed)`;
      const t = c.group.expected_arrival_s - j.elapsed_s;
      return `group ${c.group.id}: expected at ${fmt.num(c.group.expected_arrival_s, 1)} s` +
        (t >= 0 ? ` (in ${fmt.num(t, 1)} s)` : ` (${fmt.num(-t, 1)} s ago)`);
    };
    const groups = new Map();
    for (const c of cs) {
      const k = compass ? groupOf(c) : '';
      if (!groups.has(k)) groups.set(k, []);
      groups.get(k).push(c);
    }
    const ids = [];
    const rows = [];
    // Open groups by expected arrival, the rest after them.
    const order = [...groups.entries()].sort(([, a], [, b]) => {
      const at = (m) => (m[0].group && m[0].group.open ? m[0].group.expected_arrival_s : Infinity);
      return at(a) - at(b);
    });
    for (const [g, members] of order) {
      for (const c of members) {
        ids.push(c.id);
        const row = [c.id, c.name, c.updates, dash(c.staleness), c.max_staleness, c.last_update_steps];
        if (compass) {
          row.unshift(c.group ? c.group.id : '–');
          row.push(c.speed_s_per_step === null ? '–' : fmt.num(c.speed_s_per_step * 1000, 2), dash(c.assigned_steps));
        }
        rows.push({ g, row });
      }
    }
    const cols = [{ title: 'client' }, { title: 'name' }, { title: 'updates', num: true },
      { title: 'staleness', num: true, key: 'staleness' }, { title: 'max staleness', num: true, key: 'max-staleness' },
      { title: 'last update steps', num: true }];
    if (compass) {
      cols.unshift({ title: 'group', key: 'group' });
      cols.push({ title: 'ms per step', num: true }, { title: 'assigned steps', num: true, key: 'assigned-steps' });
    }
    const note = 'staleness: versions committed since the model its latest accepted update was trained from; ' +
      'max staleness: the most any of its updates lagged on arrival.';
    if (cs.length === 0) {
      this.clients.replaceChildren(h('p', { class: 'muted' }, `${j.clients.joined} clients joined, none has sent an update yet.`));
    } else if (!compass) {
      this.clients.replaceChildren(h('p', { class: 'muted' }, note),
        table(cols, rows.map((r) => r.row), (i) => ({ 'data-client': ids[i] })));
    } else {
      // One table per arrival group, headed by when the scheduler expects it.
      const body = [h('p', { class: 'muted' }, 'FedCompass assigns each client its local steps from its measured speed ' +
        'so that the clients of an arrival group arrive together; ' + note)];
      for (const [g] of order) {
        const mine = rows.filter((r) => r.g === g);
        body.push(h('h3', { 'data-group-heading': mine[0].row[0] }, g),
          table(cols, mine.map((r) => r.row), (i) => ({ 'data-client': mine[i].row[1] })));
      }
      this.clients.replaceChildren(...body);
    }
  }

  async download(format) {
    const n = this.name;
    this.downloadMsg.textContent = 'downloading…';
    try {
      const r = await request(`/v1/jobs/${enc(n)}/model?format=${format}`);
      const version = r.headers.get('X-Shoal-Model-Version');
      const blob = await r.blob();
      // The digest lets the user check the file against `shoal fl model` or sha256sum.
      const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', await blob.arrayBuffer()));
      const sha256 = [...digest].map((b) => b.toString(16).padStart(2, '0')).join('');
      const a = h('a', { href: URL.createObjectURL(blob), download: `${n}-v${version}.${format}` });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(a.href), 10000);
      this.downloadMsg.replaceChildren(`version ${version}, ${fmt.bytes(blob.size)} (${format}), sha256 `,
        h('code', { 'data-k': 'sha256' }, sha256));
    } catch (e) {
      if (e instanceof AuthError) { showTokenPanel(e.message); return; }
      this.downloadMsg.textContent = e.message;
    }
  }
}
