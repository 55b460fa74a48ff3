"""Device functions that dequantize one 32-value unit of a weight row, for every type kept on the GPU.

A row is a sequence of 32-value units. Q4_0/Q8_0 blocks are one unit each; a K-quant block of 256
values is eight units (sub-block j of block u // 8); F16/BF16 rows are units of 64 bytes. Weights
are read as little-endian uint16 words [experts, rows, row_bytes / 2] (every kept type's blocks,
hence rows, have an even size): half the load instructions of byte reads, for the same bytes; scales
are decoded from their bits, so no float view of the file's bytes is needed. Type codes are ggml's
(GGMLQuantizationType values).
"""

import math

import numpy as np
from numba import cuda

from pantheon.engine.cuda.qtypes import BF16, F16, Q4_0, Q4_K, Q5_K, Q6_K, Q8_0, UNIT  # noqa: F401
# numba freezes module-level scalars into the kernels as constants; the simulator reuses them
I4, I8, I15, I32, I127, I255, I256 = (np.int32(v) for v in (4, 8, 15, 32, 127, 255, 256))


@cuda.jit(device=True, inline=True)
def half_bits(h):
    """float32 value of the IEEE half whose 16 bits are the int32 h."""
    ex = np.int32((h >> np.int32(10)) & np.int32(31))
    man = np.int32(h & np.int32(1023))
    if ex == np.int32(0):
        v = math.ldexp(np.float32(man), -24)
    elif ex == np.int32(31):
        v = np.float32(math.inf) if man == np.int32(0) else np.float32(math.nan)
    else:
        v = math.ldexp(np.float32(man + np.int32(1024)), int(ex - np.int32(25)))
    return np.float32(-v) if h & np.int32(0x8000) else np.float32(v)


@cuda.jit(device=True, inline=True)
def byte_at(raw, e, r, o):
    """Byte o of row r of expert e, from the little-endian uint16 words raw[e, r, :] of that row."""
    return (np.int32(raw[e, r, o >> 1]) >> np.int32(8 * (o & 1))) & I255


@cuda.jit(device=True, inline=True)
def half_at(raw, e, r, o):
    """float32 value of the little-endian fp16 at byte o (even) of the row: one word."""
    return half_bits(np.int32(raw[e, r, o >> 1]))


@cuda.jit(device=True, inline=True)
def bf16_at(raw, e, r, o):
    """float32 value of the little-endian bf16 at byte o (even) of the row (the top half of a float32)."""
    h = np.int32(raw[e, r, o >> 1])
    ex = np.int32((h >> np.int32(7)) & np.int32(255))
    man = np.int32(h & np.int32(127))
    if ex == np.int32(0):
        v = math.ldexp(np.float32(man), -133)
    elif ex == np.int32(255):
        v = np.float32(math.inf) if man == np.int32(0) else np.float32(math.nan)
    else:
        v = math.ldexp(np.float32(man + np.int32(128)), int(ex - np.int32(134)))
    return np.float32(-v) if h & np.int32(0x8000) else np.float32(v)


@cuda.jit(device=True, inline=True)
def scale_min_k4(raw, e, r, o, j):
    """(scale, min) 6-bit pair of sub-block j from the 12 packed bytes at byte o of the row (Q4_K, Q5_K)."""
    if j < 4:
        sc = byte_at(raw, e, r, o + j) & np.int32(63)
        mn = byte_at(raw, e, r, o + j + 4) & np.int32(63)
    else:
        lo = byte_at(raw, e, r, o + j + 4)
        sc = (lo & np.int32(15)) | ((byte_at(raw, e, r, o + j - 4) >> np.int32(6)) << np.int32(4))
        mn = (lo >> np.int32(4)) | ((byte_at(raw, e, r, o + j) >> np.int32(6)) << np.int32(4))
    return np.float32(sc), np.float32(mn)


@cuda.jit(device=True, inline=True)
def _q4_0(raw, e, r, u, w):
    o = u * 9  # words: a block is 18 bytes, 9 words
    d = half_bits(np.int32(raw[e, r, o]))
    for k in range(8):  # word k holds quant bytes 2k and 2k + 1
        v = np.int32(raw[e, r, o + 1 + k])
        for b in range(2):
            q = (v >> np.int32(8 * b)) & I255
            w[2 * k + b] = d * np.float32((q & I15) - I8)  # [32] local
            w[2 * k + b + 16] = d * np.float32((q >> I4) - I8)


@cuda.jit(device=True, inline=True)
def _q8_0(raw, e, r, u, w):
    o = u * 17  # words: a block is 34 bytes
    d = half_bits(np.int32(raw[e, r, o]))
    for k in range(16):
        v = np.int32(raw[e, r, o + 1 + k])
        for b in range(2):
            q = (v >> np.int32(8 * b)) & I255
            w[2 * k + b] = d * np.float32(q - I256 if q > I127 else q)


@cuda.jit(device=True, inline=True)
def q45_k_unit(raw, e, r, u, five):
    """Where sub-block j = u % 8 of a Q4_K (five=False) or Q5_K block lies: (d·scale, dmin·min, its first
    quant word, the block's first qh word, the nibble shift of its quants, j); value = d·scale·q - dmin·min."""
    size = 176 if five else 144
    o, j = (u // 8) * size, u % 8
    d, dmin = half_at(raw, e, r, o), half_at(raw, e, r, o + 2)
    sc, mn = scale_min_k4(raw, e, r, o + 4, j)
    qs = (o + (48 if five else 16) + (j // 2) * 32) >> 1  # words
    return d * sc, dmin * mn, qs, (o + 16) >> 1, np.int32(4 * (j % 2)), j


@cuda.jit(device=True, inline=True)
def _q45_k(raw, e, r, u, w, five):
    """Sub-block j of a Q4_K (five=False) or Q5_K block, dequantized."""
    dsc, dmn, qs, qh, shift, j = q45_k_unit(raw, e, r, u, five)
    for k in range(16):
        v = np.int32(raw[e, r, qs + k])
        hv = np.int32(raw[e, r, qh + k]) if five else np.int32(0)
        for b in range(2):
            q = (v >> np.int32(8 * b + shift)) & I15
            if five:
                q |= ((hv >> np.int32(8 * b + j)) & np.int32(1)) << I4
            w[2 * k + b] = dsc * np.float32(q) - dmn


@cuda.jit(device=True, inline=True)
def q6_k_unit(raw, e, r, u):
    """Where unit u (quarter qq of half h of a Q6_K block) lies: (d, its first ql word, its first qh word, the
    shift of its 4 low bits in ql, of its 2 high bits in qh, the byte of its first 16 values' int8 scale)."""
    o, j = (u // 8) * 210, u % 8
    h, qq = j // 4, j % 4
    ql = (o + 64 * h + (32 if qq % 2 else 0)) >> 1  # words
    qh = (o + 128 + 32 * h) >> 1
    nib, hs = np.int32(4 if qq >= 2 else 0), np.int32(2 * qq)
    return half_at(raw, e, r, o + 208), ql, qh, nib, hs, o + 192 + 8 * h + 2 * qq


@cuda.jit(device=True, inline=True)
def int8_at(raw, e, r, o):
    """float32 value of the signed byte o of the row."""
    s = byte_at(raw, e, r, o)
    return np.float32(s - I256 if s > I127 else s)


@cuda.jit(device=True, inline=True)
def _q6_k(raw, e, r, u, w):
    """Quarter of a half of a Q6_K block, dequantized: 4 bits from ql, 2 from qh, an int8 scale per 16 values."""
    d, ql, qh, nib, hs, so = q6_k_unit(raw, e, r, u)
    for half in range(2):
        ds = d * int8_at(raw, e, r, so + half)
        for k in range(8 * half, 8 * half + 8):
            lv, hv = np.int32(raw[e, r, ql + k]), np.int32(raw[e, r, qh + k])
            for b in range(2):
                lo = (lv >> np.int32(8 * b + nib)) & I15
                hi = (hv >> np.int32(8 * b + hs)) & np.int32(3)
                w[2 * k + b] = ds * np.float32((lo | (hi << I4)) - I32)


@cuda.jit(device=True)
def unit(raw, e, r, u, qtype, w):
    """Dequantize values [32u, 32u+32) of row r of expert e into the local float32 array w [32]; raw is the
    weights' bytes read as little-endian uint16 words [experts, rows, row_bytes / 2] (DeviceMatrix.words)."""
    if qtype == Q4_0:
        _q4_0(raw, e, r, u, w)
    elif qtype == Q8_0:
        _q8_0(raw, e, r, u, w)
    elif qtype == Q4_K:
        _q45_k(raw, e, r, u, w, False)
    elif qtype == Q5_K:
        _q45_k(raw, e, r, u, w, True)
    elif qtype == Q6_K:
        _q6_k(raw, e, r, u, w)
    elif qtype == F16:
        for l in range(32):
            w[l] = half_bits(np.int32(raw[e, r, 32 * u + l]))
    else:
        for l in range(32):
            w[l] = bf16_at(raw, e, r, 64 * u + 2 * l)
