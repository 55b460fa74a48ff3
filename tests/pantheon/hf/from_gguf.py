"""Write a GGUF model back out as a HuggingFace directory: the inverse of llama.cpp's converter.

Used to check HF loading against llama.cpp's own logits on ../shared/golden: llama-family q/k rows
are permuted back from interleaved pairs to HF's half-split order, stacked experts are split, names
and hyper-parameters go back to HF's. F16/BF16 tensors are kept bit for bit; quantized ones become F32.
"""

import json

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize
from safetensors.numpy import save_file

from pantheon.gguf.config import config_from_metadata
from pantheon.gguf.file import open_gguf
from pantheon.hf.names import _BLOCK, _GLOBAL

MOE_PREFIX = {"llama": "block_sparse_moe.experts.{e}.", "qwen3moe": "mlp.experts.{e}."}


def half_split(w, n_head):
    """llama.cpp's interleaved q/k rows back to HF's half-split order, per head."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)  # [rows, ...]


def _inverse(cfg):
    """GGUF block-name suffix -> HF suffix for this architecture (phi3's fused names; the router)."""
    inv = {}
    for hf, g in _BLOCK.items():
        if "{e}" not in hf:
            inv.setdefault(g, hf)  # the first HF spelling: up_proj before gate_up_proj, mlp.gate first
    if cfg.arch == "phi3":
        inv["ffn_up.weight"] = "mlp.gate_up_proj.weight"
    if cfg.arch == "llama":
        inv["ffn_gate_inp.weight"] = "block_sparse_moe.gate.weight"
    return inv


def _array(t):
    """(array to store, dtype tag): F16 as float16, BF16 as uint16 bits, anything else dequantized to F32."""
    if t.qtype == T.F16:
        return np.asarray(t.raw).view(np.float16).reshape(t.shape), "F16"
    if t.qtype == T.BF16:
        return np.asarray(t.raw).view(np.uint16).reshape(t.shape), "BF16"
    return dequantize(np.asarray(t.raw), t.qtype).astype(np.float32).reshape(t.shape), "F32"


def _tensors(g, cfg):
    inv, out, bf16 = _inverse(cfg), {}, False
    glob = {v: k for k, v in _GLOBAL.items()}
    for name, t in g.tensors.items():
        a, tag = _array(t)
        bf16 |= tag == "BF16"
        if name in glob:
            out[glob[name]] = a
            continue
        _, layer, rest = name.split(".", 2)
        p = f"model.layers.{layer}."
        if rest.endswith("_exps.weight"):
            kind = {"ffn_gate_exps.weight": "gate", "ffn_up_exps.weight": "up", "ffn_down_exps.weight": "down"}[rest]
            hf = {"gate": "w1", "up": "w3", "down": "w2"}[kind] if cfg.arch == "llama" else kind + "_proj"
            for e in range(a.shape[0]):
                out[p + MOE_PREFIX[cfg.arch].format(e=e) + hf + ".weight"] = a[e]
            continue
        if cfg.arch == "llama" and rest == "attn_q.weight":
            a = half_split(a, cfg.n_head)
        if cfg.arch == "llama" and rest == "attn_k.weight":
            a = half_split(a, cfg.n_head_kv)
        out[p + inv[rest]] = a
    return out, bf16


def _config(cfg, tied):
    model_type = {"llama": "mixtral" if cfg.n_expert else "llama", "qwen3moe": "qwen3_moe"}.get(cfg.arch, cfg.arch)
    out = {"model_type": model_type, "hidden_size": cfg.dim, "num_hidden_layers": cfg.n_layer,
           "num_attention_heads": cfg.n_head, "num_key_value_heads": cfg.n_head_kv, "head_dim": cfg.head_dim,
           "intermediate_size": cfg.n_ff, "rms_norm_eps": cfg.norm_eps, "rope_theta": cfg.rope_base,
           "vocab_size": cfg.n_vocab, "max_position_embeddings": cfg.n_ctx_train, "tie_word_embeddings": tied}
    if cfg.n_rot != cfg.head_dim:
        out["partial_rotary_factor"] = cfg.n_rot / cfg.head_dim
    if cfg.n_expert:
        out.update({"num_local_experts" if model_type == "mixtral" else "num_experts": cfg.n_expert,
                    "num_experts_per_tok": cfg.n_expert_used})
    if model_type == "qwen3_moe":
        out.update({"moe_intermediate_size": cfg.n_ff_expert, "norm_topk_prob": True})
    return out


def gguf_to_hf(gguf_path, out_dir):
    """Write `gguf_path` as an HF directory at `out_dir`; returns out_dir."""
    g = open_gguf(gguf_path)
    cfg = config_from_metadata(g.metadata)
    tensors, bf16 = _tensors(g, cfg)
    out_dir.mkdir(parents=True)
    save_file(tensors, str(out_dir / "model.safetensors"))
    if bf16:
        from tests.pantheon.hf.tinyhf import _retag_bf16

        _retag_bf16(out_dir / "model.safetensors")
    (out_dir / "config.json").write_text(json.dumps(_config(cfg, "output.weight" not in g.tensors)))
    return out_dir
