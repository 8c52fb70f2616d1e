// A page of the console: it renders into <main>, refreshes by polling or from the server-sent
// events of GET /v1/events, and stop() ends its timers, stream and charts.

import { AuthError, request, showTokenPanel } from './api.js';
import { lineChart } from './charts.js';
import { h, setStatus } from './dom.js';

export const POLL_MS = 1000;
const STREAM_RETRY_MS = 15000;  // after a stream fails, poll this long before trying again

export class Page {
  constructor(main) { this.main = main; this.timers = []; this.charts = []; this.stopped = false; }
  // The page of one thing: its heading (`kind`, then `name` in a data-k="name" span) over a
  // grid of cards.
  layout(kind, name, ...cards) {
    this.main.replaceChildren(h('h1', null, kind, h('span', { 'data-k': 'name' }, name)),
      h('div', { class: 'grid' }, ...cards));
  }
  // Runs fn now and again `ms` after each run ends, the outcome in the status line, until the
  // page stops, the token is refused, or until() says so before a run.
  every(ms, fn, until = () => false) {
    const loop = async () => {
      if (this.stopped || until()) return;
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
      this.every(POLL_MS, poll, () => {
        if (typeof EventSource !== 'function' || Date.now() < retryAt) return false;
        open();
        return true;
      });
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
