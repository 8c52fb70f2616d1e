#!/usr/bin/env python3
"""Anchors for bench-gpu-aggregate, measured on the same GPU in the same run: what a GPU-savvy
user gets from stock tools for folding K updates of N params into a float32 accumulator.
  torch_add     for x in xs: acc.add_(x, alpha=w)          (one kernel per update)
  torch_gemv    acc = w @ stacked                           (one cuBLAS GEMV over [K, N])
  triton        a fused kernel: acc += sum_k w[k] * x[k]    (acc read and written once)
  d2d_copy      stacked.copy_ to another device buffer      (read + write bytes)
  pinned_h2d    pinned host -> device copy of the updates   (bytes copied)
Prints `PEER torch <version>, triton <version>` once torch imports (the peers' versions, for the
table), then `ANCHOR <name> <dtype> gbps=<update bytes read per second / 1e9> ms=<ms for K
updates>` or `ANCHOR <name> <dtype> unavailable <why>`; nothing else on stdout."""
import argparse
import sys


def out(*a):
    print(*a, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=int, default=11_689_512)
    ap.add_argument("--updates", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dtypes", default="f32,bf16")
    a = ap.parse_args()
    names = ["torch_add", "torch_gemv", "triton", "d2d_copy", "pinned_h2d"]
    try:
        import torch
    except ImportError as e:
        for n in names:
            out(f"ANCHOR {n} all unavailable torch not importable ({e})")
        return
    try:
        import triton as triton_version
        triton_text = f"triton {triton_version.__version__}"
    except Exception as e:  # noqa: BLE001: any failure only means no Triton anchor
        triton_text = f"triton missing ({type(e).__name__})"
    out(f"PEER torch {torch.__version__}, {triton_text}")
    if not torch.cuda.is_available():
        for n in names:
            out(f"ANCHOR {n} all unavailable torch sees no CUDA device")
        return
    try:
        import triton
        import triton.language as tl

        @triton.jit
        def fold_kernel(acc_ptr, x_ptr, w_ptr, n, K: tl.constexpr, BLOCK: tl.constexpr):
            offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            acc = tl.load(acc_ptr + offs, mask=mask)
            for k in range(K):
                x = tl.load(x_ptr + k * n + offs, mask=mask).to(tl.float32)
                acc += tl.load(w_ptr + k) * x
            tl.store(acc_ptr + offs, acc, mask=mask)

        def triton_fold(acc, stacked, w):
            n = acc.numel()
            grid = (triton.cdiv(n, 2048),)
            fold_kernel[grid](acc, stacked, w, n, K=stacked.shape[0], BLOCK=2048)
        triton_err = None
    except Exception as e:  # ImportError, or a Triton without a working backend
        triton_fold, triton_err = None, f"{type(e).__name__}: {e}"

    dev = torch.device("cuda")
    K, N = a.updates, a.params
    print(f"gpu_aggregate_anchor: torch {torch.__version__} on {torch.cuda.get_device_name()}",
          file=sys.stderr, flush=True)

    def best_ms(fn):
        fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(a.reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            best = min(best, s.elapsed_time(e))
        return best

    for name in a.dtypes.split(","):
        dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[name]
        stacked = torch.randn(K, N, device=dev, dtype=torch.float32).to(dt)
        nbytes = stacked.numel() * stacked.element_size()
        acc = torch.zeros(N, device=dev, dtype=torch.float32)
        w32 = torch.full((K,), 1.0 / K, device=dev, dtype=torch.float32)
        wf = 1.0 / K

        def report(tag, ms, moved=nbytes):
            out(f"ANCHOR {tag} {name} gbps={moved / ms / 1e6:.1f} ms={ms:.3f}")

        def add_loop():
            for k in range(K):
                acc.add_(stacked[k], alpha=wf)
        report("torch_add", best_ms(add_loop))

        wdt = w32.to(dt)
        report("torch_gemv", best_ms(lambda: torch.matmul(wdt, stacked)))

        if triton_fold is None:
            out(f"ANCHOR triton {name} unavailable {triton_err}")
        else:
            try:
                report("triton", best_ms(lambda: triton_fold(acc, stacked, w32)))
            except Exception as e:
                out(f"ANCHOR triton {name} unavailable {type(e).__name__}: {e}")

        dst = torch.empty_like(stacked)
        ms = best_ms(lambda: dst.copy_(stacked))
        out(f"ANCHOR d2d_copy {name} gbps={2 * nbytes / ms / 1e6:.1f} ms={ms:.3f}")
        del dst

        host = torch.empty(stacked.shape, dtype=dt, pin_memory=True)
        host.copy_(stacked)
        dst = torch.empty_like(stacked)
        report("pinned_h2d", best_ms(lambda: dst.copy_(host, non_blocking=True)))
        del host, dst, stacked, acc
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
