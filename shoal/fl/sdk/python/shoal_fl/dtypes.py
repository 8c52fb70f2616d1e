"""Element types of tensors on Shoal's wire (float32, bfloat16, float16) and the conversions.

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

    @property
    def itemsize(self) -> int:
        return 4 if self in (DType.F32, DType.U32) else 2

    @classmethod
    def parse(cls, value: "DType | str") -> "DType":
        """Accepts a DType or a name: "f32", "float32", "bf16", "bfloat16", "f16", "float16"."""
        if isinstance(value, DType):
            return value
        names = {
            "f32": cls.F32, "float32": cls.F32,
            "bf16": cls.BF16, "bfloat16": cls.BF16,
            "f16": cls.F16, "float16": cls.F16, "half": cls.F16,
        }
        key = str(value).lower()
        if key not in names:
            raise ValueError(f"unknown wire dtype {value!r}: use f32, bf16 or f16")
        return names[key]


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
    bits = np.frombuffer(data, dtype="<u2")
    out = bf16_bits_to_float32(bits) if dtype is DType.BF16 else f16_bits_to_float32(bits)
    return out.reshape(shape)
