// Shoal's web console: one page, hash routes, plain JavaScript over the /v1 API of the
// listener that served it: a node's (shoald's control listener) or the cluster's
// (shoal-controller; its pages show the nodes and the functions' placements). Every data call
// carries the bearer token the user gave once (kept in sessionStorage, this tab only; or read
// from ?token= once and dropped from the address).
// The overview follows GET /v1/events (server-sent events: a snapshot every second, opened
// with a one-connection ticket because EventSource sends no Authorization header) and falls back
// to polling when that fails; the other pages poll their /v1 resources every second. Series over
// time (req/s, replicas, latency) are built here from successive samples, so they start when
// the page opens.
//
// This file routes the hash to a page and wires the token panel; the pages and what they share
// are modules beside it (index.html loads it as a module after Chart.js).

import { api, AuthError, setToken, showTokenPanel, token } from './api.js';
import { ClusterFunctionPage, ClusterOverview } from './cluster_pages.js';
import { h, link, setStatus } from './dom.js';
import { FunctionPage } from './function_page.js';
import { JobPage } from './job_page.js';
import { ModelPage } from './model_page.js';
import { Overview } from './overview.js';
import { Page } from './page.js';

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
  setToken(document.getElementById('token-input').value.trim());
  document.getElementById('token-input').value = '';
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
