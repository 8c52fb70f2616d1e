"""The lm inference function follows an FL job over LoRA adapters (issue 36 item 3, hot swap):
an FLJob with spec.model.lora on a random shoal-gpt base, one SDK client committing a new adapter
each round (deterministic per round), and an lm function whose adapter `live` follows the job.
Four request threads load it (bounded in count and time) while the job runs: every request is
answered 200 with a finish reason (none dropped), at least two versions serve requests, and every
answer equals the PyTorch reference (tools/lm/model.py) with the job's adapter of the version it
names (system_fingerprint), token for token.

Run by ctest (lm_hotswap.integration), or:
  SHOAL_BIN_DIR=build/bin .venv/bin/python -m pytest -q tests/integration/lm_hotswap_test.py
Needs root (shoald's data plane) and torch; skips naming what is missing.
"""

import http.client
import json
import os
import sys
import threading
import time

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, ROOT)
from shoal_testlib import BIN, standalone_shoald  # noqa: E402

torch = pytest.importorskip("torch", reason="torch is not installed")
import shoal_fl  # noqa: E402
from tools.lm import model as ref  # noqa: E402

JOB, FN, ROUNDS, ALPHA, RANK = "lora-live", "lm-live", 4, 8.0, 4
PROMPTS = ["Hello", "abc", "The quick", "xyz"]
MAX_REQUESTS = 1000  # the load's bound (and 90 s); paced to span the job's rounds


class AdapterClient(shoal_fl.Client):
    """Sends a new adapter each round: B drawn from the round's number (A kept). Keeps each
    global version it trained from (the job keeps only its newest)."""

    def __init__(self):
        self.versions = {}

    def fit(self, parameters, config):
        names = config["parameter_names"]
        self.versions[config["model_version"]] = {
            n: np.array(p, np.float32) for n, p in zip(names, parameters)}
        rng = np.random.default_rng(config["model_version"] + 1)
        out = []
        for n, p in zip(names, parameters):
            p = np.array(p, np.float32)
            out.append(rng.normal(0, 0.05, p.shape).astype(np.float32) if n.endswith("lora_B")
                       else p)
        time.sleep(1.0)  # let requests run on each version
        return out, 1, {}

    def evaluate(self, parameters, config):
        return None


def post(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", f"/fn/{FN}/v1/completions", json.dumps(body),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def test_adapter_follows_the_fl_job_under_load():
    out = os.path.join(os.path.dirname(os.path.abspath(BIN)), "lm_hotswap")
    os.makedirs(out, exist_ok=True)
    base = os.path.join(out, "base.safetensors")
    ref.main(["--random", "--seed", "7", "--out", base])
    os.chmod(base, 0o644)
    with standalone_shoald("lmswap") as s:
        s.deploy(f"""apiVersion: shoal.dev/v1
kind: FLJob
metadata: {{name: {JOB}}}
spec:
  algorithm: {{name: fedavg}}
  model: {{lora: {{base: {base}, rank: {RANK}, alpha: {ALPHA}}}}}
  clients: {{expected: 1}}
  stop: {{rounds: {ROUNDS}}}
---
apiVersion: shoal.dev/v1
kind: Function
metadata: {{name: {FN}}}
spec:
  handler: inference
  concurrency: 8
  scale: {{min: 1, max: 1}}
  inference:
    threads: 1
    source:
      lm:
        base: {base}
        adapters:
          - {{name: live, flJob: {JOB}}}
""")
        s.wait_ready(FN, timeout=60)
        token = s.api("/v1/tokens", json.dumps({"role": "fl-client", "job": JOB}).encode())["token"]
        errors, answers = [], []
        client = AdapterClient()
        trainer = threading.Thread(target=lambda: shoal_fl.run_client(
            s.gw, JOB, client, token=token, name="c0", evaluate=False,
            evaluate_final=False, max_seconds=90))
        trainer.start()
        stop = time.time() + 90

        def load(k):
            i = 0
            while trainer.is_alive() and time.time() < stop and len(answers) < MAX_REQUESTS:
                prompt = PROMPTS[(k + i) % len(PROMPTS)]
                status, data = post(s.port, {"model": f"{FN}:live", "prompt": prompt,
                                             "max_tokens": 8, "temperature": 0,
                                             "return_token_ids": True})
                if status != 200:
                    errors.append((status, data[:300]))
                else:
                    answers.append((prompt, json.loads(data)))
                i += 1
                time.sleep(0.025)

        threads = [threading.Thread(target=load, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads + [trainer]:
            t.join(timeout=120)
        assert not errors, (errors[:3], s.cli("logs", FN).stdout[-3000:])
        jc = shoal_fl.JobClient(s.gw, JOB, token)
        assert jc.status()["version"] == ROUNDS
        client.versions[ROUNDS] = jc.model(ROUNDS).state_dict()
        by_version = {}
        for prompt, a in answers:
            assert a["choices"][0]["finish_reason"] in ("stop", "length")
            v = int(a["system_fingerprint"].rsplit("-v", 1)[1])
            by_version.setdefault(v, []).append((prompt, a["choices"][0]["token_ids"]))
        print(f"{len(answers)} answers, by version: "
              f"{ {v: len(i) for v, i in sorted(by_version.items())} }")
        assert len(by_version) >= 2, (sorted(by_version), s.cli("logs", FN).stdout[-3000:])
        for v, items in sorted(by_version.items()):
            m = ref.load(base)
            tensors = {k: torch.from_numpy(np.array(t, np.float32)).reshape(np.shape(t))
                       for k, t in client.versions[v].items()}
            ref.apply_lora(m, tensors, ALPHA)
            want = {p: ref.generate(m, ref.encode(p), 8) for p in PROMPTS}
            for prompt, got in items:
                assert got == want[prompt], (v, prompt)
            print(f"version {v}: {len(items)} answers equal the reference")
