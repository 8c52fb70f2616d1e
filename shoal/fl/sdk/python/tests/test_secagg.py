"""The SDK's SecAgg+ primitives against fixed answers that the server's C++ test
(tests/fl/secagg/crypto_test.cc) asserts too: the masks a Python client adds are the ones the
server removes, bit for bit. Shamir shares made here reconstruct with any threshold of them."""

import hashlib
import itertools

import numpy as np
import pytest

pytest.importorskip("cryptography")

from shoal_fl import secagg  # noqa: E402
from shoal_fl.dtypes import DType  # noqa: E402
from shoal_fl.update_format import EncodedUpdate, UpdateMeta  # noqa: E402

SEED = bytes(range(16))


def digest(a: np.ndarray) -> str:
    return hashlib.sha256(a.astype("<u4").tobytes()).hexdigest()


def test_mask_known_answer() -> None:
    m = secagg.mask(SEED, 1000)
    assert m.dtype == np.uint32
    assert list(m[:2]) == [926654918, 2187038599]
    assert digest(m) == "f9e8b5d69dc58495cb45edf27adcc30e7af0bbb9abdeb08f03afe7433b21d0ff"


def test_pairwise_seed_and_masked_input_known_answers() -> None:
    a, b = bytes([1] * 32), bytes([2] * 32)
    assert secagg.public_key(a).hex() == (
        "a4e09292b651c278b9772c569f5fa9bb13d906b46ab68c9df9dc2b4409f8a209")
    ab = secagg.pairwise_seed(a, secagg.public_key(b))
    assert ab == secagg.pairwise_seed(b, secagg.public_key(a))
    assert ab.hex() == "3554d0fc306936c9805e4864d5232c76"
    q = (np.arange(1000) % 65536).astype(np.uint32)
    y = secagg.masked_input(q, SEED, [(ab, 1), (bytes([7] * 16), -1)])
    assert digest(y) == "afebebb11d8d4050c9a6410f73c4f2e6453295c2eda288d4b90d6662dfed7ab3"


def test_quantize_known_answer() -> None:
    x = np.array([-2, -1, -0.5, 0, 0.3, 1, 5], dtype=np.float32)
    assert list(secagg.quantize(x, 1.0, 16)) == [0, 0, 16384, 32768, 42598, 65535, 65535]


def test_shamir_any_threshold_reconstructs() -> None:
    secret = bytes((200 + i) % 256 for i in range(32))
    xs = [1, 2, 3, 5, 8]
    shares = secagg.split(secret, xs, 3)
    for pick in itertools.combinations(range(5), 3):
        assert secagg.combine([xs[i] for i in pick], [shares[i] for i in pick], 32) == secret
    with pytest.raises(ValueError, match="do not agree"):  # t - 1 shares: a random point
        secagg.combine([xs[0], xs[1]], [shares[0], shares[1]], 32)


def test_u32_update_body_carries_the_integers() -> None:
    meta = UpdateMeta("j", "c1", "t", 0, 1)
    y = np.array([0, 1, 0xFFFFFFFF], dtype=np.uint32)
    body = EncodedUpdate(meta, ["w"], [y], DType.U32).tobytes()
    assert body.endswith(y.astype("<u4").tobytes())
    with pytest.raises(ValueError, match="U32 update takes uint32"):
        EncodedUpdate(meta, ["w"], [y.astype(np.float32)], DType.U32)


def _chi_square_bytes(data: bytes) -> float:
    counts = np.bincount(np.frombuffer(data, dtype=np.uint8), minlength=256).astype(np.float64)
    expected = len(data) / 256.0
    return float(((counts - expected) ** 2 / expected).sum())


def test_a_masked_input_is_indistinguishable_from_uniform_bytes() -> None:
    # What the server's pool holds of a client: its masked input's bytes (the update body's
    # tensor area is these bytes). Fixed keys: the statistic is the same every run, no flake.
    # 255 degrees of freedom: P(chi2 > 330.5) = 0.001 for uniform bytes.
    n = 1 << 18
    x = np.linspace(-0.5, 0.5, n, dtype=np.float32)  # a very non-uniform input
    q = secagg.quantize(x, 1.0, 16)
    a, b = bytes([3] * 32), bytes([4] * 32)
    pair = secagg.pairwise_seed(a, secagg.public_key(b))
    y = secagg.masked_input(q, SEED, [(pair, 1)])
    assert _chi_square_bytes(q.astype("<u4").tobytes()) > 100000  # the plain input is not
    assert _chi_square_bytes(y.astype("<u4").tobytes()) < 330.5
