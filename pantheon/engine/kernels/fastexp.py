"""exp in float32 arithmetic that LLVM vectorizes: numba's np.exp is a libm call per element (no SVML).

`expf16` is the same sequence of IEEE operations on 16 lanes, so a lane's bits equal `expf`'s: a caller
may take one value through either (the attention softmax does, by where a position falls in its tile).

Cephes' expf: x = n·ln2 + r with |r| <= ln2/2 (ln2 split in two for an exact n·ln2_hi), e^r from a
degree-7 polynomial, 2^n built in the exponent bits. Relative error under 2e-7 (tests/.../test_fastexp);
llama.cpp's silu and softmax use an approximation of the same kind.
"""

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from pantheon.engine.kernels.jit import inline
from pantheon.engine.kernels.simd import _splat
from pantheon.engine.kernels.simd512 import F32X16, _F32, _I32, _V16F, _V16I, _call

LOG2E = np.float32(1.44269504088896341)
LN2_HI = np.float32(0.693359375)  # 8 significant bits: n·LN2_HI is exact for |n| < 2^15
LN2_LO = np.float32(-2.12194440e-4)
# e^HI rounds to 2^127 at most (n <= 127, a finite exponent); below LO the result would be subnormal
# and is LO's, ~1.2e-38, which every use here (silu's 1 + e^-x, softmax weights) takes as 0.
HI = np.float32(88.02)
LO = np.float32(-87.33)
P = (np.float32(1.9875691500e-4), np.float32(1.3981999507e-3), np.float32(8.3334519073e-3),
     np.float32(4.1665795894e-2), np.float32(1.6666665459e-1), np.float32(5.0000001201e-1))


@intrinsic
def f32_from_bits(typingctx, bits):
    """The float32 whose IEEE bits are the int32 `bits` (a bitcast, which vectorizes)."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


@inline
def expf(x):
    """e^x for a float32 x, clamped to [LO, HI] (above HI: e^HI; NaN stays NaN)."""
    x = min(max(x, LO), HI)
    n = np.floor(x * LOG2E + np.float32(0.5))
    r = x - n * LN2_HI - n * LN2_LO
    p = ((((P[0] * r + P[1]) * r + P[2]) * r + P[3]) * r + P[4]) * r + P[5]
    y = p * r * r + r + np.float32(1.0)
    return y * f32_from_bits((np.int32(n) + np.int32(127)) << np.int32(23))


@intrinsic
def expf16(typingctx, v):
    """`expf` of each of 16 float32 lanes, operation for operation (so bit for bit): LLVM left the scalar
    loop at 8 lanes with spills, ~5 instructions per value, inside the large attention kernel."""
    def codegen(context, builder, sig, args):
        def c(x):
            return _splat(builder, ir.Constant(_F32, float(x)), _V16F)
        x = args[0]
        x = builder.select(builder.fcmp_ordered(">", c(LO), x), c(LO), x)  # max(x, LO), as numba's max
        x = builder.select(builder.fcmp_ordered("<", c(HI), x), c(HI), x)  # min(x, HI)
        n = _call(builder, "llvm.floor.v16f32", _V16F, [builder.fadd(builder.fmul(x, c(LOG2E)), c(0.5))])
        r = builder.fsub(builder.fsub(x, builder.fmul(n, c(LN2_HI))), builder.fmul(n, c(LN2_LO)))
        p = c(P[0])
        for k in P[1:]:
            p = builder.fadd(builder.fmul(p, r), c(k))
        y = builder.fadd(builder.fadd(builder.fmul(builder.fmul(p, r), r), r), c(1.0))
        e = builder.add(builder.fptosi(n, _V16I), _splat(builder, ir.Constant(_I32, 127), _V16I))
        return builder.fmul(y, builder.bitcast(builder.shl(e, _splat(builder, ir.Constant(_I32, 23), _V16I)), _V16F))
    return F32X16(v), codegen
