"""The frozen model configuration read from GGUF metadata: architecture and hyper-parameters."""

import math
import numbers
from dataclasses import dataclass

from pantheon.errors import AbsurdValue, MissingKey, UnsupportedArchitecture

ARCHITECTURES = ("llama", "qwen2", "qwen3", "qwen3moe", "phi3")
# llama.cpp rotates interleaved pairs for llama (LLAMA_ROPE_TYPE_NORM), halves for the rest (NEOX).
NEOX_ROPE = frozenset(("qwen2", "qwen3", "qwen3moe", "phi3"))
MAX_DIM = 1 << 17
MAX_LAYERS = 1024
# llama.cpp's enum llama_pooling_type, as `{arch}.pooling_type` stores it: how an embedding is read off
# the final hidden states ("rank" is a reranker's classification head)
POOLING_TYPES = ("none", "mean", "cls", "last", "rank")
POOLINGS = POOLING_TYPES[1:4]  # those that pool a sequence into one vector (what embedding requests run)
# what an embed request may ask: a pooling, a reranker's scores, or every position's state (none); the
# order is the ring's code for each (workers.protocol), so a new kind goes at the end
EMBED_KINDS = POOLINGS + ("rank", "none")


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of one model, exactly as its GGUF states them (defaults as llama.cpp's)."""

    arch: str
    name: str
    n_vocab: int
    n_ctx_train: int
    dim: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    norm_eps: float
    rope_base: float
    n_rot: int
    neox_rope: bool
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_expert: int = 0
    pooling: str = ""  # one of POOLING_TYPES when the file states one, else "" (a generative model)

    @property
    def n_group(self):
        """Query heads sharing one KV head (GQA)."""
        return self.n_head // self.n_head_kv


def _get(meta, key, default=None, *, kind=int):
    """The value of `key` as `kind` (int or float); AbsurdValue for a string, array, bool, inf or NaN."""
    if key not in meta:
        if default is None:
            raise MissingKey(f"metadata key {key!r} is required but absent")
        return default
    value = meta[key]
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise AbsurdValue(f"metadata key {key!r} = {str(value)[:40]} is not a finite number")
    if kind is int and value != int(value):
        raise AbsurdValue(f"metadata key {key!r} = {value} is not a whole number")
    return kind(value)


def _positive_real(name, value):
    if not value > 0:
        raise AbsurdValue(f"{name} = {value} must be positive")
    return value


def _positive(name, value, limit):
    if not 0 < value <= limit:
        raise AbsurdValue(f"{name} = {value} is outside 1..{limit}")
    return value


def _architecture(meta):
    arch = meta.get("general.architecture")
    if arch is None:
        raise MissingKey("metadata key 'general.architecture' is required but absent")
    if not isinstance(arch, str) or arch not in ARCHITECTURES:
        raise UnsupportedArchitecture(f"architecture {str(arch)[:40]!r} is not one of {', '.join(ARCHITECTURES)}")
    return arch


def _vocab_size(meta, arch):
    if f"{arch}.vocab_size" in meta:
        return _get(meta, f"{arch}.vocab_size")
    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list):
        raise MissingKey(f"neither {arch}.vocab_size nor tokenizer.ggml.tokens is present")
    return len(tokens)


def _attention(meta, arch, dim):
    n_head = _positive("head_count", _get(meta, f"{arch}.attention.head_count"), 4096)
    n_head_kv = _positive("head_count_kv", _get(meta, f"{arch}.attention.head_count_kv", n_head), n_head)
    if n_head % n_head_kv:
        raise AbsurdValue(f"head_count {n_head} is not a multiple of head_count_kv {n_head_kv}")
    head_dim = _positive("key_length", _get(meta, f"{arch}.attention.key_length", dim // n_head), MAX_DIM)
    value_dim = _get(meta, f"{arch}.attention.value_length", head_dim)
    if value_dim != head_dim:
        raise AbsurdValue(f"value_length {value_dim} differs from key_length {head_dim}")
    return n_head, n_head_kv, head_dim


def _experts(meta, arch):
    n_expert = _get(meta, f"{arch}.expert_count", 0)
    if not n_expert:
        return 0, 0, 0
    used = _positive("expert_used_count", _get(meta, f"{arch}.expert_used_count"), n_expert)
    ff = _get(meta, f"{arch}.expert_feed_forward_length", 0)
    return _positive("expert_count", n_expert, 1024), used, ff


def _pooling(meta, arch):
    code = _get(meta, f"{arch}.pooling_type", -1)
    if code == -1:
        return ""
    if not 0 <= code < len(POOLING_TYPES):
        raise AbsurdValue(f"pooling_type {code} is not one of llama.cpp's 0..{len(POOLING_TYPES) - 1}")
    return POOLING_TYPES[code]


def config_from_metadata(meta) -> ModelConfig:
    """Build the config; MissingKey/AbsurdValue/UnsupportedArchitecture name what is wrong."""
    arch = _architecture(meta)
    dim = _positive("embedding_length", _get(meta, f"{arch}.embedding_length"), MAX_DIM)
    n_head, n_head_kv, head_dim = _attention(meta, arch, dim)
    n_expert, n_used, n_ff_expert = _experts(meta, arch)
    n_rot = _get(meta, f"{arch}.rope.dimension_count", head_dim)
    if not 0 < n_rot <= head_dim or n_rot % 2:
        raise AbsurdValue(f"rope.dimension_count {n_rot} must be even and within 1..{head_dim}")
    return ModelConfig(
        arch=arch, name=str(meta.get("general.name", arch)),
        n_vocab=_positive("vocab_size", _vocab_size(meta, arch), 1 << 22),
        n_ctx_train=_positive("context_length", _get(meta, f"{arch}.context_length", 4096), 1 << 24),
        dim=dim, n_layer=_positive("block_count", _get(meta, f"{arch}.block_count"), MAX_LAYERS),
        n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
        n_ff=_positive("feed_forward_length", _get(meta, f"{arch}.feed_forward_length", n_ff_expert or 1), 1 << 20),
        norm_eps=_positive_real("layer_norm_rms_epsilon",
                                _get(meta, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5, kind=float)),
        rope_base=_positive_real("rope.freq_base", _get(meta, f"{arch}.rope.freq_base", 10000.0, kind=float)),
        n_rot=n_rot, neox_rope=arch in NEOX_ROPE,
        n_expert=n_expert, n_expert_used=n_used, n_ff_expert=n_ff_expert, pooling=_pooling(meta, arch))
