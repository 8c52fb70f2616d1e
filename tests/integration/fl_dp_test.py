"""spec.privacy.dp end to end: a live shoald --standalone, FLJob manifests deployed with `shoal`,
clients of the Python SDK (shoal_fl.run_client) in threads.

- Bad spec.privacy.dp fields: `shoal validate` exits 1 naming the field, POST /v1/jobs answers
  400 naming it, and a job already deployed is untouched (still there, still training).
- A FedAvg job (logreg on Fashion-MNIST's shape: 7,850 parameters, 4 clients, σ 2, C 0.5,
  budget between ε after 2 and after 3 versions): each client sends the global model plus a
  fixed change (client 3's huge: it is clipped). The committed model minus the clipped mean the
  test computes is the server's noise (drawn from its CSPRNG: no test seed): its standard
  deviation is σC/n within 6 standard errors. ε per version in the status equals Opacus's
  RDPAccountant's within 1e-6, /metrics shows it, and the job stops at version 2 with the
  reason naming the budget and version 3.

Run by ctest (fl_dp.integration), or:
  SHOAL_BIN_DIR=build/bin .venv/bin/python -m pytest -q tests/integration/fl_dp_test.py
Needs root (shoald's data plane, as the other integration tests); skips naming what is missing.
"""

import json
import math
import os
import re
import sys
import threading
import warnings

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from shoal_testlib import standalone_shoald, http  # noqa: E402

import shoal_fl  # noqa: E402
from opacus.accountants import RDPAccountant  # noqa: E402

CLIENTS, SIGMA, CLIP, DELTA = 4, 2.0, 0.5, 1e-5


def _fljob(name, dp, extra=""):
    return f"""apiVersion: shoal.dev/v1
kind: FLJob
metadata:
  name: {name}
spec:
  algorithm: {{name: fedavg}}
  model: {{architecture: logreg, seed: 3}}
  data: {{dataset: fashion-mnist}}
  clients: {{expected: {CLIENTS}}}
  stop: {{rounds: 10}}
{extra}  privacy:
    dp: {dp}
"""


def _opacus_eps(versions):
    acc = RDPAccountant()
    for _ in range(versions):
        acc.step(noise_multiplier=SIGMA, sample_rate=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return acc.get_epsilon(DELTA)


@pytest.fixture
def shoald():
    with standalone_shoald("dp") as s:
        yield s


BAD = [
    ("{clip: {fixed: 1}}", "spec.privacy.dp.noiseMultiplier: required"),
    ("{noiseMultiplier: 1, clip: {fixed: -2}}", "spec.privacy.dp.clip.fixed"),
    ("{noiseMultiplier: 1, clip: {fixed: 1}, delta: 2}", "spec.privacy.dp.delta"),
    ("{noiseMultiplier: 1, clip: {fixed: 1}, budget: 0}", "spec.privacy.dp.budget"),
    ("{noiseMultiplier: 1, clip: {adaptive: {initial: 1, targetQuantile: 1.5}}}",
     "spec.privacy.dp.clip.adaptive.targetQuantile"),
]


class Sender(shoal_fl.Client):
    """Sends the global model plus a fixed change: client k's is +0.001 (k + 1) on every weight
    (norm 0.089 (k + 1) < C), except the last client's: -1 everywhere (norm 88.6: clipped)."""

    def __init__(self, k):
        self.k, self.sent = k, {}

    def change(self, shapes):
        v = -1.0 if self.k == CLIENTS - 1 else 0.001 * (self.k + 1)
        return [np.full(s, v, np.float32) for s in shapes]

    def fit(self, parameters, config):
        d = self.change([p.shape for p in parameters])
        self.sent[config["model_version"]] = True
        return [p + c for p, c in zip(parameters, d)], 100 * (self.k + 1), {}

    def evaluate(self, parameters, config):
        return None


def _clipped_mean(base, clients):
    shapes = [a.shape for a in base]
    out = [a.astype(np.float64) for a in base]
    for c in clients:
        d = [x.astype(np.float64) for x in c.change(shapes)]
        norm = math.sqrt(sum(float(np.sum(x * x)) for x in d))
        s = min(1.0, CLIP / norm)
        for o, x in zip(out, d):
            o += s * x / len(clients)
    return out


def test_bad_fields_are_refused_naming_the_field_and_nothing_is_lost(shoald, tmp_path):
    ok = _fljob("keep", f"{{noiseMultiplier: 1, clip: {{fixed: 1}}}}")
    shoald.deploy(ok)
    for i, (dp, field) in enumerate(BAD):
        manifest = _fljob(f"bad{i}", dp)
        path = tmp_path / f"bad{i}.yaml"
        path.write_text(manifest)
        v = shoald.cli("validate", "-f", str(path))
        assert v.returncode == 1 and field in v.stderr + v.stdout, (dp, v.stdout, v.stderr)
        code, body = shoald.api.request("/v1/jobs", data=manifest.encode(),
                                        headers={"Content-Type": "application/yaml"})
        assert code == 400 and field in body, (dp, code, body)
    # An asynchronous algorithm: what only the coordinator's check says, also a 400.
    code, body = shoald.api.request(
        "/v1/jobs", data=_fljob("async", "{noiseMultiplier: 1, clip: {fixed: 1}}").replace(
            "fedavg", "fedbuff").encode(), headers={"Content-Type": "application/yaml"})
    assert code == 400 and "spec.privacy.dp: central DP clips" in body, body
    assert "algorithm fedbuff mixes base versions" in body
    for name in [f"bad{i}" for i in range(len(BAD))] + ["async"]:
        assert shoald.api.request(f"/v1/jobs/{name}")[0] == 404, name
    st = shoald.api("/v1/jobs/keep")
    assert st["state"] == "running" and st["privacy"]["dp"]["noise_multiplier"] == 1


def test_central_dp_noise_accounting_and_budget_stop(shoald):
    eps = [_opacus_eps(v) for v in (1, 2, 3)]
    budget = (eps[1] + eps[2]) / 2
    shoald.deploy(_fljob("dpjob", f"{{noiseMultiplier: {SIGMA}, clip: {{fixed: {CLIP}}}, "
                                  f"delta: {DELTA}, budget: {budget!r}}}"))
    token = shoald.api("/v1/tokens", json.dumps({"role": "fl-client", "job": "dpjob"}).encode())
    server = f"http://127.0.0.1:{shoald.port}"
    with shoal_fl.JobClient(server, "dpjob", token["token"]) as jc:
        models = {0: jc.model(0)}
    clients = [Sender(k) for k in range(CLIENTS)]
    results, errors = [None] * CLIENTS, []

    def run(k):
        try:
            results[k] = shoal_fl.run_client(server, "dpjob", clients[k], token=token["token"],
                                             name=f"c{k}", evaluate=False, max_seconds=90)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert all(r is not None and r.done for r in results), results

    st = shoald.api("/v1/jobs/dpjob")
    assert st["state"] == "done" and st["version"] == 2, st
    reason = st["reason"]
    assert reason.startswith(f"privacy budget ε={budget!r} would be exceeded by version 3 "
                             f"(ε={eps[2]:.4f}"), reason
    dp = st["privacy"]["dp"]
    assert dp["stop_reason"] == reason
    assert [v["version"] for v in dp["versions"]] == [1, 2]
    for v, want in zip(dp["versions"], eps):
        assert abs(v["epsilon"] - want) <= 1e-6, (v, want)
        assert v["delta"] == DELTA and v["sampling_rate"] == 1.0 and v["updates"] == CLIENTS
        assert v["clipped"] == 1 and v["noise_std"] == pytest.approx(SIGMA * CLIP / CLIENTS)
    assert abs(dp["epsilon"] - eps[1]) <= 1e-6
    by_version = {v["version"]: v for v in st["versions"]}
    assert abs(by_version[2]["epsilon"] - eps[1]) <= 1e-6
    code, metrics = http(f"http://127.0.0.1:{shoald.port}/metrics")
    assert code == 200
    m = re.search(r'^shoal_fl_dp_epsilon\{job="dpjob"\} (\S+)$', metrics, re.M)
    assert m and abs(float(m.group(1)) - eps[1]) <= 1e-6, metrics[-2000:]
    assert re.search(r'^shoal_fl_dp_budget\{job="dpjob"\} ', metrics, re.M)

    # Each version is the clipped mean of its round plus noise drawn once: N(0, (σC/n)^2) per
    # coordinate. 7,850 coordinates: the sample variance is within 6 standard errors.
    with shoal_fl.JobClient(server, "dpjob", token["token"]) as jc:
        for v in (1, 2):
            models[v] = jc.model(v)
            want = _clipped_mean(models[v - 1].arrays, clients)
            resid = np.concatenate([(g.astype(np.float64) - w).ravel()
                                    for g, w in zip(models[v].arrays, want)])
            n, std = resid.size, SIGMA * CLIP / CLIENTS
            z_var = (resid.var(ddof=1) / std ** 2 - 1) / math.sqrt(2 / (n - 1))
            z_mean = resid.mean() / (std / math.sqrt(n))
            print(f"version {v}: residual std {resid.std():.5f} (σC/n {std:.5f}), z {z_var:.2f}")
            assert abs(z_var) < 6 and abs(z_mean) < 6, (v, resid.std(), std)


EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shoal", "fl",
                       "sdk", "python", "examples", "fmnist_torch.py")
DATA = "/usr/share/datasets/fashion-mnist"


def test_example_clients_with_dp_sgd_and_local_dp(shoald):
    """The example client (fmnist_torch.py) on a DP job: client 0 trains with DP-SGD through
    Opacus, client 1 sends locally privatised updates. Both finish; client 0's ε is Opacus's
    RDPAccountant's for its steps at sample rate batch / examples; client 1's is LocalDP's."""
    pytest.importorskip("torch", reason="torch is not installed")
    if not os.path.exists(os.path.join(DATA, "t10k-images-idx3-ubyte.gz")):
        pytest.skip(f"fashion-mnist not found at {DATA}")
    import subprocess
    rounds, steps, batch, samples = 2, 5, 32, 640
    shoald.deploy(f"""apiVersion: shoal.dev/v1
kind: FLJob
metadata:
  name: dpsgd
spec:
  algorithm: {{name: fedavg}}
  model: {{architecture: logreg, seed: 1}}
  clients: {{expected: 2}}
  stop: {{rounds: {rounds}}}
  training: {{localSteps: {steps}, learningRate: 0.05, batchSize: {batch}}}
  privacy:
    dp: {{noiseMultiplier: 0.5, clip: {{fixed: 5}}}}
""")
    token = shoald.api("/v1/tokens", json.dumps({"role": "fl-client", "job": "dpsgd"}).encode())
    server = f"http://127.0.0.1:{shoald.port}"
    extra = [["--dp-sgd-noise", "1.1", "--dp-sgd-clip", "1.0"],
             ["--local-dp-noise", "0.8", "--local-dp-clip", "2.0"]]
    procs = [subprocess.Popen(
        [sys.executable, EXAMPLE, "--server", server, "--job", "dpsgd", "--client-index", str(k),
         "--num-clients", "2", "--train-samples", str(samples), "--no-evaluate", "--seed", "3",
         "--max-seconds", "120"] + extra[k], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=dict(os.environ, SHOAL_TOKEN=token["token"])) for k in range(2)]
    out = []
    for k, p in enumerate(procs):
        o, e = p.communicate(timeout=180)
        assert p.returncode == 0, f"client {k}: {e[-3000:]}\n{o}"
        out.append(json.loads(o.strip().splitlines()[-1]))
    st = shoald.api("/v1/jobs/dpsgd")
    assert st["state"] == "done" and st["version"] == rounds
    tasks = out[0]["tasks"]
    acc = RDPAccountant()
    for _ in range(tasks * steps):
        acc.step(noise_multiplier=1.1, sample_rate=batch / samples)
    assert out[0]["dp_sgd_epsilon"] == pytest.approx(acc.get_epsilon(1e-5), abs=1e-9)
    sent = out[1]["updates_accepted"] + out[1]["updates_stale"]
    ldp = shoal_fl.LocalDP(clip=2.0, noise_multiplier=0.8)
    assert out[1]["local_dp_epsilon"] == pytest.approx(ldp.epsilon(sent, 1e-5))
    assert sent >= 1 and out[1]["updates_accepted"] >= 1
