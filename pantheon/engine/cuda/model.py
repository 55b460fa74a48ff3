"""The GPU model: the CPU Model's contract (config, tokenizer, new_cache, forward, logits) over device stages.

Layers are split into contiguous ranges, one Stage per device (a single device holds them all);
the hidden state hops once per stage boundary. Token embeddings live with the first stage, the
output norm and head with the last. Logits come back to the host as float32.
"""

import numpy as np

from pantheon.engine.cuda.backend import open_backend
from pantheon.engine.cuda.graph import DecodePlan
from pantheon.engine.cuda.kvpool import DeviceCache, SlotPool, pool_bytes
from pantheon.engine.cuda.matvec import MAX_BATCH
from pantheon.engine.cuda.stage import upload_stage
from pantheon.engine.cuda.upload import Uploader
from pantheon.engine.model_weights import bind_weights
from pantheon.engine.model_text import ModelText
from pantheon.source import open_files


def split_layers(n_layer, shares):
    """Contiguous layer ranges [(first, last)] in proportion to `shares` (e.g. free bytes per device),
    every range non-empty while there are layers enough."""
    total = float(sum(shares))
    bounds, acc = [0], 0.0
    for s in shares[:-1]:
        acc += s
        bounds.append(int(round(n_layer * acc / total)))
    bounds.append(n_layer)
    for i in range(1, len(bounds) - 1):  # at least one layer per stage
        bounds[i] = min(max(bounds[i], bounds[i - 1] + 1), n_layer - (len(bounds) - 1 - i))
    return [(bounds[i], bounds[i + 1]) for i in range(len(shares))]


class GpuModel(ModelText):
    """A model whose weights and KV cache live on one or more CUDA devices."""

    def __init__(self, gguf, config, stages, embd, output, output_norm, log=()):
        self.gguf, self.config, self.stages = gguf, config, stages
        self.embd, self.output, self.output_norm = embd, output, output_norm
        self.load_log = [line for s in stages for line in s.log] + list(log)
        self.pool = None
        self.graphs = True  # decode steps of up to MAX_BATCH sequences replay a capture (graph.py)
        self.plans = {}  # n -> DecodePlan

    @classmethod
    def upload(cls, gguf, config, weights, backends, shares=None):
        """Layers split over `backends` in proportion to `shares`; embeddings on the first, head on the last."""
        ranges = split_layers(config.n_layer, shares or [1] * len(backends))
        stages = [upload_stage(b, config, weights, a, z) for b, (a, z) in zip(backends, ranges)]
        first, last = backends[0], backends[-1]
        embd = Uploader(first).matrix(weights.token_embd)
        head_up = Uploader(last)
        output = embd if weights.output is weights.token_embd and first is last else head_up.matrix(weights.output)
        return cls(gguf, config, stages, embd, output, head_up.vector(weights.output_norm), head_up.log)

    @property
    def int8(self):
        """Whether decode products of quantized weights take int8 activations (Ops.int8; on by default)."""
        return self.stages[0].ops.int8

    @int8.setter
    def int8(self, on):
        for s in self.stages:
            s.ops.int8 = bool(on)
        self.plans = {}  # a captured step replays the kernels it was captured with

    @property
    def layer_ranges(self):
        return [(s.first, s.first + len(s.blocks)) for s in self.stages]

    def allocate(self, n_ctx, slots):
        """The KV pool (`slots` sequences of `n_ctx` tokens) and tile scratch on every stage, once."""
        self.pool = SlotPool(slots, n_ctx)
        self.pool.copy = self._copy_slot
        for i, s in enumerate(self.stages):
            s.allocate(slots, n_ctx, [self.output] if i == len(self.stages) - 1 else [])

    def _copy_slot(self, src, dst, n):
        for s in self.stages:
            s.copy_kv(src, dst, n)

    def kv_bytes(self):
        return 0 if self.pool is None else pool_bytes(self.config, self.pool.n, self.pool.n_ctx)

    def new_cache(self, n_ctx=None):
        """A sequence's slot in the pool (n_ctx defaults to the pool's context)."""
        if self.pool is None:
            self.allocate(n_ctx or self.config.n_ctx_train, 4)
        return DeviceCache(self.pool, n_ctx or self.pool.n_ctx)

    def logits(self, tokens):
        """float32 [len(tokens), n_vocab]: logits at every position of `tokens`, in one pass."""
        cache = self.new_cache(max(len(tokens), 1) if self.pool is None else None)
        return self.forward([(cache, tokens)], all_logits=True)[0]

    def forward(self, segments, all_logits=False, hidden=(), every=()):
        """Extend each (cache, new token ids) segment; per segment float32 [len(ids), n_vocab] if all_logits
        (or its index is in `every`), else [1, n_vocab] (its last position); a segment whose index is in
        `hidden` gets its final normed hidden states [len(ids), dim] instead (an embedding's input: no
        output head for it)."""
        segs = [(c, np.asarray(t, dtype=np.int32)) for c, t in segments]
        for cache, toks in segs:
            cache.reserve(len(toks))
        ids = np.concatenate([t for _, t in segs])  # [N]
        pos = np.concatenate([np.arange(len(c), len(c) + len(t), dtype=np.int32) for c, t in segs])  # [N]
        slot = np.concatenate([np.full(len(t), c.slot, np.int32) for c, t in segs])  # [N]
        if self.graphs and not (all_logits or hidden or every) and len(ids) == len(segs) <= MAX_BATCH:
            out = self._plan(len(ids)).run(ids, pos, slot)  # [n, n_vocab] a decode step
            out = [out[i:i + 1] for i in range(len(segs))]
        else:
            spans = [(c.slot, len(c), len(t)) for c, t in segs] if len(ids) > MAX_BATCH else None
            out = self._outputs(segs, self._run(ids, pos, slot, spans), all_logits, frozenset(hidden),
                                frozenset(every))
        for cache, toks in segs:
            cache.tokens.extend(int(t) for t in toks)
        return out

    def _outputs(self, segs, ran, all_logits, hidden, every):
        """Per segment: logits rows through the head, `hidden` segments' rows through the final norm."""
        last, x = ran
        ends = np.cumsum([len(t) for _, t in segs])  # [segments]
        spans = [(e - len(t), e) for (_, t), e in zip(segs, ends)]
        out = [None] * len(segs)
        for i in hidden:
            out[i] = self._normed(last, x, np.arange(*spans[i], dtype=np.int32))  # [n, dim]
        heads = [i for i in range(len(segs)) if i not in hidden]
        picks = [np.arange(*spans[i]) if all_logits or i in every else np.array([spans[i][1] - 1])
                 for i in heads]  # rows each
        if heads:
            logits = self._head(last, x, np.concatenate(picks).astype(np.int32))  # [rows, n_vocab]
            for i, part in zip(heads, np.split(logits, np.cumsum([len(p) for p in picks])[:-1])):
                out[i] = part
        return out

    def _plan(self, n):
        if n not in self.plans:
            self.plans[n] = DecodePlan(self, n)
        return self.plans[n]

    def _run(self, ids, pos, slot, spans=None):
        """(last stage, x [N, dim] on its device): every layer over every row (`spans`: Stage.forward's)."""
        first = self.stages[0]
        first.backend.activate()
        x = first.backend.empty((len(ids), self.config.dim))  # [N, dim]
        first.ops.embed(self.embd, first.backend.upload(ids), x)
        prev = None
        for s in self.stages:
            if prev is not None:
                prev.backend.synchronize()
                x = s.backend.take(x)  # [N, dim] the one hop per stage boundary
            s.forward(x, s.backend.upload(slot), s.backend.upload(pos), spans=spans)
            prev = s
        return prev, x

    def _select(self, last, x, rows):
        b = last.backend
        b.activate()
        return x[b.upload(rows)] if len(rows) != len(x) else x  # [rows, dim] (on the stream CuPy uses)

    def _head(self, last, x, rows):
        sel = self._select(last, x, rows)  # [rows, dim]
        b = last.backend
        logits = b.empty((len(rows), self.output.rows))  # [rows, n_vocab]
        return b.to_host(self.head(last, sel, b.empty(sel.shape), logits))

    def _normed(self, last, x, rows):
        """float32 [rows, dim] on the host: rms_norm(x[rows]) with the output norm."""
        sel = self._select(last, x, rows)  # [rows, dim]
        h = last.backend.empty(sel.shape)  # [rows, dim]
        last.ops.rms_norm(sel, self.output_norm, self.config.norm_eps, self.config.dim, h)
        return last.backend.to_host(h)

    def head(self, last, x, h, logits, work=None):
        """logits float32 [n, n_vocab] = output(rms_norm(x)) on the last stage, h [n, dim] the normed rows
        (launches only: the captured decode step ends with it too)."""
        last.ops.rms_norm(x, self.output_norm, self.config.norm_eps, self.config.dim, h)
        return last.matmul([self.output], h, logits, work)

    def device_bytes(self):
        """Bytes this model holds per device ordinal: weights, KV pool and scratch."""
        out = {}
        for s in self.stages:
            n = s.weight_bytes + (0 if s.kcache is None else 2 * int(s.kcache.nbytes))
            n += 0 if s.scratch is None else int(s.scratch.nbytes)
            out[s.backend.ordinal] = out.get(s.backend.ordinal, 0) + n
        o0, o1 = self.stages[0].backend.ordinal, self.stages[-1].backend.ordinal
        out[o0] += self.embd.nbytes
        if self.output is not self.embd:
            out[o1] += self.output.nbytes
        return out

    def close(self):
        """Drop every device array and return the pools' memory to the driver (unload)."""
        self.plans = {}  # their graphs hold pointers into the arrays dropped below
        for s in self.stages:
            s.release()
        self.embd = self.output = self.output_norm = None
        for s in self.stages:
            s.backend.release()


def open_gpu_model(path, ordinals, shares=None, config=None):
    """Open a model (as open_model does) onto CUDA `ordinals`, one stage each: typed errors on a bad file,
    UnsupportedDevice when the CUDA stack is missing."""
    backends = [open_backend(o) for o in ordinals]
    files, cfg = open_files(path, config)
    return GpuModel.upload(files, cfg, bind_weights(files.tensors, cfg), backends, shares)
