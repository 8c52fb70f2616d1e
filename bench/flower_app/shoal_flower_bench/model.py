"""The model both systems start from: a 784-H-10 MLP, its tensors in torch's order and names."""

from collections import OrderedDict

import numpy as np
from flwr.app import Array, ArrayRecord


def mlp_arrays(hidden: int, seed: int) -> "OrderedDict[str, np.ndarray]":
    """Seeded uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) weights, zero biases (float32)."""
    rng = np.random.default_rng(seed)
    out = OrderedDict()
    for name, fan_in, fan_out in (("fc1", 784, hidden), ("fc2", hidden, 10)):
        bound = 1.0 / np.sqrt(fan_in)
        out[f"{name}.weight"] = rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32)
        out[f"{name}.bias"] = np.zeros(fan_out, np.float32)
    return out


def initial_arrays(mode: str, hidden: int, seed: int, init_npz: str = "") -> ArrayRecord:
    """train: the tensors in `init_npz` (Shoal's job's version 0, so both start alike)."""
    if mode == "train":
        with np.load(init_npz) as z:
            return ArrayRecord({k: Array(np.ascontiguousarray(z[k])) for k in z.files})
    return ArrayRecord({k: Array(v) for k, v in mlp_arrays(hidden, seed).items()})
