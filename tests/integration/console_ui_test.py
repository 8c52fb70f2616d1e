"""The web console (/ui) in a real headless Chromium against a live standalone shoald.

shoald serves the page from its binary on the control listener; Chromium (Debian's) is driven
over the Chrome DevTools Protocol (python3-websocket). The test deploys functions, an FL job
that real shoal-client processes train, and an ONNX model served for inference; opens each
page; and checks that what the page shows equals what /v1 says (function names and instance
counts, the job's latest version and accuracy, the model's version and requests), that the
accuracy chart gains points while the job trains, that the model downloads (safetensors, and
ONNX with the bytes `shoal fl model --format onnx` writes), that the page logs no console error,
and that it works with the keyboard and at a phone's width. Screenshots go to
build/test-output/console/ (SHOAL_TEST_OUTPUT overrides).

Run by ctest (console.ui) as root: shoald needs root. Reported as skipped, with the reason,
where Chromium or the websocket client is missing or Chromium cannot start.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from shoal_testlib import (BUILTIN_FUNCTION, ROOT, Browser, StandaloneShoald,  # noqa: E402
                           digits_fljob, fl_client_env, http, shoal_client_argv, skip_reason)

ONNX = os.path.join(ROOT, "tests", "data", "inference", "mlp.onnx")


# ---------------------------------------------------------------- a live shoald

FLJOB = digits_fljob("fedcompass", hidden=32, clients=4, rounds=100000, local_steps=20,
                     max_fan_in=4, max_leaves=2)

INFER = f"""apiVersion: shoal.dev/v1
kind: Function
metadata: {{name: mlp-infer}}
spec:
  handler: inference
  concurrency: 8
  scale: {{min: 1, max: 1}}
  inference:
    modelName: mlp
    source: {{onnx: {ONNX}}}
    maxBatchSize: 8
    maxQueueDelay: 1ms
"""


@pytest.fixture(scope="module")
def live():
    reason = skip_reason(("shoald", "shoal", "shoal-client"), chromium=True)
    if reason:
        pytest.skip(reason)
    tmp = tempfile.mkdtemp(prefix="shoal-console-")
    node = browser = trainer = None
    try:
        try:
            browser = Browser(tmp)
        except Exception as e:  # noqa: BLE001 - any failure to start is a skip with its reason
            pytest.skip(f"chromium cannot start here: {e}")
        node = StandaloneShoald(tmp, f"ui{os.getpid()}", extra_yaml="autoscale_interval_ms: 250\n")
        node.deploy(BUILTIN_FUNCTION.format(name="echo", builtin="echo",
                                            spec="  concurrency: 4\n  scale: {min: 2, max: 4}\n"))
        node.deploy(BUILTIN_FUNCTION.format(name="sleepy", builtin="sleep", spec="  keepAlive: 2s\n"))
        node.deploy(FLJOB)
        node.deploy(INFER)
        node.wait_ready("echo", 2, timeout=60)
        for i in range(30):
            assert http(f"{node.gw}/fn/echo", data=f"hi {i}".encode()) == (200, f"hi {i}")
        assert http(f"{node.gw}/fn/sleepy?ms=5")[0] == 200  # a cold start from zero
        fl_token = node.api("/v1/tokens", data=json.dumps({"role": "fl-client", "job": "digits"}).encode())["token"]
        trainer = subprocess.Popen(
            shoal_client_argv(node.gw, clients=4, time_scale="0.2", max_seconds=30, train_threads=1),
            env=fl_client_env(fl_token),
            stdout=open(os.path.join(tmp, "shoal-client.log"), "wb"), stderr=subprocess.STDOUT)
        yield {"node": node, "browser": browser, "trainer": trainer, "tmp": tmp}
    finally:
        if trainer and trainer.poll() is None:
            trainer.kill()
            trainer.wait()
        if browser:
            browser.close()
        if node:
            node.close()
        shutil.rmtree(tmp, ignore_errors=True)


def ui(live, route=""):
    n = live["node"]
    return f"{n.api_url}/ui/?token={n.token}#/{route}"


# ---------------------------------------------------------------- the pages


def test_static_files_are_served_from_the_binary_without_a_token(live):
    n = live["node"]
    req = urllib.request.Request(f"{n.api_url}/ui/")
    with urllib.request.urlopen(req, timeout=10) as r:
        page = r.read().decode()
        assert r.headers["Content-Type"].startswith("text/html")
        csp = r.headers["Content-Security-Policy"]
    assert "connect-src 'self'" in csp and "script-src 'self'" in csp
    # Nothing from elsewhere: every script and stylesheet is a file of this listener.
    srcs = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert srcs and all(not re.match(r"(https?:)?//", s) for s in srcs), srcs
    code, js = http(f"{n.api_url}/ui/chart.min.js")
    assert code == 200 and "Chart.js v3" in js[:200]
    assert open("/usr/share/javascript/chart.js/chart.min.js").read() == js  # Debian's, as built in
    assert http(f"{n.api_url}/ui/nope.js")[0] == 404
    assert http(f"{n.api_url}/v1/node")[0] == 401  # the data still needs the token


def test_overview_shows_what_the_api_says(live):
    b, n = live["browser"], live["node"]
    b.viewport(1280, 800)
    b.goto(ui(live))
    b.wait("document.querySelector('tr[data-fn=\"echo\"]') && document.querySelector('tr[data-job=\"digits\"]')",
           what="the overview's tables")
    # The overview follows GET /v1/events (EventSource, opened with a ticket), not polling.
    assert int(b.wait("document.body.dataset.liveEvents", what="a server-sent event")) >= 1
    # The token went to sessionStorage and left the address bar.
    assert "token=" not in b.eval("location.href")
    assert b.eval("sessionStorage.getItem('shoal.token')") == n.token
    time.sleep(1.5)  # one more poll, so the counts below are settled
    fns = {f["name"]: f for f in n.api("/v1/functions")["functions"]}
    shown = b.eval("[...document.querySelectorAll('tr[data-fn]')].map(r => r.dataset.fn)")
    assert sorted(shown) == sorted(fns), (shown, list(fns))
    for name in ("echo", "mlp-infer"):
        c = b.cells(f'tr[data-fn="{name}"]')
        st = n.api(f"/v1/functions/{name}")["status"]
        assert int(c["ready"]) == st["ready"] and int(c["desired"]) == st["desired"], (name, c, st)
        assert int(c["cold_starts"]) == st["cold_starts"], (name, c, st)
    assert int(b.cells('tr[data-fn="echo"]')["ready"]) == 2
    node = n.api("/v1/node")
    c = b.cells("main")
    assert c["node"] == node["node"] and c["dataplane"] == node["dataplane"]
    assert int(c["functions"]) == node["functions"]
    tenants = b.eval("[...document.querySelectorAll('tr[data-tenant]')].map(r => r.dataset.tenant)")
    assert sorted(tenants) == sorted(p["tenant"] for p in node["pools"]) and tenants, (tenants, node)
    b.screenshot("overview.png")


def test_function_page(live):
    b, n = live["browser"], live["node"]
    b.goto(ui(live, "fn/echo"))
    b.wait("Chart.getChart(document.querySelector('canvas')) && "
           "Chart.getChart(document.querySelector('canvas')).data.datasets[0].data.length >= 3",
           what="three samples on the replicas chart")
    for i in range(20):
        http(f"{n.gw}/fn/echo", data=b"again")
    st = n.api("/v1/functions/echo")["status"]
    c = b.cells("main")
    assert c["name"] == "echo" and c["policy"] == st["policy"]
    b.wait(f"document.querySelector('[data-k=requests]').innerText.replace(/,/g, '') == '{st['requests_total']}'",
           what="the request count of /v1")
    ids = b.eval("[...document.querySelectorAll('main table tbody tr')].length")
    assert ids == len(st["instances"]) == 2
    desired = b.eval("Chart.getChart(document.querySelector('canvas')).data.datasets[0].data.at(-1).y")
    assert desired == n.api("/v1/functions/echo")["status"]["desired"]
    b.wait("document.querySelector('pre.logs').textContent.length > 0", what="the logs tail")
    b.screenshot("function-echo.png")
    # A cold start while the page is open is marked on the chart: sleepy scales to zero after
    # its keep-alive, and the next call starts an instance.
    b.goto(ui(live, "fn/sleepy"))
    b.wait("Chart.getChart(document.querySelector('canvas'))?.data.datasets[0].data.length >= 2")
    deadline = time.time() + 30
    while n.api("/v1/functions/sleepy")["status"]["actual"] > 0:
        assert time.time() < deadline, "sleepy did not scale to zero"
        time.sleep(0.3)
    time.sleep(1.5)
    assert http(f"{n.gw}/fn/sleepy?ms=5")[0] == 200
    b.wait("Chart.getChart(document.querySelector('canvas')).data.datasets[3].data.length == 1",
           timeout=10, what="a cold start marker")
    assert int(b.cells("main")["cold_starts"]) == n.api("/v1/functions/sleepy")["status"]["cold_starts"]
    b.screenshot("function-sleepy.png")


def model_bytes(n, query=""):
    """The job's model as GET /v1/jobs/digits/model?<query> hands it out."""
    return urllib.request.urlopen(urllib.request.Request(
        f"{n.api_url}/v1/jobs/digits/model" + (f"?{query}" if query else ""),
        headers={"Authorization": f"Bearer {n.token}"}), timeout=30).read()


def accuracy_points(b):
    return b.eval("(() => { const c = Chart.getChart(document.querySelector('canvas')); "
                  "return c ? c.data.datasets[0].data.length : -1; })()")


def test_fl_job_page_plots_accuracy_live(live):
    b, n = live["browser"], live["node"]
    b.goto(ui(live, "job/digits"))
    b.wait("document.querySelector('[data-k=version]')", what="the job's status")
    trainer = live["trainer"]
    # While the job trains, the accuracy chart gains points.
    first = None
    deadline = time.time() + 40
    while time.time() < deadline:
        p = accuracy_points(b)
        if p >= 1 and first is None:
            first = p
        if first is not None and p >= first + 2:
            break
        assert trainer.poll() is None or p > (first or 0), "shoal-client ended before the chart moved"
        time.sleep(0.5)
    else:
        pytest.fail(f"the accuracy chart did not gain points (first {first}); job: "
                    + json.dumps(n.api('/v1/jobs/digits'))[:2000])
    b.screenshot("fljob-digits-training.png")
    trainer.wait(timeout=60)
    time.sleep(2)  # two polls after the last commit
    job = n.api("/v1/jobs/digits")
    evals = [v for v in job["versions"] if v["accuracy"] is not None]
    c = b.cells("main")
    assert int(c["version"]) == job["version"], (c, job["version"])
    last = evals[-1]
    assert c["accuracy"].startswith(f"{100 * last['accuracy']:.2f} %"), (c["accuracy"], last)
    assert f"(version {last['version']})" in c["accuracy"]
    assert accuracy_points(b) == len(evals)
    assert b.eval("Chart.getChart(document.querySelector('canvas')).data.datasets[0].data.at(-1).y") == \
        pytest.approx(last["accuracy"])
    assert c["clients"] == f"{job['clients']['joined']} / {job['clients']['expected']}"
    # FedCompass: each client with its measured speed and assigned steps.
    shown = b.eval("[...document.querySelectorAll('tr[data-client]')].map(r => r.dataset.client)")
    assert sorted(shown) == sorted(cl["id"] for cl in job["compass"]["clients"]) and len(shown) == 4
    # Each client's staleness and its FedCompass arrival group, as the status has them; the
    # clients of one group are listed under that group's heading.
    for cl in job["clients"]["list"]:
        row = b.eval(f"""(() => {{ const r = document.querySelector('tr[data-client={json.dumps(cl["id"])}]');
            const o = {{}}; for (const e of r.querySelectorAll('[data-k]')) o[e.dataset.k] = e.innerText.trim();
            o.heading = r.closest('.table').previousElementSibling.dataset.groupHeading; return o; }})()""")
        assert row["staleness"] == ("–" if cl["staleness"] is None else str(cl["staleness"])), (row, cl)
        assert row["max-staleness"] == str(cl["max_staleness"]), (row, cl)
        group = "–" if cl["group"] is None else str(cl["group"]["id"])
        assert row["group"] == group and row["heading"] == group, (row, cl)
    # The safetensors download: the bytes of the API's model.
    model = model_bytes(n)
    b.eval("document.querySelector('[data-k=download-safetensors]').click()")
    msg = b.wait("(t => t.includes('safetensors') && t)(document.querySelector('[role=status]').innerText)",
                 what="the download's message")
    assert f"version {job['version']}," in msg, msg
    # The ONNX download: shoald converts the version as `shoal fl model --format onnx` does,
    # byte for byte, and the button hands out those bytes.
    v = job["version"]
    onnx = model_bytes(n, f"version={v}&format=onnx")
    out = os.path.join(live["tmp"], "digits.onnx")
    r = n.cli("fl", "model", "digits", "--format", "onnx", "--version", str(v), "-o", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert open(out, "rb").read() == onnx and onnx != model and len(onnx) > len(model) // 2
    code, body = n.api.request("/v1/jobs/digits/model?format=pt")
    assert code == 400 and json.loads(body)["error"].startswith("format: "), (code, body)
    assert http(f"{n.api_url}/v1/jobs/digits/model?format=onnx")[0] == 401  # same auth as safetensors
    b.eval("document.querySelector('[data-k=download-onnx]').click()")
    msg = b.wait("(t => t.includes('(onnx)') && t)(document.querySelector('[role=status]').innerText)",
                 what="the ONNX download's message")
    assert f"version {v}," in msg, msg
    assert b.eval("document.querySelector('[data-k=sha256]').innerText") == hashlib.sha256(onnx).hexdigest()
    # The FL job page at 1280x800 is docs/console-fljob.png.
    b.eval("window.scrollTo(0, 0)")
    time.sleep(0.3)
    b.screenshot("fljob-digits.png")


def test_model_page(live):
    b, n = live["browser"], live["node"]
    n.wait_ready("mlp-infer")
    meta = json.loads(http(f"{n.gw}/v2/models/mlp")[1])
    inp = meta["inputs"][0]
    width = 1
    for d in inp["shape"][1:]:
        width *= d
    for rows in (1, 2, 3, 3):
        body = {"inputs": [{"name": inp["name"], "shape": [rows] + inp["shape"][1:], "datatype": "FP32",
                            "data": [0.1] * (rows * width)}]}
        code, text = http(f"{n.gw}/v2/models/mlp/infer", data=json.dumps(body).encode())
        assert code == 200, text
    b.goto(ui(live, "model/mlp-infer"))
    b.wait("document.querySelector('[data-k=model_version]')?.innerText.trim() !== '–' && "
           "document.querySelector('[data-k=model_version]')?.innerText", what="the model's version")
    stats = n.api("/v1/models/mlp/stats")
    c = b.cells("main")
    assert c["model"] == "mlp" and c["model_version"] == str(stats["model_version"])
    assert int(c["model_requests"]) == stats["requests"] >= 4
    hist = b.eval("(() => { const c = Chart.getChart(document.querySelector('canvas[aria-label^=\"Batch sizes\"]')); "
                  "return Object.fromEntries(c.data.labels.map((l, i) => [l, c.data.datasets[0].data[i]])); })()")
    assert hist == stats["batch_rows_histogram"], (hist, stats)
    b.screenshot("model-mlp.png")


def test_keyboard_and_phone_width(live):
    b = live["browser"]
    b.viewport(390, 844, mobile=True)
    b.goto(ui(live))
    b.wait("document.querySelector('tr[data-job=\"digits\"] a')")
    # Tab moves through real links and buttons: from the header's Overview link to the token
    # button, and on into the page.
    b.eval("document.querySelector('header nav a').focus()")
    b.key("Tab", "Tab", 9)
    assert b.eval("document.activeElement.id") == "token-button"
    b.key("Tab", "Tab", 9)
    assert b.eval("!!document.querySelector('main').contains(document.activeElement)")
    # The job's link, reached by focus and followed with Enter.
    b.eval("document.querySelector('tr[data-job=\"digits\"] a').focus()")
    b.key("Enter", "Enter", 13)
    b.wait("location.hash === '#/job/digits' && document.querySelector('[data-k=version]')")
    # Nothing is wider than the phone's screen but the tables' own scrolling boxes.
    overflow = b.eval("document.documentElement.scrollWidth")
    assert overflow <= 390, overflow
    b.screenshot("fljob-digits-phone.png")
    b.viewport(1280, 800)


def test_no_console_errors(live):
    errors = live["browser"].console_errors()
    assert not errors, "\n".join(errors)
