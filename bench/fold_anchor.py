#!/usr/bin/python3
"""Anchor for bench-fold: numpy folding K updates of N params into a float32 accumulator,
acc += w * x.astype(np.float32), on the same sizes as the C++ bench. Prints one line per dtype:
  ANCHOR numpy <dtype> gbps=<update bytes read per second / 1e9> ms_per_update=<ms>
or `ANCHOR numpy missing` when numpy cannot be imported."""
import argparse
import sys
import time

try:
    import numpy as np
except ImportError:
    print("ANCHOR numpy missing")
    sys.exit(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=int, default=25_000_000)
    ap.add_argument("--updates", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dtypes", default="f32,f16")
    a = ap.parse_args()
    rng = np.random.default_rng(1)
    for name in a.dtypes.split(","):
        dt = {"f32": np.float32, "f16": np.float16}[name]
        print(f"fold_anchor: numpy {np.__version__}, {name}, generating {a.updates} updates",
              file=sys.stderr, flush=True)
        xs = [rng.standard_normal(a.params, dtype=np.float32).astype(dt) for _ in range(a.updates)]
        acc = np.zeros(a.params, dtype=np.float32)
        w = np.float32(1.0 / a.updates)
        acc += w * xs[0].astype(np.float32)  # warm-up: first touch of temporaries
        best = float("inf")
        for _ in range(a.reps):
            t0 = time.perf_counter()
            for x in xs:
                acc += w * x.astype(np.float32)
            best = min(best, time.perf_counter() - t0)
        nbytes = a.updates * a.params * np.dtype(dt).itemsize
        print(f"ANCHOR numpy {name} gbps={nbytes / best / 1e9:.3f} "
              f"ms_per_update={best / a.updates * 1e3:.3f}", flush=True)
        del xs, acc


if __name__ == "__main__":
    main()
