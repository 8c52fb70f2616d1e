"""Local differential privacy: the client clips and noises its update before it leaves.

    ldp = shoal_fl.LocalDP(clip=1.0, noise_multiplier=1.1)
    shoal_fl.run_client(server, job, client, local_dp=ldp)     # every update privatised

The update's change from the global model it was trained from, Δ = w_k - w, is scaled to L2
norm at most `clip` (over all tensors together) and N(0, (noise_multiplier * clip)^2) is added
to each coordinate; the client sends w + Δ'. The server, and anyone who sees the update, then
learns of this client's data only what one Gaussian mechanism with sensitivity `clip` reveals:
each sent update is (ε, δ)-DP with respect to the client's whole contribution, ε from
`epsilon()` (RDP, the same conversion as Opacus and the server's accountant). Local noise is
not averaged away before it is seen, so it costs far more accuracy than central DP
(spec.privacy.dp) for the same ε: use it when the server is not trusted.

The noise comes from numpy's PCG64 seeded with 128 bits of the OS's CSPRNG (secrets); `rng`
fixes it for tests only.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .client import Parameters


@dataclasses.dataclass
class LocalDP:
    clip: float  # C: the L2 norm each update's change is clipped to
    noise_multiplier: float  # σ: each coordinate gets N(0, (σC)^2)
    rng: Optional[np.random.Generator] = None  # tests only; default: seeded from secrets

    def __post_init__(self) -> None:
        if not (self.clip > 0 and math.isfinite(self.clip)):
            raise ValueError(f"LocalDP.clip must be a finite number > 0, got {self.clip}")
        if not (self.noise_multiplier >= 0 and math.isfinite(self.noise_multiplier)):
            raise ValueError("LocalDP.noise_multiplier must be a finite number >= 0, got "
                             f"{self.noise_multiplier}")
        if self.rng is None:
            self.rng = np.random.Generator(np.random.PCG64(secrets.randbits(128)))

    def privatize(self, global_arrays: Sequence[np.ndarray],
                  trained: Sequence[np.ndarray]) -> Tuple[List[np.ndarray], float]:
        """The update to send (float32 arrays in the model's order) and the norm of the change
        before clipping."""
        deltas = [np.asarray(t, dtype=np.float64) - np.asarray(g, dtype=np.float64)
                  for g, t in zip(global_arrays, trained)]
        norm = math.sqrt(sum(float(np.dot(d.ravel(), d.ravel())) for d in deltas))
        scale = min(1.0, self.clip / norm) if norm > 0 else 1.0
        std = self.noise_multiplier * self.clip
        assert self.rng is not None
        out: List[np.ndarray] = []
        for g, d in zip(global_arrays, deltas):
            noised = d * scale + (self.rng.normal(0.0, std, d.shape) if std > 0 else 0.0)
            out.append((np.asarray(g, dtype=np.float64) + noised).astype(np.float32))
        return out, norm

    def epsilon(self, updates: int, delta: float) -> float:
        """ε after `updates` updates sent (each a Gaussian mechanism, no sampling), at δ: RDP
        α/(2σ²) per update, converted as Opacus's get_privacy_spent over its default orders."""
        if self.noise_multiplier == 0:
            return math.inf
        orders = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))
        best = math.inf
        for a in orders:
            rdp = updates * a / (2 * self.noise_multiplier ** 2)
            eps = rdp - (math.log(delta) + math.log(a)) / (a - 1) + math.log((a - 1) / a)
            best = min(best, eps)
        return best


def privatize(global_arrays: Sequence[np.ndarray], trained: Parameters,
              ldp: LocalDP) -> List[np.ndarray]:
    """`trained` clipped and noised by `ldp` against `global_arrays` (see LocalDP)."""
    return ldp.privatize(global_arrays, trained)[0]
