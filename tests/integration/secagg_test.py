"""Secure aggregation (spec.privacy.secureAggregation, SecAgg+) through a live shoald with the
Python SDK: ten clients (neighbours 6, threshold 3) run FedAvg rounds in this process, stage by
stage, so dropouts and misbehaviour land exactly where the test puts them.

 - round 1: c8 drops after advertising its keys, c7 after sharing them, c6 after its masked
   input; c9 sits the round out. The committed round's unmasked sum (its SHA-256 in the job's
   status) equals the plaintext fixed-point sum of the survivors' inputs exactly, and the new
   model is its decoded mean. On the way: a replayed key, a client outside the graph, a masked
   input from a client that did not share, and a plain F32 update are refused with a 4xx that
   names the field or the reason.
 - round 2: nobody drops; a wrong unmask share is refused naming it, then the round commits.
 - round 3: only two clients send masked inputs (threshold 3): the round is refused with the
   reason and no version is made; round 4 commits again (no other round is lost).
And shoal-client's C++ clients with Python clients in the same rounds (each opens the other's
shares).

Run by ctest (secagg.integration), or:
  SHOAL_BIN_DIR=build/bin .venv/bin/python -m pytest -q tests/integration/secagg_test.py
Needs root (shoald's data plane and sandbox) and the venv's cryptography.
"""

import hashlib
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from shoal_testlib import fl_client_env, shoal_client_argv, standalone_shoald  # noqa: E402

pytest.importorskip("cryptography")
import shoal_fl  # noqa: E402
from shoal_fl import secagg  # noqa: E402
from shoal_fl.dtypes import DType  # noqa: E402

JOB = "secure"
N, K, T, CLIP, BITS = 10, 6, 3, 1.0, 16
MANIFEST = f"""apiVersion: shoal.dev/v1
kind: FLJob
metadata: {{name: {JOB}}}
spec:
  algorithm: {{name: fedavg}}
  model: {{architecture: mlp, hidden: 16, seed: 1}}
  data: {{dataset: digits}}
  clients: {{expected: {N}}}
  stop: {{rounds: 10}}
  training: {{localSteps: 5, learningRate: 0.1, batchSize: 32}}
  aggregation: {{maxFanIn: 4, maxLeaves: 2}}
  privacy:
    secureAggregation: {{threshold: {T}, neighbours: {K}, clipRange: {CLIP}, bits: {BITS},
                         stageTimeout: 2s}}
"""


@pytest.fixture
def shoald():
    with standalone_shoald("sa") as s:
        yield s


def expect_error(status, text, fn, *args):
    with pytest.raises(shoal_fl.HttpError) as e:
        fn(*args)
    assert e.value.status == status, str(e.value)
    assert text in str(e.value), str(e.value)
    return str(e.value)


class Round:
    """One protocol round driven client by client."""

    def __init__(self, jc, members):
        self.jc, self.members = jc, members
        self.keys = {}
        self.rid = 0

    def auth(self, c):
        m = self.members[c]
        return {"client_id": m.client_id, "token": m.token}

    def advertise(self, c):
        self.keys[c] = secagg.RoundKeys.fresh()
        r = self.jc.secagg_post("advertise", {**self.auth(c), **self.keys[c].advertisement()})
        self.rid = r["round"]

    def wait(self, c, stages, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            st = self.jc.secagg_state(self.members[c], self.rid)
            if st["stage"] in stages:
                return st
            time.sleep(0.02)
        raise AssertionError(f"{c}: round {self.rid} stayed at {st['stage']}")

    def share(self, c):
        st = self.wait(c, ("share",))
        self.jc.secagg_post("shares", {**self.auth(c), "round": self.rid,
                                       "shares": secagg.seal_shares(self.keys[c], st, T)})

    def masked(self, c, q):
        st = self.wait(c, ("input",))
        return secagg.mask_vector(self.keys[c], st, q)

    def unmask_body(self, c):
        st = self.wait(c, ("unmask",))
        return {**self.auth(c), "round": self.rid,
                "shares": secagg.unmask_shares(self.keys[c], st)}


def split_like(flat, model):
    out, at = [], 0
    for a in model.arrays:
        out.append(flat[at:at + a.size].reshape(a.shape))
        at += a.size
    return out


def status_round(shoald, rid, timeout=30):
    """The job's status once protocol round `rid` is done or failed."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        st = shoald.api(f"/v1/jobs/{JOB}")
        for r in st.get("secure_aggregation", {}).get("rounds", []):
            if r["round"] == rid and ("sum_sha256" in r or r["stage"] == "failed"):
                return st, r
        time.sleep(0.05)
    raise AssertionError(f"round {rid} did not finish: {st.get('secure_aggregation')}\n"
                         f"{shoald.d.log()[-3000:]}")


def wait_version(jc, version, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if jc.status()["version"] >= version:
            return
        time.sleep(0.05)
    raise AssertionError(f"version {version} not committed")


def test_secure_rounds_with_dropouts_refusals_and_too_few_survivors(shoald):
    shoald.deploy(MANIFEST)
    token = shoald.api("/v1/tokens", json.dumps({"role": "fl-client", "job": JOB}).encode())["token"]
    jc = shoal_fl.JobClient(f"http://127.0.0.1:{shoald.port}", JOB, token)
    joined = [jc.join(f"client{k}") for k in range(N)]
    members = {m.client_id: m for m in joined}
    assert sorted(members) == sorted(f"c{k}" for k in range(N))
    model = jc.model(0)
    names = model.names
    n = sum(a.size for a in model.arrays)
    rng = np.random.default_rng(5)
    values = {c: rng.uniform(-0.9, 0.9, n).astype(np.float32) for c in members}
    q = {c: secagg.quantize(values[c], CLIP, BITS) for c in members}

    def push(c, y, version):
        return jc.push_update(members[c], version, names, split_like(y, model), 1,
                              dtype=DType.U32)

    # ---- round 1: dropouts after each stage, and the refusals -----------------------------
    r = Round(jc, members)
    r.advertise("c0")
    replay = {**r.auth("c1"), **secagg.RoundKeys.fresh().advertisement()}
    replay["c_pk"] = r.keys["c0"].advertisement()["c_pk"]
    expect_error(409, "c_pk: this public key was already advertised", jc.secagg_post,
                 "advertise", replay)
    for c in [f"c{k}" for k in range(1, 9)]:  # c9 sits round 1 out
        r.advertise(c)
    expect_error(409, f"client 'c3' already advertised keys for secure-aggregation round {r.rid}",
                 jc.secagg_post, "advertise", {**r.auth("c3"), **r.keys["c3"].advertisement()})
    for c in [f"c{k}" for k in range(0, 8)]:  # c8 drops after advertising
        r.share(c)
    msg = expect_error(403, "client: 'c9' is not in secure-aggregation round", jc.secagg_post,
                       "shares", {**r.auth("c9"), "round": r.rid, "shares": {}})
    assert "did not advertise keys" in msg
    survivors = [f"c{k}" for k in range(0, 7)]  # c7 drops after sharing
    ys = {c: r.masked(c, q[c]) for c in survivors}
    # A plain update in a secure job; a masked one from c8, which never shared its keys.
    expect_error(400, "dtype F32 not allowed (this job aggregates securely", jc.push_update,
                 members["c0"], 0, names, model.arrays, 1)
    expect_error(403, "'c8' is not in secure-aggregation round", push, "c8", ys["c0"], 0)
    for c in survivors:
        push(c, ys[c], 0)
    for c in survivors[:-1]:  # c6 drops after its masked input
        jc.secagg_post("unmask", r.unmask_body(c))
    st, info = status_round(shoald, r.rid)
    assert info["stage"] == "done", info
    assert (info["survivors"], info["dropped"]) == (7, 1)
    plain = sum(q[c].astype(np.uint64) for c in survivors).astype(np.uint32)
    assert info["sum_sha256"] == hashlib.sha256(plain.astype("<u4").tobytes()).hexdigest()
    wait_version(jc, 1)
    got = np.concatenate([a.reshape(-1) for a in jc.model(1).arrays])
    want = secagg.decode_sum(plain, len(survivors), CLIP, BITS) / len(survivors)
    assert np.max(np.abs(got - want)) < 1e-5
    # What the server holds of a survivor is uniform-looking; the sum is the plain one.
    assert not np.array_equal(ys["c0"], q["c0"])

    # ---- round 2: everyone; a wrong unmask share is named, then the right ones ------------
    r = Round(jc, members)
    everyone = list(members)
    for c in everyone:
        r.advertise(c)
    for c in everyone:
        r.share(c)
    for c in everyone:
        push(c, r.masked(c, q[c]), 1)
    bodies = {c: r.unmask_body(c) for c in everyone}
    for c in everyone[:-1]:
        jc.secagg_post("unmask", bodies[c])
    last = dict(bodies[everyone[-1]])
    victim = sorted(last["shares"])[0]
    wrong = {**last["shares"], victim: [(last["shares"][victim][0] + 1) % secagg.PRIME] +
             last["shares"][victim][1:]}
    expect_error(400, f"shares.{victim}: does not match the secret", jc.secagg_post, "unmask",
                 {**last, "shares": wrong})
    jc.secagg_post("unmask", last)
    st, info = status_round(shoald, r.rid)
    assert info["stage"] == "done" and info["survivors"] == N
    plain = sum(q[c].astype(np.uint64) for c in everyone).astype(np.uint32)
    assert info["sum_sha256"] == hashlib.sha256(plain.astype("<u4").tobytes()).hexdigest()
    wait_version(jc, 2)

    # ---- round 3: two survivors of threshold 3 -> refused; round 4 commits ----------------
    r = Round(jc, members)
    for c in everyone:
        r.advertise(c)
    for c in everyone:
        r.share(c)
    for c in ("c0", "c1"):
        push(c, r.masked(c, q[c]), 2)
    for c in ("c0", "c1"):
        jc.secagg_post("unmask", r.unmask_body(c))
    st, info = status_round(shoald, r.rid)
    assert info["stage"] == "failed"
    assert info["reason"] == "2 survivor(s), fewer than the threshold 3", info
    assert st["version"] == 2
    assert r.wait("c0", ("failed",))["reason"] == info["reason"]

    r = Round(jc, members)
    for c in everyone:
        r.advertise(c)
    for c in everyone:
        r.share(c)
    for c in everyone:
        push(c, r.masked(c, q[c]), 2)
    for c in everyone:
        jc.secagg_post("unmask", r.unmask_body(c))
    st, info = status_round(shoald, r.rid)
    assert info["stage"] == "done"
    wait_version(jc, 3)
    jc.close()


MIXED = """apiVersion: shoal.dev/v1
kind: FLJob
metadata: {name: digits}
spec:
  algorithm: {name: fedavg}
  model: {architecture: mlp, hidden: 16, seed: 1}
  data: {dataset: digits}
  clients: {expected: 4}
  stop: {rounds: 2}
  training: {localSteps: 5, learningRate: 0.1, batchSize: 32}
  aggregation: {maxFanIn: 4, maxLeaves: 2}
  privacy:
    secureAggregation: {threshold: 2, neighbours: 2, clipRange: 1.0, bits: 16,
                         stageTimeout: 20s}
"""


def test_cpp_and_python_clients_share_secure_rounds(shoald):
    """Two shoal-client (C++) clients and two Python SDK clients in the same SecAgg+ rounds: each
    side opens the shares the other sealed (the unmask needs them), the server reconstructs
    both sides' secrets from the other side's shares, and both rounds commit with 4 survivors."""
    shoald.deploy(MIXED)
    token = shoald.api("/v1/tokens", json.dumps({"role": "fl-client", "job": "digits"})
                       .encode())["token"]
    server = f"http://127.0.0.1:{shoald.port}"
    cpp = subprocess.Popen(shoal_client_argv(server, 2, "0", 120) + ["--no-evaluator"],
                           env=fl_client_env(token), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    errors = []

    def python_client(k):
        try:
            jc = shoal_fl.JobClient(server, "digits", token)
            me = jc.join(f"py{k}")
            model = jc.model(0)
            n = sum(a.size for a in model.arrays)
            rng = np.random.default_rng(10 + k)
            for version in (0, 1):
                wait_version(jc, version, timeout=60)
                sa = secagg.SecAggClient(jc, me, timeout_s=60)
                sa.advertise()
                sa.share(threshold=2)
                q = secagg.quantize(rng.uniform(-0.5, 0.5, n).astype(np.float32), 1.0, 16)
                jc.push_update(me, version, model.names, split_like(sa.masked(q), model), 1,
                               dtype=DType.U32)
                sa.unmask()
            jc.close()
        except Exception as e:  # reported by the test's thread
            errors.append(f"py{k}: {e!r}")

    threads = [threading.Thread(target=python_client, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=150)
    out, _ = cpp.communicate(timeout=150)
    assert not errors, errors
    assert cpp.returncode == 0, out
    assert "shoal-client: job done" in out, out
    assert ("secure aggregation: 4 masked updates sent in finished SecAgg+ rounds, 0 rounds "
            "this client could not finish") in out, out
    st = shoald.api("/v1/jobs/digits")
    assert st["version"] == 2, st
    rounds = st["secure_aggregation"]["rounds"]
    done = [r for r in rounds if r["stage"] == "done"]
    assert len(done) == 2, rounds
    for r in done:
        assert (r["inputs"], r["survivors"], r["dropped"]) == (4, 4, 0), r
        assert len(r["sum_sha256"]) == 64, r
