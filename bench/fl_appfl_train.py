"""bench-fl-appfl's APPFL side: time to a target accuracy with APPFL 1.12's own server (ServerAgent
with its CompassScheduler + FedCompassAggregator, or AsyncScheduler + FedBuffAggregator /
FedAsyncAggregator, at APPFL's example-config defaults) and simulated clients in threads.

The plan file (written by bench-fl-appfl from Shoal's own code) fixes what Shoal's run uses: the
Fashion-MNIST partition (shoal-client's Partition), every client's seconds per step
(SampleStepSeconds) and the initial model (model::InitModel). Each client trains the MLP
784-128-10 for real (SGD, learning rate 0.1, batch 32, torch on one thread), then sleeps until
steps x its seconds per step x the time scale have passed since it started (as shoal-client
does), and sends its update the way APPFL's example does (send_gradient: old - new).
The evaluator scores each new global model on the test split; the run stops at the target.
Last line: "APPFL_RESULT algorithm=.. seconds=.. reached=0|1 accuracy=.. version=.. updates=..".
"""

import argparse
import gzip
import json
import os
import struct
import sys
import threading
import time

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from appfl.agent import ServerAgent
from appfl.config import ServerAgentConfig

HERE = os.path.dirname(os.path.abspath(__file__))


def load_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    dims = struct.unpack(">" + "I" * (magic & 0xFF), data[4:4 + 4 * (magic & 0xFF)])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


def load_fmnist(d):
    def images(name):
        return torch.from_numpy(load_idx(os.path.join(d, name)).reshape(-1, 784).astype(
            np.float32) / 255.0)  # shoal-client's scale: pixels in [0, 1]

    def labels(name):
        return torch.from_numpy(load_idx(os.path.join(d, name)).astype(np.int64))

    return (images("train-images-idx3-ubyte.gz"), labels("train-labels-idx1-ubyte.gz"),
            images("t10k-images-idx3-ubyte.gz"), labels("t10k-labels-idx1-ubyte.gz"))


def server_config(algorithm, n, k):
    """APPFL's examples/resources/configs/mnist/server_<algorithm>.yaml, server part."""
    if algorithm == "fedcompass":
        sched = dict(scheduler="CompassScheduler", scheduler_kwargs=dict(
            same_init_model=True, max_local_steps=100, min_local_steps=20, speed_momentum=0.9,
            latest_time_factor=1.5))
        agg = dict(aggregator="FedCompassAggregator", aggregator_kwargs=dict(
            weights="equal", staleness_fn="polynomial", staleness_fn_kwargs={"a": 0.5},
            alpha=0.9))
    else:
        sched = dict(scheduler="AsyncScheduler", scheduler_kwargs=dict(same_init_model=True))
        agg = dict(aggregator="FedBuffAggregator" if algorithm == "fedbuff" else
                   "FedAsyncAggregator", aggregator_kwargs=dict(
                       client_weights_mode="equal", staleness_fn="polynomial",
                       staleness_fn_kwargs={"a": 0.5}, alpha=0.9))
        if algorithm == "fedbuff":
            agg["aggregator_kwargs"]["K"] = k
    return OmegaConf.create(dict(
        # send_gradient: ServerAgent sets the aggregator's gradient_based from it.
        client_configs=dict(train_configs=dict(send_gradient=True), model_configs=dict(
            model_path=os.path.join(HERE, "torch_models.py"), model_name="Mlp")),
        server_configs=dict(num_clients=n, device="cpu", num_global_epochs=10**9,
                            logging_output_dirname=os.environ.get("TMPDIR", "/tmp") +
                            "/appfl-bench-logs", logging_output_filename="result",
                            **sched, **agg)))

class AppflBackend:
    """APPFL's own server, in this process (its best showing: no gRPC between the two)."""

    def __init__(self, a, n, k, init, names):
        self.a = a
        self.server = ServerAgent(server_agent_config=ServerAgentConfig(
            **server_config(a.algorithm, n, k)))
        with torch.no_grad():  # Shoal's initial model, in nn.Linear's layout
            off = 0
            for p in self.server.model.parameters():
                p.copy_(init[off:off + p.numel()].view_as(p))
                off += p.numel()
        assert off == init.numel(), (off, init.numel())
        self.sched, self.agg = self.server.scheduler, self.server.aggregator

    def first(self, c):
        got = self.server.get_parameters(init_model=True, blocking=True)
        return (got[0] if isinstance(got, tuple) else got), 100

    def submit(self, c, glob, trained, steps, samples, seconds, stop):
        # send_gradient, as APPFL's trainers send it: the old model minus the new one.
        grad = {name: glob[name] - trained[name] for name in trained}
        res = self.server.global_update(c, grad, blocking=True)
        if isinstance(res, tuple):
            return res[0], int(res[1].get("local_steps", steps))
        return res, steps

    def version(self):
        return (self.sched.global_timestamp if self.a.algorithm == "fedcompass"
                else self.agg.global_step)

    def snapshot(self):
        if self.a.algorithm == "fedcompass":
            with self.sched._access_lock, self.sched._group_aggregation_lock:
                return self.version(), self.agg.get_parameters()
        with self.sched._access_lock:
            return self.version(), self.agg.get_parameters()


class ShoalBackend:
    """A shoald FL job over its HTTP API (shoal_fl.JobClient, one connection per client)."""

    def __init__(self, a, n, k, init, names):
        sys.path.insert(0, os.path.join(HERE, "..", "shoal", "fl", "sdk", "python"))
        import shoal_fl  # noqa: PLC0415
        self.shoal_fl = shoal_fl
        self.a, self.names = a, names
        self.members, self.conns = {}, {}
        self.models, self.models_lock = {}, threading.Lock()
        self.status_conn = shoal_fl.JobClient(a.server, a.job)

    def _model(self, conn, v):
        with self.models_lock:
            m = self.models.get(v)
        if m is None:
            g = conn.model(v)
            m = {name: torch.from_numpy(np.asarray(x, dtype=np.float32).reshape(-1)).view(shape)
                 for name, x, shape in zip(self.names, g.arrays, ((128, 784), (128,), (10, 128),
                                                                  (10,)))}
            with self.models_lock:
                self.models[v] = m
        return m

    def _task(self, c, stop):
        conn, member = self.conns[c], self.members[c]
        while not stop.is_set():
            t = conn.task(member)
            if t.kind == "train":
                return t
            if t.kind == "done":
                return None
            stop.wait(t.retry_after_ms / 1000.0)
        return None

    def first(self, c):
        conn = self.shoal_fl.JobClient(self.a.server, self.a.job)
        self.conns[c] = conn
        self.members[c] = conn.join(f"client-{c}")
        t = self._task(c, threading.Event())
        self.base = getattr(self, "base", {})
        self.base[c] = t.model_version
        return self._model(conn, t.model_version), t.local_steps

    def submit(self, c, glob, trained, steps, samples, seconds, stop):
        conn = self.conns[c]
        try:
            conn.push_update(self.members[c], self.base[c], self.names,
                             [trained[n].numpy() for n in self.names], samples,
                             local_steps=steps, train_seconds=seconds)
        except self.shoal_fl.StaleUpdate:
            pass
        t = self._task(c, stop)
        if t is None:
            return None
        self.base[c] = t.model_version
        return self._model(conn, t.model_version), t.local_steps

    def version(self):
        return int(self.status_conn.status().get("version", 0))

    def snapshot(self):
        v = self.version()
        return v, self._model(self.status_conn, v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", required=True, help="JSON: partitions, step_seconds, init (f32 file)")
    ap.add_argument("--algorithm", choices=["fedcompass", "fedbuff", "fedasync"], required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--target", type=float, default=0.82)
    ap.add_argument("--max-seconds", type=float, default=60)
    ap.add_argument("--time-scale", type=float, default=0.2)
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--k", type=int, default=0, help="FedBuff's K (0: half the clients)")
    ap.add_argument("--system", choices=["appfl", "shoal"], default="appfl")
    ap.add_argument("--server", help="--system shoal: shoald's URL (token in $SHOAL_TOKEN)")
    ap.add_argument("--job", help="--system shoal: the FL job, deployed with the same settings")
    a = ap.parse_args()
    torch.set_num_threads(1)

    with open(a.plan) as f:
        plan = json.load(f)
    parts, step_seconds = plan["partitions"], plan["step_seconds"]
    n = len(parts)
    k = a.k or (n + 1) // 2
    xtr, ytr, xte, yte = load_fmnist(a.data_dir)

    init = torch.from_numpy(np.fromfile(plan["init"], dtype="<f4"))
    names = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    backend = (AppflBackend if a.system == "appfl" else ShoalBackend)(a, n, k, init, names)

    stop = threading.Event()
    lock = threading.Lock()
    stats = dict(updates=0)
    t0 = [None]

    def client(c):
        model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(),
                                    torch.nn.Linear(128, 10))
        idx = torch.tensor(parts[c], dtype=torch.int64)
        gen = torch.Generator().manual_seed(a.seed * 1000003 + c)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        glob, steps = backend.first(c)
        while not stop.is_set():
            start = time.monotonic()
            with torch.no_grad():
                for p, name in zip(model.parameters(), names):
                    p.copy_(glob[name])
            for _ in range(steps):
                b = idx[torch.randint(len(idx), (32,), generator=gen)]
                opt.zero_grad()
                F.cross_entropy(model(xtr[b]), ytr[b]).backward()
                opt.step()
            simulated = steps * step_seconds[c] * a.time_scale
            wait = start + simulated - time.monotonic()
            if wait > 0 and stop.wait(wait):
                return
            trained = {name: p.detach().clone() for p, name in zip(model.parameters(), names)}
            got = backend.submit(c, glob, trained, steps, len(parts[c]), simulated, stop)
            if got is None:
                return
            with lock:
                stats["updates"] += 1
            glob, steps = got

    version, snapshot = backend.version, backend.snapshot

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(n)]
    t0[0] = time.monotonic()
    for t in threads:
        t.start()
    evaluator = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(),
                                    torch.nn.Linear(128, 10))
    seen, acc, reached, at = -1, 0.0, False, None
    while time.monotonic() - t0[0] < a.max_seconds:
        v = version()
        if v == seen:
            time.sleep(0.02)
            continue
        v, params = snapshot()
        with torch.no_grad():
            for p, name in zip(evaluator.parameters(), names):
                p.copy_(params[name])
            acc = (evaluator(xte).argmax(1) == yte).float().mean().item()
        seen = v
        el = time.monotonic() - t0[0]
        print(f"version {v}  accuracy {acc:.4f}  t={el:.2f}s", flush=True)
        if acc >= a.target:
            reached, at = True, el
            break
    stop.set()
    seconds = at if reached else time.monotonic() - t0[0]
    print(f"APPFL_RESULT system={a.system} algorithm={a.algorithm} seconds={seconds:.3f} reached={int(reached)} "
          f"accuracy={acc:.4f} version={seen} updates={stats['updates']}", flush=True)
    sys.stdout.flush()
    os._exit(0)  # clients may be blocked in a group's Future or a timer thread


if __name__ == "__main__":
    main()
