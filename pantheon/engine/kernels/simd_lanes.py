"""Intrinsics of the repacked kernels: registers holding one quant word, scale or d of 16 repacked rows.

The repacked layout (kernels.repack) stores each field of a block as [unit][row], so one 64-byte load
is a unit of 16 rows: these split it into quants (nibbles, Q6_K's 6-bit values), widen scales, and
finish row lanes with the same float operations as simd512's table-driven forms.
"""

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from pantheon.engine.kernels.simd import _splat
from pantheon.engine.kernels.simd512 import (F32X16, I32X16, U32X16, _I8, _V16F, _V16I, _V64B, _I32, _as_i32,
                                             _fma_rows, _ptr, wide_bytes)
from pantheon.engine.kernels.vnni import dpbusd, dpwssd, has_vnni, pair_words, pairs, scale_pairs, signed_dots


@intrinsic
def wload16(typingctx, ary, off):
    """The 64 bytes at ary[off:] of a uint8 array as <16 x i32>: one quant word of 16 repacked rows
    (U32X16 words from an int8 array, simd512.wide_bytes)."""
    def codegen(context, builder, sig, args):
        return builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _V16I), align=1)
    return (U32X16 if wide_bytes(ary) else I32X16)(ary, off), codegen


def _nibbles(high):
    """lo16 / hi16: the low or high nibble of every byte of a <16 x i32> word vector, as bytes."""
    def typer(typingctx, v):
        def codegen(context, builder, sig, args):
            v = builder.lshr(args[0], ir.Constant(_V16I, [4] * 16)) if high else args[0]
            return builder.and_(v, ir.Constant(_V16I, [0x0F0F0F0F] * 16))
        return I32X16(v), codegen
    typer.__name__ = "hi16" if high else "lo16"
    return intrinsic(typer)


# lo16(v) / hi16(v): Q4_0's quants 4w..4w+3 / 16+4w..19+4w of 16 rows from their nibble word w.
lo16, hi16 = _nibbles(False), _nibbles(True)


@intrinsic
def qdot16(typingctx, acc, w, x, xoff):
    """acc plus 16 rows' dots of a Q8_0 quant word (q + 128 bytes, U32X16) with x[xoff:xoff+4] in every
    lane: vpdpbusd after VNNI, Σ(q + 128)·x, whose −128·Σx the block's `qstart16` holds; on AVX2 Σq·x
    itself (kernels.vnni.signed_dots). Either way a block ends on the same exact dot."""
    if w != U32X16:
        return None
    def codegen(context, builder, sig, args):
        xw = builder.load(_ptr(context, builder, sig.args[2], args[2], args[3], _I32), align=1)
        xv = builder.bitcast(_splat(builder, xw, _V16I), _V64B)
        u = builder.bitcast(args[1], _V64B)
        if has_vnni():
            return dpbusd(builder, args[0], u, xv, True)
        return signed_dots(builder, args[0], u, xv)
    return I32X16(acc, w, x, xoff), codegen


@intrinsic
def qstart16(typingctx, zero, xsum):
    """A Q8_0 block's dot before its words (`qdot16`): −zero·xsum in every lane after VNNI, 0 on AVX2."""
    def codegen(context, builder, sig, args):
        if not has_vnni():
            return ir.Constant(_V16I, [0] * 16)
        v = builder.mul(builder.neg(_as_i32(builder, args[0])), _as_i32(builder, args[1]))
        return _splat(builder, v, _V16I)
    return I32X16(zero, xsum), codegen


@intrinsic
def pdot16(typingctx, acc, w, x, xoff):
    """A word's dot left unscaled for `pmac16` (kernels.vnni.pairs): at most pwords16(bits) words of quants
    below 2^bits between two pmac16 of acc."""
    if w != I32X16:
        return None
    def codegen(context, builder, sig, args):
        xw = builder.load(_ptr(context, builder, sig.args[2], args[2], args[3], _I32), align=1)
        xv = builder.bitcast(_splat(builder, xw, _V16I), _V64B)
        return pairs(builder, args[0], builder.bitcast(args[1], _V64B), xv)
    return I32X16(acc, w, x, xoff), codegen


@intrinsic
def pmac16(typingctx, acc, sums, scales):
    """acc + scales·(the dots pdot16 accumulated in sums), lane-wise in int32: 16 rows' sub-block dots
    times their scales (kernels.vnni.scale_pairs)."""
    def codegen(context, builder, sig, args):
        return scale_pairs(builder, args[0], args[1], args[2])
    return I32X16(acc, sums, scales), codegen


@intrinsic
def pwords16(typingctx, bits):
    """How many quant words below 2^bits pdot16 may take between pmac16s on this host (a constant once
    inlined: kernels.vnni.pair_words of 4, 5 or 6 bits)."""
    def codegen(context, builder, sig, args):
        ity = context.get_value_type(sig.return_type)
        v = ir.Constant(ity, pair_words(6))
        for b in (5, 4):
            hit = builder.icmp_signed("==", args[0], ir.Constant(args[0].type, b))
            v = builder.select(hit, ir.Constant(ity, pair_words(b)), v)
        return v
    return types.intp(bits), codegen


@intrinsic
def fload16(typingctx, ary, idx):
    """ary[idx:idx+16] of a 1-D float32 array: 16 rows' accumulators kept between passes."""
    def codegen(context, builder, sig, args):
        return builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _V16F), align=4)
    return F32X16(ary, idx), codegen


def _bytes16(signed):
    """bload16 / sbload16: the 16 bytes at ary[off:] of a uint8 array as <16 x i32>, zero- or sign-extended."""
    def typer(typingctx, ary, off):
        def codegen(context, builder, sig, args):
            v = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], ir.VectorType(_I8, 16)), align=1)
            return builder.sext(v, _V16I) if signed else builder.zext(v, _V16I)
        return I32X16(ary, off), codegen
    typer.__name__ = "sbload16" if signed else "bload16"
    return intrinsic(typer)


# bload16: 16 rows' unsigned 6-bit scales or mins (Q4_K); sbload16: their int8 scales (Q6_K).
bload16, sbload16 = _bytes16(False), _bytes16(True)


def _bytes_of(v):
    """A byte value repeated in every byte of a <16 x i32> constant."""
    return ir.Constant(_V16I, [v * 0x01010101] * 16)


@intrinsic
def six16(typingctx, p):
    """Q6_K values of 16 rows from a word of one of kernels.repack's planes: its low 6 bits of each byte."""
    def codegen(context, builder, sig, args):
        return builder.and_(args[0], _bytes_of(0x3F))
    return I32X16(p), codegen


@intrinsic
def six_top16(typingctx, p0, p1, p2):
    """The fourth Q6_K value group of 16 rows from the three planes' words (kernels.repack): the top 2
    bits of each byte of p0, p1, p2 are its bits 4-5, 2-3, 0-1. Each plane is masked before its shift,
    so no bit crosses into the next byte of a 32-bit lane."""
    def codegen(context, builder, sig, args):
        def top(v, shift):
            t = builder.and_(v, _bytes_of(0xC0))
            return builder.lshr(t, ir.Constant(_V16I, [shift] * 16)) if shift else t
        v = builder.or_(builder.or_(top(args[0], 0), top(args[1], 2)), top(args[2], 4))  # the value << 2
        return builder.lshr(v, ir.Constant(_V16I, [2] * 16))
    return I32X16(p0, p1, p2), codegen


@intrinsic
def imac16(typingctx, acc, a, b):
    """acc + a·b lane-wise in int32 (exact for the sums it serves): 16 rows' sub-block dots times scales."""
    def codegen(context, builder, sig, args):
        return builder.add(args[0], builder.mul(args[1], args[2]))
    return I32X16(acc, a, b), codegen


@intrinsic
def imacs16(typingctx, acc, a, s):
    """acc + a·s lane-wise in int32, s one integer for every lane: 16 rows' mins times an activation sum."""
    def codegen(context, builder, sig, args):
        return builder.add(args[0], builder.mul(args[1], _splat(builder, _as_i32(builder, args[2]), _V16I)))
    return I32X16(acc, a, s), codegen


def _fma_half(negate):
    """fma16h / fnma16h: `_fma_rows` with 16 rows' d read as fp16 at byte `off` of a uint8 array (exact
    widening, so the float operations of a float32 table)."""
    def typer(typingctx, acc, dots, ary, off, xd):
        def codegen(context, builder, sig, args):
            vh = ir.VectorType(ir.HalfType(), 16)
            d = builder.load(_ptr(context, builder, sig.args[2], args[2], args[3], vh), align=1)
            return _fma_rows(builder, args[0], args[1], builder.fpext(d, _V16F), args[4], _V16F, negate)
        return F32X16(acc, dots, ary, off, types.float32), codegen
    typer.__name__ = "fnma16h" if negate else "fma16h"
    return intrinsic(typer)


# fma16h(acc, dots, ary, off, xd): `fma16` with d from the repacked block's fp16 row lanes; fnma16h the
# mins term (dmin) the same way.
fma16h, fnma16h = _fma_half(False), _fma_half(True)


@intrinsic
def qbit16(typingctx, qh, left, right):
    """((qh << left) >> right) & 0x10 in every byte: one bit of each Q5_K qh byte moved to bit 4, the
    fifth bit of a quant (left = 4 − s or right = s − 4 for bit s, the other 0)."""
    def codegen(context, builder, sig, args):
        def splat(v):
            return _splat(builder, _as_i32(builder, v), _V16I)
        v = builder.lshr(builder.shl(args[0], splat(args[1])), splat(args[2]))
        return builder.and_(v, ir.Constant(_V16I, [0x10101010] * 16))
    return I32X16(qh, left, right), codegen


@intrinsic
def or16(typingctx, a, b):
    """a | b lane-wise: a quant's low bits and its high bit."""
    def codegen(context, builder, sig, args):
        return builder.or_(args[0], args[1])
    return I32X16(a, b), codegen


@intrinsic
def hload16(typingctx, ary, off):
    """The 16 fp16 at byte `off` of a uint8 array as float32 lanes (exact): 16 rows' d or dmin."""
    def codegen(context, builder, sig, args):
        vh = ir.VectorType(ir.HalfType(), 16)
        return builder.fpext(builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], vh), align=1), _V16F)
    return F32X16(ary, off), codegen


@intrinsic
def spair16(typingctx, ary, off0, off1):
    """The int8 at ary[off0:off0+16] and ary[off1:off1+16] as 16 lanes of int16 pairs (the first in the low
    half): 16 rows' scales of two sub-blocks, for `wdot16`."""
    def codegen(context, builder, sig, args):
        def sext(off):
            v = builder.load(_ptr(context, builder, sig.args[0], args[0], off, ir.VectorType(_I8, 16)), align=1)
            return builder.sext(v, _V16I)
        low = builder.and_(sext(args[1]), ir.Constant(_V16I, [0xFFFF] * 16))
        return builder.or_(low, builder.shl(sext(args[2]), ir.Constant(_V16I, [16] * 16)))
    return I32X16(ary, off0, off1), codegen


@intrinsic
def wdot16(typingctx, acc, pairs, bs, idx):
    """acc + vpdpwssd(pairs, bs[idx], bs[idx + 1] in every lane) for an int16 array bs: 16 rows' two
    scales times two activation sums, exact in int32."""
    def codegen(context, builder, sig, args):
        v32 = ir.VectorType(ir.IntType(16), 32)
        pair = builder.load(_ptr(context, builder, sig.args[2], args[2], args[3], _I32), align=2)
        x = builder.bitcast(_splat(builder, pair, _V16I), v32)
        return dpwssd(builder, args[0], builder.bitcast(args[1], v32), x)
    return I32X16(acc, pairs, bs, idx), codegen


@intrinsic
def dup16(typingctx, v):
    """v | v << 16 lane-wise: a 16-bit value in both halves of its lane, so `wdot16` multiplies it by the
    sum of two activation sums (a Q4_K min by Σxq of its 32 values)."""
    def codegen(context, builder, sig, args):
        return builder.or_(args[0], builder.shl(args[0], ir.Constant(_V16I, [16] * 16)))
    return I32X16(v), codegen


@intrinsic
def k4_planes(typingctx, ary, off, out):
    """A Q4_K / Q5_K super-block's header for 32 rows, from the planes of 32 rows kernels.repack keeps at
    ary[off:] (the file's 12 packed scale bytes, d, dmin): out[32j:32j+32] = scale j's bytes and
    out[256 + 32j:] = min j's (ggml's get_scale_min_k4), out[512:576] = d and out[576:640] = dmin as
    they lie (out uint8 [640]). A few byte operations per super-block of 32 rows, where storing them
    decoded (repack layouts 1-8) streamed 4 more bytes per row and super-block; the passes then read
    the header from L1, and the weights only in address order."""
    def codegen(context, builder, sig, args):
        v32 = ir.VectorType(_I8, 32)

        def at(ty, ary, base, k):
            return _ptr(context, builder, ty, ary, builder.add(base, ir.Constant(base.type, 32 * k)), v32)

        def c(x):
            return ir.Constant(v32, [x] * 32)

        q = [builder.load(at(sig.args[0], args[0], args[1], k), align=1) for k in range(16)]
        zero = ir.Constant(args[1].type, 0)
        for k in range(12, 16):  # d and dmin, copied as they lie
            builder.store(q[k], at(sig.args[2], args[2], zero, 4 + k), align=1)
        for j in range(4):
            lo, mid, hi = q[j], q[4 + j], q[8 + j]
            top_lo, top_mid = builder.shl(builder.lshr(lo, c(6)), c(4)), builder.shl(builder.lshr(mid, c(6)), c(4))
            planes = ((j, builder.and_(lo, c(63))), (4 + j, builder.or_(builder.and_(hi, c(15)), top_lo)),
                      (8 + j, builder.and_(mid, c(63))), (12 + j, builder.or_(builder.lshr(hi, c(4)), top_mid)))
            for k, v in planes:
                builder.store(v, at(sig.args[2], args[2], zero, k), align=1)
        return context.get_dummy_value()
    return types.none(ary, off, out), codegen
