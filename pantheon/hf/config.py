"""A HuggingFace config.json read into the engine's frozen ModelConfig, refusing what the engine cannot run."""

import json
import os

from pantheon.errors import AbsurdValue, GGUFError, MissingKey, UnsupportedArchitecture
from pantheon.gguf.config import MAX_DIM, MAX_LAYERS, ModelConfig

# HF model_type -> the GGUF architecture the engine runs it as (llama.cpp's converter does the same).
ARCHITECTURES = {"llama": "llama", "mistral": "llama", "mixtral": "llama", "qwen2": "qwen2",
                 "qwen3": "qwen3", "qwen3_moe": "qwen3moe", "phi3": "phi3"}
MAX_CONFIG_BYTES = 1 << 20


class HFConfigError(GGUFError):
    """config.json is unreadable or states something Pantheon cannot run."""


def read_json(path, what, limit=MAX_CONFIG_BYTES):
    """The JSON object in `path`; HFConfigError names the file when it is too big, not JSON or not an object."""
    try:
        if os.path.getsize(path) > limit:
            raise HFConfigError(f"{path}: {what} is over {limit} bytes")
        with open(path, "rb") as f:
            value = json.loads(f.read().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HFConfigError(f"{path}: {what} is not UTF-8 JSON: {e}") from None
    if not isinstance(value, dict):
        raise HFConfigError(f"{path}: {what} is a JSON {type(value).__name__}, not an object")
    return value


def _int(cfg, key, default=None, lo=1, hi=MAX_DIM):
    value = cfg.get(key)
    if value is None:
        if default is None:
            raise MissingKey(f"config.json key {key!r} is required but absent")
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise AbsurdValue(f"config.json {key} = {value!r} is not an integer in {lo}..{hi}")
    return value


def _float(cfg, key, default):
    value = cfg.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise AbsurdValue(f"config.json {key} = {value!r} is not a positive number")
    return float(value)


def model_type(cfg):
    """The engine architecture of an HF config; UnsupportedArchitecture names what it found."""
    mt = cfg.get("model_type")
    if mt not in ARCHITECTURES:
        found = mt if mt is not None else cfg.get("architectures")
        raise UnsupportedArchitecture(f"config.json model_type {found!r} is not one of {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[mt]


def _rope(cfg, head_dim):
    """(base, n_rot); rope scaling the engine does not implement is refused, not silently ignored."""
    params = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    scaling = cfg.get("rope_scaling") or params
    kind = scaling.get("rope_type", scaling.get("type", "default")) if isinstance(scaling, dict) else scaling
    if kind not in (None, "default"):
        raise HFConfigError(f"config.json rope_scaling type {kind!r} is not supported (only unscaled rope)")
    base = _float(cfg, "rope_theta", _float(params, "rope_theta", 10000.0))
    factor = _float(cfg, "partial_rotary_factor", _float(params, "partial_rotary_factor", 1.0))
    n_rot = int(head_dim * factor)
    if not 0 < n_rot <= head_dim or n_rot % 2:
        raise AbsurdValue(f"config.json partial_rotary_factor {factor} gives {n_rot} rotary dims of {head_dim}")
    return base, n_rot


def _experts(cfg, arch):
    n = cfg.get("num_local_experts") or cfg.get("num_experts") or 0
    if not n:
        return 0, 0, 0
    n = _int(cfg, "num_local_experts" if cfg.get("num_local_experts") else "num_experts", hi=1024)
    used = _int(cfg, "num_experts_per_tok", hi=n)
    if arch == "qwen3moe":
        if cfg.get("mlp_only_layers") or _int(cfg, "decoder_sparse_step", 1) != 1:
            raise HFConfigError("config.json mlp_only_layers / decoder_sparse_step: dense layers between "
                                "MoE layers are not supported")
        if cfg.get("norm_topk_prob") is False:
            raise HFConfigError("config.json norm_topk_prob false is not supported (experts' weights are renormalised)")
        return n, used, _int(cfg, "moe_intermediate_size", hi=1 << 20)
    return n, used, _int(cfg, "intermediate_size", hi=1 << 20)


def _refuse_unsupported(cfg, arch):
    if cfg.get("mlp_bias"):
        raise HFConfigError("config.json mlp_bias true is not supported")
    if arch == "llama" and cfg.get("attention_bias"):
        raise HFConfigError("config.json attention_bias true is not supported for llama/mistral (output bias)")


def config_from_hf(cfg, name="") -> ModelConfig:
    """The ModelConfig of an HF config.json object. HF checkpoints keep q/k rows in the half-split
    order that HF's rotate_half expects, so every architecture rotates NeoX-style here (llama.cpp's
    converter instead permutes llama's rows to the interleaved order and rotates pairs)."""
    arch = model_type(cfg)
    _refuse_unsupported(cfg, arch)
    dim = _int(cfg, "hidden_size")
    n_head = _int(cfg, "num_attention_heads", hi=4096)
    n_head_kv = _int(cfg, "num_key_value_heads", n_head, hi=n_head)
    if n_head % n_head_kv:
        raise AbsurdValue(f"config.json num_attention_heads {n_head} is not a multiple of num_key_value_heads {n_head_kv}")
    head_dim = _int(cfg, "head_dim", dim // n_head)
    base, n_rot = _rope(cfg, head_dim)
    n_expert, n_used, n_ff_expert = _experts(cfg, arch)
    return ModelConfig(
        arch=arch, name=name or str(cfg.get("_name_or_path") or cfg["model_type"]),
        n_vocab=_int(cfg, "vocab_size", hi=1 << 22),
        n_ctx_train=_int(cfg, "max_position_embeddings", 4096, hi=1 << 24),
        dim=dim, n_layer=_int(cfg, "num_hidden_layers", hi=MAX_LAYERS),
        n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
        n_ff=_int(cfg, "intermediate_size", n_ff_expert or None, hi=1 << 20),
        norm_eps=_float(cfg, "rms_norm_eps", 1e-6), rope_base=base, n_rot=n_rot, neox_rope=True,
        n_expert=n_expert, n_expert_used=n_used, n_ff_expert=n_ff_expert)


def tied_embeddings(cfg):
    """Whether the output projection is the token embedding (tie_word_embeddings, HF's default false)."""
    return bool(cfg.get("tie_word_embeddings", False))
