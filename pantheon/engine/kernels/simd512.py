"""Row-lane intrinsics: one int32 / float32 lane per weight row, so a block's integer dot reaches float once.

llama.cpp's repacked gemm kernels interleave the quants of 8 or 16 rows so that one vpdpbusd
advances every row of a register by 4 quants against 4 activation bytes broadcast to all lanes.
After 8 such steps lane r holds row r's whole 32-quant block dot, and one convert and one fma serve
all rows: a third of the vector work of keeping 8 partial lanes per (row, vector). The tiles kernels
use 512-bit registers (16 rows); the decode kernels, which read rows in place, reduce 8 rows' 256-bit
partial dots (`reduce8`) into the same row lanes, so every kernel ends each block with the same
float operations and a row's result does not depend on the batch it ran in.
"""

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from pantheon.engine.kernels.simd import F32X8, I32X8, Vec, _splat
from pantheon.engine.kernels.vnni import dpwssd

_I8, _I32, _F32 = ir.IntType(8), ir.IntType(32), ir.FloatType()
_V16I, _V16F, _V64B = ir.VectorType(_I32, 16), ir.VectorType(_F32, 16), ir.VectorType(_I8, 64)
_V8I, _V8F = ir.VectorType(_I32, 8), ir.VectorType(_F32, 8)
I32X16, F32X16 = Vec("i32", 16), Vec("f32", 16)
# 16 quant words of any bytes (Q8_0's q + 128), for `simd_lanes.qdot16`'s form exact on them; I32X16 words
# are below 128.
U32X16 = Vec("u32", 16)


def wide_bytes(aryty):
    """True for an int8 quant array: its bytes are any unsigned value (Q8_0's q + 128 as int8 bit
    patterns), where a uint8 one's are below 128 (nibbles, K-quant values): vnni.dpbusd's `wide`."""
    return aryty.dtype == types.int8


def _ptr(context, builder, aryty, ary, idx, elem):
    """Pointer to element `idx` of a 1-D array's data, cast to `elem`*."""
    data = context.make_array(aryty)(context, builder, ary).data
    return builder.bitcast(builder.gep(data, [idx]), elem.as_pointer())


def _as_i32(builder, v):
    """An integer value of any width as i32 (numba widens int32 products to int64)."""
    if v.type.width > 32:
        return builder.trunc(v, _I32)
    return v if v.type.width == 32 else builder.sext(v, _I32)


def _call(builder, name, ret, args, flags=()):
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ret, [a.type for a in args]), name)
    return builder.call(fn, args, fastmath=flags)


@intrinsic
def ibcast16(typingctx, v):
    """<16 x i32> with every lane v: the block's zero-point term, the starting value of its dots."""
    def codegen(context, builder, sig, args):
        return _splat(builder, _as_i32(builder, args[0]), _V16I)
    return I32X16(v), codegen


def _fma_rows(builder, acc, dots, d, xd, vf, negate=False):
    """acc + float(dots)·(d·xd) lane-wise (negate: ·(−(d·xd)), a K-quant's mins term): the product
    rounded once, negated after rounding, then one fused multiply-add."""
    s = builder.fmul(d, _splat(builder, xd, vf))
    s = builder.fneg(s) if negate else s
    return _call(builder, f"llvm.fma.v{vf.count}f32", vf, [builder.sitofp(dots, vf), s, acc])


def _fma_table(negate):
    """fma16 / fnma16: `_fma_rows` with 16 rows' d loaded from a float32 table."""
    def typer(typingctx, acc, dots, ds, idx, xd):
        def codegen(context, builder, sig, args):
            d = builder.load(_ptr(context, builder, sig.args[2], args[2], args[3], _V16F), align=4)
            return _fma_rows(builder, args[0], args[1], d, args[4], _V16F, negate)
        return F32X16(acc, dots, ds, idx, types.float32), codegen
    typer.__name__ = "fnma16" if negate else "fma16"
    return intrinsic(typer)


# fma16(acc, dots, ds, idx, xd) = acc + float(dots)·(ds[idx:idx+16]·xd): 16 rows' block dots scaled by
# their d times the vector's; fnma16 the same with the product negated (the mins term of 16 rows).
fma16, fnma16 = _fma_table(False), _fma_table(True)


@intrinsic
def fzero16(typingctx):
    """An all-zero float32 row-lane accumulator."""
    def codegen(context, builder, sig, args):
        return ir.Constant(_V16F, [0.0] * 16)
    return F32X16(), codegen


@intrinsic
def store16(typingctx, ary, idx, v):
    """ary[idx:idx+16] = v for a 1-D array of v's lanes (float32, or int32 / uint32): 16 rows' results of
    one vector, or 16 rows' quant words or scales into a tile."""
    def codegen(context, builder, sig, args):
        builder.store(args[2], _ptr(context, builder, sig.args[0], args[0], args[1], args[2].type), align=4)
        return context.get_dummy_value()
    return types.none(ary, idx, v), codegen


@intrinsic
def scatter_words(typingctx, ary, base, stride, v):
    """ary[base + k·stride] = 32-bit word k of the 32 bytes v: one row's block into the interleaved tile."""
    def codegen(context, builder, sig, args):
        words = builder.bitcast(args[3], _V8I)
        for k in range(8):
            idx = builder.add(args[1], builder.mul(args[2], ir.Constant(args[2].type, k)))
            builder.store(builder.extract_element(words, ir.Constant(_I32, k)),
                          _ptr(context, builder, sig.args[0], args[0], idx, _I32), align=4)
        return context.get_dummy_value()
    return types.none(ary, base, stride, v), codegen


def _pairs(builder, a, b, width):
    """Lane-pair sums at stride `width`: lanes [a's sums, b's sums] interleaved in blocks of `width`."""
    idx_a, idx_b = [], []
    for k in range(8):
        blk, pos = divmod(k, 2 * width)
        src = 0 if pos < width else 8
        base = blk * 2 * width + pos % width
        idx_a.append(src + base)
        idx_b.append(src + base + width)
    mask = ir.VectorType(_I32, 8)
    return builder.add(builder.shuffle_vector(a, b, ir.Constant(mask, idx_a)),
                       builder.shuffle_vector(a, b, ir.Constant(mask, idx_b)))


@intrinsic
def reduce8(typingctx, v0, v1, v2, v3, v4, v5, v6, v7):
    """<8 x i32> whose lane r is the sum of the 8 lanes of v_r: 8 rows' partial dots into row lanes."""
    def codegen(context, builder, sig, args):
        level = list(args)
        for width in (1, 2, 4):
            level = [_pairs(builder, level[k], level[k + 1], width) for k in range(0, len(level), 2)]
        return level[0]
    return I32X8(v0, v1, v2, v3, v4, v5, v6, v7), codegen


@intrinsic
def pack8(typingctx, a0, a1, a2, a3, a4, a5, a6, a7):
    """<a0, ..., a7> as float32 lanes: 8 rows' block scales."""
    def codegen(context, builder, sig, args):
        v = ir.Constant(_V8F, ir.Undefined)
        for k, a in enumerate(args):
            v = builder.insert_element(v, a, ir.Constant(_I32, k))
        return v
    return F32X8(*(types.float32,) * 8), codegen


@intrinsic
def fma8(typingctx, acc, dots, zero, d, xd):
    """acc + float(dots + zero)·(d·xd) on 8 row lanes: `fma16`'s operations for rows read in place."""
    def codegen(context, builder, sig, args):
        z = _splat(builder, _as_i32(builder, args[2]), _V8I)
        return _fma_rows(builder, args[0], builder.add(args[1], z), args[3], args[4], _V8F)
    return F32X8(acc, dots, zero, d, types.float32), codegen


def reduction(name, llvm_name, scalar, doc, flags=()):
    """An intrinsic folding one vector's lanes to a scalar (numba type `scalar`) by LLVM's `llvm_name`,
    with the fast-math `flags` given (only ones that cannot change its result for its callers)."""
    ret = _F32 if scalar == types.float32 else ir.IntType(scalar.bitwidth)

    def typer(typingctx, v):
        def codegen(context, builder, sig, args):
            return _call(builder, llvm_name, ret, [args[0]], flags)
        return scalar(v), codegen
    typer.__name__, typer.__doc__ = name, doc
    return intrinsic(typer)


isum8 = reduction("isum8", "llvm.vector.reduce.add.v8i32", types.int32,
                  "Σ of the 8 int32 lanes (exact): one row's block dot when fewer than 8 rows remain.")


@intrinsic
def izero16(typingctx):
    """An all-zero int32 row-lane accumulator."""
    def codegen(context, builder, sig, args):
        return ir.Constant(_V16I, [0] * 16)
    return I32X16(), codegen


@intrinsic
def mins16(typingctx, mn, idx, step, bs, bidx):
    """Σ_j over 16 per-16 mins mn[idx + j·step :][:16] (int32 row lanes) times the activation sums
    bs[bidx + j] broadcast (vpdpwssd on the int16 pair holding it, the min in the matching half and 0
    in the other): 16 rows' Σ_j m_j·Σx_j, exact."""
    def codegen(context, builder, sig, args):
        v32 = ir.VectorType(ir.IntType(16), 32)
        low, sixteen = ir.Constant(_V16I, [0xFFFF] * 16), ir.Constant(_V16I, [16] * 16)
        acc = ir.Constant(_V16I, [0] * 16)
        for j in range(16):
            at = builder.add(args[1], builder.mul(args[2], ir.Constant(args[2].type, j)))
            m = builder.load(_ptr(context, builder, sig.args[0], args[0], at, _V16I), align=4)
            m = builder.and_(m, low) if j % 2 == 0 else builder.shl(m, sixteen)
            pair = builder.load(_ptr(context, builder, sig.args[3], args[3],
                                     builder.add(args[4], ir.Constant(args[4].type, j - j % 2)), _I32), align=2)
            x = builder.bitcast(_splat(builder, pair, _V16I), v32)
            acc = dpwssd(builder, acc, builder.bitcast(m, v32), x)
        return acc
    return I32X16(mn, idx, step, bs, bidx), codegen


def _rows_words(context, builder, aryty, ary, r0, o, stride, nwords):
    """The `nwords` u32 words at byte o of rows r0..r0+15 of a 2-D uint8 array, row-major: <16·nwords x i32>."""
    data = context.make_array(aryty)(context, builder, ary).data
    vty = ir.VectorType(_I32, nwords)
    rows = []
    for k in range(16):
        off = builder.add(builder.mul(builder.add(r0, ir.Constant(r0.type, k)), stride), o)
        rows.append(builder.load(builder.bitcast(builder.gep(data, [off]), vty.as_pointer()), align=1))
    while len(rows) > 1:  # concatenate pairwise: row k's words land at k·nwords
        width = rows[0].type.count
        mask = ir.Constant(ir.VectorType(_I32, 2 * width), list(range(2 * width)))
        rows = [builder.shuffle_vector(rows[k], rows[k + 1], mask) for k in range(0, len(rows), 2)]
    return rows[0]


def _column(builder, words, nwords, j):
    """<16 x i32> of word j of each of the 16 rows in `words`."""
    mask = ir.Constant(ir.VectorType(_I32, 16), [k * nwords + j for k in range(16)])
    return builder.shuffle_vector(words, words, mask)


def _store_at(context, builder, aryty, ary, idx, v):
    builder.store(v, _ptr(context, builder, aryty, ary, idx, v.type), align=4)


def _interleave(name, nwords, skip, op):
    """The intrinsic moving `nwords` quant words per row, `skip` bytes after o, of 16 rows into the
    interleaved tile; op: "nibbles" (low nibbles give groups 0..nwords-1, high nibbles the next
    nwords), "flip" (int8 quants as q + 128, vpdpbusd's unsigned side) or "plain" (bytes as they are)."""
    low, four = [0x0F0F0F0F] * 16, [4] * 16

    def typer(typingctx, raw, r0, o, stride, qt32, dst, gstride):
        def codegen(context, builder, sig, args):
            raw_, r0_, o_, stride_, qt_, dst_, gstride_ = args
            qs = builder.add(o_, ir.Constant(o_.type, skip))
            words = _rows_words(context, builder, sig.args[0], raw_, r0_, qs, stride_, nwords)
            v16 = ir.VectorType(_I32, 16)
            cols = [_column(builder, words, nwords, j) for j in range(nwords)]
            if op == "plain":
                outs = cols
            elif op == "flip":
                outs = [builder.xor(c, ir.Constant(v16, [0x80808080 - 2 ** 32] * 16)) for c in cols]
            else:
                outs = [builder.and_(c, ir.Constant(v16, low)) for c in cols]
                outs += [builder.and_(builder.lshr(c, ir.Constant(v16, four)), ir.Constant(v16, low)) for c in cols]
            for g, v in enumerate(outs):
                idx = builder.add(dst_, builder.mul(gstride_, ir.Constant(gstride_.type, g)))
                _store_at(context, builder, sig.args[4], qt_, idx, v)
            return context.get_dummy_value()
        return types.none(raw, r0, o, stride, qt32, dst, gstride), codegen
    typer.__name__ = name
    return intrinsic(typer)


# interleave_*(raw, r0, o, stride, qt32, dst, gstride): the quants of the blocks at byte o of rows r0..r0+15
# (stride bytes apart) as groups of 16 row words, qt32[dst + g·gstride :][:16] for group g: one transpose
# in registers instead of 8 scattered word stores per row and 32 quants.
# Q4_0 (16 nibble bytes after the fp16 d: 8 groups) and Q8_0 (32 int8 after d: 8 groups).
interleave_q4_0 = _interleave("interleave_q4_0", 4, 2, "nibbles")
interleave_q8_0 = _interleave("interleave_q8_0", 8, 2, "flip")
# 32 unpacked quant bytes at o (K-quants after unpacking to the common form: 8 groups).
interleave_u8 = _interleave("interleave_u8", 8, 0, "plain")
# 32 Q4_K nibble bytes at o: sub-block 2p in the low nibbles (groups 0-7), 2p + 1 in the high (8-15).
interleave_k4 = _interleave("interleave_k4", 8, 0, "nibbles")


@intrinsic
def fma_super4(typingctx, acc, red, d, dm, x0, x1, x2, x3):
    """A K-quant super-block's two fmas for 4 vectors at once (float lanes = vectors): red's lanes 0-3
    are the vectors' integer sums I, lanes 4-7 their M; acc + float(I)·(d·xd), then + float(M)·(−(dm·xd)),
    each lane the operations of a single vector's scalar chain."""
    def codegen(context, builder, sig, args):
        acc, red, d, dm = args[:4]
        v4f = ir.VectorType(_F32, 4)
        xd = ir.Constant(v4f, ir.Undefined)
        for k, x in enumerate(args[4:]):
            xd = builder.insert_element(xd, x, ir.Constant(_I32, k))
        lanes = ir.VectorType(_I32, 4)
        i4 = builder.sitofp(builder.shuffle_vector(red, red, ir.Constant(lanes, [0, 1, 2, 3])), v4f)
        m4 = builder.sitofp(builder.shuffle_vector(red, red, ir.Constant(lanes, [4, 5, 6, 7])), v4f)
        acc = _call(builder, "llvm.fma.v4f32", v4f, [i4, builder.fmul(_splat(builder, d, v4f), xd), acc])
        neg = builder.fneg(builder.fmul(_splat(builder, dm, v4f), xd))
        return _call(builder, "llvm.fma.v4f32", v4f, [m4, neg, acc])
    f4 = Vec("f32", 4)
    return f4(f4, I32X8, types.float32, types.float32, *(types.float32,) * 4), codegen


@intrinsic
def put_k4_scales(typingctx, sc, sv, isv, mn, imn, step):
    """Store k4_scales' lanes (8 scales, then 8 mins of one Q4_K / Q5_K super-block) into row lanes of
    per-16 tables: sv[isv + 2j·step] = scale j (the per-32 kernels read only those), and mn[imn + 2j·step]
    = mn[imn + (2j+1)·step] = min j. No scalar 6-bit decoding per value."""
    def codegen(context, builder, sig, args):
        sc, sv, isv, mn, imn, step = args
        for j in range(8):
            s = builder.sext(builder.extract_element(sc, ir.Constant(_I32, j)), _I32)
            m = builder.sext(builder.extract_element(sc, ir.Constant(_I32, 8 + j)), _I32)
            at = builder.add(isv, builder.mul(step, ir.Constant(step.type, 2 * j)))
            builder.store(s, _ptr(context, builder, sig.args[1], sv, at, _I32), align=4)
            for h in range(2):
                at = builder.add(imn, builder.mul(step, ir.Constant(step.type, 2 * j + h)))
                builder.store(m, _ptr(context, builder, sig.args[3], mn, at, _I32), align=4)
        return context.get_dummy_value()
    return types.none(sc, sv, isv, mn, imn, step), codegen
