"""A tile's attention scores with r consecutive head dims per query in a register: 16 // r queries × r dims.

With one dim per lane (r = 1) a decode tile whose kv head serves g < 16 query heads leaves 16 − g lanes
empty in every fma: half of them at g = 8, 15 of 16 without grouping. With r = 16 // g dims per query,
each fma advances all 16 lanes by r dims of g queries against r key elements read once (a 2-, 4-, 8-
or 16-float broadcast, one load), and a fixed tree of lane-pair sums folds each query's r partial sums
into one at the end of the key. r depends only on the model (its grouping and head dim), never on the
tile: a query's chains and fold are the same whichever queries share its register or its step, which
keeps a row's bits independent of its batch. r = 1 is the original one-dim-per-lane loop.
"""

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from pantheon.engine.kernels.jit import inline
from pantheon.engine.kernels.simd512 import F32X16, _F32, _I32, _V16F, _ptr, fzero16
from pantheon.engine.kernels.simd_lanes import fload16
from pantheon.engine.kernels.simd_f32 import vfma16, vscale16

LANES = 16
# Keys advanced together: 8 independent fma chains cover the fma latency.
UNROLL = 8
_IOTA = ir.Constant(ir.VectorType(_I32, LANES), list(range(LANES)))


@inline
def dims_per_lane(g, hd):
    """r for a model whose kv heads serve g query heads of hd dims: the largest power of two with r·g <= 16
    that divides hd."""
    r = 1
    while 2 * r * min(g, LANES) <= LANES and hd % (2 * r) == 0:
        r *= 2
    return r


def _spread(r):
    """An intrinsic: the r floats at ary[idx] repeated over 16 lanes (lane l gets ary[idx + l % r])."""
    def typer(typingctx, ary, idx):
        def codegen(context, builder, sig, args):
            v = builder.load(_ptr(context, builder, sig.args[0], args[0], args[1], ir.VectorType(_F32, r)), align=4)
            lanes = ir.Constant(ir.VectorType(_I32, LANES), [lane % r for lane in range(LANES)])
            return builder.shuffle_vector(v, v, lanes)
        return F32X16(ary, idx), codegen
    typer.__name__ = f"spread{r}"
    return intrinsic(typer)


def _fold(r):
    """An intrinsic: lane q·r + k holds part k of query q's sum; returns query q's whole sum in lane q
    (lanes past 16 // r: unspecified), summed as a fixed tree (lane pairs 1, then 2, ... apart)."""
    def typer(typingctx, v):
        def codegen(context, builder, sig, args):
            s, step = args[0], 1
            while step < r:
                partner = ir.Constant(ir.VectorType(_I32, LANES), [lane ^ step for lane in range(LANES)])
                s, step = builder.fadd(s, builder.shuffle_vector(s, s, partner)), 2 * step
            lanes = [min(q * r, LANES - 1) for q in range(LANES)]
            return builder.shuffle_vector(s, s, ir.Constant(ir.VectorType(_I32, LANES), lanes))
        return F32X16(v), codegen
    typer.__name__ = f"fold{r}"
    return intrinsic(typer)


@intrinsic
def store_first(typingctx, ary, idx, v, n):
    """ary[idx:idx+n] = v's first n lanes (n <= 16); ary[idx+n:idx+16] is read and written back unchanged,
    so it must exist. A blend rather than a masked-store intrinsic, whose name depends on the LLVM
    version's pointer types."""
    def codegen(context, builder, sig, args):
        ptr = _ptr(context, builder, sig.args[0], args[0], args[1], _V16F)
        bound = builder.insert_element(ir.Constant(ir.VectorType(_I32, LANES), ir.Undefined),
                                       builder.trunc(args[3], _I32), ir.Constant(_I32, 0))
        bound = builder.shuffle_vector(bound, bound, ir.Constant(ir.VectorType(_I32, LANES), [0] * LANES))
        keep = builder.select(builder.icmp_signed("<", _IOTA, bound), args[2], builder.load(ptr, align=4))
        builder.store(keep, ptr, align=4)
        return context.get_dummy_value()
    return types.none(ary, idx, v, n), codegen


def _copy(r):
    """An intrinsic: dst[di:di+r] = src[si:si+r], float32, as one r-float move."""
    def typer(typingctx, dst, di, src, si):
        def codegen(context, builder, sig, args):
            vt = ir.VectorType(_F32, r)
            v = builder.load(_ptr(context, builder, sig.args[2], args[2], args[3], vt), align=4)
            builder.store(v, _ptr(context, builder, sig.args[0], args[0], args[1], vt), align=4)
            return context.get_dummy_value()
        return types.none(dst, di, src, si), codegen
    typer.__name__ = f"copy{r}"
    return intrinsic(typer)


def _scorer(r):
    """`chunk_scores` for r dims per lane."""
    spread, fold, copy, per = _spread(r), _fold(r), _copy(r), LANES // r

    @inline
    def fill(qt, qf, at, nl, hd):
        """qt = the tile's nl queries (query L at qf[at[L]:][:hd]) as registers of `per` queries × r
        dims: query L's dims i·r.. in register (L // per) · (hd // r) + i, lanes (L % per) · r .."""
        qt[:] = 0.0
        for lane in range(nl):
            o, src = ((lane // per) * (hd // r)) * LANES + (lane % per) * r, at[lane]
            for i in range(hd // r):
                copy(qt, o + i * LANES, qf, src + i * r)

    @inline
    def scores8(qt, qo, kf, kb, hd, scale, sc, j, at, n):
        """sc[j + k, at:at+n] for k < 8: keys kf[kb + k·hd ..] against the queries of qt[qo ..] (hd // r
        registers), times `scale`."""
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = fzero16()
        for i in range(hd // r):
            qd, d = fload16(qt, qo + i * LANES), kb + i * r  # [16] dims i·r.. of every query
            a0, a1 = vfma16(qd, spread(kf, d), a0), vfma16(qd, spread(kf, d + hd), a1)
            a2, a3 = vfma16(qd, spread(kf, d + 2 * hd), a2), vfma16(qd, spread(kf, d + 3 * hd), a3)
            a4, a5 = vfma16(qd, spread(kf, d + 4 * hd), a4), vfma16(qd, spread(kf, d + 5 * hd), a5)
            a6, a7 = vfma16(qd, spread(kf, d + 6 * hd), a6), vfma16(qd, spread(kf, d + 7 * hd), a7)
        for k, a in enumerate((a0, a1, a2, a3, a4, a5, a6, a7)):
            store_first(sc, (j + k) * LANES + at, vscale16(fold(a), scale), n)

    @inline
    def score1(qt, qo, kf, kb, hd, scale, sc, j, at, n):
        """`scores8` for the one key at kf[kb]."""
        a = fzero16()
        for i in range(hd // r):
            a = vfma16(fload16(qt, qo + i * LANES), spread(kf, kb + i * r), a)
        store_first(sc, j * LANES + at, vscale16(fold(a), scale), n)

    @inline
    def chunk(qt, qf, at, nl, buf, m, hd, sc, c0):
        if c0 == 0:
            fill(qt, qf, at, nl, hd)
        scale = np.float32(1.0 / np.sqrt(hd))
        for grp in range(0, nl, per):
            qo, n = (grp // per) * (hd // r) * LANES, min(per, nl - grp)
            for j in range(0, m - m % UNROLL, UNROLL):
                scores8(qt, qo, buf, j * hd, hd, scale, sc, c0 + j, grp, n)
            for j in range(m - m % UNROLL, m):
                score1(qt, qo, buf, j * hd, hd, scale, sc, c0 + j, grp, n)

    return chunk


_CHUNK1, _CHUNK2, _CHUNK4, _CHUNK8, _CHUNK16 = (_scorer(r) for r in (1, 2, 4, 8, 16))


@inline
def chunk_scores(qt, qf, at, nl, buf, m, hd, sc, c0, r):
    """sc[c0..c0+m, :nl]: the m widened keys in buf (positions c0..) against the tile's nl queries (query
    L at qf[at[L]:][:hd]), r dims per lane; the first chunk (c0 = 0) lays the queries out in qt."""
    if r == 1:
        _CHUNK1(qt, qf, at, nl, buf, m, hd, sc, c0)
    elif r == 2:
        _CHUNK2(qt, qf, at, nl, buf, m, hd, sc, c0)
    elif r == 4:
        _CHUNK4(qt, qf, at, nl, buf, m, hd, sc, c0)
    elif r == 8:
        _CHUNK8(qt, qf, at, nl, buf, m, hd, sc, c0)
    else:
        _CHUNK16(qt, qf, at, nl, buf, m, hd, sc, c0)
