"""Pretrains the shoal-gpt base model on the `manpages` package's pages (tools/lm/corpus.py),
deterministically: fixed seeds, a fixed thread count, torch.use_deterministic_algorithms, a
fixed number of steps (never "as many as fit in N minutes"), so one machine always makes the
same bytes.

    python -m tools.lm.pretrain --out DIR [--steps N]

writes DIR/model.safetensors and DIR/report.json (held-out perplexity per byte against a
unigram baseline, parameters, tokens seen, seconds). scripts/lib.sh's `lm_base_model` runs it
once per machine, cached under ~/.cache/shoal/lm/<key> (scripts/lm-path prints the path).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

from tools.lm import corpus
from tools.lm import model as lm

# The base model's shape and the run's budget: 1.85 M parameters, 300 steps of 16 x 128 bytes
# (0.6 M training bytes seen; about 4 minutes). One thread: the same bytes on any machine with
# the same CPU kernels, and no OpenMP threads spinning against a busy machine's other work (2
# threads took 5x longer per step than 1 beside two compilers on 2 cores).
DEFAULTS = dict(d_model=192, n_layer=4, n_head=6, n_ctx=128, batch=16, steps=300, lr=3e-3,
                warmup=20, seed=1234, threads=1)


def stream(docs: list[tuple[str, str]]) -> torch.Tensor:
    """The documents' bytes, each followed by <|endoftext|>, as one int64 token stream that
    starts with <|endoftext|> (so every document is predicted from a document start)."""
    toks = [lm.EOS]
    for _, text in docs:
        toks.extend(text.encode("utf-8"))
        toks.append(lm.EOS)
    return torch.tensor(toks, dtype=torch.int64)


@torch.no_grad()
def heldout_nll(model: lm.GPT, toks: torch.Tensor, batch: int = 32) -> float:
    """Mean negative log-likelihood (nats per token) of every token of `toks` after the first,
    in consecutive windows of n_ctx tokens (each window's first token is context only)."""
    n = model.cfg.n_ctx
    starts = list(range(0, len(toks) - 1, n))
    total, count = 0.0, 0
    for i in range(0, len(starts), batch):
        xs, ys = [], []
        for s in starts[i:i + batch]:
            w = toks[s:s + n + 1]
            pad = n + 1 - len(w)
            xs.append(F.pad(w[:-1], (0, pad), value=lm.EOS))
            ys.append(F.pad(w[1:], (0, pad), value=-100))
        logits, _ = model(torch.stack(xs))
        y = torch.stack(ys)
        total += F.cross_entropy(logits.reshape(-1, lm.VOCAB_SIZE), y.reshape(-1),
                                 ignore_index=-100, reduction="sum").item()
        count += int((y != -100).sum())
    return total / count


def unigram_nll(train: torch.Tensor, heldout: torch.Tensor) -> float:
    """The baseline: each byte's training frequency (add-one smoothed), nats per held-out token."""
    counts = torch.bincount(train, minlength=lm.VOCAB_SIZE).double() + 1
    logp = (counts / counts.sum()).log()
    return float(-logp[heldout[1:]].mean())


def lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    return lr * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def train(model: lm.GPT, toks: torch.Tensor, steps: int, batch: int, lr: float, warmup: int,
          seed: int, params=None, log=None, log_every: int = 25,
          constant_lr: bool = False) -> None:
    """AdamW on random n_ctx windows of `toks` (drawn from `seed`), the learning rate warmed
    up then cosine-decayed (or constant); `params` (default all) are the ones trained: the
    LoRA clients pass the adapter's."""
    n = model.cfg.n_ctx
    g = torch.Generator().manual_seed(seed)
    params = list(model.parameters()) if params is None else list(params)
    decay = [p for p in params if p.dim() >= 2]
    other = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": other, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))
    model.train()
    t0 = time.monotonic()
    for step in range(steps):
        starts = torch.randint(0, len(toks) - n - 1, (batch,), generator=g)
        x = torch.stack([toks[s:s + n] for s in starts])
        y = torch.stack([toks[s + 1:s + n + 1] for s in starts])
        for group in opt.param_groups:
            group["lr"] = lr if constant_lr else lr_at(step, steps, lr, warmup)
        logits, _ = model(x)
        loss = F.cross_entropy(logits.reshape(-1, lm.VOCAB_SIZE), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if log and (step + 1) % log_every == 0:
            el = time.monotonic() - t0
            log(f"step {step + 1}/{steps}  loss {loss.item():.3f}  "
                f"{el:.0f} s elapsed, ~{el / (step + 1) * (steps - step - 1):.0f} s left")
    model.eval()


def deterministic(threads: int) -> None:
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.lm.pretrain", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory for model.safetensors, report.json")
    for k, v in DEFAULTS.items():
        ap.add_argument("--" + k.replace("_", "-"), type=type(v), default=v)
    args = ap.parse_args(argv)
    deterministic(args.threads)
    torch.manual_seed(args.seed)

    def log(msg):
        print(f"  [lm pretrain] {msg}", flush=True)

    docs = corpus.documents(corpus.PRETRAIN_PACKAGE, corpus.PRETRAIN_SECTIONS)
    train_docs = [d for d in docs if not corpus.is_heldout(d[0])]
    held_docs = [d for d in docs if corpus.is_heldout(d[0])]
    train_toks, held_toks = stream(train_docs), stream(held_docs)
    log(f"corpus: Debian {corpus.PRETRAIN_PACKAGE} "
        f"{corpus.package_version(corpus.PRETRAIN_PACKAGE)}, {len(train_docs)} training pages "
        f"({len(train_toks)} bytes), {len(held_docs)} held-out pages ({len(held_toks)} bytes)")
    cfg = lm.Config(args.d_model, args.n_layer, args.n_head, args.n_ctx)
    model = lm.init_weights(lm.GPT(cfg), args.seed)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: d_model {cfg.d_model}, {cfg.n_layer} layers, {cfg.n_head} heads, n_ctx "
        f"{cfg.n_ctx}: {n_params} parameters; {args.steps} steps of {args.batch}x{cfg.n_ctx} "
        f"bytes on {args.threads} threads")
    t0 = time.monotonic()
    train(model, train_toks, args.steps, args.batch, args.lr, args.warmup, args.seed, log=log)
    seconds = time.monotonic() - t0
    nll = heldout_nll(model, held_toks)
    uni = unigram_nll(train_toks, held_toks)
    report = {
        "corpus": f"{corpus.PRETRAIN_PACKAGE} {corpus.package_version(corpus.PRETRAIN_PACKAGE)}",
        "train_pages": len(train_docs), "heldout_pages": len(held_docs),
        "train_bytes": len(train_toks), "heldout_bytes": len(held_toks),
        "parameters": n_params, "config": cfg.metadata(), "steps": args.steps,
        "bytes_seen": args.steps * args.batch * cfg.n_ctx, "train_seconds": round(seconds, 1),
        "heldout_ppl_per_byte": round(math.exp(nll), 4),
        "heldout_bits_per_byte": round(nll / math.log(2), 4),
        "unigram_ppl_per_byte": round(math.exp(uni), 4),
    }
    os.makedirs(args.out, exist_ok=True)
    tmp = os.path.join(args.out, "model.safetensors.tmp")
    lm.save(model, tmp)
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    os.replace(tmp, os.path.join(args.out, "model.safetensors"))
    log(f"held-out perplexity {report['heldout_ppl_per_byte']} per byte "
        f"({report['heldout_bits_per_byte']} bits), unigram baseline "
        f"{report['unigram_ppl_per_byte']}; {seconds:.0f} s of training")
    return 0


if __name__ == "__main__":
    sys.exit(main())
