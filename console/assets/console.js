// Shoal's web console: one page, hash routes, plain JavaScript over the /v1 API of the
// listener that served it: a node's (shoald's control listener) or the cluster's
// (shoal-controller; its pages show the nodes and the functions' placements). Every data call carries the bearer token the user gave once (kept
// in sessionStorage, this tab only; or read from ?token= once and dropped from the address).
// The overview follows GET /v1/events (server-sent events: a snapshot every second, opened
// with a one-connection ticket because EventSource sends no Authorization header) and falls back
// to polling when that fails; the other pages poll their /v1 resources every second. Series over
// time (req/s, replicas, latency) are built here from successive samples, so they start when
// the page opens.
'use strict';

(() => {
  const POLL_MS = 1000;
  const LOG_POLL_MS = 2000;
  const STREAM_RETRY_MS = 15000;  // after a stream fails, poll this long before trying again
  const HISTORY = 600;           // samples kept per series (10 minutes at 1 s)
  const LOG_TAIL_BYTES = 64 << 10;
  const TOKEN_KEY = 'shoal.token';
  const COLORS = ['#1f5fbf', '#d9480f', '#2b8a3e', '#862e9c', '#c2255c', '#0b7285', '#5c940d',
    '#e67700', '#364fc7', '#495057'];

  // ---- token -------------------------------------------------------------------------------

  let token = sessionStorage.getItem(TOKEN_KEY) || '';
  {
    const params = new URLSearchParams(location.search);
    if (params.has('token')) {
      token = params.get('token').trim();
      sessionStorage.setItem(TOKEN_KEY, token);
      params.delete('token');
      const q = params.toString();
      history.replaceState(null, '', location.pathname + (q ? '?' + q : '') + location.hash);
    }
  }

  class AuthError extends Error {}

  function showTokenPanel(message) {
    const panel = document.getElementById('token-panel');
    panel.hidden = false;
    document.getElementById('token-msg').textContent = message || '';
    document.getElementById('token-input').focus();
  }

  // ---- HTTP --------------------------------------------------------------------------------

  async function request(path, method = 'GET') {
    if (!token) throw new AuthError('a bearer token is needed to read the API');
    const r = await fetch(path, { method, headers: { Authorization: 'Bearer ' + token }, cache: 'no-store' });
    if (r.status === 401) {
      throw new AuthError('the token was refused (401): ' + (await errorText(r)));
    }
    if (!r.ok) {
      const e = new Error(`${path}: ${r.status} ${await errorText(r)}`);
      e.status = r.status;
      throw e;
    }
    return r;
  }

  async function errorText(r) {
    const text = await r.text();
    try { return JSON.parse(text).error || text; } catch (_) { return text || r.statusText; }
  }

  const api = async (path) => (await request(path)).json();

  // ---- DOM ---------------------------------------------------------------------------------

  // h('td', {class: 'num'}, 'text', node, ...): text is always set as text, never as HTML.
  function h(tag, attrs, ...children) {
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

  const fmt = {
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

  const kv = (pairs) => h('dl', { class: 'kv' },
    pairs.map(([k, v, key]) => [h('dt', null, k), h('dd', { 'data-k': key }, v)]));

  function table(columns, rows, rowAttrs) {
    // columns: [{title, num?, key?}], rows: arrays of cell contents.
    return h('div', { class: 'table', tabindex: '0', role: 'region', 'aria-label': 'table' },
      h('table', null,
        h('thead', null, h('tr', null, columns.map((c) => h('th', { class: c.num ? 'num' : null, scope: 'col' }, c.title)))),
        h('tbody', null, rows.length === 0
          ? h('tr', null, h('td', { colspan: columns.length, class: 'muted' }, 'none'))
          : rows.map((cells, i) => h('tr', rowAttrs ? rowAttrs(i) : null,
            cells.map((c, j) => h('td', { class: columns[j].num ? 'num' : null, 'data-k': columns[j].key }, c)))))));
  }

  const card = (title, ...body) => h('section', { class: 'card', 'aria-label': title }, h('h2', null, title), ...body);
  const link = (href, text) => h('a', { href }, text);
  const enc = encodeURIComponent;

  function setStatus(text, isError) {
    const s = document.getElementById('status');
    s.textContent = text;
    s.className = isError ? 'error' : '';
  }

  // ---- charts ------------------------------------------------------------------------------

  // Times on the x axis are seconds since this page opened (Chart.js's time scale needs a date
  // adapter that Debian does not package).
  const t0 = performance.now();
  const now = () => (performance.now() - t0) / 1000;

  function lineChart(title, datasets, opts = {}) {
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

  function push(series, point) {
    series.push(point);
    if (series.length > HISTORY) series.splice(0, series.length - HISTORY);
  }

  // ---- pages -------------------------------------------------------------------------------

  // A page renders into <main> and polls; stop() ends its timers and charts.
  class Page {
    constructor(main) { this.main = main; this.timers = []; this.charts = []; this.stopped = false; }
    every(ms, fn) {
      const loop = async () => {
        if (this.stopped) return;
        try {
          await fn();
          setStatus('updated ' + new Date().toLocaleTimeString());
        } catch (e) {
          if (e instanceof AuthError) { showTokenPanel(e.message); this.stop(); return; }
          setStatus(e.message, true);
        }
        if (!this.stopped) this.timers.push(setTimeout(loop, ms));
      };
      loop();
    }
    // Follows GET /v1/events: render(snapshot) for each snapshot event. Polls with poll()
    // instead where EventSource is missing, and for a while after the stream fails or ends
    // (then a new ticket is asked for).
    live(render, poll) {
      const fallback = () => {
        const retryAt = Date.now() + STREAM_RETRY_MS;
        const loop = async () => {
          if (this.stopped) return;
          if (typeof EventSource === 'function' && Date.now() >= retryAt) { open(); return; }
          try {
            await poll();
            setStatus('updated ' + new Date().toLocaleTimeString());
          } catch (e) {
            if (e instanceof AuthError) { showTokenPanel(e.message); this.stop(); return; }
            setStatus(e.message, true);
          }
          if (!this.stopped) this.timers.push(setTimeout(loop, POLL_MS));
        };
        loop();
      };
      const open = async () => {
        if (this.stopped) return;
        let ticket;
        try {
          ticket = (await (await request('/v1/events/ticket', 'POST')).json()).ticket;
        } catch (e) {
          if (e instanceof AuthError) { showTokenPanel(e.message); this.stop(); return; }
          fallback();
          return;
        }
        if (this.stopped) return;
        const source = new EventSource('/v1/events?ticket=' + encodeURIComponent(ticket));
        this.source = source;
        const fail = () => {
          source.close();
          if (this.source !== source) return;
          this.source = null;
          fallback();
        };
        source.addEventListener('snapshot', (ev) => {
          try {
            render(JSON.parse(ev.data));
            // How many snapshots this page has had from the stream (tests read it).
            document.body.dataset.liveEvents = String(Number(document.body.dataset.liveEvents || 0) + 1);
            setStatus('live ' + new Date().toLocaleTimeString());
          } catch (e) {
            setStatus(e.message, true);
          }
        });
        source.addEventListener('end', fail);  // the token was revoked, or lost its role
        source.onerror = fail;  // a ticket is good once: never let EventSource reconnect itself
      };
      if (typeof EventSource === 'function') open(); else fallback();
    }
    chart(...args) { const c = lineChart(...args); this.charts.push(c.chart); return c; }
    stop() {
      this.stopped = true;
      if (this.source) { this.source.close(); this.source = null; }
      this.timers.forEach(clearTimeout);
      this.charts.forEach((c) => c.destroy());
    }
  }

  const isInference = (f) => f.handler && f.handler.builtin === 'inference';
  const modelName = (f) => (f.handler.env && f.handler.env.SHOAL_INFER_MODEL) || f.name;
  const latestEval = (job) => [...(job.versions || [])].reverse().find((v) => v.accuracy !== null);

  class Overview extends Page {
    start() {
      const rps = this.chart('Requests per second by function', [], { yTitle: 'req/s' });
      this.rps = rps;
      this.main.replaceChildren(
        h('h1', null, 'Overview'),
        h('div', { class: 'grid' },
          this.nodeCard = card('Node', h('p', { class: 'muted' }, 'loading')),
          this.poolCard = card('Pool per tenant', h('p', { class: 'muted' }, 'loading')),
          h('section', { class: 'card wide', 'aria-label': 'Functions' }, h('h2', null, 'Functions'), this.fnBox = h('div')),
          h('section', { class: 'card wide', 'aria-label': 'Request rate' },
            h('h2', null, 'Requests per second (since this page opened)'), rps.box),
          h('section', { class: 'card wide', 'aria-label': 'FL jobs' }, h('h2', null, 'FL jobs'), this.jobBox = h('div')),
          h('section', { class: 'card wide', 'aria-label': 'Inference models' }, h('h2', null, 'Inference models'), this.modelBox = h('div'))));
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

  class FunctionPage extends Page {
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
      this.main.replaceChildren(
        h('h1', null, 'Function ', h('span', { 'data-k': 'name' }, n)),
        h('div', { class: 'grid' },
          h('section', { class: 'card wide', 'aria-label': 'Replicas' },
            h('h2', null, 'Replicas desired vs actual, and request rate (▲ = cold start)'), this.replicas.box),
          this.summary = card('Status'),
          this.decision = card('Autoscaler'),
          h('section', { class: 'card wide', 'aria-label': 'Latency' }, h('h2', null, 'Latency'), this.latency.box),
          h('section', { class: 'card wide', 'aria-label': 'Instances' }, h('h2', null, 'Instances'), this.instances = h('div')),
          h('section', { class: 'card wide', 'aria-label': 'Logs' }, h('h2', null, 'Logs (tail)'),
            this.logs = h('pre', { class: 'logs', tabindex: '0', 'aria-label': `logs of ${n}` }))));
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

  class JobPage extends Page {
    constructor(main, name) { super(main); this.name = name; }
    start() {
      const n = this.name;
      this.quality = this.chart(`Accuracy and loss per model version of ${n}`, [
        { label: 'accuracy', yAxisID: 'y', pointRadius: 3 },
        { label: 'loss', yAxisID: 'y1', pointRadius: 3 },
      ], { xTitle: 'model version', yTitle: 'accuracy', y: { max: 1 }, y1Title: 'loss' });
      this.commits = this.chart(`Commits per minute of ${n}`, [{ label: 'versions committed per minute', stepped: true }],
        { xTitle: 'job time (s)', yTitle: 'commits/min' });
      this.main.replaceChildren(
        h('h1', null, 'FL job ', h('span', { 'data-k': 'name' }, n)),
        h('div', { class: 'grid' },
          h('section', { class: 'card wide', 'aria-label': 'Accuracy and loss' },
            h('h2', null, 'Accuracy and loss per model version'), this.quality.box),
          this.summary = card('Status'),
          this.tree = card('Aggregation tree'),
          h('section', { class: 'card', 'aria-label': 'Model' }, h('h2', null, 'Model'),
            this.modelInfo = h('div'),
            h('div', { class: 'actions' },
              h('button', { type: 'button', class: 'primary', 'data-k': 'download-safetensors', onclick: () => this.download('safetensors') }, 'Download safetensors'),
              h('button', { type: 'button', 'data-k': 'download-onnx', onclick: () => this.download('onnx') }, 'Download ONNX')),
            this.downloadMsg = h('p', { class: 'muted', role: 'status' })),
          h('section', { class: 'card', 'aria-label': 'Commits per minute' }, h('h2', null, 'Commits per minute'), this.commits.box),
          h('section', { class: 'card wide', 'aria-label': 'Clients' }, h('h2', null, 'Clients'), this.clients = h('div'))));
      this.every(POLL_MS, () => this.refresh());
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
        ['running for', fmt.secs(j.elapsed_s)], ['GPU fold fallbacks', j.gpu_fallbacks]]));
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

  class ModelPage extends Page {
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
      this.main.replaceChildren(
        h('h1', null, 'Model served by ', h('span', { 'data-k': 'name' }, n)),
        h('div', { class: 'grid' },
          this.summary = card('Serving'),
          h('section', { class: 'card', 'aria-label': 'Batch sizes' }, h('h2', null, 'Batch-size histogram'), this.hist.box),
          h('section', { class: 'card wide', 'aria-label': 'Version served' },
            h('h2', null, 'Version served over time, and request rate'), this.serving.box),
          h('section', { class: 'card wide', 'aria-label': 'Latency' }, h('h2', null, 'Latency'), this.latency.box)));
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

  // ---- cluster pages (shoal-controller) ----------------------------------------------------

  // A node's own console, at its control API (the node registers that address; a node's
  // tokens are its own, so its console asks for one of them).
  const nodeConsole = (node, route) => node && node.control ? `${node.control}/ui/#/${route || ''}` : null;
  const MIB = 1024 * 1024;

  class ClusterOverview extends Page {
    start() {
      this.main.replaceChildren(
        h('h1', null, 'Cluster ', h('span', { 'data-k': 'cluster' })),
        h('div', { class: 'grid' },
          this.clusterCard = card('Control plane', h('p', { class: 'muted' }, 'loading')),
          h('section', { class: 'card wide', 'aria-label': 'Nodes' }, h('h2', null, 'Nodes'), this.nodeBox = h('div')),
          h('section', { class: 'card wide', 'aria-label': 'Functions' },
            h('h2', null, 'Functions and their placements'), this.fnBox = h('div'))));
      this.every(POLL_MS, () => this.refresh());
    }

    async refresh() {
      const [c, nodes, fns] = await Promise.all([api('/v1/cluster'), api('/v1/nodes'), api('/v1/functions')]);
      document.getElementById('node-name').textContent = `cluster ${c.cluster}`;
      this.main.querySelector('h1 [data-k=cluster]').textContent = c.cluster;
      this.clusterCard.replaceChildren(h('h2', null, 'Control plane'), kv([
        ['cluster', c.cluster, 'cluster_name'], ['etcd prefix', c.prefix],
        ['this controller', `${c.controller} (${c.is_leader ? 'leader' : 'standby'})`, 'controller'],
        ['leader', c.leader || '– (none elected)', 'leader'], ['nodes ready', c.nodes, 'nodes'],
        ['functions', fns.functions.length, 'functions']]));
      const byName = new Map(nodes.nodes.map((n) => [n.name, n]));
      const list = nodes.nodes;
      this.nodeBox.replaceChildren(table(
        [{ title: 'node', key: 'name' }, { title: 'gateway', key: 'address' }, { title: 'console' },
          { title: 'cores', num: true, key: 'cores' }, { title: 'memory', num: true, key: 'memory' },
          { title: 'GPUs', num: true, key: 'gpus' }, { title: 'status', key: 'status' }, { title: 'lease', key: 'lease' },
          { title: 'version' }, { title: 'cold start p50', num: true }, { title: 'cached functions', num: true },
          { title: 'up for' }],
        list.map((n) => {
          const url = nodeConsole(n);
          return [n.name, n.address, url ? h('a', { href: url, 'data-console': n.name }, n.control) : h('span', { class: 'muted' }, 'unknown'),
            n.cores, fmt.bytes(n.memory_mib * MIB), n.gpus, h('span', { class: n.status === 'Ready' ? 'state-ready' : '' }, n.status),
            n.lease, n.version, fmt.num(n.cold_start_ms, 1) + ' ms', (n.cached_functions || []).length,
            n.started_unix_ms ? fmt.secs((Date.now() - n.started_unix_ms) / 1000) : '–'];
        }), (i) => ({ 'data-node': list[i].name })));
      const fl = fns.functions;
      this.fnBox.replaceChildren(table(
        [{ title: 'function' }, { title: 'namespace' }, { title: 'generation', num: true },
          { title: 'placed on', key: 'placements' }, { title: 'updated' }],
        fl.map((f) => [link('#/fn/' + enc(f.name), f.name), f.namespace, f.generation,
          f.placements.length === 0 ? h('span', { class: 'muted' }, 'not placed yet')
            : f.placements.map((p, i) => {
              const url = nodeConsole(byName.get(p.node), 'fn/' + enc(f.name));
              return [i ? ', ' : '', url ? h('a', { href: url, 'data-placement': p.node }, p.node)
                : h('span', { 'data-placement': p.node }, p.node), ` (${p.min}…${p.max})`];
            }),
          f.updated_unix_ms ? new Date(f.updated_unix_ms).toLocaleString() : '–']),
        (i) => ({ 'data-fn': fl[i].name })));
    }
  }

  class ClusterFunctionPage extends Page {
    constructor(main, name) { super(main); this.name = name; }
    start() {
      this.main.replaceChildren(
        h('h1', null, 'Cluster function ', h('span', { 'data-k': 'name' }, this.name)),
        h('div', { class: 'grid' },
          this.summary = card('Function'),
          h('section', { class: 'card wide', 'aria-label': 'Placements' }, h('h2', null, 'Placements'),
            this.placements = h('div'),
            h('p', { class: 'muted' }, "Each node runs the function within its placement's scale; " +
              "its instances, requests and logs are on that node's console."))));
      this.every(POLL_MS, () => this.refresh());
    }

    async refresh() {
      const [f, nodes] = await Promise.all([api('/v1/functions/' + enc(this.name)), api('/v1/nodes')]);
      const byName = new Map(nodes.nodes.map((n) => [n.name, n]));
      const when = (ms) => (ms ? new Date(ms).toLocaleString() : '–');
      this.summary.replaceChildren(h('h2', null, 'Function'), kv([
        ['namespace', f.namespace, 'namespace'], ['id', f.id], ['generation', f.generation, 'generation'],
        ['created', when(f.created_unix_ms)], ['updated', when(f.updated_unix_ms)]]));
      this.placements.replaceChildren(table(
        [{ title: 'node' }, { title: 'min', num: true }, { title: 'max', num: true },
          { title: 'generation', num: true }, { title: "on the node's console" }],
        f.placements.map((p) => {
          const n = byName.get(p.node);
          const url = nodeConsole(n, 'fn/' + enc(f.name));
          return [p.node, p.min, p.max, p.generation,
            url ? h('a', { href: url }, `${p.node}: ${f.name}`) : h('span', { class: 'muted' }, n ? 'address unknown' : 'node gone')];
        }), (i) => ({ 'data-placement': f.placements[i].node })));
    }
  }

  class NotFoundPage extends Page {
    start() {
      this.main.replaceChildren(h('h1', null, 'Not found'), h('p', null, 'No page at ', h('code', null, location.hash), '. ', link('#/', 'Overview')));
    }
  }

  // ---- router ------------------------------------------------------------------------------

  let page = null;
  let routeSeq = 0;

  // Which server the page talks to (GET /v1/ui-info): a node's control API ("shoald") or the
  // cluster's (shoal-controller). Asked once per token.
  let server = null;
  async function detectServer() {
    if (!server) server = (await api('/v1/ui-info')).server === 'shoal-controller' ? 'cluster' : 'node';
    return server;
  }

  function makePage(main, kind, name) {
    if (server === 'cluster') {
      if (!kind) return new ClusterOverview(main);
      if (kind === 'fn' && name) return new ClusterFunctionPage(main, name);
      return new NotFoundPage(main);
    }
    if (!kind) return new Overview(main);
    if (kind === 'fn' && name) return new FunctionPage(main, name);
    if (kind === 'job' && name) return new JobPage(main, name);
    if (kind === 'model' && name) return new ModelPage(main, name);
    return new NotFoundPage(main);
  }

  function route() {
    if (page) page.stop();
    page = null;
    const seq = ++routeSeq;
    const main = document.getElementById('main');
    const parts = location.hash.replace(/^#\/?/, '').split('/').map(decodeURIComponent);
    const [kind, name] = parts;
    document.title = (kind && name ? `${name} · ` : '') + 'Shoal console';
    for (const a of document.querySelectorAll('header nav a')) {
      a.toggleAttribute('aria-current', a.getAttribute('href') === (location.hash || '#/'));
    }
    if (!token) {
      main.replaceChildren(h('h1', null, 'Shoal console'), h('p', null,
        'Paste a bearer token above (shoald, or shoal-controller for the cluster console, printed the admin token at its first start; it is in ',
        h('code', null, '<state_dir>/admin.conf'), '; ', h('code', null, 'shoal token create --role viewer'), ' makes a read-only one).'));
      showTokenPanel('');
      return;
    }
    detectServer().then(() => {
      if (seq !== routeSeq) return;  // the user moved on meanwhile
      page = makePage(main, kind, name);
      page.start();
      main.focus({ preventScroll: true });
    }, (e) => {
      if (seq !== routeSeq) return;
      if (e instanceof AuthError) showTokenPanel(e.message);
      else setStatus(e.message, true);
    });
  }

  document.getElementById('token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    token = document.getElementById('token-input').value.trim();
    document.getElementById('token-input').value = '';
    sessionStorage.setItem(TOKEN_KEY, token);
    server = null;
    document.getElementById('token-panel').hidden = true;
    route();
  });
  document.getElementById('token-button').addEventListener('click', () => {
    const panel = document.getElementById('token-panel');
    if (panel.hidden) showTokenPanel(''); else panel.hidden = true;
  });
  window.addEventListener('hashchange', route);
  route();
})();
