"""Model-poisoning attacks for experiments with a job's robust rule (spec.aggregation.robust).

The same attacks as shoal-client --attack (client/include/shoal/client/attack.h), on a list of
numpy arrays: each rewrites the trained parameters x from the global ones g through the delta:

    sign-flip      x <- g - (x - g)
    scale:<k>      x <- g + k (x - g)        (scale:-10: the delta reversed and 10 times longer)
    noise:<sigma>  x <- g + N(0, sigma^2)    (the delta replaced by Gaussian noise)
    label-flip     trained on labels C - 1 - y (flip_labels; apply leaves the update as it is)

    attack = shoal_fl.parse_attack("scale:-10")
    poisoned = attack.apply(global_parameters, trained_parameters, seed=7)
"""

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Attack:
    kind: str  # "none" | "sign-flip" | "label-flip" | "scale" | "noise"
    value: float = 0.0

    def __str__(self):
        if self.kind in ("none", "sign-flip", "label-flip"):
            return self.kind
        return f"{self.kind}:{self.value:g}"

    def apply(self, global_parameters, trained, seed=0):
        """The poisoned parameters (new float32 arrays; the inputs are not changed)."""
        if len(global_parameters) != len(trained):
            raise ValueError(f"attack: {len(global_parameters)} global tensors, "
                             f"{len(trained)} trained ones")
        rng = np.random.default_rng(seed)
        out = []
        for g, x in zip(global_parameters, trained):
            g = np.asarray(g, dtype=np.float32)
            x = np.asarray(x, dtype=np.float32)
            if g.shape != x.shape:
                raise ValueError(f"attack: shapes {g.shape} and {x.shape} differ")
            if self.kind in ("none", "label-flip"):
                out.append(x.copy())
            elif self.kind == "sign-flip":
                out.append((2 * g - x).astype(np.float32))
            elif self.kind == "scale":
                out.append((g + np.float32(self.value) * (x - g)).astype(np.float32))
            else:
                noise = rng.normal(0.0, self.value, size=g.shape).astype(np.float32)
                out.append((g + noise).astype(np.float32))
        return out


def flip_labels(labels, num_classes=10):
    """label-flip's training labels: y -> num_classes - 1 - y (a new array)."""
    return (num_classes - 1) - np.asarray(labels)


def parse_attack(spec):
    """"none", "sign-flip", "label-flip", "scale:<k>" (finite, k != 1) or "noise:<sigma>"
    (finite, > 0);
    ValueError naming the spec and what is wrong, as shoal-client words it."""
    kind, colon, arg = spec.partition(":")
    where = f'attack "{spec}": '
    if kind in ("none", "sign-flip", "label-flip"):
        if colon:
            raise ValueError(where + f"{kind} takes no argument")
        return Attack(kind)
    if kind not in ("scale", "noise"):
        raise ValueError(where + "unknown attack "
                         "(none, sign-flip, label-flip, scale:<k>, noise:<sigma>)")
    try:
        value = float(arg)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        example = "scale:-10" if kind == "scale" else "noise:0.5"
        raise ValueError(where + f"{kind} needs a finite number, e.g. {example}")
    if kind == "scale" and value == 1:
        raise ValueError(where + "scale:1 changes nothing")
    if kind == "noise" and not value > 0:
        raise ValueError(where + "sigma must be > 0")
    return Attack(kind, value)
