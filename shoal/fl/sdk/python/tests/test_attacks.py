"""shoal_fl.attacks: the same rewrites and error messages as shoal-client's (attack_test.cc)."""

import threading

import numpy as np
import pytest

from shoal_fl import Collusion, flip_labels, lie_z, little_is_enough, parse_attack

G = [np.array([1.0, -2.0], np.float32), np.array([[0.5, 0.0]], np.float32)]
X = [np.array([1.5, -2.25], np.float32), np.array([[0.5, 4.0]], np.float32)]


def flat(ts):
    return np.concatenate([t.ravel() for t in ts]).tolist()


def test_sign_flip_scale_and_none():
    assert flat(parse_attack("none").apply(G, X)) == [1.5, -2.25, 0.5, 4.0]
    assert flat(parse_attack("sign-flip").apply(G, X)) == [0.5, -1.75, 0.5, -4.0]
    assert flat(parse_attack("scale:-10").apply(G, X)) == [-4.0, 0.5, 0.5, -40.0]
    assert flat(parse_attack("scale:3").apply(G, X)) == [2.5, -2.75, 0.5, 12.0]
    out = parse_attack("scale:3").apply(G, X)
    assert out[1].shape == (1, 2) and out[1].dtype == np.float32
    assert flat(X) == [1.5, -2.25, 0.5, 4.0]  # inputs untouched


def test_noise_replaces_the_delta_reproducibly():
    g = [np.full(20000, 3.0, np.float32)]
    a = parse_attack("noise:0.5")
    one = a.apply(g, [np.full(20000, 100.0, np.float32)], seed=11)[0]
    two = a.apply(g, [np.full(20000, -5.0, np.float32)], seed=11)[0]
    assert np.array_equal(one, two)
    assert abs(float(np.mean(one - 3.0))) < 0.02
    assert abs(float(np.std(one - 3.0)) - 0.5) < 0.02
    assert str(a) == "noise:0.5" and str(parse_attack("scale:-10")) == "scale:-10"


@pytest.mark.parametrize("spec,message", [
    ("flip", 'attack "flip": unknown attack '
             '(none, sign-flip, label-flip, scale:<k>, noise:<sigma>, lie[:<z>])'),
    ("lie:", 'attack "lie:": lie needs a finite number, e.g. lie:1.5'),
    ("lie:0", 'attack "lie:0": z must be > 0'),
    ("lie:-1", 'attack "lie:-1": z must be > 0'),
    ("label-flip:1", 'attack "label-flip:1": label-flip takes no argument'),
    ("scale", 'attack "scale": scale needs a finite number, e.g. scale:-10'),
    ("scale:x", 'attack "scale:x": scale needs a finite number, e.g. scale:-10'),
    ("scale:1", 'attack "scale:1": scale:1 changes nothing'),
    ("noise:0", 'attack "noise:0": sigma must be > 0'),
    ("noise:inf", 'attack "noise:inf": noise needs a finite number, e.g. noise:0.5'),
    ("sign-flip:2", 'attack "sign-flip:2": sign-flip takes no argument'),
])
def test_bad_specs_are_refused_naming_them(spec, message):
    with pytest.raises(ValueError) as e:
        parse_attack(spec)
    assert str(e.value) == message


def test_label_flip_flips_the_data_not_the_update():
    a = parse_attack("label-flip")
    assert str(a) == "label-flip"
    assert flat(a.apply(G, X)) == [1.5, -2.25, 0.5, 4.0]
    assert flip_labels(np.array([0, 3, 9, 5])).tolist() == [9, 6, 0, 4]


def test_mismatched_tensors_are_refused():
    with pytest.raises(ValueError, match="1 global tensors, 2 trained ones"):
        parse_attack("sign-flip").apply(G[:1], X)


# z_max = Phi^-1((n - s) / n), s = floor(n/2 + 1) - f, worked by hand (attack_test.cc has the
# same): n 10, f 2: s 4, Phi^-1(0.6) = 0.25335 (table: Phi(0.25) 0.5987, Phi(0.26) 0.6026);
# n 8, f 2: s 3, Phi^-1(0.625) = 0.31864; n 50, f 12: s 14, Phi^-1(0.72) = 0.58284;
# n 4, f 1: s 2, Phi^-1(0.5) = 0.
def test_lie_z_is_the_papers_z_max():
    assert lie_z(10, 2) == pytest.approx(0.2533471031357998, abs=1e-12)
    assert lie_z(8, 2) == pytest.approx(0.3186393639643751, abs=1e-12)
    assert lie_z(50, 12) == pytest.approx(0.5828415072712162, abs=1e-12)
    assert lie_z(51, 12) == pytest.approx(0.5992298680993445, abs=1e-12)
    assert lie_z(4, 1) == pytest.approx(0.0, abs=1e-15)
    with pytest.raises(ValueError) as e:
        lie_z(10, 6)
    assert str(e.value) == ("lie: 6 attackers of 10 clients need no supporters "
                            "(s = floor(n/2 + 1) - f = 0): z_max is unbounded, give one as "
                            "lie:<z>")
    with pytest.raises(ValueError, match=r"needs 1 <= attackers < clients \(got 0 of 10\)"):
        lie_z(10, 0)


# mean - z * sample std, by hand: (1, 2, 3) -> 2 - 0.5 * 1 = 1.5; (-1, 2, 5) -> 2 - 0.5 * 3 =
# 0.5; (4, 4, 4) -> 4; (10, 10, 16) -> 12 - 0.5 sqrt(12).
M1 = [np.array([1, -1], np.float32), np.array([[4, 10]], np.float32)]
M2 = [np.array([2, 2], np.float32), np.array([[4, 10]], np.float32)]
M3 = [np.array([3, 5], np.float32), np.array([[4, 16]], np.float32)]
WANT = [1.5, 0.5, 4.0, np.float32(12 - 0.5 * np.sqrt(12.0))]


def test_little_is_enough_sends_mean_minus_z_std():
    out = little_is_enough([M1, M2, M3], 0.5)
    assert out[1].shape == (1, 2) and out[1].dtype == np.float32
    assert flat(out) == pytest.approx(WANT, rel=1e-7)
    two = little_is_enough([[np.array([1.0])], [np.array([3.0])]], 1.0)
    assert float(two[0][0]) == pytest.approx(2 - np.sqrt(2.0), rel=1e-7)
    lie = parse_attack("lie").with_z(10, 2)
    assert str(parse_attack("lie")) == "lie" and str(lie) == "lie:0.253347"
    assert parse_attack("lie:1.5").with_z(10, 2).value == 1.5
    # apply: the peers' pooled model, whatever this attacker trained; alone, its own model.
    assert flat(parse_attack("lie:0.5").apply(G, M1, peers=[M1, M2, M3])) == \
        pytest.approx(WANT, rel=1e-7)
    assert flat(lie.apply(G, X, peers=[X])) == [1.5, -2.25, 0.5, 4.0]
    with pytest.raises(ValueError, match="no z yet"):
        parse_attack("lie").apply(G, X, peers=[X, X])


def test_collusion_pools_the_rounds_models_through_a_directory(tmp_path):
    got = {}

    def attacker(k, model):
        got[k] = Collusion(str(tmp_path), attackers=3, index=k).pool(7, model)

    threads = [threading.Thread(target=attacker, args=(k, m)) for k, m in
               enumerate([M1, M2, M3])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(3):  # every attacker has all three models, in attacker order
        assert [flat(m) for m in got[k]] == [flat(M1), flat(M2), flat(M3)]
    pooled = [little_is_enough(got[k], 0.5) for k in range(3)]
    assert all(np.array_equal(a, b) for p in pooled[1:] for a, b in zip(pooled[0], p))


def test_collusion_ends_at_a_newer_version_or_the_wait(tmp_path):
    d = str(tmp_path)
    # A deposit for version 8 is there: version 7's attacker does not wait for its colluders.
    Collusion(d, attackers=2, index=1, wait=0.0).pool(8, M2)
    alone = Collusion(d, attackers=2, index=0, wait=3600).pool(7, M1)
    assert [flat(m) for m in alone] == [flat(M1)]
    # Nobody else comes: after the wait, its own model only.
    assert len(Collusion(str(tmp_path / "x"), attackers=2, index=0, wait=0.01).pool(1, M1)) == 1
    with pytest.raises(ValueError, match=r"at least 2 attackers \(got 1\)"):
        Collusion(d, attackers=1, index=0)
