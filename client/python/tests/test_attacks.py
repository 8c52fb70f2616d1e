"""shoal_fl.attacks: the same rewrites and error messages as shoal-client's (attack_test.cc)."""

import numpy as np
import pytest

from shoal_fl import flip_labels, parse_attack

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
             '(none, sign-flip, label-flip, scale:<k>, noise:<sigma>)'),
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
