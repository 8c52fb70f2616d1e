import shutil
import struct
import subprocess
import os

import numpy as np
import pytest

from shoal_fl import DType, EncodedUpdate, UpdateKind, UpdateMeta
from shoal_fl.update_format import encode_header, tensor_table

from conftest import parse_update

PROTO_DIR = os.path.join(os.path.dirname(__file__), *[".."] * 5, "proto")

W = np.arange(6, dtype=np.float32).reshape(2, 3)  # 0..5
B = np.array([1.5, -2.0], dtype=np.float32)
META = UpdateMeta(job="j", client_id="c1", token="t", base_version=3, num_samples=10,
                  local_steps=5, train_seconds=1.5)

# shoal.v1.UpdateHeader for META and tensors w [2,3], b [2] in f32, written out by hand:
# key = field << 3 | wire type; zero/empty fields are left out (proto3), as protobuf's C++
# serializer does.
HEADER_F32 = bytes(
    [0x0A, 1]) + b"j" + bytes(                 # 1 job
    [0x12, 2]) + b"c1" + bytes(                # 2 client_id
    [0x1A, 1]) + b"t" + bytes(                 # 3 token
    [0x20, 3,                                  # 4 base_version 3
     0x28, 10,                                 # 5 num_samples 10
     0x30, 5,                                  # 6 local_steps 5
     0x39]) + struct.pack("<d", 1.5) + bytes(  # 7 train_seconds (fixed64)
    [0x42, 9,                                  # 8 tensors[0], 9 bytes:
     0x0A, 1, ord("w"),                        #   name "w" (dtype F32 = 0 left out)
     0x1A, 2, 2, 3,                            #   shape [2,3], packed
     0x28, 24,                                 #   length 24 (offset 0 left out)
     0x42, 10,                                 # 8 tensors[1], 10 bytes:
     0x0A, 1, ord("b"),                        #   name "b"
     0x1A, 1, 2,                               #   shape [2]
     0x20, 64,                                 #   offset 64: the next multiple of 64 after 24
     0x28, 8])                                 #   length 8 (kind WEIGHTS = 0 left out)


def test_header_bytes_match_hand_computed_protobuf():
    entries = tensor_table(["w", "b"], [(2, 3), (2,)], DType.F32)
    assert [(e.offset, e.length) for e in entries] == [(0, 24), (64, 8)]
    assert encode_header(META, entries) == HEADER_F32
    assert len(HEADER_F32) == 48


def test_body_layout_byte_for_byte():
    u = EncodedUpdate(META, ["w", "b"], [W, B], "f32")
    body = u.tobytes()
    # 8-byte prefix + 48-byte header = 56, padded to the tensor area at 64; w at 64..88,
    # zeros to 128, b at 128..136, and nothing after.
    assert len(u) == len(body) == 136
    expected = (b"SHU1" + struct.pack("<I", 48) + HEADER_F32 + b"\0" * 8
                + struct.pack("<6f", 0, 1, 2, 3, 4, 5) + b"\0" * 40 + struct.pack("<2f", 1.5, -2))
    assert body == expected


def test_bf16_and_f16_bodies():
    for dtype, pack in ((DType.BF16, lambda v: struct.pack("<f", v)[2:]),
                        (DType.F16, lambda v: struct.pack("<e", v))):
        body = EncodedUpdate(META, ["w", "b"], [W, B], dtype).tobytes()
        h, tensors = parse_update(body)
        assert [t["dtype"] for t in tensors] == [int(dtype)] * 2
        assert [t["shape"] for t in tensors] == [[2, 3], [2]]
        # 0..5, 1.5 and -2 are exact in both: the top half of the float32 for bf16.
        assert tensors[0]["bytes"] == b"".join(pack(float(v)) for v in range(6))
        assert tensors[1]["bytes"] == pack(1.5) + pack(-2.0)
        assert len(tensors[0]["bytes"]) == 12
        # the second tensor still starts on a 64-byte boundary, and the body ends with it
        hlen = struct.unpack_from("<I", body, 4)[0]
        area = (8 + hlen + 63) // 64 * 64
        assert body[area + 64:area + 68] == pack(1.5) + pack(-2.0)
        assert len(body) == area + 64 + 4


def test_kind_delta_multi_byte_varints_and_empty_fields():
    meta = UpdateMeta(job="job", client_id="c", token="", base_version=300, num_samples=70000,
                      local_steps=0, train_seconds=0.0, kind=UpdateKind.DELTA)
    h = encode_header(meta, tensor_table(["x"], [(1,)], DType.F32))
    assert h == (bytes([0x0A, 3]) + b"job" + bytes([0x12, 1]) + b"c"
                 + bytes([0x20, 0xAC, 0x02])          # 300
                 + bytes([0x28, 0xF0, 0xA2, 0x04])    # 70000
                 + bytes([0x42, 8, 0x0A, 1, ord("x"), 0x1A, 1, 1, 0x28, 4])
                 + bytes([0x48, 1]))                  # kind DELTA


@pytest.mark.skipif(shutil.which("protoc") is None, reason="protoc (protobuf-compiler) not found")
def test_header_equals_protoc_encoding_of_the_proto():
    text = ('job: "j" client_id: "c1" token: "t" base_version: 3 num_samples: 10 '
            'local_steps: 5 train_seconds: 1.5 '
            'tensors { name: "w" dtype: F32 shape: [2, 3] offset: 0 length: 24 } '
            'tensors { name: "b" dtype: F32 shape: [2] offset: 64 length: 8 } kind: UPDATE_WEIGHTS')
    out = subprocess.run(["protoc", f"--proto_path={PROTO_DIR}",
                          "--encode=shoal.v1.UpdateHeader", "shoal/v1/fl.proto"],
                         input=text.encode(), capture_output=True, check=True).stdout
    assert out == HEADER_F32


def test_streaming_yields_views_of_float32_tensors_not_copies():
    big = np.random.default_rng(0).standard_normal((256, 1024)).astype(np.float32)
    u = EncodedUpdate(META, ["big", "b"], [big, B], "f32")
    chunks = list(u)
    assert sum(len(c) for c in chunks) == len(u)
    tensor_chunk = chunks[1]
    assert np.shares_memory(np.frombuffer(tensor_chunk, dtype=np.float32), big)
    # iterating again (a retry) gives the same bytes
    assert b"".join(bytes(c) for c in u) == b"".join(bytes(c) for c in chunks)


def test_refuses_what_the_server_would_refuse_naming_the_tensor():
    bad = W.copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="tensor 'w': 1 non-finite"):
        EncodedUpdate(META, ["w", "b"], [bad, B])
    with pytest.raises(ValueError, match="num_samples must be > 0"):
        EncodedUpdate(UpdateMeta("j", "c", "t", 0, 0), ["w"], [W])
    with pytest.raises(ValueError, match="unknown wire dtype 'f64'"):
        EncodedUpdate(META, ["w"], [W], "f64")
    with pytest.raises(ValueError, match="2 tensor names for 1 arrays"):
        EncodedUpdate(META, ["w", "b"], [W])
