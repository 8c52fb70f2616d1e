#!/usr/bin/python3
"""numpy reference for shoal_fl_robust (tests/fl/robust): reads n updates of d f32
(row-major, raw), an optional f32 reference model, and writes each rule's result as raw float64
to <out>.<rule>; Krum scores go to <out>.krum_scores. Written from the rules' definitions (see
shoal/fl/robust/robust.h), independently of the C++ code: clipping on
the deltas, Krum on explicit pairwise distances, Flag's IRLS in d dimensions through SVDs."""
import argparse

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--d", type=int, required=True)
    p.add_argument("--ref")
    p.add_argument("--clip", type=float, default=0.0)
    p.add_argument("--beta", type=float, default=0.1)
    p.add_argument("--f", type=int, default=1)
    p.add_argument("--m", type=int, default=0)
    p.add_argument("--rank", type=int, default=1)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--tol", type=float, default=1e-10)
    p.add_argument("--eps", type=float, default=1e-7)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    x = np.fromfile(a.data, dtype=np.float32).reshape(a.n, a.d).astype(np.float64)
    ref = np.fromfile(a.ref, dtype=np.float32).astype(np.float64) if a.ref else np.zeros(a.d)
    n = a.n
    delta = x - ref
    c = np.ones(n)
    if a.clip > 0:
        norms = np.linalg.norm(delta, axis=1)
        c = np.where(norms > a.clip, a.clip / np.maximum(norms, 1e-300), 1.0)
    g = delta * c[:, None]
    vals = ref + g

    def save(rule, arr):
        np.asarray(arr, dtype=np.float64).tofile(a.out + "." + rule)

    save("median", np.median(vals, axis=0))
    k = int(np.floor(a.beta * n))
    s = np.sort(vals, axis=0)
    save("trimmed", s[k:n - k].mean(axis=0))
    save("clipped", ref + g.mean(axis=0))

    if n > 2 * a.f + 2:
        dist = np.array([[np.sum((g[i] - g[j]) ** 2) for j in range(n)] for i in range(n)])
        nearest = n - a.f - 2
        scores = np.array([np.sort(np.delete(dist[i], i))[:nearest].sum() for i in range(n)])
        m = a.m if a.m > 0 else n - a.f
        chosen = np.argsort(scores, kind="stable")[:m]
        save("krum", ref + g[chosen].mean(axis=0))
        save("krum_scores", scores)

    norms = np.linalg.norm(g, axis=1)
    v = (g / np.where(norms > 0, norms, 1.0)[:, None]).T  # d x n
    w = np.where(norms > 0, 1.0, 0.0)
    prev = np.inf
    for it in range(1, a.iters + 1):
        u, sv, _ = np.linalg.svd(v * w[None, :], full_matrices=False)
        r = int(min(a.rank, np.sum(sv ** 2 > 1e-12 * sv[0] ** 2)))
        y = u[:, :r]
        cos2 = np.minimum(1.0, np.sum((y.T @ v) ** 2, axis=0))
        obj = np.sum(np.sqrt(np.maximum(0.0, 1 - cos2))[norms > 0])
        if abs(obj - prev) <= a.tol or it == a.iters:
            break
        prev = obj
        w = np.where(norms > 0, (np.maximum(0.0, 1 - cos2) + a.eps) ** -0.25, 0.0)
    save("flag", ref + y @ (y.T @ g.mean(axis=0)))
    save("flag_cos2", cos2)


if __name__ == "__main__":
    main()
