"""The training both systems run in bench-fl-flower --train, one copy: Fashion-MNIST from the
Debian package (dataset-fashion-mnist), pixels / 255; a Dirichlet(alpha) label partition over the
clients (seeded); a ReLU MLP over the global model's tensors in their order; local epochs of
plain minibatch SGD whose batch order follows (seed, client, round); test accuracy."""

import gzip
import os

import numpy as np
import torch

DATA = "/usr/share/datasets/fashion-mnist"
_cache = {}


def _idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def dataset(split):
    """(features float32 [n, 784], labels int64 [n]) of "train" or "t10k"."""
    if split not in _cache:
        x = _idx(os.path.join(DATA, f"{split}-images-idx3-ubyte.gz"))
        y = _idx(os.path.join(DATA, f"{split}-labels-idx1-ubyte.gz"))
        _cache[split] = (torch.from_numpy(x.reshape(len(x), -1).astype(np.float32) / 255.0),
                         torch.from_numpy(y.astype(np.int64)))
    return _cache[split]


def partition(clients, alpha, seed):
    """Each client's sample indices: per class, Dirichlet(alpha) shares over the clients;
    redrawn until every client holds at least 10 samples."""
    key = ("partition", clients, alpha, seed)
    if key not in _cache:
        labels = dataset("train")[1].numpy()
        rng = np.random.default_rng(seed)
        while True:
            parts = [[] for _ in range(clients)]
            for c in range(int(labels.max()) + 1):
                idx = rng.permutation(np.flatnonzero(labels == c))
                shares = rng.dirichlet(np.full(clients, alpha))
                cuts = (np.cumsum(shares)[:-1] * len(idx)).astype(int)
                for k, piece in enumerate(np.split(idx, cuts)):
                    parts[k].extend(piece.tolist())
            if min(len(p) for p in parts) >= 10:
                break
        _cache[key] = [np.sort(np.array(p, dtype=np.int64)) for p in parts]
    return _cache[key]


def forward(params, x):
    """params: [W1, b1, W2, b2, ...] in the model's order; a weight is (in, out) or (out, in)."""
    h = x
    layers = [(params[i], params[i + 1]) for i in range(0, len(params), 2)]
    for i, (w, b) in enumerate(layers):
        h = h @ (w if w.shape[0] == h.shape[1] else w.t()) + b
        if i + 1 < len(layers):
            h = torch.relu(h)
    return h


def local_train(state, client, clients, seed, alpha, epochs, lr, batch, round_index):
    """Trains `state` (name -> array, in the model's order) on the client's partition; returns
    (name -> float32 ndarray, number of samples)."""
    torch.set_num_threads(1)
    x, y = dataset("train")
    idx = partition(clients, alpha, seed)[client]
    names = list(state.keys())
    params = [torch.tensor(np.asarray(state[n], dtype=np.float32), requires_grad=True)
              for n in names]
    rng = np.random.default_rng([seed, client, round_index])
    for _ in range(epochs):
        order = idx[rng.permutation(len(idx))]
        for start in range(0, len(order), batch):
            b = torch.from_numpy(order[start:start + batch])
            loss = torch.nn.functional.cross_entropy(forward(params, x[b]), y[b])
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p -= lr * g
    return {n: p.detach().numpy() for n, p in zip(names, params)}, len(idx)


def accuracy(arrays):
    """Test accuracy of the model whose tensors are `arrays` (in order)."""
    x, y = dataset("t10k")
    with torch.no_grad():
        params = [torch.from_numpy(np.asarray(a, dtype=np.float32)) for a in arrays]
        return float((forward(params, x).argmax(1) == y).float().mean())
