"""HuggingFace tensor names renamed to the GGUF names the engine binds (as llama.cpp's converter names them)."""

import re

from pantheon.errors import GGUFError

_GLOBAL = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}

# The part after `model.layers.{i}.` -> the part after `blk.{i}.`; `{e}` is an expert index.
_BLOCK = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.qkv_proj.weight": "attn_qkv.weight",  # phi3: q, k, v rows stacked
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "mlp.gate_up_proj.weight": "ffn_up.weight",  # phi3: gate rows first, then up rows
    "mlp.gate.weight": "ffn_gate_inp.weight",  # qwen3_moe router
    "mlp.experts.{e}.gate_proj.weight": "ffn_gate.{e}.weight",
    "mlp.experts.{e}.up_proj.weight": "ffn_up.{e}.weight",
    "mlp.experts.{e}.down_proj.weight": "ffn_down.{e}.weight",
    "block_sparse_moe.gate.weight": "ffn_gate_inp.weight",  # mixtral router
    "block_sparse_moe.experts.{e}.w1.weight": "ffn_gate.{e}.weight",
    "block_sparse_moe.experts.{e}.w3.weight": "ffn_up.{e}.weight",
    "block_sparse_moe.experts.{e}.w2.weight": "ffn_down.{e}.weight",
}
_LAYER = re.compile(r"model\.layers\.(0|[1-9][0-9]{0,4})\.(.+)")
_EXPERT = re.compile(r"\.(0|[1-9][0-9]{0,4})\.")
# Buffers some exporters save that the engine recomputes.
_IGNORED = re.compile(r"model\.layers\.[0-9]+\.self_attn\.rotary_emb\.inv_freq")


class UnknownTensor(GGUFError):
    """A checkpoint holds tensors no supported architecture has: refusing beats ignoring weights."""


def gguf_name(hf_name):
    """The GGUF name of an HF tensor name, '' for buffers to skip, None when unknown."""
    if hf_name in _GLOBAL:
        return _GLOBAL[hf_name]
    if _IGNORED.fullmatch(hf_name):
        return ""
    m = _LAYER.fullmatch(hf_name)
    if m is None:
        return None
    layer, rest = m.groups()
    e = _EXPERT.search("." + rest)
    key = rest if e is None else ("." + rest).replace(e.group(0), ".{e}.", 1)[1:]
    target = _BLOCK.get(key)
    if target is None:
        return None
    return f"blk.{layer}." + (target.format(e=e.group(1)) if e else target)


def rename(tensors, tied):
    """{GGUF name: TensorInfo} from {HF name: TensorInfo}; a tied model drops any stored lm_head."""
    out, unknown = {}, []
    for name, info in tensors.items():
        target = gguf_name(name)
        if target is None:
            unknown.append(name)
        elif target and not (tied and target == "output.weight"):
            out[target] = info
    if unknown:
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise UnknownTensor(f"tensors {', '.join(sorted(unknown)[:5])}{more} belong to no supported "
                            f"architecture (an unsupported variant?)")
    return out
