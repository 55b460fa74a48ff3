"""An 8B-shaped model made on the device from random quant blocks with sane scales (no file, nothing carried).

Q4_0 and Q8_0 fill every matrix with that type; Q4_K_M uses Q4_K, with Q6_K for attn_v, ffn_down and
the output head (llama.cpp's Q4_K_M keeps those at higher precision). Payload bytes are uniform
random; every fp16 scale field is overwritten with a scale that keeps activations O(1).
"""

from dataclasses import dataclass

import numpy as np

from pantheon.engine.cuda.model import GpuModel
from pantheon.engine.cuda.qtypes import Q4_0, Q4_K, Q6_K, Q8_0
from pantheon.engine.cuda.stage import Stage
from pantheon.engine.cuda.upload import DeviceBlock, DeviceMatrix
from pantheon.gguf.config import ModelConfig

# type -> (values per block, bytes per block, byte offsets of fp16 scales, scale value)
LAYOUT = {Q4_0: (32, 18, (0,), 0.02), Q8_0: (32, 34, (0,), 0.002),
          Q4_K: (256, 144, (0, 2), 0.002), Q6_K: (256, 210, (208,), 0.0005)}
MIXES = {"Q4_0": (Q4_0, Q4_0), "Q8_0": (Q8_0, Q8_0), "Q4_K_M": (Q4_K, Q6_K)}


@dataclass(frozen=True)
class Shape:
    dim: int = 4096
    n_layer: int = 32
    n_head: int = 32
    n_head_kv: int = 8
    n_ff: int = 14336
    n_vocab: int = 128256


def config(shape):
    hd = shape.dim // shape.n_head
    return ModelConfig(arch="llama", name="random-8b", n_vocab=shape.n_vocab, n_ctx_train=8192, dim=shape.dim,
                       n_layer=shape.n_layer, n_head=shape.n_head, n_head_kv=shape.n_head_kv, head_dim=hd,
                       n_ff=shape.n_ff, norm_eps=1e-5, rope_base=500000.0, n_rot=hd, neox_rope=False)


def random_bytes(rng, n):
    """uint8 [n] uniform: drawn 8 at a time (one uint8 draw each is ~8x slower: an 8B model is ~5 GB of them)."""
    words = rng.integers(0, np.iinfo(np.uint64).max, size=-(-n // 8), dtype=np.uint64, endpoint=True)  # [n/8]
    return words.view(np.uint8)[:n]  # [n]


def random_matrix(backend, qtype, rows, cols, rng, name="w"):
    """A DeviceMatrix of random blocks of `qtype` whose scales are all set to the type's sane value."""
    values, nbytes, scale_at, scale = LAYOUT[qtype]
    blocks = cols // values
    raw = random_bytes(rng, rows * blocks * nbytes).reshape(1, rows, blocks, nbytes)  # [1, rows, blocks, bytes]
    d = np.array([scale], np.float16).view(np.uint8)  # [2] the scale's bytes
    for o in scale_at:
        raw[..., o], raw[..., o + 1] = d[0], d[1]
    if qtype == Q6_K:
        raw[..., 192:208] = raw[..., 192:208] % 32  # int8 sub-block scales 0..31
    return DeviceMatrix(name, qtype, rows, cols, backend.upload(raw.reshape(1, rows, blocks * nbytes)))


def _block(backend, cfg, main, hi, rng):
    qd, kd = cfg.n_head * cfg.head_dim, cfg.n_head_kv * cfg.head_dim
    ones = backend.upload(np.ones(cfg.dim, np.float32))
    m = lambda t, r, c: random_matrix(backend, t, r, c, rng)  # noqa: E731
    return DeviceBlock(attn_norm=ones, ffn_norm=ones, qkv=(m(main, qd, cfg.dim), m(main, kd, cfg.dim),
                                                          m(hi, kd, cfg.dim)),
                       wo=m(main, cfg.dim, qd), bqkv=None, q_norm=None, k_norm=None,
                       gate_up=(m(main, cfg.n_ff, cfg.dim), m(main, cfg.n_ff, cfg.dim)), down=m(hi, cfg.dim, cfg.n_ff))


def make_model(backend, mix="Q4_0", shape=Shape(), seed=0):
    """A GpuModel of `shape` on `backend`, weights of `mix` ('Q4_0', 'Q8_0' or 'Q4_K_M'), every layer
    its own random blocks (made on the host, uploaded once per matrix)."""
    cfg = config(shape)
    main, hi = MIXES[mix]
    rng = np.random.default_rng(seed)
    blocks = [_block(backend, cfg, main, hi, rng) for _ in range(cfg.n_layer)]
    stage = Stage(backend, cfg, blocks, 0)
    embd = random_matrix(backend, main, cfg.n_vocab, cfg.dim, rng, "token_embd")
    out = random_matrix(backend, hi, cfg.n_vocab, cfg.dim, rng, "output")
    return GpuModel(None, cfg, [stage], embd, out, backend.upload(np.ones(cfg.dim, np.float32)))


def decode_bytes(model):
    """Bytes one decode step reads from weights (every matrix once, one embedding row)."""
    mats = [m for s in model.stages for m in s.mats] + [model.output]
    return sum(m.nbytes for m in mats) + model.embd.nbytes // model.config.n_vocab
