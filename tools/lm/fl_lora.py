"""Federated LoRA fine-tuning of shoal-gpt: one client of an FLJob with spec.model.lora
(docs/tutorials/federated-lora.md), with the Python SDK (shoal_fl.JobClient) and PyTorch.

The job's model is the adapter (docs/reference/lm-format.md): "L.lora_A" [R, in] and
"L.lora_B" [out, R] per adapted linear, R the job's rank, W_eff = W + (alpha / R) B A. A client
of rank r <= R (HetLoRA, spec.aggregation.lora.method: hetlora) trains the first r rows of A and
columns of B, the rest held at zero (so its model is the global's truncation, at the global's
scale alpha / R), and pushes A [r, in], B [out, r]; the server zero-pads them into R. Under
FedIT every client has r = R. Each client trains on its own documents of Debian's manpages-dev
(sections 2 and 3: a domain the base model did not see), split by topic: client k of n takes the
k-th contiguous n-th of the pages sorted by section and name (system calls, then the C library
alphabetically: pthread_*, str*, ... land together), each page's held-out share apart.

    python -m tools.lm.fl_lora --server http://127.0.0.1:8080 --job lm --token $TOKEN \
        --base $(scripts/lm-path) --client-index 0 --num-clients 3 [--rank 4]

prints one JSON line per version it evaluated and a summary line at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import numpy as np
import torch

from tools.lm import corpus
from tools.lm import model as lm
from tools.lm import pretrain


def client_documents(k: int, n: int, max_pages: int | None = None):
    """(train pages, held-out pages) of client k of n: the k-th contiguous n-th of manpages-dev's
    pages (sorted by section and name), or of its first max_pages (tests: seconds)."""
    docs = corpus.documents(corpus.FINETUNE_PACKAGE, corpus.FINETUNE_SECTIONS)
    if max_pages:
        docs = docs[:: max(1, len(docs) // max_pages)][:max_pages]
    lo, hi = len(docs) * k // n, len(docs) * (k + 1) // n
    mine = docs[lo:hi]
    return ([d for d in mine if not corpus.is_heldout(d[0])],
            [d for d in mine if corpus.is_heldout(d[0])])


def truncate(tensors: dict, rank: int) -> dict:
    """The adapter's first `rank` components: A's rows, B's columns."""
    return {k: (t[:rank] if k.endswith(".lora_A") else t[:, :rank]).contiguous()
            for k, t in tensors.items()}


def zero_pad(tensors: dict, rank: int) -> dict:
    """The adapter zero-padded to `rank` (how the server folds a lower-rank update)."""
    out = {}
    for k, t in tensors.items():
        if k.endswith(".lora_A"):
            out[k] = torch.cat([t, t.new_zeros(rank - t.shape[0], t.shape[1])], 0)
        else:
            out[k] = torch.cat([t, t.new_zeros(t.shape[0], rank - t.shape[1])], 1)
    return out


class LoraClient:
    """A base model, frozen, and this client's text; trains rank-`rank` adapters on it."""

    def __init__(self, base_path: str, rank: int, job_rank: int, alpha: float,
                 train_docs, held_docs, seed: int = 0, batch: int = 8,
                 eval_bytes: int = 1 << 15):
        if not 1 <= rank <= job_rank:
            raise ValueError(f"rank {rank} must be in [1, the job's {job_rank}]")
        self.model = lm.load(base_path)
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.rank, self.job_rank, self.alpha = rank, job_rank, alpha
        self.train_toks = pretrain.stream(train_docs)
        self.held_toks = pretrain.stream(held_docs)[:eval_bytes]
        self.num_samples = len(self.train_toks)
        self.seed, self.batch = seed, batch

    def _apply(self, tensors: dict) -> None:
        # Scale alpha / R whatever this client's rank: its adapter is the global's truncation.
        r = next(t.shape[0] for k, t in tensors.items() if k.endswith(".lora_A"))
        lm.apply_lora(self.model, tensors, self.alpha * r / self.job_rank)

    def fit(self, global_tensors: dict, steps: int, lr: float, version: int) -> dict:
        """Trains from the global adapter (truncated to this client's rank) for `steps` Adam
        steps at a constant `lr`; returns the adapter at this client's rank."""
        self._apply(truncate(global_tensors, self.rank))
        params = [p for n, p in self.model.named_parameters() if ".lora_" in n]
        pretrain.train(self.model, self.train_toks, steps, self.batch, lr, warmup=0,
                       seed=self.seed * 100003 + version, params=params, constant_lr=True)
        return lm.adapter_tensors(self.model)

    @torch.no_grad()
    def perplexity(self, tensors: dict | None) -> float:
        """Per-byte perplexity of this client's held-out text under base + `tensors` (at any
        rank <= the job's, scaled alpha / R), or the base model alone (None)."""
        if tensors is None:
            for name in self.model.lora_linears():
                self.model.linear(name).detach_lora()
        else:
            self._apply(tensors)
        return math.exp(pretrain.heldout_nll(self.model, self.held_toks))


def as_tensors(model) -> dict:
    """A shoal_fl GlobalModel's arrays as torch tensors by name."""
    return {n: torch.from_numpy(np.array(a, dtype=np.float32)) for n, a in
            zip(model.names, model.arrays)}


def run(jc, client: LoraClient, name: str = "", max_seconds: float = 600,
        evaluate: bool = True, log=None) -> dict:
    """Joins the job and trains each task until it is done: pushes the adapter at the client's
    rank. With `evaluate`, the held-out perplexity of each version it trained from (and the
    last) goes into the summary: {"versions": {v: ppl}, "updates": n, "bytes_pushed": b}."""
    import shoal_fl  # the SDK (installed into the venv by scripts/lib.sh)

    member = jc.join(name)
    summary = {"client": member.client_id, "rank": client.rank, "updates": 0,
               "bytes_pushed": 0, "versions": {}}
    deadline = time.monotonic() + max_seconds
    while time.monotonic() < deadline:
        task = jc.task(member)
        if task.kind == "done":
            break
        if task.kind == "wait":
            time.sleep(task.retry_after_ms / 1000)
            continue
        model = jc.model(task.model_version)
        tensors = as_tensors(model)
        if evaluate and model.version not in summary["versions"]:
            summary["versions"][model.version] = client.perplexity(tensors)
            if log:
                log(json.dumps({"client": name, "version": model.version,
                                "ppl": summary["versions"][model.version]}))
        t0 = time.monotonic()
        out = client.fit(tensors, task.local_steps, task.learning_rate, model.version)
        arrays = [out[n].numpy() for n in model.names]
        try:
            jc.push_update(member, task.model_version, model.names, arrays, client.num_samples,
                           local_steps=task.local_steps, train_seconds=time.monotonic() - t0)
            summary["updates"] += 1
            summary["bytes_pushed"] += sum(a.nbytes for a in arrays)
        except shoal_fl.StaleUpdate:
            pass
    if evaluate:
        version = int(jc.status().get("version", 0))
        if version not in summary["versions"]:
            summary["versions"][version] = client.perplexity(as_tensors(jc.model(version)))
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.lm.fl_lora", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True)
    ap.add_argument("--job", required=True)
    ap.add_argument("--token", default=None, help="an fl-client token ($SHOAL_TOKEN)")
    ap.add_argument("--base", required=True, help="the job's base model (spec.model.lora.base)")
    ap.add_argument("--client-index", type=int, required=True)
    ap.add_argument("--num-clients", type=int, required=True)
    ap.add_argument("--rank", type=int, default=0, help="this client's rank (0: the job's)")
    ap.add_argument("--max-pages", type=int, default=0, help="use only this many pages in all")
    ap.add_argument("--max-seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    pretrain.deterministic(1)
    import shoal_fl

    jc = shoal_fl.JobClient(args.server, args.job, args.token)
    spec = jc.status()["model"]["lora"]
    train_docs, held_docs = client_documents(args.client_index, args.num_clients,
                                             args.max_pages or None)
    client = LoraClient(args.base, args.rank or spec["rank"], spec["rank"], spec["alpha"],
                        train_docs, held_docs, seed=args.seed + args.client_index)
    summary = run(jc, client, name=f"lm{args.client_index}", max_seconds=args.max_seconds,
                  log=print)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
