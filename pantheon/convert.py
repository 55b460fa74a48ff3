"""`pantheon-convert`: a PyTorch .pth/.pt checkpoint to a safetensors directory Pantheon loads.

The checkpoint is read with torch.load(weights_only=True): a pickle that needs code execution to
load is refused, never run. Its tensor names are HF names (with a config.json) or Meta's original
llama names (with a params.json); Meta's q/k rows are in rotary-interleaved order and are permuted
to HF's half-split order, the order Pantheon's HF loader expects.
"""

import argparse
import json
import os
import re
import shutil
import sys

from pantheon.engine.model_weights import bind_weights
from pantheon.errors import PantheonError, UsageError
from pantheon.hf.config import read_json
from pantheon.hf.names import gguf_name
from pantheon.source import open_files

TEXT_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja",
              "special_tokens_map.json")
DTYPES = ("auto", "f32", "f16", "bf16")
_META = {"tok_embeddings.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight",
         "output.weight": "lm_head.weight"}
_META_BLOCK = {"attention.wq.weight": "self_attn.q_proj.weight", "attention.wk.weight": "self_attn.k_proj.weight",
               "attention.wv.weight": "self_attn.v_proj.weight", "attention.wo.weight": "self_attn.o_proj.weight",
               "feed_forward.w1.weight": "mlp.gate_proj.weight", "feed_forward.w3.weight": "mlp.up_proj.weight",
               "feed_forward.w2.weight": "mlp.down_proj.weight", "attention_norm.weight": "input_layernorm.weight",
               "ffn_norm.weight": "post_attention_layernorm.weight"}
_META_LAYER = re.compile(r"layers\.([0-9]+)\.(.+)")


class ConvertError(PantheonError):
    """The checkpoint cannot be converted: unsafe pickle, not a state dict, or names no architecture has."""


def _torch():
    try:
        import torch
    except ImportError:
        raise ConvertError("pantheon-convert needs PyTorch: pip install '.[convert]' "
                           "(a CPU build: pip install torch --index-url https://download.pytorch.org/whl/cpu)") from None
    return torch


def load_state_dict(path):
    """{name: tensor} of a checkpoint, loaded with weights_only=True (no code runs)."""
    import pickle

    torch = _torch()
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=_is_zip(path))
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConvertError(f"{path}: refused: loading it would execute code from the pickle "
                           f"(only tensors and plain containers are accepted): {first}") from None
    except (RuntimeError, OSError, EOFError, ValueError) as e:
        raise ConvertError(f"{path}: not a PyTorch checkpoint: {e}") from None
    return _tensors(path, obj, torch)


def _is_zip(path):
    with open(path, "rb") as f:
        return f.read(4) == b"PK\x03\x04"


def _tensors(path, obj, torch):
    for key in ("state_dict", "model", "module"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
    if not isinstance(obj, dict) or not obj:
        raise ConvertError(f"{path}: holds a {type(obj).__name__}, not a state dict of tensors")
    bad = [k for k, v in obj.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)]
    if bad:
        raise ConvertError(f"{path}: entries {bad[:3]!r} are not named tensors")
    return obj


def half_split_rows(w, n_head):
    """Meta's interleaved rotary rows -> HF's half-split order, per head (HF's converter does the same)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def meta_to_hf(state, params):
    """(HF state dict, config.json object) from Meta llama names and params.json."""
    n_head = int(params["n_heads"])
    n_kv = int(params.get("n_kv_heads") or n_head)
    out = {}
    for name, t in state.items():
        if name in _META:
            out[_META[name]] = t
            continue
        m = _META_LAYER.fullmatch(name)
        if name.endswith("rope.freqs") or name.endswith("inner_attention.rope.freqs"):
            continue
        if m is None or m.group(2) not in _META_BLOCK:
            raise ConvertError(f"tensor {name!r} is not a Meta llama tensor (params.json given)")
        if m.group(2) == "attention.wq.weight":
            t = half_split_rows(t, n_head)
        elif m.group(2) == "attention.wk.weight":
            t = half_split_rows(t, n_kv)
        out[f"model.layers.{m.group(1)}.{_META_BLOCK[m.group(2)]}"] = t
    return out, _config_from_params(params, out)


def _config_from_params(params, state):
    if params.get("moe"):
        raise ConvertError("params.json describes a mixture of experts; convert it from its HF release instead")
    vocab, dim = state["model.embed_tokens.weight"].shape
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": int(params["dim"]),
            "num_hidden_layers": int(params["n_layers"]), "num_attention_heads": int(params["n_heads"]),
            "num_key_value_heads": int(params.get("n_kv_heads") or params["n_heads"]),
            "intermediate_size": int(state["model.layers.0.mlp.gate_proj.weight"].shape[0]),
            "rms_norm_eps": float(params.get("norm_eps", 1e-5)), "rope_theta": float(params.get("rope_theta", 10000.0)),
            "vocab_size": int(vocab), "max_position_embeddings": int(params.get("max_seq_len", 4096)),
            "tie_word_embeddings": "lm_head.weight" not in state}


def _cast(state, dtype, torch):
    want = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}.get(dtype)
    out = {}
    for name, t in state.items():
        if not t.is_floating_point():
            raise ConvertError(f"tensor {name!r} is {t.dtype}, not floating point")
        target = want or (t.dtype if t.dtype in (torch.float32, torch.float16, torch.bfloat16) else torch.float32)
        out[name] = t.to(target).contiguous()
    return out


def _shards(state, limit):
    """Names grouped into shards of at most `limit` bytes each (a tensor larger than that stands alone)."""
    groups, size = [[]], 0
    for name in sorted(state):
        n = state[name].numel() * state[name].element_size()
        if groups[-1] and size + n > limit:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += n
    return groups


def write_safetensors(state, out_dir, shard_bytes):
    """model.safetensors, or model-0000i-of-0000n.safetensors plus model.safetensors.index.json."""
    from safetensors.torch import save_file

    groups = _shards(state, shard_bytes)
    names = ["model.safetensors"] if len(groups) == 1 else \
        [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
    for group, file_name in zip(groups, names):
        save_file({n: state[n] for n in group}, os.path.join(out_dir, file_name), metadata={"format": "pt"})
    if len(groups) > 1:
        total = sum(t.numel() * t.element_size() for t in state.values())
        index = {"metadata": {"total_size": total},
                 "weight_map": {n: f for group, f in zip(groups, names) for n in group}}
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2)


def convert(checkpoint, out_dir, params=None, config=None, text_dir=None, dtype="auto", shard_bytes=4 << 30):
    """Write `checkpoint` as an HF directory at `out_dir` (which must not exist) and check that it binds."""

    if (params is None) == (config is None):
        raise UsageError("give exactly one of --params (Meta params.json) or --config (HF config.json)")
    if os.path.exists(out_dir):
        raise UsageError(f"--out {out_dir!r} exists; pantheon-convert writes a new directory")
    state = load_state_dict(checkpoint)
    if params is not None:
        state, hf_config = meta_to_hf(state, read_json(params, "params.json"))
    else:
        hf_config = read_json(config, "config.json")
        unknown = [n for n in state if gguf_name(n) is None]
        if unknown:
            raise ConvertError(f"tensors {unknown[:3]!r} have names no supported architecture uses")
    state = _cast(state, dtype, _torch())
    os.makedirs(out_dir)
    try:
        _write_dir(state, hf_config, out_dir, text_dir or os.path.dirname(os.path.abspath(checkpoint)), shard_bytes)
    except BaseException:
        shutil.rmtree(out_dir, ignore_errors=True)
        raise
    return out_dir


def _write_dir(state, hf_config, out_dir, text_dir, shard_bytes):

    write_safetensors(state, out_dir, shard_bytes)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config, f, indent=2)
    for name in TEXT_FILES:
        if os.path.isfile(os.path.join(text_dir, name)):
            shutil.copyfile(os.path.join(text_dir, name), os.path.join(out_dir, name))
    files, cfg = open_files(out_dir)
    bind_weights(files.tensors, cfg)  # every tensor the engine needs is there, with the right shape


def build_parser():
    p = argparse.ArgumentParser(prog="pantheon-convert",
                                description="Convert a PyTorch .pth/.pt checkpoint to a safetensors directory.")
    p.add_argument("checkpoint", help="the .pth / .pt / .bin state dict (loaded with weights_only=True)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory to create")
    p.add_argument("--params", metavar="PATH", help="Meta params.json (original llama checkpoints)")
    p.add_argument("--config", metavar="PATH", help="HF config.json (checkpoints with HF tensor names)")
    p.add_argument("--tokenizer-dir", metavar="DIR",
                   help="where tokenizer.json and friends are (default: the checkpoint's directory)")
    p.add_argument("--dtype", choices=DTYPES, default="auto", help="stored dtype (auto: keep F32/F16/BF16)")
    p.add_argument("--shard-size", type=float, default=4.0, metavar="GiB", help="largest shard (default 4)")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    if not args.params and not args.config:
        guess = os.path.join(os.path.dirname(os.path.abspath(args.checkpoint)), "params.json")
        args.params = guess if os.path.isfile(guess) else None
        cfg = os.path.join(os.path.dirname(os.path.abspath(args.checkpoint)), "config.json")
        args.config = cfg if args.params is None and os.path.isfile(cfg) else None
    if args.shard_size <= 0:
        print("pantheon-convert: --shard-size must be positive", file=sys.stderr)
        return 2
    try:
        out = convert(args.checkpoint, args.out, args.params, args.config, args.tokenizer_dir, args.dtype,
                      int(args.shard_size * (1 << 30)))
    except (PantheonError, OSError) as e:
        print(f"pantheon-convert: {e}", file=sys.stderr)
        return 1
    print(out)
    return 0
