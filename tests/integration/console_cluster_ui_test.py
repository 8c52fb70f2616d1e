"""The web console on shoal-controller (/ui, cluster mode) in a real headless Chromium.

A real etcd (Debian's etcd-server), one shoal-controller and one cluster-mode shoald; functions
deployed through the controller and placed on the node. The page asks /v1/ui-info which server
it talks to and shows the cluster's pages: the test checks that the node list and the function
names shown equal /v1/nodes and /v1/functions (cores, memory, GPUs, lease; each function's
placements), that a node links to its own console (its control address, from its etcd record)
and that console shows the node's pages, and that no page logs a console error. Screenshots go
to build/test-output/console/ (SHOAL_TEST_OUTPUT overrides).

Run by ctest (console.cluster_ui) as root: shoald needs root. Reported as skipped, with the
reason, where etcd, Chromium or the websocket client is missing or Chromium cannot start.
"""

import json
import os
import shutil
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from shoal_testlib import (Browser, Cluster, ControlApi, admin_token, http,  # noqa: E402
                           skip_reason)

FUNCTION = """apiVersion: shoal.dev/v1
kind: Function
metadata: {{name: {name}}}
spec:
  handler: {{builtin: echo}}
  scale: {{min: {min}, max: 3}}
"""

FLJOB = """apiVersion: shoal.dev/v1
kind: FLJob
metadata: {name: digits}
spec:
  algorithm: {name: fedavg}
  model: {architecture: mlp, hidden: 8, seed: 1}
  data: {dataset: digits}
  clients: {expected: 2}
"""


@pytest.fixture(scope="module")
def live():
    reason = skip_reason(("shoald", "shoal-controller"), chromium=True, etcd=True)
    if reason:
        pytest.skip(reason)
    tmp = tempfile.mkdtemp(prefix="shoal-console-cluster-")
    cluster = browser = None
    try:
        try:
            browser = Browser(tmp)
        except Exception as e:  # noqa: BLE001 - any failure to start is a skip with its reason
            pytest.skip(f"chromium cannot start here: {e}")
        cluster = Cluster(tmp, "graf")
        ctl = ControlApi(f"http://127.0.0.1:{cluster.controller}",
                         admin_token(os.path.join(tmp, "controller")))
        node = ControlApi(f"http://127.0.0.1:{cluster.node.control_port}",
                          admin_token(os.path.join(cluster.node.state, "state")))
        for name, lo in (("hello", 1), ("idle", 0)):
            code, body = ctl.request("/v1/functions", data=FUNCTION.format(name=name, min=lo).encode())
            assert code == 201, body
        # An FL job through the controller: it runs on the one node, its top.
        code, body = ctl.request("/v1/functions", data=FLJOB.encode())
        assert code == 201, body
        # The leader places both functions on the one node.
        deadline = time.time() + 30
        while not all(f["placements"] for f in ctl("/v1/functions")["functions"]):
            assert time.time() < deadline, json.dumps(ctl("/v1/functions"))
            time.sleep(0.2)
        yield {"browser": browser, "ctl": ctl, "node": node, "cluster": cluster}
    finally:
        if browser:
            browser.close()
        if cluster:
            cluster.close()
        shutil.rmtree(tmp, ignore_errors=True)


def test_the_controller_serves_the_console_and_says_what_it_is(live):
    ctl, node = live["ctl"], live["node"]
    code, page = http(f"{ctl.url}/ui/")
    assert code == 200 and "console.js" in page
    code, js = http(f"{ctl.url}/ui/chart.min.js")
    assert code == 200 and "Chart.js v3" in js[:200]
    assert http(f"{ctl.url}/ui/nope.js")[0] == 404
    assert http(f"{ctl.url}/v1/ui-info")[0] == 401
    info = ctl("/v1/ui-info")
    assert info["server"] == "shoal-controller" and info["cluster"] == "graf", info
    assert node("/v1/ui-info")["server"] == "shoald"


def test_cluster_overview_shows_nodes_and_placements(live):
    b, ctl = live["browser"], live["ctl"]
    b.viewport(1280, 800)
    b.goto(f"{ctl.url}/ui/?token={ctl.token}#/")
    b.wait("document.querySelector('tr[data-node]') && document.querySelectorAll('tr[data-fn]').length == 2",
           what="the cluster overview's tables")
    assert "token=" not in b.eval("location.href")
    time.sleep(1.5)  # one more poll
    nodes = ctl("/v1/nodes")["nodes"]
    fns = ctl("/v1/functions")["functions"]
    assert len(nodes) == 1
    shown = b.eval("[...document.querySelectorAll('tr[data-node]')].map(r => r.dataset.node)")
    assert shown == [n["name"] for n in nodes], (shown, nodes)
    for n in nodes:
        c = b.cells(f'tr[data-node="{n["name"]}"]')
        assert c["name"] == n["name"] and c["address"] == n["address"], (c, n)
        assert int(c["cores"]) == n["cores"] and int(c["gpus"]) == n["gpus"], (c, n)
        assert c["status"] == "Ready" == n["status"] and c["lease"] == n["lease"], (c, n)
        gib = n["memory_mib"] / 1024
        assert c["memory"] in (f"{gib:.1f} GiB", f"{n['memory_mib']:.1f} MiB"), (c, n)
        # The node's own console, at the control address its etcd record gives.
        assert n["control"] == f"http://127.0.0.1:{live['cluster'].node.control_port}", n
        href = b.eval(f"document.querySelector('a[data-console=\"{n['name']}\"]').getAttribute('href')")
        assert href == n["control"] + "/ui/#/", href
    shown = b.eval("[...document.querySelectorAll('tr[data-fn]')].map(r => r.dataset.fn)")
    assert sorted(shown) == sorted(f["name"] for f in fns), (shown, fns)
    for f in fns:
        placed = b.eval(f"[...document.querySelectorAll('tr[data-fn=\"{f['name']}\"] [data-placement]')]"
                        ".map(e => e.dataset.placement)")
        assert placed == [p["node"] for p in f["placements"]], (placed, f)
    # The FL job, on its top, as the controller's /v1/jobs has it (its top publishes it).
    b.wait("document.querySelector('tr[data-job] [data-k=state]')?.innerText == 'running'",
           what="the FL job's published state")
    jobs = ctl("/v1/jobs")["jobs"]
    assert [j["name"] for j in jobs] == ["digits"], jobs
    j = b.cells('tr[data-job="digits"]')
    assert j["top"] == jobs[0]["top"] == nodes[0]["name"], (j, jobs)
    assert j["algorithm"] == "fedavg" and int(j["version"]) == jobs[0]["version"] == 0, (j, jobs)
    href = b.eval("document.querySelector('a[data-top]').getAttribute('href')")
    assert href == nodes[0]["control"] + "/ui/#/job/digits", href
    c = b.cells("main")
    assert c["cluster_name"] == "graf" and int(c["nodes"]) == len(nodes)
    assert int(c["functions"]) == len(fns) and int(c["jobs"]) == 1
    assert b.eval("document.getElementById('node-name').innerText") == "cluster graf"
    b.screenshot("cluster-overview.png")


def test_cluster_function_page(live):
    b, ctl = live["browser"], live["ctl"]
    b.goto(f"{ctl.url}/ui/#/fn/hello")
    b.wait("document.querySelector('tr[data-placement]')", what="the placements table")
    f = ctl("/v1/functions/hello")
    c = b.cells("main")
    assert c["name"] == "hello" and c["namespace"] == f["namespace"]
    assert int(c["generation"]) == f["generation"]
    rows = b.eval("[...document.querySelectorAll('tr[data-placement]')].map(r => "
                  "[r.dataset.placement, ...[...r.cells].slice(1, 3).map(td => Number(td.innerText))])")
    assert rows == [[p["node"], p["min"], p["max"]] for p in f["placements"]], (rows, f)
    b.screenshot("cluster-function-hello.png")


def test_a_node_link_opens_that_nodes_console(live):
    b, ctl, node = live["browser"], live["ctl"], live["node"]
    b.goto(f"{ctl.url}/ui/#/")
    href = b.wait("document.querySelector('a[data-console]')?.getAttribute('href')", what="a node's link")
    # The node has tokens of its own: its console is opened with one of them.
    b.goto(href.replace("/ui/#/", f"/ui/?token={node.token}#/"))
    b.wait("document.querySelector('[data-k=node]') && document.querySelector('[data-k=dataplane]')",
           what="the node console's overview")
    info = node("/v1/node")
    c = b.cells("main")
    assert c["node"] == info["node"] == live["cluster"].node.node
    assert b.eval("document.getElementById('node-name').innerText") == f"node {info['node']}"
    b.screenshot("cluster-node-console.png")


def test_no_console_errors(live):
    errors = live["browser"].console_errors()
    assert not errors, "\n".join(errors)
