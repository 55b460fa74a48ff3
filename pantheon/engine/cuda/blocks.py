"""Device functions that dequantize one 32-value unit of a weight row, for every type kept on the GPU.

A row is a sequence of 32-value units. Q4_0/Q8_0 blocks are one unit each; a K-quant block of 256
values is eight units (sub-block j of block u // 8); F16/BF16 rows are units of 64 bytes. Raw
weights are uint8 [experts, rows, row_bytes]; scales are decoded from their bytes, so no aligned view
of the file's bytes is ever needed. Type codes are ggml's (GGMLQuantizationType values).
"""

import math

import numpy as np
from numba import cuda

from pantheon.engine.cuda.qtypes import BF16, F16, Q4_0, Q4_K, Q5_K, Q6_K, Q8_0, UNIT  # noqa: F401
# numba freezes module-level scalars into the kernels as constants; the simulator reuses them
I4, I8, I15, I32, I127, I256 = (np.int32(v) for v in (4, 8, 15, 32, 127, 256))


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
def half_at(raw, e, r, o):
    """float32 value of the little-endian fp16 at raw[e, r, o:o+2]."""
    return half_bits(np.int32(raw[e, r, o]) | (np.int32(raw[e, r, o + 1]) << np.int32(8)))


@cuda.jit(device=True, inline=True)
def bf16_at(raw, e, r, o):
    """float32 value of the little-endian bf16 at raw[e, r, o:o+2] (the top half of a float32)."""
    h = np.int32(raw[e, r, o]) | (np.int32(raw[e, r, o + 1]) << np.int32(8))
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
    """(scale, min) 6-bit pair of sub-block j from the 12 packed bytes at raw[e, r, o:o+12] (Q4_K, Q5_K)."""
    if j < 4:
        sc = np.int32(raw[e, r, o + j]) & np.int32(63)
        mn = np.int32(raw[e, r, o + j + 4]) & np.int32(63)
    else:
        lo = np.int32(raw[e, r, o + j + 4])
        sc = (lo & np.int32(15)) | ((np.int32(raw[e, r, o + j - 4]) >> np.int32(6)) << np.int32(4))
        mn = (lo >> np.int32(4)) | ((np.int32(raw[e, r, o + j]) >> np.int32(6)) << np.int32(4))
    return np.float32(sc), np.float32(mn)


@cuda.jit(device=True, inline=True)
def _q4_0(raw, e, r, u, w):
    o = u * 18
    d = half_at(raw, e, r, o)
    for l in range(16):
        q = np.int32(raw[e, r, o + 2 + l])
        w[l] = d * np.float32((q & I15) - I8)  # [32] local
        w[l + 16] = d * np.float32((q >> I4) - I8)


@cuda.jit(device=True, inline=True)
def _q8_0(raw, e, r, u, w):
    o = u * 34
    d = half_at(raw, e, r, o)
    for l in range(32):
        q = np.int32(raw[e, r, o + 2 + l])
        w[l] = d * np.float32(q - I256 if q > I127 else q)


@cuda.jit(device=True, inline=True)
def _q45_k(raw, e, r, u, w, five):
    """Sub-block j of a Q4_K (five=False) or Q5_K block: value = d*scale*q - dmin*min."""
    size = 176 if five else 144
    o, j = (u // 8) * size, u % 8
    d, dmin = half_at(raw, e, r, o), half_at(raw, e, r, o + 2)
    sc, mn = scale_min_k4(raw, e, r, o + 4, j)
    qs = o + (48 if five else 16) + (j // 2) * 32
    shift = np.int32(4 * (j % 2))
    dsc, dmn = d * sc, dmin * mn
    for l in range(32):
        q = (np.int32(raw[e, r, qs + l]) >> shift) & I15
        if five:
            q |= ((np.int32(raw[e, r, o + 16 + l]) >> np.int32(j)) & np.int32(1)) << I4
        w[l] = dsc * np.float32(q) - dmn


@cuda.jit(device=True, inline=True)
def _q6_k(raw, e, r, u, w):
    """Quarter qq of half h of a Q6_K block: low nibbles of ql (high for qq >= 2), 2 bits of qh."""
    o, j = (u // 8) * 210, u % 8
    h, qq = j // 4, j % 4
    d = half_at(raw, e, r, o + 208)
    ql = o + 64 * h + (32 if qq % 2 else 0)
    qh = o + 128 + 32 * h
    nib = np.int32(4 if qq >= 2 else 0)
    hs = np.int32(2 * qq)
    for half in range(2):
        s = np.int32(raw[e, r, o + 192 + 8 * h + half + 2 * qq])
        ds = d * np.float32(s - I256 if s > I127 else s)
        for l in range(16 * half, 16 * half + 16):
            lo = (np.int32(raw[e, r, ql + l]) >> nib) & I15
            hi = (np.int32(raw[e, r, qh + l]) >> hs) & np.int32(3)
            w[l] = ds * np.float32((lo | (hi << I4)) - I32)


@cuda.jit(device=True)
def unit(raw, e, r, u, qtype, w):
    """Dequantize values [32u, 32u+32) of row r of expert e into the local float32 array w [32]."""
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
            w[l] = half_at(raw, e, r, 64 * u + 2 * l)
    else:
        for l in range(32):
            w[l] = bf16_at(raw, e, r, 64 * u + 2 * l)
