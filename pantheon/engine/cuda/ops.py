"""Launches of this package's kernels with the backend's geometry: the operations the GPU model is built from."""

import math

import numpy as np

from pantheon.engine.cuda import layers, matvec, matvec8
from pantheon.engine.cuda.qtypes import INT8_TYPES, TILE_BYTES, UNIT


class Activations:
    """h [n, cols] laid out the ways the matrix-vector kernels read it, each made on first request and kept
    for a group of products of the same input: unit-major floats (matvec.qmv) or int8 quants
    (matvec8.qmv8), in the buffers of Workspace `work` (allocated when None)."""

    def __init__(self, ops, h, work=None):
        self.ops, self.h, self.work = ops, h, work
        self._xt = self._q8 = None

    def unit_major(self):
        if self._xt is None:
            self._xt = self.ops.unit_major(self.h, None if self.work is None else self.work.xt)
        return self._xt

    def q8(self):
        if self._q8 is None:
            self._q8 = self.ops.quantize_units(self.h, self.work)
        return self._q8


class Ops:
    """Kernel launches on one backend. Arrays are the backend's (CuPy on a GPU, numpy in the simulator).

    `int8`: decode products of quantized weights take int8 activations (matvec8.py) rather than float
    ones (matvec.py); F16/BF16 weights always take the float kernels."""

    def __init__(self, backend, int8=True):
        self.b = backend
        self.g = backend.geometry
        self.int8 = int8

    def _items(self, kernel, n):
        g = self.g
        return self.b.launch(kernel, g.grid(n, g.threads), g.threads)

    def _blocks(self, kernel, n, threads):
        return self.b.launch(kernel, self.g.grid(n, 1), threads)

    def unit_major(self, x, buf=None):
        """x float32 [n, cols] laid out as the matrix-vector kernels read it: [n, 32, cols / 32], in `buf`
        (a flat float32 array of at least x.size; allocated when None)."""
        n, cols = x.shape
        buf = self.b.empty((x.size,)) if buf is None else buf
        xt = buf[: x.size].reshape(n, UNIT, cols // UNIT)  # [n, 32, units] a view of buf
        self._items(matvec.unit_major, x.size)(x, xt)
        return xt

    def quantize_units(self, x, work=None):
        """x float32 [n, cols] as int8 quants per 32 values: (xq int32 [n, 8, units], xs float32 [n, 3, units]),
        in Workspace `work`'s buffers (allocated when None)."""
        n, cols = x.shape
        units = cols // UNIT
        xq = self.b.empty((x.size // 4,), np.int32) if work is None else work.xq  # [>= n*cols/4]
        xs = self.b.empty((3 * n * units,)) if work is None else work.xs  # [>= 3*n*units]
        xq = xq[: x.size // 4].reshape(n, matvec8.WORDS, units)  # [n, 8, units] a view
        xs = xs[: 3 * n * units].reshape(n, 3, units)  # [n, 3, units] a view
        self._items(matvec8.quantize_units, n * units)(x, xq, xs)
        return xq, xs

    def _int8(self, mat):
        return self.int8 and mat.qtype in INT8_TYPES

    def matvec(self, mat, acts, out, c0=0):
        """out[:, c0:c0+rows] float32 = acts.h [n <= 8, cols] @ dequant(mat).T, straight from the raw blocks
        (acts: Activations)."""
        g, block = self.g, (self.g.lanes, self.g.rows)
        if self._int8(mat):  # two rows per thread
            grid = g.grid(mat.rows, 2 * g.rows)
            self.b.launch(matvec8.qmv8, grid, block)(mat.words, mat.qtype, *acts.q8(), out, c0)
        else:
            grid = g.grid(mat.rows, g.rows)
            self.b.launch(matvec.qmv, grid, block)(mat.words, mat.qtype, acts.unit_major(), out, c0)

    def matvec_sel(self, mat, sel, xdiv, acts, out, c0=0):
        """out[:, c0:c0+rows]: row m is acts.h[m // xdiv] times expert sel[m] of `mat` (mixture of experts)."""
        g = self.g
        grid, block = g.grid(out.shape[0] * -(-mat.rows // g.rows), 1), (g.lanes, g.rows)
        if self._int8(mat):
            self.b.launch(matvec8.qmv8_sel, grid, block)(mat.words, mat.qtype, sel, xdiv, *acts.q8(), out, c0)
        else:
            self.b.launch(matvec.qmv_sel, grid, block)(mat.words, mat.qtype, sel, xdiv, acts.unit_major(), out, c0)

    def tile_matmul(self, mat, x16, out, scratch, c0=0):
        """out[:, c0:c0+rows] float32 = x16 [n, cols] @ dequant(mat).T through fp16 tiles and the backend's GEMM."""
        step = min(mat.rows, scratch.size // mat.cols)
        for r0 in range(0, mat.rows, step):
            r1 = min(mat.rows, r0 + step)
            tile = scratch[: (r1 - r0) * mat.cols].reshape(r1 - r0, mat.cols)  # [r1-r0, cols] fp16, contiguous
            self._items(matvec.dequant_tile, (r1 - r0) * (mat.cols // UNIT))(mat.words, mat.qtype, r0, tile)
            self.b.matmul_t(x16, tile, out[:, c0 + r0:c0 + r1])

    def scratch_for(self, mats):
        """A flat fp16 tile buffer: at least one row of any of `mats`, at most TILE_BYTES unless a single
        matrix is smaller (one per model stage, reused by every layer)."""
        need = max(max(m.cols for m in mats), min(TILE_BYTES // 2, max(m.rows * m.cols for m in mats)))
        return self.b.empty((need,), np.float16)  # [tile elements]

    def embed(self, mat, ids, out):
        self._items(matvec.embed, out.shape[0] * (out.shape[1] // UNIT))(mat.words, mat.qtype, ids, out)

    def rms_norm(self, x, weight, eps, group, out, c0=0, width=None):
        """Columns [c0, c0+width) of x (all by default) normalised in groups of `group` into out."""
        width = x.shape[1] if width is None else width
        threads = min(self.g.threads, _pow2_at_most(group))
        self._blocks(layers.rms_norm, x.shape[0] * (width // group), threads)(x, c0, width, weight,
                                                                               np.float32(eps), group, out)

    def rope(self, x, c0, heads, head_dim, n_rot, neox, pos, inv_freq):
        work = x.shape[0] * heads * (n_rot // 2)
        self._items(layers.rope, work)(x, c0, heads, head_dim, n_rot, neox, pos, inv_freq)

    def add_bias(self, x, bias):
        self._items(layers.add_bias, x.size)(x, bias)

    def add(self, x, y):
        self._items(layers.add, x.size)(x, y)

    def silu_mul(self, gu, out):
        self._items(layers.silu_mul, out.size)(gu, out)

    def kv_write(self, qkv, c0, kcache, vcache, layer, slot, pos):
        work = qkv.shape[0] * kcache.shape[2] * kcache.shape[4]
        self._items(layers.kv_write, work)(qkv, c0, kcache, vcache, layer, slot, pos)

    def attention(self, q, heads, kcache, vcache, layer, slot, pos, out, parts=None):
        """out [n, H*hd] = causal attention of q's heads; with `parts` (float32 [n*H*splits, 2 + hd]) each
        (token, head) is split over `splits` thread blocks and merged (decode: n*H blocks are too few)."""
        n, hd = q.shape[0], kcache.shape[4]
        splits = 1 if parts is None else parts.shape[0] // (n * heads)
        threads = min(self.g.threads, layers.ATTN_THREADS)
        scale = np.float32(1.0 / math.sqrt(hd))
        self._blocks(layers.attention, n * heads * splits, threads)(
            q, heads, kcache, vcache, layer, slot, pos, scale, splits, out if parts is None else parts, out)
        if splits > 1:
            self._items(layers.attention_merge, n * heads * hd)(parts, heads, splits, out)

    def route_topk(self, logits, ids, weights):
        self._items(layers.route_topk, logits.shape[0])(logits, ids, weights)

    def moe_combine(self, x, y, weights):
        self._items(layers.moe_combine, x.size)(x, y, weights)


def _pow2_at_most(n):
    return 1 << (max(1, n).bit_length() - 1)
