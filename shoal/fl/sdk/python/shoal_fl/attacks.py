"""Model-poisoning attacks for experiments with a job's robust rule (spec.aggregation.robust).

The same attacks as shoal-client --attack (shoal/tools/flsim/attack.h), on a list of
numpy arrays: each rewrites the trained parameters x from the global ones g through the delta:

    sign-flip      x <- g - (x - g)
    scale:<k>      x <- g + k (x - g)        (scale:-10: the delta reversed and 10 times longer)
    noise:<sigma>  x <- g + N(0, sigma^2)    (the delta replaced by Gaussian noise)
    label-flip     trained on labels C - 1 - y (flip_labels; apply leaves the update as it is)
    lie[:<z>]      "A little is enough" (Baruch et al., NeurIPS 2019): the attackers collude;
                   each trains honestly, they pool their honest models of a round (Collusion,
                   through a directory they share) and all send mean - z std of them, per
                   coordinate (little_is_enough); z defaults to the paper's z_max for n
                   clients and f attackers (lie_z)

    attack = shoal_fl.parse_attack("scale:-10")
    poisoned = attack.apply(global_parameters, trained_parameters, seed=7)

    lie = shoal_fl.parse_attack("lie").with_z(n=10, f=2)            # z 0.2533
    peers = shoal_fl.Collusion("/shared/dir", attackers=2, index=k).pool(version, trained)
    poisoned = lie.apply(global_parameters, trained, peers=peers)
"""

from __future__ import annotations

import glob
import math
import os
import tempfile
import time
from dataclasses import dataclass
from statistics import NormalDist
from typing import List, Optional, Sequence

import numpy as np
import numpy.typing as npt

Arrays = List[npt.NDArray[np.float32]]


@dataclass(frozen=True)
class Attack:
    kind: str  # "none" | "sign-flip" | "label-flip" | "scale" | "noise" | "lie"
    value: float = 0.0  # scale: k; noise: sigma; lie: z (0 until with_z)

    def __str__(self) -> str:
        if self.kind in ("none", "sign-flip", "label-flip") or (self.kind == "lie" and
                                                                 self.value == 0):
            return self.kind
        return f"{self.kind}:{self.value:g}"

    def with_z(self, n: int, f: int) -> Attack:
        """lie: this attack with z = lie_z(n, f) unless a z was given (lie:<z>)."""
        if self.kind != "lie" or self.value != 0:
            return self
        return Attack("lie", lie_z(n, f))

    def apply(self, global_parameters: Sequence[npt.ArrayLike], trained: Sequence[npt.ArrayLike],
              seed: int = 0,
              peers: Optional[Sequence[Sequence[npt.ArrayLike]]] = None) -> Arrays:
        """The poisoned parameters (new float32 arrays; the inputs are not changed). lie:
        `peers` are the colluders' honest parameter lists of this round, this attacker's own
        among them (Collusion.pool); with fewer than two the trained parameters are sent."""
        if len(global_parameters) != len(trained):
            raise ValueError(f"attack: {len(global_parameters)} global tensors, "
                             f"{len(trained)} trained ones")
        if self.kind == "lie":
            if self.value == 0:
                raise ValueError("attack lie: no z yet (with_z(n, f) or lie:<z>)")
            if peers is None or len(peers) < 2:
                return [np.asarray(x, dtype=np.float32).copy() for x in trained]
            return little_is_enough(peers, self.value)
        rng = np.random.default_rng(seed)
        out: Arrays = []
        for g_in, x_in in zip(global_parameters, trained):
            g = np.asarray(g_in, dtype=np.float32)
            x = np.asarray(x_in, dtype=np.float32)
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


def lie_z(n: int, f: int) -> float:
    """The paper's z_max for n workers of which f collude: they need s = floor(n/2 + 1) - f
    honest "supporters" farther from the mean than they are; with normally distributed honest
    values that holds up to z = Phi^-1((n - s) / n). E.g. n 10, f 2: s 4, Phi^-1(0.6) = 0.2533.
    ValueError (shoal-client's words) when 1 <= f < n fails or s < 1."""
    if n < 2 or f < 1 or f >= n:
        raise ValueError(f"lie: z_max needs 1 <= attackers < clients (got {f} of {n})")
    s = n // 2 + 1 - f
    if s < 1:
        raise ValueError(f"lie: {f} attackers of {n} clients need no supporters "
                         f"(s = floor(n/2 + 1) - f = {s}): z_max is unbounded, give one as "
                         "lie:<z>")
    return NormalDist().inv_cdf((n - s) / n)


def little_is_enough(models: Sequence[Sequence[npt.ArrayLike]], z: float) -> Arrays:
    """mean - z * std over >= 2 models (lists of arrays of equal shapes), per coordinate, the
    sample std (ddof 1, as torch.std); float32 arrays. On the models themselves: the deltas
    from the global model have the same std and a mean shifted by it."""
    if len(models) < 2:
        raise ValueError(f"lie: needs at least 2 models to pool, got {len(models)}")
    out: Arrays = []
    for tensors in zip(*models):
        stack = np.stack([np.asarray(t, dtype=np.float64) for t in tensors])
        out.append((stack.mean(axis=0) - z * stack.std(axis=0, ddof=1)).astype(np.float32))
    return out


class Collusion:
    """How the lie attackers of separate processes pool their honest models: a directory they
    can all write (their side channel; each stays a real client of the job). pool() deposits
    this attacker's model for a global version (v<version>-a<index>.npz, written whole then
    renamed) and returns the deposits of that version, in attacker order, once `attackers` of
    them are there, a deposit for a newer version shows the round has moved on, or `wait`
    seconds passed; those found then are what it pools (one alone: its own)."""

    def __init__(self, directory: str, attackers: int, index: int, wait: float = 30.0,
                 poll: float = 0.02, keep: int = 8) -> None:
        if attackers < 2:
            raise ValueError(f"lie: the attackers pool their models, so it needs at least 2 "
                             f"attackers (got {attackers})")
        os.makedirs(directory, exist_ok=True)
        self.directory, self.attackers, self.index = directory, attackers, index
        self.wait, self.poll, self.keep = wait, poll, keep

    def _path(self, version: int, index: int) -> str:
        return os.path.join(self.directory, f"v{version:012d}-a{index:06d}.npz")

    def _versions(self) -> set[int]:
        return {int(os.path.basename(p)[1:13]) for p in
                glob.glob(os.path.join(self.directory, "v" + "[0-9]" * 12 + "-a*.npz"))}

    def pool(self, version: int, trained: Sequence[npt.ArrayLike]) -> List[Arrays]:
        fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, *[np.asarray(t, dtype=np.float32) for t in trained])
        os.replace(tmp, self._path(version, self.index))
        pattern = os.path.join(self.directory, f"v{version:012d}-a*.npz")
        deadline = time.monotonic() + self.wait
        while True:
            found = sorted(glob.glob(pattern))
            if (len(found) >= self.attackers or time.monotonic() >= deadline or
                    max(self._versions(), default=version) > version):
                break
            time.sleep(self.poll)
        models: List[Arrays] = []
        for path in found:
            with np.load(path) as z:
                models.append([z[f"arr_{i}"] for i in range(len(z.files))])
        for old in self._versions():  # this attacker's deposits `keep` versions back
            if old + self.keep < version and os.path.exists(self._path(old, self.index)):
                os.remove(self._path(old, self.index))
        return models


def flip_labels(labels: npt.ArrayLike, num_classes: int = 10) -> np.ndarray:
    """label-flip's training labels: y -> num_classes - 1 - y (a new array)."""
    return (num_classes - 1) - np.asarray(labels)


def parse_attack(spec: str) -> Attack:
    """"none", "sign-flip", "label-flip", "scale:<k>" (finite, k != 1), "noise:<sigma>"
    (finite, > 0), "lie" or "lie:<z>" (finite, > 0);
    ValueError naming the spec and what is wrong, as shoal-client words it."""
    kind, colon, arg = spec.partition(":")
    where = f'attack "{spec}": '
    if kind in ("none", "sign-flip", "label-flip"):
        if colon:
            raise ValueError(where + f"{kind} takes no argument")
        return Attack(kind)
    if kind == "lie" and not colon:
        return Attack("lie")  # z from lie_z(n, f): with_z
    if kind not in ("scale", "noise", "lie"):
        raise ValueError(where + "unknown attack "
                         "(none, sign-flip, label-flip, scale:<k>, noise:<sigma>, lie[:<z>])")
    try:
        value = float(arg)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        example = {"scale": "scale:-10", "noise": "noise:0.5", "lie": "lie:1.5"}[kind]
        raise ValueError(where + f"{kind} needs a finite number, e.g. {example}")
    if kind == "scale" and value == 1:
        raise ValueError(where + "scale:1 changes nothing")
    if kind == "lie" and not value > 0:
        raise ValueError(where + "z must be > 0")
    if kind == "noise" and not value > 0:
        raise ValueError(where + "sigma must be > 0")
    return Attack(kind, value)
