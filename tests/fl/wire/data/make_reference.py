#!/usr/bin/python3
"""Writes reference.safetensors, the file model_test.cc reads: the safetensors layout written
by hand (u64 little-endian header size, JSON header, data) with numpy, independently of Shoal's
writer. Header keys are deliberately not in data order and the JSON uses Python's spacing.

Run: /usr/bin/python3 make_reference.py  (writes next to this script)
"""
import json
import os
import struct

import numpy as np

f32 = np.arange(6, dtype=np.float32).reshape(2, 3) * np.float32(0.5) - np.float32(1.0)
# bfloat16 is the top half of a float32; these values are exact in bf16.
bf = np.array([1.0, -2.5, 3.140625, 65280.0], dtype=np.float32)
bf16 = (bf.view(np.uint32) >> 16).astype('<u2')
f16 = np.array([[0.5, -0.25], [1024.0, 6.103515625e-05]], dtype='<f2')

blobs = [("c.f16", "F16", list(f16.shape), f16.tobytes()),
         ("a.weight", "F32", list(f32.shape), f32.astype('<f4').tobytes()),
         ("b.bf16", "BF16", [4], bf16.tobytes())]
header = {}
offset = 0
for name, dtype, shape, data in blobs:
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
    offset += len(data)
# Put the tensors in the header in another order than the data, metadata last.
ordered = {k: header[k] for k in ["b.bf16", "a.weight", "c.f16"]}
ordered["__metadata__"] = {"shoal.job": "ref", "shoal.version": "7"}
text = json.dumps(ordered).encode()
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference.safetensors")
with open(out, "wb") as f:
    f.write(struct.pack('<Q', len(text)))
    f.write(text)
    for _, _, _, data in blobs:
        f.write(data)
