"""bench-fl-lora's driver (bench/fl_lora.cc runs it under the project's venv): federated
fine-tuning of the shoal-gpt base model (scripts/lm-path) on manpages-dev, three non-IID
clients (tools/lm/fl_lora.py), through a real shoald:

  fedit    FLJob over rank-R LoRA adapters, every client at rank R (FedAvg of A and B)
  hetlora  the same job with spec.aggregation.lora.method hetlora, clients at ranks R, R/2, R/4
  full     FLJob over all the model's weights (spec.model.onnx: the base exported to ONNX, its
           float initializers the job's tensors), clients training every weight
and, as references, the base model and one adapter trained centrally on the three clients'
training text pooled, for as many steps as the clients take together.

Per method: the pooled held-out perplexity per byte of every version (the clients' held-out
pages together), rounds to the target (the base's perplexity minus 3/4 of the way to the
central adapter's), and bytes pushed per round (every client's update). One JSON line per
method and a final {"summary": ...} line on stdout; bench/fl_lora.cc prints the table.
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import shoal_fl  # noqa: E402
from shoal_testlib import BIN, StandaloneShoald  # noqa: E402
from tools.lm import fl_lora, pretrain  # noqa: E402
from tools.lm import model as lm  # noqa: E402


class FullClient(fl_lora.LoraClient):
    """A client that trains every weight of the model (full fine-tuning)."""

    # The ONNX graph's initializers are named from its wrapper module ("g.wte", ...).
    def fit(self, global_tensors, steps, lr, version):
        self.model.load_state_dict(unwrap(global_tensors), strict=True)
        for p in self.model.parameters():
            p.requires_grad_(True)
        pretrain.train(self.model, self.train_toks, steps, self.batch, lr, warmup=0,
                       seed=self.seed * 100003 + version, constant_lr=True)
        return {"g." + k: v.detach().clone() for k, v in self.model.state_dict().items()}


def unwrap(tensors):
    return {k[2:] if k.startswith("g.") else k: v for k, v in tensors.items()}


def pooled_ppl(model, held):
    return math.exp(pretrain.heldout_nll(model, held))


def export_onnx(base_path, out):
    """The base as ONNX (its float initializers named as its state_dict), for spec.model.onnx."""
    m = lm.load(base_path)
    # The causal mask as a bool buffer sliced per call (Slice, Where) instead of tril's Trilu,
    # which Shoal's ONNX reader does not take; bool, so not one of the job's float tensors.
    causal = torch.ones(m.cfg.n_ctx, m.cfg.n_ctx, dtype=torch.bool).tril()

    def attn_forward(self, x, past):
        bsz, t, d = x.shape
        dh = d // self.n_head
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(bsz, t, self.n_head, dh).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(dh))
        att = att.masked_fill(~causal[:t, :t], float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(bsz, t, d)), (k, v)

    for block in m.h:
        block.attn.forward = attn_forward.__get__(block.attn)

    class Logits(torch.nn.Module):
        def __init__(self, g):
            super().__init__()
            self.g = g

        def forward(self, tokens):  # float32 byte ids: the executor's inputs are float32
            return self.g(tokens.long())[0]

    # n_ctx tokens (only the batch dimension may be dynamic in Shoal's executor).
    torch.onnx.export(Logits(m), (torch.zeros(1, m.cfg.n_ctx),), out, dynamo=False,
                      opset_version=17, do_constant_folding=False, input_names=["tokens"],
                      output_names=["logits"], dynamic_axes={"tokens": {0: "b"},
                                                             "logits": {0: "b"}})
    os.chmod(out, 0o644)


def run_job(s, job, manifest, clients, rounds):
    r = s.cli("deploy", "-f", "-", stdin=manifest, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"deploy {job}: {r.stdout}{r.stderr}")
    token = s.api("/v1/tokens", json.dumps({"role": "fl-client", "job": job}).encode())["token"]
    server = f"http://127.0.0.1:{s.port}"
    sums, errors = {}, []

    def one(k, c):
        try:
            sums[k] = fl_lora.run(shoal_fl.JobClient(server, job, token), c, name=f"c{k}",
                                  max_seconds=3600, evaluate=False)
        except Exception as e:  # reported below
            errors.append(repr(e))

    # shoald keeps only the newest versions: each is fetched as soon as it commits.
    jc = shoal_fl.JobClient(server, job, token)
    versions = {0: fl_lora.as_tensors(jc.model(0))}
    t0 = time.monotonic()
    threads = [threading.Thread(target=one, args=(k, c)) for k, c in enumerate(clients)]
    for t in threads:
        t.start()
    while len(versions) <= rounds and (any(t.is_alive() for t in threads) or
                                       int(jc.status().get("version", 0)) >= len(versions)):
        v = int(jc.status().get("version", 0))
        if v not in versions:
            m = jc.model()
            versions[m.version] = fl_lora.as_tensors(m)
        time.sleep(0.1)
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{job}: {errors}")
    return [versions[v] for v in sorted(versions)], sums, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--local-steps", type=int, default=30)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--full-lr", type=float, default=3e-4)
    ap.add_argument("--eval-bytes", type=int, default=8192, help="held-out bytes per client")
    ap.add_argument("--methods", default="fedit,hetlora,full")
    ap.add_argument("--central-ppl", type=float, default=0,
                    help="the central adapter's perplexity from an earlier run (skips training it)")
    args = ap.parse_args()
    pretrain.deterministic(1)
    n = 3
    parts = [fl_lora.client_documents(k, n) for k in range(n)]
    held = torch.cat([pretrain.stream(h)[: args.eval_bytes] for _, h in parts])
    base = lm.load(args.base)
    base_ppl = pooled_ppl(base, held)
    out = {"base": {"ppl": base_ppl}}
    print(json.dumps({"method": "base", "ppl": base_ppl}), flush=True)

    # The central adapter: one rank-R adapter on the pooled training text, as many steps as the
    # three clients take in all the rounds.
    t0 = time.monotonic()
    if args.central_ppl:
        central_ppl = args.central_ppl
    else:
        central = fl_lora.LoraClient(args.base, args.rank, args.rank, args.alpha,
                                     [d for tr, _ in parts for d in tr], [], seed=99)
        ad = central.fit(lm.lora_init(central.model, args.rank, 1), n * args.rounds *
                         args.local_steps, args.lr, 0)
        lm.apply_lora(base, ad, args.alpha)
        central_ppl = pooled_ppl(base, held)
    out["central"] = {"ppl": central_ppl, "seconds": time.monotonic() - t0}
    print(json.dumps({"method": "central", "ppl": central_ppl}), flush=True)
    target = base_ppl - 0.75 * (base_ppl - central_ppl)
    out["target"] = target

    build = os.path.dirname(os.path.abspath(BIN))
    work = os.path.join(build, "bench_fl_lora")
    os.makedirs(work, exist_ok=True)
    base_copy = os.path.join(work, "base.safetensors")
    shutil.copyfile(args.base, base_copy)
    os.chmod(base_copy, 0o644)
    tmp = tempfile.mkdtemp(prefix="shoal-bench-fl-lora-")
    try:
        with StandaloneShoald(tmp, f"bfl{os.getpid()}") as s:
            for method in args.methods.split(","):
                if method in ("fedit", "hetlora"):
                    ranks = ([args.rank] * n if method == "fedit"
                             else [args.rank, max(1, args.rank // 2), max(1, args.rank // 4)])
                    clients = [fl_lora.LoraClient(args.base, r, args.rank, args.alpha, tr, [],
                                                  seed=k) for k, (r, (tr, _)) in
                               enumerate(zip(ranks, parts))]
                    model = (f"lora: {{base: {base_copy}, rank: {args.rank}, "
                             f"alpha: {args.alpha}}}")
                    agg = f"\n  aggregation:\n    lora: {{method: {method}}}"
                    lr = args.lr
                else:
                    onnx_path = os.path.join(work, "base.onnx")
                    export_onnx(args.base, onnx_path)
                    clients = [FullClient(args.base, 1, 1, 1.0, tr, [], seed=k)
                               for k, (tr, _) in enumerate(parts)]
                    model, agg, lr = f"onnx: {onnx_path}", "", args.full_lr
                job = f"lm-{method}"
                manifest = (f"apiVersion: shoal.dev/v1\nkind: FLJob\nmetadata: {{name: {job}}}\n"
                            f"spec:\n  algorithm: {{name: fedavg}}\n  model: {{{model}}}\n"
                            f"  clients: {{expected: {n}}}\n  stop: {{rounds: {args.rounds}}}\n"
                            f"  training: {{localSteps: {args.local_steps}, learningRate: {lr}, "
                            f"batchSize: 8}}{agg}\n")
                try:
                    versions, sums, secs = run_job(s, job, manifest, clients, args.rounds)
                except RuntimeError as e:
                    out[method] = {"error": str(e)[:400]}
                    print(json.dumps({"method": method, "error": str(e)[:400]}), flush=True)
                    continue
                ppls = []
                for v in versions:
                    m = lm.load(args.base)
                    if method == "full":
                        m.load_state_dict(unwrap(v))
                    else:
                        lm.apply_lora(m, v, args.alpha)
                    ppls.append(pooled_ppl(m, held))
                # ppls[i]: the i-th version fetched, version i unless one committed and was
                # superseded within a 0.1 s poll (a round takes tens of seconds here).
                reached = next((i for i, p in enumerate(ppls) if p <= target), None)
                pushed = sum(x["bytes_pushed"] for x in sums.values())
                updates = sum(x["updates"] for x in sums.values())
                out[method] = {"ppl": ppls, "rounds_to_target": reached,
                               "bytes_per_round": pushed / max(1, args.rounds),
                               "updates": updates, "seconds": secs}
                print(json.dumps({"method": method, **out[method]}), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({"summary": out}), flush=True)
    table(out, args)


def table(out, args):
    """The benchmark's table: per method the held-out perplexity per byte at the end, rounds
    to the target, and bytes pushed per round; the full fine-tuning job is the anchor."""
    ranks = {"fedit": f"{args.rank} x3", "hetlora":
             f"{args.rank},{max(1, args.rank // 2)},{max(1, args.rank // 4)}", "full": "all"}
    print(f"\nbench-fl-lora: 3 clients (manpages-dev, non-IID), {args.rounds} rounds of "
          f"{args.local_steps} local steps; target perplexity {out['target']:.3f} per byte "
          f"(base {out['base']['ppl']:.3f}, central adapter {out['central']['ppl']:.3f})")
    print(f"{'method':10} {'ranks':>8} {'final ppl':>10} {'rounds to target':>17} "
          f"{'bytes/round':>12} {'bytes to target':>16} {'wall s':>7}")
    to_target = {}
    for m in ("fedit", "hetlora", "full"):
        r = out.get(m)
        if not r:
            continue
        if "error" in r:
            print(f"{m:10} {ranks[m]:>8} error: {r['error'][:90]}")
            continue
        rt = r["rounds_to_target"]
        to_target[m] = None if rt is None else rt * r["bytes_per_round"]
        print(f"{m:10} {ranks[m]:>8} {r['ppl'][-1]:10.3f} {('-' if rt is None else rt):>17} "
              f"{r['bytes_per_round']:12.0f} "
              f"{('-' if to_target[m] is None else f'{to_target[m]:.0f}'):>16} "
              f"{r['seconds']:7.0f}")
    a, b = to_target.get("full"), to_target.get("fedit")
    ratio = a / b if a and b else float("nan")
    print("(bytes to target: full fine-tuning's / FedIT's; one run, 2 shared cores: wall times "
          "are noisy)")
    print(f"RESULT fl_lora ratio={ratio:.2f}")


if __name__ == "__main__":
    main()
