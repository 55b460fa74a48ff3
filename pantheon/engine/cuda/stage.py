"""A contiguous range of transformer layers on one device: their weights, KV pool and forward pass."""

import numpy as np

from pantheon.engine.cuda import gemm_attention
from pantheon.engine.cuda.kvpool import stage_arrays
from pantheon.engine.cuda.matvec import MAX_BATCH
from pantheon.engine.cuda.ops import Activations, Ops
from pantheon.engine.cuda.upload import Uploader, block_matrices
from pantheon.engine.cuda.workspace import Workspace


def upload_stage(backend, cfg, weights, first, last):
    """A Stage of layers [first, last) of the host `weights`, uploaded to `backend`."""
    backend.activate()
    up = Uploader(backend)
    blocks = [up.block(weights.blocks[i]) for i in range(first, last)]
    return Stage(backend, cfg, blocks, first, up.log)


class Stage:
    """Layers [first, first + len(blocks)) of one model on `backend`."""

    def __init__(self, backend, cfg, blocks, first, log=()):
        self.backend, self.cfg, self.first = backend, cfg, first
        self.ops = Ops(backend)
        self.blocks, self.log = list(blocks), list(log)
        inv_freq = cfg.rope_base ** (-np.arange(0, cfg.n_rot, 2, dtype=np.float64) / cfg.n_rot)  # [n_rot/2]
        self.inv_freq = backend.upload(inv_freq)
        self.kcache = self.vcache = self.scratch = None
        self.mats = [m for b in self.blocks for m in block_matrices(b)]

    @property
    def weight_bytes(self):
        return sum(m.nbytes for m in self.mats)

    def allocate(self, slots, n_ctx, extra_mats=()):
        """The stage's KV pool and tile scratch: allocated once, before serving."""
        self.kcache, self.vcache = stage_arrays(self.backend, len(self.blocks), slots, n_ctx, self.cfg)
        mats = self.mats + list(extra_mats)
        self.scratch = self.ops.scratch_for(mats) if mats else None

    def copy_kv(self, src, dst, n):
        """Positions [0, n) of KV slot `src` into slot `dst`, every layer of this stage."""
        for arr in (self.kcache, self.vcache):  # [layers, slots, n_kv, n_ctx, head_dim]
            self.backend.copy_within(arr, np.s_[:, dst, :, :n], np.s_[:, src, :, :n])

    def release(self):
        self.blocks, self.mats = [], []
        self.kcache = self.vcache = self.scratch = self.inv_freq = None

    def matmul(self, mats, h, out, work=None, acts=None):
        """out float32 [n, Σ rows] = h [n, cols] times each of `mats`, their outputs side by side; Workspace
        `work` holds h laid out for the matrix-vector kernels (allocated when None), `acts` (Activations of h)
        when the caller reuses them."""
        n, c0, h16 = h.shape[0], 0, None
        acts = acts or Activations(self.ops, h, work)  # laid out once for the group, on first use
        for m in mats:
            if n <= MAX_BATCH:
                self.ops.matvec(m, acts, out, c0)
            else:
                h16 = self.backend.half(h) if h16 is None else h16  # [n, cols] fp16, shared by the group
                self.ops.tile_matmul(m, h16, out, self.scratch, c0)
            c0 += m.rows
        return out

    def workspace(self, n):
        return Workspace(self.backend, self.cfg, self.blocks, n)

    def forward(self, x, slot, pos, work=None, spans=None):
        """Run the stage's layers over x float32 [n, dim] in place; slot, pos int32 [n] on this device; `spans`
        [(slot, first position, rows)] per segment of the rows when attention may run as matrix products."""
        self.backend.activate()
        self.layers(x, slot, pos, work or self.workspace(len(x)), spans)
        return x

    def layers(self, x, slot, pos, w, spans=None):
        """The layers' kernels over x in place, every intermediate in Workspace w: launches only (capturable)
        unless `spans` lets attention run as matrix products (gemm_attention.py)."""
        eps, dim = self.cfg.norm_eps, self.cfg.dim
        if spans is not None and not all(gemm_attention.fits(self.cfg, n, p0 + n) for _, p0, n in spans):
            spans = None
        for li, blk in enumerate(self.blocks):
            self.ops.rms_norm(x, blk.attn_norm, eps, dim, w.h)
            self._attention(li, blk, slot, pos, w, spans)
            self.ops.add(x, self.matmul([blk.wo], w.att, w.proj, w))
            self.ops.rms_norm(x, blk.ffn_norm, eps, dim, w.h)
            if blk.router is not None:
                self._moe(blk, w, x)
            else:
                self.ops.add(x, self._ffn(blk, w))

    def _attention(self, li, blk, slot, pos, w, spans):
        """w.att [n, H*hd] = attention of the rows' queries over their sequences, after storing their keys/values."""
        c, ops, qkv = self.cfg, self.ops, w.qkv
        qd, kd = c.n_head * c.head_dim, c.n_head_kv * c.head_dim
        self.matmul(blk.qkv, w.h, qkv, w)  # [n, qd + 2kd]
        if blk.bqkv is not None:
            ops.add_bias(qkv, blk.bqkv)
        if blk.q_norm is not None:  # per-head norms of q (columns [0, qd)) and k ([qd, qd+kd))
            ops.rms_norm(qkv, blk.q_norm, c.norm_eps, c.head_dim, qkv, 0, qd)
            ops.rms_norm(qkv, blk.k_norm, c.norm_eps, c.head_dim, qkv, qd, kd)
        ops.rope(qkv, 0, c.n_head, c.head_dim, c.n_rot, c.neox_rope, pos, self.inv_freq)
        ops.rope(qkv, qd, c.n_head_kv, c.head_dim, c.n_rot, c.neox_rope, pos, self.inv_freq)
        ops.kv_write(qkv, qd, self.kcache, self.vcache, li, slot, pos)
        if spans is None:
            ops.attention(qkv, c.n_head, self.kcache, self.vcache, li, slot, pos, w.att, w.parts)
            return
        r0 = 0
        for s, p0, n in spans:
            gemm_attention.segment_attention(self.backend, c, qkv, self.kcache, self.vcache, li, s, p0,
                                             slice(r0, r0 + n), w.att)
            r0 += n

    def _ffn(self, blk, w):
        self.matmul(blk.gate_up, w.h, w.gu, w)  # [n, 2ff]
        self.ops.silu_mul(w.gu, w.act)  # [n, ff]
        return self.matmul([blk.down], w.act, w.proj, w)  # [n, dim]

    def _moe(self, blk, w, x):
        """x += Σ over each row's top-k experts of weight * expert FFN(w.h), routed on the device."""
        k, ff = self.cfg.n_expert_used, blk.gate_exps.rows
        acts = Activations(self.ops, w.h, w)  # shared by the router (at n <= 8) and the experts
        self.ops.route_topk(self.matmul([blk.router], w.h, w.route, acts=acts), w.ids, w.weights)
        self.ops.matvec_sel(blk.gate_exps, w.sel, k, acts, w.egu, 0)
        self.ops.matvec_sel(blk.up_exps, w.sel, k, acts, w.egu, ff)
        self.ops.silu_mul(w.egu, w.eact)
        self.ops.matvec_sel(blk.down_exps, w.sel, 1, Activations(self.ops, w.eact, w), w.ey)
        self.ops.moe_combine(x, w.ey, w.weights)
