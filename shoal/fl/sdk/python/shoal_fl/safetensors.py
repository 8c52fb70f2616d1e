"""Reading the safetensors files shoald serves as global models (shoal/fl/wire/
safetensors.h): u64 little-endian N, N bytes of JSON header {name: {dtype, shape,
data_offsets}, "__metadata__": {...}}, then the data."""

from __future__ import annotations

import json
import struct
from typing import Any, Dict, List, Tuple

import numpy as np

from .dtypes import decode, DType

_DTYPES = {"F32": DType.F32, "BF16": DType.BF16, "F16": DType.F16}


def load(data: "bytes | bytearray | memoryview"
         ) -> Tuple[List[str], List[np.ndarray], Dict[str, Any]]:
    """(names, arrays, metadata): the tensors in file order (the model's tensor order) as float32
    numpy arrays. F32 tensors in a bytearray are views into it (writable), not copies."""
    view = memoryview(data)
    if len(view) < 8:
        raise ValueError(f"safetensors: {len(view)} bytes, shorter than the 8-byte prefix")
    (n,) = struct.unpack_from("<Q", view, 0)
    if n > len(view) - 8:
        raise ValueError(f"safetensors: header length {n} runs past the end ({len(view)} bytes)")
    try:
        header = json.loads(bytes(view[8:8 + n]))
    except ValueError as err:
        raise ValueError(f"safetensors: header is not JSON: {err}") from None
    if not isinstance(header, dict):
        raise ValueError("safetensors: header is not a JSON object")
    metadata: Dict[str, Any] = header.pop("__metadata__", {}) or {}
    base = 8 + n
    entries = []
    for name, e in header.items():
        dtype = _DTYPES.get(e.get("dtype"))
        if dtype is None:
            raise ValueError(f"safetensors: tensor '{name}': dtype {e.get('dtype')!r} "
                             "not supported")
        begin, end = (int(x) for x in e["data_offsets"])
        shape = tuple(int(d) for d in e["shape"])
        numel = int(np.prod(shape)) if shape else 1
        if end - begin != numel * dtype.itemsize or base + end > len(view) or begin < 0:
            raise ValueError(f"safetensors: tensor '{name}': data_offsets [{begin},{end}) do not "
                             f"hold shape {list(shape)} in {e['dtype']}")
        entries.append((begin, name, dtype, shape, end))
    entries.sort(key=lambda t: t[0])
    names = [t[1] for t in entries]
    arrays = [decode(view[base + begin:base + end], dtype, shape)
              for begin, _, dtype, shape, end in entries]
    return names, arrays, metadata
