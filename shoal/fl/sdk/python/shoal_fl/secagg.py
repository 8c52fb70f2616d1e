"""The client side of SecAgg+ (Bell et al., CCS 2020) for a job with
spec.privacy.secureAggregation: the same primitives as the server's C++
(shoal/fl/secagg/): X25519 agreement, HKDF-SHA256, AES-128-CTR as the PRG over Z_{2^32},
AES-128-GCM for the key shares, Shamir sharing over GF(2^61 - 1) in 7-byte chunks, and the
fixed-point quantization, so a mask computed here is bit-identical to the server's.

The protocol, one round (SecAggClient.run_round drives it over a JobClient):
 1. advertise: two fresh X25519 key pairs (c: encrypts the shares, s: the pairwise masks) and
    SHA-256 of a fresh self-mask seed b;
 2. share: Shamir shares of s's private key and of b, one per neighbour in the round's graph,
    each sealed with AES-GCM under the key agreed with that neighbour's c key;
 3. masked input: y = q(x) + PRG(b) + sum over neighbours that shared of +-PRG(s_ij), sent as a
    U32 update through the normal update route;
 4. unmask: for each neighbour that shared, the share of its b if it survived, of its s key if
    it dropped.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import secrets
import struct
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

if TYPE_CHECKING:
    from .job_client import JobClient, Membership

MASK_INFO = b"shoal-secagg v1 pairwise mask"
SHARE_INFO = b"shoal-secagg v1 share encryption"
PRIME = (1 << 61) - 1
CHUNK_BYTES = 7
_SHARE_MAGIC = b"SSA1"


def _crypto() -> Any:
    """cryptography's modules, imported on first use (the SDK itself needs only numpy)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import x25519
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    return hashes, x25519, Cipher, algorithms, modes, AESGCM, HKDF


def hkdf(ikm: bytes, info: bytes, length: int) -> bytes:
    hashes, _, _, _, _, _, HKDF = _crypto()
    return bytes(HKDF(algorithm=hashes.SHA256(), length=length, salt=b"\0" * 32,
                      info=info).derive(ikm))


def public_key(secret: bytes) -> bytes:
    _, x25519, *_ = _crypto()
    return bytes(x25519.X25519PrivateKey.from_private_bytes(secret).public_key().public_bytes_raw())


def agree(secret: bytes, peer: bytes) -> bytes:
    _, x25519, *_ = _crypto()
    sk = x25519.X25519PrivateKey.from_private_bytes(secret)
    return bytes(sk.exchange(x25519.X25519PublicKey.from_public_bytes(peer)))


def pairwise_seed(secret: bytes, peer: bytes) -> bytes:
    return hkdf(agree(secret, peer), MASK_INFO, 16)


def mask(seed: bytes, n: int) -> np.ndarray:
    """The PRG: AES-128-CTR(seed, IV 0) over 4n zero bytes, read as little-endian uint32."""
    _, _, Cipher, algorithms, modes, _, _ = _crypto()
    enc = Cipher(algorithms.AES(seed), modes.CTR(b"\0" * 16)).encryptor()
    stream = enc.update(bytes(4 * n)) + enc.finalize()
    return np.frombuffer(stream, dtype="<u4").astype(np.uint32)


def quantize(x: np.ndarray, clip: float, bits: int) -> np.ndarray:
    """floor((clip(x) + clip) * (2^bits - 1) / (2 clip) + 0.5), in float64, as uint32."""
    scale = float((1 << bits) - 1) / (2.0 * clip)
    v = np.clip(np.asarray(x, dtype=np.float32).astype(np.float64), -clip, clip)
    return np.floor((v + clip) * scale + 0.5).astype(np.uint32)


def decode_sum(s: np.ndarray, count: int, clip: float, bits: int) -> np.ndarray:
    scale = float((1 << bits) - 1) / (2.0 * clip)
    return (s.astype(np.float64) * (1.0 / scale) - count * clip).astype(np.float32)


def masked_input(q: np.ndarray, self_seed: bytes,
                 pair_seeds: Sequence[Tuple[bytes, int]]) -> np.ndarray:
    """y = q + PRG(self_seed) + sum of sign * PRG(seed), modulo 2^32."""
    y = np.asarray(q, dtype=np.uint32).copy()
    y += mask(self_seed, y.size)
    for seed, sign in pair_seeds:
        m = mask(seed, y.size)
        if sign > 0:
            y += m
        else:
            y -= m
    return y


def split(secret: bytes, xs: Sequence[int], threshold: int) -> List[List[int]]:
    """Shamir shares of `secret` at the points xs (one list of field elements per point)."""
    chunks = (len(secret) + CHUNK_BYTES - 1) // CHUNK_BYTES
    out: List[List[int]] = [[] for _ in xs]
    for c in range(chunks):
        piece = secret[c * CHUNK_BYTES:(c + 1) * CHUNK_BYTES]
        coeffs = [int.from_bytes(piece, "little")] + [secrets.randbelow(PRIME)
                                                       for _ in range(threshold - 1)]
        for s, x in enumerate(xs):
            y = 0
            for a in reversed(coeffs):
                y = (y * x + a) % PRIME
            out[s].append(y)
    return out


def combine(xs: Sequence[int], ys: Sequence[Sequence[int]], secret_bytes: int) -> bytes:
    """The secret from len(xs) shares (Lagrange at 0); the caller passes exactly threshold.
    ValueError where a chunk comes out past 7 bytes: fewer than threshold shares (almost
    surely) or a wrong one."""
    out = bytearray()
    for c in range(len(ys[0])):
        v = 0
        for i, xi in enumerate(xs):
            num, den = 1, 1
            for j, xj in enumerate(xs):
                if j != i:
                    num = num * (-xj) % PRIME
                    den = den * (xi - xj) % PRIME
            v = (v + ys[i][c] * num * pow(den, PRIME - 2, PRIME)) % PRIME
        if v >> (8 * CHUNK_BYTES):
            raise ValueError("shamir: the shares do not agree (too few, or one is wrong)")
        out += v.to_bytes(CHUNK_BYTES, "little")
    return bytes(out[:secret_bytes])


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def _unb64(s: str) -> bytes:
    return base64.b64decode(s.encode(), validate=True)


def _aad(round_id: int) -> bytes:
    return b"shoal-secagg v1" + struct.pack("<Q", round_id)


@dataclasses.dataclass
class RoundKeys:
    """One client's secrets for one protocol round (fresh every round)."""

    c_sk: bytes
    s_sk: bytes
    b: bytes

    @classmethod
    def fresh(cls) -> "RoundKeys":
        _, x25519, *_ = _crypto()
        c = x25519.X25519PrivateKey.generate().private_bytes_raw()
        s = x25519.X25519PrivateKey.generate().private_bytes_raw()
        return cls(bytes(c), bytes(s), os.urandom(16))

    def advertisement(self) -> Dict[str, str]:
        return {"c_pk": _b64(public_key(self.c_sk)), "s_pk": _b64(public_key(self.s_sk)),
                "b_commit": _b64(hashlib.sha256(self.b).digest())}


def seal_shares(keys: RoundKeys, state: Dict[str, Any], threshold: int) -> Dict[str, str]:
    """The sealed shares for each neighbour of the round (state: GET /secagg at stage share)."""
    _, _, _, _, _, AESGCM, _ = _crypto()
    neighbours = state["neighbours"]
    xs = [int(n["index"]) + 1 for n in neighbours]
    sk_shares = split(keys.s_sk, xs, threshold)
    b_shares = split(keys.b, xs, threshold)
    round_id = int(state["round"])
    out: Dict[str, str] = {}
    for n, sk_y, b_y in zip(neighbours, sk_shares, b_shares):
        key = hkdf(agree(keys.c_sk, _unb64(n["c_pk"])), SHARE_INFO, 16)
        plain = (_SHARE_MAGIC + struct.pack("<IIQ", int(state["index"]), int(n["index"]), round_id)
                 + struct.pack(f"<{len(sk_y)}Q", *sk_y) + struct.pack(f"<{len(b_y)}Q", *b_y))
        nonce = os.urandom(12)
        out[str(n["id"])] = _b64(nonce + AESGCM(key).encrypt(nonce, plain, _aad(round_id)))
    return out


def open_share(keys: RoundKeys, state: Dict[str, Any], sender: str,
               sealed: str) -> Tuple[List[int], List[int]]:
    """(mask-key share, self-mask share) that `sender` sealed for this client; ValueError when it
    does not authenticate or names another pair or round."""
    _, _, _, _, _, AESGCM, _ = _crypto()
    peer = next(n for n in state["neighbours"] if n["id"] == sender)
    key = hkdf(agree(keys.c_sk, _unb64(peer["c_pk"])), SHARE_INFO, 16)
    raw = _unb64(sealed)
    plain = AESGCM(key).decrypt(raw[:12], raw[12:], _aad(int(state["round"])))
    if plain[:4] != _SHARE_MAGIC:
        raise ValueError(f"share from {sender}: bad magic")
    frm, to, rnd = struct.unpack("<IIQ", plain[4:20])
    if (frm, to, rnd) != (int(peer["index"]), int(state["index"]), int(state["round"])):
        raise ValueError(f"share from {sender}: sealed for another pair or round")
    vals = list(struct.unpack(f"<{(len(plain) - 20) // 8}Q", plain[20:]))
    return vals[:5], vals[5:]


def mask_vector(keys: RoundKeys, state: Dict[str, Any], q: np.ndarray) -> np.ndarray:
    """The masked input for the round (state: GET /secagg at stage input)."""
    shared = set(state["shared"])
    me = int(state["index"])
    pairs: List[Tuple[bytes, int]] = []
    for n in state["neighbours"]:
        if n["id"] in shared:
            seed = pairwise_seed(keys.s_sk, _unb64(n["s_pk"]))
            pairs.append((seed, 1 if me < int(n["index"]) else -1))
    return masked_input(q, keys.b, pairs)


def unmask_shares(keys: RoundKeys, state: Dict[str, Any]) -> Dict[str, List[int]]:
    """What the server asks at stage unmask: b's share of each surviving neighbour, the mask
    key's share of each that dropped."""
    out: Dict[str, List[int]] = {}
    survivors = set(state["survivors"])
    for sender, sealed in state["shares"].items():
        sk_y, b_y = open_share(keys, state, sender, sealed)
        out[sender] = b_y if sender in survivors else sk_y
    return out


class SecAggClient:
    """Drives one client through SecAgg+ rounds over a JobClient (its /secagg routes)."""

    def __init__(self, jobs: "JobClient", member: "Membership", *, poll_s: float = 0.02,
                 timeout_s: float = 120.0) -> None:
        self.jobs = jobs
        self.member = member
        self.poll_s = poll_s
        self.timeout_s = timeout_s
        self.keys = RoundKeys.fresh()
        self.round = 0
        self.state: Dict[str, Any] = {}

    def _auth(self) -> Dict[str, Any]:
        return {"client_id": self.member.client_id, "token": self.member.token}

    def wait_stage(self, *stages: str) -> Dict[str, Any]:
        deadline = time.monotonic() + self.timeout_s
        while True:
            st = self.jobs.secagg_state(self.member, self.round)
            if st["stage"] in stages or st["stage"] == "failed":
                self.state = st
                return st
            if time.monotonic() > deadline:
                raise TimeoutError(f"secure aggregation: stage {st['stage']} for too long")
            time.sleep(self.poll_s)

    def advertise(self) -> int:
        self.keys = RoundKeys.fresh()
        deadline = time.monotonic() + self.timeout_s
        while True:
            from .errors import HttpError
            try:
                r = self.jobs.secagg_post("advertise",
                                          {**self._auth(), **self.keys.advertisement()})
                self.round = int(r["round"])
                return self.round
            except HttpError as e:
                if e.status != 409 or "past key advertisement" not in str(e) or \
                        time.monotonic() > deadline:
                    raise
                time.sleep(self.poll_s)

    def share(self, threshold: int) -> None:
        st = self.wait_stage("share", "input", "unmask", "done")
        if st["stage"] != "share":
            raise RuntimeError(f"secure aggregation: round {self.round} is {st['stage']}")
        self.jobs.secagg_post("shares", {**self._auth(), "round": self.round,
                                         "shares": seal_shares(self.keys, st, threshold)})

    def masked(self, q: np.ndarray) -> np.ndarray:
        st = self.wait_stage("input", "unmask", "done")
        if st["stage"] != "input":
            raise RuntimeError(f"secure aggregation: round {self.round} is {st['stage']}")
        return mask_vector(self.keys, st, q)

    def unmask(self) -> None:
        st = self.wait_stage("unmask", "done")
        if st["stage"] != "unmask":
            return
        self.jobs.secagg_post("unmask", {**self._auth(), "round": self.round,
                                         "shares": unmask_shares(self.keys, st)})


def _dumps(body: Dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


__all__ = ["RoundKeys", "SecAggClient", "agree", "combine", "decode_sum", "hkdf", "mask",
           "mask_vector", "masked_input", "open_share", "pairwise_seed", "public_key",
           "quantize", "seal_shares", "split", "unmask_shares", "Optional"]
