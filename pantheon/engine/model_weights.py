"""Bind a GGUF file's tensors to the weights one architecture needs, checking every shape."""

import dataclasses
from dataclasses import dataclass
from typing import Optional

import numpy as np
from gguf import GGMLQuantizationType as T

from pantheon.errors import MissingTensor, ShapeMismatch
from pantheon.engine.kernels.matmul import dequantize_rows
from pantheon.engine.weights import Weight


@dataclass(frozen=True, eq=False)
class Experts:
    """Mixture-of-experts FFN of one block: a router and one Weight triple per expert."""

    router: Weight
    gate: tuple
    up: tuple
    down: tuple


@dataclass(frozen=True, eq=False)
class Block:
    """One transformer block; optional fields are None where the architecture has no such tensor."""

    attn_norm: np.ndarray
    ffn_norm: np.ndarray
    wo: Weight
    wq: Optional[Weight] = None
    wk: Optional[Weight] = None
    wv: Optional[Weight] = None
    wqkv: Optional[Weight] = None
    bq: Optional[np.ndarray] = None
    bk: Optional[np.ndarray] = None
    bv: Optional[np.ndarray] = None
    q_norm: Optional[np.ndarray] = None
    k_norm: Optional[np.ndarray] = None
    gate: Optional[Weight] = None
    up: Optional[Weight] = None
    down: Optional[Weight] = None
    experts: Optional[Experts] = None


@dataclass(frozen=True, eq=False)
class ModelWeights:
    token_embd: Weight
    output_norm: np.ndarray
    output: Weight
    blocks: tuple


class _Binder:
    """Looks tensors up by their GGUF names and checks their shapes against the config."""

    def __init__(self, tensors):
        self.tensors = tensors

    def has(self, name):
        return name in self.tensors

    def info(self, name, shape):
        t = self.tensors.get(name)
        if t is None:
            raise MissingTensor(f"tensor {name!r} is required but absent")
        if tuple(t.shape) != tuple(shape):
            raise ShapeMismatch(f"tensor {name!r} has shape {tuple(t.shape)}, metadata implies {tuple(shape)}")
        return t

    def matrix(self, name, rows, cols):
        t = self.info(name, (rows, cols))
        return Weight(name, int(t.qtype), rows, cols, t.raw)

    def vector(self, name, n, optional=False):
        if optional and name not in self.tensors:
            return None
        t = self.info(name, (n,))
        if t.qtype == T.F32:
            return np.asarray(t.raw).view(np.float32)  # [n]
        w = Weight(name, int(t.qtype), 1, n, np.asarray(t.raw).reshape(1, -1))
        return dequantize_rows(w, [0])[0]  # [n]

    def experts(self, name, n_expert, rows, cols):
        """One Weight per expert: from the stacked `ffn_*_exps` tensor, or else from per-expert
        `ffn_*.{e}.weight` tensors (old llama.cpp Mixtral files and HF checkpoints)."""
        if not self.has(name):
            single = name.replace("_exps.weight", ".{}.weight")
            if self.has(single.format(0)):
                return tuple(self.matrix(single.format(e), rows, cols) for e in range(n_expert))
        t = self.info(name, (n_expert, rows, cols))
        return tuple(Weight(f"{name}[{e}]", int(t.qtype), rows, cols, t.raw[e]) for e in range(n_expert))


def _attention(b, p, cfg):
    q_rows, kv_rows = cfg.n_head * cfg.head_dim, cfg.n_head_kv * cfg.head_dim
    out = {"wo": b.matrix(p + "attn_output.weight", cfg.dim, q_rows)}
    if b.has(p + "attn_qkv.weight"):
        out["wqkv"] = b.matrix(p + "attn_qkv.weight", q_rows + 2 * kv_rows, cfg.dim)
    else:
        out["wq"] = b.matrix(p + "attn_q.weight", q_rows, cfg.dim)
        out["wk"] = b.matrix(p + "attn_k.weight", kv_rows, cfg.dim)
        out["wv"] = b.matrix(p + "attn_v.weight", kv_rows, cfg.dim)
    out["bq"] = b.vector(p + "attn_q.bias", q_rows, optional=True)
    out["bk"] = b.vector(p + "attn_k.bias", kv_rows, optional=True)
    out["bv"] = b.vector(p + "attn_v.bias", kv_rows, optional=True)
    out["q_norm"] = b.vector(p + "attn_q_norm.weight", cfg.head_dim, optional=True)
    out["k_norm"] = b.vector(p + "attn_k_norm.weight", cfg.head_dim, optional=True)
    return out


ROUTER = "ffn_gate_inp.weight"


def _ffn(b, p, cfg):
    if cfg.n_expert:
        ff = cfg.n_ff_expert or cfg.n_ff
        return {"experts": Experts(
            router=b.matrix(p + ROUTER, cfg.n_expert, cfg.dim),
            gate=b.experts(p + "ffn_gate_exps.weight", cfg.n_expert, ff, cfg.dim),
            up=b.experts(p + "ffn_up_exps.weight", cfg.n_expert, ff, cfg.dim),
            down=b.experts(p + "ffn_down_exps.weight", cfg.n_expert, cfg.dim, ff))}
    if not b.has(p + "ffn_gate.weight"):
        # phi3 fuses gate and up into one ffn_up of 2*n_ff rows: gate is the first half.
        return {"up": b.matrix(p + "ffn_up.weight", 2 * cfg.n_ff, cfg.dim),
                "down": b.matrix(p + "ffn_down.weight", cfg.dim, cfg.n_ff)}
    return {"gate": b.matrix(p + "ffn_gate.weight", cfg.n_ff, cfg.dim),
            "up": b.matrix(p + "ffn_up.weight", cfg.n_ff, cfg.dim),
            "down": b.matrix(p + "ffn_down.weight", cfg.dim, cfg.n_ff)}


def _block(b, i, cfg):
    p = f"blk.{i}."
    return Block(attn_norm=b.vector(p + "attn_norm.weight", cfg.dim),
                 ffn_norm=b.vector(p + "ffn_norm.weight", cfg.dim),
                 **_attention(b, p, cfg), **_ffn(b, p, cfg))


def bind_weights(tensors, cfg) -> ModelWeights:
    """Zero-copy weights for `cfg` from `tensors` (name -> TensorInfo); typed errors on any mismatch."""
    b = _Binder(tensors)
    embd = b.matrix("token_embd.weight", cfg.n_vocab, cfg.dim)
    # Without output.weight the model ties its output projection to the token embeddings.
    out = b.matrix("output.weight", cfg.n_vocab, cfg.dim) if b.has("output.weight") else embd
    return ModelWeights(token_embd=embd, output_norm=b.vector("output_norm.weight", cfg.dim), output=out,
                        blocks=tuple(_block(b, i, cfg) for i in range(cfg.n_layer)))


def map_weights(weights, fn):
    """`weights` (any dataclass or tuple tree of them) with every Weight w replaced by fn(w), called once
    per distinct Weight: a tied output stays tied."""
    done = {}

    def convert(v):
        if isinstance(v, Weight):
            if id(v) not in done:
                done[id(v)] = fn(v)
            return done[id(v)]
        if isinstance(v, tuple):
            return tuple(convert(x) for x in v)
        if dataclasses.is_dataclass(v):
            return dataclasses.replace(v, **{f.name: convert(getattr(v, f.name)) for f in dataclasses.fields(v)})
        return v

    return convert(weights)


def matrices(weights):
    """Every distinct Weight that qmatmul multiplies by (output first): not token_embd, which is only
    looked up (unless the output is tied to it), nor MoE routers, which take the exact float matmul."""
    seen = {}
    map_weights(dataclasses.replace(weights, token_embd=None), lambda w: seen.setdefault(id(w), w))
    return [w for w in seen.values() if not w.name.endswith(ROUTER)]
