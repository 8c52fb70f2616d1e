"""Federated LoRA (issue 36 item 2) through a real shoald: FLJobs whose model is a LoRA adapter
of a shoal-gpt base model (spec.model.lora; a tiny random base from tools.lm.model --random).

- The initial global is LoRA's: every lora_B zero, every lora_A within ±1/sqrt(in).
- FedIT (FedAvg of A and B): two hand-made updates (1 and 3 samples, values multiples of 1/8 so
  every sum is exact) commit to exactly (x1 + 3 x2) / 4, bytes compared.
- HetLoRA: a rank-4 and a rank-2 update commit to (x1 + 3 pad(x2)) / 4 with pad the
  zero-padding to the job's rank 4, bytes compared.
- Refusals: a rank above the job's, a wrong inner size, two ranks in one update, a lower rank in
  a FedIT job (400, the tensor named); hetlora with a robust rule, a base that is no shoal-gpt
  model (the deploy refused, the field named).
- End to end: three SDK clients (tools/lm/fl_lora.py: PyTorch, ranks 4, 2 and 1, each on its own
  manpages-dev pages) fine-tune a HetLoRA job for three rounds; every client's held-out
  perplexity goes down from version 0 to the last.

Run by ctest (fl_lora.integration), or:
  SHOAL_BIN_DIR=build/bin .venv/bin/python -m pytest -q tests/integration/fl_lora_test.py
Needs root (shoald's data plane), torch and Debian's manpages-dev; skips naming what is missing.
"""

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
sys.path.insert(0, ROOT)
from shoal_testlib import BIN, standalone_shoald  # noqa: E402

torch = pytest.importorskip("torch", reason="torch is not installed")
import shoal_fl  # noqa: E402

D_MODEL, N_LAYER = 32, 2
TARGETS = ["attn.qkv", "mlp.fc"]


@pytest.fixture(scope="module")
def base():
    # Beside the build (the leaf instances' sandboxes see it, not the host's /tmp).
    out = os.path.join(os.path.dirname(os.path.abspath(BIN)), "fl_lora")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "base.safetensors")
    subprocess.run([sys.executable, "-m", "tools.lm.model", "--random", "--seed", "3",
                    "--d-model", str(D_MODEL), "--n-layer", str(N_LAYER), "--n-head", "2",
                    "--n-ctx", "64", "--out", path], check=True, cwd=ROOT)
    os.chmod(path, 0o644)
    return path


@pytest.fixture(scope="module")
def shoald():
    with standalone_shoald("fllora") as s:
        yield s


def deploy(shoald, job, base, *, rank=4, method="fedit", clients=2, rounds=1, extra=""):
    return shoald.cli("deploy", "-f", "-", timeout=30, stdin=f"""apiVersion: shoal.dev/v1
kind: FLJob
metadata: {{name: {job}}}
spec:
  algorithm: {{name: fedavg}}
  model:
    lora: {{base: {base}, rank: {rank}, alpha: 8, targets: [{", ".join(TARGETS)}]}}
  clients: {{expected: {clients}}}
  stop: {{rounds: {rounds}}}
  training: {{localSteps: 12, learningRate: 0.01, batchSize: 8}}
  aggregation:
    lora: {{method: {method}}}
{extra}""")


def client(shoald, job):
    token = shoald.api("/v1/tokens", json.dumps({"role": "fl-client", "job": job}).encode())
    return shoal_fl.JobClient(f"http://127.0.0.1:{shoald.port}", job, token["token"])


def shapes(rank):
    """The adapter's tensors at `rank` in the job's order (layer, target, A then B)."""
    d = D_MODEL
    inout = {"attn.qkv": (d, 3 * d), "mlp.fc": (d, 4 * d)}
    out = {}
    for i in range(N_LAYER):
        for t in TARGETS:
            n_in, n_out = inout[t]
            out[f"h.{i}.{t}.lora_A"] = (rank, n_in)
            out[f"h.{i}.{t}.lora_B"] = (n_out, rank)
    return out


def dyadic(rank, seed):
    """Values k/8, |k| <= 16: every weighted sum below is exact in float32."""
    rng = np.random.default_rng(seed)
    return {n: (rng.integers(-16, 17, s) / 8).astype(np.float32) for n, s in shapes(rank).items()}


def pad(x, rank):
    out = {}
    for n, a in x.items():
        z = np.zeros(shapes(rank)[n], np.float32)
        z[: a.shape[0], : a.shape[1]] = a
        out[n] = z
    return out


def wait_version(jc, version, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if int(jc.status().get("version", 0)) >= version:
            return
        time.sleep(0.05)
    raise AssertionError(f"version {version} not committed: {jc.status()}")


def push(jc, member, x, n):
    task = jc.task(member)
    assert task.kind == "train", task
    names = list(shapes(4))
    return jc.push_update(member, task.model_version, names, [x[k] for k in names], n)


def test_fedit_commits_the_weighted_mean_of_a_and_b(shoald, base):
    r = deploy(shoald, "lora-fedit", base)
    assert r.returncode == 0, r.stdout + r.stderr
    jc = client(shoald, "lora-fedit")
    status = jc.status()
    assert status["model"]["architecture"] == "lora"
    assert status["model"]["lora"] == {"base": base, "rank": 4, "alpha": 8.0, "targets": TARGETS,
                                       "method": "fedit"}
    v0 = jc.model(0)
    assert v0.names == list(shapes(4)) and [a.shape for a in v0.arrays] == list(shapes(4).values())
    for n, a in zip(v0.names, v0.arrays):
        if n.endswith("lora_B"):
            assert not a.any(), n  # B = 0: version 0 is the base model
        else:
            assert 0 < np.abs(a).max() <= 1 / np.sqrt(a.shape[1]), n
    a, b = jc.join("a"), jc.join("b")
    x1, x2 = dyadic(4, 1), dyadic(4, 2)
    # A lower rank is refused in a FedIT job, naming the tensor.
    low = dict(x1, **pad(dyadic(2, 9), 4))
    low["h.0.attn.qkv.lora_A"] = low["h.0.attn.qkv.lora_A"][:2]
    with pytest.raises(shoal_fl.BadRequest, match=r"'h\.0\.attn\.qkv\.lora_A': shape \[4,32\] "
                                                   r"expected, got \[2,32\]"):
        push(jc, a, low, 1)
    push(jc, a, x1, 1)
    push(jc, b, x2, 3)
    wait_version(jc, 1)
    got = jc.model(1)
    for n, arr in zip(got.names, got.arrays):
        want = ((x1[n] + 3 * x2[n]) / 4).astype(np.float32)
        assert arr.tobytes() == want.tobytes(), n


def test_hetlora_zero_pads_lower_ranks_and_refuses_the_rest(shoald, base):
    r = deploy(shoald, "lora-het", base, method="hetlora")
    assert r.returncode == 0, r.stdout + r.stderr
    jc = client(shoald, "lora-het")
    a, b = jc.join("a"), jc.join("b")
    names = list(shapes(4))

    def refused(x, pattern):
        task = jc.task(a)
        with pytest.raises(shoal_fl.BadRequest, match=pattern):
            jc.push_update(a, task.model_version, names, [x[k] for k in names], 1)

    refused(dyadic(8, 3), r"'h\.0\.attn\.qkv\.lora_A': rank 8 exceeds the job's rank 4 "
                          r"\(spec\.model\.lora\.rank\), shape \[8,32\]")
    inner = dyadic(2, 4)
    inner["h.1.mlp.fc.lora_B"] = np.zeros((64, 2), np.float32)
    refused(inner, r"'h\.1\.mlp\.fc\.lora_B': shape \[128,r\] expected with 1 <= r <= 4, "
                   r"got \[64,2\]")
    mixed = dyadic(2, 5)
    mixed["h.1.attn.qkv.lora_A"] = np.zeros((3, 32), np.float32)
    refused(mixed, r"tensor 'h\.1\.attn\.qkv\.lora_A': rank 3, but tensor "
                   r"'h\.0\.attn\.qkv\.lora_A' has "
                   r"rank 2 \(one rank per update\)")
    x1, x2 = dyadic(4, 6), dyadic(2, 7)
    push(jc, a, x1, 1)
    push(jc, b, x2, 3)
    wait_version(jc, 1)
    got = jc.model(1)
    padded = pad(x2, 4)
    for n, arr in zip(got.names, got.arrays):
        want = ((x1[n] + 3 * padded[n]) / 4).astype(np.float32)
        assert arr.tobytes() == want.tobytes(), n


def test_manifest_refusals(shoald, base, tmp_path):
    r = deploy(shoald, "lora-bad", base, method="hetlora",
               extra="    robust: {rule: median}\n")
    assert r.returncode != 0
    assert ("spec.aggregation.lora.method: hetlora cannot be combined with "
            "spec.aggregation.robust") in r.stdout + r.stderr
    other = os.path.join(os.path.dirname(base), "not-gpt.safetensors")
    from safetensors.numpy import save_file
    save_file({"w": np.zeros((2, 2), np.float32)}, other)
    r = deploy(shoald, "lora-bad", other)
    assert r.returncode != 0
    assert "spec.model.lora.base: " + other + ": not a shoal-gpt model" in r.stdout + r.stderr


def test_three_clients_fine_tune_and_perplexity_goes_down(shoald, base):
    pytest.importorskip("safetensors")
    from tools.lm import corpus, fl_lora, pretrain
    try:
        corpus.package_version(corpus.FINETUNE_PACKAGE)
    except SystemExit as e:
        pytest.skip(str(e))
    rounds = 3
    r = deploy(shoald, "lora-e2e", base, method="hetlora", clients=3, rounds=rounds)
    assert r.returncode == 0, r.stdout + r.stderr
    pretrain.deterministic(1)
    summaries, errors = {}, []

    def one(k, rank):
        try:
            train, held = fl_lora.client_documents(k, 3, max_pages=45)
            c = fl_lora.LoraClient(base, rank, 4, 8.0, train, held, seed=k, eval_bytes=4096)
            summaries[k] = fl_lora.run(client(shoald, "lora-e2e"), c, name=f"c{k}",
                                       max_seconds=120)
        except Exception as e:  # reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=one, args=(k, r)) for k, r in enumerate((4, 2, 1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=150)
    assert not errors, errors
    for k, s in summaries.items():
        print(f"client {k} rank {s['rank']}: perplexity per version {s['versions']}")
        versions = s["versions"]
        assert 0 in versions and max(versions) == rounds, s
        assert versions[rounds] < versions[0], s
        assert s["updates"] >= 1
