// The console's bearer token and its calls to the /v1 API of the listener that served the page.
// The token is kept in sessionStorage (this tab only), or read from ?token= once and dropped
// from the address; every call carries it, and a 401 surfaces as an AuthError.

const TOKEN_KEY = 'shoal.token';

export let token = sessionStorage.getItem(TOKEN_KEY) || '';
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

// The token the user gave in the token panel, kept for this tab.
export function setToken(value) {
  token = value;
  sessionStorage.setItem(TOKEN_KEY, token);
}

export class AuthError extends Error {}

export function showTokenPanel(message) {
  const panel = document.getElementById('token-panel');
  panel.hidden = false;
  document.getElementById('token-msg').textContent = message || '';
  document.getElementById('token-input').focus();
}

export async function request(path, method = 'GET') {
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

export const api = async (path) => (await request(path)).json();
