"""Shoal's RDP accountant (shoal/fl/privacy/rdp_accountant.cc, through tests' rdp_epsilon) against
Opacus 1.6's RDPAccountant: the same ε within 1e-6 for the same (q, σ, steps, δ), over a grid of
sampling rates, noise multipliers, step counts and deltas, and compositions of runs."""
import os
import subprocess
import warnings

import pytest
from opacus.accountants import RDPAccountant

# (runs [(q, sigma, steps)], delta): single runs over q in (0, 1], sigma 0.5..10, 1..1000 steps
# and deltas 1e-3..1e-7, then mixed runs (a job whose round sizes vary).
GRID = [
    ([(1.0, 1.0, 1)], 1e-5),
    ([(1.0, 0.8, 10)], 1e-5),
    ([(1.0, 4.0, 100)], 1e-6),
    ([(0.5, 1.0, 10)], 1e-5),
    ([(0.5, 1.1, 50)], 1e-3),
    ([(0.25, 1.5, 100)], 1e-5),
    ([(0.1, 1.0, 100)], 1e-5),
    ([(0.1, 0.7, 30)], 1e-4),
    ([(0.0625, 1.2, 200)], 1e-5),
    ([(0.01, 1.0, 1000)], 1e-5),
    ([(0.01, 2.0, 500)], 1e-7),
    ([(0.004, 1.1, 1000)], 1e-5),
    ([(0.001, 0.9, 1000)], 1e-6),
    ([(0.3, 5.0, 20)], 1e-5),
    ([(0.75, 10.0, 400)], 1e-5),
    ([(0.9, 2.5, 7)], 1e-2),
    ([(0.2, 0.5, 3)], 1e-5),
    ([(1.0, 1.0, 5), (0.5, 1.0, 5)], 1e-5),
    ([(0.8, 1.3, 10), (0.6, 1.3, 4), (0.8, 1.3, 3)], 1e-5),
    ([(1e-5, 1.0, 10), (1e-4, 3.0, 4)], 1e-5),
    ([(0.0625, 1.0, 1)], 1e-5),
    ([(0.5, 3.0, 1000)], 1e-6),
]


def opacus_epsilon(runs, delta):
    acc = RDPAccountant()
    for q, sigma, steps in runs:
        for _ in range(steps):
            acc.step(noise_multiplier=sigma, sample_rate=q)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "optimal order is the largest alpha"
        eps, order = acc.get_privacy_spent(delta=delta)
    return eps, order


def shoal_epsilon(cases):
    tool = os.environ.get("SHOAL_RDP_EPSILON")
    if not tool:
        pytest.skip("SHOAL_RDP_EPSILON (the rdp_epsilon tool) is not set: run through ctest")
    lines = [";".join(f"{q!r} {s!r} {n}" for q, s, n in runs) + f"|{delta!r}" for runs, delta in cases]
    out = subprocess.run([tool], input="\n".join(lines) + "\n", capture_output=True, text=True,
                         check=True, timeout=60).stdout.split("\n")
    return [tuple(float(x) for x in line.split()) for line in out if line]


def test_epsilon_matches_opacus_within_1e_6():
    got = shoal_epsilon(GRID)
    assert len(got) == len(GRID)
    worst = 0.0
    for (runs, delta), (eps, order) in zip(GRID, got):
        want, want_order = opacus_epsilon(runs, delta)
        assert abs(eps - want) <= 1e-6, (runs, delta, eps, want)
        assert order == want_order, (runs, delta, order, want_order)
        worst = max(worst, abs(eps - want))
    print(f"{len(GRID)} settings, largest |ε_shoal - ε_opacus| = {worst:.3g}")
