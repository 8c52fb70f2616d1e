// The cluster's pages on shoal-controller: the overview (control plane, nodes, functions and their
// placements) and a cluster function's placements, each linking to the nodes' own consoles.

import { api } from './api.js';
import { card, enc, fmt, h, headedWideCard, kv, link, table, wideCard } from './dom.js';
import { Page, POLL_MS } from './page.js';

// A node's own console, at its control API (the node registers that address; a node's
// tokens are its own, so its console asks for one of them).
const nodeConsole = (node, route) => node && node.control ? `${node.control}/ui/#/${route || ''}` : null;
const MIB = 1024 * 1024;

export class ClusterOverview extends Page {
  start() {
    this.main.replaceChildren(
      h('h1', null, 'Cluster ', h('span', { 'data-k': 'cluster' })),
      h('div', { class: 'grid' },
        this.clusterCard = card('Control plane', h('p', { class: 'muted' }, 'loading')),
        wideCard('Nodes', this.nodeBox = h('div')),
        headedWideCard('Functions', 'Functions and their placements', this.fnBox = h('div')),
        headedWideCard('FL jobs', 'FL jobs and their tops', this.jobBox = h('div'))));
    this.every(POLL_MS, () => this.refresh());
  }

  async refresh() {
    const [c, nodes, fns, jobs] = await Promise.all([api('/v1/cluster'), api('/v1/nodes'),
      api('/v1/functions'), api('/v1/jobs')]);
    document.getElementById('node-name').textContent = `cluster ${c.cluster}`;
    this.main.querySelector('h1 [data-k=cluster]').textContent = c.cluster;
    this.clusterCard.replaceChildren(h('h2', null, 'Control plane'), kv([
      ['cluster', c.cluster, 'cluster_name'], ['etcd prefix', c.prefix],
      ['this controller', `${c.controller} (${c.is_leader ? 'leader' : 'standby'})`, 'controller'],
      ['leader', c.leader || '– (none elected)', 'leader'], ['nodes ready', c.nodes, 'nodes'],
      ['functions', fns.functions.length, 'functions'], ['FL jobs', jobs.jobs.length, 'jobs']]));
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
    // Each FL job runs on its top (the node the controller chose); its page is on that node's
    // console. The figures are what the top last published (etcd).
    const jl = jobs.jobs;
    this.jobBox.replaceChildren(jl.length === 0 ? h('p', { class: 'muted' }, 'No FL jobs deployed.') : table(
      [{ title: 'job' }, { title: 'namespace' }, { title: 'algorithm', key: 'algorithm' },
        { title: 'top', key: 'top' }, { title: 'state', key: 'state' },
        { title: 'version', num: true, key: 'version' }, { title: 'clients', num: true, key: 'clients' },
        { title: 'updates', num: true, key: 'updates' }, { title: 'best accuracy', num: true, key: 'accuracy' }],
      jl.map((j) => {
        const url = nodeConsole(byName.get(j.top), 'job/' + enc(j.name));
        return [j.name, j.namespace, j.algorithm || '–',
          url ? h('a', { href: url, 'data-top': j.top }, j.top) : h('span', { 'data-top': j.top }, j.top),
          j.state, j.version ?? '–', j.clients ? j.clients.joined : '–', j.updates_total ?? '–',
          j.best_accuracy > 0 ? fmt.num(j.best_accuracy, 4) : '–'];
      }), (i) => ({ 'data-job': jl[i].name })));
  }
}

export class ClusterFunctionPage extends Page {
  constructor(main, name) { super(main); this.name = name; }
  start() {
    this.layout('Cluster function ', this.name,
      this.summary = card('Function'),
      wideCard('Placements', this.placements = h('div'),
        h('p', { class: 'muted' }, "Each node runs the function within its placement's scale; " +
          "its instances, requests and logs are on that node's console.")));
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
