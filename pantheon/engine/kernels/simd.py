"""256-bit LLVM vector values and the VNNI byte dot product (vpdpbusd) as numba intrinsics.

LLVM never emits vpdpbusd from numba integer loops, and it is the instruction that lets llama.cpp
multiply 32 quants by 32 int8 activations in one step (kernels.vnni: AVX2's sequence on hosts
without it). These intrinsics hand numba code vector
values (a numba type whose LLVM model is a <N x T> vector), so kernels stay Python loops while
the inner arithmetic is the exact instruction sequence llama.cpp's AVX2/VNNI path uses.
"""

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

from pantheon.engine.kernels.vnni import dpbusd

_I8, _I32, _F32 = ir.IntType(8), ir.IntType(32), ir.FloatType()


class Vec(types.Type):
    """A 256-bit vector of `count` elements of `kind` ('i8', 'i16', 'i32' or 'f32')."""

    def __init__(self, kind, count):
        self.kind, self.count = kind, count
        super().__init__(name=f"vec_{kind}x{count}")


@register_model(Vec)
class _VecModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        elem = {"i8": _I8, "u8": _I8, "i16": ir.IntType(16), "i32": _I32, "u32": _I32, "f32": _F32}[fe_type.kind]
        super().__init__(dmm, fe_type, ir.VectorType(elem, fe_type.count))


I8X32, I32X8, F32X8, F32X4 = Vec("i8", 32), Vec("i32", 8), Vec("f32", 8), Vec("f32", 4)
# 32 bytes of any unsigned value (Q8_0's q + 128): `dot4` takes the form that is exact for them (vnni.dpbusd's
# `wide`); I8X32 quants, the usual kind, are below 128.
U8X32 = Vec("u8", 32)
_V8, _V32, _VF, _VF4 = ir.VectorType(_I8, 32), ir.VectorType(_I32, 8), ir.VectorType(_F32, 8), ir.VectorType(_F32, 4)


def _bytes_at(context, builder, aryty, ary, off, count):
    """<count x i8> loaded (unaligned) from byte `off` of a 1-D uint8/int8 array."""
    data = context.make_array(aryty)(context, builder, ary).data
    ptr = builder.gep(data, [off])
    return builder.load(builder.bitcast(ptr, ir.VectorType(_I8, count).as_pointer()), align=1)


def _fma8(builder, a, b, acc):
    """fma(a, b, acc) on <8 x float>: an explicit call, so no fastmath reassociation of the running sums."""
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VF, [_VF, _VF, _VF]), "llvm.fma.v8f32")
    return builder.call(fn, [a, b, acc])


def _splat(builder, value, vty):
    undef = ir.Constant(vty, ir.Undefined)
    one = builder.insert_element(undef, value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(one, undef, ir.Constant(ir.VectorType(_I32, vty.count), [0] * vty.count))


@intrinsic
def bits32(typingctx, ary, off, shift, mask):
    """(32 bytes at ary[off:] >> shift) & mask, lane-wise: one nibble or bit field of 32 quants."""
    def codegen(context, builder, sig, args):
        v = _bytes_at(context, builder, sig.args[0], args[0], args[1], 32)
        sh = _splat(builder, builder.trunc(args[2], _I8), _V8)
        return builder.and_(builder.lshr(v, sh), _splat(builder, builder.trunc(args[3], _I8), _V8))
    return I8X32(ary, off, shift, mask), codegen


@intrinsic
def half_at(typingctx, ary, off):
    """float32 of the little-endian fp16 at byte `off` of a 1-D uint8 array: one load and one vcvtph2ps."""
    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        ptr = builder.bitcast(builder.gep(data, [args[1]]), ir.HalfType().as_pointer())
        return builder.fpext(builder.load(ptr, align=1), _F32)
    return types.float32(ary, off), codegen


# How far ahead of the block being read a kernel asks for weight bytes. Decode streams every weight
# from DRAM once; without a software prefetch the Q4_0 1-vector kernel waited on memory for more than
# half its time (0.5-0.8 ms for 5632x2048 vs 0.23 ms from cache; 0.22-0.25 ms with 4096 bytes ahead).
PREFETCH_BYTES = 4096


def _prefetcher(locality, doc):
    """A prefetch intrinsic (ary, off): ask for the cache line holding element `off` of a 1-D array's data
    (a byte offset for the uint8 weights, a float16 index for the KV caches' uint16 bits), for reading
    soon, into the cache levels `locality` names (3: all, L1 included; 2: L2 and out). `off` may lie past
    the array's end (the next rows of a weight, or nothing): a prefetch never faults."""
    def typer(typingctx, ary, off):
        def codegen(context, builder, sig, args):
            data = context.make_array(sig.args[0])(context, builder, args[0]).data
            ptr = builder.bitcast(builder.gep(data, [args[1]]), ir.IntType(8).as_pointer())
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [ptr.type, _I32, _I32, _I32]), "llvm.prefetch.p0i8")
            builder.call(fn, [ptr, ir.Constant(_I32, 0), ir.Constant(_I32, locality), ir.Constant(_I32, 1)])
            return context.get_dummy_value()
        return types.none(ary, off), codegen
    typer.__name__, typer.__doc__ = doc.split(":")[0], doc
    return intrinsic(typer)


prefetch = _prefetcher(3, "prefetch: into every cache level; rows read soon by this core.")
prefetch_l2 = _prefetcher(2, "prefetch_l2: into L2, not L1; a stream far ahead, which L1 would evict.")


@intrinsic
def load32(typingctx, ary, off):
    """The 32 bytes at ary[off:] as a vector, for several bit fields cut from one load (`field`)."""
    def codegen(context, builder, sig, args):
        return _bytes_at(context, builder, sig.args[0], args[0], args[1], 32)
    return I8X32(ary, off), codegen


@intrinsic
def store32(typingctx, ary, off, v):
    """Store the 32 lanes of v at ary[off:] (unaligned): unpacked quants into a kernel's scratch."""
    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        ptr = builder.bitcast(builder.gep(data, [args[1]]), _V8.as_pointer())
        builder.store(args[2], ptr, align=1)
        return context.get_dummy_value()
    return types.none(ary, off, v), codegen


@intrinsic
def store8(typingctx, ary, idx, v):
    """Store the 8 float32 lanes of v at ary[idx:] of a 1-D float32 array (a tile's scale table)."""
    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        builder.store(args[2], builder.bitcast(builder.gep(data, [args[1]]), _VF.as_pointer()), align=4)
        return context.get_dummy_value()
    return types.none(ary, idx, v), codegen


@intrinsic
def field(typingctx, v, shift, mask):
    """(v >> shift) & mask, lane-wise, on 32 loaded bytes: `bits32` without the load."""
    def codegen(context, builder, sig, args):
        sh = _splat(builder, builder.trunc(args[1], _I8), _V8)
        return builder.and_(builder.lshr(args[0], sh), _splat(builder, builder.trunc(args[2], _I8), _V8))
    return I8X32(v, shift, mask), codegen


@intrinsic
def nibbles16(typingctx, ary, off):
    """The 32 quants packed in the 16 bytes at ary[off:]: low nibbles first, then high (Q4_0's order)."""
    def codegen(context, builder, sig, args):
        v = _bytes_at(context, builder, sig.args[0], args[0], args[1], 16)
        v16 = ir.VectorType(_I8, 16)
        lo = builder.and_(v, ir.Constant(v16, [15] * 16))
        hi = builder.lshr(v, ir.Constant(v16, [4] * 16))
        return builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(_I32, 32), list(range(32))))
    return I8X32(ary, off), codegen


@intrinsic
def or_shl4(typingctx, lo, hi):
    """lo | hi << 4, lane-wise: joins a nibble and its upper bits into one quant (Q6_K)."""
    def codegen(context, builder, sig, args):
        return builder.or_(args[0], builder.shl(args[1], ir.Constant(_V8, [4] * 32)))
    return I8X32(lo, hi), codegen


@intrinsic
def flip_sign(typingctx, v):
    """v xor 0x80: int8 q as the unsigned byte q + 128, so vpdpbusd can take it as its unsigned side."""
    def codegen(context, builder, sig, args):
        return builder.xor(args[0], ir.Constant(_V8, [0x80 - 256] * 32))
    return U8X32(v), codegen


@intrinsic
def dot4(typingctx, u, s):
    """vpdpbusd from zero: lane k = Σ_{j<4} u[4k+j]·s[4k+j], u unsigned bytes (U8X32: any, else below
    128), s signed bytes."""
    def codegen(context, builder, sig, args):
        return dpbusd(builder, ir.Constant(_V32, [0] * 8), args[0], args[1], sig.args[0] == U8X32)
    return I32X8(u, s), codegen


@intrinsic
def fzero(typingctx):
    """An all-zero float32 lane accumulator."""
    def codegen(context, builder, sig, args):
        return ir.Constant(_VF, [0.0] * 8)
    return F32X8(), codegen


@intrinsic
def fma_scaled(typingctx, acc, dots, s):
    """acc + float(dots)·s: scales one block's integer dot lanes into the float accumulator."""
    def codegen(context, builder, sig, args):
        f = builder.sitofp(args[1], _VF)
        return _fma8(builder, f, _splat(builder, args[2], _VF), args[0])
    return F32X8(acc, dots, types.float32), codegen


@intrinsic
def hsum(typingctx, acc):
    """Σ of the 8 float32 lanes."""
    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_F32, [_F32, _VF]),
                                            "llvm.vector.reduce.fadd.v8f32")
        return builder.call(fn, [ir.Constant(_F32, 0.0), args[0]])
    return types.float32(acc), codegen


@intrinsic
def mul(typingctx, a, b):
    """a·b as one plain fmul: in kernels compiled without fastmath, the 1-, 4- and 8-vector kernels
    then round each weight-times-activation scale identically."""
    def codegen(context, builder, sig, args):
        return builder.fmul(args[0], args[1])
    return types.float32(types.float32, types.float32), codegen


@intrinsic
def fmadd(typingctx, acc, a, b):
    """fma(a, b, acc) with one rounding, as an explicit call: the 1-, 4- and 8-vector kernels then build
    their running sums identically (their outputs must match to the bit)."""
    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_F32, [_F32, _F32, _F32]), "llvm.fma.f32")
        return builder.call(fn, [args[1], args[2], args[0]])
    return types.float32(types.float32, types.float32, types.float32), codegen


@intrinsic
def fzero4(typingctx):
    """An all-zero <4 x float32>."""
    def codegen(context, builder, sig, args):
        return ir.Constant(_VF4, [0.0] * 4)
    return F32X4(), codegen


@intrinsic
def lane(typingctx, v, k):
    """Lane k of a float vector."""
    def codegen(context, builder, sig, args):
        return builder.extract_element(args[0], builder.trunc(args[1], _I32))
    return types.float32(v, k), codegen
