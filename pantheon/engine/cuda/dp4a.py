"""dp4a, the int8 dot-product-accumulate instruction: PTX on a GPU, the same arithmetic in Python in numba's simulator.

dp4a(a, b, c) = c + Σ_k a_k · b_k over the four signed bytes a_k, b_k of the 32-bit words a and b (byte k
is bits 8k..8k+7). numba has no binding for it, so on a GPU it is one inline PTX instruction
(`dp4a.s32.s32`, sm_61 and later); integer arguments of any width are truncated to their low 32 bits
first, as the instruction reads registers. The simulator runs Python, where inline PTX cannot run: it
gets a device function computing the same sum.
"""

import struct

from llvmlite import ir
from numba import config, cuda

try:
    from numba.cuda import types
    from numba.cuda.extending import intrinsic
except ImportError:  # a numba-cuda from before it carried its own types and extension API: numba's serve CUDA
    from numba import types
    from numba.core.extending import intrinsic

_WORD, _BYTES = struct.Struct("<I"), struct.Struct("<4b")


def _dp4a_python(a, b, c):
    """c + Σ_k a_k · b_k over the signed bytes of a and b (what the PTX instruction computes)."""
    x = _BYTES.unpack(_WORD.pack(int(a) & 0xFFFFFFFF))  # the low 32 bits as four signed bytes, byte 0 first
    y = _BYTES.unpack(_WORD.pack(int(b) & 0xFFFFFFFF))
    return int(c) + x[0] * y[0] + x[1] * y[1] + x[2] * y[2] + x[3] * y[3]  # callers' sums stay inside int32


@intrinsic
def _dp4a_ptx(typingctx, a, b, c):
    """The PTX instruction, for numba targeting a real GPU."""
    if not all(isinstance(t, types.Integer) for t in (a, b, c)):
        return None  # numba reports a typing error naming the argument types
    sig = types.int32(a, b, c)

    def codegen(context, builder, sig, args):
        words = [context.cast(builder, v, t, types.int32) for v, t in zip(args, sig.args)]
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32)] * 3)
        return builder.call(ir.InlineAsm(fnty, "dp4a.s32.s32 $0, $1, $2, $3;", "=r,r,r,r"), words)

    return sig, codegen


dp4a = cuda.jit(device=True, inline=True)(_dp4a_python) if config.ENABLE_CUDASIM else _dp4a_ptx
