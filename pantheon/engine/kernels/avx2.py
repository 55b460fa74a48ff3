"""AVX2 integer dot products for K-quants against Q8_K activations, as numba intrinsics.

llama.cpp's AVX2 K-quant dot products multiply 32 unsigned quants by 32 int8 activations with
vpmaddubsw (pairs summed to int16), then multiply those pairs by the sub-block's 6- or 8-bit scale
with vpmaddwd (pairs summed to int32): scales act on integer partial sums and a whole 256-value
super-block reaches float once. LLVM does not emit either instruction from numba integer loops,
so these intrinsics call them by name. They need AVX2 (`has_avx2`); callers fall back without it.
"""

import functools

import llvmlite.binding as llb
from llvmlite import ir
from numba.core import cgutils
from numba.extending import intrinsic

from pantheon.engine.kernels.simd import I32X8, Vec, _bytes_at, _splat

I16X16 = Vec("i16", 16)
_I16, _I32 = ir.IntType(16), ir.IntType(32)
_V16x16, _V32x8 = ir.VectorType(_I16, 16), ir.VectorType(_I32, 8)


@functools.cache
def has_avx2():
    """True when the host runs AVX2 (vpmaddubsw/vpmaddwd on 256 bits); else K-quants keep float kernels."""
    return bool(llb.get_host_cpu_features().get("avx2"))


def _call(builder, name, ret, args):
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ret, [a.type for a in args]), name)
    return builder.call(fn, args)


def _lanes(builder, v, idx):
    """<len(idx) x T> of the lanes `idx` of v."""
    return builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(_I32, len(idx)), list(idx)))


def _words(context, builder, aryty, ary, off, count):
    """`count` little-endian u32 words loaded (unaligned) from byte `off` of a 1-D uint8 array."""
    data = context.make_array(aryty)(context, builder, ary).data
    ptr = builder.bitcast(builder.gep(data, [off]), _I32.as_pointer())
    return [builder.load(builder.gep(ptr, [ir.Constant(_I32, k)]), align=1) for k in range(count)]


def _i16_at(context, builder, aryty, ary, idx, count):
    """<count x i16> loaded from element `idx` of a 1-D int16 array."""
    data = context.make_array(aryty)(context, builder, ary).data
    ptr = builder.bitcast(builder.gep(data, [idx]), ir.VectorType(_I16, count).as_pointer())
    return builder.load(ptr, align=2)


def _madd(builder, acc, w, x, scales):
    """acc + vpmaddwd(vpmaddubsw(w, x), scales): 32 quant-activation products, scaled per pair, as 8 int32."""
    p16 = _call(builder, "llvm.x86.avx2.pmadd.ub.sw", _V16x16, [w, x])
    return builder.add(acc, _call(builder, "llvm.x86.avx2.pmadd.wd", _V32x8, [p16, scales]))


@intrinsic
def izero(typingctx):
    """An all-zero int32 lane accumulator."""
    def codegen(context, builder, sig, args):
        return ir.Constant(_V32x8, [0] * 8)
    return I32X8(), codegen


@intrinsic
def k4_scales(typingctx, ary, off):
    """The 12 packed bytes at ary[off:] (Q4_K, Q5_K) as int16 lanes: 8 six-bit scales, then 8 mins."""
    def codegen(context, builder, sig, args):
        u0, u1, u2 = _words(context, builder, sig.args[0], args[0], args[1], 3)
        k1, k2, k3 = (ir.Constant(_I32, m) for m in (0x3F3F3F3F, 0x0F0F0F0F, 0x03030303))
        six, four = ir.Constant(_I32, 6), ir.Constant(_I32, 4)

        def high_bits(u):  # bits 6-7 of each byte of u, moved to bits 4-5
            return builder.shl(builder.and_(builder.lshr(u, six), k3), four)
        words = (builder.and_(u0, k1), builder.or_(builder.and_(u2, k2), high_bits(u0)),
                 builder.and_(u1, k1), builder.or_(builder.and_(builder.lshr(u2, four), k2), high_bits(u1)))
        vec = ir.Constant(ir.VectorType(_I32, 4), ir.Undefined)
        for k, w in enumerate(words):
            vec = builder.insert_element(vec, w, ir.Constant(_I32, k))
        return builder.zext(builder.bitcast(vec, ir.VectorType(ir.IntType(8), 16)), _V16x16)
    return I16X16(ary, off), codegen


@intrinsic
def i8_scales(typingctx, ary, off):
    """The 16 int8 scales at ary[off:] (Q6_K) as int16 lanes."""
    def codegen(context, builder, sig, args):
        return builder.sext(_bytes_at(context, builder, sig.args[0], args[0], args[1], 16), _V16x16)
    return I16X16(ary, off), codegen


@intrinsic
def kdot(typingctx, acc, w, xs, off, sc, j):
    """acc + Σ-pairs of w·xs[off:off+32] times lane j of sc: one 32-quant sub-block with one scale."""
    def codegen(context, builder, sig, args):
        x = _bytes_at(context, builder, sig.args[2], args[2], args[3], 32)
        s = _splat(builder, builder.extract_element(args[4], builder.trunc(args[5], _I32)), _V16x16)
        return _madd(builder, args[0], args[1], x, s)
    return I32X8(acc, w, xs, off, sc, j), codegen


@intrinsic
def kdot2(typingctx, acc, w, xs, off, sc, j):
    """kdot with lane j of sc on the first 16 quants and lane j + 1 on the last 16 (16-value sub-blocks)."""
    def codegen(context, builder, sig, args):
        x = _bytes_at(context, builder, sig.args[2], args[2], args[3], 32)
        k = builder.trunc(args[5], _I32)
        a = _splat(builder, builder.extract_element(args[4], k), _V16x16)
        b = _splat(builder, builder.extract_element(args[4], builder.add(k, ir.Constant(_I32, 1))), _V16x16)
        s = builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_I32, 16), list(range(8)) + list(range(24, 32))))
        return _madd(builder, args[0], args[1], x, s)
    return I32X8(acc, w, xs, off, sc, j), codegen


@intrinsic
def kdot_v(typingctx, acc, w, xs, off, sc):
    """kdot with a ready scale vector sc (int16 per quant pair): one load serves several activation vectors."""
    def codegen(context, builder, sig, args):
        x = _bytes_at(context, builder, sig.args[2], args[2], args[3], 32)
        return _madd(builder, args[0], args[1], x, args[4])
    return I32X8(acc, w, xs, off, sc), codegen


@intrinsic
def load_i16(typingctx, ary, idx):
    """<16 x int16> from ary[idx:idx+16] of a 1-D int16 array: a super-block's 16 mins."""
    def codegen(context, builder, sig, args):
        return _i16_at(context, builder, sig.args[0], args[0], args[1], 16)
    return I16X16(ary, idx), codegen


@intrinsic
def pair_scales(typingctx, ary, idx):
    """<ary[idx] x 8, ary[idx + 1] x 8> from a 1-D int16 array: the scales of one 32-quant group."""
    def codegen(context, builder, sig, args):
        two = _i16_at(context, builder, sig.args[0], args[0], args[1], 2)
        return builder.shuffle_vector(two, two, ir.Constant(ir.VectorType(_I32, 16), [0] * 8 + [1] * 8))
    return I16X16(ary, idx), codegen


def _pmaddwd(builder, a, b):
    return _call(builder, "llvm.x86.avx2.pmadd.wd", _V32x8, [a, b])


@intrinsic
def mins_lanes(typingctx, sc, bs, idx):
    """Lane k = m_k·(bs[idx + 2k] + bs[idx + 2k + 1]): the 8 mins of k4_scales (one per 32 values)
    against a super-block's 16 activation sums; the same lanes as offs_lanes on per-16 mins."""
    def codegen(context, builder, sig, args):
        mins = _lanes(builder, args[0], [8 + k // 2 for k in range(16)])
        return _pmaddwd(builder, mins, _i16_at(context, builder, sig.args[1], args[1], args[2], 16))
    return I32X8(sc, bs, idx), codegen


@intrinsic
def offs_lanes(typingctx, sc, bs, idx, shift):
    """Lane k = Σ_{h<2} (sc[2k + h] << shift)·bs[idx + 2k + h]: per-16 scales or mins against a
    super-block's 16 activation sums (shift 5: Q6_K's offset of 32)."""
    def codegen(context, builder, sig, args):
        sh = _splat(builder, builder.trunc(args[3], _I16), _V16x16)
        return _pmaddwd(builder, builder.shl(args[0], sh), _i16_at(context, builder, sig.args[1], args[1], args[2], 16))
    return I32X8(sc, bs, idx, shift), codegen


@intrinsic
def or_shl2(typingctx, lo, hi):
    """lo | hi << 2, lane-wise: joins two low bits and a third bit into one quant (Q3_K)."""
    def codegen(context, builder, sig, args):
        return builder.or_(args[0], builder.shl(args[1], ir.Constant(args[1].type, [2] * 32)))
    return lo(lo, hi), codegen
