#!/usr/bin/env python3
"""Anchor for bench-fold: numpy 2 (the project venv's) folding K updates of N params into a float32
accumulator, on the same sizes and thread counts as the C++ bench, in the two in-place forms a
numpy user would write:

  inplace  np.multiply(x, w, out=tmp, dtype=np.float32); acc += tmp    (tmp: N floats)
  blocked  the same over blocks of --block elements, so tmp stays in cache and only acc and x
           go to memory

First lines: `ANCHOR numpy version=<v>`, `ANCHOR numpy peer=<numpy version and its BLAS>` and
`ANCHOR numpy openblas=<path of the OpenBLAS numpy loaded>` (bench-fold runs its saxpy anchor on
that library; absent when threadpoolctl finds none). Threads: with --threads T > 1 each of T Python
threads folds its own contiguous slice of acc (numpy releases the GIL inside the ufuncs), like
Shoal's FoldPool. Prints one line per (dtype, form, threads):
  ANCHOR numpy <dtype> form=<f> threads=<t> gbps=<best> ms_per_update=<best> rep_s=<s,s,...>
(gbps: update bytes read per second / 1e9, best of --reps passes over the K updates;
rep_s: each pass's seconds) or `ANCHOR numpy missing` when numpy cannot be imported."""
import argparse
import os
import sys
import threading
import time

try:
    import numpy as np
except ImportError:
    print("ANCHOR numpy missing")
    sys.exit(0)


def fold_slice(acc, xs, w, lo, hi, block):
    """Folds every update's [lo, hi) into acc[lo:hi]."""
    if block <= 0:
        tmp = np.empty(hi - lo, dtype=np.float32)
        a = acc[lo:hi]
        for x in xs:
            np.multiply(x[lo:hi], w, out=tmp, dtype=np.float32)
            a += tmp
        return
    tmp = np.empty(block, dtype=np.float32)
    for x in xs:
        for b in range(lo, hi, block):
            e = min(hi, b + block)
            t = tmp[:e - b]
            np.multiply(x[b:e], w, out=t, dtype=np.float32)
            a = acc[b:e]
            a += t


def timed_passes(acc, xs, w, threads, block, reps):
    n = acc.shape[0]
    # Slices on 16-element (64-byte) boundaries, as FoldPool's chunks.
    cuts = [min(n, (n * t // threads) & ~15) for t in range(threads)] + [n]
    start = threading.Barrier(threads + 1)
    done = threading.Barrier(threads + 1)
    stop = [False]

    def worker(t):
        while True:
            start.wait()
            if stop[0]:
                return
            fold_slice(acc, xs, w, cuts[t], cuts[t + 1], block)
            done.wait()

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)] if threads > 1 else []
    for th in pool:
        th.start()

    def one_pass():
        if threads == 1:
            fold_slice(acc, xs, w, 0, n, block)
            return
        start.wait()
        done.wait()

    fold_slice(acc, xs[:1], w, 0, n, block)  # warm-up: first touch of tmp
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        one_pass()
        times.append(time.perf_counter() - t0)
    if pool:
        stop[0] = True
        start.wait()
        for th in pool:
            th.join()
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=int, default=25_000_000)
    ap.add_argument("--updates", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="also run on this many threads")
    ap.add_argument("--block", type=int, default=32768, help="elements per block (blocked form)")
    ap.add_argument("--dtypes", default="f32,f16")
    a = ap.parse_args()
    if a.params <= 0 or a.updates <= 0 or a.reps <= 0 or a.threads <= 0 or a.block <= 0:
        ap.error("--params, --updates, --reps, --threads and --block must be > 0")
    print(f"ANCHOR numpy version={np.__version__}", flush=True)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from anchor_blas import blas_in_use, openblas_path
    print(f"ANCHOR numpy peer=numpy {np.__version__}, {blas_in_use()}", flush=True)
    if openblas_path():
        print(f"ANCHOR numpy openblas={openblas_path()}", flush=True)
    rng = np.random.default_rng(1)
    thread_counts = [1] + ([a.threads] if a.threads > 1 else [])
    for name in a.dtypes.split(","):
        dt = {"f32": np.float32, "f16": np.float16}[name]
        print(f"fold_anchor: numpy {np.__version__}, {name}, generating {a.updates} updates",
              file=sys.stderr, flush=True)
        xs = [rng.standard_normal(a.params, dtype=np.float32).astype(dt) for _ in range(a.updates)]
        acc = np.zeros(a.params, dtype=np.float32)
        w = np.float32(1.0 / a.updates)
        nbytes = a.updates * a.params * np.dtype(dt).itemsize
        for form, block in (("inplace", 0), ("blocked", a.block)):
            for threads in thread_counts:
                times = timed_passes(acc, xs, w, threads, block, a.reps)
                best = min(times)
                print(f"ANCHOR numpy {name} form={form} threads={threads} "
                      f"gbps={nbytes / best / 1e9:.3f} ms_per_update={best / a.updates * 1e3:.3f} "
                      f"rep_s={','.join(f'{t:.6f}' for t in times)}", flush=True)
        del xs, acc


if __name__ == "__main__":
    main()
