"""Causal grouped-query attention in tiles of up to 16 query vectors that read the same keys.

A tile's lanes are (row, head) queries of one sequence and one kv head: the g heads sharing it, for
16 // g consecutive rows (g > 16: 16 heads of one row). Each key element is loaded once and broadcast
to every lane, so scores and softmax run 16 queries per instruction; the per-(row, head) loops this
replaced ran one query at a time with a libm exp per score. Value sums run the other way round: 16
columns of one query per instruction, 8 queries per pass, each weight broadcast. A decode tile has
one row, so with g = 8 only 8 of its 16 lanes are queries, and this way no instruction is spent on
the empty ones; the sums land in the output's own layout too.

A query's arithmetic never depends on the other queries: its scores are the same fma chains and lane
fold (attention_scores) whatever shares its register, its softmax covers its own positions only (later
ones in the tile weigh exactly 0), and its value sums run over positions in order. So a row gets the
same bits whatever shares its tile or its step (batch invariance: the int8 rounding downstream turns a
1e-7 wobble into a flipped quant), and the kernel compiles without fastmath so nothing is reassociated.

The caches hold float16 (llama.cpp's default KV type: half the memory and half the bytes a long
context streams per token). A tile widens its keys, then its values, CHUNK positions at a time into
float32 scratch that stays in L1/L2; the arithmetic is float32 as before.
"""

import numpy as np
from numba import prange

from pantheon.engine.kernels.attention_scores import chunk_scores, dims_per_lane
from pantheon.engine.kernels.fastexp import expf, expf16
from pantheon.engine.kernels.jit import exact, exact_serial, inline
from pantheon.engine.kernels.simd import prefetch_l2
from pantheon.engine.kernels.simd512 import fzero16, store16
from pantheon.engine.kernels.simd_lanes import fload16
from pantheon.engine.kernels.simd_f32 import (fbcast16, hstore1, hstore16, vadd16, vfill16, vfma16, vmax16, vsub16,
                                              widen16)

LANES = 16
# Keys (or value columns) advanced together: 8 independent fma chains cover the fma latency.
UNROLL = 8
# Positions of keys or values widened from float16 at a time (a multiple of UNROLL): 64 x 128 floats
# are 32 KiB, so a chunk is read from L1 by every fma that uses it.
CHUNK = 64
# float16 elements per cache line: the prefetch stride.
LINE = 32


@exact
def store_and_attend(q, k_new, v_new, ks, vs, seg, pos, li, out, threads):
    """Write k_new, v_new [N, KV, hd] into their sequences' caches, then out [N, H*hd] from q [N, H, hd].

    Row r belongs to sequence seg[r] at position pos[r]; ks[s], vs[s] are that sequence's caches
    [n_layer, KV, capacity, hd], float16 bits in uint16, and layer `li` is used; `threads` workers
    take every threads-th unit of tiles (`_unit`; a prefill's later rows attend to more positions, so
    contiguous shares would be uneven)."""
    n_head, hd, n_kv = q.shape[1], q.shape[2], k_new.shape[1]
    for r in range(q.shape[0]):  # serial: a few KiB per row, less than a launch of the thread pool
        kc, vc = ks[seg[r]], vs[seg[r]]  # [n_layer, KV, capacity, hd]
        for h in range(n_kv):
            o = ((li * n_kv + h) * kc.shape[2] + pos[r]) * hd
            _narrow(k_new[r, h], kc.reshape(-1), o)
            _narrow(v_new[r, h], vc.reshape(-1), o)
    tiles = _tiles(seg, n_head, n_kv)  # [T, 5]
    per = _unit(tiles.shape[0], n_head, n_kv, threads)
    units = tiles.shape[0] // per
    workers = max(1, min(threads, units))
    longest = pos.max() + 1
    dims = dims_per_lane(n_head // n_kv, hd)  # head dims per lane of the scores (attention_scores)
    for wk in prange(workers):
        _attend(np.int64(wk), workers, units, per, tiles, q, ks, vs, seg, pos, li, out, longest, dims)


@exact_serial
def _attend(wk, workers, units, per, tiles, q, ks, vs, seg, pos, li, out, longest, dims):
    """Worker wk's tiles: every workers-th unit of `per` tiles. A function of its own so numba's parfor
    passes, which copy a loop body several times, do not copy every inlined tile pass (compile time)."""
    hd = q.shape[2]
    qt = np.empty(hd * LANES, np.float32)  # the tile's queries as attention_scores lays them out
    # [positions + 1, 16] scores, then weights (unused lanes: finite); the extra row for store_first
    sc = np.zeros((longest + 1) * LANES, np.float32)
    buf = np.empty(CHUNK * hd, np.float32)  # [CHUNK, hd] one chunk's keys or values, widened
    acc = np.empty(LANES * hd, np.float32)  # [16, hd] each lane's value sums
    lanes = np.empty(LANES, np.float32)  # [16] one value per lane (a max, then 1 / sum)
    who = np.empty((3, LANES), np.int64)  # [3, 16] each lane's row, query offset and positions seen
    for u in range(wk, units, workers):
        kc, vc = ks[seg[tiles[u * per, 0]]], vs[seg[tiles[u * per, 0]]]  # [n_layer, KV, capacity, hd]
        for t in range(u * per, u * per + per):
            if t + 1 < u * per + per:
                _prefetch(tiles[t + 1], kc, vc, pos, li, hd)
            elif u + workers < units:
                nxt = tiles[(u + workers) * per]
                _prefetch(nxt, ks[seg[nxt[0]]], vs[seg[nxt[0]]], pos, li, hd)
            base = _base(tiles[t], kc, li)
            _tile(q, kc.reshape(-1), vc.reshape(-1), base, tiles[t], pos, out, qt, sc, buf, acc, lanes, who, dims)


@inline
def _unit(n_tiles, n_head, n_kv, threads):
    """Tiles a worker takes at a time: a row block's (every kv head of the same rows, so of one sequence)
    when there are enough blocks to share, else one. A worker then looks its sequence's caches up once
    per block: each lookup counts a reference on the cache array, and two workers counting on the same
    array, tile after tile, cost a decode step more than its tiles' arithmetic."""
    g = n_head // n_kv
    per = n_kv * -(-g // min(g, LANES))
    return per if n_tiles // per >= 2 * threads else 1


@inline
def _narrow(src, dst, o):
    """dst[o:o+len(src)] (uint16) = the float16 bits of float32 src, rounded to nearest even."""
    n = src.shape[0]
    for i in range(0, n - n % LANES, LANES):
        hstore16(dst, o + i, fload16(src, i))
    for i in range(n - n % LANES, n):
        hstore1(dst, o + i, src[i])


@inline
def _base(tile, kc, li):
    """Where `tile`'s kv head's position 0 starts in its sequence's cache kc [n_layer, KV, capacity, hd]
    (or vc) read flat."""
    return ((li * kc.shape[1] + tile[2]) * kc.shape[2]) * kc.shape[3]


@inline
def _prefetch(tile, kc, vc, pos, li, hd):
    """Ask for the keys and values `tile` reads from its sequence's caches kc, vc into L2 while the
    worker's current tile runs: a decode tile reads a few KiB that the weight stream evicted, too
    little for the hardware prefetcher to find its stride before the tile ends."""
    base, kf, vf = _base(tile, kc, li), kc.reshape(-1), vc.reshape(-1)
    for o in range(base, base + (pos[tile[0] + tile[1] - 1] + 1) * hd, LINE):
        prefetch_l2(kf, o)
        prefetch_l2(vf, o)


@inline
def _tiles(seg, n_head, n_kv):
    """[T, 5] (first row, rows, kv head, first head, heads) of every tile; a tile's rows are one
    sequence's, its heads share one kv head."""
    g = n_head // n_kv
    nh = min(g, LANES)
    rows_per = max(1, LANES // g)
    n = seg.shape[0]
    tiles = np.empty((n * n_kv * (-(-g // nh)), 5), np.int64)  # [upper bound, 5]
    count, r = 0, 0
    while r < n:
        end = r + 1
        while end < n and seg[end] == seg[r] and end - r < rows_per:
            end += 1
        for kh in range(n_kv):
            for h0 in range(kh * g, (kh + 1) * g, nh):
                heads = min(nh, (kh + 1) * g - h0)
                tiles[count, 0], tiles[count, 1], tiles[count, 2] = r, end - r, kh
                tiles[count, 3], tiles[count, 4] = h0, heads
                count += 1
        r = end
    return tiles[:count]


@inline
def _tile(q, kf, vf, base, tile, pos, out, qt, sc, buf, acc, lanes, who, r):
    """One tile's queries (rows r0..r0+nr, heads h0..h0+nh of one kv head) over the cache rows that
    start at kf/vf[base]; r: dims per lane of the scores (attention_scores)."""
    r0, nr, h0, nh = tile[0], tile[1], tile[3], tile[4]
    hd, nl = q.shape[2], nr * nh
    rows, at = who[0], who[1]  # [16] each lane's row; where its query starts in q (and its output in out)
    for lane in range(nl):
        rows[lane] = r0 + lane // nh
        at[lane] = (rows[lane] * q.shape[1] + h0 + lane % nh) * hd
    length = pos[r0:r0 + nr].max() + 1  # the positions the tile's longest row reads
    for c0 in range(0, length, CHUNK):
        m = min(CHUNK, length - c0)
        widen16(kf, base + c0 * hd, m * hd, buf)
        chunk_scores(qt, q.reshape(-1), at, nl, buf, m, hd, sc, c0, r)
    _softmax(sc, length, rows, nl, pos, lanes, who[2])
    acc[:nl * hd] = 0.0
    for c0 in range(0, length, CHUNK):
        m = min(CHUNK, length - c0)
        widen16(vf, base + c0 * hd, m * hd, buf)
        for l0 in range(0, nl, UNROLL):
            for d in range(0, hd - hd % LANES, LANES):
                _values8(sc, buf, d, hd, c0, m, acc, l0)
            for d in range(hd - hd % LANES, hd):
                _value1(sc, buf, d, hd, c0, m, acc, l0, nl)
    _put(acc, lanes, out.reshape(-1), at, nl, hd)


@inline
def _softmax(sc, length, rows, nl, pos, lanes, ends):
    """Scores -> exp(score − max) in place over each lane's own positions (0 past them), and `lanes` ->
    1 / Σ of each lane's weights, summed in position order (`ends`: scratch for the positions each lane
    sees). Positions every lane sees
    run 16 lanes per instruction; a prefill tile's last few, seen by its later rows only, per lane."""
    ends[:] = length  # [16] positions each lane sees (unused lanes: all, discarded)
    for lane in range(nl):
        ends[lane] = pos[rows[lane]] + 1
    common = ends.min()
    top = vfill16(np.float32(-np.inf))
    for j in range(common):
        top = vmax16(fload16(sc, j * LANES), top)
    store16(lanes, 0, top)
    for j in range(common, length):
        for lane in range(LANES):
            if j < ends[lane]:
                lanes[lane] = max(lanes[lane], sc[j * LANES + lane])
    top, total = fload16(lanes, 0), fzero16()
    for j in range(common):
        w = expf16(vsub16(fload16(sc, j * LANES), top))  # [16] weights of position j
        store16(sc, j * LANES, w)
        total = vadd16(total, w)
    for j in range(common, length):
        for lane in range(LANES):
            w = expf(sc[j * LANES + lane] - lanes[lane]) if j < ends[lane] else np.float32(0.0)
            sc[j * LANES + lane] = w
        total = vadd16(total, fload16(sc, j * LANES))
    store16(lanes, 0, total)
    for lane in range(LANES):
        lanes[lane] = np.float32(1.0) / lanes[lane]


@inline
def _values8(sc, buf, d, hd, c0, m, acc, l0):
    """acc[l0..l0+8, d..d+16] += Σ_j weight[c0 + j, lane]·v[j, d..d+16] over the chunk's m widened values in
    buf, in position order (the sums carry from chunk to chunk, so chunking leaves every fma chain as it
    was). Lanes past the tile's last hold scratch: their sums are never read."""
    a0, a1 = fload16(acc, l0 * hd + d), fload16(acc, (l0 + 1) * hd + d)
    a2, a3 = fload16(acc, (l0 + 2) * hd + d), fload16(acc, (l0 + 3) * hd + d)
    a4, a5 = fload16(acc, (l0 + 4) * hd + d), fload16(acc, (l0 + 5) * hd + d)
    a6, a7 = fload16(acc, (l0 + 6) * hd + d), fload16(acc, (l0 + 7) * hd + d)
    for j in range(m):
        v = fload16(buf, j * hd + d)  # [16] columns d..d+16 of position c0 + j
        w = (c0 + j) * LANES + l0
        a0, a1 = vfma16(fbcast16(sc, w), v, a0), vfma16(fbcast16(sc, w + 1), v, a1)
        a2, a3 = vfma16(fbcast16(sc, w + 2), v, a2), vfma16(fbcast16(sc, w + 3), v, a3)
        a4, a5 = vfma16(fbcast16(sc, w + 4), v, a4), vfma16(fbcast16(sc, w + 5), v, a5)
        a6, a7 = vfma16(fbcast16(sc, w + 6), v, a6), vfma16(fbcast16(sc, w + 7), v, a7)
    for k, a in enumerate((a0, a1, a2, a3, a4, a5, a6, a7)):
        store16(acc, (l0 + k) * hd + d, a)


@inline
def _value1(sc, buf, d, hd, c0, m, acc, l0, nl):
    """`_values8` for the one column d of head dims past the last multiple of 16: lane by lane."""
    for lane in range(l0, min(l0 + UNROLL, nl)):
        a = acc[lane * hd + d]
        for j in range(m):
            a += sc[(c0 + j) * LANES + lane] * buf[j * hd + d]
        acc[lane * hd + d] = a


@inline
def _put(acc, inv, out, at, nl, hd):
    """out[at[lane] + c] = acc[lane, c]·inv[lane] for each used lane and column c (out flat)."""
    for lane in range(nl):
        o, s = at[lane], inv[lane]
        for c in range(hd):
            out[o + c] = acc[lane * hd + c] * s
