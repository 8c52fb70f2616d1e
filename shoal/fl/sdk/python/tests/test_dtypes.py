import struct

import numpy as np

from shoal_fl.dtypes import (bf16_bits_to_float32, DType, decode, encode, f16_bits_to_float32,
                             float32_to_bf16_bits, float32_to_f16_bits)


def f32(bits):
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def bf16(values):
    return [int(b) for b in float32_to_bf16_bits(np.array(values, dtype=np.float32))]


def f16(values):
    return [int(b) for b in float32_to_f16_bits(np.array(values, dtype=np.float32))]


def test_bf16_rounds_to_nearest_even():
    assert bf16([1.0, -2.0, 0.0, -0.0]) == [0x3F80, 0xC000, 0x0000, 0x8000]
    # 0x3f808000 is exactly half-way between 0x3f80 and 0x3f81: ties go to the even 0x3f80;
    # 0x3f818000 is half-way between 0x3f81 and 0x3f82: to the even 0x3f82.
    assert bf16([f32(0x3F808000), f32(0x3F818000)]) == [0x3F80, 0x3F82]
    # one ulp either side of the tie
    assert bf16([f32(0x3F808001), f32(0x3F807FFF)]) == [0x3F81, 0x3F80]
    # the largest float32 rounds past bf16's largest finite value: infinity
    assert bf16([f32(0x7F7FFFFF), float("inf"), float("-inf")]) == [0x7F80, 0x7F80, 0xFF80]
    # NaN stays NaN with the quiet bit set (the C++ side's 0x40)
    assert bf16([f32(0x7F800001), float("nan")]) == [0x7FC0, 0x7FC0]


def test_f16_rounds_to_nearest_even_with_subnormals_and_overflow():
    assert f16([1.0, -2.0, 65504.0, 0.5]) == [0x3C00, 0xC000, 0x7BFF, 0x3800]
    # 1 + 2^-11 is half-way between 1 and 1 + 2^-10: to even (1); 1 + 3*2^-11: up to 0x3c02
    assert f16([1 + 2**-11, 1 + 3 * 2**-11]) == [0x3C00, 0x3C02]
    # 65520 is half-way between 65504 and 65536 (not representable): to even, infinity;
    # just below it stays 65504
    assert f16([65520.0, f32(0x477FEFFF), 1e10, -1e10]) == [0x7C00, 0x7BFF, 0x7C00, 0xFC00]
    # subnormals: 2^-24 is the smallest; 2^-25 is the tie with 0 (to even: 0); 3*2^-25 ties
    # 1 and 2 (to even: 2); 2^-14 is the smallest normal
    assert f16([2**-24, 2**-25, 3 * 2**-25, 2**-14, -(2**-24)]) == [1, 0, 2, 0x0400, 0x8001]
    assert f16([float("nan"), -float("nan")]) == [0x7E00, 0xFE00]


def test_decode_inverts_encode_where_exact_and_rounds_otherwise():
    vals = np.array([0.1, -3.14159, 1e-3, 2.5e4], dtype=np.float32)
    bf = bf16_bits_to_float32(float32_to_bf16_bits(vals))
    assert np.all(np.abs(bf - vals) <= np.abs(vals) * 2**-8)
    hf = f16_bits_to_float32(float32_to_f16_bits(vals))
    assert np.all(np.abs(hf - vals) <= np.abs(vals) * 2**-11)
    for d in (DType.F32, DType.BF16, DType.F16):  # the floating types (U32: secure aggregation)
        raw = bytearray(encode(vals, d))
        assert len(raw) == 4 * d.itemsize
        back = decode(raw, d, (2, 2))
        assert back.shape == (2, 2) and back.dtype == np.float32
    assert bytes(encode(np.array([1.0], dtype=np.float32), DType.BF16)) == b"\x80\x3f"
    assert bytes(encode(np.array([1.0], dtype=np.float64), DType.F16)) == b"\x00\x3c"


def test_dtype_names():
    assert DType.parse("bf16") is DType.BF16 and DType.parse("float16") is DType.F16
    assert DType.parse(DType.F32) is DType.F32
    assert [int(d) for d in DType] == [0, 1, 2, 4, 5, 6]  # shoal.v1.DType


def test_int8_and_int4_blocks_by_hand():
    from shoal_fl.dtypes import dequantize, quantize
    # 65 values: one full block and one of a single value.
    x = np.zeros(65, dtype=np.float32)
    x[0], x[1], x[63], x[64] = 1.27, -0.64, 0.01, -2.0
    q8 = bytes(quantize(x, DType.Q8))
    assert len(q8) == DType.Q8.nbytes(65) == 68 + 5
    scale = np.float32(1.27) / np.float32(127)
    assert q8[:4] == struct.pack("<f", scale)
    assert q8[4] == 127 and q8[5] == (256 - 64) and q8[4 + 63] == 1  # 0.01 / 0.01 = 1
    assert q8[68:72] == struct.pack("<f", np.float32(2.0) / np.float32(127)) and q8[72] == 256 - 127
    q4 = bytes(quantize(x, DType.Q4))
    assert len(q4) == DType.Q4.nbytes(65) == 36 + 5
    # element 0 (7) in the low nibble, element 1 (-0.64 / (1.27 / 7) = -3.53 -> -4) in the high
    assert q4[4] == (7 | ((-4 & 15) << 4))
    assert q4[36 + 4] == (-7 & 15)  # the last block's single value; high nibble 0
    for d in (DType.Q8, DType.Q4):
        back = dequantize(quantize(x, d), d, 65)
        assert back[64] == -2.0
        assert decode(encode(x, d), d, (5, 13)).shape == (5, 13)


def test_int8_and_int4_are_within_half_a_step():
    from shoal_fl.dtypes import dequantize, quantize
    rng = np.random.default_rng(3)
    x = rng.normal(0, 0.05, 1000).astype(np.float32)
    x[128:192] = 0
    for d, qmax in ((DType.Q8, 127), (DType.Q4, 7)):
        back = dequantize(quantize(x, d), d, x.size)
        for b in range(0, x.size, 64):
            scale = np.float32(np.abs(x[b:b + 64]).max()) / np.float32(qmax)
            assert np.all(np.abs(back[b:b + 64] - x[b:b + 64]) <= scale * 0.5001)
        assert np.all(back[128:192] == 0)
    assert DType.parse("int8") is DType.Q8 and DType.parse("INT4") is DType.Q4
