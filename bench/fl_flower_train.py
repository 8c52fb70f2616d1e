#!/usr/bin/env python3
"""bench-fl-flower --train: one seed's FedAvg training on Fashion-MNIST through one system, its
global model's test accuracy after every round as one JSON object on stdout.

Both systems run the same training (bench/flower_app/shoal_flower_bench/train.py): the same
Dirichlet partition over the clients, the same initial model (Shoal's job's version 0, which
--system shoal saves with --init-out and --system flower starts from with --init-npz), the same
local epochs, learning rate, batch size and batch order (seeded by seed, client, round).

  --system shoal: the clients are the Python SDK's run_client (shoal/fl/sdk/python) in one thread
    each, against the FLJob the driver deployed (--server, --job, --api-token).
  --system flower: flower-superlink --insecure --simulation (started here), the app submitted
    with `flwr run` for N simulated SuperNodes (Flower's simulation runtime, Ray); each node's
    ClientApp trains its partition with torch, the ServerApp runs flwr's FedAvg and saves every
    round's global model.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "flower_app"))

from shoal_flower_bench.train import accuracy, local_train  # noqa: E402


def run_shoal(args):
    from shoal_fl import safetensors
    from shoal_fl.client import Client
    from shoal_fl.job_client import JobClient
    from shoal_fl.runner import run_client

    globals_seen = {}
    lock = threading.Lock()

    class TorchClient(Client):
        def __init__(self, k):
            self.k = k

        def fit(self, parameters, config):
            names = config["parameter_names"]
            version = int(config["model_version"])
            with lock:
                globals_seen.setdefault(version, [a.copy() for a in parameters])
            state, n = local_train(dict(zip(names, parameters)), self.k, args.clients, args.seed,
                                   args.alpha, args.epochs, args.lr, args.batch, version)
            return [state[name] for name in names], n, {}

        def evaluate(self, parameters, config):
            return None

    jc = JobClient(args.server, args.job, token=args.api_token)
    _, _, body = jc._request("GET", jc._base + "/model?version=0")
    names, arrays, _ = safetensors.load(body)
    if args.init_out:
        np.savez(args.init_out, **{n: a for n, a in zip(names, arrays)})
    errors = []

    def one(k):
        try:
            run_client(args.server, args.job, TorchClient(k), token=args.api_token,
                       name=f"train-{k}", evaluate=False, max_seconds=args.max_seconds)
        except Exception as e:  # noqa: BLE001 - reported in the JSON
            errors.append(f"client {k}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=one, args=(k,)) for k in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(errors[0])
    final = jc.model()
    globals_seen[final.version] = final.arrays
    return [accuracy(globals_seen[v]) for v in sorted(globals_seen)]


def run_flower(args):
    from fl_flower_load import FlowerServer  # the same SuperLink start and stop

    work = tempfile.mkdtemp(prefix="bench-fl-flower-train-")
    out_dir = os.path.join(work, "models")
    os.makedirs(out_dir)
    server = FlowerServer(args, work, simulation=True,
                          options={"num-supernodes": args.clients,
                                   "backend.client-resources.num-cpus": 1})
    try:
        submitted = server.submit(os.path.join(HERE, "flower_app"),
                      f"num-clients={args.clients} num-server-rounds={args.rounds} "
                      f"mode='train' out-dir='{out_dir}' init-npz='{args.init_npz}' "
                      f"seed={args.seed} alpha={args.alpha} local-epochs={args.epochs} "
                      f"learning-rate={args.lr} batch-size={args.batch} "
                      f"dp-noise={args.dp_noise!r} dp-clip={args.dp_clip!r}")
        last = os.path.join(out_dir, f"global-{args.rounds}.npz")
        end = time.monotonic() + args.max_seconds
        next_check = time.monotonic() + 5
        while not os.path.exists(last):
            if time.monotonic() > end or server.proc.poll() is not None:
                raise RuntimeError("the Flower run did not finish: " + server.tail())
            if time.monotonic() > next_check:
                failure = server.run_failure(submitted)
                if failure:
                    raise RuntimeError(failure)
                next_check = time.monotonic() + 5
            time.sleep(0.5)
        time.sleep(0.5)  # np.savez writes the file whole before the name appears? be sure
        accs = []
        for r in range(args.rounds + 1):
            with np.load(os.path.join(out_dir, f"global-{r}.npz")) as z:
                accs.append(accuracy([z[k] for k in z.files]))
        return accs
    finally:
        server.stop()
        if args.keep:
            print(f"fl_flower_train: kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", choices=["shoal", "flower"], required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-seconds", type=float, default=1800)
    ap.add_argument("--server", default="")
    ap.add_argument("--job", default="")
    ap.add_argument("--api-token", default="")
    ap.add_argument("--init-out", default="")
    ap.add_argument("--init-npz", default="")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--flwr-log-level", default="")
    ap.add_argument("--keep", action="store_true", help="keep the Flower work folder (logs)")
    ap.add_argument("--dp-noise", type=float, default=-1.0,
                    help="flower: >= 0 wraps FedAvg in flwr's server-side fixed-clipping DP "
                         "(bench-dp); shoal: the job's spec.privacy.dp says it")
    ap.add_argument("--dp-clip", type=float, default=1.0)
    args = ap.parse_args()
    result = {"system": args.system, "seed": args.seed}
    t0 = time.monotonic()
    try:
        result["accuracy"] = run_shoal(args) if args.system == "shoal" else run_flower(args)
        result["ok"] = True
    except Exception as e:  # noqa: BLE001 - the driver prints it
        result["ok"] = False
        result["error"] = f"{type(e).__name__}: {e}"
    result["seconds"] = time.monotonic() - t0
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
