"""Float32 lane intrinsics of the attention tiles: one lane per query vector, a key's element broadcast to all.

Every operation is one IEEE instruction per lane (fma rounds once), called explicitly so fastmath
never reassociates a lane's running sum: a query's result is the same instruction sequence whichever
other queries share its register.
"""

from numba import types
from numba.extending import intrinsic

from pantheon.engine.kernels.simd import _splat
from pantheon.engine.kernels.simd512 import F32X16, _F32, _V16F, _call, _ptr


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
