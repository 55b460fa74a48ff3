"""Float32 lane intrinsics: the attention tiles' (one lane per query vector, a key's element broadcast to
all), the activation quantizer's (16 consecutive values of one row) and the 16-bit float weights' (16
float16 or bfloat16 values widened at once).

Every operation is one IEEE instruction per lane (fma rounds once), called explicitly so fastmath
never reassociates a lane's running sum: a query's result is the same instruction sequence whichever
other queries share its register. All are target-independent LLVM IR (no AVX-512 required: LLVM
splits a 16-lane vector into what the host has).
"""

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from pantheon.engine.kernels.jit import inline
from pantheon.engine.kernels.simd import _splat
from pantheon.engine.kernels.simd512 import (F32X16, I32X16, _F32, _I8, _I32, _V16F, _V16I, _call, _ptr, reduction,
                                             store16)


@intrinsic
def fbcast16(typingctx, ary, idx):
    """ary[idx] of a 1-D float32 array in every lane: one key or value element for 16 queries."""
    def codegen(context, builder, sig, args):
        x = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _F32), align=4)
        return _splat(builder, x, _V16F)
    return F32X16(ary, idx), codegen


@intrinsic
def vfma16(typingctx, a, b, acc):
    """a·b + acc lane-wise, rounded once."""
    def codegen(context, builder, sig, args):
        return _call(builder, "llvm.fma.v16f32", _V16F, list(args))
    return F32X16(a, b, acc), codegen


@intrinsic
def vscale16(typingctx, v, s):
    """v·s lane-wise for one float32 s."""
    def codegen(context, builder, sig, args):
        return builder.fmul(args[0], _splat(builder, args[1], _V16F))
    return F32X16(v, types.float32), codegen


def _lanewise(name, emit, doc):
    """A two-operand lane-wise intrinsic whose LLVM instructions are emit(builder, a, b)."""
    def typer(typingctx, a, b):
        def codegen(context, builder, sig, args):
            return emit(builder, args[0], args[1])
        return F32X16(a, b), codegen
    typer.__name__, typer.__doc__ = name, doc
    return intrinsic(typer)


vadd16 = _lanewise("vadd16", lambda b, x, y: b.fadd(x, y), "a + b lane-wise.")
vsub16 = _lanewise("vsub16", lambda b, x, y: b.fsub(x, y), "a − b lane-wise.")
vmax16 = _lanewise("vmax16", lambda b, x, y: b.select(b.fcmp_ordered(">", x, y), x, y),
                   "The larger of a and b lane-wise (b where a is NaN): exact, so a running max's order is free.")


@intrinsic
def vfill16(typingctx, s):
    """One float32 s in every lane."""
    def codegen(context, builder, sig, args):
        return _splat(builder, args[0], _V16F)
    return F32X16(types.float32), codegen


@intrinsic
def vabsmax16(typingctx, m, v):
    """max(m, |v|) lane-wise (m where |v| is NaN): a block's running absolute maximum, exact in any order."""
    def codegen(context, builder, sig, args):
        a = _call(builder, "llvm.fabs.v16f32", _V16F, [args[1]])
        return builder.select(builder.fcmp_ordered(">", a, args[0]), a, args[0])
    return F32X16(m, v), codegen


# nnan: without it LLVM lowers the reduction to 15 serial NaN-checked scalar maxes, about 60 cycles a block
# of the activation quantizer (2.4x its time at 8 rows); with it, a shuffle tree of vmaxps. Callers pass
# NaN-free lanes (vabsmax16 drops NaN) and a max is exact in any order, so the result is unchanged.
hmax16 = reduction("hmax16", "llvm.vector.reduce.fmax.v16f32", types.float32,
                   "The largest of 16 lanes, none of them NaN (nnan lets LLVM use a shuffle tree).", ("nnan",))


@intrinsic
def qround16(typingctx, x, xi, inv, q, qi):
    """rint(x[xi:xi+16]·inv) stored as int8 at q[qi:qi+16] (values within ±127), returned as int32 lanes:
    numpy's rint (half to even) of the same IEEE product, 16 at a time."""
    def codegen(context, builder, sig, args):
        v = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _V16F), align=4)
        r = _call(builder, "llvm.rint.v16f32", _V16F, [builder.fmul(v, _splat(builder, args[2], _V16F))])
        ints = builder.fptosi(r, _V16I)
        out = _ptr(context, builder, sig.args[3], args[3], args[4], ir.VectorType(_I8, 16))
        builder.store(builder.trunc(ints, ir.VectorType(_I8, 16)), out, align=1)
        return ints
    return I32X16(x, xi, types.float32, q, qi), codegen


isum16 = reduction("isum16", "llvm.vector.reduce.add.v16i32", types.int32, "Σ of 16 int32 lanes (exact).")


_HALF = ir.HalfType()
_V16H = ir.VectorType(_HALF, 16)
_V16S = ir.VectorType(ir.IntType(16), 16)


@intrinsic
def hload16(typingctx, ary, idx):
    """ary[idx:idx+16] of a uint16 array holding float16 bits, widened to float32 (exact)."""
    def codegen(context, builder, sig, args):
        h = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _V16H), align=2)
        return builder.fpext(h, _V16F)
    return F32X16(ary, idx), codegen


@intrinsic
def hstore16(typingctx, ary, idx, v):
    """ary[idx:idx+16] of a uint16 array = the float16 bits of v's lanes, rounded to nearest even."""
    def codegen(context, builder, sig, args):
        builder.store(builder.fptrunc(args[2], _V16H), _ptr(context, builder, sig.args[0], args[0], args[1], _V16H),
                      align=2)
        return context.get_dummy_value()
    return types.none(ary, idx, v), codegen


@intrinsic
def bfload16(typingctx, ary, idx):
    """ary[idx:idx+16] of a uint16 array holding bfloat16 bits, widened to float32 (exact: the bits shifted
    into a float32's upper half)."""
    def codegen(context, builder, sig, args):
        h = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _V16S), align=2)
        wide = builder.shl(builder.zext(h, _V16I), ir.Constant(_V16I, [16] * 16))
        return builder.bitcast(wide, _V16F)
    return F32X16(ary, idx), codegen


@intrinsic
def bfload1(typingctx, ary, idx):
    """ary[idx] of a uint16 array holding bfloat16 bits, as float32 (exact)."""
    def codegen(context, builder, sig, args):
        h = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], ir.IntType(16)))
        return builder.bitcast(builder.shl(builder.zext(h, _I32), ir.Constant(_I32, 16)), _F32)
    return types.float32(ary, idx), codegen


@intrinsic
def fsum16(typingctx, v):
    """Σ of 16 float32 lanes in a fixed tree (reassoc lets LLVM pair lanes; the same code every call)."""
    def codegen(context, builder, sig, args):
        return _call(builder, "llvm.vector.reduce.fadd.v16f32", _F32, [ir.Constant(_F32, 0.0), args[0]],
                     ("reassoc",))
    return types.float32(v), codegen


@intrinsic
def hload1(typingctx, ary, idx):
    """ary[idx] of a uint16 array holding float16 bits, as float32."""
    def codegen(context, builder, sig, args):
        return builder.fpext(builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], _HALF)), _F32)
    return types.float32(ary, idx), codegen


@intrinsic
def hstore1(typingctx, ary, idx, x):
    """ary[idx] of a uint16 array = the float16 bits of float32 x, rounded to nearest even."""
    def codegen(context, builder, sig, args):
        builder.store(builder.fptrunc(args[2], _HALF), _ptr(context, builder, sig.args[0], args[0], args[1], _HALF))
        return context.get_dummy_value()
    return types.none(ary, idx, types.float32), codegen


@inline
def widen16(src, o, n, dst):
    """dst[:n] = the float32 values of the float16 bits src[o:o+n] (exact)."""
    for i in range(0, n - n % 16, 16):
        store16(dst, i, hload16(src, o + i))
    for i in range(n - n % 16, n):
        dst[i] = hload1(src, o + i)
