"""Device functions that unpack one 32-value unit of a quantized weight row as int8 quants and float scales.

The int8-activation path (matvec8.py) multiplies these quants with int8 activations by dp4a. A unit
comes out as eight 32-bit words qw[k], value 4k + b of the unit in byte b of word k (as the
activations are packed), every quant non-negative and below 64, and four floats (a0, a1, b0, b1) with

    weight value l = a_h · q_l + b_h,  h = l // 16 (the unit's two halves of 16 values)

Q4_0 and Q6_K keep their zero points (8, 32) as the offsets b_h = -8·d, -32·d·scale_h instead of
subtracting them byte by byte, so the kernel pays for them once per unit with the halves' activation
sums; Q6_K is the one type whose halves have different scales. Block layouts are blocks.py's: weights
are little-endian uint16 words [experts, rows, row_bytes / 2]; type codes are ggml's.
"""

import numpy as np
from numba import cuda

from pantheon.engine.cuda.blocks import half_bits, int8_at, q6_k_unit, q45_k_unit
from pantheon.engine.cuda.qtypes import Q4_0, Q4_K, Q5_K, Q8_0

LO4, LO2, LO1 = np.int32(0x0F0F0F0F), np.int32(0x03030303), np.int32(0x01010101)  # a mask per byte


@cuda.jit(device=True, inline=True)
def word32(raw, e, r, w):
    """Bytes 2w..2w+3 of the row as one 32-bit word (two uint16 words, little-endian)."""
    return np.int32(raw[e, r, w]) | (np.int32(raw[e, r, w + 1]) << np.int32(16))


@cuda.jit(device=True, inline=True)
def _q4_0(raw, e, r, u, qw):
    o = u * 9  # words: a block is 18 bytes, the scale then 16 quant bytes (low nibbles: values 0-15)
    d = half_bits(np.int32(raw[e, r, o]))
    for j in range(4):
        v = word32(raw, e, r, o + 1 + 2 * j)  # quant bytes 4j..4j+3
        qw[j] = v & LO4  # values 4j..4j+3
        qw[j + 4] = (v >> np.int32(4)) & LO4  # values 16+4j..16+4j+3
    return d, d, np.float32(-8.0) * d, np.float32(-8.0) * d


@cuda.jit(device=True, inline=True)
def _q8_0(raw, e, r, u, qw):
    o = u * 17  # words: a block is 34 bytes, the scale then 32 signed quant bytes in value order
    d = half_bits(np.int32(raw[e, r, o]))
    for k in range(8):
        qw[k] = word32(raw, e, r, o + 1 + 2 * k)
    return d, d, np.float32(0.0), np.float32(0.0)


@cuda.jit(device=True, inline=True)
def _q45_k(raw, e, r, u, qw, five):
    """Sub-block j of a Q4_K (five=False) or Q5_K block: value = d·scale·q - dmin·min."""
    a, dmn, qs, qh, shift, j = q45_k_unit(raw, e, r, u, five)
    for k in range(8):
        q = (word32(raw, e, r, qs + 2 * k) >> shift) & LO4
        if five:  # bit j of the value's qh byte is its fifth bit
            q |= ((word32(raw, e, r, qh + 2 * k) >> np.int32(j)) & LO1) << np.int32(4)
        qw[k] = q
    return a, a, -dmn, -dmn


@cuda.jit(device=True, inline=True)
def _q6_k(raw, e, r, u, qw):
    """Quarter of a half of a Q6_K block: 4 bits from ql, 2 from qh, one int8 scale per 16 values."""
    d, ql, qh, nib, hs, so = q6_k_unit(raw, e, r, u)
    for k in range(8):
        lo = (word32(raw, e, r, ql + 2 * k) >> nib) & LO4
        qw[k] = lo | (((word32(raw, e, r, qh + 2 * k) >> hs) & LO2) << np.int32(4))
    a0, a1 = d * int8_at(raw, e, r, so), d * int8_at(raw, e, r, so + 1)
    return a0, a1, np.float32(-32.0) * a0, np.float32(-32.0) * a1


@cuda.jit(device=True)
def unit_q8(raw, e, r, u, qtype, qw):
    """Quants of values [32u, 32u+32) of row r of expert e into the local int32 array qw [8] (4 per word);
    returns (a0, a1, b0, b1): value l = a_h · q_l + b_h for half h = l // 16. Types of INT8_TYPES only."""
    if qtype == Q4_0:
        return _q4_0(raw, e, r, u, qw)
    if qtype == Q8_0:
        return _q8_0(raw, e, r, u, qw)
    if qtype == Q4_K:
        return _q45_k(raw, e, r, u, qw, False)
    if qtype == Q5_K:
        return _q45_k(raw, e, r, u, qw, True)
    return _q6_k(raw, e, r, u, qw)
