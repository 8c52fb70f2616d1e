#!/usr/bin/env python3
"""bench-secagg's Shoal clients: N clients of one FLJob on a running shoald, driven stage by
stage from this process through the Python SDK (shoal_fl.secagg for a job with
spec.privacy.secureAggregation, plain F32 updates for the same model in a job without it).

Per round:
  server CPU s   utime+stime of shoald and its descendants (the zygote, the leaves), /proc,
                 from the round's first request to the commit (client 0 sees the new version)
  round s        the same span, wall clock
  commit s       the last request of the round answered -> the new version visible
  client s       the secure protocol's computation per client (fresh keys, sealing the shares,
                 quantizing and masking the update, opening the shares for the unmask), HTTP
                 left out (as the Flower side's figure leaves its transport out)
Every client's values are its own (seeded); the rounds' sums are checked against the plain
fixed-point sum (sum_sha256 in the job's status). One JSON object on stdout.
"""

import argparse
import hashlib
import json
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fl_flower_load import tree_cpu  # noqa: E402

import shoal_fl  # noqa: E402
from shoal_fl import secagg  # noqa: E402
from shoal_fl.dtypes import DType  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--job", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--clients", type=int, required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--root-pid", type=int, required=True)
    ap.add_argument("--secure", action="store_true")
    ap.add_argument("--threshold", type=int, default=8)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--bits", type=int, default=16)
    a = ap.parse_args()

    jc = shoal_fl.JobClient(a.server, a.job, a.token)
    members = [jc.join(f"bench{k}") for k in range(a.clients)]
    model = jc.model(0)
    names = model.names
    n = sum(x.size for x in model.arrays)
    rng = np.random.default_rng(3)
    values = [rng.uniform(-0.5, 0.5, n).astype(np.float32) for _ in members]

    def split(flat):
        out, at = [], 0
        for x in model.arrays:
            out.append(flat[at:at + x.size].reshape(x.shape))
            at += x.size
        return out

    def wait_stage(m, rid, stages):
        while True:
            st = jc.secagg_state(m, rid)
            if st["stage"] in stages:
                return st
            if st["stage"] == "failed":
                raise RuntimeError(f"round {rid} failed: {st.get('reason')}")
            time.sleep(0.005)

    rows = []
    for r in range(a.rounds):
        version = jc.status()["version"]
        cpu0, t0 = tree_cpu(a.root_pid), time.perf_counter()
        client = 0.0
        if a.secure:
            keys = []
            for m in members:
                c0 = time.perf_counter()
                k = secagg.RoundKeys.fresh()
                adv = k.advertisement()
                client += time.perf_counter() - c0
                keys.append(k)
                rid = jc.secagg_post("advertise", {"client_id": m.client_id, "token": m.token,
                                                   **adv})["round"]
            for m, k in zip(members, keys):
                st = wait_stage(m, rid, ("share",))
                c0 = time.perf_counter()
                sealed = secagg.seal_shares(k, st, a.threshold)
                client += time.perf_counter() - c0
                jc.secagg_post("shares", {"client_id": m.client_id, "token": m.token,
                                          "round": rid, "shares": sealed})
            qs = []
            for m, k, v in zip(members, keys, values):
                st = wait_stage(m, rid, ("input",))
                c0 = time.perf_counter()
                q = secagg.quantize(v, a.clip, a.bits)
                y = secagg.mask_vector(k, st, q)
                client += time.perf_counter() - c0
                qs.append(q)
                jc.push_update(m, version, names, split(y), 1, dtype=DType.U32)
            for m, k in zip(members, keys):
                st = wait_stage(m, rid, ("unmask",))
                c0 = time.perf_counter()
                body = secagg.unmask_shares(k, st)
                client += time.perf_counter() - c0
                t_last = time.perf_counter()
                jc.secagg_post("unmask", {"client_id": m.client_id, "token": m.token,
                                          "round": rid, "shares": body})
        else:
            for m, v in zip(members, values):
                t_last = time.perf_counter()
                jc.push_update(m, version, names, split(v), 1)
        t_answered = time.perf_counter()
        while jc.status()["version"] <= version:
            time.sleep(0.002)
        t1 = time.perf_counter()
        row = {"server_cpu_s": tree_cpu(a.root_pid) - cpu0, "round_s": t1 - t0,
               "commit_s": t1 - t_answered, "client_s": client / a.clients}
        if a.secure:
            st = jc.status()
            info = [x for x in st["secure_aggregation"]["rounds"] if x["round"] == rid][0]
            plain = np.zeros(n, np.uint64)
            for q in qs:
                plain += q
            want = hashlib.sha256(plain.astype(np.uint32).astype("<u4").tobytes()).hexdigest()
            row["exact"] = info.get("sum_sha256") == want
        rows.append(row)
    del t_last
    out = {"system": "shoal", "secure": a.secure, "clients": a.clients, "params": n,
           "rounds": rows}
    for key in ("server_cpu_s", "round_s", "commit_s", "client_s"):
        out[key] = statistics.median(x[key] for x in rows)
    json.dump(out, sys.stdout)
    print()
    jc.close()


if __name__ == "__main__":
    main()
