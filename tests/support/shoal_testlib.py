"""Start-up code the Python integration tests share: real Shoal processes and a browser.

A standalone shoald on ephemeral ports with its own state dir (StandaloneShoald), a cluster of a
real etcd, a shoal-controller and a cluster-mode shoald (Cluster), /v1 calls with a bearer token
(ControlApi), and a headless Chromium driven over the DevTools Protocol (Browser). Debian's
/usr/bin/python3 standard library only; Browser needs python3-websocket (see skip_reason).
"""

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

try:
    import websocket  # Debian's python3-websocket
except ImportError:  # pragma: no cover - reported as a skip by skip_reason
    websocket = None

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("SHOAL_BIN_DIR", os.path.join(ROOT, "build", "bin"))
ETCD = "/usr/bin/etcd"
CHROMIUM = os.environ.get("SHOAL_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = os.environ.get("SHOAL_TEST_OUTPUT",
                             os.path.join(ROOT, "build", "test-output", "console"))

# The environment a `shoal` or `shoal-client` child gets: nothing of the caller's but PATH.
BASE_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}

BUILTIN_FUNCTION = """apiVersion: shoal.dev/v1
kind: Function
metadata: {{name: {name}}}
spec:
  handler: {{builtin: {builtin}}}
{spec}"""


def digits_fljob(algorithm, hidden, clients, rounds, local_steps, max_fan_in, max_leaves):
    """The manifest of FLJob `digits`: an MLP (seed 1) on the digits data set, learning rate
    0.1, batches of 32 (what shoal_client_argv's clients train)."""
    return f"""apiVersion: shoal.dev/v1
kind: FLJob
metadata: {{name: digits}}
spec:
  algorithm: {{name: {algorithm}}}
  model: {{architecture: mlp, hidden: {hidden}, seed: 1}}
  data: {{dataset: digits}}
  clients: {{expected: {clients}}}
  stop: {{rounds: {rounds}}}
  training: {{localSteps: {local_steps}, learningRate: 0.1, batchSize: 32}}
  aggregation: {{maxFanIn: {max_fan_in}, maxLeaves: {max_leaves}}}
"""


def skip_reason(binaries, chromium=False, etcd=False):
    """Why a test of live processes cannot run here, or None: root, then (as asked) the
    browser and etcd, then each of `binaries` under BIN."""
    if os.geteuid() != 0:
        return "shoald needs root (its pools, BPF programs and instance sandboxes)"
    if chromium:
        if websocket is None:
            return "python3-websocket (Debian) is missing: cannot drive Chromium over CDP"
        if not os.access(CHROMIUM, os.X_OK):
            return f"{CHROMIUM} is missing (Debian chromium)"
    if etcd and not os.access(ETCD, os.X_OK):
        return f"{ETCD} is missing (Debian etcd-server)"
    for b in binaries:
        if not os.access(os.path.join(BIN, b), os.X_OK):
            return f"{BIN}/{b} is not built"
    return None


# ---------------------------------------------------------------- HTTP


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url, data=None, headers=None, method=None, timeout=10):
    """(status, body as text) of one request; an HTTP error status is returned, not raised."""
    req = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def wait_until_answers(probe, timeout=30, interval=0.1):
    """True once probe() is true; an OSError from it (the server not listening yet) is a no."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if probe():
                return True
        except OSError:
            pass
        time.sleep(interval)
    return False


def admin_token(state_dir):
    """The admin token a shoald or shoal-controller wrote to <state_dir>/admin.conf."""
    with open(os.path.join(state_dir, "admin.conf")) as f:
        return re.search(r"^token: (\S+)$", f.read(), re.M).group(1)


class ControlApi:
    """A control API (/v1 of shoald or shoal-controller) called with a bearer token."""

    def __init__(self, url, token):
        self.url, self.token = url, token

    def request(self, path, data=None, method=None, token=None, headers=None):
        """(status, body) unchecked; `token` stands in for the admin token."""
        h = {"Authorization": f"Bearer {token or self.token}", **(headers or {})}
        return http(self.url + path, data=data, headers=h, method=method)

    def __call__(self, path, data=None):
        """The parsed JSON body of a call that must answer 200 or 201 (`data`: a JSON body)."""
        headers = {"Content-Type": "application/json"} if data is not None else None
        code, body = self.request(path, data=data, headers=headers)
        assert code in (200, 201), (path, code, body)
        return json.loads(body)


# ---------------------------------------------------------------- processes


def stop_child(p, timeout):
    """SIGTERM, then SIGKILL if `p` has not exited within `timeout` seconds."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class Proc:
    """A child process with its log in a file; stopped (SIGTERM, then SIGKILL) on close."""

    def __init__(self, argv, log, env=None):
        self.log_path = log
        self.logf = open(log, "ab")
        self.p = subprocess.Popen(argv, stdout=self.logf, stderr=subprocess.STDOUT, env=env,
                                  stdin=subprocess.DEVNULL)

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def wait_log(self, pattern, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = re.search(pattern, self.log())
            if m:
                return m
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no '{pattern}' in {self.log_path}:\n{self.log()[-3000:]}")

    def close(self):
        stop_child(self.p, timeout=15)
        self.logf.close()


READY = r"shoald ready on http://127\.0\.0\.1:(\d+) \(data plane \w+; control API https?://127\.0\.0\.1:(\d+)\)"


def start_shoald(tmp, node, extra_args=(), extra_yaml=""):
    """shoald on ephemeral ports with its state under <tmp>/<node>, once it says it is ready:
    a Proc with port, control_port, state (that folder) and node."""
    state = os.path.join(tmp, node)
    os.makedirs(state)
    cfg = os.path.join(state, "shoald.yaml")
    with open(cfg, "w") as f:
        f.write(f"node_name: {node}\nlisten_host: 127.0.0.1\nlisten_port: 0\ncontrol_port: 0\n"
                f"state_dir: {state}/state\ngateway_threads: 2\npool: boost\n"
                f"pool_bytes: {256 << 20}\nmax_body_bytes: {64 << 20}\ndataplane: auto\n"
                f"bpf_pin_root: /sys/fs/bpf/shoal-it\n{extra_yaml}")
    proc = Proc([os.path.join(BIN, "shoald"), "-c", cfg, *extra_args],
                os.path.join(state, "shoald.log"))
    m = proc.wait_log(READY)
    proc.port, proc.control_port, proc.state = int(m.group(1)), int(m.group(2)), state
    proc.node = node
    return proc


def stop_shoald(proc):
    proc.close()
    # A shoald that did not stop cleanly leaves its pools and pins behind: this test's to remove.
    for d in ("/dev/shm", "/dev/hugepages"):
        if os.path.isdir(d):
            for f in os.listdir(d):
                if f.startswith(f"shoal.{proc.node}."):
                    try:
                        os.unlink(os.path.join(d, f))
                    except OSError:
                        pass
    shutil.rmtree(f"/sys/fs/bpf/shoal-it/{proc.node}", ignore_errors=True)


class StandaloneShoald:
    """shoald --standalone (see start_shoald), its admin token and URLs, and the `shoal` CLI
    pointed at its admin.conf. A context manager: stopped on exit."""

    def __init__(self, tmp, node, extra_yaml=""):
        self.d = start_shoald(tmp, node, ("--standalone",), extra_yaml=extra_yaml)
        self.node, self.port, self.control_port = node, self.d.port, self.d.control_port
        self.conf = os.path.join(self.d.state, "state", "admin.conf")
        self.token = admin_token(os.path.dirname(self.conf))
        self.gw = f"http://127.0.0.1:{self.port}"
        self.api_url = f"http://127.0.0.1:{self.control_port}"
        self.api = ControlApi(self.api_url, self.token)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        stop_shoald(self.d)

    def cli(self, *args, stdin=None, env=None, timeout=60):
        e = dict(BASE_ENV, SHOAL_CONFIG=self.conf)
        e.update(env or {})
        return subprocess.run([os.path.join(BIN, "shoal"), *args], input=stdin, text=True,
                              capture_output=True, env=e, timeout=timeout)

    def deploy(self, manifest):
        r = self.cli("deploy", "-f", "-", stdin=manifest)
        assert r.returncode == 0, r.stdout + r.stderr
        return r

    def status(self, fn):
        """GET /v1/functions/<fn>'s status; {} where that does not answer 200."""
        code, body = self.api.request(f"/v1/functions/{fn}")
        return json.loads(body).get("status", {}) if code == 200 else {}

    def wait_ready(self, fn, n=1, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.status(fn).get("ready", 0) >= n:
                return
            time.sleep(0.05)
        raise AssertionError(f"{fn} not ready:\n{self.d.log()[-3000:]}")


@contextlib.contextmanager
def standalone_shoald(prefix, binaries=("shoald", "shoal", "shoal-fn"), extra_yaml="",
                      also_skip_if=None):
    """A pytest test's StandaloneShoald in a temporary folder of its own (removed after): the
    test is skipped with the reason where one cannot run here (skip_reason, then
    `also_skip_if`, a reason or None)."""
    import pytest  # only the pytest tests use this

    reason = skip_reason(binaries) or also_skip_if
    if reason:
        pytest.skip(reason)
    tmp = tempfile.mkdtemp(prefix=f"shoal-{prefix}-")
    try:
        with StandaloneShoald(tmp, f"{prefix}{os.getpid()}-{os.path.basename(tmp)[-6:]}",
                              extra_yaml=extra_yaml) as s:
            yield s
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def shoal_client_argv(server, clients, time_scale, max_seconds, train_threads=None):
    """shoal-client training the FL job `digits` on the digits data set (iid, seed 3)."""
    argv = [os.path.join(BIN, "shoal-client"), "--server", server, "--job", "digits",
            "--data", "digits", "--clients", str(clients), "--partition", "iid", "--seed", "3",
            "--time-scale", time_scale]
    if train_threads is not None:
        argv += ["--train-threads", str(train_threads)]
    return argv + ["--max-seconds", str(max_seconds)]


def fl_client_env(token):
    return dict(BASE_ENV, SHOAL_TOKEN=token)


def start_etcd(tmp):
    """A one-member etcd on ephemeral ports, once healthy: (Proc, client URL)."""
    cport, pport = free_port(), free_port()
    client, peer = f"http://127.0.0.1:{cport}", f"http://127.0.0.1:{pport}"
    env = dict(os.environ, ETCD_UNSUPPORTED_ARCH=os.environ.get("ETCD_UNSUPPORTED_ARCH", ""))
    etcd = Proc([ETCD, "--name", "m0", "--data-dir", os.path.join(tmp, "etcd"),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"m0={peer}"], os.path.join(tmp, "etcd.log"), env=env)
    if not wait_until_answers(lambda: '"health":"true"' in http(f"{client}/health", timeout=1)[1]):
        raise AssertionError("etcd did not start:\n" + etcd.log()[-3000:])
    return etcd, client


def start_controller(tmp, etcd_url, cluster):
    """shoal-controller (state in <tmp>/controller) once it leads: (Proc, its port)."""
    ctl = Proc([os.path.join(BIN, "shoal-controller"), "--etcd", etcd_url, "--cluster", cluster,
                "--port", "0", "--state-dir", os.path.join(tmp, "controller")],
               os.path.join(tmp, "controller.log"))
    port = int(ctl.wait_log(r"shoal-controller ready on http://127\.0\.0\.1:(\d+)").group(1))
    ctl.wait_log(r"is the leader")
    return ctl, port


class Cluster:
    """etcd, a shoal-controller and a cluster-mode shoald (node <cluster>c<pid>) registered."""

    def __init__(self, tmp, cluster):
        self.procs = []
        etcd, client = start_etcd(tmp)
        self.procs.append(etcd)
        ctl, self.controller = start_controller(tmp, client, cluster)
        self.procs.append(ctl)
        # A free FL peer port: another test's cluster-mode node on this host may hold 8082.
        self.node = start_shoald(tmp, f"{cluster}c{os.getpid()}",
                                 ("--etcd", client, "--cluster", cluster),
                                 extra_yaml=f"fl_peer_port: {free_port()}\n")
        self.node.wait_log(r"registered at")

    def close(self):
        stop_shoald(self.node)
        for p in reversed(self.procs):
            p.close()


# ---------------------------------------------------------------- Chromium over CDP


class Browser:
    """A headless Chromium with a fresh profile, and one page driven over the DevTools Protocol."""

    def __init__(self, tmp, screenshots=SCREENSHOTS):
        self.screenshots = screenshots
        self.profile = tempfile.mkdtemp(prefix="chromium-", dir=tmp)
        self.log = open(os.path.join(tmp, "chromium.log"), "wb")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-extensions", "--disable-dev-shm-usage",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
             f"--user-data-dir={self.profile}", "--window-size=1280,800", "about:blank"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.time() + 30
        while not os.path.exists(port_file) or not open(port_file).read().strip():
            if self.proc.poll() is not None or time.time() > deadline:
                self.close()
                raise RuntimeError("chromium did not start:\n" + self.log_text()[-2000:])
            time.sleep(0.1)
        port = int(open(port_file).read().split()[0])
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        page = next(t for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30,
                                              suppress_origin=True)
        self.next_id = 0
        self.events = []
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    def log_text(self):
        self.log.flush()
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def call(self, method, **params):
        self.next_id += 1
        my = self.next_id
        self.ws.send(json.dumps({"id": my, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my:
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def eval(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise AssertionError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait(self, expr, timeout=30, what=None):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                v = self.eval(expr)
            except AssertionError:  # the page is still loading (Chart not defined yet, ...)
                v = None
            if v is not None and v is not False and v != 0 and v != "":
                return v  # a DOM node comes back as {}: found
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what or expr}; page says: "
                             + str(self.eval("document.body.innerText.slice(0, 3000)")))

    def goto(self, url):
        self.call("Page.navigate", url=url)

    def viewport(self, width, height, mobile=False):
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=mobile)

    def key(self, key, code, vk):
        for t in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", type=t, key=key, code=code,
                      windowsVirtualKeyCode=vk, nativeVirtualKeyCode=vk)

    def screenshot(self, name):
        os.makedirs(self.screenshots, exist_ok=True)
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path = os.path.join(self.screenshots, name)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

    def cells(self, selector):
        """{data-k: text} of the cells under `selector`."""
        return self.eval(f"""(() => {{ const o = {{}};
        for (const e of document.querySelectorAll({json.dumps(selector)} + ' [data-k]')) o[e.dataset.k] = e.innerText.trim();
        return o; }})()""")

    def console_errors(self):
        """Console errors, uncaught exceptions and failed loads the page reported so far."""
        self.eval("1")  # drains pending events into self.events
        out = []
        for e in self.events:
            m, p = e["method"], e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append("exception: " + json.dumps(p["exceptionDetails"])[:500])
            elif m == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
                out.append("console.error: " + json.dumps(p["args"])[:500])
            elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append(f"log ({p['entry'].get('source')}): {p['entry']['text']} {p['entry'].get('url', '')}")
        return out

    def close(self):
        try:
            if getattr(self, "ws", None):
                self.ws.close()
        finally:
            stop_child(self.proc, timeout=10)
            self.log.close()
