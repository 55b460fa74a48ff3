"""vpdpbusd and vpdpwssd as this host runs them: AVX512-VNNI's instruction, else AVX2's exact sequence.

The int8 kernels are written against VNNI's two dot instructions. A CPU without AVX512-VNNI (AMD Zen 2
and Zen 3, Intel before Ice Lake) has AVX2's vpmaddubsw (byte pairs to int16, saturating) and
vpmaddwd (int16 pairs to int32), which is what llama.cpp's AVX2 kernels use: the same integer sums
when no int16 pair sum saturates. Each intrinsic picks its form when numba compiles it, so one kernel
source serves both hosts with bit-equal results, and numba's cache (keyed by the host CPU) keeps the
two apart. Vectors wider than 256 bits are cut into 256-bit pieces, as LLVM does for every other
operation on an AVX2 host.
"""

import functools

import llvmlite.binding as llb
from llvmlite import ir
from numba.core import cgutils

_I8, _I16, _I32 = ir.IntType(8), ir.IntType(16), ir.IntType(32)
_V32B, _V16H, _V8I = ir.VectorType(_I8, 32), ir.VectorType(_I16, 16), ir.VectorType(_I32, 8)


@functools.cache
def has_vnni():
    """True when the host runs 256- and 512-bit vpdpbusd (AVX512-VNNI with AVX512-VL)."""
    feats = llb.get_host_cpu_features()
    return bool(feats.get("avx512vnni") and feats.get("avx512vl"))


@functools.cache
def has_int8_dots():
    """True when the int8 kernels run here: with VNNI, or with AVX2's sequence in its place."""
    return has_vnni() or bool(llb.get_host_cpu_features().get("avx2"))


def _call(builder, name, ret, args):
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ret, [a.type for a in args]), name)
    return builder.call(fn, args)


def _pieces(builder, v):
    """v cut into 256-bit vectors, lowest lanes first."""
    per = 256 // v.type.element.width
    if v.type.count == per:
        return [v]
    idx = ir.VectorType(_I32, per)
    return [builder.shuffle_vector(v, v, ir.Constant(idx, list(range(k, k + per))))
            for k in range(0, v.type.count, per)]


def _joined(builder, parts):
    """The 256-bit vectors `parts` as one vector, the first in the lowest lanes."""
    while len(parts) > 1:
        count = parts[0].type.count * 2
        idx = ir.Constant(ir.VectorType(_I32, count), list(range(count)))
        parts = [builder.shuffle_vector(parts[k], parts[k + 1], idx) for k in range(0, len(parts), 2)]
    return parts[0]


def _splat16(value):
    return ir.Constant(_V16H, [value] * 16)


def _madd(builder, u, s, scale):
    """vpmaddwd(vpmaddubsw(u, s), scale in every int16 lane): 4 byte products per int32 lane, times scale."""
    pairs = _call(builder, "llvm.x86.avx2.pmadd.ub.sw", _V16H, [u, s])
    return _call(builder, "llvm.x86.avx2.pmadd.wd", _V8I, [pairs, _splat16(scale)])


def _dots_avx2(builder, u, s, wide):
    """Σ_{j<4} u[4k+j]·s[4k+j] per int32 lane k of 256 bits. A byte pair's sum is at most 2·127·128 in
    magnitude while u < 128, so vpmaddubsw does not saturate; `wide` bytes (any u, Q8_0's q + 128) are
    split into their low 7 bits and their top bit, whose products vpmaddwd scales by 128."""
    if not wide:
        return _madd(builder, u, s, 1)
    low = builder.and_(u, ir.Constant(_V32B, [0x7F] * 32))
    top = builder.lshr(u, ir.Constant(_V32B, [7] * 32))
    return builder.add(_madd(builder, low, s, 1), _madd(builder, top, s, 128))


def dpbusd(builder, acc, u, s, wide):
    """acc + Σ_{j<4} u[4k+j]·s[4k+j] per int32 lane k (u unsigned bytes, s signed), as vpdpbusd: for
    <8 x i32> or <16 x i32> acc and byte vectors of 4x its lanes. Without `wide` every u must be below
    128 (nibbles, K-quant values), which AVX2's form relies on."""
    if has_vnni():
        return _call(builder, f"llvm.x86.avx512.vpdpbusd.{acc.type.count * 32}", acc.type, [acc, u, s])
    parts = [_dots_avx2(builder, a, b, wide) for a, b in zip(_pieces(builder, u), _pieces(builder, s))]
    return builder.add(acc, _joined(builder, parts))


def signed_dots(builder, acc, u, s):
    """acc + Σ_{j<4} (u[4k+j] − 128)·s[4k+j] per int32 lane on AVX2, for Q8_0's q + 128 bytes u and
    activations s in −127..127: llama.cpp's AVX2 form. vpsignb moves q's sign onto s, so |q| (at most
    128) is vpmaddubsw's unsigned side and a pair stays within 2·128·127, then one vpmaddwd by 1: two
    multiplies a word where `dpbusd`'s wide split takes four. VNNI hosts keep vpdpbusd on u (with the
    −128·Σs term at the block's start), so this is AVX2's only."""
    flip = ir.Constant(_V32B, [-128] * 32)
    parts = []
    for a, b in zip(_pieces(builder, u), _pieces(builder, s)):
        q = builder.xor(a, flip)  # the signed quants
        mag = _call(builder, "llvm.x86.avx2.psign.b", _V32B, [q, q])  # |q|, 128 read unsigned
        sy = _call(builder, "llvm.x86.avx2.psign.b", _V32B, [b, q])  # s with q's sign
        parts.append(_madd(builder, mag, sy, 1))
    return builder.add(acc, _joined(builder, parts))


def pairs(builder, acc, u, s):
    """acc plus u·s's byte products, unscaled, in the form `scale_pairs` finishes: VNNI's vpdpbusd int32
    lanes, or AVX2's vpmaddubsw pair sums added in int16 (llama.cpp's AVX2 form: no vpmaddwd per word).
    Exact while each int16 sum stays in range: `pair_words` words of u < 2^bits at most between
    `scale_pairs` calls. u and s as in `dpbusd` without `wide`; acc <16 x i32> (its lanes' meaning
    differs by host: only `scale_pairs` reads it)."""
    if has_vnni():
        return dpbusd(builder, acc, u, s, False)
    v32h = ir.VectorType(_I16, 32)
    parts = [_call(builder, "llvm.x86.avx2.pmadd.ub.sw", _V16H, [a, b])
             for a, b in zip(_pieces(builder, u), _pieces(builder, s))]
    return builder.bitcast(builder.add(builder.bitcast(acc, v32h), _joined(builder, parts)), acc.type)


def scale_pairs(builder, acc, sums, scales):
    """acc + scales·(the dot that `pairs` accumulated in sums) per int32 lane, scales int32 lanes in int16
    range: vpmulld after VNNI, one vpmaddwd by each scale in both int16 halves of its lane on AVX2."""
    if has_vnni():
        return builder.add(acc, builder.mul(sums, scales))
    lanes = ir.VectorType(_I32, scales.type.count)
    low = builder.and_(scales, ir.Constant(lanes, [0xFFFF] * scales.type.count))
    dup = builder.or_(low, builder.shl(scales, ir.Constant(lanes, [16] * scales.type.count)))
    v32h = ir.VectorType(_I16, 2 * scales.type.count)
    parts = [_call(builder, "llvm.x86.avx2.pmadd.wd", _V8I, [x, y]) for x, y in
             zip(_pieces(builder, builder.bitcast(sums, v32h)), _pieces(builder, builder.bitcast(dup, v32h)))]
    return builder.add(acc, _joined(builder, parts))


def pair_words(bits):
    """How many 4-byte words of u < 2^bits `pairs` may take between two `scale_pairs`: on AVX2, while
    k·2·(2^bits − 1)·128 ≤ 32767 (Q4_K's nibbles: 8, a sub-block; 5 bits: 4; Q6_K: 2); after VNNI, 8."""
    return 8 if has_vnni() else min(8, 32767 // (2 * ((1 << bits) - 1) * 128))


def dpwssd(builder, acc, a, b):
    """acc + a[2k]·b[2k] + a[2k+1]·b[2k+1] per int32 lane k (int16 a, b), as vpdpwssd: both wrap alike."""
    if has_vnni():
        return _call(builder, f"llvm.x86.avx512.vpdpwssd.{acc.type.count * 32}", acc.type, [acc, a, b])
    parts = [_call(builder, "llvm.x86.avx2.pmadd.wd", _V8I, [x, y])
             for x, y in zip(_pieces(builder, a), _pieces(builder, b))]
    return builder.add(acc, _joined(builder, parts))
