"""Element types of tensors on Shoal's wire (float32, bfloat16, float16, and the block-quantized
int8 and int4) and the conversions.

The rounding is the C++ side's (shoal/fl/wire/dtype.cc): round to nearest, ties to even; NaN stays
NaN (bfloat16 keeps the payload's top bits and sets the quiet bit, float16 becomes 0x7e00 with
the sign); values that round past the largest finite value become infinity.
"""

from __future__ import annotations

import enum
from typing import Sequence, Union

import numpy as np


class DType(enum.IntEnum):
    """shoal.v1.DType: the enum values are the protobuf ones."""

    F32 = 0
    BF16 = 1
    F16 = 2
    # Secure aggregation's masked inputs (spec.privacy.secureAggregation): integers in Z_{2^32}.
    U32 = 4
    # Block-quantized (a job's spec.aggregation.wireFormats int8, int4): blocks of QUANT_BLOCK
    # values, each its float32 scale then its signed 8-bit (Q8) or 4-bit (Q4) integers; the
    # server folds them without expanding them. Layout: docs/reference/update-format.md.
    Q8 = 5
    Q4 = 6

    @property
    def quantized(self) -> bool:
        return self in (DType.Q8, DType.Q4)

    @property
    def itemsize(self) -> int:
        """Bytes per value of the fixed-width types (a quantized type has none: nbytes)."""
        if self.quantized:
            raise ValueError(f"{self.name} has no fixed item size: use nbytes(numel)")
        return 4 if self in (DType.F32, DType.U32) else 2

    def nbytes(self, numel: int) -> int:
        """Bytes of `numel` values of this type on the wire."""
        if not self.quantized:
            return numel * self.itemsize
        full, rest = divmod(numel, QUANT_BLOCK)
        return full * _block_bytes(self, QUANT_BLOCK) + (_block_bytes(self, rest) if rest else 0)

    @classmethod
    def parse(cls, value: "DType | str") -> "DType":
        """Accepts a DType or a name: "f32", "float32", "bf16", "bfloat16", "f16", "float16"."""
        if isinstance(value, DType):
            return value
        names = {
            "f32": cls.F32, "float32": cls.F32,
            "bf16": cls.BF16, "bfloat16": cls.BF16,
            "f16": cls.F16, "float16": cls.F16, "half": cls.F16,
            "int8": cls.Q8, "q8": cls.Q8, "int4": cls.Q4, "q4": cls.Q4,
        }
        key = str(value).lower()
        if key not in names:
            raise ValueError(f"unknown wire dtype {value!r}: use f32, bf16, f16, int8 or int4")
        return names[key]


QUANT_BLOCK = 64
# The largest valid block scale, FLT_MAX / 128 (exact): every value of a block stays finite.
MAX_QUANT_SCALE = np.float32(np.finfo(np.float32).max / 128)


def _block_bytes(dtype: DType, m: int) -> int:
    return 4 + (m if dtype is DType.Q8 else (m + 1) // 2)


def quantize(values: np.ndarray, dtype: DType) -> np.ndarray:
    """float values -> the bytes (uint8) of `dtype` (Q8 or Q4), blocks of QUANT_BLOCK.

    Symmetric, as the C++ side (shoal/fl/kernels/fold_kernels.h, QuantLoops::FromF32):
    scale = max|x| / qmax in float32 (qmax 127 or 7; clamped to MAX_QUANT_SCALE; +0 for a block
    of zeros), q = round-half-even(x / scale) clipped to [-qmax, qmax].
    """
    a = np.ascontiguousarray(values, dtype="<f4").reshape(-1)
    n = a.size
    if n == 0:
        return np.zeros(0, dtype=np.uint8)
    qmax = np.float32(127 if dtype is DType.Q8 else 7)
    nb = -(-n // QUANT_BLOCK)
    flat = np.zeros(nb * QUANT_BLOCK, dtype=np.float32)
    flat[:n] = a
    blocks = flat.reshape(nb, QUANT_BLOCK)
    scale = np.minimum(np.abs(blocks).max(axis=1) / qmax, MAX_QUANT_SCALE).astype("<f4")
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(scale[:, None] > 0, np.rint(blocks / scale[:, None]), np.float32(0))
    q = np.clip(q, -qmax, qmax).astype(np.int8)
    if dtype is DType.Q8:
        payload = q.view(np.uint8)
    else:
        nib = q.view(np.uint8) & np.uint8(15)
        payload = nib[:, 0::2] | (nib[:, 1::2] << np.uint8(4))
    rows = np.concatenate([scale.view(np.uint8).reshape(nb, 4), payload], axis=1).reshape(-1)
    out: np.ndarray = rows[:dtype.nbytes(n)]
    return out


def dequantize(data: "bytes | bytearray | memoryview", dtype: DType, numel: int) -> np.ndarray:
    """The float32 values of `numel` Q8/Q4 values: float(q) * scale per block (the server's)."""
    raw = np.frombuffer(data, dtype=np.uint8)
    if raw.size != dtype.nbytes(numel):
        raise ValueError(f"{raw.size} bytes, {numel} {dtype.name} values need {dtype.nbytes(numel)}")
    nb = -(-numel // QUANT_BLOCK)
    row = _block_bytes(dtype, QUANT_BLOCK)
    padded = np.zeros(nb * row, dtype=np.uint8)
    padded[:raw.size] = raw
    rows = padded.reshape(nb, row)
    scale = rows[:, :4].copy().view("<f4").reshape(nb, 1)
    if dtype is DType.Q8:
        q = rows[:, 4:].view(np.int8).astype(np.float32)
    else:
        b = rows[:, 4:]
        nib = np.stack([b & np.uint8(15), b >> np.uint8(4)], axis=2).reshape(nb, QUANT_BLOCK)
        q = ((nib.astype(np.int16) ^ 8) - 8).astype(np.float32)
    out: np.ndarray = (q * scale).astype(np.float32).reshape(-1)[:numel]
    return out


def float32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values -> bfloat16 bit patterns (uint16), round to nearest even."""
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    # u + 0x7fff + lsb never wraps for a non-NaN: the largest such u is 0xff800000 (-inf).
    rounded = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if nan.any():
        rounded = np.where(nan, (u >> np.uint32(16)) | np.uint32(0x40), rounded)
    return rounded.astype(np.uint16)


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def float32_to_f16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values -> IEEE half bit patterns (uint16), round to nearest even.

    numpy's cast rounds the same way (subnormals included, overflow to infinity); only NaN is
    canonicalised to the C++ side's 0x7e00.
    """
    v = np.ascontiguousarray(values, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        bits = v.astype(np.float16).view(np.uint16)
    nan = np.isnan(v)
    if nan.any():
        sign = (v.view(np.uint32) >> np.uint32(16)).astype(np.uint16) & np.uint16(0x8000)
        bits = np.where(nan, sign | np.uint16(0x7E00), bits).astype(np.uint16)
    return bits


def f16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint16).view(np.float16).astype(np.float32)


def encode(values: np.ndarray, dtype: DType) -> memoryview:
    """The little-endian bytes of `values` (any float array) as `dtype`, flattened row-major.

    For float32 input already contiguous and little-endian this is a view, not a copy.
    """
    if dtype is DType.U32:
        return np.ascontiguousarray(values, dtype="<u4").reshape(-1).data.cast("B")
    if dtype.quantized:
        return quantize(values, dtype).data.cast("B")
    a = np.ascontiguousarray(values, dtype="<f4").reshape(-1)
    if dtype is DType.F32:
        return a.data.cast("B")
    bits = float32_to_bf16_bits(a) if dtype is DType.BF16 else float32_to_f16_bits(a)
    return bits.astype("<u2", copy=False).data.cast("B")


def decode(data: "bytes | bytearray | memoryview", dtype: DType,
           shape: Union[int, Sequence[int]]) -> np.ndarray:
    """float32 array of `shape` from the little-endian bytes of `dtype`. float32 data in a
    writable buffer (a bytearray) is viewed, not copied."""
    if dtype is DType.F32:
        return np.frombuffer(data, dtype="<f4").reshape(shape)
    if dtype.quantized:
        return dequantize(data, dtype, int(np.prod(shape))).reshape(shape)
    bits = np.frombuffer(data, dtype="<u2")
    out = bf16_bits_to_float32(bits) if dtype is DType.BF16 else f16_bits_to_float32(bits)
    return out.reshape(shape)
