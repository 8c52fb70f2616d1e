"""deploy/grafana/shoal.json against live Shoal processes.

Every metric name a dashboard query reads must be exported: the shoald names by a real
standalone shoald that has served functions, pre-warmed one, refused requests and run an FL job;
the cluster names by a real shoal-controller and a cluster-mode shoald on a real etcd (where
etcd is installed; otherwise against the names the C++ source declares, saying so). Where
Prometheus is installed (Debian `prometheus`), it scrapes those processes and runs every query
of the dashboard, with Grafana's variables filled in: each must parse, type-check and return
data. The JSON's structure (data sources, targets, ids, variables) is checked too.

Run by ctest (grafana.dashboard_metrics) as root: shoald needs root. stdlib + pytest only.
"""

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
import urllib.parse
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("SHOAL_BIN_DIR", os.path.join(ROOT, "build", "bin"))
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "shoal.json")
ETCD = "/usr/bin/etcd"
PROMETHEUS = "/usr/bin/prometheus"

# Exported only by shoal-controller (nodes_ready, leader) or by a shoald in cluster mode
# (etcd_connected); the etcd counters by both in cluster mode. A standalone shoald has none.
CLUSTER_ONLY = {
    "shoal_cluster_nodes_ready", "shoal_cluster_leader", "shoal_cluster_etcd_connected",
    "shoal_cluster_etcd_calls_total", "shoal_cluster_etcd_failures_total",
    "shoal_cluster_etcd_latency_seconds",
}
# Exported once its event happened, and the event needs what a test machine may lack: a
# leaf's GPU fold failing needs a GPU. Checked against the source's declaration instead.
EVENT_ONLY = {
    "shoal_fl_gpu_fallbacks_total": "counted when an FL leaf's GPU fold fails (needs a GPU)",
}

# ---------------------------------------------------------------- PromQL names

PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "atan2", "inf", "nan",
}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr):
    """The metric names a PromQL expression selects (not functions, labels or keywords)."""
    e = _STRING.sub('""', expr)                      # label values, label_replace's arguments
    e = re.sub(r"\{[^{}]*\}", " ", e)                # label matchers
    e = re.sub(r"\[[^\[\]]*\]", " ", e)              # ranges and subqueries' steps
    e = re.sub(r"\$\{?\w+\}?", " ", e)               # Grafana variables left outside those
    e = _GROUPING.sub(" ", e)                        # by (...), on (...), group_left (...)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\b", " ", e)
    names = set()
    for m in _IDENT.finditer(e):
        word = m.group(0)
        if word.lower() in PROMQL_WORDS:
            continue
        if re.match(r"\s*\(", e[m.end():]):          # a function or an aggregation
            continue
        if m.start() > 0 and (e[m.start() - 1].isdigit() or e[m.start() - 1] == "."):
            continue                                 # 1e3, 0.5 and the like
        names.add(word)
    return names


def family(name):
    """The family a sample name belongs to as the exposition's # TYPE line names it."""
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix
    return name, ""


def test_metric_names_extracts_only_metrics():
    assert metric_names(
        'histogram_quantile(0.99, sum by (function, le) (rate(a_bucket{x=~"b(c)|d"}[$__rate_interval])))'
    ) == {"a_bucket"}
    assert metric_names(
        'sum by (j) (label_replace(increase(b_total{i=~"$i"}[$__range]), "j", "$1", "job", "(.*)"))'
    ) == {"b_total"}
    assert metric_names("max(c * on (instance) group_left (mode) d) == 1 or vector(0)") == {"c", "d"}
    assert metric_names("60 * sum without (le) (rate(e[5m] offset 1m)) / 1e3") == {"e"}
    assert family("f_seconds_bucket") == ("f_seconds", "_bucket")
    assert family("g_total") == ("g_total", "")


# ---------------------------------------------------------------- the dashboard


def load_dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def panels(dashboard):
    for p in dashboard["panels"]:
        yield p
        yield from p.get("panels", [])  # a collapsed row keeps its panels inside it


def queries(dashboard):
    """(panel title, expr) of every target of every panel."""
    out = []
    for p in panels(dashboard):
        for t in p.get("targets", []):
            out.append((p["title"], t["expr"]))
    return out


def variable_queries(dashboard):
    out = []
    for v in dashboard["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q)
            assert m, f"variable {v['name']}: expected label_values(selector, label), got {q}"
            out.append((v["name"], m.group(1), m.group(2)))
    return out


def dashboard_names():
    d = load_dashboard()
    names = {}
    for title, expr in queries(d):
        for n in metric_names(expr):
            names.setdefault(n, title)
    for name, selector, _ in variable_queries(d):
        for n in metric_names(selector):
            names.setdefault(n, "variable " + name)
    return names


def test_dashboard_structure():
    d = load_dashboard()
    assert d["schemaVersion"] >= 36
    assert d["title"] and d["uid"]
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("instance", "function", "fl_job", "inference", "tenant"):
        assert variables[name]["type"] == "query", name
        assert variables[name]["datasource"]["uid"] == "${datasource}", name
    ids = [p["id"] for p in panels(d)]
    assert len(ids) == len(set(ids)), f"panel ids repeat: {sorted(ids)}"
    rows = [p["title"] for p in panels(d) if p["type"] == "row"]
    assert rows == ["Overview", "Functions & autoscaler", "FL jobs", "Inference",
                    "Pool per tenant", "Data plane", "Cluster"]
    used_vars = set()
    for p in panels(d):
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p.get("targets"), f"panel '{p['title']}' has no target"
        assert {"h", "w", "x", "y"} <= set(p["gridPos"]) and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["expr"].strip(), f"panel '{p['title']}' has an empty query"
            assert t["datasource"]["uid"] == "${datasource}", p["title"]
            assert metric_names(t["expr"]), f"'{p['title']}' selects no metric: {t['expr']}"
            for m in re.finditer(r"\$\{?(\w+)\}?", t["expr"]):
                used_vars.add(m.group(1))
    # Every variable a query names exists (or is Grafana's own, or label_replace's $1).
    for v in used_vars:
        assert v in variables or v.startswith("__") or v.isdigit(), f"unknown variable ${v}"
    assert {"instance", "function", "fl_job", "inference", "tenant"} <= used_vars


def test_counters_and_histograms_go_through_rate():
    """A counter or a histogram's series is read only as a rate or an increase."""
    for title, expr in queries(load_dashboard()):
        e = _STRING.sub('""', expr)
        for n in metric_names(expr):
            if not re.search(r"(_total|_bucket|_sum|_count)$", n):
                continue
            for m in re.finditer(re.escape(n) + r"\b", e):
                before = e[: m.start()]
                assert re.search(r"\b(rate|increase|irate)\(\s*$", before), \
                    f"'{title}': {n} is read raw, not through rate()/increase(): {expr}"
        for m in re.finditer(r"histogram_quantile\(", e):
            inner = e[m.end():]
            assert re.match(r"\s*[0-9.]+\s*,\s*sum by \(([^)]*\ble\b[^)]*)\)\s*\(rate\(\w+_bucket", inner), \
                f"'{title}': histogram_quantile needs sum by (..., le) (rate(X_bucket...)): {expr}"


def declared_in_source():
    """Metric names the C++ source declares: prometheus-cpp builders and hand-written # TYPE."""
    names = {}
    for top in ("runtime", "gateway", "aggregator", "cluster", "controller", "shoald",
                "autoscaler", "pool", "dataplane", "inference"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if not f.endswith((".cc", ".h")):
                    continue
                text = open(os.path.join(dirpath, f), errors="replace").read()
                for m in re.finditer(r'\.Name\("(shoal_\w+)"\)|# TYPE (shoal_\w+) ', text):
                    names[m.group(1) or m.group(2)] = os.path.relpath(os.path.join(dirpath, f), ROOT)
    return names


# ---------------------------------------------------------------- live processes


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url, data=None, headers=None, method=None, timeout=10):
    req = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def exposition_types(text):
    """{family name: type} from an exposition's # TYPE lines (# HELP-only names: 'untyped')."""
    types = {}
    for line in text.splitlines():
        m = re.match(r"# (TYPE|HELP) (\S+)(?: (\S+))?", line)
        if m:
            if m.group(1) == "TYPE":
                types[m.group(2)] = m.group(3)
            else:
                types.setdefault(m.group(2), "untyped")
    return types


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
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.logf.close()


READY = r"shoald ready on http://127\.0\.0\.1:(\d+) \(data plane \w+; control API https?://127\.0\.0\.1:(\d+)\)"


def start_shoald(tmp, node, extra_args=(), extra_yaml=""):
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


class Standalone:
    def __init__(self, tmp):
        self.d = start_shoald(tmp, f"graf{os.getpid()}", ("--standalone",),
                              extra_yaml="autoscale_interval_ms: 250\n")
        self.conf = os.path.join(self.d.state, "state", "admin.conf")
        self.token = re.search(r"^token: (\S+)$", open(self.conf).read(), re.M).group(1)
        self.gw = f"http://127.0.0.1:{self.d.port}"
        self.api = f"http://127.0.0.1:{self.d.control_port}"

    def cli(self, *args, stdin="", env=None):
        e = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "SHOAL_CONFIG": self.conf}
        e.update(env or {})
        r = subprocess.run([os.path.join(BIN, "shoal"), *args], input=stdin, text=True,
                           capture_output=True, env=e, timeout=60)
        return r

    def deploy(self, manifest):
        r = self.cli("deploy", "-f", "-", stdin=manifest)
        assert r.returncode == 0, r.stdout + r.stderr
        return r

    def status(self, fn):
        code, body = http(f"{self.api}/v1/functions/{fn}",
                          headers={"Authorization": f"Bearer {self.token}"})
        return json.loads(body).get("status", {}) if code == 200 else {}

    def wait_ready(self, fn, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.status(fn).get("ready", 0) >= 1:
                return
            time.sleep(0.05)
        raise AssertionError(f"{fn} not ready:\n{self.d.log()[-3000:]}")

    def metrics(self):
        code, body = http(f"{self.gw}/metrics")
        assert code == 200
        return body


FUNCTION = """apiVersion: shoal.dev/v1
kind: Function
metadata: {{name: {name}}}
spec:
  handler: {{builtin: {builtin}}}
{spec}"""

FLJOB = """apiVersion: shoal.dev/v1
kind: FLJob
metadata: {name: digits}
spec:
  algorithm: {name: fedavg}
  model: {architecture: mlp, hidden: 16, seed: 1}
  data: {dataset: digits}
  clients: {expected: 2}
  stop: {rounds: 3}
  training: {localSteps: 5, learningRate: 0.1, batchSize: 32}
  aggregation: {maxFanIn: 2, maxLeaves: 1}
"""


def exercise(s):
    """Gives every family of the dashboard at least one series."""
    # Requests, latency, starts by path, placement, the data plane's counters.
    s.deploy(FUNCTION.format(name="echo", builtin="echo",
                             spec="  concurrency: 8\n  scale: {min: 1, max: 4}\n"))
    s.wait_ready("echo")
    for i in range(20):
        code, body = http(f"{s.gw}/fn/echo", data=f"hello {i}".encode())
        assert (code, body) == (200, f"hello {i}"), (code, body)
    # A gateway rejection: an FL route without a token.
    assert http(f"{s.gw}/v1/jobs/digits/task")[0] == 401
    # An FL job: its leaf function fl.digits folds the updates of two real clients.
    s.deploy(FLJOB)
    code, body = http(f"{s.api}/v1/tokens", data=json.dumps(
        {"role": "fl-client", "job": "digits"}).encode(), headers={
        "Authorization": f"Bearer {s.token}", "Content-Type": "application/json"})
    assert code == 201, body
    fl_token = json.loads(body)["token"]
    r = subprocess.run([os.path.join(BIN, "shoal-client"), "--server", s.gw, "--job", "digits",
                        "--data", "digits", "--clients", "2", "--partition", "iid", "--seed", "3",
                        "--time-scale", "0", "--max-seconds", "20"],
                       env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent",
                            "SHOAL_TOKEN": fl_token},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "updates accepted" in r.stdout + r.stderr, r.stdout + r.stderr
    # A refused update (not an update at all): counted on fl.digits with its 4xx.
    code, _ = http(f"{s.gw}/v1/jobs/digits/updates", data=b"not an update",
                   headers={"Authorization": f"Bearer {fl_token}"})
    assert 400 <= code < 500, code
    # Pre-warm: a timer-like function (a call every 2.5 s) under the shoal policy's idle-period
    # histogram releases its instance after each call and starts one just before the next:
    # scale-to-zero cold requests, decisions, pre-warm starts and an avoided cold start.
    s.deploy(FUNCTION.format(name="tick", builtin="sleep", spec=(
        "  keepAlive: 10s\n  autoscaling:\n    policy: shoal\n    keepAlive: histogram\n"
        "    params: {histogramBin: 1s, minSamples: 3, scaleDownDelay: 0s, coldStart: 10ms}\n")))
    next_call = time.time()
    for _ in range(12):
        time.sleep(max(0.0, next_call - time.time()))
        next_call += 2.5
        assert http(f"{s.gw}/fn/tick?ms=10")[0] == 200
        if s.status("tick").get("cold_starts_avoided", 0) >= 1:
            break
    st = s.status("tick")
    assert st.get("prewarm_starts", 0) >= 1 and st.get("cold_starts_avoided", 0) >= 1, st


class Cluster:
    """etcd, a shoal-controller and a cluster-mode shoald."""

    def __init__(self, tmp):
        self.procs = []
        cport, pport = free_port(), free_port()
        client, peer = f"http://127.0.0.1:{cport}", f"http://127.0.0.1:{pport}"
        env = dict(os.environ, ETCD_UNSUPPORTED_ARCH=os.environ.get("ETCD_UNSUPPORTED_ARCH", ""))
        etcd = Proc([ETCD, "--name", "m0", "--data-dir", os.path.join(tmp, "etcd"),
                     "--listen-client-urls", client, "--advertise-client-urls", client,
                     "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                     "--initial-cluster", f"m0={peer}"], os.path.join(tmp, "etcd.log"), env=env)
        self.procs.append(etcd)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if '"health":"true"' in http(f"{client}/health", timeout=1)[1]:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            raise AssertionError("etcd did not start:\n" + etcd.log()[-3000:])
        ctl = Proc([os.path.join(BIN, "shoal-controller"), "--etcd", client, "--cluster", "graf",
                    "--port", "0", "--state-dir", os.path.join(tmp, "controller")],
                   os.path.join(tmp, "controller.log"))
        self.procs.append(ctl)
        self.controller = int(ctl.wait_log(r"shoal-controller ready on http://127\.0\.0\.1:(\d+)").group(1))
        ctl.wait_log(r"is the leader")
        self.node = start_shoald(tmp, f"grafc{os.getpid()}", ("--etcd", client, "--cluster", "graf"))
        self.node.wait_log(r"registered at")

    def close(self):
        stop_shoald(self.node)
        for p in reversed(self.procs):
            p.close()


@pytest.fixture(scope="module")
def live():
    if os.geteuid() != 0:
        pytest.skip("shoald needs root (its pools, BPF programs and instance sandboxes)")
    for b in ("shoald", "shoal", "shoal-client", "shoal-controller"):
        if not os.access(os.path.join(BIN, b), os.X_OK):
            pytest.skip(f"{BIN}/{b} is not built")
    tmp = tempfile.mkdtemp(prefix="shoal-grafana-")
    started = []
    try:
        s = Standalone(tmp)
        started.append(lambda: stop_shoald(s.d))
        cluster = None
        if os.access(ETCD, os.X_OK):
            cluster = Cluster(tmp)
            started.append(cluster.close)
        prom = None
        if os.access(PROMETHEUS, os.X_OK):
            prom = start_prometheus(tmp, s, cluster)
            started.append(prom.close)
        exercise(s)
        yield {"standalone": s, "cluster": cluster, "prometheus": prom, "tmp": tmp}
    finally:
        for stop in reversed(started):
            stop()
        shutil.rmtree(tmp, ignore_errors=True)


def start_prometheus(tmp, s, cluster):
    targets = [f"127.0.0.1:{s.d.port}"]
    if cluster:
        targets += [f"127.0.0.1:{cluster.controller}", f"127.0.0.1:{cluster.node.port}"]
    cfg = os.path.join(tmp, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                "scrape_configs:\n- job_name: shoal\n  static_configs:\n"
                f"  - targets: {json.dumps(targets)}\n")
    port = free_port()
    p = Proc([PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp}/tsdb",
              f"--web.listen-address=127.0.0.1:{port}"], os.path.join(tmp, "prometheus.log"))
    p.url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            if http(f"{p.url}/-/ready", timeout=1)[0] == 200:
                return p
        except OSError:
            pass
        time.sleep(0.2)
    p.close()
    raise AssertionError("prometheus did not start:\n" + p.log()[-3000:])


def test_every_shoald_metric_is_exported_by_a_live_shoald(live):
    exported = exposition_types(live["standalone"].metrics())
    missing = []
    for name, where in sorted(dashboard_names().items()):
        fam, suffix = family(name)
        if name in CLUSTER_ONLY or name in EVENT_ONLY:
            continue
        if fam not in exported:
            missing.append(f"{name} (panel '{where}')")
        elif suffix:
            assert exported[fam] in ("histogram", "summary"), f"{name}: {fam} is {exported[fam]}"
    assert not missing, ("the dashboard reads metrics the live shoald does not export:\n  " +
                         "\n  ".join(missing) + "\nexported: " + ", ".join(sorted(exported)))


def test_event_only_metrics_are_declared_in_the_source():
    declared = declared_in_source()
    for name, why in EVENT_ONLY.items():
        assert name in dashboard_names(), f"{name} is listed here but not on the dashboard"
        assert name in declared, f"{name} ({why}) is declared nowhere in the source"
    # The exempt names (checked here or against a cluster) are all real declarations.
    assert set(EVENT_ONLY) | CLUSTER_ONLY <= set(declared)


def test_cluster_metrics_are_exported_by_a_live_controller_and_node(live):
    cluster = live["cluster"]
    wanted = {n for n in dashboard_names() if n in CLUSTER_ONLY}
    assert wanted, "the dashboard's Cluster row reads no cluster metric"
    if cluster is None:
        declared = declared_in_source()
        missing = sorted(wanted - set(declared))
        assert not missing, f"not declared in the source: {missing}"
        pytest.skip(f"{ETCD} is missing (Debian etcd-server): the cluster metrics "
                    f"{sorted(wanted)} were checked against the source only")
    code, body = http(f"http://127.0.0.1:{cluster.controller}/metrics")
    assert code == 200
    exported = set(exposition_types(body))
    exported |= set(exposition_types(http(f"http://127.0.0.1:{cluster.node.port}/metrics")[1]))
    missing = sorted(wanted - exported)
    assert not missing, f"not exported by shoal-controller nor a cluster-mode shoald: {missing}"
    # A standalone shoald exports none of them: the list above is exactly the cluster's.
    standalone = set(exposition_types(live["standalone"].metrics()))
    assert not (CLUSTER_ONLY & standalone), sorted(CLUSTER_ONLY & standalone)


# Grafana's variables as "All" would fill them in (and its interval macros).
GRAFANA = {"$__rate_interval": "30s", "$__range": "5m", "${fl_job}": ".+", "$instance": ".*",
           "$function": ".*", "$inference": ".*", "$tenant": ".*"}


def fill(expr):
    for k, v in GRAFANA.items():
        expr = expr.replace(k, v)
    assert not re.search(r"\$(?!1\b)\{?\w", expr), f"a variable is left in {expr}"
    return expr


def test_every_query_runs_on_prometheus(live):
    prom = live["prometheus"]
    if prom is None:
        pytest.skip(f"{PROMETHEUS} is missing (Debian prometheus): the queries were checked "
                    "by the structure tests only")
    # Wait until Prometheus has scraped every target at least twice after the exercise, so
    # that the rates have two points in their window.
    targets = 3 if live["cluster"] else 1
    deadline = time.time() + 30
    while time.time() < deadline:
        code, body = http(f"{prom.url}/api/v1/query?" + urllib.parse.urlencode(
            {"query": "count(up == 1) and count(count_over_time(up[5s]) >= 3)"}))
        res = json.loads(body)["data"]["result"] if code == 200 else []
        if res and float(res[0]["value"][1]) >= targets:
            break
        time.sleep(0.5)
    else:
        pytest.fail("prometheus did not scrape every target:\n" + prom.log()[-3000:])
    time.sleep(2)
    no_data_ok = set(EVENT_ONLY)
    if live["cluster"] is None:
        no_data_ok |= CLUSTER_ONLY
    failures, empty = [], []
    d = load_dashboard()
    checks = list(queries(d)) + [(f"variable {name}", f"count by ({label}) ({selector})")
                                 for name, selector, label in variable_queries(d)]
    for title, expr in checks:
        q = fill(expr)
        code, body = http(f"{prom.url}/api/v1/query?" + urllib.parse.urlencode({"query": q}))
        j = json.loads(body)
        if code != 200 or j.get("status") != "success":
            failures.append(f"'{title}': {q}\n    -> {j.get('errorType')}: {j.get('error')}")
        elif not j["data"]["result"] and not (metric_names(expr) & no_data_ok):
            empty.append(f"'{title}': {q}")
    assert not failures, "queries Prometheus refused:\n  " + "\n  ".join(failures)
    assert not empty, "queries with no data after the exercise:\n  " + "\n  ".join(empty)
