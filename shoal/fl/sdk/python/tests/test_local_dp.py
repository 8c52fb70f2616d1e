"""shoal_fl.LocalDP: the change is clipped to norm C exactly, the noise's standard deviation is
σC (200,000 coordinates, a fixed test generator, a 6-standard-error bound), the default
generator is seeded from the OS (two differ), ε matches Opacus's conversion, bad arguments are
refused, and run_client sends the privatised update."""
import math

import numpy as np
import pytest

import shoal_fl


def test_clips_the_change_to_norm_c_without_noise():
    g = [np.zeros((100, 10), np.float32), np.ones(10, np.float32)]
    t = [np.full((100, 10), 0.5, np.float32), np.ones(10, np.float32) * 3]
    ldp = shoal_fl.LocalDP(clip=2.0, noise_multiplier=0.0)
    out, norm = ldp.privatize(g, t)
    assert norm == pytest.approx(math.sqrt(1000 * 0.25 + 10 * 4))
    delta = np.concatenate([(o - a).ravel() for o, a in zip(out, g)])
    assert np.linalg.norm(delta) == pytest.approx(2.0, rel=1e-6)
    # The direction is kept: the clipped change is the change scaled.
    scale = 2.0 / norm
    assert np.allclose(out[0], 0.5 * scale, rtol=1e-6) and np.allclose(out[1], 1 + 2 * scale)
    assert all(o.dtype == np.float32 for o in out)
    small = [a + np.float32(1e-3) for a in g]  # inside the ball: sent as it is
    out, _ = ldp.privatize(g, small)
    assert all(np.array_equal(o, s) for o, s in zip(out, small))


def test_noise_standard_deviation_is_sigma_times_clip():
    n = 200_000
    ldp = shoal_fl.LocalDP(clip=0.5, noise_multiplier=1.3, rng=np.random.default_rng(20261129))
    g = [np.zeros(n, np.float32)]
    out, _ = ldp.privatize(g, g)  # no change: what is sent is the noise alone
    x = out[0].astype(np.float64)
    sigma = 1.3 * 0.5
    z_var = (x.var(ddof=1) / sigma ** 2 - 1) / math.sqrt(2 / (n - 1))
    z_mean = x.mean() / (sigma / math.sqrt(n))
    assert abs(z_var) < 6 and abs(z_mean) < 6, (x.std(), sigma)


def test_default_generator_is_os_seeded():
    g = [np.zeros(64, np.float32)]
    a = shoal_fl.LocalDP(clip=1.0, noise_multiplier=1.0).privatize(g, g)[0][0]
    b = shoal_fl.LocalDP(clip=1.0, noise_multiplier=1.0).privatize(g, g)[0][0]
    assert not np.array_equal(a, b)


def test_epsilon_matches_opacus():
    opacus = pytest.importorskip("opacus.accountants")
    ldp = shoal_fl.LocalDP(clip=1.0, noise_multiplier=1.5)
    acc = opacus.RDPAccountant()
    for _ in range(10):
        acc.step(noise_multiplier=1.5, sample_rate=1.0)
    assert ldp.epsilon(10, 1e-5) == pytest.approx(acc.get_epsilon(1e-5), abs=1e-9)
    assert shoal_fl.LocalDP(clip=1.0, noise_multiplier=0.0).epsilon(1, 1e-5) == math.inf


@pytest.mark.parametrize("kwargs,message", [
    ({"clip": 0.0, "noise_multiplier": 1.0}, "LocalDP.clip must be a finite number > 0, got 0.0"),
    ({"clip": 1.0, "noise_multiplier": -1.0},
     "LocalDP.noise_multiplier must be a finite number >= 0, got -1.0"),
])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError) as e:
        shoal_fl.LocalDP(**kwargs)
    assert str(e.value) == message


def test_run_client_sends_the_privatised_update(fake_server):
    """Recorder's fit adds 1 to the first tensor (6 coordinates: change norm sqrt(6)); with
    LocalDP(clip 1, σ 0) each update sent is the global model plus that change scaled to norm 1."""
    from test_runner import FakeJob, Recorder, model_v
    job = FakeJob()
    s = shoal_fl.run_client(fake_server(job).url, "j", Recorder(), token="x",
                            local_dp=shoal_fl.LocalDP(clip=1.0, noise_multiplier=0.0))
    assert s.updates_accepted == 2 and len(job.updates) == 3
    for (h, tensors), v in zip(job.updates, [0, 1, 2]):
        w = np.frombuffer(tensors[0]["bytes"], dtype="<f4")
        assert np.allclose(w, v + 1 / math.sqrt(6), atol=1e-6), w
        b = np.frombuffer(tensors[1]["bytes"], dtype="<f4")
        assert np.array_equal(b, model_v(v)[1])
