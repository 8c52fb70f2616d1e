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
import subprocess
import sys
import tempfile
import time
import urllib.parse

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from shoal_testlib import (BUILTIN_FUNCTION, ETCD, ROOT, Cluster, Proc,  # noqa: E402
                           StandaloneShoald, digits_fljob, fl_client_env, free_port, http,
                           shoal_client_argv, skip_reason, wait_until_answers)

DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "shoal.json")
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


_DECLARED = re.compile(r'\.Name\("(shoal_\w+)"\)|# TYPE (shoal_\w+) |'
                       r'\b(?:Counters|Gauges|Histograms)\(\s*\*registry_,\s*"(shoal_\w+)"')


def declared_in_source():
    """Metric names the C++ source declares: prometheus-cpp builders, NodeMetrics' family helpers
    (Counters/Gauges/Histograms(*registry_, "shoal_..."), node_metrics.cc) and hand-written
    # TYPE."""
    names = {}
    for top in ("shoal", "cmd"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if not f.endswith((".cc", ".h")):
                    continue
                text = open(os.path.join(dirpath, f), errors="replace").read()
                for m in _DECLARED.finditer(text):
                    name = m.group(1) or m.group(2) or m.group(3)
                    names[name] = os.path.relpath(os.path.join(dirpath, f), ROOT)
    return names


# ---------------------------------------------------------------- live processes


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


class Standalone(StandaloneShoald):
    def __init__(self, tmp):
        super().__init__(tmp, f"graf{os.getpid()}", extra_yaml="autoscale_interval_ms: 250\n")

    def metrics(self):
        code, body = http(f"{self.gw}/metrics")
        assert code == 200
        return body


FLJOB = digits_fljob("fedavg", hidden=16, clients=2, rounds=3, local_steps=5,
                     max_fan_in=2, max_leaves=1)


def exercise(s):
    """Gives every family of the dashboard at least one series."""
    # Requests, latency, starts by path, placement, the data plane's counters.
    s.deploy(BUILTIN_FUNCTION.format(name="echo", builtin="echo",
                                     spec="  concurrency: 8\n  scale: {min: 1, max: 4}\n"))
    s.wait_ready("echo")
    for i in range(20):
        code, body = http(f"{s.gw}/fn/echo", data=f"hello {i}".encode())
        assert (code, body) == (200, f"hello {i}"), (code, body)
    # A gateway rejection: an FL route without a token.
    assert http(f"{s.gw}/v1/jobs/digits/task")[0] == 401
    # An FL job: its leaf function fl.digits folds the updates of two real clients.
    s.deploy(FLJOB)
    code, body = s.api.request("/v1/tokens", data=json.dumps(
        {"role": "fl-client", "job": "digits"}).encode(), headers={"Content-Type": "application/json"})
    assert code == 201, body
    fl_token = json.loads(body)["token"]
    r = subprocess.run(shoal_client_argv(s.gw, clients=2, time_scale="0", max_seconds=20),
                       env=fl_client_env(fl_token), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "updates accepted" in r.stdout + r.stderr, r.stdout + r.stderr
    # A refused update (not an update at all): counted on fl.digits with its 4xx.
    code, _ = http(f"{s.gw}/v1/jobs/digits/updates", data=b"not an update",
                   headers={"Authorization": f"Bearer {fl_token}"})
    assert 400 <= code < 500, code
    # Pre-warm: a timer-like function (a call every 2.5 s) under the shoal policy's idle-period
    # histogram releases its instance after each call and starts one just before the next:
    # scale-to-zero cold requests, decisions, pre-warm starts and an avoided cold start.
    s.deploy(BUILTIN_FUNCTION.format(name="tick", builtin="sleep", spec=(
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


@pytest.fixture(scope="module")
def live():
    reason = skip_reason(("shoald", "shoal", "shoal-client", "shoal-controller"))
    if reason:
        pytest.skip(reason)
    tmp = tempfile.mkdtemp(prefix="shoal-grafana-")
    started = []
    try:
        s = Standalone(tmp)
        started.append(s.close)
        cluster = None
        if os.access(ETCD, os.X_OK):
            cluster = Cluster(tmp, "graf")
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
    if wait_until_answers(lambda: http(f"{p.url}/-/ready", timeout=1)[0] == 200, interval=0.2):
        return p
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
