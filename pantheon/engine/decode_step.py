"""Decode steps (each sequence one new token) over repacked weights with their buffers kept: the fast path.

A decode step of a TinyLlama-shaped model spends ~3 ms of Python around its kernels: per product an
activations object, its arrays, a dispatch on the weight's type and layout, per layer a dozen arrays.
Between kernels that stream the weights from DRAM, the interpreter's working set has left the
caches, so each of those operations costs several times what it costs hot. This path resolves all
of that once per model: each product's kernel, repacked matrix, output columns and prefetch distance;
each input's int8 rounding into arrays kept between steps. It calls the same kernels and row functions
in the same order as Model's general path, so its logits are the same bits (tests/.../test_decode_step.py).

It serves the llama layout only (separate q, k, v without biases or norms, a gated FFN, no experts) and
only when every matrix is repacked (engine.repacked) for an int8 kernel; anything else, and a second
thread arriving while a step runs, takes the general path. Rows are the step's sequences, one token each
(a batch of decode streams as one); one row's products land in views of its kept outputs, several
rows' members are copied out of a stack's output as the general path does, but for a stacked gate and
up, whose halves silu reads in place.
"""

import threading

import numba
import numpy as np

from pantheon.engine.attention import StepLayout
from pantheon.engine.kernels import q8dot, q8k, q8k_acts
from pantheon.engine.kernels.attention_tiles import store_and_attend
from pantheon.engine.kernels.matmul import dequantize_rows
from pantheon.engine.kernels.stream import prefetch_ahead
from pantheon.engine.ops import rms_norm_into, silu_mul_halves_into, silu_mul_into


class _Rounding:
    """One input width's int8 rounding for n rows, kept between steps: per 256 (Q8_K) for K-quants, else per 32."""

    def __init__(self, k_quant, n, cols):
        per = 256 if k_quant else 32
        self.k_quant = k_quant
        self.q = np.empty((n, cols), np.int8)  # [n, cols]
        self.xq = self.q.view(np.uint8)  # [n, cols] the bytes the kernels load
        self.xd = np.empty((n, cols // per), np.float32)  # [n, cols/per] scales
        self.sums = np.empty((n, cols // (16 if k_quant else 32)), np.int16 if k_quant else np.int32)

    def round(self, x):
        (q8k_acts.quantize_into if self.k_quant else q8dot.quantize_into)(x, self.q, self.xd, self.sums)


class _Call:
    """One kernel call: a repacked matrix (or a stack of them, engine.repacked) and the members it serves."""

    def __init__(self, w, packed, rows, members):
        self.k_quant = q8k.supports(w.qtype, w.cols)
        self.kernel = (q8k if self.k_quant else q8dot).repacked_kernel(w.qtype)
        self.qtype, self.packed, self.rows, self.members = w.qtype, packed, rows, members  # members: (start, end)


class _Products:
    """Matrices that multiply one input: the calls for them, a stack in one call."""

    def __init__(self, ws):
        self.calls, i = [], 0
        while i < len(ws):
            s = ws[i].stack
            if s is not None and s.serves(ws, i):
                self.calls.append(_Call(ws[i], s.packed, s.spans[-1][1], s.spans))
                i += len(s.names)
            else:
                self.calls.append(_Call(ws[i], ws[i].packed, ws[i].rows, ((0, ws[i].rows),)))
                i += 1
        self.kinds = sorted({c.k_quant for c in self.calls})
        spans = self.calls[0].members
        # One call whose output is two members of one width (a stacked gate and up): read in place.
        self.halves = len(self.calls) == 1 and len(spans) == 2 and spans[0][1] * 2 == spans[1][1]

    def outputs(self, n, arrays):
        """Each call's output [n, rows] and its prefetch distance; through `arrays` (place and shape -> array)
        calls of one shape share theirs, every layer's and every product's: a step uses up each product's
        output (adds it into x, rotates and attends, or gates it) before the next product runs."""
        return [(arrays.setdefault((i, n, c.rows), np.empty((n, c.rows), np.float32)), prefetch_ahead(c.qtype, n))
                for i, c in enumerate(self.calls)]

    def multiply(self, x, acts, outs, threads):
        """x [n, cols] rounded once per kind, and each call's kernel into its kept output (outs)."""
        for kind in self.kinds:
            acts[kind].round(x)
        for c, (out, ahead) in zip(self.calls, outs):
            a = acts[c.k_quant]
            c.kernel(c.packed, c.rows, a.xq, a.xd, a.sums, out, threads, ahead)

    def run(self, x, acts, outs, threads):
        """Each member's product x [n, cols] times it, float32 [n, rows] C-contiguous (a view of the kept
        output for one row, a copy for several: what the general path's stacks hand on)."""
        self.multiply(x, acts, outs, threads)
        return [np.ascontiguousarray(out[:, s:e]) for c, (out, _) in zip(self.calls, outs)
                for s, e in c.members]  # [n, rows] each


class _Buffers:
    """A step of n rows' arrays, kept for the next step of as many."""

    def __init__(self, plan, n):
        c = plan.config
        widths = (plan.dim, c.n_ff, c.n_head * c.head_dim)
        self.acts = {w: {k: _Rounding(k, n, w) for k in (False, True)} for w in widths}  # width -> kind -> arrays
        self.h = np.empty((n, plan.dim), np.float32)  # [n, dim] normed rows
        self.g = np.empty((n, c.n_ff), np.float32)  # [n, ff] silu(gate)·up
        self.att = np.empty((n, c.n_head * c.head_dim), np.float32)  # [n, H*hd]
        arrays = {}  # (place, rows, columns) -> [rows, columns]: outputs shared by the calls of one shape
        self.layers = [tuple(p.outputs(n, arrays) for p in layer) for layer in plan.layers]
        self.head = plan.head.outputs(n, {})


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
    """The fast path's plan and, per row count, its buffers for one model; `step` runs it."""

    def __init__(self, weights, config, rope):
        self.weights, self.config, self.rope = weights, config, rope
        self.dim = weights.output.cols
        self.layers = [(_Products([b.wq, b.wk, b.wv]), _Products([b.wo]), _Products([b.gate, b.up]),
                        _Products([b.down])) for b in weights.blocks]
        self.head = _Products([weights.output])
        self.buffers = {}  # rows -> _Buffers: one row's, and the last batch size's
        self.busy = threading.Lock()

    def step(self, caches, tokens, heartbeat=None):
        """float32 [n, n_vocab] logits (a new array) of tokens[i] appended to caches[i], whose room for it is
        reserved; None when another thread holds the buffers (the caller takes the general path)."""
        if not self.busy.acquire(blocking=False):
            return None
        try:
            n = len(tokens)
            if n not in self.buffers:
                self.buffers = {k: b for k, b in self.buffers.items() if k == 1}  # a server's batch size moves
                self.buffers[n] = _Buffers(self, n)
            return self._step(caches, tokens, heartbeat, numba.get_num_threads(), self.buffers[n])
        finally:
            self.busy.release()

    def _step(self, caches, tokens, heartbeat, threads, buf):
        c, w = self.config, self.weights
        layout = StepLayout(caches, [1] * len(caches))
        cos, sin = self.rope.tables(layout.pos)  # [n, 1, n_rot/2] each
        x = dequantize_rows(w.token_embd, tokens)  # [n, dim]
        for li, blk in enumerate(w.blocks):
            if heartbeat is not None:
                heartbeat()
            x += self._attention(li, blk, x, layout, cos, sin, threads, buf)  # [n, dim]
            x += self._ffn(li, blk, x, threads, buf)  # [n, dim]
        rms_norm_into(x, w.output_norm, c.norm_eps, buf.h)
        return self.head.run(buf.h, buf.acts[self.dim], buf.head, threads)[0].copy()  # [n, n_vocab]

    def _attention(self, li, blk, x, layout, cos, sin, threads, buf):
        c, n, (qkv, wo, _, _), (o_qkv, o_wo, _, _) = self.config, len(x), self.layers[li], buf.layers[li]
        rms_norm_into(x, blk.attn_norm, c.norm_eps, buf.h)
        q, k, v = qkv.run(buf.h, buf.acts[self.dim], o_qkv, threads)  # [n, H*hd], [n, KV*hd] x2
        q = q.reshape(n, c.n_head, c.head_dim)  # [n, H, hd], rotated in place
        k = k.reshape(n, c.n_head_kv, c.head_dim)  # [n, KV, hd]
        self.rope.apply(q, cos, sin)
        self.rope.apply(k, cos, sin)
        v = v.reshape(n, c.n_head_kv, c.head_dim)  # [n, KV, hd]
        store_and_attend(q, k, v, layout.ks, layout.vs, layout.seg, layout.pos, li, buf.att, threads)
        return wo.run(buf.att, buf.acts[buf.att.shape[1]], o_wo, threads)[0]  # [n, dim]

    def _ffn(self, li, blk, x, threads, buf):
        (_, _, gu, down), (_, _, o_gu, o_down) = self.layers[li], buf.layers[li]
        rms_norm_into(x, blk.ffn_norm, self.config.norm_eps, buf.h)
        if gu.halves:
            gu.multiply(buf.h, buf.acts[self.dim], o_gu, threads)
            silu_mul_halves_into(o_gu[0][0], buf.g)  # [n, 2·ff] in place
        else:
            g, u = gu.run(buf.h, buf.acts[self.dim], o_gu, threads)  # [n, ff] x2
            silu_mul_into(g, u, buf.g)
        return down.run(buf.g, buf.acts[buf.g.shape[1]], o_down, threads)[0]  # [n, dim]
