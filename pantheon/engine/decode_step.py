"""One sequence's one-token step over repacked weights with its buffers kept: decode's fast path.

A decode step of a TinyLlama-shaped model spends ~3 ms of Python around its kernels: per product an
activations object, its arrays, a dispatch on the weight's type and layout, per layer a dozen arrays.
Between kernels that stream the weights from DRAM, the interpreter's working set has left the
caches, so each of those operations costs several times what it costs hot. This path resolves all
of that once per model: each product's kernel, repacked matrix, output columns and prefetch distance;
each input's int8 rounding into arrays kept between steps. It calls the same kernels and row functions
in the same order as Model's general path, so its logits are the same bits (tests/.../test_decode_step.py).

It serves the llama layout only (separate q, k, v without biases or norms, a gated FFN, no experts) and
only when every matrix is repacked (engine.repacked) for an int8 kernel; anything else, and a second
thread arriving while a step runs, takes the general path.
"""

import threading

import numba
import numpy as np

from pantheon.engine.attention import StepLayout
from pantheon.engine.kernels import q8dot, q8k, q8k_acts
from pantheon.engine.kernels.attention_tiles import store_and_attend
from pantheon.engine.kernels.matmul import dequantize_rows
from pantheon.engine.kernels.stream import prefetch_ahead
from pantheon.engine.ops import rms_norm_into, silu_mul_into


class _Rounding:
    """One input width's int8 rounding, kept between steps: per 256 (Q8_K) for K-quants, else per 32."""

    def __init__(self, k_quant, cols):
        per = 256 if k_quant else 32
        self.k_quant = k_quant
        self.q = np.empty((1, cols), np.int8)  # [1, cols]
        self.xq = self.q.view(np.uint8)  # [1, cols] the bytes the kernels load
        self.xd = np.empty((1, cols // per), np.float32)  # [1, cols/per] scales
        self.sums = np.empty((1, cols // (16 if k_quant else 32)), np.int16 if k_quant else np.int32)

    def round(self, x):
        (q8k_acts.quantize_into if self.k_quant else q8dot.quantize_into)(x, self.q, self.xd, self.sums)


class _Product:
    """One kernel call: a repacked matrix (or stack) into its columns of an output row kept between steps."""

    def __init__(self, w, packed, rows, out):
        self.k_quant = q8k.supports(w.qtype, w.cols)
        self.kernel = (q8k if self.k_quant else q8dot).repacked_kernel(w.qtype)
        self.packed, self.rows, self.out = packed, rows, out  # out: [1, rows] a contiguous view
        self.ahead = prefetch_ahead(w.qtype, 1)

    def run(self, acts, threads):
        a = acts[self.k_quant]
        self.kernel(self.packed, self.rows, a.xq, a.xd, a.sums, self.out, threads, self.ahead)


class _Products:
    """Matrices that multiply one input: the calls for them (a stack in one), their outputs side by side in
    one row [1, sum(rows)], and the roundings of that input they need."""

    def __init__(self, ws):
        self.row = np.empty((1, sum(w.rows for w in ws)), np.float32)  # [1, sum(rows)]
        self.calls, i, at = [], 0, 0
        while i < len(ws):
            s = ws[i].stack
            n, rows, packed = (len(s.names), s.spans[-1][1], s.packed) if s is not None and s.serves(ws, i) \
                else (1, ws[i].rows, ws[i].packed)
            self.calls.append(_Product(ws[i], packed, rows, self.row[:, at:at + rows]))
            i, at = i + n, at + rows
        self.kinds = sorted({c.k_quant for c in self.calls})

    def run(self, x, acts, threads):
        """self.row = x [1, cols] times the matrices (x rounded once per kind)."""
        for kind in self.kinds:
            acts[kind].round(x)
        for c in self.calls:
            c.run(acts, threads)
        return self.row


def _served(w):
    return w is not None and w.packed is not None and (q8k.supports(w.qtype, w.cols) or q8dot.supports(w.qtype))


def _plain(blk):
    """True for a llama block every matrix of which an int8 kernel reads repacked."""
    shaped = blk.wqkv is None and blk.bq is None and blk.q_norm is None and blk.experts is None
    return shaped and all(_served(w) for w in (blk.wq, blk.wk, blk.wv, blk.wo, blk.gate, blk.up, blk.down))


def plan(weights, config, rope):
    """A DecodeStep for these weights, or None where the fast path does not serve them."""
    if not (all(_plain(b) for b in weights.blocks) and _served(weights.output)):
        return None
    return DecodeStep(weights, config, rope)


class DecodeStep:
    """The fast path's plan and buffers for one model; `step` runs it for one sequence and one token."""

    def __init__(self, weights, config, rope):
        self.weights, self.config, self.rope = weights, config, rope
        self.layers = [(_Products([b.wq, b.wk, b.wv]), _Products([b.wo]), _Products([b.gate, b.up]),
                        _Products([b.down])) for b in weights.blocks]
        self.head = _Products([weights.output])
        dim, ff = weights.output.cols, config.n_ff
        widths = (dim, ff, config.n_head * config.head_dim)
        self.acts = {w: {k: _Rounding(k, w) for k in (False, True)} for w in widths}  # width -> kind -> buffers
        self.h = np.empty((1, dim), np.float32)  # [1, dim] a normed row
        self.g = np.empty((1, ff), np.float32)  # [1, ff] silu(gate)·up
        self.att = np.empty((1, config.n_head * config.head_dim), np.float32)  # [1, H*hd]
        self.busy = threading.Lock()

    def step(self, cache, token, heartbeat=None):
        """float32 [1, n_vocab] logits (a new array) of `token` appended to `cache`, whose room for it is
        reserved; None when another thread holds the buffers (the caller takes the general path)."""
        if not self.busy.acquire(blocking=False):
            return None
        try:
            return self._step(cache, token, heartbeat, numba.get_num_threads())
        finally:
            self.busy.release()

    def _step(self, cache, token, heartbeat, threads):
        c, w = self.config, self.weights
        layout = StepLayout([cache], [1])
        cos, sin = self.rope.tables(layout.pos)  # [1, 1, n_rot/2] each
        x = dequantize_rows(w.token_embd, [token])  # [1, dim]
        for li, blk in enumerate(w.blocks):
            if heartbeat is not None:
                heartbeat()
            x += self._attention(li, blk, x, layout, cos, sin, threads)  # [1, dim]
            x += self._ffn(li, blk, x, threads)  # [1, dim]
        rms_norm_into(x, w.output_norm, c.norm_eps, self.h)
        return self.head.run(self.h, self.acts[self.h.shape[1]], threads).copy()  # [1, n_vocab]

    def _attention(self, li, blk, x, layout, cos, sin, threads):
        c, (qkv, wo, _, _) = self.config, self.layers[li]
        rms_norm_into(x, blk.attn_norm, c.norm_eps, self.h)
        row = qkv.run(self.h, self.acts[x.shape[1]], threads)  # [1, (H + 2·KV)·hd]
        nq, nk = c.n_head * c.head_dim, c.n_head_kv * c.head_dim
        q = row[:, :nq].reshape(1, c.n_head, c.head_dim)  # [1, H, hd] a view, rotated in place
        k = row[:, nq:nq + nk].reshape(1, c.n_head_kv, c.head_dim)  # [1, KV, hd]
        v = row[:, nq + nk:].reshape(1, c.n_head_kv, c.head_dim)  # [1, KV, hd]
        self.rope.apply(q, cos, sin)
        self.rope.apply(k, cos, sin)
        store_and_attend(q, k, v, layout.ks, layout.vs, layout.seg, layout.pos, li, self.att, threads)
        return wo.run(self.att, self.acts[self.att.shape[1]], threads)  # [1, dim]

    def _ffn(self, li, blk, x, threads):
        _, _, gu, down = self.layers[li]
        rms_norm_into(x, blk.ffn_norm, self.config.norm_eps, self.h)
        row = gu.run(self.h, self.acts[x.shape[1]], threads)  # [1, 2·ff]
        ff = self.g.shape[1]
        silu_mul_into(row[:, :ff], row[:, ff:], self.g)
        return down.run(self.g, self.acts[ff], threads)  # [1, dim]
