"""The SHU1 body of a model update, streamed: the Python side of
shoal/fl/wire/update_format.h.

Layout (integers little-endian):
  [0, 4)      magic "SHU1"
  [4, 8)      u32 H, the length of the header
  [8, 8+H)    shoal.v1.UpdateHeader (proto/shoal/v1/fl.proto), protobuf bytes
  [8+H, A)    zero padding; A = 8+H rounded up to a multiple of 64
  [A, end)    tensor i at A + offset_i (a multiple of 64), dtype.nbytes(product(shape)) bytes
              (itemsize each, or int8/int4's blocks: dtypes.py),
              row-major; gaps are zero; the body ends at the end of the last tensor.

The header is protobuf, written here by hand in the field order protobuf's C++ serializer
uses (proto3: zero and empty fields are left out), so the bytes equal the C++ EncodeUpdate's.
The body is produced as an iterator of chunks: the header first, then each tensor converted on
its own, so an upload never holds a second full copy of the model.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from typing import Iterator, List, Sequence, Tuple

import numpy as np

from .dtypes import DType, encode

MAGIC = b"SHU1"
ALIGNMENT = 64
PREFIX_BYTES = 8
# Elements converted at a time for bf16/f16, so a large tensor's narrow copy stays small.
_CONVERT_CHUNK = 1 << 20  # a multiple of QUANT_BLOCK: a quantized tensor's chunks are whole blocks


class UpdateKind(enum.IntEnum):
    """shoal.v1.UpdateKind."""

    WEIGHTS = 0  # the locally trained model w_k
    DELTA = 1  # w_k - w_{base_version}


def align_up(n: int, a: int = ALIGNMENT) -> int:
    return (n + a - 1) // a * a


def tensor_area_offset(header_len: int) -> int:
    return align_up(PREFIX_BYTES + header_len)


# ---- protobuf, the few wire types UpdateHeader needs ------------------------------------------

def _varint(n: int) -> bytes:
    if n < 0:
        raise ValueError("negative varint")
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


def _bytes_field(field: int, value: bytes) -> bytes:
    if not value:
        return b""
    return _key(field, 2) + _varint(len(value)) + value


def _uint_field(field: int, value: int) -> bytes:
    if value == 0:
        return b""
    return _key(field, 0) + _varint(value)


def _double_field(field: int, value: float) -> bytes:
    raw = struct.pack("<d", value)
    if raw == b"\0" * 8:  # protobuf compares the bits: -0.0 is written
        return b""
    return _key(field, 1) + raw


def _as_bytes(s: "str | bytes") -> bytes:
    return s.encode() if isinstance(s, str) else bytes(s)


@dataclasses.dataclass
class UpdateMeta:
    """UpdateHeader's fields other than the tensor table."""

    job: str
    client_id: str
    token: str
    base_version: int
    num_samples: int
    local_steps: int = 0
    train_seconds: float = 0.0
    kind: UpdateKind = UpdateKind.WEIGHTS


@dataclasses.dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: DType
    shape: Tuple[int, ...]
    offset: int  # relative to the tensor area
    length: int

    def encode(self) -> bytes:
        shape = b"".join(_varint(d) for d in self.shape)
        return (_bytes_field(1, _as_bytes(self.name))
                + _uint_field(2, int(self.dtype))
                + _bytes_field(3, shape)  # packed repeated uint64
                + _uint_field(4, self.offset)
                + _uint_field(5, self.length))


def tensor_table(names: Sequence[str], shapes: Sequence[Sequence[int]],
                 dtype: DType) -> List[TensorEntry]:
    """The entries for tensors laid out in the given order, each at the next 64-byte offset."""
    entries: List[TensorEntry] = []
    area = 0
    for name, dims in zip(names, shapes):
        shape = tuple(int(d) for d in dims)
        numel = int(np.prod(shape, dtype=np.uint64)) if shape else 1
        area = align_up(area)
        entries.append(TensorEntry(name, dtype, shape, area, dtype.nbytes(numel)))
        area += dtype.nbytes(numel)
    return entries


def encode_header(meta: UpdateMeta, entries: Sequence[TensorEntry]) -> bytes:
    """shoal.v1.UpdateHeader as protobuf bytes."""
    parts = [
        _bytes_field(1, _as_bytes(meta.job)),
        _bytes_field(2, _as_bytes(meta.client_id)),
        _bytes_field(3, _as_bytes(meta.token)),
        _uint_field(4, meta.base_version),
        _uint_field(5, meta.num_samples),
        _uint_field(6, meta.local_steps),
        _double_field(7, float(meta.train_seconds)),
    ]
    for e in entries:
        body = e.encode()
        parts.append(_key(8, 2) + _varint(len(body)) + body)  # written even when empty
    parts.append(_uint_field(9, int(meta.kind)))
    return b"".join(parts)


class EncodedUpdate:
    """An update ready to send: `len(u)` is the body's size (the Content-Length), iterating it
    yields the body in chunks (it may be iterated again, e.g. to retry the upload)."""

    def __init__(self, meta: UpdateMeta, names: Sequence[str], arrays: Sequence[np.ndarray],
                 dtype: "DType | str" = DType.F32) -> None:
        wire = DType.parse(dtype)
        if len(names) != len(arrays):
            raise ValueError(f"{len(names)} tensor names for {len(arrays)} arrays")
        if meta.num_samples <= 0:
            raise ValueError("num_samples must be > 0 (it is the update's aggregation weight)")
        if not np.isfinite(meta.train_seconds) or meta.train_seconds < 0:
            raise ValueError("train_seconds must be finite and >= 0")
        self._arrays: List[np.ndarray] = []
        for name, given in zip(names, arrays):
            a = np.asarray(given)
            if wire is DType.U32:
                if a.dtype != np.uint32:
                    raise ValueError(f"tensor '{name}': a U32 update takes uint32 arrays (masked "
                                     f"inputs), not {a.dtype}")
                self._arrays.append(a)
                continue
            if a.dtype.kind != "f":
                raise ValueError(f"tensor '{name}': dtype {a.dtype} is not floating point")
            if not np.isfinite(a).all():
                bad = int(np.count_nonzero(~np.isfinite(a)))
                raise ValueError(f"tensor '{name}': {bad} non-finite values (the server refuses "
                                 "NaN and Inf)")
            self._arrays.append(a)
        self.entries = tensor_table(names, [a.shape for a in self._arrays], wire)
        self.header = encode_header(meta, self.entries)
        if len(self.header) > 0xFFFFFFFF:
            raise ValueError("update header too large")
        self.area_offset = tensor_area_offset(len(self.header))
        last = self.entries[-1] if self.entries else None
        self._size = self.area_offset + (last.offset + last.length if last else 0)
        self.dtype = wire

    def __len__(self) -> int:
        return self._size

    def prefix(self) -> bytes:
        """Magic, header length, header and the padding up to the tensor area."""
        head = MAGIC + struct.pack("<I", len(self.header)) + self.header
        return head + b"\0" * (self.area_offset - len(head))

    def __iter__(self) -> Iterator[memoryview]:
        yield memoryview(self.prefix())
        pos = 0
        for e, a in zip(self.entries, self._arrays):
            if e.offset > pos:
                yield memoryview(b"\0" * (e.offset - pos))
            flat = a.reshape(-1)
            if self.dtype in (DType.F32, DType.U32) or flat.size <= _CONVERT_CHUNK:
                yield encode(flat, self.dtype)
            else:
                for i in range(0, flat.size, _CONVERT_CHUNK):
                    yield encode(flat[i:i + _CONVERT_CHUNK], self.dtype)
            pos = e.offset + e.length

    def tobytes(self) -> bytes:
        """The whole body in one buffer (tests, small models)."""
        return b"".join(bytes(c) for c in self)
