"""PyTorch helpers (imported only when used): a module's parameters as the SDK's list of numpy
arrays, in the order and under the names the job's model has."""

from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import torch


def check_layout(module: torch.nn.Module, names: Sequence[str],
                 shapes: Optional[Sequence[Sequence[int]]] = None) -> None:
    """Raises ValueError unless the module's state_dict has exactly the job's tensor names, in
    the job's order (and the shapes, when given)."""
    sd = module.state_dict()
    mine = list(sd.keys())
    if mine != list(names):
        raise ValueError(f"the module's tensors {mine} are not the job's model {list(names)}")
    if shapes is not None:
        for n, shape in zip(names, shapes):
            if tuple(sd[n].shape) != tuple(shape):
                raise ValueError(f"tensor '{n}': the module has shape {list(sd[n].shape)}, the "
                                 f"job's model {list(shape)}")


def get_parameters(module: torch.nn.Module) -> List[np.ndarray]:
    """The module's state_dict values as float32 numpy arrays, in state_dict order."""
    return [t.detach().to("cpu", torch.float32).numpy() for t in module.state_dict().values()]


def set_parameters(module: torch.nn.Module, parameters: Sequence[np.ndarray]) -> None:
    """Loads arrays (in state_dict order) into the module."""
    keys = list(module.state_dict().keys())
    if len(keys) != len(parameters):
        raise ValueError(f"{len(parameters)} arrays for a module with {len(keys)} tensors")
    module.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(p, dtype=np.float32))
                            for k, p in zip(keys, parameters)}, strict=True)
