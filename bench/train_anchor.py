#!/usr/bin/env python3
"""Anchor for bench-train: the same MLP (784-H-10, ReLU, softmax cross-entropy) trained with the
same minibatch SGD in float32, in numpy (--framework numpy: numpy 2 on its bundled OpenBLAS) or
torch (--framework torch: nn.Linear, F.cross_entropy, autograd, torch.optim.SGD, on
torch.set_num_threads(--threads) and as many inter-op threads), in one of two modes:
  --mode eager     the step run op by op (the model in training mode; SGD with fused=True, its
                   one-kernel CPU update: in torch's profiler the default per-parameter update
                   and zero_grad took a fifth of an eager step of this size; fused ran 33.4k
                   against 31.1k samples/s, medians of 10 interleaved blocks, thread CPU time)
  --mode compiled  the whole step (forward, loss, backward, SGD update, zero_grad) under
                   torch.compile (inductor; dynamo splits it at backward(): the forward and loss
                   with their AOT-compiled backward, then the update). The compile runs in the
                   untimed warm-up (its seconds are printed; inductor's on-disk cache makes the
                   later runs' compile short).
Prints one line:
  samples_per_s=<v> test_acc=<a> peer=<framework version (mode), the BLAS it runs on>
or `SKIP reason=<text>` when the framework cannot be imported."""
import argparse
import gzip
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from anchor_blas import blas_in_use, torch_blas  # noqa: E402


def load(path, offset):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def timed_steps(step, args):
    """Runs args.warmup untimed steps, then args.steps timed ones; returns their seconds."""
    for _ in range(args.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--framework", choices=["numpy", "torch"], default="numpy")
    ap.add_argument("--mode", choices=["eager", "compiled"], default="eager", help="torch only")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    x_train = load(f"{args.data}/train-images-idx3-ubyte.gz", 16).reshape(-1, 784)
    x_train = x_train.astype(np.float32) / np.float32(255)
    y_train = load(f"{args.data}/train-labels-idx1-ubyte.gz", 8).astype(np.int64)
    x_test = load(f"{args.data}/t10k-images-idx3-ubyte.gz", 16).reshape(-1, 784)
    x_test = x_test.astype(np.float32) / np.float32(255)
    y_test = load(f"{args.data}/t10k-labels-idx1-ubyte.gz", 8).astype(np.int64)

    if args.framework == "torch":
        return train_torch(args, x_train, y_train, x_test, y_test)

    rng = np.random.default_rng(1)
    h = args.hidden
    b = 1 / np.sqrt(784)
    w1 = rng.uniform(-b, b, (h, 784)).astype(np.float32)
    b1 = rng.uniform(-b, b, h).astype(np.float32)
    b = 1 / np.sqrt(h)
    w2 = rng.uniform(-b, b, (10, h)).astype(np.float32)
    b2 = rng.uniform(-b, b, 10).astype(np.float32)
    lr = np.float32(args.lr)
    bs = args.batch
    rows = np.arange(bs)
    order = rng.permutation(len(y_train))
    cursor = 0

    def step():
        nonlocal cursor, order, w1, b1, w2, b2
        if cursor + bs > len(order):
            order = rng.permutation(len(y_train))
            cursor = 0
        idx = order[cursor:cursor + bs]
        cursor += bs
        x, y = x_train[idx], y_train[idx]
        hid = np.maximum(x @ w1.T + b1, 0)
        z = hid @ w2.T + b2
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        p[rows, y] -= 1
        p /= np.float32(bs)
        gw2 = p.T @ hid
        gb2 = p.sum(axis=0)
        dh = (p @ w2) * (hid > 0)
        gw1 = dh.T @ x
        gb1 = dh.sum(axis=0)
        w1 -= lr * gw1
        b1 -= lr * gb1
        w2 -= lr * gw2
        b2 -= lr * gb2

    seconds = timed_steps(step, args)
    pred = (np.maximum(x_test @ w1.T + b1, 0) @ w2.T + b2).argmax(axis=1)
    acc = float((pred == y_test).mean())
    print(f"samples_per_s={args.steps * bs / seconds:.1f} test_acc={acc:.4f} "
          f"peer=numpy {np.__version__}, {blas_in_use()}")


def train_torch(args, x_train, y_train, x_test, y_test):
    try:
        import torch
    except ImportError:
        print("SKIP reason=torch is not installed for " + sys.executable)
        return
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(args.threads)
    torch.manual_seed(1)
    nn, F = torch.nn, torch.nn.functional
    # nn.Linear's default init is U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases, the
    # numpy anchor's and the trainer's.
    model = nn.Sequential(nn.Linear(784, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, fused=True)
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    bs = args.batch
    gen = torch.Generator().manual_seed(1)
    order = torch.randperm(len(yt), generator=gen)
    cursor = 0

    def train_step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    run = torch.compile(train_step) if args.mode == "compiled" else train_step

    def step():
        nonlocal cursor, order
        if cursor + bs > len(order):
            order = torch.randperm(len(yt), generator=gen)
            cursor = 0
        idx = order[cursor:cursor + bs]
        cursor += bs
        run(xt[idx], yt[idx])

    mode = args.mode
    if args.mode == "compiled":
        t0 = time.perf_counter()
        step()  # the compile, and the first of the warm-up steps
        mode = f"compiled, {time.perf_counter() - t0:.1f} s to compile"
        args.warmup -= 1
    seconds = timed_steps(step, args)
    model.eval()
    with torch.inference_mode():
        pred = model(torch.from_numpy(x_test)).argmax(dim=1).numpy()
    acc = float((pred == y_test).mean())
    print(f"samples_per_s={args.steps * bs / seconds:.1f} test_acc={acc:.4f} "
          f"peer=torch {torch.__version__} ({mode}), {torch_blas()}")


if __name__ == "__main__":
    main()
