#!/usr/bin/env python3
"""Anchor for bench-robust: the robust rules as a numpy user writes them, on K random f32 updates
of N params (row-major K x N), each over --threads contiguous column slices on Python threads
(numpy releases the GIL in sort/partition and in BLAS). numpy 2 (the project venv's) on the
OpenBLAS it bundles; a rule with two forms a user might write runs both, and bench-robust keeps
the faster:

  fold     x.mean(axis=0) (float32)                          the plain average, for scale
  median   form np.median:  np.median(x, axis=0)               (introselect per column)
           form np.sort:    s = np.sort(x, axis=0); the middle row (K odd) or the mean of the
                            middle two (numpy 2 sorts short columns with its SIMD sort, which on
                            these sizes beats its selection)
  trimmed  k = floor(beta K); the mean of rows k .. K-k-1 of
           form np.partition: np.partition(x, [k, K-1-k], axis=0)
           form np.sort:      np.sort(x, axis=0)
  krum     squared distances from the Gram matrix x @ x.T (float32 BLAS on --threads threads),
           scores = sum of the K-f-2 smallest, mean of the m = K-f best

Prints `ANCHOR numpy version=<v>`, `ANCHOR numpy peer=<numpy version and the BLAS it runs on>`,
then per rule and form `ANCHOR numpy <rule> form=<form> rep_s=<s,s,...>`, or
`ANCHOR numpy missing`."""
import argparse
import os
import sys
import threading
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--params", type=int, default=11689512)
    p.add_argument("--updates", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--beta", type=float, default=0.1)
    p.add_argument("--f", type=int, default=15)
    a = p.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(a.threads))  # bench-robust sets it too
    try:
        import numpy as np
    except ImportError:
        print("ANCHOR numpy missing", flush=True)
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from anchor_blas import blas_in_use
    print(f"ANCHOR numpy version={np.__version__}", flush=True)
    print(f"ANCHOR numpy peer=numpy {np.__version__}, {blas_in_use()}", flush=True)
    K, N = a.updates, a.params
    rng = np.random.default_rng(1)
    x = np.empty((K, N), dtype=np.float32)
    for i in range(K):
        x[i] = rng.standard_normal(N, dtype=np.float32)
    k = int(np.floor(a.beta * K))
    out = np.empty(N, dtype=np.float32)

    def sliced(fn):
        bounds = [N * t // a.threads for t in range(a.threads + 1)]

        def work(lo, hi):
            out[lo:hi] = fn(x[:, lo:hi])

        ts = [threading.Thread(target=work, args=(bounds[t], bounds[t + 1]))
              for t in range(a.threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    def median_sorted(s):
        srt = np.sort(s, axis=0)
        if K % 2:
            return srt[K // 2]
        return (srt[K // 2 - 1] + srt[K // 2]) * np.float32(0.5)

    def trimmed_partition(s):
        part = np.partition(s, [k, K - 1 - k], axis=0)
        return part[k:K - k].mean(axis=0)

    def trimmed_sorted(s):
        return np.sort(s, axis=0)[k:K - k].mean(axis=0)

    def krum():
        g = x @ x.T
        sq = np.diag(g).astype(np.float64)
        d = sq[:, None] + sq[None, :] - 2 * g.astype(np.float64)
        nearest = K - a.f - 2
        scores = np.array([np.sort(np.delete(d[i], i))[:nearest].sum() for i in range(K)])
        chosen = np.argsort(scores, kind="stable")[:K - a.f]
        out[:] = x[chosen].mean(axis=0)

    rules = [
        ("fold", "mean", lambda: sliced(lambda s: s.mean(axis=0))),
        ("median", "np.median", lambda: sliced(lambda s: np.median(s, axis=0))),
        ("median", "np.sort", lambda: sliced(median_sorted)),
        ("trimmed", "np.partition", lambda: sliced(trimmed_partition)),
        ("trimmed", "np.sort", lambda: sliced(trimmed_sorted)),
        ("krum", "gram", krum),
    ]
    for name, form, fn in rules:
        reps = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            fn()
            reps.append(time.perf_counter() - t0)
        print(f"ANCHOR numpy {name} form={form} rep_s={','.join(f'{r:.4f}' for r in reps)}",
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
