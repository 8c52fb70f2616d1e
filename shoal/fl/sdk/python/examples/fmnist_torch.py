#!/usr/bin/env python3
"""Train a PyTorch model on Fashion-MNIST as one client of a Shoal FL job.

    shoal deploy -f deploy/examples/fljob-fashion-mnist.yaml
    FL_TOKEN=$(shoal token create --role fl-client --job fmnist)
    .venv/bin/python shoal/fl/sdk/python/examples/fmnist_torch.py --token "$FL_TOKEN" \
        --server http://127.0.0.1:8080 --job fmnist --client-index 0 --num-clients 4

The network is built from the job's model, so its tensors have the server's names, shapes and
order (shoal/fl/wire/architectures.h): `logreg` (fc), `mlp` (fc1..fcN) and `cnn`
(conv1, conv2, fc1, fc2). Client k of n trains on every n-th training image (or a Dirichlet
non-IID share with --dirichlet ALPHA) from Debian's dataset-fashion-mnist, exactly the local
steps each task assigns (FedCompass gives each client its own), and reports its accuracy on a
slice of the test split. The last line on stdout is the run's summary as JSON.

--attack poisons this client's updates (shoal_fl.attacks). The colluding "little is enough"
attack runs as several such processes, each a client of its own:
    ... --client-index 8 --num-clients 10 --attack lie --attackers 2 --collude-dir /tmp/lie
    ... --client-index 9 --num-clients 10 --attack lie --attackers 2 --collude-dir /tmp/lie
Each trains honestly, they pool their models of each round in the directory and both send
mean - z std of them (z the paper's z_max for --num-clients and --attackers, or lie:<z>).

Privacy (docs/how-to/privacy-dp.md): --dp-sgd-noise S --dp-sgd-clip C trains with DP-SGD through
Opacus (each example's gradient clipped to C, N(0, (S C)^2) added to each batch's sum; the ε this
client spent on its own records, by Opacus's RDP accountant at --dp-sgd-delta, is in the
summary as dp_sgd_epsilon). --local-dp-noise S --local-dp-clip C privatises each update before it
is sent (shoal_fl.LocalDP: the change clipped to C, N(0, (S C)^2) per coordinate).
"""

import argparse
import gzip
import hashlib
import json
import logging
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import shoal_fl  # installed: the venv has the wheel (scripts/lib.sh), or pip install shoal/fl/sdk/python
from shoal_fl.torch import check_layout, get_parameters, set_parameters

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's training pixels (scaled to [0,1])


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack_from(">I", data, 0)
    ndim = magic & 0xFF
    dims = struct.unpack_from(">" + "I" * ndim, data, 4)
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_split(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    images = os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz")
    labels = os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz")
    if not os.path.exists(images):
        raise SystemExit(f"fashion-mnist not found at {images}: install the Debian package "
                         "dataset-fashion-mnist")
    x = (read_idx(images).astype(np.float32) / 255.0 - MEAN) / STD
    return torch.from_numpy(x).unsqueeze(1), torch.from_numpy(read_idx(labels).astype(np.int64))


# ---- the job's architectures, as PyTorch lays them out ----------------------------------------

class LogReg(nn.Module):
    def __init__(self, inputs, classes):
        super().__init__()
        self.fc = nn.Linear(inputs, classes)

    def forward(self, x):
        return self.fc(torch.flatten(x, 1))


class Mlp(nn.Module):
    def __init__(self, sizes):  # [inputs, h1, ..., classes]
        super().__init__()
        for i in range(len(sizes) - 1):
            setattr(self, f"fc{i + 1}", nn.Linear(sizes[i], sizes[i + 1]))
        self.depth = len(sizes) - 1

    def forward(self, x):
        x = torch.flatten(x, 1)
        for i in range(1, self.depth + 1):
            x = getattr(self, f"fc{i}")(x)
            if i < self.depth:
                x = F.relu(x)
        return x


class Cnn(nn.Module):
    """PyTorch's MNIST example without dropout: the job's `cnn`."""

    def __init__(self, hidden, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(64 * 12 * 12, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)


def build_model(names, shapes):
    """The module whose state_dict is exactly the job's tensors."""
    shape = dict(zip(names, shapes))
    if "conv1.weight" in shape:
        net = Cnn(hidden=shape["fc1.weight"][0], classes=shape["fc2.weight"][0])
    elif names == ["fc.weight", "fc.bias"]:
        net = LogReg(inputs=shape["fc.weight"][1], classes=shape["fc.weight"][0])
    else:
        layers = len(names) // 2
        sizes = [shape["fc1.weight"][1]] + [shape[f"fc{i}.weight"][0] for i in range(1, layers + 1)]
        net = Mlp(sizes)
    check_layout(net, names, shapes)
    return net


class FashionMnistClient(shoal_fl.Client):
    def __init__(self, train, test, seed, attack=None, collusion=None):
        self.attack = attack  # shoal_fl.Attack: this client poisons its updates
        self.collusion = collusion  # lie: shoal_fl.Collusion, the attackers' shared directory
        self.lie = {"colluded": 0, "alone": 0, "sent": {}}  # sent: version -> sha256
        self.seed, self.fits = seed, 0
        self.x, self.y = train
        self.test_x, self.test_y = test
        self.net = None
        self.gen = torch.Generator().manual_seed(seed)
        self.order, self.pos = None, 0

    def _net(self, parameters, config):
        if self.net is None:
            self.net = build_model(config["parameter_names"], [p.shape for p in parameters])
        set_parameters(self.net, parameters)
        return self.net

    def _batch(self, size):
        if self.order is None or self.pos + size > len(self.order):
            self.order, self.pos = torch.randperm(len(self.y), generator=self.gen), 0
        idx = self.order[self.pos:self.pos + size]
        self.pos += size
        return self.x[idx], self.y[idx]

    def enable_dp_sgd(self, noise, clip, delta):
        """DP-SGD through Opacus: its GradSampleModule for per-example gradients, its DPOptimizer
        to clip and noise them, its RDPAccountant for this client's ε (sample rate: batch size
        over the client's examples; the batches are shuffled, not Poisson-sampled)."""
        from opacus.accountants import RDPAccountant
        self.dp_sgd = {"noise": noise, "clip": clip, "delta": delta, "acc": RDPAccountant()}

    def dp_sgd_epsilon(self):
        if not getattr(self, "dp_sgd", None) or not self.dp_sgd["acc"].history:
            return None
        return self.dp_sgd["acc"].get_epsilon(self.dp_sgd["delta"])

    def _optimizer(self, net, config):
        opt = torch.optim.SGD(net.parameters(), lr=config["learning_rate"])
        if not getattr(self, "dp_sgd", None):
            return net, opt
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer
        if getattr(self, "gsm", None) is None or self.gsm._module is not net:
            self.gsm = GradSampleModule(net)
        opt = DPOptimizer(torch.optim.SGD(self.gsm.parameters(), lr=config["learning_rate"]),
                          noise_multiplier=self.dp_sgd["noise"], max_grad_norm=self.dp_sgd["clip"],
                          expected_batch_size=config["batch_size"])
        return self.gsm, opt

    def fit(self, parameters, config):
        net = self._net(parameters, config)
        net.train()
        model, opt = self._optimizer(net, config)
        q = min(1.0, config["batch_size"] / len(self.y))
        for _ in range(config["local_steps"]):  # what the task assigned, no more, no less
            x, y = self._batch(config["batch_size"])
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            if getattr(self, "dp_sgd", None):
                self.dp_sgd["acc"].step(noise_multiplier=self.dp_sgd["noise"], sample_rate=q)
        trained = get_parameters(net)
        if self.attack is not None:
            self.fits += 1
            peers = None
            if self.collusion is not None:
                version = config["model_version"]
                peers = self.collusion.pool(version, trained)
                self.lie["colluded" if len(peers) >= 2 else "alone"] += 1
            trained = self.attack.apply(parameters, trained, seed=self.seed * 7919 + self.fits,
                                        peers=peers)
            if self.collusion is not None:
                digest = hashlib.sha256()
                for t in trained:
                    digest.update(np.ascontiguousarray(t, dtype=np.float32).tobytes())
                self.lie["sent"][str(version)] = digest.hexdigest()
        return trained, len(self.y), {}

    def evaluate(self, parameters, config):
        net = self._net(parameters, config)
        net.eval()
        with torch.no_grad():
            logits = net(self.test_x)
            loss = F.cross_entropy(logits, self.test_y).item()
            accuracy = (logits.argmax(1) == self.test_y).float().mean().item()
        return loss, len(self.test_y), {"accuracy": accuracy}


def shard(labels, k, n, alpha, seed):
    """Client k's training indices: every n-th (IID), or a Dirichlet(alpha) share per class."""
    if alpha <= 0:
        return np.arange(k, len(labels), n)
    rng = np.random.default_rng(seed)
    mine = []
    for c in range(10):
        idx = np.flatnonzero(labels == c)
        rng.shuffle(idx)
        cuts = (np.cumsum(rng.dirichlet([alpha] * n)) * len(idx)).astype(int)[:-1]
        mine.append(np.split(idx, cuts)[k])
    return np.sort(np.concatenate(mine))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--server", default="http://127.0.0.1:8080", help="shoald's public URL")
    p.add_argument("--job", default="fmnist")
    p.add_argument("--token", default=None, help="fl-client token (default: $SHOAL_TOKEN)")
    p.add_argument("--join-token", default=None, help="one of the job's spec.clients.tokens")
    p.add_argument("--client-index", type=int, default=0)
    p.add_argument("--num-clients", type=int, default=1)
    p.add_argument("--dirichlet", type=float, default=0.0, help="non-IID shares (alpha > 0)")
    p.add_argument("--train-samples", type=int, default=0, help="cap this client's share")
    p.add_argument("--eval-samples", type=int, default=1000, help="test images to score on")
    p.add_argument("--no-evaluate", action="store_true", help="report no evaluations")
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16", "int8", "int4"])
    p.add_argument("--data-dir", default=FASHION_MNIST)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-seconds", type=float, default=None)
    p.add_argument("--attack", default="none",
                   help="poison this client's updates: none | sign-flip | scale:<k> | "
                        "noise:<sigma> | label-flip | lie[:<z>] (shoal_fl.attacks)")
    p.add_argument("--attackers", type=int, default=0,
                   help="lie: how many attackers collude (z_max from it and --num-clients)")
    p.add_argument("--collude-dir", default=None,
                   help="lie: the directory the attackers pool their models in")
    p.add_argument("--collude-wait", type=float, default=30.0,
                   help="lie: seconds to wait for the round's other attackers")
    p.add_argument("--dp-sgd-noise", type=float, default=None,
                   help="train with DP-SGD (Opacus) at this noise multiplier")
    p.add_argument("--dp-sgd-clip", type=float, default=1.0,
                   help="DP-SGD: each example's gradient clipped to this L2 norm")
    p.add_argument("--dp-sgd-delta", type=float, default=1e-5, help="DP-SGD: δ of the ε reported")
    p.add_argument("--local-dp-noise", type=float, default=None,
                   help="local DP: noise multiplier of each update sent (shoal_fl.LocalDP)")
    p.add_argument("--local-dp-clip", type=float, default=1.0,
                   help="local DP: each update's change clipped to this L2 norm")
    args = p.parse_args()
    collusion = None
    try:
        attack = shoal_fl.parse_attack(args.attack)
        if attack.kind == "lie":
            if not args.collude_dir:
                raise ValueError("lie needs --collude-dir (where the attackers pool models)")
            attack = attack.with_z(args.num_clients, args.attackers)
            collusion = shoal_fl.Collusion(args.collude_dir, args.attackers, args.client_index,
                                           wait=args.collude_wait)
    except ValueError as e:
        p.error(f"--attack: {e}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed * 1000 + args.client_index)

    x, y = load_split(args.data_dir, "train")
    idx = shard(y.numpy(), args.client_index, args.num_clients, args.dirichlet, args.seed)
    if args.train_samples:
        idx = idx[:args.train_samples]
    test_x, test_y = load_split(args.data_dir, "test")
    # A fixed slice of the test split, different per client.
    start = (args.client_index * args.eval_samples) % len(test_y)
    test = (test_x[start:start + args.eval_samples], test_y[start:start + args.eval_samples])
    train_y = y[idx]
    if attack.kind == "label-flip":
        train_y = torch.from_numpy(shoal_fl.flip_labels(train_y.numpy()).astype(np.int64))
    client = FashionMnistClient((x[idx], train_y), test, seed=args.seed * 1000 + args.client_index,
                                attack=None if attack.kind == "none" else attack,
                                collusion=collusion)
    if attack.kind != "none":
        logging.info("client %d attacks: %s", args.client_index, attack)
    if args.dp_sgd_noise is not None:
        client.enable_dp_sgd(args.dp_sgd_noise, args.dp_sgd_clip, args.dp_sgd_delta)
    local_dp = None
    if args.local_dp_noise is not None:
        local_dp = shoal_fl.LocalDP(clip=args.local_dp_clip, noise_multiplier=args.local_dp_noise)

    t0 = time.time()
    summary = shoal_fl.run_client(
        args.server, args.job, client, token=args.token, join_token=args.join_token,
        name=f"torch-{args.client_index}", dtype=args.dtype, evaluate=not args.no_evaluate,
        max_seconds=args.max_seconds, local_dp=local_dp)
    last = summary.evaluations.get(max(summary.evaluations)) if summary.evaluations else None
    logging.info("done=%s after %.1fs: %d tasks, %d updates taken, %d stale, last eval %s",
                 summary.done, time.time() - t0, summary.tasks, summary.updates_accepted,
                 summary.updates_stale, last)
    out = dict(vars(summary))
    out["evaluations"] = {str(k): v for k, v in summary.evaluations.items()}
    if collusion is not None:
        out["lie"] = client.lie
    if args.dp_sgd_noise is not None:
        out["dp_sgd_epsilon"] = client.dp_sgd_epsilon()
    if local_dp is not None:
        out["local_dp_epsilon"] = local_dp.epsilon(summary.updates_accepted + summary.updates_stale,
                                                   1e-5)
    print(json.dumps(out), flush=True)
    return 0 if summary.done else 1


if __name__ == "__main__":
    sys.exit(main())
