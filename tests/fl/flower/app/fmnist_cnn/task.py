"""The model, the data and the loops (Flower's quickstart-pytorch task.py in shape): a CNN whose
tensors are named and shaped as Shoal's built-in `cnn` architecture, Fashion-MNIST from the local
copy, an iid partition per node (seeded), SGD with a seeded batch order."""

import gzip
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

DATA = os.environ.get("SHOAL_FMNIST_DIR", "/usr/share/datasets/fashion-mnist")
_cache = {}


class Net(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(64 * 12 * 12, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)


def _idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def dataset(split):
    """(images float32 [n, 1, 28, 28] in [0, 1], labels int64) of "train" or "t10k"."""
    if split not in _cache:
        x = _idx(os.path.join(DATA, f"{split}-images-idx3-ubyte.gz"))
        y = _idx(os.path.join(DATA, f"{split}-labels-idx1-ubyte.gz"))
        _cache[split] = (torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1),
                         torch.from_numpy(y.astype(np.int64)))
    return _cache[split]


def partition(pid, parts, seed):
    """Node pid's indices of the training set: an iid split of a seeded permutation."""
    n = len(dataset("train")[1])
    order = np.random.default_rng(seed).permutation(n)
    return np.array_split(order, parts)[pid]


def train(net, pid, parts, seed, server_round, samples, epochs, batch, lr):
    """Local SGD on `samples` of the node's partition (which ones and their order follow seed,
    node and round); returns (mean loss, examples)."""
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    x, y = dataset("train")
    part = partition(pid, parts, seed)
    rng = np.random.default_rng([seed, pid, server_round])
    idx = part[rng.permutation(len(part))[:samples]]
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    net.train()
    total, steps = 0.0, 0
    for _ in range(epochs):
        for s in range(0, len(idx), batch):
            b = torch.from_numpy(idx[s:s + batch])
            opt.zero_grad()
            loss = F.cross_entropy(net(x[b]), y[b])
            loss.backward()
            opt.step()
            total, steps = total + float(loss), steps + 1
    return total / max(steps, 1), len(idx)


def evaluate(net, samples):
    """(loss, accuracy, examples) on the first `samples` test images."""
    torch.set_num_threads(1)
    x, y = dataset("t10k")
    x, y = x[:samples], y[:samples]
    net.eval()
    with torch.no_grad():
        out = net(x)
        loss = float(F.cross_entropy(out, y))
        acc = float((out.argmax(1) == y).float().mean())
    return loss, acc, len(y)
